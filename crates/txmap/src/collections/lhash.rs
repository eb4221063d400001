//! A linear hash table (Litwin 1980; Lemon's "Linear Hash Table"):
//! buckets split one at a time, in order, so the table grows without ever
//! rehashing everything.
//!
//! With `n0` initial buckets, level `l` and split pointer `p`, there are
//! `n0·2^l + p` buckets; key hash `h` lives in bucket `h mod n0·2^l`, or
//! `h mod n0·2^(l+1)` if that is below `p`. When an insert makes a bucket
//! overflow its page, bucket `p` splits (uncontrolled splitting), `p`
//! advances and wraps to 0 with `l + 1`. When a delete leaves its bucket one
//! page under a quarter full, the last bucket merges back into the bucket it
//! was split from while the two fit in half a page (Litwin's merge), down to
//! `n0` buckets.
//!
//! Header (a heap block alone on its page):
//! ```text
//! 0 magic  8 n0  16 level  24 split pointer  32 directory (an ArrayList of u64 bucket pages)
//! ```
//! Bucket page (a heap block of 4080 bytes alone on its page), chained
//! through overflow pages:
//! ```text
//! 0 count u16  2 depth u16 (hash bits that address the bucket)  8 next overflow page u64
//! 16 entries: klen u16, flags u8 (1 = value in a block), 0 u8, vlen u32, key,
//!    value bytes | block offset u64, value length u64
//! ```

use std::ops::Bound;

use super::alloc::{self, PAGE, corrupt, invalid};
use super::array::ArrayList;
use super::format::{Val, cell_at, cell_bytes, inline_at, put_inline_cell, put16, u32_at};
pub use super::lhashop::hash;
use super::lhashop::{
    BUCKET, Entry, H_DIR, H_LEVEL, H_MAGIC, H_N0, H_SPLIT, MAGIC, PAGE_HDR, bucket_of, encode_page,
    parse_page, scan_page,
};
use super::node::check_key;
use crate::{Result, View};

/// Longest key.
pub const MAX_KEY: usize = 512;
/// Longest value kept inside a bucket page.
pub const INLINE_MAX: usize = 512;
/// Most merges one `merge_step` makes: each writes about two pages, so the
/// transaction of a delete stays far below the write-set limit even when a
/// huge table empties at once.
pub const MAX_MERGES: u64 = 4096;

fn entry_bytes(e: &Entry) -> usize {
    cell_bytes(&e.0, &e.1)
}

/// Bytes of a one-page chain holding `ents`.
fn chain_bytes(ents: &[Entry]) -> usize {
    PAGE_HDR + ents.iter().map(entry_bytes).sum::<usize>()
}

/// A linear hash table in a region, named by the offset of its header block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LinearHash {
    pub at: u64,
}

/// What [`LinearHash::check`] found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HashReport {
    pub entries: u64,
    pub buckets: u64,
    pub level: u64,
    pub split: u64,
    pub overflow_pages: u64,
    pub blocks: u64,
}

struct Meta {
    n0: u64,
    level: u64,
    split: u64,
    dir: ArrayList,
}

impl Meta {
    fn buckets(&self) -> u64 {
        (self.n0 << self.level) + self.split
    }
    fn bucket_of(&self, h: u64) -> u64 {
        bucket_of((self.n0, self.level, self.split), h)
    }
}

impl LinearHash {
    /// Creates a table with `n0` initial buckets (a power of two, at least 1).
    pub fn create(v: &mut View, n0: u64) -> Result<LinearHash> {
        if n0 == 0 || !n0.is_power_of_two() || n0 > 1 << 20 {
            return Err(invalid("initial buckets must be a power of two up to 2^20"));
        }
        alloc::init(v)?;
        let at = alloc::alloc(v, BUCKET as u64)?;
        let dir = ArrayList::create(v, 8)?;
        for _ in 0..n0 {
            let b = alloc::alloc(v, BUCKET as u64)?;
            dir.push_pod(v, &b)?;
        }
        v.write(at + H_MAGIC, &MAGIC)?;
        v.write(at + H_N0, &n0)?;
        v.write(at + H_DIR, &dir.at)?;
        Ok(LinearHash { at })
    }

