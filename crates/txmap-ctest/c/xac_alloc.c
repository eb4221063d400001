/* xMalloc, xFree and xRoot: the transactional heap from the LIBXAC-style
 * calls. Run by tests/xac_alloc.rs, one function at a time (the LIBXAC state
 * is process-wide), which then checks the heap of each region from Rust. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ctest.h"

/* errno after the call must be `e`. */
#define CHECK_ERRNO(call, bad, e)  \
    do {                           \
        errno = 0;                 \
        CHECK((call) == (bad));    \
        CHECK_EQ(errno, (e));      \
    } while (0)

/* Misuse: every bad call fails with EINVAL (ENOMEM for a huge size) and a
 * message, and leaves the heap as it was (tests/xac_alloc.rs checks it: 2
 * blocks in use, the root object and `q`). */
int ctest_xac_alloc_errors(const char *dir) {
    CHECK_ERRNO(xMalloc(8), NULL, EINVAL);
    CHECK(errmsg_has("xInit"));
    CHECK_EQ(xInit(dir, XAC_NONDURABLE), 0);
    CHECK_ERRNO(xMalloc(8), NULL, EINVAL);
    CHECK(errmsg_has("xMmap"));
    char *base = xMmap("errors", 64 * 1024);
    CHECK(base != NULL);

    CHECK_ERRNO(xMalloc(16), NULL, EINVAL);
    CHECK(errmsg_has("xMalloc outside a transaction"));
    CHECK_ERRNO(xRoot(16), NULL, EINVAL);
    CHECK_ERRNO(xFree(base + 4096), -1, EINVAL);
    CHECK(errmsg_has("xFree outside a transaction"));
    CHECK_EQ(xFree(NULL), 0);

    CHECK_EQ(xbegin(), 0);
    uint64_t *root = xRoot(64);
    CHECK(root != NULL);
    char *p = xMalloc(100);
    CHECK(p != NULL);
    CHECK((char *)p > base && ((uintptr_t)p & 15) == 0);
    for (int i = 0; i < 100; i++) {
        CHECK_EQ(p[i], 0);
    }
    memset(p, 7, 100);
    CHECK_ERRNO(xFree(p + 16), -1, EINVAL); /* inside a block */
    CHECK(errmsg_has("not an allocated heap block"));
    int local = 0;
    CHECK_ERRNO(xFree(&local), -1, EINVAL);
    CHECK(errmsg_has("not in the mapped region"));
    CHECK_ERRNO(xFree(base), -1, EINVAL); /* the heap's header */
    CHECK_ERRNO(xFree(root), -1, EINVAL);
    CHECK(errmsg_has("root object"));
    CHECK_ERRNO(xMalloc((size_t)1 << 62), NULL, ENOMEM);
    CHECK_EQ(xFree(NULL), 0);
    CHECK_EQ(xFree(p), 0);
    CHECK_EQ(p[0], 0); /* zeroed */
    CHECK_ERRNO(xFree(p), -1, EINVAL);
    CHECK(errmsg_has("already free"));

    /* User data that mimics a block header: a 4096-byte class at an offset
     * that is not page aligned, where the heap never puts one. */
    uint64_t *q = xMalloc(8192);
    CHECK(q != NULL);
    uint64_t *fake = q + 6; /* 48 bytes into the user part: a 32-byte multiple */
    fake[0] = 0;
    fake[1] = (uint64_t)0xB10C << 48 | 1 << 16 | 7;
    CHECK_ERRNO(xFree(fake + 2), -1, EINVAL);
    CHECK_EQ(fake[1], (uint64_t)0xB10C << 48 | 1 << 16 | 7); /* nothing zeroed */
    memset(q, 0, 64);
    root[0] = (uint64_t)((char *)q - base);
    CHECK_EQ(xend(), XAC_COMMITTED);

    /* An allocation whose transaction aborted is not a live block. */
    CHECK_EQ(xbegin(), 0);
    char *a = xMalloc(64);
    CHECK(a != NULL);
    a[0] = 1;
    CHECK_EQ(xabort(), 0);
    CHECK_EQ(a[0], 0);
    CHECK_ERRNO(xFree(a), -1, EINVAL);
    CHECK_EQ(xend(), XAC_ABORTED);
    CHECK_EQ(xbegin(), 0);
    CHECK_ERRNO(xFree(a), -1, EINVAL);
    /* The root object is found again, at the same place. */
    CHECK(xRoot(64) == root);
    CHECK_ERRNO(xRoot(65), NULL, EINVAL);
    CHECK_EQ(xend(), XAC_COMMITTED);
    CHECK_EQ(xShutdown(), 0);
    return 0;
}

