/* Round durability from C: txmap_round_start, txmap_round, txmap_round_stop.
 * Run by tests/rounds.rs. */
#include <stdint.h>

#include "ctest.h"

int ctest_native_rounds(const char *dir) {
    txmap_region *r = NULL;
    txmap_view *v = NULL, *o = NULL;
    CHECK_OK(fresh_region(dir, "rounds.txm", 4, &r, &v));
    CHECK_EQ(txmap_view_open(r, &o), TXMAP_OK);
    volatile uint64_t *p = txmap_view_base(v);
    volatile uint64_t *q = txmap_view_base(o);
    CHECK_EQ(txmap_round(v), TXMAP_ENOTXN);
    CHECK_EQ(txmap_round_start(v), TXMAP_OK);
    CHECK_EQ(txmap_round_start(v), TXMAP_EINVAL);
    for (uint64_t round = 1; round <= 3; round++) {
        p[0] = round; /* plain stores, no txmap_begin */
        p[PAGE_SIZE / 8] = round * 10;
        CHECK_EQ(txmap_round(v), TXMAP_OK);
        CHECK_EQ(txmap_begin(o, TXMAP_READ_ONLY), TXMAP_OK);
        CHECK_EQ(q[0], round);
        CHECK_EQ(q[PAGE_SIZE / 8], round * 10);
        CHECK_EQ(txmap_commit(o), TXMAP_OK);
    }
    p[0] = 99; /* discarded by stop */
    CHECK_EQ(txmap_round_stop(v), TXMAP_OK);
    CHECK_EQ(txmap_in_transaction(v), 0);
    CHECK_EQ(txmap_begin(o, TXMAP_READ_ONLY), TXMAP_OK);
    CHECK_EQ(q[0], 3);
    CHECK_EQ(txmap_commit(o), TXMAP_OK);
    CHECK_EQ(txmap_view_close(o), TXMAP_OK);
    CHECK_EQ(txmap_view_close(v), TXMAP_OK);
    CHECK_EQ(txmap_region_close(r), TXMAP_OK);
    return 0;
}
