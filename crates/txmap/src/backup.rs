//! Hot backup: a consistent copy of a region at one commit, taken while
//! other threads and processes keep committing.
//!
//! The copy reads the region at a registered snapshot, exactly as a
//! read-only transaction would: each page's version at the snapshot from
//! the shared version chains, or else from the region file, read on the
//! MVCC read side (a checkpoint that overwrites a page this snapshot reads
//! from the file keeps its old content as a version first and waits for
//! readers, docs/ARCHITECTURE.md invariant 2). So nobody waits for the
//! backup: commits and checkpoints go on, and the snapshot holds at most
//! one version per page changed meanwhile.
//!
//! The copy is written under temporary names (`DST.backup-<pid>`,
//! `DST-log.backup-<pid>`, `DST-sums.backup-<pid>`), synced, and renamed
//! into place with the region file last, then the directory is synced: a
//! region file at `DST` is always a whole backup. Its header records the
//! snapshot as its checkpoint, and its log is an empty epoch starting after
//! it, so it opens without recovery at that commit.

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;

use crate::error::{Error, Result};
use crate::io::{FileStorage, Storage};
use crate::os::mem::PAGE;
use crate::sums::{PageSums, page_crc, sums_path};
use crate::wal::format::{HEADER_BYTES, LogHeader, RegionHeader};
use crate::wal::log_path;

/// How [`crate::Region::backup_with`] copies.
#[derive(Default)]
pub struct BackupOptions<'a> {
    /// Leave pages that hold only zeros as holes in the copy (freed heap
    /// blocks are zeroed, so this skips free space of a collections
    /// region). The first open of the copy allocates the holes.
    pub compact: bool,
    /// Called as (pages copied, pages in all) after every batch of pages.
    pub progress: Option<&'a dyn Fn(u64, u64)>,
}

/// What a backup copied.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BackupReport {
    /// The commit the copy holds: every commit up to this one, none after.
    pub commit: u64,
    /// Bytes of region data in the copy.
    pub size: u64,
    /// Pages written: those not all zero (pages of zeros are allocated
    /// without writing, or with `compact` left as holes).
    pub pages_written: u64,
    /// The copy's region file.
    pub path: PathBuf,
}

/// Pages copied per turn on the read side (4 MiB).
const BATCH: u64 = 1024;
const SUFFIX: &str = ".backup-";
static ZERO_PAGE: [u8; PAGE] = [0; PAGE];
static ZERO_CRC: std::sync::OnceLock<u32> = std::sync::OnceLock::new();

/// A registered snapshot, ended and its slot released on drop.
struct Snapshot<'a> {
    mvcc: &'a crate::mvcc::Mvcc,
    slot: usize,
}

impl Drop for Snapshot<'_> {
    fn drop(&mut self) {
        self.mvcc.end(self.slot);
        self.mvcc.release_slot(self.slot);
    }
}

/// One file of the copy, under its temporary name until `place`.
pub(crate) struct Part {
    pub tmp: PathBuf,
    pub dst: PathBuf,
    pub file: FileStorage,
}

impl Part {
    pub(crate) fn create(dst: PathBuf) -> Result<Part> {
        let mut t = dst.as_os_str().to_owned();
        t.push(format!("{SUFFIX}{}", std::process::id()));
        let tmp = PathBuf::from(t);
        let _ = std::fs::remove_file(&tmp);
        let file = FileStorage::create_new(&tmp).map_err(|e| Error::io("create", &tmp, e))?;
        Ok(Part { tmp, dst, file })
    }

    pub(crate) fn sync(&self) -> Result<()> {
        self.file
            .sync()
            .map_err(|e| Error::io("sync", &self.tmp, e))
    }

