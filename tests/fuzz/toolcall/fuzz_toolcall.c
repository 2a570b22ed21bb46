/*
 * fuzz_toolcall.c - fuzz target for the streaming tool-call parser: any
 * generated text, cut anywhere, yields events that never crash and never
 * depend on the cuts (merged events of the whole text and of the pieces are
 * equal), calls are numbered in order with START before its ARGS and END,
 * and no more content comes out than went in.
 *
 * Input: byte 0 picks the family, byte 1 seeds the piece lengths, the rest
 * is the text.
 */
#include "api/toolcall.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char *names[] = {"get_weather", "search", "noop"};

/* One record: kind, length, bytes (text may hold NUL bytes). */
static void record(struct buf *out, char kind, const char *s, size_t n)
{
    buf_putc(out, kind);
    buf_append(out, &n, sizeof(n));
    buf_append(out, s, n);
}

/* Appends the events as records; checks call order. */
static void render(const struct toolcall_parser *p, int n, struct buf *out, int *open_call,
                   int *n_calls, size_t *content)
{
    for (int i = 0; i < n; i++) {
        const struct toolcall_ev *e = &p->ev[i];
        switch (e->kind) {
        case TOOLCALL_EV_CONTENT:
            if (*open_call >= 0) abort();
            *content += e->len;
            record(out, 'C', e->text, e->len);
            break;
        case TOOLCALL_EV_START:
            if (*open_call >= 0 || e->index != *n_calls || !e->id || !e->text[0]) abort();
            *open_call = e->index;
            (*n_calls)++;
            record(out, 'S', e->text, e->len);
            break;
        case TOOLCALL_EV_ARGS:
            if (e->index != *open_call) abort();
            record(out, 'A', e->text, e->len);
            break;
        case TOOLCALL_EV_END:
            if (e->index != *open_call) abort();
            *open_call = -1;
            record(out, 'E', "", 0);
            break;
        }
    }
}

/* Joins adjacent records of the same kind (C with C, A with A). */
static void merge(const struct buf *in, struct buf *out)
{
    char last = 0;
    for (size_t i = 0; i < in->len;) {
        char kind = in->data[i];
        size_t n;
        memcpy(&n, in->data + i + 1, sizeof(n));
        const char *s = in->data + i + 1 + sizeof(n);
        if (!((kind == 'C' || kind == 'A') && kind == last)) buf_putc(out, kind);
        buf_append(out, s, n);
        last = kind;
        i += 1 + sizeof(n) + n;
    }
}

static void run(enum toolcall_family f, const char *text, size_t len, unsigned seed,
                struct buf *out)
{
    struct toolcall_parser p;
    struct buf raw = {0};
    int open_call = -1, n_calls = 0;
    size_t content = 0;
    toolcall_init(&p, f, names, 3, "call_", 1);
    for (size_t at = 0; at < len;) {
        size_t k = seed ? 1 + (seed = seed * 1103515245u + 12345u) % 7 : len;
        if (k > len - at) k = len - at;
        render(&p, toolcall_feed(&p, text + at, k), &raw, &open_call, &n_calls, &content);
        at += k;
    }
    render(&p, toolcall_finish(&p), &raw, &open_call, &n_calls, &content);
    if (open_call >= 0 || content > len) abort();
    toolcall_release(&p);
    merge(&raw, out);
    buf_release(&raw);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2) return 0;
    enum toolcall_family f = (enum toolcall_family)(1 + data[0] % 4);
    const char *text = (const char *)data + 2;
    size_t len = size - 2;
    struct buf whole = {0}, cut = {0};
    run(f, text, len, 0, &whole);
    run(f, text, len, data[1] | 1u, &cut);
    if (whole.len != cut.len || memcmp(whole.data, cut.data, whole.len)) abort();
    buf_release(&whole);
    buf_release(&cut);
    return 0;
}
