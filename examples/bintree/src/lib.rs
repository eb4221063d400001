//! A user-defined structure built on txmap's registered operations and
//! nested top actions (issue 18; the idea of Stasis's `examples/ex3.c`):
//! a binary search tree stored in a region whose `insert` and `remove` are
//! operations registered under user ids, each run as a nested top action
//! whose logical undo is the other one.
//!
//! Why nested top actions: every insert or remove rewrites the tree's hot
//! header (root, node count, allocator) and the nodes on its path. Done as
//! plain stores inside a long transaction, those pages would stay in its
//! write set until it commits, and every concurrent writer would conflict
//! with it. As a nested top action the change commits at once, on its own,
//! and the enclosing transaction only keeps the *logical* undo ("remove
//! this key again"), which runs as a compensating transaction if it
//! aborts, or at the next first open of the region if its process dies.
//!
//! A logical undo is only right if it still means the same thing when it
//! runs, whatever committed in between: Stasis leaves that to the
//! application's locks. Here the tree is a multiset with signed counts
//! (insert adds one occurrence of a key, remove takes one away; a node
//! exists while its count is not zero), so insert and remove commute and
//! each undoes the other exactly under any interleaving, even when the
//! compensation of a killed process runs long after other processes
//! changed the same key. A set (insert only if absent) would need key
//! locks held until the enclosing transaction ends.
//!
//! The enclosing transaction must not read the tree itself: its nested
//! actions change the tree's pages after its snapshot, so it would read
//! the tree as it was before them and its commit would conflict. Read the
//! tree in transactions of their own ([`Tree::count`], [`Tree::check`]).
//!
//! Layout, at the tree's offset `at` (little-endian u64s): a 64-byte header
//! `magic, root, nodes, next, free, limit`, then 32-byte nodes
//! `key, count (i64), left, right` up to `limit`. Offsets are region
//! offsets; 0 is "none". Freed nodes form a list through `left`.

use std::collections::{BTreeMap, BTreeSet};

use txmap::ops::{self, OpMemory, Operation};
use txmap::{Error, Result, View};

/// Operation id of insert (a user id: at least `txmap::ops::FIRST_USER_OP`).
pub const INSERT: u32 = 200;
/// Operation id of remove.
pub const REMOVE: u32 = 201;

const MAGIC: u64 = u64::from_le_bytes(*b"txbtree1");
/// Bytes of the header.
pub const HEADER: u64 = 64;
/// Bytes of a node.
pub const NODE: u64 = 32;

const H_MAGIC: u64 = 0;
const H_ROOT: u64 = 8;
const H_NODES: u64 = 16;
const H_NEXT: u64 = 24;
const H_FREE: u64 = 32;
const H_LIMIT: u64 = 40;

const N_KEY: u64 = 0;
const N_COUNT: u64 = 8;
const N_LEFT: u64 = 16;
const N_RIGHT: u64 = 24;

/// Registers [`INSERT`] and [`REMOVE`] for this process. Every process
/// that opens a region holding a tree must call it before opening it:
/// recovery replays the operations and runs pending undos.
pub fn register() -> Result<()> {
    ops::register(
        INSERT,
        Operation {
            name: "bintree insert",
            apply: insert_op,
        },
    )?;
    ops::register(
        REMOVE,
        Operation {
            name: "bintree remove",
            apply: remove_op,
        },
    )
}

/// Operation arguments: the tree's offset and the key.
fn args(at: u64, key: u64) -> [u8; 16] {
    let mut a = [0u8; 16];
    a[..8].copy_from_slice(&at.to_le_bytes());
    a[8..].copy_from_slice(&key.to_le_bytes());
    a
}

fn parse(a: &[u8]) -> Result<(u64, u64)> {
    let word = |i: usize| {
        a.get(i..i + 8)
            .and_then(|b| b.try_into().ok())
            .map(u64::from_le_bytes)
    };
    match (a.len(), word(0), word(8)) {
        (16, Some(at), Some(key)) => Ok((at, key)),
        _ => Err(Error::Invalid(format!(
            "bintree: 16 argument bytes expected, got {}",
            a.len()
        ))),
    }
}

