/* Tests of backup, restore, compact and the region options from C. */
#define _DEFAULT_SOURCE
#include <time.h>
#include <dirent.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ctest.h"

#define PAGES 16

/* Commit c writes c at the start of page c % PAGES. */
static int commit_model(txmap_view *v, uint64_t c) {
    char *base = txmap_view_base(v);
    CHECK_EQ(txmap_begin(v, 0), TXMAP_OK);
    *(uint64_t *)(base + (c % PAGES) * PAGE_SIZE) = c;
    CHECK_EQ(txmap_commit(v), TXMAP_OK);
    return 0;
}

/* The region at path holds the model's state at commit k: page p holds the
 * newest c <= k with c % PAGES == p (0 if none). */
static int check_model(const char *path, uint64_t k) {
    txmap_region *r = NULL;
    txmap_view *v = NULL;
    CHECK_EQ(txmap_region_open(path, 0, &r), TXMAP_OK);
    CHECK_EQ(txmap_view_open(r, &v), TXMAP_OK);
    const char *base = txmap_view_base(v);
    for (uint64_t p = 0; p < PAGES; p++) {
        uint64_t want = k >= p ? k - (k - p) % PAGES : 0;
        CHECK_EQ(*(const uint64_t *)(base + p * PAGE_SIZE), want);
    }
    CHECK_EQ(txmap_view_close(v), TXMAP_OK);
    CHECK_EQ(txmap_region_close(r), TXMAP_OK);
    return 0;
}

/* The path of the archived segment (in `archive`) with the lowest first
 * commit above `after`, in `out`; 0 if found. */
static int find_segment(const char *archive, uint64_t after, char *out, size_t n) {
    DIR *d = opendir(archive);
    CHECK(d != NULL);
    struct dirent *e;
    uint64_t best = UINT64_MAX;
    while ((e = readdir(d)) != NULL) {
        const char *dash = strchr(e->d_name, '-');
        if (dash == NULL || strstr(e->d_name, ".txlog") == NULL) {
            continue;
        }
        uint64_t first = strtoull(dash + 1, NULL, 10);
        if (first > after && first < best) {
            best = first;
            join(out, n, archive, e->d_name);
        }
    }
    closedir(d);
    return best == UINT64_MAX;
}

/* Flips one bit of the byte at `at` in the file at `path`. */
static int flip(const char *path, long at) {
    FILE *f = fopen(path, "r+b");
    CHECK(f != NULL);
    CHECK_EQ(fseek(f, at, SEEK_SET), 0);
    int c = fgetc(f);
    CHECK(c != EOF);
    CHECK_EQ(fseek(f, at, SEEK_SET), 0);
    CHECK(fputc(c ^ 0x40, f) != EOF);
    CHECK_EQ(fclose(f), 0);
    return 0;
}

