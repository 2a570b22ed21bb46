/*
 * decode.c - token ids back to text, whole or streamed.
 *
 * Decoding is one rule for every model kind:
 *
 *   text = lossy_utf8( strip1( concat( bytes(id) for id not skipped ) ) )
 *
 * bytes(id) is precomputed at load (internal.h). strip1 drops the first
 * byte of the whole output when it is a space and the model prepends one
 * when encoding (SentencePiece add_space_prefix: Hugging Face's Strip
 * decoder, llama.cpp's leading-space rule). lossy_utf8 replaces each
 * maximal invalid subpart by U+FFFD, the Unicode / WHATWG rule that both
 * Rust's from_utf8_lossy and JavaScript's TextDecoder follow; so a run of
 * <0xXX> byte tokens that spells a character decodes to it, and a broken
 * run to replacement characters.
 *
 * The stream keeps the bytes that cannot be decided yet (the start of a
 * character whose continuation may still come) and emits everything before
 * them. Because every step is a function of the concatenated bytes, the
 * pieces it returns concatenate to exactly what tokenizer_decode gives for
 * the whole sequence.
 */
#include "model/tokenizer/internal.h"

#include "base/check.h"

#include <string.h>

static const char replacement[] = "\xef\xbf\xbd";

/* Classifies the sequence at s[0..n) (n > 0):
 *   > 0  a valid character of that many bytes
 *   < 0  an invalid maximal subpart of -r bytes (one U+FFFD)
 *   0    a valid but incomplete prefix reaching the end of s */
static long utf8_step(const unsigned char *s, size_t n)
{
    unsigned c = s[0];
    if (c < 0x80) return 1;
    size_t len;
    unsigned lo = 0x80, hi = 0xbf; /* allowed range of the second byte */
    if (c >= 0xc2 && c <= 0xdf) {
        len = 2;
    } else if (c >= 0xe0 && c <= 0xef) {
        len = 3;
        if (c == 0xe0) lo = 0xa0;
        if (c == 0xed) hi = 0x9f;
    } else if (c >= 0xf0 && c <= 0xf4) {
        len = 4;
        if (c == 0xf0) lo = 0x90;
        if (c == 0xf4) hi = 0x8f;
    } else {
        return -1;
    }
    for (size_t i = 1; i < len; i++) {
        if (i >= n) return 0;
        unsigned b = s[i];
        bool ok = i == 1 ? b >= lo && b <= hi : (b & 0xc0) == 0x80;
        if (!ok) return -(long)i;
    }
    return (long)len;
}

/* Appends the lossy decoding of s[0..n) to out. When hold is set, an
 * incomplete character at the end is not emitted; returns the bytes
 * consumed. */
static size_t put_lossy(const char *s, size_t n, bool hold, struct buf *out)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0, run = 0; /* run: start of the pending valid stretch */
    while (i < n) {
        if (u[i] < 0x80) {
            i++;
            continue;
        }
        long r = utf8_step(u + i, n - i);
        if (r > 0) {
            i += (size_t)r;
            continue;
        }
        buf_append(out, s + run, i - run);
        if (r == 0) {
            if (hold) return i;
            buf_append(out, replacement, 3);
            return n;
        }
        buf_append(out, replacement, 3);
        i += (size_t)-r;
        run = i;
    }
    buf_append(out, s + run, i - run);
    return n;
}

static bool skipped(const struct tokenizer *t, int32_t id, bool skip_special)
{
    return skip_special && (t->attr[id] & TOKENIZER_ATTR_SPECIAL);
}

int tokenizer_decode(const struct tokenizer *t, const int32_t *ids, size_t n, bool skip_special,
                     struct buf *out, struct err_msg *msg)
{
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= t->n_vocab)
            return err_set(msg, ERR_INVALID, "token %zu: id %d is outside the vocabulary (0..%d)",
                           i, ids[i], t->n_vocab - 1);
    /* strip1 applies to the first byte of the whole output, whichever token
     * carries it. */
    struct buf raw = {0};
    bool first = true;
    for (size_t i = 0; i < n; i++) {
        if (skipped(t, ids[i], skip_special)) continue;
        uint32_t a = t->bytes_off[ids[i]], b = t->bytes_off[ids[i] + 1];
        if (b == a) continue;
        const char *p = t->bytes_blob + a;
        size_t len = b - a;
        if (first && t->add_space_prefix && p[0] == ' ') p++, len--;
        first = false;
        buf_append(&raw, p, len);
    }
    put_lossy(raw.data ? raw.data : "", raw.len, false, out);
    buf_release(&raw);
    return 0;
}

void tokenizer_stream_init(struct tokenizer_stream *s, bool skip_special)
{
    memset(s, 0, sizeof(*s));
    s->skip_special = skip_special;
}

void tokenizer_stream_release(struct tokenizer_stream *s)
{
    i32vec_release(&s->ids);
    buf_release(&s->scratch);
    memset(s, 0, sizeof(*s));
}

int tokenizer_stream_push(const struct tokenizer *t, struct tokenizer_stream *s, int32_t id,
                          struct buf *out, struct err_msg *msg)
{
    if (id < 0 || id >= t->n_vocab)
        return err_set(msg, ERR_INVALID, "token %zu: id %d is outside the vocabulary (0..%d)",
                       s->ids.n, id, t->n_vocab - 1);
    i32vec_push(&s->ids, id);
    if (skipped(t, id, s->skip_special)) return 0;
    uint32_t a = t->bytes_off[id], b = t->bytes_off[id + 1];
    if (b == a) return 0;
    const char *p = t->bytes_blob + a;
    size_t len = b - a;
    if (!s->started && t->add_space_prefix && p[0] == ' ') p++, len--;
    s->started = true;
    buf_append(&s->scratch, p, len);
    size_t before = out->len;
    size_t used = put_lossy(s->scratch.data, s->scratch.len, true, out);
    s->n_emitted += out->len - before;
    memmove(s->scratch.data, s->scratch.data + used, s->scratch.len - used);
    s->scratch.len -= used;
    s->scratch.data[s->scratch.len] = 0;
    return 0;
}

void tokenizer_stream_flush(const struct tokenizer *t, struct tokenizer_stream *s, struct buf *out)
{
    (void)t;
    size_t before = out->len;
    put_lossy(s->scratch.data ? s->scratch.data : "", s->scratch.len, false, out);
    s->n_emitted += out->len - before;
    buf_clear(&s->scratch);
}
