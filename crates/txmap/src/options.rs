//! How a region is opened: durability, sizes, snapshot limits, recovery
//! and read-only choices. Below the engine and the handle, which both read
//! them.

use std::path::PathBuf;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::os::mem::PAGE;

/// When a commit returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Durability {
    /// After its log record is on disk: the commit survives power loss.
    Durable,
    /// After its log record is written to the OS: the commit survives a crash
    /// of the process; after power loss the region recovers to a prefix of the
    /// commits. A background thread syncs every `async_sync_interval`.
    Async,
}

/// How a region is opened.
#[derive(Clone, Debug)]
pub struct Options {
    pub durability: Durability,
    /// Address space reserved per view; the region may grow up to this. Only
    /// virtual memory: the default is generous so nobody has to guess.
    pub max_size: u64,
    /// Log bytes after which a commit triggers a checkpoint.
    pub checkpoint_bytes: u64,
    /// In `Async` mode, how often written commits are synced.
    pub async_sync_interval: Duration,
    /// Called while recovery on open replays the log, as (commits replayed,
    /// commits to replay), every 1024 commits and at the end; for progress bars.
    pub on_recovery_progress: Option<fn(u64, u64)>,
    /// When old snapshots are expired. Shared by every process: the first
    /// to open the region sets it; a later opener asking for another one
    /// fails, one leaving the default takes the region's.
    pub snapshot_limit: SnapshotLimit,
    /// The region's fixed address, where [`Region::view_fixed`] (and
    /// `xMmap`) map it in every process. `None` keeps the one recorded in
    /// the region file; at create, one is then chosen at random in
    /// 17–64 TiB. `Some` sets it at create, and on open changes the
    /// recorded one when no other process has the region open (pointers
    /// stored in the region then point to the old place); when others
    /// have it open it must equal theirs. Page-aligned, with room for
    /// `max_size` below the top of the user address space.
    pub address: Option<usize>,
    /// Recover even from a damaged log (`txmap recover --accept-loss`):
    /// replay the commits before the damage, rebuild a damaged header from
    /// the records, and drop what cannot be recovered
    /// ([`Stats::recovery_loss`] says what). Without it, opening a region
    /// whose log is damaged (not merely torn by a crash) fails with
    /// [`Error::Corrupt`] naming the commits that would be lost, and writes
    /// nothing.
    pub accept_loss: bool,
    /// Open a plain file ([`crate::Region::open_plain`]) that another
    /// program changed while no one had it open (its length or modification
    /// time differs from what txmap recorded at its last clean close): its
    /// bytes become the region's as they are (page checksums are reset).
    /// Without it such an open fails with [`Error::PlainFileChanged`] and
    /// writes nothing. No effect on other regions.
    pub accept_outside_changes: bool,
    /// Open without writing the region's files (they stay byte for byte as
    /// they are). [`Region::open`] also falls back to this by itself when
    /// the region or its log cannot be opened for writing (a 0444 file, a
    /// read-only mount). Transactions read as usual; a commit that wrote
    /// something, `grow` and `checkpoint` fail with [`Error::ReadOnly`].
    /// Opened first, a read-only handle keeps the commits its log holds
    /// since the checkpoint in shared memory instead of replaying them into
    /// the file; writers that open the region meanwhile share that state.
    pub read_only: bool,
    /// Keep a CRC-32C of every data page a checkpoint writes in the page
    /// checksum table (`PATH-sums`, docs/FORMAT.md), verified on the first
    /// open and by `txmap check`. The first process to open the region
    /// decides for every process of its session (later ones follow the
    /// table's presence); opening alone with `false` removes the table.
    pub page_checksums: bool,
    /// Log bytes kept when a checkpoint empties the log (a new epoch): the
    /// file is cut to this (rounded up to 4 MiB, plus its header page), so
    /// a burst of commits does not keep its high-water mark on disk.
    /// `u64::MAX` keeps everything (the log never shrinks, and records
    /// reuse its space without extending it). Default 4 MiB.
    pub log_reserve: u64,
    /// Keep every log epoch in this directory (`txmap restore` rebuilds a
    /// region from a backup plus these segments; docs/FORMAT.md, "Log
    /// archive"). Each epoch is copied, durably, before the log is reset,
    /// and by the first opener after a crash. Every process that opens
    /// the region should name the same directory. `None` (default): none.
    pub log_archive: Option<PathBuf>,
    /// Fairness for long transactions (LIBXAC's contention manager): a
    /// view whose transactions conflicted this many times in a row takes
    /// priority at its next `begin`, and other views' read-write commits
    /// (every process) wait until its transaction ends other than by a
    /// conflict, so it commits in a bounded number of attempts (one view
    /// at a time; at most 1 s; a holder whose process died makes nobody
    /// wait). 0: never. Default 3 (docs/benchmarks.md, "Fairness").
    pub priority_after: u32,
    /// Private pages (4 KiB each) a view keeps as a cache between
    /// transactions, beyond what its open transaction touched: pages copied
    /// into the view (its write set, pages read through raw pointers or by
    /// read-write transactions, versions newer than the region file). Past
    /// it the view gives the oldest back to the system (their content
    /// stays in the version store or the file, so they are installed again
    /// when touched), and a closed view's memory kept for reuse holds at
    /// most this. Default 4,096 (16 MiB); 0 keeps nothing between
    /// transactions. ARCHITECTURE.md, "Memory a region costs".
    pub view_private_pages: usize,
}

