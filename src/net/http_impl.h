/*
 * http_impl.h - what the files of the HTTP/1.1 connection layer share (see
 * net/http.h for the contract):
 *
 *   http_parse.c   one request's bytes -> head fields and body; no sockets,
 *                  driven from a buffer (the fuzz target calls it directly)
 *   http_conn.c    a connection: bufferevent, phases, deadlines, the answer
 *   http_server.c  listening, connection caps, accept back-off, drain, free
 *
 * The request parser is one incremental call in the picohttpparser mould:
 * http__parse_feed consumes bytes and says MORE (all consumed, not done),
 * BODY (the head is complete and a body follows: the connection sends
 * 100 Continue and starts the body deadline), DONE (a whole request; the
 * bytes after it are not consumed) or FAILED (status and reason set; the
 * connection answers and closes). Its memory is bounded by the limits it was
 * given: the head buffer by max_header_bytes (plus the joined values of
 * repeated fields), the field table by HTTP_MAX_FIELDS, the body by
 * max_body_bytes.
 *
 * Thread: a parser belongs to one connection, hence to the loop thread; it
 * touches no global state except http_parser's header-size limit, which is
 * raised once (pthread_once) so that only ours applies.
 */
#ifndef INFERD_NET_HTTP_IMPL_H
#define INFERD_NET_HTTP_IMPL_H

#include "net/http.h"

#include <http_parser.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct bufferevent;
struct event;
struct evconnlistener;

#define HTTP_MAX_FIELDS     256     /* header fields in one head; beyond: 431 */
#define HTTP_CHUNK_LINE_MAX 4096    /* a chunk-size line with its extensions; beyond: 400 */
#define HTTP_REQUEST_ID_MAX 128     /* longest client x-request-id echoed */
#define HTTP_LINGER_MS      1000    /* after our last byte: read and drop input this long */
#define HTTP_LINGER_BYTES   1048576 /* ... or this many bytes, then close */

enum http__parse_result {
    HTTP__PARSE_MORE,   /* every byte consumed; the request is not complete */
    HTTP__PARSE_BODY,   /* head complete, a body follows (nothing of it consumed yet) */
    HTTP__PARSE_DONE,   /* a whole request; the bytes after it were not consumed */
    HTTP__PARSE_FAILED, /* status / why set; feeding again fails again */
};

enum http__framing {
    HTTP__FRAMING_NONE,    /* no body */
    HTTP__FRAMING_LENGTH,  /* Content-Length bytes */
    HTTP__FRAMING_CHUNKED, /* Transfer-Encoding: chunked */
};

/* Where the parser is within one request. */
enum http__parse_state {
    HTTP__PS_HEAD,        /* request line and header fields */
    HTTP__PS_BODY_LENGTH, /* Content-Length body */
    HTTP__PS_CHUNK_SIZE,  /* hex digits of a chunk size */
    HTTP__PS_CHUNK_EXT,   /* after the size: BWS, then ";" extensions up to CR */
    HTTP__PS_CHUNK_LF,    /* the LF of a chunk-size line */
    HTTP__PS_CHUNK_DATA,  /* chunk bytes */
    HTTP__PS_CHUNK_CR,    /* the CR after chunk data */
    HTTP__PS_CHUNK_DLF,   /* the LF after chunk data */
    HTTP__PS_TRAILER,     /* trailer field lines after the last chunk, up to an empty line */
    HTTP__PS_DONE,        /* complete */
    HTTP__PS_FAILED,      /* refused */
};

/* One header field. While the head arrives, offsets into head; once it is
 * complete, name/value point there (NUL-terminated, value without OWS). A
 * name repeated later holds the values joined by ", " and the later entries
 * are marked merged. */
struct http__field {
    uint32_t name_off;  /* in head */
    uint32_t name_len;  /* bytes */
    uint32_t value_off; /* in head */
    uint32_t value_len; /* bytes, trailing OWS trimmed at the field's end */
    const char *name;   /* set at the head's end */
    const char *value;  /* set at the head's end */
    bool merged;        /* a later repeat of an earlier name: skip on lookup */
};