    /// A table with 4 initial buckets.
    pub fn create_default(v: &mut View) -> Result<LinearHash> {
        Self::create(v, 4)
    }

    pub fn open(v: &View, at: u64) -> Result<LinearHash> {
        let t = LinearHash { at };
        t.meta(v)?;
        Ok(t)
    }

    fn meta(&self, v: &View) -> Result<Meta> {
        if v.read::<u64>(self.at + H_MAGIC)? != MAGIC {
            return Err(corrupt(v, self.at, "not a linear hash header"));
        }
        let m = Meta {
            n0: v.read(self.at + H_N0)?,
            level: v.read(self.at + H_LEVEL)?,
            split: v.read(self.at + H_SPLIT)?,
            dir: ArrayList::open(v, v.read(self.at + H_DIR)?)?,
        };
        if m.n0 == 0
            || !m.n0.is_power_of_two()
            || m.n0 > 1 << 20
            || m.level > 40
            || m.split >= m.n0 << m.level
        {
            return Err(corrupt(
                v,
                self.at,
                "bad linear hash level or split pointer",
            ));
        }
        if m.dir.len(v)? != m.buckets() {
            return Err(corrupt(
                v,
                self.at,
                "directory length differs from the bucket count",
            ));
        }
        Ok(m)
    }

    fn bucket_page(&self, v: &View, m: &Meta, b: u64) -> Result<u64> {
        let p: u64 = m.dir.get_pod(v, b)?;
        if p == 0 {
            return Err(corrupt(v, self.at, format!("bucket {b} has no page")));
        }
        Ok(p)
    }

    /// Every entry of a bucket chain, with the chain's pages and the bucket's depth.
    fn read_chain(&self, v: &View, first: u64) -> Result<(Vec<Entry>, Vec<u64>, u16)> {
        let mut ents = Vec::new();
        let mut pages = Vec::new();
        let mut p = first;
        let mut depth = 0;
        while p != 0 {
            if pages.len() as u64 > v.len() as u64 / PAGE {
                return Err(corrupt(v, first, "bucket chain has a cycle"));
            }
            let (e, next, d) = parse_page(v.slice(p, BUCKET)?)
                .ok_or_else(|| corrupt(v, p, "malformed bucket page"))?;
            if pages.is_empty() {
                depth = d;
            } else if d != depth {
                return Err(corrupt(v, p, "overflow page of another depth"));
            }
            ents.extend(e);
            pages.push(p);
            p = next;
        }
        Ok((ents, pages, depth))
    }

    /// Writes `ents` over the chain starting at `pages[0]`, taking or
    /// freeing overflow pages as needed; returns the number of pages. Every
    /// page records the bucket's depth (the hash bits that address it), so a
    /// split always changes the split bucket's first page, even when no
    /// entry moves: a concurrent insert into that bucket then conflicts with
    /// the split under snapshot isolation too (only changed pages count).
    fn write_chain(
        &self,
        v: &mut View,
        ents: &[Entry],
        pages: &[u64],
        depth: u16,
    ) -> Result<usize> {
        let mut groups: Vec<&[Entry]> = Vec::new();
        let (mut start, mut used) = (0, PAGE_HDR);
        for (i, e) in ents.iter().enumerate() {
            if used + entry_bytes(e) > BUCKET {
                groups.push(&ents[start..i]);
                (start, used) = (i, PAGE_HDR);
            }
            used += entry_bytes(e);
        }
        groups.push(&ents[start..]);
        let mut pp = pages.to_vec();
        while pp.len() < groups.len() {
            pp.push(alloc::alloc(v, BUCKET as u64)?);
        }
        for &extra in &pp[groups.len()..] {
            alloc::free(v, extra)?;
        }
        for (i, g) in groups.iter().enumerate() {
            let next = if i + 1 < groups.len() { pp[i + 1] } else { 0 };
            let b = encode_page(g, next, depth);
            v.slice_mut(pp[i], BUCKET)?.copy_from_slice(&b);
        }
        Ok(groups.len())
    }

