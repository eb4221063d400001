//! Regions: a data file plus its log. Opening runs recovery; commits go
//! through [`RegionInner::commit`]; checkpoints copy committed versions into
//! the data file and empty the log.
//!
//! Files: `<path>` holds a header page and then the region's bytes;
//! `<path>-log` holds the write-ahead log. See docs/FORMAT.md.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use crate::error::{Error, Result};
use crate::io::{FileStorage, Storage};
use crate::mvcc::Mvcc;
use crate::os::mem::{Access, PAGE, Reservation, round_up};
use crate::wal::format::{HEADER_BYTES, HeaderError, LogHeader, Range, RegionHeader};
use crate::wal::log::Log;
use crate::wal::scan;

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
/// `View::base` included), and its versions are freed once it ends.
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
            read_only: false,
            page_checksums: true,
            log_reserve: 4 << 20,
            log_archive: None,
        }
    }
}

/// Counters for `txmap info` and benchmarks.
#[derive(Clone, Debug, Default)]
pub struct Stats {
    pub size: u64,
    pub commit_seq: u64,
    pub checkpoint_seq: u64,
    pub log_bytes: u64,
    /// Page versions held in shared memory (linked, or waiting for readers).
    pub version_pages: usize,
    pub live_snapshots: usize,
    pub oldest_snapshot: Option<u64>,
    /// Every live transaction's snapshot, owner process and start time.
    pub snapshots: Vec<crate::mvcc::LiveSnapshot>,
    /// The region's snapshot limit (shared by every process).
    pub snapshot_limit: SnapshotLimit,
    /// Snapshots the limit expired since the shared state was created.
    pub expired_snapshots: u64,
    /// Region pages whose old content checkpoints kept in memory for older
    /// snapshots before overwriting them (copy-on-checkpoint), same period.
    pub preserved_pages: u64,
    pub recovered_commits: u64,
    /// What recovery of a damaged log dropped or repaired when this handle
    /// opened the region with [`Options::accept_loss`] (empty: nothing).
    pub recovery_loss: Vec<String>,
    /// Log syncs since the shared state was created (checkpoints included);
    /// group commit keeps this below the number of durable commits.
    pub log_syncs: u64,
    /// Where the shared state lives.
    pub shared_path: PathBuf,
    /// No other process had the region open when this handle opened it (so
    /// this handle ran recovery and built the shared state).
    pub opened_alone: bool,
    /// Why commits fail in every process, if a log write or sync failed or
    /// a process panicked holding the commit lock. Closing every handle and
    /// opening again recovers from the files.
    pub poisoned: Option<String>,
}

/// An open region. Cheap to clone; views keep it alive.
#[derive(Clone)]
pub struct Region {
    pub(crate) inner: RegionRef,
}

/// A handle's or a view's strong reference to a region. It is dropped
/// under the region's round lock, which the async flusher holds while it
/// holds a reference of its own: so the last reference is always dropped,
/// and the region closed (last-out checkpoint, file locks released), on the
/// thread that closed the last handle, before that call returns. (Before,
/// `xShutdown` could return while the flusher still held the region, and an
/// immediate reopen in the other durability mode failed.)
#[derive(Clone)]
pub(crate) struct RegionRef(Option<Arc<RegionInner>>);

impl RegionRef {
    fn new(inner: Arc<RegionInner>) -> RegionRef {
        RegionRef(Some(inner))
    }
}

impl std::ops::Deref for RegionRef {
    type Target = Arc<RegionInner>;
    fn deref(&self) -> &Arc<RegionInner> {
        self.0
            .as_ref()
            .expect("a region reference is used only until dropped")
    }
}

impl Drop for RegionRef {
    fn drop(&mut self) {
        if let Some(inner) = self.0.take() {
            // A forked child has no flusher (and may have inherited the
            // lock held by the parent's, forever): it drops as it is.
            if inner.check_owner().is_err() {
                return;
            }
            let round = Arc::clone(&inner.round);
            let _held = lock(&round);
            drop(inner);
        }
    }
}

/// File locks that order opening and closing between processes.
pub(crate) struct OpenLocks {
    /// Shared while the region is open here; exclusive for whoever finds
    /// itself alone (it recovers, or removes the shared state at close).
    users: std::fs::File,
    /// Exclusive around the open and close transitions.
    transition: std::fs::File,
}

pub(crate) struct RegionInner {
    pub path: PathBuf,
    pub data: Box<dyn Storage>,
    /// A read-only shared mapping of the data file (header page included).
    pub image: Reservation,
    /// Bytes of the region mapped in `image` (grows when another process grows the region).
    image_mapped: Mutex<u64>,
    pub log: Log,
    pub mvcc: Mvcc,
    pub opts: Options,
    recovered: u64,
    recovery_loss: Vec<String>,
    opened_alone: bool,
    flusher: Mutex<Option<std::thread::Thread>>,
    /// Held by the flusher while it holds a strong reference, and by a
    /// `RegionRef` while it drops its own (see `RegionRef`).
    round: Arc<Mutex<()>>,
    /// The process that opened the region. A child forked from it shares the
    /// file locks but must open the region itself.
    pub owner: rustix::process::Pid,
    /// `signal::forks()` when opened: differs in a forked child.
    pub fork_generation: usize,
    locks: Option<OpenLocks>,
    /// Memory of closed views, for the next views opened (`View::open`).
    view_pool: Mutex<Vec<crate::view::memory::ViewMemory>>,
    /// The fixed address recorded in the region file (0: none); written
    /// back with every region header.
    pub address: usize,
    /// The page checksum table, when the region keeps one.
    pub sums: Option<crate::sums::PageSums>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn flock(f: &std::fs::File, op: rustix::fs::FlockOperation, path: &Path) -> Result<bool> {
    match rustix::fs::flock(f, op) {
        Ok(()) => Ok(true),
        Err(rustix::io::Errno::WOULDBLOCK) => Ok(false),
        Err(e) => Err(Error::io("lock", path, e.into())),
    }
}

/// The suffix (then the creator's pid) of a region file being formatted
/// under its temporary name.
const CREATING: &str = ".creating-";

/// Cleans up after a creator of the region at `path` that died before the
/// region was in place: removes its log `lp` if nobody holds it locked (a
/// live creator does until the region is renamed into place), the region
/// is still missing, and the log holds no more than a new region's header
/// (so no commit is lost with it); and the temporary data files of dead
/// creators. Returns true if the create may be tried again, false if a
/// live process is creating or has the region, and an error naming the
/// log if it holds more than a header.
fn remove_abandoned_create(path: &Path, lp: &Path) -> Result<bool> {
    use rustix::fs::FlockOperation as F;
    let f = match std::fs::File::open(lp) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(true),
        Err(e) => return Err(Error::io("open", lp, e)),
    };
    if !flock(&f, F::NonBlockingLockExclusive, lp)? {
        return Ok(false); // being created, or the region is open
    }
    if path.try_exists().map_err(|e| Error::io("stat", path, e))? {
        return Ok(false); // a whole region
    }
    if !crate::os::shm::same_file(std::os::fd::AsFd::as_fd(&f), lp) {
        return Ok(true); // replaced meanwhile: look again
    }
    let len = f.metadata().map_err(|e| Error::io("stat", lp, e))?.len();
    if len > HEADER_BYTES {
        return Err(Error::Invalid(format!(
            "{} does not exist but its log {} does, with {len} bytes (more than a new \
             region's header): if the region was removed on purpose, remove its log too",
            path.display(),
            lp.display()
        )));
    }
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty());
    let dir = dir.unwrap_or(Path::new("."));
    if let (Some(name), Ok(entries)) = (path.file_name(), std::fs::read_dir(dir)) {
        let mut prefix = name.to_owned();
        prefix.push(CREATING);
        let prefix = prefix.as_encoded_bytes();
        for e in entries.flatten() {
            let n = e.file_name();
            let Some(pid) = n.as_encoded_bytes().strip_prefix(prefix) else {
                continue;
            };
            let pid = std::str::from_utf8(pid).ok().and_then(|p| p.parse().ok());
            if pid.is_some_and(|p| !crate::os::shm::process_alive(p)) {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
    std::fs::remove_file(lp).map_err(|e| Error::io("remove abandoned log", lp, e))?;
    crate::io::sync_dir(dir).map_err(|e| Error::io("sync directory of", lp, e))?;
    Ok(true)
}

/// The log file that belongs to a region file.
pub fn log_path(path: &Path) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push("-log");
    PathBuf::from(s)
}

/// Where the shared state of a region lives: in `/dev/shm`, named after the
/// region's id and the file's device and inode (beside the region as
/// `PATH-shm` where there is no `/dev/shm`).
pub fn shared_path(path: &Path, region_id: u64) -> Result<PathBuf> {
    let st = rustix::fs::stat(path).map_err(|e| Error::io("stat", path, e.into()))?;
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        Ok(shm.join(format!(
            "txmap-{region_id:016x}-{:x}-{:x}",
            st.st_dev, st.st_ino
        )))
    } else {
        let mut s = path.as_os_str().to_owned();
        s.push("-shm");
        Ok(PathBuf::from(s))
    }
}

