//! Views: one mapping of a region per thread, and transactions on it.
//!
//! A view reserves address space for the region's maximum size and maps a
//! private memory file there twice: at the user's address, where protection
//! tracks first touches, and at a hidden alias that is always writable and
//! receives page contents. A page's content is *valid* when it equals the
//! committed version at the view's last snapshot; valid pages stay mapped
//! between transactions, and `begin` invalidates only pages that commits
//! changed since (from the MVCC change journal). Stores land in the private
//! file, never in the region file; at commit the written pages are diffed
//! against their snapshot versions (still in the version store or the
//! region file, since validation requires them unchanged) to form the log
//! record.

mod apply;
mod fair;
mod fault;
mod fence;
mod filemap;
mod group;
mod inplace;
mod nta;
mod ordered;
mod pause;
mod prefill;
mod rounds;

pub use pause::Paused;

/// The nested top actions of a transaction (`nta.rs`), as a paused one
/// carries them (`pause.rs`).
type NestedActions = Option<Box<nta::Nested>>;

use std::borrow::Cow;
use std::mem::ManuallyDrop;
use std::os::fd::AsFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, AtomicU64, AtomicUsize, Ordering};

use crate::engine::{Ahead, CommitRequest, RegionRef};
use crate::error::{Error, Result};
use crate::os::mem::{Access, PAGE};
use crate::os::signal::{self, Registration};
pub use crate::viewmem::{MAX_READ_PAGES, MAX_WRITE_PAGES};
use crate::viewmem::{POOLED_VIEWS, ViewMemory, page_state};
use crate::wal::format::Range;

const TOUCH_READ: u32 = 1;
const TOUCH_WRITE: u32 = 2;
/// The page is writable at the user address (a store faulted or was declared).
const TOUCH_EXPOSED_RW: u32 = 4;
/// Read through the view's mapping of the region file in this transaction
/// (`ViewInner::file_access`).
const TOUCH_FILE: u32 = 8;
/// Low bits of a `touched` entry; the transaction serial is above them.
const TOUCH_BITS: u32 = 4;
const DOOM_USER: u8 = 1;
const DOOM_READ_ONLY_WRITE: u8 = 2;
const DOOM_TOO_LARGE: u8 = 3;
/// Readable pages kept mapped before a view re-protects everything, to stay
/// far below `vm.max_map_count` (each isolated page costs two mappings).
const MAX_ISLANDS: u64 = 16 * 1024;
/// Cache lines at a page's end that `View::prefetch_node` asks for: the
/// first three or four entries of a leaf of 24-byte keys and 150-byte
/// values (3 and 16 lines measured slower on the redb workload's range
/// reads).
const PREFETCH_TAIL: usize = 8;
/// The smallest commit (bytes of pages written) that goes straight into
/// the region file when alone with it (`View::large_enough_for_place`),
/// whatever `checkpoint_bytes` says: below it the log's one write is the
/// cheaper path.
const IN_PLACE_MIN_BYTES: u64 = 16 << 20;

/// Isolation level of a read-write transaction.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Isolation {
    /// Every page read must be unchanged at commit (the default).
    #[default]
    Serializable,
    /// Only pages written must be unchanged at commit (write skew is possible).
    Snapshot,
}

/// How a transaction runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct TxnOptions {
    /// A read-only transaction never aborts; a store in it dooms it.
    pub read_only: bool,
    pub isolation: Isolation,
}

impl TxnOptions {
    pub const READ_ONLY: TxnOptions = TxnOptions {
        read_only: true,
        isolation: Isolation::Serializable,
    };
    pub const SNAPSHOT: TxnOptions = TxnOptions {
        read_only: false,
        isolation: Isolation::Snapshot,
    };
}

/// Advisory access for [`View::set_page_access`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PageAccess {
    Read,
    Write,
}

pub(crate) struct ViewInner {
    region: RegionRef,
    /// The view's slot in the shared state; changes only while no
    /// transaction is open (pausing hands the slot to the paused
    /// transaction and claims another, `pause.rs`).
    slot: AtomicUsize,
    /// Opened at an address the caller chose: its memory is freed at close,
    /// never pooled, so the address is free again at once whatever else
    /// holds the region (a flusher thread's handle; in a forked child, the
    /// parent's handles).
    fixed: bool,
    /// Taken back in `drop` (to be pooled), never touched after.
    mem: ManuallyDrop<ViewMemory>,
    read_n: AtomicUsize,
    write_n: AtomicUsize,
    active: AtomicBool,
    read_only: AtomicBool,
    track_reads: AtomicBool,
    /// Serializable without a read set: pages readable at begin are read
    /// without a fault, and commit conflicts if a commit since the snapshot
    /// changed a page this transaction touched or, while pages are exposed
    /// at the user address, any page valid in this view (see `begin_with`).
    untracked_reads: AtomicBool,
    /// Serializable transactions to run with tracked reads before trying
    /// untracked ones again, and how many the next untracked conflict sets.
    tracked_left: AtomicU32,
    tracked_penalty: AtomicU32,
    snapshot: AtomicU64,
    serial: AtomicU32,
    doomed: AtomicU8,
    faults: AtomicU64,
    /// Pages copied into the view so far (`mark_installed`).
    installed: AtomicU64,
    /// Faults since the whole view was last protected (an upper bound on islands).
    islands: AtomicU64,
    valid_seq: AtomicU64,
    last_commit: AtomicU64,
    /// Entries of `mem.file_set` in this transaction.
    file_n: AtomicUsize,
    /// Runs of user pages this transaction mapped from the file (`filemap.rs`).
    ufile_runs: AtomicUsize,
    /// Pages `[0, whole)` of the user range map the region file since this
    /// read-only transaction began (`filemap.rs`, `map_file_whole`); 0
    /// otherwise.
    whole: AtomicUsize,
    /// The `ufile` flags of some page below `whole` changed (the fence made
    /// it private, or a store mapped the memory file back over it).
    whole_dirty: AtomicBool,
    /// No transaction began in this view yet.
    first_txn: AtomicBool,
    /// `View::base` was called: the program reads by plain loads.
    base_taken: AtomicBool,
    /// The serial of the view's first transaction while it may still map
    /// the whole file when `View::base` is first called in it (0: none).
    whole_serial: AtomicU32,
    /// Pages of `mem.file` the fence made private in this transaction.
    file_private: fence::PrivatePages,
    /// The view may hand out pages of its file mapping (false once pages
    /// the fence made private could not be given back).
    file_ok: AtomicBool,
    /// Resident private pages at which a transaction trims the ones it has
    /// not touched (`fault.rs`, `trim_private`).
    trim_at: AtomicUsize,
    /// Commutative operations of the open transaction left their local
    /// results in pages it did not touch: nothing is trimmed until it ends.
    commuted: AtomicBool,
    /// In a round's transaction, the pages a write fault makes writable
    /// at once (`fault.rs`, `round_fault`); 0 in any other transaction.
    round_window: AtomicUsize,
    /// The page after the last run a round's write fault made writable.
    round_next: AtomicUsize,
    /// Versions read in place, by page (`inplace.rs`).
    versions: inplace::VersionCache,
    /// Requests to a large write transaction's helper (`prefill.rs`).
    prefill: Arc<prefill::PrefillAsks>,
}

impl ViewInner {
    fn slot(&self) -> usize {
        self.slot.load(Ordering::Relaxed)
    }

    /// Whether pages may be readable at the user address (plain loads
    /// faulted since the whole view was last protected).
    fn exposed(&self) -> bool {
        self.islands.load(Ordering::Relaxed) > 0
    }

