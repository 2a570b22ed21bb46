/*
 * stopstr.h - stop strings held back across chunk boundaries.
 *
 * Generated text arrives a piece at a time (one detokenized token). A stop
 * string may straddle pieces, so text that could still be the start of a
 * stop string is held back until the next piece decides it: the client never
 * sees any part of a stop string, and never sees text after one.
 *
 * stopstr_feed appends the text that is now safe to out; when a stop string
 * is complete it appends the text before it, returns its index, and the
 * stream is over (later feeds are ignored). At the end of generation,
 * stopstr_flush releases what is still held back.
 *
 * Invariant: pending holds at most (longest stop - 1) bytes after a feed that
 * found no match, and every byte goes to out exactly once unless it belongs
 * to or follows a matched stop string. Because stop strings are valid UTF-8
 * and start on a character boundary, the held-back split never cuts a
 * character of valid input.
 *
 * Thread: one owner (the request's event-loop thread).
 */
#ifndef INFERD_API_STOPSTR_H
#define INFERD_API_STOPSTR_H

#include "base/buf.h"

#include <stdbool.h>
#include <stddef.h>

struct stopstr {
    char *const *stops; /* (n) stop strings, borrowed, non-empty */
    int n;              /* entries of stops; 0 = pass-through */
    struct buf pending; /* text not yet released */
    bool matched;       /* a stop string was found: the stream is over */
};

void stopstr_init(struct stopstr *s, char *const *stops, int n);
void stopstr_release(struct stopstr *s);
/* Returns the index of the stop string that ended the text, or -1. */
int stopstr_feed(struct stopstr *s, const char *text, size_t len, struct buf *out);
void stopstr_flush(struct stopstr *s, struct buf *out);

#endif