fn insert_op(mem: &mut dyn OpMemory, a: &[u8]) -> Result<()> {
    let (at, key) = parse(a)?;
    adjust(mem, at, key, 1)
}

fn remove_op(mem: &mut dyn OpMemory, a: &[u8]) -> Result<()> {
    let (at, key) = parse(a)?;
    adjust(mem, at, key, -1)
}

/// The header fields an operation needs, checked.
struct Head {
    at: u64,
    first: u64,
    limit: u64,
}

impl Head {
    fn read(mem: &mut dyn OpMemory, at: u64) -> Result<Head> {
        if mem.read_u64(at + H_MAGIC)? != MAGIC {
            return Err(Error::Invalid(format!("bintree: no tree at offset {at}")));
        }
        let limit = mem.read_u64(at + H_LIMIT)?;
        Ok(Head {
            at,
            first: at + HEADER,
            limit,
        })
    }

    /// Fails unless `n` is the offset of a node slot.
    fn node(&self, n: u64) -> Result<u64> {
        if n < self.first || n + NODE > self.limit || !(n - self.first).is_multiple_of(NODE) {
            return Err(Error::Invalid(format!(
                "bintree at {}: damaged, {n} is not a node offset",
                self.at
            )));
        }
        Ok(n)
    }

    /// How many node slots the tree has.
    fn slots(&self) -> u64 {
        (self.limit - self.first) / NODE
    }
}

/// Adds `delta` to `key`'s count: a new node if it had none, the node
/// removed if its count becomes 0. Deterministic: it reads and writes the
/// region only through `mem`, so replay gives the same bytes.
fn adjust(mem: &mut dyn OpMemory, at: u64, key: u64, delta: i64) -> Result<()> {
    let h = Head::read(mem, at)?;
    // `link` is the offset of the word that points at node `n`.
    let mut link = at + H_ROOT;
    let mut steps = 0;
    let n = loop {
        let n = mem.read_u64(link)?;
        if n == 0 {
            break 0;
        }
        let n = h.node(n)?;
        steps += 1;
        if steps > h.slots() {
            return Err(Error::Invalid(format!("bintree at {at}: damaged, a cycle")));
        }
        let k = mem.read_u64(n + N_KEY)?;
        if k == key {
            break n;
        }
        link = n + if key < k { N_LEFT } else { N_RIGHT };
    };
    if n == 0 {
        let n = alloc(mem, &h)?;
        mem.write_u64(n + N_KEY, key)?;
        mem.write_u64(n + N_COUNT, delta as u64)?;
        mem.write_u64(n + N_LEFT, 0)?;
        mem.write_u64(n + N_RIGHT, 0)?;
        mem.write_u64(link, n)?;
        let nodes = mem.read_u64(at + H_NODES)?;
        return mem.write_u64(at + H_NODES, nodes + 1);
    }
    let count = (mem.read_u64(n + N_COUNT)? as i64).wrapping_add(delta);
    if count != 0 {
        return mem.write_u64(n + N_COUNT, count as u64);
    }
    unlink(mem, &h, link, n)
}

/// A free node slot: the head of the free list, else the next never used.
fn alloc(mem: &mut dyn OpMemory, h: &Head) -> Result<u64> {
    let free = mem.read_u64(h.at + H_FREE)?;
    if free != 0 {
        let n = h.node(free)?;
        let next = mem.read_u64(n + N_LEFT)?;
        mem.write_u64(h.at + H_FREE, next)?;
        return Ok(n);
    }
    let next = mem.read_u64(h.at + H_NEXT)?;
    if next + NODE > h.limit {
        return Err(Error::TooLarge(format!(
            "bintree at {}: all {} node slots are used",
            h.at,
            h.slots()
        )));
    }
    mem.write_u64(h.at + H_NEXT, next + NODE)?;
    Ok(next)
}

