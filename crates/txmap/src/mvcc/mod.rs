//! Versions and validation, in memory shared by every process that has the
//! region open (layout in `layout.rs`): the commit sequence, committed page
//! versions not yet in the region file, the last commit that wrote each page,
//! snapshot slots of live transactions, and the journal of which pages each
//! commit changed.
//!
//! Invariants:
//! - A page's version chain is ordered newest first; a reader with snapshot S
//!   uses the first version with `seq <= S`, else the region file.
//! - A live snapshot reads the region file for a page only when it is older
//!   than every version in the chain, and then the file holds its version.
//!   Before a checkpoint overwrites such a page it links the file content at
//!   the chain's tail, labelled with the oldest live snapshot (`preserve`),
//!   and waits for readers that may still copy from the file
//!   (`wait_for_readers`); `trim` keeps what live snapshots below the
//!   checkpoint read. (docs/ARCHITECTURE.md, invariant 2.)
//! - A version unlinked at epoch `e` is freed only when no slot entered the
//!   read side at an epoch `<= e` and is still in it (epoch-based reclamation),
//!   which lets fault handlers in every process walk chains without locks.
//! - Chains, the arena, the dirty list and the journal change only under the
//!   shared commit lock (a [`Locked`] token), and each change is a sequence of
//!   single-word stores that leaves the structures walkable if the holder
//!   dies between any two of them (at worst a block leaks until the last close).

pub mod fair;
pub mod layout;
pub mod order;

use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::os::lock::Guard;
use crate::os::mem::PAGE;
use crate::os::shm::{SharedFile, process_alive};
use layout::*;
pub use layout::{CHECKPOINT_SLOT, MAX_SLOTS};

/// A committed version of a page, borrowed from the shared arena.
#[derive(Clone, Copy)]
pub struct VersionRef<'a> {
    pub seq: u64,
    pub data: &'a [u8; PAGE],
}

/// Proof that the caller holds the shared commit lock.
pub struct Locked<'a> {
    _guard: Guard<'a>,
    hdr: &'a Header,
    /// The thread was already unwinding when it took the lock (a `Drop`
    /// during a panic): a lock section it finishes is whole.
    unwinding_before: bool,
    /// The previous holder died holding it (see `Region::repair`).
    pub owner_died: bool,
}

impl<'a> Locked<'a> {
    /// The held commit lock, as the proof that lower layers (the log's
    /// append and reset) ask for.
    pub fn guard(&self) -> &Guard<'a> {
        &self._guard
    }
}

impl Drop for Locked<'_> {
    fn drop(&mut self) {
        // A panic unwinding through the lock unlocks it normally, so the
        // next holder would not repair what was left half done: stop
        // every process from committing instead (runs before the unlock).
        if std::thread::panicking() && !self.unwinding_before {
            self.hdr
                .log
                .poison("a thread panicked holding the commit lock; reopen the region");
        }
    }
}

/// Which versions a chain must keep: every one newer than `durable`, the
/// newest at or below it, and the newest at or below each live snapshot in
/// `live` (those below `durable`, newest first).
pub struct PrunePlan {
    durable: u64,
    live: Vec<u64>,
}

/// Parameters of a fresh shared file (the first opener's).
pub struct Init {
    pub region_id: u64,
    pub max_pages: u64,
    pub commit_seq: u64,
    pub data_size: u64,
    pub region_generation: u64,
    /// The log's part (wal/shared.rs).
    pub log: crate::wal::shared::LogInit,
    /// Snapshot limit: most commits a snapshot may lag, most page versions
    /// in memory before the oldest snapshot is expired (0 = no limit).
    pub limit_lag: u64,
    pub limit_versions: u64,
}

/// Why an existing shared file cannot be used.
#[derive(Debug)]
pub enum AttachError {
    Io(std::io::Error),
    /// Not a shared file of this format.
    Layout(String),
    /// Missing, empty or not yet marked ready by its first opener: that
    /// opener is still at work, or was killed while opening (the kernel
    /// releases a dead process's locks one file at a time).
    NotReady(&'static str),
}

/// The multiversion state of one region, as mapped by this process.
pub struct Mvcc {
    file: SharedFile,
    layout: Layout,
    /// `file`'s header and slots, checked in range and aligned once
    /// (`from_file`): every transaction reads them, and the mapping never
    /// moves or shrinks while `file` lives.
    hdr: Fixed<Header>,
    slots: Fixed<Slot>,
    /// Slots claimed through this mapping (so the reaper leaves them alone).
    mine: Box<[AtomicBool]>,
    /// Held by this process's claims, releases and reaps of slots. A slot's
    /// liveness lock is an OFD lock on one descriptor every thread shares:
    /// it keeps other processes out, not other threads. Without this, a
    /// thread could claim a slot between another's clearing its owner and
    /// unlocking it; the slot was then live, unlocked and not `mine`, and
    /// the reaper took it from its view and gave it to the next.
    claims: std::sync::Mutex<()>,
    pid: u64,
}

/// The address of a `T` (or the first of several) in `Mvcc::file`'s
/// mapping, checked once; valid as long as the `Mvcc` that holds it.
struct Fixed<T>(NonNull<T>);

// SAFETY: a `Fixed` points at shared-memory types (atomics and shared
// mutexes, `SharedPod`) made for use from any thread and any process.
unsafe impl<T: Sync> Send for Fixed<T> {}
// SAFETY: as for Send.
unsafe impl<T: Sync> Sync for Fixed<T> {}

/// The checkpointer's hold on version memory (see `Mvcc::pin_for_checkpoint`).
pub struct CheckpointPin<'a> {
    mvcc: &'a Mvcc,
}

impl<'a> CheckpointPin<'a> {
    /// What a checkpoint at `t` writes: for each page with in-memory
    /// versions, its newest version `<= t` unless the region file already has
    /// it (`<= ckpt`, the last checkpoint). Also returns the pages among those
    /// whose file content a live snapshot still reads: the oldest live
    /// snapshot `oldest` is below every version in the page's chain (so it
    /// finds none there). Those must be preserved before the write. With
    /// `covers_pruning`, `t` must be at or above every pruning bound so far
    /// (asserted: below it, the version wanted may have been unlinked).
    pub fn pages(
        &self,
        l: &Locked<'_>,
        t: u64,
        ckpt: u64,
        oldest: Option<u64>,
        covers_pruning: bool,
    ) -> (Vec<(u32, VersionRef<'a>)>, Vec<u32>) {
        let m = self.mvcc;
        let _ = l;
        let n = m.hdr().dirty_count.load(Ordering::Acquire) as usize;
        let mut write = Vec::new();
        let mut preserve = Vec::new();
        for p in m.dirty_list()[..n].iter() {
            let p = p.load(Ordering::Acquire) as u32;
            // The version wanted is linked if no pruning went past `t` (see
            // `Region::checkpoint`), or a live snapshot at `t` kept it.
            if covers_pruning {
                let pruned = m
                    .entry(p as usize)
                    .map_or(0, |e| e.pruned_to.load(Ordering::Relaxed));
                assert!(
                    pruned <= t,
                    "checkpoint bound {t} below the pruning bound {pruned} of page {p}"
                );
            }
            let Some(v) = m.lookup(p as usize, t) else {
                continue;
            };
            if v.seq <= ckpt {
                continue;
            }
            if oldest.is_some_and(|o| m.tail_seq(p as usize).is_some_and(|tail| o < tail)) {
                preserve.push(p);
            }
            write.push((p, v));
        }
        (write, preserve)
    }
}

impl Drop for CheckpointPin<'_> {
    fn drop(&mut self) {
        self.mvcc.leave(CHECKPOINT_SLOT);
    }
}

/// The byte of the shared file every process with the region open holds a
/// shared lock on (far beyond the slots' bytes; locks need no file there).
const OPENER_BYTE: u64 = 1 << 40;

/// Fresh version blocks a commit needs before `reserve` maps them ahead.
const POPULATE_MIN: u64 = 16;

/// Fresh version blocks a reservation backed with memory
/// (`Mvcc::reserve_unmapped`), to be mapped by `Mvcc::map_reserved`.
#[derive(Clone, Copy, Debug, Default)]
pub struct FreshRun {
    from: u64,
    n: u64,
}

fn link(b: u64) -> u64 {
    b + 1
}

impl Mvcc {
    /// Creates the shared file at `path` afresh (truncating any old one) for
    /// a region whose state on disk is described by `init`. Caller holds the
    /// region's exclusive open lock: nobody else maps the file meanwhile.
    pub fn create(path: &std::path::Path, init: &Init, mode: u32) -> std::io::Result<Mvcc> {
        let layout = Layout::new(init.max_pages);
        let file = loop {
            let file = SharedFile::open(path, layout.total, mode)?;
            // Held while open (see `remove_stale`); a cleaner that removed
            // the file before we locked it makes us start again.
            if file.share_byte(OPENER_BYTE)? && file.still_at_path() {
                break file;
            }
        };
        file.set_len(0)?; // forget a dead session's state entirely
        file.set_len(layout.total as u64)?;
        file.allocate(0, layout.pages as u64)?;
        file.allocate(layout.journal as u64, (layout.meta - layout.journal) as u64)?;
        let m = Mvcc::from_file(file, layout);
        let h = m.hdr();
        // SAFETY: the file was just zeroed and nobody else maps it (caller
        // holds the exclusive open lock).
        unsafe { h.commit_lock.init()? };
        // SAFETY: as above.
        unsafe {
            h.file
                .init(init.region_generation, init.commit_seq, init.data_size)?
        };
        // SAFETY: as above.
        unsafe { h.log.init(&init.log)? };
        h.magic.store(MAGIC, Ordering::Relaxed);
        h.layout_version.store(LAYOUT_VERSION, Ordering::Relaxed);
        h.page_size.store(PAGE as u32, Ordering::Relaxed);
        h.region_id.store(init.region_id, Ordering::Relaxed);
        h.max_pages.store(layout.max_pages, Ordering::Relaxed);
        h.arena_blocks.store(layout.arena_blocks, Ordering::Relaxed);
        for (f, v) in [
            (&h.commit_seq, init.commit_seq),
            (&h.swept, init.commit_seq),
            (&h.epoch, 1),
            (&h.limit_lag, init.limit_lag),
            (&h.limit_versions, init.limit_versions),
        ] {
            f.store(v, Ordering::Relaxed);
        }
        m.back_tables(init.data_size / PAGE as u64)?;
        Ok(m)
    }

