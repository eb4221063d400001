//! A cache-oblivious B-tree (thesis section 5.1): a packed memory array
//! (PMA) of sorted entries with gaps, searched through a static complete
//! binary tree stored in van Emde Boas order.
//!
//! - **PMA.** `N` segments (a power of two), each a page-sized heap block of
//!   [`SEG`] slots of 16 bytes (8-byte big-endian key prefix, record offset;
//!   record 0 = empty). A segment is packed to the left, so its count is the
//!   index of its first empty slot. Entries increase across segments.
//!   Inserting into a full segment rebalances the smallest enclosing window
//!   of `2^l` segments whose density stays under `upper(l)` (1 for a segment,
//!   falling to [`ROOT_UPPER`] for the whole array) by spreading its entries
//!   evenly; when even the whole array is too dense, it doubles. A delete
//!   that leaves a segment below `lower(0)` rebalances the smallest window
//!   above `lower(l)`, or halves the array.
//! - **Records.** Each entry is a heap block: key length u32, value length
//!   u64, key, value (any size: values larger than a page are fine).
//! - **Index.** `2N-1` nodes of 24 bytes (prefix, record of the subtree's
//!   smallest key or 0 if empty, segment offset for leaves), node `i` (1-based
//!   breadth-first) stored at its van Emde Boas position, so a root-to-leaf
//!   path touches `O(log_B N)` pages for any page size `B`. A search goes
//!   right when the key is at least the right subtree's minimum.
//!
//! An insert that does not become its segment's first entry writes only the
//! segment and the record; only changes of a segment's minimum touch the
//! index, and only rebalances touch several segments.
//!
//! Header (a heap block alone on its page):
//! `0 magic  8 segments N  16 index block  24 tree levels`.

use std::cmp::Ordering;
use std::ops::Bound;

use super::alloc::{self, BLOCK_HEADER, PAGE, corrupt, invalid};
pub use super::btree::TryPut;
use super::cobtreeop::{H_INDEX, H_LEVELS, H_MAGIC, H_SEGS, MAGIC, NODE, Slot, header_ok, prefix};
pub use super::cobtreeop::{MAX_KEY, veb_pos};
use super::node::check_key;
pub use super::segment::SEG;
use super::segment::SEG_BYTES;
use crate::{Result, View};

/// Density bound of the whole array on insert.
pub const ROOT_UPPER: f64 = 0.7;
/// Density bound of a segment and of the whole array on delete.
const LEAF_LOWER: f64 = 0.1;
const ROOT_LOWER: f64 = 0.2;
/// Longest value a blind put carries in its operation's arguments.
const BLIND_VALUE_MAX: usize = 512;

/// A cache-oblivious B-tree in a region, named by its header block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CoBTree {
    pub at: u64,
}

/// What [`CoBTree::check`] found.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CoReport {
    pub entries: u64,
    pub segments: u64,
    pub blocks: u64,
    /// Entries / slots of the whole array.
    pub density: f64,
    /// Fullest segment, in entries.
    pub max_segment: u64,
}

struct Meta {
    n: u64,
    index: u64,
    levels: u32,
}

fn upper(l: u32, levels: u32) -> f64 {
    let h = (levels - 1).max(1) as f64;
    1.0 - (1.0 - ROOT_UPPER) * l as f64 / h
}

fn lower(l: u32, levels: u32) -> f64 {
    let h = (levels - 1).max(1) as f64;
    LEAF_LOWER + (ROOT_LOWER - LEAF_LOWER) * l as f64 / h
}

impl CoBTree {
    /// Creates an empty tree with one segment.
    pub fn create(v: &mut View) -> Result<CoBTree> {
        alloc::init(v)?;
        let at = alloc::alloc(v, PAGE - BLOCK_HEADER)?;
        v.write(at + H_MAGIC, &MAGIC)?;
        let t = CoBTree { at };
        t.build(v, 1, &[])?;
        Ok(t)
    }

    pub fn open(v: &View, at: u64) -> Result<CoBTree> {
        let t = CoBTree { at };
        t.meta(v)?;
        Ok(t)
    }

