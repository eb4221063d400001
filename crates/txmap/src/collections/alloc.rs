//! The transactional heap: blocks inside a region, addressed by offset.
//!
//! Every byte of bookkeeping lives in the region and is changed only inside
//! the caller's transaction, so an aborted transaction's allocations vanish
//! with it and a committed free is as durable as the commit.
//!
//! Layout (docs/FORMAT.md, "Collections"):
//! - page 0, the heap header: magic, layout version, arena count, `top`
//!   (end of the part of the region handed out as chunks). Written only when
//!   an arena takes a new chunk.
//! - page 1, the catalog: the root object and named structures. Written only
//!   when a structure is created or the root object is first allocated.
//! - pages 2..2+ARENAS, one arena header each: a bump range (`cur..end`) and
//!   segregated free lists, one per power-of-two size class. A thread uses one
//!   arena (round robin), so concurrent allocating transactions in different
//!   threads touch different pages and do not conflict.
//! - the heap, from page 2+ARENAS to `top`: blocks of `32 << class` bytes
//!   with a 16-byte header (free-list link, then a tagged word: magic, class,
//!   state, arena), aligned to their size up to a page. The heap is tiled by
//!   blocks exactly, except each arena's unused bump range.
//!
//! Freed blocks are zeroed (a reader of a stale pointer sees zeros; the
//! stores make a free conflict with concurrent readers of the block) and go
//! on the freeing thread's arena's list. Blocks are never coalesced.

use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::{Error, Result, View};

use super::allocop::{
    A_CUR, A_END, A_HEADS, A_MAGIC, A_USED_BLOCKS, A_USED_BYTES, ARENA_MAGIC, ARENA0, BLOCK_MAGIC,
    STATE_FREE, STATE_USED, arena_off, block_size, class_for, meta,
};
pub use super::allocop::{ARENAS, CLASSES, HEAP_START, MAX_ALLOC};
pub(crate) use super::format::invalid;
pub use super::format::{BLOCK_HEADER, PAGE};

const HEAP_MAGIC: u64 = u64::from_le_bytes(*b"TXMHEAP1");
const CATALOG_MAGIC: u64 = u64::from_le_bytes(*b"TXMCATL1");
const LAYOUT_VERSION: u64 = 1;

pub(crate) const CATALOG: u64 = PAGE;
/// Bytes an arena takes from the heap at a time (more for a large block).
const CHUNK: u64 = 256 * 1024;

// Heap header fields.
const H_MAGIC: u64 = 0;
const H_VERSION: u64 = 8;
const H_ARENAS: u64 = 16;
const H_TOP: u64 = 24;
// Catalog fields.
const C_MAGIC: u64 = 0;
const C_ROOT: u64 = 8;
const C_ROOT_SIZE: u64 = 16;
const C_ENTRIES: u64 = 64;
const ENTRY: u64 = 48;
/// Longest structure name in the catalog.
pub const MAX_NAME: usize = 32;
/// Entries the catalog holds.
pub const CATALOG_ENTRIES: u64 = (PAGE - C_ENTRIES) / ENTRY;

pub(crate) fn corrupt(v: &View, off: u64, what: impl Into<String>) -> Error {
    Error::Corrupt {
        path: v.region().path().to_path_buf(),
        offset: off,
        what: what.into(),
        lost: None,
    }
}

struct Meta {
    class: u64,
    state: u64,
}

fn decode_meta(v: &View, block: u64) -> Result<Meta> {
    let m: u64 = v.read(block + 8)?;
    let (class, state) = (m & 0xffff, (m >> 16) & 0xff);
    if m >> 48 != BLOCK_MAGIC || class as usize >= CLASSES || !(1..=2).contains(&state) {
        return Err(corrupt(v, block, format!("bad block header {m:#x}")));
    }
    Ok(Meta { class, state })
}

