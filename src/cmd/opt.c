/*
 * opt.c - see opt.h. A table becomes getopt_long's two descriptions:
 *
 *   optstring  ":" + "m:" per short option with a value, "v" per flag, + "h"
 *              (the leading ':' makes a missing value return ':', not '?')
 *   longopts   one struct option per entry, val = OPT_VAL_BASE + its index,
 *              so a long option's return value finds its entry directly
 *
 * getopt_long is told to be quiet (opterr = 0): every message is ours. Each
 * long option it returns is checked against its full name, because it also
 * accepts unambiguous prefixes.
 */
#include "cmd/opt.h"

#include "base/check.h"
#include "inferd/inferd.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OPT_VAL_BASE 256 /* above every char, so long-only options never collide */

const struct cmd_choice cmd_kv_types[] = {
    {"f16", INFERD_KV_F16},
    {"bf16", INFERD_KV_BF16},
    {"f32", INFERD_KV_F32},
    {NULL, 0},
};

static const struct cmd_opt help_opt = {
    .kind = CMD_OPT_KIND_CALL0, .name = "help", .short_name = 'h', .help = "print this help"};

static bool is_option(const struct cmd_opt *o)
{
    return o->kind != CMD_OPT_KIND_HEADING && o->kind != CMD_OPT_KIND_END;
}

static bool takes_value(const struct cmd_opt *o)
{
    return o->kind != CMD_OPT_KIND_SET && o->kind != CMD_OPT_KIND_BITS &&
           o->kind != CMD_OPT_KIND_CALL0;
}

__attribute__((format(printf, 3, 4), noreturn)) static void
table_bug(const struct cmd_spec *s, const struct cmd_opt *o, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "inferd %s: option table, --%s: ", s->name, o->name ? o->name : "?");
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    abort();
}

/* The range an integer destination holds. */
static void ctype_range(enum cmd_opt_ctype t, int64_t *lo, int64_t *hi)
{
    switch (t) {
    case CMD_OPT_CTYPE_BOOL:
        *lo = 0, *hi = 1;
        break;
    case CMD_OPT_CTYPE_INT:
        *lo = INT_MIN, *hi = INT_MAX;
        break;
    case CMD_OPT_CTYPE_UINT:
        *lo = 0, *hi = UINT_MAX;
        break;
    case CMD_OPT_CTYPE_LONG:
        *lo = INT64_MIN, *hi = INT64_MAX;
        break;
    case CMD_OPT_CTYPE_ULONG:
        *lo = 0, *hi = INT64_MAX; /* values above INT64_MAX are not parsed */
        break;
    default:
        *lo = 1, *hi = 0; /* not an integer: nothing fits */
        break;
    }
}

/* Aborts on a table that could store a value its destination cannot hold,
 * or where two options share a name. */
static void table_check(const struct cmd_spec *s)
{
    for (const struct cmd_opt *o = s->opts; o->kind != CMD_OPT_KIND_END; o++) {
        if (!is_option(o)) continue;
        if (!o->name || !o->name[0]) table_bug(s, o, "no long name");
        if (!strcmp(o->name, "help") || o->short_name == 'h')
            table_bug(s, o, "-h / --help is every command's own");
        if (o->short_name && (o->short_name == ':' || o->short_name == '-' ||
                              o->short_name == '?' || (unsigned char)o->short_name > 127))
            table_bug(s, o, "bad short name");
        for (const struct cmd_opt *p = s->opts; p != o; p++)
            if (is_option(p) &&
                (!strcmp(p->name, o->name) || (o->short_name && p->short_name == o->short_name)))
                table_bug(s, o, "name taken by --%s", p->name);
        int64_t lo, hi;
        ctype_range(o->ctype, &lo, &hi);
        switch (o->kind) {
        case CMD_OPT_KIND_SET:
        case CMD_OPT_KIND_BITS:
            if (o->set < lo || o->set > hi) table_bug(s, o, "value does not fit the destination");
            if (o->kind == CMD_OPT_KIND_BITS && o->ctype != CMD_OPT_CTYPE_UINT)
                table_bug(s, o, "bits go into an unsigned");
            break;
        case CMD_OPT_KIND_INT:
            if (o->min > o->max || o->min < lo || o->max > hi)
                table_bug(s, o, "range does not fit the destination");
            break;
        case CMD_OPT_KIND_ENUM:
            if (!o->choices || !o->choices[0].name) table_bug(s, o, "no choices");
            for (const struct cmd_choice *c = o->choices; c->name; c++)
                if (c->value < lo || c->value > hi)
                    table_bug(s, o, "'%s' does not fit the destination", c->name);
            break;
        case CMD_OPT_KIND_STR:
            if (o->ctype != CMD_OPT_CTYPE_STR) table_bug(s, o, "a string goes into const char *");
            break;
        case CMD_OPT_KIND_FLOAT:
            if ((o->ctype != CMD_OPT_CTYPE_FLOAT && o->ctype != CMD_OPT_CTYPE_DOUBLE) ||
                !(o->fmin <= o->fmax))
                table_bug(s, o, "a number goes into a float or double, in a range");
            break;
        case CMD_OPT_KIND_INTS:
            if (o->ctype != CMD_OPT_CTYPE_INTS || o->min > o->max || o->min < INT32_MIN ||
                o->max > INT32_MAX)
                table_bug(s, o, "a list goes into struct cmd_ints, in an int32_t range");
            break;
        case CMD_OPT_KIND_CALL:
        case CMD_OPT_KIND_CALL0:
            if (!o->fn) table_bug(s, o, "no setter");
            break;
        default:
            table_bug(s, o, "unknown kind");
        }
    }
}

