/* Tests of the native C API (txmap_*). */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#include "ctest.h"

/* Create, write, commit, reopen, read back, grow. */

int ctest_native_basic(const char *dir) {
    char path[4096];
    join(path, sizeof path, dir, "basic.txm");
    txmap_region *r = NULL;
    txmap_view *v = NULL;

    CHECK_EQ(txmap_region_create(path, 16 * PAGE_SIZE, 0, &r), TXMAP_OK);
    CHECK(r != NULL);
    CHECK_EQ(txmap_region_size(r), 16 * PAGE_SIZE);
    CHECK_EQ(txmap_view_open(r, &v), TXMAP_OK);
    CHECK(v != NULL);
    CHECK_EQ(txmap_view_len(v), 16 * PAGE_SIZE);
    char *base = txmap_view_base(v);
    CHECK(base != NULL);
    CHECK_EQ(txmap_in_transaction(v), 0);

    /* Outside a transaction the view shows committed data (zeros). */
    CHECK_EQ(((uint64_t *)base)[0], 0);

    CHECK_EQ(txmap_begin(v, 0), TXMAP_OK);
    CHECK_EQ(txmap_in_transaction(v), 1);
    ((uint64_t *)base)[0] = 42;
    strcpy(base + 5 * PAGE_SIZE + 7, "hello from C");
    CHECK_EQ(txmap_commit(v), TXMAP_OK);
    CHECK_EQ(txmap_in_transaction(v), 0);
    /* Committed data is visible outside a transaction. */
    CHECK_EQ(((uint64_t *)base)[0], 42);

    for (int i = 0; i < 10; i++) {
        CHECK_EQ(txmap_begin(v, 0), TXMAP_OK);
        ((uint64_t *)base)[0] += 1;
        CHECK_EQ(txmap_commit(v), TXMAP_OK);
    }

    CHECK_EQ(txmap_view_close(v), TXMAP_OK);
    CHECK_EQ(txmap_region_close(r), TXMAP_OK);

    /* Reopen: the commits survived. */
    r = NULL;
    v = NULL;
    CHECK_EQ(txmap_region_open(path, 0, &r), TXMAP_OK);
    CHECK_EQ(txmap_region_size(r), 16 * PAGE_SIZE);
    CHECK_EQ(txmap_view_open(r, &v), TXMAP_OK);
    base = txmap_view_base(v);
    CHECK_EQ(txmap_begin(v, TXMAP_READ_ONLY), TXMAP_OK);
    CHECK_EQ(((uint64_t *)base)[0], 52);
    CHECK(strcmp(base + 5 * PAGE_SIZE + 7, "hello from C") == 0);
    CHECK_EQ(txmap_commit(v), TXMAP_OK);
    CHECK_EQ(txmap_region_checkpoint(r), TXMAP_OK);
    CHECK_EQ(txmap_region_sync(r), TXMAP_OK);

    /* Grow through the region: the view catches up at its next begin. */
    CHECK_EQ(txmap_region_grow(r, 20 * PAGE_SIZE + 1), TXMAP_OK);
    CHECK_EQ(txmap_region_size(r), 21 * PAGE_SIZE);
    CHECK_EQ(txmap_begin(v, 0), TXMAP_OK);
    CHECK_EQ(txmap_view_len(v), 21 * PAGE_SIZE);
    CHECK_EQ(base[21 * PAGE_SIZE - 1], 0);
    base[21 * PAGE_SIZE - 1] = 'z';
    CHECK_EQ(txmap_commit(v), TXMAP_OK);

    /* Grow through the view: mapped at once. */
    CHECK_EQ(txmap_view_grow(v, 32 * PAGE_SIZE), TXMAP_OK);
    CHECK_EQ(txmap_view_len(v), 32 * PAGE_SIZE);
    CHECK_EQ(txmap_region_size(r), 32 * PAGE_SIZE);
    CHECK_EQ(txmap_begin(v, 0), TXMAP_OK);
    base[32 * PAGE_SIZE - 1] = 'y';
    CHECK_EQ(txmap_commit(v), TXMAP_OK);

    /* Closing the region handle first is fine: the view keeps it alive. */
    CHECK_EQ(txmap_region_close(r), TXMAP_OK);
    CHECK_EQ(txmap_begin(v, TXMAP_READ_ONLY), TXMAP_OK);
    CHECK_EQ(base[21 * PAGE_SIZE - 1], 'z');
    CHECK_EQ(base[32 * PAGE_SIZE - 1], 'y');
    CHECK_EQ(txmap_commit(v), TXMAP_OK);
    CHECK_EQ(txmap_view_close(v), TXMAP_OK);

    /* And the grown region reopens at its new size. */
    CHECK_EQ(txmap_region_open(path, TXMAP_ASYNC, &r), TXMAP_OK);
    CHECK_EQ(txmap_region_size(r), 32 * PAGE_SIZE);
    CHECK_EQ(txmap_region_close(r), TXMAP_OK);
    return 0;
}