int ctest_media_backup_restore(const char *dir) {
    char src[4096], archive[4096], backup[4096], dst[4096], seg[8192];
    join(src, sizeof src, dir, "src.txm");
    join(archive, sizeof archive, dir, "archive");
    join(backup, sizeof backup, dir, "backup.txm");
    CHECK_EQ(mkdir(archive, 0755), 0);

    txmap_options opts = {.log_archive = archive};
    txmap_region *r = NULL;
    txmap_view *v = NULL;
    CHECK_EQ(txmap_region_create_options(src, PAGES * PAGE_SIZE, &opts, &r), TXMAP_OK);
    CHECK_EQ(txmap_view_open(r, &v), TXMAP_OK);
    for (uint64_t c = 1; c <= 20; c++) {
        CHECK_OK(commit_model(v, c));
    }
    uint64_t at = 0;
    CHECK_EQ(txmap_backup(r, backup, 0, &at), TXMAP_OK);
    CHECK_EQ(at, 20);
    /* A backup never replaces a file; unknown flags are refused. */
    CHECK_EQ(txmap_backup(r, backup, 0, &at), TXMAP_EEXIST);
    CHECK(errmsg_has("already exists"));
    join(dst, sizeof dst, dir, "other.txm");
    CHECK_EQ(txmap_backup(r, dst, 2, NULL), TXMAP_EINVAL);
    CHECK_EQ(txmap_backup(NULL, dst, 0, NULL), TXMAP_EINVAL);
    CHECK_EQ(access(dst, F_OK), -1);
    /* Commits after the backup, in several archived epochs; the wall
       clock after commit 57. */
    uint64_t after57 = 0;
    for (uint64_t c = 21; c <= 120; c++) {
        CHECK_OK(commit_model(v, c));
        if (c == 57) {
            struct timespec ts;
            CHECK_EQ(clock_gettime(CLOCK_REALTIME, &ts), 0);
            after57 = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
        }
        if (c % 25 == 0) {
            CHECK_EQ(txmap_region_checkpoint(r), TXMAP_OK);
        }
    }
    CHECK_EQ(txmap_view_close(v), TXMAP_OK);
    CHECK_EQ(txmap_region_close(r), TXMAP_OK);
    CHECK_OK(check_model(backup, 20));

    /* To the last commit, and to a chosen one. */
    join(dst, sizeof dst, dir, "last.txm");
    CHECK_EQ(txmap_restore(backup, archive, 0, dst, &at), TXMAP_OK);
    CHECK_EQ(at, 120);
    CHECK_OK(check_model(dst, 120));
    join(dst, sizeof dst, dir, "at57.txm");
    CHECK_EQ(txmap_restore(backup, archive, 57, dst, &at), TXMAP_OK);
    CHECK_EQ(at, 57);
    CHECK_OK(check_model(dst, 57));
    /* To a point in time: the clock after commit 57, and before the backup's. */
    join(dst, sizeof dst, dir, "time57.txm");
    CHECK_EQ(txmap_restore_to_time(backup, archive, after57, dst, &at), TXMAP_OK);
    CHECK_EQ(at, 57);
    CHECK_OK(check_model(dst, 57));
    join(dst, sizeof dst, dir, "time0.txm");
    CHECK_EQ(txmap_restore_to_time(backup, archive, 1, dst, &at), TXMAP_EINVAL);
    CHECK(errmsg_has("older backup"));
    CHECK_EQ(access(dst, F_OK), -1);
    join(dst, sizeof dst, dir, "at57.txm");
    /* An existing destination, a commit before the backup or past the end. */
    CHECK_EQ(txmap_restore(backup, archive, 0, dst, &at), TXMAP_EEXIST);
    CHECK(errmsg_has("already exists"));
    join(dst, sizeof dst, dir, "x.txm");
    CHECK_EQ(txmap_restore(backup, archive, 10, dst, &at), TXMAP_EINVAL);
    CHECK(errmsg_has("older backup"));
    CHECK_EQ(txmap_restore(backup, archive, 500, dst, &at), TXMAP_EINVAL);
    CHECK(errmsg_has("commit 500 cannot be reached"));
    CHECK_EQ(txmap_restore(NULL, archive, 0, dst, &at), TXMAP_EINVAL);
    CHECK(errmsg_has("backup_path"));
    /* A damaged segment is named. */
    CHECK_OK(find_segment(archive, 60, seg, sizeof seg));
    CHECK_OK(flip(seg, PAGE_SIZE + 100));
    CHECK_EQ(txmap_restore(backup, archive, 0, dst, &at), TXMAP_ECORRUPT);
    CHECK(errmsg_has(seg));
    CHECK(errmsg_has("damaged archived log segment"));
    CHECK_OK(flip(seg, PAGE_SIZE + 100));
    /* A missing one (not the last) is a gap. */
    CHECK_EQ(unlink(seg), 0);
    CHECK_EQ(txmap_restore(backup, archive, 0, dst, &at), TXMAP_EINVAL);
    CHECK(errmsg_has("has a gap"));
    CHECK(errmsg_has("commits 76..=100 are in no segment"));
    CHECK_EQ(access(dst, F_OK), -1);
    return 0;
}

