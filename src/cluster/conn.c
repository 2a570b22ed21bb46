/*
 * conn.c - frames off a libevent buffer (conn.h).
 */
#include "cluster/conn.h"

#include "base/check.h"

#include <arpa/inet.h>
#include <stdlib.h>
#include <string.h>

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

bool cl_parse_addr(const char *s, size_t len, struct sockaddr_in *sa)
{
    char one[80];
    if (!len || len >= sizeof(one)) return false;
    memcpy(one, s, len);
    one[len] = 0;
    char *colon = strrchr(one, ':'), *end = NULL;
    if (!colon || !colon[1]) return false;
    long port = strtol(colon + 1, &end, 10);
    *colon = 0;
    if (*end || port < 1 || port > 65535) return false;
    *sa = (struct sockaddr_in){.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    return inet_pton(AF_INET, one, &sa->sin_addr) == 1;
}

static void free_frame(const void *data, size_t len, void *arg)
{
    (void)len;
    (void)arg;
    free((void *)data);
}

int cl_evbuffer_add_kv_block(struct evbuffer *out, uint64_t request, uint32_t index, uint8_t *frame,
                             size_t len)
{
    if (len > CL_MAX_PAYLOAD - 12) {
        free(frame);
        return ERR_INVALID;
    }
    uint8_t head[CL_HEADER + 12] = {'I', 'F', 'C', 'P', CL_PROTO_VERSION, CL_KV_BLOCK};
    uint32_t payload = (uint32_t)(12 + len);
    for (int i = 0; i < 4; i++)
        head[8 + i] = (uint8_t)(payload >> (8 * i));
    for (int i = 0; i < 8; i++)
        head[CL_HEADER + i] = (uint8_t)(request >> (8 * i));
    for (int i = 0; i < 4; i++)
        head[CL_HEADER + 8 + i] = (uint8_t)(index >> (8 * i));
    evbuffer_add(out, head, sizeof(head));
    evbuffer_add_reference(out, frame, len, free_frame, NULL);
    return 0;
}