    /// Pages written from which a commit alone with its region goes in
    /// place (`View::large_enough_for_place`): half of `checkpoint_bytes`,
    /// and at least `IN_PLACE_MIN_BYTES`.
    fn in_place_pages(&self) -> usize {
        let bytes = (self.region.opts.checkpoint_bytes / 2).max(IN_PLACE_MIN_BYTES);
        usize::try_from(bytes / PAGE as u64).unwrap_or(usize::MAX)
    }
}

impl Drop for ViewInner {
    fn drop(&mut self) {
        // SAFETY: `mem` is taken here once and the struct is never used again.
        let mem = unsafe { ManuallyDrop::take(&mut self.mem) };
        // A forked child must not hand its parent's view memory to a view of its own.
        if self.fixed || self.region.check_owner().is_err() {
            return;
        }
        if self.region.view_pool().len() >= POOLED_VIEWS {
            return;
        }
        // Reset outside the pool's lock: it takes a few system calls.
        let keep = self.region.opts.view_private_pages;
        if let Some(m) = mem.recycle(self.exposed(), keep) {
            let mut pool = self.region.view_pool();
            if pool.len() < POOLED_VIEWS {
                pool.push(m);
            }
        }
    }
}

/// One mapping of a region, used by one thread at a time.
///
/// Inside a transaction, loads see one consistent snapshot and stores stay
/// private until commit. Outside one, the mapping shows committed data and
/// rejects stores loudly.
///
/// ```
/// # let dir = std::env::temp_dir().join(format!("txmap-doc-view-{}", std::process::id()));
/// # std::fs::create_dir_all(&dir).unwrap();
/// let region = txmap::Region::create(&dir.join("v.txm"), 1 << 20, Default::default()).unwrap();
/// let mut view = region.view().unwrap();
/// view.run(|v| {
///     let n: u64 = v.read(0)?;
///     v.write(0, &(n + 1))
/// }).unwrap();
/// view.begin_read().unwrap();
/// assert_eq!(view.read::<u64>(0).unwrap(), 1);
/// view.commit().unwrap();
/// # drop(view); drop(region); std::fs::remove_dir_all(&dir).unwrap();
/// ```
pub struct View {
    /// A large write transaction's helper (`prefill.rs`). First, so that
    /// it is joined before `inner`'s memory goes.
    prefill: Option<prefill::Prefill>,
    inner: Box<ViewInner>,
    registration: Option<Registration>,
    depth: u32,
    /// Pages a resumed untracked transaction may have read before it was
    /// paused (sorted): its commit validates them as it does touched pages.
    paused_reads: Vec<u32>,
    /// Registered operations applied in the open transaction (`apply.rs`).
    op_log: Option<Box<apply::OpLog>>,
    /// Conflicts in a row (`view/fair.rs`).
    conflicts: u32,
    /// Nested top actions of the open transaction (`nta.rs`).
    nta: Option<Box<nta::Nested>>,
    /// Nested top actions begun by `nta_begin` and not yet ended.
    nta_open: Vec<nta::Open>,
    /// Committing a round (`rounds.rs`): it may go straight into the
    /// region file.
    rounds: bool,
}

// SAFETY: a view may move between threads; it is used by one at a time (&mut self).
unsafe impl Send for View {}

impl View {
    pub(crate) fn open(region: RegionRef, at: Option<usize>) -> Result<View> {
        region.check_owner()?;
        let max = region.opts.max_size as usize;
        // Not while a round writes pages straight into the file.
        let gate = region.round_gate.read().unwrap_or_else(|e| e.into_inner());
        let slot = region.mvcc.claim_slot().ok_or_else(|| {
            Error::TooLarge(format!(
                "too many views on one region (at most {})",
                crate::mvcc::MAX_SLOTS
            ))
        })?;
        drop(gate);
        let phase = region.fd_offset(0) as usize;
        let pooled = {
            let mut pool = region.view_pool();
            match at {
                None => pool.pop(),
                Some(a) => pool
                    .iter()
                    .position(|m| m.user.base() as usize == a)
                    .map(|i| pool.swap_remove(i)),
            }
        };
        let inner = match pooled {
            Some(m) => Ok(m),
            None => ViewMemory::new(max, at, phase, &region.path).or_else(|e| {
                // The address may be held by a closed view's memory: free it all.
                let mut pool = region.view_pool();
                if at.is_none() || pool.is_empty() {
                    return Err(e);
                }
                pool.clear();
                drop(pool);
                ViewMemory::new(max, at, phase, &region.path)
            }),
        }
        .map(|mem| {
            Box::new(ViewInner {
                mem: ManuallyDrop::new(mem),
                read_n: AtomicUsize::new(0),
                write_n: AtomicUsize::new(0),
                active: AtomicBool::new(false),
                read_only: AtomicBool::new(false),
                track_reads: AtomicBool::new(false),
                untracked_reads: AtomicBool::new(false),
                tracked_left: AtomicU32::new(0),
                tracked_penalty: AtomicU32::new(1),
                snapshot: AtomicU64::new(0),
                serial: AtomicU32::new(1),
                doomed: AtomicU8::new(0),
                faults: AtomicU64::new(0),
                installed: AtomicU64::new(0),
                islands: AtomicU64::new(0),
                valid_seq: AtomicU64::new(region.mvcc.visible_seq()),
                last_commit: AtomicU64::new(0),
                file_n: AtomicUsize::new(0),
                ufile_runs: AtomicUsize::new(0),
                whole: AtomicUsize::new(0),
                whole_dirty: AtomicBool::new(false),
                first_txn: AtomicBool::new(true),
                base_taken: AtomicBool::new(false),
                whole_serial: AtomicU32::new(0),
                file_private: Default::default(),
                file_ok: AtomicBool::new(false),
                trim_at: AtomicUsize::new((2 * region.opts.view_private_pages).max(64)),
                commuted: AtomicBool::new(false),
                round_window: AtomicUsize::new(0),
                round_next: AtomicUsize::new(usize::MAX),
                versions: Default::default(),
                prefill: Default::default(),
                slot: AtomicUsize::new(slot),
                fixed: at.is_some(),
                region: region.clone(),
            })
        });
        let inner = match inner {
            Ok(i) => i,
            Err(e) => {
                region.mvcc.release_slot(slot);
                return Err(e);
            }
        };
        let mut view = View {
            prefill: None,
            inner,
            registration: None,
            depth: 0,
            paused_reads: Vec::new(),
            op_log: None,
            conflicts: 0,
            nta: None,
            nta_open: Vec::new(),
            rounds: false,
        };
        view.sync_size()?;
        let ctx = &*view.inner as *const ViewInner as *const ();
        let reg = signal::register(
            view.inner.mem.user.base() as usize,
            view.inner.mem.user.len(),
            ctx,
            fault::handle,
        )
        .map_err(|e| Error::Os {
            op: "register view",
            source: e,
        })?;
        view.registration = Some(reg);
        let r: &crate::engine::RegionInner = &view.inner.region;
        r.fence.register(
            r as *const crate::engine::RegionInner as usize,
            &*view.inner as *const ViewInner as usize,
            fence::run,
        );
        view.inner.file_ok.store(true, Ordering::Relaxed);
        Ok(view)
    }

    /// Maps newly grown parts of the region into this view.
    #[inline]
    fn sync_size(&mut self) -> Result<()> {
        let v = &self.inner;
        let size = v.region.size() as usize;
        let old = v.mem.mapped.load(Ordering::Acquire);
        if size <= old {
            return Ok(());
        }
        self.grow_to(size, old)
    }

