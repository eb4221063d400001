/* Threads with the LIBXAC calls: a process runs one transaction at a time,
 * and a second thread's xbegin waits for the open one to end. The state is
 * process-wide: the test functions run one at a time (tests/xac_threads.rs). */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ctest.h"

#define THREADS 4
#define PAGES 4
#define WORDS (PAGE_SIZE / 8)

/* Joins `t`; nonzero if it has not ended within `seconds` (a thread stuck
 * waiting in xbegin fails the test instead of hanging it). */
static int join_within(pthread_t t, int seconds) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += seconds;
    return pthread_timedjoin_np(t, NULL, &ts);
}

/* Defined in src/lib.rs: threads waiting in xbegin. */
int ctest_xbegin_waiters(void);

/* Waits until `n` threads wait in xbegin: 0, or -1 if that has not
 * happened within 20 s (a thread that fails to wait fails the test instead
 * of hanging it). */
static int until_waiting(int n) {
    time_t give_up = time(NULL) + 20;
    while (ctest_xbegin_waiters() != n) {
        if (time(NULL) > give_up) {
            return -1;
        }
        sched_yield();
    }
    return 0;
}

/* ---- counters: 4 threads, many transactions, exact sums ---- */

struct counters {
    volatile uint64_t *x;
    long rounds;
    atomic_int inside; /* threads between xbegin and xend */
};

struct worker {
    struct counters *c;
    int id;
    int rc; /* 0 or the line of the failed check */
};

/* Word `w` of counter page `p`: word 0 counts every transaction, word
 * 1 + id the transactions of thread `id`. */
#define AT(x, p, w) ((x)[(size_t)(p) * WORDS + (w)])

static int worker_body(struct worker *w) {
    volatile uint64_t *x = w->c->x;
    for (long r = 0; r < w->c->rounds; r++) {
        CHECK_EQ(xbegin(), 0);
        /* Alone: no other thread is between its xbegin and xend. */
        CHECK_EQ(atomic_fetch_add(&w->c->inside, 1), 0);
        uint64_t total = AT(x, 0, 0), sum = 0;
        for (int t = 0; t < THREADS; t++) {
            sum += AT(x, 0, 1 + t);
        }
        CHECK_EQ(total, sum);
        /* Its own earlier commits are visible. */
        CHECK_EQ(AT(x, 0, 1 + w->id), r);
        for (int p = 0; p < PAGES; p++) {
            CHECK_EQ(AT(x, p, 0), total);
            CHECK_EQ(AT(x, p, 1 + w->id), r);
            AT(x, p, 0) = total + 1;
            AT(x, p, 1 + w->id) = (uint64_t)r + 1;
            sched_yield(); /* invite the others in */
        }
        /* Nobody changed what it wrote. */
        for (int p = 0; p < PAGES; p++) {
            CHECK_EQ(AT(x, p, 0), total + 1);
            CHECK_EQ(AT(x, p, 1 + w->id), r + 1);
        }
        CHECK_EQ(atomic_fetch_sub(&w->c->inside, 1), 1);
        CHECK_EQ(xend(), XAC_COMMITTED);
    }
    return 0;
}

static void *worker_main(void *arg) {
    struct worker *w = arg;
    w->rc = worker_body(w);
    return NULL;
}

/* Checks every counter page after `rounds` transactions of each thread. */
static int check_sums(volatile uint64_t *x, long rounds) {
    CHECK_EQ(xbegin(), 0);
    for (int p = 0; p < PAGES; p++) {
        CHECK_EQ(AT(x, p, 0), THREADS * rounds);
        for (int t = 0; t < THREADS; t++) {
            CHECK_EQ(AT(x, p, 1 + t), rounds);
        }
    }
    CHECK_EQ(xend(), XAC_COMMITTED);
    return 0;
}

/* THREADS threads each run `rounds` transactions incrementing counters on
 * PAGES pages of one xMmap'd region; each checks it is alone inside its
 * transaction and sees every earlier commit; the sums come out exact, and
 * again after xShutdown and xInit. */
