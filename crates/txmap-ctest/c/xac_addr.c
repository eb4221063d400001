/* The same address in every process: forked children that call xInit and
 * xMmap again, and new processes, map a region at its fixed address, so raw
 * pointers stored in it stay valid; a taken address is an error, never
 * another address. Run by tests/xac_addr.rs (its own binary: this forks). */
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ctest.h"

/* Pages written by the large commit, after a head page and a value page. */
#define BIG_PAGES 4096
#define FIRST_BIG 8
#define REGION_LEN ((size_t)(FIRST_BIG + BIG_PAGES) * PAGE_SIZE)
#define VALUE 0x5eedf00dcafeull

/* Inside a transaction: follows the pointer at offset 0 and checks the value
 * it points to, and one page of the large commit. */
static int follow(char *base, int page) {
    uint64_t *p = *(uint64_t **)base;
    CHECK(p == (uint64_t *)(base + 5 * PAGE_SIZE));
    CHECK(*p == VALUE);
    CHECK_EQ(base[(size_t)(FIRST_BIG + page) * PAGE_SIZE], (char)(page + 1));
    return 0;
}

/* A forked child: maps the region again and checks it lands at `base`.
 * Exit code 3 means it mapped elsewhere. */
static int child(const char *dir, int durability, char *base, int k) {
    CHECK_EQ(xInit(dir, durability), 0);
    char *p = xMmap("r", REGION_LEN);
    CHECK(p != NULL);
    if (p != base) {
        fprintf(stderr, "child %d mapped at %p, the parent at %p\n", k, (void *)p, (void *)base);
        _exit(3);
    }
    CHECK_EQ(xbegin(), 0);
    CHECK_OK(follow(p, k * 97 % BIG_PAGES));
    CHECK_EQ(xend(), XAC_COMMITTED);
    CHECK_EQ(xShutdown(), 0);
    return 0;
}

/* Maps region "r", stores a pointer into it, commits BIG_PAGES pages in one
 * transaction and at once forks `children` children, each of which must map
 * the region at the parent's address. Shuts down and stores the address in
 * `*base_out` for the next process. */
int ctest_xac_addr_forks(const char *dir, int durability, int children, uintptr_t *base_out) {
    CHECK_EQ(xInit(dir, durability), 0);
    char *base = xMmap("r", REGION_LEN);
    CHECK(base != NULL);
    CHECK((uintptr_t)base >= (17ull << 40) && (uintptr_t)base < (64ull << 40));
    CHECK_EQ(xbegin(), 0);
    *(uint64_t *)(base + 5 * PAGE_SIZE) = VALUE;
    *(uint64_t **)base = (uint64_t *)(base + 5 * PAGE_SIZE);
    for (int i = 0; i < BIG_PAGES; i++) {
        base[(size_t)(FIRST_BIG + i) * PAGE_SIZE] = (char)(i + 1);
    }
    CHECK_EQ(xend(), XAC_COMMITTED);
    pid_t pids[64];
    CHECK(children <= 64);
    for (int k = 0; k < children; k++) {
        pids[k] = fork();
        CHECK(pids[k] >= 0);
        if (pids[k] == 0) {
            _exit(child(dir, durability, base, k) == 0 ? 0 : 1);
        }
    }
    int elsewhere = 0, failed = 0;
    for (int k = 0; k < children; k++) {
        int status = 0;
        CHECK_EQ(waitpid(pids[k], &status, 0), pids[k]);
        CHECK(WIFEXITED(status));
        elsewhere += WEXITSTATUS(status) == 3;
        failed += WEXITSTATUS(status) != 0 && WEXITSTATUS(status) != 3;
    }
    if (elsewhere || failed) {
        fprintf(stderr, "%d of %d children mapped elsewhere, %d failed otherwise\n", elsewhere,
                children, failed);
    }
    CHECK_EQ(elsewhere, 0);
    CHECK_EQ(failed, 0);
    /* The parent's own view is still good and at its address. */
    CHECK_EQ(xbegin(), 0);
    CHECK_OK(follow(base, 4095));
    CHECK_EQ(xend(), XAC_COMMITTED);
    CHECK_EQ(xShutdown(), 0);
    *base_out = (uintptr_t)base;
    return 0;
}

/* In a new process: maps region "r" and checks it is at `base` and its
 * pointer leads to the value. */
int ctest_xac_addr_follow(const char *dir, int durability, uintptr_t base) {
    CHECK_EQ(xInit(dir, durability), 0);
    char *p = xMmap("r", REGION_LEN);
    CHECK(p != NULL);
    CHECK((uintptr_t)p == base);
    CHECK_EQ(xbegin(), 0);
    CHECK_OK(follow(p, 1234));
    CHECK_EQ(xend(), XAC_COMMITTED);
    CHECK_EQ(xShutdown(), 0);
    return 0;
}

/* Maps one page at `at` (never replacing anything); NULL if it could not. */
static void *squat(uintptr_t at) {
    void *m = mmap((void *)at, PAGE_SIZE, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE,
                   -1, 0);
    return m == (void *)at ? m : NULL;
}

/* A taken address: txmap_view_open_at and xMmap fail and say where and
 * what holds it; nothing is mapped elsewhere. The address can be given. */
int ctest_addr_taken(const char *dir) {
    char path[4096];
    uintptr_t want = 66ull << 40;
    txmap_region *r = NULL;
    CHECK_EQ(txmap_region_create_at(join(path, sizeof path, dir, "given"), 4 * PAGE_SIZE, 0, want,
                                    &r),
             TXMAP_OK);
    CHECK_EQ(txmap_region_address(r), want);
    void *m = squat(want + 4096);
    CHECK(m != NULL);
    txmap_view *v = (txmap_view *)1;
    CHECK_EQ(txmap_view_open_at(r, 0, &v), TXMAP_EADDR);
    CHECK(v == NULL);
    CHECK(errmsg_has("0x420000000000"));
    CHECK(errmsg_has("420000001000-"));
    CHECK(errmsg_has("given"));
    CHECK_EQ(munmap(m, PAGE_SIZE), 0);
    CHECK_EQ(txmap_view_open_at(r, 0, &v), TXMAP_OK);
    CHECK_EQ((uintptr_t)txmap_view_base(v), want);
    CHECK_EQ(txmap_view_close(v), TXMAP_OK);
    CHECK_EQ(txmap_region_close(r), TXMAP_OK);

    CHECK_EQ(xInit(dir, XAC_DURABLE), 0);
    char *base = xMmap("x", PAGE_SIZE);
    CHECK(base != NULL);
    CHECK_EQ(xMunmap("x"), 0);
    m = squat((uintptr_t)base);
    CHECK(m != NULL);
    errno = 0;
    CHECK(xMmap("x", PAGE_SIZE) == NULL);
    CHECK_EQ(errno, EEXIST);
    CHECK(errmsg_has("not free"));
    CHECK_EQ(munmap(m, PAGE_SIZE), 0);
    CHECK(xMmap("x", PAGE_SIZE) == base);
    CHECK_EQ(xShutdown(), 0);
    return 0;
}
