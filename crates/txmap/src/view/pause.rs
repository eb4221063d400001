//! Pausing and resuming a transaction (TxOS+ `xpause`/`xresume`).
//!
//! A paused transaction keeps the view's shared-state slot, so its snapshot
//! stays registered without a gap (pruning and checkpoints keep what it
//! reads), and takes a copy of its written pages and its read set; the view
//! claims another slot and is free for other transactions, or for plain
//! committed reads. Resuming, on any view of the same region in the same
//! process, hands the slot back, puts the written pages back into the
//! view's private memory and invalidates every page commits changed since
//! the snapshot, so the transaction reads its snapshot again and validates
//! its whole read set (before and after the pause) at commit.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::{TOUCH_BITS, TOUCH_READ, TOUCH_WRITE, View};
use crate::engine::RegionRef;
use crate::error::{Error, Result};
use crate::os::mem::{Access, PAGE};

/// A transaction taken off its view by [`View::pause`], to be continued by
/// [`View::resume`]. Dropping it without resuming rolls the transaction back.
pub struct Paused {
    region: RegionRef,
    /// Holds the transaction's snapshot meanwhile.
    slot: usize,
    snapshot: u64,
    depth: u32,
    doomed: u8,
    read_only: bool,
    track_reads: bool,
    untracked_reads: bool,
    reads: Vec<u32>,
    /// Untracked: pages the transaction may have read (sorted).
    maybe_read: Vec<u32>,
    writes: Vec<(u32, Box<[u8]>)>,
    /// Registered operations applied before the pause.
    op_log: Option<Box<super::apply::OpLog>>,
    /// Nested top actions committed before the pause.
    nta: super::NestedActions,
    /// Pages commutative operations changed (not written otherwise), as
    /// the transaction saw them.
    commuted: Vec<(u32, Box<[u8]>)>,
    /// False once resumed (the slot went back to a view).
    holds_slot: bool,
}

impl std::fmt::Debug for Paused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Paused")
            .field("snapshot", &self.snapshot)
            .field("pages_written", &self.writes.len())
            .finish_non_exhaustive()
    }
}

impl Paused {
    /// The commit whose state the paused transaction reads.
    pub fn snapshot(&self) -> u64 {
        self.snapshot
    }
}

impl Drop for Paused {
    fn drop(&mut self) {
        // In a forked child the slot is the parent's.
        if self.holds_slot && self.region.check_owner().is_ok() {
            self.region.mvcc.release_slot(self.slot);
        }
    }
}

impl super::ViewInner {
    /// This view's private copy of `page` (below the mapped size).
    pub(super) fn alias_page(&self, page: usize) -> &[u8] {
        assert!((page + 1) * PAGE <= self.mem.mapped.load(Ordering::Relaxed));
        // SAFETY: below the mapped size (checked), which the alias maps;
        // only this view writes it, and not while the caller reads it (the
        // view is borrowed).
        unsafe { std::slice::from_raw_parts(self.mem.alias.base().add(page * PAGE), PAGE) }
    }

    /// Puts `bytes` (a page, as the transaction left it) back as this
    /// view's private copy of `page`, valid.
    fn put_page(&self, page: usize, bytes: &[u8]) {
        assert!((page + 1) * PAGE <= self.mem.mapped.load(Ordering::Relaxed));
        // SAFETY: below the mapped size (checked: sizes only grow, so a page
        // of the paused transaction is); the alias is private to this view.
        unsafe {
            std::ptr::copy_nonoverlapping(
                bytes.as_ptr(),
                self.mem.alias.base().add(page * PAGE),
                PAGE,
            )
        };
        self.mem.note_resident(page);
        if let Some(x) = self.mem.valid.get(page) {
            x.store(1, Ordering::Release);
        }
    }
}

impl View {
    /// Pauses the open transaction (whatever its nesting depth) and returns
    /// it: the view is then outside any transaction, free for other
    /// transactions or for reading committed data, and its stores are
    /// invisible to them and to everyone. [`View::resume`] continues it
    /// with its snapshot, reads and writes as they were; it validates at
    /// its commit as if it had never been paused. The paused transaction
    /// holds a snapshot (and one of the region's view slots) until it is
    /// resumed and ends, or dropped (a rollback). Costs a copy of each
    /// written page.
    pub fn pause(&mut self) -> Result<Paused> {
        self.inner.region.check_owner()?;
        if self.depth == 0 {
            return Err(Error::NotInTransaction { op: "pause" });
        }
        let v = &*self.inner;
        let fresh = v.region.mvcc.claim_slot().ok_or_else(|| {
            Error::TooLarge(format!(
                "too many views and paused transactions on one region (at most {})",
                crate::mvcc::MAX_SLOTS
            ))
        })?;
        let untracked = v.untracked_reads.load(Ordering::Relaxed);
        let mut writes = Vec::new();
        v.for_each_written(|page| writes.push((page as u32, Box::from(v.alias_page(page)))));
        // SAFETY: the first read_n entries were written by `touch`.
        let reads = unsafe {
            std::slice::from_raw_parts(v.mem.read_set.as_ptr(), v.read_n.load(Ordering::Relaxed))
        }
        .to_vec();
        let mut maybe_read = Vec::new();
        if untracked {
            // What commit would count as maybe read (see `commit_outermost`).
            let exposed = v.exposed();
            for p in 0..v.mem.mapped.load(Ordering::Relaxed) / PAGE {
                let valid = v
                    .mem
                    .valid
                    .get(p)
                    .is_some_and(|x| x.load(Ordering::Relaxed) == 1);
                if v.touch_bits(p) != 0 || (exposed && valid) {
                    maybe_read.push(p as u32);
                }
            }
            maybe_read.extend_from_slice(&self.paused_reads);
            maybe_read.sort_unstable();
            maybe_read.dedup();
        }
        let op_log = self.op_log.take();
        let nta = self.nta.take();
        let commuted_pages = op_log
            .as_ref()
            .map(|l| l.commuted_pages())
            .unwrap_or_default();
        let commuted = commuted_pages
            .iter()
            .filter(|&&p| v.touch_bits(p as usize) & TOUCH_WRITE == 0)
            .map(|&p| (p, Box::from(v.alias_page(p as usize))))
            .collect();
        let paused = Paused {
            region: v.region.clone(),
            slot: v.slot(),
            snapshot: v.snapshot.load(Ordering::Relaxed),
            depth: self.depth,
            doomed: v.doomed.load(Ordering::Relaxed),
            read_only: v.read_only.load(Ordering::Relaxed),
            track_reads: v.track_reads.load(Ordering::Relaxed),
            untracked_reads: untracked,
            reads,
            maybe_read,
            writes,
            op_log,
            nta,
            commuted,
            holds_slot: true,
        };
        // Pages of the file mapping handed out end here (their slices
        // borrowed the view), so the paused slot owes the fence nothing.
        if !v.end_file_reads() {
            v.file_ok.store(false, Ordering::Relaxed);
        }
        // The snapshot stays registered in the paused slot; the view's
        // pages go back to it (valid at the snapshot, as after an abort).
        v.slot.store(fresh, Ordering::Relaxed);
        self.finish(false);
        self.inner.forget_pages(&commuted_pages);
        Ok(paused)
    }

