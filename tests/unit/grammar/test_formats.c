/*
 * test_formats.c - JSON Schema string formats, `pattern` with lookaheads,
 * and both at once (with length bounds): what zod 4 emits.
 *
 * The oracles are independent of the grammar's regexes: a hand-written
 * checker per format that follows its RFC (ref_*), plus the documented
 * narrowing where the grammar takes a subset (narrow_*); patterns are
 * checked with PCRE2 (ECMA-262 and PCRE agree on the constructs used here;
 * `$` is set to match only at the very end, as in ECMA).
 *
 *   - fixed strings: the grammar accepts exactly those the oracles accept;
 *   - random walks: a vocabulary of the 256 single bytes plus an EOS, each
 *     step a random allowed byte (or EOS where allowed) from the matcher's
 *     mask; every finished string must pass the oracles;
 *   - every string over a small alphabet up to length 5 against PCRE2, for
 *     patterns with lookaheads, inner `$` and length bounds;
 *   - the schemas zod 4 emits (data/zod4.json, made by data/zod4-gen.mjs).
 */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "test.h"

#include "base/check.h"
#include "grammar/grammar.h"

#include <ctype.h>
#include <jansson.h>
#include <pcre2.h>
#include <stdbool.h>

/* ---- reference checkers (RFC rules, written out by hand) ---- */

static bool digits(const char *s, int n)
{
    for (int i = 0; i < n; i++)
        if (!isdigit((unsigned char)s[i])) return false;
    return true;
}

static int num(const char *s, int n)
{
    int v = 0;
    for (int i = 0; i < n; i++)
        v = 10 * v + (s[i] - '0');
    return v;
}

