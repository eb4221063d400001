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
use super::node::{
    Val, cell_at, cell_bytes, cell_end, check_key, inline_at, put_cell, put_inline_cell, put16,
    put64, u16_at, u64_at,
};
use crate::ops::OpMemory;
use crate::{Result, View};

/// Bytes of a node.
pub const NODE: usize = (PAGE - BLOCK_HEADER) as usize;
/// Longest key.
pub const MAX_KEY: usize = 512;
/// Longest value kept inside a leaf.
pub const INLINE_MAX: usize = 512;
const MAGIC: u64 = u64::from_le_bytes(*b"TXMBTRE1");
const LEAF: u8 = 1;
const INTERNAL: u8 = 2;
const HDR: usize = 16;
// Tree header block fields.
const T_MAGIC: u64 = 0;
const T_ROOT: u64 = 8;
const T_HEIGHT: u64 = 16;

type Entry = (Vec<u8>, Val);

/// A node read for modification.
struct Leaf {
    next: u64,
    ents: Vec<Entry>,
}
struct Internal {
    first: u64,
    ents: Vec<(Vec<u8>, u64)>,
}

impl Internal {
    fn child(&self, i: usize) -> u64 {
        if i == 0 {
            self.first
        } else {
            self.ents[i - 1].1
        }
    }
}

fn leaf_cell(e: &Entry) -> usize {
    cell_bytes(&e.0, &e.1) + 2
}
fn internal_cell(e: &(Vec<u8>, u64)) -> usize {
    16 + e.0.len() + 2
}
fn leaf_bytes(ents: &[Entry]) -> usize {
    HDR + ents.iter().map(leaf_cell).sum::<usize>()
}
fn internal_bytes(ents: &[(Vec<u8>, u64)]) -> usize {
    HDR + ents.iter().map(internal_cell).sum::<usize>()
}

fn encode_leaf(l: &Leaf) -> Option<Vec<u8>> {
    if leaf_bytes(&l.ents) > NODE {
        return None;
    }
    let mut b = vec![0u8; NODE];
    b[0] = LEAF;
    put16(&mut b, 2, l.ents.len() as u16);
    put64(&mut b, 8, l.next);
    let mut end = NODE;
    for (i, (k, val)) in l.ents.iter().enumerate() {
        end -= cell_bytes(k, val);
        put16(&mut b, HDR + 2 * i, end as u16);
        put_cell(&mut b, end, k, val);
    }
    Some(b)
}

fn encode_internal(n: &Internal) -> Option<Vec<u8>> {
    if internal_bytes(&n.ents) > NODE {
        return None;
    }
    let mut b = vec![0u8; NODE];
    b[0] = INTERNAL;
    put16(&mut b, 2, n.ents.len() as u16);
    put64(&mut b, 8, n.first);
    let mut end = NODE;
    for (i, (k, child)) in n.ents.iter().enumerate() {
        end -= 16 + k.len();
        put16(&mut b, HDR + 2 * i, end as u16);
        put16(&mut b, end, k.len() as u16);
        put64(&mut b, end + 8, *child);
        b[end + 16..end + 16 + k.len()].copy_from_slice(k);
    }
    Some(b)
}

/// A node's bytes, parsed in place (no copies) for searching.
struct Raw<'a> {
    b: &'a [u8],
    kind: u8,
    n: usize,
    link: u64,
}