static NEXT_ARENA: AtomicUsize = AtomicUsize::new(0);
thread_local! {
    static ARENA: Cell<Option<u64>> = const { Cell::new(None) };
}

/// The arena this thread allocates from (round robin over threads, offset
/// by the process id so that processes spread too).
pub fn thread_arena() -> u64 {
    ARENA.with(|a| match a.get() {
        Some(x) => x,
        None => {
            let n = NEXT_ARENA.fetch_add(1, Ordering::Relaxed) as u64 + std::process::id() as u64;
            let x = n % ARENAS;
            a.set(Some(x));
            x
        }
    })
}

/// Makes this thread allocate from arena `a % ARENAS` (tests, benchmarks).
pub fn set_thread_arena(a: u64) {
    ARENA.with(|c| c.set(Some(a % ARENAS)));
}

/// True if the region holds a heap.
pub fn is_formatted(v: &View) -> Result<bool> {
    if (v.len() as u64) < HEAP_START {
        return Ok(false);
    }
    Ok(v.read::<u64>(H_MAGIC)? == HEAP_MAGIC)
}

/// Formats the heap if the region has none (inside a transaction); checks it otherwise.
pub fn init(v: &mut View) -> Result<()> {
    if (v.len() as u64) < HEAP_START + CHUNK {
        v.grow(HEAP_START + CHUNK)?;
    }
    if is_formatted(v)? {
        return open(v);
    }
    if v.slice(0, HEAP_START as usize)?.iter().any(|&b| b != 0) {
        return Err(invalid(
            "the region holds data but no txmap heap; collections need a fresh region",
        ));
    }
    v.write(H_MAGIC, &HEAP_MAGIC)?;
    v.write(H_VERSION, &LAYOUT_VERSION)?;
    v.write(H_ARENAS, &ARENAS)?;
    v.write(H_TOP, &HEAP_START)?;
    v.write(CATALOG + C_MAGIC, &CATALOG_MAGIC)?;
    for a in 0..ARENAS {
        let o = arena_off(a);
        v.write(o + A_MAGIC, &ARENA_MAGIC)?;
        v.write(o + A_CUR, &HEAP_START)?;
        v.write(o + A_END, &HEAP_START)?;
    }
    Ok(())
}

/// Checks that the region holds a heap of this layout.
pub fn open(v: &View) -> Result<()> {
    if !is_formatted(v)? {
        return Err(invalid(
            "the region holds no txmap heap (create a structure first)",
        ));
    }
    let ver: u64 = v.read(H_VERSION)?;
    let arenas: u64 = v.read(H_ARENAS)?;
    if ver != LAYOUT_VERSION || arenas != ARENAS {
        return Err(corrupt(
            v,
            0,
            format!(
                "heap layout version {ver} with {arenas} arenas; expected {LAYOUT_VERSION} with {ARENAS}"
            ),
        ));
    }
    if v.read::<u64>(CATALOG + C_MAGIC)? != CATALOG_MAGIC {
        return Err(corrupt(v, CATALOG, "bad catalog magic"));
    }
    Ok(())
}

/// Allocates `size` zeroed bytes; returns the offset of the first. The
/// allocation is part of the current transaction. The first allocation in a
/// fresh region formats the heap.
pub fn alloc(v: &mut View, size: u64) -> Result<u64> {
    alloc_in(v, size, thread_arena())
}

