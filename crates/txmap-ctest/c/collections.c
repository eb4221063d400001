/* Tests of the collections' C API: heap, maps (B+-tree, linear hash), arrays. */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#include "ctest.h"

static int open_region(const char *dir, const char *name, txmap_region **r, txmap_view **v) {
    char path[4096];
    join(path, sizeof path, dir, name);
    CHECK_EQ(txmap_region_create(path, 64 * PAGE_SIZE, 0, r), TXMAP_OK);
    CHECK_EQ(txmap_view_open(*r, v), TXMAP_OK);
    return 0;
}

struct scan_ctx {
    int n;
    char keys[16][16];
};

static int collect(void *ctx, const void *key, size_t key_len, const void *value, size_t value_len) {
    struct scan_ctx *c = ctx;
    (void)value;
    (void)value_len;
    if (key_len >= 16 || c->n >= 16) {
        return 1;
    }
    memcpy(c->keys[c->n], key, key_len);
    c->keys[c->n][key_len] = 0;
    c->n++;
    return 0;
}

static int map_test(const char *dir, const char *file, int kind) {
    txmap_region *r;
    txmap_view *v;
    CHECK_OK(open_region(dir, file, &r, &v));
    txmap_map m;
    /* Calls outside a transaction and unknown names are refused. */
    CHECK_EQ(txmap_map_open(v, "m", kind, TXMAP_CREATE, &m), TXMAP_EINVAL);
    CHECK(errmsg_has("inside a transaction"));
    CHECK_EQ(txmap_begin(v, 0), TXMAP_OK);
    CHECK_EQ(txmap_map_open(v, "m", kind, 0, &m), TXMAP_EINVAL);
    CHECK_EQ(txmap_map_open(v, "m", kind, TXMAP_CREATE, &m), TXMAP_OK);
    CHECK_EQ(m.kind, kind);
    char key[16], val[64];
    for (int i = 0; i < 500; i++) {
        int kl = snprintf(key, sizeof key, "key%04d", i);
        int vl = snprintf(val, sizeof val, "value-%d", i * 3);
        CHECK_EQ(txmap_map_put(v, &m, key, (size_t)kl, val, (size_t)vl), 0);
    }
    CHECK_EQ(txmap_map_put(v, &m, "key0007", 7, "new", 3), 1);
    CHECK_EQ(txmap_commit(v), TXMAP_OK);

    /* An aborted transaction leaves nothing behind. */
    CHECK_EQ(txmap_begin(v, 0), TXMAP_OK);
    CHECK_EQ(txmap_map_delete(v, &m, "key0001", 7), 1);
    CHECK_EQ(txmap_map_put(v, &m, "zzz", 3, "x", 1), 0);
    CHECK_EQ(txmap_abort(v), TXMAP_OK);
    CHECK_EQ(txmap_commit(v), TXMAP_ABORTED);

    CHECK_EQ(txmap_begin(v, TXMAP_READ_ONLY), TXMAP_OK);
    txmap_map m2;
    CHECK_EQ(txmap_map_open(v, "m", 0, 0, &m2), TXMAP_OK);
    CHECK_EQ(m2.at, m.at);
    size_t len = 0;
    CHECK_EQ(txmap_map_get(v, &m, "key0001", 7, val, sizeof val, &len), 1);
    CHECK_EQ(len, 7);
    CHECK(memcmp(val, "value-3", 7) == 0);
    CHECK_EQ(txmap_map_get(v, &m, "key0007", 7, val, 2, &len), 1);
    CHECK_EQ(len, 3); /* only 2 bytes copied; the length says how many there are */
    CHECK(memcmp(val, "ne", 2) == 0);
    CHECK_EQ(txmap_map_get(v, &m, "zzz", 3, val, sizeof val, &len), 0);
    struct scan_ctx c = {0};
    CHECK_EQ(txmap_map_scan(v, &m, "key0100", 7, "key0103", 7, collect, &c), TXMAP_OK);
    CHECK_EQ(c.n, 3);
    CHECK(strcmp(c.keys[0], "key0100") == 0 && strcmp(c.keys[2], "key0102") == 0);
    c.n = 0;
    CHECK_EQ(txmap_map_scan(v, &m, "key0495", 7, NULL, 0, collect, &c), TXMAP_OK);
    CHECK_EQ(c.n, 5);
    uint64_t n = 0;
    CHECK_EQ(txmap_map_check(v, &m, &n), TXMAP_OK);
    CHECK_EQ(n, 500);
    CHECK_EQ(txmap_map_put(v, &m, NULL, 3, "x", 1), TXMAP_EINVAL);
    CHECK_EQ(txmap_commit(v), TXMAP_OK);

    CHECK_EQ(txmap_view_close(v), TXMAP_OK);
    CHECK_EQ(txmap_region_close(r), TXMAP_OK);
    return 0;
}

