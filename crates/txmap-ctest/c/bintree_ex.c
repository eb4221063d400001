/* The C binary tree example (examples/c/bintree.c) under concurrency and
 * crashes: worker threads and forked processes run enclosing ("parent")
 * transactions of one to three nested inserts and removes on keys of
 * their own and keys they share; each parent adds its deltas to its
 * worker's table in the region in its own work; some abort or roll back on
 * purpose. The tree must hold exactly the sum of the tables: the nested
 * actions of committed parents only (compensated at abort, or by the next
 * first opener when the parent's process was SIGKILLed). Run by
 * tests/bintree.rs (its own binary: this forks). */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bintree.h"
#include "ctest.h"

#define PAGES 64
#define TREE_AT 0
#define TREE_BYTES (32 * PAGE_SIZE)
/* Worker w's table, page 32 + w: parents committed, then an int64 per key. */
#define TABLES (32 * PAGE_SIZE)
#define WORKERS 4
#define OWN 32 /* keys w*OWN .. (w+1)*OWN are worker w's alone */
#define SHARED_LO 200
#define SHARED_N 24
#define KEYS 256
#define MAX_OPS 3

enum end { END_COMMIT, END_ABORT, END_ROLLBACK };

struct plan {
    int n;
    uint64_t key[MAX_OPS];
    int64_t delta[MAX_OPS];
    enum end end;
};

