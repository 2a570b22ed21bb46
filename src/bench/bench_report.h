/*
 * bench_report.h - what a bench run writes: the summary as JSON and as a
 * text table, every request as one JSONL record, latency CDF plots (SVG).
 *
 * Units in every output: times in milliseconds (fields end in _ms), rates per
 * second, ratios in [0, 1]. Field names are documented in docs/bench.md.
 * Single-threaded; files are written whole (a failed write is an error).
 */
#ifndef INFERD_BENCH_REPORT_H
#define INFERD_BENCH_REPORT_H

#include "base/err.h"
#include "bench/bench_metrics.h"

#include <jansson.h>
#include <stdio.h>

/* New JSON object with every figure of s (and of c when non-NULL). */
json_t *bench_report_summary_json(const struct bench_summary *s, const struct bench_cost *c);

/* One JSON object per record and line. */
int bench_report_records(const char *path, const struct bench_record *recs, size_t n,
                         struct err_msg *m);

/* The human-readable table. */
void bench_report_text(FILE *f, const struct bench_summary *s, const struct bench_cost *c);

/* TTFT, TPOT, ITL and E2E CDFs of the successful requests in one SVG. */
int bench_report_cdf_svg(const char *path, const struct bench_record *recs, size_t n,
                         struct err_msg *m);

/* Writes a JSON value to path (indented). */
int bench_report_write_json(const char *path, json_t *j, struct err_msg *m);

#endif