static void store_int(const struct cmd_opt *o, int64_t v)
{
    switch (o->ctype) {
    case CMD_OPT_CTYPE_BOOL:
        *(bool *)o->dst = v != 0;
        break;
    case CMD_OPT_CTYPE_INT:
        *(int *)o->dst = (int)v;
        break;
    case CMD_OPT_CTYPE_UINT:
        *(unsigned *)o->dst = (unsigned)v;
        break;
    case CMD_OPT_CTYPE_LONG:
        *(long *)o->dst = (long)v;
        break;
    case CMD_OPT_CTYPE_ULONG:
        *(unsigned long *)o->dst = (unsigned long)v;
        break;
    default:
        CHECK(!"integer option into a non-integer destination");
    }
}

/* Whole string as a decimal integer: strtoll with nothing left over. */
static bool parse_i64(const char *s, int64_t *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end) return false;
    *out = v;
    return true;
}

static int set_ints(const struct cmd_opt *o, const char *spelling, const char *s, struct err_msg *m)
{
    struct cmd_ints *dst = o->dst;
    int cap = 16, k = 0;
    int32_t *v = xmalloc(sizeof(int32_t) * (size_t)cap);
    for (const char *p = s; *p;) {
        char *end;
        errno = 0;
        long long x = strtoll(p, &end, 10);
        if (errno || end == p || x < o->min || x > o->max || (*end && *end != ',')) {
            free(v);
            return err_set(m, ERR_INVALID,
                           "%s: expected comma-separated integers in [%lld, %lld], bad entry #%d "
                           "in '%s'",
                           spelling, (long long)o->min, (long long)o->max, k + 1, s);
        }
        if (k == cap) v = xrealloc(v, sizeof(int32_t) * (size_t)(cap *= 2));
        v[k++] = (int32_t)x;
        p = *end ? end + 1 : end;
    }
    if (k == 0) {
        free(v);
        return err_set(m, ERR_INVALID, "%s: expected comma-separated integers, got '%s'", spelling,
                       s);
    }
    free(dst->v);
    dst->v = v;
    dst->n = k;
    return 0;
}

static int set_enum(const struct cmd_opt *o, const char *spelling, const char *s, struct err_msg *m)
{
    for (const struct cmd_choice *c = o->choices; c->name; c++)
        if (!strcmp(c->name, s)) {
            store_int(o, c->value);
            return 0;
        }
    /* "expected a, b or c, got 'x'" */
    char names[256] = "";
    size_t len = 0;
    for (const struct cmd_choice *c = o->choices; c->name && len < sizeof(names); c++)
        len += (size_t)snprintf(names + len, sizeof(names) - len, "%s%s",
                                c == o->choices ? ""
                                : c[1].name     ? ", "
                                                : " or ",
                                c->name);
    return err_set(m, ERR_INVALID, "%s: expected %s, got '%s'", spelling, names, s);
}

/* Stores one option's value (val is NULL for options without one). */
static int apply(const struct cmd_opt *o, const char *spelling, const char *val, struct err_msg *m)
{
    int64_t v;
    switch (o->kind) {
    case CMD_OPT_KIND_SET:
        store_int(o, o->set);
        return 0;
    case CMD_OPT_KIND_BITS:
        *(unsigned *)o->dst |= (unsigned)o->set;
        return 0;
    case CMD_OPT_KIND_STR:
        *(const char **)o->dst = val;
        return 0;
    case CMD_OPT_KIND_INT:
        if (!parse_i64(val, &v) || v < o->min || v > o->max)
            return err_set(m, ERR_INVALID, "%s: expected an integer in [%lld, %lld], got '%s'",
                           spelling, (long long)o->min, (long long)o->max, val);
        store_int(o, v);
        return 0;
    case CMD_OPT_KIND_FLOAT: {
        char *end;
        errno = 0;
        double d = strtod(val, &end);
        if (errno || end == val || *end || !(d >= o->fmin && d <= o->fmax))
            return err_set(m, ERR_INVALID, "%s: expected a number in [%g, %g], got '%s'", spelling,
                           o->fmin, o->fmax, val);
        if (o->ctype == CMD_OPT_CTYPE_FLOAT)
            *(float *)o->dst = (float)d;
        else
            *(double *)o->dst = d;
        return 0;
    }
    case CMD_OPT_KIND_ENUM:
        return set_enum(o, spelling, val, m);
    case CMD_OPT_KIND_INTS:
        return set_ints(o, spelling, val, m);
    case CMD_OPT_KIND_CALL:
    case CMD_OPT_KIND_CALL0:
        return o->fn(o->dst, spelling, val, m);
    default:
        CHECK(!"option kind without a value to apply");
        return ERR_INTERNAL;
    }
}

