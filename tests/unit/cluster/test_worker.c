/*
 * test_worker.c - `inferd worker` as a separate process on loopback, driven
 * over the cluster protocol: HELLO gives the engine's fingerprint; greedy
 * and seeded requests, run at once, give bitwise the tokens and logprobs of
 * the same requests on an engine in this process; CANCEL ends a request;
 * a bad frame closes only its own connection (with an ERROR saying why); a
 * peer that leaves mid-request leaves the worker serving; SIGTERM stops it.
 * Every wait is bounded; the worker is killed on every way out.
 */
#include "test.h"

#include "base/buf.h"
#include "base/check.h"
#include "cluster/proto.h"
#include "node/runner.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

static char model_path[256], port_path[256];
static pid_t worker = -1;
static int port;

static void kill_worker(void)
{
    if (worker > 0) {
        kill(worker, SIGKILL);
        waitpid(worker, NULL, 0);
        worker = -1;
    }
    unlink(model_path);
    unlink(port_path);
}

static void start_worker(void)
{
    const char *bin = getenv("INFERD_BIN");
    if (!bin) {
        fprintf(stderr, "INFERD_BIN is not set (run through ctest)\n");
        exit(1);
    }
    snprintf(model_path, sizeof(model_path), "/tmp/inferd-test-worker-%d.gguf", (int)getpid());
    snprintf(port_path, sizeof(port_path), "/tmp/inferd-test-worker-%d.port", (int)getpid());
    char cmd[1024];
    snprintf(cmd, sizeof(cmd),
             "'%s' model make --preset tiny --arch qwen2 --type q8_0 --layers 2 -o '%s' >/dev/null",
             bin, model_path);
    CHECK(system(cmd) == 0);
    atexit(kill_worker);
    worker = fork();
    CHECK(worker >= 0);
    if (worker == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL); /* gone with this test, however it ends */
        execl(bin, bin, "worker", "-m", model_path, "--listen", "127.0.0.1:0", "--port-file",
              port_path, "--threads", "1", "--ctx", "256", "--name", "w-test", (char *)NULL);
        _exit(127);
    }
    for (int i = 0; i < 600 && !port; i++) {
        FILE *f = fopen(port_path, "r");
        if (f) {
            if (fscanf(f, "%d", &port) != 1) port = 0;
            fclose(f);
        }
        if (!port) usleep(50000);
    }
    CHECK(port > 0);
}

static int dial(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    CHECK(connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0);
    struct timeval tv = {30, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    return fd;
}

static void send_frame(int fd, const struct cl_msg *m)
{
    struct buf b = {0};
    struct err_msg e = {{0}};
    CHECK(cl_encode(m, &b, &e) == 0);
    CHECK(write(fd, b.data, b.len) == (ssize_t)b.len);
    buf_release(&b);
}

/* Reads one frame into *m (bytes kept in *b); false on EOF or timeout. */
static bool read_frame(int fd, struct buf *b, struct cl_msg *m)
{
    buf_clear(b);
    size_t want = CL_HEADER;
    for (;;) {
        struct err_msg e = {{0}};
        size_t flen = 0;
        if (b->len >= CL_HEADER) {
            int rc = cl_frame_peek((const uint8_t *)b->data, b->len, &flen, &e);
            CHECK(rc >= 0);
            if (rc == 1) {
                CHECK(cl_decode((const uint8_t *)b->data, flen, m, &e) == 0);
                return true;
            }
            want = flen;
        }
        buf_reserve(b, want - b->len);
        ssize_t n = read(fd, b->data + b->len, want - b->len);
        if (n <= 0) return false;
        b->len += (size_t)n;
    }
}

/* The next frame that is not STATS or KV_EVENTS (news of the worker, not
 * of a request). */
static bool next_frame(int fd, struct buf *b, struct cl_msg *m)
{
    while (read_frame(fd, b, m)) {
        if (m->type != CL_STATS && m->type != CL_KV_EVENTS) return true;
        cl_msg_free(m);
    }
    return false;
}

static void hello(int fd, struct cl_hello *got)
{
    struct cl_msg m = {.type = CL_HELLO};
    m.u.hello.role = CL_ROLE_GATEWAY;
    snprintf(m.u.hello.name, sizeof(m.u.hello.name), "test-gateway");
    send_frame(fd, &m);
    struct buf b = {0};
    struct cl_msg r;
    CHECK(next_frame(fd, &b, &r) && r.type == CL_HELLO);
    *got = r.u.hello;
    buf_release(&b);
}

/* Reads frames for ms milliseconds, counting request id's tokens into *n
 * and its finish into *fin (STATS and others pass). */
static void tokens_for(int fd, struct buf *b, uint64_t id, int ms, int *n, int *fin)
{
    struct timeval t0, now;
    gettimeofday(&t0, NULL);
    for (;;) {
        gettimeofday(&now, NULL);
        int left = ms - (int)((now.tv_sec - t0.tv_sec) * 1000 + (now.tv_usec - t0.tv_usec) / 1000);
        if (left <= 0) return;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, left) <= 0) return;
        struct cl_msg m;
        CHECK(read_frame(fd, b, &m)); /* a frame is written whole: it is all there soon */
        if (m.type == CL_TOKEN && m.u.token.request == id) {
            *n += m.u.token.token >= 0;
            if (m.u.token.finish) *fin = m.u.token.finish;
        }
        cl_msg_free(&m);
    }
}

