/*
 * test_grammar_budget.c - grammars that cost more than their size: each is
 * either compiled and masked within a bounded number of work units, or
 * refused with a message naming the construct (the regex fragment and its
 * offset, the GBNF item and line, the JSON Schema pointer). Work is asserted
 * on the matcher's work counter (grammar_matcher_last_work), never on time.
 *
 * The constructs: nested repetitions that fold ((.*){200}x, (a*)*,
 * ((a?){50}){50}), alternations whose stacks hash-cons ((a|a)*), nested
 * nullable sequences that do not fold (((a?b?){30}){30} in a regex, a GBNF
 * rule and a JSON Schema pattern), a 20,000-rule GBNF chain, deep and wide
 * JSON Schemas, huge repetition counts, and the compile bounds.
 */
#include "../../grammar_test_vocab.h"
#include "test.h"

#include "base/check.h"
#include "grammar/grammar.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

static struct grammar_vocab *the_vocab;

static void free_vocab(void)
{
    grammar_vocab_free(the_vocab);
}

/* Every byte but NUL as a token, a few longer pieces, and one end token. */
static struct grammar_vocab *vocab(void)
{
    if (the_vocab) return the_vocab;
    static const char *pieces[] = {"aa",   "aaaa", "ab",     "ba", "bb",   "abab", "xa",  "{\"",
                                   "\":",  "\",",  "\": \"", "}",  "code", "p1",   "p12", "\"p",
                                   "true", "null", "12",     "  ", "\n",   "[1",   "],",  "value-"};
    the_vocab = grammar_test_vocab(1, pieces, (int)(sizeof(pieces) / sizeof(pieces[0])));
    atexit(free_vocab);
    return the_vocab;
}

static int compile_lim(enum grammar_kind k, const char *src, const struct grammar_limits *lim,
                       struct grammar **g, struct err_msg *m)
{
    memset(m, 0, sizeof(*m));
    *g = NULL;
    return grammar_compile_limits(k, src, strlen(src), lim, g, m);
}

/* An error whose message holds every needle (NULL-terminated). */
static bool refused(int rc, const struct err_msg *m, const char *const *needles)
{
    if (rc != ERR_INVALID) {
        fprintf(stderr, "  expected ERR_INVALID, got %d (%s)\n", rc, m->text);
        return false;
    }
    for (; *needles; needles++)
        if (!strstr(m->text, *needles)) {
            fprintf(stderr, "  message '%s' lacks '%s'\n", m->text, *needles);
            return false;
        }
    return true;
}

static bool accepts(struct grammar *g, const char *text, size_t n)
{
    struct grammar_matcher *m = grammar_matcher_new(g, NULL);
    bool ok = grammar_matcher_accept_bytes(m, text, n) && grammar_matcher_is_accepting(m);
    grammar_matcher_free(m);
    return ok;
}

/* Feeds text byte by byte (each a token of the test vocabulary), filling a
 * mask before each: every mask and step must stay within max_units, and
 * every mask must agree with a byte walk of every token. Returns the
 * largest mask work seen, or -1 on a failure. */
static int64_t walk_bounded(struct grammar *g, const char *text, int64_t max_units)
{
    struct grammar_vocab *v = vocab();
    int n_vocab = grammar_vocab_n(v);
    uint64_t mask[8];
    CHECK((n_vocab + 63) / 64 <= 8);
    struct grammar_matcher *m = grammar_matcher_new(g, v);
    int64_t most = grammar_matcher_last_work(m);
    for (size_t i = 0;; i++) {
        int n = grammar_matcher_fill_mask(m, mask);
        int64_t w = grammar_matcher_last_work(m);
        most = w > most ? w : most;
        if (n < 0 || w > max_units) {
            const char *t;
            grammar_matcher_error(m, &t);
            fprintf(stderr, "  mask at byte %zu: %d, %lld units (%s)\n", i, n, (long long)w,
                    t ? t : "");
            most = -1;
            break;
        }
        for (int t = 0; t < n_vocab; t++)
            if (((mask[t >> 6] >> (t & 63)) & 1) != grammar_matcher_allows(m, t)) {
                fprintf(stderr, "  mask disagrees on token %d at byte %zu\n", t, i);
                most = -1;
            }
        if (most < 0 || !text[i]) break;
        int32_t tok = (unsigned char)text[i] - 1; /* byte c is token c - 1 */
        if (!grammar_matcher_accept_token(m, tok) || grammar_matcher_last_work(m) > max_units) {
            fprintf(stderr, "  byte %zu '%c' refused (%lld units)\n", i, text[i],
                    (long long)grammar_matcher_last_work(m));
            most = -1;
            break;
        }
    }
    grammar_matcher_free(m);
    return most;
}