struct http__parse {
    size_t max_header_bytes; /* head (and, separately, trailer) bound */
    size_t max_body_bytes;   /* body bound */
    enum http__parse_state state;
    http_parser hp; /* the Node.js parser, for the head only */
    /* The line discipline over the head (and trailers): CRLF only, no
     * obs-fold, byte count. */
    size_t head_bytes;      /* head bytes consumed so far (leading CRLFs too) */
    size_t line_len;        /* bytes of the current line so far, CR LF included */
    bool prev_cr;           /* the last byte was a CR (an LF must follow) */
    bool seen_request_line; /* a non-empty first line was completed */
    bool head_started;      /* any byte of this request consumed */
    bool headers_complete;  /* http_parser called on_headers_complete */
    bool target_ok;         /* the request line passed our checks */
    bool in_name;           /* in a header line, before its ':' */
    bool in_value;          /* in a header line, after its ':' */
    char rl_tail[11];       /* the request line's last bytes: " HTTP/x.y\r\n" */
    /* What the head said, gathered in http_parser's callbacks. */
    struct buf head;            /* URL then every name and value, NUL after each */
    struct http__field *fields; /* (n_fields), grown up to HTTP_MAX_FIELDS */
    int n_fields;               /* fields in the table */
    int cap_fields;             /* allocated entries */
    int cb_last;          /* 0 none yet, 1 in a name, 2 in a value, 3 in a field past the limit */
    int n_lines;          /* field lines completed */
    uint32_t url_len;     /* bytes of the request target, at the start of head */
    uint32_t query_off;   /* the query in head (after '?', or the target's NUL) */
    const char *method;   /* "GET", ... (static), once the request line is complete */
    const char *path;     /* target before '?', once the request line is complete */
    const char *query;    /* after '?', or "" */
    int http_minor;       /* 0 or 1 */
    int n_content_length; /* Content-Length fields seen */
    int n_transfer_encoding; /* Transfer-Encoding fields seen */
    int n_host;              /* Host fields seen */
    bool te_chunked_only;    /* every Transfer-Encoding value was exactly "chunked" */
    bool conn_close;         /* Connection: close */
    bool conn_keep_alive;    /* Connection: keep-alive */
    bool expect_other;       /* an Expect value other than 100-continue */
    bool expect_continue;    /* Expect: 100-continue on HTTP/1.1 */
    bool keep_alive;         /* the client allows another request after this one */
    enum http__framing framing;
    uint64_t content_length; /* announced (FRAMING_LENGTH) */
    /* The body. */
    struct buf body;        /* (body.len) bytes so far */
    uint64_t left;          /* bytes still due: of the Content-Length body, or of the chunk */
    uint64_t chunk_size;    /* the chunk size being read */
    size_t chunk_line;      /* bytes of the chunk-size line so far */
    bool chunk_digits;      /* a hex digit of this size was seen */
    bool chunk_ext;         /* the extension part (after ';') started */
    size_t trailer_bytes;   /* trailer section bytes so far */
    int trailer_line_state; /* 0 line start, 1 in the name, 2 in the value */
    /* The refusal. */
    int status;    /* HTTP status of a FAILED parse */
    char why[200]; /* what was wrong, lower case */
};

/* Zeroes p and sets its limits. */
void http__parse_init(struct http__parse *p, size_t max_header_bytes, size_t max_body_bytes);
/* Frees what p holds. */
void http__parse_release(struct http__parse *p);
/* Back to the start of a request, keeping the limits; what a finished
 * request took away (head, fields, body) must have been moved out first or
 * is freed here. */
void http__parse_reset(struct http__parse *p);
/* Consumes up to len bytes: returns how many, and *res says what happened.
 * After BODY the caller feeds on; after DONE it takes the request out
 * (http__parse_* accessors) and resets before the next one. */