/* ---- four processes allocating and freeing at once ---- */

#define PROCS 4
#define MAXLIVE 60
#define ROOT_SIZE ((PROCS + 1) * PAGE_SIZE)

struct entry {
    uint64_t off, size, tag;
};

/* A process's list of live blocks, on a page of its own (no conflicts
 * between processes over it). */
struct list {
    uint64_t count, pad;
    struct entry e[MAXLIVE];
};

struct stats {
    long commits, conflicts, aborted_on_purpose;
};

static uint64_t next_rand(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static unsigned char pattern(uint64_t tag, uint64_t j) {
    return (unsigned char)((tag * 131 + j * 7) ^ (j >> 8));
}

static void fill(unsigned char *p, uint64_t size, uint64_t tag) {
    for (uint64_t j = 0; j < size; j++) {
        p[j] = pattern(tag, j);
    }
}

static int holds(const unsigned char *p, uint64_t size, uint64_t tag) {
    for (uint64_t j = 0; j < size; j++) {
        if (p[j] != pattern(tag, j)) {
            return 0;
        }
    }
    return 1;
}

static struct list *list_of(void *root, int proc) {
    uintptr_t r = ((uintptr_t)root + PAGE_SIZE - 1) & ~(uintptr_t)(PAGE_SIZE - 1);
    return (struct list *)(r + (uintptr_t)proc * PAGE_SIZE);
}

static uint64_t random_size(uint64_t *s) {
    uint64_t r = next_rand(s) % 100;
    if (r < 70) {
        return 1 + next_rand(s) % 256;
    }
    if (r < 95) {
        return 257 + next_rand(s) % 3800;
    }
    return 4097 + next_rand(s) % 16000;
}

/* One process's work: `txns` committed transactions of 1-3 allocations or
 * frees each, every fifth transaction (about) aborted on purpose, checked
 * against `model` (the list as of the last commit). */
static int alloc_child(const char *dir, int proc, long txns, int wfd) {
    CHECK_EQ(xInit(dir, XAC_NONDURABLE), 0);
    char *base = xMmap("heap", 0);
    CHECK(base != NULL);
    uint64_t seed = 0x9E3779B97F4A7C15ull * (uint64_t)(proc + 1);
    struct list model, work;
    memset(&model, 0, sizeof model);
    uint64_t tags = (uint64_t)proc << 40;
    struct stats st = {0, 0, 0};
    while (st.commits < txns) {
        CHECK_EQ(xbegin(), 0);
        struct list *l = list_of(xRoot(ROOT_SIZE), proc);
        CHECK(memcmp(l, &model, sizeof model) == 0); /* aborted ones left no trace */
        work = model;
        char *fresh[3];
        uint64_t fresh_size[3];
        int nfresh = 0;
        int ops = 1 + (int)(next_rand(&seed) % 3);
        for (int k = 0; k < ops; k++) {
            if (work.count < MAXLIVE && (work.count == 0 || next_rand(&seed) % 2)) {
                uint64_t size = random_size(&seed);
                unsigned char *p = xMalloc(size);
                CHECK(p != NULL);
                for (uint64_t j = 0; j < size; j++) {
                    CHECK_EQ(p[j], 0);
                }
                uint64_t tag = ++tags;
                fill(p, size, tag);
                work.e[work.count++] = (struct entry){(uint64_t)((char *)p - base), size, tag};
                fresh[nfresh] = (char *)p;
                fresh_size[nfresh++] = size;
            } else {
                uint64_t j = next_rand(&seed) % work.count;
                struct entry e = work.e[j];
                CHECK(holds((unsigned char *)base + e.off, e.size, e.tag));
                CHECK_EQ(xFree(base + e.off), 0);
                work.e[j] = work.e[--work.count];
            }
        }
        memcpy(l, &work, sizeof work);
        if (next_rand(&seed) % 5 == 0) {
            CHECK_EQ(xabort(), 0);
            /* Still inside, on the snapshot: the list is the model's, every
             * block freed here holds its bytes again, and every block
             * allocated here (that was not live before) is zero again. */
            CHECK(memcmp(l, &model, sizeof model) == 0);
            for (uint64_t j = 0; j < model.count; j++) {
                struct entry e = model.e[j];
                CHECK(holds((unsigned char *)base + e.off, e.size, e.tag));
            }
            for (int k = 0; k < nfresh; k++) {
                int reused = 0; /* freed here first, then allocated again */
                for (uint64_t j = 0; j < model.count; j++) {
                    reused |= base + model.e[j].off == fresh[k];
                }
                for (uint64_t j = 0; !reused && j < fresh_size[k]; j++) {
                    CHECK_EQ(fresh[k][j], 0);
                }
            }
            CHECK_EQ(xend(), XAC_ABORTED);
            st.aborted_on_purpose++;
            continue;
        }
        int r = xend();
        if (r == XAC_COMMITTED) {
            model = work;
            st.commits++;
        } else {
            CHECK_EQ(r, XAC_ABORTED);
            st.conflicts++;
        }
    }
    CHECK_EQ(xShutdown(), 0);
    CHECK_EQ(write(wfd, &st, sizeof st), (long)sizeof st);
    return 0;
}

static int by_offset(const void *a, const void *b) {
    const struct entry *x = a, *y = b;
    return x->off < y->off ? -1 : x->off > y->off;
}

/* PROCS processes allocate and free in `txns` committed transactions each
 * on a region that starts at 64 KiB (so it grows inside their
 * transactions); then every live block must hold its pattern and no two
 * may overlap. `*live` gets the number of live blocks (the root object not
 * counted); `*conflicts` and `*commits` the totals. */
int ctest_xac_alloc_processes(const char *dir, long txns, long *live, long *conflicts,
                              long *commits) {
    CHECK_EQ(xInit(dir, XAC_NONDURABLE), 0);
    CHECK(xMmap("heap", 64 * 1024) != NULL);
    CHECK_EQ(xbegin(), 0);
    CHECK(xRoot(ROOT_SIZE) != NULL);
    CHECK_EQ(xend(), XAC_COMMITTED);
    CHECK_EQ(xShutdown(), 0);

    int fds[2];
    CHECK_EQ(pipe(fds), 0);
    pid_t pids[PROCS];
    for (int i = 0; i < PROCS; i++) {
        pids[i] = fork();
        CHECK(pids[i] >= 0);
        if (pids[i] == 0) {
            close(fds[0]);
            _exit(alloc_child(dir, i, txns, fds[1]) ? 1 : 0);
        }
    }
    close(fds[1]);
    for (int i = 0; i < PROCS; i++) {
        int status = 0;
        CHECK_EQ(waitpid(pids[i], &status, 0), pids[i]);
        CHECK(WIFEXITED(status));
        CHECK_EQ(WEXITSTATUS(status), 0);
    }
    struct stats st, sum = {0, 0, 0};
    int reports = 0;
    while (read(fds[0], &st, sizeof st) == (ssize_t)sizeof st) {
        sum.commits += st.commits;
        sum.conflicts += st.conflicts;
        sum.aborted_on_purpose += st.aborted_on_purpose;
        reports++;
    }
    close(fds[0]);
    CHECK_EQ(reports, PROCS);
    fprintf(stderr,
            "xMalloc/xFree, %d processes: %ld commits, %ld conflict aborts (%.2f%% of "
            "attempts that reached xend), %ld aborted on purpose\n",
            PROCS, sum.commits, sum.conflicts,
            100.0 * (double)sum.conflicts / (double)(sum.commits + sum.conflicts),
            sum.aborted_on_purpose);
    *conflicts = sum.conflicts;
    *commits = sum.commits;

    CHECK_EQ(xInit(dir, XAC_NONDURABLE), 0);
    char *base = xMmap("heap", 0);
    CHECK(base != NULL);
    CHECK_EQ(xbegin(), 0);
    void *root = xRoot(ROOT_SIZE);
    CHECK(root != NULL);
    static struct entry all[PROCS * MAXLIVE];
    long n = 0;
    for (int i = 0; i < PROCS; i++) {
        struct list *l = list_of(root, i);
        CHECK(l->count <= MAXLIVE);
        for (uint64_t j = 0; j < l->count; j++) {
            struct entry e = l->e[j];
            CHECK(holds((unsigned char *)base + e.off, e.size, e.tag));
            all[n++] = e;
        }
    }
    qsort(all, (size_t)n, sizeof all[0], by_offset);
    for (long k = 0; k + 1 < n; k++) {
        /* The next block's 16-byte header lies before its user part. */
        CHECK(all[k].off + all[k].size + 16 <= all[k + 1].off);
    }
    CHECK_EQ(xend(), XAC_COMMITTED);
    CHECK_EQ(xShutdown(), 0);
    *live = n;
    return 0;
}

/* ---- growth inside a transaction ---- */

#define BIG (3u << 20)
#define BIGGER (6u << 20)

/* Maps region "grow" again and begins a transaction; root[0] must name the
 * block ctest_xac_alloc_grow filled. */
static int open_grown(const char *dir, char **base, uint64_t **root) {
    CHECK_EQ(xInit(dir, XAC_NONDURABLE), 0);
    *base = xMmap("grow", 0);
    CHECK(*base != NULL);
    CHECK_EQ(xbegin(), 0);
    *root = xRoot(64);
    CHECK(*root != NULL && (*root)[0] != 0);
    CHECK(holds((unsigned char *)*base + (*root)[0], BIG, 1));
    return 0;
}

/* One transaction allocates more than the region holds (it grows) and
 * commits; after xShutdown and a new xInit the data is there. */
int ctest_xac_alloc_grow(const char *dir) {
    CHECK_EQ(xInit(dir, XAC_NONDURABLE), 0);
    char *base = xMmap("grow", 64 * 1024);
    CHECK(base != NULL);
    CHECK_EQ(xbegin(), 0);
    uint64_t *root = xRoot(64);
    CHECK(root != NULL);
    unsigned char *p = xMalloc(BIG);
    CHECK(p != NULL);
    fill(p, BIG, 1);
    root[0] = (uint64_t)((char *)p - base);
    CHECK(xMmap("grow", 0) == base); /* the address did not move */
    CHECK_EQ(xend(), XAC_COMMITTED);
    CHECK_EQ(xShutdown(), 0);

    CHECK_OK(open_grown(dir, &base, &root));
    CHECK_EQ(xend(), XAC_COMMITTED);
    CHECK_EQ(xShutdown(), 0);
    return 0;
}

/* Then a transaction grows the region again and aborts: the block is gone
 * (tests/xac_alloc.rs checks that the region stayed larger; the size is
 * recorded by the next commit, so one follows). */
int ctest_xac_alloc_grow_abort(const char *dir) {
    char *base;
    uint64_t *root;
    CHECK_OK(open_grown(dir, &base, &root));
    unsigned char *q = xMalloc(BIGGER);
    CHECK(q != NULL);
    fill(q, BIGGER, 2);
    root[1] = (uint64_t)((char *)q - base);
    CHECK_EQ(xabort(), 0);
    CHECK_EQ(xend(), XAC_ABORTED);
    CHECK_EQ(xbegin(), 0);
    CHECK_EQ(root[1], 0);
    for (uint64_t j = 0; j < BIGGER; j += 512) {
        CHECK_EQ(q[j], 0);
    }
    CHECK(holds((unsigned char *)base + root[0], BIG, 1));
    root[2] = 7; /* a commit records the region's size */
    CHECK_EQ(xend(), XAC_COMMITTED);
    CHECK_EQ(xShutdown(), 0);
    return 0;
}

#define MB (1 << 20)

/* xMmap with a larger length inside a transaction grows the region at the
 * same address; committed, the new bytes are there after a new xInit. */
int ctest_xac_mmap_grow(const char *dir) {
    CHECK_EQ(xInit(dir, XAC_NONDURABLE), 0);
    volatile uint64_t *x = xMmap("mgrow", PAGE_SIZE);
    CHECK(x != NULL);
    CHECK_EQ(xbegin(), 0);
    x[0] = 1;
    CHECK(xMmap("mgrow", MB) == (void *)x);
    x[MB / 8 - 1] = 42;
    CHECK_EQ(xend(), XAC_COMMITTED);
    CHECK_EQ(xShutdown(), 0);

    CHECK_EQ(xInit(dir, XAC_NONDURABLE), 0);
    x = xMmap("mgrow", 0);
    CHECK(x != NULL);
    CHECK_EQ(xbegin(), 0);
    CHECK_EQ(x[0], 1);
    CHECK_EQ(x[MB / 8 - 1], 42);
    CHECK_EQ(xend(), XAC_COMMITTED);
    CHECK_EQ(xShutdown(), 0);
    return 0;
}

/* The same, aborted: the stores are gone, the region stays 2 MiB. */
int ctest_xac_mmap_grow_abort(const char *dir) {
    CHECK_EQ(xInit(dir, XAC_NONDURABLE), 0);
    volatile uint64_t *x = xMmap("mgrow", 0);
    CHECK(x != NULL);
    CHECK_EQ(xbegin(), 0);
    CHECK(xMmap("mgrow", 2 * MB) == (void *)x);
    x[2 * MB / 8 - 1] = 43;
    x[0] = 2;
    CHECK_EQ(xabort(), 0);
    CHECK_EQ(xend(), XAC_ABORTED);
    CHECK_EQ(xbegin(), 0);
    CHECK_EQ(x[0], 1);
    CHECK_EQ(x[2 * MB / 8 - 1], 0);
    x[1] = 5; /* a commit records the region's size */
    CHECK_EQ(xend(), XAC_COMMITTED);
    CHECK_EQ(xShutdown(), 0);
    return 0;
}
