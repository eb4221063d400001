//! Crash injection for tests of process death at exact points: a process
//! that armed a point kills itself with SIGKILL (or stops itself with
//! SIGSTOP, [`stop_at`]) the n-th time it gets there. Costs one relaxed load
//! per point when unarmed.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

/// Places in the commit, sync and checkpoint paths where a test may kill
/// the process (each is reached while holding the lock its name says).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum CrashPoint {
    /// Holding the commit lock, validated, before the log record is written.
    CommitLocked = 1,
    /// Holding the commit lock, the record written and the log end advanced
    /// (the commit point), before the commit is published in memory.
    CommitLogged = 2,
    /// Holding the commit lock, halfway through publishing the pages.
    CommitPublishing = 3,
    /// Holding the group-commit (sync) lock, before `fdatasync`.
    SyncLeader = 4,
    /// Holding the checkpoint lock, after writing pages to the region file,
    /// before its header.
    CheckpointWriting = 5,
    /// Holding the commit lock, the new log header written, before shared
    /// memory knows of the new log epoch.
    LogReset = 6,
    /// Holding the checkpoint lock, after copy-on-checkpoint kept the file
    /// content of pages older snapshots read in shared memory, before the
    /// checkpoint overwrites them.
    CheckpointPreserved = 7,
    /// Holding the commit lock, halfway through making a new log epoch
    /// current in shared memory (after a reset or in a repair).
    EpochPublishing = 8,
    /// Creating a region: the log made and formatted, the data file
    /// formatted under its temporary name, before it is renamed into place.
    Creating = 9,
    /// Taking a backup: after each batch of pages is written to the copy.
    BackupCopying = 10,
    /// Taking a backup: every part written and synced under its temporary
    /// name, before the renames into place.
    BackupPlacing = 11,
    /// Restoring: after each archived segment is replayed into the copy
    /// under its temporary name.
    RestoreReplaying = 12,
    /// Restoring: every part written and synced under its temporary name,
    /// before the renames into place.
    RestorePlacing = 13,
    /// Compacting: the region header records the smaller size, before the
    /// region file and the checksum table are cut.
    CompactShrinking = 14,
    /// Holding the checkpoint lock, after the fence (views in every process
    /// made the pages they read from the file private), before the
    /// checkpoint overwrites them.
    CheckpointFenced = 15,
    /// An ordered commit's number is next in its group (every lower one
    /// committed or was skipped), before the commit lock is taken.
    OrderTurn = 16,
    /// Recovering: after each compensation of a nested top action whose
    /// parent never committed is logged and written to the region file,
    /// before the region header.
    Compensating = 17,
    /// Holding the checkpoint lock, the page journal written and synced
    /// (records with registered operations are being checkpointed), before
    /// the first page is written.
    CheckpointJournaled = 18,
    /// Recovering: after replayed pages are written to the region file (a
    /// batch of them, when the log holds registered operations), before
    /// the region header.
    RecoveryWriting = 19,
    /// A round written in place (the view alone with the region), holding
    /// the checkpoint and commit locks: its page journal synced, before
    /// the first page is written.
    RoundJournaled = 20,
    /// The same round: its pages written into the region file, before the
    /// region header.
    RoundWriting = 21,
    /// A commit across several regions, holding their commit locks: the
    /// first writer's record appended, before the next one's.
    GroupAppended = 22,
    /// A commit across several regions: every writer's record appended and
    /// synced, before it is released to snapshots (no lock held; with a
    /// full pending ring: holding the commit locks, before it is published).
    GroupSynced = 23,
    /// A commit across several regions, holding their commit locks:
    /// published in the first writer (for snapshots: pending), before the
    /// next.
    GroupPublished = 24,
    /// A commit across several regions: appended and published (pending)
    /// in every writer, the commit locks released, before the logs' sync.
    GroupUnlocked = 25,
    /// A large round written in place, after `round` returned: the first
    /// batch of its pages copied from its synced journal into the region
    /// file by the copy's thread, before the rest (`roundwrite.rs`).
    RoundCopying = 26,
    /// A commit across several regions, durable in every writer's log,
    /// holding their commit locks again: released to snapshots in the
    /// first writer, before the next.
    GroupReleasing = 27,
}