int ctest_xac_threads_counters(const char *dir, long rounds) {
    CHECK_EQ(xInit(dir, XAC_NONDURABLE), 0);
    struct counters c = {.rounds = rounds};
    c.x = xMmap("counters", PAGES * PAGE_SIZE);
    CHECK(c.x != NULL);
    struct worker w[THREADS];
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++) {
        w[i] = (struct worker){.c = &c, .id = i, .rc = -1};
        CHECK_EQ(pthread_create(&t[i], NULL, worker_main, &w[i]), 0);
    }
    for (int i = 0; i < THREADS; i++) {
        CHECK_EQ(join_within(t[i], 600), 0);
    }
    for (int i = 0; i < THREADS; i++) {
        CHECK_EQ(w[i].rc, 0);
    }
    CHECK_OK(check_sums(c.x, rounds));
    CHECK_EQ(xShutdown(), 0);

    CHECK_EQ(xInit(dir, XAC_NONDURABLE), 0);
    volatile uint64_t *x = xMmap("counters", 0);
    CHECK(x == c.x);
    CHECK_OK(check_sums(x, rounds));
    CHECK_EQ(xShutdown(), 0);
    return 0;
}

/* ---- xbegin_try and xbegin_timed; xbegin waits ---- */

struct trier {
    int try_rc, try_errno, try_end;
    int timed_rc, timed_errno;
};

static void *trier_main(void *arg) {
    struct trier *t = arg;
    errno = 0;
    t->try_rc = xbegin_try();
    t->try_errno = errno;
    t->try_end = t->try_rc == 0 ? xend() : -100;
    errno = 0;
    t->timed_rc = xbegin_timed(20);
    t->timed_errno = errno;
    if (t->timed_rc == 0) {
        xend();
    }
    return NULL;
}

struct waiter {
    volatile uint64_t *x;
    int rc, err;
    uint64_t seen;
    int end_rc;
};

static void *waiter_main(void *arg) {
    struct waiter *w = arg;
    errno = 0;
    w->rc = xbegin();
    w->err = errno;
    if (w->rc == 0) {
        w->seen = w->x[0];
        w->x[1] = w->seen + 1;
        w->end_rc = xend();
    }
    return NULL;
}

/* While this thread's transaction is open, another thread's xbegin_try
 * fails with EBUSY and xbegin_timed with ETIMEDOUT; with none open both
 * begin. A thread in xbegin begins once this thread's xend has committed
 * and sees the commit, or fails once this thread shuts the calls down. */
int ctest_xac_threads_try(const char *dir) {
    CHECK_EQ(xInit(dir, XAC_NONDURABLE), 0);
    volatile uint64_t *x = xMmap("try", PAGE_SIZE);
    CHECK(x != NULL);

    CHECK_EQ(xbegin(), 0);
    x[0] = 41;
    struct trier tr;
    pthread_t t;
    CHECK_EQ(pthread_create(&t, NULL, trier_main, &tr), 0);
    CHECK_EQ(join_within(t, 20), 0);
    CHECK_EQ(tr.try_rc, -1);
    CHECK_EQ(tr.try_errno, EBUSY);
    CHECK_EQ(tr.timed_rc, -1);
    CHECK_EQ(tr.timed_errno, ETIMEDOUT);
    CHECK_EQ(x[0], 41); /* this transaction is untouched */

    struct waiter w = {.x = x, .rc = -100};
    CHECK_EQ(pthread_create(&t, NULL, waiter_main, &w), 0);
    CHECK_EQ(until_waiting(1), 0);
    x[0] = 42;
    CHECK_EQ(xend(), XAC_COMMITTED);
    CHECK_EQ(join_within(t, 20), 0);
    CHECK_EQ(w.rc, 0);
    CHECK_EQ(w.seen, 42);
    CHECK_EQ(w.end_rc, XAC_COMMITTED);

    /* Nothing open: both variants begin. */
    CHECK_EQ(pthread_create(&t, NULL, trier_main, &tr), 0);
    CHECK_EQ(join_within(t, 20), 0);
    CHECK_EQ(tr.try_rc, 0);
    CHECK_EQ(tr.try_end, XAC_COMMITTED);
    CHECK_EQ(tr.timed_rc, 0);

    CHECK_EQ(xbegin(), 0);
    CHECK_EQ(x[1], 43);
    CHECK_EQ(xend(), XAC_COMMITTED);

    /* xShutdown by the owner ends the wait: the waiter fails with EINVAL. */
    CHECK_EQ(xbegin(), 0);
    w = (struct waiter){.x = x, .rc = -100};
    CHECK_EQ(pthread_create(&t, NULL, waiter_main, &w), 0);
    CHECK_EQ(until_waiting(1), 0);
    CHECK_EQ(xShutdown(), 0);
    CHECK_EQ(join_within(t, 20), 0);
    CHECK_EQ(w.rc, -1);
    CHECK_EQ(w.err, EINVAL);
    return 0;
}