    fn meta(&self, v: &View) -> Result<Meta> {
        if v.read::<u64>(self.at + H_MAGIC)? != MAGIC {
            return Err(corrupt(v, self.at, "not a CO B-tree header"));
        }
        let n: u64 = v.read(self.at + H_SEGS)?;
        let levels: u64 = v.read(self.at + H_LEVELS)?;
        if !header_ok(n, levels) {
            return Err(corrupt(v, self.at, "bad CO B-tree segment count"));
        }
        Ok(Meta {
            n,
            index: v.read(self.at + H_INDEX)?,
            levels: levels as u32,
        })
    }

    fn node_off(m: &Meta, i: u64) -> u64 {
        m.index + veb_pos(i, m.levels) * NODE
    }

    fn node(&self, v: &View, m: &Meta, i: u64) -> Result<(Slot, u64)> {
        let o = Self::node_off(m, i);
        Ok((
            Slot {
                prefix: v.read(o)?,
                rec: v.read(o + 8)?,
            },
            v.read(o + 16)?,
        ))
    }

    fn set_node(&self, v: &mut View, m: &Meta, i: u64, s: Slot) -> Result<()> {
        let o = Self::node_off(m, i);
        v.write(o, &s.prefix)?;
        v.write(o + 8, &s.rec)
    }

    /// The segment block of segment `j`.
    fn segment(&self, v: &View, m: &Meta, j: u64) -> Result<u64> {
        let (_, seg) = self.node(v, m, m.n + j)?;
        if seg == 0 {
            return Err(corrupt(v, m.index, format!("segment {j} missing")));
        }
        Ok(seg)
    }

    fn record(&self, v: &View, rec: u64) -> Result<(u64, u64)> {
        let kl: u32 = v.read(rec)?;
        let vl: u64 = v.read(rec + 4)?;
        if kl as usize > MAX_KEY {
            return Err(corrupt(v, rec, "CO B-tree record key too long"));
        }
        Ok((kl as u64, vl))
    }

