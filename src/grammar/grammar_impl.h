/*
 * grammar_impl.h - what the grammar module's files share: the builder that
 * front ends fill, the lowered program, and the stack-node pool of the
 * pushdown automaton.
 *
 * Builder (ir.c). A grammar under construction is a list of rules; a rule is
 * a list of alternatives; an alternative is a sequence of elements, each a
 * set of Unicode code points (one character) or a reference to a rule.
 * Repetition, optionals and groups are spelled with helper rules
 * (grammar__repeat), so the IR itself has only sequence and alternation.
 *
 * Lowered program (struct grammar). Every code-point set becomes UTF-8 byte
 * sequences (surrogates removed), so the automaton reads bytes and a token
 * that ends inside a multi-byte character simply leaves the automaton in the
 * middle of that character's byte sequence. The program is one flat array:
 *
 *   elems:  [BYTES s0][REF r2][END] [BYTES s1][END] ...
 *            ^ alternative 0 of rule 0  ^ alternative 1 ...
 *
 * A position is an index into elems. A stack is a chain of nodes
 * (pos, parent): pos is where matching continues; parent is the node to
 * resume when the alternative ends (its pos points at the REF that called).
 * The state of a matcher is the set of stacks whose top pos is a BYTES
 * element (leaves) plus a flag for "a stack returned past the start rule"
 * (accepting). Nodes are hash-consed in a pool, so equal stacks are equal ids
 * and sets of stacks stay small even for ambiguous grammars.
 *
 * Checks done when lowering (each an ERR_INVALID naming the rule): undefined
 * rules, left recursion (a rule reaching itself without reading a byte, which
 * would make the closure infinite), a start rule that derives no finite
 * string. Alternatives that can never finish are dropped.
 */
#ifndef INFERD_GRAMMAR_IMPL_H
#define INFERD_GRAMMAR_IMPL_H

#include "base/err.h"
#include "grammar/grammar.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#define GRAMMAR_MAX_CP       0x10FFFFu
#define GRAMMAR_MAX_REPEAT   1000 /* largest finite bound in x{m,n} */
#define GRAMMAR_MAX_FOLDED   4096 /* largest bound a folded nested repetition may get */
#define GRAMMAR_INF          (-1) /* unbounded repetition maximum */
#define GRAMMAR_PARENT_ROOT  (-1) /* stack bottom of a real matcher */
#define GRAMMAR_PARENT_UNKNW (-2) /* stack bottom standing for "any context" */
#define GRAMMAR_CTX_DEPTH    64   /* stack frames that key a mask table */
#define GRAMMAR_MAX_TABLES   8192 /* mask tables cached per grammar */
#define GRAMMAR_REP_CAP      16   /* repetition items left that key a mask table */

/* ---- builder ---- */

struct grammar_cprange {
    uint32_t lo; /* first code point */
    uint32_t hi; /* last code point, inclusive */
};

enum grammar_bkind { GRAMMAR_B_CHARS, GRAMMAR_B_REF };

struct grammar_belem {
    int kind; /* enum grammar_bkind */
    int arg;  /* CHARS: charset index; REF: rule index */
};

struct grammar_balt {
    struct grammar_belem *e; /* (n) elements in order */
    int n;                   /* elements */
    int cap;                 /* allocated */
};

struct grammar_brule {
    char *name;                /* for messages; owned */
    struct grammar_balt *alts; /* (n_alts) */
    int n_alts;                /* alternatives */
    int cap;                   /* allocated */
    int n_init;                /* slots initialized: a front end may lower n_alts to start the
                                  rule over, and the buffers of the slots it gave back are
                                  reused (or freed with the builder) */
    bool defined;              /* EBNF: a definition was seen */
    int origin;                /* index into the builder's origins, or -1 */
    int rep_left;              /* grammar__repeat's opt_k (k optional items left), else 0 */
    int rep_next;              /* for opt_k: opt_{k-1}, or -1 */
    int rep_owner;             /* a repetition's helper (its star or opt_k): the rule
                                  grammar__repeat returned, else -1 (messages charge the
                                  helpers to it) */
    int rep_item;              /* a grammar__repeat result: the item repeated, else -1 */
    int rep_min, rep_max;      /* its bounds (rep_max GRAMMAR_INF: unbounded) */
};