int ctest_coll_btree(const char *dir) { return map_test(dir, "bt.txm", TXMAP_BTREE); }

int ctest_coll_lhash(const char *dir) { return map_test(dir, "lh.txm", TXMAP_LHASH); }

int ctest_coll_cobtree(const char *dir) { return map_test(dir, "co.txm", TXMAP_COBTREE); }

int ctest_coll_heap_and_array(const char *dir) {
    txmap_region *r;
    txmap_view *v;
    CHECK_OK(open_region(dir, "heap.txm", &r, &v));
    char *base = txmap_view_base(v);
    uint64_t root = 0, a = 0, b = 0;
    CHECK_EQ(txmap_begin(v, 0), TXMAP_OK);
    CHECK_EQ(txmap_root(v, 64, &root), TXMAP_OK);
    CHECK_EQ(txmap_alloc(v, 1000, &a), TXMAP_OK);
    memset(base + a, 0x5a, 1000);
    *(uint64_t *)(base + root) = a; /* the root points at the block */
    CHECK_EQ(txmap_commit(v), TXMAP_OK);

    /* An aborted allocation vanishes: the next one gets the same block. */
    CHECK_EQ(txmap_begin(v, 0), TXMAP_OK);
    CHECK_EQ(txmap_alloc(v, 1000, &b), TXMAP_OK);
    CHECK(b != a);
    CHECK_EQ(txmap_abort(v), TXMAP_OK);
    CHECK_EQ(txmap_commit(v), TXMAP_ABORTED);
    uint64_t b2 = 0;
    CHECK_EQ(txmap_begin(v, 0), TXMAP_OK);
    CHECK_EQ(txmap_alloc(v, 1000, &b2), TXMAP_OK);
    CHECK_EQ(b2, b);
    /* Free zeroes; a double free is refused. */
    CHECK_EQ(txmap_free(v, a), TXMAP_OK);
    CHECK_EQ(((unsigned char *)base)[a], 0);
    CHECK_EQ(txmap_free(v, a), TXMAP_EINVAL);
    CHECK_EQ(txmap_commit(v), TXMAP_OK);

    txmap_array arr;
    CHECK_EQ(txmap_begin(v, 0), TXMAP_OK);
    CHECK_EQ(txmap_array_open(v, "arr", 8, TXMAP_CREATE, &arr), TXMAP_OK);
    for (uint64_t i = 0; i < 2000; i++) {
        uint64_t x = i * i, idx = 0;
        CHECK_EQ(txmap_array_push(v, &arr, &x, &idx), TXMAP_OK);
        CHECK_EQ(idx, i);
    }
    CHECK_EQ(txmap_commit(v), TXMAP_OK);
    CHECK_EQ(txmap_begin(v, 0), TXMAP_OK);
    uint64_t x = 0;
    CHECK_EQ(txmap_array_len(v, &arr), 2000);
    CHECK_EQ(txmap_array_get(v, &arr, 1999, &x), TXMAP_OK);
    CHECK_EQ(x, 1999ull * 1999ull);
    x = 5;
    CHECK_EQ(txmap_array_set(v, &arr, 3, &x), TXMAP_OK);
    CHECK_EQ(txmap_array_pop(v, &arr, &x), 1);
    CHECK_EQ(x, 1999ull * 1999ull);
    CHECK_EQ(txmap_array_get(v, &arr, 1999, &x), TXMAP_EINVAL);
    CHECK_EQ(txmap_map_open(v, "arr", TXMAP_BTREE, 0, &(txmap_map){0}), TXMAP_EINVAL);
    CHECK_EQ(txmap_commit(v), TXMAP_OK);
    CHECK_EQ(txmap_begin(v, TXMAP_READ_ONLY), TXMAP_OK);
    CHECK_EQ(txmap_array_get(v, &arr, 3, &x), TXMAP_OK);
    CHECK_EQ(x, 5);
    CHECK_EQ(txmap_array_len(v, &arr), 1999);
    CHECK_EQ(txmap_commit(v), TXMAP_OK);

    /* The commutative append: two transactions appending at once both
       commit; each saw its element at the length of its snapshot, and the
       one that committed last has its element last. (Fresh views: `v`
       exposed pages at its address above, and a serializable transaction
       without a read set counts every page valid there as read.) */
    txmap_view *v2, *v3;
    CHECK_EQ(txmap_view_open(r, &v2), TXMAP_OK);
    CHECK_EQ(txmap_view_open(r, &v3), TXMAP_OK);
    CHECK_EQ(txmap_begin(v, 0), TXMAP_OK);
    CHECK_EQ(txmap_array_reserve(v, &arr, 4000), TXMAP_OK);
    CHECK_EQ(txmap_commit(v), TXMAP_OK);
    uint64_t i1 = 0, i2 = 0, e1 = 111, e2 = 222;
    CHECK_EQ(txmap_begin(v3, 0), TXMAP_OK);
    CHECK_EQ(txmap_begin(v2, 0), TXMAP_OK);
    CHECK_EQ(txmap_array_append(v3, &arr, &e1, 8, &i1), TXMAP_OK);
    CHECK_EQ(txmap_array_append(v2, &arr, &e2, 8, &i2), TXMAP_OK);
    CHECK_EQ(i1, 1999);
    CHECK_EQ(i2, 1999);
    CHECK_EQ(txmap_array_append(v2, &arr, &e2, 4, NULL), TXMAP_EINVAL);
    CHECK_EQ(txmap_commit(v2), TXMAP_OK);
    CHECK_EQ(txmap_commit(v3), TXMAP_OK);
    CHECK_EQ(txmap_begin(v, TXMAP_READ_ONLY), TXMAP_OK);
    CHECK_EQ(txmap_array_len(v, &arr), 2001);
    CHECK_EQ(txmap_array_get(v, &arr, 1999, &x), TXMAP_OK);
    CHECK_EQ(x, 222);
    CHECK_EQ(txmap_array_get(v, &arr, 2000, &x), TXMAP_OK);
    CHECK_EQ(x, 111);
    CHECK_EQ(txmap_commit(v), TXMAP_OK);
    CHECK_EQ(txmap_view_close(v2), TXMAP_OK);
    CHECK_EQ(txmap_view_close(v3), TXMAP_OK);

    CHECK_EQ(txmap_view_close(v), TXMAP_OK);
    CHECK_EQ(txmap_region_close(r), TXMAP_OK);
    return 0;
}