impl CrashPoint {
    /// Every point, in the order of their numbers.
    pub const ALL: [CrashPoint; 27] = [
        CrashPoint::CommitLocked,
        CrashPoint::CommitLogged,
        CrashPoint::CommitPublishing,
        CrashPoint::SyncLeader,
        CrashPoint::CheckpointWriting,
        CrashPoint::LogReset,
        CrashPoint::CheckpointPreserved,
        CrashPoint::EpochPublishing,
        CrashPoint::Creating,
        CrashPoint::BackupCopying,
        CrashPoint::BackupPlacing,
        CrashPoint::RestoreReplaying,
        CrashPoint::RestorePlacing,
        CrashPoint::CompactShrinking,
        CrashPoint::CheckpointFenced,
        CrashPoint::OrderTurn,
        CrashPoint::Compensating,
        CrashPoint::CheckpointJournaled,
        CrashPoint::RecoveryWriting,
        CrashPoint::RoundJournaled,
        CrashPoint::RoundWriting,
        CrashPoint::GroupAppended,
        CrashPoint::GroupSynced,
        CrashPoint::GroupPublished,
        CrashPoint::GroupUnlocked,
        CrashPoint::RoundCopying,
        CrashPoint::GroupReleasing,
    ];

    /// The point whose number (`as u32`) is `n`.
    pub fn from_u32(n: u32) -> Option<CrashPoint> {
        Self::ALL.into_iter().find(|p| *p as u32 == n)
    }
}

#[cfg(test)]
mod tests {
    use super::CrashPoint;

    /// `ALL` lists every point (the match below stops compiling when a
    /// point is added, until it is listed here too).
    #[test]
    fn all_lists_every_crash_point() {
        for n in 1..=64u32 {
            let Some(p) = CrashPoint::from_u32(n) else {
                continue;
            };
            assert_eq!(p as u32, n);
        }
        let every = |p: CrashPoint| match p {
            CrashPoint::CommitLocked
            | CrashPoint::CommitLogged
            | CrashPoint::CommitPublishing
            | CrashPoint::SyncLeader
            | CrashPoint::CheckpointWriting
            | CrashPoint::LogReset
            | CrashPoint::CheckpointPreserved
            | CrashPoint::EpochPublishing
            | CrashPoint::Creating
            | CrashPoint::BackupCopying
            | CrashPoint::BackupPlacing
            | CrashPoint::RestoreReplaying
            | CrashPoint::RestorePlacing
            | CrashPoint::CompactShrinking
            | CrashPoint::CheckpointFenced
            | CrashPoint::OrderTurn
            | CrashPoint::Compensating
            | CrashPoint::CheckpointJournaled
            | CrashPoint::RecoveryWriting
            | CrashPoint::RoundJournaled
            | CrashPoint::RoundWriting
            | CrashPoint::RoundCopying => p as u32,
            CrashPoint::GroupAppended
            | CrashPoint::GroupSynced
            | CrashPoint::GroupPublished
            | CrashPoint::GroupUnlocked
            | CrashPoint::GroupReleasing => p as u32,
        };
        let mut numbers: Vec<u32> = CrashPoint::ALL.iter().map(|&p| every(p)).collect();
        numbers.dedup();
        let want: Vec<u32> = (1..=CrashPoint::ALL.len() as u32).collect();
        assert_eq!(numbers, want, "ALL misses a point");
    }
}

static POINT: AtomicU32 = AtomicU32::new(0);
static COUNT: AtomicU64 = AtomicU64::new(0);
/// Stop (SIGSTOP) rather than kill at the point.
static STOP: AtomicBool = AtomicBool::new(false);

/// Kills this process with SIGKILL the `nth` time (1 = the next time) it reaches `point`.
pub fn crash_at(point: CrashPoint, nth: u64) {
    arm(point, nth, false);
}

/// Stops this process with SIGSTOP the `nth` time (1 = the next time) it
/// reaches `point`, holding whatever lock the point names, as a debugger or
/// a job-control stop would; it goes on from there when sent SIGCONT.
pub fn stop_at(point: CrashPoint, nth: u64) {
    arm(point, nth, true);
}

fn arm(point: CrashPoint, nth: u64, stop: bool) {
    STOP.store(stop, Ordering::SeqCst);
    COUNT.store(nth, Ordering::SeqCst);
    POINT.store(point as u32, Ordering::SeqCst);
}

pub(crate) fn hit(point: CrashPoint) {
    if POINT.load(Ordering::Relaxed) != point as u32 {
        return;
    }
    if COUNT.fetch_sub(1, Ordering::SeqCst) == 1 {
        let sig = match STOP.load(Ordering::SeqCst) {
            true => libc::SIGSTOP,
            false => libc::SIGKILL,
        };
        crate::os::signal::raise_in_this_thread(sig);
    }
}

