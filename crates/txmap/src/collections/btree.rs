//! A B+-tree with variable-length keys and values, one node per page.
//!
//! Ordinary serial code over the region's bytes; every call runs inside the
//! caller's transaction, which is what makes it concurrent and durable.
//!
//! Node (one heap block of 4080 bytes, alone on its page):
//! ```text
//! 0  kind u8 (1 leaf, 2 internal)   2 count u16   8 link u64
//! 16 slots: count × u16 cell offsets, in key order; cells below the node's
//!    end, not overlapping, maybe with holes (an in-place delete frees a cell)
//! leaf cell:     klen u16, flags u8 (1 = value in a block), 0 u8, vlen u32, key,
//!                value bytes | block offset u64, value length u64
//! internal cell: klen u16, 0 ×6, child u64, key
//! ```
//! A leaf's link is the next leaf (0 for the last); an internal node's link
//! is its first child, and the child after key `i` holds keys `>= key i`.
//! Values longer than [`INLINE_MAX`] live in their own heap block (any size).

use std::ops::Bound;

use super::alloc::{self, BLOCK_HEADER, PAGE, corrupt, invalid};
use super::format::{Val, cell_at, u64_at};
pub use super::leaf::{INLINE_MAX, MAX_KEY, NODE};
use super::leaf::{
    INTERNAL, Internal, LEAF, Leaf, MAGIC, MAGIC_V1, Raw, T_HEIGHT, T_MAGIC, T_ROOT,
    encode_internal, encode_leaf, entry_bytes, in_place_spot, internal_bytes, internal_cell,
    internal_put_in_place, leaf_bytes, leaf_cell, leaf_cells, op_args, pack_leaf, packed_bytes,
    packed_cell, put_in_place, remove_slot, split_point,
};
use super::node::check_key;
use crate::{Result, View};

/// Internal nodes a descent keeps on the stack (small enough to be zeroed
/// without a call to `memset`). Nodes of short keys have a fan-out near
/// 100, so 8 levels hold more entries than a region can; long keys or a
/// tree thinned by deletes may go deeper, and the deeper levels go to the
/// heap.
const PATH_INLINE: usize = 8;

/// The (node, child index) pairs of a descent, root first. On the stack:
/// each put descends once, and a heap path cost an allocation and a free
/// per put.
#[derive(Clone, Default)]
struct Path {
    at: [(u64, usize); PATH_INLINE],
    n: usize,
    more: Vec<(u64, usize)>,
}

impl Path {
    fn push(&mut self, e: (u64, usize)) {
        if self.n < PATH_INLINE {
            self.at[self.n] = e;
            self.n += 1;
        } else {
            self.more.push(e);
        }
    }
    fn pop(&mut self) -> Option<(u64, usize)> {
        if let Some(e) = self.more.pop() {
            return Some(e);
        }
        self.n = self.n.checked_sub(1)?;
        Some(self.at[self.n])
    }
    fn len(&self) -> usize {
        self.n + self.more.len()
    }
}

/// A B+-tree in a region, named by the offset of its header block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BTree {
    pub at: u64,
}

/// What [`BTree::check`] found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BTreeReport {
    pub entries: u64,
    pub height: u64,
    pub leaves: u64,
    pub internal: u64,
    /// Heap blocks the tree owns (header, nodes, value blocks).
    pub blocks: u64,
    /// Average bytes used per node, in percent of a node.
    pub fill_percent: u64,
}

/// Result of [`BTree::try_put`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TryPut {
    Inserted,
    Replaced,
    /// The leaf is full: nothing was changed; call [`BTree::split_for`].
    NeedsSplit,
}

/// Entries a scan asks the processor to load ahead of the one it hands
/// out (`Raw::prefetch_cell`).
const SCAN_AHEAD: usize = 8;

impl BTree {
    /// Creates an empty tree (formatting the heap if needed).
    pub fn create(v: &mut View) -> Result<BTree> {
        alloc::init(v)?;
        let at = alloc::alloc(v, NODE as u64)?;
        let root = alloc::alloc(v, NODE as u64)?;
        let l = Leaf {
            next: 0,
            ents: Vec::new(),
        };
        let b = encode_leaf(&l).ok_or_else(|| invalid("empty leaf does not fit"))?;
        v.slice_mut(root, NODE)?.copy_from_slice(&b);
        v.write(at + T_MAGIC, &MAGIC)?;
        v.write(at + T_ROOT, &root)?;
        v.write(at + T_HEIGHT, &1u64)?;
        Ok(BTree { at })
    }

