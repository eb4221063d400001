/* Tests of the LIBXAC-style calls. Their state is process-wide: the test
 * functions must run one at a time, in order (see tests/xac.rs). */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "ctest.h"

#define COUNTER_PAGES 3

/* Calls before xInit, and bad arguments to xInit. */
int ctest_xac_before_init(const char *dir) {
    (void)dir;
    errno = 0;
    CHECK(xMmap("counter", PAGE_SIZE) == NULL);
    CHECK_EQ(errno, EINVAL);
    CHECK(errmsg_has("xInit"));
    CHECK_EQ(xbegin(), -1);
    CHECK_EQ(errno, EINVAL);
    CHECK_EQ(xend(), -1);
    CHECK_EQ(xabort(), -1);
    CHECK_EQ(xMunmap("counter"), -1);
    CHECK_EQ(xShutdown(), -1);
    CHECK_EQ(errno, EINVAL);
    CHECK_EQ(setPageAccess(NULL, 0, XAC_READ), -1);
    errno = 0;
    CHECK_EQ(xInit(NULL, XAC_DURABLE), -1);
    CHECK_EQ(errno, EINVAL);
    CHECK(errmsg_has("`dir` is NULL"));
    CHECK_EQ(xInit(dir, 7), -1);
    CHECK_EQ(errno, EINVAL);
    CHECK(errmsg_has("durability"));
    return 0;
}

struct other_thread {
    int begin_rc, begin_errno;
    int timed_rc, timed_errno;
    int end_rc, end_errno;
    int abort_rc;
    int access_rc;
    void *grow_rc;
    int grow_errno;
};

static void *other_thread_main(void *arg) {
    struct other_thread *o = arg;
    errno = 0;
    o->begin_rc = xbegin_try(); /* xbegin would wait (c/xac_threads.c) */
    o->begin_errno = errno;
    errno = 0;
    o->timed_rc = xbegin_timed(1);
    o->timed_errno = errno;
    errno = 0;
    o->end_rc = xend();
    o->end_errno = errno;
    o->abort_rc = xabort();
    o->access_rc = setPageAccess(NULL, 0, XAC_READ);
    errno = 0;
    o->grow_rc = xMmap("counter", 10 * PAGE_SIZE);
    o->grow_errno = errno;
    return NULL;
}

struct increment_thread {
    volatile uint64_t *counter;
    int rc;
};

static void *increment_thread_main(void *arg) {
    struct increment_thread *t = arg;
    t->rc = -100;
    if (xbegin() != 0) {
        return NULL;
    }
    t->counter[0] += 1;
    t->rc = xend();
    return NULL;
}