static void hint(const struct cmd_spec *s)
{
    fprintf(stderr, "run 'inferd %s --help' for the options\n", s->name);
}

int cmd_usage_error(const struct cmd_spec *spec, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "inferd %s: ", spec->name);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    hint(spec);
    return CMD_EXIT_USAGE;
}

int cmd_opt_operands_max(const struct cmd_spec *spec, int argc, char **argv, int argi,
                         int max_operands)
{
    if (argc - argi <= max_operands) return 0;
    return cmd_usage_error(spec, "unexpected argument '%s'", argv[argi + max_operands]);
}

int cmd_opt_exit(enum cmd_opt_result r)
{
    return r == CMD_OPT_HELP ? CMD_EXIT_OK : CMD_EXIT_USAGE;
}

/* "  -m, --model FILE" */
static int left_column(const struct cmd_opt *o, char *buf, size_t size)
{
    char meta[128] = "";
    if (takes_value(o)) {
        if (o->meta) {
            snprintf(meta, sizeof(meta), " %s", o->meta);
        } else if (o->kind == CMD_OPT_KIND_ENUM) {
            size_t len = 0;
            for (const struct cmd_choice *c = o->choices; c->name && len < sizeof(meta); c++)
                len += (size_t)snprintf(meta + len, sizeof(meta) - len, "%c%s",
                                        c == o->choices ? ' ' : '|', c->name);
        } else {
            snprintf(meta, sizeof(meta), " VALUE");
        }
    }
    char sh[8] = "    ";
    if (o->short_name) snprintf(sh, sizeof(sh), "-%c, ", o->short_name);
    return snprintf(buf, size, "  %s--%s%s", sh, o->name, meta);
}

static void print_option(FILE *out, const struct cmd_opt *o, int col)
{
    char left[256];
    int n = left_column(o, left, sizeof(left));
    fputs(left, out);
    if (n + 2 > col) {
        fputc('\n', out);
        n = 0;
    }
    if (!*o->help) fputc('\n', out);
    /* help lines, each at the help column */
    for (const char *p = o->help; *p;) {
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) : strlen(p);
        fprintf(out, "%*s%.*s\n", col - n, "", (int)len, p);
        n = 0;
        p += len + (nl ? 1 : 0);
    }
}

void cmd_opt_usage(const struct cmd_spec *spec, FILE *out)
{
    /* synopsis lines after the first line up under its text */
    fprintf(out, "usage: inferd %s ", spec->name);
    int indent = (int)strlen("usage: inferd  ") + (int)strlen(spec->name);
    for (const char *p = spec->synopsis ? spec->synopsis : "[options]"; *p; p++) {
        fputc(*p, out);
        if (*p == '\n' && p[1]) fprintf(out, "%*s", indent, "");
    }
    fputc('\n', out);
    if (spec->about) fprintf(out, "\n%s\n", spec->about);
    /* the help column: past the longest left column, within reason */
    int col = 0;
    char left[256];
    for (const struct cmd_opt *o = spec->opts; o->kind != CMD_OPT_KIND_END; o++)
        if (is_option(o) && o->help) col = MAX(col, left_column(o, left, sizeof(left)) + 2);
    col = MIN(MAX(col, left_column(&help_opt, left, sizeof(left)) + 2), 30);
    fputc('\n', out);
    if (spec->opts[0].kind != CMD_OPT_KIND_HEADING) fprintf(out, "options:\n");
    for (const struct cmd_opt *o = spec->opts; o->kind != CMD_OPT_KIND_END; o++) {
        if (o->kind == CMD_OPT_KIND_HEADING)
            fprintf(out, "%s\n", o->help);
        else if (o->help)
            print_option(out, o, col);
    }
    print_option(out, &help_opt, col);
    if (spec->epilog) fprintf(out, "\n%s", spec->epilog);
}

/* The argv element getopt_long took long option o from, just after it
 * returned: argv[optind - 1], or argv[optind - 2] when the value was the
 * next element. */