/// [`alloc`] from arena `a % ARENAS` instead of this thread's (the LIBXAC
/// calls pick one per view, so per process).
pub fn alloc_in(v: &mut View, size: u64, a: u64) -> Result<u64> {
    let class = class_for(size)?;
    let a = a % ARENAS;
    let ao = arena_off(a);
    if (v.len() as u64) < HEAP_START || v.read::<u64>(ao + A_MAGIC)? != ARENA_MAGIC {
        if is_formatted(v)? {
            return Err(corrupt(v, ao, "bad arena magic"));
        }
        init(v)?; // the first allocation formats the heap
    }
    let head_at = ao + A_HEADS + class * 8;
    let head: u64 = v.read(head_at)?;
    let block = if head != 0 {
        check_block_addr(v, head)?;
        let m = decode_meta(v, head)?;
        if m.state != STATE_FREE || m.class != class {
            return Err(corrupt(
                v,
                head,
                "free list holds a block that is not free or of another class",
            ));
        }
        let next: u64 = v.read(head)?;
        v.write(head_at, &next)?;
        head
    } else {
        bump(v, a, class)?
    };
    v.write(block, &0u64)?;
    v.write(block + 8, &meta(class, STATE_USED, a))?;
    let n: u64 = v.read(ao + A_USED_BLOCKS)?;
    // An arena's counts may be below zero (wrapped): a block is counted
    // off by the arena of the thread that frees it (their sum is right).
    v.write(ao + A_USED_BLOCKS, &n.wrapping_add(1))?;
    let b: u64 = v.read(ao + A_USED_BYTES)?;
    v.write(ao + A_USED_BYTES, &b.wrapping_add(block_size(class)))?;
    Ok(block + BLOCK_HEADER)
}

/// Checks that `block` can be a block offset. Bounded by the region's size,
/// not the heap top: reading the top (page 0) in every allocation would make
/// every allocating transaction conflict with any arena taking a new chunk.
fn block_addr_ok(v: &View, block: u64) -> bool {
    block >= HEAP_START && block < v.len() as u64 && block.is_multiple_of(32)
}

fn check_block_addr(v: &View, block: u64) -> Result<()> {
    if !block_addr_ok(v, block) {
        return Err(corrupt(
            v,
            block,
            format!("block offset outside the heap (from {HEAP_START})"),
        ));
    }
    Ok(())
}

/// Puts `[from, to)` on arena `a`'s free lists as aligned blocks.
fn carve(v: &mut View, a: u64, mut from: u64, to: u64) -> Result<()> {
    let ao = arena_off(a);
    while from < to {
        let class = (0..CLASSES as u64)
            .rev()
            .find(|&k| {
                let bs = block_size(k);
                from.is_multiple_of(bs.min(PAGE)) && from + bs <= to
            })
            .ok_or_else(|| corrupt(v, ao, "arena range not 32-byte aligned"))?;
        let head_at = ao + A_HEADS + class * 8;
        let head: u64 = v.read(head_at)?;
        v.write(from, &head)?;
        v.write(from + 8, &meta(class, STATE_FREE, a))?;
        v.write(head_at, &from)?;
        from += block_size(class);
    }
    Ok(())
}

/// The size a full heap grows its region of `len` bytes to (at least):
/// doubling up to 64 MiB, then a sixteenth more each time (at most 1 GiB),
/// so a large region's file is at most 6.25 % larger than its heap, and a
/// small one grows in few steps (each grow extends and allocates the file
/// and remaps it in every process).
fn grown_size(len: u64) -> u64 {
    let step = if len < 64 << 20 { len } else { len / 16 };
    len.saturating_add(step.clamp(CHUNK, 1 << 30))
        .next_multiple_of(CHUNK)
}

fn bump(v: &mut View, a: u64, class: u64) -> Result<u64> {
    let ao = arena_off(a);
    let bs = block_size(class);
    let align = bs.min(PAGE);
    let cur: u64 = v.read(ao + A_CUR)?;
    let end: u64 = v.read(ao + A_END)?;
    let start = cur.next_multiple_of(align);
    if start + bs <= end {
        carve(v, a, cur, start)?;
        v.write(ao + A_CUR, &(start + bs))?;
        return Ok(start);
    }
    // Give the rest of the chunk to the free lists and take a new one.
    carve(v, a, cur, end)?;
    let top: u64 = v.read(H_TOP)?;
    let chunk = CHUNK.max(bs);
    let new_top = top
        .checked_add(chunk)
        .ok_or_else(|| invalid("heap offset overflow"))?;
    if new_top > v.len() as u64 {
        let want = new_top.max(grown_size(v.len() as u64));
        // The step may pass the region's maximum size where the chunk alone fits.
        v.grow(want).or_else(|_| v.grow(new_top))?;
    }
    v.write(H_TOP, &new_top)?;
    v.write(ao + A_CUR, &(top + bs))?;
    v.write(ao + A_END, &new_top)?;
    Ok(top)
}

