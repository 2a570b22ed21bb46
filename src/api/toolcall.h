/*
 * toolcall.h - tool calls parsed out of generated text, as it streams.
 *
 * Models write tool calls in their family's own text format. The parser is
 * fed the detokenized output piece by piece and splits it into events:
 *
 *   CONTENT  plain text for the client (what is not a call)
 *   START    a call begins: index (0, 1, ...), id, function name
 *   ARGS     a piece of the call's arguments: JSON text; a call's ARGS
 *            pieces concatenate to its arguments object text
 *   END      the call is complete
 *
 * Families (chosen by toolcall_family_detect from the vocabulary and chat
 * template):
 *
 *   HERMES    Qwen 2.5 / 3, Hermes:  <tool_call>\n{"name": N, "arguments": {..}}\n</tool_call>
 *             (several may follow each other)
 *   LLAMA3    Llama 3.1+: <|python_tag|>{"name": N, "parameters": {..}}, or a bare
 *             {"name": N, "parameters": {..}} object as the whole answer
 *   DEEPSEEK  DeepSeek-V3: <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>N
 *             ```json\n{..}\n```<｜tool▁call▁end｜> ... <｜tool▁calls▁end｜>
 *   MISTRAL   [TOOL_CALLS][{"name": N, "arguments": {..}}, ...]  (or the bare array as
 *             the whole answer, which is what a forced call's grammar writes: the
 *             marker is a control token that grammars never emit)
 *
 * In call objects "arguments" and "parameters" are both accepted, members in
 * any order, other members (e.g. Mistral's "id") skipped.
 *
 * Hold-back: text that may be the start of the family's marker is held back
 * until the next piece decides (as stopstr.h does for stop strings), and the
 * text of a call stays held until the call is committed; so the events do
 * not depend on how the text was cut into pieces: feeding any split of a
 * text yields events that, merged (adjacent CONTENT joined, adjacent ARGS of
 * one call joined), equal those of feeding it whole. Whitespace between and
 * after calls is dropped.
 *
 * Commit and fallback. A call is committed (START emitted) when its name is
 * read, is one of the request's tools, and its arguments object begins (or,
 * when the arguments come first, when the name arrives). Anything malformed
 * before that - bad JSON, an unknown name, a missing marker - turns the
 * held text back into CONTENT and parsing goes on after it. After the
 * commit, arguments are checked byte by byte by a JSON scanner, so the ARGS
 * pieces always form a valid JSON prefix; if the text goes wrong after the
 * commit, the call ends there (END; its arguments may then be incomplete
 * JSON) and the rest is CONTENT. Output cut short (max_tokens) ends an open
 * call the same way at toolcall_finish.
 *
 * Memory: caller-owned struct; events and their text live in the parser and
 * are valid until the next feed / finish. Thread: one owner.
 */
#ifndef INFERD_API_TOOLCALL_H
#define INFERD_API_TOOLCALL_H

#include "base/buf.h"
#include "base/err.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct json_t; /* jansson */

enum toolcall_family {
    TOOLCALL_NONE = 0, /* no known format: tools are rendered, never parsed */
    TOOLCALL_HERMES,   /* <tool_call> JSON </tool_call> */
    TOOLCALL_LLAMA3,   /* <|python_tag|> JSON, or a bare JSON call */
    TOOLCALL_DEEPSEEK, /* <｜tool▁calls▁begin｜> ... */
    TOOLCALL_MISTRAL,  /* [TOOL_CALLS] JSON array */
};

const char *toolcall_family_name(enum toolcall_family f);

/* Picks the family from the vocabulary (has(text, ctx): text is one token of
 * the vocabulary) and the chat template source (may be NULL): Mistral's
 * [TOOL_CALLS], DeepSeek's <｜tool▁calls▁begin｜>, <tool_call>, Llama 3's
 * <|python_tag|> or <|start_header_id|>, in that order; a template that
 * writes <tool_call> without such a token is HERMES too. */
enum toolcall_family toolcall_family_detect(bool (*has)(const char *text, void *ctx), void *ctx,
                                            const char *tmpl);

/* The family's marker texts (NULL-terminated). The detokenizer must keep
 * them in the text it feeds even when they are special tokens. */
const char *const *toolcall_family_markers(enum toolcall_family f);

