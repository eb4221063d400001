/*
 * Plain functions over Berkeley DB 5.3's handle structs (whose methods are
 * function pointers, which Rust cannot call through bindgen-free externs
 * without mirroring the whole struct layout).
 *
 * Every function returns 0 or a Berkeley DB error code (db_strerror names
 * it). The environment's error callback records the last message of the
 * calling thread, for error reports.
 */
#include <db.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static __thread char last_msg[512];

static void errcall(const DB_ENV *env, const char *prefix, const char *msg) {
    (void)env;
    (void)prefix;
    strncpy(last_msg, msg ? msg : "", sizeof last_msg - 1);
    last_msg[sizeof last_msg - 1] = 0;
}

/* The last message Berkeley DB reported on this thread ("" if none); reading
 * it clears it. The pointer is valid until this thread's next call. */
const char *txb_take_msg(void) {
    static __thread char out[512];
    memcpy(out, last_msg, sizeof out);
    last_msg[0] = 0;
    return out;
}

const char *txb_strerror(int code) { return db_strerror(code); }

const char *txb_version(void) { return db_version(NULL, NULL, NULL); }

struct txb_opts {
    uint32_t hash;        /* DB_HASH instead of DB_BTREE */
    uint32_t durable;     /* DB_TXN_SYNC commits, else DB_TXN_WRITE_NOSYNC */
    uint32_t create;      /* create the environment and database */
    uint32_t shared;      /* DB_REGISTER: other processes join the environment */
    uint64_t cache_bytes; /* mpool cache size */
    uint32_t hash_nelem;  /* expected keys, for DB_HASH's initial table */
};

/* Environment limits: enough lockers, locks and transactions for 64
 * threads (in one or several processes) each with a transaction touching a
 * few dozen pages. */
#define MAX_LOCKERS 4096
#define MAX_LOCKS 100000
#define MAX_OBJECTS 100000
#define MAX_TXNS 1024

int txb_open(const char *dir, const struct txb_opts *o, DB_ENV **envp, DB **dbp) {
    DB_ENV *env = NULL;
    DB *db = NULL;
    int r;
    *envp = NULL;
    *dbp = NULL;
    last_msg[0] = 0;
    if ((r = db_env_create(&env, 0)) != 0)
        return r;
    env->set_errcall(env, errcall);
    if ((r = env->set_cachesize(env, (uint32_t)(o->cache_bytes >> 30),
                                (uint32_t)(o->cache_bytes & ((1u << 30) - 1)), 1)) != 0)
        goto fail;
    if ((r = env->set_lk_max_lockers(env, MAX_LOCKERS)) != 0)
        goto fail;
    if ((r = env->set_lk_max_locks(env, MAX_LOCKS)) != 0)
        goto fail;
    if ((r = env->set_lk_max_objects(env, MAX_OBJECTS)) != 0)
        goto fail;
    if ((r = env->set_tx_max(env, MAX_TXNS)) != 0)
        goto fail;
    /* Run the deadlock detector whenever a lock request blocks. */
    if ((r = env->set_lk_detect(env, DB_LOCK_DEFAULT)) != 0)
        goto fail;
    /* Log files no longer needed for (normal) recovery are removed at
     * checkpoints, so disk usage is the database plus the live log. */
    if ((r = env->log_set_config(env, DB_LOG_AUTO_REMOVE, 1)) != 0)
        goto fail;
    if (!o->durable && (r = env->set_flags(env, DB_TXN_WRITE_NOSYNC, 1)) != 0)
        goto fail;
    {
        uint32_t flags = DB_CREATE | DB_INIT_TXN | DB_INIT_LOCK | DB_INIT_LOG | DB_INIT_MPOOL |
                         DB_THREAD | DB_RECOVER;
        /* Shared: the regions (cache, locks, log buffer) are files in the
         * environment directory, mapped by every process; DB_REGISTER makes
         * DB_RECOVER run only if no other live process has the environment
         * open (or one died in it), instead of rebuilding the regions under
         * a running process. One process: DB_PRIVATE regions on the heap,
         * so no region files take disk space or get written back. */
        flags |= o->shared ? DB_REGISTER : DB_PRIVATE;
        if ((r = env->open(env, dir, flags, 0644)) != 0)
            goto fail;
    }
    if ((r = db_create(&db, env, 0)) != 0)
        goto fail;
    if (o->hash && o->create && o->hash_nelem && (r = db->set_h_nelem(db, o->hash_nelem)) != 0)
        goto fail;
    if ((r = db->open(db, NULL, "data.db", NULL, o->hash ? DB_HASH : DB_BTREE,
                      (o->create ? DB_CREATE : 0) | DB_THREAD | DB_AUTO_COMMIT, 0644)) != 0)
        goto fail;
    *envp = env;
    *dbp = db;
    return 0;
fail:
    if (db)
        db->close(db, 0);
    env->close(env, 0);
    return r;
}

