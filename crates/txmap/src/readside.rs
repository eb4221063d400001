//! Reading a region's pages as of a snapshot, without copying them: the
//! MVCC read side of a snapshot slot, with the region file's image.
//!
//! While a slot is on the read side, a checkpoint that overwrites a page
//! in the file first links the page's old content as a version and then
//! waits for the slot to leave (docs/ARCHITECTURE.md, invariant 3). So on
//! the read side the image of a page whose snapshot version is not in
//! memory holds that version and does not change.

use crate::engine::RegionInner;
use crate::mvcc::VersionRef;
use crate::os::mem::PAGE;

/// On the read side of one slot until dropped.
pub(crate) struct ReadSide<'a> {
    region: &'a RegionInner,
    slot: usize,
    entered: bool,
    /// Pages the image maps (read once: it only grows).
    mapped: usize,
}

impl RegionInner {
    /// Enters the read side of `slot` (a no-op if it is already inside).
    pub(crate) fn read_side(&self, slot: usize) -> ReadSide<'_> {
        // A round's copy into the file under way: the file is behind.
        self.round_write.wait_readable();
        let mapped = (*crate::os::lock::lock(&self.image_mapped) / PAGE as u64) as usize;
        ReadSide {
            entered: self.mvcc.enter(slot),
            region: self,
            slot,
            mapped,
        }
    }
}

impl ReadSide<'_> {
    /// The version of `page` in memory that snapshot `s` reads, if any
    /// (else the file holds it).
    pub(crate) fn version(&self, page: usize, s: u64) -> Option<VersionRef<'_>> {
        self.region.mvcc.lookup(page, s)
    }

    /// The region file's bytes of pages `first .. first + n` through this
    /// process's image, or `None` past what the image maps. Stable only
    /// for pages that [`ReadSide::version`] found no version of.
    pub(crate) fn image(&self, first: usize, n: usize) -> Option<&[u8]> {
        if first.checked_add(n)? > self.mapped {
            return None;
        }
        // SAFETY: the pages lie inside the image mapping (checked above;
        // it is never unmapped while the region is open), which is
        // readable. Callers ask only for pages `version` found no version
        // of, which nothing writes while this slot is on the read side
        // (module docs); the borrow ends with the read side.
        Some(unsafe {
            std::slice::from_raw_parts(self.region.image_data().add(first * PAGE), n * PAGE)
        })
    }
}

impl Drop for ReadSide<'_> {
    fn drop(&mut self) {
        if self.entered {
            self.region.mvcc.leave(self.slot);
        }
    }
}
