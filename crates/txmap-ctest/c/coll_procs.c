/* The collections' C API across processes: forked children open one region
 * (which starts as one page, with no heap), race to create the same named
 * B+-tree, CO B-tree, linear hash table and array list, then insert into all
 * of them at once, one transaction per key, and look their own keys up. Run
 * by tests/collections.rs. */
#include <stdint.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ctest.h"

#define PROCS 4
#define PER_PROC 150

static const char *const MAP_NAMES[3] = {"bt", "co", "lh"};
static const int MAP_KINDS[3] = {TXMAP_BTREE, TXMAP_COBTREE, TXMAP_LHASH};

struct handles {
    txmap_map maps[3];
    txmap_array arr;
};

/* Opens (creating if absent) every structure; inside a transaction. */
static int open_all(txmap_view *v, struct handles *h) {
    for (int m = 0; m < 3; m++) {
        CHECK_EQ(txmap_map_open(v, MAP_NAMES[m], MAP_KINDS[m], TXMAP_CREATE, &h->maps[m]), TXMAP_OK);
    }
    CHECK_EQ(txmap_array_open(v, "arr", 8, TXMAP_CREATE, &h->arr), TXMAP_OK);
    return 0;
}

static int key_of(char *key, size_t cap, int p, int i) {
    return snprintf(key, cap, "p%d-%05d", p, i);
}

static int value_of(char *val, size_t cap, int p, int i) {
    return snprintf(val, cap, "value %d of process %d %.*s", i, p, i % 40, "........................................");
}

/* Key i of process p is in every map with its value. */
static int has_key(txmap_view *v, struct handles *h, int p, int i) {
    char key[32], want[128], got[128];
    int kl = key_of(key, sizeof key, p, i);
    int wl = value_of(want, sizeof want, p, i);
    for (int m = 0; m < 3; m++) {
        size_t len = 0;
        CHECK_EQ(txmap_map_get(v, &h->maps[m], key, (size_t)kl, got, sizeof got, &len), 1);
        CHECK_EQ(len, (size_t)wl);
        CHECK(memcmp(got, want, len) == 0);
    }
    return 0;
}

static int child(const char *path, int p) {
    txmap_region *r;
    txmap_view *v;
    CHECK_EQ(txmap_region_open(path, 0, &r), TXMAP_OK);
    CHECK_EQ(txmap_view_open(r, &v), TXMAP_OK);
    struct handles h;
    unsigned rng = (unsigned)p * 7919u + 1;
    for (int i = 0; i < PER_PROC; i++) {
        char key[32], val[128];
        int kl = key_of(key, sizeof key, p, i);
        int vl = value_of(val, sizeof val, p, i);
        uint64_t elem = (uint64_t)p << 32 | (uint64_t)i;
        int rc;
        do {
            CHECK_EQ(txmap_begin(v, 0), TXMAP_OK);
            CHECK_OK(open_all(v, &h));
            for (int m = 0; m < 3; m++) {
                CHECK_EQ(txmap_map_put(v, &h.maps[m], key, (size_t)kl, val, (size_t)vl), 0);
            }
            CHECK_EQ(txmap_array_push(v, &h.arr, &elem, NULL), TXMAP_OK);
            rc = txmap_commit(v);
        } while (rc == TXMAP_CONFLICT);
        CHECK_EQ(rc, TXMAP_OK);
        /* Every key this process committed stays findable. */
        rng = rng * 1103515245u + 12345u;
        CHECK_EQ(txmap_begin(v, TXMAP_READ_ONLY), TXMAP_OK);
        CHECK_OK(has_key(v, &h, p, i));
        CHECK_OK(has_key(v, &h, p, (int)((rng >> 8) % (unsigned)(i + 1))));
        if (i % 50 == 49) {
            for (int m = 0; m < 3; m++) {
                uint64_t n = 0;
                CHECK_EQ(txmap_map_check(v, &h.maps[m], &n), TXMAP_OK);
                CHECK(n >= (uint64_t)i + 1);
            }
        }
        CHECK_EQ(txmap_commit(v), TXMAP_OK);
    }
    CHECK_EQ(txmap_view_close(v), TXMAP_OK);
    CHECK_EQ(txmap_region_close(r), TXMAP_OK);
    return 0;
}

int ctest_coll_processes(const char *dir) {
    char path[4096];
    join(path, sizeof path, dir, "procs.txm");
    txmap_region *r;
    CHECK_EQ(txmap_region_create(path, PAGE_SIZE, 0, &r), TXMAP_OK);
    CHECK_EQ(txmap_region_close(r), TXMAP_OK);
    pid_t pids[PROCS];
    for (int p = 0; p < PROCS; p++) {
        pids[p] = fork();
        CHECK(pids[p] >= 0);
        if (pids[p] == 0) {
            _exit(child(path, p) != 0 ? 1 : 0);
        }
    }
    for (int p = 0; p < PROCS; p++) {
        int status = 0;
        CHECK_EQ(waitpid(pids[p], &status, 0), pids[p]);
        CHECK(WIFEXITED(status));
        CHECK_EQ(WEXITSTATUS(status), 0); /* the child printed its failed check */
    }

    txmap_view *v;
    CHECK_EQ(txmap_region_open(path, 0, &r), TXMAP_OK);
    CHECK_EQ(txmap_view_open(r, &v), TXMAP_OK);
    CHECK_EQ(txmap_begin(v, TXMAP_READ_ONLY), TXMAP_OK);
    struct handles h;
    for (int m = 0; m < 3; m++) {
        /* One structure per name although every child tried to create it. */
        CHECK_EQ(txmap_map_open(v, MAP_NAMES[m], 0, 0, &h.maps[m]), TXMAP_OK);
        uint64_t n = 0;
        CHECK_EQ(txmap_map_check(v, &h.maps[m], &n), TXMAP_OK);
        CHECK_EQ(n, PROCS * PER_PROC);
    }
    CHECK_EQ(txmap_array_open(v, "arr", 8, 0, &h.arr), TXMAP_OK);
    for (int p = 0; p < PROCS; p++) {
        for (int i = 0; i < PER_PROC; i++) {
            CHECK_OK(has_key(v, &h, p, i));
        }
    }
    /* The array holds each process's pushes once each. */
    CHECK_EQ(txmap_array_len(v, &h.arr), PROCS * PER_PROC);
    static unsigned char seen[PROCS][PER_PROC];
    memset(seen, 0, sizeof seen);
    for (uint64_t j = 0; j < PROCS * PER_PROC; j++) {
        uint64_t e = 0;
        CHECK_EQ(txmap_array_get(v, &h.arr, j, &e), TXMAP_OK);
        uint64_t p = e >> 32, i = e & 0xffffffffu;
        CHECK(p < PROCS && i < PER_PROC && !seen[p][i]);
        seen[p][i] = 1;
    }
    CHECK_EQ(txmap_commit(v), TXMAP_OK);
    CHECK_EQ(txmap_view_close(v), TXMAP_OK);
    CHECK_EQ(txmap_region_close(r), TXMAP_OK);
    return 0;
}