/* A walk as walk_bounded, except that a mask may also be refused: then it
 * must name the construct (needle) and have stopped near the budget (the
 * step that crosses it may add up to an eighth: growing the walker's
 * arrays is charged to whoever triggers it). */
static bool walk_or_refused(struct grammar *g, const char *text, const char *needle)
{
    struct grammar_vocab *v = vocab();
    uint64_t mask[8];
    int64_t max = grammar_limits_of(g)->mask_work;
    struct grammar_matcher *m = grammar_matcher_new(g, v);
    bool ok = true;
    for (size_t i = 0; ok; i++) {
        int n = grammar_matcher_fill_mask(m, mask);
        const char *t;
        if (n < 0) {
            grammar_matcher_error(m, &t);
            ok = strstr(t, needle) && grammar_matcher_last_work(m) <= max + max / 8;
            if (!ok)
                fprintf(stderr, "  refused at byte %zu (%lld units): %s\n", i,
                        (long long)grammar_matcher_last_work(m), t);
            break;
        }
        ok = grammar_matcher_last_work(m) <= max;
        if (!text[i]) break;
        if (ok && !grammar_matcher_accept_token(m, (unsigned char)text[i] - 1)) {
            ok = grammar_matcher_error(m, &t) && strstr(t, needle);
            break;
        }
    }
    grammar_matcher_free(m);
    return ok;
}

TEST(nested_repetitions_fold)
{
    /* (.*){200}x would keep 2,601 stacks alive; folded it is .*x */
    static const char *const cases[] = {"(.*){200}x",    "(a*)*b", "(a+)*b",
                                        "((a*)+)*b",     "(a?)*b", "((a?){50}){50}b",
                                        "(x|(a+){5,})*b"};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct grammar *g;
        struct err_msg m;
        EXPECT_EQ_INT(compile_lim(GRAMMAR_REGEX, cases[i], NULL, &g, &m), 0);
        if (!g) continue;
        int64_t most = walk_bounded(g, i == 0 ? "abcabcxxab" : "aaaaaaaaaaaaaaaaaaaa", 20000);
        if (most < 0) fprintf(stderr, "  in %s\n", cases[i]);
        EXPECT(most >= 0);
        grammar_unref(g);
    }
    /* the languages are the unfolded ones */
    struct grammar *g;
    struct err_msg m;
    EXPECT_EQ_INT(compile_lim(GRAMMAR_REGEX, "(.*){200}x", NULL, &g, &m), 0);
    EXPECT(accepts(g, "x", 1) && accepts(g, "abx", 3) && accepts(g, "xxx", 3));
    EXPECT(!accepts(g, "", 0) && !accepts(g, "ab", 2) && !accepts(g, "a\nx", 3));
    grammar_unref(g);
    EXPECT_EQ_INT(compile_lim(GRAMMAR_REGEX, "((a?){50}){50}", NULL, &g, &m), 0);
    char *as = xmalloc(2502);
    memset(as, 'a', 2501);
    EXPECT(accepts(g, as, 0) && accepts(g, as, 1) && accepts(g, as, 2500));
    EXPECT(!accepts(g, as, 2501));
    grammar_unref(g);
    free(as);
    EXPECT_EQ_INT(compile_lim(GRAMMAR_REGEX, "(a+)*b", NULL, &g, &m), 0);
    EXPECT(accepts(g, "b", 1) && accepts(g, "aab", 3) && !accepts(g, "a", 1));
    grammar_unref(g);
    /* (x{2}){1,2} is x{2} or x{4}: not one repetition, left as written */
    EXPECT_EQ_INT(compile_lim(GRAMMAR_REGEX, "(ab{2}){1,2}", NULL, &g, &m), 0);
    EXPECT(accepts(g, "abb", 3) && accepts(g, "abbabb", 6) && !accepts(g, "abbab", 5));
    grammar_unref(g);
    /* the same folding for GBNF */
    EXPECT_EQ_INT(compile_lim(GRAMMAR_EBNF, "root ::= ([a-z]*){200} \"x\"", NULL, &g, &m), 0);
    EXPECT(walk_bounded(g, "abcdefghx", 20000) >= 0);
    grammar_unref(g);
}