/* txmap_abort, txmap_rollback, nesting. */
int ctest_native_abort(const char *dir) {
    txmap_region *r = NULL;
    txmap_view *v = NULL;
    CHECK_EQ(fresh_region(dir, "abort.txm", 4, &r, &v), 0);
    volatile uint64_t *x = txmap_view_base(v);

    CHECK_EQ(txmap_begin(v, 0), TXMAP_OK);
    x[0] = 7;
    x[1000] = 8; /* second page */
    CHECK_EQ(txmap_commit(v), TXMAP_OK);

    /* Abort: the commit reports TXMAP_ABORTED and nothing is visible. */
    CHECK_EQ(txmap_begin(v, 0), TXMAP_OK);
    x[0] = 100;
    CHECK_EQ(txmap_abort(v), TXMAP_OK);
    CHECK_EQ(txmap_in_transaction(v), 1);
    CHECK_EQ(x[1000], 8); /* reads still see the snapshot */
    CHECK_EQ(x[0], 7);    /* and the stores are discarded at once */
    x[0] = 101;
    CHECK_EQ(txmap_commit(v), TXMAP_ABORTED);
    CHECK(errmsg_has("aborted"));
    CHECK_EQ(txmap_in_transaction(v), 0);
    CHECK_EQ(x[0], 7);
    CHECK_EQ(txmap_begin(v, TXMAP_READ_ONLY), TXMAP_OK);
    CHECK_EQ(x[0], 7);
    CHECK_EQ(txmap_commit(v), TXMAP_OK);

    /* Rollback ends the transaction at once, whatever the depth. */
    CHECK_EQ(txmap_begin(v, 0), TXMAP_OK);
    CHECK_EQ(txmap_begin(v, 0), TXMAP_OK);
    x[0] = 200;
    CHECK_EQ(txmap_rollback(v), TXMAP_OK);
    CHECK_EQ(txmap_in_transaction(v), 0);
    CHECK_EQ(x[0], 7);
    CHECK_EQ(txmap_rollback(v), TXMAP_OK); /* no-op outside a transaction */

    /* Nesting: inner commits are folded into the outermost one. */
    CHECK_EQ(txmap_begin(v, 0), TXMAP_OK);
    x[0] = 300;
    CHECK_EQ(txmap_begin(v, TXMAP_READ_ONLY), TXMAP_OK); /* inner flags are ignored */
    x[1] = 301;
    CHECK_EQ(txmap_commit(v), TXMAP_OK);
    CHECK_EQ(txmap_in_transaction(v), 1);
    CHECK_EQ(txmap_commit(v), TXMAP_OK);
    CHECK_EQ(txmap_in_transaction(v), 0);
    CHECK_EQ(x[0], 300);
    CHECK_EQ(x[1], 301);

    /* An abort in an inner transaction dooms the outermost. */
    CHECK_EQ(txmap_begin(v, 0), TXMAP_OK);
    x[0] = 400;
    CHECK_EQ(txmap_begin(v, 0), TXMAP_OK);
    CHECK_EQ(txmap_abort(v), TXMAP_OK);
    CHECK_EQ(txmap_commit(v), TXMAP_OK); /* inner */
    CHECK_EQ(txmap_commit(v), TXMAP_ABORTED);
    CHECK_EQ(x[0], 300);

    /* Calls that need a transaction. */
    CHECK_EQ(txmap_commit(v), TXMAP_ENOTXN);
    CHECK(errmsg_has("outside a transaction"));
    CHECK_EQ(txmap_abort(v), TXMAP_ENOTXN);

    CHECK_EQ(txmap_view_close(v), TXMAP_OK);
    CHECK_EQ(txmap_region_close(r), TXMAP_OK);
    return 0;
}

/* Closing a view rolls back its open transaction. */
int ctest_native_close_in_transaction(const char *dir) {
    txmap_region *r = NULL;
    txmap_view *v = NULL;
    CHECK_EQ(fresh_region(dir, "close.txm", 1, &r, &v), 0);
    uint64_t *x = txmap_view_base(v);
    CHECK_EQ(txmap_begin(v, 0), TXMAP_OK);
    x[0] = 99;
    CHECK_EQ(txmap_view_close(v), TXMAP_OK);
    CHECK_EQ(txmap_view_open(r, &v), TXMAP_OK);
    x = txmap_view_base(v);
    CHECK_EQ(x[0], 0);
    CHECK_EQ(txmap_view_close(v), TXMAP_OK);
    CHECK_EQ(txmap_region_close(r), TXMAP_OK);
    return 0;
}

/* Value of word i of the view, read in a read-only transaction (outside a
 * transaction a view may still show pages as of its last transaction). */
static uint64_t committed(txmap_view *v, size_t i) {
    if (txmap_begin(v, TXMAP_READ_ONLY) != TXMAP_OK) {
        return UINT64_MAX;
    }
    uint64_t x = ((volatile uint64_t *)txmap_view_base(v))[i];
    return txmap_commit(v) == TXMAP_OK ? x : UINT64_MAX;
}

