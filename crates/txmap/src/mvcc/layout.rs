//! Byte layout of the shared state file (`/dev/shm/txmap-…`, see
//! docs/FORMAT.md "Shared state"). Every process that has the region open
//! maps it; nothing in it survives the last close (the region file and log
//! are the durable truth, and the first opener rebuilds this from them).

use std::sync::atomic::{AtomicU32, AtomicU64};

use crate::filestate::FileShared;
use crate::os::lock::SharedMutex;
use crate::os::mem::{PAGE, round_up};
use crate::os::shm::SharedPod;
use crate::wal::shared::LogShared;

pub const MAGIC: u64 = u64::from_le_bytes(*b"TXMAPSHM");
/// Changes whenever any structure below changes shape.
pub const LAYOUT_VERSION: u32 = 13;
/// Views (one slot each) open on one region at once, across all processes.
pub const MAX_SLOTS: usize = 1024;
/// The slot the checkpointer (one at a time, any process) reads versions under.
pub const CHECKPOINT_SLOT: usize = MAX_SLOTS;
/// Entries in the change journal ring; a view further behind resets itself.
pub const JOURNAL_LEN: u64 = 1 << 18;
/// Order groups of ordered commits (`mvcc/order.rs`), numbered from 0.
pub const ORDER_GROUPS: usize = 64;
/// Version blocks backed with memory at a time.
pub const ARENA_CHUNK: u64 = 1024;

/// The first page of the file.
#[repr(C)]
pub struct Header {
    pub magic: AtomicU64,
    pub layout_version: AtomicU32,
    pub page_size: AtomicU32,
    pub region_id: AtomicU64,
    /// Set last by the initialiser.
    pub ready: AtomicU32,
    pub max_pages: AtomicU64,
    pub arena_blocks: AtomicU64,

    // Versions and snapshots.
    pub commit_seq: AtomicU64,
    pub horizon: AtomicU64,
    pub epoch: AtomicU64,
    /// Commits up to this one had their pages swept after a sync.
    pub swept: AtomicU64,

    /// The log's part, owned by `wal/` (wal/shared.rs).
    pub log: LogShared,

    /// The region file's part, owned by `filestate.rs`.
    pub file: FileShared,
    /// Pages whose per-page tables are backed with memory.
    pub table_pages: AtomicU64,

    // Change journal.
    pub journal_head: AtomicU64,

    // Pages with versions (the checkpointer's work list).
    pub dirty_count: AtomicU64,

    // Version arena.
    pub arena_fresh: AtomicU64,
    pub arena_backed: AtomicU64,
    pub free_head: AtomicU64,
    pub retired_head: AtomicU64,
    pub retired_tail: AtomicU64,
    pub blocks_in_use: AtomicU64,
    pub retired_count: AtomicU64,
    pub opens: AtomicU64,

    // Snapshot limit (the first opener's `Options::snapshot_limit`; 0 = none).
    pub limit_lag: AtomicU64,
    pub limit_versions: AtomicU64,
    /// Snapshots expired by the limit so far.
    pub expired_count: AtomicU64,
    /// Page images a checkpoint copied into the arena before overwriting
    /// them in the region file, for snapshots older than what it wrote.
    pub preserved_count: AtomicU64,
    /// One past the highest view slot ever claimed: scans of the slots
    /// (every commit plans pruning with one) stop there.
    pub slots_high: AtomicU64,

    /// Raised by a checkpoint before it overwrites pages that views may
    /// read straight from the region file (issue 20's fence); each
    /// process's fence thread sleeps on it (a futex word).
    pub fence_gen: AtomicU32,
    pub fence_pad: AtomicU32,

    /// Validation and publication of commits, the log end, version chains,
    /// the arena, the journal, log resets.
    pub commit_lock: SharedMutex,
}

/// A registration of one view: which process, and its live transaction.
#[repr(C, align(64))]
pub struct Slot {
    /// Process id of the owner, 0 if free.
    pub owner: AtomicU64,
    /// Snapshot + 1 while a transaction is open, 0 otherwise.
    pub snapshot: AtomicU64,
    /// Reclamation epoch while reading version chains, 0 otherwise.
    pub epoch: AtomicU64,
    /// When the snapshot was taken (seconds since the epoch), for `txmap info`.
    pub since: AtomicU64,
    /// Snapshot + 1 if the snapshot limit expired that snapshot: the
    /// transaction's next checked access or commit fails.
    pub expired: AtomicU64,
    /// Snapshot + 1 while the view's transaction may hold pointers into
    /// its private mapping of the region file (pages the file held at the
    /// snapshot), 0 otherwise: a checkpoint fences such views.
    pub file_reads: AtomicU64,
    /// The last `fence_gen` the slot's process applied to this view.
    pub fence_ack: AtomicU64,
    /// Ordered commits (`mvcc/order.rs`): the group + 1 of the number this
    /// view holds, 0 if none (stored after `order_num`).
    pub order_group: AtomicU64,
    /// The number held in that group.
    pub order_num: AtomicU64,
    /// The commit sequence number its commit is being logged under (set
    /// under the commit lock just before the record is written, cleared
    /// with the claim), 0 otherwise.
    pub order_commit: AtomicU64,
    /// The log token of the transaction open here that ran nested top
    /// actions (`view/nta.rs`), set before its first action commits and
    /// cleared once it ended; 0 otherwise. A pending action whose token no
    /// slot holds lost its parent: a checkpoint compensates it.
    pub nta_token: AtomicU64,
}

