/* The LIBXAC-style calls across processes: forked children each call xInit
 * and xMmap on the same region. Run by tests/xac_processes.rs, one function
 * at a time (the LIBXAC state is process-wide). */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ctest.h"

#define CHILDREN 4
#define INCREMENTS 200

/* A child's body: returns 0 or the line of the failed check (its exit code
 * is that line modulo 256, reported in full on stderr by CHECK). */
static int counter_child(const char *dir, int wfd) {
    CHECK_EQ(xInit(dir, XAC_DURABLE), 0);
    volatile uint64_t *x = xMmap("counter", PAGE_SIZE);
    CHECK(x != NULL);
    long aborts = 0;
    for (int i = 0; i < INCREMENTS; i++) {
        for (;;) {
            CHECK_EQ(xbegin(), 0);
            x[0] = x[0] + 1;
            int r = xend();
            if (r == XAC_COMMITTED) {
                break;
            }
            CHECK_EQ(r, XAC_ABORTED);
            aborts++;
        }
    }
    CHECK_EQ(xShutdown(), 0);
    CHECK_EQ(write(wfd, &aborts, sizeof aborts), (long)sizeof aborts);
    return 0;
}

/* Waits for every child; fails unless each exited with 0. */
static int wait_children(pid_t *pids, int n) {
    for (int i = 0; i < n; i++) {
        int status = 0;
        CHECK_EQ(waitpid(pids[i], &status, 0), pids[i]);
        CHECK(WIFEXITED(status));
        CHECK_EQ(WEXITSTATUS(status), 0);
    }
    return 0;
}

/* CHILDREN processes race to create the region and increment one counter,
 * retrying on XAC_ABORTED; no increment may be lost. */
int ctest_xac_processes_counter(const char *dir) {
    int fds[2];
    CHECK_EQ(pipe(fds), 0);
    pid_t pids[CHILDREN];
    for (int i = 0; i < CHILDREN; i++) {
        pids[i] = fork();
        CHECK(pids[i] >= 0);
        if (pids[i] == 0) {
            close(fds[0]);
            _exit(counter_child(dir, fds[1]) & 0xff ? 1 : 0);
        }
    }
    close(fds[1]);
    CHECK_OK(wait_children(pids, CHILDREN));
    long aborts = 0, a = 0;
    int reports = 0;
    while (read(fds[0], &a, sizeof a) == (ssize_t)sizeof a) {
        aborts += a;
        reports++;
    }
    close(fds[0]);
    CHECK_EQ(reports, CHILDREN);
    fprintf(stderr, "%d processes, %ld aborts\n", CHILDREN, aborts);

    CHECK_EQ(xInit(dir, XAC_DURABLE), 0);
    volatile uint64_t *x = xMmap("counter", 0);
    CHECK(x != NULL);
    CHECK_EQ(xbegin(), 0);
    CHECK_EQ(x[0], CHILDREN * INCREMENTS);
    CHECK_EQ(xend(), XAC_COMMITTED);
    CHECK_EQ(xShutdown(), 0);
    return 0;
}

static int read_byte(int fd) {
    char c = 0;
    return read(fd, &c, 1) == 1 ? c : -1;
}

/* A deterministic conflict: A reads and writes page 0 in a transaction,
 * then B commits a write to page 0; A's xend must return XAC_ABORTED and
 * its write must vanish; A's retry commits. The parent has the region
 * mapped too (the children xInit again after fork). */
int ctest_xac_processes_conflict(const char *dir) {
    CHECK_EQ(xInit(dir, XAC_DURABLE), 0);
    volatile uint64_t *x = xMmap("conflict", PAGE_SIZE);
    CHECK(x != NULL);
    CHECK_EQ(xbegin(), 0);
    x[0] = 10;
    CHECK_EQ(xend(), XAC_COMMITTED);

    int a_to_b[2], b_to_a[2];
    CHECK_EQ(pipe(a_to_b), 0);
    CHECK_EQ(pipe(b_to_a), 0);
    pid_t pids[2];
    pids[0] = fork();
    CHECK(pids[0] >= 0);
    if (pids[0] == 0) { /* A */
        /* Only A's own ends stay open: if B dies, A reads EOF, not forever. */
        close(a_to_b[0]);
        close(b_to_a[1]);
        int rc = 1;
        if (xInit(dir, XAC_DURABLE) == 0) {
            volatile uint64_t *y = xMmap("conflict", PAGE_SIZE);
            if (y != NULL && xbegin() == 0) {
                uint64_t seen = y[0];
                y[0] = seen + 1;
                (void)!write(a_to_b[1], "a", 1);    /* A is inside */
                if (read_byte(b_to_a[0]) == 'b') { /* B committed */
                    int r = xend();
                    int retried = 0;
                    while (xbegin() == 0) {
                        y[0] = y[0] + 1;
                        if (xend() == XAC_COMMITTED) {
                            retried = 1;
                            break;
                        }
                    }
                    /* 0: aborted as it must, then committed on retry. */
                    rc = seen == 10 && r == XAC_ABORTED && retried ? 0 : r == XAC_COMMITTED ? 2 : 3;
                }
            }
            xShutdown();
        }
        _exit(rc);
    }
    pids[1] = fork();
    CHECK(pids[1] >= 0);
    if (pids[1] == 0) { /* B */
        close(a_to_b[1]);
        close(b_to_a[0]);
        int rc = 1;
        if (xInit(dir, XAC_DURABLE) == 0) {
            volatile uint64_t *y = xMmap("conflict", PAGE_SIZE);
            if (y != NULL && read_byte(a_to_b[0]) == 'a' && xbegin() == 0) {
                y[0] = y[0] + 100;
                if (xend() == XAC_COMMITTED) {
                    rc = 0;
                }
            }
            (void)!write(b_to_a[1], "b", 1);
            xShutdown();
        }
        _exit(rc);
    }
    close(a_to_b[0]);
    close(a_to_b[1]);
    close(b_to_a[0]);
    close(b_to_a[1]);
    for (int i = 0; i < 2; i++) {
        int status = 0;
        CHECK_EQ(waitpid(pids[i], &status, 0), pids[i]);
        CHECK(WIFEXITED(status));
        CHECK_EQ(WEXITSTATUS(status), 0); /* A: 2 = its xend committed despite the conflict */
    }
    /* 10, +100 by B, +1 by A's retry; A's aborted 11 is gone. */
    CHECK_EQ(xbegin(), 0);
    CHECK_EQ(x[0], 111);
    CHECK_EQ(xend(), XAC_COMMITTED);
    CHECK_EQ(xShutdown(), 0);
    return 0;
}
