/*
 * test_opt.c - option tables (cmd/opt.h): every value kind stored into every
 * destination type, range and name errors with their exact messages, the
 * command-line rules ("--", --name=value, operands among options, no
 * abbreviations), --help, repeated parses, and the generated usage.
 */
#include "test.h"

#include "cmd/opt.h"
#include "inferd/inferd.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* One parse's outcome: result, first operand, what went to stderr. */
struct outcome {
    enum cmd_opt_result r;
    int argi;
    char err[1024];
};

/* Parses a NULL-terminated argument list (argv[0] = "x") with stderr captured. */
static struct outcome parse(const struct cmd_spec *s, char **args)
{
    static char *argv[32];
    int argc = 0;
    argv[argc++] = "x";
    for (; *args; args++)
        argv[argc++] = *args;
    argv[argc] = NULL;
    struct outcome o = {0};
    fflush(stderr);
    FILE *tmp = tmpfile();
    int saved = dup(2);
    dup2(fileno(tmp), 2);
    o.r = cmd_opt_parse(s, argc, argv, &o.argi);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    rewind(tmp);
    size_t n = fread(o.err, 1, sizeof(o.err) - 1, tmp);
    o.err[n] = 0;
    fclose(tmp);
    /* operands are reported relative to the list given, without "x" */
    o.argi -= 1;
    return o;
}

#define ARGS(...) ((char *[]){__VA_ARGS__, NULL})

struct vals {
    int i;
    long l;
    size_t z;
    uint64_t u;
    float f;
    double d;
    bool b;
    unsigned bits;
    int tri;
    enum inferd_kv_type kv;
    const char *s;
    struct cmd_ints ids;
    int calls;
};

static int count_call(void *dst, const char *spelling, const char *val, struct err_msg *m)
{
    struct vals *v = dst;
    if (val && !strcmp(val, "bad")) return err_set(m, ERR_INVALID, "%s: no good", spelling);
    v->calls++;
    return 0;
}

#define TABLE(v)                                                                                   \
    const struct cmd_opt opts[] = {                                                                \
        CMD_OPT_INT("int", 'i', "N", "an int", &(v).i, -5, 5),                                     \
        CMD_OPT_INT("long", 0, "N", "a long", &(v).l, INT64_MIN, INT64_MAX),                       \
        CMD_OPT_INT("size", 0, "N", "a size_t", &(v).z, 0, 1L << 40),                              \
        CMD_OPT_INT("u64", 0, "N", "a uint64_t", &(v).u, 0, INT64_MAX),                            \
        CMD_OPT_FLOAT("float", 0, "X", "a float", &(v).f, 0, 1),                                   \
        CMD_OPT_FLOAT("double", 'd', "X", "a double", &(v).d, -2, 2),                              \
        CMD_OPT_FLAG("flag", 'v', "a flag", &(v).b),                                               \
        CMD_OPT_BITS("bit1", 0, "bit 1", &(v).bits, 1),                                            \
        CMD_OPT_BITS("bit4", 0, "bit 4", &(v).bits, 4),                                            \
        CMD_OPT_SET("tri-on", 0, "1", &(v).tri, 1),                                                \
        CMD_OPT_SET("tri-off", 0, "0", &(v).tri, 0),                                               \
        CMD_OPT_ENUM("kv", 0, NULL, "kv type", &(v).kv, cmd_kv_types),                             \
        CMD_OPT_STR("model", 'm', "FILE", "a string", &(v).s),                                     \
        CMD_OPT_INTS("ids", 0, "IDS", "ids", &(v).ids, 0, 100),                                    \
        CMD_OPT_CALL("call", 0, "V", "a setter", count_call, &(v)),                                \
        CMD_OPT_CALL0("call0", 0, "a setter without a value", count_call, &(v)),                   \
        CMD_OPT_STR("max-seqs", 0, "N", "a prefix of no other name", &(v).s),                      \
        CMD_OPT_STR("secret", 0, "X", NULL, &(v).s),                                               \
        CMD_OPT_END,                                                                               \
    };                                                                                             \
    const struct cmd_spec spec = {.name = "t", .synopsis = "[options] [ARG]", .opts = opts}

