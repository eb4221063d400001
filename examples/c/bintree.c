/* The binary tree example (bintree.h). */
#define _POSIX_C_SOURCE 200809L
#include "bintree.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAGIC 0x3165657274627874ull /* "txbtree1" */

enum { H_MAGIC = 0, H_ROOT = 8, H_NODES = 16, H_NEXT = 24, H_FREE = 32, H_LIMIT = 40 };
enum { N_KEY = 0, N_COUNT = 8, N_LEFT = 16, N_RIGHT = 24 };

#define TRY(e)              \
    do {                    \
        int r_ = (e);       \
        if (r_ != 0) {      \
            return r_;      \
        }                   \
    } while (0)

static int rd(txmap_op_mem *m, uint64_t off, uint64_t *x) {
    return txmap_op_read(m, off, x, sizeof *x);
}

static int wr(txmap_op_mem *m, uint64_t off, uint64_t x) {
    return txmap_op_write(m, off, &x, sizeof x);
}

struct head {
    uint64_t at, first, limit;
};

/* 0 if `n` is the offset of a node slot. */
static int bad_node(const struct head *h, uint64_t n) {
    return n < h->first || n + BINTREE_NODE > h->limit || (n - h->first) % BINTREE_NODE != 0;
}

static int head_of(txmap_op_mem *m, uint64_t at, struct head *h) {
    uint64_t magic;
    TRY(rd(m, at + H_MAGIC, &magic));
    if (magic != MAGIC) {
        return 1;
    }
    h->at = at;
    h->first = at + BINTREE_HEADER;
    return rd(m, at + H_LIMIT, &h->limit);
}

static int alloc_node(txmap_op_mem *m, const struct head *h, uint64_t *out) {
    uint64_t free_, next;
    TRY(rd(m, h->at + H_FREE, &free_));
    if (free_ != 0) {
        if (bad_node(h, free_)) {
            return 2;
        }
        TRY(rd(m, free_ + N_LEFT, &next));
        TRY(wr(m, h->at + H_FREE, next));
        *out = free_;
        return 0;
    }
    TRY(rd(m, h->at + H_NEXT, &next));
    if (next + BINTREE_NODE > h->limit) {
        return 3; /* full */
    }
    TRY(wr(m, h->at + H_NEXT, next + BINTREE_NODE));
    *out = next;
    return 0;
}

/* Takes node `n` (pointed at by the word at `link`) out of the tree and
 * frees its slot. */
static int unlink_node(txmap_op_mem *m, const struct head *h, uint64_t link, uint64_t n) {
    uint64_t l, r, gone = n, free_, nodes;
    TRY(rd(m, n + N_LEFT, &l));
    TRY(rd(m, n + N_RIGHT, &r));
    if (l == 0 || r == 0) {
        TRY(wr(m, link, l == 0 ? r : l));
    } else {
        /* Two children: the successor takes n's place by value. */
        uint64_t slink = n + N_RIGHT, s = r, sl, sr, sk, sc;
        for (;;) {
            if (bad_node(h, s)) {
                return 2;
            }
            TRY(rd(m, s + N_LEFT, &sl));
            if (sl == 0) {
                break;
            }
            slink = s + N_LEFT;
            s = sl;
        }
        TRY(rd(m, s + N_RIGHT, &sr));
        TRY(wr(m, slink, sr));
        TRY(rd(m, s + N_KEY, &sk));
        TRY(rd(m, s + N_COUNT, &sc));
        TRY(wr(m, n + N_KEY, sk));
        TRY(wr(m, n + N_COUNT, sc));
        gone = s;
    }
    static const uint8_t zero[BINTREE_NODE];
    TRY(rd(m, h->at + H_FREE, &free_));
    TRY(txmap_op_write(m, gone, zero, sizeof zero));
    TRY(wr(m, gone + N_LEFT, free_));
    TRY(wr(m, h->at + H_FREE, gone));
    TRY(rd(m, h->at + H_NODES, &nodes));
    return wr(m, h->at + H_NODES, nodes - 1);
}

/* Adds `delta` to `key`'s count: a new node if it had none, the node
 * removed when the count becomes 0. Deterministic, and touches the region
 * only through `m`: recovery runs it again. */