    /// Renames into place, never replacing an existing file.
    pub(crate) fn place(&self) -> Result<()> {
        let cwd = rustix::fs::CWD;
        match rustix::fs::renameat_with(
            cwd,
            &self.tmp,
            cwd,
            &self.dst,
            rustix::fs::RenameFlags::NOREPLACE,
        ) {
            Ok(()) => Ok(()),
            Err(rustix::io::Errno::EXIST) => Err(Error::Exists {
                path: self.dst.clone(),
                what: " (it appeared while the copy was written)",
            }),
            Err(rustix::io::Errno::INVAL | rustix::io::Errno::NOSYS) => {
                std::fs::hard_link(&self.tmp, &self.dst)
                    .map_err(|e| Error::io("link into place", &self.dst, e))?;
                let _ = std::fs::remove_file(&self.tmp);
                Ok(())
            }
            Err(e) => Err(Error::io("rename into place", &self.dst, e.into())),
        }
    }
}

/// Refuses a destination where a region, its log or its checksum table
/// exists (a copy never replaces anything), after removing temporaries
/// that dead processes left there.
pub(crate) fn check_destination(dst: &Path) -> Result<()> {
    let exists = |p: &Path| -> Result<bool> { p.try_exists().map_err(|e| Error::io("stat", p, e)) };
    if exists(dst)? {
        return Err(Error::Exists {
            path: dst.to_path_buf(),
            what: "",
        });
    }
    remove_dead_temporaries(dst);
    for p in [log_path(dst), sums_path(dst)] {
        if exists(&p)? {
            return Err(Error::Exists {
                path: p,
                what: " (without its region): remove it first",
            });
        }
    }
    Ok(())
}