TEST(alternation_ambiguity_stays_small)
{
    /* equal stacks are equal nodes: (a|a)* never has more than a few */
    static const char *const cases[] = {"(a|a)*b", "(a|aa)*b", "(a|ab|b)*c", "((a|a)(a|a))*b"};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct grammar *g;
        struct err_msg m;
        EXPECT_EQ_INT(compile_lim(GRAMMAR_REGEX, cases[i], NULL, &g, &m), 0);
        if (!g) continue;
        EXPECT(walk_bounded(g, "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", 20000) >= 0);
        grammar_unref(g);
    }
}

TEST(ambiguous_nesting_refused_by_name)
{
    struct grammar *g;
    struct err_msg m;
    /* at compile: the dry run's start state has 1,800 stacks */
    struct grammar_limits lim = {.max_stacks = 1000};
    EXPECT(refused(compile_lim(GRAMMAR_REGEX, "((a?b?){30}){30}", &lim, &g, &m), &m,
                   (const char *[]){"regex fragment '((a?b?){30}){30}' at offset 0",
                                    "more than 1000 stacks", "(max_stacks)", NULL}));
    EXPECT(refused(
        compile_lim(GRAMMAR_REGEX, "x(((a?b?c?){10}){10}){10}", &lim, &g, &m), &m,
        (const char *[]){"'(((a?b?c?){10}){10}){10}' at offset 1", "after the input 'x'", NULL}));
    lim.max_stacks = 500;
    EXPECT(refused(
        compile_lim(GRAMMAR_EBNF, "root ::= \"x\" ((\"a\"? \"b\"?){30}){30}", &lim, &g, &m), &m,
        (const char *[]){"grammar: line 1, column 14: '((\"a\"? \"b\"?){30}){30}' in "
                         "rule 'root'",
                         "after the input 'x'", NULL}));
    /* with the vocabulary: the cache's probe runs the first mask under
     * mask_work, which the 1,800 stacks (a table each) exceed */
    struct grammar_cache *c = grammar_cache_new(vocab(), 4);
    lim = (struct grammar_limits){.mask_work = 20000};
    const char *re = "((a?b?){30}){30}";
    int rc = grammar_cache_get(c, GRAMMAR_REGEX, re, strlen(re), &lim, &g, &m);
    EXPECT(refused(rc, &m,
                   (const char *[]){"regex fragment '((a?b?){30}){30}' at offset 0",
                                    "too costly: a token mask needs more than 20000 work units",
                                    "1800 stacks", NULL}));
    /* a refusal is cached: the same message without compiling again */
    uint64_t hits, misses;
    struct err_msg m2 = {{0}};
    EXPECT_EQ_INT(grammar_cache_get(c, GRAMMAR_REGEX, re, strlen(re), &lim, &g, &m2), ERR_INVALID);
    EXPECT(strcmp(m.text, m2.text) == 0);
    grammar_cache_stats(c, &hits, &misses);
    EXPECT_EQ_INT(hits, 1);
    EXPECT_EQ_INT(misses, 1);
    grammar_cache_free(c);
    /* the bound is on work: the mask stops near it (a counter, not a clock) */
    EXPECT_EQ_INT(compile_lim(GRAMMAR_REGEX, re, &lim, &g, &m), 0);
    struct grammar_matcher *mt = grammar_matcher_new(g, vocab());
    uint64_t mask[8];
    EXPECT_EQ_INT(grammar_matcher_fill_mask(mt, mask), ERR_INVALID);
    EXPECT(grammar_matcher_last_work(mt) > 20000);
    EXPECT(grammar_matcher_last_work(mt) < 20000 + 20000);
    /* failed for good, with the message */
    const char *text;
    EXPECT_EQ_INT(grammar_matcher_error(mt, &text), ERR_INVALID);
    EXPECT(text && strstr(text, "'((a?b?){30}){30}' at offset 0"));
    EXPECT(!grammar_matcher_accept_bytes(mt, "a", 1));
    EXPECT_EQ_INT(grammar_matcher_fill_mask(mt, mask), ERR_INVALID);
    grammar_matcher_free(mt);
    /* under the default budget a smaller nesting masks within it */
    grammar_unref(g);
    EXPECT_EQ_INT(compile_lim(GRAMMAR_REGEX, "((a?b?){10}){10}", NULL, &g, &m), 0);
    mt = grammar_matcher_new(g, vocab());
    EXPECT(grammar_matcher_fill_mask(mt, mask) > 0);
    EXPECT(grammar_matcher_last_work(mt) <= grammar_limits_of(g)->mask_work);
    grammar_matcher_free(mt);
    grammar_unref(g);
}

