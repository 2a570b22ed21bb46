/*
 * conn.h - reading cluster protocol frames off a libevent buffer, the one
 * loop a worker's and a gateway's connections share.
 */
#ifndef INFERD_CLUSTER_CONN_H
#define INFERD_CLUSTER_CONN_H

#include "cluster/proto.h"

#include <event2/buffer.h>
#include <netinet/in.h>
#include <stdbool.h>

/* Decodes the next whole frame at the front of in: 1 with *m (cl_msg_free
 * it) and *len, the bytes the caller drains once done with m (a KV_BLOCK
 * points into them); 0 when the frame has not all come; or ERR_PROTOCOL
 * with a message (the connection must close). */
int cl_evbuffer_next(struct evbuffer *in, struct cl_msg *m, size_t *len, struct err_msg *msg);

/* Parses s[0..len) as an IPv4 "HOST:PORT" (port 1-65535) into *sa; false
 * if it is not one. */
bool cl_parse_addr(const char *s, size_t len, struct sockaddr_in *sa);

/* Appends a KV_BLOCK frame for request's block index whose frame is
 * frame[0..len) to out without copying the frame: the header goes in, the
 * frame is added by reference and free()d once written (or when out is
 * freed). Returns 0, or ERR_INVALID when len does not fit a frame (the
 * frame is then freed). */
int cl_evbuffer_add_kv_block(struct evbuffer *out, uint64_t request, uint32_t index, uint8_t *frame,
                             size_t len);

#endif
