//! Scoped reads of a transaction where the snapshot's bytes lie:
//! the page's version in the shared version chains, or the region file's
//! image, without installing the page into the view's private memory.
//!
//! A page written since the last checkpoint is not in the region file, so
//! `file_access` cannot serve it; `access` copies it into the view's memory
//! file (a fault on a fresh memfd page, zeroing, a 4 KiB copy), once per
//! page per view. A scoped read instead looks the version up on the MVCC
//! read side and hands the caller's closure the bytes there, leaving the
//! read side when the closure returns: the read side is still entered only
//! for as long as a copy takes (the closure only inspects or copies the
//! bytes), so no version is held beyond it and a checkpoint waits for it no
//! longer than for an install. Views that read the same pages share one
//! copy in memory, as LMDB's readers share the page cache.

//!
//! A version found this way is remembered in the view's [`VersionCache`]
//! (page -> address of the version), so the next read of the page (the
//! root and inner nodes of every descent, a leaf read again) takes a probe
//! and a turn on the read side instead of `file_access`'s checks and the
//! chain walk. An entry is used only at the snapshot it was found for,
//! and only on a turn whose MVCC epoch is the one it was found at: a
//! version's block is freed (and may be reused for another page) only by
//! a `retire`, which moves the epoch first, so an unchanged epoch read
//! after entering proves the block still holds that version
//! (`Mvcc::enter_epoch`). Every commit's pruning and every checkpoint
//! moves the epoch, which empties the cache; a reader alone with the
//! region (the benchmarks' read steps) keeps it.

use std::sync::atomic::{AtomicU64, Ordering};

use super::ViewInner;
use crate::os::mem::PAGE;
use crate::viewmem::{VersionEntries, page_state};

/// Reads in place of one page at one snapshot (and MVCC epoch) after
/// which the view installs the page instead (`View::read_with`): a page
/// read this often (a tree's header and upper nodes) is cheaper to read
/// at the view's own copy (no turn on the read side, no cache probe) than
/// the install (a fresh memfd page and a 4 KiB copy, a few µs) costs once.
/// Leaves read a few times each stay shared.
pub(super) const PROMOTE_AFTER: usize = 255;

// An entry of the cache, one `u64` per page (`ViewMemory::versions`):
// finds since the version was cached, the generation it was cached in,
// and the version's block address in 4 KiB units. Dense by page, so a
// tree of any size keeps every leaf's entry (a direct-mapped table of a
// few thousand entries missed on most leaves of a tree of 100 MiB), and
// small, so the entries of the leaves a workload reads stay in cache.
const HITS_BITS: u32 = 8;
const GEN_BITS: u32 = 16;
const ADDR_SHIFT: u32 = HITS_BITS + GEN_BITS;
const HITS_MASK: u64 = (1 << HITS_BITS) - 1;
const GEN_MAX: u32 = (1 << GEN_BITS) - 1;
// The cache counts finds up to PROMOTE_AFTER in the entry's low bits.
const _: () = assert!(PROMOTE_AFTER as u64 <= HITS_MASK);

/// The version block's address an entry holds.
fn block_address(raw: u64) -> usize {
    ((raw >> ADDR_SHIFT) as usize) * PAGE
}

/// Addresses of versions a view's transactions read in place,
/// valid for one snapshot at one MVCC epoch (module docs). The entries
/// and their generation live in the view's memory
/// (`ViewMemory::versions`); this holds the snapshot and epoch the valid
/// generation was found at. A new snapshot or epoch starts a new
/// generation, which drops every entry at once. Used only by the thread
/// that uses the view (a `View` is not `Sync`; the fault handler never
/// touches it): the atomics are for `&self` access, all relaxed.
#[derive(Default)]
pub(super) struct VersionCache {
    /// Snapshot + 1 (0: none, so a view's first entry starts a generation)
    /// and the epoch the entries were found at.
    snapshot: AtomicU64,
    epoch: AtomicU64,
}