static int adjust(txmap_op_mem *m, const void *args, size_t len, int64_t delta) {
    uint64_t a[2];
    if (len != sizeof a) {
        return 4;
    }
    memcpy(a, args, sizeof a);
    uint64_t at = a[0], key = a[1], link = at + H_ROOT, n, k, steps = 0;
    struct head h;
    TRY(head_of(m, at, &h));
    for (;;) {
        TRY(rd(m, link, &n));
        if (n == 0) {
            break;
        }
        if (bad_node(&h, n) || ++steps > (h.limit - h.first) / BINTREE_NODE) {
            return 2; /* damaged */
        }
        TRY(rd(m, n + N_KEY, &k));
        if (k == key) {
            break;
        }
        link = n + (key < k ? N_LEFT : N_RIGHT);
    }
    if (n == 0) {
        uint64_t nodes;
        TRY(alloc_node(m, &h, &n));
        TRY(wr(m, n + N_KEY, key));
        TRY(wr(m, n + N_COUNT, (uint64_t)delta));
        TRY(wr(m, n + N_LEFT, 0));
        TRY(wr(m, n + N_RIGHT, 0));
        TRY(wr(m, link, n));
        TRY(rd(m, at + H_NODES, &nodes));
        return wr(m, at + H_NODES, nodes + 1);
    }
    uint64_t c;
    TRY(rd(m, n + N_COUNT, &c));
    c += (uint64_t)delta;
    if (c != 0) {
        return wr(m, n + N_COUNT, c);
    }
    return unlink_node(m, &h, link, n);
}

static int insert_op(txmap_op_mem *m, const void *args, size_t len, void *ctx) {
    (void)ctx;
    return adjust(m, args, len, 1);
}

static int remove_op(txmap_op_mem *m, const void *args, size_t len, void *ctx) {
    (void)ctx;
    return adjust(m, args, len, -1);
}

int bintree_register(void) {
    TRY(txmap_op_register(BINTREE_INSERT, "bintree insert", insert_op, NULL));
    return txmap_op_register(BINTREE_REMOVE, "bintree remove", remove_op, NULL);
}

int bintree_create(txmap_view *v, uint64_t at, uint64_t len) {
    if (at % 8 != 0 || len < BINTREE_HEADER + BINTREE_NODE) {
        return TXMAP_EINVAL;
    }
    volatile uint64_t *h = (volatile uint64_t *)((char *)txmap_view_base(v) + at);
    for (int i = 0; i < BINTREE_HEADER / 8; i++) {
        h[i] = 0;
    }
    h[H_MAGIC / 8] = MAGIC;
    h[H_NEXT / 8] = at + BINTREE_HEADER;
    h[H_LIMIT / 8] = at + BINTREE_HEADER + (len - BINTREE_HEADER) / BINTREE_NODE * BINTREE_NODE;
    return TXMAP_OK;
}

/* Runs `op` on `key` as a nested top action whose undo is `undo`. */
static int nested(txmap_view *v, uint64_t at, uint64_t key, uint32_t op, uint32_t undo,
                  bintree_before_fn before, void *ctx) {
    const uint64_t args[2] = {at, key};
    for (unsigned attempt = 0;; attempt++) {
        TRY(txmap_nta_begin(v, undo, args, sizeof args));
        int r = before ? before(v, ctx) : 0;
        if (r == 0) {
            r = txmap_apply(v, op, args, sizeof args);
        }
        if (r != 0) {
            txmap_nta_abort(v);
            return r;
        }
        r = txmap_nta_end(v);
        if (r != TXMAP_CONFLICT) {
            return r;
        }
        /* The action left no trace: back off a little and run it again. */
        struct timespec ts = {0, (long)(rand() % (50000 << (attempt < 6 ? attempt : 6)))};
        nanosleep(&ts, NULL);
    }
}

int bintree_insert(txmap_view *v, uint64_t at, uint64_t key, bintree_before_fn before, void *ctx) {
    return nested(v, at, key, BINTREE_INSERT, BINTREE_REMOVE, before, ctx);
}

int bintree_remove(txmap_view *v, uint64_t at, uint64_t key, bintree_before_fn before, void *ctx) {
    return nested(v, at, key, BINTREE_REMOVE, BINTREE_INSERT, before, ctx);
}

/* The word at region offset `off`, by a plain load (the view's
 * transaction's snapshot). */
