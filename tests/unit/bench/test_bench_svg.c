/*
 * test_bench_svg.c - the SVG plot writer: 1-2-5 tick steps, one marker per
 * point, a polyline per line series, escaped text, non-finite points skipped.
 */
#include "test.h"

#include "bench/bench_svg.h"

static int count(const char *s, const char *needle)
{
    int n = 0;
    for (const char *p = s; (p = strstr(p, needle)); p++)
        n++;
    return n;
}

TEST(tick_steps)
{
    EXPECT_NEAR(bench_svg_tick_step(0, 10, 5), 2, 1e-12);
    EXPECT_NEAR(bench_svg_tick_step(0, 1, 5), 0.2, 1e-12);
    EXPECT_NEAR(bench_svg_tick_step(0, 7, 6), 1, 1e-12);
    EXPECT_NEAR(bench_svg_tick_step(0, 1e6, 5), 2e5, 1e-6);
    EXPECT_NEAR(bench_svg_tick_step(0, 30, 6), 5, 1e-12);
    EXPECT_NEAR(bench_svg_tick_step(0, 0.003, 6), 0.0005, 1e-15);
}

TEST(render)
{
    double x[4] = {1, 2, 3, NAN}, y[4] = {10, 20, 15, 5};
    struct bench_svg_series se[2] = {
        {.name = "points <a&b>", .x = x, .y = y, .n = 4, .points = true},
        {.name = "line", .x = x, .y = y, .n = 3, .line = true}};
    struct bench_svg_plot p = {
        .title = "t", .xlabel = "x", .ylabel = "y", .series = se, .n_series = 2};
    struct buf b = {0};
    bench_svg_render(&p, &b);
    const char *s = buf_str(&b);
    EXPECT(!strncmp(s, "<svg ", 5));
    EXPECT(strstr(s, "</svg>") != NULL);
    EXPECT_EQ_INT(count(s, "<circle"), 3); /* the NaN point is skipped */
    EXPECT_EQ_INT(count(s, "<polyline"), 1);
    EXPECT(strstr(s, "points &lt;a&amp;b&gt;") != NULL);
    EXPECT(strstr(s, "<a&b>") == NULL);
    buf_release(&b);
}

TEST_MAIN()
