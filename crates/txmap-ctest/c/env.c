/* Environments from C (issue 19 point 1): named regions of one file and
 * one log (txmap_env_open, txmap_env_region). Forked children each map two
 * of three named regions and move amounts between them with plain loads
 * and stores; every transaction checks each region it maps against its
 * own net inflow, and the parent checks that the nets sum to zero. Run by
 * tests/env.rs. */
#include <stdint.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ctest.h"

#define PROCS 3
#define PER_PROC 200
#define ACCOUNTS 8
#define START 1000

static const char *const NAMES[3] = {"a", "b", "c"};

/* A named region's layout: ACCOUNTS int64 balances, one per page, then the
 * net inflow on page ACCOUNTS. */
struct named {
    uint64_t offset, len;
};

static int64_t *balance(char *base, struct named n, int i) {
    return (int64_t *)(base + n.offset + (uint64_t)i * PAGE_SIZE);
}

static int64_t *net(char *base, struct named n) {
    return (int64_t *)(base + n.offset + ACCOUNTS * PAGE_SIZE);
}

/* Inside a transaction: the balances of n sum to START * ACCOUNTS plus its
 * net inflow. */
static int balanced(char *base, struct named n) {
    int64_t sum = 0;
    for (int i = 0; i < ACCOUNTS; i++) {
        sum += *balance(base, n, i);
    }
    CHECK_EQ(sum, (int64_t)START * ACCOUNTS + *net(base, n));
    return 0;
}

static int open_named(txmap_region *env, int k, uint64_t size, struct named *n) {
    CHECK_EQ(txmap_env_region(env, NAMES[k], size, &n->offset, &n->len), TXMAP_OK);
    return 0;
}

/* Child p maps regions p and p+1 (mod 3) only. */
static int child(const char *dir, int p) {
    txmap_region *env;
    txmap_view *v;
    CHECK_EQ(txmap_env_open(dir, NULL, &env), TXMAP_OK);
    struct named from, to;
    CHECK_OK(open_named(env, p, 0, &from));
    CHECK_OK(open_named(env, (p + 1) % 3, 0, &to));
    CHECK_EQ(txmap_view_open(env, &v), TXMAP_OK);
    char *base = txmap_view_base(v);
    unsigned rng = (unsigned)p * 7919u + 1;
    for (int t = 0; t < PER_PROC; t++) {
        rng = rng * 1103515245u + 12345u;
        int i = (int)(rng >> 8) % ACCOUNTS, j = (int)(rng >> 12) % ACCOUNTS;
        int64_t amount = (int64_t)((rng >> 16) % 50) + 1;
        int rc;
        do {
            CHECK_EQ(txmap_begin(v, 0), TXMAP_OK);
            /* Also in the transactions that will abort. */
            CHECK_OK(balanced(base, from));
            CHECK_OK(balanced(base, to));
            *balance(base, from, i) -= amount;
            *net(base, from) -= amount;
            *balance(base, to, j) += amount;
            *net(base, to) += amount;
            rc = txmap_commit(v);
        } while (rc == TXMAP_CONFLICT);
        CHECK_EQ(rc, TXMAP_OK);
    }
    CHECK_EQ(txmap_view_close(v), TXMAP_OK);
    CHECK_EQ(txmap_region_close(env), TXMAP_OK);
    return 0;
}

int ctest_env_transfers(const char *dir) {
    char envdir[4096];
    join(envdir, sizeof envdir, dir, "env");
    txmap_region *env;
    txmap_view *v;
    CHECK_EQ(txmap_env_open(envdir, NULL, &env), TXMAP_OK);
    struct named n[3];
    for (int k = 0; k < 3; k++) {
        CHECK_OK(open_named(env, k, (ACCOUNTS + 1) * PAGE_SIZE, &n[k]));
        /* One after another from page 1 (page 0 is the catalog). */
        CHECK_EQ(n[k].offset, (uint64_t)(1 + k * (ACCOUNTS + 1)) * PAGE_SIZE);
        CHECK_EQ(n[k].len, (ACCOUNTS + 1) * PAGE_SIZE);
    }
    CHECK_EQ(txmap_view_open(env, &v), TXMAP_OK);
    char *base = txmap_view_base(v);
    CHECK_EQ(txmap_begin(v, 0), TXMAP_OK);
    for (int k = 0; k < 3; k++) {
        for (int i = 0; i < ACCOUNTS; i++) {
            *balance(base, n[k], i) = START;
        }
    }
    CHECK_EQ(txmap_commit(v), TXMAP_OK);
    CHECK_EQ(txmap_view_close(v), TXMAP_OK);
    CHECK_EQ(txmap_region_close(env), TXMAP_OK);

    pid_t pids[PROCS];
    for (int p = 0; p < PROCS; p++) {
        pids[p] = fork();
        CHECK(pids[p] >= 0);
        if (pids[p] == 0) {
            _exit(child(envdir, p) != 0 ? 1 : 0);
        }
    }
    for (int p = 0; p < PROCS; p++) {
        int status = 0;
        CHECK_EQ(waitpid(pids[p], &status, 0), pids[p]);
        CHECK(WIFEXITED(status));
        CHECK_EQ(WEXITSTATUS(status), 0); /* the child printed its failed check */
    }

    CHECK_EQ(txmap_env_open(envdir, NULL, &env), TXMAP_OK);
    CHECK_EQ(txmap_view_open(env, &v), TXMAP_OK);
    base = txmap_view_base(v);
    CHECK_EQ(txmap_begin(v, TXMAP_READ_ONLY), TXMAP_OK);
    int64_t nets = 0, moved = 0;
    for (int k = 0; k < 3; k++) {
        CHECK_OK(balanced(base, n[k]));
        nets += *net(base, n[k]);
        moved += *net(base, n[k]) != 0;
    }
    CHECK_EQ(nets, 0);
    CHECK(moved > 0);
    CHECK_EQ(txmap_commit(v), TXMAP_OK);

    /* Errors: a larger size than the region was created with, a name not
     * there with size 0, a name too long, no name. */
    uint64_t off = 0, len = 0;
    CHECK_EQ(txmap_env_region(env, "a", (ACCOUNTS + 2) * PAGE_SIZE, &off, &len), TXMAP_EINVAL);
    CHECK(errmsg_has("keeps the size it was created with"));
    CHECK_EQ(txmap_env_region(env, "zzz", 0, &off, &len), TXMAP_EINVAL);
    CHECK(errmsg_has("no region named"));
    CHECK_EQ(txmap_env_region(env, "0123456789012345678901234567890123456789012345678", 1, &off, &len),
             TXMAP_EINVAL);
    CHECK(txmap_env_region(env, NULL, 1, &off, &len) < 0);
    /* NULL out-pointers are allowed. */
    CHECK_EQ(txmap_env_region(env, "b", 0, NULL, NULL), TXMAP_OK);
    CHECK_EQ(txmap_view_close(v), TXMAP_OK);
    CHECK_EQ(txmap_region_close(env), TXMAP_OK);

    /* A region whose first page holds data is no environment. */
    txmap_region *r;
    CHECK_OK(fresh_region(dir, "plain.txm", 2, &r, &v));
    CHECK_EQ(txmap_begin(v, 0), TXMAP_OK);
    ((char *)txmap_view_base(v))[100] = 1;
    CHECK_EQ(txmap_commit(v), TXMAP_OK);
    CHECK_EQ(txmap_env_region(r, "a", 1, &off, &len), TXMAP_ENOTREGION);
    CHECK_EQ(txmap_view_close(v), TXMAP_OK);
    CHECK_EQ(txmap_region_close(r), TXMAP_OK);
    return 0;
}