struct worker {
    txmap_region *r;
    txmap_map m;
    int id;
    int failed_line;
};

#define PER_THREAD 300

static void *insert_worker(void *arg) {
    struct worker *w = arg;
    txmap_view *v;
    if (txmap_view_open(w->r, &v) != TXMAP_OK) {
        w->failed_line = __LINE__;
        return NULL;
    }
    for (int i = 0; i < PER_THREAD; i++) {
        char key[32];
        int kl = snprintf(key, sizeof key, "t%d-%05d", w->id, i);
        int rc;
        do {
            if (txmap_begin(v, 0) != TXMAP_OK) {
                w->failed_line = __LINE__;
                return NULL;
            }
            if (txmap_map_put(v, &w->m, key, (size_t)kl, key, (size_t)kl) < 0) {
                txmap_rollback(v);
                w->failed_line = __LINE__;
                return NULL;
            }
            rc = txmap_commit(v);
        } while (rc == TXMAP_CONFLICT);
        if (rc != TXMAP_OK) {
            w->failed_line = __LINE__;
            return NULL;
        }
    }
    txmap_view_close(v);
    return NULL;
}

int ctest_coll_threads(const char *dir) {
    txmap_region *r;
    txmap_view *v;
    CHECK_OK(open_region(dir, "threads.txm", &r, &v));
    txmap_map m;
    CHECK_EQ(txmap_begin(v, 0), TXMAP_OK);
    CHECK_EQ(txmap_map_open(v, "m", TXMAP_BTREE, TXMAP_CREATE, &m), TXMAP_OK);
    CHECK_EQ(txmap_commit(v), TXMAP_OK);
    struct worker w[4];
    pthread_t t[4];
    for (int i = 0; i < 4; i++) {
        w[i] = (struct worker){r, m, i, 0};
        CHECK_EQ(pthread_create(&t[i], NULL, insert_worker, &w[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        CHECK_EQ(pthread_join(t[i], NULL), 0);
        CHECK_EQ(w[i].failed_line, 0);
    }
    CHECK_EQ(txmap_begin(v, TXMAP_READ_ONLY), TXMAP_OK);
    uint64_t n = 0;
    CHECK_EQ(txmap_map_check(v, &m, &n), TXMAP_OK);
    CHECK_EQ(n, 4 * PER_THREAD);
    char val[32];
    size_t len = 0;
    CHECK_EQ(txmap_map_get(v, &m, "t3-00299", 8, val, sizeof val, &len), 1);
    CHECK_EQ(len, 8);
    CHECK_EQ(txmap_commit(v), TXMAP_OK);
    CHECK_EQ(txmap_view_close(v), TXMAP_OK);
    CHECK_EQ(txmap_region_close(r), TXMAP_OK);
    return 0;
}