    fn rec_key<'v>(&self, v: &'v View, rec: u64) -> Result<&'v [u8]> {
        let (kl, _) = self.record(v, rec)?;
        v.slice(rec + 12, kl as usize)
    }

    fn cmp(&self, v: &View, key: &[u8], s: Slot) -> Result<Ordering> {
        match prefix(key).cmp(&s.prefix) {
            Ordering::Equal => Ok(key.cmp(self.rec_key(v, s.rec)?)),
            o => Ok(o),
        }
    }

    /// The segment a key belongs to.
    fn route(&self, v: &View, m: &Meta, key: &[u8]) -> Result<u64> {
        let mut i = 1;
        while i < m.n {
            let (r, _) = self.node(v, m, 2 * i + 1)?;
            i = if r.rec != 0 && self.cmp(v, key, r)? != Ordering::Less {
                2 * i + 1
            } else {
                2 * i
            };
        }
        Ok(i - m.n)
    }

    fn read_seg(&self, v: &View, seg: u64) -> Result<Vec<Slot>> {
        let b = v.slice(seg, SEG_BYTES as usize)?;
        let mut out = Vec::new();
        for c in b.chunks_exact(16) {
            let rec = u64::from_le_bytes(c[8..].try_into().expect("8"));
            if rec == 0 {
                break;
            }
            out.push(Slot {
                prefix: u64::from_le_bytes(c[..8].try_into().expect("8")),
                rec,
            });
        }
        Ok(out)
    }

    fn write_seg(&self, v: &mut View, seg: u64, slots: &[Slot]) -> Result<()> {
        if slots.len() as u64 > SEG {
            return Err(invalid("segment overflow"));
        }
        let mut b = vec![0u8; SEG_BYTES as usize];
        for (c, s) in b.chunks_exact_mut(16).zip(slots) {
            c[..8].copy_from_slice(&s.prefix.to_le_bytes());
            c[8..].copy_from_slice(&s.rec.to_le_bytes());
        }
        v.slice_mut(seg, SEG_BYTES as usize)?.copy_from_slice(&b);
        Ok(())
    }

    /// Stores segment `seg` after inserting `new` at slot `i` (or removing
    /// slot `i`, `None`), giving `slots`: in a transaction that logs
    /// operations, as the built-in operation [`crate::ops::COBTREE_INSERT`]
    /// (`COBTREE_REMOVE`), so the shifted slots are not logged as bytes.
    fn write_slot_change(
        &self,
        v: &mut View,
        seg: u64,
        slots: &[Slot],
        i: usize,
        new: Option<Slot>,
    ) -> Result<()> {
        if !v.logs_ops() {
            return self.write_seg(v, seg, slots);
        }
        match new {
            Some(s) => v.apply(
                crate::ops::COBTREE_INSERT,
                &super::segment::insert_args(seg, i, s.prefix, s.rec),
            ),
            None => {
                let mut a = seg.to_le_bytes().to_vec();
                a.extend_from_slice(&(i as u32).to_le_bytes());
                v.apply(crate::ops::COBTREE_REMOVE, &a)
            }
        }
    }

    /// Position of `key` in a segment: Ok(found) or Err(insertion point).
    fn search(&self, v: &View, slots: &[Slot], key: &[u8]) -> Result<Result<usize, usize>> {
        let (mut lo, mut hi) = (0, slots.len());
        while lo < hi {
            let mid = (lo + hi) / 2;
            match self.cmp(v, key, slots[mid])? {
                Ordering::Greater => lo = mid + 1,
                Ordering::Less => hi = mid,
                Ordering::Equal => return Ok(Ok(mid)),
            }
        }
        Ok(Err(lo))
    }

    /// Sets leaf `j`'s minimum and propagates it up while nodes change.
    fn fix_min(&self, v: &mut View, m: &Meta, j: u64, min: Slot) -> Result<()> {
        let mut i = m.n + j;
        if self.node(v, m, i)?.0 == min {
            return Ok(());
        }
        self.set_node(v, m, i, min)?;
        while i > 1 {
            i /= 2;
            let (l, _) = self.node(v, m, 2 * i)?;
            let (r, _) = self.node(v, m, 2 * i + 1)?;
            let s = if l.rec != 0 { l } else { r };
            if self.node(v, m, i)?.0 == s {
                break;
            }
            self.set_node(v, m, i, s)?;
        }
        Ok(())
    }

    fn new_record(&self, v: &mut View, key: &[u8], value: &[u8]) -> Result<Slot> {
        let rec = alloc::alloc(v, 12 + key.len() as u64 + value.len() as u64)?;
        v.write(rec, &(key.len() as u32))?;
        v.write(rec + 4, &(value.len() as u64))?;
        v.slice_mut(rec + 12, key.len())?.copy_from_slice(key);
        v.slice_mut(rec + 12 + key.len() as u64, value.len())?
            .copy_from_slice(value);
        Ok(Slot {
            prefix: prefix(key),
            rec,
        })
    }

    /// Makes a PMA of `n` segments holding `entries`, spread evenly, with
    /// its index; frees the old one, if any.
    fn build(&self, v: &mut View, n: u64, entries: &[Slot]) -> Result<()> {
        let old = if v.read::<u64>(self.at + H_SEGS)? != 0 {
            Some(self.meta(v)?)
        } else {
            None
        };
        let levels = n.trailing_zeros() + 1;
        let index = alloc::alloc(v, (2 * n - 1) * NODE)?;
        let m = Meta { n, index, levels };
        let mut mins = vec![Slot::default(); 2 * n as usize];
        for j in 0..n {
            let seg = alloc::alloc(v, SEG_BYTES)?;
            let (a, b) = (
                spread(entries.len() as u64, n, j),
                spread(entries.len() as u64, n, j + 1),
            );
            let part = &entries[a as usize..b as usize];
            self.write_seg(v, seg, part)?;
            mins[(n + j) as usize] = part.first().copied().unwrap_or_default();
            v.write(Self::node_off(&m, n + j) + 16, &seg)?;
        }
        for i in (1..n).rev() {
            let (l, r) = (mins[2 * i as usize], mins[2 * i as usize + 1]);
            mins[i as usize] = if l.rec != 0 { l } else { r };
        }
        for i in 1..2 * n {
            self.set_node(v, &m, i, mins[i as usize])?;
        }
        if let Some(o) = old {
            for j in 0..o.n {
                let seg = self.segment(v, &o, j)?;
                alloc::free(v, seg)?;
            }
            alloc::free(v, o.index)?;
        }
        v.write(self.at + H_SEGS, &n)?;
        v.write(self.at + H_INDEX, &index)?;
        v.write(self.at + H_LEVELS, &(levels as u64))?;
        Ok(())
    }

    /// Every entry of segments `[a, b)`, in order.
    fn gather(&self, v: &View, m: &Meta, a: u64, b: u64) -> Result<Vec<Slot>> {
        let mut all = Vec::new();
        for j in a..b {
            all.extend(self.read_seg(v, self.segment(v, m, j)?)?);
        }
        Ok(all)
    }

    /// Spreads `entries` evenly over segments `[a, b)` and fixes the index.
    fn spread_window(
        &self,
        v: &mut View,
        m: &Meta,
        a: u64,
        b: u64,
        entries: &[Slot],
    ) -> Result<()> {
        let w = b - a;
        for j in 0..w {
            let (x, y) = (
                spread(entries.len() as u64, w, j),
                spread(entries.len() as u64, w, j + 1),
            );
            let part = &entries[x as usize..y as usize];
            let seg = self.segment(v, m, a + j)?;
            self.write_seg(v, seg, part)?;
            self.fix_min(v, m, a + j, part.first().copied().unwrap_or_default())?;
        }
        Ok(())
    }

    pub fn get(&self, v: &View, key: &[u8]) -> Result<Option<Vec<u8>>> {
        check_key(key, MAX_KEY)?;
        let m = self.meta(v)?;
        let seg = self.segment(v, &m, self.route(v, &m, key)?)?;
        let slots = self.read_seg(v, seg)?;
        match self.search(v, &slots, key)? {
            Ok(i) => {
                let rec = slots[i].rec;
                let (kl, vl) = self.record(v, rec)?;
                if alloc::usable_size(v, rec)? < (12 + kl).saturating_add(vl) {
                    return Err(corrupt(v, rec, "record longer than its block"));
                }
                Ok(Some(v.slice(rec + 12 + kl, vl as usize)?.to_vec()))
            }
            Err(_) => Ok(None),
        }
    }

    /// Inserts or replaces; true if `key` was present.
    pub fn put(&self, v: &mut View, key: &[u8], value: &[u8]) -> Result<bool> {
        check_key(key, MAX_KEY)?;
        let m = self.meta(v)?;
        let j = self.route(v, &m, key)?;
        let seg = self.segment(v, &m, j)?;
        let mut slots = self.read_seg(v, seg)?;
        let new = self.new_record(v, key, value)?;
        match self.search(v, &slots, key)? {
            Ok(i) => {
                alloc::free(v, slots[i].rec)?;
                slots[i] = new;
                self.write_seg(v, seg, &slots)?;
                if i == 0 {
                    self.fix_min(v, &m, j, new)?;
                }
                Ok(true)
            }
            Err(i) if (slots.len() as u64) < SEG => {
                slots.insert(i, new);
                self.write_slot_change(v, seg, &slots, i, Some(new))?;
                if i == 0 {
                    self.fix_min(v, &m, j, new)?;
                }
                Ok(false)
            }
            Err(_) => {
                // Full segment: rebalance the smallest window dense enough.
                self.rebalance_around(v, &m, j, Some((key, new)))?;
                Ok(false)
            }
        }
    }

    /// Inserts or replaces, as a *blind* put (see `BTree::put_blind`): a
    /// new key whose segment has a free slot runs as the commit-time
    /// operation [`crate::ops::COBTREE_PUT`] (record allocated from this
    /// thread's arena, slot inserted, index minimum fixed), at once here
    /// and again at commit on the newest committed tree, so concurrent
    /// blind puts of other keys into one segment do not conflict.
    /// Otherwise (the key is present, the segment is full, the arena must
    /// take a chunk) it is an ordinary [`CoBTree::put`].
    pub fn put_blind(&self, v: &mut View, key: &[u8], value: &[u8]) -> Result<()> {
        check_key(key, MAX_KEY)?;
        if value.len() <= BLIND_VALUE_MAX && v.blind_fits() {
            let mut a = Vec::with_capacity(14 + key.len() + value.len());
            a.extend_from_slice(&self.at.to_le_bytes());
            a.extend_from_slice(&(alloc::thread_arena() as u32).to_le_bytes());
            a.extend_from_slice(&(key.len() as u16).to_le_bytes());
            a.extend_from_slice(key);
            a.extend_from_slice(value);
            if v.apply_blind(crate::ops::COBTREE_PUT, &a)? {
                return Ok(());
            }
        }
        self.put(v, key, value).map(|_| ())
    }

    /// Like [`CoBTree::put`], but changes nothing and returns `NeedsSplit`
    /// when the key is new and its segment is full: the caller can then
    /// commit [`CoBTree::rebalance_for`] in a short transaction of its own
    /// and retry, so a rebalance does not ride in a longer transaction.
    pub fn try_put(&self, v: &mut View, key: &[u8], value: &[u8]) -> Result<TryPut> {
        check_key(key, MAX_KEY)?;
        let m = self.meta(v)?;
        let seg = self.segment(v, &m, self.route(v, &m, key)?)?;
        let slots = self.read_seg(v, seg)?;
        let found = self.search(v, &slots, key)?.is_ok();
        if !found && slots.len() as u64 >= SEG {
            return Ok(TryPut::NeedsSplit);
        }
        Ok(if self.put(v, key, value)? {
            TryPut::Replaced
        } else {
            TryPut::Inserted
        })
    }

    /// Makes room in the segment that holds `key` if it is full (a window
    /// rebalance or a doubling), inserting nothing.
    pub fn rebalance_for(&self, v: &mut View, key: &[u8]) -> Result<()> {
        check_key(key, MAX_KEY)?;
        let m = self.meta(v)?;
        let j = self.route(v, &m, key)?;
        if self.read_seg(v, self.segment(v, &m, j)?)?.len() as u64 >= SEG {
            self.rebalance_around(v, &m, j, None)?;
        }
        Ok(())
    }

    /// Spreads the smallest window around segment `j` that stays under its
    /// density bound with `new` added (if any), or doubles the array.
    fn rebalance_around(
        &self,
        v: &mut View,
        m: &Meta,
        j: u64,
        new: Option<(&[u8], Slot)>,
    ) -> Result<()> {
        let add = u64::from(new.is_some());
        for l in 1..m.levels {
            let w = 1u64 << l;
            let a = j / w * w;
            let mut all = self.gather(v, m, a, a + w)?;
            if (all.len() as u64 + add) as f64 <= upper(l, m.levels) * (w * SEG) as f64 {
                if let Some((key, s)) = new {
                    let pos = self.pos_in(v, &all, key)?;
                    all.insert(pos, s);
                }
                return self.spread_window(v, m, a, a + w, &all);
            }
        }
        let mut all = self.gather(v, m, 0, m.n)?;
        if let Some((key, s)) = new {
            let pos = self.pos_in(v, &all, key)?;
            all.insert(pos, s);
        }
        self.build(v, m.n * 2, &all)
    }

    fn pos_in(&self, v: &View, all: &[Slot], key: &[u8]) -> Result<usize> {
        match self.search(v, all, key)? {
            Ok(i) | Err(i) => Ok(i),
        }
    }

    /// Removes `key`; true if it was present.
    pub fn delete(&self, v: &mut View, key: &[u8]) -> Result<bool> {
        check_key(key, MAX_KEY)?;
        let m = self.meta(v)?;
        let j = self.route(v, &m, key)?;
        let seg = self.segment(v, &m, j)?;
        let mut slots = self.read_seg(v, seg)?;
        let Ok(i) = self.search(v, &slots, key)? else {
            return Ok(false);
        };
        alloc::free(v, slots[i].rec)?;
        slots.remove(i);
        self.write_slot_change(v, seg, &slots, i, None)?;
        if i == 0 {
            self.fix_min(v, &m, j, slots.first().copied().unwrap_or_default())?;
        }
        if m.n > 1 && (slots.len() as f64) < lower(0, m.levels) * SEG as f64 {
            for l in 1..m.levels {
                let w = 1u64 << l;
                let a = j / w * w;
                let all = self.gather(v, &m, a, a + w)?;
                if all.len() as f64 >= lower(l, m.levels) * (w * SEG) as f64 {
                    self.spread_window(v, &m, a, a + w, &all)?;
                    return Ok(true);
                }
            }
            let all = self.gather(v, &m, 0, m.n)?;
            self.build(v, m.n / 2, &all)?;
        }
        Ok(true)
    }

    /// Calls `f` for keys in range, in order, until it returns false.
    pub fn scan(
        &self,
        v: &View,
        lo: Bound<&[u8]>,
        hi: Bound<&[u8]>,
        mut f: impl FnMut(&[u8], &[u8]) -> Result<bool>,
    ) -> Result<()> {
        let m = self.meta(v)?;
        let first = match lo {
            Bound::Included(k) | Bound::Excluded(k) => self.route(v, &m, k)?,
            Bound::Unbounded => 0,
        };
        for j in first..m.n {
            for s in self.read_seg(v, self.segment(v, &m, j)?)? {
                let (kl, vl) = self.record(v, s.rec)?;
                let k = v.slice(s.rec + 12, kl as usize)?;
                if !std::ops::RangeBounds::contains(&(lo, Bound::Unbounded), k) {
                    continue;
                }
                if !std::ops::RangeBounds::contains(&(Bound::Unbounded, hi), k) {
                    return Ok(());
                }
                if !f(k, v.slice(s.rec + 12 + kl, vl as usize)?)? {
                    return Ok(());
                }
            }
        }
        Ok(())
    }

    /// Verifies: entries strictly increase across the array and their
    /// prefixes match their keys; segments are packed to the left; every
    /// index node holds its subtree's minimum and every leaf its segment;
    /// records and segments are allocated blocks.
    pub fn check(&self, v: &View) -> Result<CoReport> {
        let m = self.meta(v)?;
        if alloc::usable_size(v, m.index)? < (2 * m.n - 1) * NODE {
            return Err(corrupt(v, m.index, "index block too small"));
        }
        let mut r = CoReport {
            segments: m.n,
            blocks: 2,
            ..Default::default()
        };
        let mut mins = vec![Slot::default(); 2 * m.n as usize];
        let mut prev: Option<Vec<u8>> = None;
        for j in 0..m.n {
            let seg = self.segment(v, &m, j)?;
            if alloc::usable_size(v, seg)? < SEG_BYTES {
                return Err(corrupt(v, seg, "segment block too small"));
            }
            r.blocks += 1;
            let slots = self.read_seg(v, seg)?;
            let rest = v.slice(
                seg + slots.len() as u64 * 16,
                ((SEG - slots.len() as u64) * 16) as usize,
            )?;
            if rest.iter().any(|&b| b != 0) {
                return Err(corrupt(v, seg, "segment not packed to the left"));
            }
            for s in &slots {
                let (kl, vl) = self.record(v, s.rec)?;
                if alloc::usable_size(v, s.rec)? < (12 + kl).saturating_add(vl) {
                    return Err(corrupt(v, s.rec, "record longer than its block"));
                }
                r.blocks += 1;
                let k = self.rec_key(v, s.rec)?.to_vec();
                if prefix(&k) != s.prefix {
                    return Err(corrupt(v, seg, "slot prefix differs from its key"));
                }
                if prev.as_ref().is_some_and(|p| *p >= k) {
                    return Err(corrupt(v, seg, "entries out of order"));
                }
                prev = Some(k);
            }
            r.entries += slots.len() as u64;
            r.max_segment = r.max_segment.max(slots.len() as u64);
            mins[(m.n + j) as usize] = slots.first().copied().unwrap_or_default();
        }
        for i in (1..m.n).rev() {
            let (l, rr) = (mins[2 * i as usize], mins[2 * i as usize + 1]);
            mins[i as usize] = if l.rec != 0 { l } else { rr };
        }
        for i in 1..2 * m.n {
            let (s, seg) = self.node(v, &m, i)?;
            if s != mins[i as usize] {
                return Err(corrupt(
                    v,
                    Self::node_off(&m, i),
                    format!("index node {i} is not its subtree's minimum"),
                ));
            }
            if i < m.n && seg != 0 {
                return Err(corrupt(
                    v,
                    Self::node_off(&m, i),
                    "internal index node names a segment",
                ));
            }
        }
        r.density = r.entries as f64 / (m.n * SEG) as f64;
        Ok(r)
    }
}

/// First entry of part `j` when `total` entries are spread over `parts`.
fn spread(total: u64, parts: u64, j: u64) -> u64 {
    total * j / parts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_is_even() {
        let parts: Vec<u64> = (0..4)
            .map(|j| spread(10, 4, j + 1) - spread(10, 4, j))
            .collect();
        assert_eq!(parts, vec![2, 3, 2, 3]);
    }
}
