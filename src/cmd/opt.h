/*
 * opt.h - a subcommand's options as one table: getopt_long parses them, the
 * usage text is generated from them, and numbers, names and lists are
 * validated by shared code, so every subcommand words its errors alike.
 *
 * A table is an array of struct cmd_opt ending with CMD_OPT_END. An entry
 * names a long option (and a short one or 0), the kind of its value, where
 * the value goes, and its help text:
 *
 *   struct serve_config c;   (defaults set before parsing)
 *   const struct cmd_opt opts[] = {
 *       CMD_OPT_STR("model", 'm', "FILE", "GGUF model to serve", &c.model_path),
 *       CMD_OPT_INT("port", 0, "N", "listen port (default 8080)", &c.port, 0, 65535),
 *       CMD_OPT_ENUM("kv", 0, NULL, "KV cache element type", &c.kv_type, cmd_kv_types),
 *       CMD_OPT_END,
 *   };
 *   const struct cmd_spec spec = {.name = "serve", .synopsis = "[options]", .opts = opts};
 *   int argi;
 *   enum cmd_opt_result r = cmd_opt_parse(&spec, argc, argv, &argi);
 *   if (r != CMD_OPT_OK) return cmd_opt_exit(r);
 *   ... operands are argv[argi..argc) ...
 *
 * The command line, the same for every subcommand:
 *
 *   - options and operands may be mixed; operands keep their order;
 *   - "--" ends the options: everything after it is an operand, so an
 *     operand may begin with '-' (inferd tokenize -m M -- "-text");
 *   - "--name value" and "--name=value" are the same, as are "-m F" and "-mF";
 *   - long names are matched in full, never as abbreviations: a new option
 *     cannot change what an existing command line means;
 *   - a later value of an option replaces an earlier one (CALL setters may
 *     append instead: bench --trace);
 *   - -h / --help prints the usage on stdout; exit status 0.
 *
 * Errors go to stderr as one line naming the subcommand and the option as it
 * was typed; the subcommand then exits with status 2:
 *
 *   inferd serve: --port: expected an integer in [0, 65535], got 'x'
 *   inferd serve: --kv: expected f16, bf16 or f32, got 'f8'
 *   inferd serve: unknown option '--prot'          (+ a hint line: --help)
 *   inferd serve: --port needs a value             (+ the hint line)
 *
 * Values are stored as they are parsed, so an error can leave earlier
 * options stored; callers return on any result but CMD_OPT_OK. STR values
 * point into argv (which outlives the command), INTS values are heap arrays
 * the caller frees.
 *
 * A table is checked each time it is parsed (kinds against the destination's
 * C type, ranges against that type, duplicate names): a bad table is a bug
 * and aborts with a message naming the option.
 *
 * Thread: getopt_long keeps global state: main thread only.
 */
#ifndef INFERD_CMD_OPT_H
#define INFERD_CMD_OPT_H

#include "base/err.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

/* Exit statuses of every subcommand (cmd.h). */
#define CMD_EXIT_OK    0 /* done */
#define CMD_EXIT_FAIL  1 /* failed; the message is printed */
#define CMD_EXIT_USAGE 2 /* bad command line; the message is printed */

enum cmd_opt_kind {
    CMD_OPT_KIND_END,     /* ends a table */
    CMD_OPT_KIND_HEADING, /* no option: `help` is a section title in the usage */
    CMD_OPT_KIND_SET,     /* no value: stores `set` */
    CMD_OPT_KIND_BITS,    /* no value: ors `set` into an integer */
    CMD_OPT_KIND_STR,     /* the value itself (a pointer into argv) */
    CMD_OPT_KIND_INT,     /* a decimal integer in [min, max] */
    CMD_OPT_KIND_FLOAT,   /* a number in [fmin, fmax] */
    CMD_OPT_KIND_ENUM,    /* one of `choices` by name; its value is stored */
    CMD_OPT_KIND_INTS,    /* comma-separated integers in [min, max] -> struct cmd_ints */
    CMD_OPT_KIND_CALL,    /* fn(dst, spelling, value, m) */
    CMD_OPT_KIND_CALL0,   /* no value: fn(dst, spelling, NULL, m) */
};

