//! Read-only inspection of a region and its log, for `txmap info` and
//! `txmap check`.
//!
//! Nothing here writes, locks or maps anything: both files are opened
//! read-only with [`std::fs::File`] and read with `pread`, so a region can be
//! inspected while another handle or process has it open. [`inspect`] fails
//! where [`crate::Region::open`] would fail (it cannot describe a region it
//! could not open); [`check`] goes on and lists every problem it finds.
//!
//! A live region may change while it is read. The log header is read before
//! the region header (a checkpoint writes the region header before it resets
//! the log, so the pair read that way never looks like missing commits), and
//! the log is read again if its header changed while its records were read.

use std::fs::{File, Metadata};
use std::os::fd::AsFd;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::os::mem::PAGE;
use crate::wal::format::{
    self, HEADER_BYTES, HeaderError, LogHeader, RECORD_HEADER, RECORD_MAGIC, RegionHeader,
    SLOT_OFFSETS,
};
use crate::wal::log_path;
use crate::wal::scan;

/// What a region and its log hold, as read from disk.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Report {
    /// The region file inspected.
    pub path: PathBuf,
    /// Its log file (`<path>-log`).
    pub log_path: PathBuf,
    pub region_id: u64,
    /// Format version and page size recorded in the region header slot in use.
    pub format_version: u32,
    pub page_size: u32,
    /// Bytes of region data according to the region header (the checkpoint).
    pub data_size: u64,
    /// Length of the region file (header page included).
    pub file_len: u64,
    /// Every commit up to this one is in the data file.
    pub checkpoint_seq: u64,
    pub region_header_generation: u64,
    /// The region's fixed address (0: none recorded; the next open assigns one).
    pub address: u64,
    /// Length of the log file (header page and preallocated space included).
    pub log_len: u64,
    pub log_header_generation: u64,
    /// Sequence number of the first record of the log's current epoch.
    pub log_start_seq: u64,
    /// Valid records in the current epoch (up to any corruption).
    pub log_records: u64,
    /// Records of the current epoch that hold registered operations (kind 2).
    pub log_op_records: u64,
    /// Registered operations in those records: (id, how many), by id.
    pub log_operations: Vec<(u32, u64)>,
    /// Records of the current epoch that belong to a commit across several
    /// regions (a group trailer, docs/FORMAT.md).
    pub log_group_records: u64,
    /// The last commit: the newest logged record, or the checkpoint if later.
    pub last_seq: u64,
    /// Bytes of valid records in the current epoch.
    pub log_bytes_used: u64,
    /// Why the log scan stopped before the end of the file, when it stopped at
    /// a torn or damaged record of the current epoch rather than at zeros or
    /// stale bytes of an older epoch. Recovery ignores such a record.
    pub torn_tail: Option<String>,
    /// Data pages of the data file that are not all zero. Commits still only in
    /// the log are not counted.
    pub pages_in_use: u64,
    /// Data pages with a checksum in the page checksum table (`PATH-sums`),
    /// all verified by [`check`] (damaged ones are its problems); `None`
    /// when the region keeps no table, or one that is not in step with the
    /// region header (reset by the next open).
    pub checksummed_pages: Option<u64>,
    /// Logged commits newer than the checkpoint (replayed by the next open).
    pub pending_commits: u64,
    /// The log has records with sequence numbers above the checkpoint: a
    /// process died with the region open, or one has it open now.
    pub needs_recovery: bool,
    /// Processes that have the region open (their locks in `/proc/locks`).
    /// 0 for a holder outside this process's PID namespace.
    pub open_by: Vec<u32>,
    /// A plain file (`Region::open_plain`): what its side file records.
    pub plain: Option<PlainReport>,
    /// What the processes that have it open share, if any do.
    pub live: Option<LiveState>,
}

/// The live state of a region that processes have open, read from their
/// shared memory without taking part.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LiveState {
    pub shared_path: PathBuf,
    /// The newest commit (it may not be in the log file's synced part yet).
    pub commit_seq: u64,
    /// Live transactions' snapshots (owner pid, start time).
    pub snapshots: Vec<crate::mvcc::LiveSnapshot>,
    /// Page versions held in shared memory.
    pub version_pages: usize,
    /// Log bytes in the current epoch.
    pub log_bytes: u64,
    /// The region's snapshot limit (set by the first process to open it).
    pub snapshot_limit: crate::SnapshotLimit,
    /// Snapshots the limit expired, and pages checkpoints preserved for old
    /// snapshots, since the shared state was created.
    pub expired_snapshots: u64,
    pub preserved_pages: u64,
    /// Why commits fail in every process that has it open, if they do.
    pub poisoned: Option<String>,
    /// The process that holds the group-commit (sync) lock, if one does:
    /// one that holds it long is stopped or stuck, and the others sync for
    /// themselves meanwhile.
    pub sync_leader: Option<crate::wal::log::SyncLeader>,
}