static uint64_t mix(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

/* Parent p of worker w, fixed by the seed. */
static struct plan plan_of(uint64_t seed, uint64_t w, uint64_t p) {
    struct plan pl;
    uint64_t x = mix(seed ^ mix(w << 32 | p));
    x = mix(x);
    pl.n = 1 + (int)(x % MAX_OPS);
    for (int i = 0; i < pl.n; i++) {
        x = mix(x);
        pl.key[i] = x % 3 == 0 ? SHARED_LO + (x >> 8) % SHARED_N : w * OWN + (x >> 8) % OWN;
        pl.delta[i] = (x >> 20) % 5 < 3 ? 1 : -1;
    }
    x = mix(x);
    pl.end = x % 6 == 0 ? END_ABORT : x % 6 == 1 ? END_ROLLBACK : END_COMMIT;
    return pl;
}

static int own(uint64_t w, uint64_t key) {
    return key / OWN == w;
}

static volatile uint64_t *word(txmap_view *v, uint64_t off) {
    return (volatile uint64_t *)((char *)txmap_view_base(v) + off);
}

static uint64_t table(uint64_t w) {
    return TABLES + w * PAGE_SIZE;
}

/* What a nested action must find for a key of its worker's own. */
struct expect {
    uint64_t key;
    int64_t want, got;
    int own;
};

static int check_own(txmap_view *v, void *ctx) {
    struct expect *e = ctx;
    if (!e->own) {
        return 0;
    }
    int r = bintree_count(v, TREE_AT, e->key, &e->got);
    return r != 0 ? r : e->got != e->want ? 1 : 0;
}

/* Runs parent p of worker w (retried on conflict); `model` holds the
 * counts of w's own keys and is updated if the parent commits. With
 * `hold_fd` >= 0, writes 'H' there after the nested actions and waits to
 * be killed. */
static int parent(txmap_view *v, uint64_t w, uint64_t p, uint64_t seed, int64_t *model,
                  int hold_fd, int *committed) {
    struct plan pl = plan_of(seed, w, p);
    for (;;) {
        int64_t mine[KEYS] = {0};
        CHECK_EQ(txmap_begin(v, 0), TXMAP_OK);
        for (int i = 0; i < pl.n; i++) {
            uint64_t k = pl.key[i];
            struct expect e = {k, model[k] + mine[k], 0, own(w, k)};
            int r = pl.delta[i] > 0 ? bintree_insert(v, TREE_AT, k, check_own, &e)
                                    : bintree_remove(v, TREE_AT, k, check_own, &e);
            if (r == 1) {
                fprintf(stderr, "worker %llu parent %llu: key %llu counts %lld, not %lld\n",
                        (unsigned long long)w, (unsigned long long)p, (unsigned long long)k,
                        (long long)e.got, (long long)e.want);
            }
            CHECK_EQ(r, TXMAP_OK);
            mine[k] += pl.delta[i];
        }
        volatile uint64_t *t = word(v, table(w));
        t[0] = t[0] + 1;
        for (int k = 0; k < KEYS; k++) {
            if (mine[k] != 0) {
                t[1 + k] = t[1 + k] + (uint64_t)mine[k];
            }
        }
        if (hold_fd >= 0) {
            CHECK_EQ(write(hold_fd, "H", 1), 1);
            for (;;) {
                pause();
            }
        }
        if (pl.end == END_ROLLBACK) {
            CHECK_EQ(txmap_rollback(v), TXMAP_OK);
            *committed = 0;
            return 0;
        }
        if (pl.end == END_ABORT) {
            CHECK_EQ(txmap_abort(v), TXMAP_OK);
            CHECK_EQ(txmap_commit(v), TXMAP_ABORTED);
            *committed = 0;
            return 0;
        }
        int r = txmap_commit(v);
        if (r == TXMAP_CONFLICT) {
            continue; /* its nested actions were compensated: run it again */
        }
        CHECK_EQ(r, TXMAP_OK);
        for (int k = 0; k < KEYS; k++) {
            model[k] += mine[k];
        }
        *committed = 1;
        return 0;
    }
}

/* The tree's counts per key (all keys below KEYS) and the tables' sums,
 * after checking its invariants, in the view's open transaction. */
static int read_state(txmap_view *v, int64_t *tree, int64_t *sum) {
    static _Thread_local uint64_t keys[KEYS];
    static _Thread_local int64_t counts[KEYS];
    uint64_t n = 0;
    const char *why = "";
    int r = bintree_check(v, TREE_AT, keys, counts, KEYS, &n, &why);
    if (r != 0) {
        fprintf(stderr, "bintree_check: %s\n", why);
    }
    CHECK_EQ(r, 0);
    CHECK(n <= KEYS);
    memset(tree, 0, KEYS * sizeof *tree);
    for (uint64_t i = 0; i < n; i++) {
        CHECK(keys[i] < KEYS);
        tree[keys[i]] = counts[i];
    }
    memset(sum, 0, KEYS * sizeof *sum);
    for (uint64_t w = 0; w < WORKERS; w++) {
        for (int k = 0; k < KEYS; k++) {
            sum[k] += (int64_t)*word(v, table(w) + 8 + 8 * (uint64_t)k);
        }
    }
    return 0;
}

/* The tree holds exactly the sum of the tables (committed parents). */
static int check_exact(txmap_region *r, int64_t *tree_out) {
    txmap_view *v = NULL;
    int64_t tree[KEYS], sum[KEYS];
    CHECK_EQ(txmap_view_open(r, &v), TXMAP_OK);
    CHECK_EQ(txmap_begin(v, TXMAP_READ_ONLY), TXMAP_OK);
    CHECK_OK(read_state(v, tree, sum));
    CHECK_EQ(txmap_commit(v), TXMAP_OK);
    CHECK_EQ(txmap_view_close(v), TXMAP_OK);
    for (int k = 0; k < KEYS; k++) {
        if (tree[k] != sum[k]) {
            fprintf(stderr, "key %d: the tree counts %lld, committed parents %lld\n", k,
                    (long long)tree[k], (long long)sum[k]);
        }
        CHECK_EQ(tree[k], sum[k]);
    }
    if (tree_out) {
        memcpy(tree_out, tree, sizeof tree);
    }
    return 0;
}

static int create_region(const char *path) {
    txmap_region *r = NULL;
    txmap_view *v = NULL;
    CHECK_EQ(bintree_register(), TXMAP_OK);
    CHECK_EQ(txmap_region_create(path, PAGES * PAGE_SIZE, 0, &r), TXMAP_OK);
    CHECK_EQ(txmap_view_open(r, &v), TXMAP_OK);
    CHECK_EQ(txmap_begin(v, 0), TXMAP_OK);
    CHECK_EQ(bintree_create(v, TREE_AT, TREE_BYTES), TXMAP_OK);
    CHECK_EQ(txmap_commit(v), TXMAP_OK);
    CHECK_EQ(txmap_view_close(v), TXMAP_OK);
    CHECK_EQ(txmap_region_close(r), TXMAP_OK);
    return 0;
}

struct worker {
    txmap_region *r;
    uint64_t w, parents, seed;
    int64_t model[KEYS];
    atomic_int *running;
};

static int run_worker(struct worker *wk) {
    txmap_view *v = NULL;
    CHECK_EQ(txmap_view_open(wk->r, &v), TXMAP_OK);
    for (uint64_t p = 0; p < wk->parents; p++) {
        int committed;
        CHECK_OK(parent(v, wk->w, p, wk->seed, wk->model, -1, &committed));
    }
    CHECK_EQ(txmap_view_close(v), TXMAP_OK);
    return 0;
}

static void *worker_thread(void *arg) {
    struct worker *wk = arg;
    intptr_t line = run_worker(wk);
    atomic_fetch_sub(wk->running, 1);
    return (void *)line;
}

struct checker {
    txmap_region *r;
    atomic_int *running;
    long checks;
};

/* In read-only transactions while the workers commit: the invariants, and
 * the tree strays from the tables by at most the actions in flight. */
static int run_checker(struct checker *c) {
    txmap_view *v = NULL;
    int64_t tree[KEYS], sum[KEYS];
    CHECK_EQ(txmap_view_open(c->r, &v), TXMAP_OK);
    while (atomic_load(c->running) > 0) {
        CHECK_EQ(txmap_begin(v, TXMAP_READ_ONLY), TXMAP_OK);
        CHECK_OK(read_state(v, tree, sum));
        CHECK_EQ(txmap_commit(v), TXMAP_OK);
        long stray = 0;
        for (int k = 0; k < KEYS; k++) {
            stray += labs((long)(tree[k] - sum[k]));
        }
        CHECK(stray <= MAX_OPS * WORKERS);
        c->checks++;
    }
    CHECK_EQ(txmap_view_close(v), TXMAP_OK);
    return 0;
}

static void *checker_thread(void *arg) {
    return (void *)(intptr_t)run_checker(arg);
}

int ctest_bintree_threads(const char *dir, uint64_t seed) {
    char path[4096];
    join(path, sizeof path, dir, "t.txm");
    CHECK_OK(create_region(path));
    txmap_region *r = NULL;
    CHECK_EQ(txmap_region_open(path, 0, &r), TXMAP_OK);
    atomic_int running = WORKERS;
    static struct worker wk[WORKERS];
    pthread_t th[WORKERS], ch;
    struct checker c = {r, &running, 0};
    CHECK_EQ(pthread_create(&ch, NULL, checker_thread, &c), 0);
    for (int w = 0; w < WORKERS; w++) {
        wk[w] = (struct worker){.r = r, .w = (uint64_t)w, .parents = 60, .seed = seed,
                                .running = &running};
        CHECK_EQ(pthread_create(&th[w], NULL, worker_thread, &wk[w]), 0);
    }
    int failed = 0;
    for (int w = 0; w < WORKERS; w++) {
        void *line;
        CHECK_EQ(pthread_join(th[w], &line), 0);
        failed = failed ? failed : (int)(intptr_t)line;
    }
    void *line;
    CHECK_EQ(pthread_join(ch, &line), 0);
    CHECK_OK(failed);
    CHECK_OK((int)(intptr_t)line);
    CHECK(c.checks > 0);
    /* The test's own model: what the workers saw their parents commit. */
    int64_t want[KEYS] = {0}, tree[KEYS];
    for (int w = 0; w < WORKERS; w++) {
        for (int k = 0; k < KEYS; k++) {
            want[k] += wk[w].model[k];
        }
    }
    CHECK_OK(check_exact(r, tree));
    for (int k = 0; k < KEYS; k++) {
        CHECK_EQ(tree[k], want[k]);
    }
    CHECK_EQ(txmap_region_close(r), TXMAP_OK);
    CHECK_EQ(txmap_region_open(path, 0, &r), TXMAP_OK);
    CHECK_OK(check_exact(r, tree));
    for (int k = 0; k < KEYS; k++) {
        CHECK_EQ(tree[k], want[k]);
    }
    CHECK_EQ(txmap_region_close(r), TXMAP_OK);
    return 0;
}

/* A forked worker process: opens the region, runs parents (acknowledging
 * each commit with a byte 'c' on `ack_fd`, or holding parent `hold` after
 * its nested actions), and exits with 0 or the failed line. */
static void child(const char *path, uint64_t w, uint64_t parents, uint64_t seed, int ack_fd,
                  uint64_t hold) {
    static int64_t model[KEYS];
    txmap_region *r = NULL;
    txmap_view *v = NULL;
    int line = 0;
    if (txmap_region_open(path, 0, &r) != TXMAP_OK || txmap_view_open(r, &v) != TXMAP_OK) {
        fprintf(stderr, "worker %llu: open: %s\n", (unsigned long long)w, txmap_errmsg());
        _exit(200);
    }
    /* Its own keys' counts, which nobody else changes, from its table. */
    txmap_begin(v, TXMAP_READ_ONLY);
    for (int k = 0; k < KEYS; k++) {
        model[k] = (int64_t)*word(v, table(w) + 8 + 8 * (uint64_t)k);
    }
    txmap_commit(v);
    for (uint64_t p = 0; p < parents && line == 0; p++) {
        int committed = 0;
        line = parent(v, w, p, seed, model, p == hold ? ack_fd : -1, &committed);
        if (line == 0 && committed && ack_fd >= 0 && write(ack_fd, "c", 1) != 1) {
            line = __LINE__;
        }
    }
    if (line == 0 && (txmap_view_close(v) != 0 || txmap_region_close(r) != 0)) {
        line = __LINE__;
    }
    _exit(line > 255 ? 255 : line);
}

static int spawn(const char *path, uint64_t w, uint64_t parents, uint64_t seed, int *ack_read,
                 uint64_t hold, pid_t *pid) {
    int fds[2] = {-1, -1};
    if (ack_read) {
        CHECK_EQ(pipe(fds), 0);
    }
    *pid = fork();
    CHECK(*pid >= 0);
    if (*pid == 0) {
        if (fds[0] >= 0) {
            close(fds[0]);
        }
        child(path, w, parents, seed, fds[1], hold);
    }
    if (ack_read) {
        close(fds[1]);
        *ack_read = fds[0];
    }
    return 0;
}

static int exited_ok(pid_t pid) {
    int status;
    CHECK_EQ(waitpid(pid, &status, 0), pid);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "worker process failed (status %#x: exit code = failed line, low 8 bits)\n",
                status);
    }
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    return 0;
}

