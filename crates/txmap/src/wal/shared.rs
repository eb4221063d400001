//! The log's part of the shared state: where the log ends, its epoch, group
//! commit's progress and the poison flag. The shared header
//! (`mvcc/layout.rs`) holds one `LogShared`; only `wal/` reads or writes
//! its fields, everyone else goes through the methods here and in `log.rs`.

use std::sync::atomic::{AtomicU8, AtomicU32, AtomicU64, Ordering};

use super::format::LogHeader;
use crate::os::lock::SharedMutex;

/// Length of the poison message, NUL included.
pub const POISON_MSG: usize = 256;

#[repr(C)]
pub struct LogShared {
    /// 1 when commits wait for their sync (`Durability::Durable`), 2 when
    /// they do not; every process must agree.
    pub(super) durability: AtomicU32,
    pub(super) poisoned: AtomicU32,
    /// The region the log belongs to (its header names it).
    pub(super) region_id: AtomicU64,
    pub(super) written_seq: AtomicU64,
    pub(super) synced_seq: AtomicU64,
    pub(super) syncs: AtomicU64,
    /// Bumped after every group-commit round; followers futex-wait on it.
    pub(super) sync_gen: AtomicU32,
    /// Bumped when an append reaches `gather_target`; a gathering sync
    /// leader futex-waits on it.
    pub(super) append_gen: AtomicU32,
    /// While a sync leader gathers: the record it waits for (0: none).
    pub(super) gather_target: AtomicU64,
    /// Records the next sync round expects: what the last one covered plus
    /// what arrived during it.
    pub(super) sync_expect: AtomicU64,
    /// How long the last `fdatasync` took, in nanoseconds (bounds a gather
    /// and sets when followers stop waiting for a leader).
    pub(super) sync_nanos: AtomicU64,
    /// The sync lock's holder: its pid, and since when it holds the lock
    /// (`CLOCK_MONOTONIC` nanoseconds; 0: nobody). Lets followers and
    /// `txmap info` see a leader that is stopped.
    pub(super) sync_leader_pid: AtomicU64,
    pub(super) sync_leader_since: AtomicU64,
    pub(super) log_generation: AtomicU64,
    pub(super) log_salt: AtomicU64,
    pub(super) log_start_seq: AtomicU64,
    /// End of the last record written (the commit point of a record).
    pub(super) log_end: AtomicU64,
    /// End of the last record whose commit is published in memory.
    pub(super) published_end: AtomicU64,
    /// Bytes of the log file made real with zeros.
    pub(super) log_allocated: AtomicU64,
    pub(super) poison_msg: [AtomicU8; POISON_MSG],
    /// The id of a commit across several regions while its committer holds
    /// this region's commit lock (0: none). A repair that finds it set
    /// poisons the region: only recovery may decide such a commit.
    pub(super) group_in_flight: AtomicU64,
    /// Commits across several regions whose record is in this log (and
    /// published in memory) but not yet durable in every writer's log
    /// (`group.rs`): their sequence numbers in log order, from
    /// `pending_head` to `pending_tail` (ring indices), each with its
    /// committer's pid; 0 marks one released out of order. Changed under
    /// the commit lock only.
    pub(super) pending: [PendingGroup; MAX_PENDING],
    pub(super) pending_head: AtomicU64,
    pub(super) pending_tail: AtomicU64,
    /// The newest commit snapshots may see: the oldest pending group's
    /// sequence number less one (`u64::MAX`: none pending). One word, so
    /// readers need no lock.
    pub(super) visible_cap: AtomicU64,
    /// Bumped before and after a commit across several regions changes
    /// what snapshots see (its release from pending, or its publication
    /// when the ring was full): odd while that is under way. A snapshot
    /// over several regions taken without their commit locks is kept only
    /// if every region's word was even and unchanged around it
    /// (`group::snapshots`). Waiters for a release sleep on it.
    pub(super) release_gen: AtomicU32,
    /// The group-commit leader (whoever syncs the log).
    pub(super) sync_lock: SharedMutex,
}

/// How many commits across several regions may wait for their sync in
/// one log at once; a group commit that finds the ring full syncs holding
/// the commit locks, as before.
pub const MAX_PENDING: usize = 64;

/// One pending commit across several regions (see `LogShared::pending`).
#[repr(C)]
pub struct PendingGroup {
    seq: AtomicU64,
    pid: AtomicU64,
}

/// The log's state when a first opener builds the shared state.
pub struct LogInit {
    pub durable: bool,
    /// The epoch on disk (its header).
    pub header: LogHeader,
    /// The last commit whose record is written (and synced).
    pub last_seq: u64,
    /// Where the next record goes.
    pub end: u64,
    pub allocated: u64,
}

