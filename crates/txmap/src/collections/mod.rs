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
mod allocop;
pub mod array;
pub(crate) mod arrayop;
pub mod btree;
pub mod cobtree;
pub(crate) mod cobtreeop;
mod format;
pub(crate) mod leaf;
pub mod lhash;
pub(crate) mod lhashop;
mod node;
pub(crate) mod segment;

pub use alloc::{Kind, alloc, free};
pub use array::ArrayList;
pub use btree::BTree;
pub use cobtree::CoBTree;
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
    /// Calls `f` with the value under `key`, borrowed where the structure
    /// can (no copy); false if `key` is absent.
    fn get_with(&self, v: &View, key: &[u8], f: &mut dyn FnMut(&[u8])) -> Result<bool> {
        Ok(self.get(v, key)?.map(|b| f(&b)).is_some())
    }
    /// Inserts or replaces; true if `key` was present.
    fn put(&self, v: &mut View, key: &[u8], value: &[u8]) -> Result<bool>;
    /// Inserts or replaces without telling whether `key` was present (a
    /// blind put): structures that can run it as a commit-time operation
    /// (`BTree::put_blind`) do, so it does not conflict with concurrent
    /// puts of other keys; the others put as usual.
    fn put_blind(&self, v: &mut View, key: &[u8], value: &[u8]) -> Result<()> {
        self.put(v, key, value).map(|_| ())
    }
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
    fn get_with(&self, v: &View, key: &[u8], f: &mut dyn FnMut(&[u8])) -> Result<bool> {
        BTree::get_with(self, v, key, f)
    }
    fn put(&self, v: &mut View, key: &[u8], value: &[u8]) -> Result<bool> {
        BTree::put(self, v, key, value)
    }
    fn put_blind(&self, v: &mut View, key: &[u8], value: &[u8]) -> Result<()> {
        BTree::put_blind(self, v, key, value)
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
    fn get_with(&self, v: &View, key: &[u8], f: &mut dyn FnMut(&[u8])) -> Result<bool> {
        LinearHash::get_with(self, v, key, f)
    }
    fn put(&self, v: &mut View, key: &[u8], value: &[u8]) -> Result<bool> {
        LinearHash::put(self, v, key, value)
    }
    fn put_blind(&self, v: &mut View, key: &[u8], value: &[u8]) -> Result<()> {
        LinearHash::put_blind(self, v, key, value)
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

impl Map for CoBTree {
    fn get(&self, v: &View, key: &[u8]) -> Result<Option<Vec<u8>>> {
        CoBTree::get(self, v, key)
    }
    fn put(&self, v: &mut View, key: &[u8], value: &[u8]) -> Result<bool> {
        CoBTree::put(self, v, key, value)
    }
    fn put_blind(&self, v: &mut View, key: &[u8], value: &[u8]) -> Result<()> {
        CoBTree::put_blind(self, v, key, value)
    }
    fn delete(&self, v: &mut View, key: &[u8]) -> Result<bool> {
        CoBTree::delete(self, v, key)
    }
    fn scan(&self, v: &View, lo: Bound<&[u8]>, hi: Bound<&[u8]>, f: &mut Visit<'_>) -> Result<()> {
        CoBTree::scan(self, v, lo, hi, f)
    }
    fn at(&self) -> u64 {
        self.at
    }
    fn check(&self, v: &View) -> Result<Report> {
        let r = CoBTree::check(self, v)?;
        Ok(Report {
            entries: r.entries,
            blocks: r.blocks,
            detail: format!(
                "{} segments of {} slots, density {:.2}, fullest segment {}",
                r.segments,
                cobtree::SEG,
                r.density,
                r.max_segment
            ),
        })
    }
}

/// A structure of the catalog, opened: the one place that maps a [`Kind`]
/// to its type (with `AnyMap::create_named`, which builds one).
pub enum Structure {
    Map(AnyMap),
    Array(ArrayList),
}

impl Structure {
    /// Opens the structure of kind `kind` whose header block is at `at`.
    pub fn open(v: &View, kind: Kind, at: u64) -> Result<Structure> {
        Ok(match kind {
            Kind::BTree => Structure::Map(AnyMap::BTree(BTree::open(v, at)?)),
            Kind::CoBTree => Structure::Map(AnyMap::CoBTree(CoBTree::open(v, at)?)),
            Kind::LinearHash => Structure::Map(AnyMap::LinearHash(LinearHash::open(v, at)?)),
            Kind::Array => Structure::Array(ArrayList::open(v, at)?),
        })
    }

    /// Verifies the structure's invariants.
    pub fn check(&self, v: &View) -> Result<Report> {
        match self {
            Structure::Map(m) => m.check(v),
            Structure::Array(a) => {
                let r = a.check(v)?;
                Ok(Report {
                    entries: r.len,
                    blocks: 1 + r.segments,
                    detail: format!(
                        "{}-byte elements, capacity {} in {} segments",
                        r.elem_size, r.capacity, r.segments
                    ),
                })
            }
        }
    }
}

/// A map structure of any kind, as found in the catalog.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AnyMap {
    BTree(BTree),
    CoBTree(CoBTree),
    LinearHash(LinearHash),
}

impl AnyMap {
    /// Opens the map structure with this name, if the catalog has one.
    pub fn open_named(v: &View, name: &str) -> Result<Option<AnyMap>> {
        let Some(e) = alloc::lookup(v, name)? else {
            return Ok(None);
        };
        match Structure::open(v, e.kind, e.at)? {
            Structure::Map(m) => Ok(Some(m)),
            Structure::Array(_) => Err(crate::Error::Invalid(format!(
                "structure {name:?} is a {}, not a map",
                e.kind.name()
            ))),
        }
    }

    /// Creates a map structure and enters it in the catalog under `name`.
    pub fn create_named(v: &mut View, name: &str, kind: Kind) -> Result<AnyMap> {
        if kind == Kind::Array {
            return Err(crate::Error::Invalid(format!(
                "a {} is not a map",
                kind.name()
            )));
        }
        alloc::init(v)?;
        let m = match kind {
            Kind::BTree => AnyMap::BTree(BTree::create(v)?),
            Kind::CoBTree => AnyMap::CoBTree(CoBTree::create(v)?),
            Kind::LinearHash | Kind::Array => AnyMap::LinearHash(LinearHash::create_default(v)?),
        };
        alloc::register(v, name, kind, m.at())?;
        Ok(m)
    }

    /// Opens `name`, creating it as `kind` if absent.
    pub fn open_or_create(v: &mut View, name: &str, kind: Kind) -> Result<AnyMap> {
        match Self::open_named(v, name)? {
            Some(m) => Ok(m),
            None => Self::create_named(v, name, kind),
        }
    }

    fn inner(&self) -> &dyn Map {
        match self {
            AnyMap::BTree(m) => m,
            AnyMap::CoBTree(m) => m,
            AnyMap::LinearHash(m) => m,
        }
    }
}

impl Map for AnyMap {
    fn get(&self, v: &View, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.inner().get(v, key)
    }
    fn get_with(&self, v: &View, key: &[u8], f: &mut dyn FnMut(&[u8])) -> Result<bool> {
        self.inner().get_with(v, key, f)
    }
    fn put(&self, v: &mut View, key: &[u8], value: &[u8]) -> Result<bool> {
        self.inner().put(v, key, value)
    }
    fn put_blind(&self, v: &mut View, key: &[u8], value: &[u8]) -> Result<()> {
        self.inner().put_blind(v, key, value)
    }
    fn delete(&self, v: &mut View, key: &[u8]) -> Result<bool> {
        self.inner().delete(v, key)
    }
    fn scan(&self, v: &View, lo: Bound<&[u8]>, hi: Bound<&[u8]>, f: &mut Visit<'_>) -> Result<()> {
        self.inner().scan(v, lo, hi, f)
    }
    fn at(&self) -> u64 {
        self.inner().at()
    }
    fn check(&self, v: &View) -> Result<Report> {
        self.inner().check(v)
    }
}

/// What [`check_region`] found: the heap, then each catalog entry.
pub struct RegionCheck {
    pub heap: Result<alloc::HeapReport>,
    pub structures: Vec<(alloc::Entry, Result<Report>)>,
    /// Blocks in use that no structure or the root object owns (a leak), when
    /// everything else checked.
    pub unowned_blocks: Option<u64>,
}

/// Checks the heap and every structure in the catalog (inside a read-only
/// transaction, so a consistent snapshot). `Ok(None)`: the region has no heap.
pub fn check_region(v: &mut View) -> Result<Option<RegionCheck>> {
    v.begin_read()?;
    let r = check_region_in(v);
    v.commit()?;
    r
}

pub(crate) fn check_region_in(v: &View) -> Result<Option<RegionCheck>> {
    if !alloc::is_formatted(v)? {
        return Ok(None);
    }
    let heap = alloc::check(v);
    let mut structures = Vec::new();
    for e in alloc::catalog(v)? {
        let rep = Structure::open(v, e.kind, e.at).and_then(|s| s.check(v));
        structures.push((e, rep));
    }
    let unowned_blocks = match &heap {
        Ok(h) if structures.iter().all(|(_, r)| r.is_ok()) => {
            let owned: u64 = structures
                .iter()
                .map(|(_, r)| r.as_ref().map_or(0, |r| r.blocks))
                .sum::<u64>()
                + u64::from(alloc::root_offset(v)?.is_some());
            Some(h.used_blocks.saturating_sub(owned))
        }
        _ => None,
    };
    Ok(Some(RegionCheck {
        heap,
        structures,
        unowned_blocks,
    }))
}