TEST(run_time_blowout_fails_one_matcher)
{
    /* An ambiguous pattern deep inside an object: the dry run does not
     * reach it, so it shows only when a generation gets there. */
    const char *src = "{\"type\": \"object\", \"properties\": {\"code\": {\"type\": \"string\", "
                      "\"pattern\": \"^((a?b?){30}){30}$\"}}, \"required\": [\"code\"]}";
    struct grammar_limits lim = {.mask_work = 200000};
    struct grammar *g;
    struct err_msg m;
    EXPECT_EQ_INT(compile_lim(GRAMMAR_JSON_SCHEMA, src, &lim, &g, &m), 0);
    if (!g) return;
    struct grammar_matcher *a = grammar_matcher_new(g, vocab());
    struct grammar_matcher *b = grammar_matcher_new(g, vocab());
    uint64_t mask[8], ref[8];
    EXPECT(grammar_matcher_fill_mask(a, mask) > 0);
    const char *prefix = "{\"code\": \"";
    EXPECT(grammar_matcher_accept_bytes(a, prefix, strlen(prefix)));
    EXPECT_EQ_INT(grammar_matcher_fill_mask(a, mask), ERR_INVALID);
    EXPECT(grammar_matcher_last_work(a) < 200000 + 20000);
    const char *text;
    grammar_matcher_error(a, &text);
    EXPECT(text && strstr(text, "json schema: #/properties/code: pattern fragment "
                                "'((a?b?){30}){30}' at offset 1: too costly"));
    /* another matcher of the same grammar goes on, with exact masks (the
     * failed walk's memo was dropped, not kept half done) */
    int n = grammar_matcher_fill_mask(b, ref);
    EXPECT(n > 0);
    EXPECT_EQ_INT(grammar_matcher_error(b, NULL), 0);
    for (int t = 0; t < grammar_vocab_n(vocab()); t++)
        EXPECT_EQ_INT((ref[t >> 6] >> (t & 63)) & 1, grammar_matcher_allows(b, t));
    EXPECT(grammar_matcher_accept_bytes(b, "{\"code\"", 7));
    EXPECT(grammar_matcher_fill_mask(b, ref) > 0);
    grammar_matcher_free(a);
    grammar_matcher_free(b);
    grammar_unref(g);
}

/* r0 ::= "a" r1 ... (right) or r0 ::= r1 "a" ... (left: a closure 20,000
 * frames deep). */
static char *chain(int n, bool left)
{
    size_t cap = (size_t)n * 32 + 64, k = 0;
    char *s = xmalloc(cap);
    k += (size_t)snprintf(s + k, cap - k, "root ::= r0\n");
    for (int i = 0; i < n - 1; i++)
        k += (size_t)snprintf(s + k, cap - k,
                              left ? "r%d ::= r%d \"a\" | \"b\"\n" : "r%d ::= \"a\" r%d | \"b\"\n",
                              i, i + 1);
    snprintf(s + k, cap - k, "r%d ::= \"a\"\n", n - 1);
    return s;
}

TEST(gbnf_chain_of_20000_rules)
{
    for (int left = 0; left < 2; left++) {
        char *src = chain(20000, left);
        struct grammar *g;
        struct err_msg m;
        /* The left chain's start state has a "b" at each of its 20,000
         * levels: 20,000 stacks, past max_stacks by default. Allowed more
         * stacks, its first mask (a table per stack) runs past mask_work:
         * refused within the budget, naming a rule of the chain. */
        int rc = compile_lim(GRAMMAR_EBNF, src, NULL, &g, &m);
        if (left) {
            EXPECT(refused(
                rc, &m, (const char *[]){"grammar: rule 'r", "more than 8192 stacks alive", NULL}));
            struct grammar_limits big = {.max_stacks = 1 << 15};
            rc = compile_lim(GRAMMAR_EBNF, src, &big, &g, &m);
        }
        EXPECT_EQ_INT(rc, 0);
        if (g) {
            EXPECT(left ? accepts(g, "b", 1) && accepts(g, "baaa", 4) && !accepts(g, "ab", 2)
                        : accepts(g, "b", 1) && accepts(g, "aab", 3) && !accepts(g, "ba", 2));
            /* one closure 20,000 frames deep: a few units per frame */
            struct grammar_matcher *mt = grammar_matcher_new(g, vocab());
            EXPECT_EQ_INT(grammar_matcher_error(mt, NULL), 0);
            EXPECT(grammar_matcher_last_work(mt) < 16 * 20000);
            grammar_matcher_free(mt);
            if (left)
                EXPECT(walk_or_refused(g, "baaa", "grammar: rule 'r"));
            else
                EXPECT(walk_bounded(g, "aaaaaaaaab", 20000) >= 0);
            grammar_unref(g);
        }
        /* under a smaller rule bound: refused, naming where */
        struct grammar_limits lim = {.max_rules = 10000};
        EXPECT(refused(
            compile_lim(GRAMMAR_EBNF, src, &lim, &g, &m), &m,
            (const char *[]){"grammar: rule 'r", "more than 10000 rules (max_rules)", NULL}));
        free(src);
    }
}