const DURABLE: u32 = 1;
const ASYNC: u32 = 2;

impl LogShared {
    /// Fills a zeroed `LogShared`.
    ///
    /// # Safety
    /// Nobody else may use it during the call (the caller holds the
    /// region's exclusive open lock and has just zeroed the shared file).
    pub unsafe fn init(&self, i: &LogInit) -> std::io::Result<()> {
        // SAFETY: per this function's contract.
        unsafe { self.sync_lock.init()? };
        let d = if i.durable { DURABLE } else { ASYNC };
        self.durability.store(d, Ordering::Relaxed);
        for (f, v) in [
            (&self.region_id, i.header.region_id),
            (&self.written_seq, i.last_seq),
            (&self.synced_seq, i.last_seq),
            (&self.log_generation, i.header.generation),
            (&self.log_salt, i.header.salt),
            (&self.log_start_seq, i.header.start_seq),
            (&self.log_end, i.end),
            (&self.published_end, i.end),
            (&self.log_allocated, i.allocated),
            (&self.visible_cap, u64::MAX),
        ] {
            f.store(v, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Whether commits wait for their sync (the first opener's durability).
    pub fn durable(&self) -> bool {
        self.durability.load(Ordering::Acquire) == DURABLE
    }

    /// How long the log's last `fdatasync` took.
    pub fn last_sync(&self) -> std::time::Duration {
        std::time::Duration::from_nanos(self.sync_nanos.load(Ordering::Relaxed))
    }

    /// `fdatasync` calls on the log so far, in every process.
    pub fn syncs(&self) -> u64 {
        self.syncs.load(Ordering::Relaxed)
    }

    /// Marks the region unusable with `msg` (the first message stays):
    /// every later commit in any process fails with it, and the next
    /// process to open the region alone recovers from the files.
    pub fn poison(&self, msg: &str) {
        if self.poisoned.load(Ordering::Acquire) != 0 {
            return;
        }
        for (i, b) in self.poison_msg.iter().enumerate().take(POISON_MSG - 1) {
            b.store(*msg.as_bytes().get(i).unwrap_or(&0), Ordering::Relaxed);
        }
        self.poisoned.store(1, Ordering::Release);
    }

    pub fn is_poisoned(&self) -> bool {
        self.poisoned.load(Ordering::Acquire) != 0
    }

    /// Records written but not yet published in memory, as the byte range
    /// `(published_end, log_end)` and the salt they carry (for the repair
    /// after a committer died holding the commit lock).
    pub fn unpublished(&self) -> (u64, u64, u64) {
        (
            self.published_end.load(Ordering::Acquire),
            self.log_end.load(Ordering::Acquire),
            self.log_salt.load(Ordering::Acquire),
        )
    }

    /// Every record written is published in memory now. Caller holds the
    /// commit lock.
    pub fn mark_published(&self) {
        let end = self.log_end.load(Ordering::Acquire);
        assert!(
            self.published_end.load(Ordering::Acquire) <= end,
            "the published end never passes the log end"
        );
        self.published_end.store(end, Ordering::Release);
    }

    /// Marks a commit across several regions in flight (`id` != 0) or
    /// done (0). Caller holds the commit lock.
    pub fn set_group_in_flight(&self, id: u64) {
        self.group_in_flight.store(id, Ordering::SeqCst);
    }

    /// The commit across several regions a holder of the commit lock left
    /// in flight (0: none).
    pub fn group_in_flight(&self) -> u64 {
        self.group_in_flight.load(Ordering::SeqCst)
    }

    /// Notes group commit `seq` (of process `pid`, the caller's) pending
    /// until it is durable in every writer's log; snapshots stop below it.
    /// False if the ring is full. Caller holds the commit lock.
    pub fn add_pending(&self, seq: u64, pid: u32) -> bool {
        let (head, tail) = (
            self.pending_head.load(Ordering::Acquire),
            self.pending_tail.load(Ordering::Acquire),
        );
        if tail - head >= MAX_PENDING as u64 {
            return false;
        }
        let e = &self.pending[(tail % MAX_PENDING as u64) as usize];
        e.pid.store(u64::from(pid), Ordering::Relaxed);
        e.seq.store(seq, Ordering::Release);
        self.pending_tail.store(tail + 1, Ordering::Release);
        if head == tail {
            self.visible_cap.store(seq - 1, Ordering::SeqCst);
        }
        true
    }

    /// Group commit `seq` is durable in every writer's log: snapshots may
    /// see it once every older pending group is too. Caller holds the
    /// commit lock, between `begin_visibility_change` and
    /// `end_visibility_change`.
    pub fn release_pending(&self, seq: u64) {
        let (mut head, tail) = (
            self.pending_head.load(Ordering::Acquire),
            self.pending_tail.load(Ordering::Acquire),
        );
        let at = |i: u64| &self.pending[(i % MAX_PENDING as u64) as usize];
        if let Some(i) = (head..tail).find(|&i| at(i).seq.load(Ordering::Acquire) == seq) {
            at(i).seq.store(0, Ordering::Release);
        }
        while head < tail && at(head).seq.load(Ordering::Acquire) == 0 {
            head += 1;
        }
        self.pending_head.store(head, Ordering::Release);
        let cap = if head < tail {
            at(head).seq.load(Ordering::Acquire) - 1
        } else {
            u64::MAX
        };
        self.visible_cap.store(cap, Ordering::SeqCst);
    }

    /// A commit across several regions is about to change what snapshots
    /// see here (the word turns odd). Caller holds the commit lock, and
    /// calls it in every writer before the change in any.
    pub fn begin_visibility_change(&self) {
        let was = self.release_gen.fetch_add(1, Ordering::SeqCst);
        debug_assert!(was.is_multiple_of(2), "visibility changes do not nest");
    }

    /// The change is done in every writer (the word is even again); wakes
    /// those waiting for a release. Caller holds the commit lock.
    pub fn end_visibility_change(&self) {
        self.release_gen.fetch_add(1, Ordering::SeqCst);
        crate::os::lock::futex_wake_all(&self.release_gen);
    }

    /// The newest commit a snapshot may see (`u64::MAX`: no group pending).
    pub fn visible_cap(&self) -> u64 {
        self.visible_cap.load(Ordering::SeqCst)
    }

    /// The committer of the oldest pending group, if one is pending.
    /// Caller holds the commit lock.
    pub fn oldest_pending(&self) -> Option<(u64, u32)> {
        let (head, tail) = (
            self.pending_head.load(Ordering::Acquire),
            self.pending_tail.load(Ordering::Acquire),
        );
        let e = &self.pending[(head % MAX_PENDING as u64) as usize];
        (head < tail).then(|| {
            (
                e.seq.load(Ordering::Acquire),
                e.pid.load(Ordering::Relaxed) as u32,
            )
        })
    }

    /// Sleeps until a pending group is released (or `timeout` passes).
    pub fn wait_release(&self, seen: u32, timeout: std::time::Duration) {
        crate::os::lock::futex_wait_bits(
            &self.release_gen,
            seen,
            timeout,
            std::num::NonZeroU32::MAX,
        );
    }

    /// After a holder of the commit lock died: ends a visibility change
    /// it left under way (an odd word would make every lock-free snapshot
    /// over several regions retry, and the next change's parity wrong).
    /// Caller holds the commit lock.
    pub fn end_interrupted_visibility_change(&self) {
        if self.release_gen.load(Ordering::SeqCst) % 2 == 1 {
            self.end_visibility_change();
        }
    }

    /// The newest commit durable in this log (`Log::synced_seq`).
    pub fn synced_seq(&self) -> u64 {
        self.synced_seq.load(Ordering::Acquire)
    }

    /// The release counter, read before checking what to wait for (odd
    /// while a commit across several regions changes what snapshots see).
    pub fn release_gen(&self) -> u32 {
        self.release_gen.load(Ordering::SeqCst)
    }

    /// The epoch generation shared memory knows (the file's may be newer
    /// after a holder of the commit lock died during a reset).
    pub fn generation(&self) -> u64 {
        self.log_generation.load(Ordering::Acquire)
    }

    /// Raises the written sequence to `seq` (the repair publishes records a
    /// dead committer wrote).
    pub fn raise_written(&self, seq: u64) {
        self.written_seq.fetch_max(seq, Ordering::AcqRel);
    }

    /// The state in one line, for tests and diagnostics.
    pub fn describe(&self) -> String {
        let f = |a: &AtomicU64| a.load(Ordering::Acquire);
        format!(
            "written {} synced {} log gen {} salt {} start {} end {} published {} allocated {}{}",
            f(&self.written_seq),
            f(&self.synced_seq),
            f(&self.log_generation),
            f(&self.log_salt),
            f(&self.log_start_seq),
            f(&self.log_end),
            f(&self.published_end),
            f(&self.log_allocated),
            if self.is_poisoned() { " poisoned" } else { "" }
        )
    }
}