/* Conflicts between two views, interleaved on one thread. */
int ctest_native_conflict(const char *dir) {
    txmap_region *r = NULL;
    txmap_view *a = NULL, *b = NULL;
    CHECK_OK(fresh_region(dir, "conflict.txm", 4, &r, &a));
    CHECK_EQ(txmap_view_open(r, &b), TXMAP_OK);
    volatile uint64_t *xa = txmap_view_base(a), *xb = txmap_view_base(b);
    CHECK(xa != xb);
    const size_t Y = PAGE_SIZE / sizeof(uint64_t); /* index of a word on page 1 */

    /* Lost update: a and b both increment x; the later commit conflicts. */
    CHECK_EQ(txmap_begin(a, 0), TXMAP_OK);
    xa[0] = xa[0] + 1;
    CHECK_EQ(txmap_begin(b, 0), TXMAP_OK);
    xb[0] = xb[0] + 1;
    CHECK_EQ(txmap_commit(b), TXMAP_OK);
    CHECK_EQ(txmap_commit(a), TXMAP_CONFLICT);
    CHECK(errmsg_has("conflict"));
    CHECK_EQ(txmap_in_transaction(a), 0);
    /* The retry succeeds and sees b's commit. */
    CHECK_EQ(txmap_begin(a, 0), TXMAP_OK);
    CHECK_EQ(xa[0], 1);
    xa[0] = xa[0] + 1;
    CHECK_EQ(txmap_commit(a), TXMAP_OK);
    CHECK_EQ(committed(b, 0), 2);

    /* Write skew (a reads x and writes y, b reads y and writes x):
     * serializable transactions conflict... */
    CHECK_EQ(txmap_begin(a, 0), TXMAP_OK);
    CHECK_EQ(txmap_begin(b, 0), TXMAP_OK);
    xa[Y] = xa[0] + 10;
    xb[0] = xb[Y] + 10;
    CHECK_EQ(txmap_commit(a), TXMAP_OK);
    CHECK_EQ(txmap_commit(b), TXMAP_CONFLICT);
    CHECK_EQ(committed(a, 0), 2);
    CHECK_EQ(committed(b, Y), 12);

    /* ...snapshot-isolated ones both commit. */
    CHECK_EQ(txmap_begin(a, TXMAP_SNAPSHOT), TXMAP_OK);
    CHECK_EQ(txmap_begin(b, TXMAP_SNAPSHOT), TXMAP_OK);
    xa[Y] = xa[0] + 100;
    xb[0] = xb[Y] + 100;
    CHECK_EQ(txmap_commit(a), TXMAP_OK);
    CHECK_EQ(txmap_commit(b), TXMAP_OK);
    CHECK_EQ(committed(a, 0), 112);
    CHECK_EQ(committed(a, Y), 102);

    /* But a write-write conflict still aborts under snapshot isolation. */
    CHECK_EQ(txmap_begin(a, TXMAP_SNAPSHOT), TXMAP_OK);
    CHECK_EQ(txmap_begin(b, TXMAP_SNAPSHOT), TXMAP_OK);
    xa[0] = 1;
    xb[0] = 2;
    CHECK_EQ(txmap_commit(b), TXMAP_OK);
    CHECK_EQ(txmap_commit(a), TXMAP_CONFLICT);
    CHECK_EQ(committed(a, 0), 2);

    /* A read-only transaction keeps its snapshot and never conflicts. */
    CHECK_EQ(txmap_begin(a, TXMAP_READ_ONLY), TXMAP_OK);
    CHECK_EQ(xa[0], 2);
    CHECK_EQ(txmap_begin(b, 0), TXMAP_OK);
    xb[0] = 3;
    xb[Y] = 4;
    CHECK_EQ(txmap_commit(b), TXMAP_OK);
    CHECK_EQ(xa[0], 2);
    CHECK_EQ(xa[Y], 102);
    CHECK_EQ(txmap_commit(a), TXMAP_OK);
    CHECK_EQ(committed(a, 0), 3);
    CHECK_EQ(committed(a, Y), 4);

    CHECK_EQ(txmap_view_close(a), TXMAP_OK);
    CHECK_EQ(txmap_view_close(b), TXMAP_OK);
    CHECK_EQ(txmap_region_close(r), TXMAP_OK);
    return 0;
}

struct counter_job {
    txmap_region *region;
    int increments;
    int conflicts;
    int error;
};

static void *counter_thread(void *arg) {
    struct counter_job *job = arg;
    txmap_view *v = NULL;
    if (txmap_view_open(job->region, &v) != TXMAP_OK) {
        job->error = __LINE__;
        return NULL;
    }
    volatile uint64_t *x = txmap_view_base(v);
    for (int i = 0; i < job->increments; i++) {
        for (;;) {
            if (txmap_begin(v, 0) != TXMAP_OK) {
                job->error = __LINE__;
                break;
            }
            x[0] = x[0] + 1;
            x[1 + (size_t)i % 8 * (PAGE_SIZE / 8)] += 1; /* touch other pages too */
            int rc = txmap_commit(v);
            if (rc == TXMAP_OK) {
                break;
            }
            if (rc != TXMAP_CONFLICT) {
                fprintf(stderr, "counter_thread: commit: %d %s\n", rc, txmap_errmsg());
                job->error = __LINE__;
                break;
            }
            job->conflicts++;
        }
        if (job->error) {
            break;
        }
    }
    txmap_view_close(v);
    return NULL;
}