/// How far behind long-running transactions may fall.
///
/// Checkpoints never wait for old snapshots: before overwriting a region
/// page that an older snapshot still reads, they keep its content as a
/// version in shared memory (copy-on-checkpoint), so the log is emptied
/// however long a reader lives. What an old snapshot holds is therefore
/// memory: at most one page version per page changed since it began, per
/// distinct live snapshot (`txmap info` shows it). This limit bounds that.
///
/// An expired transaction fails at its next checked access (`View::read`,
/// `slice`, `write`, `set_page_access`, ...) or commit with
/// [`crate::Error::SnapshotTooOld`] (`xend` returns `XAC_ABORTED`); until it
/// ends it still sees its snapshot consistently (raw loads through
/// `View::base` included), and its versions are freed once it ends. A
/// read-only transaction's read of a page its view holds is not checked:
/// like a raw load, it reads the snapshot's own content.
///
/// The default sets no limit: read-only transactions never fail because of
/// their age. Only when the version store is truly full (its blocks, or the
/// memory behind `/dev/shm`) does a commit fail with
/// [`crate::Error::VersionStoreFull`], and the oldest snapshot is expired
/// so that the memory comes back once it ends.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SnapshotLimit {
    /// Expire a snapshot once more than this many commits followed it.
    pub max_lag: Option<u64>,
    /// While page versions in shared memory take more than this many bytes,
    /// expire the oldest snapshot (one at a time: the next once it ended).
    pub max_version_bytes: Option<u64>,
}

impl SnapshotLimit {
    /// (lag, page versions) as stored in shared memory, 0 meaning none.
    pub(crate) fn encode(&self) -> Result<(u64, u64)> {
        if self.max_lag == Some(0) || self.max_version_bytes == Some(0) {
            return Err(Error::Invalid(
                "SnapshotLimit: max_lag and max_version_bytes must be at least 1 (None: no limit)"
                    .into(),
            ));
        }
        Ok((
            self.max_lag.unwrap_or(0),
            self.max_version_bytes
                .map_or(0, |b| b.div_ceil(PAGE as u64)),
        ))
    }

    pub(crate) fn decode(lag: u64, versions: u64) -> SnapshotLimit {
        SnapshotLimit {
            max_lag: (lag != 0).then_some(lag),
            max_version_bytes: (versions != 0).then(|| versions * PAGE as u64),
        }
    }
}

impl Default for Options {
    fn default() -> Self {
        Options {
            durability: Durability::Durable,
            max_size: 64 << 30,
            checkpoint_bytes: 64 << 20,
            async_sync_interval: Duration::from_millis(50),
            on_recovery_progress: None,
            snapshot_limit: SnapshotLimit::default(),
            address: None,
            accept_loss: false,
            accept_outside_changes: false,
            read_only: false,
            page_checksums: true,
            log_reserve: 4 << 20,
            log_archive: None,
            priority_after: 3,
            view_private_pages: 4096,
        }
    }
}