/// Removes node `n` (pointed at by the word at `link`) from the tree and
/// frees its slot.
fn unlink(mem: &mut dyn OpMemory, h: &Head, link: u64, n: u64) -> Result<()> {
    let (l, r) = (mem.read_u64(n + N_LEFT)?, mem.read_u64(n + N_RIGHT)?);
    let gone = if l == 0 || r == 0 {
        mem.write_u64(link, if l == 0 { r } else { l })?;
        n
    } else {
        // Two children: the successor (leftmost of the right subtree) takes
        // n's place by value, and its own slot is freed.
        let (mut slink, mut s) = (n + N_RIGHT, h.node(r)?);
        loop {
            let sl = mem.read_u64(s + N_LEFT)?;
            if sl == 0 {
                break;
            }
            slink = s + N_LEFT;
            s = h.node(sl)?;
        }
        let sr = mem.read_u64(s + N_RIGHT)?;
        mem.write_u64(slink, sr)?;
        let (sk, sc) = (mem.read_u64(s + N_KEY)?, mem.read_u64(s + N_COUNT)?);
        mem.write_u64(n + N_KEY, sk)?;
        mem.write_u64(n + N_COUNT, sc)?;
        s
    };
    let free = mem.read_u64(h.at + H_FREE)?;
    mem.write(gone, &[0u8; NODE as usize])?;
    mem.write_u64(gone + N_LEFT, free)?;
    mem.write_u64(h.at + H_FREE, gone)?;
    let nodes = mem.read_u64(h.at + H_NODES)?;
    mem.write_u64(h.at + H_NODES, nodes.wrapping_sub(1))
}

/// Reads a view's transaction through the operations' interface.
struct Reader<'a>(&'a View);

impl OpMemory for Reader<'_> {
    fn size(&self) -> u64 {
        self.0.len() as u64
    }
    fn read(&mut self, off: u64, buf: &mut [u8]) -> Result<()> {
        buf.copy_from_slice(self.0.slice(off, buf.len())?);
        Ok(())
    }
    fn write(&mut self, _: u64, _: &[u8]) -> Result<()> {
        Err(Error::Invalid("bintree: the reader does not write".into()))
    }
}

/// A tree in a region, named by the offset of its header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tree {
    at: u64,
}

impl Tree {
    /// Makes an empty tree of the `len` bytes at `at` (8-byte aligned) in
    /// the view's open transaction, by plain stores.
    pub fn create(v: &mut View, at: u64, len: u64) -> Result<Tree> {
        if !at.is_multiple_of(8) || len < HEADER + NODE {
            return Err(Error::Invalid(format!(
                "bintree: {len} bytes at {at}: 8-byte aligned and room for a node needed"
            )));
        }
        let limit = at + HEADER + (len - HEADER) / NODE * NODE;
        v.slice_mut(at, HEADER as usize)?.fill(0);
        for (f, x) in [(H_MAGIC, MAGIC), (H_NEXT, at + HEADER), (H_LIMIT, limit)] {
            v.write(at + f, &x)?;
        }
        Ok(Tree { at })
    }

    /// The tree whose header is at `at` (made by [`Tree::create`]).
    pub fn at(at: u64) -> Tree {
        Tree { at }
    }

    /// Inserts one occurrence of `key` as a nested top action of the view's
    /// open transaction: committed at once; undone by [`REMOVE`] if the
    /// enclosing transaction does not commit.
    pub fn insert(&self, v: &mut View, key: u64) -> Result<()> {
        self.insert_with(v, key, |_| Ok(()))
    }

    /// Removes one occurrence of `key` (a count of 0 becomes -1: the tree
    /// is a multiset with signed counts) as a nested top action; undone by
    /// [`INSERT`].
    pub fn remove(&self, v: &mut View, key: u64) -> Result<()> {
        self.remove_with(v, key, |_| Ok(()))
    }

    /// [`Tree::insert`], calling `before` inside the nested action's own
    /// transaction first (to look at the tree as the action finds it).
    pub fn insert_with(
        &self,
        v: &mut View,
        key: u64,
        before: impl FnMut(&mut View) -> Result<()>,
    ) -> Result<()> {
        self.nested(v, INSERT, REMOVE, key, before)
    }