/* Threads with a view each increment a counter; conflicts are retried. */
int ctest_native_threads(const char *dir) {
    enum { THREADS = 4, INCREMENTS = 300 };
    char path[4096];
    join(path, sizeof path, dir, "threads.txm");
    txmap_region *r = NULL;
    CHECK_EQ(txmap_region_create(path, 16 * PAGE_SIZE, TXMAP_ASYNC, &r), TXMAP_OK);
    pthread_t t[THREADS];
    struct counter_job jobs[THREADS];
    for (int i = 0; i < THREADS; i++) {
        jobs[i] = (struct counter_job){r, INCREMENTS, 0, 0};
        CHECK_EQ(pthread_create(&t[i], NULL, counter_thread, &jobs[i]), 0);
    }
    int conflicts = 0;
    for (int i = 0; i < THREADS; i++) {
        CHECK_EQ(pthread_join(t[i], NULL), 0);
        CHECK_EQ(jobs[i].error, 0);
        conflicts += jobs[i].conflicts;
    }
    CHECK_EQ(txmap_region_sync(r), TXMAP_OK);
    txmap_view *v = NULL;
    CHECK_EQ(txmap_view_open(r, &v), TXMAP_OK);
    uint64_t *x = txmap_view_base(v);
    CHECK_EQ(txmap_begin(v, TXMAP_READ_ONLY), TXMAP_OK);
    CHECK_EQ(x[0], THREADS * INCREMENTS);
    uint64_t sum = 0;
    for (int p = 0; p < 8; p++) {
        sum += x[1 + (size_t)p * (PAGE_SIZE / 8)];
    }
    CHECK_EQ(sum, THREADS * INCREMENTS);
    CHECK_EQ(txmap_commit(v), TXMAP_OK);
    CHECK_EQ(txmap_view_close(v), TXMAP_OK);
    CHECK_EQ(txmap_region_close(r), TXMAP_OK);
    fprintf(stderr, "ctest_native_threads: %d conflicts retried\n", conflicts);
    return 0;
}

/* Read-only transactions and their flags. */
int ctest_native_read_only(const char *dir) {
    txmap_region *r = NULL;
    txmap_view *v = NULL;
    CHECK_EQ(fresh_region(dir, "ro.txm", 2, &r, &v), 0);
    volatile uint32_t *x = txmap_view_base(v);
    CHECK_EQ(txmap_begin(v, 0), TXMAP_OK);
    x[0] = 5;
    CHECK_EQ(txmap_commit(v), TXMAP_OK);

    CHECK_EQ(txmap_begin(v, TXMAP_READ_ONLY), TXMAP_OK);
    CHECK_EQ(x[0], 5);
    CHECK_EQ(txmap_commit(v), TXMAP_OK);

    /* A store in a read-only transaction is rolled back and reported. */
    CHECK_EQ(txmap_begin(v, TXMAP_READ_ONLY), TXMAP_OK);
    x[0] = 6;
    CHECK_EQ(txmap_commit(v), TXMAP_ESTOREREADONLY);
    CHECK(errmsg_has("read-only"));
    CHECK_EQ(x[0], 5);

    /* Read-only snapshot (both flags) is accepted. */
    CHECK_EQ(txmap_begin(v, TXMAP_READ_ONLY | TXMAP_SNAPSHOT), TXMAP_OK);
    CHECK_EQ(x[0], 5);
    CHECK_EQ(txmap_commit(v), TXMAP_OK);

    /* Unknown flags. */
    CHECK_EQ(txmap_begin(v, 0x100), TXMAP_EINVAL);
    CHECK(errmsg_has("flags"));
    CHECK_EQ(txmap_in_transaction(v), 0);

    CHECK_EQ(txmap_view_close(v), TXMAP_OK);
    CHECK_EQ(txmap_region_close(r), TXMAP_OK);

    /* A region opened read-only (as one whose files may not be written
       opens by itself): reads work, in read-write transactions too; a
       commit that stored, growing, and creating fail with TXMAP_EREADONLY. */
    char path[4096];
    join(path, sizeof path, dir, "ro.txm");
    CHECK_EQ(txmap_region_open(path, TXMAP_OPEN_READ_ONLY, &r), TXMAP_OK);
    CHECK_EQ(txmap_view_open(r, &v), TXMAP_OK);
    x = txmap_view_base(v);
    CHECK_EQ(txmap_begin(v, 0), TXMAP_OK);
    CHECK_EQ(x[0], 5);
    CHECK_EQ(txmap_commit(v), TXMAP_OK);
    CHECK_EQ(txmap_begin(v, 0), TXMAP_OK);
    x[0] = 7;
    CHECK_EQ(txmap_commit(v), TXMAP_EREADONLY);
    CHECK(errmsg_has("read-only"));
    CHECK_EQ(x[0], 5);
    CHECK_EQ(txmap_region_grow(r, 8 * PAGE_SIZE), TXMAP_EREADONLY);
    CHECK_EQ(txmap_view_close(v), TXMAP_OK);
    CHECK_EQ(txmap_region_close(r), TXMAP_OK);
    join(path, sizeof path, dir, "ro-new.txm");
    txmap_region *r2 = NULL;
    CHECK_EQ(txmap_region_create(path, PAGE_SIZE, TXMAP_OPEN_READ_ONLY, &r2), TXMAP_EREADONLY);
    CHECK(r2 == NULL);
    return 0;
}