static uint64_t load(txmap_view *v, uint64_t off) {
    return *(const volatile uint64_t *)((const char *)txmap_view_base(v) + off);
}

static int head_in_view(txmap_view *v, uint64_t at, struct head *h) {
    if (load(v, at + H_MAGIC) != MAGIC) {
        return TXMAP_EINVAL;
    }
    h->at = at;
    h->first = at + BINTREE_HEADER;
    h->limit = load(v, at + H_LIMIT);
    return 0;
}

int bintree_count(txmap_view *v, uint64_t at, uint64_t key, int64_t *out) {
    struct head h;
    TRY(head_in_view(v, at, &h));
    uint64_t n = load(v, at + H_ROOT);
    for (uint64_t steps = 0; n != 0; steps++) {
        if (bad_node(&h, n) || steps > (h.limit - h.first) / BINTREE_NODE) {
            return TXMAP_ECORRUPT;
        }
        uint64_t k = load(v, n + N_KEY);
        if (k == key) {
            *out = (int64_t)load(v, n + N_COUNT);
            return 0;
        }
        n = load(v, n + (key < k ? N_LEFT : N_RIGHT));
    }
    *out = 0;
    return 0;
}

struct frame {
    uint64_t n, lo, hi; /* keys in [lo, hi), or up to the top if hi_open */
    int hi_open;
};

int bintree_check(txmap_view *v, uint64_t at, uint64_t *keys, int64_t *counts, uint64_t cap,
                  uint64_t *n_out, const char **why) {
#define BAD(what)              \
    do {                       \
        *why = (what);         \
        free(seen);            \
        free(stack);           \
        return TXMAP_ECORRUPT; \
    } while (0)
    struct head h;
    uint8_t *seen = NULL;
    struct frame *stack = NULL;
    if (head_in_view(v, at, &h) != 0) {
        BAD("no tree there");
    }
    uint64_t slots = (h.limit - h.first) / BINTREE_NODE, found = 0, top = 0;
    seen = calloc(slots, 1);
    stack = calloc(slots + 1, sizeof *stack);
    if (!seen || !stack) {
        BAD("out of memory");
    }
    /* In order: left subtree, node, right subtree, with an explicit stack. */
    uint64_t n = load(v, at + H_ROOT), lo = 0, hi = 0;
    int hi_open = 1;
    while (n != 0 || top > 0) {
        while (n != 0) {
            if (bad_node(&h, n)) {
                BAD("a link is not a node offset");
            }
            uint64_t i = (n - h.first) / BINTREE_NODE;
            if (seen[i]) {
                BAD("a node is reached twice");
            }
            seen[i] = 1;
            stack[top++] = (struct frame){n, lo, hi, hi_open};
            uint64_t k = load(v, n + N_KEY);
            if (k < lo || (!hi_open && k >= hi)) {
                BAD("a key is out of search order");
            }
            n = load(v, n + N_LEFT);
            hi = k;
            hi_open = 0;
        }
        struct frame f = stack[--top];
        uint64_t k = load(v, f.n + N_KEY);
        int64_t c = (int64_t)load(v, f.n + N_COUNT);
        if (c == 0) {
            BAD("a node has count 0");
        }
        if (found < cap) {
            keys[found] = k;
            counts[found] = c;
        }
        found++;
        n = load(v, f.n + N_RIGHT);
        lo = k + 1;
        hi = f.hi;
        hi_open = f.hi_open;
    }
    if (load(v, at + H_NODES) != found) {
        BAD("the header's node count is wrong");
    }
    uint64_t next = load(v, at + H_NEXT), free_ = 0;
    if (next < h.first || next > h.limit || (next - h.first) % BINTREE_NODE != 0) {
        BAD("the next slot is out of range");
    }
    for (uint64_t f = load(v, at + H_FREE); f != 0; f = load(v, f + N_LEFT)) {
        if (bad_node(&h, f) || f >= next || seen[(f - h.first) / BINTREE_NODE]) {
            BAD("a free slot is used, never handed out, or listed twice");
        }
        seen[(f - h.first) / BINTREE_NODE] = 1;
        free_++;
    }
    if (found + free_ != (next - h.first) / BINTREE_NODE) {
        BAD("a slot is neither in the tree nor free");
    }
    free(seen);
    free(stack);
    *n_out = found;
    return 0;
#undef BAD
}