static int killed(pid_t pid) {
    int status;
    CHECK_EQ(kill(pid, SIGKILL), 0);
    CHECK_EQ(waitpid(pid, &status, 0), pid);
    CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    return 0;
}

/* Reads `n` acknowledgements (fails if the child ended first). */
static int read_acks(int fd, long n, char *last) {
    for (long i = 0; i < n; i++) {
        CHECK_EQ(read(fd, last, 1), 1);
    }
    return 0;
}

/* Rounds of: two peers run 25 parents each while a victim runs parents
 * until SIGKILLed after a random number of its commits; then the first
 * opener compensates the victim's parent in flight, and the tree must hold
 * exactly the committed parents' actions, none acknowledged lost. */
int ctest_bintree_processes(const char *dir, uint64_t seed, int rounds) {
    char path[4096];
    join(path, sizeof path, dir, "p.txm");
    CHECK_OK(create_region(path));
    for (int round = 0; round < rounds; round++) {
        seed = mix(seed);
        uint64_t victim = (uint64_t)round % WORKERS;
        pid_t peers[2], vp;
        int np = 0, acks;
        for (uint64_t w = 0; w < WORKERS && np < 2; w++) {
            if (w != victim) {
                CHECK_OK(spawn(path, w, 25, seed ^ w, NULL, UINT64_MAX, &peers[np++]));
            }
        }
        CHECK_OK(spawn(path, victim, UINT64_MAX, seed ^ victim, &acks, UINT64_MAX, &vp));
        long n = 1 + (long)(seed % 30);
        char last;
        CHECK_OK(read_acks(acks, n, &last));
        CHECK_OK(killed(vp));
        close(acks);
        for (int i = 0; i < np; i++) {
            CHECK_OK(exited_ok(peers[i]));
        }
        txmap_region *r = NULL;
        CHECK_EQ(txmap_region_open(path, 0, &r), TXMAP_OK);
        CHECK_OK(check_exact(r, NULL));
        txmap_view *v = NULL;
        CHECK_EQ(txmap_view_open(r, &v), TXMAP_OK);
        CHECK_EQ(txmap_begin(v, TXMAP_READ_ONLY), TXMAP_OK);
        /* Every acknowledged commit of the victim is there (its table
         * counts its parents over all rounds: at least this round's). */
        CHECK(*word(v, table(victim)) >= (uint64_t)n);
        CHECK_EQ(txmap_commit(v), TXMAP_OK);
        CHECK_EQ(txmap_view_close(v), TXMAP_OK);
        CHECK_EQ(txmap_region_close(r), TXMAP_OK);
    }
    return 0;
}