/// What [`remove_stale_shared_state`] found in `/dev/shm`.
#[derive(Debug, Default)]
pub struct SharedStateSweep {
    /// Files removed: no process had their region open.
    pub removed: Vec<PathBuf>,
    /// Files kept: their region is open, or another txmap version made them.
    pub kept: Vec<PathBuf>,
}

/// Removes the shared state files in `/dev/shm` that no process uses: a
/// SIGKILLed last user of a region leaves its file (megabytes of version
/// pages) until that region is opened again. Every process with a region
/// open holds a lock on its file, so one in use is never removed; files of
/// other txmap versions are kept (`txmap clean`).
pub fn remove_stale_shared_state() -> Result<SharedStateSweep> {
    let dir = Path::new("/dev/shm");
    let mut sweep = SharedStateSweep::default();
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(sweep),
        Err(e) => return Err(Error::io("list", dir, e)),
    };
    for e in entries {
        let e = e.map_err(|e| Error::io("list", dir, e))?;
        if !e.file_name().as_encoded_bytes().starts_with(b"txmap-") {
            continue;
        }
        let p = e.path();
        match Mvcc::remove_stale(&p) {
            Ok(true) => sweep.removed.push(p),
            Ok(false) => sweep.kept.push(p),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
            Err(err) => return Err(Error::io("remove stale shared state", &p, err)),
        }
    }
    Ok(sweep)
}

/// Checks an address asked for in `Options::address`: page-aligned, not
/// zero, with room for `max` bytes below the top of the user address space.
fn check_address(addr: usize, max: u64) -> Result<()> {
    let fits = usize::try_from(max)
        .ok()
        .and_then(|m| addr.checked_add(m))
        .is_some_and(|end| end <= crate::os::mem::USER_TOP);
    if addr == 0 || !addr.is_multiple_of(PAGE) || !fits {
        return Err(Error::Invalid(format!(
            "Options::address {addr:#x}: must be a nonzero multiple of {PAGE} with room for \
             max_size ({max} bytes) below {:#x}",
            crate::os::mem::USER_TOP
        )));
    }
    Ok(())
}

/// Checks a region size: whole pages, at least one, at most `max`.
pub(crate) fn check_size(size: u64, max: u64) -> Result<()> {
    if size == 0 || !size.is_multiple_of(PAGE as u64) {
        return Err(Error::Invalid(format!(
            "region size {size} must be a positive multiple of the page size {PAGE}"
        )));
    }
    if size > max {
        return Err(Error::TooLarge(format!(
            "region size {size} exceeds the maximum {max}; open with a larger Options::max_size"
        )));
    }
    Ok(())
}

impl Region {
    /// Creates a new zero-filled region of `size` bytes at `path` (and `path-log`).
    /// Fails if `path` exists.
    ///
    /// ```
    /// let dir = std::env::temp_dir().join(format!("txmap-doc-{}", std::process::id()));
    /// std::fs::create_dir_all(&dir).unwrap();
    /// let path = dir.join("create.txm");
    /// let region = txmap::Region::create(&path, 1 << 20, txmap::Options::default()).unwrap();
    /// assert_eq!(region.size(), 1 << 20);
    /// # drop(region); std::fs::remove_dir_all(&dir).unwrap();
    /// ```
    pub fn create(path: &Path, size: u64, opts: Options) -> Result<Region> {
        if opts.read_only {
            return Err(Error::ReadOnly {
                op: "creating a region",
                path: path.to_path_buf(),
            });
        }
        check_size(size, opts.max_size)?;
        if let Some(a) = opts.address {
            check_address(a, opts.max_size)?;
        }
        let exists = || Error::Exists {
            path: path.to_path_buf(),
            what: "",
        };
        if path.try_exists().map_err(|e| Error::io("stat", path, e))? {
            return Err(exists());
        }
        // The log is created with O_EXCL first: of two processes creating
        // one region, exactly one gets it and formats the region. The data
        // file is formatted under a temporary name and renamed into place
        // last, so whoever sees `path` sees a whole region. The creator
        // holds an exclusive lock on the log until then, so a log without
        // its region and without that lock was left by a creator that died.
        let lp = log_path(path);
        let log = loop {
            match FileStorage::create_new(&lp) {
                Ok(l) => {
                    rustix::fs::flock(l.fd(), rustix::fs::FlockOperation::LockExclusive)
                        .map_err(|e| Error::io("lock", &lp, e.into()))?;
                    // A cleaner may have removed it before we locked it.
                    if crate::os::shm::same_file(l.fd(), &lp) {
                        break l;
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    if !remove_abandoned_create(path, &lp)? {
                        return Err(Error::Exists {
                            path: path.to_path_buf(),
                            what: " (or is being created by another process)",
                        });
                    }
                }
                Err(e) => return Err(Error::io("create", &lp, e)),
            }
        };
        let mut tmp = path.as_os_str().to_owned();
        tmp.push(format!("{CREATING}{}", std::process::id()));
        let tmp = PathBuf::from(tmp);
        let dir = path.parent().unwrap_or(Path::new(""));
        let made = (|| {
            let _ = std::fs::remove_file(&tmp);
            let data = FileStorage::create_new(&tmp).map_err(|e| Error::io("create", &tmp, e))?;
            Self::format_at(&data, &log, size, opts.address, opts.max_size)?;
            crate::debug::hit(crate::debug::CrashPoint::Creating);
            let cwd = rustix::fs::CWD;
            let renamed = if crate::debug::rename_noreplace() {
                rustix::fs::renameat_with(cwd, &tmp, cwd, path, rustix::fs::RenameFlags::NOREPLACE)
            } else {
                Err(rustix::io::Errno::INVAL)
            };
            match renamed {
                Ok(()) => {}
                Err(rustix::io::Errno::EXIST) => return Err(exists()),
                // No renameat2 flags here (NFS, some FUSE): a hard link
                // also never replaces, then the temporary name goes.
                Err(rustix::io::Errno::INVAL | rustix::io::Errno::NOSYS) => {
                    match std::fs::hard_link(&tmp, path) {
                        Ok(()) => {}
                        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                            return Err(exists());
                        }
                        Err(e) => return Err(Error::io("link into place", path, e)),
                    }
                    // The region is in place: a temporary name that
                    // stays is only clutter.
                    let _ = std::fs::remove_file(&tmp);
                }
                Err(e) => return Err(Error::io("rename into place", path, e.into())),
            }
            crate::io::sync_dir(dir).map_err(|e| Error::io("sync directory of", path, e))
        })();
        if let Err(e) = made {
            // Leave nothing half-made behind.
            let _ = std::fs::remove_file(&tmp);
            let _ = std::fs::remove_file(&lp);
            return Err(e);
        }
        drop(log);
        Self::open(path, opts)
    }

    /// Writes an empty region's header and log header to fresh storages
    /// (with a fixed address chosen for the default `max_size`).
    pub fn format(data: &dyn Storage, log: &dyn Storage, size: u64) -> Result<()> {
        Self::format_at(data, log, size, None, Options::default().max_size)
    }

    /// `format`, recording `address`, or one chosen at random for views of
    /// `max_size` bytes.
    fn format_at(
        data: &dyn Storage,
        log: &dyn Storage,
        size: u64,
        address: Option<usize>,
        max_size: u64,
    ) -> Result<()> {
        let region_id = crate::rand::fresh();
        let address =
            address.or_else(|| crate::os::mem::fixed_address(crate::rand::fresh(), max_size));
        let header = RegionHeader {
            region_id,
            generation: 1,
            checkpoint_seq: 0,
            data_size: size,
            address: address.unwrap_or(0) as u64,
        };
        let e = |op, err| Error::io(op, data.path(), err);
        // Allocated, not sparse: the image reads every page, and reading a
        // hole of a full tmpfs is SIGBUS.
        data.set_len(HEADER_BYTES + size)
            .map_err(|x| e("allocate disk space for", x))?;
        let mut page = vec![0u8; HEADER_BYTES as usize];
        for g in [1, 2] {
            let (off, slot) = RegionHeader {
                generation: g,
                ..header
            }
            .encode();
            page[off as usize..off as usize + 64].copy_from_slice(&slot);
        }
        data.write_at(&page, 0).map_err(|x| e("write header", x))?;
        data.sync().map_err(|x| e("sync", x))?;
        let lh = LogHeader {
            region_id,
            generation: 1,
            salt: 1,
            start_seq: 1,
        };
        let mut page = vec![0u8; HEADER_BYTES as usize];
        let (off, slot) = lh.encode();
        page[off as usize..off as usize + 64].copy_from_slice(&slot);
        log.write_at(&page, 0)
            .and_then(|_| log.sync())
            .map_err(|x| Error::io("write log header", log.path(), x))
    }