/// Frees the block at `off` (as returned by [`alloc`]): zeroes it and puts it
/// on this thread's arena's free list, in the current transaction.
pub fn free(v: &mut View, off: u64) -> Result<()> {
    free_in(v, off, thread_arena())
}

/// [`free`] onto arena `a % ARENAS`'s free list instead of this thread's.
pub fn free_in(v: &mut View, off: u64, a: u64) -> Result<()> {
    let not_block = || invalid(format!("free of offset {off}: not an allocated heap block"));
    let block = off.checked_sub(BLOCK_HEADER).ok_or_else(not_block)?;
    if !block_addr_ok(v, block) {
        return Err(not_block());
    }
    // A malformed header here is most likely a wrong offset, not damage.
    let m = decode_meta(v, block).map_err(|_| not_block())?;
    if m.state != STATE_USED {
        return Err(invalid(format!(
            "free of offset {off}: block is already free"
        )));
    }
    let bs = block_size(m.class);
    // A header the heap wrote sits aligned to its class, inside the region:
    // a block-like pattern in user data elsewhere is refused, not freed.
    if !block.is_multiple_of(bs.min(PAGE)) || block + bs > v.len() as u64 {
        return Err(not_block());
    }
    v.slice_mut(off, (bs - BLOCK_HEADER) as usize)?.fill(0);
    let a = a % ARENAS;
    let ao = arena_off(a);
    let head_at = ao + A_HEADS + m.class * 8;
    let head: u64 = v.read(head_at)?;
    v.write(block, &head)?;
    v.write(block + 8, &meta(m.class, STATE_FREE, a))?;
    v.write(head_at, &block)?;
    // Usage counters are per arena and may go negative in one (freed
    // elsewhere than allocated); the sum over arenas is what holds.
    let n: u64 = v.read(ao + A_USED_BLOCKS)?;
    v.write(ao + A_USED_BLOCKS, &n.wrapping_sub(1))?;
    let b: u64 = v.read(ao + A_USED_BYTES)?;
    v.write(ao + A_USED_BYTES, &b.wrapping_sub(bs))?;
    Ok(())
}

/// Usable bytes of the allocated block at `off`.
pub fn usable_size(v: &View, off: u64) -> Result<u64> {
    let block = off
        .checked_sub(BLOCK_HEADER)
        .ok_or_else(|| invalid(format!("offset {off}: not a heap block")))?;
    check_block_addr(v, block)?;
    let m = decode_meta(v, block)?;
    if m.state != STATE_USED {
        return Err(corrupt(v, block, "block is free"));
    }
    Ok(block_size(m.class) - BLOCK_HEADER)
}

/// The region's root object: `size` zeroed bytes allocated on first use
/// (formatting the heap if needed); later calls return the same offset and
/// fail if `size` is larger than the first.
pub fn root(v: &mut View, size: u64) -> Result<u64> {
    root_in(v, size, thread_arena())
}

/// [`root`], allocating it (on first use) from arena `a % ARENAS`.
pub fn root_in(v: &mut View, size: u64, a: u64) -> Result<u64> {
    // Only the catalog page is read once the heap exists: page 0 changes
    // whenever an arena takes a chunk.
    if !catalog_ok(v)? {
        init(v)?;
    }
    let r: u64 = v.read(CATALOG + C_ROOT)?;
    if r != 0 {
        let have: u64 = v.read(CATALOG + C_ROOT_SIZE)?;
        if size > have {
            return Err(invalid(format!(
                "root object has {have} bytes, {size} asked"
            )));
        }
        return Ok(r);
    }
    let r = alloc_in(v, size, a)?;
    v.write(CATALOG + C_ROOT, &r)?;
    v.write(CATALOG + C_ROOT_SIZE, &size)?;
    Ok(r)
}

