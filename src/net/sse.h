/*
 * sse.h - server-sent events framing (the text/event-stream format of the
 * WHATWG HTML standard, section "Server-sent events").
 *
 * One event is an optional "event: NAME" line, one "data: ..." line per line
 * of the payload (a payload line break becomes a new data line, which the
 * client joins back with "\n"), and a blank line. OpenAI streams omit the
 * event name and end with "data: [DONE]"; Anthropic and Responses streams
 * name every event.
 *
 * Pure formatting into a struct buf; no I/O, any thread.
 */
#ifndef INFERD_NET_SSE_H
#define INFERD_NET_SSE_H

#include "base/buf.h"

#include <stddef.h>

/* Appends one event. name may be NULL. */
void sse_event(struct buf *out, const char *name, const char *data, size_t len);

#endif
