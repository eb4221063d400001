//! Regions: a data file plus its log. Opening runs recovery; commits go
//! through the engine (`engine.rs`); this is the handle: open, create,
//! recovery on open, the async flusher. Checkpoints copy committed versions
//! into the data file and empty the log.
//!
//! Files: `<path>` holds a header page and then the region's bytes;
//! `<path>-log` holds the write-ahead log. See docs/FORMAT.md.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use crate::error::{Error, Result};
use crate::io::{FileStorage, Storage};
use crate::mvcc::Mvcc;
use crate::os::mem::{PAGE, Reservation};
use crate::wal::format::{HEADER_BYTES, LogHeader, RegionHeader};
use crate::wal::log::Log;

use crate::engine::{OpenLocks, RegionInner, RegionRef, check_size, flock};
use crate::headers::{read_headers, read_headers_raw};
pub use crate::options::{Durability, Options, SnapshotLimit};
use crate::os::lock::lock;
use crate::recovery::{Files, publish_record, read_log, recover, write_region_header};

/// Counters for `txmap info` and benchmarks.
#[derive(Clone, Debug, Default)]
pub struct Stats {
    pub size: u64,
    pub commit_seq: u64,
    pub checkpoint_seq: u64,
    pub log_bytes: u64,
    /// Page versions held in shared memory (linked, or waiting for readers).
    pub version_pages: usize,
    /// Pages of shared memory backing the version store: it grows to the
    /// most versions held at once (a large transaction's helper backs its
    /// commit's ahead, `view/prefill.rs`) and is reused, not given back,
    /// until the last process closes the region.
    pub version_pages_backed: u64,
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

/// How long an opener waits for the shared state of a region that other
/// processes hold open to be ready. Within the open lock it is ready unless
/// its first opener was killed while opening: the kernel then releases the
/// open lock before the users lock (files close one at a time, the last
/// opened first), and the next opener must wait for the second one.
pub(crate) const JOIN_PATIENCE: std::time::Duration = std::time::Duration::from_secs(3);

/// The suffix (then the creator's pid) of a region file being formatted
/// under its temporary name.
pub(crate) const CREATING: &str = ".creating-";

/// Cleans up after a creator of the region at `path` that died before the
/// region was in place: removes its log `lp` if nobody holds it locked (a
/// live creator does until the region is renamed into place), the region
/// is still missing, and the log holds no more than a new region's header
/// (so no commit is lost with it); and the temporary data files of dead
/// creators. Returns true if the create may be tried again, false if a
/// live process is creating or has the region, and an error naming the
/// log if it holds more than a header.
pub(crate) fn remove_abandoned_create(path: &Path, lp: &Path) -> Result<bool> {
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

pub use crate::wal::log_path;

/// Creates the log `lp` (`O_EXCL`) and locks it exclusively; `None` if it
/// exists.
pub(crate) fn create_locked_log(lp: &Path) -> Result<Option<FileStorage>> {
    loop {
        match FileStorage::create_new(lp) {
            Ok(l) => {
                rustix::fs::flock(l.fd(), rustix::fs::FlockOperation::LockExclusive)
                    .map_err(|e| Error::io("lock", lp, e.into()))?;
                // A cleaner may have removed it before we locked it.
                if crate::os::shm::same_file(l.fd(), lp) {
                    return Ok(Some(l));
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => return Ok(None),
            Err(e) => return Err(Error::io("create", lp, e)),
        }
    }
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
            if let Some(l) = create_locked_log(&lp)? {
                break l;
            }
            if !remove_abandoned_create(path, &lp)? {
                return Err(Error::Exists {
                    path: path.to_path_buf(),
                    what: " (or is being created by another process)",
                });
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

    /// Opens the region at `path`, creating it (zero-filled, `size` bytes)
    /// if there is none. Of several processes doing this at once, one
    /// creates it; the others wait for its data file, which appears last
    /// and whole, up to two seconds, then open it. A dangling symbolic
    /// link at `path` is an error at once (`Io`, not found): no creator
    /// makes one, so there is nothing to wait for.
    pub fn open_or_create(path: &Path, size: u64, opts: Options) -> Result<Region> {
        if !path.try_exists().map_err(|e| Error::io("stat", path, e))? {
            match Self::create(path, size, opts.clone()) {
                Err(Error::Exists { .. }) => {}
                r => return r,
            }
        }
        let step = std::time::Duration::from_millis(5);
        let mut waited = std::time::Duration::ZERO;
        loop {
            match Self::open(path, opts.clone()) {
                Err(Error::Io { source, .. })
                    if source.kind() == std::io::ErrorKind::NotFound
                        && waited < std::time::Duration::from_secs(2)
                        && !path.is_symlink() =>
                {
                    std::thread::sleep(step);
                    waited += step;
                }
                r => return r,
            }
        }
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
        data.write_at(&region_header_page(&header), 0)
            .map_err(|x| e("write header", x))?;
        data.sync().map_err(|x| e("sync", x))?;
        write_new_log_header(log, region_id)
    }

    /// Opens an existing region. Any number of processes (and handles in
    /// one process) may have it open at once; the first to open it recovers
    /// it from its log if a process died with it open.
    ///
    /// A region whose files this process may not write (a 0444 file, a
    /// read-only mount) opens read-only, as with [`Options::read_only`].
    pub fn open(path: &Path, opts: Options) -> Result<Region> {
        if crate::io::plain::is_plain(path) {
            return Self::open_plain_existing(path, opts);
        }
        let mut opts = opts;
        let lp = log_path(path);
        let open = open_rw;
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
            None,
        )
    }

    /// Opens a region on given storages (tests use simulated devices). The
    /// handle is alone with the region: its shared state is private to it.
    pub fn open_with(
        data: Box<dyn Storage>,
        log: Box<dyn Storage>,
        opts: Options,
    ) -> Result<Region> {
        Self::open_locked(data, log, opts, None, None)
    }

    /// Opens the region on `data` and `log` (`plain`: the same storage as
    /// `data`, when it is a plain file's).
    pub(crate) fn open_locked(
        data: Box<dyn Storage>,
        log: Box<dyn Storage>,
        opts: Options,
        locks: Option<OpenLocks>,
        plain: Option<Arc<crate::io::plain::PlainStorage>>,
    ) -> Result<Region> {
        if !crate::os::mem::check_page_size() {
            return Err(Error::Invalid(format!(
                "txmap needs {PAGE}-byte pages (Linux x86-64)"
            )));
        }
        use rustix::fs::FlockOperation as F;
        let path = data.path().to_path_buf();
        // Only a region opened by its path has a page journal beside it.
        let journal_path = locks.as_ref().map(|_| crate::journal::journal_path(&path));
        let patience = std::time::Instant::now() + JOIN_PATIENCE;
        let (mvcc, recovered) = loop {
            if let Some(l) = &locks {
                flock(&l.transition, F::LockExclusive, log.path())?;
            }
            let last_try = std::time::Instant::now() >= patience;
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
                let journal = journal_path.as_deref();
                if let Some(p) = plain.as_deref().filter(|_| alone) {
                    crate::plaincheck::check_unchanged(p, &*log, &opts)?;
                }
                let (mvcc, recovered, address, loss) = if alone && opts.read_only {
                    Self::first_open_read_only(&*data, &*log, journal, &opts, locks.is_some())?
                } else if alone {
                    let files = Files {
                        data: &*data,
                        log: &*log,
                        sums: sums.as_ref(),
                        journal,
                    };
                    Self::first_open(files, &opts, locks.is_some())?
                } else {
                    let Some((mvcc, address)) = Self::join(&*data, &*log, &opts, last_try)? else {
                        return Ok(None);
                    };
                    (mvcc, 0, address, Vec::new())
                };
                if let Some(p) = plain.as_deref().filter(|_| alone && !opts.read_only) {
                    crate::plaincheck::mark_open(p, mvcc.hdr().file.data_size())?;
                }
                if alone {
                    mvcc.mark_ready();
                }
                let recovered = (recovered, alone, address, loss, sums);
                if let Some(l) = &locks {
                    // Converting is not atomic, but nobody can look meanwhile:
                    // we hold the transition lock.
                    flock(&l.users, F::LockShared, &path)?;
                }
                Ok::<_, Error>(Some((mvcc, recovered)))
            })();
            match r {
                Ok(Some(x)) => {
                    if let Some(l) = &locks {
                        let _ = rustix::fs::flock(&l.transition, F::Unlock);
                    }
                    break x;
                }
                Ok(None) => {
                    // Not ready: its first opener is dying (its open lock went
                    // first) and will soon release the users lock too.
                    if let Some(l) = &locks {
                        let _ = rustix::fs::flock(&l.transition, F::Unlock);
                    }
                    std::thread::sleep(std::time::Duration::from_millis(2));
                }
                Err(e) => {
                    if let Some(l) = &locks {
                        let _ = rustix::fs::flock(&l.users, F::Unlock);
                        let _ = rustix::fs::flock(&l.transition, F::Unlock);
                    }
                    return Err(e);
                }
            }
        };
        let mut opts = opts;
        opts.max_size = mvcc.max_pages() as u64 * PAGE as u64;
        let size = mvcc.hdr().file.data_size();
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
            fence: crate::fencectl::Fence::default(),
            address: recovered.2,
            sums: recovered.4,
            journal: journal_path,
            round_gate: std::sync::RwLock::new(()),
            plain,
            round_write: Default::default(),
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
        files: Files<'_>,
        opts: &Options,
        shared: bool,
    ) -> Result<(Mvcc, u64, usize, Vec<String>)> {
        let Files {
            data, log, sums, ..
        } = files;
        let limit = opts.snapshot_limit.encode()?;
        // Recovery maps the log and the image maps the region file: holes
        // (a sparse copy, or a file extended by an older txmap) are
        // allocated first, so a full file system fails here, not with
        // SIGBUS on a read.
        for s in [data, log] {
            s.allocate()
                .map_err(|e| Error::io("allocate disk space for holes in", s.path(), e))?;
        }
        settle_inbound(data.path())?;
        let mut rec = recover(files, opts.on_recovery_progress, opts.accept_loss)?;
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
            crate::wal::archive::archive_epoch(
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
        journal: Option<&Path>,
        opts: &Options,
        shared: bool,
    ) -> Result<(Mvcc, u64, usize, Vec<String>)> {
        let limit = opts.snapshot_limit.encode()?;
        let (header, page) = read_headers_raw(data, log)?;
        let refuse = |op| Error::ReadOnly {
            op,
            path: data.path().to_path_buf(),
        };
        if let Some(j) = journal
            && crate::journal::pending(j, &header)?.is_some()
        {
            return Err(refuse(
                "finishing a checkpoint that was interrupted (open it writable once)",
            ));
        }
        if opts.address.is_some_and(|a| a as u64 != header.address) {
            return Err(refuse("recording a new fixed address (Options::address)"));
        }
        let ll = log.len().map_err(|e| Error::io("stat", log.path(), e))?;
        let image = crate::os::mem::FileImage::map(log.fd(), ll as usize)
            .map_err(|e| Error::os("map log", e))?;
        let (mut reading, loss) = read_log(image.bytes(), &page, &header, log.path(), false)?;
        crate::grouplog::resolve(&mut reading.scan.records, &header, data.path())?;
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
        crate::ops::check_registered(records.iter().copied(), log.path())?;
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
    /// `None` while the shared state is not ready (see `JOIN_PATIENCE`).
    fn join(
        data: &dyn Storage,
        log: &dyn Storage,
        opts: &Options,
        last_try: bool,
    ) -> Result<Option<(Mvcc, usize)>> {
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
        use crate::mvcc::AttachError as A;
        let mvcc = match Mvcc::attach(&spath) {
            Ok(m) => m,
            Err(A::NotReady(_)) if !last_try => return Ok(None),
            Err(A::NotReady(why)) => {
                return Err(Error::Incompatible {
                    path: data.path().to_path_buf(),
                    what: format!(
                        "other processes hold it open but its shared state {} is {why} \
                         after {JOIN_PATIENCE:?} (removed while in use, e.g. by \
                         systemd-logind's RemoveIPC?): close every process using it",
                        spath.display()
                    ),
                });
            }
            Err(A::Io(e)) => return Err(Error::io("open shared state", &spath, e)),
            Err(A::Layout(what)) => {
                return Err(Error::Incompatible {
                    path: data.path().to_path_buf(),
                    what: format!(
                        "open in other processes with incompatible shared state {}: {what}",
                        spath.display()
                    ),
                });
            }
        };
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
        Ok(Some((mvcc, header.address as usize)))
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

    /// Bytes of private memory the closed views' memory kept for reuse
    /// holds (at most `POOLED_VIEWS` views, each bounded by
    /// [`Options::view_private_pages`] and 64 MiB).
    pub fn pooled_view_bytes(&self) -> u64 {
        self.inner
            .view_pool()
            .iter()
            .map(|m| m.private_bytes())
            .sum()
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
            checkpoint_seq: h.file.checkpoint_seq(),
            log_bytes: Log::epoch_bytes(&h.log),
            version_pages: i.mvcc.version_pages(),
            version_pages_backed: i.mvcc.arena_backed(),
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

/// Opens `p` read-write if allowed; read-only when `ro` is set, or (then
/// setting it) when the file may not be written here.
pub(crate) fn open_rw(p: &Path, ro: &mut bool) -> Result<FileStorage> {
    if !*ro {
        match FileStorage::open(p, false) {
            Err(e) if not_writable(&e) => *ro = true,
            r => return r.map_err(|e| Error::io("open", p, e)),
        }
    }
    FileStorage::open_read_only(p).map_err(|e| Error::io("open", p, e))
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

fn start_flusher(inner: &Arc<RegionInner>) {
    let weak: Weak<RegionInner> = Arc::downgrade(inner);
    let interval = inner.opts.async_sync_interval;
    let round = Arc::clone(&inner.round);
    let h = std::thread::Builder::new()
        .name("txmap-sync".into())
        .spawn(move || {
            crate::debug::region_thread(|| {
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
            })
        });
    if let Ok(h) = h {
        *lock(&inner.flusher) = Some(h);
    }
}

/// A new region's header page: slots of generations 1 and 2 of `header`.
pub(crate) fn region_header_page(header: &RegionHeader) -> Vec<u8> {
    let mut page = vec![0u8; HEADER_BYTES as usize];
    for g in [1, 2] {
        let (off, slot) = RegionHeader {
            generation: g,
            ..*header
        }
        .encode();
        page[off as usize..off as usize + 64].copy_from_slice(&slot);
    }
    page
}

/// Writes and syncs a new region's log header (epoch 1, no records).
pub(crate) fn write_new_log_header(log: &dyn Storage, region_id: u64) -> Result<()> {
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

thread_local! {
    /// Set while a first opener has other regions recover (no recursion).
    static SETTLING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Before a first opener of `path` recovers: every group record in the
/// live log of another region of the directory that names this region at
/// a commit this region lacks is in doubt, and this region must not go on
/// (reuse that commit's number) until that region has recovered (and
/// dropped it). So that region is opened and closed here, which recovers
/// it when nobody has it open; if the group is still there after that, the
/// open fails naming it.
fn settle_inbound(path: &Path) -> Result<()> {
    if SETTLING.with(std::cell::Cell::get) {
        return Ok(());
    }
    let Some(own) = crate::grouplog::region_id_of(path) else {
        return Ok(()); // recovery reports what is wrong with our own files
    };
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut doubtful = Vec::new();
    for other in crate::grouplog::regions_in(dir, path) {
        if crate::grouplog::in_doubt(&other, path, own)?.is_some() {
            doubtful.push(other);
        }
    }
    for other in doubtful {
        SETTLING.with(|s| s.set(true));
        let opened = Region::open(&other, Options::default());
        SETTLING.with(|s| s.set(false));
        drop(opened);
        if let Some((seq, gid)) = crate::grouplog::in_doubt(&other, path, own)? {
            return Err(crate::grouplog::group_err(
                path,
                format!(
                    "{} holds commit {seq}, part of commit {gid:016x} across several regions, \
                     which this region lacks; it is open elsewhere (or could not recover): \
                     close it everywhere and open it first",
                    other.display()
                ),
            ));
        }
    }
    Ok(())
}
