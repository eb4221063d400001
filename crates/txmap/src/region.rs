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
use crate::mvcc::{Mvcc, Version};
use crate::os::mem::{Access, PAGE, Reservation, round_up};
use crate::wal::format::{HEADER_BYTES, LogHeader, Range, RegionHeader};
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
}

impl Default for Options {
    fn default() -> Self {
        Options {
            durability: Durability::Durable,
            max_size: 64 << 30,
            checkpoint_bytes: 64 << 20,
            async_sync_interval: Duration::from_millis(50),
            on_recovery_progress: None,
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
    pub version_pages: usize,
    pub live_snapshots: usize,
    pub oldest_snapshot: Option<u64>,
    pub recovered_commits: u64,
    /// Log syncs since open (checkpoints included); group commit keeps this
    /// below the number of durable commits under concurrency.
    pub log_syncs: u64,
}

/// An open region. Cheap to clone; views keep it alive.
#[derive(Clone)]
pub struct Region {
    pub(crate) inner: Arc<RegionInner>,
}

pub(crate) struct RegionInner {
    pub path: PathBuf,
    pub data: Box<dyn Storage>,
    /// A read-only shared mapping of the data file (header page included).
    pub image: Reservation,
    pub log: Log,
    pub mvcc: Mvcc,
    pub opts: Options,
    size: AtomicU64,
    commit_lock: Mutex<()>,
    grow_lock: Mutex<()>,
    header: Mutex<RegionHeader>,
    recovered: u64,
    flusher: Mutex<Option<std::thread::Thread>>,
    /// The process that opened the region. A child forked from it shares the
    /// file lock but not the in-memory state, so it must not commit or
    /// checkpoint through this handle.
    pub owner: rustix::process::Pid,
    /// `signal::forks()` when opened: differs in a forked child.
    pub fork_generation: usize,
    _lock: Option<std::fs::File>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The log file that belongs to a region file.
pub fn log_path(path: &Path) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push("-log");
    PathBuf::from(s)
}

/// Checks a region size: whole pages, at least one, at most `max`.
pub(crate) fn check_size(size: u64, max: u64) -> Result<()> {
    if size == 0 || !size.is_multiple_of(PAGE as u64) {
        return Err(Error::Invalid(format!(
            "region size {size} must be a positive multiple of the page size {PAGE}"
        )));
    }
    if size > max {
        return Err(Error::Invalid(format!(
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
        check_size(size, opts.max_size)?;
        // O_EXCL: of two processes creating one region, exactly one formats it.
        let data = match FileStorage::create_new(path) {
            Ok(d) => d,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                return Err(Error::Invalid(format!("{} already exists", path.display())));
            }
            Err(e) => return Err(Error::io("create", path, e)),
        };
        let lp = log_path(path);
        let made = (|| {
            let log = FileStorage::create_new(&lp).map_err(|e| Error::io("create", &lp, e))?;
            Self::format(&data, &log, size)?;
            crate::io::sync_dir(path.parent().unwrap_or(Path::new("")))
                .map_err(|e| Error::io("sync directory of", path, e))
        })();
        if let Err(e) = made {
            // Leave nothing half-made behind (but never another region's log).
            let _ = std::fs::remove_file(path);
            if !matches!(&e, Error::Io { source, .. } if source.kind() == std::io::ErrorKind::AlreadyExists)
            {
                let _ = std::fs::remove_file(&lp);
            }
            return Err(e);
        }
        drop(data);
        Self::open(path, opts)
    }

    /// Writes an empty region's header and log header to fresh storages.
    pub fn format(data: &dyn Storage, log: &dyn Storage, size: u64) -> Result<()> {
        let region_id = crate::io::sim::SplitMix(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
                ^ u64::from(std::process::id()) << 40,
        )
        .next();
        let header = RegionHeader {
            region_id,
            generation: 1,
            checkpoint_seq: 0,
            data_size: size,
        };
        let e = |op, err| Error::io(op, data.path(), err);
        data.set_len(HEADER_BYTES + size)
            .map_err(|x| e("size", x))?;
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

    /// Opens an existing region, recovering it from its log if a process died
    /// with it open.
    pub fn open(path: &Path, opts: Options) -> Result<Region> {
        let data = FileStorage::open(path, false).map_err(|e| Error::io("open", path, e))?;
        let lockf = data
            .file()
            .try_clone()
            .map_err(|e| Error::io("open", path, e))?;
        match rustix::fs::flock(&lockf, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => {}
            Err(rustix::io::Errno::WOULDBLOCK) => return Err(Error::Busy { path: path.into() }),
            Err(e) => return Err(Error::io("lock", path, e.into())),
        }
        let lp = log_path(path);
        if !lp.exists() {
            return Err(Error::io(
                "open log",
                &lp,
                std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    "the region's log file is missing",
                ),
            ));
        }
        let log = FileStorage::open(&lp, false).map_err(|e| Error::io("open", &lp, e))?;
        Self::open_with(Box::new(data), Box::new(log), opts, Some(lockf))
    }

    /// Opens a region on given storages (tests use simulated devices).
    pub fn open_with(
        data: Box<dyn Storage>,
        log: Box<dyn Storage>,
        opts: Options,
        lock_file: Option<std::fs::File>,
    ) -> Result<Region> {
        if !crate::os::mem::check_page_size() {
            return Err(Error::Invalid(format!(
                "txmap needs {PAGE}-byte pages (Linux x86-64)"
            )));
        }
        let rec = recover(&*data, &*log, opts.on_recovery_progress)?;
        // A region larger than the requested reservation still opens.
        let mut opts = opts;
        opts.max_size = opts.max_size.max(rec.header.data_size);
        let size = rec.header.data_size;
        let image = Reservation::new(HEADER_BYTES as usize + opts.max_size as usize, None)
            .map_err(|e| Error::os("reserve address space for the region image", e))?;
        image
            .map_shared(
                0,
                round_up((HEADER_BYTES + size) as usize),
                data.fd(),
                0,
                Access::Read,
            )
            .map_err(|e| Error::os("map region file", e))?;
        let log = Log::start(
            log,
            rec.header.region_id,
            Some(rec.log_header),
            rec.header.checkpoint_seq,
        )?;
        let mvcc = Mvcc::new(
            (opts.max_size / PAGE as u64) as usize,
            rec.header.checkpoint_seq,
        )
        .map_err(|e| Error::os("reserve version tables", e))?;
        let inner = Arc::new(RegionInner {
            path: data.path().to_path_buf(),
            data,
            image,
            log,
            mvcc,
            size: AtomicU64::new(size),
            commit_lock: Mutex::new(()),
            grow_lock: Mutex::new(()),
            header: Mutex::new(rec.header),
            recovered: rec.replayed,
            flusher: Mutex::new(None),
            owner: rustix::process::getpid(),
            fork_generation: crate::os::signal::forks().map_err(|e| Error::Os {
                op: "install the fault and fork handlers",
                source: e,
            })?,
            opts,
            _lock: lock_file,
        });
        if inner.opts.durability == Durability::Async {
            start_flusher(&inner);
        }
        Ok(Region { inner })
    }

    /// Bytes in the region.
    pub fn size(&self) -> u64 {
        self.inner.size()
    }

    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// Grows the region to at least `size` bytes (rounded up to pages). New bytes
    /// are zero. Views see the new size at their next transaction.
    pub fn grow(&self, size: u64) -> Result<()> {
        self.inner.grow(size)
    }

    /// Opens a view for the calling thread (see [`crate::View`]).
    pub fn view(&self) -> Result<crate::View> {
        crate::View::open(self.inner.clone(), None)
    }

    /// Opens a view at a fixed address, so raw pointers stay valid across
    /// processes that do the same.
    pub fn view_at(&self, addr: usize) -> Result<crate::View> {
        crate::View::open(self.inner.clone(), Some(addr))
    }

    /// Copies committed versions into the data file and empties the log when
    /// no live snapshot needs older data.
    pub fn checkpoint(&self) -> Result<()> {
        self.inner.checkpoint()
    }

    /// Closes this handle, reporting a failure of the final checkpoint (which
    /// dropping the last handle does silently; the log keeps the data either way).
    /// Other clones and open views keep the region open.
    pub fn close(self) -> Result<()> {
        let r = self.inner.checkpoint();
        drop(self);
        r
    }

    /// Makes every commit so far durable (useful in `Async` mode).
    pub fn sync(&self) -> Result<()> {
        let seq = self.inner.mvcc.commit_seq();
        self.inner.log.flush(seq, true)?;
        self.inner.mvcc.prune_synced(self.inner.log.synced_seq());
        Ok(())
    }

    pub fn stats(&self) -> Stats {
        let i = &self.inner;
        let (n, oldest) = i.mvcc.snapshots();
        Stats {
            size: i.size(),
            commit_seq: i.mvcc.commit_seq(),
            checkpoint_seq: lock(&i.header).checkpoint_seq,
            log_bytes: i.log.epoch_bytes(),
            version_pages: i.mvcc.version_pages(),
            live_snapshots: n,
            oldest_snapshot: oldest,
            recovered_commits: i.recovered,
            log_syncs: i.log.syncs(),
        }
    }
}

/// What recovery found and did.
pub(crate) struct Recovered {
    pub header: RegionHeader,
    pub log_header: LogHeader,
    pub replayed: u64,
}

/// Reads the region and log headers and reports both, without writing.
pub(crate) fn read_headers(
    data: &dyn Storage,
    log: &dyn Storage,
) -> Result<(RegionHeader, LogHeader)> {
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
    let lh = LogHeader::decode(&page).map_err(|e| Error::corrupt(log.path(), 0, e.to_string()))?;
    if lh.region_id != header.region_id {
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
    Ok((header, lh))
}

/// Redo recovery: replays every logged commit after the checkpoint into the
/// data file, syncs it and records the new checkpoint. Idempotent: a crash
/// during recovery leaves a log that replays to the same result.
pub(crate) fn recover(
    data: &dyn Storage,
    log: &dyn Storage,
    progress: Option<fn(u64, u64)>,
) -> Result<Recovered> {
    let (mut header, lh) = read_headers(data, log)?;
    let ll = log.len().map_err(|e| Error::io("stat", log.path(), e))?;
    // Mapped, not read: a log held long by old snapshots may be large.
    let image = crate::os::mem::FileImage::map(log.fd(), ll as usize)
        .map_err(|e| Error::os("map log", e))?;
    let bytes = image.bytes();
    if lh.start_seq > header.checkpoint_seq.saturating_add(1) {
        return Err(Error::corrupt(
            log.path(),
            0,
            format!(
                "log starts at commit {} but the region's checkpoint is commit {}: commits are missing",
                lh.start_seq, header.checkpoint_seq
            ),
        ));
    }
    let s = scan::scan(bytes, &lh).map_err(|c| {
        Error::corrupt(
            log.path(),
            c.offset,
            format!("record {}: {}", c.seq, c.what),
        )
    })?;
    let mut replayed = 0;
    let mut size = header.data_size;
    let base = header.checkpoint_seq;
    let total = s.records.iter().filter(|r| r.seq > base).count() as u64;
    let report = |done: u64| {
        if let Some(f) = progress
            && (done.is_multiple_of(1024) || done == total)
        {
            f(done, total);
        }
    };
    for r in s.records.iter().filter(|r| r.seq > base) {
        if r.data_size > size {
            size = r.data_size;
            data.set_len(HEADER_BYTES + size)
                .map_err(|e| Error::io("grow", data.path(), e))?;
        }
        for range in &r.ranges {
            data.write_at(range.bytes, HEADER_BYTES + range.offset)
                .map_err(|e| Error::io("replay into", data.path(), e))?;
        }
        header.checkpoint_seq = r.seq;
        replayed += 1;
        report(replayed);
    }
    if replayed > 0 {
        header.generation += 1;
        header.data_size = size;
        write_region_header(data, &header)?;
    }
    Ok(Recovered {
        header,
        log_header: lh,
        replayed,
    })
}

/// Syncs the data, then writes and syncs a header slot: the header never
/// claims data that is not on disk.
fn write_region_header(data: &dyn Storage, h: &RegionHeader) -> Result<()> {
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
    /// Pages written, each with its new content.
    pub versions: Vec<(u32, Box<Version>)>,
    pub ranges: Vec<Range<'a>>,
}

impl RegionInner {
    /// Fails in a process forked after the region was opened.
    pub fn check_owner(&self) -> Result<()> {
        if crate::os::signal::forks_now() == self.fork_generation {
            return Ok(());
        }
        let me = rustix::process::getpid();
        Err(Error::Invalid(format!(
            "{} was opened by process {}; process {} (a fork) must open it itself",
            self.path.display(),
            self.owner.as_raw_nonzero(),
            me.as_raw_nonzero()
        )))
    }

    pub fn size(&self) -> u64 {
        self.size.load(Ordering::Acquire)
    }

    pub fn grow(&self, size: u64) -> Result<()> {
        self.check_owner()?;
        let size = round_up(size as usize) as u64;
        let _g = lock(&self.grow_lock);
        let old = self.size();
        if size <= old {
            return Ok(());
        }
        check_size(size, self.opts.max_size)?;
        self.log.check_poison()?;
        self.data
            .set_len(HEADER_BYTES + size)
            .map_err(|e| Error::io("grow", &self.path, e))?;
        let from = round_up((HEADER_BYTES + old) as usize);
        let to = round_up((HEADER_BYTES + size) as usize);
        self.image
            .map_shared(from, to - from, self.data.fd(), from as u64, Access::Read)
            .map_err(|e| Error::os("map grown region", e))?;
        self.size.store(size, Ordering::Release);
        Ok(())
    }

    /// Validates and commits; returns the commit's sequence number once it is
    /// as durable as the region's mode promises.
    pub fn commit(&self, req: CommitRequest<'_>) -> Result<u64> {
        self.check_owner()?;
        self.log.check_poison()?;
        let seq = {
            let _g = lock(&self.commit_lock);
            let changed = |p: &u32| self.mvcc.page_seq(*p as usize) > req.snapshot;
            if req.read_pages.iter().any(changed) || req.versions.iter().any(|(p, _)| changed(p)) {
                return Err(Error::Conflict);
            }
            let seq = self.mvcc.commit_seq() + 1;
            self.log
                .append(seq, self.size(), req.ranges.iter().cloned());
            let mut versions = req.versions;
            for (_, v) in versions.iter_mut() {
                v.seq = seq;
            }
            // Versions older than what the file must next receive are dropped
            // as soon as no snapshot can see them.
            self.mvcc.publish(seq, versions, self.log.synced_seq());
            seq
        };
        self.log
            .flush(seq, self.opts.durability == Durability::Durable)?;
        if self.log.epoch_bytes() > self.opts.checkpoint_bytes {
            // This commit is already as durable as promised: a failing
            // checkpoint poisons the log, and the next call reports it.
            let _ = self.checkpoint();
        }
        Ok(seq)
    }

    pub fn checkpoint(&self) -> Result<()> {
        self.check_owner()?;
        let mut header = lock(&self.header);
        self.log.sync_and_maybe_reset(|synced| {
            let t = self.mvcc.horizon(synced);
            if t > header.checkpoint_seq {
                let pin = self.mvcc.pin_for_checkpoint();
                for (page, v) in pin.pages(t) {
                    self.data
                        .write_at(&v.data[..], HEADER_BYTES + page as u64 * PAGE as u64)
                        .map_err(|e| Error::io("checkpoint", &self.path, e))?;
                }
                let next = RegionHeader {
                    generation: header.generation + 1,
                    checkpoint_seq: t,
                    data_size: self.size(),
                    ..*header
                };
                write_region_header(&*self.data, &next)?;
                *header = next;
            }
            Ok(header.checkpoint_seq)
        })?;
        self.mvcc.trim(header.checkpoint_seq);
        Ok(())
    }
}

fn start_flusher(inner: &Arc<RegionInner>) {
    let weak: Weak<RegionInner> = Arc::downgrade(inner);
    let interval = inner.opts.async_sync_interval;
    let h = std::thread::Builder::new()
        .name("txmap-sync".into())
        .spawn(move || {
            loop {
                std::thread::park_timeout(interval);
                let Some(r) = weak.upgrade() else { return };
                let w = r.log.written_seq();
                if r.log.synced_seq() < w && r.log.flush(w, true).is_err() {
                    return; // the log is poisoned; commits report it
                }
                r.mvcc.prune_synced(r.log.synced_seq());
            }
        });
    if let Ok(h) = h {
        *lock(&inner.flusher) = Some(h.thread().clone());
    }
}

impl Drop for RegionInner {
    fn drop(&mut self) {
        // A clean close leaves an empty log; if this fails the log still has
        // everything and the next open recovers.
        let _ = self.checkpoint();
        if let Some(t) = lock(&self.flusher).take() {
            t.unpark();
        }
    }
}