impl VersionCache {
    /// The address of `page`'s version at snapshot `s`, the epoch it was
    /// found at and how often it was found before, if cached in `entries`.
    #[inline]
    fn find(&self, entries: &VersionEntries, page: usize, s: u64) -> Option<(usize, u64, usize)> {
        let (a, raw) = self.entry(entries, page, s)?;
        // From 0 again once the count reaches PROMOTE_AFTER (a promoted
        // page that a trim gave back waits as long again before the next
        // install).
        let hits = (raw & HITS_MASK) as usize;
        let next = if hits >= PROMOTE_AFTER {
            raw & !HITS_MASK
        } else {
            raw + 1
        };
        a.store(next, Ordering::Relaxed);
        Some((block_address(raw), self.epoch.load(Ordering::Relaxed), hits))
    }

    /// The address `page`'s version at snapshot `s` had when it was
    /// cached, without counting a find: only a hint (the block may have
    /// been freed since, which only the epoch on the read side tells).
    fn peek(&self, entries: &VersionEntries, page: usize, s: u64) -> Option<usize> {
        self.entry(entries, page, s)
            .map(|(_, raw)| block_address(raw))
    }

    /// `page`'s entry in `entries` and its value, if it is valid for
    /// snapshot `s` (of this snapshot's generation).
    #[inline]
    fn entry<'e>(
        &self,
        entries: &'e VersionEntries,
        page: usize,
        s: u64,
    ) -> Option<(&'e AtomicU64, u64)> {
        if self.snapshot.load(Ordering::Relaxed) != s + 1 {
            return None;
        }
        let a = entries.words.get(page)?;
        let raw = a.load(Ordering::Relaxed);
        ((raw >> HITS_BITS) as u32 & GEN_MAX == entries.generation.load(Ordering::Relaxed))
            .then_some((a, raw))
    }

    /// Remembers `addr` as `page`'s version at snapshot `s`, found on a
    /// turn whose epoch (read after entering) was `e`.
    fn put(&self, entries: &VersionEntries, page: usize, s: u64, e: u64, addr: usize) {
        debug_assert!(addr.is_multiple_of(PAGE), "a version block is page-aligned");
        let block = (addr / PAGE) as u64;
        let Some(a) = entries
            .words
            .get(page)
            .filter(|_| block < 1 << (64 - ADDR_SHIFT))
        else {
            return;
        };
        if self.snapshot.load(Ordering::Relaxed) != s + 1 || self.epoch.load(Ordering::Relaxed) != e
        {
            self.clear(entries);
            self.snapshot.store(s + 1, Ordering::Relaxed);
            self.epoch.store(e, Ordering::Relaxed);
        }
        let g = u64::from(entries.generation.load(Ordering::Relaxed));
        a.store(block << ADDR_SHIFT | g << HITS_BITS, Ordering::Relaxed);
        entries.high.fetch_max(page + 1, Ordering::Relaxed);
    }

    /// Drops every entry.
    fn clear(&self, entries: &VersionEntries) {
        let g = entries.generation.load(Ordering::Relaxed);
        if g < GEN_MAX {
            entries.generation.store(g + 1, Ordering::Relaxed);
            return;
        }
        // Wrapped: entries of generation 1 may remain. Once in GEN_MAX
        // clears, so the pass over the pages used is cheap on average.
        for page in 0..entries.high.swap(0, Ordering::Relaxed) {
            if let Some(a) = entries.words.get(page) {
                a.store(0, Ordering::Relaxed);
            }
        }
        entries.generation.store(1, Ordering::Relaxed);
    }
}

