/* A stand-alone C program linked against libtxmap.so (tests/smoke.rs builds
 * and runs it; it is not part of the static test library). Usage: smoke DIR */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "txmap.h"

#define FAIL(what)                                                              \
    do {                                                                        \
        fprintf(stderr, "smoke: %s failed: %s\n", what, txmap_errmsg());        \
        return 1;                                                               \
    } while (0)

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s DIR\n", argv[0]);
        return 2;
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/native.txm", argv[1]);

    /* Native API. */
    txmap_region *r = NULL;
    txmap_view *v = NULL;
    if (txmap_region_create(path, 4096, 0, &r) != TXMAP_OK) FAIL("txmap_region_create");
    if (txmap_view_open(r, &v) != TXMAP_OK) FAIL("txmap_view_open");
    uint64_t *counter = txmap_view_base(v);
    for (int i = 0; i < 5; i++) {
        int rc;
        do {
            if (txmap_begin(v, 0) != TXMAP_OK) FAIL("txmap_begin");
            ++*counter;
        } while ((rc = txmap_commit(v)) == TXMAP_CONFLICT);
        if (rc != TXMAP_OK) FAIL("txmap_commit");
    }
    if (*counter != 5) FAIL("native counter");
    txmap_view_close(v);
    txmap_region_close(r);

    /* LIBXAC calls. */
    if (xInit(argv[1], XAC_DURABLE) != 0) FAIL("xInit");
    uint64_t *x = xMmap("xac", 4096);
    if (x == NULL) FAIL("xMmap");
    do {
        if (xbegin() != 0) FAIL("xbegin");
        x[0] += 41;
        x[1] = x[0] + 1;
    } while (xend() == XAC_ABORTED);
    if (x[1] != 42) FAIL("xac value");
    if (xMunmap("xac") != 0) FAIL("xMunmap");
    if (xShutdown() != 0) FAIL("xShutdown");

    printf("smoke: ok\n");
    return 0;
}
