//! Issue 20's fence, the side of each process (docs/design/shared-pages.md).
//!
//! Accessor reads of a transaction may return pages of the view's
//! private mapping of the region file, shared with the page cache, when the
//! file holds their version at the snapshot (`Mvcc::file_holds`). A
//! checkpoint later overwrites such a page once a newer commit wrote it, and
//! the mapping would show the new bytes. So before it writes, the
//! checkpointer raises the fence generation in shared memory; this thread
//! (one per region per process) then makes private, in place, every page a
//! view of this process handed out at a snapshot older than the page's last
//! commit: it writes the page's own bytes to it through `/proc/self/mem`,
//! which copies it on write without changing its protection, atomically for
//! a thread reading it. It then acknowledges the generation in the view's
//! slot, and the checkpointer, which waits for every such slot (a stopped
//! process's too, up to a bound, then it writes nothing newer than the
//! oldest snapshot), goes on. The page stays private until the transaction
//! ends, when `finish` gives it back (`MADV_DONTNEED`).
//!
//! Order: the owner lists a page before it checks `file_holds` (a full
//! fence between), and a checkpoint raises the generation after the commits
//! it writes were published; so either the owner's check sees the newer
//! commit (and does not hand the page out) or this thread sees the page.

use std::collections::HashSet;
use std::num::NonZeroU32;
use std::os::unix::fs::FileExt;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use super::ViewInner;
use crate::engine::RegionInner;
use crate::os::lock::lock;
use crate::os::mem::PAGE;
use crate::viewmem::user_file as uf;

/// The fence thread: applies each new generation to every registered view.
pub(super) fn run(region: usize, stop: &AtomicBool, mem: &std::fs::File) {
    // SAFETY: the region outlives this thread's use of it: its `Drop` waits
    // for `done`, which is set after this returns.
    let region = unsafe { &*(region as *const RegionInner) };
    let word = region.mvcc.fence_word();
    let mut seen = word.load(Ordering::SeqCst);
    while !stop.load(Ordering::SeqCst) {
        crate::os::lock::futex_wait_bits(word, seen, Duration::from_millis(100), NonZeroU32::MAX);
        let g = word.load(Ordering::SeqCst);
        if g == seen {
            continue;
        }
        seen = g;
        let views = lock(&region.fence.views);
        for &v in views.iter() {
            // SAFETY: a registered view is alive: it unregisters under this
            // lock before its memory is freed.
            let v = unsafe { &*(v as *const ViewInner) };
            if !v.apply_fence(g, mem) {
                // Views stop reading from the file; this one's checkpoint
                // falls back to its snapshot.
                region.fence.running.store(false, Ordering::Release);
            }
        }
    }
}

impl ViewInner {
    /// Makes private the pages this view's transaction read from the file
    /// that a commit after its snapshot wrote, then acknowledges `g`. Not
    /// acknowledged, and false, if one could not be made private (the
    /// checkpointer then falls back to the oldest snapshot).
    fn apply_fence(&self, g: u32, mem: &std::fs::File) -> bool {
        let mut private = lock(&self.file_private);
        let mvcc = &self.region.mvcc;
        let Some(s) = mvcc.file_reads(self.slot()) else {
            return true;
        };
        let mut ok = true;
        for i in 0..self.file_n.load(Ordering::SeqCst) {
            // SAFETY: entries below file_n were written before it was raised.
            let p = unsafe { *self.mem.file_set.as_ptr().add(i) };
            if mvcc.page_seq(p as usize) <= s || private.contains(&p) {
                continue;
            }
            if privatize(&self.mem.file, p as usize, mem) {
                private.insert(p);
            } else {
                ok = false;
            }
        }
        // Pages mapped from the file at the user address (`filemap.rs`).
        for i in 0..self.mem.ufile_n.load(Ordering::SeqCst) {
            let Some(p) = self.mem.ufile_list.get(i) else {
                break;
            };
            let p = p.load(Ordering::Relaxed) as usize;
            if mvcc.page_seq(p) <= s {
                continue;
            }
            let mut f = self.user_file_lock(p);
            if f & uf::FILE != 0 && f & uf::PRIV == 0 {
                if privatize_any(self.mem.user.base() as usize + p * PAGE, mem) {
                    f |= uf::PRIV;
                } else {
                    ok = false;
                }
            }
            self.user_file_unlock(p, f);
        }
        // The whole range a fresh view's first read-only transaction mapped
        // from the file at begin (`map_file_whole`): no page is listed.
        for p in 0..self.whole.load(Ordering::SeqCst) {
            if mvcc.page_seq(p) <= s {
                continue;
            }
            let raw = self.user_file_lock(p);
            let f = self.whole_flags(p, raw);
            let mut out = raw;
            if f & uf::FILE != 0 && f & uf::PRIV == 0 {
                if privatize_any(self.mem.user.base() as usize + p * PAGE, mem) {
                    out = f | uf::PRIV;
                    self.whole_dirty.store(true, Ordering::Relaxed);
                } else {
                    ok = false;
                }
            }
            self.user_file_unlock(p, out);
        }
        if ok {
            mvcc.fence_ack(self.slot(), g);
        }
        ok
    }

    /// At the end of a transaction that read from the file: no fence
    /// applies to it any more, and the pages made private read the file
    /// again. False if one could not be given back (then the view must not
    /// read from the file again).
    #[inline]
    pub(super) fn end_file_reads(&self) -> bool {
        !self.reads_file() || self.end_file_reads_now()
    }

    /// `end_file_reads` of a transaction that read from the file.
    fn end_file_reads_now(&self) -> bool {
        self.region.mvcc.set_file_reads(self.slot(), None);
        // Waits for a fence pass over this view under way.
        let mut private = lock(&self.file_private);
        let mut ok = true;
        for p in private.drain() {
            ok &= self.mem.file.discard(p as usize * PAGE, PAGE).is_ok();
        }
        self.file_n.store(0, Ordering::Relaxed);
        ok & self.end_user_file()
    }
}

/// Copies `page` of `file` on write, with its current content, through
/// `/proc/self/mem` (a forced write: the mapping stays read-only).
fn privatize(file: &crate::os::mem::Reservation, page: usize, mem: &std::fs::File) -> bool {
    let addr = file.base() as usize + page * PAGE;
    let mut buf = vec![0u8; PAGE];
    // SAFETY: the page lies inside the view's file mapping (it was handed
    // out, so it is below the mapped size), which is readable.
    unsafe { std::ptr::copy_nonoverlapping(addr as *const u8, buf.as_mut_ptr(), PAGE) };
    matches!(mem.write_at(&buf, addr as u64), Ok(n) if n == PAGE)
}

/// `privatize` of the page at `addr`, which may be inaccessible (a trim
/// protected it): read through `/proc/self/mem` too, which ignores
/// protection as the forced write does.
fn privatize_any(addr: usize, mem: &std::fs::File) -> bool {
    let mut buf = vec![0u8; PAGE];
    matches!(mem.read_at(&mut buf, addr as u64), Ok(n) if n == PAGE)
        && matches!(mem.write_at(&buf, addr as u64), Ok(n) if n == PAGE)
}

/// Keeps `HashSet` in the signature of `ViewInner::file_private` readable.
pub(super) type PrivatePages = Mutex<HashSet<u32>>;