impl ViewInner {
    /// Runs `f(bytes, true)` on `[off, off+len)` as the transaction's
    /// snapshot has it, read in place on the read side, if the range lies
    /// in one page the transaction may read shared (`shares_read`; in a
    /// read-write transaction the page joins the read set) and the view holds no valid
    /// copy of that page (a valid copy is cheaper to read, and is the same
    /// bytes). Otherwise gives `f` back. The caller has checked the range
    /// and that a transaction is active.
    pub(super) fn read_in_place<R, F: FnOnce(&[u8], bool) -> R>(
        &self,
        off: usize,
        len: usize,
        f: F,
    ) -> Result<R, F> {
        let Some(page) = self.in_place_page(off, len).filter(|&p| !self.holds(p)) else {
            return Err(f);
        };
        let side = self.read_side();
        let s = self.snapshot.load(Ordering::Relaxed);
        let (src, version) = side.source_of(page, s);
        if let (true, Some(e)) = (version, side.epoch()) {
            self.versions
                .put(&self.mem.versions, page, s, e, src as usize);
        }
        crate::debug::install_delay();
        // SAFETY: `src` is a whole page (a version, the image or a zero
        // page) that stays unchanged and mapped while the read side is
        // entered (versions are freed, and the image's page overwritten by
        // a checkpoint, only after every reader inside left); the range lies
        // in it. The slice does not outlive `side`: `f` cannot keep it.
        let bytes = unsafe { std::slice::from_raw_parts(src.add(off % PAGE), len) };
        let r = f(bytes, true);
        drop(side);
        self.note_shared_read(page);
        Ok(r)
    }

    /// `read_in_place` of a page whose version the view's cache holds for
    /// the snapshot, if the epoch on entering the read side is still the
    /// one it was found at (module docs); otherwise gives `f` back, with
    /// `true` if the page is read so often at this snapshot that the view
    /// should install it (`PROMOTE_AFTER`). The caller has checked the
    /// range, that a transaction is active and that the view holds no copy
    /// of the page.
    pub(super) fn read_cached<R, F: FnOnce(&[u8], bool) -> R>(
        &self,
        off: usize,
        len: usize,
        f: F,
    ) -> Result<R, (F, bool)> {
        let Some(page) = self
            .in_place_page(off, len)
            .filter(|_| crate::debug::version_cache_enabled())
        else {
            return Err((f, false));
        };
        let Some((addr, found_at, hits)) = self.versions.find(
            &self.mem.versions,
            page,
            self.snapshot.load(Ordering::Relaxed),
        ) else {
            return Err((f, false));
        };
        // A view that keeps no pages between transactions would install
        // the page again in each.
        if hits >= PROMOTE_AFTER && self.region.opts.view_private_pages > 0 {
            return Err((f, true));
        }
        let side = self.read_side();
        if side.epoch() != Some(found_at) {
            return Err((f, false));
        }
        crate::debug::install_delay();
        // SAFETY: `addr` is the block of `page`'s version at the snapshot,
        // found at epoch `found_at`; the epoch read after entering is the
        // same, so no retire freed the block since, and none frees it
        // before the read side is left (`Mvcc::enter_epoch`). A version's
        // block is immutable until freed. The slice does not outlive `side`.
        let bytes = unsafe { std::slice::from_raw_parts((addr as *const u8).add(off % PAGE), len) };
        let r = f(bytes, true);
        drop(side);
        self.note_shared_read(page);
        Ok(r)
    }

    /// The page of `[off, off+len)` if a read of it may be served in
    /// place: the range lies in one page that the transaction may read
    /// shared (`shares_read`).
    fn in_place_page(&self, off: usize, len: usize) -> Option<usize> {
        let page = off / PAGE;
        (len != 0 && (off + len - 1) / PAGE == page && self.shares_read(page)).then_some(page)
    }

    /// Where `page` lies for a read-only transaction's next read of it,
    /// if known without a lookup: the view's copy, or the version its cache
    /// found (a hint for a prefetch: that block may have been freed).
    pub(super) fn likely_address(&self, page: usize) -> Option<*const u8> {
        if self.holds(page) {
            return Some(self.mem.alias.base().wrapping_add(page * PAGE));
        }
        let s = self.snapshot.load(Ordering::Relaxed);
        let addr = self.versions.peek(&self.mem.versions, page, s)?;
        Some(addr as *const u8)
    }

