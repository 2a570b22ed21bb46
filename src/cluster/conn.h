/*
 * conn.h - reading cluster protocol frames off a libevent buffer, the one
 * loop a worker's and a gateway's connections share.
 */
#ifndef INFERD_CLUSTER_CONN_H
#define INFERD_CLUSTER_CONN_H

#include "cluster/proto.h"

#include <event2/buffer.h>

/* Decodes the next whole frame at the front of in: 1 with *m (cl_msg_free
 * it) and *len, the bytes the caller drains once done with m (a KV_BLOCK
 * points into them); 0 when the frame has not all come; or ERR_PROTOCOL
 * with a message (the connection must close). */
int cl_evbuffer_next(struct evbuffer *in, struct cl_msg *m, size_t *len, struct err_msg *msg);

#endif