/* RFC 3339 full-date */
static bool ref_date(const char *s, size_t n)
{
    if (n != 10 || !digits(s, 4) || s[4] != '-' || !digits(s + 5, 2) || s[7] != '-' ||
        !digits(s + 8, 2))
        return false;
    int y = num(s, 4), m = num(s + 5, 2), d = num(s + 8, 2);
    static const int mdays[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    if (m < 1 || m > 12 || d < 1) return false;
    int lim = mdays[m - 1] + (m == 2 && y % 4 == 0 && (y % 100 != 0 || y % 400 == 0));
    return d <= lim;
}

/* RFC 3339 full-time; a leap second where the time is 23:59:60 in UTC.
 * *leap: it is one; *frac: fraction digits. */
static bool ref_time(const char *s, size_t n, bool *leap, int *frac, bool *zero_offset)
{
    if (n < 9 || !digits(s, 2) || s[2] != ':' || !digits(s + 3, 2) || s[5] != ':' ||
        !digits(s + 6, 2))
        return false;
    int h = num(s, 2), mi = num(s + 3, 2), se = num(s + 6, 2);
    size_t i = 8;
    *frac = 0;
    if (s[i] == '.') {
        i++;
        while (i < n && isdigit((unsigned char)s[i]))
            i++, (*frac)++;
        if (!*frac) return false;
    }
    if (i >= n) return false;
    int oh = 0, om = 0;
    if ((s[i] == 'Z' || s[i] == 'z') && i + 1 == n) {
        *zero_offset = true;
    } else if ((s[i] == '+' || s[i] == '-') && i + 6 == n && digits(s + i + 1, 2) &&
               s[i + 3] == ':' && digits(s + i + 4, 2)) {
        oh = num(s + i + 1, 2), om = num(s + i + 4, 2);
        if (oh > 23 || om > 59) return false;
        *zero_offset = !oh && !om;
        if (s[i] == '-') oh = -oh, om = -om;
    } else {
        return false;
    }
    if (h > 23 || mi > 59 || se > 60) return false;
    *leap = se == 60;
    if (*leap) {
        int utc = ((h * 60 + mi - (oh * 60 + om)) % 1440 + 1440) % 1440;
        if (utc != 23 * 60 + 59) return false;
    }
    return true;
}

static bool ref_uuid(const char *s, size_t n)
{
    if (n != 36) return false;
    for (size_t i = 0; i < n; i++) {
        bool dash = i == 8 || i == 13 || i == 18 || i == 23;
        if (dash ? s[i] != '-' : !isxdigit((unsigned char)s[i])) return false;
    }
    return true;
}

/* dotted quad, octets 0-255 without leading zeros */
static bool ref_ipv4(const char *s, size_t n)
{
    size_t i = 0;
    for (int part = 0; part < 4; part++) {
        if (part) {
            if (i >= n || s[i] != '.') return false;
            i++;
        }
        size_t st = i;
        while (i < n && isdigit((unsigned char)s[i]) && i - st < 4)
            i++;
        size_t len = i - st;
        if (len < 1 || len > 3 || (len > 1 && s[st] == '0') || num(s + st, (int)len) > 255)
            return false;
    }
    return i == n;
}

/* RFC 4291 2.2 text forms: eight groups, or fewer around one "::", the
 * last two groups possibly a dotted quad */
static bool ref_ipv6(const char *s, size_t n)
{
    int groups = 0;
    bool dcolon = false;
    size_t i = 0;
    if (n >= 2 && s[0] == ':' && s[1] == ':')
        dcolon = true, i = 2;
    else if (n && s[0] == ':')
        return false;
    while (i < n) {
        size_t st = i;
        while (i < n && isxdigit((unsigned char)s[i]) && i - st < 5)
            i++;
        if (i < n && s[i] == '.') {
            if (!ref_ipv4(s + st, n - st)) return false;
            groups += 2;
            i = n;
            break;
        }
        if (i - st < 1 || i - st > 4) return false;
        groups++;
        if (i == n) break;
        if (s[i] != ':') return false;
        i++;
        if (i < n && s[i] == ':') {
            if (dcolon) return false;
            dcolon = true;
            i++;
            continue;
        }
        if (i == n) return false; /* a single trailing ':' */
    }
    return dcolon ? groups <= 7 : groups == 8;
}

/* RFC 1123 2.1: labels of 1-63 letters, digits, hyphens, no hyphen at
 * either end; at most 253 characters. *labels: how many. */
static bool ref_hostname(const char *s, size_t n, int *labels, int *longest_last)
{
    if (n < 1 || n > 253) return false;
    *labels = 0;
    size_t st = 0;
    for (size_t i = 0; i <= n; i++) {
        if (i < n && s[i] != '.') {
            if (!isalnum((unsigned char)s[i]) && s[i] != '-') return false;
            continue;
        }
        size_t len = i - st;
        if (len < 1 || len > 63 || s[st] == '-' || s[i - 1] == '-') return false;
        (*labels)++;
        *longest_last = (int)len;
        st = i + 1;
    }
    return true;
}

static bool is_atext(char c)
{
    return isalnum((unsigned char)c) || (c && strchr("!#$%&'*+/=?^_`{|}~-", c));
}

/* RFC 5321 dot-atom mailbox: local part at most 64, a domain of DNS
 * labels (at least two), the address at most 254 */
static bool ref_email(const char *s, size_t n, int *dom_labels, int *max_label)
{
    const char *at = memchr(s, '@', n);
    if (!at || n > 254) return false;
    size_t ln = (size_t)(at - s);
    if (ln < 1 || ln > 64 || s[0] == '.' || s[ln - 1] == '.') return false;
    for (size_t i = 0; i < ln; i++)
        if (!(is_atext(s[i]) || (s[i] == '.' && s[i + 1] != '.'))) return false;
    const char *d = at + 1;
    size_t dn = n - ln - 1;
    int last;
    if (!ref_hostname(d, dn, dom_labels, &last) || *dom_labels < 2) return false;
    *max_label = 0;
    size_t st = 0;
    for (size_t i = 0; i <= dn; i++)
        if (i == dn || d[i] == '.') *max_label = MAX(*max_label, (int)(i - st)), st = i + 1;
    return true;
}

static bool uri_unres_sub(char c)
{
    return isalnum((unsigned char)c) || (c && strchr("-._~!$&'()*+,;=", c));
}

/* pchar-like runs: the characters allowed plus %XX */
static size_t uri_run(const char *s, size_t i, size_t n, const char *extra, bool *bad)
{
    while (i < n) {
        if (s[i] == '%') {
            if (i + 2 >= n || !isxdigit((unsigned char)s[i + 1]) ||
                !isxdigit((unsigned char)s[i + 2])) {
                *bad = true;
                return i;
            }
            i += 3;
        } else if (uri_unres_sub(s[i]) || (s[i] && strchr(extra, s[i]))) {
            i++;
        } else {
            break;
        }
    }
    return i;
}

/* RFC 3986 URI = scheme ":" hier-part [ "?" query ] [ "#" fragment ] */
static bool ref_uri(const char *s, size_t n)
{
    bool bad = false;
    if (!n || !isalpha((unsigned char)s[0])) return false;
    size_t i = 1;
    while (i < n && (isalnum((unsigned char)s[i]) || s[i] == '+' || s[i] == '-' || s[i] == '.'))
        i++;
    if (i >= n || s[i] != ':') return false;
    i++;
    if (i + 1 < n && s[i] == '/' && s[i + 1] == '/') {
        i += 2;
        size_t ae = i;
        while (ae < n && s[ae] != '/' && s[ae] != '?' && s[ae] != '#')
            ae++;
        const char *a = s + i;
        size_t an = ae - i, h = 0;
        const char *atp = memchr(a, '@', an);
        if (atp) {
            size_t un = (size_t)(atp - a);
            if (uri_run(a, 0, un, ":", &bad) != un || bad) return false;
            h = un + 1;
        }
        if (h < an && a[h] == '[') {
            const char *close = memchr(a + h, ']', an - h);
            if (!close) return false;
            size_t ls = h + 1, le = (size_t)(close - a);
            bool ok = ref_ipv6(a + ls, le - ls);
            if (!ok && le > ls + 2 && (a[ls] == 'v' || a[ls] == 'V')) {
                size_t j = ls + 1;
                while (j < le && isxdigit((unsigned char)a[j]))
                    j++;
                if (j > ls + 1 && j < le && a[j] == '.') {
                    size_t k = j + 1;
                    while (k < le && (uri_unres_sub(a[k]) || a[k] == ':'))
                        k++;
                    ok = k == le && k > j + 1;
                }
            }
            if (!ok) return false;
            h = le + 1;
        } else {
            h = uri_run(a, h, an, "", &bad);
            if (bad) return false;
        }
        if (h < an) {
            if (a[h] != ':') return false;
            for (size_t j = h + 1; j < an; j++)
                if (!isdigit((unsigned char)a[j])) return false;
        }
        i = ae;
        /* path-abempty */
        while (i < n && s[i] == '/') {
            i = uri_run(s, i + 1, n, ":@", &bad);
            if (bad) return false;
        }
    } else {
        size_t st = i;
        if (i < n && s[i] == '/') {
            /* path-absolute: not "//" */
            i = uri_run(s, i + 1, n, ":@", &bad);
            if (bad || (i == st + 1 && i < n && s[i] == '/')) return false;
        } else {
            i = uri_run(s, i, n, ":@", &bad);
            if (bad) return false;
        }
        while (i < n && s[i] == '/' && i > st) {
            i = uri_run(s, i + 1, n, ":@", &bad);
            if (bad) return false;
        }
    }
    if (i < n && s[i] == '?') {
        i = uri_run(s, i + 1, n, ":@/?", &bad);
        if (bad) return false;
    }
    if (i < n && s[i] == '#') {
        i = uri_run(s, i + 1, n, ":@/?", &bad);
        if (bad) return false;
    }
    return i == n;
}

/* The RFC says yes (ref) and the grammar's subset says yes (narrow). */
struct verdict {
    bool ref;    /* valid by the RFC */
    bool narrow; /* and within the subset the grammar generates */
};

static struct verdict check_format(const char *f, const char *s, size_t n)
{
    struct verdict v = {false, false};
    bool leap = false, zero = false;
    int frac = 0, labels = 0, last = 0, maxl = 0;
    if (!strcmp(f, "date")) {
        v.ref = v.narrow = ref_date(s, n);
    } else if (!strcmp(f, "time")) {
        v.ref = ref_time(s, n, &leap, &frac, &zero);
        v.narrow = v.ref && frac <= 9 && (!leap || (zero && !memcmp(s, "23:59:60", 8)));
    } else if (!strcmp(f, "date-time")) {
        v.ref = n > 11 && (s[10] == 'T' || s[10] == 't') && ref_date(s, 10) &&
                ref_time(s + 11, n - 11, &leap, &frac, &zero);
        v.narrow = v.ref && frac <= 9 &&
                   (!leap || (zero && !memcmp(s + 11, "23:59:60", 8) &&
                              (!memcmp(s + 4, "-06-30", 6) || !memcmp(s + 4, "-12-31", 6))));
    } else if (!strcmp(f, "uuid")) {
        v.ref = v.narrow = ref_uuid(s, n);
    } else if (!strcmp(f, "ipv4")) {
        v.ref = v.narrow = ref_ipv4(s, n);
    } else if (!strcmp(f, "ipv6")) {
        v.ref = v.narrow = ref_ipv6(s, n);
    } else if (!strcmp(f, "hostname")) {
        v.ref = ref_hostname(s, n, &labels, &last);
        v.narrow = v.ref && labels <= 4 && (labels < 4 || last <= 61);
    } else if (!strcmp(f, "email")) {
        v.ref = ref_email(s, n, &labels, &maxl);
        if (v.ref) {
            const char *d = memchr(s, '@', n) + 1;
            size_t dn = n - (size_t)(d - s);
            int lastl = 0;
            size_t st = 0;
            for (size_t i = 0; i <= dn; i++)
                if (i == dn || d[i] == '.') lastl = (int)(i - st), st = i + 1;
            v.narrow = labels <= 4 && (labels != 4 || maxl <= 46) &&
                       (labels != 3 || (maxl <= 63 && lastl <= 61));
        }
    } else if (!strcmp(f, "uri")) {
        v.ref = v.narrow = ref_uri(s, n);
    } else {
        CHECK(!"unknown format in test");
    }
    return v;
}

/* ---- grammar helpers ---- */

static struct grammar *compile_schema(const char *src, struct err_msg *m)
{
    struct grammar *g = NULL;
    int rc = grammar_compile(GRAMMAR_JSON_SCHEMA, src, strlen(src), &g, m);
    return rc ? NULL : g;
}

static bool accepts(struct grammar *g, const char *json, size_t n)
{
    struct grammar_matcher *m = grammar_matcher_new(g, NULL);
    bool ok = grammar_matcher_accept_bytes(m, json, n) && grammar_matcher_is_accepting(m);
    grammar_matcher_free(m);
    return ok;
}

/* The string s as a JSON string literal (malloc'd). */
static char *json_quote(const char *s, size_t n)
{
    json_t *j = json_stringn(s, n);
    char *out = json_dumps(j, JSON_ENCODE_ANY);
    json_decref(j);
    return out;
}

static bool accepts_str(struct grammar *g, const char *s, size_t n)
{
    char *q = json_quote(s, n);
    bool ok = accepts(g, q, strlen(q));
    free(q);
    return ok;
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t rnd(void)
{
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(rng >> 33);
}

/* Single bytes and an EOS (id 256). */
static struct grammar_vocab *byte_vocab(void)
{
    static char store[256];
    const char *bytes[257];
    uint32_t len[257];
    uint8_t cls[257];
    for (int c = 0; c < 256; c++) {
        store[c] = (char)c;
        bytes[c] = store + c, len[c] = 1, cls[c] = GRAMMAR_TOKEN_NORMAL;
    }
    bytes[256] = "</s>", len[256] = 4, cls[256] = GRAMMAR_TOKEN_CONTROL;
    int32_t eos = 256;
    return grammar_vocab_new(257, bytes, len, cls, &eos, 1);
}

/* A random walk through g: each step a random allowed byte, or EOS (taken
 * with probability 1/8 where allowed, always after 400 bytes). Returns the
 * length written to out (< cap), or -1 if the walk did not finish. */
static int walk(struct grammar *g, const struct grammar_vocab *v, char *out, int cap)
{
    struct grammar_matcher *m = grammar_matcher_new(g, v);
    uint64_t mask[5];
    int n = 0, rc = -1;
    for (int step = 0; step < cap - 1; step++) {
        int n_allowed = grammar_matcher_fill_mask(m, mask);
        if (!n_allowed) break;
        bool eos = (mask[4] & 1) != 0;
        if (eos && (n > 400 || rnd() % 8 == 0 || n_allowed == 1)) {
            rc = n;
            break;
        }
        int pick = (int)(rnd() % (unsigned)(n_allowed - eos)), t = -1;
        for (int c = 0; c < 256; c++)
            if ((mask[c >> 6] >> (c & 63)) & 1 && pick-- == 0) {
                t = c;
                break;
            }
        CHECK(t >= 0);
        CHECK(grammar_matcher_accept_token(m, t));
        out[n++] = (char)t;
    }
    grammar_matcher_free(m);
    if (rc >= 0) out[rc] = 0;
    return rc;
}

/* The JSON string text[0..n) decoded (malloc'd, *len set), or NULL. */
static char *json_unquote(const char *text, size_t n, size_t *len)
{
    json_error_t e;
    json_t *j = json_loadb(text, n, JSON_DECODE_ANY, &e);
    if (!j || !json_is_string(j)) {
        json_decref(j);
        return NULL;
    }
    *len = json_string_length(j);
    char *s = xmalloc(*len + 1);
    memcpy(s, json_string_value(j), *len + 1);
    json_decref(j);
    return s;
}

/* ---- PCRE2 as the pattern oracle ---- */

static pcre2_code *pcre_compile(const char *pattern)
{
    int err;
    PCRE2_SIZE off;
    pcre2_compile_context *cc = pcre2_compile_context_create(NULL);
    pcre2_set_newline(cc, PCRE2_NEWLINE_ANYCRLF);
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED,
                                   PCRE2_DOLLAR_ENDONLY | PCRE2_UTF, &err, &off, cc);
    pcre2_compile_context_free(cc);
    if (!re) fprintf(stderr, "  pcre2 cannot compile '%s' (offset %zu)\n", pattern, (size_t)off);
    CHECK(re);
    return re;
}

static bool pcre_search(pcre2_code *re, const char *s, size_t n)
{
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(re, NULL);
    int rc = pcre2_match(re, (PCRE2_SPTR)s, n, 0, 0, md, NULL);
    pcre2_match_data_free(md);
    return rc >= 0;
}

static size_t utf8_chars(const char *s, size_t n)
{
    size_t c = 0;
    for (size_t i = 0; i < n; i++)
        c += ((unsigned char)s[i] & 0xC0) != 0x80;
    return c;
}

/* ---- fixed strings per format ---- */

struct fcase {
    const char *format;
    const char *s;
    int expect; /* 1: the grammar accepts; 0: rejects */
};

static const struct fcase CASES[] = {
    {"date", "2024-02-29", 1},
    {"date", "2000-02-29", 1},
    {"date", "1900-02-29", 0},
    {"date", "2023-02-29", 0},
    {"date", "2023-04-31", 0},
    {"date", "2023-12-31", 1},
    {"date", "2023-13-01", 0},
    {"date", "2023-00-10", 0},
    {"date", "0000-01-01", 1},
    {"date", "2023-1-01", 0},
    {"time", "23:59:59Z", 1},
    {"time", "00:00:00.123456789+05:30", 1},
    {"time", "12:00:00.1234567890Z", 0}, /* valid, but more than 9 fraction digits */
    {"time", "24:00:00Z", 0},
    {"time", "12:60:00Z", 0},
    {"time", "12:00:00", 0},
    {"time", "12:00Z", 0},
    {"time", "23:59:60Z", 1},
    {"time", "23:59:60.5-00:00", 1},
    {"time", "15:59:60-08:00", 0}, /* a valid leap second, outside the subset */
    {"time", "22:59:60Z", 0},
    {"time", "12:00:00+24:00", 0},
    {"date-time", "2024-01-15T10:30:00Z", 1},
    {"date-time", "2024-01-15t10:30:00.5z", 1},
    {"date-time", "2024-01-15 10:30:00Z", 0},
    {"date-time", "2024-02-30T10:30:00Z", 0},
    {"date-time", "1998-12-31T23:59:60Z", 1},
    {"date-time", "1998-11-30T23:59:60Z", 0}, /* a leap second on a date without one */
    {"date-time", "2024-01-15T10:30Z", 0},
    {"uuid", "123e4567-e89b-12d3-a456-426614174000", 1},
    {"uuid", "123E4567-E89B-12D3-A456-426614174000", 1},
    {"uuid", "123e4567e89b12d3a456426614174000", 0},
    {"uuid", "123e4567-e89b-12d3-a456-42661417400g", 0},
    {"ipv4", "192.168.0.1", 1},
    {"ipv4", "0.0.0.0", 1},
    {"ipv4", "255.255.255.255", 1},
    {"ipv4", "256.1.1.1", 0},
    {"ipv4", "01.2.3.4", 0},
    {"ipv4", "1.2.3", 0},
    {"ipv4", "1.2.3.4.5", 0},
    {"ipv6", "::", 1},
    {"ipv6", "::1", 1},
    {"ipv6", "2001:db8::8a2e:370:7334", 1},
    {"ipv6", "2001:0db8:0000:0000:0000:8a2e:0370:7334", 1},
    {"ipv6", "1:2:3:4:5:6:7::", 1},
    {"ipv6", "::ffff:192.168.1.1", 1},
    {"ipv6", "1:2:3:4:5:6:1.2.3.4", 1},
    {"ipv6", "1:2:3:4:5:6:7:8:9", 0},
    {"ipv6", "1::2::3", 0},
    {"ipv6", "12345::", 0},
    {"ipv6", ":1:2:3:4:5:6:7", 0},
    {"ipv6", "1:2:3:4:5:6:7", 0},
    {"ipv6", "::256.1.1.1", 0},
    {"hostname", "example.com", 1},
    {"hostname", "a", 1},
    {"hostname", "1host", 1},
    {"hostname", "xn--bcher-kva.example", 1},
    {"hostname", "-bad.com", 0},
    {"hostname", "bad-.com", 0},
    {"hostname", "a..b", 0},
    {"hostname", "a_b.com", 0},
    {"hostname", "a.b.c.d.e", 0}, /* valid, five labels: outside the subset */
    {"email", "joe@example.com", 1},
    {"email", "first.last+tag@mail.example.co", 1},
    {"email", "o'neil@x.io", 1},
    {"email", "a@b.c.d.e.f", 0}, /* valid, five domain labels: outside the subset */
    {"email", ".joe@example.com", 0},
    {"email", "jo..e@example.com", 0},
    {"email", "joe.@example.com", 0},
    {"email", "joe@example", 0},
    {"email", "joe@-example.com", 0},
    {"email", "joe@@example.com", 0},
    {"email", "jo e@example.com", 0},
    {"uri", "https://example.com/path?q=1#frag", 1},
    {"uri", "mailto:joe@example.com", 1},
    {"uri", "urn:isbn:0451450523", 1},
    {"uri", "http://[2001:db8::1]:8080/", 1},
    {"uri", "http://user:pw@host:80/a%20b", 1},
    {"uri", "file:///etc/hosts", 1},
    {"uri", "x:", 1},
    {"uri", "//example.com/", 0},
    {"uri", "http://exa mple.com", 0},
    {"uri", "http://example.com/%zz", 0},
    {"uri", "1http://example.com", 0},
    {"uri", "http://[::1/", 0},
    {"uri", "http://host:8a/", 0},
};

TEST(formats_fixed_strings)
{
    const char *prev = NULL;
    struct grammar *g = NULL;
    for (size_t i = 0; i < ARRAY_LEN(CASES); i++) {
        const struct fcase *c = &CASES[i];
        if (!prev || strcmp(prev, c->format)) {
            if (g) grammar_unref(g);
            char src[128];
            snprintf(src, sizeof(src), "{\"type\":\"string\",\"format\":\"%s\"}", c->format);
            struct err_msg m = {{0}};
            g = compile_schema(src, &m);
            if (!g) fprintf(stderr, "  %s: %s\n", c->format, m.text);
            EXPECT(g != NULL);
            prev = c->format;
        }
        if (!g) continue;
        size_t n = strlen(c->s);
        struct verdict v = check_format(c->format, c->s, n);
        /* the oracle agrees with the case, so the case list is right */
        if (v.narrow != (c->expect == 1))
            fprintf(stderr, "  oracle: %s '%s' ref %d narrow %d\n", c->format, c->s, v.ref,
                    v.narrow);
        EXPECT_EQ_INT(v.narrow, c->expect);
        bool got = accepts_str(g, c->s, n);
        if (got != (c->expect == 1))
            fprintf(stderr, "  %s '%s': grammar %d, expected %d\n", c->format, c->s, got,
                    c->expect);
        EXPECT_EQ_INT(got, c->expect);
    }
    if (g) grammar_unref(g);
    /* a long valid email at the limits: 64 + 1 + 63.63.61 = 254 */
    char buf[300];
    memset(buf, 'a', 64);
    buf[64] = '@';
    memset(buf + 65, 'b', 63);
    buf[128] = '.';
    memset(buf + 129, 'c', 63);
    buf[192] = '.';
    memset(buf + 193, 'd', 61);
    buf[254] = 0;
    struct err_msg m = {{0}};
    g = compile_schema("{\"type\":\"string\",\"format\":\"email\"}", &m);
    EXPECT(g && accepts_str(g, buf, 254));
    EXPECT(check_format("email", buf, 254).narrow);
    buf[0] = 'a', buf[63] = 'a';
    char longer[300];
    longer[0] = 'x';
    memcpy(longer + 1, buf, 255);
    EXPECT(g && !accepts_str(g, longer, 255)); /* a 65-character local part */
    if (g) grammar_unref(g);
}

/* Every string a random walk finishes is valid by the RFC. */
TEST(formats_random_walks_are_valid)
{
    static const char *formats[] = {"date",     "time", "date-time", "uuid", "email",
                                    "hostname", "ipv4", "ipv6",      "uri"};
    struct grammar_vocab *v = byte_vocab();
    char out[2048];
    for (size_t f = 0; f < ARRAY_LEN(formats); f++) {
        char src[128];
        snprintf(src, sizeof(src), "{\"type\":\"string\",\"format\":\"%s\"}", formats[f]);
        struct err_msg m = {{0}};
        struct grammar *g = compile_schema(src, &m);
        EXPECT(g != NULL);
        if (!g) continue;
        int done = 0, bad = 0;
        for (int w = 0; w < 300; w++) {
            int n = walk(g, v, out, (int)sizeof(out));
            if (n < 0) continue;
            done++;
            size_t len;
            char *s = json_unquote(out, (size_t)n, &len);
            struct verdict vd = s ? check_format(formats[f], s, len) : (struct verdict){0};
            if (!vd.ref || !vd.narrow) {
                if (bad++ < 3)
                    fprintf(stderr, "  %s walk gave '%.*s' (ref %d)\n", formats[f], n, out, vd.ref);
            }
            free(s);
        }
        EXPECT_EQ_INT(bad, 0);
        EXPECT(done >= 250);
        grammar_unref(g);
    }
    grammar_vocab_free(v);
}

/* ---- patterns against PCRE2, exhaustively over short strings ---- */

static const char *const PATTERNS[] = {
    "^(?!\\.)(?!.*\\.\\.)[a.]*b$",
    "^(?=.{2,4}$)[ab.]*$",
    "a(?=b)",
    "(?!a)b",
    "^(?:a(?!b)|b)+$",
    "^(?=(?!.*aa).*b).+$",
    "a$|^b",
    "(a$|b)a",
    "^a{2}(?=.)",
    "^(?!a)",
    "b(?!$)",
    "^[ab]*(?=\\.)\\.a?$",
};

static void all_strings(void (*fn)(const char *s, size_t n, void *arg), void *arg)
{
    static const char alpha[] = "ab.";
    char s[8];
    for (int len = 0; len <= 5; len++) {
        int total = 1;
        for (int i = 0; i < len; i++)
            total *= 3;
        for (int code = 0; code < total; code++) {
            int c = code;
            for (int i = 0; i < len; i++, c /= 3)
                s[i] = alpha[c % 3];
            s[len] = 0;
            fn(s, (size_t)len, arg);
        }
    }
}

struct pcmp {
    struct grammar *g;  /* the schema */
    struct grammar *gr; /* the same pattern as GRAMMAR_REGEX, or NULL */
    pcre2_code *re;     /* PCRE2 (search) */
    pcre2_code *whole;  /* PCRE2 anchored at both ends, for gr */
    int min, max;       /* length bounds (max -1: none) */
    int bad;            /* disagreements */
    const char *what;   /* for messages */
};

static void cmp_one(const char *s, size_t n, void *arg)
{
    struct pcmp *c = arg;
    bool want = pcre_search(c->re, s, n) && (int)utf8_chars(s, n) >= c->min &&
                (c->max < 0 || (int)utf8_chars(s, n) <= c->max);
    bool got = accepts_str(c->g, s, n);
    if (got != want && c->bad++ < 3)
        fprintf(stderr, "  %s on '%s': grammar %d, pcre2 %d\n", c->what, s, got, want);
    if (c->gr) {
        struct grammar_matcher *m = grammar_matcher_new(c->gr, NULL);
        bool ok = grammar_matcher_accept_bytes(m, s, n) && grammar_matcher_is_accepting(m);
        grammar_matcher_free(m);
        bool w2 = pcre_search(c->whole, s, n);
        if (ok != w2 && c->bad++ < 3)
            fprintf(stderr, "  regex %s on '%s': grammar %d, pcre2 %d\n", c->what, s, ok, w2);
    }
}

TEST(patterns_with_lookaheads_match_pcre2)
{
    for (size_t i = 0; i < ARRAY_LEN(PATTERNS); i++)
        for (int bounds = 0; bounds < 2; bounds++) {
            json_t *sch = json_pack("{s:s, s:s}", "type", "string", "pattern", PATTERNS[i]);
            if (bounds) {
                json_object_set_new(sch, "minLength", json_integer(1));
                json_object_set_new(sch, "maxLength", json_integer(3));
            }
            char *src = json_dumps(sch, 0);
            json_decref(sch);
            struct err_msg m = {{0}};
            struct pcmp c = {.g = compile_schema(src, &m), .what = PATTERNS[i]};
            if (!c.g) fprintf(stderr, "  %s: %s\n", src, m.text);
            EXPECT(c.g != NULL);
            free(src);
            if (!c.g) continue;
            c.min = bounds ? 1 : 0;
            c.max = bounds ? 3 : -1;
            c.re = pcre_compile(PATTERNS[i]);
            if (!bounds) {
                /* the same regex as a whole-output grammar: anchors optional */
                char whole[256];
                snprintf(whole, sizeof(whole), "^(?:%s)$", PATTERNS[i]);
                c.whole = pcre_compile(whole);
                struct grammar *gr = NULL;
                int rc = grammar_compile(GRAMMAR_REGEX, PATTERNS[i], strlen(PATTERNS[i]), &gr, &m);
                /* a whole-output regex with anchors inside alternatives
                 * differs from ^(?:...)$ only where ^ is not at an edge */
                c.gr = rc == 0 && !strchr(PATTERNS[i] + 1, '^') ? gr : NULL;
                if (!c.gr && gr) grammar_unref(gr);
            }
            all_strings(cmp_one, &c);
            EXPECT_EQ_INT(c.bad, 0);
            grammar_unref(c.g);
            if (c.gr) grammar_unref(c.gr);
            pcre2_code_free(c.re);
            if (c.whole) pcre2_code_free(c.whole);
        }
}

TEST(pattern_errors_and_budget)
{
    struct err_msg m = {{0}};
    struct grammar *g = NULL;
    const char *lb = "{\"type\":\"string\",\"pattern\":\"a(?<=b)\"}";
    EXPECT(grammar_compile(GRAMMAR_JSON_SCHEMA, lb, strlen(lb), &g, &m) == ERR_INVALID);
    EXPECT(strstr(m.text, "#/pattern") && strstr(m.text, "lookbehind") &&
           strstr(m.text, "offset 1"));
    const char *br = "{\"type\":\"string\",\"pattern\":\"(a)x\\\\1\"}";
    EXPECT(grammar_compile(GRAMMAR_JSON_SCHEMA, br, strlen(br), &g, &m) == ERR_INVALID);
    EXPECT(strstr(m.text, "backreferences") && strstr(m.text, "offset 4"));
    /* the product of a counting lookahead and a pattern whose states it
     * cannot discharge exceeds the state budget */
    const char *big = "{\"type\":\"object\",\"properties\":{\"h\":{\"type\":\"string\","
                      "\"pattern\":\"^(?=.{1,900}$)([a-z]{1,9}\\\\.)+[a-z]{1,9}$\"}}}";
    EXPECT(grammar_compile(GRAMMAR_JSON_SCHEMA, big, strlen(big), &g, &m) == ERR_INVALID);
    EXPECT(strstr(m.text, "#/properties/h/pattern") && strstr(m.text, "automaton needs more"));
    /* an unknown format alone is an error; beside a pattern (zod's e164,
     * cuid, ...) the pattern alone constrains */
    const char *bare = "{\"type\":\"string\",\"format\":\"e164\"}";
    EXPECT(grammar_compile(GRAMMAR_JSON_SCHEMA, bare, strlen(bare), &g, &m) == ERR_INVALID);
    EXPECT(strstr(m.text, "#/format") && strstr(m.text, "unsupported format"));
    const char *e164 =
        "{\"type\":\"string\",\"format\":\"e164\",\"pattern\":\"^\\\\+[1-9]\\\\d{6,14}$\"}";
    g = compile_schema(e164, &m);
    EXPECT(g != NULL);
    if (g) {
        EXPECT(accepts_str(g, "+4915112345678", 14));
        EXPECT(!accepts_str(g, "4915112345678", 13));
        EXPECT(!accepts_str(g, "+0123456", 8));
        grammar_unref(g);
    }
}

/* maxLength cuts a format where it is shorter; a format's own bound makes a
 * longer maxLength free (no counting states). */
TEST(formats_with_length_bounds)
{
    struct err_msg m = {{0}};
    struct grammar *g = compile_schema(
        "{\"type\":\"string\",\"format\":\"email\",\"minLength\":8,\"maxLength\":10}", &m);
    EXPECT(g != NULL);
    if (g) {
        EXPECT(accepts_str(g, "ab@cd.com", 9));
        EXPECT(accepts_str(g, "a@cd.com", 8)); /* 8 characters: in range */
        EXPECT(!accepts_str(g, "a@c.co", 6));
        EXPECT(!accepts_str(g, "abcd@cd.com", 11));
        grammar_unref(g);
    }
    g = compile_schema("{\"type\":\"string\",\"format\":\"uuid\",\"maxLength\":40}", &m);
    EXPECT(g && accepts_str(g, "123e4567-e89b-12d3-a456-426614174000", 36));
    if (g) grammar_unref(g);
    g = compile_schema("{\"type\":\"string\",\"format\":\"uuid\",\"maxLength\":35}", &m);
    EXPECT(g == NULL); /* no uuid is that short: nothing matches the root */
    if (g) grammar_unref(g);
    /* the count is of decoded characters: an escape is one, a raw 2-byte
     * UTF-8 character is one */
    g = compile_schema("{\"type\":\"string\",\"pattern\":\"^[^a]*$\",\"maxLength\":2}", &m);
    EXPECT(g && accepts(g, "\"\\\"\\n\"", 6) && accepts(g, "\"\\u0001\xc3\xa9\"", 10) &&
           accepts(g, "\"\xc3\xa9\xc3\xa9\"", 6) && !accepts(g, "\"\xc3\xa9\xc3\xa9x\"", 7) &&
           !accepts(g, "\"ab\"", 4) && !accepts(g, "\"\n\"", 3));
    if (g) grammar_unref(g);
    /* an unbounded format under maxLength: the minimal DFA times a count */
    g = compile_schema("{\"type\":\"string\",\"format\":\"uri\",\"maxLength\":20}", &m);
    EXPECT(g && accepts_str(g, "http://a.example/b?c", 20) &&
           !accepts_str(g, "http://a.example/b?cd", 21) && accepts_str(g, "x:", 2));
    if (g) grammar_unref(g);
    struct grammar *g2 = NULL;
    const char *big = "{\"type\":\"string\",\"format\":\"uri\",\"maxLength\":1000}";
    EXPECT(grammar_compile(GRAMMAR_JSON_SCHEMA, big, strlen(big), &g2, &m) == ERR_INVALID);
    EXPECT(strstr(m.text, "#/format") && strstr(m.text, "length bounds need more than") &&
           strstr(m.text, "maxLength"));
    g = compile_schema(
        "{\"type\":\"string\",\"pattern\":\"^[a-z]+$\",\"minLength\":2,\"maxLength\":4}", &m);
    EXPECT(g && !accepts_str(g, "a", 1) && accepts_str(g, "ab", 2) && accepts_str(g, "abcd", 4) &&
           !accepts_str(g, "abcde", 5) && !accepts_str(g, "aB", 2));
    if (g) grammar_unref(g);
}

/* ---- the schemas zod 4 emits ---- */

struct zsample {
    const char *schema; /* key in data/zod4.json ("zod 4.6.7/email") */
    const char *s;      /* a string */
    int expect;         /* 1 accepted, 0 rejected */
    const char *why;    /* which side rejects */
};

static const struct zsample ZSAMPLES[] = {
    {"zod 4.6.7/email", "joe@example.com", 1, ""},
    {"zod 4.6.7/email", "joe@example.c0m", 0, "format yes, pattern no (letters-only TLD)"},
    {"zod 4.6.7/email", "joe@exa-.com", 0, "pattern yes, format no (label ends in '-')"},
    {"zod 4.6.7/email", "j!oe@example.com", 0, "format yes, pattern no ('!')"},
    {"zod 4.0.0/email", "jo..e@example.com", 0, "both no (the lookahead (?!.*\\.\\.))"},
    {"zod 4.0.0/email", ".joe@example.com", 0, "both no (the lookahead (?!\\.))"},
    {"zod 4.0.0/email", "jo.e@example.com", 1, ""},
    {"zod 4.6.7/uuid", "123e4567-e89b-12d3-a456-426614174000", 1, ""},
    {"zod 4.6.7/uuid", "123e4567-e89b-92d3-a456-426614174000", 0, "format yes, pattern no (v9)"},
    {"zod 4.6.7/uuid", "ffffffff-ffff-ffff-ffff-ffffffffffff", 1, ""},
    {"zod 4.6.7/datetime", "2024-01-15T10:30:00Z", 1, ""},
    {"zod 4.6.7/datetime", "2024-01-15T10:30:00+01:00", 0, "format yes, pattern no (offset)"},
    {"zod 4.6.7/datetime", "2024-01-15T10:30:00.1234567890Z", 0, "pattern yes, format subset no"},
    {"zod 4.0.0/datetime", "2024-01-15T10:30Z", 0, "pattern yes, format no (no seconds)"},
    {"zod 4.6.7/datetime_offset", "2024-01-15T10:30:00+01:00", 1, ""},
    {"zod 4.6.7/hostname", "example.com", 1, ""},
    {"zod 4.6.7/hostname", "example.com.", 0, "pattern yes, format no (trailing dot)"},
    {"zod 4.6.7/ipv6", "::ffff:1.2.3.4", 0, "format yes, pattern no (dotted quad)"},
    {"zod 4.6.7/ipv6", "2001:db8::1", 1, ""},
    {"zod 4.6.7/ipv4", "10.0.0.255", 1, ""},
    {"zod 4.6.7/url", "https://example.com/", 1, ""},
    {"zod 4.6.7/email_max", "joe@example.com", 1, ""},
};

static json_t *zod_doc(void)
{
    const char *src = getenv("INFERD_SRC");
    char path[1024];
    snprintf(path, sizeof(path), "%s/tests/unit/grammar/data/zod4.json", src ? src : ".");
    json_error_t e;
    json_t *doc = json_load_file(path, 0, &e);
    if (!doc) fprintf(stderr, "  cannot load %s: %s\n", path, e.text);
    return doc;
}

static json_t *zod_schema(json_t *doc, const char *key)
{
    char ver[32];
    const char *slash = strchr(key, '/');
    snprintf(ver, sizeof(ver), "%.*s", (int)(slash - key), key);
    return json_object_get(json_object_get(doc, ver), slash + 1);
}

/* The oracles' verdict on s for a schema of type string with optional
 * format, pattern and maxLength. */
static bool zod_oracle(json_t *sch, const char *s, size_t n, bool narrow)
{
    json_t *f = json_object_get(sch, "format"), *p = json_object_get(sch, "pattern");
    json_t *mx = json_object_get(sch, "maxLength");
    if (f) {
        struct verdict v = check_format(json_string_value(f), s, n);
        if (!(narrow ? v.narrow : v.ref)) return false;
    }
    if (p) {
        pcre2_code *re = pcre_compile(json_string_value(p));
        bool ok = pcre_search(re, s, n);
        pcre2_code_free(re);
        if (!ok) return false;
    }
    return !mx || (json_int_t)utf8_chars(s, n) <= json_integer_value(mx);
}

TEST(zod4_schemas)
{
    json_t *doc = zod_doc();
    EXPECT(doc != NULL);
    if (!doc) return;
    for (size_t i = 0; i < ARRAY_LEN(ZSAMPLES); i++) {
        const struct zsample *z = &ZSAMPLES[i];
        json_t *sch = zod_schema(doc, z->schema);
        EXPECT(sch != NULL);
        if (!sch) continue;
        char *src = json_dumps(sch, 0);
        struct err_msg m = {{0}};
        struct grammar *g = compile_schema(src, &m);
        free(src);
        if (!g) fprintf(stderr, "  %s: %s\n", z->schema, m.text);
        EXPECT(g != NULL);
        if (!g) continue;
        size_t n = strlen(z->s);
        EXPECT_EQ_INT(zod_oracle(sch, z->s, n, true), z->expect);
        bool got = accepts_str(g, z->s, n);
        if (got != (z->expect == 1))
            fprintf(stderr, "  %s '%s': grammar %d (%s)\n", z->schema, z->s, got, z->why);
        EXPECT_EQ_INT(got, z->expect);
        grammar_unref(g);
    }
    /* random walks through every schema: each string passes the format's
     * RFC check and zod's pattern (PCRE2) */
    struct grammar_vocab *v = byte_vocab();
    char out[2048];
    const char *ver;
    json_t *group;
    json_object_foreach(doc, ver, group)
    {
        const char *name;
        json_t *sch;
        json_object_foreach(group, name, sch)
        {
            if (json_object_get(sch, "properties")) continue; /* the object: below */
            char *src = json_dumps(sch, 0);
            struct err_msg m = {{0}};
            struct grammar *g = compile_schema(src, &m);
            free(src);
            if (!g) fprintf(stderr, "  %s/%s: %s\n", ver, name, m.text);
            EXPECT(g != NULL);
            if (!g) continue;
            int done = 0, bad = 0;
            for (int w = 0; w < 100; w++) {
                int n = walk(g, v, out, (int)sizeof(out));
                if (n < 0) continue;
                done++;
                size_t len;
                char *s = json_unquote(out, (size_t)n, &len);
                if (!s || !zod_oracle(sch, s, len, false)) {
                    if (bad++ < 3) fprintf(stderr, "  %s/%s walk gave %.*s\n", ver, name, n, out);
                }
                free(s);
            }
            EXPECT_EQ_INT(bad, 0);
            EXPECT(done >= 80);
            grammar_unref(g);
        }
    }
    /* the object: each field valid */
    json_t *obj = zod_schema(doc, "zod 4.6.7/object");
    char *src = json_dumps(obj, 0);
    struct err_msg m = {{0}};
    struct grammar *g = compile_schema(src, &m);
    free(src);
    EXPECT(g != NULL);
    int bad = 0, done = 0;
    for (int w = 0; g && w < 100; w++) {
        int n = walk(g, v, out, (int)sizeof(out));
        if (n < 0) continue;
        done++;
        json_error_t e;
        json_t *val = json_loadb(out, (size_t)n, 0, &e);
        const char *key;
        json_t *field;
        bool ok = val != NULL;
        json_object_foreach(val, key, field)
        {
            json_t *fs = json_object_get(json_object_get(obj, "properties"), key);
            ok &= fs && json_is_string(field) &&
                  zod_oracle(fs, json_string_value(field), json_string_length(field), false);
        }
        ok &= val && json_object_size(val) == 3;
        if (!ok && bad++ < 3) fprintf(stderr, "  object walk gave %.*s\n", n, out);
        json_decref(val);
    }
    EXPECT_EQ_INT(bad, 0);
    EXPECT(done >= 80);
    if (g) grammar_unref(g);
    grammar_vocab_free(v);
    json_decref(doc);
}

TEST_MAIN()