/* Which compile bound was hit (grammar_meter.over, grammar_builder.over). */
enum grammar_over {
    GRAMMAR_OVER_NONE,
    GRAMMAR_OVER_RULES, /* max_rules */
    GRAMMAR_OVER_ELEMS, /* max_elems */
    GRAMMAR_OVER_WORK,  /* compile_work */
    GRAMMAR_OVER_CPU,   /* compile_cpu_ms */
};

/* The compile budget: work units charged by the builder, lowering and the
 * dry run, and the thread's CPU time, read every GRAMMAR_METER_CLOCK units
 * (a clock read costs about as much as a few hundred units). */
#define GRAMMAR_METER_CLOCK (1 << 14)

struct grammar_meter {
    int64_t work;       /* units charged */
    int64_t max_work;   /* compile_work */
    int64_t next_clock; /* work at which the clock is read next */
    int64_t cpu_start;  /* thread CPU ns at the start */
    int64_t cpu_max;    /* compile_cpu_ms in ns */
    int over;           /* enum grammar_over: the first bound hit */
};

void grammar__meter_init(struct grammar_meter *m, const struct grammar_limits *lim);
/* Adds units; false once a bound is hit (m->over says which). */
bool grammar__meter_charge(struct grammar_meter *m, int64_t units);

struct grammar_builder {
    struct grammar_brule *rules;   /* (n_rules) */
    int n_rules;                   /* rules */
    int cap_rules;                 /* allocated */
    struct grammar_cprange **sets; /* (n_sets) charsets, each sorted, merged */
    int *set_n;                    /* (n_sets) ranges per charset */
    int n_sets;                    /* charsets */
    int cap_sets;                  /* allocated */
    int n_elems;                   /* elements pushed so far (size limit) */
    int over;                      /* enum grammar_over: a bound was hit (the front ends go on
                                      cheaply on a dummy rule; lowering reports it) */
    int over_rule;                 /* the rule being built when it was hit */
    struct grammar_limits lim;     /* resolved limits */
    struct grammar_meter meter;    /* the compile budget */
    char **origins;                /* (n_origins) where rules come from in the source ("regex
                                      '...': '(a?){9}' at offset 3", a JSON pointer, a GBNF
                                      rule and line), for messages; owned */
    int n_origins;                 /* entries */
    int cap_origins;               /* allocated */
    int origin_cur;                /* origin new rules take, or -1 */
    const char *origin_prefix;     /* put before new origins ("tools[0] 'f'"), or NULL */
};

/* lim NULL: defaults. */
void grammar__builder_init(struct grammar_builder *b, const struct grammar_limits *lim);
void grammar__builder_release(struct grammar_builder *b);
/* A new empty rule (no alternatives yet); name copied; its origin is
 * b->origin_cur. Returns its index. */