impl Report {
    /// Pages of region data (per the region header).
    pub fn pages(&self) -> u64 {
        self.data_size / PAGE as u64
    }
}

/// The result of [`check`]: the report plus everything found wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckReport {
    pub report: Report,
    /// Conditions that stop the region from opening or lose data.
    pub problems: Vec<String>,
    /// Conditions that do not (a damaged header slot with a good twin, a torn
    /// last record, commits waiting for recovery, ...).
    pub warnings: Vec<String>,
}

impl CheckReport {
    /// True when no problem was found (warnings allowed).
    pub fn is_sound(&self) -> bool {
        self.problems.is_empty()
    }
}

/// Reads a region and its log and describes them. Fails with
/// [`Error::Corrupt`] on anything [`crate::Region::open`] would reject.
pub fn inspect(path: &Path) -> Result<Report> {
    let mut e = examine(path)?;
    match e.problems.is_empty() {
        true => Ok(e.report),
        false => Err(e.problems.swap_remove(0)),
    }
}

/// What `txmap info` shows of a plain file (docs/FORMAT.md, "Plain files").
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlainReport {
    /// The side file holding the header page and the plain record.
    pub meta_path: PathBuf,
    /// The file's length now.
    pub len: u64,
    /// The plain record of the side file.
    pub record: crate::io::plain::PlainRecord,
}

/// Verifies a region and its log: headers, pairing, sizes, every log record,
/// sequence continuity. Fails only when the files cannot be read or their
/// headers cannot be decoded; everything else is listed in the report.
pub fn check(path: &Path) -> Result<CheckReport> {
    let e = examine(path)?;
    Ok(CheckReport {
        report: e.report,
        problems: e.problems.iter().map(ToString::to_string).collect(),
        warnings: e.warnings,
    })
}

struct Examined {
    report: Report,
    /// [`Error::Corrupt`] values, most basic first.
    problems: Vec<Error>,
    warnings: Vec<String>,
}

/// Opens `path` read-only; refuses directories and other non-regular files.
fn open_ro(path: &Path, missing: Option<&str>) -> Result<(File, Metadata)> {
    use std::os::unix::fs::OpenOptionsExt;
    // O_NONBLOCK: opening a FIFO must not wait for a writer.
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path);
    let f = f.map_err(|e| match (e.kind(), missing) {
        (std::io::ErrorKind::NotFound, Some(why)) => {
            Error::io("open", path, std::io::Error::new(e.kind(), why))
        }
        _ => Error::io("open", path, e),
    })?;
    let m = f.metadata().map_err(|e| Error::io("stat", path, e))?;
    if m.is_dir() {
        return Err(Error::io(
            "open",
            path,
            std::io::Error::from_raw_os_error(libc::EISDIR),
        ));
    }
    if !m.is_file() {
        return Err(Error::io(
            "open",
            path,
            std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a regular file"),
        ));
    }
    Ok((f, m))
}

/// The region file as read here: a region file, or a plain file read
/// through its side file's header page (bytes 0–4095) as `io::plain` does.
struct DataFile {
    /// The side file of a plain file.
    head: Option<File>,
    data: File,
}

impl DataFile {
    fn shift(&self) -> u64 {
        if self.head.is_some() { HEADER_BYTES } else { 0 }
    }

    /// Reads up to `len` bytes at region-file offset `off`, fewer at the end.
    fn read_upto(&self, path: &Path, off: u64, len: usize) -> Result<Vec<u8>> {
        let Some(head) = &self.head else {
            return read_upto(&self.data, path, off, len);
        };
        let n = HEADER_BYTES.saturating_sub(off).min(len as u64) as usize;
        let mut b = read_upto(head, path, off, n)?;
        if b.len() == n && n < len {
            let at = (off + n as u64) - HEADER_BYTES;
            b.extend(read_upto(&self.data, path, at, len - n)?);
        }
        Ok(b)
    }