    /// Lets other processes attach: the first opener calls it when the
    /// whole state is in place (after any records are published), just
    /// before it lets them in. Until then `attach` says `NotReady`.
    pub fn mark_ready(&self) {
        self.hdr().ready.store(1, Ordering::Release);
    }

    /// Maps an existing shared file, checking its layout.
    pub fn attach(path: &std::path::Path) -> Result<Mvcc, AttachError> {
        // Never created here: a file made by a joiner would be empty.
        let probe = match SharedFile::open_existing(path, PAGE) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(AttachError::NotReady("missing"));
            }
            r => r.map_err(AttachError::Io)?,
        };
        let len = probe.file_len().map_err(AttachError::Io)?;
        if len < PAGE as u64 {
            return Err(AttachError::NotReady("empty"));
        }
        let h: &Header = probe.at(0);
        let magic = h.magic.load(Ordering::Acquire);
        if magic != MAGIC && magic != 0 {
            return Err(AttachError::Layout("not a txmap shared state file".into()));
        }
        if magic == 0 || h.ready.load(Ordering::Acquire) != 1 {
            return Err(AttachError::NotReady(
                "not marked ready by its first opener",
            ));
        }
        let v = h.layout_version.load(Ordering::Relaxed);
        if v != LAYOUT_VERSION {
            return Err(AttachError::Layout(format!(
                "shared state layout version {v}, this txmap uses {LAYOUT_VERSION} \
                 (close every process using the region, or use the same txmap version)"
            )));
        }
        let ps = h.page_size.load(Ordering::Relaxed);
        if ps as usize != PAGE {
            return Err(AttachError::Layout(format!(
                "shared state uses {ps}-byte pages, this txmap uses {PAGE}"
            )));
        }
        let layout = Layout::new(h.max_pages.load(Ordering::Relaxed));
        if layout.arena_blocks != h.arena_blocks.load(Ordering::Relaxed)
            || len < layout.total as u64
        {
            return Err(AttachError::Layout(
                "shared state file has the wrong size".into(),
            ));
        }
        drop(probe);
        let file = SharedFile::open_existing(path, layout.total).map_err(AttachError::Io)?;
        let held = file.share_byte(OPENER_BYTE).map_err(AttachError::Io)?;
        if !held || !file.still_at_path() {
            return Err(AttachError::Io(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                "the shared state was removed as stale while this process attached",
            )));
        }
        Ok(Mvcc::from_file(file, layout))
    }

    /// Removes the shared state file at `path` if no process has its region
    /// open (none holds the opener lock every opener takes) and it was made
    /// by this layout version (older ones took no such lock). Returns
    /// whether it was removed. A SIGKILLed last user leaves its file until
    /// the region is opened again; `txmap clean` calls this for each.
    pub fn remove_stale(path: &std::path::Path) -> std::io::Result<bool> {
        let f = SharedFile::open_existing(path, PAGE)?;
        if f.file_len()? < PAGE as u64 {
            return Ok(false);
        }
        let h: &Header = f.at(0);
        if h.magic.load(Ordering::Acquire) != MAGIC
            || h.layout_version.load(Ordering::Relaxed) != LAYOUT_VERSION
        {
            return Ok(false);
        }
        // Exclusive while held: no opener can take its shared lock meanwhile.
        if !f.lock_byte(OPENER_BYTE)? || !f.still_at_path() {
            return Ok(false);
        }
        std::fs::remove_file(path)?;
        Ok(true)
    }

    fn from_file(file: SharedFile, layout: Layout) -> Mvcc {
        let hdr = Fixed(NonNull::from(file.at::<Header>(0)));
        let slots = Fixed(NonNull::from(file.slice::<Slot>(layout.slots, MAX_SLOTS + 1)).cast());
        Mvcc {
            file,
            layout,
            hdr,
            slots,
            mine: (0..=MAX_SLOTS).map(|_| AtomicBool::new(false)).collect(),
            claims: std::sync::Mutex::new(()),
            pid: u64::from(std::process::id()),
        }
    }

    pub fn path(&self) -> &std::path::Path {
        self.file.path()
    }

    #[inline]
    pub fn hdr(&self) -> &Header {
        // SAFETY: checked by `SharedFile::at` in `from_file`; the mapping
        // lives, unmoved, as long as `self.file`, and so as long as `self`.
        unsafe { self.hdr.0.as_ref() }
    }

    #[inline]
    fn slots(&self) -> &[Slot] {
        // SAFETY: as in `hdr` (checked by `SharedFile::slice`).
        unsafe { std::slice::from_raw_parts(self.slots.0.as_ptr(), MAX_SLOTS + 1) }
    }

    /// View slots up to the highest ever claimed (not the checkpoint slot).
    /// A view claims its slot, and so raises the bound, before its first
    /// snapshot or read.
    fn view_slots(&self) -> &[Slot] {
        let high = self.hdr().slots_high.load(Ordering::SeqCst) as usize;
        &self.slots()[..high.min(MAX_SLOTS)]
    }

    fn entry(&self, page: usize) -> Option<&PageEntry> {
        if page as u64 >= self.hdr().table_pages.load(Ordering::Acquire) {
            return None;
        }
        Some(
            self.file
                .at(self.layout.pages + page * size_of::<PageEntry>()),
        )
    }

    fn dirty_list(&self) -> &[AtomicU64] {
        self.file
            .slice(self.layout.dirty, self.layout.max_pages as usize)
    }

    fn journal(&self) -> &[JournalEntry] {
        self.file.slice(self.layout.journal, JOURNAL_LEN as usize)
    }

    fn meta(&self, b: u64) -> &BlockMeta {
        debug_assert!(b < self.layout.arena_blocks);
        self.file
            .at(self.layout.meta + b as usize * size_of::<BlockMeta>())
    }

    fn block_data(&self, b: u64) -> *mut u8 {
        self.file.addr(self.layout.data + b as usize * PAGE, PAGE)
    }

    pub fn max_pages(&self) -> usize {
        self.layout.max_pages as usize
    }

    /// Backs the per-page tables for pages `[0, pages)`. Caller holds the
    /// grow lock (or is the initialiser).
    pub fn back_tables(&self, pages: u64) -> std::io::Result<()> {
        let h = self.hdr();
        let have = h.table_pages.load(Ordering::Acquire);
        if pages <= have {
            return Ok(());
        }
        if pages > self.layout.max_pages {
            return Err(std::io::Error::other(
                "region larger than the shared tables",
            ));
        }
        let l = &self.layout;
        let e = size_of::<PageEntry>() as u64;
        self.file
            .allocate(l.pages as u64 + have * e, (pages - have) * e)?;
        self.file
            .allocate(l.dirty as u64 + have * 8, (pages - have) * 8)?;
        h.table_pages.store(pages, Ordering::Release);
        Ok(())
    }

    /// Takes the shared commit lock.
    pub fn lock(&self) -> std::io::Result<Locked<'_>> {
        let g = self.hdr().commit_lock.lock()?;
        Ok(Locked {
            owner_died: g.owner_died,
            hdr: self.hdr(),
            unwinding_before: std::thread::panicking(),
            _guard: g,
        })
    }

    /// The sequence number of the newest commit.
    pub fn commit_seq(&self) -> u64 {
        self.hdr().commit_seq.load(Ordering::Acquire)
    }

    /// The newest commit a snapshot may see: the newest commit, but below
    /// any commit across several regions not yet durable in every writer's
    /// log (`group.rs`), and so below everything after it.
    pub fn visible_seq(&self) -> u64 {
        // The newest commit first, then the cap (as `begin`): read the
        // other way round, a group added and published in between would
        // be counted visible though pending (the cap read before it).
        let newest = self.hdr().commit_seq.load(Ordering::SeqCst);
        newest.min(self.hdr().log.visible_cap())
    }

    /// How many slots this process holds (views and paused transactions).
    pub fn own_slots(&self) -> usize {
        self.mine
            .iter()
            .filter(|m| m.load(Ordering::Relaxed))
            .count()
    }

    /// Whether a slot is claimed by another handle or process (a view, a
    /// paused transaction, a backup's snapshot, an abandoned ordered
    /// number): a hint, read without a lock, that a commit cannot be the
    /// only one with the region (`View::large_enough_for_place`).
    pub fn others_hold_slots(&self) -> bool {
        self.view_slots()
            .iter()
            .zip(self.mine.iter())
            .any(|(s, m)| s.owner.load(Ordering::Relaxed) != 0 && !m.load(Ordering::Relaxed))
    }

    /// Slot `i`'s transaction ran nested top actions under log `token` (0:
    /// it ended).
    pub fn set_nta_token(&self, i: usize, token: u64) {
        self.slots()[i].nta_token.store(token, Ordering::SeqCst);
    }

    /// Slot `i` no longer holds `token` (if it still does: a released
    /// slot may hold another view's by now).
    pub fn clear_nta_token(&self, i: usize, token: u64) {
        let _ = self.slots()[i].nta_token.compare_exchange(
            token,
            0,
            Ordering::SeqCst,
            Ordering::SeqCst,
        );
    }

    /// The nested-top-action tokens live slots hold (dead ones are reaped
    /// first by the caller).
    pub fn nta_tokens(&self) -> Vec<u64> {
        self.view_slots()
            .iter()
            .map(|s| s.nta_token.load(Ordering::SeqCst))
            .filter(|&t| t != 0)
            .collect()
    }

    /// Claims a free slot for a view of this process: first its liveness
    /// lock (released by the kernel if the process dies), then ownership.
    pub fn claim_slot(&self) -> Option<usize> {
        let _claims = crate::os::lock::lock(&self.claims);
        self.try_claim().or_else(|| {
            self.reap_dead_slots_claiming();
            self.try_claim()
        })
    }

    /// `claim_slot`'s search, under `claims`.
    fn try_claim(&self) -> Option<usize> {
        for (i, s) in self.slots()[..MAX_SLOTS].iter().enumerate() {
            if s.owner.load(Ordering::Relaxed) != 0 {
                continue;
            }
            if !matches!(self.file.lock_byte(i as u64), Ok(true)) {
                continue;
            }
            if s.owner
                .compare_exchange(0, self.pid, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
            {
                self.hdr()
                    .slots_high
                    .fetch_max(i as u64 + 1, Ordering::SeqCst);
                self.mine[i].store(true, Ordering::Relaxed);
                return Some(i);
            }
            let _ = self.file.unlock_byte(i as u64);
        }
        None
    }

    pub fn release_slot(&self, i: usize) {
        // Owner cleared, `mine` cleared and lock released as one step for
        // this process's other threads (see `claims`).
        let _claims = crate::os::lock::lock(&self.claims);
        self.set_file_reads(i, None);
        self.set_nta_token(i, 0);
        self.end(i);
        self.priority_release(i);
        // A number still held stays claimed by the slot until a waiter
        // skips it (mvcc/order.rs).
        let owner = if self.order_claim_of(i).is_some() {
            order::ABANDONED
        } else {
            0
        };
        self.slots()[i].owner.store(owner, Ordering::SeqCst);
        self.mine[i].store(false, Ordering::Relaxed);
        let _ = self.file.unlock_byte(i as u64);
    }

    /// Clears the slots of processes that died (their liveness lock is free,
    /// or the owner pid no longer exists), releasing their snapshots and the
    /// versions those pinned. Returns how many were cleared.
    pub fn reap_dead_slots(&self) -> usize {
        let _claims = crate::os::lock::lock(&self.claims);
        self.reap_dead_slots_claiming()
    }

    /// `reap_dead_slots` under `claims`: a slot not `mine` is then held
    /// by no thread of this process, so taking its liveness lock proves
    /// that no live process holds it.
    fn reap_dead_slots_claiming(&self) -> usize {
        let mut n = 0;
        for (i, s) in self.view_slots().iter().enumerate() {
            let owner = s.owner.load(Ordering::SeqCst);
            if owner == 0 || owner == order::ABANDONED || self.mine[i].load(Ordering::Relaxed) {
                continue;
            }
            if matches!(self.file.lock_byte(i as u64), Ok(true)) {
                // We hold its lock (and `claims`), so nobody can claim it
                // meanwhile.
                if s.owner.load(Ordering::SeqCst) != 0 {
                    self.priority_release(i);
                    s.snapshot.store(0, Ordering::SeqCst);
                    s.epoch.store(0, Ordering::SeqCst);
                    s.expired.store(0, Ordering::SeqCst);
                    s.file_reads.store(0, Ordering::SeqCst);
                    s.nta_token.store(0, Ordering::SeqCst);
                    if self.order_claim_of(i).is_some() {
                        // Its number stays claimed until a waiter skips it.
                        s.owner.store(order::ABANDONED, Ordering::SeqCst);
                        if self.order_claim_of(i).is_none() {
                            s.owner.store(0, Ordering::SeqCst);
                        }
                    } else {
                        s.owner.store(0, Ordering::SeqCst);
                    }
                    n += 1;
                }
                let _ = self.file.unlock_byte(i as u64);
            } else if !process_alive(owner as u32) && s.owner.load(Ordering::SeqCst) == owner {
                // The lock is held through a descriptor a forked child
                // inherited: the slot stays taken, its transaction is gone.
                s.nta_token.store(0, Ordering::SeqCst);
                if s.snapshot.swap(0, Ordering::SeqCst) != 0
                    || s.epoch.swap(0, Ordering::SeqCst) != 0
                {
                    n += 1;
                }
            }
        }
        n
    }

    /// Registers a snapshot for slot `i`; returns it. (Reading versions is
    /// guarded separately, per copy, with `enter`/`leave`.)
    #[inline]
    pub fn begin(&self, i: usize) -> u64 {
        let h = self.hdr();
        let slot = &self.slots()[i];
        // Relaxed: the SeqCst (release) store of the snapshot below orders
        // it before anything that sees the new snapshot, which is all an
        // expiry compares against. One locked instruction less per begin.
        slot.expired.store(0, Ordering::Relaxed);
        loop {
            let s = h.commit_seq.load(Ordering::SeqCst).min(h.log.visible_cap());
            slot.snapshot.store(s + 1, Ordering::SeqCst);
            // A checkpoint that missed our slot published its horizon first; if
            // it is past our snapshot, take a newer one.
            if h.horizon.load(Ordering::SeqCst) <= s {
                return s;
            }
        }
    }

    /// Notes when slot `i`'s snapshot began (shown by `txmap info`).
    #[inline]
    pub fn stamp(&self, i: usize, unix_secs: u64) {
        self.slots()[i].since.store(unix_secs, Ordering::Relaxed);
    }

    /// Drops the snapshot of slot `i`.
    #[inline]
    pub fn end(&self, i: usize) {
        // Release: the transaction's reads come before it; whoever scans
        // the slots may see the snapshot a little longer, which only holds
        // back what it frees (no decision waits on seeing it gone first).
        self.slots()[i].snapshot.store(0, Ordering::Release);
    }

    /// Enters the read side without a snapshot (a fault outside a transaction).
    /// Returns false if the slot was already inside.
    pub fn enter(&self, i: usize) -> bool {
        let slot = &self.slots()[i];
        if slot.epoch.load(Ordering::Relaxed) != 0 {
            return false;
        }
        slot.epoch
            .store(self.hdr().epoch.load(Ordering::SeqCst), Ordering::SeqCst);
        true
    }

    /// Enters the read side as [`Mvcc::enter`] does; returns `None` if the
    /// slot was already inside, else the epoch read after entering. A
    /// version reached while inside stays unfreed (its block unchanged)
    /// for as long as the epoch is unchanged: freeing it takes a `retire`,
    /// whose increment comes after any walk that could still reach it.
    /// So a later turn whose epoch is the same may read a version found
    /// on an earlier one without walking the chain again
    /// (`view/inplace.rs`).
    #[inline]
    pub fn enter_epoch(&self, i: usize) -> Option<u64> {
        let slot = &self.slots()[i];
        if slot.epoch.load(Ordering::Relaxed) != 0 {
            return None;
        }
        let h = self.hdr();
        slot.epoch
            .store(h.epoch.load(Ordering::SeqCst), Ordering::SeqCst);
        // Read again after the store: a retire whose increment this load
        // does not see scans the slots after the store, and sees us.
        Some(h.epoch.load(Ordering::SeqCst))
    }

    /// Leaves the read side.
    #[inline]
    pub fn leave(&self, i: usize) {
        // Release, not SeqCst: a reclaimer that loads 0 sees every read of
        // the turn done; one that still loads the epoch only waits longer.
        // One locked instruction less per turn (per read in place).
        self.slots()[i].epoch.store(0, Ordering::Release);
    }

    /// Live snapshots: (count, oldest).
    pub fn snapshots(&self) -> (usize, Option<u64>) {
        let live = self.live_snapshots();
        let oldest = live.iter().map(|s| s.snapshot).min();
        (live.len(), oldest)
    }

    /// Every live snapshot with its owner and start time.
    pub fn live_snapshots(&self) -> Vec<LiveSnapshot> {
        self.view_slots()
            .iter()
            .filter_map(|s| {
                let v = s.snapshot.load(Ordering::SeqCst);
                (v != 0).then(|| LiveSnapshot {
                    snapshot: v - 1,
                    pid: s.owner.load(Ordering::Relaxed) as u32,
                    since: s.since.load(Ordering::Relaxed),
                    expired: s.expired.load(Ordering::Relaxed) == v,
                })
            })
            .collect()
    }

    /// The newest version of `page` visible to snapshot `s`, if it is still in
    /// memory (else the region file holds it). Must be called on the read side.
    pub fn lookup(&self, page: usize, s: u64) -> Option<VersionRef<'_>> {
        let mut l = self.entry(page)?.head.load(Ordering::SeqCst);
        while l != 0 {
            let m = self.meta(l - 1);
            let seq = m.seq.load(Ordering::SeqCst);
            if seq <= s {
                // SAFETY: a linked block's content is immutable until it is
                // freed, which waits for every reader that could see it (module
                // docs); it lies inside the mapping (block index < arena size).
                let data = unsafe { &*(self.block_data(l - 1) as *const [u8; PAGE]) };
                return Some(VersionRef { seq, data });
            }
            l = m.next.load(Ordering::SeqCst);
        }
        None
    }

    /// The sequence number of the last commit that wrote `page`.
    pub fn page_seq(&self, page: usize) -> u64 {
        self.entry(page)
            .map_or(0, |e| e.seq.load(Ordering::Acquire))
    }

    /// True if the region file holds the version of `page` that snapshot
    /// `s` reads, and keeps holding it until a commit after `s` writes the
    /// page: the last commit that wrote the page is at or below both `s`
    /// and the last checkpoint (whose header is written before its bound is
    /// published, so the file has every page's newest version up to it).
    /// Sufficient, not necessary: a page rewritten with equal bytes, or
    /// checkpointed by a checkpoint not yet published, reads false. The page
    /// may map the file's page (issue 20, docs/design/shared-pages.md) only
    /// while this holds; a commit after `s` that writes the page makes the
    /// next checkpoint overwrite it, which the checkpoint's fence handles.
    pub fn file_holds(&self, page: usize, s: u64) -> bool {
        // The page's sequence first: a checkpoint between the loads only
        // raises the bound, and a commit after the first load is after `s`.
        let seq = self.page_seq(page);
        seq <= s && seq <= self.hdr().file.checkpoint_seq()
    }

    /// Whether a checkpoint has written every commit up to `s` into the
    /// region file: with nothing committed after `s`, the file then holds
    /// every page's version at `s` (`file_holds` of each).
    pub fn checkpointed_to(&self, s: u64) -> bool {
        self.hdr().file.checkpoint_seq() >= s
    }

    /// Slot `i`'s transaction at snapshot `s` reads pages straight from the
    /// region file (`Some`), or no longer does (`None`).
    pub fn set_file_reads(&self, i: usize, s: Option<u64>) {
        self.slots()[i]
            .file_reads
            .store(s.map_or(0, |s| s + 1), Ordering::SeqCst);
    }

    /// The snapshot at which slot `i` reads pages from the region file.
    pub fn file_reads(&self, i: usize) -> Option<u64> {
        self.slots()[i]
            .file_reads
            .load(Ordering::SeqCst)
            .checked_sub(1)
    }

    /// The fence generation (`fence_gen`), which a fence thread sleeps on.
    pub fn fence_word(&self) -> &std::sync::atomic::AtomicU32 {
        &self.hdr().fence_gen
    }

    /// Slot `i`'s process applied fence generation `g` to its view.
    pub fn fence_ack(&self, i: usize, g: u32) {
        // The maximum: the owner's own acknowledgement (when it starts
        // reading from the file) may come after the fence thread's newer one.
        self.slots()[i]
            .fence_ack
            .fetch_max(u64::from(g), Ordering::SeqCst);
    }

    /// The checkpoint's fence (issue 20): asks every process to make
    /// private, in views whose snapshot is below `t`, the pages read from
    /// the region file that a commit after the snapshot wrote, and waits
    /// until every such view's process has done so (dead ones are reaped).
    /// False if one did not answer within `limit` (a stopped process): the
    /// caller must not write versions newer than that view's snapshot.
    /// (Generations are compared as numbers: 2^32 checkpoints wrap them.)
    pub fn fence(&self, t: u64, limit: std::time::Duration) -> bool {
        let reading = |s: &Slot| {
            let r = s.file_reads.load(Ordering::SeqCst);
            r != 0 && r - 1 < t && s.snapshot.load(Ordering::SeqCst) != 0
        };
        // Nobody reads from the file below `t`: a view that starts to
        // later checks pages after the commits up to `t` were published,
        // so it never maps one this checkpoint overwrites. No wake-up then.
        if !self.view_slots().iter().any(reading) {
            return true;
        }
        let word = self.fence_word();
        let g = word.fetch_add(1, Ordering::SeqCst).wrapping_add(1);
        crate::os::lock::futex_wake_all(word);
        let start = std::time::Instant::now();
        let mut rounds = 0u32;
        loop {
            // The oldest generation a reading slot acknowledged.
            let oldest = self
                .view_slots()
                .iter()
                .filter(|s| reading(s))
                .map(|s| s.fence_ack.load(Ordering::SeqCst))
                .min();
            if oldest.is_none_or(|a| a >= u64::from(g)) {
                return true;
            }
            // A slot that did not answer the fence before this one either
            // (a reader acknowledges the generation it starts at, and its
            // fence thread every later one) belongs to a stopped process:
            // only the first checkpoint after it stopped waits for it.
            let stuck = oldest.is_some_and(|a| a < u64::from(g.wrapping_sub(1)));
            if stuck && rounds > 0 {
                return false;
            }
            rounds += 1;
            if start.elapsed() > limit {
                return false;
            }
            if rounds.is_multiple_of(64) {
                self.reap_dead_slots();
            }
            std::thread::sleep(std::time::Duration::from_micros(50));
        }
    }

    /// The sequence number of the newest version of `page` in memory.
    pub fn head_seq(&self, page: usize) -> Option<u64> {
        let l = self.entry(page)?.head.load(Ordering::Acquire);
        (l != 0).then(|| self.meta(l - 1).seq.load(Ordering::Acquire))
    }

    /// The sequence number of the oldest version of `page` in memory.
    fn tail_seq(&self, page: usize) -> Option<u64> {
        let mut l = self.entry(page)?.head.load(Ordering::Acquire);
        let mut seq = None;
        while l != 0 {
            let m = self.meta(l - 1);
            seq = Some(m.seq.load(Ordering::Acquire));
            l = m.next.load(Ordering::Acquire);
        }
        seq
    }

    /// Copy-on-checkpoint: links `data` (the page's content in the region
    /// file, about to be overwritten) as the oldest version of `page`,
    /// labelled `label` (the oldest live snapshot, which is below every
    /// version in the chain, so every snapshot that reads the file now reads
    /// this instead). Caller reserved the block. Returns false if the chain
    /// no longer needs it (its oldest version is at or below `label`).
    pub fn preserve(
        &self,
        l: &Locked<'_>,
        page: u32,
        label: u64,
        data: &[u8],
    ) -> std::io::Result<bool> {
        let Some(e) = self.entry(page as usize) else {
            return Ok(false);
        };
        let mut at: &AtomicU64 = &e.head;
        loop {
            let c = at.load(Ordering::Acquire);
            if c == 0 {
                break;
            }
            if self.meta(c - 1).seq.load(Ordering::Acquire) <= label {
                return Ok(false);
            }
            at = &self.meta(c - 1).next;
        }
        if std::ptr::eq(at, &e.head) || data.len() != PAGE {
            return Ok(false); // no chain: nothing reads past the file
        }
        let b = self.alloc_block(l)?;
        // SAFETY: block b was just allocated under the commit lock and is
        // unreachable until linked below.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), self.block_data(b), PAGE) };
        let m = self.meta(b);
        m.seq.store(label, Ordering::Relaxed);
        m.next.store(0, Ordering::Relaxed);
        at.store(link(b), Ordering::SeqCst);
        self.hdr().preserved_count.fetch_add(1, Ordering::Relaxed);
        Ok(true)
    }

    /// Waits until every reader that might have looked a page up before now
    /// has finished its copy (each copies one page between `enter` and
    /// `leave`), so a region file page that no chain lookup leads to any
    /// more can be overwritten. Reaps dead readers; false if a live one is
    /// still inside after `limit` (a stopped process).
    pub fn wait_for_readers(&self, limit: std::time::Duration) -> bool {
        let e = self.hdr().epoch.fetch_add(1, Ordering::SeqCst);
        let start = std::time::Instant::now();
        let mut rounds = 0u32;
        loop {
            let busy = self.view_slots().iter().any(|s| {
                let x = s.epoch.load(Ordering::SeqCst);
                x != 0 && x <= e
            });
            if !busy {
                return true;
            }
            rounds += 1;
            if rounds.is_multiple_of(64) {
                if start.elapsed() > limit {
                    return false;
                }
                self.reap_dead_slots();
                std::thread::sleep(std::time::Duration::from_micros(100));
            } else {
                std::thread::yield_now();
            }
        }
    }

    fn alloc_block(&self, _l: &Locked<'_>) -> std::io::Result<u64> {
        let h = self.hdr();
        let f = h.free_head.load(Ordering::Acquire);
        if f != 0 {
            h.free_head.store(
                self.meta(f - 1).next.load(Ordering::Acquire),
                Ordering::Release,
            );
            h.blocks_in_use.fetch_add(1, Ordering::Relaxed);
            return Ok(f - 1);
        }
        let b = h.arena_fresh.load(Ordering::Acquire);
        if b >= self.layout.arena_blocks {
            return Err(std::io::Error::other(format!(
                "the shared version store is full ({} page versions); a long-running \
                 transaction may be holding old versions (see `txmap info`)",
                self.layout.arena_blocks
            )));
        }
        let backed = h.arena_backed.load(Ordering::Acquire);
        if b >= backed {
            self.back(backed, (backed + ARENA_CHUNK).min(self.layout.arena_blocks))?;
        }
        h.arena_fresh.store(b + 1, Ordering::Release);
        h.blocks_in_use.fetch_add(1, Ordering::Relaxed);
        Ok(b)
    }

    /// Makes sure `n` blocks can be allocated without failing (backed with
    /// memory now), so a commit whose record is logged can always be published.
    pub fn reserve(&self, l: &Locked<'_>, n: usize) -> std::io::Result<()> {
        let run = self.reserve_unmapped(l, n)?;
        self.map_reserved(run);
        Ok(())
    }

    /// `reserve`, but the run of fresh blocks it backed is mapped only by
    /// `map_reserved` (a hint, so any thread may call it later: a large
    /// commit maps them while its record syncs, not before it is written).
    pub fn reserve_unmapped(&self, _l: &Locked<'_>, n: usize) -> std::io::Result<FreshRun> {
        let h = self.hdr();
        let FreshRun {
            from: fresh,
            n: need,
        } = self.fresh_for(n as u64);
        if need == 0 {
            return Ok(FreshRun::default());
        }
        if fresh + need > self.layout.arena_blocks {
            return Err(std::io::Error::other(format!(
                "the shared version store is full ({} page versions); a long-running \
                 transaction may be holding old versions (see `txmap info`)",
                self.layout.arena_blocks
            )));
        }
        let backed = h.arena_backed.load(Ordering::Acquire);
        if fresh + need > backed {
            let want = (fresh + need).div_ceil(ARENA_CHUNK) * ARENA_CHUNK;
            self.back(backed, want.min(self.layout.arena_blocks))?;
        }
        Ok(FreshRun {
            from: fresh,
            n: need,
        })
    }

    /// The fresh blocks `n` new versions would take beyond the free list:
    /// from the arena's first never-used block on.
    fn fresh_for(&self, n: u64) -> FreshRun {
        let h = self.hdr();
        let fresh = h.arena_fresh.load(Ordering::Acquire);
        let free = fresh.saturating_sub(h.blocks_in_use.load(Ordering::Relaxed));
        FreshRun {
            from: fresh,
            n: n.saturating_sub(free),
        }
    }

    /// Maps arena blocks `[from, from + n)` in this process, writable
    /// (`MADV_POPULATE_WRITE`). Only a hint.
    fn map_blocks(&self, from: u64, n: u64) {
        self.file.populate(
            self.layout.data as u64 + from * PAGE as u64,
            n * PAGE as u64,
        );
    }

    /// Backs arena blocks `[from, upto)` with memory (their data pages and
    /// metadata), then raises the backed mark to `upto`. Blocks are never
    /// given back, and allocating memory that is already there changes
    /// nothing, so this needs no lock: a commit under the lock and
    /// [`Mvcc::back_ahead`] beside it may back the same blocks, and the mark
    /// only ever covers blocks one of them backed.
    fn back(&self, from: u64, upto: u64) -> std::io::Result<()> {
        if upto <= from {
            return Ok(());
        }
        let l = &self.layout;
        let ms = size_of::<BlockMeta>() as u64;
        self.file
            .allocate(l.meta as u64 + from * ms, (upto - from) * ms)?;
        self.file.allocate(
            l.data as u64 + from * PAGE as u64,
            (upto - from) * PAGE as u64,
        )?;
        self.hdr().arena_backed.fetch_max(upto, Ordering::AcqRel);
        Ok(())
    }

    /// Without the commit lock, while a large transaction is still writing
    /// (`view/prefill.rs`): backs the fresh blocks a commit of `n` pages would
    /// take, and maps those from `mapped_from` on in this process, so that
    /// the commit's `reserve` and `publish` find them ready. Returns the
    /// block up to which this process has them mapped (pass it back next
    /// time). Only a hint: on failure the commit backs them itself and
    /// reports the error there.
    pub fn back_ahead(&self, n: u64, mapped_from: u64) -> u64 {
        let FreshRun {
            from: fresh,
            n: need,
        } = self.fresh_for(n);
        let upto = (fresh + need).min(self.layout.arena_blocks);
        let backed = self.hdr().arena_backed.load(Ordering::Acquire);
        if self.back(backed, upto).is_err() {
            return mapped_from;
        }
        let from = mapped_from.max(fresh);
        if upto > from {
            self.map_blocks(from, upto - from);
        }
        upto.max(mapped_from)
    }

    /// How many arena blocks are backed with memory.
    pub fn arena_backed(&self) -> u64 {
        self.hdr().arena_backed.load(Ordering::Acquire)
    }

    /// Maps a run of fresh blocks `reserve_unmapped` backed: a large commit
    /// (a bulk load) fills it, and one call costs less than a fault on each
    /// copy in `publish`. Only a hint.
    pub fn map_reserved(&self, run: FreshRun) {
        if run.n >= POPULATE_MIN {
            self.map_blocks(run.from, run.n);
        }
    }

    fn free_block(&self, b: u64) {
        let h = self.hdr();
        self.meta(b)
            .next
            .store(h.free_head.load(Ordering::Acquire), Ordering::Release);
        h.free_head.store(link(b), Ordering::Release);
        h.blocks_in_use.fetch_sub(1, Ordering::Relaxed);
    }

    /// Commit `seq` whose pages went straight into the region file, which
    /// is checkpointed at `seq` already (a round alone with the region,
    /// `RegionInner::commit_round_in_place`): no versions; each page's last
    /// writer becomes `seq`, so readers take it from the file, and the
    /// change journal lists it for views' revalidation.
    pub fn publish_in_file(&self, _l: &Locked<'_>, seq: u64, pages: &[u32]) {
        let h = self.hdr();
        assert_eq!(
            seq,
            h.commit_seq.load(Ordering::Acquire) + 1,
            "commits publish in order"
        );
        for &page in pages {
            if let Some(e) = self.entry(page as usize) {
                e.seq.store(seq, Ordering::Release);
            }
        }
        self.journal_commit(seq, pages.iter().copied());
    }

    /// Lists commit `seq`'s `pages` in the change journal, then makes `seq`
    /// the commit sequence (the last step of a publication).
    fn journal_commit(&self, seq: u64, pages: impl ExactSizeIterator<Item = u32>) {
        let h = self.hdr();
        let j = self.journal();
        let head = h.journal_head.load(Ordering::Acquire);
        let n = pages.len() as u64;
        for (k, page) in pages.enumerate() {
            let x = &j[((head + k as u64) % JOURNAL_LEN) as usize];
            x.seq.store(seq, Ordering::Release);
            x.page.store(page.into(), Ordering::Release);
        }
        h.journal_head.store(head + n, Ordering::Release);
        h.commit_seq.store(seq, Ordering::Release);
    }

    /// Publishes commit `seq`: new versions (copied from `pages`), per-page
    /// sequence, dirty list, journal, then the commit sequence itself.
    /// Idempotent per page (a page whose newest version is already `seq` is
    /// skipped), so a repair can finish a dead committer's publication.
    ///
    /// Chains of these pages are pruned to what some snapshot or the next
    /// checkpoint can still need (see `PrunePlan`).
    pub fn publish(
        &self,
        l: &Locked<'_>,
        seq: u64,
        pages: &[(u32, &[u8])],
        durable: u64,
    ) -> std::io::Result<()> {
        let h = self.hdr();
        assert_eq!(
            seq,
            h.commit_seq.load(Ordering::Acquire) + 1,
            "commits publish in order"
        );
        let plan = self.prune_plan(durable);
        let mut unlinked = Vec::new();
        for (k, &(page, data)) in pages.iter().enumerate() {
            if k == pages.len() / 2 {
                crate::debug::hit(crate::debug::CrashPoint::CommitPublishing);
            }
            let e = self
                .entry(page as usize)
                .ok_or_else(|| std::io::Error::other("page beyond the shared tables"))?;
            let head = self.head_seq(page as usize);
            if head != Some(seq) {
                assert_eq!(data.len(), PAGE);
                // Chains run newest first; lookups (paired) stop at the
                // first version at or below a snapshot.
                assert!(
                    head.is_none_or(|h| h < seq),
                    "version {seq} of page {page} linked above newer {head:?}"
                );
                let b = self.alloc_block(l)?;
                // SAFETY: block b was just allocated to us under the commit
                // lock and is not reachable by any reader until linked below.
                unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), self.block_data(b), PAGE) };
                let m = self.meta(b);
                m.seq.store(seq, Ordering::Relaxed);
                m.next
                    .store(e.head.load(Ordering::Acquire), Ordering::Relaxed);
                e.head.store(link(b), Ordering::SeqCst);
            }
            self.prune_page(page as usize, &plan, &mut unlinked);
            e.seq.store(seq, Ordering::Release);
            if e.dirty.load(Ordering::Acquire) == 0 {
                let n = h.dirty_count.load(Ordering::Acquire);
                self.dirty_list()[n as usize].store(page.into(), Ordering::Release);
                h.dirty_count.store(n + 1, Ordering::Release);
                e.dirty.store(1, Ordering::Release);
            }
        }
        self.journal_commit(seq, pages.iter().map(|&(page, _)| page));
        if !unlinked.is_empty() {
            self.retire(l, unlinked);
        }
        self.enforce_memory(plan.durable);
        Ok(())
    }

    /// Prunes one page's chain if the plan's bound advanced since its last pruning.
    fn prune_page(&self, page: usize, plan: &PrunePlan, out: &mut Vec<u64>) {
        let Some(e) = self.entry(page) else { return };
        if plan.durable > e.pruned_to.load(Ordering::Relaxed) {
            self.prune_chain(&e.head, plan, false, out);
            e.pruned_to.store(plan.durable, Ordering::Relaxed);
        }
    }

    /// Unlinks the versions of a chain that no snapshot can read and no
    /// checkpoint will write; pushes every unlinked block onto `out`. With
    /// `drop_base` (after a checkpoint wrote `plan.durable` to the region
    /// file), the newest version at or below it goes too unless an older
    /// version is kept for a snapshot (a newer snapshot would find that one
    /// instead of reading the file).
    fn prune_chain(&self, head: &AtomicU64, plan: &PrunePlan, drop_base: bool, out: &mut Vec<u64>) {
        let mut at: &AtomicU64 = head;
        // The newest version at or below `durable`.
        let mut kept = loop {
            let cur = at.load(Ordering::Acquire);
            if cur == 0 {
                return;
            }
            if self.meta(cur - 1).seq.load(Ordering::Acquire) <= plan.durable {
                break cur - 1;
            }
            at = &self.meta(cur - 1).next;
        };
        let kept_seq = self.meta(kept).seq.load(Ordering::Acquire);
        let mut want = plan
            .live
            .iter()
            .copied()
            .filter(|&s| s < kept_seq)
            .peekable();
        if drop_base && plan.live.is_empty() {
            // The file has it and no live snapshot is below the checkpoint.
            // (With one there, keep it even if the snapshot is past it: a
            // commit's pruning may have unlinked the version the checkpoint
            // wrote, so the file can hold a newer one than `kept`.)
            at.store(0, Ordering::SeqCst);
            let mut t = link(kept);
            while t != 0 {
                out.push(t - 1);
                t = self.meta(t - 1).next.load(Ordering::Acquire);
            }
            return;
        }
        loop {
            let next = self.meta(kept).next.load(Ordering::Acquire);
            if next == 0 {
                return;
            }
            let n = next - 1;
            let nseq = self.meta(n).seq.load(Ordering::Acquire);
            match want.peek() {
                None => {
                    // Nobody needs anything older: drop the whole tail.
                    self.meta(kept).next.store(0, Ordering::SeqCst);
                    let mut t = next;
                    while t != 0 {
                        out.push(t - 1);
                        t = self.meta(t - 1).next.load(Ordering::Acquire);
                    }
                    return;
                }
                Some(&s) if nseq <= s => {
                    while want.next_if(|&s| s >= nseq).is_some() {}
                    kept = n;
                }
                Some(_) => {
                    // Superseded before any live snapshot: readers skip it.
                    self.meta(kept)
                        .next
                        .store(self.meta(n).next.load(Ordering::Acquire), Ordering::SeqCst);
                    out.push(n);
                }
            }
        }
    }

    /// After the log was synced up to `durable`: prunes the chains of pages
    /// that commits since the last sweep wrote.
    pub fn prune_synced(&self, l: &Locked<'_>, durable: u64) {
        let h = self.hdr();
        let swept = h.swept.load(Ordering::Acquire);
        let upto = self.commit_seq();
        if upto <= swept {
            return;
        }
        let mut pages = Vec::new();
        if !self.changed_pages(swept, upto, |p| pages.push(p)) {
            let n = h.dirty_count.load(Ordering::Acquire) as usize;
            pages.extend(
                self.dirty_list()[..n]
                    .iter()
                    .map(|p| p.load(Ordering::Acquire) as u32),
            );
        }
        h.swept.store(upto, Ordering::Release);
        pages.sort_unstable();
        pages.dedup();
        let plan = self.prune_plan(durable);
        let mut unlinked = Vec::new();
        for p in pages {
            self.prune_page(p as usize, &plan, &mut unlinked);
        }
        if !unlinked.is_empty() {
            self.retire(l, unlinked);
        }
        self.enforce_memory(plan.durable);
    }

    /// Calls `f` for each page changed by commits in `(after, upto]`; false if
    /// the journal no longer reaches back that far. Lock-free: entries read
    /// are re-validated against the ring's head afterwards.
    #[inline]
    pub fn changed_pages(&self, after: u64, upto: u64, f: impl FnMut(u32)) -> bool {
        after >= upto || self.changed_pages_walk(after, upto, f)
    }

    /// `changed_pages` when commits came after `after`.
    fn changed_pages_walk(&self, after: u64, upto: u64, mut f: impl FnMut(u32)) -> bool {
        let h = self.hdr();
        let j = self.journal();
        let head = h.journal_head.load(Ordering::Acquire);
        let lo = head.saturating_sub(JOURNAL_LEN);
        let mut i = head;
        let mut reached = false;
        while i > lo {
            i -= 1;
            let e = &j[(i % JOURNAL_LEN) as usize];
            let s = e.seq.load(Ordering::Acquire);
            if s <= after {
                reached = true;
                break;
            }
            if s <= upto {
                f(e.page.load(Ordering::Acquire) as u32);
            }
        }
        if !reached && lo > 0 {
            return false;
        }
        // Entries we read must not have been overwritten while we read them.
        h.journal_head
            .load(Ordering::Acquire)
            .saturating_sub(JOURNAL_LEN)
            <= i
    }

    /// What chains must keep now (see `PrunePlan`). Publishes the horizon
    /// first, so a snapshot that registers after the scan is at or above
    /// `durable` and needs nothing the plan drops.
    fn prune_plan(&self, durable: u64) -> PrunePlan {
        // Never past what snapshots may see: a snapshot that starts below
        // a pending group must find every version it reads.
        let durable = durable.min(self.visible_seq());
        self.hdr().horizon.fetch_max(durable, Ordering::SeqCst);
        self.enforce_lag();
        self.live_below(durable)
    }

    /// The plan that keeps what live snapshots below `bound` read.
    fn live_below(&self, bound: u64) -> PrunePlan {
        let mut live: Vec<u64> = self
            .view_slots()
            .iter()
            .map(|s| s.snapshot.load(Ordering::SeqCst))
            .filter(|&v| v != 0 && v - 1 < bound)
            .map(|v| v - 1)
            .collect();
        live.sort_unstable_by(|a, b| b.cmp(a));
        live.dedup();
        PrunePlan {
            durable: bound,
            live,
        }
    }

    /// Applies the lag part of the snapshot limit (shared header): expires
    /// every snapshot more than `limit_lag` commits behind.
    fn enforce_lag(&self) {
        let lag = self.hdr().limit_lag.load(Ordering::Relaxed);
        if lag != 0 {
            let now = self.commit_seq();
            for s in self.view_slots() {
                let v = s.snapshot.load(Ordering::SeqCst);
                if v != 0 && now.saturating_sub(v - 1) > lag {
                    self.expire_slot(s, v);
                }
            }
        }
    }

    /// Applies the memory part (after pruning, so versions of snapshots that
    /// ended are gone): while more than `limit_versions` page versions are
    /// held, expires the oldest snapshot below `durable`, one at a time (the
    /// next only once the expired one ended, as its versions go only then).
    fn enforce_memory(&self, durable: u64) {
        let h = self.hdr();
        let versions = h.limit_versions.load(Ordering::Relaxed);
        if versions != 0 && h.blocks_in_use.load(Ordering::Relaxed) > versions {
            self.expire_oldest(durable);
        }
    }

    fn expire_slot(&self, s: &Slot, v: u64) {
        if s.expired.swap(v, Ordering::SeqCst) != v {
            self.hdr().expired_count.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Expires the oldest live snapshot below `bound` (every slot holding
    /// it), unless an expired one is still live. Returns whether it did.
    pub fn expire_oldest(&self, bound: u64) -> bool {
        let mut oldest = None;
        for s in self.view_slots() {
            let v = s.snapshot.load(Ordering::SeqCst);
            if v == 0 {
                continue;
            }
            if s.expired.load(Ordering::SeqCst) == v {
                return false; // wait for it to end
            }
            if v - 1 < bound && oldest.is_none_or(|o| v < o) {
                oldest = Some(v);
            }
        }
        let Some(o) = oldest else { return false };
        for s in self.view_slots() {
            if s.snapshot.load(Ordering::SeqCst) == o {
                self.expire_slot(s, o);
            }
        }
        true
    }

    /// True if the snapshot limit expired slot `i`'s snapshot `snapshot`.
    #[inline]
    pub fn expired(&self, i: usize, snapshot: u64) -> bool {
        self.slots()[i].expired.load(Ordering::Acquire) == snapshot + 1
    }

    /// The snapshot limit as (lag in commits, page versions); 0 = none.
    pub fn limit(&self) -> (u64, u64) {
        let h = self.hdr();
        (
            h.limit_lag.load(Ordering::Relaxed),
            h.limit_versions.load(Ordering::Relaxed),
        )
    }

    /// Snapshots expired by the limit, and page images preserved by
    /// checkpoints, since the shared state was created.
    pub fn expiry_counts(&self) -> (u64, u64) {
        let h = self.hdr();
        (
            h.expired_count.load(Ordering::Relaxed),
            h.preserved_count.load(Ordering::Relaxed),
        )
    }

    /// Returns `T = min(limit, newest visible commit)`, published so that no snapshot
    /// below `T` can start from now on, and the oldest live snapshot, read
    /// after publishing (every snapshot missed is `>= T`).
    pub fn horizon(&self, limit: u64) -> (u64, Option<u64>) {
        // A pending group (not durable in every log) stays out of the file.
        let t0 = limit.min(self.visible_seq());
        self.hdr().horizon.fetch_max(t0, Ordering::SeqCst);
        (t0, self.snapshots().1)
    }

    /// Enters the read side for a checkpoint. Callers hold the shared
    /// checkpoint lock (one slot serves every process's checkpoints).
    pub fn pin_for_checkpoint(&self) -> CheckpointPin<'_> {
        // A checkpointer that died left the slot inside: take it over.
        self.leave(CHECKPOINT_SLOT);
        self.enter(CHECKPOINT_SLOT);
        CheckpointPin { mvcc: self }
    }

    /// After versions up to `t` reached the region file: unlinks those no
    /// live snapshot below `t` still reads, and frees what no reader can
    /// still see. Pages left without versions leave the dirty list.
    pub fn trim(&self, l: &Locked<'_>, t: u64) {
        let h = self.hdr();
        let list = self.dirty_list();
        let plan = self.live_below(t);
        let mut unlinked = Vec::new();
        let mut i = 0;
        while i < h.dirty_count.load(Ordering::Acquire) as usize {
            let p = list[i].load(Ordering::Acquire) as usize;
            let Some(e) = self.entry(p) else {
                i += 1;
                continue;
            };
            self.prune_chain(&e.head, &plan, true, &mut unlinked);
            if e.head.load(Ordering::Acquire) == 0 {
                // Swap-remove from the dirty list, the flag first: a process
                // that dies in between leaves the page listed twice at worst
                // (see `dedupe_dirty`), never flagged but unlisted, which
                // would keep its next versions out of every checkpoint.
                e.dirty.store(0, Ordering::Release);
                self.unlist(i);
            } else {
                i += 1;
            }
        }
        self.retire(l, unlinked);
    }

    /// After a process died holding the commit lock: removes pages listed
    /// twice in the dirty list (a death inside `publish` or `trim` can leave
    /// one) and flags every listed page, so the list stays within its
    /// capacity. Every page with versions is listed: both add to the list
    /// before they flag, and remove after they unflag.
    pub fn dedupe_dirty(&self, _l: &Locked<'_>) {
        let h = self.hdr();
        let list = self.dirty_list();
        let mut seen = std::collections::HashSet::new();
        let mut i = 0;
        while i < h.dirty_count.load(Ordering::Acquire) as usize {
            let p = list[i].load(Ordering::Acquire);
            if seen.insert(p) {
                if let Some(e) = self.entry(p as usize) {
                    e.dirty.store(1, Ordering::Release);
                }
                i += 1;
            } else {
                self.unlist(i);
            }
        }
    }

    /// Removes entry `i` of the dirty list (the last entry takes its place).
    fn unlist(&self, i: usize) {
        let h = self.hdr();
        let list = self.dirty_list();
        let n = h.dirty_count.load(Ordering::Acquire) - 1;
        list[i].store(list[n as usize].load(Ordering::Acquire), Ordering::Release);
        h.dirty_count.store(n, Ordering::Release);
    }

    /// Hands unlinked blocks to reclamation and frees those no reader can reach.
    fn retire(&self, _l: &Locked<'_>, unlinked: Vec<u64>) {
        let h = self.hdr();
        let e = h.epoch.fetch_add(1, Ordering::SeqCst);
        for b in unlinked {
            let m = self.meta(b);
            m.retire_epoch.store(e, Ordering::Relaxed);
            m.retire_next.store(0, Ordering::Release);
            let head = h.retired_head.load(Ordering::Acquire);
            if head == 0 {
                h.retired_head.store(link(b), Ordering::Release);
            } else {
                self.meta(h.retired_tail.load(Ordering::Acquire) - 1)
                    .retire_next
                    .store(link(b), Ordering::Release);
            }
            h.retired_tail.store(link(b), Ordering::Release);
            h.retired_count.fetch_add(1, Ordering::Relaxed);
        }
        let mut min_active = self.min_active_epoch();
        if h.retired_count.load(Ordering::Relaxed) > 4 * ARENA_CHUNK {
            let head = h.retired_head.load(Ordering::Acquire);
            if head != 0
                && self.meta(head - 1).retire_epoch.load(Ordering::Relaxed) >= min_active
                && self.reap_dead_slots() > 0
            {
                min_active = self.min_active_epoch();
            }
        }
        loop {
            let head = h.retired_head.load(Ordering::Acquire);
            if head == 0 {
                break;
            }
            let m = self.meta(head - 1);
            if m.retire_epoch.load(Ordering::Relaxed) >= min_active {
                break;
            }
            h.retired_head
                .store(m.retire_next.load(Ordering::Acquire), Ordering::Release);
            h.retired_count.fetch_sub(1, Ordering::Relaxed);
            // Unlinked at an epoch no active reader entered at or before, so
            // nothing references it any more.
            self.free_block(head - 1);
        }
    }

    fn min_active_epoch(&self) -> u64 {
        self.view_slots()
            .iter()
            .chain(std::iter::once(&self.slots()[CHECKPOINT_SLOT]))
            .map(|s| s.epoch.load(Ordering::SeqCst))
            .filter(|&e| e != 0)
            .min()
            .unwrap_or(u64::MAX)
    }

    /// Unlinked versions not yet freed (waiting for readers to move on).
    pub fn retired(&self) -> usize {
        self.hdr().retired_count.load(Ordering::Relaxed) as usize
    }

    /// Page versions held in shared memory (linked or waiting to be freed).
    pub fn version_pages(&self) -> usize {
        self.hdr().blocks_in_use.load(Ordering::Relaxed) as usize
    }

    /// Pages that have versions in memory.
    pub fn dirty_pages(&self) -> usize {
        self.hdr().dirty_count.load(Ordering::Relaxed) as usize
    }
}

/// A live transaction's snapshot, for `txmap info`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LiveSnapshot {
    pub snapshot: u64,
    pub pid: u32,
    /// Unix time (seconds) it began.
    pub since: u64,
    /// The snapshot limit expired it: its next checked access or commit fails.
    pub expired: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page(b: u8) -> Vec<u8> {
        vec![b; PAGE]
    }

    fn mvcc(name: &str) -> Mvcc {
        mvcc_pages(name, 4)
    }

    fn mvcc_pages(name: &str, pages: u64) -> Mvcc {
        let p =
            std::path::PathBuf::from(format!("/dev/shm/txmap-unit-{name}-{}", std::process::id()));
        let m = Mvcc::create(
            &p,
            &Init {
                region_id: 1,
                max_pages: pages,
                commit_seq: 0,
                data_size: pages * PAGE as u64,
                region_generation: 1,
                log: crate::wal::shared::LogInit {
                    durable: true,
                    header: crate::wal::format::LogHeader {
                        region_id: 1,
                        generation: 1,
                        salt: 1,
                        start_seq: 1,
                    },
                    last_seq: 0,
                    end: 4096,
                    allocated: 4096,
                },
                limit_lag: 0,
                limit_versions: 0,
            },
            0o600,
        )
        .unwrap();
        let _ = std::fs::remove_file(&p);
        m
    }

    /// Issue 20's check "the region file holds my version", against a model:
    /// random commits, checkpoints (with copy-on-checkpoint and trim, as the
    /// engine runs them) and snapshots of many ages. For every live snapshot
    /// and page, what the chain or the file gives must be the model's
    /// version at the snapshot, and wherever `file_holds` says yes, the
    /// model's file must hold exactly that version.
    #[test]
    fn file_holds_agrees_with_a_model_of_chains_checkpoints_and_snapshots() {
        const PAGES: usize = 6;
        let mut said = [0u64; 2];
        for seed in 0..40u64 {
            let m = mvcc_pages(&format!("holds-{seed}"), PAGES as u64);
            let mut rng = crate::rand::SplitMix(seed);
            // Model: every version of every page (seq, tag), the file's tag
            // per page (0 at creation), the last checkpoint's bound.
            let mut versions: Vec<Vec<(u64, u8)>> = vec![Vec::new(); PAGES];
            let mut file = [0u8; PAGES];
            let mut ckpt = 0u64;
            let mut generation = 1u64;
            let mut live: Vec<(usize, u64)> = Vec::new();
            let at = |v: &Vec<(u64, u8)>, s: u64| {
                v.iter()
                    .rev()
                    .find(|&&(q, _)| q <= s)
                    .map_or(0, |&(_, t)| t)
            };
            for _step in 0..120 {
                match rng.next() % 8 {
                    0..=3 => {
                        let seq = m.commit_seq() + 1;
                        let tag = (seq % 250 + 1) as u8;
                        let data = page(tag);
                        let mut ps: Vec<u32> = (0..PAGES as u32)
                            .filter(|_| rng.next().is_multiple_of(3))
                            .collect();
                        if ps.is_empty() {
                            ps.push((rng.next() % PAGES as u64) as u32);
                        }
                        let l = m.lock().unwrap();
                        m.reserve(&l, ps.len()).unwrap();
                        let pages: Vec<(u32, &[u8])> = ps.iter().map(|&p| (p, &data[..])).collect();
                        m.publish(&l, seq, &pages, seq - 1).unwrap();
                        for &p in &ps {
                            versions[p as usize].push((seq, tag));
                        }
                    }
                    4 => {
                        // A checkpoint of everything committed, as the engine's.
                        let g = m.hdr().file.lock_checkpoint().unwrap();
                        let pin = m.pin_for_checkpoint();
                        let l = m.lock().unwrap();
                        let (t, oldest) = m.horizon(m.commit_seq());
                        if t > ckpt {
                            let (write, preserve) = pin.pages(&l, t, ckpt, oldest, true);
                            m.reserve(&l, preserve.len()).unwrap();
                            for &p in &preserve {
                                let o = oldest.expect("preserving for a live snapshot");
                                m.preserve(&l, p, o, &page(file[p as usize])).unwrap();
                            }
                            for (p, v) in write {
                                let want = at(&versions[p as usize], t);
                                assert_eq!(v.data[0], want, "checkpoint writes the version at {t}");
                                file[p as usize] = v.data[0];
                            }
                            generation += 1;
                            m.hdr().file.checkpointed(&g, generation, t);
                            ckpt = t;
                        }
                        drop(pin);
                        m.trim(&l, ckpt);
                    }
                    5 | 6 if live.len() < 12 => {
                        let slot = m.claim_slot().unwrap();
                        live.push((slot, m.begin(slot)));
                    }
                    _ if !live.is_empty() => {
                        let (slot, _) = live.swap_remove((rng.next() % live.len() as u64) as usize);
                        m.end(slot);
                        m.release_slot(slot);
                    }
                    _ => {}
                }
                let now = m.commit_seq();
                let mut snaps: Vec<u64> = live.iter().map(|&(_, s)| s).collect();
                snaps.push(now);
                for &s in &snaps {
                    for p in 0..PAGES {
                        let want = at(&versions[p], s);
                        let got = m.lookup(p, s).map_or(file[p], |v| v.data[0]);
                        assert_eq!(got, want, "seed {seed}: page {p} at snapshot {s}");
                        let holds = m.file_holds(p, s);
                        said[holds as usize] += 1;
                        if holds {
                            assert_eq!(
                                file[p], want,
                                "seed {seed}: file_holds({p}, {s}) but the file has another version"
                            );
                        }
                    }
                }
            }
            for (slot, _) in live {
                m.release_slot(slot);
            }
        }
        assert!(
            said[0] > 1000 && said[1] > 1000,
            "both answers are exercised: {said:?}"
        );
    }

    /// A checkpoint wrote version 2; a later commit's pruning unlinked it
    /// (no snapshot between 2 and 3), keeping version 1 for a live snapshot
    /// at 1. The trim after the checkpoint must keep version 1: the file
    /// holds 2, which that snapshot must not see.
    #[test]
    fn trim_keeps_an_old_snapshots_version_when_pruning_removed_the_written_one() {
        let m = mvcc("trim-pruned");
        let l = m.lock().unwrap();
        m.publish(&l, 1, &[(0, &page(1))], 0).unwrap();
        let slot = m.claim_slot().unwrap();
        assert_eq!(m.begin(slot), 1);
        m.publish(&l, 2, &[(0, &page(2))], u64::MAX).unwrap();
        let pin = m.pin_for_checkpoint();
        let (write, preserve) = pin.pages(&l, 2, 0, Some(1), true);
        assert_eq!(
            write.iter().map(|(p, v)| (*p, v.seq)).collect::<Vec<_>>(),
            [(0, 2)]
        );
        assert!(
            preserve.is_empty(),
            "the snapshot at 1 has version 1 in the chain"
        );
        drop(pin);
        m.publish(&l, 3, &[(0, &page(3))], u64::MAX).unwrap();
        m.publish(&l, 4, &[(0, &page(4))], u64::MAX).unwrap();
        assert_eq!(
            m.lookup(0, 2).map(|v| v.seq),
            Some(1),
            "pruning unlinked version 2"
        );
        m.trim(&l, 2);
        let v = m.lookup(0, 1).expect("the live snapshot's version");
        assert_eq!((v.seq, v.data[0]), (1, 1));
        m.release_slot(slot);
    }

    #[test]
    fn a_checkpoint_pin_keeps_unlinked_versions_alive() {
        let m = mvcc("pin");
        let l = m.lock().unwrap();
        m.publish(&l, 1, &[(0, &page(1))], 0).unwrap();
        m.publish(&l, 2, &[(0, &page(2))], 0).unwrap();
        let pin = m.pin_for_checkpoint();
        let pages = pin.pages(&l, 1, 0, None, true).0;
        assert_eq!(pages.len(), 1);
        let v1 = pages[0].1;
        assert_eq!((v1.seq, v1.data[0]), (1, 1));
        // Synced up to 2: a commit now unlinks version 1 (only 2 is needed).
        m.publish(&l, 3, &[(0, &page(3))], 2).unwrap();
        assert_eq!(m.lookup(0, 1).map(|v| v.seq), None, "version 1 is unlinked");
        assert_eq!(
            m.retired(),
            1,
            "but not freed while the checkpoint holds it"
        );
        assert_eq!((v1.seq, v1.data[4095]), (1, 1));
        drop(pin);
        m.publish(&l, 4, &[(0, &page(4))], 3).unwrap();
        assert_eq!(m.retired(), 0, "freed once the checkpoint let go");
        assert_eq!(
            m.version_pages(),
            2,
            "versions 3 and 4 remain, 1 and 2 were freed"
        );
    }

    #[test]
    fn publishing_twice_is_idempotent_and_the_journal_reports_each_commit() {
        let m = mvcc("idem");
        let l = m.lock().unwrap();
        m.publish(&l, 1, &[(0, &page(1)), (2, &page(1))], 0)
            .unwrap();
        let mut seen = Vec::new();
        assert!(m.changed_pages(0, 1, |p| seen.push(p)));
        seen.sort();
        assert_eq!(seen, vec![0, 2]);
        // A repair re-publishing commit 2 after page 0 was already linked.
        m.publish(&l, 2, &[(0, &page(2))], 0).unwrap();
        m.hdr().commit_seq.store(1, Ordering::SeqCst);
        m.publish(&l, 2, &[(0, &page(2)), (1, &page(2))], 0)
            .unwrap();
        assert_eq!(m.lookup(0, 2).unwrap().seq, 2);
        assert_eq!(
            m.lookup(0, 1).unwrap().data[0],
            1,
            "version 1 still below 2"
        );
        assert_eq!(
            m.version_pages(),
            4,
            "page 0 has two versions, pages 1 and 2 one"
        );
    }

    /// A process that died inside `publish` (listed, not yet flagged) leaves
    /// the page listed twice once a repair publishes the commit again; the
    /// repair's dedupe brings the list back to one entry per page, every
    /// one flagged, so a later trim unlists a page only once its chain is
    /// empty and the checkpoint still finds every page with versions.
    #[test]
    fn dedupe_after_a_death_lists_each_page_with_versions_once() {
        let m = mvcc("dedupe");
        let l = m.lock().unwrap();
        m.publish(&l, 1, &[(0, &page(1)), (3, &page(1))], 0)
            .unwrap();
        // The death: page 3 listed again, its flag not yet set.
        let h = m.hdr();
        let n = h.dirty_count.load(Ordering::SeqCst);
        m.dirty_list()[n as usize].store(3, Ordering::SeqCst);
        h.dirty_count.store(n + 1, Ordering::SeqCst);
        m.entry(3).unwrap().dirty.store(0, Ordering::SeqCst);
        m.dedupe_dirty(&l);
        let mut listed: Vec<u64> = m.dirty_list()[..m.dirty_pages()]
            .iter()
            .map(|p| p.load(Ordering::SeqCst))
            .collect();
        listed.sort();
        assert_eq!(listed, [0, 3]);
        assert_eq!(m.entry(3).unwrap().dirty.load(Ordering::SeqCst), 1);
        // The file has commit 1: trim empties both chains and the list.
        m.trim(&l, 1);
        assert_eq!(m.dirty_pages(), 0);
        // Page 3 is listed again by its next commit, so a checkpoint sees it.
        m.publish(&l, 2, &[(3, &page(2))], 1).unwrap();
        let pin = m.pin_for_checkpoint();
        let pages = pin.pages(&l, 2, 1, None, true).0;
        assert_eq!(
            pages.iter().map(|(p, v)| (*p, v.seq)).collect::<Vec<_>>(),
            [(3, 2)]
        );
    }

    /// A panic unwinds through the commit lock and unlocks it without
    /// marking it inconsistent: the region is poisoned instead, so no
    /// process commits on what the panicking thread left half done.
    #[test]
    fn a_panic_holding_the_commit_lock_poisons_the_region() {
        let m = mvcc("panic");
        drop(m.lock().unwrap());
        assert!(!m.hdr().log.is_poisoned());
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _l = m.lock().unwrap();
            panic!("inside the lock");
        }));
        assert!(r.is_err());
        let msg = crate::wal::log::poison_message(&m.hdr().log).unwrap_or_default();
        assert!(msg.contains("panicked holding the commit lock"), "{msg}");
        let l = m.lock().unwrap();
        assert!(!l.owner_died, "the lock itself was released normally");
        drop(l);
        // A whole lock section run by a `Drop` during an unrelated panic
        // (a region closed while its thread unwinds) poisons nothing.
        let m = mvcc("panic-drop");
        struct CloseOnUnwind<'a>(&'a Mvcc);
        impl Drop for CloseOnUnwind<'_> {
            fn drop(&mut self) {
                drop(self.0.lock().unwrap());
            }
        }
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _close = CloseOnUnwind(&m);
            panic!("unrelated");
        }));
        assert!(r.is_err());
        assert!(!m.hdr().log.is_poisoned());
    }
}