/* An object with n properties p0..p{n-1} (required or not), or an enum of
 * n strings. */
static char *wide(int n, const char *kind)
{
    size_t cap = (size_t)n * 48 + 128, k = 0;
    char *s = xmalloc(cap);
    if (!strcmp(kind, "enum")) {
        k += (size_t)snprintf(s + k, cap - k, "{\"enum\": [");
        for (int i = 0; i < n; i++)
            k += (size_t)snprintf(s + k, cap - k, "%s\"value-%d\"", i ? ", " : "", i);
        snprintf(s + k, cap - k, "]}");
        return s;
    }
    k += (size_t)snprintf(s + k, cap - k, "{\"type\": \"object\", \"properties\": {");
    for (int i = 0; i < n; i++)
        k += (size_t)snprintf(s + k, cap - k, "%s\"p%d\": {\"type\": \"integer\"}", i ? ", " : "",
                              i);
    k += (size_t)snprintf(s + k, cap - k, "}");
    if (!strcmp(kind, "required")) {
        k += (size_t)snprintf(s + k, cap - k, ", \"required\": [");
        for (int i = 0; i < n; i++)
            k += (size_t)snprintf(s + k, cap - k, "%s\"p%d\"", i ? ", " : "", i);
        k += (size_t)snprintf(s + k, cap - k, "]");
    }
    snprintf(s + k, cap - k, "}");
    return s;
}

TEST(deep_and_wide_schemas)
{
    struct grammar *g;
    struct err_msg m;
    /* nesting: 60 levels compile and mask within bounds, 70 are refused */
    char deep[4096] = "{\"type\": \"integer\"}";
    for (int d = 1; d <= 70; d++) {
        char t[4096];
        snprintf(t, sizeof(t), "{\"type\": \"object\", \"properties\": {\"a\": %s}}", deep);
        memcpy(deep, t, sizeof(deep));
        if (d == 60) {
            EXPECT_EQ_INT(compile_lim(GRAMMAR_JSON_SCHEMA, deep, NULL, &g, &m), 0);
            if (g) EXPECT(walk_bounded(g, "{\"a\": {\"a\": {\"a\": {\"a\": {", 50000) >= 0);
            grammar_unref(g);
        }
    }
    EXPECT(refused(compile_lim(GRAMMAR_JSON_SCHEMA, deep, NULL, &g, &m), &m,
                   (const char *[]){"json schema: nested too deeply (more than 64 levels) at "
                                    "#/properties/a/properties/a",
                                    NULL}));
    /* 5,000 properties, optional or required, and an enum of 5,000 strings
     * compile in linear work. Optional members and enum values are 5,000
     * stacks at one position (after '{', after each member, at the start),
     * each its own mask table: masked within the budgets, or refused naming
     * the object - here after a member, where each of the optional members
     * that may follow is a separator stack and a key stack, 9,974 in all.
     * Required members come one at a time. A small mask budget refuses the
     * wide ones in the cache's probe. */
    static const char *const kinds[] = {"optional", "required", "enum"};
    static const char *const texts[] = {"{\"p12\": 1, \"p2\": 2}", "{\"p0\": 1, \"p1\"",
                                        "\"value-4"};
    for (int k = 0; k < 3; k++) {
        char *src = wide(5000, kinds[k]);
        EXPECT_EQ_INT(compile_lim(GRAMMAR_JSON_SCHEMA, src, NULL, &g, &m), 0);
        if (g) {
            EXPECT(walk_or_refused(g, texts[k], "json schema: #:"));
            if (k > 0) EXPECT(walk_bounded(g, texts[k], grammar_limits_of(g)->mask_work) >= 0);
            grammar_unref(g);
        }
        struct grammar_cache *c = grammar_cache_new(vocab(), 2);
        struct grammar_limits lim = {.mask_work = 50000};
        int rc = grammar_cache_get(c, GRAMMAR_JSON_SCHEMA, src, strlen(src), &lim, &g, &m);
        if (k == 1) {
            EXPECT_EQ_INT(rc, 0);
            if (!rc) EXPECT(walk_bounded(g, texts[k], 50000) >= 0);
            if (!rc) grammar_unref(g);
        } else {
            EXPECT(refused(rc, &m,
                           (const char *[]){"json schema: #: too costly", "(mask_work", NULL}));
        }
        grammar_cache_free(c);
        free(src);
    }
}

