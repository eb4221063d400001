/*
 * A persistent ordered key-value index for the benchmark's pmemobj peer:
 * a B+-tree in a libpmemobj pool, changed only inside pmemobj
 * transactions (TX_BEGIN ... TX_END, undo-logged with
 * pmemobj_tx_add_range, objects made and freed with pmemobj_tx_alloc /
 * pmemobj_tx_free), so a crash rolls an interrupted write back.
 *
 * Layout. The pool's root object points at the tree's root node. A node
 * holds up to ORDER keys. A leaf's keys are "kv" objects (key length,
 * value length, key bytes, value bytes), in order, and leaves are chained
 * left to right for range reads. An inner node's keys are separator
 * objects (a copy of a key, no value): child[i] holds the keys below
 * key[i], child[i + 1] those at or above it. Inserts split full nodes on
 * the way down (so a split never climbs back up). Deletes remove the entry
 * from its leaf and do not merge or rebalance nodes, except that a leaf
 * left empty is freed (with its separator, and any parent it leaves
 * childless), so deleted key ranges cost nothing to scan or store.
 *
 * Isolation. libpmemobj transactions make a change atomic and durable but
 * do not isolate it from other threads, so one process-local rwlock
 * orders everything: a write holds it exclusively (which also serializes
 * writers), a get or range holds it shared and hands the caller pointers
 * straight into the pool. The lock prefers writers so readers cannot
 * starve them; so a get or range callback must not call back into the
 * same store (with a writer waiting, that second read lock would wait
 * for the writer, which waits for the first).
 */

#define _GNU_SOURCE
#include <errno.h>
#include <libpmemobj.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LAYOUT "txmap-peers-btree-1"
#define ORDER 32
/* The tree grows a level only when a full root splits: 64 levels is far
 * beyond any pool. */
#define MAX_HEIGHT 64
#define TYPE_NODE 1
#define TYPE_KV 2

struct node {
	uint64_t leaf;
	uint64_t n;
	PMEMoid key[ORDER];
	PMEMoid child[ORDER + 1];
	PMEMoid next;
};

struct kv {
	uint32_t klen;
	uint32_t vlen;
	unsigned char data[];
};

struct root {
	PMEMoid tree;
};

/* One write, as the Rust side passes it. */
struct pmkv_op {
	const unsigned char *key;
	size_t klen;
	const unsigned char *val;
	size_t vlen;
	int put;
};

struct pmkv {
	PMEMobjpool *pop;
	PMEMoid root;
	pthread_rwlock_t lock;
};

typedef void (*pmkv_get_cb)(void *ctx, const unsigned char *v, size_t vlen);
typedef void (*pmkv_range_cb)(void *ctx, const unsigned char *k, size_t klen,
			      const unsigned char *v, size_t vlen);

static void
set_err(char *err, size_t errlen, const char *what, const char *msg)
{
	if (errlen == 0)
		return;
	snprintf(err, errlen, "%s: %s", what,
		 msg && *msg ? msg : "unknown error");
}

#define N(oid) ((struct node *)pmemobj_direct(oid))
#define KV(oid) ((struct kv *)pmemobj_direct(oid))

static int
cmp(const unsigned char *a, size_t alen, const unsigned char *b, size_t blen)
{
	size_t m = alen < blen ? alen : blen;
	int c = m ? memcmp(a, b, m) : 0;
	if (c)
		return c;
	return alen < blen ? -1 : alen > blen;
}

static int
cmp_kv(PMEMoid o, const unsigned char *k, size_t klen)
{
	struct kv *e = KV(o);
	return cmp(e->data, e->klen, k, klen);
}