/// The root object's offset, if it was allocated.
pub fn root_offset(v: &View) -> Result<Option<u64>> {
    if !catalog_ok(v)? {
        open(v)?;
    }
    let r: u64 = v.read(CATALOG + C_ROOT)?;
    Ok((r != 0).then_some(r))
}

/// The kind of a named structure in the catalog.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum Kind {
    BTree = 1,
    CoBTree = 2,
    LinearHash = 3,
    Array = 4,
}

/// What the catalog and the tools know of each kind: its number in the
/// catalog (`as u32`) and its name (`txmap kv --kind`, `txmap check`). The
/// one table of kinds: adding a structure is a variant, a row here, and
/// its arms in `collections::Structure::open` and `AnyMap` (mod.rs).
const KINDS: [(Kind, &str); 4] = [
    (Kind::BTree, "btree"),
    (Kind::CoBTree, "cobtree"),
    (Kind::LinearHash, "lhash"),
    (Kind::Array, "array"),
];

impl Kind {
    /// Every kind, in catalog-number order.
    pub const ALL: [Kind; 4] = [Kind::BTree, Kind::CoBTree, Kind::LinearHash, Kind::Array];

    fn row(self) -> (Kind, &'static str) {
        KINDS
            .into_iter()
            .find(|r| r.0 == self)
            .expect("every kind has a row (tested)")
    }

    /// The kind whose catalog number is `x`.
    pub fn from_u32(x: u32) -> Option<Kind> {
        KINDS.into_iter().map(|r| r.0).find(|&k| k as u32 == x)
    }

    pub fn name(self) -> &'static str {
        self.row().1
    }

    /// The kind named `s` (as `name` gives it).
    pub fn parse(s: &str) -> Option<Kind> {
        KINDS.into_iter().find(|r| r.1 == s).map(|r| r.0)
    }
}

#[cfg(test)]
mod kind_tests {
    use super::*;

    /// The table has every kind once, numbered 1.. without gaps, with
    /// distinct names (the match stops compiling when a kind is added,
    /// until it is listed in `Kind::ALL`).
    #[test]
    fn every_kind_has_one_row() {
        let listed = |k: Kind| match k {
            Kind::BTree | Kind::CoBTree | Kind::LinearHash | Kind::Array => k,
        };
        let all: Vec<Kind> = Kind::ALL.into_iter().map(listed).collect();
        let rows: Vec<Kind> = KINDS.iter().map(|r| r.0).collect();
        assert_eq!(all, rows);
        for (i, k) in Kind::ALL.into_iter().enumerate() {
            assert_eq!(k as u32, i as u32 + 1);
            assert_eq!(Kind::from_u32(k as u32), Some(k));
            assert_eq!(Kind::parse(k.name()), Some(k));
        }
        assert_eq!(Kind::from_u32(0), None);
        assert_eq!(Kind::from_u32(Kind::ALL.len() as u32 + 1), None);
    }
}

/// A named structure.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub name: String,
    pub kind: Kind,
    /// Offset of the structure's header block.
    pub at: u64,
}

/// True if the catalog page is in place (reads page 1 only).
fn catalog_ok(v: &View) -> Result<bool> {
    Ok((v.len() as u64) >= HEAP_START && v.read::<u64>(CATALOG + C_MAGIC)? == CATALOG_MAGIC)
}