TEST(huge_repetition_counts)
{
    struct grammar *g;
    struct err_msg m;
    EXPECT(refused(compile_lim(GRAMMAR_REGEX, "a{1001}", NULL, &g, &m), &m,
                   (const char *[]){"repetition bound above 1000", NULL}));
    EXPECT(refused(compile_lim(GRAMMAR_EBNF, "root ::= \"a\"{1001}", NULL, &g, &m), &m,
                   (const char *[]){"repetition bound above 1000", NULL}));
    /* a{1000} a thousand times: a million characters, one stack at a time */
    EXPECT_EQ_INT(compile_lim(GRAMMAR_REGEX, "(a{1000}){1000}", NULL, &g, &m), 0);
    if (g) {
        EXPECT(walk_bounded(g, "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", 20000) >= 0);
        grammar_unref(g);
    }
    /* (a{0,1000}){0,1000} folds past the folded bound (10^6 > 4096), and
     * unfolded, n characters in have ~1000 n stacks: refused at compile */
    EXPECT(refused(compile_lim(GRAMMAR_REGEX, "(a{0,1000}){0,1000}", NULL, &g, &m), &m,
                   (const char *[]){"regex fragment '(a{0,1000}){0,1000}' at offset 0",
                                    "(max_stacks)", NULL}));
    /* bounded strings and arrays at their largest */
    const char *arr =
        "{\"type\": \"array\", \"maxItems\": 1000, \"items\": {\"type\": \"array\", "
        "\"maxItems\": 1000, \"items\": {\"type\": \"string\", \"maxLength\": 1000}}}";
    EXPECT_EQ_INT(compile_lim(GRAMMAR_JSON_SCHEMA, arr, NULL, &g, &m), 0);
    if (g) {
        EXPECT(walk_bounded(g, "[[\"abab\", \"b\"], [\"", 50000) >= 0);
        grammar_unref(g);
    }
}

TEST(compile_bounds_named)
{
    struct grammar *g;
    struct err_msg m;
    char *src = wide(200, "optional");
    struct grammar_limits lim = {.compile_work = 2000};
    EXPECT(refused(compile_lim(GRAMMAR_JSON_SCHEMA, src, &lim, &g, &m), &m,
                   (const char *[]){"json schema: #",
                                    "too costly to compile: more than 2000 work units "
                                    "(compile_work)",
                                    NULL}));
    lim = (struct grammar_limits){.max_elems = 500};
    EXPECT(refused(compile_lim(GRAMMAR_JSON_SCHEMA, src, &lim, &g, &m), &m,
                   (const char *[]){"more than 500 program elements (max_elems)", NULL}));
    lim = (struct grammar_limits){.max_rules = 20};
    EXPECT(refused(compile_lim(GRAMMAR_REGEX,
                               "(a|b)(c|d)(e|f)(g|h)(i|j)(k|l)(m|n)(o|p)(q|r)(s|t)"
                               "(a|b)(c|d)(e|f)(g|h)(i|j)(k|l)(m|n)(o|p)(q|r)(s|t)"
                               "(a|b)(c|d)(e|f)(g|h)(i|j)(k|l)(m|n)(o|p)(q|r)(s|t)",
                               &lim, &g, &m),
                   &m, (const char *[]){"more than 20 rules (max_rules)", NULL}));
    /* the defaults take the same schema */
    EXPECT_EQ_INT(compile_lim(GRAMMAR_JSON_SCHEMA, src, NULL, &g, &m), 0);
    grammar_unref(g);
    free(src);
}

TEST_MAIN()
