/*
 * check.h: the checks the C ABI's tests (ferry_test.c, device_test.c,
 * upgrade_test.c) share. CHECK counts a failure and goes on; MUST stops
 * the run; EXPECT_SAYS checks a call's code and that its message says
 * something. Each test returns failures != 0 at the end.
 */
#ifndef FERRY_EXAMPLES_CHECK_H
#define FERRY_EXAMPLES_CHECK_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ferry.h"

static int failures;

#define CHECK(cond, ...)                                                 \
    do {                                                                 \
        if (!(cond)) {                                                   \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);         \
            fprintf(stderr, __VA_ARGS__);                                \
            fprintf(stderr, " (last error: %s)\n", ferry_last_error()); \
            failures++;                                                  \
        }                                                                \
    } while (0)

/* MUST stops the run: what follows depends on it. */
#define MUST(call)                                                           \
    do {                                                                     \
        int rc_ = (call);                                                    \
        if (rc_ != FERRY_OK) {                                               \
            fprintf(stderr, "FAIL %s:%d: %s = %s: %s\n", __FILE__, __LINE__, \
                    #call, ferry_error_name(rc_), ferry_last_error());       \
            exit(1);                                                         \
        }                                                                    \
    } while (0)

/* EXPECT_SAYS checks that call returns code with a message containing
 * want. */
#define EXPECT_SAYS(code, want, call)                                                       \
    do {                                                                                    \
        int rc_ = (call);                                                                   \
        CHECK(rc_ == (code), "%s = %s, want %s", #call, ferry_error_name(rc_),              \
              ferry_error_name(code));                                                      \
        CHECK(strstr(ferry_last_error(), (want)) != NULL, "%s: message lacks \"%s\"", #call, \
              (want));                                                                      \
    } while (0)

#endif
