/*
 * bench_svg.c - see bench_svg.h. Data space -> pixel space is an affine map
 * per axis; y grows upwards in data, downwards in SVG.
 */
#include "bench/bench_svg.h"

#include "base/check.h"
#include "base/log.h"

#include <errno.h>
#include <math.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <unistd.h>

extern char **environ;

#define SVG_W      720
#define SVG_H      440
#define SVG_LEFT   80
#define SVG_RIGHT  180
#define SVG_TOP    40
#define SVG_BOTTOM 60

static const char *const colours[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e",
                                      "#9467bd", "#8c564b", "#e377c2", "#17becf"};

double bench_svg_tick_step(double lo, double hi, int target)
{
    CHECK(hi > lo && target > 0);
    double raw = (hi - lo) / target;
    double p = pow(10, floor(log10(raw)));
    double f = raw / p;
    double nice = f < 1.5 ? 1 : f < 3.5 ? 2 : f < 7.5 ? 5 : 10;
    return nice * p;
}

/* Escapes text for SVG character data. */
static void put_text(struct buf *out, const char *s)
{
    for (; s && *s; s++) {
        if (*s == '<')
            buf_puts(out, "&lt;");
        else if (*s == '>')
            buf_puts(out, "&gt;");
        else if (*s == '&')
            buf_puts(out, "&amp;");
        else
            buf_putc(out, *s);
    }
}

void bench_svg_render(const struct bench_svg_plot *p, struct buf *out)
{
    double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
    for (int s = 0; s < p->n_series; s++)
        for (size_t i = 0; i < p->series[s].n; i++) {
            double x = p->series[s].x[i], y = p->series[s].y[i];
            if (!isfinite(x) || !isfinite(y)) continue;
            x0 = fmin(x0, x), x1 = fmax(x1, x);
            y0 = fmin(y0, y), y1 = fmax(y1, y);
        }
    if (!(x1 >= x0)) x0 = 0, x1 = 1;
    if (!(y1 >= y0)) y0 = 0, y1 = 1;
    /* axes start at zero for non-negative data: shares and rates read better */
    if (x0 > 0) x0 = 0;
    if (y0 > 0) y0 = 0;
    if (x1 == x0) x1 = x0 + 1;
    if (y1 == y0) y1 = y0 + 1;
    double xs = bench_svg_tick_step(x0, x1, 6), ys = bench_svg_tick_step(y0, y1, 5);
    x1 = ceil(x1 / xs) * xs;
    y1 = ceil(y1 / ys) * ys;
    double pw = SVG_W - SVG_LEFT - SVG_RIGHT, ph = SVG_H - SVG_TOP - SVG_BOTTOM;
#define PX(x) (SVG_LEFT + ((x)-x0) / (x1 - x0) * pw)
#define PY(y) (SVG_TOP + ph - ((y)-y0) / (y1 - y0) * ph)
    buf_printf(out,
               "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
               "viewBox=\"0 0 %d %d\" font-family=\"sans-serif\" font-size=\"12\">\n"
               "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
               SVG_W, SVG_H, SVG_W, SVG_H);
    buf_printf(out, "<text x=\"%d\" y=\"24\" font-size=\"15\">", SVG_LEFT);
    put_text(out, p->title);
    buf_puts(out, "</text>\n");
    /* grid and tick labels */
    for (double t = ceil(x0 / xs) * xs; t <= x1 + xs * 1e-9; t += xs) {
        buf_printf(out,
                   "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>"
                   "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%g</text>\n",
                   PX(t), SVG_TOP, PX(t), SVG_TOP + ph, PX(t), SVG_TOP + ph + 16,
                   fabs(t) < xs * 1e-9 ? 0 : t);
    }
    for (double t = ceil(y0 / ys) * ys; t <= y1 + ys * 1e-9; t += ys) {
        buf_printf(out,
                   "<line x1=\"%d\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>"
                   "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%g</text>\n",
                   SVG_LEFT, PY(t), SVG_LEFT + pw, PY(t), SVG_LEFT - 6, PY(t) + 4,
                   fabs(t) < ys * 1e-9 ? 0 : t);
    }
    buf_printf(out,
               "<rect x=\"%d\" y=\"%d\" width=\"%.0f\" height=\"%.0f\" fill=\"none\" "
               "stroke=\"#333\"/>\n",
               SVG_LEFT, SVG_TOP, pw, ph);
    buf_printf(out, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">", SVG_LEFT + pw / 2,
               SVG_H - 16);
    put_text(out, p->xlabel);
    buf_printf(out,
               "</text>\n<text transform=\"translate(18,%.1f) rotate(-90)\" "
               "text-anchor=\"middle\">",
               SVG_TOP + ph / 2);
    put_text(out, p->ylabel);
    buf_puts(out, "</text>\n");
    for (int s = 0; s < p->n_series; s++) {
        const struct bench_svg_series *se = &p->series[s];
        const char *col = colours[s % (int)ARRAY_LEN(colours)];
        if (se->line && se->n > 1) {
            buf_printf(out, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\" points=\"",
                       col);
            for (size_t i = 0; i < se->n; i++)
                if (isfinite(se->x[i]) && isfinite(se->y[i]))
                    buf_printf(out, "%.1f,%.1f ", PX(se->x[i]), PY(se->y[i]));
            buf_puts(out, "\"/>\n");
        }
        if (se->points)
            for (size_t i = 0; i < se->n; i++)
                if (isfinite(se->x[i]) && isfinite(se->y[i]))
                    buf_printf(out, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3.5\" fill=\"%s\"/>\n",
                               PX(se->x[i]), PY(se->y[i]), col);
        double ly = SVG_TOP + 14 + 18 * s;
        buf_printf(out,
                   "<rect x=\"%.1f\" y=\"%.1f\" width=\"12\" height=\"12\" fill=\"%s\"/>"
                   "<text x=\"%.1f\" y=\"%.1f\">",
                   SVG_LEFT + pw + 12, ly - 10, col, SVG_LEFT + pw + 30, ly);
        put_text(out, se->name);
        buf_puts(out, "</text>\n");
    }
    buf_puts(out, "</svg>\n");
#undef PX
#undef PY
}