impl<'a> Raw<'a> {
    fn parse(b: &'a [u8]) -> Option<Raw<'a>> {
        let kind = *b.first()?;
        let n = u16_at(b, 2)? as usize;
        if !(kind == LEAF || kind == INTERNAL) || HDR + 2 * n > b.len() {
            return None;
        }
        Some(Raw {
            b,
            kind,
            n,
            link: u64_at(b, 8)?,
        })
    }
    fn cell(&self, i: usize) -> Option<usize> {
        let c = u16_at(self.b, HDR + 2 * i)? as usize;
        (c >= HDR + 2 * self.n && c < self.b.len()).then_some(c)
    }
    fn key(&self, i: usize) -> Option<&'a [u8]> {
        let c = self.cell(i)?;
        let klen = u16_at(self.b, c)? as usize;
        let at = c + if self.kind == LEAF { 8 } else { 16 };
        self.b.get(at..at + klen)
    }
    /// Child `i` of an internal node (0..=n).
    fn child(&self, i: usize) -> Option<u64> {
        if i == 0 {
            return Some(self.link);
        }
        u64_at(self.b, self.cell(i - 1)? + 8)
    }
    fn val(&self, i: usize) -> Option<Val> {
        cell_at(self.b, self.cell(i)?).map(|(_, val, _)| val)
    }
    /// Leaf entry `i`'s value if it is stored inline.
    fn inline(&self, i: usize) -> Option<&'a [u8]> {
        inline_at(self.b, self.cell(i)?)
    }
    /// Ok(i): key i equals `key`; Err(i): `key` belongs before key i.
    fn search(&self, key: &[u8]) -> Option<Result<usize, usize>> {
        let (mut lo, mut hi) = (0, self.n);
        while lo < hi {
            let mid = (lo + hi) / 2;
            match self.key(mid)?.cmp(key) {
                std::cmp::Ordering::Less => lo = mid + 1,
                std::cmp::Ordering::Greater => hi = mid,
                std::cmp::Ordering::Equal => return Some(Ok(mid)),
            }
        }
        Some(Err(lo))
    }
    /// Index of the child of an internal node that may hold `key`.
    fn route(&self, key: &[u8]) -> Option<usize> {
        Some(match self.search(key)? {
            Ok(i) => i + 1,
            Err(i) => i,
        })
    }
    /// Bytes a leaf's entries take (header, slots and cells), as
    /// [`leaf_bytes`] counts them, without decoding: free space left by
    /// in-place deletes is not counted.
    fn leaf_used(&self) -> Option<usize> {
        let mut used = HDR;
        for i in 0..self.n {
            let c = self.cell(i)?;
            used += cell_end(self.b, c)? - c + 2;
        }
        Some(used)
    }
    fn to_leaf(&self) -> Option<Leaf> {
        let mut ents = Vec::with_capacity(self.n);
        for i in 0..self.n {
            ents.push((self.key(i)?.to_vec(), self.val(i)?));
        }
        Some(Leaf {
            next: self.link,
            ents,
        })
    }
    fn to_internal(&self) -> Option<Internal> {
        let mut ents = Vec::with_capacity(self.n);
        for i in 0..self.n {
            ents.push((self.key(i)?.to_vec(), self.child(i + 1)?));
        }
        Some(Internal {
            first: self.link,
            ents,
        })
    }
}

/// Where an in-place insert of `key` with an inline value of `vlen` bytes
/// goes in leaf `r`: (slot index, entries, cell offset); `None` if the key
/// is present or the gap between the slots and the cells is too small.
fn in_place_spot(
    r: &Raw<'_>,
    key: &[u8],
    vlen: usize,
) -> std::result::Result<Option<(usize, usize, usize)>, &'static str> {
    let pos = match r.search(key).ok_or("bad key")? {
        Ok(_) => return Ok(None),
        Err(i) => i,
    };
    let mut lowest = NODE;
    for i in 0..r.n {
        lowest = lowest.min(r.cell(i).ok_or("bad cell")?);
    }
    let cell = 8 + key.len() + vlen;
    let slots_end = HDR + 2 * (r.n + 1);
    if lowest < slots_end + cell {
        return Ok(None);
    }
    // Every cell lies at or above `lowest`, so [slots_end, lowest) is free.
    Ok(Some((pos, r.n, lowest - cell)))
}

/// Puts the cell at `at` and its slot at `pos` (of `n`) into node bytes `b`.
fn put_in_place(b: &mut [u8], (pos, n, at): (usize, usize, usize), key: &[u8], value: &[u8]) {
    b.copy_within(HDR + 2 * pos..HDR + 2 * n, HDR + 2 * pos + 2);
    put16(b, HDR + 2 * pos, at as u16);
    put16(b, 2, (n + 1) as u16);
    put_inline_cell(b, at, key, value);
}