/* xInit, xMmap, transactions, nesting, xabort, setPageAccess, threads, xMunmap, xShutdown. */
int ctest_xac_session(const char *dir) {
    CHECK_EQ(xInit(dir, XAC_DURABLE), 0);
    errno = 0;
    CHECK_EQ(xInit(dir, XAC_DURABLE), -1);
    CHECK_EQ(errno, EBUSY);

    /* No region mapped yet. */
    CHECK_EQ(xbegin(), -1);
    CHECK_EQ(errno, EINVAL);
    CHECK(errmsg_has("xMmap"));

    /* Bad names. */
    CHECK(xMmap(NULL, PAGE_SIZE) == NULL);
    CHECK_EQ(errno, EINVAL);
    CHECK(xMmap("a/b", PAGE_SIZE) == NULL);
    CHECK_EQ(errno, EINVAL);
    CHECK(xMmap("..", PAGE_SIZE) == NULL);
    CHECK(xMmap("counter-log", PAGE_SIZE) == NULL);
    CHECK_EQ(errno, EINVAL);
    CHECK(errmsg_has("-log"));
    CHECK(xMmap("absent", 0) == NULL);
    CHECK_EQ(errno, EINVAL);

    /* Created zero-filled, rounded up to pages. */
    volatile uint64_t *x = xMmap("counter", 2 * PAGE_SIZE + 1);
    CHECK(x != NULL);
    char path[4096];
    struct stat st;
    CHECK_EQ(stat(join(path, sizeof path, dir, "counter"), &st), 0);
    CHECK_EQ(stat(join(path, sizeof path, dir, "counter-log"), &st), 0);
    CHECK_EQ(x[0], 0);
    CHECK_EQ(x[COUNTER_PAGES * PAGE_SIZE / 8 - 1], 0);

    /* Mapping the same name again returns the same address; another name
     * is mapped beside it, but not inside a transaction. */
    CHECK(xMmap("counter", PAGE_SIZE) == x);
    CHECK_EQ(xbegin(), 0);
    errno = 0;
    CHECK(xMmap("other", PAGE_SIZE) == NULL);
    CHECK_EQ(errno, EBUSY);
    CHECK_EQ(stat(join(path, sizeof path, dir, "other"), &st), -1);
    CHECK_EQ(xend(), XAC_COMMITTED);
    volatile uint64_t *other = xMmap("other", PAGE_SIZE);
    CHECK(other != NULL && other != x);
    CHECK(xMmap("other", PAGE_SIZE) == other);
    CHECK_EQ(xMunmap("other"), 0);
    CHECK_EQ(xMunmap("other"), -1);

    /* A counter. */
    for (int i = 0; i < 10; i++) {
        CHECK_EQ(xbegin(), 0);
        x[0] = x[0] + 1;
        CHECK_EQ(xend(), XAC_COMMITTED);
    }
    CHECK_EQ(x[0], 10);

    /* Nested transactions fold into the outermost. */
    CHECK_EQ(xbegin(), 0);
    x[0] = x[0] + 1;
    CHECK_EQ(xbegin(), 0);
    x[1] = 77;
    CHECK_EQ(xend(), XAC_COMMITTED); /* inner */
    CHECK_EQ(x[1], 77);
    CHECK_EQ(xend(), XAC_COMMITTED); /* outermost */
    CHECK_EQ(x[0], 11);
    CHECK_EQ(x[1], 77);

    /* xabort: the outermost xend returns XAC_ABORTED and nothing changed. */
    CHECK_EQ(xbegin(), 0);
    x[0] = 1000;
    x[512] = 1001; /* second page */
    CHECK_EQ(xbegin(), 0);
    CHECK_EQ(xabort(), 0);
    CHECK_EQ(x[1], 77); /* still open, reads see its snapshot */
    CHECK_EQ(x[0], 11); /* its writes are discarded at once */
    CHECK_EQ(x[512], 0);
    x[512] = 5; /* a later write in the doomed transaction is discarded too */
    CHECK_EQ(xend(), XAC_COMMITTED); /* inner */
    CHECK_EQ(xend(), XAC_ABORTED);
    CHECK_EQ(x[0], 11);
    CHECK_EQ(x[512], 0);
    CHECK_EQ(xbegin(), 0);
    CHECK_EQ(x[0], 11);
    CHECK_EQ(x[512], 0);
    CHECK_EQ(xend(), XAC_COMMITTED);

    /* xend/xabort outside a transaction. */
    errno = 0;
    CHECK_EQ(xend(), -1);
    CHECK_EQ(errno, EINVAL);
    CHECK(errmsg_has("outside a transaction"));
    CHECK_EQ(xabort(), -1);
    CHECK_EQ(errno, EINVAL);

    /* setPageAccess. */
    CHECK_EQ(setPageAccess((void *)x, PAGE_SIZE, XAC_READ), -1);
    CHECK_EQ(errno, EINVAL);
    CHECK_EQ(xbegin(), 0);
    CHECK_EQ(setPageAccess((void *)x, COUNTER_PAGES * PAGE_SIZE, XAC_WRITE), 0);
    CHECK_EQ(setPageAccess((void *)(x + 600), 10, XAC_READ), 0);
    CHECK_EQ(setPageAccess((void *)(x + 600), 10, XAC_READ | XAC_WRITE), 0);
    for (int i = 0; i < COUNTER_PAGES; i++) {
        x[(size_t)i * PAGE_SIZE / 8 + 2] = 500 + (uint64_t)i;
    }
    errno = 0;
    CHECK_EQ(setPageAccess((void *)x, COUNTER_PAGES * PAGE_SIZE + 1, XAC_READ), -1);
    CHECK_EQ(errno, EINVAL);
    CHECK_EQ(setPageAccess((void *)x, 8, 0), -1);
    CHECK_EQ(errno, EINVAL);
    CHECK_EQ(setPageAccess(&st, 8, XAC_READ), -1);
    CHECK_EQ(errno, EINVAL);
    CHECK_EQ(xend(), XAC_COMMITTED);
    CHECK_EQ(x[2 * PAGE_SIZE / 8 + 2], 502);

    /* Another thread cannot begin without waiting while this thread's
     * transaction is open. */
    CHECK_EQ(xbegin(), 0);
    x[0] = x[0] + 1;
    struct other_thread o;
    pthread_t t;
    CHECK_EQ(pthread_create(&t, NULL, other_thread_main, &o), 0);
    CHECK_EQ(pthread_join(t, NULL), 0);
    CHECK_EQ(o.begin_rc, -1);
    CHECK_EQ(o.begin_errno, EBUSY);
    CHECK_EQ(o.timed_rc, -1);
    CHECK_EQ(o.timed_errno, ETIMEDOUT);
    CHECK_EQ(o.end_rc, -1);
    CHECK_EQ(o.end_errno, EPERM);
    CHECK_EQ(o.abort_rc, -1);
    CHECK_EQ(o.access_rc, -1);
    CHECK(o.grow_rc == NULL); /* nor grow it under that transaction */
    CHECK_EQ(o.grow_errno, EBUSY);
    /* Nor unmap or shut down under it; its own thread may grow it. */
    errno = 0;
    CHECK_EQ(xMunmap("counter"), -1);
    CHECK_EQ(errno, EBUSY);
    CHECK(xMmap("counter", PAGE_SIZE) == x);
    CHECK_EQ(xend(), XAC_COMMITTED);
    CHECK_EQ(x[0], 12);

    /* Once it is over, any thread may run transactions on the view. */
    struct increment_thread it = {x, 0};
    CHECK_EQ(pthread_create(&t, NULL, increment_thread_main, &it), 0);
    CHECK_EQ(pthread_join(t, NULL), 0);
    CHECK_EQ(it.rc, XAC_COMMITTED);
    CHECK_EQ(xbegin(), 0);
    CHECK_EQ(x[0], 13);
    CHECK_EQ(xend(), XAC_COMMITTED);

    /* Unmap; again fails. */
    CHECK_EQ(xMunmap("counter"), 0);
    errno = 0;
    CHECK_EQ(xMunmap("counter"), -1);
    CHECK_EQ(errno, EINVAL);
    CHECK(errmsg_has("not mapped"));
    CHECK_EQ(xbegin(), -1);

    /* Map again, growing it: the data is still there. */
    x = xMmap("counter", (COUNTER_PAGES + 2) * PAGE_SIZE);
    CHECK(x != NULL);
    CHECK_EQ(x[0], 13);
    CHECK_EQ(x[1], 77);
    CHECK_EQ(x[(COUNTER_PAGES + 2) * PAGE_SIZE / 8 - 1], 0);
    CHECK_EQ(xbegin(), 0);
    x[(COUNTER_PAGES + 2) * PAGE_SIZE / 8 - 1] = 4242;
    CHECK_EQ(xend(), XAC_COMMITTED);

    /* Grow while mapped: same address. */
    CHECK(xMmap("counter", (COUNTER_PAGES + 4) * PAGE_SIZE) == x);
    CHECK_EQ(xbegin(), 0);
    x[(COUNTER_PAGES + 4) * PAGE_SIZE / 8 - 1] = 4343;
    CHECK_EQ(xend(), XAC_COMMITTED);

    /* Shutting down rolls back the caller's own open transaction. */
    CHECK_EQ(xbegin(), 0);
    x[0] = 999;
    CHECK_EQ(xShutdown(), 0);
    return 0;
}