    /// `sync_size` once the region grew from `old` to `size` bytes.
    fn grow_to(&mut self, size: usize, old: usize) -> Result<()> {
        let v = &self.inner;
        // Another process may have grown the region: the fault handler copies
        // pages without a version from this process's image of the file, so
        // the image must cover the view before the view does.
        v.region.map_image(size as u64)?;
        crate::os::mem::set_len(&v.mem.memfd, size as u64)
            .map_err(|e| Error::os("size view memory", e))?;
        let fd = v.mem.memfd.as_fd();
        v.mem
            .alias
            .map_shared(old, size - old, fd, old as u64, Access::ReadWrite)
            .map_err(|e| Error::os("map view alias", e))?;
        v.mem
            .user
            .map_shared(old, size - old, fd, old as u64, Access::None)
            .map_err(|e| Error::os("map view", e))?;
        v.mem
            .file
            .map_file(
                old,
                size - old,
                (v.region.data.fd(), v.region.fd_offset(old as u64)),
                Access::Read,
                rustix::mm::MapFlags::PRIVATE,
            )
            .map_err(|e| Error::os("map the region file in a view", e))?;
        // Without it a fault on a page not in the page cache reads the
        // device's whole read-ahead window (8 MiB on this machine's disk):
        // a process reading at random under a memory limit smaller than the
        // region then spends its time re-reading what it just evicted.
        v.mem.file.advise_random(old, size - old);
        v.mem.mapped.store(size, Ordering::Release);
        Ok(())
    }

    /// Address of byte 0 of the region in this view, for plain loads and
    /// stores inside transactions.
    ///
    /// A view whose address was asked for is read by plain loads: its first
    /// transaction, if read-only and the region file holds every page at its
    /// snapshot, maps the file over the whole range at once (at its begin,
    /// or here if this is the first call and nothing was mapped yet), so its
    /// first loads take only the kernel's faults. A view used only through
    /// the accessors never pays for that mapping.
    pub fn base(&self) -> *mut u8 {
        let v = &*self.inner;
        if !v.base_taken.load(Ordering::Relaxed) {
            v.base_taken.store(true, Ordering::Relaxed);
            let serial = v.whole_serial.swap(0, Ordering::Relaxed);
            if self.depth > 0 && serial == v.serial.load(Ordering::Relaxed) {
                v.map_file_whole(v.snapshot.load(Ordering::Relaxed));
            }
        }
        v.mem.user.base()
    }