    /// Opens an existing region. Any number of processes (and handles in
    /// one process) may have it open at once; the first to open it recovers
    /// it from its log if a process died with it open.
    ///
    /// A region whose files this process may not write (a 0444 file, a
    /// read-only mount) opens read-only, as with [`Options::read_only`].
    pub fn open(path: &Path, opts: Options) -> Result<Region> {
        let mut opts = opts;
        let lp = log_path(path);
        // Read-write if allowed; read-only when asked, or when the region
        // or its log may not be written here.
        let open = |p: &Path, ro: &mut bool| -> Result<FileStorage> {
            if !*ro {
                match FileStorage::open(p, false) {
                    Err(e) if not_writable(&e) => *ro = true,
                    r => return r.map_err(|e| Error::io("open", p, e)),
                }
            }
            FileStorage::open_read_only(p).map_err(|e| Error::io("open", p, e))
        };
        let mut data = open(path, &mut opts.read_only)?;
        if !lp.exists() {
            let mut page = vec![0u8; HEADER_BYTES as usize];
            let txmap = data.read_at(&mut page, 0).is_ok() && RegionHeader::decode(&page).is_ok();
            if !txmap {
                return Err(Error::NotARegion {
                    path: path.to_path_buf(),
                    what: "it has no valid region header (and no log file)".into(),
                });
            }
            return Err(Error::io(
                "open log",
                &lp,
                std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    "the region's log file is missing",
                ),
            ));
        }
        let was_read_only = opts.read_only;
        let log = open(&lp, &mut opts.read_only)?;
        if opts.read_only && !was_read_only {
            // The log is not writable: the region file is not written either.
            data = open(path, &mut opts.read_only)?;
        }
        let clone =
            |s: &FileStorage, p: &Path| s.file().try_clone().map_err(|e| Error::io("open", p, e));
        // Separate open file descriptions: flock belongs to those.
        let users = std::fs::File::open(path).map_err(|e| Error::io("open", path, e))?;
        let transition = std::fs::File::open(&lp).map_err(|e| Error::io("open", &lp, e))?;
        drop((clone(&data, path)?, clone(&log, &lp)?));
        Self::open_locked(
            Box::new(data),
            Box::new(log),
            opts,
            Some(OpenLocks { users, transition }),
        )
    }

    /// Opens a region on given storages (tests use simulated devices). The
    /// handle is alone with the region: its shared state is private to it.
    pub fn open_with(
        data: Box<dyn Storage>,
        log: Box<dyn Storage>,
        opts: Options,
    ) -> Result<Region> {
        Self::open_locked(data, log, opts, None)
    }

    fn open_locked(
        data: Box<dyn Storage>,
        log: Box<dyn Storage>,
        opts: Options,
        locks: Option<OpenLocks>,
    ) -> Result<Region> {
        if !crate::os::mem::check_page_size() {
            return Err(Error::Invalid(format!(
                "txmap needs {PAGE}-byte pages (Linux x86-64)"
            )));
        }
        use rustix::fs::FlockOperation as F;
        let path = data.path().to_path_buf();
        if let Some(l) = &locks {
            flock(&l.transition, F::LockExclusive, log.path())?;
        }
        // Everything below runs while no other process opens or closes.
        let r = (|| {
            let alone = match &locks {
                Some(l) => flock(&l.users, F::NonBlockingLockExclusive, &path)?,
                None => true,
            };
            // The first opener decides whether the session keeps page
            // checksums; the others follow the table's presence.
            let sums = match &locks {
                // A read-only handle neither verifies nor writes checksums.
                _ if opts.read_only => None,
                None => None,
                Some(_) if alone && !opts.page_checksums => {
                    let p = crate::sums::sums_path(&path);
                    match std::fs::remove_file(&p) {
                        Ok(()) => {}
                        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                        Err(e) => return Err(Error::io("remove", p, e)),
                    }
                    None
                }
                Some(_) => crate::sums::PageSums::open(&path, alone)?,
            };
            let (mvcc, recovered, address, loss) = if alone && opts.read_only {
                Self::first_open_read_only(&*data, &*log, &opts, locks.is_some())?
            } else if alone {
                Self::first_open(&*data, &*log, sums.as_ref(), &opts, locks.is_some())?
            } else {
                let (mvcc, address) = Self::join(&*data, &*log, &opts)?;
                (mvcc, 0, address, Vec::new())
            };
            let recovered = (recovered, alone, address, loss, sums);
            if let Some(l) = &locks {
                // Converting is not atomic, but nobody can look meanwhile:
                // we hold the transition lock.
                flock(&l.users, F::LockShared, &path)?;
            }
            Ok::<_, Error>((mvcc, recovered))
        })();
        let (mvcc, recovered) = match r {
            Ok(x) => x,
            Err(e) => {
                if let Some(l) = &locks {
                    let _ = rustix::fs::flock(&l.users, F::Unlock);
                    let _ = rustix::fs::flock(&l.transition, F::Unlock);
                }
                return Err(e);
            }
        };
        if let Some(l) = &locks {
            let _ = rustix::fs::flock(&l.transition, F::Unlock);
        }
        let mut opts = opts;
        opts.max_size = mvcc.max_pages() as u64 * PAGE as u64;
        let size = mvcc.hdr().data_size.load(Ordering::Acquire);
        let image = Reservation::new(HEADER_BYTES as usize + opts.max_size as usize, None)
            .map_err(|e| Error::os("reserve address space for the region image", e))?;
        let inner = Arc::new(RegionInner {
            path,
            data,
            image,
            image_mapped: Mutex::new(0),
            log: Log::new(log)
                .with_reserve(opts.log_reserve)
                .with_archive(opts.log_archive.clone()),
            mvcc,
            recovered: recovered.0,
            recovery_loss: recovered.3,
            opened_alone: recovered.1,
            flusher: Mutex::new(None),
            round: Arc::new(Mutex::new(())),
            owner: rustix::process::getpid(),
            fork_generation: crate::os::signal::forks().map_err(|e| Error::Os {
                op: "install the fault and fork handlers",
                source: e,
            })?,
            opts,
            locks,
            view_pool: Mutex::new(Vec::new()),
            address: recovered.2,
            sums: recovered.4,
        });
        inner.map_image(size)?;
        inner.mvcc.hdr().opens.fetch_add(1, Ordering::Relaxed);
        if inner.opts.durability == Durability::Async && !inner.opts.read_only {
            start_flusher(&inner);
        }
        Ok(Region {
            inner: RegionRef::new(inner),
        })
    }

    /// Alone with the region: recover it from its log, start a log epoch
    /// and build the shared state afresh.
    fn first_open(
        data: &dyn Storage,
        log: &dyn Storage,
        sums: Option<&crate::sums::PageSums>,
        opts: &Options,
        shared: bool,
    ) -> Result<(Mvcc, u64, usize, Vec<String>)> {
        let limit = opts.snapshot_limit.encode()?;
        // Recovery maps the log and the image maps the region file: holes
        // (a sparse copy, or a file extended by an older txmap) are
        // allocated first, so a full file system fails here, not with
        // SIGBUS on a read.
        for s in [data, log] {
            s.allocate()
                .map_err(|e| Error::io("allocate disk space for holes in", s.path(), e))?;
        }
        let mut rec = recover(data, log, sums, opts.on_recovery_progress, opts.accept_loss)?;
        let max_size = opts.max_size.max(rec.header.data_size);
        if let Some(a) = opts.address {
            check_address(a, max_size)?;
        }
        // A region made before addresses were recorded gets one now; the
        // program may move it while nobody else has it open.
        let want = match opts.address {
            Some(a) => a as u64,
            None if rec.header.address == 0 => {
                crate::os::mem::fixed_address(crate::rand::fresh(), max_size).unwrap_or(0) as u64
            }
            None => rec.header.address,
        };
        if want != rec.header.address {
            rec.header.address = want;
            rec.header.generation += 1;
            write_region_header(data, sums, &rec.header)?;
        }
        if let Some(dir) = &opts.log_archive {
            crate::archive::archive_epoch(
                log,
                dir,
                rec.header.region_id,
                rec.log_header.start_seq,
                rec.log_last,
                rec.log_end,
            )?;
        }
        let (lh, mut allocated) =
            crate::wal::log::start_epoch(log, &rec.log_header, rec.header.checkpoint_seq)?;
        crate::wal::log::give_back(log, allocated, opts.log_reserve, |a| allocated = a);
        let init = crate::mvcc::Init {
            region_id: rec.header.region_id,
            max_pages: max_size / PAGE as u64,
            commit_seq: rec.header.checkpoint_seq,
            data_size: rec.header.data_size,
            region_generation: rec.header.generation,
            log: crate::wal::shared::LogInit {
                durable: opts.durability == Durability::Durable,
                header: lh,
                last_seq: rec.header.checkpoint_seq,
                end: HEADER_BYTES,
                allocated,
            },
            limit_lag: limit.0,
            limit_versions: limit.1,
        };
        let mvcc = create_shared_state(data, &init, shared)?;
        Ok((mvcc, rec.replayed, want as usize, rec.loss))
    }

    /// Alone with the region and not allowed to write it: the commits its
    /// log holds since the checkpoint are published as page versions in
    /// the shared state (as a repair publishes a dead committer's) rather
    /// than replayed into the file, and the log epoch goes on. Writers that
    /// open the region meanwhile append after its last record; the first
    /// checkpoint writes the versions into the file.
    fn first_open_read_only(
        data: &dyn Storage,
        log: &dyn Storage,
        opts: &Options,
        shared: bool,
    ) -> Result<(Mvcc, u64, usize, Vec<String>)> {
        let limit = opts.snapshot_limit.encode()?;
        let (header, page) = read_headers_raw(data, log)?;
        let refuse = |op| Error::ReadOnly {
            op,
            path: data.path().to_path_buf(),
        };
        if opts.address.is_some_and(|a| a as u64 != header.address) {
            return Err(refuse("recording a new fixed address (Options::address)"));
        }
        let ll = log.len().map_err(|e| Error::io("stat", log.path(), e))?;
        let image = crate::os::mem::FileImage::map(log.fd(), ll as usize)
            .map_err(|e| Error::os("map log", e))?;
        let (reading, loss) = read_log(image.bytes(), &page, &header, log.path(), false)?;
        debug_assert!(loss.is_empty(), "damage is an error without accept_loss");
        let lh = reading.header;
        let base = header.checkpoint_seq;
        // Going on with this epoch needs its header as on disk and records
        // that follow the checkpoint; anything else starts a new epoch.
        if reading.rebuilt || !reading.damage.is_empty() || lh.start_seq > base.saturating_add(1) {
            return Err(refuse(
                "recovering a log whose header must be rewritten (open it writable once)",
            ));
        }
        let records: Vec<_> = reading
            .scan
            .records
            .iter()
            .filter(|r| r.seq > base)
            .collect();
        let size = records
            .iter()
            .map(|r| r.data_size)
            .fold(header.data_size, u64::max);
        let dl = data.len().map_err(|e| Error::io("stat", data.path(), e))?;
        if dl < HEADER_BYTES.saturating_add(size) {
            return Err(refuse(
                "recovering commits that grew the region beyond its file (open it writable once)",
            ));
        }
        let max_size = opts.max_size.max(size);
        let init = crate::mvcc::Init {
            region_id: header.region_id,
            max_pages: max_size / PAGE as u64,
            commit_seq: base,
            data_size: size,
            region_generation: header.generation,
            log: crate::wal::shared::LogInit {
                durable: opts.durability == Durability::Durable,
                header: lh,
                last_seq: base,
                end: reading.scan.end,
                allocated: ll,
            },
            limit_lag: limit.0,
            limit_versions: limit.1,
        };
        let mvcc = create_shared_state(data, &init, shared)?;
        {
            let l = mvcc
                .lock()
                .map_err(|e| Error::io("lock shared state", mvcc.path(), e))?;
            for r in &records {
                publish_record(&mvcc, data, &l, r)?;
            }
            mvcc.hdr().log.raise_written(mvcc.commit_seq());
        }
        assert_eq!(
            mvcc.commit_seq(),
            records.last().map_or(base, |r| r.seq),
            "every record after the checkpoint is published, in order"
        );
        Ok((
            mvcc,
            records.len() as u64,
            header.address as usize,
            Vec::new(),
        ))
    }

    /// Others have the region open: map their shared state and check that
    /// we agree with it.
    fn join(data: &dyn Storage, log: &dyn Storage, opts: &Options) -> Result<(Mvcc, usize)> {
        let (header, _) = read_headers(data, log)?;
        if let Some(a) = opts.address
            && a as u64 != header.address
        {
            return Err(Error::Incompatible {
                path: data.path().to_path_buf(),
                what: format!(
                    "open by other processes at fixed address {:#x}; Options::address \
                     {a:#x} can change it only when no other process has it open",
                    header.address
                ),
            });
        }
        let spath = shared_path(data.path(), header.region_id)?;
        let mvcc = Mvcc::attach(&spath, file_mode(data)).map_err(|e| match e {
            crate::mvcc::AttachError::Io(e) => Error::io("open shared state", &spath, e),
            crate::mvcc::AttachError::Layout(what) => Error::Incompatible {
                path: data.path().to_path_buf(),
                what: format!(
                    "open in other processes with incompatible shared state {}: {what}",
                    spath.display()
                ),
            },
        })?;
        let h = mvcc.hdr();
        if h.region_id.load(Ordering::Acquire) != header.region_id {
            return Err(Error::Invalid(format!(
                "{}: shared state {} belongs to another region",
                data.path().display(),
                spath.display()
            )));
        }
        let theirs = if h.log.durable() {
            Durability::Durable
        } else {
            Durability::Async
        };
        if theirs != opts.durability {
            return Err(Error::Incompatible {
                path: data.path().to_path_buf(),
                what: format!(
                    "open in {theirs:?} mode by another process; open it with \
                     Durability::{theirs:?} too, or close the others first"
                ),
            });
        }
        let mine = opts.snapshot_limit.encode()?;
        let (lag, versions) = mvcc.limit();
        if opts.snapshot_limit != SnapshotLimit::default() && mine != (lag, versions) {
            return Err(Error::Incompatible {
                path: data.path().to_path_buf(),
                what: format!(
                    "open by another process with snapshot limit {:?}; open it \
                     with that limit or the default, or close the others first",
                    SnapshotLimit::decode(lag, versions)
                ),
            });
        }
        Ok((mvcc, header.address as usize))
    }

    /// Bytes in the region.
    pub fn size(&self) -> u64 {
        self.inner.size()
    }

    /// Whether the region is open read-only ([`Options::read_only`], or
    /// files this process may not write): commits that store fail with
    /// [`Error::ReadOnly`].
    pub fn is_read_only(&self) -> bool {
        self.inner.opts.read_only
    }

    /// The largest size [`Region::grow`] can reach in this handle: its
    /// reservation ([`Options::max_size`], or more if the region was larger).
    pub fn max_size(&self) -> u64 {
        self.inner.opts.max_size
    }

    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// Grows the region to at least `size` bytes (rounded up to pages). New bytes
    /// are zero. Views see the new size at their next transaction.
    pub fn grow(&self, size: u64) -> Result<()> {
        self.inner.grow(size)
    }

    /// Opens a view for the calling thread (see [`crate::View`]). It takes
    /// over the memory of a view of this handle that closed, if one is kept
    /// (up to 4, of at most 64 MiB of private pages each): then its first
    /// touches need no page allocated. The memory goes with the last handle.
    pub fn view(&self) -> Result<crate::View> {
        crate::View::open(self.inner.clone(), None)
    }

    /// Opens a view at a fixed address, so raw pointers stay valid across
    /// processes that do the same.
    pub fn view_at(&self, addr: usize) -> Result<crate::View> {
        crate::View::open(self.inner.clone(), Some(addr))
    }

    /// The region's fixed address: where [`Region::view_fixed`] maps it in
    /// every process and every execution (recorded in the region file).
    /// `None` only when `Options::max_size` is too large for one to be chosen.
    pub fn address(&self) -> Option<usize> {
        (self.inner.address != 0).then_some(self.inner.address)
    }

    /// Opens a view at the region's fixed address ([`Region::address`]),
    /// so raw pointers stored in the region stay valid in every process
    /// and execution that maps it this way. Fails with
    /// [`Error::AddressTaken`] (naming the range and what holds it) when
    /// something is mapped there, such as another view of this process at
    /// that address (one per process at a time); it never maps elsewhere.
    /// The view's memory is freed when it closes, so the address is free
    /// again at once.
    pub fn view_fixed(&self) -> Result<crate::View> {
        let addr = self.address().ok_or_else(|| {
            Error::Invalid(format!(
                "{} has no fixed address (Options::max_size {} leaves no room for one); \
                 give one with Options::address",
                self.inner.path.display(),
                self.inner.opts.max_size
            ))
        })?;
        self.view_at(addr)
    }

    /// Copies committed versions into the data file and empties the log when
    /// no live snapshot needs older data.
    pub fn checkpoint(&self) -> Result<()> {
        self.inner.checkpoint()
    }

    /// Closes this handle, reporting a failure of the final checkpoint (which
    /// dropping the last handle does silently; the log keeps the data either way).
    /// Other clones and open views keep the region open. A read-only
    /// handle writes nothing: it just closes.
    pub fn close(self) -> Result<()> {
        let r = if self.is_read_only() {
            Ok(())
        } else {
            self.inner.checkpoint()
        };
        drop(self);
        r
    }

    /// Makes every commit so far durable (useful in `Async` mode).
    pub fn sync(&self) -> Result<()> {
        self.inner.check_owner()?;
        let i = &self.inner;
        let h = i.mvcc.hdr();
        i.log.flush(&h.log, i.mvcc.commit_seq())?;
        let l = i.lock_commit()?;
        i.mvcc.prune_synced(&l, Log::synced_seq(&h.log));
        Ok(())
    }

    pub fn stats(&self) -> Stats {
        let i = &self.inner;
        let h = i.mvcc.hdr();
        i.mvcc.reap_dead_slots();
        let snapshots = i.mvcc.live_snapshots();
        let (lag, versions) = i.mvcc.limit();
        let (expired, preserved) = i.mvcc.expiry_counts();
        Stats {
            snapshot_limit: SnapshotLimit::decode(lag, versions),
            expired_snapshots: expired,
            preserved_pages: preserved,
            size: i.size(),
            commit_seq: i.mvcc.commit_seq(),
            checkpoint_seq: h.checkpoint_seq.load(Ordering::Acquire),
            log_bytes: Log::epoch_bytes(&h.log),
            version_pages: i.mvcc.version_pages(),
            live_snapshots: snapshots.len(),
            oldest_snapshot: snapshots.iter().map(|s| s.snapshot).min(),
            snapshots,
            recovered_commits: i.recovered,
            recovery_loss: i.recovery_loss.clone(),
            log_syncs: h.log.syncs(),
            shared_path: i.mvcc.path().to_path_buf(),
            opened_alone: i.opened_alone,
            poisoned: crate::wal::log::poison_message(&h.log),
        }
    }
}

