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

/* Appends events in a canonical, merged form; checks call order. */
static void render(const struct toolcall_parser *p, int n, struct buf *out, int *open_call,
                   int *n_calls, size_t *content)
{
    for (int i = 0; i < n; i++) {
        const struct toolcall_ev *e = &p->ev[i];
        switch (e->kind) {
        case TOOLCALL_EV_CONTENT:
            if (*open_call >= 0) abort();
            *content += e->len;
            buf_putc(out, 'C');
            buf_append(out, e->text, e->len);
            buf_putc(out, 0); /* separator: merged later by the comparison */
            break;
        case TOOLCALL_EV_START:
            if (*open_call >= 0 || e->index != *n_calls || !e->id || !e->text[0]) abort();
            *open_call = e->index;
            (*n_calls)++;
            buf_printf(out, "S%d%s", e->index, e->text);
            buf_putc(out, 0);
            break;
        case TOOLCALL_EV_ARGS:
            if (e->index != *open_call) abort();
            buf_putc(out, 'A');
            buf_append(out, e->text, e->len);
            buf_putc(out, 0);
            break;
        case TOOLCALL_EV_END:
            if (e->index != *open_call) abort();
            *open_call = -1;
            buf_printf(out, "E%d", e->index);
            buf_putc(out, 0);
            break;
        }
    }
}

/* Joins adjacent pieces of the same kind (C with C, A with A). */
static void merge(const struct buf *in, struct buf *out)
{
    char last = 0;
    for (size_t i = 0; i < in->len;) {
        size_t n = strlen(in->data + i);
        char kind = in->data[i];
        if ((kind == 'C' || kind == 'A') && kind == last) {
            buf_append(out, in->data + i + 1, n - 1);
        } else {
            buf_putc(out, '|');
            buf_append(out, in->data + i, n);
        }
        last = kind;
        i += n + 1;
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
