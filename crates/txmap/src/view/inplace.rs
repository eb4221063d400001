//! Scoped reads of a read-only transaction where the snapshot's bytes lie:
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

use std::sync::atomic::Ordering;

use super::ViewInner;
use crate::os::mem::PAGE;
use crate::viewmem::page_state;

impl ViewInner {
    /// Runs `f(bytes, true)` on `[off, off+len)` as the transaction's
    /// snapshot has it, read in place on the read side, if the transaction
    /// is read-only, the range lies in one page and the view holds no valid
    /// copy of that page (a valid copy is cheaper to read, and is the same
    /// bytes). Otherwise gives `f` back. The caller has checked the range
    /// and that a transaction is active.
    pub(super) fn read_in_place<R, F: FnOnce(&[u8], bool) -> R>(
        &self,
        off: usize,
        len: usize,
        f: F,
    ) -> Result<R, F> {
        let page = off / PAGE;
        if len == 0
            || (off + len - 1) / PAGE != page
            || !self.read_only.load(Ordering::Relaxed)
            || self.holds(page)
        {
            return Err(f);
        }
        let side = self.read_side();
        let src = side.source(page, self.snapshot.load(Ordering::Relaxed));
        crate::debug::install_delay();
        // SAFETY: `src` is a whole page (a version, the image or a zero
        // page) that stays unchanged and mapped while the read side is
        // entered (versions are freed, and the image's page overwritten by
        // a checkpoint, only after every reader inside left); the range lies
        // in it. The slice does not outlive `side`: `f` cannot keep it.
        let bytes = unsafe { std::slice::from_raw_parts(src.add(off % PAGE), len) };
        let r = f(bytes, true);
        drop(side);
        Ok(r)
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
