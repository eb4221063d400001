#define _DEFAULT_SOURCE /* usleep */
/* Several regions in one transaction from C (issue 19 point 1): the
 * LIBXAC-style calls with two names mapped (xMmap "acct-a" and "acct-b"),
 * forked processes transferring between them, one of them killed with
 * SIGKILL mid-run; and the native txmap_group_begin/txmap_group_commit.
 * The total of both regions is checked inside every transaction (also
 * those that abort) and after recovery. Run by tests/xac_regions.rs. */
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ctest.h"

#define ACCOUNTS 8
#define START 1000
#define TOTAL (2 * ACCOUNTS * START)
/* Account i at page i; worker w's counter at page ACCOUNTS, word w. */
#define SIZE ((ACCOUNTS + 1) * PAGE_SIZE)
#define WORD(p, page, w) ((p)[(page) * PAGE_SIZE / 8 + (w)])

static int64_t total(volatile int64_t *a, volatile int64_t *b) {
    int64_t s = 0;
    for (int i = 0; i < ACCOUNTS; i++) {
        s += WORD(a, i, 0) + WORD(b, i, 0);
    }
    return s;
}

/* A child: `n` transfers (forever if n < 0); exits with 0 or a failed line. */
static int transfers(const char *dir, int w, int n) {
    CHECK_EQ(xInit(dir, XAC_DURABLE), 0);
    volatile int64_t *a = xMmap("acct-a", SIZE);
    volatile int64_t *b = xMmap("acct-b", SIZE);
    /* Also when the other worker was killed while it opened a region
     * first: the open waits for the dead opener's locks. */
    CHECK(a != NULL && b != NULL);
    uint64_t x = 88172645463325252ull ^ (uint64_t)(w + 1);
    for (int k = 0; n < 0 || k < n; k++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        int i = (int)(x % ACCOUNTS), j = (int)((x >> 8) % ACCOUNTS);
        int64_t amount = (int64_t)((x >> 16) % 50) - 25;
        for (;;) {
            if (n < 0 && xbegin() != 0) {
                for (;;) {
                    usleep(1000); /* poisoned, as below: wait for the kill */
                }
            }
            if (n >= 0) {
                CHECK_EQ(xbegin(), 0);
            }
            CHECK_EQ(total(a, b), TOTAL); /* one snapshot of both regions */
            WORD(a, i, 0) -= amount;
            WORD(b, j, 0) += amount;
            WORD(a, ACCOUNTS, w) += 1;
            WORD(b, ACCOUNTS, w) += 1;
            int r = xend();
            if (n < 0 && r == -1) {
                /* The other worker was killed inside a commit across both
                 * regions: they stay poisoned until reopened. Wait for the
                 * kill. */
                for (;;) {
                    usleep(1000);
                }
            }
            CHECK(r == XAC_COMMITTED || r == XAC_ABORTED);
            if (r == XAC_COMMITTED) {
                break;
            }
        }
    }
    CHECK_EQ(xShutdown(), 0);
    return 0;
}

/* Total right, and each worker's counters equal in both regions (at least
 * `min`, for workers below `workers`). */
static int check_regions(const char *dir, int workers, int64_t min) {
    CHECK_EQ(xInit(dir, XAC_DURABLE), 0);
    volatile int64_t *b = xMmap("acct-b", SIZE); /* b first: recovery order */
    volatile int64_t *a = xMmap("acct-a", SIZE);
    CHECK(a != NULL && b != NULL);
    CHECK_EQ(xbegin(), 0);
    CHECK_EQ(total(a, b), TOTAL);
    for (int w = 0; w < workers; w++) {
        CHECK_EQ(WORD(a, ACCOUNTS, w), WORD(b, ACCOUNTS, w));
        CHECK(WORD(a, ACCOUNTS, w) >= min);
    }
    CHECK_EQ(xend(), XAC_COMMITTED);
    CHECK_EQ(xShutdown(), 0);
    return 0;
}