/// One order group of ordered commits (`mvcc/order.rs`).
#[repr(C, align(64))]
pub struct OrderGroup {
    /// The number whose commit comes next: every lower one committed or
    /// was skipped.
    pub next: AtomicU64,
    /// The next number `View::order_next` hands out.
    pub ticket: AtomicU64,
    /// Numbers committed.
    pub committed: AtomicU64,
    /// Numbers skipped (their holder died, gave up, or `order_skip_to`).
    pub skipped: AtomicU64,
    /// The last number skipped + 1, 0 if none.
    pub last_skipped: AtomicU64,
    /// Futex word bumped whenever `next` moves.
    pub wake: AtomicU32,
}

/// The priority of a transaction that conflicted repeatedly
/// (`mvcc/fair.rs`), after the order groups.
#[repr(C, align(64))]
pub struct Priority {
    /// Slot + 1 of the view holding priority, 0 if none.
    pub holder: AtomicU64,
    /// When it took priority (`CLOCK_MONOTONIC` nanoseconds).
    pub since: AtomicU64,
    /// Times priority was taken.
    pub taken: AtomicU64,
    /// Commits that waited for a priority holder.
    pub waits: AtomicU64,
    /// Commits past the priority check and not yet published.
    pub inflight: AtomicU64,
    /// Futex word bumped whenever priority is released.
    pub wake: AtomicU32,
}

/// Per page of the region.
#[repr(C)]
pub struct PageEntry {
    /// Newest version (block + 1), 0 if none.
    pub head: AtomicU64,
    /// Sequence number of the last commit that wrote the page.
    pub seq: AtomicU64,
    /// The bound the chain was last pruned at.
    pub pruned_to: AtomicU64,
    /// 1 if the page is in the dirty list.
    pub dirty: AtomicU64,
}

/// Per version block (its page content lives in the data area).
#[repr(C)]
pub struct BlockMeta {
    pub seq: AtomicU64,
    /// Next older version (block + 1), or next free block.
    pub next: AtomicU64,
    pub retire_epoch: AtomicU64,
    pub retire_next: AtomicU64,
}

#[repr(C)]
pub struct JournalEntry {
    pub seq: AtomicU64,
    pub page: AtomicU64,
}

// SAFETY: repr(C) structs of atomics and (initialised) shared mutexes.
unsafe impl SharedPod for Header {}
// SAFETY: as above.
unsafe impl SharedPod for Slot {}
// SAFETY: as above.
unsafe impl SharedPod for OrderGroup {}
// SAFETY: as above.
unsafe impl SharedPod for Priority {}
// SAFETY: as above.
unsafe impl SharedPod for PageEntry {}
// SAFETY: as above.
unsafe impl SharedPod for BlockMeta {}
// SAFETY: as above.
unsafe impl SharedPod for JournalEntry {}

/// Where each part of the file starts (page-aligned).
#[derive(Clone, Copy, Debug)]
pub struct Layout {
    pub max_pages: u64,
    pub arena_blocks: u64,
    pub slots: usize,
    pub orders: usize,
    pub pages: usize,
    pub dirty: usize,
    pub journal: usize,
    pub meta: usize,
    pub data: usize,
    pub total: usize,
}

impl Layout {
    pub fn new(max_pages: u64) -> Layout {
        // Room for two versions of every page and then some: the checkpointer
        // and pruning keep far fewer; running out is reported, not fatal.
        let arena_blocks = 2 * max_pages + 65_536;
        let slots = round_up(size_of::<Header>());
        let orders = slots + round_up((MAX_SLOTS + 1) * size_of::<Slot>());
        let pages =
            orders + round_up(ORDER_GROUPS * size_of::<OrderGroup>() + size_of::<Priority>());
        let dirty = pages + round_up(max_pages as usize * size_of::<PageEntry>());
        let journal = dirty + round_up(max_pages as usize * 8);
        let meta = journal + round_up(JOURNAL_LEN as usize * size_of::<JournalEntry>());
        let data = meta + round_up(arena_blocks as usize * size_of::<BlockMeta>());
        let total = data + arena_blocks as usize * PAGE;
        Layout {
            max_pages,
            arena_blocks,
            slots,
            orders,
            pages,
            dirty,
            journal,
            meta,
            data,
            total,
        }
    }
}