/* After xShutdown: xInit again (non-durable this time) and find the data. */
int ctest_xac_reopen(const char *dir) {
    CHECK_EQ(xInit(dir, XAC_NONDURABLE), 0);
    volatile uint64_t *x = xMmap("counter", PAGE_SIZE);
    CHECK(x != NULL);
    CHECK_EQ(x[0], 13);
    CHECK_EQ(x[1], 77);
    CHECK_EQ(x[2 * PAGE_SIZE / 8 + 2], 502);
    CHECK_EQ(x[(COUNTER_PAGES + 2) * PAGE_SIZE / 8 - 1], 4242);
    CHECK_EQ(x[(COUNTER_PAGES + 4) * PAGE_SIZE / 8 - 1], 4343);
    for (int i = 0; i < 100; i++) {
        CHECK_EQ(xbegin(), 0);
        x[0] = x[0] + 1;
        CHECK_EQ(xend(), XAC_COMMITTED);
    }
    CHECK_EQ(xShutdown(), 0);

    CHECK_EQ(xInit(dir, XAC_DURABLE), 0);
    x = xMmap("counter", 0); /* 0: the region's own size */
    CHECK(x != NULL);
    CHECK_EQ(x[0], 113);
    /* A region may be swapped for another after xMunmap. */
    CHECK_EQ(xMunmap("counter"), 0);
    volatile uint64_t *y = xMmap("other", 100);
    CHECK(y != NULL);
    CHECK_EQ(y[0], 0);
    CHECK_EQ(xbegin(), 0);
    y[0] = 5;
    CHECK_EQ(xend(), XAC_COMMITTED);
    CHECK_EQ(xShutdown(), 0);
    errno = 0;
    CHECK_EQ(xShutdown(), -1);
    CHECK_EQ(errno, EINVAL);
    return 0;
}