    /// The region file's length: a plain file's last page counts whole.
    fn len(&self, path: &Path) -> Result<u64> {
        let n = file_len(&self.data, path)?;
        Ok(match self.head {
            Some(_) => HEADER_BYTES + crate::io::plain::pages_for(n) * PAGE as u64,
            None => n,
        })
    }

    /// `io::next_data` in region-file offsets.
    fn next_data(&self, off: u64) -> std::io::Result<Option<(u64, u64)>> {
        let s = self.shift();
        let r = crate::io::next_data(&self.data, off.saturating_sub(s))?;
        Ok(r.map(|(a, b)| (a + s, b + s)))
    }
}

/// Reads up to `len` bytes at `off`, fewer at end of file.
fn read_upto(f: &File, path: &Path, off: u64, len: usize) -> Result<Vec<u8>> {
    let mut buf = vec![0u8; len];
    let mut got = 0;
    while got < len {
        match f.read_at(&mut buf[got..], off + got as u64) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(Error::io("read", path, e)),
        }
    }
    buf.truncate(got);
    Ok(buf)
}

fn file_len(f: &File, path: &Path) -> Result<u64> {
    Ok(f.metadata().map_err(|e| Error::io("stat", path, e))?.len())
}

/// A header page as read; an error if the file was shorter.
fn whole_page(page: Vec<u8>, path: &Path, what: &str) -> Result<Vec<u8>> {
    if (page.len() as u64) < HEADER_BYTES {
        let what = match page.len() {
            0 => format!("{what} is empty"),
            n => format!("{what} is {n} bytes, shorter than its {HEADER_BYTES}-byte header page"),
        };
        return Err(Error::corrupt(path, page.len() as u64, what));
    }
    Ok(page)
}

