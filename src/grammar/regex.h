/*
 * regex.h - the parsed form of a regex in the JSON Schema `pattern` dialect
 * (regex.c), shared by its two back ends: the direct emission into builder
 * rules (regex.c) and the automata (dfa.c) that intersect several regexes,
 * lookaheads and length bounds.
 *
 * A regex is a tree of nodes in one array; lists of children are linked
 * through `next`:
 *
 *   "^a(?!b)[0-9]{2}|c"   tops[0] (anchored at the start)     tops[1]
 *                          CAT ─ CHARS{a}                      CAT ─ CHARS{c}
 *                              ├ LOOK! ─ CAT ─ CHARS{b}
 *                              └ REPEAT{2,2} ─ CHARS{0-9}
 *
 * Each top-level alternative records whether it is anchored at its start
 * (`^`) and end (`$`); a `$` anywhere else is an END node (the end of the
 * input, as ECMA-262 reads it without the multiline flag). LOOK and END
 * nodes have no rule form, so a regex with them (has_look) goes through the
 * automata.
 *
 * Lifetime: grammar__rx_parse fills a caller-owned struct; release it with
 * grammar__rx_release. `src` is borrowed (messages quote it).
 * Thread: no shared state.
 */
#ifndef INFERD_GRAMMAR_REGEX_H
#define INFERD_GRAMMAR_REGEX_H

#include "grammar/grammar_impl.h"

enum grammar_rxkind {
    GRAMMAR_RX_CHARS,  /* one character of sets[set] */
    GRAMMAR_RX_CAT,    /* the children in sequence (none: the empty string) */
    GRAMMAR_RX_ALT,    /* one of the children */
    GRAMMAR_RX_REPEAT, /* the child min..max times */
    GRAMMAR_RX_LOOK,   /* lookahead: the child matches (negate: does not match) a prefix of the
                          rest of the input */
    GRAMMAR_RX_END,    /* `$` inside the pattern: nothing follows */
};

struct grammar_rxnode {
    int kind;    /* enum grammar_rxkind */
    int child;   /* CAT, ALT: first child (-1: none); REPEAT, LOOK: the operand */
    int next;    /* next sibling in the parent's list, or -1 */
    int min;     /* REPEAT: fewest repetitions */
    int max;     /* REPEAT: most, or GRAMMAR_INF */
    int set;     /* CHARS: index into sets */
    bool negate; /* LOOK: (?!...) rather than (?=...) */
    int offset;  /* byte offset in the pattern where the construct starts (messages) */
    int span;    /* groups, repetitions, alternatives: its bytes in the pattern (0: unknown) */
};

struct grammar_rxtop {
    int node;   /* the alternative's CAT or ALT node */
    bool start; /* anchored at the start (^) */
    bool end;   /* anchored at the end ($) */
};

struct grammar_rx {
    const char *src;               /* the pattern (borrowed) */
    size_t len;                    /* its bytes */
    struct grammar_rxnode *nodes;  /* (n_nodes) */
    int n_nodes;                   /* nodes */
    int cap_nodes;                 /* allocated */
    struct grammar_cprange **sets; /* (n_sets) character sets, each normalized */
    int *set_n;                    /* (n_sets) ranges of each set */
    int n_sets;                    /* sets */
    int cap_sets;                  /* allocated */
    struct grammar_rxtop *tops;    /* (n_tops) top-level alternatives */
    int n_tops;                    /* alternatives */
    int cap_tops;                  /* allocated */
    bool has_look;                 /* a LOOK or END node occurs */
};

/* Parses src[0..len) into rx (caller-owned, zeroed or released). 0, or
 * ERR_INVALID with msg naming the construct and its byte offset ("regex
 * '...': lookbehind assertions are not supported at offset 3"); rx is then
 * released. */
int grammar__rx_parse(struct grammar_rx *rx, const char *src, size_t len, struct err_msg *msg);
void grammar__rx_release(struct grammar_rx *rx);

/* A rule for rx without LOOK or END nodes (!rx->has_look): a rule per
 * group, grammar__repeat for quantifiers. json_string and search as for
 * grammar__regex_build. */
int grammar__rx_emit(struct grammar_builder *b, const struct grammar_rx *rx, bool json_string,
                     bool search);

/* Appends to `rule` one alternative per JSON escape spelling of the ASCII
 * characters in r[0..n) (normalized) that have one here: \" \\ \/ \b \f \n
 * \r \t and \u00XX (hex digits in either case) for control characters. */
void grammar__json_escapes(struct grammar_builder *b, int rule, const struct grammar_cprange *r,
                           int n);
/* The characters of r[0..n) (normalized) that JSON writes raw: all but
 * control characters, '"' and '\'. Writes at most n + 3 ranges to out;
 * returns how many. */
int grammar__json_raw(const struct grammar_cprange *r, int n, struct grammar_cprange *out);

#endif
