/* Plain files from C (issue 19 point 2): an existing ordinary file mapped at
 * offset 0 with txmap_region_open_plain, and by xMmap. */
#define _DEFAULT_SOURCE
#include <stdint.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ctest.h"

/* Writes n bytes of a pattern (byte i = 'a' + i % 26) to path. */
static int write_pattern(const char *path, size_t n) {
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    for (size_t i = 0; i < n; i++) {
        CHECK(fputc('a' + (int)(i % 26), f) != EOF);
    }
    CHECK_EQ(fclose(f), 0);
    return 0;
}

/* The file at path is n bytes long and equals want. */
static int file_is(const char *path, const char *want, size_t n) {
    struct stat st;
    CHECK_EQ(stat(path, &st), 0);
    CHECK_EQ(st.st_size, n);
    char *got = malloc(n + 1);
    CHECK(got != NULL);
    FILE *f = fopen(path, "rb");
    CHECK(f != NULL);
    CHECK_EQ(fread(got, 1, n, f), n);
    CHECK_EQ(fclose(f), 0);
    int same = memcmp(got, want, n) == 0;
    free(got);
    CHECK(same);
    return 0;
}

#define LEN 5000

int ctest_plain_native(const char *dir) {
    char path[512], other[512];
    join(path, sizeof path, dir, "data.txt");
    CHECK_OK(write_pattern(path, LEN));
    char model[LEN];
    for (size_t i = 0; i < LEN; i++) {
        model[i] = 'a' + (char)(i % 26);
    }

    txmap_region *r = NULL;
    txmap_view *v = NULL;
    CHECK_EQ(txmap_region_open_plain(path, NULL, &r), TXMAP_OK);
    CHECK_EQ(txmap_region_is_plain(r), 1);
    CHECK_EQ(txmap_region_size(r), 2 * PAGE_SIZE);
    CHECK_EQ(txmap_view_open(r, &v), TXMAP_OK);
    char *base = txmap_view_base(v);
    CHECK_EQ(txmap_begin(v, 0), TXMAP_OK);
    CHECK(memcmp(base, model, LEN) == 0); /* the file's bytes at offset 0 */
    memcpy(base, "HELLO", 5);
    memcpy(base + LEN - 5, "WORLD", 5);
    base[LEN + 10] = 'Z'; /* past the file's length: not kept */
    CHECK_EQ(txmap_commit(v), TXMAP_OK);
    memcpy(model, "HELLO", 5);
    memcpy(model + LEN - 5, "WORLD", 5);
    CHECK_EQ(txmap_backup(r, join(other, sizeof other, dir, "copy"), 0, NULL), TXMAP_ENOTSUP);
    CHECK(errmsg_has("plain file"));
    CHECK_EQ(txmap_view_close(v), TXMAP_OK);
    CHECK_EQ(txmap_region_close(r), TXMAP_OK);
    CHECK_OK(file_is(path, model, LEN));
    CHECK_EQ(access(join(other, sizeof other, dir, "data.txt-txmap"), F_OK), 0);

    /* txmap_region_open knows it now. */
    CHECK_EQ(txmap_region_open(path, 0, &r), TXMAP_OK);
    CHECK_EQ(txmap_region_is_plain(r), 1);
    CHECK_EQ(txmap_region_close(r), TXMAP_OK);

    /* Another program appends while it is closed. */
    FILE *f = fopen(path, "ab");
    CHECK(f != NULL);
    CHECK(fputs("tail", f) >= 0);
    CHECK_EQ(fclose(f), 0);
    CHECK_EQ(txmap_region_open_plain(path, NULL, &r), TXMAP_ECHANGED);
    CHECK(r == NULL);
    CHECK(errmsg_has("another program changed it"));
    CHECK(strcmp(txmap_strerror(TXMAP_ECHANGED), "unknown code") != 0);
    txmap_options o = {.flags = TXMAP_ACCEPT_CHANGES};
    CHECK_EQ(txmap_region_open_plain(path, &o, &r), TXMAP_OK);
    CHECK_EQ(txmap_region_close(r), TXMAP_OK);
    char longer[LEN + 4];
    memcpy(longer, model, LEN);
    memcpy(longer + LEN, "tail", 4);
    CHECK_OK(file_is(path, longer, LEN + 4));
    return 0;
}

#define XLEN 3000

/* LIBXAC's xMmap of an existing file that is no txmap region. */
int ctest_plain_xac(const char *dir) {
    char path[512];
    join(path, sizeof path, dir, "legacy.dat");
    CHECK_OK(write_pattern(path, XLEN));
    char model[XLEN];
    for (size_t i = 0; i < XLEN; i++) {
        model[i] = 'a' + (char)(i % 26);
    }
    CHECK_EQ(xInit(dir, XAC_DURABLE), 0);
    char *p = xMmap("legacy.dat", 0);
    CHECK(p != NULL);
    CHECK(memcmp(p, model, XLEN) == 0);
    CHECK_EQ(xbegin(), 0);
    p[0] = 'X';
    p[XLEN - 1] = 'Y';
    CHECK_EQ(xend(), XAC_COMMITTED);
    CHECK_EQ(xShutdown(), 0);
    model[0] = 'X';
    model[XLEN - 1] = 'Y';
    CHECK_OK(file_is(path, model, XLEN));

    /* Mapped again: the same bytes; a larger length grows the file. */
    CHECK_EQ(xInit(dir, XAC_DURABLE), 0);
    p = xMmap("legacy.dat", 2 * PAGE_SIZE);
    CHECK(p != NULL);
    CHECK(memcmp(p, model, XLEN) == 0);
    CHECK_EQ(xShutdown(), 0);
    char grown[2 * PAGE_SIZE] = {0};
    memcpy(grown, model, XLEN);
    CHECK_OK(file_is(path, grown, 2 * PAGE_SIZE));
    return 0;
}