/// Every named structure in the catalog.
pub fn catalog(v: &View) -> Result<Vec<Entry>> {
    if !catalog_ok(v)? {
        open(v)?; // the precise error
        return Err(corrupt(v, CATALOG, "bad catalog magic"));
    }
    let mut out = Vec::new();
    for i in 0..CATALOG_ENTRIES {
        let e = CATALOG + C_ENTRIES + i * ENTRY;
        let kind: u32 = v.read(e + MAX_NAME as u64)?;
        if kind == 0 {
            continue;
        }
        let kind = Kind::from_u32(kind)
            .ok_or_else(|| corrupt(v, e, format!("unknown structure kind {kind}")))?;
        let raw = v.slice(e, MAX_NAME)?;
        let len = raw.iter().position(|&b| b == 0).unwrap_or(MAX_NAME);
        let name = std::str::from_utf8(&raw[..len])
            .map_err(|_| corrupt(v, e, "structure name is not UTF-8"))?
            .to_string();
        let at: u64 = v.read(e + MAX_NAME as u64 + 8)?;
        out.push(Entry { name, kind, at });
    }
    Ok(out)
}

/// Looks a structure up by name.
pub fn lookup(v: &View, name: &str) -> Result<Option<Entry>> {
    if !catalog_ok(v)? && !is_formatted(v)? {
        return Ok(None);
    }
    Ok(catalog(v)?.into_iter().find(|e| e.name == name))
}

/// Adds a named structure to the catalog (the name must be new).
pub fn register(v: &mut View, name: &str, kind: Kind, at: u64) -> Result<()> {
    if name.is_empty() || name.len() > MAX_NAME || name.contains('\0') {
        return Err(invalid(format!(
            "structure name must be 1..={MAX_NAME} bytes without NUL"
        )));
    }
    if lookup(v, name)?.is_some() {
        return Err(invalid(format!("a structure named {name:?} exists")));
    }
    for i in 0..CATALOG_ENTRIES {
        let e = CATALOG + C_ENTRIES + i * ENTRY;
        if v.read::<u32>(e + MAX_NAME as u64)? == 0 {
            let s = v.slice_mut(e, MAX_NAME)?;
            s.fill(0);
            s[..name.len()].copy_from_slice(name.as_bytes());
            v.write(e + MAX_NAME as u64, &(kind as u32))?;
            v.write(e + MAX_NAME as u64 + 8, &at)?;
            return Ok(());
        }
    }
    Err(invalid(format!(
        "the catalog is full ({CATALOG_ENTRIES} structures)"
    )))
}

/// Removes a name from the catalog (the structure itself is not freed).
pub fn unregister(v: &mut View, name: &str) -> Result<bool> {
    for i in 0..CATALOG_ENTRIES {
        let e = CATALOG + C_ENTRIES + i * ENTRY;
        if v.read::<u32>(e + MAX_NAME as u64)? == 0 {
            continue;
        }
        let raw = v.slice(e, MAX_NAME)?;
        let len = raw.iter().position(|&b| b == 0).unwrap_or(MAX_NAME);
        if &raw[..len] == name.as_bytes() {
            v.slice_mut(e, ENTRY as usize)?.fill(0);
            return Ok(true);
        }
    }
    Ok(false)
}

/// What [`check`] found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HeapReport {
    pub top: u64,
    pub used_blocks: u64,
    pub used_bytes: u64,
    pub free_blocks: u64,
    pub free_bytes: u64,
}