/// What recovery found and did.
pub(crate) struct Recovered {
    pub header: RegionHeader,
    pub log_header: LogHeader,
    pub replayed: u64,
    /// End of the valid records of the log's epoch, and the last one's
    /// commit (for the archive).
    pub log_end: u64,
    pub log_last: u64,
    /// With `accept_loss`: what a damaged log lost or needed (empty: nothing).
    pub loss: Vec<String>,
}

/// Reads the region and log headers and reports both, without writing.
pub(crate) fn read_headers(
    data: &dyn Storage,
    log: &dyn Storage,
) -> Result<(RegionHeader, LogHeader)> {
    let (header, page) = read_headers_raw(data, log)?;
    let lh = LogHeader::decode(&page).map_err(|e| Error::corrupt(log.path(), 0, e.to_string()))?;
    Ok((header, lh))
}

/// The region header, checked against the log's, and the log's header page.
/// Both log slots damaged is left to the caller (recovery may see the epoch
/// in the records); any other unreadable log header is an error.
fn read_headers_raw(data: &dyn Storage, log: &dyn Storage) -> Result<(RegionHeader, Vec<u8>)> {
    let mut page = vec![0u8; HEADER_BYTES as usize];
    let dl = data.len().map_err(|e| Error::io("stat", data.path(), e))?;
    if dl < HEADER_BYTES {
        return Err(Error::corrupt(
            data.path(),
            dl,
            "file shorter than its header page",
        ));
    }
    data.read_at(&mut page, 0)
        .map_err(|e| Error::io("read header of", data.path(), e))?;
    let header =
        RegionHeader::decode(&page).map_err(|e| Error::corrupt(data.path(), 0, e.to_string()))?;
    let ll = log.len().map_err(|e| Error::io("stat", log.path(), e))?;
    if ll < HEADER_BYTES {
        return Err(Error::corrupt(
            log.path(),
            ll,
            "log shorter than its header page",
        ));
    }
    log.read_at(&mut page, 0)
        .map_err(|e| Error::io("read header of", log.path(), e))?;
    match LogHeader::decode(&page) {
        Ok(lh) if lh.region_id != header.region_id => {
            return Err(Error::corrupt(
                log.path(),
                0,
                format!(
                    "log belongs to region {:016x}, not to {} ({:016x})",
                    lh.region_id,
                    data.path().display(),
                    header.region_id
                ),
            ));
        }
        Ok(_) | Err(HeaderError::BadChecksum) => {}
        Err(e) => return Err(Error::corrupt(log.path(), 0, e.to_string())),
    }
    if header.data_size == 0 || !header.data_size.is_multiple_of(PAGE as u64) {
        return Err(Error::corrupt(
            data.path(),
            0,
            format!(
                "header claims a data size of {} bytes, not a whole number of pages",
                header.data_size
            ),
        ));
    }
    if dl < HEADER_BYTES.saturating_add(header.data_size) {
        return Err(Error::corrupt(
            data.path(),
            dl,
            format!(
                "region file truncated: {} bytes of data expected",
                header.data_size
            ),
        ));
    }
    Ok((header, page))
}