static const char *long_spelling(char **argv, const char *val)
{
    return val && val == argv[optind - 1] ? argv[optind - 2] : argv[optind - 1];
}

/* "--name" of "--name=value" into buf. */
static const char *cut_value(const char *arg, char *buf, size_t size)
{
    size_t n = strcspn(arg, "=");
    snprintf(buf, size, "%.*s", (int)MIN(n, size - 1), arg);
    return buf;
}

enum cmd_opt_result cmd_opt_parse(const struct cmd_spec *spec, int argc, char **argv, int *argi)
{
    table_check(spec);
    int n = 0;
    for (const struct cmd_opt *o = spec->opts; o->kind != CMD_OPT_KIND_END; o++)
        n++;
    /* entry i of spec->opts is long option i; help is entry n */
    struct option *lo = xcalloc((size_t)n + 2, sizeof(*lo));
    char *shorts = xmalloc((size_t)n * 2 + 4);
    size_t ns = 0;
    shorts[ns++] = ':';
    int nl = 0;
    for (int i = 0; i <= n; i++) {
        const struct cmd_opt *o = i < n ? &spec->opts[i] : &help_opt;
        if (!is_option(o)) continue;
        lo[nl++] = (struct option){o->name, takes_value(o) ? required_argument : no_argument, NULL,
                                   OPT_VAL_BASE + i};
        if (o->short_name) {
            shorts[ns++] = o->short_name;
            if (takes_value(o)) shorts[ns++] = ':';
        }
    }
    shorts[ns] = 0;

    enum cmd_opt_result r = CMD_OPT_OK;
    char spelling[128];
    opterr = 0;
    optind = 0; /* 0, not 1: glibc then forgets any earlier parse's state */
    for (int c; r == CMD_OPT_OK && (c = getopt_long(argc, argv, shorts, lo, NULL)) != -1;) {
        const struct cmd_opt *o = NULL;
        if (c == '?' || c == ':') {
            /* optopt: the short option, the long option's val, or 0 for an
             * unknown long option */
            if (optopt >= OPT_VAL_BASE)
                cut_value(argv[optind - 1], spelling, sizeof(spelling));
            else if (optopt)
                snprintf(spelling, sizeof(spelling), "-%c", optopt);
            else
                cut_value(argv[optind - 1], spelling, sizeof(spelling));
            if (c == ':')
                fprintf(stderr, "inferd %s: %s needs a value\n", spec->name, spelling);
            else if (optopt >= OPT_VAL_BASE)
                fprintf(stderr, "inferd %s: %s takes no value\n", spec->name, spelling);
            else
                fprintf(stderr, "inferd %s: unknown option '%s'\n", spec->name, spelling);
            hint(spec);
            r = CMD_OPT_USAGE;
            break;
        }
        if (c >= OPT_VAL_BASE) {
            o = c - OPT_VAL_BASE < n ? &spec->opts[c - OPT_VAL_BASE] : &help_opt;
            cut_value(long_spelling(argv, optarg), spelling, sizeof(spelling));
            if (strcmp(spelling + 2, o->name)) {
                fprintf(stderr, "inferd %s: unknown option '%s' (did you mean '--%s'?)\n",
                        spec->name, spelling, o->name);
                hint(spec);
                r = CMD_OPT_USAGE;
                break;
            }
        } else {
            for (int i = 0; i <= n && !o; i++) {
                const struct cmd_opt *p = i < n ? &spec->opts[i] : &help_opt;
                if (is_option(p) && p->short_name == c) o = p;
            }
            CHECK(o); /* getopt_long returns only the characters it was given */
            snprintf(spelling, sizeof(spelling), "-%c", c);
        }
        if (o == &help_opt) {
            cmd_opt_usage(spec, stdout);
            r = CMD_OPT_HELP;
            break;
        }
        struct err_msg m = {{0}};
        if (apply(o, spelling, takes_value(o) ? optarg : NULL, &m)) {
            fprintf(stderr, "inferd %s: %s\n", spec->name, m.text);
            r = CMD_OPT_USAGE;
        }
    }
    *argi = optind;
    free(lo);
    free(shorts);
    return r;
}

int cmd_parse_host_port(const char *spelling, const char *val, char *host, size_t cap, int *port,
                        struct err_msg *m)
{
    const char *colon = strrchr(val, ':');
    char *end;
    long p = colon ? strtol(colon + 1, &end, 10) : -1;
    if (!colon || colon == val || (size_t)(colon - val) >= cap || !colon[1] || *end || p < 0 ||
        p > 65535)
        return err_set(m, ERR_INVALID, "%s: expected HOST:PORT (port 0-65535), got '%s'", spelling,
                       val);
    snprintf(host, cap, "%.*s", (int)(colon - val), val);
    *port = (int)p;
    return 0;
}