/* txmap_set_page_access. */
int ctest_native_page_access(const char *dir) {
    txmap_region *r = NULL;
    txmap_view *v = NULL;
    CHECK_EQ(fresh_region(dir, "access.txm", 8, &r, &v), 0);
    unsigned char *base = txmap_view_base(v);

    CHECK_EQ(txmap_set_page_access(v, base, PAGE_SIZE, TXMAP_ACCESS_READ), TXMAP_ENOTXN);
    CHECK(errmsg_has("outside a transaction"));

    CHECK_EQ(txmap_begin(v, 0), TXMAP_OK);
    CHECK_EQ(txmap_set_page_access(v, base + 10, 3 * PAGE_SIZE, TXMAP_ACCESS_WRITE), TXMAP_OK);
    memset(base, 0xab, 4 * PAGE_SIZE);
    CHECK_EQ(txmap_set_page_access(v, base + 6 * PAGE_SIZE, 2 * PAGE_SIZE, TXMAP_ACCESS_READ),
             TXMAP_OK);
    CHECK_EQ(base[7 * PAGE_SIZE], 0);
    CHECK_EQ(txmap_set_page_access(v, base, 0, TXMAP_ACCESS_READ), TXMAP_OK);
    /* Out of the view, or a bad access. */
    CHECK_EQ(txmap_set_page_access(v, base + 7 * PAGE_SIZE, 2 * PAGE_SIZE, TXMAP_ACCESS_READ),
             TXMAP_ERANGE);
    CHECK(errmsg_has("outside the region"));
    CHECK_EQ(txmap_set_page_access(v, base - 1, 1, TXMAP_ACCESS_READ), TXMAP_EINVAL);
    CHECK_EQ(txmap_set_page_access(v, base, 1, 0), TXMAP_EINVAL);
    CHECK_EQ(txmap_commit(v), TXMAP_OK);

    CHECK_EQ(txmap_begin(v, TXMAP_READ_ONLY), TXMAP_OK);
    CHECK_EQ(txmap_set_page_access(v, base, 8 * PAGE_SIZE, TXMAP_ACCESS_READ), TXMAP_OK);
    CHECK_EQ(base[0], 0xab);
    CHECK_EQ(base[4 * PAGE_SIZE - 1], 0xab);
    CHECK_EQ(base[4 * PAGE_SIZE], 0);
    CHECK_EQ(txmap_commit(v), TXMAP_OK);

    CHECK_EQ(txmap_view_close(v), TXMAP_OK);
    CHECK_EQ(txmap_region_close(r), TXMAP_OK);
    return 0;
}

static int write_garbage(const char *path) {
    FILE *f = fopen(path, "wb");
    if (f == NULL) {
        return -1;
    }
    unsigned char buf[2 * PAGE_SIZE];
    memset(buf, 0xa5, sizeof buf);
    size_t n = fwrite(buf, 1, sizeof buf, f);
    return fclose(f) == 0 && n == sizeof buf ? 0 : -1;
}

/* Errors: bad paths, bad sizes, busy regions, corrupt files, NULL arguments. */
int ctest_native_errors(const char *dir) {
    char path[4096], other[4096];
    txmap_region *r = (txmap_region *)&path; /* not NULL: must be reset on failure */
    txmap_view *v = NULL;

    /* A path in a directory that does not exist. */
    join(path, sizeof path, dir, "no-such-dir/x.txm");
    CHECK_EQ(txmap_region_open(path, 0, &r), TXMAP_EIO);
    CHECK(r == NULL);
    CHECK(errmsg_has("txmap_region_open"));
    CHECK(errmsg_has("no-such-dir/x.txm"));
    CHECK_EQ(txmap_region_create(path, PAGE_SIZE, 0, &r), TXMAP_EIO);
    CHECK(errmsg_has("no-such-dir"));

    /* Bad sizes and flags. */
    join(path, sizeof path, dir, "errors.txm");
    CHECK_EQ(txmap_region_create(path, 0, 0, &r), TXMAP_EINVAL);
    CHECK(errmsg_has("size"));
    CHECK_EQ(txmap_region_create(path, 1000, 0, &r), TXMAP_EINVAL);
    CHECK_EQ(txmap_region_create(path, PAGE_SIZE, 0x40, &r), TXMAP_EINVAL);
    CHECK(errmsg_has("flags"));

    /* Exists already; open twice. */
    CHECK_EQ(txmap_region_create(path, PAGE_SIZE, 0, &r), TXMAP_OK);
    txmap_region *r2 = NULL;
    CHECK_EQ(txmap_region_create(path, PAGE_SIZE, 0, &r2), TXMAP_EEXIST);
    CHECK(errmsg_has("exists"));
    /* A second handle must agree with the durability mode in use. */
    CHECK_EQ(txmap_region_open(path, TXMAP_ASYNC, &r2), TXMAP_EINCOMPAT);
    CHECK(r2 == NULL);
    CHECK(errmsg_has("Durable mode"));
    CHECK_EQ(txmap_region_open(path, 0, &r2), TXMAP_OK);
    CHECK_EQ(txmap_region_grow(r, (uint64_t)1 << 62), TXMAP_ETOOLARGE);
    CHECK_EQ(txmap_region_close(r), TXMAP_OK);
    CHECK_EQ(txmap_region_close(r2), TXMAP_OK);

    /* Corrupt files. */
    join(path, sizeof path, dir, "garbage.txm");
    join(other, sizeof other, dir, "garbage.txm-log");
    CHECK_EQ(write_garbage(path), 0);
    CHECK_EQ(write_garbage(other), 0);
    CHECK_EQ(txmap_region_open(path, 0, &r), TXMAP_ECORRUPT);
    CHECK(errmsg_has("corrupt"));

    /* NULL arguments. */
    CHECK_EQ(txmap_region_open(NULL, 0, &r), TXMAP_EINVAL);
    CHECK(errmsg_has("`path` is NULL"));
    CHECK_EQ(txmap_region_open("", 0, &r), TXMAP_EINVAL);
    CHECK_EQ(txmap_region_create(path, PAGE_SIZE, 0, NULL), TXMAP_EINVAL);
    CHECK(errmsg_has("`out` is NULL"));
    CHECK_EQ(txmap_view_open(NULL, &v), TXMAP_EINVAL);
    CHECK(v == NULL);
    CHECK_EQ(txmap_region_grow(NULL, PAGE_SIZE), TXMAP_EINVAL);
    CHECK_EQ(txmap_region_checkpoint(NULL), TXMAP_EINVAL);
    CHECK_EQ(txmap_region_sync(NULL), TXMAP_EINVAL);
    CHECK_EQ(txmap_region_size(NULL), 0);
    CHECK_EQ(txmap_begin(NULL, 0), TXMAP_EINVAL);
    CHECK(errmsg_has("`view` is NULL"));
    CHECK_EQ(txmap_commit(NULL), TXMAP_EINVAL);
    CHECK_EQ(txmap_abort(NULL), TXMAP_EINVAL);
    CHECK_EQ(txmap_rollback(NULL), TXMAP_EINVAL);
    CHECK_EQ(txmap_view_grow(NULL, PAGE_SIZE), TXMAP_EINVAL);
    CHECK_EQ(txmap_set_page_access(NULL, NULL, 0, TXMAP_ACCESS_READ), TXMAP_EINVAL);
    CHECK(txmap_view_base(NULL) == NULL);
    CHECK_EQ(txmap_view_len(NULL), 0);
    CHECK_EQ(txmap_in_transaction(NULL), 0);
    CHECK_EQ(txmap_view_close(NULL), TXMAP_OK);
    CHECK_EQ(txmap_region_close(NULL), TXMAP_OK);

    /* Codes have descriptions. */
    CHECK(strstr(txmap_strerror(TXMAP_CONFLICT), "conflict") != NULL);
    CHECK(strcmp(txmap_strerror(12345), "unknown code") == 0);
    CHECK(txmap_errmsg() != NULL);
    return 0;
}