    /// Bytes of the region mapped in this view.
    pub fn len(&self) -> usize {
        self.inner.mem.mapped.load(Ordering::Acquire)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// True inside a transaction.
    pub fn in_transaction(&self) -> bool {
        self.depth > 0
    }

    /// The view's slot in the region's shared state: unique among the views
    /// open at once in every process (lowest free first).
    pub fn slot(&self) -> usize {
        self.inner.slot()
    }

    /// Bytes of private memory this view holds now: the pages of its
    /// memory file (copies and written pages), as the kernel counts them.
    /// Bounded by the open transaction's pages plus
    /// [`crate::Options::view_private_pages`].
    pub fn private_bytes(&self) -> u64 {
        self.inner.mem.private_bytes()
    }

    /// Page faults this view has handled (first touches).
    pub fn faults(&self) -> u64 {
        self.inner.faults.load(Ordering::Relaxed)
    }

    /// Pages this view has installed so far: copied into its private
    /// memory because it held no valid copy of them when they were
    /// touched. A page the view keeps between transactions (its own
    /// commits' pages, its cache) is not installed again.
    pub fn installed_pages(&self) -> u64 {
        self.inner.installed.load(Ordering::Relaxed)
    }

    /// Begins a serializable read-write transaction.
    pub fn begin(&mut self) -> Result<()> {
        self.begin_with(TxnOptions::default())
    }

    /// Begins a read-only transaction (never aborts).
    pub fn begin_read(&mut self) -> Result<()> {
        self.begin_with(TxnOptions::READ_ONLY)
    }

    /// Begins a transaction; a nested begin is folded into the outermost one.
    pub fn begin_with(&mut self, opts: TxnOptions) -> Result<()> {
        if self.depth > 0 {
            self.depth += 1;
            return Ok(());
        }
        let opts = self.begin_prepare(opts)?;
        let s = self.inner.region.mvcc.begin(self.inner.slot());
        self.begin_at(opts, s)
    }

    /// An outermost begin's first part, before its snapshot: the options
    /// it runs with (read-only on a read-only region), the view's size.
    pub(super) fn begin_prepare(&mut self, opts: TxnOptions) -> Result<TxnOptions> {
        // A forked child shares this view's private memory with its parent.
        self.inner.region.check_owner()?;
        // On a read-only region every transaction is read-only: a store
        // dooms it, and its commit says why (`Error::ReadOnly`).
        let opts = TxnOptions {
            read_only: opts.read_only || self.inner.region.opts.read_only,
            ..opts
        };
        self.sync_size()?;
        if !opts.read_only {
            self.take_priority_if_due();
        }
        Ok(opts)
    }

    /// An outermost begin's last part: the view brought to snapshot `s`,
    /// which its slot holds already (`Mvcc::begin`). On error the snapshot
    /// is dropped.
    pub(super) fn begin_at(&mut self, opts: TxnOptions, s: u64) -> Result<()> {
        let serializable = !opts.read_only && opts.isolation == Isolation::Serializable;
        // A serializable transaction skips read tracking (no re-protection
        // at begin, no fault on a page the view holds valid) and validates
        // at commit against the pages commits since its snapshot changed,
        // unless such a guess conflicted lately: then the next transactions
        // (1, 2, 4, ... up to 64 after repeated conflicts) track their
        // reads, so a retry never repeats an untracked conflict.
        let v = &*self.inner;
        let tracked_left = v.tracked_left.load(Ordering::Relaxed);
        let untracked = serializable && tracked_left == 0;
        if serializable && tracked_left > 0 {
            v.tracked_left.store(tracked_left - 1, Ordering::Relaxed);
        }
        let track_reads = serializable && !untracked;
        // For `txmap info` (coarse clock: a few nanoseconds).
        let now = rustix::time::clock_gettime(rustix::time::ClockId::RealtimeCoarse);
        self.inner
            .region
            .mvcc
            .stamp(self.inner.slot(), now.tv_sec as u64);
        if let Err(e) = self.refresh(s, track_reads) {
            // Do not leave a snapshot registered: it would hold back checkpoints.
            self.inner.region.mvcc.end(self.inner.slot());
            return Err(e);
        }
        self.inner.valid_seq.store(s, Ordering::Relaxed);
        if let Err(e) = self.next_serial() {
            self.inner.region.mvcc.end(self.inner.slot());
            return Err(e);
        }
        let v = &*self.inner;
        v.read_n.store(0, Ordering::Relaxed);
        v.write_n.store(0, Ordering::Relaxed);
        v.doomed.store(0, Ordering::Relaxed);
        v.read_only.store(opts.read_only, Ordering::Relaxed);
        v.track_reads.store(track_reads, Ordering::Relaxed);
        v.untracked_reads.store(untracked, Ordering::Relaxed);
        v.active.store(true, Ordering::Release);
        // A fresh view's first read-only transaction, in a program that
        // reads by plain loads (it asked for `base`), maps the whole file at
        // once: its first reads take only the kernel's faults. (A load
        // first, then a store: no locked instruction in every begin.)
        if v.first_txn.load(Ordering::Relaxed) {
            v.first_txn.store(false, Ordering::Relaxed);
            if opts.read_only {
                if v.base_taken.load(Ordering::Relaxed) {
                    v.map_file_whole(s);
                } else {
                    v.whole_serial
                        .store(v.serial.load(Ordering::Relaxed), Ordering::Relaxed);
                }
            }
        }
        self.depth = 1;
        Ok(())
    }

    /// Starts a new transaction serial: touch bits of earlier transactions
    /// no longer count.
    fn next_serial(&mut self) -> Result<()> {
        let serial =
            self.inner.serial.load(Ordering::Relaxed).wrapping_add(1) & (u32::MAX >> TOUCH_BITS);
        if serial == 0 {
            self.inner
                .mem
                .touched
                .clear()
                .map_err(|e| Error::os("reset view", e))?;
        }
        self.inner.serial.store(serial.max(1), Ordering::Relaxed);
        Ok(())
    }

    /// Brings the view to snapshot `s`: invalidates the pages commits changed
    /// since its last snapshot (or all, if the journal no longer reaches back),
    /// and re-protects everything when reads must be tracked or too many
    /// readable islands accumulated. A view whose pages were only used
    /// through the accessors has nothing accessible at the user address
    /// (`islands == 0`) and needs no protection call at all.
    fn refresh(&mut self, s: u64, track_reads: bool) -> Result<()> {
        let v = &*self.inner;
        let mvcc = &v.region.mvcc;
        v.snapshot.store(s, Ordering::Relaxed);
        let islands = v.islands.load(Ordering::Relaxed);
        let exposed = v.exposed();
        let protect_all = exposed && (track_reads || islands > MAX_ISLANDS);
        // Invalidate pages that commits since our last snapshot changed.
        let own = v.last_commit.load(Ordering::Relaxed);
        let mut err = Ok(());
        let complete = mvcc.changed_pages(v.valid_seq.load(Ordering::Relaxed), s, |p| {
            let valid = v.mem.valid.get(p as usize).expect("page below max size");
            if valid.load(Ordering::Relaxed) != page_state::NONE && mvcc.page_seq(p as usize) != own
            {
                valid.store(page_state::NONE, Ordering::Relaxed);
                if exposed && !protect_all && err.is_ok() {
                    err = v.mem.user.protect(p as usize * PAGE, PAGE, Access::None);
                }
            }
        });
        err.map_err(|e| Error::os("protect view page", e))?;
        if !complete {
            // Too far behind: forget every page.
            self.inner
                .mem
                .valid
                .clear()
                .map_err(|e| Error::os("reset view", e))?;
        }
        let v = &*self.inner;
        if protect_all || (exposed && !complete) {
            v.mem
                .user
                .protect(0, v.mem.mapped.load(Ordering::Relaxed), Access::None)
                .map_err(|e| Error::os("protect view", e))?;
            v.islands.store(0, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Commits. Inner (nested) commits return `Ok` at once. The outermost
    /// returns `Err(Error::Conflict)` if a concurrent commit invalidated what the
    /// transaction read (nothing of it is visible; retry), `Err(Error::Aborted)`
    /// after [`View::abort`], and an I/O error if the log could not be written.
    pub fn commit(&mut self) -> Result<()> {
        self.inner.region.check_owner()?; // before anything touches shared memory
        match self.depth {
            0 => return Err(Error::NotInTransaction { op: "commit" }),
            1 => {}
            _ => {
                self.depth -= 1;
                return Ok(());
            }
        }
        if self.end_plain_read() {
            return Ok(());
        }
        self.nta_before_commit();
        let r = self.commit_outermost();
        self.end_outermost(r)
    }

    /// The outermost commit of a plain read-only transaction: nothing
    /// stored, no registered operation, nested top action, ordered number,
    /// pause or priority, and its snapshot not expired. Such a commit only
    /// ends the transaction (what `end_outermost` would do for it, without
    /// the checks that cannot apply). Returns false, having done nothing,
    /// for any other transaction.
    fn end_plain_read(&mut self) -> bool {
        let v = &*self.inner;
        if !v.read_only.load(Ordering::Relaxed)
            || v.doomed.load(Ordering::Relaxed) != 0
            || v.write_n.load(Ordering::Relaxed) != 0
            || self.op_log.is_some()
            || self.nta.is_some()
            || self.rounds
            || self.conflicts != 0
            || !self.paused_reads.is_empty()
            || v.region.mvcc.order_claim_of(v.slot()).is_some()
        {
            return false;
        }
        let s = v.snapshot.load(Ordering::Relaxed);
        if v.region.mvcc.expired(v.slot(), s) {
            return false;
        }
        debug_assert!(!v.untracked_reads.load(Ordering::Relaxed));
        v.active.store(false, Ordering::Release);
        v.round_window.store(0, Ordering::Relaxed);
        if !v.end_file_reads() {
            v.file_ok.store(false, Ordering::Relaxed);
        }
        v.region.mvcc.end(v.slot());
        self.depth = 0;
        self.inner.trim_private(false, None);
        true
    }

    /// Ends the outermost transaction after its commit returned `r`: read
    /// tracking's penalty, the view's pages, priority, nested top actions.
    pub(crate) fn end_outermost(&mut self, r: Result<()>) -> Result<()> {
        let v = &*self.inner;
        if v.untracked_reads.load(Ordering::Relaxed) {
            let penalty = v.tracked_penalty.load(Ordering::Relaxed);
            if matches!(r, Err(Error::Conflict)) {
                v.tracked_left.store(penalty, Ordering::Relaxed);
                v.tracked_penalty
                    .store((penalty * 2).min(64), Ordering::Relaxed);
            } else {
                v.tracked_penalty
                    .store((penalty / 2).max(1), Ordering::Relaxed);
            }
        }
        self.finish(r.is_ok());
        self.note_outcome(&r);
        let compensated = self.nta_after_end(r.is_ok());
        compensated.and(r)
    }

    fn commit_outermost(&mut self) -> Result<()> {
        let v = &*self.inner;
        // Its reads are over (the commit holds the view mutably): a
        // process stopped inside the commit (a sync leader) must not owe
        // checkpoints a fence for pages it read from the file.
        if !v.end_file_reads() {
            v.file_ok.store(false, Ordering::Relaxed);
        }
        let round = self.rounds && self.op_log.is_none();
        if round || self.large_enough_for_place() {
            // A round, or a large commit, alone with its region needs no
            // byte diffs: only which pages changed. Diffs are taken only if
            // it must be logged.
            if let Some(req) = self.prepare_commit_with(false, false)?
                && let Some(seq) = v.region.commit_in_place(&req, round)?
            {
                v.last_commit.store(seq, Ordering::Relaxed);
                return Ok(());
            }
        }
        let Some(req) = self.prepare_commit(false)? else {
            // An ordered transaction still waits for its turn and moves its group on.
            return v.region.order_pass(v.slot(), true);
        };
        let c = v.region.commit(req)?;
        v.last_commit
            .store(own_pages(c.seq, !c.view_current), Ordering::Relaxed);
        if c.view_current {
            // The pages commit-time operations changed here hold what was
            // published: they stay valid (`drop_op_log` would forget them).
            self.op_log = None;
        }
        Ok(())
    }

    /// Whether this outermost commit is large enough to try going straight
    /// into the region file through the page journal, as a round alone
    /// with its region does (`RegionInner::commit_in_place`): it wrote
    /// at least half of `checkpoint_bytes` (so a checkpoint would follow
    /// its log record at once; in place each page is written twice, not
    /// three or four times), and nothing in it needs a log record: no
    /// nested top action, no ordered-commit number, no commit-time
    /// operation (checked with the request). Only this view may have a
    /// slot (the region checks again, for every process, under its locks):
    /// the request it prepares would otherwise be thrown away.
    fn large_enough_for_place(&self) -> bool {
        let v = &*self.inner;
        v.write_n.load(Ordering::Relaxed) >= v.in_place_pages()
            && self.nta.is_none()
            && !self.op_log.as_deref().is_some_and(apply::OpLog::has_marker)
            && !v.read_only.load(Ordering::Relaxed)
            && v.region.mvcc.order_claim_of(v.slot()).is_none()
            && v.region.mvcc.own_slots() == 1
            && !v.region.mvcc.others_hold_slots()
    }

    /// The outermost commit's request: the diffs of the pages written
    /// (outside any lock), the read set or untracked reads. `None` when the
    /// transaction changed nothing, unless `validate` (a part of a commit
    /// across several regions: what it read is still validated), or for a
    /// read-only transaction.
    pub(crate) fn prepare_commit(&self, validate: bool) -> Result<Option<CommitRequest<'_>>> {
        self.prepare_commit_with(validate, true)
    }

    /// `prepare_commit`; without `diffs`, the request holds the changed
    /// pages but no byte ranges (enough for a round written in place).
    fn prepare_commit_with(
        &self,
        validate: bool,
        diffs: bool,
    ) -> Result<Option<CommitRequest<'_>>> {
        self.check_expired()?;
        let v = &*self.inner;
        match v.doomed.load(Ordering::Relaxed) {
            0 => {}
            DOOM_USER => return Err(Error::Aborted),
            DOOM_READ_ONLY_WRITE if v.region.opts.read_only => {
                return Err(Error::ReadOnly {
                    op: "committing a transaction that stored",
                    path: v.region.path.clone(),
                });
            }
            DOOM_READ_ONLY_WRITE => return Err(Error::StoreInReadOnlyTransaction),
            _ => {
                return Err(Error::TooLarge(format!(
                    "transaction too large: more than {MAX_WRITE_PAGES} pages written or {MAX_READ_PAGES} read"
                )));
            }
        }
        let n = v.write_n.load(Ordering::Relaxed);
        let validate = validate && !v.read_only.load(Ordering::Relaxed);
        if n == 0 && self.op_log.is_none() && !validate {
            return Ok(None);
        }
        // SAFETY: the first n entries were written by `touch`.
        let pages = unsafe { std::slice::from_raw_parts(v.mem.write_set.as_ptr(), n) };
        // With registered operations, the diffs of stores before each one
        // were taken when it ran; the last diffs start from those pages.
        let op_log = self.op_log.as_deref();
        let mut ranges = op_log.map_or_else(Vec::new, apply::OpLog::ranges);
        let mut versions: Vec<(u32, &[u8])> = Vec::with_capacity(n);
        let snapshot = v.snapshot.load(Ordering::Relaxed);
        let side = v.read_side();
        let mut holes = crate::io::Holes::default();
        for &page in pages {
            // SAFETY: the page in our alias is mapped, and nothing else writes
            // it during commit (the view is &mut self). The snapshot's version
            // is immutable while we are on the read side; if it is the file
            // image, that changes only if a commit after the snapshot wrote
            // the page, and then validation rejects this commit (diff unused).
            let (old, cur) = unsafe {
                (
                    std::slice::from_raw_parts(
                        side.source_or_zeros(page as usize, snapshot, &mut holes),
                        PAGE,
                    ),
                    std::slice::from_raw_parts(v.mem.alias.base().add(page as usize * PAGE), PAGE),
                )
            };
            if !diffs {
                if old != cur {
                    versions.push((page, cur));
                }
                continue;
            }
            let base = op_log.map_or(Cow::Borrowed(old), |l| l.base(page, old, cur));
            let before = ranges.len();
            diff(&base, cur, page as u64 * PAGE as u64, &mut ranges);
            if ranges.len() > before || (!std::ptr::eq(&base[..], old) && old != cur) {
                versions.push((page, cur));
            }
        }
        drop(side);
        let read_pages = if v.track_reads.load(Ordering::Relaxed) {
            // SAFETY: the first read_n entries were written by `touch`.
            unsafe {
                std::slice::from_raw_parts(
                    v.mem.read_set.as_ptr(),
                    v.read_n.load(Ordering::Relaxed),
                )
            }
        } else {
            &[]
        };
        let written = |p: u32| v.touch_bits(p as usize) & TOUCH_WRITE != 0;
        let stays = op_log.map_or_else(Vec::new, |l| l.inside(written));
        let commute = op_log.map_or_else(Vec::new, |l| l.commuted_outside(&stays));
        let local = op_log
            .and_then(|l| l.local_run(commute.len()))
            .map(|(touched, c)| Ahead::local(snapshot, v.region.size(), touched, c));
        let (op_reads, inside) =
            op_log.map_or_else(Default::default, |l| l.commuted_inside(&stays, written));
        versions.extend(inside.into_iter().map(|p| (p, v.alias_page(p as usize))));
        if versions.is_empty()
            && commute.is_empty()
            && !op_log.is_some_and(apply::OpLog::has_marker)
            && !validate
        {
            // Stores that changed nothing.
            return Ok(None);
        }
        // Untracked reads: a page touched in this transaction may have been
        // read, and so may any valid page while anything is accessible at
        // the user address (plain loads of such pages take no fault).
        let exposed = v.exposed();
        let paused_reads = &self.paused_reads;
        let maybe_read = move |p: u32| {
            v.touch_bits(p as usize) != 0
                || paused_reads.binary_search(&p).is_ok()
                || (exposed
                    && v.mem
                        .valid
                        .get(p as usize)
                        .is_none_or(|x| x.load(Ordering::Relaxed) != page_state::NONE))
        };
        Ok(Some(CommitRequest {
            snapshot: v.snapshot.load(Ordering::Relaxed),
            read_pages,
            op_reads,
            untracked_reads: v
                .untracked_reads
                .load(Ordering::Relaxed)
                .then(|| Box::new(maybe_read) as Box<dyn Fn(u32) -> bool + '_>),
            pages: versions,
            ranges,
            ops: op_log.map_or_else(Vec::new, apply::OpLog::logged),
            commute,
            local,
            slot: v.slot(),
        }))
    }

    /// Ends the outermost transaction: written pages become readable
    /// (committed) or read their snapshot version again (aborted).
    fn finish(&mut self, committed: bool) {
        // Joined before any page is restored or given back.
        self.prefill = None;
        let v = &*self.inner;
        v.active.store(false, Ordering::Release);
        v.round_window.store(0, Ordering::Relaxed);
        let mut reset = v.doomed.load(Ordering::Relaxed) == DOOM_TOO_LARGE;
        // Consecutive writable pages are made read-only in one call.
        let mut run: Option<(usize, usize)> = None;
        let mut protect = |r: Option<(usize, usize)>| {
            if let Some((start, end)) = r {
                reset |= v
                    .mem
                    .user
                    .protect(start * PAGE, (end - start) * PAGE, Access::Read)
                    .is_err();
            }
        };
        v.for_each_written(|page| {
            if !committed {
                v.restore(page);
            }
            // Pages written through the accessors were never writable here.
            if v.touch_bits(page) & TOUCH_EXPOSED_RW != 0 {
                run = match run {
                    Some((start, end)) if end == page => Some((start, page + 1)),
                    r => {
                        protect(r);
                        Some((page, page + 1))
                    }
                };
            }
        });
        protect(run);
        if reset {
            // Pages written beyond the write set are unknown: forget them all.
            let ok = v
                .mem
                .user
                .protect(0, v.mem.mapped.load(Ordering::Relaxed), Access::None)
                .is_ok();
            assert!(ok, "cannot re-protect a view");
            v.islands.store(0, Ordering::Relaxed);
            let _ = self.inner.mem.valid.clear();
        }
        let v = &*self.inner;
        if !v.end_file_reads() {
            v.file_ok.store(false, Ordering::Relaxed);
        }
        v.region.mvcc.end(v.slot());
        self.depth = 0;
        self.paused_reads.clear();
        self.drop_op_log();
        self.inner.trim_private(false, None);
    }

    /// Dooms the whole transaction: its stores are discarded at once (later
    /// loads see the snapshot again), and the outermost commit returns
    /// `Err(Error::Aborted)`. The transaction stays open until then.
    pub fn abort(&mut self) -> Result<()> {
        self.inner.region.check_owner()?;
        if self.depth == 0 {
            return Err(Error::NotInTransaction { op: "abort" });
        }
        self.inner.doom(DOOM_USER);
        self.drop_op_log();
        let v = &*self.inner;
        let serial = v.serial.load(Ordering::Relaxed);
        let mut protected = Ok(());
        v.for_each_written(|page| {
            v.restore(page);
            let exposed = v.touch_bits(page) & TOUCH_EXPOSED_RW != 0;
            // Later stores fault (or go through `access`) again and are tracked anew.
            if let Some(t) = v.mem.touched.get(page) {
                t.store(serial << TOUCH_BITS | TOUCH_READ, Ordering::Relaxed);
            }
            if exposed && protected.is_ok() {
                protected = v.mem.user.protect(page * PAGE, PAGE, Access::Read);
            }
        });
        protected.map_err(|e| Error::os("protect view page", e))?;
        v.write_n.store(0, Ordering::Relaxed);
        Ok(())
    }

    /// Ends the transaction now, discarding its stores, whatever the nesting depth.
    pub fn rollback(&mut self) {
        if self.depth > 0 && self.inner.region.check_owner().is_ok() {
            self.depth = 1;
            self.finish(false);
            self.end_priority();
            // Failures stay pending in the log for the next first opener.
            let _ = self.nta_after_end(false);
        }
    }

    /// Runs `f` in a serializable transaction, retrying on conflict with
    /// randomised exponential backoff. Errors other than conflicts are returned.
    pub fn run<T>(&mut self, f: impl FnMut(&mut View) -> Result<T>) -> Result<T> {
        self.run_with(TxnOptions::default(), f)
    }

    pub fn run_with<T>(
        &mut self,
        opts: TxnOptions,
        mut f: impl FnMut(&mut View) -> Result<T>,
    ) -> Result<T> {
        let mut backoff = Backoff::new(self.inner.slot() as u64);
        loop {
            self.begin_with(opts)?;
            let r = f(self);
            let r = match r {
                Ok(x) => self.commit().map(|_| x),
                Err(e) => {
                    self.rollback();
                    Err(e)
                }
            };
            match r {
                Err(Error::Conflict) if self.depth == 0 => backoff.wait(),
                other => return other,
            }
        }
    }

    /// Fails if the region's snapshot limit expired this transaction's snapshot.
    fn check_expired(&self) -> Result<()> {
        if self.depth == 0 {
            return Ok(());
        }
        let v = &*self.inner;
        let s = v.snapshot.load(Ordering::Relaxed);
        if v.region.mvcc.expired(v.slot(), s) {
            return Err(Error::SnapshotTooOld {
                snapshot: s,
                lag: v.region.mvcc.commit_seq().saturating_sub(s),
            });
        }
        Ok(())
    }

    fn check_range(&self, off: u64, len: usize) -> Result<usize> {
        self.check_expired()?;
        self.check_bounds(off, len)
    }

    /// `off` as an offset into the view if `[off, off+len)` lies in it.
    fn check_bounds(&self, off: u64, len: usize) -> Result<usize> {
        let end = off
            .checked_add(len as u64)
            .filter(|&e| e <= self.len() as u64);
        match end {
            Some(_) => Ok(off as usize),
            None => Err(Error::OutOfRange {
                off,
                len,
                size: self.len(),
            }),
        }
    }

    /// Bytes at `off` (a snapshot read inside a transaction).
    ///
    /// Inside a transaction the accessors track their pages in software, as
    /// first touches would be tracked, and take no page fault; outside one,
    /// this reads the latest committed data.
    pub fn slice(&self, off: u64, len: usize) -> Result<&[u8]> {
        let o = self.check_range(off, len)?;
        if self.depth == 0 {
            // SAFETY: in bounds of the mapping; first touches fault into our handler.
            return Ok(unsafe { std::slice::from_raw_parts(self.base().add(o), len) });
        }
        let p = match self.inner.file_access(o, len) {
            Some(p) => p,
            None => self.inner.access(o, len, false),
        };
        // SAFETY: in bounds of the file mapping or the alias, whose pages
        // hold this transaction's snapshot (the fence keeps the file's so);
        // stores need &mut self, so none alias this.
        Ok(unsafe { std::slice::from_raw_parts(p, len) })
    }

    /// Calls `f(bytes, scoped)` with the bytes at `off` as [`View::slice`]
    /// would return them, and returns what it returns. A range within one
    /// page the view holds no copy of (and, in a read-write transaction,
    /// that no earlier transaction of the view touched) is read where the
    /// snapshot's version lies (shared memory or the region
    /// file), without copying the page into the view (`inplace.rs`): then
    /// `scoped` is true and `f` runs on the MVCC read side, which a
    /// checkpoint waits for, so it must only look at the bytes or copy them
    /// (no blocking, no calls into the view).
    pub(crate) fn read_with<R>(
        &self,
        off: u64,
        len: usize,
        f: impl FnOnce(&[u8], bool) -> R,
    ) -> Result<R> {
        if self.depth == 0 {
            return self.slice(off, len).map(|b| f(b, false));
        }
        let o = self.check_bounds(off, len)?;
        // A page the view holds is the snapshot's own content, read like a
        // raw load: no expiry check there (a chain of dependent loads from
        // the view to its slot in shared memory, about 4 of the 90 ns of a
        // cached get). Reads of shared copies check; so does the commit.
        if let Some(p) = self.inner.held_read(o, len) {
            // SAFETY: as in `slice`.
            return Ok(f(unsafe { std::slice::from_raw_parts(p, len) }, false));
        }
        self.check_expired()?;
        let mut f = f;
        // A copy the view holds is the cheapest read, and the same bytes.
        let p = if self.inner.holds(o / PAGE) {
            None
        } else {
            match self.inner.read_cached(o, len, f) {
                Ok(r) => return Ok(r),
                // Read in place often enough: installed (`access`).
                Err((g, true)) => {
                    f = g;
                    Some(self.inner.access(o, len, false))
                }
                Err((g, false)) => {
                    f = g;
                    self.inner.file_access(o, len)
                }
            }
        };
        let p = match p {
            Some(p) => p,
            None => match self.inner.read_in_place(o, len, f) {
                Ok(r) => return Ok(r),
                Err(g) => {
                    f = g;
                    self.inner.access(o, len, false)
                }
            },
        };
        // SAFETY: as in `slice`.
        Ok(f(unsafe { std::slice::from_raw_parts(p, len) }, false))
    }

    /// Asks the processor to start loading the page at `off` (its first
    /// line and the last few, where a node's header and its first cells
    /// lie) where a read-only transaction will read it: the view's copy, or
    /// the version its cache found. A scan calls it for the next leaf
    /// before it hands out the current one's entries.
    pub(crate) fn prefetch_node(&self, off: u64) {
        let o = off as usize;
        if self.depth == 0 || o >= self.len() || !self.inner.read_only.load(Ordering::Relaxed) {
            return;
        }
        if let Some(p) = self.inner.likely_address(o / PAGE) {
            crate::os::mem::prefetch(p);
            for line in 1..=PREFETCH_TAIL {
                crate::os::mem::prefetch(p.wrapping_add(PAGE - 64 * line));
            }
        }
    }

    /// `buf.len()` bytes at `off`: as [`View::slice`] returns them, or, where
    /// [`View::read_with`] would read them in place, copied into `buf` (one
    /// short turn on the read side, no copy into the view).
    pub(crate) fn slice_or_copy<'a>(
        &'a self,
        off: u64,
        buf: &'a mut [std::mem::MaybeUninit<u8>],
    ) -> Result<&'a [u8]> {
        let len = buf.len();
        let mut copied = None;
        let p = self.read_with(off, len, |b, scoped| {
            if scoped {
                copied = Some(buf.write_copy_of_slice(b));
            }
            b.as_ptr()
        })?;
        if let Some(b) = copied {
            return Ok(b);
        }
        // SAFETY: not scoped: `p` is the start of `len` bytes of a mapping
        // `slice` would have returned, valid while `self` is borrowed.
        Ok(unsafe { std::slice::from_raw_parts(p, len) })
    }

    /// Writable bytes at `off`; stores stay private until commit.
    pub fn slice_mut(&mut self, off: u64, len: usize) -> Result<&mut [u8]> {
        if self.depth == 0 {
            return Err(Error::NotInTransaction { op: "store" });
        }
        let o = self.check_range(off, len)?;
        let p = self.inner.access(o, len, true);
        let written = self.inner.write_n.load(Ordering::Relaxed);
        if written >= prefill::PREFILL_FROM {
            self.prefill_after_store(written);
        }
        // SAFETY: in bounds of the alias (always writable); the pages are in
        // the write set; exclusive through &mut self.
        Ok(unsafe { std::slice::from_raw_parts_mut(p, len) })
    }

    /// A large write transaction: its helper starts, or hears how many
    /// pages it has written.
    #[inline(never)]
    fn prefill_after_store(&mut self, written: usize) {
        let v = &*self.inner;
        // A round's transaction (`round_window` set) may go straight into
        // the region file at its end: no versions to back for it. Nor for
        // more pages than a commit that goes in place when alone has
        // (`large_enough_for_place`), if this view is alone here now.
        self.prefill
            .get_or_insert_with(|| {
                let versions = if v.round_window.load(Ordering::Relaxed) != 0 {
                    0
                } else if v.region.mvcc.own_slots() == 1 {
                    v.in_place_pages()
                } else {
                    usize::MAX
                };
                prefill::Prefill::start(
                    &v.prefill,
                    Arc::clone(&v.region),
                    v.mem.alias.range_to_populate(),
                    versions,
                )
            })
            .wrote(written);
    }

    /// Reads a plain value at `off` (any alignment).
    pub fn read<T: Pod>(&self, off: u64) -> Result<T> {
        self.read_with(off, std::mem::size_of::<T>(), |b, _| {
            // SAFETY: T is Pod, so any bytes are a valid T; read_unaligned
            // handles alignment; `b` is exactly size_of::<T>() bytes.
            unsafe { std::ptr::read_unaligned(b.as_ptr().cast()) }
        })
    }

    /// Writes a plain value at `off` (any alignment).
    pub fn write<T: Pod>(&mut self, off: u64, value: &T) -> Result<()> {
        let b = self.slice_mut(off, std::mem::size_of::<T>())?;
        // SAFETY: T is Pod; the destination is exactly size_of::<T>() writable bytes.
        unsafe { std::ptr::write_unaligned(b.as_mut_ptr().cast(), *value) };
        Ok(())
    }

    /// Reads through a typed offset pointer.
    pub fn get<T: Pod>(&self, p: Ptr<T>) -> Result<T> {
        self.read(p.offset)
    }

    /// Writes through a typed offset pointer.
    pub fn set<T: Pod>(&mut self, p: Ptr<T>, value: &T) -> Result<()> {
        self.write(p.offset, value)
    }

    /// Declares that the transaction will read or write `[off, off+len)`: the
    /// pages are brought in and tracked in one call, without a fault each
    /// (LIBXAC's `setPageAccess`).
    pub fn set_page_access(&mut self, off: u64, len: usize, access: PageAccess) -> Result<()> {
        self.inner.region.check_owner()?;
        if self.depth == 0 {
            return Err(Error::NotInTransaction {
                op: "set_page_access",
            });
        }
        let o = self.check_range(off, len)?;
        if len == 0 {
            return Ok(());
        }
        let v = &*self.inner;
        let (first, last) = (o / PAGE, (o + len - 1) / PAGE);
        // A read-only transaction's reads map what they can from the region
        // file (`filemap.rs`); the rest is installed as below.
        let from_file = access == PageAccess::Read && v.read_only.load(Ordering::Relaxed);
        if from_file {
            v.map_file_range(first, last + 1)
                .map_err(|e| Error::os("map view memory back over region file pages", e))?;
        }
        let mapped_file =
            |p: usize| from_file && v.user_file_flags(p) & crate::viewmem::user_file::FILE != 0;
        let all_file = (first..=last).all(mapped_file);
        // Allocate the private pages of the whole range in one call.
        if !all_file {
            v.mem
                .alias
                .populate(first * PAGE, (last + 1 - first) * PAGE, true);
        }
        // Counted before any page becomes accessible here (see `refresh`).
        v.islands
            .fetch_add((last + 1 - first) as u64, Ordering::Relaxed);
        let mut run: Option<(usize, Access)> = None;
        let flush = |r: Option<(usize, Access)>, end: usize| match r {
            Some((start, a)) => v
                .mem
                .user
                .protect(start * PAGE, (end - start) * PAGE, a)
                .map_err(|e| Error::os("protect view", e)),
            None => Ok(()),
        };
        for page in first..=last {
            if mapped_file(page) {
                flush(run, page)?;
                run = None;
                continue;
            }
            let a = v.touch(page, access == PageAccess::Write);
            if a == Access::ReadWrite {
                v.mark_exposed_rw(page);
            }
            match run {
                Some((_, ra)) if ra == a => {}
                _ => {
                    flush(run, page)?;
                    run = Some((page, a));
                }
            }
        }
        flush(run, last + 1)?;
        // Map the range at the user address too, so its accesses take no
        // signal. Not a range mapped from the file: its loads take only the
        // kernel's fault, which maps 16 cached pages at once, where
        // `MADV_POPULATE_READ` faults them in one by one (0.36 against
        // 0.27 µs per page).
        if all_file {
            return Ok(());
        }
        v.mem.user.populate(
            first * PAGE,
            (last + 1 - first) * PAGE,
            access == PageAccess::Write,
        );
        Ok(())
    }

    /// Grows the region to at least `size` bytes and maps the new pages here.
    pub fn grow(&mut self, size: u64) -> Result<()> {
        self.inner.region.grow(size)?;
        self.sync_size()
    }

    /// The region this view maps.
    pub fn region(&self) -> crate::Region {
        crate::Region {
            inner: self.inner.region.clone(),
        }
    }
}

impl Drop for View {
    fn drop(&mut self) {
        // Threads are not forked: a child has no helper to join.
        if self.inner.region.check_owner().is_err() {
            std::mem::forget(self.prefill.take());
        }
        // In a forked child the private memory is shared with the parent:
        // `rollback` then does nothing, and only the child's mappings go.
        self.rollback();
        // Unregister before the memory the handler uses goes away.
        self.registration.take();
        if self.inner.region.check_owner().is_ok() {
            self.inner
                .region
                .fence
                .unregister(&*self.inner as *const ViewInner as usize);
        }
        // The slot, its snapshot and its liveness lock (an open file
        // description the child shares) are the parent's: releasing them
        // here unregistered a live snapshot in the parent, or in whichever
        // process claimed the slot next, and let pruning take versions it
        // was reading (tests/xac_stress.rs).
        if self.inner.region.check_owner().is_ok() {
            self.inner.region.mvcc.release_slot(self.inner.slot());
        }
    }
}

/// What `last_commit` records for a commit at `seq`: the pages it wrote
/// stay valid in the view at the next snapshot (they hold what it
/// committed), unless commit-time operations may have given other
/// results at commit than here (`ran_again`): those wrote pages from the
/// newest committed state, which this view may hold older or local
/// content of, so then none do.
pub(crate) fn own_pages(seq: u64, ran_again: bool) -> u64 {
    if ran_again { 0 } else { seq }
}

/// Appends the byte ranges where `new` differs from `old`; gaps shorter than a
/// range header are merged so records stay small.
fn diff<'a>(old: &[u8], new: &'a [u8], base: u64, out: &mut Vec<Range<'a>>) {
    const MERGE: usize = 16;
    let word = |c: &[u8]| u64::from_le_bytes(c.try_into().expect("8"));
    let mut cur: Option<(usize, usize)> = None;
    for (i, (o, n)) in old.chunks_exact(8).zip(new.chunks_exact(8)).enumerate() {
        // The differing bytes' bits: the first and last differing byte
        // of the word from its low and high zero bits (little-endian).
        let x = word(o) ^ word(n);
        if x == 0 {
            continue;
        }
        let s = i * 8 + (x.trailing_zeros() / 8) as usize;
        let e = i * 8 + 8 - (x.leading_zeros() / 8) as usize;
        cur = match cur {
            Some((cs, ce)) if s - ce <= MERGE => Some((cs, e)),
            Some((cs, ce)) => {
                out.push(Range {
                    offset: base + cs as u64,
                    bytes: &new[cs..ce],
                });
                Some((s, e))
            }
            None => Some((s, e)),
        };
    }
    if let Some((cs, ce)) = cur {
        out.push(Range {
            offset: base + cs as u64,
            bytes: &new[cs..ce],
        });
    }
}