int ctest_media_compact_and_options(const char *dir) {
    char path[4096], side[4096];
    join(path, sizeof path, dir, "r.txm");
    txmap_region *r = NULL;
    txmap_view *v = NULL;
    /* Unknown flags are refused. */
    txmap_options bad = {.flags = 64};
    CHECK_EQ(txmap_region_create_options(path, PAGES * PAGE_SIZE, &bad, &r), TXMAP_EINVAL);
    CHECK(r == NULL);
    /* Without page checksums: no table. */
    txmap_options opts = {.flags = TXMAP_NO_PAGE_CHECKSUMS, .log_reserve = 8 << 20};
    CHECK_EQ(txmap_region_create_options(path, PAGES * PAGE_SIZE, &opts, &r), TXMAP_OK);
    join(side, sizeof side, dir, "r.txm-sums");
    CHECK_EQ(txmap_view_open(r, &v), TXMAP_OK);
    for (uint64_t c = 1; c <= 40; c++) {
        CHECK_OK(commit_model(v, c));
    }
    CHECK_EQ(txmap_region_checkpoint(r), TXMAP_OK);
    CHECK_EQ(access(side, F_OK), -1);
    /* Compact refuses a region open anywhere. */
    uint64_t size = 0;
    CHECK_EQ(txmap_compact(path, &size), TXMAP_EINVAL);
    CHECK(errmsg_has("open in another process"));
    CHECK_EQ(txmap_view_close(v), TXMAP_OK);
    CHECK_EQ(txmap_region_close(r), TXMAP_OK);
    /* With the defaults (NULL options): checksums on. */
    CHECK_EQ(txmap_region_open_options(path, NULL, &r), TXMAP_OK);
    CHECK_EQ(txmap_view_open(r, &v), TXMAP_OK);
    for (uint64_t c = 41; c <= 60; c++) {
        CHECK_OK(commit_model(v, c));
    }
    CHECK_EQ(txmap_view_close(v), TXMAP_OK);
    CHECK_EQ(txmap_region_close(r), TXMAP_OK);
    CHECK_EQ(access(side, F_OK), 0);
    /* A raw region keeps its size and its bytes; the log is cut. */
    CHECK_EQ(txmap_compact(path, &size), TXMAP_OK);
    CHECK_EQ(size, PAGES * PAGE_SIZE);
    struct stat st;
    join(side, sizeof side, dir, "r.txm-log");
    CHECK_EQ(stat(side, &st), 0);
    CHECK(st.st_size <= PAGE_SIZE + (4 << 20));
    CHECK_OK(check_model(path, 60));
    CHECK_EQ(txmap_compact(NULL, NULL), TXMAP_EINVAL);
    join(side, sizeof side, dir, "none.txm");
    CHECK(txmap_compact(side, NULL) < 0);
    CHECK(errmsg_has("none.txm"));
    return 0;
}

/* Reads every page of a fresh 256-page region dir/name (opened with
 * `cache` as view_private_pages) by plain loads in two read-write
 * transactions (the first, like a read-only one, maps the region file and
 * copies nothing); `during`/`after`: the view's private pages in and after
 * the second. */
static int read_all(const char *dir, const char *name, uint64_t cache, uint64_t *during, uint64_t *after) {
    char path[4096];
    join(path, sizeof path, dir, name);
    txmap_options o = {.view_private_pages = cache};
    txmap_region *r = NULL;
    txmap_view *v = NULL;
    CHECK_EQ(txmap_region_create_options(path, 256 * PAGE_SIZE, &o, &r), TXMAP_OK);
    CHECK_EQ(txmap_view_open(r, &v), TXMAP_OK);
    volatile const uint64_t *p = txmap_view_base(v);
    /* Twice: the first transaction's loads map the region file's pages
     * (nothing copied); the second copies each page it reads. */
    for (int round = 0; round < 2; round++) {
        CHECK_EQ(txmap_begin(v, 0), TXMAP_OK);
        uint64_t sum = 0;
        for (size_t pg = 0; pg < 256; pg++) {
            sum += p[pg * PAGE_SIZE / 8];
        }
        CHECK_EQ(sum, 0);
        *during = txmap_view_private_bytes(v) / PAGE_SIZE;
        CHECK_EQ(txmap_commit(v), TXMAP_OK);
        *after = txmap_view_private_bytes(v) / PAGE_SIZE;
    }
    CHECK_EQ(txmap_view_close(v), TXMAP_OK);
    CHECK_EQ(txmap_region_close(r), TXMAP_OK);
    return 0;
}

int ctest_media_view_private_pages(const char *dir) {
    uint64_t during = 0, after = 0;
    /* 8 pages: the transaction holds what it read, then 8 stay at most. */
    CHECK_OK(read_all(dir, "small.txm", 8, &during, &after));
    CHECK(during >= 256);
    CHECK(after <= 8);
    /* 0: the default (4,096 pages) keeps all 256. */
    CHECK_OK(read_all(dir, "default.txm", 0, &during, &after));
    CHECK(after >= 256);
    CHECK_EQ(txmap_view_private_bytes(NULL), 0);
    return 0;
}