    /// Opens the tree whose header block is at `at`.
    pub fn open(v: &View, at: u64) -> Result<BTree> {
        match v.read::<u64>(at + T_MAGIC)? {
            MAGIC => Ok(BTree { at }),
            other => Err(not_a_tree(v, at, other)),
        }
    }

    fn header(&self, v: &View) -> Result<(u64, u64)> {
        // One accessor call for the three fields: each call costs a check.
        let field = v.read_with(self.at + T_MAGIC, 24, |b, _| {
            let field = |at: u64| u64_at(b, (at - T_MAGIC) as usize).unwrap_or(0);
            [field(T_MAGIC), field(T_ROOT), field(T_HEIGHT)]
        })?;
        let field = |at: u64| field[((at - T_MAGIC) / 8) as usize];
        if field(T_MAGIC) != MAGIC {
            return Err(not_a_tree(v, self.at, field(T_MAGIC)));
        }
        let (root, h) = (field(T_ROOT), field(T_HEIGHT));
        if h == 0 || h > 64 {
            return Err(corrupt(v, self.at, format!("tree height {h}")));
        }
        Ok((root, h))
    }

    fn raw<'v>(&self, v: &'v View, node: u64, kind: u8) -> Result<Raw<'v>> {
        parse(v.slice(node, NODE)?, kind).map_err(|why| corrupt(v, node, why))
    }

    fn leaf(&self, v: &View, node: u64) -> Result<Leaf> {
        self.raw(v, node, LEAF)?
            .to_leaf()
            .ok_or_else(|| corrupt(v, node, "malformed B+-tree leaf"))
    }

    fn internal(&self, v: &View, node: u64) -> Result<Internal> {
        self.raw(v, node, INTERNAL)?
            .to_internal()
            .ok_or_else(|| corrupt(v, node, "malformed B+-tree node"))
    }

    /// Descends to the leaf for `key`; the path holds (node, child index) of
    /// each internal node passed.
    /// The caller owns `path` (moving it out of a result cost a copy of it
    /// per put).
    fn descend(&self, v: &View, key: &[u8], path: &mut Path) -> Result<u64> {
        self.walk(v, key, |node, i| path.push((node, i)))
    }

    /// Descends to the leaf for `key`, calling `step(node, child index)` at
    /// each internal node.
    fn walk(&self, v: &View, key: &[u8], mut step: impl FnMut(u64, usize)) -> Result<u64> {
        let (mut node, h) = self.header(v)?;
        for _ in 1..h {
            // Read in place in a read-only transaction (`View::read_with`).
            let (i, c) = v
                .read_with(node, NODE, |b, _| {
                    let r = parse(b, INTERNAL)?;
                    let i = r.route(key).ok_or("bad key")?;
                    Ok((i, r.child(i).ok_or("bad child")?))
                })?
                .map_err(|why: &str| corrupt(v, node, why))?;
            step(node, i);
            node = c;
        }
        Ok(node)
    }

    /// The value stored under `key`.
    pub fn get(&self, v: &View, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let mut out = None;
        self.get_with(v, key, &mut |b| out = Some(b.to_vec()))?;
        Ok(out)
    }

    /// Calls `f` with the value stored under `key`, borrowed from the view
    /// (no copy); false if `key` is absent.
    pub fn get_with(&self, v: &View, key: &[u8], f: &mut dyn FnMut(&[u8])) -> Result<bool> {
        check_key(key, MAX_KEY)?;
        let leaf = self.walk(v, key, |_, _| {})?;
        // A leaf read in place (`scoped`) is read on the read side, where
        // `f` may not run: an inline value is copied out first.
        let mut buf = [std::mem::MaybeUninit::uninit(); INLINE_MAX];
        let mut copied: Option<&[u8]> = None;
        let block = v
            .read_with(leaf, NODE, |b, scoped| {
                let r = parse(b, LEAF)?;
                let Ok(i) = r.search(key).ok_or("bad key")? else {
                    return Ok(None);
                };
                match r.inline(i) {
                    Some(bytes) if scoped => {
                        let to = buf.get_mut(..bytes.len()).ok_or("bad value")?;
                        copied = Some(to.write_copy_of_slice(bytes));
                        Ok(Some(None))
                    }
                    Some(bytes) => {
                        f(bytes);
                        Ok(Some(None))
                    }
                    None => Ok(Some(Some(r.val(i).ok_or("bad value")?))),
                }
            })?
            .map_err(|why: &str| corrupt(v, leaf, why))?;
        // None: absent; Some(None): inline, `f` called or the copy is ready.
        let Some(block) = block else {
            return Ok(false);
        };
        if let Some(bytes) = copied {
            f(bytes);
        }
        if let Some(val) = block {
            val.with(v, f)?;
        }
        Ok(true)
    }

    /// Inserts or replaces; returns true if `key` was present.
    pub fn put(&self, v: &mut View, key: &[u8], value: &[u8]) -> Result<bool> {
        self.put_inner(v, key, value, true)
            .map(|r| r == TryPut::Replaced)
    }

    /// Inserts or replaces, as a *blind* put: the transaction does not
    /// learn whether `key` was present, so the put need not depend on the
    /// leaf as this transaction's snapshot has it. When it fits in place
    /// (a new key with an inline value in the leaf's free gap, or an inline
    /// value of the same length) it runs as the commit-time operation
    /// [`crate::ops::BTREE_PUT`]: at once here, and again at commit on the
    /// newest committed tree, so concurrent blind puts of different keys
    /// into one leaf do not conflict. Otherwise (the leaf must split) it is
    /// an ordinary [`BTree::put`]. Reads of the key in the same transaction
    /// are validated as usual.
    pub fn put_blind(&self, v: &mut View, key: &[u8], value: &[u8]) -> Result<()> {
        check_key(key, MAX_KEY)?;
        if value.len() <= INLINE_MAX
            && v.blind_fits()
            && v.apply_blind(crate::ops::BTREE_PUT, &op_args(self.at, key, value))?
        {
            return Ok(());
        }
        self.put(v, key, value).map(|_| ())
    }

    /// Like [`BTree::put`], but changes nothing and returns `NeedsSplit` if
    /// the leaf would have to split. A caller can then split in a separate,
    /// short transaction ([`BTree::split_for`]) and retry, so structural
    /// changes do not ride in (and abort) long transactions.
    pub fn try_put(&self, v: &mut View, key: &[u8], value: &[u8]) -> Result<TryPut> {
        self.put_inner(v, key, value, false)
    }

    fn put_inner(&self, v: &mut View, key: &[u8], value: &[u8], split: bool) -> Result<TryPut> {
        check_key(key, MAX_KEY)?;
        let mut path = Path::default();
        let node = self.descend(v, key, &mut path)?;
        if value.len() <= INLINE_MAX && self.insert_in_place(v, node, key, value)? {
            return Ok(TryPut::Inserted);
        }
        if split && self.split_then_insert(v, node, &path, key, value)? {
            return Ok(TryPut::Inserted);
        }
        let mut leaf = self.leaf(v, node)?;
        let pos = leaf.ents.binary_search_by(|e| e.0.as_slice().cmp(key));
        let inline_len = if value.len() <= INLINE_MAX {
            value.len()
        } else {
            16
        };
        if !split {
            let old = pos.map_or(0, |i| leaf_cell(&leaf.ents[i]));
            if leaf_bytes(&leaf.ents) - old + entry_bytes(key.len(), inline_len) > NODE {
                return Ok(TryPut::NeedsSplit);
            }
        }
        let val = Val::store(v, value, INLINE_MAX)?;
        let out = match pos {
            Ok(i) => {
                let old = std::mem::replace(&mut leaf.ents[i].1, val);
                old.release(v)?;
                TryPut::Replaced
            }
            Err(i) => {
                leaf.ents.insert(i, (key.to_vec(), val));
                TryPut::Inserted
            }
        };
        if let Some(b) = encode_leaf(&leaf) {
            v.slice_mut(node, NODE)?.copy_from_slice(&b);
            return Ok(out);
        }
        self.split_leaf(v, node, leaf, path)?;
        Ok(out)
    }

    /// Inserts a new key with an inline value into the free gap between the
    /// slot array and the cells, shifting only the slots after it: no
    /// decoding. In a small serializable transaction it is logged as the
    /// built-in operation [`crate::ops::BTREE_INSERT`] (node, key, value),
    /// not as the bytes it changed. False (nothing changed) if the key is
    /// present or the gap is too small; the caller then takes the general
    /// path.
    fn insert_in_place(&self, v: &mut View, node: u64, key: &[u8], value: &[u8]) -> Result<bool> {
        let spot = {
            let r = self.raw(v, node, LEAF)?;
            match in_place_spot(&r, key, value.len()) {
                Ok(Some(s)) => s,
                Ok(None) => return Ok(false),
                Err(what) => return Err(corrupt(v, node, what)),
            }
        };
        if v.logs_ops() {
            v.apply(crate::ops::BTREE_INSERT, &op_args(node, key, value))?;
        } else {
            put_in_place(v.slice_mut(node, NODE)?, spot, key, value);
        }
        Ok(true)
    }

    /// A new key with an inline value that does not fit in the leaf at
    /// `node` even repacked: splits the leaf, then inserts the key in place
    /// into its half. The split moves the cells of the upper half into a
    /// new leaf and repacks the lower half, each cell copied once, nothing
    /// decoded ([`split_leaf_bytes`]); in a transaction that logs
    /// operations it is the built-in operation [`crate::ops::BTREE_SPLIT`]
    /// (its halves are not logged as bytes), which runs the same function.
    /// False (nothing changed) when the key is present, the value is not
    /// inline, the key would fit after a repack, or its half would have no
    /// room for it; the caller then takes the general path (insert, then
    /// split the result).
    fn split_then_insert(
        &self,
        v: &mut View,
        node: u64,
        path: &Path,
        key: &[u8],
        value: &[u8],
    ) -> Result<bool> {
        if value.len() > INLINE_MAX {
            return Ok(false);
        }
        let cell = entry_bytes(key.len(), value.len());
        let (sep, goes_right, cells, at, link) = {
            let r = self.raw(v, node, LEAF)?;
            if r.search(key)
                .ok_or_else(|| corrupt(v, node, "bad key"))?
                .is_ok()
            {
                return Ok(false);
            }
            let cells = leaf_cells(&r).ok_or_else(|| corrupt(v, node, "malformed B+-tree leaf"))?;
            if cells.len() < 2 || packed_bytes(&cells) + cell <= NODE {
                return Ok(false);
            }
            let at = split_point(&cells, packed_cell);
            let sep = r.key(at).ok_or_else(|| corrupt(v, node, "bad key"))?;
            let goes_right = key >= sep;
            let half = if goes_right {
                &cells[at..]
            } else {
                &cells[..at]
            };
            if packed_bytes(half) + cell > NODE {
                return Ok(false);
            }
            (sep.to_vec(), goes_right, cells, at, r.link)
        };
        let rnode = alloc::alloc(v, NODE as u64)?;
        if v.logs_ops() {
            let mut args = node.to_le_bytes().to_vec();
            args.extend_from_slice(&rnode.to_le_bytes());
            v.apply(crate::ops::BTREE_SPLIT, &args)?;
        } else {
            // The halves as `split_leaf_bytes` makes them (the cells and
            // split point found above), packed straight into the two
            // nodes from one copy of the old leaf.
            let src: [u8; NODE] = v
                .slice(node, NODE)?
                .try_into()
                .map_err(|_| corrupt(v, node, "short node"))?;
            pack_leaf(&src, &cells[..at], rnode, v.slice_mut(node, NODE)?)
                .map_err(|why| corrupt(v, node, why))?;
            pack_leaf(&src, &cells[at..], link, v.slice_mut(rnode, NODE)?)
                .map_err(|why| corrupt(v, rnode, why))?;
        }
        self.insert_up(v, path.clone(), node, sep, rnode)?;
        let target = if goes_right { rnode } else { node };
        if !self.insert_in_place(v, target, key, value)? {
            return Err(corrupt(v, target, "a freshly split leaf has no room"));
        }
        Ok(true)
    }

    /// Splits the leaf that holds `key` if it has less than a maximal
    /// entry's room left (see [`BTree::try_put`]).
    pub fn split_for(&self, v: &mut View, key: &[u8]) -> Result<()> {
        check_key(key, MAX_KEY)?;
        let mut path = Path::default();
        let node = self.descend(v, key, &mut path)?;
        let leaf = self.leaf(v, node)?;
        if leaf.ents.len() >= 2 && leaf_bytes(&leaf.ents) + entry_bytes(MAX_KEY, INLINE_MAX) > NODE
        {
            self.split_leaf(v, node, leaf, path)?;
        }
        Ok(())
    }

    fn split_leaf(&self, v: &mut View, node: u64, mut leaf: Leaf, path: Path) -> Result<()> {
        let at = split_point(&leaf.ents, leaf_cell);
        let right_ents = leaf.ents.split_off(at);
        let sep = right_ents[0].0.clone();
        let rnode = alloc::alloc(v, NODE as u64)?;
        let right = Leaf {
            next: leaf.next,
            ents: right_ents,
        };
        leaf.next = rnode;
        let (lb, rb) = (encode_leaf(&leaf), encode_leaf(&right));
        let (Some(lb), Some(rb)) = (lb, rb) else {
            return Err(corrupt(v, node, "leaf split halves do not fit"));
        };
        v.slice_mut(node, NODE)?.copy_from_slice(&lb);
        v.slice_mut(rnode, NODE)?.copy_from_slice(&rb);
        self.insert_up(v, path, node, sep, rnode)
    }

    /// Inserts separator `sep` with right sibling `right` of `left` into the
    /// parents on `path`, splitting them as needed.
    fn insert_up(
        &self,
        v: &mut View,
        mut path: Path,
        mut left: u64,
        mut sep: Vec<u8>,
        mut right: u64,
    ) -> Result<()> {
        loop {
            let Some((p, i)) = path.pop() else {
                let (_, h) = self.header(v)?;
                let root = alloc::alloc(v, NODE as u64)?;
                let n = Internal {
                    first: left,
                    ents: vec![(sep, right)],
                };
                let b = encode_internal(&n).ok_or_else(|| invalid("root does not fit"))?;
                v.slice_mut(root, NODE)?.copy_from_slice(&b);
                v.write(self.at + T_ROOT, &root)?;
                v.write(self.at + T_HEIGHT, &(h + 1))?;
                return Ok(());
            };
            // In place when the parent's gap has room: no decoding.
            let fits = internal_put_in_place(v.slice_mut(p, NODE)?, i, &sep, right)
                .map_err(|why| corrupt(v, p, why))?;
            if fits {
                return Ok(());
            }
            let mut n = self.internal(v, p)?;
            n.ents.insert(i, (sep, right));
            if let Some(b) = encode_internal(&n) {
                v.slice_mut(p, NODE)?.copy_from_slice(&b);
                return Ok(());
            }
            let mid = split_point(&n.ents, internal_cell).min(n.ents.len() - 2);
            let mut rents = n.ents.split_off(mid);
            let (up, rfirst) = rents.remove(0);
            let r = Internal {
                first: rfirst,
                ents: rents,
            };
            let rnode = alloc::alloc(v, NODE as u64)?;
            let (Some(lb), Some(rb)) = (encode_internal(&n), encode_internal(&r)) else {
                return Err(corrupt(v, p, "internal split halves do not fit"));
            };
            v.slice_mut(p, NODE)?.copy_from_slice(&lb);
            v.slice_mut(rnode, NODE)?.copy_from_slice(&rb);
            (left, sep, right) = (p, up, rnode);
        }
    }

    /// Removes `key`; returns true if it was present.
    pub fn delete(&self, v: &mut View, key: &[u8]) -> Result<bool> {
        check_key(key, MAX_KEY)?;
        let mut path = Path::default();
        let node = self.descend(v, key, &mut path)?;
        let (i, n, block) = {
            let r = self.raw(v, node, LEAF)?;
            let Ok(i) = r.search(key).ok_or_else(|| corrupt(v, node, "bad key"))? else {
                return Ok(false);
            };
            let block = match r.inline(i) {
                Some(_) => None,
                None => Some(r.val(i).ok_or_else(|| corrupt(v, node, "bad value"))?),
            };
            (i, r.n, block)
        };
        if let Some(val) = block {
            val.release(v)?;
        }
        // In place: only the slot goes. The cell's bytes become free space
        // that the next repack of the leaf reclaims; no decoding, and the
        // log records the operation (or the shifted slots), not a repacked
        // node.
        if v.logs_ops() {
            v.apply(crate::ops::BTREE_DELETE, &op_args(node, key, &[]))?;
        } else {
            remove_slot(v.slice_mut(node, NODE)?, i, n);
        }
        self.rebalance(v, path, node)?;
        Ok(true)
    }

    /// After a delete: merges an underfull node with a sibling (or shares
    /// entries with it if both do not fit in one), up the path; collapses a
    /// root with a single child.
    fn rebalance(&self, v: &mut View, mut path: Path, mut node: u64) -> Result<()> {
        loop {
            let Some((p, idx)) = path.pop() else {
                let (root, h) = self.header(v)?;
                if h > 1 {
                    let r = self.internal(v, root)?;
                    if r.ents.is_empty() {
                        v.write(self.at + T_ROOT, &r.first)?;
                        v.write(self.at + T_HEIGHT, &(h - 1))?;
                        alloc::free(v, root)?;
                    }
                }
                return Ok(());
            };
            let is_leaf = path.len() + 2 == self.header(v)?.1 as usize;
            let used = if is_leaf {
                self.raw(v, node, LEAF)?
                    .leaf_used()
                    .ok_or_else(|| corrupt(v, node, "malformed B+-tree leaf"))?
            } else {
                internal_bytes(&self.internal(v, node)?.ents)
            };
            if used >= NODE / 4 {
                return Ok(());
            }
            let mut par = self.internal(v, p)?;
            if par.ents.is_empty() {
                return Ok(());
            }
            let li = if idx > 0 { idx - 1 } else { 0 };
            let (ln, rn) = (par.child(li), par.child(li + 1));
            if is_leaf {
                let mut l = self.leaf(v, ln)?;
                let r = self.leaf(v, rn)?;
                let next = r.next;
                l.ents.extend(r.ents);
                if let Some(b) = encode_leaf(&Leaf {
                    next,
                    ents: l.ents.clone(),
                }) {
                    v.slice_mut(ln, NODE)?.copy_from_slice(&b);
                    alloc::free(v, rn)?;
                    par.ents.remove(li);
                } else {
                    let at = split_point(&l.ents, leaf_cell);
                    let rents = l.ents.split_off(at);
                    par.ents[li].0 = rents[0].0.clone();
                    let Some(pb) = encode_internal(&par) else {
                        return Ok(()); // the new separator does not fit: leave as is
                    };
                    let lb = encode_leaf(&Leaf {
                        next: rn,
                        ents: l.ents,
                    });
                    let rb = encode_leaf(&Leaf { next, ents: rents });
                    let (Some(lb), Some(rb)) = (lb, rb) else {
                        return Err(corrupt(v, ln, "redistributed leaves do not fit"));
                    };
                    v.slice_mut(ln, NODE)?.copy_from_slice(&lb);
                    v.slice_mut(rn, NODE)?.copy_from_slice(&rb);
                    v.slice_mut(p, NODE)?.copy_from_slice(&pb);
                    return Ok(());
                }
            } else {
                let mut l = self.internal(v, ln)?;
                let r = self.internal(v, rn)?;
                l.ents.push((par.ents[li].0.clone(), r.first));
                l.ents.extend(r.ents);
                if let Some(b) = encode_internal(&l) {
                    v.slice_mut(ln, NODE)?.copy_from_slice(&b);
                    alloc::free(v, rn)?;
                    par.ents.remove(li);
                } else {
                    let mid = split_point(&l.ents, internal_cell).min(l.ents.len() - 2);
                    let mut rents = l.ents.split_off(mid);
                    let (up, rfirst) = rents.remove(0);
                    par.ents[li].0 = up;
                    let Some(pb) = encode_internal(&par) else {
                        return Ok(());
                    };
                    let r = Internal {
                        first: rfirst,
                        ents: rents,
                    };
                    let (Some(lb), Some(rb)) = (encode_internal(&l), encode_internal(&r)) else {
                        return Err(corrupt(v, ln, "redistributed nodes do not fit"));
                    };
                    v.slice_mut(ln, NODE)?.copy_from_slice(&lb);
                    v.slice_mut(rn, NODE)?.copy_from_slice(&rb);
                    v.slice_mut(p, NODE)?.copy_from_slice(&pb);
                    return Ok(());
                }
            }
            let pb = encode_internal(&par).ok_or_else(|| corrupt(v, p, "parent grew"))?;
            v.slice_mut(p, NODE)?.copy_from_slice(&pb);
            node = p;
        }
    }

    /// Calls `f(key, value)` for keys in `(lo, hi)` in order, until it returns false.
    pub fn scan(
        &self,
        v: &View,
        lo: Bound<&[u8]>,
        hi: Bound<&[u8]>,
        mut f: impl FnMut(&[u8], &[u8]) -> Result<bool>,
    ) -> Result<()> {
        let start: &[u8] = match lo {
            Bound::Included(k) | Bound::Excluded(k) => k,
            Bound::Unbounded => &[],
        };
        let mut leaf = self.walk(v, start, |_, _| {})?;
        // Only the first leaf holds keys below `lo`: later leaves start
        // after its separator, which is above `start`.
        let mut first = true;
        let mut seen = 0u64;
        // A leaf the view holds no copy of is copied here (read-only
        // transactions, `View::slice_or_copy`): `f` runs outside the read side.
        let mut buf = [std::mem::MaybeUninit::uninit(); NODE];
        while leaf != 0 {
            let r = parse(v.slice_or_copy(leaf, &mut buf)?, LEAF)
                .map_err(|why| corrupt(v, leaf, why))?;
            // The next leaf is loaded while this one's entries go out.
            if r.link != 0 {
                v.prefetch_node(r.link);
            }
            let from = if first {
                match r.search(start).ok_or_else(|| corrupt(v, leaf, "bad key"))? {
                    Ok(i) if matches!(lo, Bound::Excluded(_)) => i + 1,
                    Ok(i) | Err(i) => i,
                }
            } else {
                0
            };
            first = false;
            for i in from..(from + SCAN_AHEAD).min(r.n) {
                r.prefetch_cell(i);
            }
            for i in from..r.n {
                r.prefetch_cell(i + SCAN_AHEAD);
                let k = r.key(i).ok_or_else(|| corrupt(v, leaf, "bad key"))?;
                let before_hi = match hi {
                    Bound::Included(x) => k <= x,
                    Bound::Excluded(x) => k < x,
                    Bound::Unbounded => true,
                };
                if !before_hi {
                    return Ok(());
                }
                // Inline values are passed borrowed from the view (no copy).
                let go = match r.inline(i) {
                    Some(val) => f(k, val)?,
                    None => {
                        let val = r.val(i).ok_or_else(|| corrupt(v, leaf, "bad value"))?;
                        let mut go = Ok(true);
                        val.with(v, &mut |b| go = f(k, b))?;
                        go?
                    }
                };
                if !go {
                    return Ok(());
                }
            }
            leaf = r.link;
            seen += 1;
            if seen > (v.len() as u64 / PAGE) {
                return Err(corrupt(v, leaf, "leaf chain has a cycle"));
            }
        }
        Ok(())
    }

    /// Frees every node and value of the tree, and its header.
    pub fn destroy(self, v: &mut View) -> Result<()> {
        let (root, h) = self.header(v)?;
        self.free_subtree(v, root, h)?;
        alloc::free(v, self.at)
    }

    fn free_subtree(&self, v: &mut View, node: u64, h: u64) -> Result<()> {
        if h == 1 {
            for (_, val) in self.leaf(v, node)?.ents {
                val.release(v)?;
            }
        } else {
            let n = self.internal(v, node)?;
            for i in 0..=n.ents.len() {
                self.free_subtree(v, n.child(i), h - 1)?;
            }
        }
        alloc::free(v, node)
    }

    /// Verifies ordering (keys increase in each node and lie between their
    /// separators), equal leaf depth, the leaf chain, fill (non-root leaves
    /// are not empty) and that every node and value block is allocated.
    pub fn check(&self, v: &View) -> Result<BTreeReport> {
        let (root, h) = self.header(v)?;
        let mut rep = BTreeReport {
            height: h,
            blocks: 1,
            ..Default::default()
        };
        let mut leaves = Vec::new();
        let mut used = 0u64;
        self.check_node(
            v,
            root,
            h,
            None,
            None,
            true,
            &mut rep,
            &mut leaves,
            &mut used,
        )?;
        for w in leaves.windows(2) {
            let next = self.raw(v, w[0], LEAF)?.link;
            if next != w[1] {
                return Err(corrupt(v, w[0], "leaf chain skips or reorders a leaf"));
            }
        }
        if let Some(&last) = leaves.last()
            && self.raw(v, last, LEAF)?.link != 0
        {
            return Err(corrupt(v, last, "last leaf has a next link"));
        }
        let nodes = rep.leaves + rep.internal;
        rep.fill_percent = used * 100 / (nodes * NODE as u64).max(1);
        Ok(rep)
    }

    /// A leaf's cells lie between its slot array and its end without
    /// overlapping (in-place inserts put them anywhere in that space).
    fn check_cells(&self, v: &View, node: u64) -> Result<()> {
        let r = self.raw(v, node, LEAF)?;
        let mut spans = Vec::with_capacity(r.n);
        for i in 0..r.n {
            let c = r
                .cell(i)
                .ok_or_else(|| corrupt(v, node, "bad cell offset"))?;
            // cell_at fails if the cell runs past the node.
            let (_, _, end) =
                cell_at(r.b, c).ok_or_else(|| corrupt(v, node, "leaf cell runs past the node"))?;
            spans.push((c, end));
        }
        if !r.heads_match() {
            return Err(corrupt(v, node, "a slot's key head differs from its key"));
        }
        spans.sort_unstable();
        if spans.windows(2).any(|w| w[0].1 > w[1].0) {
            return Err(corrupt(v, node, "leaf cells overlap"));
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn check_node(
        &self,
        v: &View,
        node: u64,
        h: u64,
        lo: Option<&[u8]>,
        hi: Option<&[u8]>,
        is_root: bool,
        rep: &mut BTreeReport,
        leaves: &mut Vec<u64>,
        used: &mut u64,
    ) -> Result<()> {
        if alloc::usable_size(v, node)? < NODE as u64 || !(node - BLOCK_HEADER).is_multiple_of(PAGE)
        {
            return Err(corrupt(v, node, "node is not a page block"));
        }
        rep.blocks += 1;
        let in_range = |k: &[u8]| lo.is_none_or(|l| k >= l) && hi.is_none_or(|x| k < x);
        if h == 1 {
            self.check_cells(v, node)?;
            let l = self.leaf(v, node)?;
            rep.leaves += 1;
            *used += leaf_bytes(&l.ents) as u64;
            if l.ents.is_empty() && !is_root {
                return Err(corrupt(v, node, "empty non-root leaf"));
            }
            for (i, (k, val)) in l.ents.iter().enumerate() {
                if i > 0 && l.ents[i - 1].0 >= *k {
                    return Err(corrupt(v, node, "leaf keys out of order"));
                }
                if !in_range(k) {
                    return Err(corrupt(v, node, "leaf key outside its separators"));
                }
                rep.blocks += val.check(v)?;
            }
            rep.entries += l.ents.len() as u64;
            leaves.push(node);
            return Ok(());
        }
        if !self.raw(v, node, INTERNAL)?.heads_match() {
            return Err(corrupt(v, node, "a slot's key head differs from its key"));
        }
        let n = self.internal(v, node)?;
        rep.internal += 1;
        *used += internal_bytes(&n.ents) as u64;
        if is_root && n.ents.is_empty() {
            return Err(corrupt(v, node, "internal root with one child"));
        }
        for (i, (k, _)) in n.ents.iter().enumerate() {
            if (i > 0 && n.ents[i - 1].0 >= *k) || !in_range(k) {
                return Err(corrupt(v, node, "separators out of order"));
            }
        }
        for i in 0..=n.ents.len() {
            let clo = if i == 0 {
                lo
            } else {
                Some(n.ents[i - 1].0.as_slice())
            };
            let chi = if i == n.ents.len() {
                hi
            } else {
                Some(n.ents[i].0.as_slice())
            };
            self.check_node(v, n.child(i), h - 1, clo, chi, false, rep, leaves, used)?;
        }
        Ok(())
    }
}

/// The error for a tree header at `at` whose magic is `magic`, not
/// [`MAGIC`]: a tree of the first node format is incompatible, anything
/// else is no tree.
fn not_a_tree(v: &View, at: u64, magic: u64) -> crate::error::Error {
    if magic == MAGIC_V1 {
        return crate::error::Error::Incompatible {
            path: v.region().path().to_path_buf(),
            what: format!(
                "the B+-tree at offset {at} has the first node format \
                 (2-byte slots, magic TXMBTRE1), which this txmap does not \
                 read: copy its entries out with the txmap that wrote it"
            ),
        };
    }
    corrupt(v, at, "not a B+-tree header")
}

/// Node bytes `b` as a node of `kind`, or why not.
fn parse(b: &[u8], kind: u8) -> std::result::Result<Raw<'_>, &'static str> {
    let r = Raw::parse(b).ok_or("malformed B+-tree node")?;
    if r.kind != kind {
        return Err("B+-tree node of the wrong kind");
    }
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::{PATH_INLINE, Path};

    #[test]
    fn a_path_deeper_than_the_stack_part_pops_in_reverse_order() {
        let mut p = Path::default();
        let deep = PATH_INLINE + 5;
        for i in 0..deep {
            p.push((i as u64 * 10, i));
        }
        assert_eq!(p.len(), deep);
        let mut q = p.clone();
        for i in (0..deep).rev() {
            assert_eq!(p.pop(), Some((i as u64 * 10, i)), "level {i}");
            assert_eq!(p.len(), i);
        }
        assert_eq!(p.pop(), None);
        assert_eq!(
            q.pop(),
            Some(((deep as u64 - 1) * 10, deep - 1)),
            "a clone keeps the spill"
        );
    }
}