/// Removes temporary files of backups to `dst` whose process is gone.
fn remove_dead_temporaries(dst: &Path) {
    let dir = match dst.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let Some(name) = dst.file_name() else { return };
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let n = e.file_name();
        let b = n.as_encoded_bytes();
        let Some(rest) = b.strip_prefix(name.as_encoded_bytes()) else {
            continue;
        };
        let rest = [b"" as &[u8], b"-log", b"-sums"]
            .iter()
            .find_map(|p| rest.strip_prefix(*p)?.strip_prefix(SUFFIX.as_bytes()));
        let pid = rest
            .and_then(|p| std::str::from_utf8(p).ok())
            .and_then(|p| p.parse::<u32>().ok());
        if pid.is_some_and(|p| !crate::os::shm::process_alive(p)) {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

impl crate::Region {
    /// Copies the region to `dst` (and `dst-log`, `dst-sums`) as of one
    /// commit, while others keep committing; see [`BackupOptions`] and the
    /// module docs of `backup.rs`. Fails if `dst` exists. The copy opens
    /// without recovery at [`BackupReport::commit`].
    pub fn backup(&self, dst: &Path) -> Result<BackupReport> {
        self.backup_with(dst, &BackupOptions::default())
    }

    /// [`Region::backup`](crate::Region::backup) with options.
    pub fn backup_with(&self, dst: &Path, opts: &BackupOptions<'_>) -> Result<BackupReport> {
        let r = &**self.inner;
        r.check_owner()?;
        if r.plain.is_some() {
            return Err(Error::Unsupported {
                op: "backup",
                path: r.path.clone(),
                why: "it is a plain file (Region::open_plain), whose header lives in its side \
                      file; copy the file itself while no process has it open",
            });
        }
        check_destination(dst)?;
        let slot = r.mvcc.claim_slot().ok_or_else(|| {
            Error::Invalid(format!(
                "too many views on {} (at most {}) to take a backup",
                r.path.display(),
                crate::mvcc::MAX_SLOTS
            ))
        })?;
        let snap = Snapshot {
            mvcc: &r.mvcc,
            slot,
        };
        let seq = r.mvcc.begin(slot);
        let now = rustix::time::clock_gettime(rustix::time::ClockId::RealtimeCoarse);
        r.mvcc.stamp(slot, now.tv_sec as u64);
        // At least the size at the snapshot: growth is published after the
        // file is extended, and pages grown later read as they were then.
        let size = r.size();
        let pages = size / PAGE as u64;
        let parts = [
            Part::create(dst.to_path_buf())?,
            Part::create(log_path(dst))?,
            Part::create(sums_path(dst))?,
        ];
        let done = (|| {
            let written = copy_pages(r, &snap, seq, &parts[0], &parts[2], pages, opts)?;
            drop(snap);
            let h = r.mvcc.hdr();
            let region_id = h.region_id.load(Ordering::Acquire);
            write_headers(&parts, region_id, seq, size, r.address as u64)?;
            sync_all(&parts)?;
            crate::debug::hit(crate::debug::CrashPoint::BackupPlacing);
            // The region file last: whoever sees it sees a whole copy.
            parts[2].place()?;
            parts[1].place()?;
            parts[0].place()?;
            let dir = dst.parent().unwrap_or(Path::new(""));
            crate::io::sync_dir(dir).map_err(|e| Error::io("sync directory of", dst, e))?;
            Ok(written)
        })();
        match done {
            Ok(written) => Ok(BackupReport {
                commit: seq,
                size,
                pages_written: written,
                path: dst.to_path_buf(),
            }),
            Err(e) => {
                for p in &parts {
                    let _ = std::fs::remove_file(&p.tmp);
                }
                Err(e)
            }
        }
    }
}

/// Where a page of the copy comes from.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Source {
    /// All zeros (a hole of the source, or a page of zeros): not written.
    Zero,
    /// The source's image, which holds the snapshot's version.
    Image,
    /// A version in shared memory (changed since the last checkpoint).
    Version,
}

/// Copies pages `0..pages` at snapshot `seq` into the data part (after its
/// header page) and their checksums into the table part. Returns the pages
/// written.
///
/// Pages are written straight from the region's read-only image of its
/// file (one copy, by the kernel, into the copy's page cache), and holes of
/// the source (the heap's room above its top is allocated but never
/// written) are skipped without reading them.
fn copy_pages(
    r: &crate::engine::RegionInner,
    snap: &Snapshot<'_>,
    seq: u64,
    data: &Part,
    sums: &Part,
    pages: u64,
    opts: &BackupOptions<'_>,
) -> Result<u64> {
    r.map_image(pages * PAGE as u64)?;
    let mut versions = vec![0u8; BATCH as usize * PAGE];
    let mut out = Writer::new(data)?;
    let mut from = Vec::with_capacity(BATCH as usize);
    // The source's next run of data, as byte offsets in its file.
    let mut run: Option<(u64, u64)> = Some((0, 0));
    let mut written = 0;
    let mut first = 0;
    while first < pages {
        let n = BATCH.min(pages - first);
        // A checkpoint that overwrites one of these pages in the file waits
        // until we leave, after it linked the old content, which `version`
        // then finds (readside.rs).
        let side = r.read_side(snap.slot);
        from.clear();
        for k in 0..n {
            let page = first + k;
            let off = HEADER_BYTES + page * PAGE as u64;
            while let Some((_, end)) = run
                && end <= off
            {
                run = crate::io::next_data(r.data.fd(), off)
                    .map_err(|e| Error::io("find data in", &r.path, e))?;
            }
            match side.version(page as usize, seq) {
                Some(v) => {
                    let at = k as usize * PAGE;
                    versions[at..at + PAGE].copy_from_slice(&v.data[..]);
                    let zero = versions[at..at + PAGE] == ZERO_PAGE[..];
                    from.push(if zero { Source::Zero } else { Source::Version });
                }
                None if run.is_some_and(|(start, _)| start < off + PAGE as u64) => {
                    let bytes = side
                        .image(page as usize, 1)
                        .ok_or_else(|| unmapped(r, page))?;
                    from.push(if bytes == ZERO_PAGE {
                        Source::Zero
                    } else {
                        Source::Image
                    });
                }
                None => from.push(Source::Zero),
            }
        }
        let mut entries = Vec::with_capacity(from.len() * crate::sums::ENTRY_BYTES as usize);
        for (k, f) in from.iter().enumerate() {
            let crc = match f {
                Source::Zero => *ZERO_CRC.get_or_init(|| page_crc(&ZERO_PAGE)),
                Source::Version => page_crc(&versions[k * PAGE..(k + 1) * PAGE]),
                Source::Image => page_crc(
                    side.image(first as usize + k, 1)
                        .ok_or_else(|| unmapped(r, first + k as u64))?,
                ),
            };
            entries.extend_from_slice(&crc.to_le_bytes());
            entries.extend_from_slice(&crate::sums::ENTRY_TAG.to_le_bytes());
        }
        written += write_runs(r, &side, &mut out, data, first, &from, &versions, opts)?;
        drop(side);
        sums.file
            .write_at(&entries, HEADER_BYTES + first * crate::sums::ENTRY_BYTES)
            .map_err(|e| Error::io("write page checksums to", &sums.tmp, e))?;
        out.started(HEADER_BYTES + first * PAGE as u64, n * PAGE as u64);
        first += n;
        crate::debug::hit(crate::debug::CrashPoint::BackupCopying);
        if let Some(f) = opts.progress {
            f(first, pages);
        }
    }
    out.finish()?;
    // Not preallocated: written in order, each write extends the file,
    // which ext4 does cheaply (writes into a hole or preallocated extent
    // cost a conversion per extent). With `compact`, zero pages at the end
    // stay a hole, which the copy's first open allocates.
    data.file
        .file()
        .set_len(HEADER_BYTES + pages * PAGE as u64)
        .map_err(|e| Error::io("size", &data.tmp, e))?;
    Ok(written)
}

/// Writes the copy's pages: with direct I/O where the file system has it
/// and the bytes are page-aligned (runs of the source's image: the pages
/// go from the source's page cache to the device without passing through
/// the copy's page cache, which on ext4 costs more than the copy itself),
/// else through the page cache (versions copied from shared memory), with
/// writeback started after each batch.
///
/// A thread syncs the copy after every `SYNC_EVERY` bytes while the copy
/// goes on, so the device (or the host under a virtual disk) persists the
/// copy while it is written and the final sync finds little left.
struct Writer<'a> {
    part: &'a Part,
    direct: Option<std::fs::File>,
    unsynced: u64,
    syncer: Option<(
        std::sync::mpsc::SyncSender<()>,
        std::thread::JoinHandle<std::io::Result<()>>,
    )>,
}