struct run {
    int n;
    int32_t tok[64];
    float lp[64];
    int32_t top[64][3];
    int finish;
};

static int32_t prompt[] = {5, 9, 14, 2, 77, 31, 8, 100, 3, 42};

static void fill_submit(struct cl_msg *m, uint64_t id, bool sampled, int max_tokens)
{
    *m = (struct cl_msg){.type = CL_SUBMIT};
    struct cl_submit *s = &m->u.submit;
    s->request = id;
    s->max_tokens = (uint32_t)max_tokens;
    s->flags = CL_SUBMIT_IGNORE_EOS | CL_SUBMIT_LOGPROBS;
    s->n_logprobs = 3;
    s->temperature = sampled ? 0.9f : 0;
    s->top_p = sampled ? 0.95f : 1;
    s->top_k = sampled ? 50 : 0;
    s->repetition_penalty = sampled ? 1.1f : 1;
    s->presence_penalty = sampled ? 0.3f : 0;
    s->seed = 1234;
    s->n_prompt = ARRAY_LEN(prompt);
    s->prompt = prompt;
}

/* The same requests on an engine in this process, through the runner. */
static void reference(struct run *greedy, struct run *sampled, int max_tokens,
                      uint8_t fingerprint[16])
{
    inferd_model *mdl;
    char err[256];
    CHECK(inferd_model_load(model_path, &mdl, err, sizeof(err)) == 0);
    struct inferd_engine_config cfg;
    inferd_engine_config_default(&cfg);
    cfg.n_threads = 1;
    cfg.max_ctx = 256;
    inferd_engine *e;
    CHECK(inferd_engine_new(mdl, &cfg, &e, err, sizeof(err)) == 0);
    inferd_engine_fingerprint(e, fingerprint);
    struct runner r;
    CHECK(runner_start(&r, e, NULL) == 0);
    for (int k = 0; k < 2; k++) {
        struct cl_msg m;
        fill_submit(&m, 1, k == 1, max_tokens);
        const struct cl_submit *s = &m.u.submit;
        struct inferd_request q = {.prompt = prompt,
                                   .n_prompt = (int)s->n_prompt,
                                   .max_tokens = max_tokens,
                                   .ignore_eos = true};
        inferd_sampling_default(&q.sampling);
        q.sampling.temperature = s->temperature;
        q.sampling.top_p = s->top_p;
        q.sampling.top_k = s->top_k;
        q.sampling.repetition_penalty = s->repetition_penalty;
        q.sampling.presence_penalty = s->presence_penalty;
        q.sampling.seed = s->seed;
        q.sampling.logprobs = true;
        q.sampling.n_logprobs = 3;
        runner_submit(&r, (uint64_t)(k + 1), &q);
    }
    struct runner_msg *msgs = NULL;
    size_t cap = 0;
    int finals = 0;
    for (int spins = 0; spins < 3000 && finals < 2; spins++) {
        struct pollfd p = {.fd = r.wake_fd, .events = POLLIN};
        poll(&p, 1, 10);
        size_t n = runner_drain(&r, &msgs, &cap);
        for (size_t i = 0; i < n; i++) {
            struct run *x = msgs[i].tag == 1 ? greedy : sampled;
            const struct inferd_event *ev = &msgs[i].ev;
            CHECK(msgs[i].rc == 0);
            if (ev->token >= 0 && x->n < 64) {
                x->tok[x->n] = ev->token;
                x->lp[x->n] = ev->logprob;
                for (int t = 0; t < 3; t++)
                    x->top[x->n][t] = ev->top[t].token;
                x->n++;
            }
            if (ev->finish != INFERD_FINISH_NONE) {
                x->finish = ev->finish;
                finals++;
            }
        }
    }
    free(msgs);
    runner_stop(&r);
    inferd_engine_free(e);
    inferd_model_free(mdl);
}