    pub fn get(&self, v: &View, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let mut out = None;
        self.get_with(v, key, &mut |b| out = Some(b.to_vec()))?;
        Ok(out)
    }

    /// Calls `f` with the value stored under `key`, borrowed from the view
    /// (no copy); false if `key` is absent.
    pub fn get_with(&self, v: &View, key: &[u8], f: &mut dyn FnMut(&[u8])) -> Result<bool> {
        check_key(key, MAX_KEY)?;
        let m = self.meta(v)?;
        let first = self.bucket_page(v, &m, m.bucket_of(hash(key)))?;
        let mut p = first;
        let mut n = 0;
        while p != 0 {
            let b = v.slice(p, BUCKET)?;
            let s = scan_page(b, key).ok_or_else(|| corrupt(v, p, "malformed bucket page"))?;
            if let Some((at, _)) = s.found {
                if let Some(bytes) = inline_at(b, at) {
                    f(bytes);
                } else {
                    let (_, val, _) =
                        cell_at(b, at).ok_or_else(|| corrupt(v, p, "malformed bucket page"))?;
                    val.with(v, f)?;
                }
                return Ok(true);
            }
            p = s.next;
            n += 1;
            if n > v.len() / PAGE as usize {
                return Err(corrupt(v, first, "bucket chain has a cycle"));
            }
        }
        Ok(false)
    }

    /// Inserts or replaces; true if `key` was present. Splits a bucket when
    /// the insert overflowed one.
    pub fn put(&self, v: &mut View, key: &[u8], value: &[u8]) -> Result<bool> {
        let (had, wants_split) = self.put_deferred(v, key, value)?;
        if wants_split {
            self.split_step(v)?;
        }
        Ok(had)
    }

    /// Inserts or replaces without splitting; the second result says the
    /// table wants a split, which the caller may run in a transaction of its
    /// own ([`LinearHash::split_step`]) so that it does not make every
    /// concurrent operation (they all read the header) conflict with the insert.
    pub fn put_deferred(&self, v: &mut View, key: &[u8], value: &[u8]) -> Result<(bool, bool)> {
        check_key(key, MAX_KEY)?;
        let m = self.meta(v)?;
        let first = self.bucket_page(v, &m, m.bucket_of(hash(key)))?;
        if value.len() <= INLINE_MAX
            && let Some(had) = self.put_in_place(v, first, key, value)?
        {
            return Ok((had, false));
        }
        let (mut ents, pages, depth) = self.read_chain(v, first)?;
        let val = Val::store(v, value, INLINE_MAX)?;
        let had = match ents.iter().position(|(k, _)| k == key) {
            Some(i) => {
                let old = std::mem::replace(&mut ents[i].1, val);
                old.release(v)?;
                true
            }
            None => {
                ents.push((key.to_vec(), val));
                false
            }
        };
        let n = self.write_chain(v, &ents, &pages, depth)?;
        Ok((had, !had && n > pages.len()))
    }