/// One decoded header and what was seen in its two slots.
struct Slots<H> {
    header: H,
    /// Offset of the slot the header came from.
    slot: usize,
    version: u32,
    page_size: u32,
    /// Damaged slots (the other slot was used), as warnings.
    damaged: Vec<String>,
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

/// Decodes a header page the way the library does, and then each slot alone
/// to find the one in use and any damaged one.
fn read_slots<H: Copy + PartialEq>(
    page: &[u8],
    decode: fn(&[u8]) -> Result<H, HeaderError>,
    path: &Path,
) -> Result<Slots<H>, Error> {
    let header = decode(page).map_err(|e| Error::corrupt(path, 0, e.to_string()))?;
    let mut slot = SLOT_OFFSETS[0];
    let mut damaged = Vec::new();
    for off in SLOT_OFFSETS {
        let mut alone = vec![0u8; page.len()];
        alone[off..off + 64].copy_from_slice(&page[off..off + 64]);
        let bytes = &page[off..off + 64];
        match decode(&alone) {
            Ok(h) if h == header => slot = off,
            Ok(_) => {} // an older generation: normal
            Err(HeaderError::NotThisKind) if bytes.iter().all(|&b| b == 0) => {} // never written
            Err(e) => {
                let why = match e {
                    HeaderError::NotThisKind => "bad magic".to_string(),
                    HeaderError::BadChecksum => "checksum mismatch (a torn write?)".to_string(),
                    HeaderError::Version(v) => format!("format version {v}"),
                    HeaderError::PageSize(p) => format!("page size {p}"),
                };
                damaged.push(format!(
                    "{}: header slot at offset {off} is damaged ({why}); the other slot is used",
                    path.display()
                ));
            }
        }
    }
    Ok(Slots {
        header,
        slot,
        version: u32_at(page, slot + 8),
        page_size: u32_at(page, slot + 12),
        damaged,
    })
}

/// The pid holding a `flock` on the file, from `/proc/locks` (no lock taken).
fn lock_holders(m: &Metadata) -> Vec<u32> {
    let dev = m.dev();
    let major = ((dev >> 8) & 0xfff) | ((dev >> 32) & !0xfff);
    let minor = (dev & 0xff) | ((dev >> 12) & !0xff);
    let want = format!("{major:02x}:{minor:02x}:{}", m.ino());
    let Ok(locks) = std::fs::read_to_string("/proc/locks") else {
        return Vec::new();
    };
    let mut pids: Vec<u32> = locks
        .lines()
        .filter_map(|line| {
            // "1: FLOCK  ADVISORY  WRITE 1234 fd:01:5678 0 EOF"; waiters have "->" after the number.
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() >= 6 && f[1] == "FLOCK" && f[5] == want {
                f[4].parse().ok()
            } else {
                None
            }
        })
        .collect();
    pids.sort_unstable();
    pids.dedup();
    pids
}

/// Reads the shared state of a region that is open, without creating it.
fn live_state(path: &Path, region_id: u64) -> Option<LiveState> {
    let sp = crate::region::shared_path(path, region_id).ok()?;
    if !sp.exists() {
        return None;
    }
    let m = crate::mvcc::Mvcc::attach(&sp).ok()?;
    let h = m.hdr();
    if h.region_id.load(std::sync::atomic::Ordering::Acquire) != region_id {
        return None;
    }
    Some(LiveState {
        shared_path: sp,
        commit_seq: m.commit_seq(),
        snapshots: m.live_snapshots(),
        version_pages: m.version_pages(),
        log_bytes: crate::wal::log::Log::epoch_bytes(&h.log),
        snapshot_limit: {
            let (lag, versions) = m.limit();
            crate::SnapshotLimit::decode(lag, versions)
        },
        expired_snapshots: m.expiry_counts().0,
        preserved_pages: m.expiry_counts().1,
        poisoned: crate::wal::log::poison_message(&h.log),
        sync_leader: crate::wal::log::sync_leader(&h.log),
    })
}

/// Counts data pages that are not all zero, skipping holes of sparse files.
fn count_pages(f: &DataFile, path: &Path, data_size: u64, file_len: u64) -> Result<u64> {
    let page = PAGE as u64;
    let end = HEADER_BYTES + data_size.min(file_len.saturating_sub(HEADER_BYTES)) / page * page;
    let align = |o: u64| HEADER_BYTES + (o.max(HEADER_BYTES) - HEADER_BYTES) / page * page;
    let mut buf = vec![0u8; 1 << 20];
    let mut used = 0;
    let mut off = HEADER_BYTES;
    while off < end {
        // Where the next data is, and where the next hole after it starts
        // (an error finding them: read everything).
        let Some((d, h)) = f.next_data(off).unwrap_or(Some((off, end))) else {
            break;
        };
        let data = align(d).max(off);
        if data >= end {
            break;
        }
        let hole = align(h + page - 1).clamp(data + page, end);
        let mut at = data;
        while at < hole {
            let n = (hole - at).min(buf.len() as u64) as usize;
            let b = &mut buf[..n];
            let got = f.read_upto(path, at, n)?;
            b[..got.len()].copy_from_slice(&got);
            b[got.len()..].fill(0);
            used += b
                .chunks(PAGE)
                .filter(|p| p.iter().fold(0u8, |a, &x| a | x) != 0)
                .count() as u64;
            at += n as u64;
        }
        off = hole;
    }
    Ok(used)
}

/// Whether the bytes where a scan stopped are a torn or damaged record of
/// this epoch (rather than zeros or stale records of an older epoch).
fn torn_record(rest: &[u8], salt: u64) -> bool {
    let magic = RECORD_MAGIC.to_le_bytes();
    if rest.len() < RECORD_HEADER {
        let n = rest.len().min(4);
        return rest[..n] == magic[..n] && rest.iter().any(|&b| b != 0);
    }
    rest[..4] == magic && rest[16..24] == salt.to_le_bytes()
}

/// Valid records of this epoch numbered `seq` or later, at 8-aligned offsets
/// from `from`: written after a torn record, in a batch never fully synced.
fn later_records(log: &[u8], from: usize, salt: u64, seq: u64) -> u64 {
    let magic = RECORD_MAGIC.to_le_bytes();
    let mut n = 0;
    let mut off = from.div_ceil(8) * 8;
    while off + RECORD_HEADER <= log.len() {
        if log[off..off + 4] == magic
            && log[off + 16..off + 24] == salt.to_le_bytes()
            && format::decode_record(&log[off..], salt).is_ok_and(|r| r.seq >= seq)
        {
            n += 1;
        }
        off += 8;
    }
    n
}

/// What `check` reads where a scan of `log` stopped at `end` with `seq`
/// next: the torn-record test and the count of later records (for the fuzz
/// targets, which have no files).
#[cfg(feature = "testing")]
pub(crate) fn fuzz_tail(log: &[u8], end: usize, h: &LogHeader, seq: u64) {
    if torn_record(&log[end..], h.salt) {
        later_records(log, end + 8, h.salt, seq);
    }
}

/// Verifies the page checksum table, if the region has one in step with
/// its header: a page whose checksum fails is a problem naming its offset,
/// unless logged commits after the checkpoint rewrite it (an interrupted
/// checkpoint may have torn it; recovery repairs it). While processes have
/// the region open a checkpoint may be between a page and its entry, so a
/// failing page is read again a few times before it is reported.
fn check_sums(
    data: &DataFile,
    path: &Path,
    rh: &RegionHeader,
    pending: &std::collections::BTreeSet<u64>,
    live: bool,
    problems: &mut Vec<Error>,
    warnings: &mut Vec<String>,
) -> Result<Option<u64>> {
    let sp = crate::sums::sums_path(path);
    let f = match File::open(&sp) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            warnings.push(format!(
                "{}: no page checksum table ({} is missing): data pages are not verified",
                path.display(),
                sp.display()
            ));
            return Ok(None);
        }
        Err(e) => return Err(Error::io("open", &sp, e)),
    };
    let pages = rh.data_size / PAGE as u64;
    let mut attempt = 0;
    loop {
        let head = read_upto(&f, &sp, 0, HEADER_BYTES as usize)?;
        let h = match crate::sums::SumsHeader::decode(&head) {
            Ok(h) => h,
            Err(what) => {
                problems.push(Error::corrupt(&sp, 0, what));
                return Ok(None);
            }
        };
        let Some(h) = h.filter(|h| h.region_id == rh.region_id && h.generation >= rh.generation)
        else {
            warnings.push(format!(
                "{}: the page checksum table is not in step with the region header                  (written by a program that did not keep it): not verified; the next open resets it",
                sp.display()
            ));
            return Ok(None);
        };
        let _ = h;
        let bytes = read_upto(
            &f,
            &sp,
            HEADER_BYTES,
            (pages * crate::sums::ENTRY_BYTES) as usize,
        )?;
        let entries = crate::sums::decode_entries(&bytes, pages);
        let read = |b: &mut [u8], off: u64| {
            let got = data
                .read_upto(path, off, b.len())
                .map_err(std::io::Error::other)?;
            b[..got.len()].copy_from_slice(&got);
            b[got.len()..].fill(0);
            Ok(())
        };
        let bad = crate::sums::verify_with(read, path, &entries, |_| false)?;
        attempt += 1;
        if !bad.is_empty() && live && attempt < 5 {
            std::thread::sleep(std::time::Duration::from_millis(50));
            continue;
        }
        for b in bad {
            if pending.contains(&b.page) {
                warnings.push(format!(
                    "{}: {b}, but logged commits after the checkpoint rewrite it                      (an interrupted checkpoint): recovery repairs it",
                    path.display()
                ));
            } else {
                problems.push(Error::corrupt(
                    path,
                    b.file_offset,
                    format!("{b}: the data page is damaged"),
                ));
            }
        }
        return Ok(Some(entries.iter().filter(|e| e.is_some()).count() as u64));
    }
}