/* The C type an option's dst points to, taken from the pointer itself by
 * CMD_OPT_CTYPE_OF (a pointer of any other type does not compile). An enum
 * object counts as the integer type it is compatible with. */
enum cmd_opt_ctype {
    CMD_OPT_CTYPE_NONE,   /* headings, CALL setters (dst is their context) */
    CMD_OPT_CTYPE_BOOL,   /* bool */
    CMD_OPT_CTYPE_INT,    /* int, int32_t, enums with negative values */
    CMD_OPT_CTYPE_UINT,   /* unsigned, uint32_t, most enums */
    CMD_OPT_CTYPE_LONG,   /* long, int64_t */
    CMD_OPT_CTYPE_ULONG,  /* unsigned long, uint64_t, size_t */
    CMD_OPT_CTYPE_FLOAT,  /* float */
    CMD_OPT_CTYPE_DOUBLE, /* double */
    CMD_OPT_CTYPE_STR,    /* const char * */
    CMD_OPT_CTYPE_INTS,   /* struct cmd_ints */
};

/* An INTS value: n integers in a heap array (free(v) when done; NULL while
 * the option was not given). A repeated option replaces the list. */
struct cmd_ints {
    int32_t *v; /* (n) */
    int n;      /* entries */
};

/* One name an ENUM option accepts and the value it stands for; a table of
 * them ends with {NULL, 0}. */
struct cmd_choice {
    const char *name; /* as typed */
    int value;        /* stored into dst */
};

/* The engine-size options serve and worker share: --threads, --ctx,
 * --max-seqs into cfg's n_threads, max_ctx and max_seqs (int fields). */
#define CMD_OPT_ENGINE_SIZE(cfg)                                                                   \
    CMD_OPT_INT("threads", 0, "N", "engine compute threads (default: all cores)",                  \
                &(cfg).n_threads, 0, 1024),                                                        \
        CMD_OPT_INT("ctx", 0, "N", "context length per request (default min(trained, 4096))",      \
                    &(cfg).max_ctx, 16, 1 << 24),                                                  \
        CMD_OPT_INT("max-seqs", 0, "N", "sequences decoding at once (default 64)",                 \
                    &(cfg).max_seqs, 1, 4096)

/* The KV tier options serve and worker share, into t (a struct
 * node_tiers, node/tiers.h): --kv-tier, --kv-evict, --kv-admit, --kv-ttl.
 * dflt: what --kv-tier defaults to, in words. */
#define CMD_OPT_KV_TIERS(t, dflt)                                                                  \
    CMD_OPT_CALL("kv-tier", 0, "SPEC",                                                             \
                 "a KV tier behind the engine pool, repeatable, fastest\n"                         \
                 "first: ram:SIZE, disk:DIR[:SIZE], shared:DIR:SIZE,\n"                            \
                 "redis://HOST:PORT[/DB], redis+unix:///PATH; none: no\n"                          \
                 "tiers (default: " dflt ")",                                                      \
                 node_tiers_add, &(t)),                                                            \
        CMD_OPT_CALL("kv-evict", 0, "POLICY",                                                      \
                     "eviction in the RAM and disk tiers: slru (default:\n"                        \
                     "blocks used twice outlive one-off ones) or lru",                             \
                     node_tiers_set_evict, &(t)),                                                  \
        CMD_OPT_CALL("kv-admit", 0, "POLICY",                                                      \
                     "which blocks the slower tiers take: all (default),\n"                        \
                     "seen (a block offered before), prompt:N (blocks of\n"                        \
                     "prompts of N blocks or more); repeatable",                                   \
                     node_tiers_set_admit, &(t)),                                                  \
        CMD_OPT_CALL("kv-ttl", 0, "CLASS=DUR",                                                     \
                     "time to live of a traffic class's KV blocks\n"                               \
                     "(defaults agent=3d, chat=7d; units s, m, h, d)",                             \
                     node_tiers_set_ttl, &(t))

/* HOST:PORT (port 0-65535) from val into host (cap bytes) and *port, for
 * a --listen setter; ERR_INVALID with a message that begins with spelling. */
int cmd_parse_host_port(const char *spelling, const char *val, char *host, size_t cap, int *port,
                        struct err_msg *m);