    /// Puts an inline value without rewriting the chain: a new key goes at
    /// the end of the first page with room, a value of the same length
    /// overwrites the old one. Writes (and logs) only those bytes and the
    /// page's count. `None` when neither applies (the chain must be rewritten).
    fn put_in_place(
        &self,
        v: &mut View,
        first: u64,
        key: &[u8],
        value: &[u8],
    ) -> Result<Option<bool>> {
        let need = 8 + key.len() + value.len();
        let (mut p, mut hops, mut room) = (first, 0, None);
        while p != 0 {
            let b = v.slice(p, BUCKET)?;
            let s = scan_page(b, key).ok_or_else(|| corrupt(v, p, "malformed bucket page"))?;
            if let Some((at, end)) = s.found {
                let same = b[at + 2] == 0 && u32_at(b, at + 4) == Some(value.len() as u32);
                if !same {
                    return Ok(None);
                }
                let vo = p + (end - value.len()) as u64;
                v.slice_mut(vo, value.len())?.copy_from_slice(value);
                return Ok(Some(true));
            }
            if room.is_none() && s.end + need <= BUCKET {
                room = Some((p, s.end, s.count));
            }
            p = s.next;
            hops += 1;
            if hops > v.len() / PAGE as usize {
                return Err(corrupt(v, first, "bucket chain has a cycle"));
            }
        }
        let Some((p, end, count)) = room else {
            return Ok(None);
        };
        put_inline_cell(v.slice_mut(p + end as u64, need)?, 0, key, value);
        v.write(p, &(count + 1))?;
        Ok(Some(false))
    }

    /// Inserts or replaces, as a *blind* put (see `BTree::put_blind`): when
    /// the value is inline and fits in place (a new key in the first page
    /// of its bucket's chain with room, or a value of the same length) it
    /// runs as the commit-time operation [`crate::ops::LHASH_PUT`], again
    /// at commit on the newest committed table, so concurrent blind puts
    /// of other keys into one bucket (and bucket splits) do not conflict
    /// with it. Otherwise it is an ordinary [`LinearHash::put`].
    pub fn put_blind(&self, v: &mut View, key: &[u8], value: &[u8]) -> Result<()> {
        check_key(key, MAX_KEY)?;
        // Same argument layout as the B+-tree's operations.
        if value.len() <= INLINE_MAX
            && v.blind_fits()
            && v.apply_blind(
                crate::ops::LHASH_PUT,
                &super::leaf::op_args(self.at, key, value),
            )?
        {
            return Ok(());
        }
        self.put(v, key, value).map(|_| ())
    }

    /// Splits the bucket at the split pointer and advances it.
    pub fn split_step(&self, v: &mut View) -> Result<()> {
        let mut m = self.meta(v)?;
        let old = m.split;
        let first = self.bucket_page(v, &m, old)?;
        let (ents, pages, _) = self.read_chain(v, first)?;
        let modulus = m.n0 << (m.level + 1);
        let (stay, go): (Vec<Entry>, Vec<Entry>) = ents
            .into_iter()
            .partition(|(k, _)| hash(k) % modulus == old);
        let newp = alloc::alloc(v, BUCKET as u64)?;
        let depth = u16::try_from(m.level + 1).map_err(|_| corrupt(v, self.at, "level"))?;
        self.write_chain(v, &stay, &pages, depth)?;
        self.write_chain(v, &go, &[newp], depth)?;
        m.dir.push_pod(v, &newp)?;
        m.split += 1;
        if m.split == m.n0 << m.level {
            m.split = 0;
            m.level += 1;
        }
        v.write(self.at + H_LEVEL, &m.level)?;
        v.write(self.at + H_SPLIT, &m.split)?;
        Ok(())
    }

    /// Removes `key`; true if it was present. Merges buckets back when the
    /// delete left its bucket sparse ([`LinearHash::merge_step`]).
    pub fn delete(&self, v: &mut View, key: &[u8]) -> Result<bool> {
        let (had, wants_merge) = self.delete_deferred(v, key)?;
        if wants_merge {
            self.merge_step(v)?;
        }
        Ok(had)
    }

    /// Removes `key` without merging; the second result says the delete
    /// left its bucket one page under a quarter full while the table has
    /// more than `n0` buckets, so [`LinearHash::merge_step`] may shrink it
    /// (in the caller's transaction or one of its own, as for splits).
    pub fn delete_deferred(&self, v: &mut View, key: &[u8]) -> Result<(bool, bool)> {
        check_key(key, MAX_KEY)?;
        let m = self.meta(v)?;
        let first = self.bucket_page(v, &m, m.bucket_of(hash(key)))?;
        let (had, sparse) = match self.delete_in_place(v, first, key)? {
            Some(done) => done,
            None => {
                let (mut ents, pages, depth) = self.read_chain(v, first)?;
                let Some(i) = ents.iter().position(|(k, _)| k == key) else {
                    return Ok((false, false));
                };
                let (_, val) = ents.remove(i);
                val.release(v)?;
                let n = self.write_chain(v, &ents, &pages, depth)?;
                (true, n == 1 && chain_bytes(&ents) < BUCKET / 4)
            }
        };
        Ok((had, sparse && m.buckets() > m.n0))
    }

