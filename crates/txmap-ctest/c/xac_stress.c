/* Snapshot consistency of LIBXAC programs under load (issue 15, point 1).
 *
 * The parent maps a region, fills PAGES pages in one transaction (every word
 * of page i but the last holds the tag i + 1, the last word a counter),
 * commits, and forks worker processes while its own mapping stays open, as a
 * LIBXAC program does; then it works too. Each forked worker calls xInit and
 * xMmap again (dropping the state it inherited) and runs
 * transactions that read the tags of 30 random pages and move one unit
 * between two counters; every 16th one also sums every counter. A
 * checkpointer process checkpoints all the while. Every value read is checked
 * inside the transaction, before xend, so a torn view counts even when the
 * transaction aborts. Run by tests/xac_stress.rs. */
#define _DEFAULT_SOURCE /* usleep */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/select.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ctest.h"

#define PAGES 4096
#define WORDS (PAGE_SIZE / 8)
#define START 1000 /* each counter's first value */
#define READS 30
#define SUM_EVERY 16

/* What a worker sends back through the pipe when it is done. */
struct report {
    long commits, aborts, torn_tags, torn_sums;
    uint64_t first_bad_page, first_bad_value;
};

static uint64_t next_rand(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* The transactions of one worker on its mapping `r`; adds to `rep`. */
static int work(volatile uint64_t *r, long txns, int id, struct report *out) {
    struct report rep = {0};
    uint64_t seed = 0x9e3779b97f4a7c15ull * (uint64_t)(id + 1) + (uint64_t)getpid();
    for (long t = 0; t < txns; t++) {
        uint64_t pick[READS];
        for (int k = 0; k < READS; k++) {
            pick[k] = next_rand(&seed) % PAGES;
        }
        uint64_t from = next_rand(&seed) % PAGES, to = next_rand(&seed) % PAGES;
        int sum_now = t % SUM_EVERY == 0;
        for (;;) {
            CHECK_EQ(xbegin(), 0);
            int torn = 0;
            for (int k = 0; k < READS; k++) {
                volatile uint64_t *p = r + pick[k] * WORDS;
                /* Two words far apart: a page from before the fill reads 0. */
                uint64_t a = p[0], b = p[WORDS / 2];
                if (a != pick[k] + 1 || b != pick[k] + 1) {
                    if (rep.torn_tags == 0 && !torn) {
                        rep.first_bad_page = pick[k];
                        rep.first_bad_value = a != pick[k] + 1 ? a : b;
                    }
                    torn = 1;
                }
            }
            if (sum_now) {
                uint64_t sum = 0;
                for (uint64_t i = 0; i < PAGES; i++) {
                    sum += r[i * WORDS + WORDS - 1];
                }
                if (sum != (uint64_t)PAGES * START) {
                    rep.torn_sums++;
                }
            }
            rep.torn_tags += torn;
            volatile uint64_t *cf = r + from * WORDS + WORDS - 1;
            volatile uint64_t *ct = r + to * WORDS + WORDS - 1;
            if (from != to && *cf > 0) {
                *cf = *cf - 1;
                *ct = *ct + 1;
            }
            int e = xend();
            if (e == XAC_COMMITTED) {
                rep.commits++;
                break;
            }
            CHECK_EQ(e, XAC_ABORTED);
            rep.aborts++;
        }
    }
    *out = rep;
    return 0;
}

/* A forked worker: maps the region again, works, reports through `wfd`. */
static int worker(const char *dir, const char *name, int durability, long txns, int id, int wfd) {
    CHECK_EQ(xInit(dir, durability), 0);
    volatile uint64_t *r = xMmap(name, (size_t)PAGES * PAGE_SIZE);
    CHECK(r != NULL);
    struct report rep;
    CHECK_OK(work(r, txns, id, &rep));
    CHECK_EQ(xShutdown(), 0);
    CHECK_EQ(write(wfd, &rep, sizeof rep), (long)sizeof rep);
    return 0;
}

/* Checkpoints the region through the native API until `done` reads EOF. */
static int checkpointer(const char *path, int durability, int done) {
    txmap_region *region = NULL;
    CHECK_EQ(txmap_region_open(path, durability == XAC_DURABLE ? 0 : TXMAP_ASYNC, &region), 0);
    long n = 0;
    for (;;) {
        /* Not at once, and not too often: until the first checkpoint the
         * file holds no page as filled, so a reader sent to it reads 0. */
        struct timeval tv = {0, n == 0 ? 50000 : 5000};
        fd_set fds;
        FD_ZERO(&fds);
        FD_SET(done, &fds);
        if (select(done + 1, &fds, NULL, NULL, &tv) > 0) {
            break; /* EOF: the workers are done */
        }
        CHECK_EQ(txmap_region_checkpoint(region), 0);
        n++;
    }
    CHECK_EQ(txmap_region_close(region), 0);
    fprintf(stderr, "checkpointer: %ld checkpoints\n", n);
    return 0;
}

static int wait_ok(pid_t pid) {
    int status = 0;
    CHECK_EQ(waitpid(pid, &status, 0), pid);
    if (WIFSIGNALED(status)) {
        fprintf(stderr, "process %d died of signal %d\n", (int)pid, WTERMSIG(status));
    }
    CHECK(WIFEXITED(status));
    CHECK_EQ(WEXITSTATUS(status), 0);
    return 0;
}

/* `durability`: XAC_DURABLE or XAC_NONDURABLE; `txns`: per worker. */
int ctest_xac_snapshot_stress(const char *dir, int durability, long txns, int workers) {
    const char *name = durability == XAC_DURABLE ? "stress-durable" : "stress-async";
    char path[4096];
    join(path, sizeof path, dir, name);
    CHECK_EQ(xInit(dir, durability), 0);
    volatile uint64_t *r = xMmap(name, (size_t)PAGES * PAGE_SIZE);
    CHECK(r != NULL);
    CHECK_EQ(xbegin(), 0);
    CHECK_EQ(setPageAccess((void *)r, (size_t)PAGES * PAGE_SIZE, XAC_WRITE), 0);
    for (uint64_t i = 0; i < PAGES; i++) {
        for (int w = 0; w < WORDS - 1; w++) {
            r[i * WORDS + w] = i + 1;
        }
        r[i * WORDS + WORDS - 1] = START;
    }
    CHECK_EQ(xend(), XAC_COMMITTED);

    int rep[2], done[2];
    CHECK_EQ(pipe(rep), 0);
    CHECK_EQ(pipe(done), 0);
    pid_t ck = fork();
    CHECK(ck >= 0);
    if (ck == 0) {
        close(rep[0]);
        close(rep[1]);
        close(done[1]);
        _exit(checkpointer(path, durability, done[0]) ? 1 : 0);
    }
    close(done[0]);
    pid_t pids[16];
    CHECK(workers <= 16);
    for (int i = 0; i < workers; i++) {
        pids[i] = fork();
        CHECK(pids[i] >= 0);
        if (pids[i] == 0) {
            close(rep[0]);
            close(done[1]);
            _exit(worker(dir, name, durability, txns, i, rep[1]) ? 1 : 0);
        }
        /* Staggered, as on a loaded machine: a worker starts (and drops
         * the state it inherited) while the others run transactions. */
        usleep(20000);
    }
    close(rep[1]);
    /* The parent works too, on the mapping it had before forking (as the
     * main thread of a STAMP program does). */
    struct report mine;
    CHECK_OK(work(r, txns, workers, &mine));
    int failed = 0;
    for (int i = 0; i < workers; i++) {
        failed |= wait_ok(pids[i]);
    }
    close(done[1]);
    failed |= wait_ok(ck);
    struct report all = mine, one;
    int reports = 0;
    while (read(rep[0], &one, sizeof one) == (ssize_t)sizeof one) {
        if (all.torn_tags == 0 && one.torn_tags > 0) {
            all.first_bad_page = one.first_bad_page;
            all.first_bad_value = one.first_bad_value;
        }
        all.commits += one.commits;
        all.aborts += one.aborts;
        all.torn_tags += one.torn_tags;
        all.torn_sums += one.torn_sums;
        reports++;
    }
    close(rep[0]);
    fprintf(stderr,
            "%s: %d forked workers and the parent, %ld commits, %ld aborts, %ld transactions saw a wrong tag "
            "(first: page %llu read %llu), %ld saw a wrong sum\n",
            name, workers, all.commits, all.aborts, all.torn_tags,
            (unsigned long long)all.first_bad_page, (unsigned long long)all.first_bad_value,
            all.torn_sums);
    CHECK_EQ(failed, 0);
    CHECK_EQ(reports, workers);
    CHECK_EQ(all.torn_tags, 0);
    CHECK_EQ(all.torn_sums, 0);

    /* Committed state is exact: every tag, and the counters' sum. */
    CHECK_EQ(xbegin(), 0);
    uint64_t sum = 0;
    for (uint64_t i = 0; i < PAGES; i++) {
        CHECK_EQ(r[i * WORDS], i + 1);
        sum += r[i * WORDS + WORDS - 1];
    }
    CHECK_EQ(xend(), XAC_COMMITTED);
    CHECK_EQ(sum, (uint64_t)PAGES * START);
    CHECK_EQ(xShutdown(), 0);
    return 0;
}