size_t http__parse_feed(struct http__parse *p, const char *data, size_t len,
                        enum http__parse_result *res);
/* A field of a complete head (case-insensitive name), or NULL. */
const char *http__parse_field(const struct http__parse *p, const char *name);
/* The first byte of a request head the parser would see (no bytes of this
 * request consumed yet)? */
static inline bool http__parse_idle(const struct http__parse *p)
{
    return !p->head_started;
}

/* The request id for a head: the client's x-request-id when it is 1..128
 * visible ASCII bytes, else a fresh one (32 hex digits). out has room for
 * HTTP_REQUEST_ID_MAX + 1 bytes. */
void http__request_id(const char *client, char *out);

/* Formats an IMF-fixdate ("Sun, 06 Nov 1994 08:49:37 GMT") for the current
 * second into out[30]; cached per second in s. */
const char *http__date(struct http_server *s);

/* ------------------------------------------------------ server and conns */

/* Per-address connection counts (the per-client cap): a chained hash table. */
struct http__peer {
    struct http__peer *next; /* bucket chain */
    uint8_t addr[16];        /* IPv4 in the first 4 bytes, or IPv6 */
    uint8_t family;          /* AF_INET / AF_INET6 */
    int n_conns;             /* admitted connections open from it */
};

struct http_conn;

struct http_server {
    struct event_base *base;
    struct http_config cfg;          /* copied at creation */
    const struct http_hooks *hooks;  /* the owner's; outlives us */
    struct evconnlistener *listener; /* NULL once draining */
    int port;                        /* bound */
    bool draining;                   /* no keep-alive, no accepting */
    int n_admitted;                  /* connections under the caps */
    int n_refusing;                  /* refused connections still closing (503 / 429) */
    int n_requests;                  /* handed over, not finished */
    struct http_conn *conns;         /* every open connection (doubly linked) */
    struct http_request *requests;   /* every unfinished request (doubly linked) */
    struct http__peer **peers;       /* (peer_mask + 1) buckets */
    uint32_t peer_mask;              /* buckets - 1 (a power of two minus one) */
    /* Accept back-off when the process is out of descriptors or memory. */
    struct event *accept_retry;  /* re-enables the listener */
    int accept_retry_ms;         /* the next delay: 100 ms doubling to 1 s */
    uint64_t accept_paused_ns;   /* start of the current episode, 0: none */
    int accept_failures;         /* failed attempts in the current episode */
    bool accept_failed_again;    /* an accept failed after the last success (the episode goes on) */
    struct event *accept_settle; /* after a round of accepts: did the episode end? */
    /* The Date header, formatted once per second. */
    long date_sec;      /* the second date_text is for */
    char date_text[32]; /* IMF-fixdate */
};

/* http_conn.c: a connection for an accepted socket (TCP_NODELAY set, peer
 * text known), admitted under the caps or refused with status (503 / 429)
 * and why. Returns NULL only when libevent cannot make a bufferevent. */
struct http_conn *http__conn_new(struct http_server *s, int fd, const char *peer,
                                 struct http__peer *counted, int refuse_status,
                                 const char *refuse_why);
/* Closes now, then an unfinished request's owner hears on_gone. */
void http__conn_close(struct http_conn *c);
/* The next connection of the server's list. */
struct http_conn *http__conn_next(struct http_conn *c);
/* Frees every unfinished request (http_server_free). */
void http__request_free_all(struct http_server *s);
/* Draining: closes c now if it is idle, else makes its answer its last. */
void http__conn_drain(struct http_conn *c);
/* http_server.c: c closed; give back its cap slots. */
void http__server_forget(struct http_server *s, struct http__peer *counted, bool refused);

/* The error body: the owner's hook, or the default OpenAI-shaped one. */
void http__error_body(struct http_server *s, const char *path, int status, const char *why,
                      struct buf *out);

#endif