fn not_a_region(path: &Path) -> Error {
    Error::NotARegion {
        path: path.to_path_buf(),
        what: "it is a txmap log file; name its region file (without \"-log\")".into(),
    }
}

/// Most pages `check` replays registered operations over in memory.
const REPLAY_CHECK_PAGES: usize = 16384;

fn examine(path: &Path) -> Result<Examined> {
    let lp = log_path(path);
    let meta = crate::io::plain::meta_path(path);
    let plain = meta.exists();
    let (data, data_meta) = open_ro(path, None)?;
    // A plain file's region lock and header page are its side file's.
    let (head, data_meta) = match plain {
        true => {
            let (h, m) = open_ro(&meta, None)?;
            (Some(h), m)
        }
        false => (None, data_meta),
    };
    let data = DataFile { head, data };
    // Fail on a file that is no region before complaining about its log.
    let region_slots = |page: Vec<u8>| {
        let page = whole_page(page, path, "region file")?;
        read_slots(&page, RegionHeader::decode, path).map_err(|e| match LogHeader::decode(&page) {
            Ok(_) => not_a_region(path),
            Err(_) => e,
        })
    };
    region_slots(data.read_upto(path, 0, HEADER_BYTES as usize)?)?;
    let (log, _) = open_ro(&lp, Some("the region's log file is missing"))?;

    // Log header, region header, log bytes, then the log header again: if it
    // changed (a checkpoint reset the log meanwhile), read again.
    let mut attempt = 0;
    let (rpage, lpage, log_bytes) = loop {
        let lpage = read_upto(&log, &lp, 0, HEADER_BYTES as usize)?;
        let rpage = data.read_upto(path, 0, HEADER_BYTES as usize)?;
        let len = file_len(&log, &lp)?;
        let bytes = read_upto(&log, &lp, 0, len as usize)?;
        let again = read_upto(&log, &lp, 0, HEADER_BYTES as usize)?;
        attempt += 1;
        if again == lpage || attempt >= 5 {
            break (rpage, lpage, bytes);
        }
    };
    let rslots = region_slots(rpage)?;
    let lpage = whole_page(lpage, &lp, "log file")?;
    // Both log slots damaged: the records may still show the epoch.
    let lslots = match LogHeader::decode(&lpage) {
        Err(HeaderError::BadChecksum) => None,
        _ => Some(read_slots(&lpage, LogHeader::decode, &lp)?),
    };
    let rh = rslots.header;
    let reading = scan::read(
        &log_bytes,
        lslots.as_ref().map(|s| s.header),
        &format::damaged_slots(&lpage, format::LOG_MAGIC),
        rh.region_id,
        rh.checkpoint_seq,
    );
    let lh = reading.header;
    let lslot = lslots.as_ref().map_or(0, |s| s.slot);
    let file_len = data.len(path)?;
    let log_len = log_bytes.len() as u64;

    let mut problems = Vec::new();
    let mut warnings = Vec::new();
    warnings.extend(rslots.damaged);
    let jp = crate::journal::journal_path(path);
    let journal = crate::journal::pending(&jp, &rh)?;
    if let Some(j) = &journal {
        warnings.push(format!(
            "{}: the page journal holds {} page(s) as of commit {} that the region header \
             does not cover yet (a checkpoint that was interrupted, or a round written in \
             place whose header waits for the next checkpoint): the next checkpoint or \
             writable open writes them",
            jp.display(),
            j.pages(),
            j.head.as_of
        ));
    }
    if reading.damage.is_empty() {
        warnings.extend(lslots.into_iter().flat_map(|s| s.damaged));
    }

    let page = PAGE as u64;
    if rh.data_size == 0 || !rh.data_size.is_multiple_of(page) {
        problems.push(Error::corrupt(
            path,
            rslots.slot as u64,
            format!(
                "region header claims a data size of {} bytes, not a positive multiple of the page size {PAGE}",
                rh.data_size
            ),
        ));
    }
    let want_len = HEADER_BYTES.saturating_add(rh.data_size);
    if file_len < want_len {
        problems.push(Error::corrupt(
            path,
            file_len,
            format!(
                "region file truncated: {file_len} bytes, but its header page and {} bytes of data need {want_len}",
                rh.data_size
            ),
        ));
    } else if !file_len.is_multiple_of(page) && !plain {
        warnings.push(format!(
            "{}: file length {file_len} is not a multiple of the page size {PAGE}",
            path.display()
        ));
    }
    if lh.region_id != rh.region_id {
        problems.push(Error::corrupt(
            &lp,
            lslot as u64,
            format!(
                "log belongs to region {:016x}, not to {} ({:016x})",
                lh.region_id,
                path.display(),
                rh.region_id
            ),
        ));
    }
    // Damage a crash cannot explain, and the commits it would lose.
    for d in &reading.damage {
        problems.push(Error::Corrupt {
            path: lp.clone(),
            offset: d.offset,
            what: d.what.clone(),
            lost: Some(crate::error::Lost {
                first: d.seq,
                last: d.last,
            }),
        });
    }
    let scan::Scan {
        records,
        end,
        stop,
        damage,
    } = reading.scan;
    let end = end as usize;
    if let Some(d) = &damage
        && !reading.damage.iter().any(|p| p.offset == d.offset)
    {
        warnings.push(format!(
            "{}: record {} at offset {} is damaged ({}), but every later record is in the checkpoint: nothing is lost",
            lp.display(),
            d.seq,
            d.offset,
            d.what
        ));
    }
    let torn_tail = match stop {
        Some(why) if damage.is_none() && torn_record(&log_bytes[end..], lh.salt) => {
            let seq = lh.start_seq + records.len() as u64;
            let mut t = format!("torn or damaged record at offset {end} (commit {seq}): {why}");
            match later_records(&log_bytes, end + 8, lh.salt, seq) {
                0 => {}
                n => t.push_str(&format!(
                    "; {n} later record(s) of the same unsynced batch are discarded with it"
                )),
            }
            Some(t)
        }
        _ => None,
    };
    let mut off = HEADER_BYTES;
    for (i, r) in records.iter().enumerate() {
        let expect = lh.start_seq + i as u64;
        let at = |what: String| Error::corrupt(&lp, off, format!("record {}: {what}", r.seq));
        if r.seq != expect {
            problems.push(at(format!(
                "sequence number {} where {expect} was expected",
                r.seq
            )));
        }
        if r.data_size == 0 || !r.data_size.is_multiple_of(page) {
            problems.push(at(format!(
                "data size {} is not a positive multiple of the page size {PAGE}",
                r.data_size
            )));
        }
        if let Some(bad) = r.ranges.iter().find(|x| {
            x.offset
                .checked_add(x.bytes.len() as u64)
                .is_none_or(|e| e > r.data_size)
        }) {
            problems.push(at(format!(
                "range at {} of {} bytes lies beyond the data size {}",
                bad.offset,
                bad.bytes.len(),
                r.data_size
            )));
        }
        if let Some(p) = i.checked_sub(1).map(|j| &records[j])
            && r.synced < p.synced
        {
            warnings.push(format!(
                "{}: record {} at offset {off} claims fewer synced records ({}) than record {} before it ({})",
                lp.display(),
                r.seq,
                r.synced,
                p.seq,
                p.synced
            ));
        }
        off += r.len as u64;
    }

    let log_last = records
        .last()
        .map_or(lh.start_seq.saturating_sub(1), |r| r.seq);
    let pending = records.iter().filter(|r| r.seq > rh.checkpoint_seq).count() as u64;
    let open_by = lock_holders(&data_meta);
    let live = if open_by.is_empty() {
        None
    } else {
        live_state(path, rh.region_id)
    };
    if let Some(t) = &torn_tail {
        warnings.push(format!(
            "{}: {t}; an interrupted write, ignored by recovery",
            lp.display()
        ));
    }
    if log_last < rh.checkpoint_seq && lh.region_id == rh.region_id {
        warnings.push(format!(
            "{}: the log ends at commit {log_last}, before the checkpoint (commit {}): it is older than the region file",
            lp.display(),
            rh.checkpoint_seq
        ));
    }
    if pending > 0 && open_by.is_empty() && problems.is_empty() {
        let (n, are) = match pending {
            1 => ("1 logged commit".to_string(), "is"),
            n => (format!("{n} logged commits"), "are"),
        };
        warnings.push(format!(
            "{n} after the checkpoint {are} not yet in the data file: \
             recovery is pending (the next open, or `txmap recover`, applies them)"
        ));
    }
    let pages_in_use = count_pages(&data, path, rh.data_size, file_len)?;
    let pending_pages =
        crate::ops::touched_pages(records.iter().filter(|r| r.seq > rh.checkpoint_seq));
    let mut log_operations = std::collections::BTreeMap::<u32, u64>::new();
    for o in records.iter().flat_map(|r| r.ops.iter()) {
        *log_operations.entry(o.id).or_default() += 1;
    }
    let pending_records = records.iter().filter(|r| r.seq > rh.checkpoint_seq);
    match crate::ops::check_registered(pending_records.clone(), &lp) {
        Err(e) => warnings.push(format!(
            "{e}; opening the region needs it registered (this command cannot run it)"
        )),
        // Operations replay as recovery would run them (in memory), when
        // the pages they touch are few enough to hold, and the file is at
        // its checkpoint (nobody has it open, no checkpoint to finish; a
        // region file, not a plain file, which only its storage reads).
        Ok(())
            if open_by.is_empty()
                && journal.is_none()
                && data.head.is_none()
                && pending_records
                    .clone()
                    .any(|r| crate::ops::changes_bytes(&r.ops)) =>
        {
            let replay: Vec<_> = pending_records.collect();
            if crate::ops::touched_pages(replay.iter().copied()).len() > REPLAY_CHECK_PAGES {
                warnings.push(format!(
                    "{}: registered operations after the checkpoint touch more than \
                     {REPLAY_CHECK_PAGES} pages: not replayed by this check",
                    lp.display()
                ));
            } else {
                let size = replay
                    .iter()
                    .map(|r| r.data_size)
                    .fold(rh.data_size, u64::max);
                let storage = crate::io::FileStorage::open_read_only(path)
                    .map_err(|e| Error::io("open", path, e))?;
                if let Err(e) = crate::recovery::replay_in_memory(&storage, size, &replay) {
                    problems.push(Error::corrupt(&lp, 0, format!("recovery would fail: {e}")));
                }
            }
        }
        Ok(()) => {}
    }
    match crate::nta::pending(records.iter()) {
        Ok(n) if !n.is_empty() => warnings.push(format!(
            "{}: {} nested top action(s) of transactions that have not committed \
             (first in commit {}): the next first open runs their undos unless \
             those transactions commit first",
            lp.display(),
            n.len(),
            n[0].seq
        )),
        Ok(_) => {}
        Err(e) => problems.push(e),
    }
    crate::grouplog::examine(&records, &rh, path, &mut warnings, &mut problems);
    let checksummed_pages = check_sums(
        &data,
        path,
        &rh,
        &pending_pages,
        !open_by.is_empty(),
        &mut problems,
        &mut warnings,
    )?;

    let plain = match &data.head {
        None => None,
        Some(h) => {
            let page = read_upto(h, &meta, crate::io::plain::PLAIN_PAGE, PAGE)?;
            match crate::io::plain::PlainRecord::decode(&page) {
                Err(what) => {
                    problems.push(Error::corrupt(&meta, crate::io::plain::PLAIN_PAGE, what));
                    None
                }
                Ok(record) => {
                    let (len, sec, nsec) = crate::io::plain::stamp(data.data.as_fd())
                        .map_err(|e| Error::io("stat", path, e))?;
                    // While closed, the file must be as the last close left it.
                    if !record.open
                        && open_by.is_empty()
                        && (len, sec, nsec) != (record.len, record.mtime_sec, record.mtime_nsec)
                    {
                        problems.push(Error::PlainFileChanged {
                            path: path.to_path_buf(),
                            what: format!(
                                "{len} bytes (txmap left {}), or another modification time",
                                record.len
                            ),
                        });
                    }
                    Some(PlainReport {
                        meta_path: meta.clone(),
                        len,
                        record,
                    })
                }
            }
        }
    };

    let report = Report {
        path: path.to_path_buf(),
        log_path: lp,
        region_id: rh.region_id,
        format_version: rslots.version,
        page_size: rslots.page_size,
        data_size: rh.data_size,
        file_len,
        checkpoint_seq: rh.checkpoint_seq,
        region_header_generation: rh.generation,
        address: rh.address,
        log_len,
        log_header_generation: lh.generation,
        log_start_seq: lh.start_seq,
        log_records: records.len() as u64,
        log_op_records: records.iter().filter(|r| !r.ops.is_empty()).count() as u64,
        log_operations: log_operations.into_iter().collect(),
        log_group_records: records.iter().filter(|r| r.group.is_some()).count() as u64,
        last_seq: log_last.max(rh.checkpoint_seq),
        log_bytes_used: end as u64 - HEADER_BYTES,
        torn_tail,
        pages_in_use,
        checksummed_pages,
        pending_commits: pending,
        needs_recovery: pending > 0,
        open_by,
        plain,
        live,
    };
    Ok(Examined {
        report,
        problems,
        warnings,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn torn_record_tells_damage_from_zeros_and_stale_bytes() {
        let mut rec = Vec::new();
        format::encode_commit(
            &mut rec,
            7,
            1,
            0,
            4096,
            [format::Range {
                offset: 0,
                bytes: &[1, 2, 3],
            }]
            .into_iter(),
        );
        assert!(!torn_record(&[0; 64], 7));
        assert!(!torn_record(&rec, 8), "a record of another epoch is stale");
        assert!(torn_record(&rec, 7));
        assert!(torn_record(&rec[..5], 7));
        assert!(!torn_record(&[0; 5], 7));
        assert!(!torn_record(&[9; 20], 7));
    }
}