struct pause_thread {
    volatile uint64_t *x;
    int begin_rc, end_rc;
};

/* Another thread takes its turn while the main thread's transaction is paused. */
static void *pause_other_main(void *arg) {
    struct pause_thread *t = arg;
    t->begin_rc = xbegin_try();
    if (t->begin_rc == 0) {
        t->x[2 * (PAGE_SIZE / 8)] = 3;
        t->end_rc = xend();
    }
    return NULL;
}

/* xpause/xresume: the paused transaction keeps its stores and snapshot
 * while this thread and another run transactions of their own. */
int ctest_xac_pause(const char *dir) {
    CHECK_EQ(xInit(dir, XAC_DURABLE), 0);
    volatile uint64_t *x = xMmap("paused", 4 * PAGE_SIZE);
    CHECK(x != NULL);
    const size_t P = PAGE_SIZE / 8;
    errno = 0;
    CHECK_EQ(xpause(), -1);
    CHECK_EQ(errno, EINVAL);
    CHECK_EQ(xresume(), -1);
    CHECK_EQ(errno, EINVAL);
    CHECK(errmsg_has("no paused transaction"));

    CHECK_EQ(xbegin(), 0);
    x[0] = x[P] + 1;
    CHECK_EQ(xpause(), 0);
    CHECK_EQ(x[0], 0); /* the paused store is invisible */
    struct pause_thread t = {.x = x};
    pthread_t th;
    CHECK_EQ(pthread_create(&th, NULL, pause_other_main, &t), 0);
    CHECK_EQ(pthread_join(th, NULL), 0);
    CHECK_EQ(t.begin_rc, 0);
    CHECK_EQ(t.end_rc, XAC_COMMITTED);
    CHECK_EQ(xend(), -1); /* nothing open now */
    CHECK_EQ(xbegin(), 0); /* one of this thread's own */
    x[3 * P] = 4;
    CHECK_EQ(xend(), XAC_COMMITTED);
    CHECK_EQ(xresume(), 0);
    CHECK_EQ(x[0], 1);
    CHECK_EQ(xend(), XAC_COMMITTED);
    CHECK_EQ(xbegin(), 0);
    CHECK_EQ(x[0] + x[2 * P] + x[3 * P], 1 + 3 + 4);
    CHECK_EQ(xend(), XAC_COMMITTED);

    /* A commit meanwhile of what the paused transaction read: aborted. */
    CHECK_EQ(xbegin(), 0);
    x[P] = x[2 * P] + 1;
    CHECK_EQ(xpause(), 0);
    CHECK_EQ(xbegin(), 0);
    x[2 * P] = 30;
    CHECK_EQ(xend(), XAC_COMMITTED);
    CHECK_EQ(xresume(), 0);
    CHECK_EQ(x[P], 4);
    CHECK_EQ(xend(), XAC_ABORTED);

    /* xresume while a transaction is open fails (and drops the paused one). */
    CHECK_EQ(xbegin(), 0);
    x[0] = 50;
    CHECK_EQ(xpause(), 0);
    CHECK_EQ(xbegin(), 0);
    CHECK_EQ(xresume(), -1);
    CHECK_EQ(errno, EINVAL);
    CHECK_EQ(xend(), XAC_COMMITTED);
    CHECK_EQ(xresume(), -1);
    CHECK_EQ(xbegin(), 0);
    CHECK_EQ(x[0], 1);
    CHECK_EQ(xend(), XAC_COMMITTED);

    /* A paused transaction left at xShutdown is rolled back. */
    CHECK_EQ(xbegin(), 0);
    x[0] = 60;
    CHECK_EQ(xpause(), 0);
    CHECK_EQ(xShutdown(), 0);
    CHECK_EQ(xInit(dir, XAC_DURABLE), 0);
    x = xMmap("paused", 4 * PAGE_SIZE);
    CHECK(x != NULL);
    CHECK_EQ(xbegin(), 0);
    CHECK_EQ(x[0], 1);
    CHECK_EQ(xend(), XAC_COMMITTED);
    CHECK_EQ(xShutdown(), 0);
    return 0;
}