/// Takes slot `i` (of `n`) out of node bytes `b`; its cell becomes a hole.
fn remove_slot(b: &mut [u8], i: usize, n: usize) {
    b.copy_within(HDR + 2 * (i + 1)..HDR + 2 * n, HDR + 2 * i);
    put16(b, 2, (n - 1) as u16);
}

/// The arguments of [`crate::ops::BTREE_INSERT`] and `BTREE_DELETE`
/// (docs/FORMAT.md): node offset u64, key length u16, key, value.
fn op_args(node: u64, key: &[u8], value: &[u8]) -> Vec<u8> {
    let mut a = Vec::with_capacity(10 + key.len() + value.len());
    a.extend_from_slice(&node.to_le_bytes());
    a.extend_from_slice(&(key.len() as u16).to_le_bytes());
    a.extend_from_slice(key);
    a.extend_from_slice(value);
    a
}

/// Splits [`op_args`] into (node, key, value), checking the lengths.
fn parse_op_args(args: &[u8]) -> Result<(u64, &[u8], &[u8])> {
    let bad = || {
        invalid(format!(
            "B+-tree operation: malformed arguments ({} bytes)",
            args.len()
        ))
    };
    let node = u64_at(args, 0).ok_or_else(bad)?;
    let klen = u16_at(args, 8).ok_or_else(bad)? as usize;
    let key = args.get(10..10 + klen).ok_or_else(bad)?;
    let value = &args[10 + klen..];
    if klen > MAX_KEY || value.len() > INLINE_MAX {
        return Err(bad());
    }
    Ok((node, key, value))
}

/// The leaf at `node` in `mem`, copied.
fn op_leaf(mem: &mut dyn OpMemory, node: u64) -> Result<Vec<u8>> {
    let mut b = vec![0u8; NODE];
    mem.read(node, &mut b)?;
    if Raw::parse(&b).is_none_or(|r| r.kind != LEAF) {
        return Err(invalid(format!(
            "B+-tree operation: no leaf at offset {node}"
        )));
    }
    Ok(b)
}

/// Built-in operation [`crate::ops::BTREE_INSERT`]: inserts a new key with
/// an inline value into a leaf's free gap, as [`BTree::insert_in_place`]
/// does. Fails (the caller checked first) if the key is present or the gap
/// is too small.
pub(crate) fn insert_op(mem: &mut dyn OpMemory, args: &[u8]) -> Result<()> {
    let (node, key, value) = parse_op_args(args)?;
    let mut b = op_leaf(mem, node)?;
    let r = Raw::parse(&b).expect("checked by op_leaf");
    let spot = in_place_spot(&r, key, value.len())
        .map_err(|what| invalid(format!("B+-tree insert into leaf {node}: {what}")))?
        .ok_or_else(|| {
            invalid(format!(
                "B+-tree insert into leaf {node}: the key is present or the leaf is full"
            ))
        })?;
    put_in_place(&mut b, spot, key, value);
    let (pos, n, at) = spot;
    mem.write(node + 2, &b[2..4])?;
    mem.write(
        node + (HDR + 2 * pos) as u64,
        &b[HDR + 2 * pos..HDR + 2 * (n + 1)],
    )?;
    let cell = 8 + key.len() + value.len();
    mem.write(node + at as u64, &b[at..at + cell])
}

