#define _DEFAULT_SOURCE /* usleep */
/* Ordered commits from C: the native calls (txmap_order, txmap_order_next,
 * txmap_order_give_up, txmap_order_status, txmap_order_skip_to) and the
 * LIBXAC-style xorder/xorderNext across processes; priority for repeatedly
 * conflicting transactions (TXMAP_NO_PRIORITY, txmap_priority_counts). Run
 * by tests/ordered.rs. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ctest.h"

static int status_is(txmap_region *r, uint32_t g, uint64_t next, uint64_t committed, uint64_t skipped) {
    txmap_order_state s;
    CHECK_EQ(txmap_order_status(r, g, &s), TXMAP_OK);
    CHECK_EQ(s.next, next);
    CHECK_EQ(s.committed, committed);
    CHECK_EQ(s.skipped, skipped);
    return 0;
}

int ctest_native_ordered(const char *dir) {
    txmap_region *r = NULL;
    txmap_view *v = NULL;
    CHECK_OK(fresh_region(dir, "ordered.txm", 4, &r, &v));
    volatile uint64_t *p = txmap_view_base(v);

    /* Number 0 commits; it cannot be claimed again. */
    CHECK_EQ(txmap_order(v, 5, 0), TXMAP_OK);
    CHECK_EQ(txmap_order(v, 5, 1), TXMAP_EINVAL); /* already holds one */
    CHECK_EQ(txmap_begin(v, 0), TXMAP_OK);
    p[0] = 100;
    CHECK_EQ(txmap_commit(v), TXMAP_OK);
    CHECK_OK(status_is(r, 5, 1, 1, 0));
    CHECK_EQ(txmap_order(v, 5, 0), TXMAP_ESKIPPED);

    /* order_next hands out 1; giving it up skips it. */
    uint64_t n = 99;
    CHECK_EQ(txmap_order_next(v, 5, &n), TXMAP_OK);
    CHECK_EQ(n, 1);
    CHECK_EQ(txmap_order_give_up(v), TXMAP_OK);
    CHECK_OK(status_is(r, 5, 2, 1, 1));
    txmap_order_state s;
    CHECK_EQ(txmap_order_status(r, 5, &s), TXMAP_OK);
    CHECK_EQ(s.last_skipped_plus_1, 2);

    /* A transaction that stores nothing still takes its turn. */
    CHECK_EQ(txmap_order(v, 5, 2), TXMAP_OK);
    CHECK_EQ(txmap_begin(v, 0), TXMAP_OK);
    CHECK_EQ(txmap_commit(v), TXMAP_OK);
    CHECK_OK(status_is(r, 5, 3, 2, 1));

    /* A holder skipped past fails at commit, and its store vanishes. */
    CHECK_EQ(txmap_order(v, 5, 4), TXMAP_OK);
    CHECK_EQ(txmap_order_skip_to(r, 5, 6), TXMAP_OK);
    CHECK_EQ(txmap_begin(v, 0), TXMAP_OK);
    p[0] = 200;
    CHECK_EQ(txmap_commit(v), TXMAP_ESKIPPED);
    CHECK(errmsg_has("skipped"));
    CHECK_EQ(txmap_begin(v, TXMAP_READ_ONLY), TXMAP_OK);
    CHECK_EQ(p[0], 100);
    CHECK_EQ(txmap_commit(v), TXMAP_OK);
    CHECK_OK(status_is(r, 5, 6, 2, 4));

    /* Bad arguments. */
    CHECK_EQ(txmap_order(v, 64, 0), TXMAP_EINVAL);
    CHECK_EQ(txmap_order_next(v, 5, NULL), TXMAP_EINVAL);
    CHECK_EQ(txmap_order_status(r, 64, &s), TXMAP_EINVAL);
    CHECK_EQ(txmap_order_status(r, 5, NULL), TXMAP_EINVAL);

    CHECK_EQ(txmap_view_close(v), TXMAP_OK);
    CHECK_EQ(txmap_region_close(r), TXMAP_OK);
    return 0;
}

/* View a conflicts `k` times in a row: view b commits page 0 during each
 * of a's transactions. */
static int conflict_times(txmap_view *a, txmap_view *b, int k) {
    volatile uint64_t *pa = txmap_view_base(a);
    volatile uint64_t *pb = txmap_view_base(b);
    for (int i = 0; i < k; i++) {
        CHECK_EQ(txmap_begin(a, 0), TXMAP_OK);
        pa[0] = pa[0] + 1;
        CHECK_EQ(txmap_begin(b, 0), TXMAP_OK);
        pb[0] = pb[0] + 10;
        CHECK_EQ(txmap_commit(b), TXMAP_OK);
        CHECK_EQ(txmap_commit(a), TXMAP_CONFLICT);
    }
    return 0;
}

