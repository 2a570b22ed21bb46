/*
 * sse.c - server-sent events framing (see sse.h).
 *
 * "\r\n", "\r" and "\n" all end a line in the format, so each of them in the
 * payload starts a new data line; a payload never produces an unintended
 * blank line (which would end the event early).
 */
#include "net/sse.h"

void sse_event(struct buf *out, const char *name, const char *data, size_t len)
{
    if (name) {
        buf_puts(out, "event: ");
        buf_puts(out, name);
        buf_putc(out, '\n');
    }
    buf_puts(out, "data: ");
    for (size_t i = 0; i < len; i++) {
        char c = data[i];
        if (c == '\r' || c == '\n') {
            if (c == '\r' && i + 1 < len && data[i + 1] == '\n') i++;
            buf_puts(out, "\ndata: ");
        } else {
            buf_putc(out, c);
        }
    }
    buf_puts(out, "\n\n");
}
