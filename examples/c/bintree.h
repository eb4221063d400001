/* A user-defined structure over txmap's C API (issue 18; the idea of
 * Stasis's examples/ex3.c): a binary search tree in a region whose insert
 * and remove are registered operations run as nested top actions, each the
 * other's logical undo. The Rust twin is examples/bintree; README,
 * "Registered operations", explains the design.
 *
 * The tree is a multiset with signed counts (insert adds one occurrence of
 * a key, remove takes one away, a node exists while its count is not 0),
 * so insert and remove commute: each undoes the other exactly whenever the
 * undo runs, even at the next first open after other processes changed the
 * same key. The enclosing transaction must not read the tree itself (its
 * nested actions change the tree after its snapshot, so its commit would
 * conflict): read it in transactions of their own.
 *
 * Layout at the tree's offset `at` (host-order u64s, x86-64): a 64-byte
 * header {magic, root, nodes, next, free, limit}, then 32-byte nodes
 * {key, count (int64), left, right} up to `limit`; offsets are region
 * offsets, 0 is none; freed nodes are listed through `left`. */
#ifndef TXMAP_EXAMPLE_BINTREE_H
#define TXMAP_EXAMPLE_BINTREE_H

#include <stdint.h>

#include "txmap.h"

/* Operation ids (user ids start at 128). */
#define BINTREE_INSERT 210
#define BINTREE_REMOVE 211

#define BINTREE_HEADER 64
#define BINTREE_NODE 32

/* Registers both operations for this process: before opening a region
 * holding a tree (recovery replays them and runs pending undos). */
int bintree_register(void);

/* Makes an empty tree of the `len` bytes at `at` (8-byte aligned) in the
 * view's open transaction. */
int bintree_create(txmap_view *v, uint64_t at, uint64_t len);

/* Called inside a nested action's own transaction before it changes the
 * tree (to look at the tree as the action finds it); nonzero fails it. */
typedef int (*bintree_before_fn)(txmap_view *v, void *ctx);

/* Inserts (removes) one occurrence of `key` as a nested top action of the
 * view's open transaction: committed at once, undone by the other
 * operation if the enclosing transaction does not commit. Retries the
 * action on conflict. `before` may be NULL. Returns a TXMAP_ code, or what
 * `before` returned. */
int bintree_insert(txmap_view *v, uint64_t at, uint64_t key, bintree_before_fn before, void *ctx);
int bintree_remove(txmap_view *v, uint64_t at, uint64_t key, bintree_before_fn before, void *ctx);

/* `key`'s count (0 if absent) as the view's transaction sees it. */
int bintree_count(txmap_view *v, uint64_t at, uint64_t key, int64_t *out);

/* Checks the invariants (search order, no node reached twice, no count 0,
 * the node count, every slot in the tree or free) as the view's
 * transaction sees the tree, and lists up to `cap` keys and counts in
 * order; `*n` is how many there are. Returns 0, or TXMAP_ECORRUPT with
 * `*why` naming the broken invariant. */
int bintree_check(txmap_view *v, uint64_t at, uint64_t *keys, int64_t *counts, uint64_t cap,
                  uint64_t *n, const char **why);

#endif
