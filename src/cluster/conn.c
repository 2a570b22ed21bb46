/*
 * conn.c - frames off a libevent buffer (conn.h).
 */
#include "cluster/conn.h"

#include "base/check.h"

int cl_evbuffer_next(struct evbuffer *in, struct cl_msg *m, size_t *len, struct err_msg *msg)
{
    size_t have = evbuffer_get_length(in), flen = 0;
    if (!have) return 0;
    size_t look = MIN(have, (size_t)CL_HEADER);
    const uint8_t *p = evbuffer_pullup(in, (ev_ssize_t)look);
    int rc = cl_frame_peek(p, look, &flen, msg);
    if (rc < 0) return rc;
    if (!flen || have < flen) return 0; /* the rest has not come yet */
    p = evbuffer_pullup(in, (ev_ssize_t)flen);
    if ((rc = cl_decode(p, flen, m, msg))) return rc;
    *len = flen;
    return 1;
}