/* ---- a thread exits with its transaction open ---- */

struct quitter {
    volatile uint64_t *x;
    atomic_int began;
    atomic_int go;
    int rc;
};

static void *quitter_main(void *arg) {
    struct quitter *q = arg;
    q->rc = xbegin();
    if (q->rc == 0 && xbegin() == 0) { /* nested: rolled back whole */
        q->x[0] = 666;
        q->x[WORDS] = 667;
    }
    atomic_store(&q->began, 1);
    while (!atomic_load(&q->go)) {
        sched_yield();
    }
    pthread_exit(NULL); /* without xend */
}

/* A thread that exits with its (nested) transaction open does not block
 * the others: its transaction is rolled back, and a thread waiting in
 * xbegin begins and sees none of its stores. */
int ctest_xac_threads_exit(const char *dir) {
    CHECK_EQ(xInit(dir, XAC_NONDURABLE), 0);
    volatile uint64_t *x = xMmap("exit", 2 * PAGE_SIZE);
    CHECK(x != NULL);

    struct quitter q = {.x = x, .rc = -100};
    pthread_t tq, tw;
    CHECK_EQ(pthread_create(&tq, NULL, quitter_main, &q), 0);
    while (!atomic_load(&q.began)) {
        sched_yield();
    }
    CHECK_EQ(q.rc, 0);
    errno = 0;
    CHECK_EQ(xbegin_try(), -1);
    CHECK_EQ(errno, EBUSY);

    struct waiter w = {.x = x, .rc = -100};
    CHECK_EQ(pthread_create(&tw, NULL, waiter_main, &w), 0);
    CHECK_EQ(until_waiting(1), 0);
    atomic_store(&q.go, 1);
    CHECK_EQ(join_within(tq, 20), 0);
    CHECK_EQ(join_within(tw, 20), 0);
    CHECK_EQ(w.rc, 0);
    CHECK_EQ(w.seen, 0);
    CHECK_EQ(w.end_rc, XAC_COMMITTED);

    CHECK_EQ(xbegin_timed(20 * 1000), 0);
    CHECK_EQ(x[0], 0);
    CHECK_EQ(x[WORDS], 0);
    CHECK_EQ(x[1], 1);
    CHECK_EQ(xend(), XAC_COMMITTED);
    CHECK_EQ(xShutdown(), 0);
    return 0;
}

/* ---- first come, first served ---- */

struct queued {
    volatile uint64_t *x;
    int rc, end_rc;
    uint64_t turn;
};

static void *queued_main(void *arg) {
    struct queued *q = arg;
    q->rc = xbegin();
    if (q->rc == 0) {
        q->turn = ++q->x[0];
        q->end_rc = xend();
    }
    return NULL;
}

static atomic_int held, release;

/* Holds the thread it interrupts (a waiter in xbegin) until `release`, so
 * the waiters cannot take their turn before the main thread tries to. */
static void hold(int sig) {
    (void)sig;
    atomic_fetch_add(&held, 1);
    while (!atomic_load(&release)) {
        sched_yield();
    }
}

/* Threads waiting in xbegin begin in the order they came, and a thread that
 * ends its transaction and begins again at once queues behind them, even
 * when none of them has woken up yet. */
int ctest_xac_threads_fifo(const char *dir) {
    CHECK_EQ(xInit(dir, XAC_NONDURABLE), 0);
    volatile uint64_t *x = xMmap("fifo", PAGE_SIZE);
    CHECK(x != NULL);
    enum { N = 3 };
    struct queued q[N];
    pthread_t t[N];
    CHECK_EQ(xbegin(), 0);
    for (int i = 0; i < N; i++) {
        q[i] = (struct queued){.x = x, .rc = -100, .end_rc = -100};
        CHECK_EQ(pthread_create(&t[i], NULL, queued_main, &q[i]), 0);
        CHECK_EQ(until_waiting(i + 1), 0);
    }
    /* Keep the waiters off the lock while this thread ends and tries again. */
    struct sigaction sa, old;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = hold;
    sigemptyset(&sa.sa_mask);
    CHECK_EQ(sigaction(SIGUSR1, &sa, &old), 0);
    atomic_store(&held, 0);
    atomic_store(&release, 0);
    for (int i = 0; i < N; i++) {
        CHECK_EQ(pthread_kill(t[i], SIGUSR1), 0);
    }
    while (atomic_load(&held) != N) {
        sched_yield();
    }
    CHECK_EQ(xend(), XAC_COMMITTED);
    errno = 0;
    CHECK_EQ(xbegin_try(), -1); /* the queued threads come first */
    CHECK_EQ(errno, EBUSY);
    atomic_store(&release, 1);
    CHECK_EQ(xbegin_timed(20 * 1000), 0); /* behind the N others */
    CHECK_EQ(x[0], N);
    CHECK_EQ(xend(), XAC_COMMITTED);
    for (int i = 0; i < N; i++) {
        CHECK_EQ(join_within(t[i], 20), 0);
        CHECK_EQ(q[i].rc, 0);
        CHECK_EQ(q[i].end_rc, XAC_COMMITTED);
        CHECK_EQ(q[i].turn, i + 1);
    }
    CHECK_EQ(ctest_xbegin_waiters(), 0);
    CHECK_EQ(sigaction(SIGUSR1, &old, NULL), 0);
    CHECK_EQ(xShutdown(), 0);
    return 0;
}

