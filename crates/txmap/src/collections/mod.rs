//! Transactional collections: a heap allocator and data structures written
//! as ordinary serial code over a region's bytes. Every operation takes a
//! [`View`] and runs inside the caller's transaction, which makes it atomic,
//! isolated, durable and concurrent (docs/COLLECTIONS.md).
//!
//! ```
//! # let dir = std::env::temp_dir().join(format!("txmap-doc-coll-{}", std::process::id()));
//! # std::fs::create_dir_all(&dir).unwrap();
//! use txmap::collections::BTree;
//! let region = txmap::Region::create(&dir.join("t.txm"), 1 << 20, Default::default())?;
//! let mut v = region.view()?;
//! let t = v.run(|v| BTree::create(v))?;
//! v.run(|v| t.put(v, b"apple", b"red"))?;
//! v.begin_read()?;
//! assert_eq!(t.get(&v, b"apple")?.as_deref(), Some(&b"red"[..]));
//! v.commit()?;
//! # drop(v); drop(region); std::fs::remove_dir_all(&dir).unwrap();
//! # Ok::<(), txmap::Error>(())
//! ```

pub mod alloc;
pub mod array;
pub mod btree;
pub mod lhash;
mod node;

pub use alloc::{Kind, alloc, free};
pub use array::ArrayList;
pub use btree::BTree;
pub use lhash::LinearHash;

use std::ops::Bound;

use crate::{Result, View};

/// What a structure's `check` found, in a form common to all kinds.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Report {
    pub entries: u64,
    /// Heap blocks the structure owns.
    pub blocks: u64,
    /// Kind-specific figures, for `txmap check`.
    pub detail: String,
}

/// A scan's callback: gets each key and value, returns false to stop.
pub type Visit<'a> = dyn FnMut(&[u8], &[u8]) -> Result<bool> + 'a;

/// The key-value operations every map structure offers.
pub trait Map {
    /// The value under `key`.
    fn get(&self, v: &View, key: &[u8]) -> Result<Option<Vec<u8>>>;
    /// Inserts or replaces; true if `key` was present.
    fn put(&self, v: &mut View, key: &[u8], value: &[u8]) -> Result<bool>;
    /// Removes; true if `key` was present.
    fn delete(&self, v: &mut View, key: &[u8]) -> Result<bool>;
    /// Calls `f` for the keys in range in key order until it returns false.
    fn scan(&self, v: &View, lo: Bound<&[u8]>, hi: Bound<&[u8]>, f: &mut Visit<'_>) -> Result<()>;
    /// Verifies the structure's invariants.
    fn check(&self, v: &View) -> Result<Report>;
    /// Offset of the structure's header block (what `open` takes).
    fn at(&self) -> u64;
}

impl Map for BTree {
    fn get(&self, v: &View, key: &[u8]) -> Result<Option<Vec<u8>>> {
        BTree::get(self, v, key)
    }
    fn put(&self, v: &mut View, key: &[u8], value: &[u8]) -> Result<bool> {
        BTree::put(self, v, key, value)
    }
    fn delete(&self, v: &mut View, key: &[u8]) -> Result<bool> {
        BTree::delete(self, v, key)
    }
    fn scan(&self, v: &View, lo: Bound<&[u8]>, hi: Bound<&[u8]>, f: &mut Visit<'_>) -> Result<()> {
        BTree::scan(self, v, lo, hi, f)
    }
    fn at(&self) -> u64 {
        self.at
    }
    fn check(&self, v: &View) -> Result<Report> {
        let r = BTree::check(self, v)?;
        Ok(Report {
            entries: r.entries,
            blocks: r.blocks,
            detail: format!(
                "height {}, {} leaves, {} internal nodes, {}% full",
                r.height, r.leaves, r.internal, r.fill_percent
            ),
        })
    }
}

impl Map for LinearHash {
    fn get(&self, v: &View, key: &[u8]) -> Result<Option<Vec<u8>>> {
        LinearHash::get(self, v, key)
    }
    fn put(&self, v: &mut View, key: &[u8], value: &[u8]) -> Result<bool> {
        LinearHash::put(self, v, key, value)
    }
    fn delete(&self, v: &mut View, key: &[u8]) -> Result<bool> {
        LinearHash::delete(self, v, key)
    }
    fn scan(&self, v: &View, lo: Bound<&[u8]>, hi: Bound<&[u8]>, f: &mut Visit<'_>) -> Result<()> {
        LinearHash::scan(self, v, lo, hi, f)
    }
    fn at(&self) -> u64 {
        self.at
    }
    fn check(&self, v: &View) -> Result<Report> {
        let r = LinearHash::check(self, v)?;
        Ok(Report {
            entries: r.entries,
            blocks: r.blocks,
            detail: format!(
                "{} buckets (level {}, split pointer {}), {} overflow pages",
                r.buckets, r.level, r.split, r.overflow_pages
            ),
        })
    }
}