    /// Deletes from a bucket of one page without decoding it: the last cell
    /// (or, if it is not as long, every cell after the key's) moves into
    /// the key's place, and only those bytes and the count change. Returns
    /// (found, the page is now under a quarter full), or `None` for a chain
    /// of several pages (the caller rewrites it, freeing a page that
    /// empties).
    fn delete_in_place(&self, v: &mut View, page: u64, key: &[u8]) -> Result<Option<(bool, bool)>> {
        let b = v.slice(page, BUCKET)?;
        let s = scan_page(b, key).ok_or_else(|| corrupt(v, page, "malformed bucket page"))?;
        if s.next != 0 {
            return Ok(None);
        }
        let Some((at, end)) = s.found else {
            return Ok(Some((false, false)));
        };
        if inline_at(b, at).is_none() {
            let (_, val, _) =
                cell_at(b, at).ok_or_else(|| corrupt(v, page, "malformed bucket page"))?;
            val.release(v)?;
        }
        // Entries have no order: the last cell fills the hole when it is
        // as long (the usual case, with fixed-size keys and values), so
        // only one cell's bytes change and are logged; else the cells
        // after the hole move down.
        let b = v.slice_mut(page, BUCKET)?;
        if s.end - s.last == end - at {
            b.copy_within(s.last..s.end, at);
        } else {
            b.copy_within(end..s.end, at);
        }
        put16(b, 0, s.count - 1);
        let left = s.end - (end - at);
        Ok(Some((true, left < BUCKET / 4)))
    }

    /// Undoes splits, newest first (Litwin's merge): while the table has
    /// more than `n0` buckets and its last bucket and the bucket it was
    /// split from (its buddy) fit together in half a page, moves the last
    /// bucket's entries into the buddy, frees its pages and moves the split
    /// pointer back; at most [`MAX_MERGES`] of them. Returns the number of
    /// merges. Half a page, not a page,
    /// so that an insert right after a merge cannot split again at once.
    /// A merge writes the header and changes the buddy's first page (its
    /// depth drops) and frees the last bucket's pages, so, like a split, it
    /// conflicts with any concurrent insert or delete in either bucket,
    /// under snapshot isolation too.
    pub fn merge_step(&self, v: &mut View) -> Result<u64> {
        let mut merged = 0;
        loop {
            let m = self.meta(v)?;
            if m.buckets() <= m.n0 || merged == MAX_MERGES {
                return Ok(merged);
            }
            let (level, buddy) = if m.split == 0 {
                (m.level - 1, (m.n0 << (m.level - 1)) - 1)
            } else {
                (m.level, m.split - 1)
            };
            let last = m.buckets() - 1; // = buddy + n0·2^level
            let (lents, lpages, _) = self.read_chain(v, self.bucket_page(v, &m, last)?)?;
            let (mut ents, pages, _) = self.read_chain(v, self.bucket_page(v, &m, buddy)?)?;
            ents.extend(lents);
            if chain_bytes(&ents) > BUCKET / 2 {
                return Ok(merged);
            }
            let depth = u16::try_from(level).map_err(|_| corrupt(v, self.at, "level"))?;
            self.write_chain(v, &ents, &pages, depth)?;
            for p in lpages {
                alloc::free(v, p)?;
            }
            m.dir.pop(v)?;
            v.write(self.at + H_LEVEL, &level)?;
            v.write(self.at + H_SPLIT, &buddy)?;
            merged += 1;
        }
    }