/// Bytes written between two background syncs of a copy (16 MiB).
const SYNC_EVERY: u64 = 16 << 20;

impl<'a> Writer<'a> {
    fn new(part: &'a Part) -> Result<Writer<'a>> {
        use rustix::fs::{Mode, OFlags};
        let direct = rustix::fs::open(
            &part.tmp,
            OFlags::WRONLY | OFlags::DIRECT | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .ok()
        .map(std::fs::File::from);
        // Without a thread (none could be made), the final sync does it all.
        let syncer = part.file.file().try_clone().ok().and_then(|f| {
            let (tx, rx) = std::sync::mpsc::sync_channel::<()>(1);
            let h = std::thread::Builder::new()
                .name("txmap-backup-sync".into())
                .spawn(move || {
                    while rx.recv().is_ok() {
                        f.sync_data()?;
                    }
                    Ok(())
                })
                .ok()?;
            Some((tx, h))
        });
        Ok(Writer {
            part,
            direct,
            unsynced: 0,
            syncer,
        })
    }

    fn write(&mut self, bytes: &[u8], at: u64) -> Result<()> {
        use std::os::unix::fs::FileExt;
        self.unsynced += bytes.len() as u64;
        let aligned = (bytes.as_ptr() as usize | bytes.len() | at as usize).is_multiple_of(PAGE);
        if let Some(f) = self.direct.as_ref().filter(|_| aligned) {
            match f.write_all_at(bytes, at) {
                Ok(()) => return Ok(()),
                // Direct I/O refused here after all: the page cache then.
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => self.direct = None,
                Err(e) => return Err(Error::io("write backup", &self.part.tmp, e)),
            }
        }
        self.part
            .file
            .write_at(bytes, at)
            .map_err(|e| Error::io("write backup", &self.part.tmp, e))
    }

    /// After a batch: starts writeback of what went through the page
    /// cache, and a background sync after every `SYNC_EVERY` bytes.
    fn started(&mut self, at: u64, len: u64) {
        let _ = crate::os::writeback::start(self.part.file.fd(), at, len);
        if self.unsynced >= SYNC_EVERY
            && let Some((tx, _)) = &self.syncer
        {
            // Full: a sync is under way, which covers this too.
            let _ = tx.try_send(());
            self.unsynced = 0;
        }
    }

    /// Waits for the background syncs; the error of a failed one (after
    /// which a later sync may report success for lost writes).
    fn finish(mut self) -> Result<()> {
        let Some((tx, h)) = self.syncer.take() else {
            return Ok(());
        };
        drop(tx);
        match h.join() {
            Ok(r) => r.map_err(|e| Error::io("sync", &self.part.tmp, e)),
            Err(_) => Err(Error::Invalid(format!(
                "the sync thread of {} failed",
                self.part.tmp.display()
            ))),
        }
    }
}

/// Writes the batch of `from.len()` pages from page `first`: each run of
/// one source in one write (or allocation). Returns the pages written.
#[allow(clippy::too_many_arguments)]
fn write_runs(
    r: &crate::engine::RegionInner,
    side: &crate::readside::ReadSide<'_>,
    out: &mut Writer<'_>,
    data: &Part,
    first: u64,
    from: &[Source],
    versions: &[u8],
    opts: &BackupOptions<'_>,
) -> Result<u64> {
    let n = from.len() as u64;
    let mut written = 0;
    // Runs of one source, each one write (or allocation).
    let mut k = 0;
    while k < n as usize {
        let start = k;
        while k < n as usize && from[k] == from[start] {
            k += 1;
        }
        let at = HEADER_BYTES + (first + start as u64) * PAGE as u64;
        let len = (k - start) * PAGE;
        let bytes = match from[start] {
            Source::Zero => {
                if !opts.compact {
                    crate::io::allocate_range(data.file.file(), at, len as u64)
                        .map_err(|e| Error::io("allocate disk space for", &data.tmp, e))?;
                }
                continue;
            }
            Source::Version => &versions[start * PAGE..k * PAGE],
            Source::Image => side
                .image((first as usize) + start, k - start)
                .ok_or_else(|| unmapped(r, first + start as u64))?,
        };
        out.write(bytes, at)?;
        written += (k - start) as u64;
    }
    Ok(written)
}

/// Syncs the parts at once: each `fdatasync` ends with a flush of the
/// device's cache, and the block layer merges flushes that wait together.
pub(crate) fn sync_all(parts: &[Part]) -> Result<()> {
    std::thread::scope(|sc| {
        let syncs: Vec<_> = parts.iter().map(|p| sc.spawn(move || p.sync())).collect();
        syncs.into_iter().try_for_each(|h| {
            h.join()
                .unwrap_or_else(|_| Err(Error::Invalid("a sync thread failed".into())))
        })
    })
}

/// A page beyond this process's image of the region (cannot happen: the
/// image was mapped up to the snapshot's size first).
fn unmapped(r: &crate::engine::RegionInner, page: u64) -> Error {
    Error::Invalid(format!(
        "backup of {}: page {page} is beyond the mapped region",
        r.path.display()
    ))
}

/// The copy's headers: region header (checkpoint = the snapshot), an empty
/// log epoch after it, and the table in step with the region header.
pub(crate) fn write_headers(
    parts: &[Part; 3],
    region_id: u64,
    seq: u64,
    size: u64,
    address: u64,
) -> Result<()> {
    let mut page = vec![0u8; HEADER_BYTES as usize];
    for g in [1, 2] {
        let (off, slot) = RegionHeader {
            region_id,
            generation: g,
            checkpoint_seq: seq,
            data_size: size,
            address,
        }
        .encode();
        page[off as usize..off as usize + slot.len()].copy_from_slice(&slot);
    }
    parts[0]
        .file
        .write_at(&page, 0)
        .map_err(|e| Error::io("write header of", &parts[0].tmp, e))?;
    let mut page = vec![0u8; HEADER_BYTES as usize];
    let (off, slot) = LogHeader {
        region_id,
        generation: 1,
        salt: crate::rand::fresh() | 1,
        start_seq: seq + 1,
    }
    .encode();
    page[off as usize..off as usize + slot.len()].copy_from_slice(&slot);
    parts[1]
        .file
        .write_at(&page, 0)
        .map_err(|e| Error::io("write header of", &parts[1].tmp, e))?;
    let sums = PageSums::from_file(
        FileStorage::open(&parts[2].tmp, false).map_err(|e| Error::io("open", &parts[2].tmp, e))?,
    );
    sums.write_header(region_id, 2)
}