/* f16, bf16, f32 -> enum inferd_kv_type (serve, run, logits, bench-engine). */
extern const struct cmd_choice cmd_kv_types[];

/* A CALL setter: parses val (NULL for CALL0) into dst, its context. Returns
 * 0, or a negative code with m set to a message that begins with `spelling`
 * (the option as typed: "--trace"), e.g. "--trace: expected FORMAT:PATH". */
typedef int (*cmd_opt_fn)(void *dst, const char *spelling, const char *val, struct err_msg *m);

struct cmd_opt {
    enum cmd_opt_kind kind;           /* the value and how it is stored */
    const char *name;                 /* long name without "--"; every option has one */
    char short_name;                  /* 'm' for -m; 0: none */
    const char *meta;                 /* the value in the usage ("N"); ENUM: NULL lists names */
    const char *help;                 /* usage text, lines split at '\n'; NULL: hidden */
    void *dst;                        /* where the value goes */
    enum cmd_opt_ctype ctype;         /* what dst points to */
    int64_t min, max;                 /* INT, INTS: accepted range, inclusive */
    double fmin, fmax;                /* FLOAT: accepted range, inclusive */
    int64_t set;                      /* SET: the value stored; BITS: the bits */
    const struct cmd_choice *choices; /* ENUM: the names */
    cmd_opt_fn fn;                    /* CALL, CALL0 */
};

/* A subcommand: its name and usage text around the option table. */
struct cmd_spec {
    const char *name;           /* "serve", "model make": messages and usage */
    const char *synopsis;       /* after "usage: inferd NAME "; '\n' for more lines */
    const char *about;          /* paragraph after the synopsis, or NULL */
    const char *epilog;         /* text after the options, or NULL */
    const struct cmd_opt *opts; /* the table, ending with CMD_OPT_END */
};

#define CMD_OPT_CTYPE_OF(p)                                                                        \
    _Generic((p),                                                                                  \
        bool *: CMD_OPT_CTYPE_BOOL,                                                                \
        int *: CMD_OPT_CTYPE_INT,                                                                  \
        unsigned *: CMD_OPT_CTYPE_UINT,                                                            \
        long *: CMD_OPT_CTYPE_LONG,                                                                \
        unsigned long *: CMD_OPT_CTYPE_ULONG,                                                      \
        float *: CMD_OPT_CTYPE_FLOAT,                                                              \
        double *: CMD_OPT_CTYPE_DOUBLE,                                                            \
        const char **: CMD_OPT_CTYPE_STR,                                                          \
        struct cmd_ints *: CMD_OPT_CTYPE_INTS)

#define CMD_OPT_(kind_, name_, short_, meta_, help_)                                               \
    .kind = CMD_OPT_KIND_##kind_, .name = (name_), .short_name = (short_), .meta = (meta_),        \
    .help = (help_)

/* --name: stores value into *ptr (bool or integer). */
#define CMD_OPT_SET(name_, short_, help_, ptr, value)                                              \
    {                                                                                              \
        CMD_OPT_(SET, name_, short_, NULL, help_), .dst = (ptr), .ctype = CMD_OPT_CTYPE_OF(ptr),   \
                                                   .set = (value)                                  \
    }
/* --name: sets *ptr (bool) true. */
#define CMD_OPT_FLAG(name_, short_, help_, ptr) CMD_OPT_SET(name_, short_, help_, ptr, 1)
/* --name: *ptr |= bits. */
#define CMD_OPT_BITS(name_, short_, help_, ptr, bits)                                              \
    {                                                                                              \
        CMD_OPT_(BITS, name_, short_, NULL, help_), .dst = (ptr), .ctype = CMD_OPT_CTYPE_OF(ptr),  \
                                                    .set = (bits)                                  \
    }
/* --name VALUE: *ptr = VALUE (const char *). */
#define CMD_OPT_STR(name_, short_, meta_, help_, ptr)                                              \
    {                                                                                              \
        CMD_OPT_(STR, name_, short_, meta_, help_), .dst = (ptr), .ctype = CMD_OPT_CTYPE_OF(ptr)   \
    }