/* ---- processes with threads ---- */

#define PROCS 2
#define PROC_THREADS 2

struct proc_worker {
    volatile uint64_t *x;
    long rounds;
    atomic_int *inside;
    long aborts;
    int rc;
};

static int proc_worker_body(struct proc_worker *w) {
    for (long r = 0; r < w->rounds; r++) {
        for (;;) {
            CHECK_EQ(xbegin(), 0);
            CHECK_EQ(atomic_fetch_add(w->inside, 1), 0);
            w->x[0] = w->x[0] + 1;
            sched_yield();
            CHECK_EQ(atomic_fetch_sub(w->inside, 1), 1);
            int rc = xend();
            if (rc == XAC_COMMITTED) {
                break;
            }
            CHECK_EQ(rc, XAC_ABORTED); /* another process's commit */
            w->aborts++;
        }
    }
    return 0;
}

static void *proc_worker_main(void *arg) {
    struct proc_worker *w = arg;
    w->rc = proc_worker_body(w);
    return NULL;
}

/* A forked child: PROC_THREADS threads increment one counter. */
static int proc_child(const char *dir, long rounds) {
    CHECK_EQ(xInit(dir, XAC_NONDURABLE), 0);
    volatile uint64_t *x = xMmap("shared", PAGE_SIZE);
    CHECK(x != NULL);
    atomic_int inside = 0;
    struct proc_worker w[PROC_THREADS];
    pthread_t t[PROC_THREADS];
    for (int i = 0; i < PROC_THREADS; i++) {
        w[i] = (struct proc_worker){.x = x, .rounds = rounds, .inside = &inside, .rc = -1};
        CHECK_EQ(pthread_create(&t[i], NULL, proc_worker_main, &w[i]), 0);
    }
    long aborts = 0;
    for (int i = 0; i < PROC_THREADS; i++) {
        CHECK_EQ(join_within(t[i], 600), 0);
        CHECK_EQ(w[i].rc, 0);
        aborts += w[i].aborts;
    }
    fprintf(stderr, "xac_threads: process %d: %ld aborts\n", (int)getpid(), aborts);
    CHECK_EQ(xShutdown(), 0);
    return 0;
}

/* PROCS processes with PROC_THREADS threads each increment one counter
 * `rounds` times per thread, retrying on XAC_ABORTED: threads take turns
 * within a process, processes conflict, no increment is lost. */
int ctest_xac_threads_processes(const char *dir, long rounds) {
    pid_t pids[PROCS];
    for (int i = 0; i < PROCS; i++) {
        pids[i] = fork();
        CHECK(pids[i] >= 0);
        if (pids[i] == 0) {
            _exit(proc_child(dir, rounds) ? 1 : 0);
        }
    }
    for (int i = 0; i < PROCS; i++) {
        int status = 0;
        CHECK_EQ(waitpid(pids[i], &status, 0), pids[i]);
        CHECK(WIFEXITED(status));
        CHECK_EQ(WEXITSTATUS(status), 0);
    }
    CHECK_EQ(xInit(dir, XAC_NONDURABLE), 0);
    volatile uint64_t *x = xMmap("shared", 0);
    CHECK(x != NULL);
    CHECK_EQ(xbegin(), 0);
    CHECK_EQ(x[0], PROCS * PROC_THREADS * rounds);
    CHECK_EQ(xend(), XAC_COMMITTED);
    CHECK_EQ(xShutdown(), 0);
    return 0;
}
