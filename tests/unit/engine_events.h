/*
 * engine_events.h - comparing two runs' engine event streams in unit tests.
 *
 * Two runs of the same requests (other thread counts, other mask paths)
 * must give the same events in the same order: request ids relative to each
 * run's first, tokens, finish reasons, and logprobs and alternatives bitwise.
 */
#ifndef INFERD_TEST_ENGINE_EVENTS_H
#define INFERD_TEST_ENGINE_EVENTS_H

#include "inferd/inferd.h"
#include "test.h"

static inline void expect_same_events(const struct inferd_event *a0, int na,
                                      const struct inferd_event *b0, int nb)
{
    EXPECT_EQ_INT(na, nb);
    for (int i = 0; i < na && i < nb; i++) {
        const struct inferd_event *a = &a0[i], *b = &b0[i];
        EXPECT(a->request - a0[0].request == b->request - b0[0].request);
        EXPECT_EQ_INT(a->token, b->token);
        EXPECT_EQ_INT(a->finish, b->finish);
        EXPECT(memcmp(&a->logprob, &b->logprob, sizeof(float)) == 0);
        EXPECT_EQ_INT(a->n_top, b->n_top);
        for (int k = 0; k < a->n_top && k < b->n_top; k++)
            EXPECT(a->top[k].token == b->top[k].token &&
                   memcmp(&a->top[k].logprob, &b->top[k].logprob, sizeof(float)) == 0);
    }
}

#endif