    /// Whether the view's private memory holds `page`'s snapshot version
    /// (or the page lies beyond the view's tables).
    pub(super) fn holds(&self, page: usize) -> bool {
        self.mem
            .valid
            .get(page)
            .is_none_or(|v| v.load(Ordering::Acquire) != page_state::NONE)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BLOCK: usize = 0x7f12_3456_7000;

    fn cache(pages: usize) -> (VersionCache, VersionEntries) {
        (VersionCache::default(), VersionEntries::new(pages).unwrap())
    }

    #[test]
    fn a_new_view_on_pooled_memory_finds_none_of_the_last_views_entries() {
        let (c, e) = cache(16);
        c.put(&e, 3, 10, 7, BLOCK);
        assert_eq!(c.find(&e, 3, 10), Some((BLOCK, 7, 0)));
        // The next view's cache over the same memory, at the same snapshot
        // and epoch: its first entry starts a newer generation.
        let next = VersionCache::default();
        assert_eq!(next.find(&e, 3, 10), None);
        next.put(&e, 5, 10, 7, BLOCK + PAGE);
        assert_eq!(next.find(&e, 3, 10), None, "the last view's entry");
        assert_eq!(next.find(&e, 5, 10), Some((BLOCK + PAGE, 7, 0)));
    }

    #[test]
    fn an_entry_is_found_at_its_snapshot_and_epoch_only() {
        let (c, e) = cache(64);
        assert_eq!(c.find(&e, 3, 10), None, "empty");
        c.put(&e, 3, 10, 7, BLOCK);
        assert_eq!(c.find(&e, 3, 10), Some((BLOCK, 7, 0)));
        assert_eq!(c.find(&e, 4, 10), None, "another page");
        assert_eq!(c.find(&e, 3, 11), None, "another snapshot");
        // A put at a new epoch drops the entries found at the old one.
        c.put(&e, 5, 10, 8, BLOCK + PAGE);
        assert_eq!(c.find(&e, 3, 10), None);
        assert_eq!(c.find(&e, 5, 10), Some((BLOCK + PAGE, 8, 0)));
    }

    #[test]
    fn finds_are_counted_up_to_the_promotion_then_from_zero() {
        let (c, e) = cache(8);
        c.put(&e, 1, 2, 3, BLOCK);
        for want in 0..=PROMOTE_AFTER {
            assert_eq!(c.find(&e, 1, 2), Some((BLOCK, 3, want)));
        }
        assert_eq!(
            c.find(&e, 1, 2),
            Some((BLOCK, 3, 0)),
            "counted from 0 again"
        );
    }

    #[test]
    fn a_wrapped_generation_leaves_no_old_entry_valid() {
        let (c, e) = cache(16);
        c.put(&e, 9, 1, 1, BLOCK);
        let g = e.generation.load(Ordering::Relaxed);
        // Each new snapshot starts a generation: run them until the
        // generation page 9's entry was put in comes round again.
        let mut s = 1;
        loop {
            s += 1;
            c.put(&e, 0, s, 1, BLOCK + PAGE);
            if e.generation.load(Ordering::Relaxed) == g {
                break;
            }
            assert!(s <= u64::from(GEN_MAX) + 1, "the generation never wrapped");
        }
        assert_eq!(c.find(&e, 9, s), None, "page 9's entry of the old round");
        assert_eq!(c.find(&e, 0, s), Some((BLOCK + PAGE, 1, 0)));
    }

    #[test]
    fn pages_past_the_table_and_addresses_past_the_entry_are_not_cached() {
        let (c, e) = cache(4);
        c.put(&e, 4, 1, 1, BLOCK);
        assert_eq!(c.find(&e, 4, 1), None);
        c.put(&e, 2, 1, 1, PAGE << (64 - ADDR_SHIFT));
        assert_eq!(c.find(&e, 2, 1), None);
        c.put(&e, 2, 1, 1, (PAGE << (64 - ADDR_SHIFT)) - PAGE);
        assert_eq!(
            c.find(&e, 2, 1),
            Some(((PAGE << (64 - ADDR_SHIFT)) - PAGE, 1, 0)),
            "the highest block an entry holds"
        );
    }
}