    /// Calls `f` for every entry, bucket by bucket (no order), until it returns false.
    pub fn for_each(
        &self,
        v: &View,
        mut f: impl FnMut(&[u8], &[u8]) -> Result<bool>,
    ) -> Result<()> {
        let m = self.meta(v)?;
        for b in 0..m.buckets() {
            let (ents, _, _) = self.read_chain(v, self.bucket_page(v, &m, b)?)?;
            for (k, val) in ents {
                if !f(&k, &val.load(v)?)? {
                    return Ok(());
                }
            }
        }
        Ok(())
    }

    /// Entries with keys in range, sorted (the table has no order: this reads it all).
    pub fn scan(
        &self,
        v: &View,
        lo: Bound<&[u8]>,
        hi: Bound<&[u8]>,
        mut f: impl FnMut(&[u8], &[u8]) -> Result<bool>,
    ) -> Result<()> {
        let mut all = Vec::new();
        self.for_each(v, |k, val| {
            if std::ops::RangeBounds::contains(&(lo, hi), k) {
                all.push((k.to_vec(), val.to_vec()));
            }
            Ok(true)
        })?;
        all.sort();
        for (k, val) in all {
            if !f(&k, &val)? {
                break;
            }
        }
        Ok(())
    }

    /// Frees every page, value and the directory.
    pub fn destroy(self, v: &mut View) -> Result<()> {
        let m = self.meta(v)?;
        for b in 0..m.buckets() {
            let (ents, pages, _) = self.read_chain(v, self.bucket_page(v, &m, b)?)?;
            for (_, val) in ents {
                val.release(v)?;
            }
            for p in pages {
                alloc::free(v, p)?;
            }
        }
        m.dir.destroy(v)?;
        alloc::free(v, self.at)
    }

    /// Verifies the split state (bucket count = n0·2^level + split, the
    /// directory matches), that every entry lives in the bucket its hash
    /// names, each bucket's depth matches its place (level + 1 below the split
    /// pointer and for the new buckets, level otherwise), keys are unique,
    /// overflow pages are not empty, and blocks are allocated.
    pub fn check(&self, v: &View) -> Result<HashReport> {
        let m = self.meta(v)?;
        let dir = m.dir.check(v)?;
        let mut r = HashReport {
            buckets: m.buckets(),
            level: m.level,
            split: m.split,
            blocks: 1 + 1 + dir.segments,
            ..Default::default()
        };
        let mut keys = std::collections::HashSet::new();
        for b in 0..m.buckets() {
            let first = self.bucket_page(v, &m, b)?;
            let (_, pages, depth) = self.read_chain(v, first)?;
            let want = if b < m.split || b >= m.n0 << m.level {
                m.level + 1
            } else {
                m.level
            };
            if u64::from(depth) != want {
                return Err(corrupt(
                    v,
                    first,
                    format!("bucket {b} has depth {depth}, its place says {want}"),
                ));
            }
            for (i, &p) in pages.iter().enumerate() {
                if alloc::usable_size(v, p)? < BUCKET as u64 {
                    return Err(corrupt(v, p, "bucket page is not a page block"));
                }
                let (ents, _, _) = parse_page(v.slice(p, BUCKET)?)
                    .ok_or_else(|| corrupt(v, p, "malformed bucket page"))?;
                if i > 0 && ents.is_empty() {
                    return Err(corrupt(v, p, "empty overflow page"));
                }
                for (k, val) in &ents {
                    if m.bucket_of(hash(k)) != b {
                        return Err(corrupt(
                            v,
                            p,
                            format!("entry in bucket {b} hashes elsewhere"),
                        ));
                    }
                    if !keys.insert(k.clone()) {
                        return Err(corrupt(v, p, "key stored twice"));
                    }
                    r.blocks += val.check(v)?;
                }
                r.entries += ents.len() as u64;
            }
            r.overflow_pages += pages.len() as u64 - 1;
            r.blocks += pages.len() as u64;
        }
        Ok(r)
    }
}
