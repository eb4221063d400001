/* Helpers shared by the C tests. Each test function takes a directory (that
 * exists and is empty) and returns 0 on success, or the line number of the
 * first failed check (after printing it to stderr). */
#ifndef TXMAP_CTEST_H
#define TXMAP_CTEST_H

#include <stdio.h>
#include <string.h>

#include "txmap.h"

#define CHECK(cond)                                                                    \
    do {                                                                               \
        if (!(cond)) {                                                                 \
            fprintf(stderr, "%s:%d: CHECK(%s) failed (txmap_errmsg: \"%s\")\n", __FILE__, \
                    __LINE__, #cond, txmap_errmsg());                                  \
            return __LINE__;                                                           \
        }                                                                              \
    } while (0)

#define CHECK_EQ(a, b)                                                                    \
    do {                                                                                  \
        long long a_ = (long long)(a), b_ = (long long)(b);                               \
        if (a_ != b_) {                                                                   \
            fprintf(stderr, "%s:%d: CHECK_EQ(%s, %s) failed: %lld != %lld (txmap_errmsg: \"%s\")\n", \
                    __FILE__, __LINE__, #a, #b, a_, b_, txmap_errmsg());                  \
            return __LINE__;                                                              \
        }                                                                                 \
    } while (0)

/* Runs a sub-check that returns 0 or a line number. */
#define CHECK_OK(call)                  \
    do {                                \
        int r_ = (call);                \
        if (r_ != 0) {                  \
            return r_;                  \
        }                               \
    } while (0)

/* Does the calling thread's last error message contain `needle`? */
static inline int errmsg_has(const char *needle) {
    return strstr(txmap_errmsg(), needle) != NULL;
}

/* buf = dir "/" name */
static inline const char *join(char *buf, size_t n, const char *dir, const char *name) {
    snprintf(buf, n, "%s/%s", dir, name);
    return buf;
}

#define PAGE_SIZE 4096

/* Creates the region dir/name of `pages` pages and opens a view on it. */
static inline int fresh_region(const char *dir, const char *name, uint64_t pages, txmap_region **r, txmap_view **v) {
    char path[4096];
    join(path, sizeof path, dir, name);
    CHECK_EQ(txmap_region_create(path, pages * PAGE_SIZE, 0, r), TXMAP_OK);
    CHECK_EQ(txmap_view_open(*r, v), TXMAP_OK);
    return 0;
}

#endif