/// Verifies the heap: blocks tile `[HEAP_START, top)` apart from the arenas'
/// bump ranges, every free block is on exactly one free list of its class and
/// is zero, the list lengths and usage counters add up.
pub fn check(v: &View) -> Result<HeapReport> {
    open(v)?;
    let top: u64 = v.read(H_TOP)?;
    if top < HEAP_START || top > v.len() as u64 || !top.is_multiple_of(PAGE) {
        return Err(corrupt(v, H_TOP, format!("heap top {top} out of range")));
    }
    let mut holes = std::collections::BTreeMap::new();
    let mut counted_blocks = 0u64;
    let mut counted_bytes = 0u64;
    let mut listed = std::collections::HashSet::new();
    for a in 0..ARENAS {
        let ao = arena_off(a);
        if v.read::<u64>(ao + A_MAGIC)? != ARENA_MAGIC {
            return Err(corrupt(v, ao, "bad arena magic"));
        }
        let cur: u64 = v.read(ao + A_CUR)?;
        let end: u64 = v.read(ao + A_END)?;
        if cur > end || cur < HEAP_START || end > top || !cur.is_multiple_of(32) {
            return Err(corrupt(v, ao, format!("arena range {cur}..{end} invalid")));
        }
        if cur < end {
            holes.insert(cur, end);
        }
        counted_blocks = counted_blocks.wrapping_add(v.read(ao + A_USED_BLOCKS)?);
        counted_bytes = counted_bytes.wrapping_add(v.read(ao + A_USED_BYTES)?);
        for class in 0..CLASSES as u64 {
            let mut b: u64 = v.read(ao + A_HEADS + class * 8)?;
            while b != 0 {
                check_block_addr(v, b)?;
                let m = decode_meta(v, b)?;
                if m.state != STATE_FREE || m.class != class {
                    return Err(corrupt(
                        v,
                        b,
                        "listed block is not free or of another class",
                    ));
                }
                if !listed.insert(b) {
                    return Err(corrupt(v, b, "block on a free list twice (cycle?)"));
                }
                b = v.read(b)?;
            }
        }
    }
    let mut r = HeapReport {
        top,
        ..Default::default()
    };
    let mut at = HEAP_START;
    while at < top {
        if let Some(&end) = holes.get(&at) {
            at = end;
            continue;
        }
        let m = decode_meta(v, at)?;
        let bs = block_size(m.class);
        if !at.is_multiple_of(bs.min(PAGE)) || at + bs > top {
            return Err(corrupt(v, at, "block misaligned or past the heap top"));
        }
        if let Some((&h, _)) = holes.range(at + 1..at + bs).next() {
            return Err(corrupt(
                v,
                at,
                format!("block overlaps an arena range at {h}"),
            ));
        }
        if m.state == STATE_FREE {
            if !listed.remove(&at) {
                return Err(corrupt(v, at, "free block on no free list"));
            }
            let user = v.slice(at + BLOCK_HEADER, (bs - BLOCK_HEADER) as usize)?;
            if user.iter().any(|&b| b != 0) {
                return Err(corrupt(v, at, "free block is not zero"));
            }
            r.free_blocks += 1;
            r.free_bytes += bs;
        } else {
            r.used_blocks += 1;
            r.used_bytes += bs;
        }
        at += bs;
    }
    if at != top {
        return Err(corrupt(v, at, "blocks run past the heap top"));
    }
    if let Some(b) = listed.into_iter().next() {
        return Err(corrupt(v, b, "listed free block is not in the heap walk"));
    }
    if (counted_blocks, counted_bytes) != (r.used_blocks, r.used_bytes) {
        return Err(corrupt(
            v,
            ARENA0,
            format!(
                "arena counters say {counted_blocks} blocks / {counted_bytes} bytes in use, the heap holds {} / {}",
                r.used_blocks, r.used_bytes
            ),
        ));
    }
    Ok(r)
}

#[cfg(test)]
mod growth_tests {
    use super::*;

    #[test]
    fn a_large_heap_grows_its_region_by_at_most_a_sixteenth_and_a_small_one_doubles() {
        let mib = 1u64 << 20;
        assert_eq!(grown_size(mib), 2 * mib);
        assert_eq!(grown_size(32 * mib), 64 * mib);
        for len in [64 * mib, 100 * mib + 4096, 3 << 30, 40 << 30] {
            let g = grown_size(len);
            assert!(g > len && g.is_multiple_of(CHUNK), "{len} -> {g}");
            assert!(g - len <= (len / 16).max(CHUNK) + CHUNK, "{len} -> {g}");
            assert!(g - len <= (1 << 30) + CHUNK, "{len} -> {g}");
        }
    }
}