static NO_COPY_ON_CHECKPOINT: AtomicBool = AtomicBool::new(false);

/// Makes this process's checkpoints stop at the oldest live snapshot, as
/// before copy-on-checkpoint (the log then grows while a reader lives). For
/// benchmarks and tests that compare the two; never needed otherwise.
pub fn set_copy_on_checkpoint(on: bool) {
    NO_COPY_ON_CHECKPOINT.store(!on, Ordering::Relaxed);
}

pub(crate) fn copy_on_checkpoint() -> bool {
    !NO_COPY_ON_CHECKPOINT.load(Ordering::Relaxed)
}

static REPLAY_BATCH: AtomicU64 = AtomicU64::new(0);

/// Makes this process's recoveries write the pages of records holding
/// registered operations in batches of `pages` changed pages (0: the
/// default, 64 MiB), so tests reach batch boundaries in a small region.
pub fn replay_batch_pages(pages: u64) {
    REPLAY_BATCH.store(pages, Ordering::Relaxed);
}

pub(crate) fn replay_batch() -> Option<usize> {
    match REPLAY_BATCH.load(Ordering::Relaxed) {
        0 => None,
        n => Some(n as usize),
    }
}

static FILE_RUN_LIMIT: AtomicU64 = AtomicU64::new(0);

/// Makes this process's transactions map at most `runs` runs of the region
/// file at their views' addresses (0: the default, 2,048), so tests reach
/// the limit in a small region.
pub fn file_run_limit(runs: u64) {
    FILE_RUN_LIMIT.store(runs, Ordering::Relaxed);
}

/// The limit [`file_run_limit`] set, or `default`.
pub(crate) fn file_runs_or(default: usize) -> usize {
    match FILE_RUN_LIMIT.load(Ordering::Relaxed) {
        0 => default,
        n => n as usize,
    }
}

static NO_FENCE: AtomicBool = AtomicBool::new(false);

/// Turns this process's checkpoint fence off (issue 20): views that read
/// pages straight from the region file then see a checkpoint overwrite
/// them. Only for tests that show the fence is needed.
pub fn set_fence(on: bool) {
    NO_FENCE.store(!on, Ordering::Relaxed);
}

pub(crate) fn fence_enabled() -> bool {
    !NO_FENCE.load(Ordering::Relaxed)
}

static NO_VERSION_CACHE: AtomicBool = AtomicBool::new(false);

/// Turns this process's caches of versions read in place
/// (`view/inplace.rs`) off or back on, to measure what they save.
pub fn version_cache(on: bool) {
    NO_VERSION_CACHE.store(!on, Ordering::Relaxed);
}

pub(crate) fn version_cache_enabled() -> bool {
    !NO_VERSION_CACHE.load(Ordering::Relaxed)
}

static INSTALL_SPINS: AtomicU64 = AtomicU64::new(0);

/// Makes this process's page installs spin `spins` times between finding a
/// page's version and copying it, widening races with checkpoints for tests.
pub fn slow_installs(spins: u64) {
    INSTALL_SPINS.store(spins, Ordering::Relaxed);
}

/// Called by the fault handler (async-signal-safe: no system calls).
pub(crate) fn install_delay() {
    let n = INSTALL_SPINS.load(Ordering::Relaxed);
    for _ in 0..n {
        std::hint::spin_loop();
    }
}

static CHECKPOINT_PAUSE_US: AtomicU64 = AtomicU64::new(0);

/// Makes this process's checkpoints pause `us` microseconds before they take
/// the commit lock to choose what to write, widening races with commits for
/// tests.
pub fn slow_checkpoints(us: u64) {
    CHECKPOINT_PAUSE_US.store(us, Ordering::Relaxed);
}

pub(crate) fn checkpoint_pause() {
    sleep_for(&CHECKPOINT_PAUSE_US);
}

static ROUND_COPY_PAUSE_US: AtomicU64 = AtomicU64::new(0);

/// Makes the copy of a large round from its journal into the region file
/// (`roundwrite.rs`) start `us` microseconds late, so tests can look at
/// the region while it is under way.
pub fn slow_round_copies(us: u64) {
    ROUND_COPY_PAUSE_US.store(us, Ordering::Relaxed);
}

pub(crate) fn round_copy_pause() {
    sleep_for(&ROUND_COPY_PAUSE_US);
}

/// Sleeps as many microseconds as `knob` holds (none when 0).
fn sleep_for(knob: &AtomicU64) {
    let us = knob.load(Ordering::Relaxed);
    if us > 0 {
        std::thread::sleep(std::time::Duration::from_micros(us));
    }
}