    /// [`Tree::remove`], calling `before` as [`Tree::insert_with`] does.
    pub fn remove_with(
        &self,
        v: &mut View,
        key: u64,
        before: impl FnMut(&mut View) -> Result<()>,
    ) -> Result<()> {
        self.nested(v, REMOVE, INSERT, key, before)
    }

    fn nested(
        &self,
        v: &mut View,
        op: u32,
        undo: u32,
        key: u64,
        mut before: impl FnMut(&mut View) -> Result<()>,
    ) -> Result<()> {
        let a = args(self.at, key);
        v.nested_top(undo, &a, |v| {
            before(v)?;
            v.apply(op, &a)
        })
    }

    /// `key`'s count (0 if it has no node), as the view's transaction sees it.
    pub fn count(&self, v: &View, key: u64) -> Result<i64> {
        let mem: &mut dyn OpMemory = &mut Reader(v);
        let h = Head::read(mem, self.at)?;
        let mut n = mem.read_u64(self.at + H_ROOT)?;
        for _ in 0..=h.slots() {
            if n == 0 {
                return Ok(0);
            }
            let k = mem.read_u64(h.node(n)? + N_KEY)?;
            if k == key {
                return Ok(mem.read_u64(n + N_COUNT)? as i64);
            }
            n = mem.read_u64(n + if key < k { N_LEFT } else { N_RIGHT })?;
        }
        Err(Error::Invalid(format!(
            "bintree at {}: damaged, a cycle",
            self.at
        )))
    }

    /// Every key with its count, in order, after checking the tree's
    /// invariants as the view's transaction sees it: keys in search order,
    /// no node reached twice, no count of 0, the node count right, and
    /// every slot either in the tree or on the free list. `Error::Invalid`
    /// names the first broken one.
    pub fn check(&self, v: &View) -> Result<BTreeMap<u64, i64>> {
        let mem: &mut dyn OpMemory = &mut Reader(v);
        let h = Head::read(mem, self.at)?;
        let bad = |what: String| Error::Invalid(format!("bintree at {}: {what}", h.at));
        let mut seen = BTreeSet::new();
        let mut out = BTreeMap::new();
        // (node, keys it may hold: lo <= key < hi, or up to u64::MAX if hi is None)
        let mut stack = vec![(mem.read_u64(h.at + H_ROOT)?, 0u64, None::<u64>)];
        while let Some((n, lo, hi)) = stack.pop() {
            if n == 0 {
                continue;
            }
            let n = h.node(n)?;
            if !seen.insert(n) {
                return Err(bad(format!("node {n} reached twice")));
            }
            let k = mem.read_u64(n + N_KEY)?;
            let c = mem.read_u64(n + N_COUNT)? as i64;
            if k < lo || hi.is_some_and(|hi| k >= hi) {
                return Err(bad(format!("key {k} of node {n} out of order")));
            }
            if c == 0 {
                return Err(bad(format!("node {n} (key {k}) has count 0")));
            }
            out.insert(k, c);
            stack.push((mem.read_u64(n + N_LEFT)?, lo, Some(k)));
            stack.push((mem.read_u64(n + N_RIGHT)?, k + 1, hi));
        }
        let nodes = mem.read_u64(h.at + H_NODES)?;
        if nodes != seen.len() as u64 {
            return Err(bad(format!(
                "header counts {nodes} nodes, {} reachable",
                seen.len()
            )));
        }
        let next = mem.read_u64(h.at + H_NEXT)?;
        if next < h.first || next > h.limit || !(next - h.first).is_multiple_of(NODE) {
            return Err(bad(format!("next slot {next} out of range")));
        }
        let mut free = 0;
        let mut f = mem.read_u64(h.at + H_FREE)?;
        while f != 0 {
            let n = h.node(f)?;
            if n >= next || !seen.insert(n) {
                return Err(bad(format!(
                    "free slot {n} is used, unallocated or listed twice"
                )));
            }
            free += 1;
            f = mem.read_u64(n + N_LEFT)?;
        }
        let used = (next - h.first) / NODE;
        if nodes + free != used {
            return Err(bad(format!(
                "{nodes} nodes and {free} free slots, but {used} slots handed out"
            )));
        }
        Ok(out)
    }
}