/// Built-in operation [`crate::ops::BTREE_SPLIT`]: moves the upper half
/// (by bytes, [`split_point`]) of the leaf at `node` into the new leaf at
/// `rnode`, linked after it, and repacks both. Arguments: `node` u64,
/// `rnode` u64.
pub(crate) fn split_op(mem: &mut dyn OpMemory, args: &[u8]) -> Result<()> {
    let (Some(node), Some(rnode), 16) = (u64_at(args, 0), u64_at(args, 8), args.len()) else {
        return Err(invalid(format!(
            "B+-tree split: 16 argument bytes expected, got {}",
            args.len()
        )));
    };
    let b = op_leaf(mem, node)?;
    let bad = |what: &str| invalid(format!("B+-tree split of leaf {node}: {what}"));
    let mut leaf = Raw::parse(&b)
        .and_then(|r| r.to_leaf())
        .ok_or_else(|| bad("malformed leaf"))?;
    if leaf.ents.len() < 2 {
        return Err(bad("fewer than two entries"));
    }
    let at = split_point(&leaf.ents, leaf_cell);
    let right = Leaf {
        next: leaf.next,
        ents: leaf.ents.split_off(at),
    };
    leaf.next = rnode;
    let (Some(lb), Some(rb)) = (encode_leaf(&leaf), encode_leaf(&right)) else {
        return Err(bad("halves do not fit"));
    };
    mem.write(node, &lb)?;
    mem.write(rnode, &rb)
}

/// Built-in operation [`crate::ops::BTREE_DELETE`]: takes a key's slot out
/// of a leaf, as [`BTree::delete`] does in place (a value block was
/// released before). Fails if the key is absent.
pub(crate) fn delete_op(mem: &mut dyn OpMemory, args: &[u8]) -> Result<()> {
    let (node, key, _) = parse_op_args(args)?;
    let mut b = op_leaf(mem, node)?;
    let r = Raw::parse(&b).expect("checked by op_leaf");
    let n = r.n;
    let Some(Ok(i)) = r.search(key) else {
        return Err(invalid(format!(
            "B+-tree delete from leaf {node}: the key is absent"
        )));
    };
    remove_slot(&mut b, i, n);
    mem.write(node + 2, &b[2..4])?;
    mem.write(
        node + (HDR + 2 * i) as u64,
        &b[HDR + 2 * i..HDR + 2 * (n - 1)],
    )
}