static THREAD_END_PAUSE_US: AtomicU64 = AtomicU64::new(0);
static REGION_THREADS: AtomicU64 = AtomicU64::new(0);

/// Makes a region's own threads (its fence thread and async flusher)
/// sleep `us` microseconds as their last act, so tests can see that a
/// close waits for them.
pub fn slow_thread_ends(us: u64) {
    THREAD_END_PAUSE_US.store(us, Ordering::Relaxed);
}

/// The region threads of this process started and not yet at their end.
pub fn region_threads() -> u64 {
    REGION_THREADS.load(Ordering::Relaxed)
}

/// A region thread runs `body`; counted in [`region_threads`] until its end.
pub(crate) fn region_thread<R>(body: impl FnOnce() -> R) -> R {
    REGION_THREADS.fetch_add(1, Ordering::Relaxed);
    let r = body();
    sleep_for(&THREAD_END_PAUSE_US);
    REGION_THREADS.fetch_sub(1, Ordering::Relaxed);
    r
}

static SYNC_PAUSE_US: AtomicU64 = AtomicU64::new(0);

/// Makes this process's log syncs take `us` microseconds longer (a sleep
/// after each `fdatasync`), to see group commit as it would run on a slower
/// device (the benchmark's "slow device" rows, tests of gathering).
pub fn slow_syncs(us: u64) {
    SYNC_PAUSE_US.store(us, Ordering::Relaxed);
}

pub(crate) fn sync_pause() {
    sleep_for(&SYNC_PAUSE_US);
}

/// The newest commit snapshots of `region` may see, then the newest one
/// durable in its log (read in that order): for tests that nothing is
/// visible before it is durable in every region of its commit.
pub fn visible_then_synced(region: &crate::Region) -> (u64, u64) {
    let m = &region.inner.mvcc;
    let visible = m.visible_seq();
    (visible, m.hdr().log.synced_seq())
}

/// Makes `region` unusable with `msg`, as a failed log write would: every
/// later commit in every process that has it open fails with
/// `Error::Poisoned`. For tests of how that is reported.
pub fn poison(region: &crate::Region, msg: &str) {
    region.inner.mvcc.hdr().log.poison(msg);
}

static NO_RENAME_NOREPLACE: AtomicBool = AtomicBool::new(false);

/// Makes this process's creates behave as on a file system without
/// `renameat2(RENAME_NOREPLACE)` (NFS): they fall back to a hard link.
pub fn no_rename_noreplace(on: bool) {
    NO_RENAME_NOREPLACE.store(on, Ordering::Relaxed);
}

pub(crate) fn rename_noreplace() -> bool {
    !NO_RENAME_NOREPLACE.load(Ordering::Relaxed)
}

std::thread_local! {
    static DIR_SYNCS: std::cell::RefCell<Option<Vec<std::path::PathBuf>>> =
        const { std::cell::RefCell::new(None) };
}

/// Starts recording, on this thread, the directories txmap syncs (after
/// creating a directory or a file in one), for tests of directory
/// durability; `dir_syncs` returns them.
pub fn record_dir_syncs() {
    DIR_SYNCS.with(|d| *d.borrow_mut() = Some(Vec::new()));
}

/// The directories synced on this thread since `record_dir_syncs`, in order
/// (as txmap named them: an empty path is the working directory); stops
/// recording.
pub fn dir_syncs() -> Vec<std::path::PathBuf> {
    DIR_SYNCS.with(|d| d.borrow_mut().take().unwrap_or_default())
}

pub(crate) fn note_dir_sync(dir: &std::path::Path) {
    DIR_SYNCS.with(|d| {
        if let Some(v) = d.borrow_mut().as_mut() {
            v.push(dir.to_path_buf());
        }
    });
}

static FLUSHER_PAUSE_US: AtomicU64 = AtomicU64::new(0);

/// Makes this process's async flusher rounds hold the region `us`
/// microseconds longer, widening the race between a round and a close for
/// tests.
pub fn slow_flusher_rounds(us: u64) {
    FLUSHER_PAUSE_US.store(us, Ordering::Relaxed);
}

pub(crate) fn flusher_pause() {
    sleep_for(&FLUSHER_PAUSE_US);
}

static GROUP_HELPER_PAUSE_US: AtomicU64 = AtomicU64::new(0);