static void *errmsg_thread(void *arg) {
    (void)arg;
    /* A fresh thread has no message yet. */
    return (void *)(uintptr_t)(strcmp(txmap_errmsg(), "") == 0);
}

/* The error message is per thread. */
int ctest_native_errmsg_thread_local(const char *dir) {
    (void)dir;
    CHECK_EQ(txmap_begin(NULL, 0), TXMAP_EINVAL);
    CHECK(errmsg_has("txmap_begin"));
    pthread_t t;
    void *empty = NULL;
    CHECK_EQ(pthread_create(&t, NULL, errmsg_thread, NULL), 0);
    CHECK_EQ(pthread_join(t, &empty), 0);
    CHECK(empty != NULL);
    CHECK(errmsg_has("txmap_begin"));
    return 0;
}

/* A snapshot limit: a reader more than 5 commits behind fails with
 * TXMAP_ESNAPSHOT, yet still reads its snapshot until it ends. */
int ctest_native_snapshot_limit(const char *dir) {
    char path[4096];
    join(path, sizeof path, dir, "limit.txm");
    txmap_region *r = NULL, *r2 = NULL;
    txmap_view *w = NULL, *old = NULL;
    CHECK_EQ(txmap_region_create(path, 4 * PAGE_SIZE, 0, &r), TXMAP_OK);
    CHECK_EQ(txmap_region_close(r), TXMAP_OK);
    CHECK_EQ(txmap_region_open_limited(path, 0, 5, 0, &r), TXMAP_OK);
    /* Another limit while open: refused; the default: accepted. */
    CHECK_EQ(txmap_region_open_limited(path, 0, 6, 0, &r2), TXMAP_EINCOMPAT);
    CHECK_EQ(txmap_region_open(path, 0, &r2), TXMAP_OK);
    CHECK_EQ(txmap_view_open(r, &w), TXMAP_OK);
    CHECK_EQ(txmap_view_open(r2, &old), TXMAP_OK);
    volatile uint64_t *x = txmap_view_base(w);
    volatile uint64_t *y = txmap_view_base(old);
    CHECK_EQ(txmap_begin(w, 0), TXMAP_OK);
    x[0] = 1;
    x[512] = 1; /* second page */
    CHECK_EQ(txmap_commit(w), TXMAP_OK);
    CHECK_EQ(txmap_begin(old, TXMAP_READ_ONLY), TXMAP_OK);
    CHECK_EQ(y[0], 1);
    for (uint64_t i = 2; i < 10; i++) {
        CHECK_EQ(txmap_begin(w, 0), TXMAP_OK);
        x[0] = i;
        x[512] = i;
        CHECK_EQ(txmap_commit(w), TXMAP_OK);
    }
    CHECK_EQ(y[512], 1); /* first touch after expiry: still the snapshot */
    CHECK_EQ(txmap_commit(old), TXMAP_ESNAPSHOT);
    CHECK(errmsg_has("expired"));
    CHECK_EQ(txmap_begin(old, TXMAP_READ_ONLY), TXMAP_OK);
    CHECK_EQ(y[512], 9);
    CHECK_EQ(txmap_commit(old), TXMAP_OK);
    CHECK_EQ(txmap_view_close(old), TXMAP_OK);
    CHECK_EQ(txmap_view_close(w), TXMAP_OK);
    CHECK_EQ(txmap_region_close(r2), TXMAP_OK);
    CHECK_EQ(txmap_region_close(r), TXMAP_OK);
    return 0;
}

/* txmap_pause/txmap_resume: the paused transaction keeps its stores and
 * snapshot while the view runs another; a commit meanwhile of a word it
 * read makes its commit conflict; an unrelated one does not. */