/// Redo recovery: replays every logged commit after the checkpoint into the
/// data file, syncs it and records the new checkpoint. Idempotent: a crash
/// during recovery leaves a log that replays to the same result.
///
/// A damaged log (docs/FORMAT.md, "Reading the log") is an error naming
/// the commits it would lose, and nothing is written; with `accept_loss`
/// the commits before the damage are replayed and the rest dropped.
pub(crate) fn recover(
    data: &dyn Storage,
    log: &dyn Storage,
    sums: Option<&crate::sums::PageSums>,
    progress: Option<fn(u64, u64)>,
    accept_loss: bool,
) -> Result<Recovered> {
    let (mut header, page) = read_headers_raw(data, log)?;
    let ll = log.len().map_err(|e| Error::io("stat", log.path(), e))?;
    // Mapped, not read: a log held long by old snapshots may be large.
    let image = crate::os::mem::FileImage::map(log.fd(), ll as usize)
        .map_err(|e| Error::os("map log", e))?;
    let (reading, mut loss) = read_log(image.bytes(), &page, &header, log.path(), accept_loss)?;
    let lh = reading.header;
    // After a gap nothing can be replayed onto the checkpoint.
    let gap = lh.start_seq > header.checkpoint_seq.saturating_add(1);
    let records: &[_] = if gap { &[] } else { &reading.scan.records };
    let mut replayed = 0;
    let mut size = header.data_size;
    let base = header.checkpoint_seq;
    let total = records.iter().filter(|r| r.seq > base).count() as u64;
    let replay: Vec<_> = records.iter().filter(|r| r.seq > base).collect();
    let touched = crate::sums::touched_pages(replay.iter().flat_map(|r| r.ranges.iter()));
    if let Some(s) = sums {
        check_pages(data, s, &header, &touched, accept_loss, &mut loss)?;
    }
    let report = |done: u64| {
        if let Some(f) = progress
            && (done.is_multiple_of(1024) || done == total)
        {
            f(done, total);
        }
    };
    for r in records.iter().filter(|r| r.seq > base) {
        if r.data_size > size {
            size = r.data_size;
            data.set_len(HEADER_BYTES + size)
                .map_err(|e| Error::io("allocate disk space to grow", data.path(), e))?;
        }
        for range in &r.ranges {
            data.write_at(range.bytes, HEADER_BYTES + range.offset)
                .map_err(|e| Error::io("replay into", data.path(), e))?;
        }
        header.checkpoint_seq = r.seq;
        replayed += 1;
        report(replayed);
    }
    if !reading.damage.is_empty() && accept_loss {
        let last = reading.damage.iter().filter_map(|d| d.last).max();
        let first = header.checkpoint_seq + 1;
        loss.push(match last {
            Some(l) if l >= first => format!(
                "recovered up to commit {}; dropped {}",
                header.checkpoint_seq,
                crate::error::Lost {
                    first,
                    last: Some(l)
                }
            ),
            _ => format!(
                "recovered up to commit {}; dropped anything after it",
                header.checkpoint_seq
            ),
        });
    }
    if replayed > 0 {
        header.generation += 1;
        header.data_size = size;
        if let Some(s) = sums {
            // Replayed pages are checkpointed now: their content is the
            // log's, and their checksums are taken from it.
            data.sync().map_err(|e| Error::io("sync", data.path(), e))?;
            crate::sums::record_from_file(s, data, &touched, size)?;
        }
        write_region_header(data, sums, &header)?;
    }
    Ok(Recovered {
        header,
        log_header: lh,
        replayed,
        log_end: reading.scan.end,
        log_last: reading
            .scan
            .records
            .last()
            .map_or(lh.start_seq.saturating_sub(1), |r| r.seq),
        loss,
    })
}