/// Makes this process's log sync helpers of commits across several regions
/// (`group.rs`) hold each region they sync `us` microseconds longer,
/// widening the race between their work and a close for tests.
pub fn slow_group_sync_helpers(us: u64) {
    GROUP_HELPER_PAUSE_US.store(us, Ordering::Relaxed);
}

pub(crate) fn group_helper_pause() {
    sleep_for(&GROUP_HELPER_PAUSE_US);
}

static BEFORE_COMMIT_LOCK: std::sync::RwLock<Option<fn()>> = std::sync::RwLock::new(None);
static BEFORE_COMMIT_LOCK_ARMED: AtomicBool = AtomicBool::new(false);
static AHEAD_RERUNS: AtomicU64 = AtomicU64::new(0);
static LOCKED_RUNS: AtomicU64 = AtomicU64::new(0);

/// Calls `f` (`None`: nothing) in every commit of this process that has
/// commit-time operations, after they ran ahead of the commit lock and
/// before it is taken: a test commits there what makes that run stale.
pub fn before_commit_lock(f: Option<fn()>) {
    *BEFORE_COMMIT_LOCK
        .write()
        .unwrap_or_else(|e| e.into_inner()) = f;
    BEFORE_COMMIT_LOCK_ARMED.store(f.is_some(), Ordering::SeqCst);
}

pub(crate) fn hit_before_commit_lock() {
    if !BEFORE_COMMIT_LOCK_ARMED.load(Ordering::Relaxed) {
        return;
    }
    let f = *BEFORE_COMMIT_LOCK.read().unwrap_or_else(|e| e.into_inner());
    if let Some(f) = f {
        f();
    }
}

/// Commit-time operations of this process's commits so far: how many
/// times they ran again before the commit lock because a run ahead was
/// stale, and how many times they ran under it.
pub fn commit_time_runs() -> (u64, u64) {
    (
        AHEAD_RERUNS.load(Ordering::Relaxed),
        LOCKED_RUNS.load(Ordering::Relaxed),
    )
}

pub(crate) fn note_ahead_rerun() {
    AHEAD_RERUNS.fetch_add(1, Ordering::Relaxed);
}

pub(crate) fn note_locked_run() {
    LOCKED_RUNS.fetch_add(1, Ordering::Relaxed);
}

/// Where a read fault that maps a run of the region file at the user
/// address (`view/filemap.rs`) may wait for a test ([`pause_file_run`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum FileRunPause {
    /// The run chosen, nothing mapped or listed yet.
    AfterScan = 1,
    /// The file mapped over the run, the run not yet listed for the fence.
    AfterMap = 2,
    /// A fresh view's first read-only transaction, in `begin_read` or its
    /// first `View::base` call: it found the file holding every page at
    /// its snapshot, nothing mapped yet.
    WholeScanned = 3,
    /// The same, the file mapped over the whole user range and raised for
    /// the fence, not yet checked for a commit that raced.
    WholeMapped = 4,
}

static FILE_RUN_PAUSE: AtomicU32 = AtomicU32::new(0);
static FILE_RUN_PAUSED: AtomicBool = AtomicBool::new(false);

/// Makes the next read fault of this process that maps a run of the region
/// file (or, for `FileRunPause::Whole*`, the next mapping of the whole
/// file) wait at `at` until [`release_file_run`]: a test commits and
/// checkpoints meanwhile what the check must catch.
pub fn pause_file_run(at: FileRunPause) {
    FILE_RUN_PAUSE.store(at as u32, Ordering::SeqCst);
}

/// Whether a fault waits at the point [`pause_file_run`] armed.
pub fn file_run_paused() -> bool {
    FILE_RUN_PAUSED.load(Ordering::SeqCst)
}

/// Lets the fault waiting at the armed point go on.
pub fn release_file_run() {
    FILE_RUN_PAUSED.store(false, Ordering::SeqCst);
}

/// Called by the fault handler at `at` (async-signal-safe: atomics and
/// `sched_yield`). Waits at most about a minute of yields.
pub(crate) fn file_run_point(at: FileRunPause) {
    if FILE_RUN_PAUSE.load(Ordering::Relaxed) != at as u32
        || FILE_RUN_PAUSE
            .compare_exchange(at as u32, 0, Ordering::SeqCst, Ordering::Relaxed)
            .is_err()
    {
        return;
    }
    FILE_RUN_PAUSED.store(true, Ordering::SeqCst);
    let mut spins = 0u64;
    while FILE_RUN_PAUSED.load(Ordering::SeqCst) && spins < 200_000_000 {
        rustix::thread::sched_yield();
        spins += 1;
    }
}