TEST(every_kind_into_its_type)
{
    struct vals v = {.tri = -1};
    TABLE(v);
    struct outcome o =
        parse(&spec, ARGS("--int", "-5", "--long", "-9000000000", "--size", "1099511627776",
                          "--u64", "9223372036854775807", "--float=0.25", "-d", "-1.5", "-v",
                          "--bit1", "--bit4", "--tri-off", "--kv", "bf16", "-mfile.gguf", "--ids",
                          "1,2,100", "--call", "x", "--call0"));
    EXPECT_EQ_INT(o.r, CMD_OPT_OK);
    EXPECT(o.err[0] == 0);
    EXPECT_EQ_INT(v.i, -5);
    EXPECT_EQ_INT(v.l, -9000000000L);
    EXPECT(v.z == (size_t)1 << 40);
    EXPECT(v.u == (uint64_t)INT64_MAX);
    EXPECT(v.f == 0.25f);
    EXPECT(v.d == -1.5);
    EXPECT(v.b);
    EXPECT_EQ_INT(v.bits, 5);
    EXPECT_EQ_INT(v.tri, 0);
    EXPECT_EQ_INT(v.kv, INFERD_KV_BF16);
    EXPECT(v.s && !strcmp(v.s, "file.gguf"));
    EXPECT_EQ_INT(v.ids.n, 3);
    EXPECT(v.ids.v && v.ids.v[0] == 1 && v.ids.v[1] == 2 && v.ids.v[2] == 100);
    EXPECT_EQ_INT(v.calls, 2);
    /* a repeated option replaces the earlier value; a list is replaced whole */
    o = parse(&spec, ARGS("--int", "1", "--int", "2", "--ids", "7", "--tri-on"));
    EXPECT_EQ_INT(o.r, CMD_OPT_OK);
    EXPECT_EQ_INT(v.i, 2);
    EXPECT_EQ_INT(v.ids.n, 1);
    EXPECT_EQ_INT(v.ids.v[0], 7);
    EXPECT_EQ_INT(v.tri, 1);
    free(v.ids.v);
}

/* message: the exact first line on stderr */
static void expect_error(const struct cmd_spec *s, char **args, const char *message)
{
    struct outcome o = parse(s, args);
    EXPECT_EQ_INT(o.r, CMD_OPT_USAGE);
    size_t n = strlen(message);
    if (strncmp(o.err, message, n) || o.err[n] != '\n') {
        fprintf(stderr, "  got: %s  want: %s\n", o.err, message);
        EXPECT(!"the message");
    }
}

TEST(value_errors_name_the_option_as_typed)
{
    struct vals v = {0};
    TABLE(v);
    expect_error(&spec, ARGS("--int", "6"),
                 "inferd t: --int: expected an integer in [-5, 5], got '6'");
    expect_error(&spec, ARGS("-i", "x"), "inferd t: -i: expected an integer in [-5, 5], got 'x'");
    expect_error(&spec, ARGS("--int", "1x"),
                 "inferd t: --int: expected an integer in [-5, 5], got '1x'");
    expect_error(&spec, ARGS("--int="), "inferd t: --int: expected an integer in [-5, 5], got ''");
    expect_error(&spec, ARGS("--u64", "9223372036854775808"),
                 "inferd t: --u64: expected an integer in [0, 9223372036854775807], got "
                 "'9223372036854775808'");
    expect_error(&spec, ARGS("--float", "nan"),
                 "inferd t: --float: expected a number in [0, 1], got 'nan'");
    expect_error(&spec, ARGS("--float", "1.5"),
                 "inferd t: --float: expected a number in [0, 1], got '1.5'");
    expect_error(&spec, ARGS("--kv", "f8"), "inferd t: --kv: expected f16, bf16 or f32, got 'f8'");
    expect_error(&spec, ARGS("--ids", "1,x"),
                 "inferd t: --ids: expected comma-separated integers in [0, 100], bad entry #2 in "
                 "'1,x'");
    expect_error(&spec, ARGS("--ids", "1,101"),
                 "inferd t: --ids: expected comma-separated integers in [0, 100], bad entry #2 in "
                 "'1,101'");
    expect_error(&spec, ARGS("--ids", ""),
                 "inferd t: --ids: expected comma-separated integers, got ''");
    expect_error(&spec, ARGS("--call", "bad"), "inferd t: --call: no good");
    free(v.ids.v);
}

TEST(command_line_errors)
{
    struct vals v = {0};
    TABLE(v);
    expect_error(&spec, ARGS("--bogus"), "inferd t: unknown option '--bogus'");
    expect_error(&spec, ARGS("--bogus=1"), "inferd t: unknown option '--bogus'");
    expect_error(&spec, ARGS("-q"), "inferd t: unknown option '-q'");
    expect_error(&spec, ARGS("--int"), "inferd t: --int needs a value");
    expect_error(&spec, ARGS("-m"), "inferd t: -m needs a value");
    expect_error(&spec, ARGS("--flag=yes"), "inferd t: --flag takes no value");
    /* prefixes are never taken for the option they abbreviate */
    expect_error(&spec, ARGS("--max", "3"),
                 "inferd t: unknown option '--max' (did you mean "
                 "'--max-seqs'?)");
    expect_error(&spec, ARGS("--in=3"), "inferd t: unknown option '--in' (did you mean '--int'?)");
    /* ambiguous prefix (--bit1, --bit4) */
    expect_error(&spec, ARGS("--bit"), "inferd t: unknown option '--bit'");
    struct outcome o = parse(&spec, ARGS("--bogus"));
    EXPECT(strstr(o.err, "\nrun 'inferd t --help' for the options\n"));
}

