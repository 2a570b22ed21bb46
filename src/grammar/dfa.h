/*
 * dfa.h - string languages that need automata: the intersection of several
 * regexes (a JSON Schema string's `format` and `pattern`), their lookaheads
 * and inner `$`, and length bounds, determinized into one minimal DFA and
 * emitted into the builder as a right-linear grammar (dfa.c).
 *
 * Lifetime: the builder owns what is emitted; the regexes are borrowed.
 * Thread: pure function of its input.
 */
#ifndef INFERD_GRAMMAR_DFA_H
#define INFERD_GRAMMAR_DFA_H

#include "grammar/regex.h"

/* Most DFA states the construction may create (the product of the parts
 * before minimization, lookahead automata included). */
#define GRAMMAR_DFA_MAX_STATES 4096
/* Most states of that DFA's product with a character count (length
 * bounds), a cheap table walk per state. */
#define GRAMMAR_DFA_MAX_COUNTED 16384

struct grammar_lang_part {
    const struct grammar_rx *rx; /* parsed regex */
    bool search;                 /* JSON Schema semantics: an unanchored side takes any characters;
                                    else the whole string matches (anchors optional) */
};

/* A rule for the strings (sequences of code points) in every part's
 * language whose length in code points is in [min_len, max_len] (max_len
 * GRAMMAR_INF: unbounded). json: each character in JSON string spelling
 * (regex.c), without the quotes. Returns the rule, or ERR_INVALID when the
 * automaton would need more than GRAMMAR_DFA_MAX_STATES states ("the
 * automaton needs more than 4096 states"), its product with the length
 * bounds more than GRAMMAR_DFA_MAX_COUNTED, or the regexes more NFA states
 * than the construction allows. An empty language gives a rule without alternatives
 * (the builder drops what refers to it). */
int grammar__lang_build(struct grammar_builder *b, const struct grammar_lang_part *parts,
                        int n_parts, int min_len, int max_len, bool json, struct err_msg *msg);

#endif