/// Reads the log's records after the region's checkpoint. Damage a crash
/// cannot explain is an error naming the commits it loses, unless
/// `accept_loss`: then it is described in the returned lines.
fn read_log<'a>(
    bytes: &'a [u8],
    header_page: &[u8],
    header: &RegionHeader,
    path: &Path,
    accept_loss: bool,
) -> Result<(scan::Reading<'a>, Vec<String>)> {
    let reading = scan::read(
        bytes,
        LogHeader::decode(header_page).ok(),
        &crate::wal::format::damaged_slots(header_page, crate::wal::format::LOG_MAGIC),
        header.region_id,
        header.checkpoint_seq,
    );
    let mut loss = Vec::new();
    if let Some(d) = reading.damage.first() {
        let lost = crate::error::Lost {
            first: d.seq,
            last: reading.damage.iter().filter_map(|d| d.last).max(),
        };
        if !accept_loss {
            return Err(Error::Corrupt {
                path: path.to_path_buf(),
                offset: d.offset,
                what: reading
                    .damage
                    .iter()
                    .map(|d| d.what.as_str())
                    .collect::<Vec<_>>()
                    .join("; "),
                lost: Some(lost),
            });
        }
        for d in &reading.damage {
            loss.push(format!(
                "{} at offset {}: {}",
                path.display(),
                d.offset,
                d.what
            ));
        }
    }
    Ok((reading, loss))
}

/// Publishes a logged commit: each page it changed is its previous version
/// (or the region file's page) with the record's byte ranges applied.
fn publish_record(
    mvcc: &Mvcc,
    data: &dyn Storage,
    l: &crate::mvcc::Locked<'_>,
    r: &crate::wal::format::CommitRecord<'_>,
) -> Result<()> {
    let mut pages: std::collections::BTreeMap<u32, Vec<u8>> = Default::default();
    let len = data.len().map_err(|e| Error::io("stat", data.path(), e))?;
    for range in &r.ranges {
        let mut off = range.offset;
        let mut bytes = range.bytes;
        while !bytes.is_empty() {
            let p = (off / PAGE as u64) as u32;
            let in_page = (off % PAGE as u64) as usize;
            let n = bytes.len().min(PAGE - in_page);
            if let std::collections::btree_map::Entry::Vacant(slot) = pages.entry(p) {
                let mut buf = vec![0u8; PAGE];
                match mvcc.lookup(p as usize, r.seq - 1) {
                    Some(v) => buf.copy_from_slice(v.data),
                    None => {
                        let at = HEADER_BYTES + u64::from(p) * PAGE as u64;
                        if at + PAGE as u64 <= len {
                            data.read_at(&mut buf, at)
                                .map_err(|e| Error::io("read", data.path(), e))?;
                        }
                    }
                }
                slot.insert(buf);
            }
            let buf = pages.get_mut(&p).expect("inserted above");
            buf[in_page..in_page + n].copy_from_slice(&bytes[..n]);
            off += n as u64;
            bytes = &bytes[n..];
        }
    }
    let list: Vec<(u32, &[u8])> = pages.iter().map(|(p, b)| (*p, &b[..])).collect();
    let err = |e| Error::io("lock shared state", mvcc.path(), e);
    mvcc.reserve(l, list.len()).map_err(err)?;
    mvcc.publish(l, r.seq, &list, Log::synced_seq(&mvcc.hdr().log))
        .map_err(err)
}

/// Verifies the checksummed pages of the region file before replay. Pages
/// the log is about to rewrite are skipped (an interrupted checkpoint may
/// have torn them; replay repairs them). A table behind the region header
/// (kept by no one since) is reset, not trusted.
fn check_pages(
    data: &dyn Storage,
    s: &crate::sums::PageSums,
    header: &RegionHeader,
    touched: &std::collections::BTreeSet<u64>,
    accept_loss: bool,
    loss: &mut Vec<String>,
) -> Result<()> {
    let current = s
        .header()?
        .is_some_and(|t| t.region_id == header.region_id && t.generation >= header.generation);
    if !current {
        return s.reset(header.region_id, header.generation);
    }
    let entries = s.entries(header.data_size / PAGE as u64)?;
    let bad = crate::sums::verify(data, &entries, |p| touched.contains(&p))?;
    if bad.is_empty() {
        return Ok(());
    }
    if !accept_loss {
        return Err(crate::sums::damaged_error(data.path(), &bad));
    }
    for b in &bad {
        loss.push(format!("{}: {b} (kept as it is)", data.path().display()));
    }
    Ok(())
}

/// Syncs the data, then writes and syncs a header slot: the header never
/// claims data that is not on disk.
pub(crate) fn write_region_header(
    data: &dyn Storage,
    sums: Option<&crate::sums::PageSums>,
    h: &RegionHeader,
) -> Result<()> {
    // The table goes first: it is never behind a header that is on disk.
    if let Some(s) = sums {
        s.write_header(h.region_id, h.generation)?;
        s.sync()?;
    }
    let (off, slot) = h.encode();
    data.sync()
        .and_then(|_| data.write_at(&slot, off))
        .and_then(|_| data.sync())
        .map_err(|e| Error::io("checkpoint", data.path(), e))
}

/// A transaction's changes, ready to commit.
pub(crate) struct CommitRequest<'a> {
    pub snapshot: u64,
    /// Pages whose reads must not have changed since the snapshot (serializable).
    pub read_pages: &'a [u32],
    /// Serializable without a read set: tells which pages the transaction
    /// may have read; it conflicts if a commit after the snapshot changed
    /// one of them (or the change journal no longer reaches back).
    pub untracked_reads: Option<&'a dyn Fn(u32) -> bool>,
    /// Pages written, each with its new content.
    pub pages: Vec<(u32, &'a [u8])>,
    pub ranges: Vec<Range<'a>>,
    /// The committing view's snapshot slot.
    pub slot: usize,
}

static PRIVATE: AtomicU64 = AtomicU64::new(0);

/// Creates the shared state of a region opened alone: in `/dev/shm` where
/// other processes find it, or private to this handle.
fn create_shared_state(data: &dyn Storage, init: &crate::mvcc::Init, shared: bool) -> Result<Mvcc> {
    let spath = if shared {
        shared_path(data.path(), init.region_id)?
    } else {
        std::env::temp_dir().join(format!(
            "txmap-private-{:016x}-{}-{}",
            init.region_id,
            std::process::id(),
            PRIVATE.fetch_add(1, Ordering::Relaxed)
        ))
    };
    let mvcc = Mvcc::create(&spath, init, file_mode(data))
        .map_err(|e| Error::io("create shared state", &spath, e))?;
    if !shared {
        let _ = std::fs::remove_file(&spath);
    }
    Ok(mvcc)
}

/// Whether opening for writing failed for want of permission (a 0444 file,
/// a read-only mount), so that a read-only open may work.
fn not_writable(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EACCES | libc::EROFS | libc::EPERM)
    )
}

/// Permission bits for the shared state: those of the region file, and
/// writable by its creator (a read-only user of a 0444 region joins the
/// shared state of another process of the same user).
fn file_mode(data: &dyn Storage) -> u32 {
    rustix::fs::fstat(data.fd()).map_or(0o600, |st| st.st_mode & 0o666 | 0o200)
}

