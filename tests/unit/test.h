/*
 * test.h - minimal unit test harness.
 *
 * TEST(name) defines a test; main() comes from TEST_MAIN(). EXPECT* record a
 * failure and go on; the run ends with "N passed, N failed" and exit status 1
 * if anything failed.
 */
#ifndef INFERD_TEST_H
#define INFERD_TEST_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef void (*test_fn)(void);
struct test_case {
    const char *name;
    test_fn fn;
};

extern int test_failures_in_case;
extern struct test_case test_cases[];
extern int test_n_cases;

#define TEST(fn_)                                                                                  \
    static void fn_(void);                                                                         \
    __attribute__((constructor)) static void reg_##fn_(void)                                       \
    {                                                                                              \
        test_cases[test_n_cases].name = #fn_;                                                      \
        test_cases[test_n_cases++].fn = fn_;                                                       \
    }                                                                                              \
    static void fn_(void)

#define EXPECT(cond)                                                                               \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "  %s:%d: expected %s\n", __FILE__, __LINE__, #cond);                  \
            test_failures_in_case++;                                                               \
        }                                                                                          \
    } while (0)

#define EXPECT_EQ_INT(a, b)                                                                        \
    do {                                                                                           \
        long long a_ = (long long)(a), b_ = (long long)(b);                                        \
        if (a_ != b_) {                                                                            \
            fprintf(stderr, "  %s:%d: %s == %lld, expected %s == %lld\n", __FILE__, __LINE__, #a,  \
                    a_, #b, b_);                                                                   \
            test_failures_in_case++;                                                               \
        }                                                                                          \
    } while (0)

#define EXPECT_NEAR(a, b, tol)                                                                     \
    do {                                                                                           \
        double a_ = (a), b_ = (b);                                                                 \
        if (!(fabs(a_ - b_) <= (tol))) {                                                           \
            fprintf(stderr, "  %s:%d: %s = %.9g, expected %.9g (tol %g)\n", __FILE__, __LINE__,    \
                    #a, a_, b_, (double)(tol));                                                    \
            test_failures_in_case++;                                                               \
        }                                                                                          \
    } while (0)

#define TEST_MAIN()                                                                                \
    int test_failures_in_case;                                                                     \
    struct test_case test_cases[256];                                                              \
    int test_n_cases;                                                                              \
    int main(void)                                                                                 \
    {                                                                                              \
        int passed = 0, failed = 0;                                                                \
        for (int i = 0; i < test_n_cases; i++) {                                                   \
            test_failures_in_case = 0;                                                             \
            test_cases[i].fn();                                                                    \
            if (test_failures_in_case) {                                                           \
                fprintf(stderr, "FAIL %s\n", test_cases[i].name);                                  \
                failed++;                                                                          \
            } else {                                                                               \
                printf("ok   %s\n", test_cases[i].name);                                           \
                passed++;                                                                          \
            }                                                                                      \
        }                                                                                          \
        printf("%d passed, %d failed\n", passed, failed);                                          \
        return failed ? 1 : 0;                                                                     \
    }

#endif