enum toolcall_ev_kind {
    TOOLCALL_EV_CONTENT, /* text */
    TOOLCALL_EV_START,   /* index, id, name (text) */
    TOOLCALL_EV_ARGS,    /* index, arguments text piece */
    TOOLCALL_EV_END,     /* index */
};

struct toolcall_ev {
    enum toolcall_ev_kind kind; /* what happened */
    int index;                  /* call index (START, ARGS, END) */
    const char *text;           /* (len) CONTENT / ARGS text, START name; NUL-terminated */
    size_t len;                 /* bytes of text */
    const char *id;             /* START: the call id, NUL-terminated */
};

enum { TOOLCALL_MAX_NAME = 256, TOOLCALL_MAX_DEPTH = 64 };

/* Incremental JSON value scanner (validates; no values kept). */
struct toolcall_jscan {
    char stack[TOOLCALL_MAX_DEPTH]; /* open containers: '{' or '[' */
    int depth;                      /* entries of stack */
    int st;                         /* scanner state (toolcall.c) */
    int sub;                        /* literal position / hex digits left / number state */
    const char *lit;                /* literal being matched (true, false, null) */
    bool key;                       /* the string being read is an object key */
};

struct toolcall_parser {
    enum toolcall_family fam;     /* format */
    char *const *names;           /* (n_names) tool names, borrowed */
    int n_names;                  /* entries of names */
    char id_prefix[16];           /* "call_", "toolu_" ... (not used for Mistral's 9-char ids) */
    uint64_t id_state;            /* id generator state */
    int st;                       /* parser state (toolcall.c) */
    int after;                    /* state to enter when the current literal / value ends */
    const char *lit;              /* literal being matched */
    const char *lit2;             /* alternative literal (or NULL) */
    int after2;                   /* state after lit2 */
    size_t lit_pos;               /* bytes of the literal matched so far */
    struct buf pending;           /* content held back: a possible marker prefix */
    struct buf ws_hold;           /* whitespace held after a call or at the start */
    bool at_start;                /* nothing but whitespace has been read */
    bool bare_maybe;              /* Mistral: the answer began with "[" (array or marker?) */
    bool after_call;              /* a call ended and no content followed yet */
    struct buf raw;               /* text of the call being read, for a fallback */
    struct buf key;               /* object key / name / DeepSeek type being read */
    int key_kind;                 /* what the value after key is (toolcall.c) */
    char name[TOOLCALL_MAX_NAME]; /* the call's function name, once read */
    bool has_name;                /* name read and known */
    bool committed;               /* START emitted for the current call */
    bool args_done;               /* the arguments value was read */
    struct buf args_buf;          /* arguments read before the name (held) */
    struct toolcall_jscan js;     /* value scanner */
    int n_calls;                  /* calls started so far */
    struct toolcall_ev *ev;       /* (n_ev) events of the last feed */
    int n_ev;                     /* entries of ev */
    int cap_ev;                   /* allocated */
    struct buf text;              /* event text storage */
    char (*ids)[40];              /* (n_calls) ids, indexed by call */
};

/* The grammar (INFERD_GRAMMAR_SEQUENCE source, api/../grammar/seq.c) of a
 * forced call in family fam: one alternative per tool (only `name` when not
 * NULL), each the family's wrapper text around {"name": N, "arguments": P}
 * (DeepSeek: its marker line and a fenced block of P) where P is that tool's
 * parameters schema (an object of any members when it has none). Each
 * schema piece is labelled "tools[i] 'N'" so a schema the compiler refuses
 * is reported with the tool's name. tools: OpenAI Chat tool definitions.
 * Returns 0, or ERR_INVALID (no format for this family, no such tool). */
int toolcall_grammar(enum toolcall_family fam, const struct json_t *tools, const char *name,
                     struct buf *out, struct err_msg *msg);

/* names: the request's tool names (borrowed; must outlive the parser);
 * id_prefix: prefix of generated ids; id_seed: ids are a function of it. */
void toolcall_init(struct toolcall_parser *p, enum toolcall_family fam, char *const *names,
                   int n_names, const char *id_prefix, uint64_t id_seed);
void toolcall_release(struct toolcall_parser *p);
/* Feeds len bytes; returns the number of events now in p->ev. */
int toolcall_feed(struct toolcall_parser *p, const char *text, size_t len);
/* End of output: releases held text, ends an open call. Returns events. */
int toolcall_finish(struct toolcall_parser *p);

#endif