/// Splits entries in two halves by bytes, each non-empty.
fn split_point<T>(ents: &[T], size: impl Fn(&T) -> usize) -> usize {
    let total: usize = ents.iter().map(&size).sum();
    let mut acc = 0;
    for (i, e) in ents.iter().enumerate() {
        acc += size(e);
        if acc * 2 >= total {
            return (i + 1).clamp(1, ents.len() - 1);
        }
    }
    ents.len() / 2
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
        if v.read::<u64>(at + T_MAGIC)? != MAGIC {
            return Err(corrupt(v, at, "not a B+-tree header"));
        }
        Ok(BTree { at })
    }

    fn header(&self, v: &View) -> Result<(u64, u64)> {
        // One accessor call for the three fields: each call costs a check.
        let b = v.slice(self.at + T_MAGIC, 24)?;
        let field = |at: u64| u64_at(b, (at - T_MAGIC) as usize).unwrap_or(0);
        if field(T_MAGIC) != MAGIC {
            return Err(corrupt(v, self.at, "not a B+-tree header"));
        }
        let (root, h) = (field(T_ROOT), field(T_HEIGHT));
        if h == 0 || h > 64 {
            return Err(corrupt(v, self.at, format!("tree height {h}")));
        }
        Ok((root, h))
    }

    fn raw<'v>(&self, v: &'v View, node: u64, kind: u8) -> Result<Raw<'v>> {
        let r = Raw::parse(v.slice(node, NODE)?)
            .ok_or_else(|| corrupt(v, node, "malformed B+-tree node"))?;
        if r.kind != kind {
            return Err(corrupt(v, node, "B+-tree node of the wrong kind"));
        }
        Ok(r)
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
    fn descend(&self, v: &View, key: &[u8]) -> Result<(u64, Vec<(u64, usize)>)> {
        let mut path = Vec::with_capacity(4);
        let leaf = self.walk(v, key, |node, i| path.push((node, i)))?;
        Ok((leaf, path))
    }

    /// Descends to the leaf for `key`, calling `step(node, child index)` at
    /// each internal node.
    fn walk(&self, v: &View, key: &[u8], mut step: impl FnMut(u64, usize)) -> Result<u64> {
        let (mut node, h) = self.header(v)?;
        for _ in 1..h {
            let r = self.raw(v, node, INTERNAL)?;
            let i = r.route(key).ok_or_else(|| corrupt(v, node, "bad key"))?;
            let c = r.child(i).ok_or_else(|| corrupt(v, node, "bad child"))?;
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
        let r = self.raw(v, leaf, LEAF)?;
        let Ok(i) = r.search(key).ok_or_else(|| corrupt(v, leaf, "bad key"))? else {
            return Ok(false);
        };
        if let Some(bytes) = r.inline(i) {
            f(bytes);
            return Ok(true);
        }
        let val = r.val(i).ok_or_else(|| corrupt(v, leaf, "bad value"))?;
        val.with(v, f)?;
        Ok(true)
    }

    /// Inserts or replaces; returns true if `key` was present.
    pub fn put(&self, v: &mut View, key: &[u8], value: &[u8]) -> Result<bool> {
        self.put_inner(v, key, value, true)
            .map(|r| r == TryPut::Replaced)
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
        let (node, path) = self.descend(v, key)?;
        if value.len() <= INLINE_MAX && self.insert_in_place(v, node, key, value)? {
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
            if leaf_bytes(&leaf.ents) - old + 10 + key.len() + inline_len > NODE {
                return Ok(TryPut::NeedsSplit);
            }
        }
        if pos.is_err() && self.split_logically(v, node, &leaf, &path, key, value)? {
            return Ok(TryPut::Inserted);
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

    /// A new key with an inline value that does not fit in `leaf` (at
    /// `node`): in a transaction that logs operations, splits the leaf by
    /// the built-in operation [`crate::ops::BTREE_SPLIT`] (its halves are
    /// not logged as bytes) and inserts the key in place into its half.
    /// False (nothing changed) when the key would fit, operations are not
    /// logged, or the key's half would have no room for it; the caller then
    /// takes the general path (insert, then split the result).
    fn split_logically(
        &self,
        v: &mut View,
        node: u64,
        leaf: &Leaf,
        path: &[(u64, usize)],
        key: &[u8],
        value: &[u8],
    ) -> Result<bool> {
        let cell = 10 + key.len() + value.len();
        if value.len() > INLINE_MAX
            || leaf.ents.len() < 2
            || leaf_bytes(&leaf.ents) + cell <= NODE
            || !v.logs_ops()
        {
            return Ok(false);
        }
        let at = split_point(&leaf.ents, leaf_cell);
        let (left, right) = leaf.ents.split_at(at);
        let sep = right[0].0.clone();
        let goes_right = key >= sep.as_slice();
        if leaf_bytes(if goes_right { right } else { left }) + cell > NODE {
            return Ok(false);
        }
        let rnode = alloc::alloc(v, NODE as u64)?;
        let mut args = node.to_le_bytes().to_vec();
        args.extend_from_slice(&rnode.to_le_bytes());
        v.apply(crate::ops::BTREE_SPLIT, &args)?;
        self.insert_up(v, path.to_vec(), node, sep, rnode)?;
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
        let (node, path) = self.descend(v, key)?;
        let leaf = self.leaf(v, node)?;
        if leaf.ents.len() >= 2 && leaf_bytes(&leaf.ents) + 10 + MAX_KEY + INLINE_MAX > NODE {
            self.split_leaf(v, node, leaf, path)?;
        }
        Ok(())
    }

    fn split_leaf(
        &self,
        v: &mut View,
        node: u64,
        mut leaf: Leaf,
        path: Vec<(u64, usize)>,
    ) -> Result<()> {
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
        mut path: Vec<(u64, usize)>,
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
        let (node, path) = self.descend(v, key)?;
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
    fn rebalance(&self, v: &mut View, mut path: Vec<(u64, usize)>, mut node: u64) -> Result<()> {
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
        while leaf != 0 {
            let r = self.raw(v, leaf, LEAF)?;
            let from = if first {
                match r.search(start).ok_or_else(|| corrupt(v, leaf, "bad key"))? {
                    Ok(i) if matches!(lo, Bound::Excluded(_)) => i + 1,
                    Ok(i) | Err(i) => i,
                }
            } else {
                0
            };
            first = false;
            for i in from..r.n {
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
