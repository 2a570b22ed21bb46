/*
 * spec.c - tier specifications, sizes, durations, TTL classes (spec.h).
 */
#include "kv/spec.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

int kv_parse_size(const char *s, uint64_t *out, struct err_msg *msg)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || errno || !(v >= 0) || isinf(v))
        return err_set(msg, ERR_INVALID, "size '%s': expected a number with an optional unit", s);
    static const struct {
        const char *unit;
        double mult;
    } units[] = {{"", 1},         {"B", 1},         {"K", 1024.0},     {"KB", 1024.0},
                 {"KiB", 1024.0}, {"M", 1048576.0}, {"MB", 1048576.0}, {"MiB", 1048576.0},
                 {"G", 0x1p30},   {"GB", 0x1p30},   {"GiB", 0x1p30},   {"T", 0x1p40},
                 {"TB", 0x1p40},  {"TiB", 0x1p40}};
    for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
        if (strcasecmp(end, units[i].unit) != 0) continue;
        double b = v * units[i].mult;
        if (b >= 0x1p63) return err_set(msg, ERR_INVALID, "size '%s': too large", s);
        *out = (uint64_t)b;
        return 0;
    }
    return err_set(msg, ERR_INVALID, "size '%s': unknown unit '%s' (B, KiB, MiB, GiB, TiB)", s,
                   end);
}

int kv_parse_duration(const char *s, int64_t *out, struct err_msg *msg)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    double mult = 0;
    if (end != s && !errno && v > 0 && !isinf(v)) {
        if (!strcmp(end, "s") || !*end) mult = 1;
        if (!strcmp(end, "m")) mult = 60;
        if (!strcmp(end, "h")) mult = 3600;
        if (!strcmp(end, "d")) mult = 86400;
    }
    if (mult == 0 || v * mult >= 0x1p62 || v * mult < 1)
        return err_set(msg, ERR_INVALID,
                       "duration '%s': expected a positive number with s, m, h or d", s);
    *out = (int64_t)(v * mult);
    return 0;
}

/* Splits "DIR[:SIZE]" at the last ':' if what follows parses as a size. */
static int dir_and_size(const char *spec, const char *rest, bool size_required,
                        struct kv_tier_spec *out, struct err_msg *msg)
{
    const char *colon = strrchr(rest, ':');
    uint64_t bytes = 0;
    size_t dir_len = strlen(rest);
    if (colon) {
        struct err_msg ignore = {{0}};
        if (kv_parse_size(colon + 1, &bytes, &ignore) == 0) {
            dir_len = (size_t)(colon - rest);
        } else if (size_required) {
            return err_set(msg, ERR_INVALID, "--kv-tier '%s': %s", spec, ignore.text);
        }
    } else if (size_required) {
        return err_set(msg, ERR_INVALID, "--kv-tier '%s': expected DIR:SIZE", spec);
    }
    if (dir_len == 0)
        return err_set(msg, ERR_INVALID, "--kv-tier '%s': the directory is empty", spec);
    if (dir_len >= sizeof(out->path))
        return err_set(msg, ERR_INVALID, "--kv-tier '%s': the directory name is too long", spec);
    if (colon && dir_len != strlen(rest) && bytes == 0)
        return err_set(msg, ERR_INVALID, "--kv-tier '%s': the size must be above 0", spec);
    memcpy(out->path, rest, dir_len);
    out->path[dir_len] = 0;
    out->bytes = bytes;
    return 0;
}