/// Plain data that may be read from and written to a region as raw bytes.
///
/// # Safety
/// Every bit pattern must be a valid value, and the type must hold no
/// pointers or references (offsets only: see [`Ptr`]).
pub unsafe trait Pod: Copy + 'static {}
macro_rules! pod {
    ($($t:ty),*) => { $(
        // SAFETY: primitive integers and floats accept every bit pattern.
        unsafe impl Pod for $t {}
    )* };
}
pod!(
    u8, u16, u32, u64, u128, i8, i16, i32, i64, i128, f32, f64, usize, isize
);
// SAFETY: arrays of Pod are Pod.
unsafe impl<T: Pod, const N: usize> Pod for [T; N] {}

/// The bytes of a plain value, as `View::write` would store them.
pub(crate) fn pod_bytes<T: Pod>(x: &T) -> Vec<u8> {
    let mut b = vec![0u8; std::mem::size_of::<T>()];
    // SAFETY: T is Pod; the destination is exactly size_of::<T>() bytes.
    unsafe { std::ptr::write_unaligned(b.as_mut_ptr().cast(), *x) };
    b
}

/// A typed offset into a region: valid in every view, whatever its address.
#[repr(transparent)]
pub struct Ptr<T> {
    pub offset: u64,
    _t: std::marker::PhantomData<fn() -> T>,
}