int ctest_native_pause(const char *dir) {
    txmap_region *r = NULL;
    txmap_view *v = NULL, *o = NULL;
    CHECK_OK(fresh_region(dir, "pause.txm", 4, &r, &v));
    CHECK_EQ(txmap_view_open(r, &o), TXMAP_OK);
    volatile uint64_t *x = txmap_view_base(v), *xo = txmap_view_base(o);
    const size_t P = PAGE_SIZE / sizeof(uint64_t);
    txmap_paused *p = NULL;

    CHECK_EQ(txmap_pause(v, &p), TXMAP_ENOTXN); /* outside a transaction */
    CHECK(p == NULL);

    CHECK_EQ(txmap_begin(v, 0), TXMAP_OK);
    x[0] = x[P] + 5; /* reads page 1, writes page 0 */
    CHECK_EQ(txmap_pause(v, &p), TXMAP_OK);
    CHECK(p != NULL);
    CHECK_EQ(txmap_in_transaction(v), 0);
    CHECK_EQ(x[0], 0); /* its store is invisible */
    CHECK_EQ(txmap_begin(v, 0), TXMAP_OK);
    x[2 * P] = 7;
    CHECK_EQ(txmap_commit(v), TXMAP_OK);
    CHECK_EQ(txmap_begin(o, 0), TXMAP_OK);
    xo[3 * P] = 8;
    CHECK_EQ(txmap_commit(o), TXMAP_OK);
    CHECK_EQ(txmap_resume(v, p), TXMAP_OK);
    CHECK_EQ(txmap_in_transaction(v), 1);
    CHECK_EQ(x[0], 5);
    CHECK_EQ(x[3 * P], 0); /* its snapshot, not o's commit */
    CHECK_EQ(txmap_commit(v), TXMAP_CONFLICT); /* it read page 3 */

    CHECK_EQ(txmap_begin(v, 0), TXMAP_OK);
    x[0] = x[P] + 5;
    CHECK_EQ(txmap_pause(v, &p), TXMAP_OK);
    CHECK_EQ(txmap_begin(o, 0), TXMAP_OK);
    xo[3 * P] = 9;
    CHECK_EQ(txmap_commit(o), TXMAP_OK);
    CHECK_EQ(txmap_resume(v, p), TXMAP_OK);
    CHECK_EQ(txmap_commit(v), TXMAP_OK); /* page 3 unread */
    CHECK_EQ(committed(o, 0), 5);

    CHECK_EQ(txmap_begin(v, 0), TXMAP_OK);
    x[P] = x[P] + 1;
    CHECK_EQ(txmap_pause(v, &p), TXMAP_OK);
    CHECK_EQ(txmap_begin(o, 0), TXMAP_OK);
    xo[P] = 100;
    CHECK_EQ(txmap_commit(o), TXMAP_OK);
    CHECK_EQ(txmap_resume(v, p), TXMAP_OK);
    CHECK_EQ(txmap_commit(v), TXMAP_CONFLICT); /* lost update prevented */
    CHECK_EQ(committed(o, P), 100);

    /* Freed without resuming: rolled back. */
    CHECK_EQ(txmap_begin(v, 0), TXMAP_OK);
    x[0] = 77;
    CHECK_EQ(txmap_pause(v, &p), TXMAP_OK);
    CHECK_EQ(txmap_paused_free(p), TXMAP_OK);
    CHECK_EQ(txmap_paused_free(NULL), TXMAP_OK);
    CHECK_EQ(committed(o, 0), 5);

    CHECK_EQ(txmap_view_close(o), TXMAP_OK);
    CHECK_EQ(txmap_view_close(v), TXMAP_OK);
    CHECK_EQ(txmap_region_close(r), TXMAP_OK);
    return 0;
}

/* An operation: adds the u64 in args[8..16] to the u64 at offset args[0..8]. */
static int add_op(txmap_op_mem *mem, const void *args, size_t len, void *ctx) {
    uint64_t a[2];
    if (len != sizeof a) {
        return 1;
    }
    memcpy(a, args, sizeof a);
    uint64_t x;
    int rc = txmap_op_read(mem, a[0], &x, sizeof x);
    if (rc != TXMAP_OK) {
        return rc;
    }
    x += a[1];
    ++*(int *)ctx;
    return txmap_op_write(mem, a[0], &x, sizeof x);
}

/* txmap_op_register and txmap_apply: the operation runs at once in the
 * transaction, mixes with plain stores, and its commit survives reopening. */