impl RegionInner {
    /// Memory that closed views left for reuse.
    pub(crate) fn view_pool(&self) -> MutexGuard<'_, Vec<crate::view::memory::ViewMemory>> {
        lock(&self.view_pool)
    }

    /// Fails in a process forked after the region was opened.
    pub fn check_owner(&self) -> Result<()> {
        if crate::os::signal::forks_now() == self.fork_generation {
            return Ok(());
        }
        Err(Error::ForkedChild {
            path: self.path.clone(),
            owner: self.owner.as_raw_nonzero().get(),
            pid: rustix::process::getpid().as_raw_nonzero().get(),
        })
    }

    pub fn size(&self) -> u64 {
        self.mvcc.hdr().data_size.load(Ordering::Acquire)
    }

    fn shared_lock_err(&self, e: std::io::Error) -> Error {
        Error::io("lock shared state", self.mvcc.path(), e)
    }

    /// Where the region's data starts in this process's image of the file
    /// (past the header page); mapped up to the size `map_image` was given.
    pub fn image_data(&self) -> *const u8 {
        self.image.base().wrapping_add(HEADER_BYTES as usize)
    }

    /// Maps the region file in this process's image up to `size` bytes (other
    /// processes may have grown it).
    pub fn map_image(&self, size: u64) -> Result<()> {
        let mut mapped = lock(&self.image_mapped);
        if *mapped >= size {
            return Ok(());
        }
        let from = if *mapped == 0 {
            0
        } else {
            round_up((HEADER_BYTES + *mapped) as usize)
        };
        let to = round_up((HEADER_BYTES + size) as usize);
        self.image
            .map_shared(from, to - from, self.data.fd(), from as u64, Access::Read)
            .map_err(|e| Error::os("map region file", e))?;
        *mapped = size;
        Ok(())
    }

    /// Takes the shared commit lock, first finishing what a holder that
    /// died left half done.
    pub fn lock_commit(&self) -> Result<crate::mvcc::Locked<'_>> {
        let l = self.mvcc.lock().map_err(|e| self.shared_lock_err(e))?;
        if l.owner_died
            && let Err(e) = self.repair(&l)
        {
            // The lock is consistent again, so no later holder would
            // repair: nobody may commit on the half-done state.
            crate::wal::log::poison(&self.mvcc.hdr().log, &e);
            return Err(e);
        }
        Ok(l)
    }

    /// Repairs after a process died holding the commit lock:
    /// - a log reset whose new header reached the file but not shared memory
    ///   (or not all of it: the generation is published last) is completed;
    /// - records written before the death (the shared log end covers them)
    ///   but not yet published are published from the log (redo), so
    ///   sequence numbers never repeat and nothing another process may have
    ///   synced is lost; a record past the log end is ignored (its committer
    ///   was never told it committed) and overwritten by the next commit;
    /// - a page listed twice in the dirty list is listed once.
    fn repair(&self, l: &crate::mvcc::Locked<'_>) -> Result<()> {
        let h = self.mvcc.hdr();
        let storage = self.log.storage();
        let mut page = vec![0u8; HEADER_BYTES as usize];
        storage
            .read_at(&mut page, 0)
            .map_err(|e| Error::io("read header of", storage.path(), e))?;
        let disk = LogHeader::decode(&page)
            .map_err(|e| Error::corrupt(storage.path(), 0, e.to_string()))?;
        if disk.generation > h.log.generation() {
            crate::wal::log::publish_epoch(&h.log, &disk);
        }
        let (from, to, salt) = h.log.unpublished();
        if to > from {
            let mut bytes = vec![0u8; (to - from) as usize];
            storage
                .read_at(&mut bytes, from)
                .map_err(|e| Error::io("read", storage.path(), e))?;
            let mut at = 0;
            while at < bytes.len() {
                let r = crate::wal::format::decode_record(&bytes[at..], salt).map_err(|e| {
                    Error::corrupt(
                        storage.path(),
                        from + at as u64,
                        format!("unpublished record left by a dead process: {e:?}"),
                    )
                })?;
                at += r.len;
                if r.seq <= self.mvcc.commit_seq() {
                    continue;
                }
                self.republish(l, &r)?;
            }
            h.log.mark_published();
        }
        h.log.raise_written(self.mvcc.commit_seq());
        self.mvcc.dedupe_dirty(l);
        Ok(())
    }

    fn republish(
        &self,
        l: &crate::mvcc::Locked<'_>,
        r: &crate::wal::format::CommitRecord<'_>,
    ) -> Result<()> {
        publish_record(&self.mvcc, &*self.data, l, r)
    }

    /// The version store could not take more versions: expire the oldest
    /// snapshot holding old ones, so memory comes back when it ends.
    fn version_store_full(&self, e: std::io::Error) -> Error {
        self.mvcc
            .expire_oldest(Log::synced_seq(&self.mvcc.hdr().log));
        Error::VersionStoreFull {
            path: self.mvcc.path().to_path_buf(),
            versions: self.mvcc.version_pages() as u64,
            reason: e.to_string(),
        }
    }

    /// Fails if this handle may not write the region's files.
    fn check_writable(&self, op: &'static str) -> Result<()> {
        if self.opts.read_only {
            return Err(Error::ReadOnly {
                op,
                path: self.path.clone(),
            });
        }
        Ok(())
    }

    pub fn grow(&self, size: u64) -> Result<()> {
        self.check_owner()?;
        self.check_writable("growing the region")?;
        let size = round_up(size as usize) as u64;
        let h = self.mvcc.hdr();
        let _g = h.grow_lock.lock().map_err(|e| self.shared_lock_err(e))?;
        let old = self.size();
        if size <= old {
            return Ok(());
        }
        check_size(size, self.opts.max_size)?;
        crate::wal::log::check_poison(&h.log)?;
        self.data
            .set_len(HEADER_BYTES + size)
            .map_err(|e| Error::io("allocate disk space to grow", &self.path, e))?;
        self.mvcc
            .back_tables(size / PAGE as u64)
            .map_err(|e| Error::io("grow shared state", self.mvcc.path(), e))?;
        h.data_size.store(size, Ordering::Release);
        self.map_image(size)
    }

    /// Validates and commits; returns the commit's sequence number once it is
    /// as durable as the region's mode promises.
    pub fn commit(&self, req: CommitRequest<'_>) -> Result<u64> {
        self.check_owner()?;
        self.check_writable("commit")?;
        let h = self.mvcc.hdr();
        crate::wal::log::check_poison(&h.log)?;
        let seq = {
            let l = self.lock_commit()?;
            let changed = |p: &u32| self.mvcc.page_seq(*p as usize) > req.snapshot;
            if req.read_pages.iter().any(changed) || req.pages.iter().any(|(p, _)| changed(p)) {
                return Err(Error::Conflict);
            }
            if let Some(maybe_read) = req.untracked_reads {
                let mut hit = false;
                let now = self.mvcc.commit_seq();
                let complete = self
                    .mvcc
                    .changed_pages(req.snapshot, now, |p| hit |= maybe_read(p));
                if hit || !complete {
                    return Err(Error::Conflict);
                }
            }
            // Room for the versions first: once the record is written, the
            // commit must be published.
            self.mvcc
                .reserve(&l, req.pages.len())
                .map_err(|e| self.version_store_full(e))?;
            let seq = self.mvcc.commit_seq() + 1;
            crate::debug::hit(crate::debug::CrashPoint::CommitLocked);
            self.log.append(
                &h.log,
                l.guard(),
                seq,
                self.size(),
                req.ranges.iter().cloned(),
            )?;
            crate::debug::hit(crate::debug::CrashPoint::CommitLogged);
            let published = self
                .mvcc
                .publish(&l, seq, &req.pages, Log::synced_seq(&h.log));
            assert!(
                published.is_ok(),
                "publishing a logged commit failed after space was reserved: {published:?}"
            );
            h.log.mark_published();
            seq
        };
        if self.opts.durability == Durability::Durable {
            self.log.flush(&h.log, seq)?;
        }
        if Log::epoch_bytes(&h.log) > self.opts.checkpoint_bytes {
            // This commit is already as durable as promised: a failing
            // checkpoint poisons the log, and the next call reports it.
            // The transaction reads nothing more: its snapshot (older than
            // its commit) must not hold the checkpoint back, or a log that
            // only commits checkpoint is never reset.
            self.mvcc.end(req.slot);
            let _ = self.checkpoint_unless_busy();
        }
        Ok(seq)
    }

    pub fn checkpoint(&self) -> Result<()> {
        self.check_owner()?;
        self.check_writable("checkpoint")?;
        let g = self
            .mvcc
            .hdr()
            .checkpoint_lock
            .lock()
            .map_err(|e| self.shared_lock_err(e))?;
        self.checkpoint_locked(g)
    }

    /// A checkpoint unless one is under way: the automatic checkpoint of a
    /// commit must not wait for another process's (it may be stopped, and
    /// its checkpoint empties the log all the same).
    fn checkpoint_unless_busy(&self) -> Result<()> {
        let g = self
            .mvcc
            .hdr()
            .checkpoint_lock
            .try_lock()
            .map_err(|e| self.shared_lock_err(e))?;
        match g {
            Some(g) => self.checkpoint_locked(g),
            None => Ok(()),
        }
    }

    fn checkpoint_locked(&self, g: crate::os::lock::Guard<'_>) -> Result<()> {
        let h = self.mvcc.hdr();
        if g.owner_died {
            // The region header may be newer on disk than in shared memory.
            let mut page = vec![0u8; HEADER_BYTES as usize];
            self.data
                .read_at(&mut page, 0)
                .map_err(|e| Error::io("read header of", &self.path, e))?;
            let disk = RegionHeader::decode(&page)
                .map_err(|e| Error::corrupt(&self.path, 0, e.to_string()))?;
            h.region_generation
                .fetch_max(disk.generation, Ordering::AcqRel);
            h.checkpoint_seq
                .fetch_max(disk.checkpoint_seq, Ordering::AcqRel);
        }
        crate::wal::log::check_poison(&h.log)?;
        // A process that died in a transaction pins nothing from now on.
        self.mvcc.reap_dead_slots();
        self.log.sync_all(&h.log)?;
        // Every synced commit goes to the file, however old the live
        // snapshots: what they read there is preserved first. The bound is
        // chosen under the same hold of the commit lock as the pages: every
        // pruning so far (all under that lock) used a bound at or below it,
        // so each page's newest version at or below it is still linked. A
        // bound read earlier could fall below a later pruning's, whose
        // version it needs would be gone, and the header would claim it.
        let ckpt = h.checkpoint_seq.load(Ordering::Acquire);
        let pin = self.mvcc.pin_for_checkpoint();
        crate::debug::checkpoint_pause();
        let (mut t, mut pages, preserve, oldest) = {
            let l = self.lock_commit()?;
            let (t, oldest) = self.mvcc.horizon(Log::synced_seq(&h.log));
            let (pages, preserve) = if t > ckpt {
                pin.pages(&l, t, ckpt, oldest, true)
            } else {
                (Vec::new(), Vec::new())
            };
            (t, pages, preserve, oldest)
        };
        if t > ckpt {
            if let Some(o) = oldest
                && !preserve.is_empty()
                && !(crate::debug::copy_on_checkpoint() && self.copy_on_checkpoint(&preserve, o)?)
            {
                // No room for the copies (or a reader is stuck): write only
                // what every live snapshot is past; the log keeps the rest.
                // The oldest snapshot is read again under the lock: one
                // still live below `t` has had its versions kept by every
                // pruning, so the versions can be looked up again at it.
                // If none is (the snapshot ended), the pages found at `t`
                // are written as they are: pruning since may have unlinked
                // some (the pin keeps their memory), and looking again at
                // `t` would skip those pages under a header claiming them.
                crate::debug::checkpoint_pause();
                let l = self.lock_commit()?;
                let (_, now) = self.mvcc.horizon(t);
                if let Some(o) = now.filter(|&o| o < t) {
                    t = o;
                    pages = if t > ckpt {
                        pin.pages(&l, t, ckpt, None, false).0
                    } else {
                        Vec::new()
                    };
                }
            }
            let r = (|| {
                if t <= ckpt {
                    return Ok(());
                }
                let mut crcs =
                    Vec::with_capacity(if self.sums.is_some() { pages.len() } else { 0 });
                for (page, v) in pages {
                    self.data
                        .write_at(&v.data[..], HEADER_BYTES + page as u64 * PAGE as u64)
                        .map_err(|e| Error::io("checkpoint", &self.path, e))?;
                    if self.sums.is_some() {
                        crcs.push((u64::from(page), crate::sums::page_crc(&v.data[..])));
                    }
                }
                if let Some(s) = &self.sums {
                    s.record(&mut crcs)?;
                }
                crate::debug::hit(crate::debug::CrashPoint::CheckpointWriting);
                let next = RegionHeader {
                    region_id: h.region_id.load(Ordering::Acquire),
                    generation: h.region_generation.load(Ordering::Acquire) + 1,
                    checkpoint_seq: t,
                    data_size: self.size(),
                    address: self.address as u64,
                };
                write_region_header(&*self.data, self.sums.as_ref(), &next)?;
                h.region_generation
                    .store(next.generation, Ordering::Release);
                h.checkpoint_seq.store(t, Ordering::Release);
                Ok(())
            })();
            if let Err(e) = r {
                crate::wal::log::poison(&h.log, &e);
                return Err(e);
            }
        }
        drop(pin);
        let l = self.lock_commit()?;
        let ckpt = h.checkpoint_seq.load(Ordering::Acquire);
        self.log
            .maybe_reset(&h.log, l.guard(), self.mvcc.commit_seq(), ckpt)?;
        self.mvcc.trim(&l, ckpt);
        drop(l);
        drop(g);
        Ok(())
    }
}