impl<T> Ptr<T> {
    pub const fn new(offset: u64) -> Ptr<T> {
        Ptr {
            offset,
            _t: std::marker::PhantomData,
        }
    }
    /// The pointer `n` elements further on.
    pub const fn add(self, n: u64) -> Ptr<T> {
        Ptr::new(self.offset + n * std::mem::size_of::<T>() as u64)
    }
}

impl<T> Clone for Ptr<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for Ptr<T> {}
impl<T> std::fmt::Debug for Ptr<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Ptr({})", self.offset)
    }
}
impl<T> PartialEq for Ptr<T> {
    fn eq(&self, o: &Self) -> bool {
        self.offset == o.offset
    }
}
// SAFETY: an offset is a plain u64.
unsafe impl<T: 'static> Pod for Ptr<T> {}

/// Randomised exponential backoff between retries.
struct Backoff {
    rng: crate::rand::SplitMix,
    limit_us: u64,
}

impl Backoff {
    fn new(seed: u64) -> Backoff {
        Backoff {
            rng: crate::rand::SplitMix(seed ^ 0x5eed),
            limit_us: 2,
        }
    }
    fn wait(&mut self) {
        let us = self.rng.next() % self.limit_us;
        self.limit_us = (self.limit_us * 2).min(10_000);
        if us < 2 {
            std::thread::yield_now();
        } else {
            std::thread::sleep(std::time::Duration::from_micros(us));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn diff_finds_exact_ranges_and_merges_small_gaps() {
        let old = vec![0u8; PAGE];
        let mut new = old.clone();
        new[5] = 1;
        new[9] = 2; // gap of 3 bytes: merged with [5]
        new[100] = 3;
        new[4095] = 4;
        let mut out = Vec::new();
        diff(&old, &new, 8192, &mut out);
        let got: Vec<(u64, usize)> = out.iter().map(|r| (r.offset, r.bytes.len())).collect();
        assert_eq!(got, vec![(8192 + 5, 5), (8192 + 100, 1), (8192 + 4095, 1)]);
        let mut out = Vec::new();
        diff(&old, &old, 0, &mut out);
        assert!(out.is_empty());
    }

    /// The ranges, found byte by byte: every differing byte, runs joined
    /// across gaps of at most 16 bytes.
    fn diff_bytewise(old: &[u8], new: &[u8]) -> Vec<(usize, usize)> {
        let mut runs: Vec<(usize, usize)> = Vec::new();
        for k in (0..old.len()).filter(|&k| old[k] != new[k]) {
            match runs.last_mut() {
                Some((_, e)) if k - *e <= 16 => *e = k + 1,
                _ => runs.push((k, k + 1)),
            }
        }
        runs
    }

    #[test]
    fn diff_finds_what_a_byte_by_byte_comparison_finds() {
        let mut rng = crate::rand::SplitMix(5);
        for _ in 0..3000 {
            let old: Vec<u8> = (0..PAGE).map(|_| rng.next() as u8).collect();
            let mut new = old.clone();
            // Sparse and dense changes, single bytes and runs.
            let dense = rng.next().is_multiple_of(4);
            for _ in 0..rng.next() % 60 {
                let at = (rng.next() % PAGE as u64) as usize;
                let len = if dense { 1 + rng.next() % 300 } else { 1 } as usize;
                for b in &mut new[at..(at + len).min(PAGE)] {
                    *b ^= (1 + rng.next() % 255) as u8;
                }
            }
            let mut out = Vec::new();
            diff(&old, &new, 4096, &mut out);
            let got: Vec<(usize, usize)> = out
                .iter()
                .map(|r| {
                    (
                        r.offset as usize - 4096,
                        r.offset as usize - 4096 + r.bytes.len(),
                    )
                })
                .collect();
            assert_eq!(got, diff_bytewise(&old, &new));
        }
    }
}