TEST(worker_serves_the_protocol)
{
    start_worker();
    enum { MAX = 40 };
    struct run ref_g = {0}, ref_s = {0};
    uint8_t fp[16];
    reference(&ref_g, &ref_s, MAX, fp);
    EXPECT_EQ_INT(ref_g.n, MAX);

    int fd = dial();
    struct cl_hello h;
    hello(fd, &h);
    EXPECT_EQ_INT(h.role, CL_ROLE_MIXED);
    EXPECT(strcmp(h.name, "w-test") == 0);
    EXPECT(memcmp(h.fingerprint, fp, 16) == 0);
    EXPECT(h.block_tokens > 0 && h.frame_bytes > 0);

    /* greedy (id 11) and seeded (id 12) at once */
    struct cl_msg m;
    fill_submit(&m, 11, false, MAX);
    send_frame(fd, &m);
    fill_submit(&m, 12, true, MAX);
    send_frame(fd, &m);
    struct run got_g = {0}, got_s = {0};
    struct buf b = {0};
    struct cl_msg r;
    int finals = 0;
    while (finals < 2 && next_frame(fd, &b, &r)) {
        CHECK(r.type == CL_TOKEN);
        struct run *x = r.u.token.request == 11 ? &got_g : &got_s;
        if (r.u.token.token >= 0) {
            EXPECT_EQ_INT(r.u.token.index, x->n);
            x->tok[x->n] = r.u.token.token;
            x->lp[x->n] = r.u.token.logprob;
            EXPECT_EQ_INT(r.u.token.n_top, 3);
            for (int t = 0; t < 3; t++)
                x->top[x->n][t] = r.u.token.top_token[t];
            x->n++;
        }
        if (r.u.token.finish) {
            x->finish = r.u.token.finish;
            EXPECT_EQ_INT(r.u.token.n_prompt, ARRAY_LEN(prompt));
            EXPECT_EQ_INT(r.u.token.n_generated, MAX);
            finals++;
        }
        cl_msg_free(&r);
    }
    EXPECT_EQ_INT(finals, 2);
    EXPECT_EQ_INT(got_g.n, MAX);
    EXPECT_EQ_INT(got_s.n, MAX);
    EXPECT_EQ_INT(got_g.finish, INFERD_FINISH_LENGTH);
    EXPECT(memcmp(got_g.tok, ref_g.tok, sizeof(ref_g.tok)) == 0);
    EXPECT(memcmp(got_g.lp, ref_g.lp, sizeof(ref_g.lp)) == 0); /* bitwise */
    EXPECT(memcmp(got_g.top, ref_g.top, sizeof(ref_g.top)) == 0);
    EXPECT(memcmp(got_s.tok, ref_s.tok, sizeof(ref_s.tok)) == 0);
    EXPECT(memcmp(got_s.lp, ref_s.lp, sizeof(ref_s.lp)) == 0);
    EXPECT(memcmp(got_g.tok, got_s.tok, sizeof(got_g.tok)) != 0); /* sampling did something */

    /* CANCEL: a long request ends early, CANCELLED */
    fill_submit(&m, 13, false, 200);
    send_frame(fd, &m);
    CHECK(next_frame(fd, &b, &r) && r.type == CL_TOKEN && r.u.token.request == 13);
    cl_msg_free(&r);
    send_frame(fd, &(struct cl_msg){.type = CL_CANCEL, .u.request = 13});
    int last = 0, n13 = 1;
    while (next_frame(fd, &b, &r)) {
        n13 += r.u.token.token >= 0;
        last = r.u.token.finish;
        cl_msg_free(&r);
        if (last) break;
    }
    EXPECT_EQ_INT(last, INFERD_FINISH_CANCELLED);
    EXPECT(n13 < 200);

    /* PAUSE holds a request's steps (no TOKEN while paused), resuming ends
     * it whole */
    fill_submit(&m, 16, false, 120);
    send_frame(fd, &m);
    CHECK(next_frame(fd, &b, &r) && r.type == CL_TOKEN && r.u.token.request == 16);
    cl_msg_free(&r);
    send_frame(fd, &(struct cl_msg){.type = CL_PAUSE, .u.pause = {16, 1}});
    int n16 = 1, fin16 = 0;
    /* what was in flight comes within 300 ms; then nothing for 400 ms */
    tokens_for(fd, &b, 16, 300, &n16, &fin16);
    int paused_at = n16;
    tokens_for(fd, &b, 16, 400, &n16, &fin16);
    EXPECT_EQ_INT(n16, paused_at);
    EXPECT_EQ_INT(fin16, 0);
    EXPECT(paused_at < 120);
    send_frame(fd, &(struct cl_msg){.type = CL_PAUSE, .u.pause = {16, 0}});
    while (!fin16 && next_frame(fd, &b, &r)) {
        n16 += r.u.token.token >= 0;
        fin16 = r.u.token.finish;
        cl_msg_free(&r);
    }
    EXPECT_EQ_INT(fin16, INFERD_FINISH_LENGTH);
    EXPECT_EQ_INT(n16, 120);

    /* a request the engine refuses is an ERROR for that id only */
    fill_submit(&m, 14, false, 10);
    int32_t big[] = {1 << 30};
    m.u.submit.prompt = big;
    m.u.submit.n_prompt = 1;
    send_frame(fd, &m);
    CHECK(next_frame(fd, &b, &r));
    EXPECT(r.type == CL_ERROR && r.u.error.request == 14 && r.u.error.code == ERR_INVALID);
    cl_msg_free(&r);

    /* a second connection that sends garbage hears why and is closed */
    int bad = dial();
    const char junk[] = "GET / HTTP/1.1\r\n\r\n";
    CHECK(write(bad, junk, sizeof(junk) - 1) == (ssize_t)(sizeof(junk) - 1));
    struct buf bb = {0};
    CHECK(read_frame(bad, &bb, &r));
    EXPECT(r.type == CL_ERROR && r.u.error.code == ERR_PROTOCOL &&
           strstr(r.u.error.message, "magic") != NULL);
    EXPECT(!read_frame(bad, &bb, &r)); /* then EOF */
    close(bad);
    /* one that speaks before HELLO, likewise */
    bad = dial();
    send_frame(bad, &(struct cl_msg){.type = CL_PING, .u.nonce = 1});
    CHECK(read_frame(bad, &bb, &r));
    EXPECT(r.type == CL_ERROR && strstr(r.u.error.message, "before HELLO") != NULL);
    close(bad);
    /* one that leaves mid-request */
    bad = dial();
    struct cl_hello h2;
    hello(bad, &h2);
    fill_submit(&m, 1, false, 200);
    send_frame(bad, &m);
    close(bad);
    buf_release(&bb);

    /* the first connection still works */
    send_frame(fd, &(struct cl_msg){.type = CL_PING, .u.nonce = 99});
    CHECK(next_frame(fd, &b, &r));
    EXPECT(r.type == CL_PONG && r.u.nonce == 99);
    fill_submit(&m, 15, false, 5);
    send_frame(fd, &m);
    int n15 = 0;
    while (next_frame(fd, &b, &r)) {
        n15 += r.u.token.token >= 0;
        int fin = r.u.token.finish;
        cl_msg_free(&r);
        if (fin) break;
    }
    EXPECT_EQ_INT(n15, 5);
    /* and STATS come on their own */
    bool stats = false;
    for (int i = 0; i < 20 && !stats; i++) {
        CHECK(read_frame(fd, &b, &r));
        stats = r.type == CL_STATS && r.u.stats.kv_blocks_total > 0;
        cl_msg_free(&r);
    }
    EXPECT(stats);
    close(fd);

    /* a gateway connecting now is told what the pool holds: stored events
     * numbered from 1, one per block (the requests above filled some) */
    fd = dial();
    hello(fd, &h);
    uint64_t next = 1;
    int n_ev = 0, off = 0;
    for (int i = 0; i < 20; i++) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 300) <= 0) break;
        CHECK(read_frame(fd, &b, &r));
        if (r.type == CL_KV_EVENTS) {
            off += r.u.kv_events.seq != next;
            for (uint32_t k = 0; k < r.u.kv_events.n; k++) {
                int kind, tier;
                uint8_t id[16];
                cl_kv_event_at(&r.u.kv_events, k, &kind, &tier, id);
                off += kind != 1 || tier != 0;
            }
            next += r.u.kv_events.n;
            n_ev += (int)r.u.kv_events.n;
        }
        cl_msg_free(&r);
    }
    EXPECT(n_ev >= 3);
    EXPECT_EQ_INT(off, 0);
    close(fd);
    buf_release(&b);

    /* SIGTERM: a clean exit */
    kill(worker, SIGTERM);
    int status = -1;
    for (int i = 0; i < 200; i++) {
        if (waitpid(worker, &status, WNOHANG) == worker) {
            worker = -1;
            break;
        }
        usleep(50000);
    }
    EXPECT_EQ_INT(worker, -1);
    EXPECT(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

TEST_MAIN()