    /// Continues a transaction [`View::pause`] returned, on this view (any
    /// view of the same region in this process) outside a transaction.
    /// Fails, leaving `paused` dropped (rolled back), if this view is inside a
    /// transaction or maps another region.
    pub fn resume(&mut self, mut paused: Paused) -> Result<()> {
        self.inner.region.check_owner()?;
        if self.depth > 0 {
            return Err(Error::Invalid(
                "resume inside a transaction: end or pause it first".into(),
            ));
        }
        if !Arc::ptr_eq(&*paused.region, &*self.inner.region) {
            return Err(Error::Invalid(
                "resume: the paused transaction belongs to another region".into(),
            ));
        }
        self.sync_size()?;
        let s = paused.snapshot;
        let region = paused.region.clone();
        let mvcc = &region.mvcc;
        let v = &*self.inner;
        // Back to snapshot `s`: forget every page changed since (by anyone,
        // up to now: pages installed outside a transaction may be newer
        // than the view's last snapshot), and catch every first touch.
        let mut stale = Vec::new();
        let complete = mvcc.changed_pages(s, mvcc.commit_seq(), |p| stale.push(p));
        v.mem
            .user
            .protect(0, v.mem.mapped.load(Ordering::Relaxed), Access::None)
            .map_err(|e| Error::os("protect view", e))?;
        v.islands.store(0, Ordering::Relaxed);
        if complete {
            for p in stale {
                if let Some(x) = v.mem.valid.get(p as usize) {
                    x.store(0, Ordering::Relaxed);
                }
            }
        } else {
            self.inner
                .mem
                .valid
                .clear()
                .map_err(|e| Error::os("reset view", e))?;
        }
        self.next_serial()?;
        // Swap slots: the view takes the paused one (with its snapshot).
        let v = &*self.inner;
        let old = v.slot.swap(paused.slot, Ordering::Relaxed);
        paused.holds_slot = false;
        mvcc.release_slot(old);
        let serial = v.serial.load(Ordering::Relaxed);
        for (i, (page, bytes)) in paused.writes.iter().enumerate() {
            let page = *page as usize;
            v.put_page(page, bytes);
            if let Some(t) = v.mem.touched.get(page) {
                t.store(
                    serial << TOUCH_BITS | TOUCH_WRITE | TOUCH_READ,
                    Ordering::Relaxed,
                );
            }
            // SAFETY: the write set held these pages before, so i < capacity.
            unsafe { *v.mem.write_set.as_ptr().add(i) = page as u32 };
        }
        v.write_n.store(paused.writes.len(), Ordering::Relaxed);
        for (page, bytes) in &paused.commuted {
            v.put_page(*page as usize, bytes);
        }
        // Pages read are not marked touched: the next access installs
        // them again (at `s`) and records them once more, which is harmless.
        let reads = std::mem::take(&mut paused.reads);
        // SAFETY: the read set held these entries before, so they fit.
        unsafe {
            std::ptr::copy_nonoverlapping(reads.as_ptr(), v.mem.read_set.as_ptr(), reads.len())
        };
        v.read_n.store(reads.len(), Ordering::Relaxed);
        v.snapshot.store(s, Ordering::Relaxed);
        v.valid_seq.store(s, Ordering::Relaxed);
        // The view's own commits meanwhile are no longer what its memory
        // holds (the paused pages replaced them): the next `refresh` must
        // not keep those pages as its own.
        v.last_commit.store(0, Ordering::Relaxed);
        v.doomed.store(paused.doomed, Ordering::Relaxed);
        v.read_only.store(paused.read_only, Ordering::Relaxed);
        v.track_reads.store(paused.track_reads, Ordering::Relaxed);
        v.untracked_reads
            .store(paused.untracked_reads, Ordering::Relaxed);
        // Pages of commutative operations hold local results: not trimmed.
        v.commuted.store(
            paused
                .op_log
                .as_ref()
                .is_some_and(|l| !l.commuted_pages().is_empty()),
            Ordering::Relaxed,
        );
        v.active.store(true, Ordering::Release);
        self.paused_reads = std::mem::take(&mut paused.maybe_read);
        self.op_log = paused.op_log.take();
        self.nta = paused.nta.take();
        self.depth = paused.depth;
        Ok(())
    }
}