int kv_tier_spec_parse(const char *s, struct kv_tier_spec *out, struct err_msg *msg)
{
    memset(out, 0, sizeof(*out));
    if (!strncmp(s, "ram:", 4)) {
        out->kind = KV_TIER_RAM;
        struct err_msg m = {{0}};
        if (kv_parse_size(s + 4, &out->bytes, &m) || out->bytes == 0)
            return err_set(msg, ERR_INVALID, "--kv-tier '%s': %s", s,
                           m.text[0] ? m.text : "the size must be above 0");
        return 0;
    }
    if (!strncmp(s, "disk:", 5)) {
        out->kind = KV_TIER_DISK;
        return dir_and_size(s, s + 5, false, out, msg);
    }
    if (!strncmp(s, "shared:", 7)) {
        out->kind = KV_TIER_SHARED;
        return dir_and_size(s, s + 7, true, out, msg);
    }
    if (!strncmp(s, "redis://", 8) || !strncmp(s, "redis+unix://", 13)) {
        out->kind = KV_TIER_REDIS;
        if (!strncmp(s, "redis+unix://", 13)) {
            const char *p = s + 13;
            if (*p != '/' || strlen(p) < 2)
                return err_set(msg, ERR_INVALID,
                               "--kv-tier '%s': expected redis+unix:///PATH (an absolute socket "
                               "path)",
                               s);
            if (snprintf(out->path, sizeof(out->path), "unix:%s", p) >= (int)sizeof(out->path))
                return err_set(msg, ERR_INVALID, "--kv-tier '%s': too long", s);
            return 0;
        }
        const char *hp = s + 8;
        const char *colon = strchr(hp, ':');
        if (!colon || colon == hp)
            return err_set(msg, ERR_INVALID, "--kv-tier '%s': expected redis://HOST:PORT[/DB]", s);
        char *end;
        long port = strtol(colon + 1, &end, 10);
        if (end == colon + 1 || port < 1 || port > 65535 || (*end && *end != '/'))
            return err_set(msg, ERR_INVALID, "--kv-tier '%s': bad port", s);
        if (*end == '/') {
            char *e2;
            long db = strtol(end + 1, &e2, 10);
            if (e2 == end + 1 || *e2 || db < 0 || db > 1000)
                return err_set(msg, ERR_INVALID, "--kv-tier '%s': bad database number", s);
        }
        if (strlen(s) >= sizeof(out->path))
            return err_set(msg, ERR_INVALID, "--kv-tier '%s': too long", s);
        snprintf(out->path, sizeof(out->path), "%s", s);
        return 0;
    }
    return err_set(msg, ERR_INVALID,
                   "--kv-tier '%s': expected ram:SIZE, disk:DIR[:SIZE], shared:DIR:SIZE, "
                   "redis://HOST:PORT or redis+unix:///PATH",
                   s);
}

void kv_ttl_classes_default(struct kv_ttl_classes *t)
{
    memset(t, 0, sizeof(*t));
    snprintf(t->c[0].name, sizeof(t->c[0].name), "agent");
    t->c[0].ttl_s = 3 * 86400;
    snprintf(t->c[1].name, sizeof(t->c[1].name), "chat");
    t->c[1].ttl_s = 7 * 86400;
    t->n = 2;
    t->dflt = 1;
}

int kv_ttl_classes_find(const struct kv_ttl_classes *t, const char *name, size_t len)
{
    for (int i = 0; i < t->n; i++)
        if (strlen(t->c[i].name) == len && !memcmp(t->c[i].name, name, len)) return i;
    return -1;
}

int kv_ttl_classes_set(struct kv_ttl_classes *t, const char *spec, struct err_msg *msg)
{
    const char *eq = strchr(spec, '=');
    if (!eq || eq == spec)
        return err_set(msg, ERR_INVALID, "--kv-ttl '%s': expected CLASS=DURATION", spec);
    size_t len = (size_t)(eq - spec);
    if (len >= sizeof(t->c[0].name))
        return err_set(msg, ERR_INVALID, "--kv-ttl '%s': class name too long", spec);
    for (size_t i = 0; i < len; i++) {
        char ch = spec[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
              ch == '_' || ch == '-'))
            return err_set(msg, ERR_INVALID,
                           "--kv-ttl '%s': class names use letters, digits, '_' and '-'", spec);
    }
    int64_t ttl;
    struct err_msg m = {{0}};
    if (kv_parse_duration(eq + 1, &ttl, &m))
        return err_set(msg, ERR_INVALID, "--kv-ttl '%s': %s", spec, m.text);
    int i = kv_ttl_classes_find(t, spec, len);
    if (i < 0) {
        if (t->n == KV_MAX_CLASSES)
            return err_set(msg, ERR_INVALID, "--kv-ttl '%s': at most %d classes", spec,
                           KV_MAX_CLASSES);
        i = t->n++;
        memcpy(t->c[i].name, spec, len);
        t->c[i].name[len] = 0;
    }
    t->c[i].ttl_s = ttl;
    return 0;
}