/* --name N: an integer in [lo, hi] into *ptr (any integer type). */
#define CMD_OPT_INT(name_, short_, meta_, help_, ptr, lo, hi)                                      \
    {                                                                                              \
        CMD_OPT_(INT, name_, short_, meta_, help_), .dst = (ptr), .ctype = CMD_OPT_CTYPE_OF(ptr),  \
                                                    .min = (lo), .max = (hi)                       \
    }
/* --name X: a number in [lo, hi] into *ptr (float or double). */
#define CMD_OPT_FLOAT(name_, short_, meta_, help_, ptr, lo, hi)                                    \
    {                                                                                              \
        CMD_OPT_(FLOAT, name_, short_, meta_, help_),                                              \
            .dst = (ptr), .ctype = CMD_OPT_CTYPE_OF(ptr), .fmin = (lo), .fmax = (hi)               \
    }
/* --name NAME: the value of one of choices (ending with {NULL, 0}) into *ptr. */
#define CMD_OPT_ENUM(name_, short_, meta_, help_, ptr, choices_)                                   \
    {                                                                                              \
        CMD_OPT_(ENUM, name_, short_, meta_, help_), .dst = (ptr), .ctype = CMD_OPT_CTYPE_OF(ptr), \
                                                     .choices = (choices_)                         \
    }
/* --name A,B,C: integers in [lo, hi] into *ptr (struct cmd_ints). */
#define CMD_OPT_INTS(name_, short_, meta_, help_, ptr, lo, hi)                                     \
    {                                                                                              \
        CMD_OPT_(INTS, name_, short_, meta_, help_), .dst = (ptr), .ctype = CMD_OPT_CTYPE_OF(ptr), \
                                                     .min = (lo), .max = (hi)                      \
    }
/* --name VALUE: fn(ctx, spelling, VALUE, m). */
#define CMD_OPT_CALL(name_, short_, meta_, help_, fn_, ctx)                                        \
    {                                                                                              \
        CMD_OPT_(CALL, name_, short_, meta_, help_), .dst = (ctx), .fn = (fn_)                     \
    }
/* --name: fn(ctx, spelling, NULL, m). */
#define CMD_OPT_CALL0(name_, short_, help_, fn_, ctx)                                              \
    {                                                                                              \
        CMD_OPT_(CALL0, name_, short_, NULL, help_), .dst = (ctx), .fn = (fn_)                     \
    }
/* A section title in the usage ("target:"). */
#define CMD_OPT_HEADING(title)                                                                     \
    {                                                                                              \
        .kind = CMD_OPT_KIND_HEADING, .help = (title)                                              \
    }
#define CMD_OPT_END                                                                                \
    {                                                                                              \
        .kind = CMD_OPT_KIND_END                                                                   \
    }

enum cmd_opt_result {
    CMD_OPT_OK,    /* parsed: go on with the operands */
    CMD_OPT_HELP,  /* --help printed the usage: exit 0 */
    CMD_OPT_USAGE, /* an error was printed: exit 2 */
};

/* Parses argv[1..argc) (argv[0] is the subcommand's own name) by spec's
 * table, storing each value as it is read. On CMD_OPT_OK *argi is the index
 * of the first operand: the operands are argv[*argi..argc), in the order
 * given (argv is permuted). Anything else has been printed already. */
enum cmd_opt_result cmd_opt_parse(const struct cmd_spec *spec, int argc, char **argv, int *argi);

/* The exit status for a result other than CMD_OPT_OK: 0 after --help, 2. */
int cmd_opt_exit(enum cmd_opt_result r);

/* Writes the usage (synopsis, about, the options, epilog) to out. */
void cmd_opt_usage(const struct cmd_spec *spec, FILE *out);

/* For errors found after parsing (a required option missing, two that
 * exclude each other): prints "inferd NAME: MESSAGE" and a line pointing to
 * --help on stderr; returns CMD_EXIT_USAGE. */
int cmd_usage_error(const struct cmd_spec *spec, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Operands beyond max_operands are a usage error: returns 0, or
 * CMD_EXIT_USAGE after cmd_usage_error naming the first extra one. */
int cmd_opt_operands_max(const struct cmd_spec *spec, int argc, char **argv, int argi,
                         int max_operands);

#endif