/* Checkpoints (so the next open's recovery is short and old logs go), then
 * closes the database and the environment. Returns the first error. */
int txb_close(DB_ENV *env, DB *db) {
    int r = env->txn_checkpoint(env, 0, 0, 0);
    int r2 = db->close(db, 0);
    int r3 = env->close(env, 0);
    return r ? r : r2 ? r2 : r3;
}

/* A checkpoint if at least `kbytes` of log were written since the last. */
/* Bytes written to the log since the environment was opened (its log
 * statistics; the log file itself is extended sparsely ahead, so its size
 * says nothing). */
int txb_log_bytes(DB_ENV *env, uint64_t *out) {
    DB_LOG_STAT *st;
    int r = env->log_stat(env, &st, 0);
    if (r != 0)
        return r;
    *out = (uint64_t)st->st_w_mbytes * 1048576 + st->st_w_bytes;
    free(st);
    return 0;
}

int txb_checkpoint(DB_ENV *env, uint32_t kbytes) { return env->txn_checkpoint(env, kbytes, 0, 0); }

int txb_begin(DB_ENV *env, DB_TXN **txn) { return env->txn_begin(env, NULL, txn, 0); }

/* Commits with DB_TXN_SYNC if `durable`, else with the environment's
 * DB_TXN_WRITE_NOSYNC. The handle is freed whatever the result. */
int txb_commit(DB_TXN *txn, int durable) { return txn->commit(txn, durable ? DB_TXN_SYNC : 0); }

int txb_abort(DB_TXN *txn) { return txn->abort(txn); }

static void dbt(DBT *d, const void *p, uint32_t n) {
    memset(d, 0, sizeof *d);
    d->data = (void *)p;
    d->size = n;
}

int txb_put(DB *db, DB_TXN *txn, const void *k, uint32_t kn, const void *v, uint32_t vn) {
    DBT key, val;
    dbt(&key, k, kn);
    dbt(&val, v, vn);
    return db->put(db, txn, &key, &val, 0);
}

/* Deletes `k`; absent keys are not an error. */
int txb_del(DB *db, DB_TXN *txn, const void *k, uint32_t kn) {
    DBT key;
    int r;
    dbt(&key, k, kn);
    r = db->del(db, txn, &key, 0);
    return r == DB_NOTFOUND ? 0 : r;
}

/* Buffers a session reuses for returned keys and values (DB_DBT_REALLOC,
 * as DB_THREAD requires returned memory to be the caller's). */
struct txb_bufs {
    DBT key, val;
};

struct txb_bufs *txb_bufs_new(void) {
    struct txb_bufs *b = calloc(1, sizeof *b);
    if (b) {
        b->key.flags = DB_DBT_REALLOC;
        b->val.flags = DB_DBT_REALLOC;
    }
    return b;
}

void txb_bufs_free(struct txb_bufs *b) {
    if (!b)
        return;
    free(b->key.data);
    free(b->val.data);
    free(b);
}

/* Gets `k`'s value into b->val; DB_NOTFOUND if absent. */
int txb_get(DB *db, DB_TXN *txn, struct txb_bufs *b, const void *k, uint32_t kn,
            const void **v, uint32_t *vn) {
    DBT key;
    int r;
    dbt(&key, k, kn);
    r = db->get(db, txn, &key, &b->val, 0);
    if (r == 0) {
        *v = b->val.data;
        *vn = b->val.size;
    }
    return r;
}

int txb_cursor(DB *db, DB_TXN *txn, DBC **c) { return db->cursor(db, txn, c, 0); }

int txb_cursor_close(DBC *c) { return c->close(c); }

/* DB_SET_RANGE (the first key >= start) when `start` is non-null, else
 * DB_NEXT. The pair is left in b's buffers; DB_NOTFOUND past the end. */
int txb_cursor_next(DBC *c, struct txb_bufs *b, const void *start, uint32_t sn, const void **k,
                    uint32_t *kn, const void **v, uint32_t *vn) {
    int r;
    if (start) {
        /* DB_SET_RANGE reads the key from, and returns it into, b->key. */
        if (b->key.ulen < sn || !b->key.data) {
            void *p = realloc(b->key.data, sn ? sn : 1);
            if (!p)
                return ENOMEM;
            b->key.data = p;
            b->key.ulen = sn ? sn : 1;
        }
        memcpy(b->key.data, start, sn);
        b->key.size = sn;
    }
    r = c->get(c, &b->key, &b->val, start ? DB_SET_RANGE : DB_NEXT);
    if (r == 0) {
        *k = b->key.data;
        *kn = b->key.size;
        *v = b->val.data;
        *vn = b->val.size;
    }
    return r;
}
