/*
 * members.h - cluster membership in Redis: workers announce themselves
 * under keys that expire, gateways list them.
 *
 *   key    inferd:workers:<model file>:<HOST:PORT>
 *   value  "<role> <name>"
 *   TTL    MEMBERS_TTL_MS, renewed every MEMBERS_BEAT_MS by the worker
 *
 * A worker that stops renewing (killed, hung, cut off) drops out when its
 * key expires; one that stops cleanly deletes it. A gateway lists the keys
 * of its model every half second (SCAN, never KEYS), so a worker that
 * stopped heartbeating is out of its rotation within 3 s.
 *
 * Failures: Redis down is never fatal. Calls fail fast (100 ms connect,
 * 250 ms command timeouts), reconnects are spaced by a backoff (100 ms
 * doubling to 2 s), and the outage is logged once each way. A gateway keeps
 * the workers it knows while Redis is away (members_list says it could not
 * look).
 *
 * The connection is a kv/redis_link.h link (URLs: redis://HOST:PORT[/DB],
 * unix:/ABSOLUTE/PATH, redis+unix:///ABSOLUTE/PATH). Thread: one at a time
 * (the event-loop thread that owns it); the calls block for at most the
 * timeouts above.
 */
#ifndef INFERD_CLUSTER_MEMBERS_H
#define INFERD_CLUSTER_MEMBERS_H

#include "base/err.h"

enum { MEMBERS_TTL_MS = 2500, MEMBERS_BEAT_MS = 800, MEMBERS_MAX = 64 };

struct members;

/* Checks url and makes the handle (Redis need not be up). model: the
 * model file name the keys carry. 0, or ERR_INVALID with a message. */
int members_open(const char *url, const char *model, struct members **out, struct err_msg *msg);
void members_close(struct members *m);

/* Worker side: (re)announces addr ("HOST:PORT") with value ("<role>
 * <name>") for MEMBERS_TTL_MS; deletes it. */
void members_announce(struct members *m, const char *addr, const char *value);
void members_withdraw(struct members *m, const char *addr);

/* Gateway side: the addresses announced for the model, up to cap, into
 * addrs (80 bytes each). Returns how many, or -1 when Redis could not be
 * asked (keep what you have). */
int members_list(struct members *m, char (*addrs)[80], int cap);

#endif