int ctest_xac_regions(const char *dir) {
    /* Set up: both regions with START in every account. */
    CHECK_EQ(xInit(dir, XAC_DURABLE), 0);
    volatile int64_t *a = xMmap("acct-a", SIZE);
    volatile int64_t *b = xMmap("acct-b", SIZE);
    CHECK(a != NULL && b != NULL);
    CHECK_EQ(xbegin(), 0);
    for (int i = 0; i < ACCOUNTS; i++) {
        WORD(a, i, 0) = START;
        WORD(b, i, 0) = START;
    }
    CHECK_EQ(xend(), XAC_COMMITTED);
    /* xabort discards the stores in both regions. */
    CHECK_EQ(xbegin(), 0);
    WORD(a, 0, 0) = 5;
    WORD(b, 0, 0) = 6;
    CHECK_EQ(xabort(), 0);
    CHECK_EQ(xend(), XAC_ABORTED);
    CHECK_EQ(total(a, b), TOTAL);
    /* One region mapped only: the calls that need it say so. */
    CHECK_EQ(xbegin(), 0);
    CHECK_EQ(xpause(), -1);
    CHECK_EQ(errno, ENOTSUP);
    CHECK_EQ(xend(), XAC_COMMITTED);
    CHECK_EQ(xShutdown(), 0);

    /* Two processes transfer 100 times each. */
    pid_t kids[2];
    for (int w = 0; w < 2; w++) {
        kids[w] = fork();
        CHECK(kids[w] >= 0);
        if (kids[w] == 0) {
            _exit(transfers(dir, w, 100));
        }
    }
    for (int w = 0; w < 2; w++) {
        int st;
        CHECK_EQ(waitpid(kids[w], &st, 0), kids[w]);
        CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    }
    CHECK_OK(check_regions(dir, 2, 100));

    /* Killed with SIGKILL at random moments while transferring. */
    for (int round = 0; round < 5; round++) {
        for (int w = 0; w < 2; w++) {
            kids[w] = fork();
            CHECK(kids[w] >= 0);
            if (kids[w] == 0) {
                _exit(transfers(dir, w + 2, -1));
            }
        }
        usleep(20000 + 13000 * round);
        for (int w = 0; w < 2; w++) {
            CHECK_EQ(kill(kids[w], SIGKILL), 0);
            int st;
            CHECK_EQ(waitpid(kids[w], &st, 0), kids[w]);
            CHECK(WIFSIGNALED(st));
        }
        CHECK_OK(check_regions(dir, 4, 0));
    }
    return 0;
}

int ctest_native_group(const char *dir) {
    char pa[4096], pb[4096];
    txmap_region *ra = NULL, *rb = NULL;
    txmap_view *va = NULL, *vb = NULL, *other = NULL;
    CHECK_EQ(txmap_region_create(join(pa, sizeof pa, dir, "ga"), PAGE_SIZE, 0, &ra), TXMAP_OK);
    CHECK_EQ(txmap_region_create(join(pb, sizeof pb, dir, "gb"), PAGE_SIZE, 0, &rb), TXMAP_OK);
    CHECK_EQ(txmap_view_open(ra, &va), TXMAP_OK);
    CHECK_EQ(txmap_view_open(rb, &vb), TXMAP_OK);
    CHECK_EQ(txmap_view_open(rb, &other), TXMAP_OK);
    volatile int64_t *a = txmap_view_base(va), *b = txmap_view_base(vb), *o = txmap_view_base(other);
    txmap_view *both[2] = {va, vb};
    txmap_view *twice[2] = {va, va};
    CHECK_EQ(txmap_group_begin(twice, 2, 0), TXMAP_EINVAL);
    CHECK_EQ(txmap_group_begin(both, 2, 0), TXMAP_OK);
    a[0] = 10;
    b[0] = -10;
    CHECK_EQ(txmap_group_commit(both, 2), TXMAP_OK);
    CHECK_EQ(txmap_in_transaction(va) + txmap_in_transaction(vb), 0);
    /* A commit in between changes what the group read in gb: conflict,
     * and nothing of it is visible in ga. */
    CHECK_EQ(txmap_group_begin(both, 2, 0), TXMAP_OK);
    int64_t seen = b[0];
    a[0] = seen + 1;
    CHECK_EQ(txmap_begin(other, 0), TXMAP_OK);
    o[0] = 99;
    CHECK_EQ(txmap_commit(other), TXMAP_OK);
    CHECK_EQ(txmap_group_commit(both, 2), TXMAP_CONFLICT);
    CHECK_EQ(txmap_begin(va, TXMAP_READ_ONLY), TXMAP_OK);
    CHECK_EQ(a[0], 10);
    CHECK_EQ(txmap_commit(va), TXMAP_OK);
    CHECK_EQ(txmap_group_commit(both, 2), TXMAP_ENOTXN);
    CHECK(strcmp(txmap_strerror(TXMAP_EGROUP), "unknown code") != 0);
    txmap_view_close(other);
    txmap_view_close(vb);
    txmap_view_close(va);
    CHECK_EQ(txmap_region_close(rb), TXMAP_OK);
    CHECK_EQ(txmap_region_close(ra), TXMAP_OK);
    return 0;
}
