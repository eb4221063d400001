//! The region file's part of the shared state: its header generation and
//! checkpoint as shared memory knows them, the region's size, and the locks
//! of what changes the file (one checkpoint at a time, growth). The shared
//! header (`mvcc/layout.rs`) holds one `FileShared`; only this module
//! touches its fields. The engine (`engine.rs`) drives it through the
//! methods below.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::os::lock::{Guard, SharedMutex};

#[repr(C)]
pub struct FileShared {
    region_generation: AtomicU64,
    checkpoint_seq: AtomicU64,
    /// Bytes of region data (whole pages).
    data_size: AtomicU64,
    /// The newest commit whose record holds registered operations that
    /// change bytes: a checkpoint that writes it journals its pages first
    /// (`journal.rs`).
    ops_seq: AtomicU64,
    /// A round written in place whose region header is not written yet
    /// (`RegionInner::commit_round_in_place`): its page journal is the
    /// durable copy until a checkpoint syncs the file and writes the
    /// header; 0 if none.
    behind: AtomicU64,
    /// Every data page at or above this number reads as zeros in the
    /// region file (pages a grow added that no write has reached since);
    /// `u64::MAX` when nothing is known. Lets a view take such a page's
    /// snapshot content from a static zero page instead of faulting in
    /// the file's page (a bulk load fills hundreds of fresh pages).
    zero_from: AtomicU64,
    /// One checkpoint at a time.
    checkpoint_lock: SharedMutex,
    /// Growing the region.
    grow_lock: SharedMutex,
}

impl FileShared {
    /// Fills a zeroed `FileShared` from the region header on disk.
    ///
    /// # Safety
    /// Nobody else may use it during the call (the caller holds the
    /// region's exclusive open lock and has just zeroed the shared file).
    pub unsafe fn init(
        &self,
        generation: u64,
        checkpoint_seq: u64,
        data_size: u64,
    ) -> std::io::Result<()> {
        for lock in [&self.checkpoint_lock, &self.grow_lock] {
            // SAFETY: per this function's contract.
            unsafe { lock.init()? };
        }
        self.region_generation.store(generation, Ordering::Relaxed);
        self.checkpoint_seq.store(checkpoint_seq, Ordering::Relaxed);
        self.data_size.store(data_size, Ordering::Relaxed);
        self.ops_seq.store(0, Ordering::Relaxed);
        self.behind.store(0, Ordering::Relaxed);
        // Recovery may have written anywhere: nothing is known zero until a grow.
        self.zero_from.store(u64::MAX, Ordering::Relaxed);
        Ok(())
    }

    #[inline]
    pub fn data_size(&self) -> u64 {
        self.data_size.load(Ordering::Acquire)
    }

    #[inline]
    pub fn checkpoint_seq(&self) -> u64 {
        self.checkpoint_seq.load(Ordering::Acquire)
    }

    pub fn region_generation(&self) -> u64 {
        self.region_generation.load(Ordering::Acquire)
    }

    /// Commit `seq`'s record holds operations that change bytes (called
    /// before the record is written, so a checkpoint that chooses to write
    /// it sees the mark).
    pub fn note_ops(&self, seq: u64) {
        self.ops_seq.fetch_max(seq, Ordering::AcqRel);
    }

    /// Whether a commit after `checkpoint_seq` holds such operations.
    pub fn ops_after(&self, checkpoint_seq: u64) -> bool {
        self.ops_seq.load(Ordering::Acquire) > checkpoint_seq
    }

    /// Waits for the checkpoint lock.
    pub fn lock_checkpoint(&self) -> std::io::Result<Guard<'_>> {
        self.checkpoint_lock.lock()
    }

    /// The checkpoint lock if it is free.
    pub fn try_lock_checkpoint(&self) -> std::io::Result<Option<Guard<'_>>> {
        self.checkpoint_lock.try_lock()
    }

    pub fn lock_grow(&self) -> std::io::Result<Guard<'_>> {
        self.grow_lock.lock()
    }

    /// The region grew to `size` (caller holds the grow lock; the file is
    /// that long already). `fresh_from`: the first data page the grow's
    /// extension of the file added (the file's length before it, in pages):
    /// from there on the file reads as zeros.
    pub fn grown(&self, _grow_lock: &Guard<'_>, size: u64, fresh_from: u64) {
        assert!(
            size >= self.data_size(),
            "a region never shrinks while open"
        );
        // Lowered only from "unknown": a known bound already covers the
        // new pages (the file grew from it with zeros). A write racing this
        // wrote a page below `fresh_from` (only pages of the old size exist).
        let _ = self.zero_from.compare_exchange(
            u64::MAX,
            fresh_from,
            Ordering::AcqRel,
            Ordering::Acquire,
        );
        self.data_size.store(size, Ordering::Release);
    }

    /// Pages below `end` of the region file are about to be written: they
    /// may stop reading as zeros. Called before the write.
    pub fn writing_below(&self, end: u64) {
        let cur = self.zero_from.load(Ordering::Acquire);
        if cur != u64::MAX && cur < end {
            self.zero_from.fetch_max(end, Ordering::AcqRel);
        }
    }

    /// Whether data page `page` reads as zeros in the region file.
    pub fn known_zero(&self, page: u64) -> bool {
        page >= self.zero_from.load(Ordering::Acquire)
    }

    /// A checkpoint wrote a region header with `generation` and
    /// `checkpoint_seq` (caller holds the checkpoint lock).
    pub fn checkpointed(&self, _checkpoint_lock: &Guard<'_>, generation: u64, checkpoint_seq: u64) {
        assert!(
            generation > self.region_generation() && checkpoint_seq >= self.checkpoint_seq(),
            "region headers only move forward"
        );
        self.region_generation.store(generation, Ordering::Release);
        self.checkpoint_seq.store(checkpoint_seq, Ordering::Release);
        if checkpoint_seq >= self.behind() {
            self.behind.store(0, Ordering::Release);
        }
    }

    /// Commit `seq` went into the region file, journaled, without a region
    /// header yet (caller holds the checkpoint lock): readers take it from
    /// the file, and the next checkpoint writes the header.
    pub fn journaled(&self, _checkpoint_lock: &Guard<'_>, seq: u64) {
        assert!(seq > self.checkpoint_seq(), "checkpoints only move forward");
        self.behind.store(seq, Ordering::Release);
        self.checkpoint_seq.store(seq, Ordering::Release);
    }

    /// The commit `journaled` put in the file without a header, if any.
    pub fn behind(&self) -> u64 {
        self.behind.load(Ordering::Acquire)
    }

    /// The header on disk is newer than shared memory says (a checkpointer
    /// died after writing it): adopt it.
    pub fn adopt_disk(&self, generation: u64, checkpoint_seq: u64) {
        self.region_generation
            .fetch_max(generation, Ordering::AcqRel);
        self.checkpoint_seq
            .fetch_max(checkpoint_seq, Ordering::AcqRel);
    }
}