int bench_svg_write(const struct bench_svg_plot *p, const char *path, struct err_msg *m)
{
    struct buf b = {0};
    bench_svg_render(p, &b);
    FILE *f = fopen(path, "w");
    if (!f) {
        int e = errno;
        buf_release(&b);
        return err_set(m, -e, "cannot write '%s': %s", path, strerror(e));
    }
    bool ok = fwrite(b.data, 1, b.len, f) == b.len;
    ok = (fclose(f) == 0) && ok;
    buf_release(&b);
    if (!ok) return err_set(m, -EIO, "cannot write '%s'", path);
    bench_svg_to_png(path);
    return 0;
}

/* Is prog an executable file in a PATH directory? */
static bool on_path(const char *prog)
{
    const char *path = getenv("PATH");
    if (!path) return false;
    char dir[4096];
    while (*path) {
        size_t n = strcspn(path, ":");
        if (n > 0 && n + strlen(prog) + 2 < sizeof(dir)) {
            snprintf(dir, sizeof(dir), "%.*s/%s", (int)n, path, prog);
            if (access(dir, X_OK) == 0) return true;
        }
        path += n + (path[n] == ':');
    }
    return false;
}

bool bench_svg_to_png(const char *svg_path)
{
    size_t n = strlen(svg_path);
    if (n < 4 || strcmp(svg_path + n - 4, ".svg")) return false;
    char png[4096];
    if (n >= sizeof(png)) return false;
    snprintf(png, sizeof(png), "%.*s.png", (int)(n - 4), svg_path);
    /* rsvg-convert (Debian librsvg2-bin) first, else ImageMagick. */
    char *rsvg[] = {"rsvg-convert", "-o", png, (char *)svg_path, NULL};
    char *magick[] = {"convert", (char *)svg_path, png, NULL};
    char **argv = on_path("rsvg-convert") ? rsvg : on_path("convert") ? magick : NULL;
    if (!argv) return false;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
    pid_t pid;
    int rc = posix_spawnp(&pid, argv[0], &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    int st = 0;
    if (rc == 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0)
        return true;
    log_warn("no PNG for '%s': %s failed (the SVG is written)", svg_path, argv[0]);
    unlink(png);
    return false;
}