/* Index of the child of inner node `nd` that may hold `k`. */
static uint64_t
child_index(const struct node *nd, const unsigned char *k, size_t klen)
{
	uint64_t lo = 0, hi = nd->n;
	while (lo < hi) { /* first key > k */
		uint64_t mid = (lo + hi) / 2;
		if (cmp_kv(nd->key[mid], k, klen) <= 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* First index in leaf `nd` whose key is >= k. */
static uint64_t
lower_bound(const struct node *nd, const unsigned char *k, size_t klen)
{
	uint64_t lo = 0, hi = nd->n;
	while (lo < hi) {
		uint64_t mid = (lo + hi) / 2;
		if (cmp_kv(nd->key[mid], k, klen) < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* The leaf that may hold k. */
static PMEMoid
find_leaf(struct pmkv *h, const unsigned char *k, size_t klen)
{
	PMEMoid o = ((struct root *)pmemobj_direct(h->root))->tree;
	while (!N(o)->leaf)
		o = N(o)->child[child_index(N(o), k, klen)];
	return o;
}

/* --- inside a transaction: failures abort it (and longjmp out) ------- */

static void
tx_add_node(PMEMoid o)
{
	pmemobj_tx_add_range(o, 0, sizeof(struct node));
}

static PMEMoid
tx_new_kv(const unsigned char *k, size_t klen, const unsigned char *v,
	  size_t vlen)
{
	if (klen > UINT32_MAX || vlen > UINT32_MAX)
		pmemobj_tx_abort(EINVAL);
	PMEMoid o = pmemobj_tx_alloc(sizeof(struct kv) + klen + vlen, TYPE_KV);
	struct kv *e = KV(o);
	e->klen = (uint32_t)klen;
	e->vlen = (uint32_t)vlen;
	if (klen)
		memcpy(e->data, k, klen);
	if (vlen)
		memcpy(e->data + klen, v, vlen);
	return o;
}

/*
 * Splits the full child i of inner node `p` in two; `p` has room. Both
 * nodes have been added to the transaction.
 */
static void
tx_split_child(PMEMoid po, uint64_t i)
{
	struct node *p = N(po);
	PMEMoid co = p->child[i];
	struct node *c = N(co);
	PMEMoid ro = pmemobj_tx_zalloc(sizeof(struct node), TYPE_NODE);
	struct node *r = N(ro);
	tx_add_node(co);
	PMEMoid sep;
	uint64_t half = ORDER / 2;
	if (c->leaf) {
		r->leaf = 1;
		r->n = c->n - half;
		memcpy(r->key, c->key + half, r->n * sizeof(PMEMoid));
		r->next = c->next;
		c->next = ro;
		c->n = half;
		struct kv *first = KV(r->key[0]);
		sep = tx_new_kv(first->data, first->klen, NULL, 0);
	} else {
		/* key[half] moves up; keys above it and their children go right */
		r->leaf = 0;
		r->n = c->n - half - 1;
		memcpy(r->key, c->key + half + 1, r->n * sizeof(PMEMoid));
		memcpy(r->child, c->child + half + 1,
		       (r->n + 1) * sizeof(PMEMoid));
		sep = c->key[half];
		c->n = half;
	}
	memmove(p->key + i + 1, p->key + i, (p->n - i) * sizeof(PMEMoid));
	memmove(p->child + i + 2, p->child + i + 1,
		(p->n - i) * sizeof(PMEMoid));
	p->key[i] = sep;
	p->child[i + 1] = ro;
	p->n++;
}

static void
tx_put(struct pmkv *h, const unsigned char *k, size_t klen,
       const unsigned char *v, size_t vlen)
{
	struct root *rt = pmemobj_direct(h->root);
	PMEMoid o = rt->tree;
	if (N(o)->n == ORDER) { /* grow: a new root above the full one */
		PMEMoid no = pmemobj_tx_zalloc(sizeof(struct node), TYPE_NODE);
		N(no)->leaf = 0;
		N(no)->child[0] = o;
		tx_split_child(no, 0);
		pmemobj_tx_add_range(h->root, 0, sizeof(struct root));
		rt->tree = no;
		o = no;
	}
	while (!N(o)->leaf) {
		struct node *nd = N(o);
		uint64_t i = child_index(nd, k, klen);
		if (N(nd->child[i])->n == ORDER) {
			tx_add_node(o);
			tx_split_child(o, i);
			if (cmp_kv(nd->key[i], k, klen) <= 0)
				i++;
		}
		o = nd->child[i];
	}
	struct node *lf = N(o);
	uint64_t i = lower_bound(lf, k, klen);
	PMEMoid e = tx_new_kv(k, klen, v, vlen);
	tx_add_node(o);
	if (i < lf->n && cmp_kv(lf->key[i], k, klen) == 0) {
		pmemobj_tx_free(lf->key[i]);
		lf->key[i] = e;
		return;
	}
	memmove(lf->key + i + 1, lf->key + i, (lf->n - i) * sizeof(PMEMoid));
	lf->key[i] = e;
	lf->n++;
}

/*
 * Removes the empty, non-root leaf at the end of `path` from the tree:
 * unlinks it from the leaf chain and from its parent, which goes too if
 * this was its only child (and so on up); then a root left with a single
 * child is replaced by that child.
 */
static void
tx_remove_leaf(struct pmkv *h, const PMEMoid *path, const uint64_t *idx,
	       int depth, PMEMoid leaf)
{
	/* Its left neighbour is the rightmost leaf of the nearest subtree to
	 * its left; the leftmost leaf has none (nothing points at it but its
	 * parent). */
	int d = depth - 1;
	while (d >= 0 && idx[d] == 0)
		d--;
	if (d >= 0) {
		PMEMoid prev = N(path[d])->child[idx[d] - 1];
		while (!N(prev)->leaf)
			prev = N(prev)->child[N(prev)->n];
		tx_add_node(prev);
		N(prev)->next = N(leaf)->next;
	}
	PMEMoid dead = leaf;
	for (d = depth - 1; d >= 0; d--) {
		struct node *p = N(path[d]);
		uint64_t i = idx[d];
		pmemobj_tx_free(dead);
		dead = OID_NULL;
		tx_add_node(path[d]);
		if (p->n == 0) { /* that was its only child */
			dead = path[d];
			continue;
		}
		/* drop child i and the separator on one side of it */
		uint64_t ki = i > 0 ? i - 1 : 0;
		pmemobj_tx_free(p->key[ki]);
		memmove(p->key + ki, p->key + ki + 1,
			(p->n - ki - 1) * sizeof(PMEMoid));
		memmove(p->child + i, p->child + i + 1,
			(p->n - i) * sizeof(PMEMoid));
		p->n--;
		break;
	}
	struct root *rt = pmemobj_direct(h->root);
	pmemobj_tx_add_range(h->root, 0, sizeof(struct root));
	if (!OID_IS_NULL(dead)) { /* every ancestor went: the tree is empty */
		pmemobj_tx_free(dead);
		PMEMoid lf = pmemobj_tx_zalloc(sizeof(struct node), TYPE_NODE);
		N(lf)->leaf = 1;
		rt->tree = lf;
		return;
	}
	while (!N(rt->tree)->leaf && N(rt->tree)->n == 0) {
		PMEMoid old = rt->tree;
		rt->tree = N(old)->child[0];
		pmemobj_tx_free(old);
	}
}

static void
tx_delete(struct pmkv *h, const unsigned char *k, size_t klen)
{
	PMEMoid path[MAX_HEIGHT];
	uint64_t idx[MAX_HEIGHT];
	int depth = 0;
	PMEMoid o = ((struct root *)pmemobj_direct(h->root))->tree;
	while (!N(o)->leaf) {
		if (depth == MAX_HEIGHT)
			pmemobj_tx_abort(ELOOP);
		path[depth] = o;
		idx[depth] = child_index(N(o), k, klen);
		o = N(o)->child[idx[depth]];
		depth++;
	}
	struct node *lf = N(o);
	uint64_t i = lower_bound(lf, k, klen);
	if (i == lf->n || cmp_kv(lf->key[i], k, klen) != 0)
		return;
	tx_add_node(o);
	pmemobj_tx_free(lf->key[i]);
	memmove(lf->key + i, lf->key + i + 1, (lf->n - i - 1) * sizeof(PMEMoid));
	lf->n--;
	if (lf->n == 0 && depth > 0)
		tx_remove_leaf(h, path, idx, depth, o);
}

/* --- the interface ---------------------------------------------------- */

void
pmkv_close(struct pmkv *h)
{
	if (!h)
		return;
	pmemobj_close(h->pop);
	pthread_rwlock_destroy(&h->lock);
	free(h);
}

/* Makes the empty tree of a new pool. 0 on success, -1 (with err). */
static int
init_tree(struct pmkv *h, char *err, size_t errlen)
{
	volatile int rc = 0;
	TX_BEGIN(h->pop) {
		PMEMoid lf = pmemobj_tx_zalloc(sizeof(struct node), TYPE_NODE);
		N(lf)->leaf = 1;
		pmemobj_tx_add_range(h->root, 0, sizeof(struct root));
		((struct root *)pmemobj_direct(h->root))->tree = lf;
	} TX_ONABORT {
		rc = -1;
		set_err(err, errlen, "making the tree's root",
			pmemobj_errormsg());
	} TX_END
	return rc;
}

struct pmkv *
pmkv_open(const char *path, uint64_t pool_bytes, int create, char *err,
	  size_t errlen)
{
	struct pmkv *h = calloc(1, sizeof(*h));
	if (!h) {
		set_err(err, errlen, "malloc", strerror(errno));
		return NULL;
	}
	pthread_rwlockattr_t attr;
	pthread_rwlockattr_init(&attr);
	pthread_rwlockattr_setkind_np(
		&attr, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
	int rc = pthread_rwlock_init(&h->lock, &attr);
	pthread_rwlockattr_destroy(&attr);
	if (rc) {
		set_err(err, errlen, "pthread_rwlock_init", strerror(rc));
		free(h);
		return NULL;
	}
	if (create)
		h->pop = pmemobj_create(path, LAYOUT, (size_t)pool_bytes, 0600);
	else
		h->pop = pmemobj_open(path, LAYOUT);
	if (!h->pop) {
		set_err(err, errlen, create ? "pmemobj_create" : "pmemobj_open",
			pmemobj_errormsg());
		pthread_rwlock_destroy(&h->lock);
		free(h);
		return NULL;
	}
	h->root = pmemobj_root(h->pop, sizeof(struct root));
	if (OID_IS_NULL(h->root)) {
		set_err(err, errlen, "pmemobj_root", pmemobj_errormsg());
		pmkv_close(h);
		return NULL;
	}
	if (OID_IS_NULL(((struct root *)pmemobj_direct(h->root))->tree) &&
	    init_tree(h, err, errlen) != 0) {
		pmkv_close(h);
		return NULL;
	}
	return h;
}

/* Applies ops in one transaction. 0 on success, -1 (with err) if aborted. */
int
pmkv_write(struct pmkv *h, const struct pmkv_op *ops, size_t n, char *err,
	   size_t errlen)
{
	volatile int rc = 0;
	pthread_rwlock_wrlock(&h->lock);
	TX_BEGIN(h->pop) {
		for (size_t i = 0; i < n; i++) {
			if (ops[i].put)
				tx_put(h, ops[i].key, ops[i].klen, ops[i].val,
				       ops[i].vlen);
			else
				tx_delete(h, ops[i].key, ops[i].klen);
		}
	} TX_ONABORT {
		rc = -1;
		set_err(err, errlen, "transaction aborted",
			pmemobj_errormsg());
	} TX_END
	pthread_rwlock_unlock(&h->lock);
	return rc;
}

/* 1 and cb(value) if k is present, else 0. */
int
pmkv_get(struct pmkv *h, const unsigned char *k, size_t klen, pmkv_get_cb cb,
	 void *ctx)
{
	int found = 0;
	pthread_rwlock_rdlock(&h->lock);
	struct node *lf = N(find_leaf(h, k, klen));
	uint64_t i = lower_bound(lf, k, klen);
	if (i < lf->n && cmp_kv(lf->key[i], k, klen) == 0) {
		struct kv *e = KV(lf->key[i]);
		cb(ctx, e->data + e->klen, e->vlen);
		found = 1;
	}
	pthread_rwlock_unlock(&h->lock);
	return found;
}

/* Calls cb on up to n pairs with keys >= start, in order; returns how many. */
size_t
pmkv_range(struct pmkv *h, const unsigned char *start, size_t slen, size_t n,
	   pmkv_range_cb cb, void *ctx)
{
	size_t seen = 0;
	pthread_rwlock_rdlock(&h->lock);
	PMEMoid o = find_leaf(h, start, slen);
	uint64_t i = lower_bound(N(o), start, slen);
	while (seen < n && !OID_IS_NULL(o)) {
		struct node *lf = N(o);
		for (; i < lf->n && seen < n; i++) {
			struct kv *e = KV(lf->key[i]);
			cb(ctx, e->data, e->klen, e->data + e->klen, e->vlen);
			seen++;
		}
		o = lf->next;
		i = 0;
	}
	pthread_rwlock_unlock(&h->lock);
	return seen;
}