/* After 3 conflicts in a row a transaction takes priority by default, and
 * never with TXMAP_NO_PRIORITY. */
int ctest_native_priority(const char *dir) {
    for (int off = 0; off < 2; off++) {
        char path[4096];
        join(path, sizeof path, dir, off ? "nopriority.txm" : "priority.txm");
        txmap_options opts = {.flags = off ? TXMAP_NO_PRIORITY : 0};
        txmap_region *r = NULL;
        txmap_view *a = NULL, *b = NULL;
        CHECK_EQ(txmap_region_create_options(path, 4 * PAGE_SIZE, &opts, &r), TXMAP_OK);
        CHECK_EQ(txmap_view_open(r, &a), TXMAP_OK);
        CHECK_EQ(txmap_view_open(r, &b), TXMAP_OK);
        CHECK_OK(conflict_times(a, b, 3));
        CHECK_EQ(txmap_begin(a, 0), TXMAP_OK);
        uint64_t taken = 99, waits = 99;
        CHECK_EQ(txmap_priority_counts(r, &taken, &waits), TXMAP_OK);
        CHECK_EQ(taken, off ? 0 : 1);
        CHECK_EQ(waits, 0);
        CHECK_EQ(txmap_commit(a), TXMAP_OK);
        CHECK_EQ(txmap_priority_counts(r, NULL, NULL), TXMAP_OK);
        CHECK_EQ(txmap_view_close(b), TXMAP_OK);
        CHECK_EQ(txmap_view_close(a), TXMAP_OK);
        CHECK_EQ(txmap_region_close(r), TXMAP_OK);
    }
    return 0;
}

#define WORKERS 3
#define NUMBERS 150
#define GROUP 2

/* A worker process: takes numbers with xorderNext, appends each to the list
 * (x[0] = count, x[1..] = numbers) in its transaction, checking that the
 * last one listed is lower; a number past the end commits an empty
 * transaction, which takes its turn and ends the worker. */
static int ordered_worker(const char *dir) {
    CHECK_EQ(xInit(dir, XAC_DURABLE), 0);
    volatile uint64_t *x = xMmap("ordered", 2 * PAGE_SIZE);
    CHECK(x != NULL);
    for (;;) {
        uint64_t n = 0;
        CHECK_EQ(xorderNext(GROUP, &n), 0);
        for (;;) {
            CHECK_EQ(xbegin(), 0);
            if (n < NUMBERS) {
                uint64_t k = x[0];
                CHECK(k == 0 || x[k] < n);
                x[k + 1] = n;
                x[0] = k + 1;
            }
            int r = xend();
            if (r == XAC_COMMITTED) {
                break;
            }
            CHECK_EQ(r, XAC_ABORTED);
        }
        if (n >= NUMBERS) {
            break;
        }
        usleep(200); /* work outside the transactions */
    }
    CHECK_EQ(xorder(GROUP, 0), -1); /* its turn passed long ago */
    CHECK_EQ(errno, ECANCELED);
    CHECK_EQ(xShutdown(), 0);
    return 0;
}

/* WORKERS processes share the numbers 0..NUMBERS: the list must be exactly
 * 0, 1, ..., NUMBERS - 1, whatever order the workers ran in. */
int ctest_xac_processes_ordered(const char *dir) {
    /* The parent keeps the region open throughout: the order state lives
     * while any process has it open. */
    CHECK_EQ(xInit(dir, XAC_DURABLE), 0);
    volatile uint64_t *x = xMmap("ordered", 2 * PAGE_SIZE);
    CHECK(x != NULL);
    pid_t pids[WORKERS];
    for (int i = 0; i < WORKERS; i++) {
        pids[i] = fork();
        CHECK(pids[i] >= 0);
        if (pids[i] == 0) {
            _exit(ordered_worker(dir) ? 1 : 0);
        }
    }
    for (int i = 0; i < WORKERS; i++) {
        int status = 0;
        CHECK_EQ(waitpid(pids[i], &status, 0), pids[i]);
        CHECK(WIFEXITED(status));
        CHECK_EQ(WEXITSTATUS(status), 0);
    }
    CHECK_EQ(xbegin(), 0);
    CHECK_EQ(x[0], NUMBERS);
    for (uint64_t i = 0; i < NUMBERS; i++) {
        CHECK_EQ(x[i + 1], i);
    }
    CHECK_EQ(xend(), XAC_COMMITTED);
    CHECK_EQ(xShutdown(), 0);
    return 0;
}