TEST(operands_and_double_dash)
{
    struct vals v = {0};
    TABLE(v);
    char *a1[] = {"text", "-v", "--int", "3", NULL};
    struct outcome o = parse(&spec, a1);
    EXPECT_EQ_INT(o.r, CMD_OPT_OK);
    EXPECT(v.b && v.i == 3);
    /* argv is permuted: the operand comes after the options */
    EXPECT_EQ_INT(o.argi, 3);
    v = (struct vals){0};
    char *a2[] = {"--int", "1", "--", "-text", "--int", NULL};
    o = parse(&spec, a2);
    EXPECT_EQ_INT(o.r, CMD_OPT_OK);
    EXPECT_EQ_INT(v.i, 1);
    EXPECT_EQ_INT(o.argi, 3); /* "-text", "--int" are operands */
    /* a lone "-" is an operand too (stdin) */
    v = (struct vals){0};
    o = parse(&spec, ARGS("-", "--flag"));
    EXPECT_EQ_INT(o.r, CMD_OPT_OK);
    EXPECT_EQ_INT(o.argi, 1);
    EXPECT(v.b);
    /* without "--", a text that begins with '-' is an option */
    expect_error(&spec, ARGS("-text"), "inferd t: unknown option '-t'");
}

TEST(operands_keep_their_order)
{
    struct vals v = {0};
    TABLE(v);
    static char *argv[] = {"x", "a", "-v", "b", "--int", "2", "c", "--", "-d", NULL};
    int argi;
    EXPECT_EQ_INT(cmd_opt_parse(&spec, 9, argv, &argi), CMD_OPT_OK);
    EXPECT_EQ_INT(9 - argi, 4);
    const char *want[] = {"a", "b", "c", "-d"};
    for (int k = 0; k < 4 && argi + k < 9; k++)
        EXPECT(!strcmp(argv[argi + k], want[k]));
    EXPECT(v.b && v.i == 2 && v.d == 0);
}

TEST(help_stops_the_parse)
{
    struct vals v = {0};
    TABLE(v);
    fflush(stdout);
    FILE *tmp = tmpfile();
    int saved = dup(1);
    dup2(fileno(tmp), 1);
    struct outcome o = parse(&spec, ARGS("--int", "1", "--help", "--int", "2"));
    struct outcome o2 = parse(&spec, ARGS("-h"));
    fflush(stdout);
    dup2(saved, 1);
    close(saved);
    EXPECT_EQ_INT(o.r, CMD_OPT_HELP);
    EXPECT_EQ_INT(cmd_opt_exit(o.r), 0);
    EXPECT_EQ_INT(cmd_opt_exit(CMD_OPT_USAGE), 2);
    EXPECT_EQ_INT(v.i, 1);
    rewind(tmp);
    char buf[4096];
    size_t n = fread(buf, 1, sizeof(buf) - 1, tmp);
    buf[n] = 0;
    fclose(tmp);
    EXPECT(!strncmp(buf, "usage: inferd t [options] [ARG]\n", 32));
    EXPECT(strstr(buf, "\n      --max-seqs N       a prefix of no other name\n"));
    EXPECT(!strstr(buf, "secret"));
    EXPECT_EQ_INT(o2.r, CMD_OPT_HELP);
}

TEST(usage_from_the_table)
{
    struct vals v = {0};
    const struct cmd_opt opts[] = {
        CMD_OPT_HEADING("group one:"),
        CMD_OPT_STR("model", 'm', "FILE", "the model\nsecond line", &v.s),
        CMD_OPT_ENUM("kv", 0, NULL, "kv type", &v.kv, cmd_kv_types),
        CMD_OPT_FLAG("flag", 0, "a flag", &v.b),
        CMD_OPT_STR("secret", 0, "X", NULL, &v.s),
        CMD_OPT_END,
    };
    const struct cmd_spec spec = {.name = "t sub",
                                  .synopsis = "-m FILE\n[more]",
                                  .about = "About it.",
                                  .epilog = "Epilog.\n",
                                  .opts = opts};
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    cmd_opt_usage(&spec, f);
    fclose(f);
    const char *want = "usage: inferd t sub -m FILE\n"
                       "                    [more]\n"
                       "\n"
                       "About it.\n"
                       "\n"
                       "group one:\n"
                       "  -m, --model FILE       the model\n"
                       "                         second line\n"
                       "      --kv f16|bf16|f32  kv type\n"
                       "      --flag             a flag\n"
                       "  -h, --help             print this help\n"
                       "\n"
                       "Epilog.\n";
    if (strcmp(text, want)) fprintf(stderr, "  got:\n%s", text);
    EXPECT(!strcmp(text, want));
    free(text);
}

TEST(operand_limit)
{
    struct vals v = {0};
    TABLE(v);
    static char *argv[] = {"x", "a", "b", NULL};
    fflush(stderr);
    FILE *tmp = tmpfile();
    int saved = dup(2);
    dup2(fileno(tmp), 2);
    int r1 = cmd_opt_operands_max(&spec, 3, argv, 1, 2);
    int r2 = cmd_opt_operands_max(&spec, 3, argv, 1, 1);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    rewind(tmp);
    char buf[512];
    size_t n = fread(buf, 1, sizeof(buf) - 1, tmp);
    buf[n] = 0;
    fclose(tmp);
    EXPECT_EQ_INT(r1, 0);
    EXPECT_EQ_INT(r2, CMD_EXIT_USAGE);
    EXPECT(!strncmp(buf, "inferd t: unexpected argument 'b'\n", 34));
}

TEST_MAIN()