impl RegionInner {
    /// Copy-on-checkpoint: keeps the region-file content of `pages` as their
    /// oldest version in shared memory, labelled with the oldest live
    /// snapshot `oldest` (every snapshot that reads these pages from the file
    /// is at or above it), then waits until no reader can still be copying
    /// them from the file. Caller holds the checkpoint lock, so the file does
    /// not change meanwhile. False if the store has no room or a reader does
    /// not move on; the copies made are harmless then (they equal the file).
    fn copy_on_checkpoint(&self, pages: &[u32], oldest: u64) -> Result<bool> {
        // In batches, so the buffer stays small and the lock is held briefly.
        const BATCH: usize = 256;
        let mut images = vec![0u8; pages.len().min(BATCH) * PAGE];
        for batch in pages.chunks(BATCH) {
            for (k, &p) in batch.iter().enumerate() {
                self.data
                    .read_at(
                        &mut images[k * PAGE..(k + 1) * PAGE],
                        HEADER_BYTES + u64::from(p) * PAGE as u64,
                    )
                    .map_err(|e| Error::io("read for checkpoint", &self.path, e))?;
            }
            let l = self.lock_commit()?;
            if self.mvcc.reserve(&l, batch.len()).is_err() {
                return Ok(false);
            }
            for (k, &p) in batch.iter().enumerate() {
                let image = &images[k * PAGE..(k + 1) * PAGE];
                if self.mvcc.preserve(&l, p, oldest, image).is_err() {
                    return Ok(false);
                }
            }
        }
        let settled = self.mvcc.wait_for_readers(Duration::from_secs(2));
        crate::debug::hit(crate::debug::CrashPoint::CheckpointPreserved);
        Ok(settled)
    }
}

fn start_flusher(inner: &Arc<RegionInner>) {
    let weak: Weak<RegionInner> = Arc::downgrade(inner);
    let interval = inner.opts.async_sync_interval;
    let round = Arc::clone(&inner.round);
    let h = std::thread::Builder::new()
        .name("txmap-sync".into())
        .spawn(move || {
            loop {
                std::thread::park_timeout(interval);
                // Held while `r` lives: a handle dropped meanwhile waits, so
                // the region is never closed on this thread.
                let _round = lock(&round);
                let Some(r) = weak.upgrade() else { return };
                crate::debug::flusher_pause();
                let h = r.mvcc.hdr();
                let w = Log::written_seq(&h.log);
                if Log::synced_seq(&h.log) < w && r.log.flush(&h.log, w).is_err() {
                    return; // the log is poisoned; commits report it
                }
                let Ok(l) = r.lock_commit() else { return };
                r.mvcc.prune_synced(&l, Log::synced_seq(&h.log));
            }
        });
    if let Ok(h) = h {
        *lock(&inner.flusher) = Some(h.thread().clone());
    }
}

impl Drop for RegionInner {
    fn drop(&mut self) {
        if let Some(t) = lock(&self.flusher).take() {
            t.unpark();
        }
        if self.check_owner().is_err() {
            return; // a forked child: the parent's state is not ours to touch
        }
        // Only the last process out checkpoints (below): the others leave
        // the log to it, so closing in a busy region costs no checkpoint.
        let Some(l) = &self.locks else {
            let _ = self.checkpoint(); // a region opened over test storage
            return;
        };
        use rustix::fs::FlockOperation as F;
        if rustix::fs::flock(&l.transition, F::LockExclusive).is_err() {
            return;
        }
        let _ = rustix::fs::flock(&l.users, F::Unlock);
        if rustix::fs::flock(&l.users, F::NonBlockingLockExclusive).is_ok() {
            // The last one out: a clean close leaves an empty log (if the
            // checkpoint fails, the log still has everything and the next
            // opener recovers), and the shared state goes.
            let _ = self.checkpoint();
            let _ = std::fs::remove_file(self.mvcc.path());
            let _ = rustix::fs::flock(&l.users, F::Unlock);
        }
        let _ = rustix::fs::flock(&l.transition, F::Unlock);
    }
}