int ctest_native_operations(const char *dir) {
    static int calls;
    char path[4096];
    join(path, sizeof path, dir, "ops.txm");
    txmap_region *r = NULL;
    txmap_view *v = NULL;
    CHECK_EQ(txmap_op_register(5, "low", add_op, &calls), TXMAP_EINVAL);
    CHECK_EQ(txmap_op_register(130, "add", add_op, &calls), TXMAP_OK);
    CHECK_EQ(txmap_op_register(130, "add", add_op, &calls), TXMAP_OK); /* again: fine */
    CHECK_EQ(txmap_op_register(130, "add", add_op, NULL), TXMAP_EINVAL); /* taken */
    CHECK_OK(fresh_region(dir, "ops.txm", 2, &r, &v));
    volatile uint64_t *x = txmap_view_base(v);
    uint64_t args[2] = {8, 5};
    CHECK_EQ(txmap_apply(v, 130, args, sizeof args), TXMAP_ENOTXN);
    CHECK_EQ(txmap_begin(v, 0), TXMAP_OK);
    x[1] = 100;
    CHECK_EQ(txmap_apply(v, 130, args, sizeof args), TXMAP_OK);
    CHECK_EQ(x[1], 105); /* seen at once */
    x[1] = x[1] * 2;
    CHECK_EQ(txmap_apply(v, 130, args, sizeof args), TXMAP_OK);
    CHECK_EQ(txmap_apply(v, 131, args, sizeof args), TXMAP_EINVAL); /* unregistered */
    CHECK_EQ(txmap_commit(v), TXMAP_OK);
    CHECK_EQ(calls, 2);
    /* A failing operation aborts its transaction. */
    CHECK_EQ(txmap_begin(v, 0), TXMAP_OK);
    x[0] = 1;
    CHECK_EQ(txmap_apply(v, 130, args, 3), TXMAP_EINVAL);
    CHECK(errmsg_has("operation 130 returned 1"));
    CHECK_EQ(txmap_commit(v), TXMAP_ABORTED);
    /* Commutative adds of two views to one counter both commit. */
    txmap_view *w = NULL;
    CHECK_EQ(txmap_view_open(r, &w), TXMAP_OK);
    CHECK_EQ(txmap_begin(v, 0), TXMAP_OK);
    CHECK_EQ(txmap_begin(w, 0), TXMAP_OK);
    CHECK_EQ(txmap_commute(v, TXMAP_OP_ADD_U64, 16, 3), TXMAP_OK);
    CHECK_EQ(txmap_commute(w, TXMAP_OP_ADD_I64, 16, (uint64_t)-1), TXMAP_OK);
    CHECK_EQ(txmap_commute(w, TXMAP_OP_MAX_U64, 24, 9), TXMAP_OK);
    CHECK_EQ(txmap_commute(w, TXMAP_OP_ADD_U64, 20, 1), TXMAP_EINVAL); /* unaligned */
    CHECK_EQ(txmap_commute(w, 130, 16, 1), TXMAP_EINVAL);             /* not built in */
    CHECK_EQ(txmap_commit(v), TXMAP_OK);
    CHECK_EQ(txmap_commit(w), TXMAP_OK);
    CHECK_EQ(txmap_view_close(w), TXMAP_OK);
    CHECK_EQ(txmap_view_close(v), TXMAP_OK);
    CHECK_EQ(txmap_region_close(r), TXMAP_OK);
    CHECK_EQ(txmap_region_open(path, 0, &r), TXMAP_OK);
    CHECK_EQ(txmap_view_open(r, &v), TXMAP_OK);
    x = txmap_view_base(v);
    CHECK_EQ(x[2], 2);
    CHECK_EQ(x[3], 9);
    CHECK_EQ(x[1], 215);
    CHECK_EQ(x[0], 0);
    CHECK_EQ(txmap_view_close(v), TXMAP_OK);
    CHECK_EQ(txmap_region_close(r), TXMAP_OK);
    return 0;
}

/* txmap_nta_begin/_end: a nested top action commits at once; when its
 * enclosing transaction aborts, its undo (operation 132 adding -7) runs;
 * when the enclosing one commits, it stays. */
int ctest_native_nested_top(const char *dir) {
    static int calls;
    txmap_region *r = NULL;
    txmap_view *v = NULL, *o = NULL;
    CHECK_EQ(txmap_op_register(132, "nta add", add_op, &calls), TXMAP_OK);
    CHECK_OK(fresh_region(dir, "nta.txm", 2, &r, &v));
    CHECK_EQ(txmap_view_open(r, &o), TXMAP_OK);
    volatile uint64_t *x = txmap_view_base(v);
    const size_t P = PAGE_SIZE / sizeof(uint64_t);
    /* The action's counter is on page 1, which the parent never reads. */
    uint64_t undo[2] = {PAGE_SIZE, (uint64_t)-7};
    CHECK_EQ(txmap_nta_begin(v, 132, undo, sizeof undo), TXMAP_ENOTXN);
    for (int round = 0; round < 2; round++) {
        /* Snapshot isolation: the parent's plain loads may have read page 1
         * (untracked), which the action then writes. */
        CHECK_EQ(txmap_begin(v, TXMAP_SNAPSHOT), TXMAP_OK);
        x[0] = x[0] + 1;
        CHECK_EQ(txmap_nta_begin(v, 133, undo, sizeof undo), TXMAP_EINVAL); /* unregistered */
        CHECK_EQ(txmap_nta_begin(v, 132, undo, sizeof undo), TXMAP_OK);
        x[P] = x[P] + 7;
        CHECK_EQ(txmap_nta_end(v), TXMAP_OK);
        CHECK_EQ(txmap_nta_end(v), TXMAP_EINVAL); /* none open */
        CHECK_EQ(committed(o, P), 7u); /* visible at once */
        if (round == 0) {
            CHECK_EQ(txmap_abort(v), TXMAP_OK);
            CHECK_EQ(txmap_commit(v), TXMAP_ABORTED);
            CHECK_EQ(committed(o, P), 0u); /* compensated */
            CHECK_EQ(committed(o, 0), 0u);
        } else {
            CHECK_EQ(txmap_commit(v), TXMAP_OK);
        }
    }
    CHECK_EQ(committed(o, 0), 1u);
    CHECK_EQ(committed(o, P), 7u);
    CHECK_EQ(txmap_view_close(o), TXMAP_OK);
    CHECK_EQ(txmap_view_close(v), TXMAP_OK);
    CHECK_EQ(txmap_region_close(r), TXMAP_OK);
    return 0;
}