int grammar__rule(struct grammar_builder *b, const char *name);
/* A new origin (printf-style, prefixed by b->origin_prefix): its index. */
int grammar__origin(struct grammar_builder *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Charges the compile budget; false (and b->over set) once it is spent. */
bool grammar__charge(struct grammar_builder *b, int64_t units);
/* The message of a compile bound that was hit (b->over), into msg. */
int grammar__over_error(const struct grammar_builder *b, struct err_msg *msg);
/* Starts a new alternative of rule r; later pushes append to it. */
void grammar__alt(struct grammar_builder *b, int r);
/* Appends a reference to rule ref to the current alternative of r. */
void grammar__ref(struct grammar_builder *b, int r, int ref);
/* Appends one character from a set of ranges (normalized here; an empty set
 * is allowed and matches nothing). */
void grammar__chars(struct grammar_builder *b, int r, const struct grammar_cprange *set, int n);
/* Appends the characters of a UTF-8 string literally (invalid UTF-8 bytes are
 * taken as code points U+0080..U+00FF would be wrong, so the caller passes
 * valid UTF-8; ASCII is always fine). */
void grammar__lit(struct grammar_builder *b, int r, const char *s, size_t n);
/* A new rule matching `item` repeated min..max times (max GRAMMAR_INF:
 * unbounded). A repetition of a repetition is folded into one where the
 * language allows it ((x*){200} is x*, ((x?){50}){50} is x{0,2500}; ir.c),
 * so the returned rule may repeat the inner item instead. */
int grammar__repeat(struct grammar_builder *b, const char *name, int item, int min, int max);
/* Normalizes a range list in place (sort, merge); returns the new count. */
int grammar__ranges_normalize(struct grammar_cprange *r, int n);
/* Complement within [0, 0x10FFFF]; writes up to n+1 ranges to out. */
int grammar__ranges_negate(const struct grammar_cprange *r, int n, struct grammar_cprange *out);
/* Decodes one UTF-8 character from s[0..n), n >= 1: its length (1..4), or 0
 * when s does not start with a whole, well-formed character (bad lead byte,
 * bad continuation byte, or cut short). Callers choose what 0 means. */
size_t grammar__utf8_decode(const unsigned char *s, size_t n, uint32_t *cp);
/* Lowers the builder (start rule `root`) into a grammar (which takes the
 * builder's limits and origins). */
int grammar__lower(struct grammar_builder *b, int root, struct grammar **out, struct err_msg *msg);
/* The dry run without a vocabulary (budget.c): the start state's closure
 * and lim.probe_steps byte steps, each along the byte the most stacks read,
 * under the matcher bounds and the compile meter. 0, or ERR_INVALID naming
 * the construct. */
int grammar__dry_run(struct grammar *g, struct grammar_meter *meter, struct err_msg *msg);

/* Front ends: fill b and return the start rule, or a negative error. */
int grammar__ebnf_build(struct grammar_builder *b, const char *src, size_t len,
                        struct err_msg *msg);
/* Regex as a rule. json_string: characters are emitted in their JSON string
 * spelling (inside a string literal); whole: the regex must match the whole
 * input (anchors optional) versus JSON Schema `pattern` search semantics. */
int grammar__regex_build(struct grammar_builder *b, const char *src, size_t len, bool json_string,
                         bool search, struct err_msg *msg);
int grammar__schema_build(struct grammar_builder *b, const char *src, size_t len, bool any_object,
                          struct err_msg *msg);
/* GRAMMAR_SEQUENCE: alternatives of literal text and JSON Schema pieces (seq.c). */
int grammar__seq_build(struct grammar_builder *b, const char *src, size_t len, struct err_msg *msg);

/* ---- lowered program ---- */

enum grammar_ekind { GRAMMAR_E_BYTES, GRAMMAR_E_REF, GRAMMAR_E_END };

struct grammar_elem {
    int32_t kind; /* enum grammar_ekind */
    int32_t arg;  /* BYTES: byte set index; REF: rule; END: the rule it ends */
};

/* Mask table for one vocabulary and one stack context (the top frames of a
 * stack): the verdict for every token, given those frames and nothing about
 * what lies below them. */
struct grammar_posmask {
    uint64_t *accept;             /* (n_words) tokens accepted whatever the context, or NULL: */
    int32_t *accept_list;         /* (n_accept) the same as a list when that is smaller */
    int n_accept;                 /* tokens accepted */
    int32_t *uncertain;           /* (n_uncertain) tokens that leave the rule: check at run time */
    int n_uncertain;              /* entries */
    struct grammar_posmask *base; /* the canonical context's table, whose accepted and
                                     uncertain tokens are this one's too (this one then holds
                                     only the verdicts of tokens of at least GRAMMAR_REP_CAP
                                     characters); NULL: none */
    bool base_owned;              /* base is not cached: freed with this table */
};

struct grammar {
    int refs;                   /* references (atomic) */
    struct grammar_limits lim;  /* the bounds of its matchers and table walks */
    char **origins;             /* (n_origins) the builder's origins; owned */
    int n_origins;              /* entries */
    int *rule_origin;           /* (n_rules) index into origins, or -1 */
    int *rule_owner;            /* (n_rules) the repetition a helper rule belongs to, or -1 */
    enum grammar_kind kind;     /* front end (messages without an origin) */
    struct grammar_elem *elems; /* (n_elems) the program */
    int n_elems;                /* positions */
    int *rule_alts;             /* (rule_alt0[n_rules]) start position of each alternative */
    int *rule_alt0;             /* (n_rules + 1) first entry of each rule in rule_alts */
    int n_rules;                /* rules */
    char **rule_names;          /* (n_rules) owned */
    int root;                   /* start rule */
    uint64_t (*sets)[4];        /* (n_sets) 256-bit byte sets */
    int n_sets;                 /* byte sets */
    int *rule_of;               /* (n_elems) rule each position belongs to */
    uint64_t (*follow)[4];      /* (n_rules) bytes that may follow a finished rule */
    int32_t *rep_canon;         /* (n_elems) position a stack frame at this position takes in
                                   a canonical table key: for the frame of a bounded
                                   repetition with more than GRAMMAR_REP_CAP items left, the
                                   frame of the same repetition with exactly that many;
                                   otherwise the position itself */

    pthread_mutex_t mu;                /* guards the fields below */
    const struct grammar_vocab *vocab; /* the vocabulary of the tables (set on first use) */
    struct grammar_ctxtab *tabs;       /* (cap_tabs) open-addressed mask tables by context */
    int n_tabs;                        /* tables cached */
    int cap_tabs;                      /* power of two, or 0 */
    uint64_t n_builds;                 /* tables computed (cached or not) */
    int64_t tab_bytes;                 /* memory of the cached tables (lim.table_bytes) */
    struct grammar_walker *walker;     /* nodes, states and transitions of table walks */
};

/* A mask table's context: the top frames of a stack. */
struct grammar_ctxtab {
    uint64_t hash;              /* of key and root; 0 = empty slot */
    int32_t *key;               /* (n_key) positions: top first, then each frame's return */
    int n_key;                  /* frames */
    bool root;                  /* the stack ends at the root below key (else: unknown) */
    struct grammar_posmask *pm; /* the table */
};

static inline bool grammar__set_has(const uint64_t set[4], unsigned byte)
{
    return (set[byte >> 6] >> (byte & 63)) & 1;
}

/* ---- stack nodes ---- */

struct grammar_pool {
    int32_t *pos;      /* (n) element position of each node */
    int32_t *parent;   /* (n) parent node, or GRAMMAR_PARENT_* */
    int32_t *next;     /* (n) next node in the same hash bucket */
    uint32_t *stamp;   /* (n) closure generation that last visited the node */
    int n;             /* nodes */
    int cap;           /* allocated */
    int32_t *bucket;   /* (n_buckets) first node of each chain, -1 empty */
    int n_buckets;     /* power of two */
    uint32_t gen;      /* current closure generation */
    int32_t *work;     /* (work_cap) closure worklist scratch */
    int work_cap;      /* allocated */
    int64_t units;     /* work units charged since the owner reset it (closures charge a unit
                          per node they visit or make; mask walks add theirs) */
    int64_t max_units; /* bound on units: past it `over` is set */
    int max_leaves;    /* bound on the leaves of one state */
    int max_nodes;     /* bound on n */
    int over;          /* a bound was hit (GRAMMAR_POOL_OVER_*): the closure or advance that
                          hit it stopped early and its result is incomplete */
};

enum {
    GRAMMAR_POOL_OVER_NONE,
    GRAMMAR_POOL_OVER_WORK,   /* max_units */
    GRAMMAR_POOL_OVER_STACKS, /* max_leaves */
    GRAMMAR_POOL_OVER_NODES,  /* max_nodes */
};

/* Unbounded: what a pool starts with. */
void grammar__pool_init(struct grammar_pool *p);
/* Resets the counters and sets the bounds for the next operation. */
void grammar__pool_bound(struct grammar_pool *p, int64_t max_units, int max_leaves, int max_nodes);
void grammar__pool_release(struct grammar_pool *p);
/* The node (pos, parent), created if new. */
int32_t grammar__node(struct grammar_pool *p, int32_t pos, int32_t parent);
/* Forgets every node created after the pool had `mark` nodes. */
void grammar__pool_rollback(struct grammar_pool *p, int mark);

/* A set of stacks: leaf node ids plus flags. Storage is caller-provided. */
struct grammar_state {
    int32_t *leaf; /* (n) node ids, top pos is a BYTES element */
    int n;         /* leaves */
    int cap;       /* room in leaf */
    bool accept;   /* a stack returned past the root (input may end here) */
    bool unknown;  /* a stack returned into the unknown context (precompute) */
};

/* Closure of the single node (pos, parent) into st (appended). Stops early,
 * setting p->over, when a bound of p is hit. */
void grammar__closure(const struct grammar *g, struct grammar_pool *p, int32_t pos, int32_t parent,
                      struct grammar_state *st);
/* st_out = the stacks of `in` after reading byte. st_out must not alias in. */
void grammar__advance(const struct grammar *g, struct grammar_pool *p,
                      const struct grammar_state *in, unsigned byte, struct grammar_state *out);

/* Grows st->leaf to hold at least n more ids. */
void grammar__state_reserve(struct grammar_state *st, int n);

/* UTF-8 decoding states between bytes (Unicode table 3-7): at a character
 * boundary, or inside a character with the continuation bytes still due. */
enum grammar_u8 {
    GRAMMAR_U8_BOUNDARY, /* whole characters so far */
    GRAMMAR_U8_NEED1,    /* one more continuation byte 80-BF */
    GRAMMAR_U8_NEED2,    /* two more, the next 80-BF */
    GRAMMAR_U8_NEED3,    /* three more, the next 80-BF */
    GRAMMAR_U8_AFTER_E0, /* two more, the next A0-BF */
    GRAMMAR_U8_AFTER_ED, /* two more, the next 80-9F */
    GRAMMAR_U8_AFTER_F0, /* three more, the next 90-BF */
    GRAMMAR_U8_AFTER_F4, /* three more, the next 80-8F */
    GRAMMAR_U8_STATES,
};

/* One trie node: what a mask walk reads when it reaches the node, packed
 * into 32 bytes (two per cache line; checked in vocab.c). A node's
 * children are numbered contiguously in byte order, so a walk scans them as
 * one array. */
struct grammar_tnode {
    uint64_t sub_ascii[2]; /* ASCII bytes occurring strictly below */
    int32_t first;         /* first index into order of the subtree's tokens (those ending
                              here come first); the subtree's end is where the next sibling's
                              tokens begin (the last sibling: where the parent's end) */
    int32_t kids;          /* first child; the children are kids .. kids + n_kids - 1 */
    uint16_t n_kids;       /* children */
    uint16_t chars;        /* characters (non-continuation bytes) the longest string strictly
                              below starts, saturated at UINT16_MAX */
    uint8_t byte;          /* byte on the edge from the parent */
    uint8_t wf;            /* bit u (enum grammar_u8): every string strictly below is
                              well-formed UTF-8 when decoding starts here in state u */
    uint8_t sub_mb;        /* a non-ASCII byte occurs strictly below */
    uint8_t n_here;        /* tokens ending here (order[first ..]), UINT8_MAX: that many or
                              more (then they end where the first child's begin) */
};

/* A trie over a sorted set of tokens. */
struct grammar_trie {
    int32_t *order;           /* (n_order) token ids sorted by bytes (depth-first order) */
    int32_t *ord_starts;      /* (n_order) characters each starts (non-continuation bytes) */
    int n_order;              /* tokens */
    struct grammar_tnode *tn; /* (n_nodes) node 0 is the root */
    int n_nodes;              /* nodes incl. the root */
};

/* Vocabulary internals used by mask.c. */
struct grammar_vocab {
    int n_vocab;                   /* tokens */
    char *bytes;                   /* concatenated token bytes */
    uint64_t *off;                 /* (n_vocab + 1) offsets into bytes */
    uint8_t *cls;                  /* (n_vocab) enum grammar_token_class */
    int32_t *eog;                  /* (n_eog) end-of-generation ids */
    int n_eog;                     /* entries */
    struct grammar_trie trie;      /* every NORMAL token */
    struct grammar_trie long_trie; /* the NORMAL tokens of at least GRAMMAR_REP_CAP characters */
    int max_depth;                 /* longest token (bytes) */
};

struct grammar_vocab *grammar__vocab_build(int n_vocab, char *bytes, uint64_t *off, uint8_t *cls,
                                           const int32_t *eog, int n_eog);

/* Matcher internals for mask.c. try: the bytes from the current state, the
 * state unchanged; a bound of the pool hit (the caller sets them) is
 * reported in wk. fail_work: fails the matcher for wk's bound (a mask's or
 * a step's message). */
struct grammar_work;
bool grammar__matcher_try(struct grammar_matcher *m, const void *bytes, size_t n,
                          struct grammar_work *wk);
void grammar__matcher_fail(struct grammar_matcher *m, const struct err_msg *msg);
void grammar__matcher_fail_work(struct grammar_matcher *m, const struct grammar_work *wk,
                                bool mask);
void grammar__matcher_set_work(struct grammar_matcher *m, int64_t units);
struct grammar_state *grammar__matcher_state(struct grammar_matcher *m);
struct grammar_pool *grammar__matcher_pool(struct grammar_matcher *m);
struct grammar *grammar__matcher_grammar(struct grammar_matcher *m);
const struct grammar_vocab *grammar__matcher_vocab(struct grammar_matcher *m);

/* A mask's budget while it is filled: units spent and the bound, and what
 * ran past it. */
struct grammar_work {
    int64_t used; /* units so far */
    int64_t max;  /* lim.mask_work */
    int over;     /* GRAMMAR_POOL_OVER_* of the bound hit, 0 if none */
    int blame;    /* rule the blow-up is charged to (budget.c), -1 if unknown */
    int n_stacks; /* stacks of the largest state met */
};

/* Mask table for a stack context (computed on first use, under g->mu).
 * *owned: the table was not cached (cache full) and the caller frees it.
 * NULL when its computation ran past wk's budget (wk->over, wk->blame set;
 * nothing of it is kept). */
struct grammar_posmask *grammar__table(struct grammar *g, const struct grammar_vocab *v,
                                       const int32_t *key, int n_key, bool root, bool *owned,
                                       struct grammar_work *wk);
/* The rule a large set of stacks is charged to (budget.c): the deepest
 * frame above more than half of the stacks - where they fan out - and the
 * rule it calls; -1 if nothing is known. */
int grammar__blame(const struct grammar *g, const struct grammar_pool *p, const int32_t *leaves,
                   int n);
/* "<origin of rule>: <what>" (or "<kind>: <what>"), into msg as ERR_INVALID. */
int grammar__blame_error(const struct grammar *g, int rule, struct err_msg *msg, const char *fmt,
                         ...) __attribute__((format(printf, 4, 5)));
/* The message for a pool bound hit: "too ambiguous: more than N stacks at
 * once" and the like, into buf (mask: a mask's work bound, else a step's). */
void grammar__over_what(const struct grammar *g, int over, int n_stacks, bool mask, char *buf,
                        size_t len);
void grammar__posmask_free(struct grammar_posmask *pm);
void grammar__walker_free(struct grammar_walker *w);

#endif