/* A victim SIGKILLed between its parent's nested actions and the parent's
 * commit, while this process keeps the region open: the actions stay
 * visible, peers change the same keys, and the next first opener
 * compensates them exactly. */
int ctest_bintree_hold(const char *dir, uint64_t seed) {
    char path[4096];
    join(path, sizeof path, dir, "h.txm");
    CHECK_OK(create_region(path));
    /* Worker 0's first parent from 5 on that would commit, with all its
     * actions on its own keys. */
    uint64_t hold = 5;
    struct plan pl;
    for (;; hold++) {
        pl = plan_of(seed, 0, hold);
        int mine = pl.end == END_COMMIT;
        for (int i = 0; i < pl.n; i++) {
            mine = mine && own(0, pl.key[i]);
        }
        if (mine) {
            break;
        }
    }
    pid_t vp;
    int acks;
    CHECK_OK(spawn(path, 0, hold + 1, seed, &acks, hold, &vp));
    char c = 0;
    while (c != 'H') {
        CHECK_EQ(read(acks, &c, 1), 1);
    }
    txmap_region *r = NULL;
    txmap_view *v = NULL;
    CHECK_EQ(txmap_region_open(path, 0, &r), TXMAP_OK);
    CHECK_EQ(txmap_view_open(r, &v), TXMAP_OK);
    int64_t delta[KEYS] = {0}, before[KEYS];
    for (int i = 0; i < pl.n; i++) {
        delta[pl.key[i]] += pl.delta[i];
    }
    CHECK_EQ(txmap_begin(v, TXMAP_READ_ONLY), TXMAP_OK);
    for (int k = 0; k < KEYS; k++) {
        before[k] = (int64_t)*word(v, table(0) + 8 + 8 * (uint64_t)k);
        if (delta[k] != 0) {
            int64_t got;
            CHECK_EQ(bintree_count(v, TREE_AT, (uint64_t)k, &got), 0);
            CHECK_EQ(got, before[k] + delta[k]); /* visible before the kill */
        }
    }
    CHECK_EQ(txmap_commit(v), TXMAP_OK);
    CHECK_OK(killed(vp));
    close(acks);
    /* A peer here: worker 1's parents, then an insert of every held key
     * (recorded in worker 3's table), while the dead parent's are pending. */
    int64_t model[KEYS] = {0};
    for (uint64_t p = 0; p < 20; p++) {
        int committed;
        CHECK_OK(parent(v, 1, p, seed, model, -1, &committed));
    }
    CHECK_EQ(txmap_begin(v, 0), TXMAP_OK);
    for (int k = 0; k < KEYS; k++) {
        if (delta[k] != 0) {
            CHECK_EQ(bintree_insert(v, TREE_AT, (uint64_t)k, NULL, NULL), TXMAP_OK);
            volatile uint64_t *t = word(v, table(3) + 8 + 8 * (uint64_t)k);
            *t = *t + 1;
        }
    }
    CHECK_EQ(txmap_commit(v), TXMAP_OK);
    CHECK_EQ(txmap_view_close(v), TXMAP_OK);
    CHECK_EQ(txmap_region_close(r), TXMAP_OK);
    /* Nobody has it open: this first opener compensates. */
    int64_t tree[KEYS];
    CHECK_EQ(txmap_region_open(path, 0, &r), TXMAP_OK);
    CHECK_OK(check_exact(r, tree));
    for (int k = 0; k < KEYS; k++) {
        if (delta[k] != 0) {
            CHECK_EQ(tree[k], before[k] + 1);
        }
    }
    CHECK_EQ(txmap_region_close(r), TXMAP_OK);
    return 0;
}
