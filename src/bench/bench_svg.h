/*
 * bench_svg.h - a small SVG line/scatter plot writer for bench reports
 * (latency CDFs, the throughput-vs-per-user-speed Pareto plot).
 *
 *   +--------------------------------------+
 *   | title                                |
 *   |  y ^        ___----- series 1        |
 *   |    |   __---                         |
 *   |    |_--    o  o series 2             |
 *   |    +-------------------------> x     |
 *   +--------------------------------------+
 *
 * Linear axes with 1-2-5 "nice" ticks, one colour per series, a legend.
 * Output is plain SVG 1.1 text; nothing is loaded from elsewhere.
 * Pure functions over caller-owned arrays; single-threaded.
 */
#ifndef INFERD_BENCH_SVG_H
#define INFERD_BENCH_SVG_H

#include "base/buf.h"
#include "base/err.h"

#include <stdbool.h>
#include <stddef.h>

struct bench_svg_series {
    const char *name; /* legend text */
    const double *x;  /* (n) */
    const double *y;  /* (n) */
    size_t n;         /* points */
    bool line;        /* join points with a polyline (in the given order) */
    bool points;      /* draw a marker at each point */
};

struct bench_svg_plot {
    const char *title;                     /* top line */
    const char *xlabel;                    /* x axis label */
    const char *ylabel;                    /* y axis label */
    const struct bench_svg_series *series; /* (n_series) */
    int n_series;                          /* series */
};

/* Step of 1, 2 or 5 times a power of ten giving about `target` ticks over
 * [lo, hi] (hi > lo). */
double bench_svg_tick_step(double lo, double hi, int target);

/* Renders the plot as an SVG document into out. */
void bench_svg_render(const struct bench_svg_plot *p, struct buf *out);
/* Renders and writes to path; negated errno with m set on failure. Also
 * writes a PNG beside it (bench_svg_to_png) when a converter is installed. */
int bench_svg_write(const struct bench_svg_plot *p, const char *path, struct err_msg *m);

/* Converts X.svg to X.png with rsvg-convert or ImageMagick's convert,
 * whichever is on PATH (in that order). Returns true if the PNG was written;
 * false when no converter is installed or it failed (a warning is logged;
 * the SVG is still the result). */
bool bench_svg_to_png(const char *svg_path);

#endif
