//! Log archiving and media recovery.
//!
//! With [`crate::Options::log_archive`], every log epoch is copied into the
//! archive directory before the log is reset (and, after a crash, by the
//! first opener before it starts a new epoch), as one segment file:
//! `<region id, 16 hex digits>-<first commit, 20 digits>-<last commit, 20
//! digits>.txlog`, holding the log's header page, the epoch's records and 8
//! zero bytes (docs/FORMAT.md, "Log archive"). [`restore`] rebuilds a
//! region from a backup plus the segments after it, up to the last commit
//! or a chosen one, checking every record's checksum and the continuity of
//! the commits; a gap or a damaged segment is an error that names it.

use std::path::{Path, PathBuf};

use crate::backup::{Part, check_destination, write_headers};
use crate::error::{Error, Result};
use crate::io::{FileStorage, Storage};
use crate::os::mem::PAGE;
use crate::sums::{ENTRY_TAG, page_crc};
pub use crate::wal::archive::{parse_segment_name, segment_name};
use crate::wal::format::{HEADER_BYTES, LogHeader, RegionHeader};

/// What [`restore`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RestoreReport {
    /// The backup's commit.
    pub from: u64,
    /// The commit the restored region holds.
    pub commit: u64,
    /// When that commit was made (nanoseconds since the Unix epoch), if
    /// it was replayed from a record that carries its time.
    pub time: Option<u64>,
    /// Segments read, and commits replayed from them.
    pub segments: usize,
    pub replayed: u64,
}

/// How far [`restore_to`] replays the archive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RestoreTarget {
    /// Every archived commit.
    Last,
    /// Up to this commit, which the archive must reach.
    Commit(u64),
    /// The commits made at or before this time (nanoseconds since the
    /// Unix epoch, the committing machine's wall clock): replay stops at
    /// the first commit made after it, so a clock that stepped back
    /// after that commit does not bring later ones in.
    Time(u64),
}

/// Rebuilds a region at `dst` from the backup at `backup` (a region made by
/// [`crate::Region::backup`], or any closed region) and the archived log
/// segments in `archive`: every archived commit after the backup's, up to
/// `to` if given. Fails, writing nothing at `dst`, on a gap in the
/// commits, a damaged segment, or a `to` the archive does not reach.
pub fn restore(
    backup: &Path,
    archive: &Path,
    to: Option<u64>,
    dst: &Path,
) -> Result<RestoreReport> {
    let target = to.map_or(RestoreTarget::Last, RestoreTarget::Commit);
    restore_to(backup, archive, target, dst)
}

/// [`restore`] up to a commit or a point in time. For a time, the backup
/// must be older than it (checked when the archive still holds the
/// backup's commit), and every replayed record must carry its time
/// (records of format version 1 do not).
pub fn restore_to(
    backup: &Path,
    archive: &Path,
    target: RestoreTarget,
    dst: &Path,
) -> Result<RestoreReport> {
    let to = match target {
        RestoreTarget::Commit(c) => Some(c),
        _ => None,
    };
    let until = match target {
        RestoreTarget::Time(t) => Some(t),
        _ => None,
    };
    let src = FileStorage::open(backup, false).map_err(|e| Error::io("open", backup, e))?;
    let mut page = vec![0u8; HEADER_BYTES as usize];
    src.read_at(&mut page, 0)
        .map_err(|e| Error::io("read header of", backup, e))?;
    let h = RegionHeader::decode(&page).map_err(|e| Error::corrupt(backup, 0, e.to_string()))?;
    if to.is_some_and(|t| t < h.checkpoint_seq) {
        return Err(Error::Invalid(format!(
            "{} holds commit {}, past the commit {} asked for: restore from an older backup",
            backup.display(),
            h.checkpoint_seq,
            to.unwrap_or(0)
        )));
    }
    check_destination(dst)?;
    let mut segments: Vec<(u64, u64, PathBuf)> = std::fs::read_dir(archive)
        .map_err(|e| Error::io("read archive directory", archive, e))?
        .flatten()
        .filter_map(|e| {
            let (id, first, last) = parse_segment_name(e.file_name().to_str()?)?;
            (id == h.region_id).then(|| (first, last, e.path()))
        })
        .collect();
    segments.sort();
    if let Some(t) = until {
        backup_made_by(&segments, h.checkpoint_seq, t, backup)?;
    }
    let parts = [
        Part::create(dst.to_path_buf())?,
        Part::create(crate::wal::log_path(dst))?,
        Part::create(crate::sums::sums_path(dst))?,
    ];
    let done = (|| {
        let data = &parts[0].file;
        let mut size = h.data_size;
        copy_data(&src, backup, data, &parts[0].tmp, size)?;
        let mut cur = h.checkpoint_seq;
        let (mut used, mut replayed, mut time) = (0, 0, None);
        // Set when a commit after the target time is found.
        let mut past = false;
        for (first, last, path) in &segments {
            if past || *last <= cur || to.is_some_and(|t| cur >= t) {
                continue;
            }
            if *first > cur + 1 {
                return Err(Error::Invalid(format!(
                    "the archive {} has a gap: commits {}..={} are in no segment \
                     (the next one, {}, starts at commit {first})",
                    archive.display(),
                    cur + 1,
                    first - 1,
                    path.display()
                )));
            }
            let bytes = std::fs::read(path).map_err(|e| Error::io("read", path, e))?;
            let lh = LogHeader::decode(&bytes[..bytes.len().min(HEADER_BYTES as usize)])
                .map_err(|e| Error::corrupt(path, 0, format!("segment header: {e}")))?;
            let scan = crate::wal::scan::scan(&bytes, &lh);
            let whole = bytes.len() as u64 - 8;
            let damaged = |at: u64, what: &str| {
                Error::corrupt(
                    path,
                    at,
                    format!(
                        "damaged archived log segment ({what}): commits from here on cannot be restored"
                    ),
                )
            };
            if let Some(d) = &scan.damage {
                return Err(damaged(d.offset, &d.what));
            }
            if scan.end != whole || scan.records.last().map(|r| r.seq) != Some(*last) {
                return Err(damaged(scan.end, scan.stop.unwrap_or("records end early")));
            }
            used += 1;
            let base = cur;
            for r in scan.records.iter().filter(|r| r.seq > base) {
                if to.is_some_and(|t| r.seq > t) {
                    break;
                }
                if let Some(t) = until {
                    let Some(rt) = r.time else {
                        return Err(Error::Invalid(format!(
                            "commit {} in {} carries no time (written by an older \
                             txmap): restore to a commit number instead",
                            r.seq,
                            path.display()
                        )));
                    };
                    if rt > t {
                        past = true;
                        break;
                    }
                }
                if r.data_size > size {
                    size = r.data_size;
                    data.set_len(HEADER_BYTES + size)
                        .map_err(|e| Error::io("grow", &parts[0].tmp, e))?;
                }
                crate::ops::check_registered([r], path)?;
                crate::ops::redo_into_file(data, r)?;
                cur = r.seq;
                time = r.time;
                replayed += 1;
            }
            crate::debug::hit(crate::debug::CrashPoint::RestoreReplaying);
        }
        if let Some(t) = to.filter(|&t| t > cur) {
            return Err(Error::Invalid(format!(
                "the archive {} ends at commit {cur}: commit {t} cannot be reached",
                archive.display()
            )));
        }
        write_sums(&parts[0], &parts[2], size)?;
        write_headers(&parts, h.region_id, cur, size, h.address)?;
        crate::backup::sync_all(&parts)?;
        crate::debug::hit(crate::debug::CrashPoint::RestorePlacing);
        parts[2].place()?;
        parts[1].place()?;
        parts[0].place()?;
        let dir = dst.parent().unwrap_or(Path::new(""));
        crate::io::sync_dir(dir).map_err(|e| Error::io("sync directory of", dst, e))?;
        Ok(RestoreReport {
            from: h.checkpoint_seq,
            commit: cur,
            time,
            segments: used,
            replayed,
        })
    })();
    if done.is_err() {
        for p in &parts {
            let _ = std::fs::remove_file(&p.tmp);
        }
    }
    done
}

/// Fails if the archive still holds the backup's own commit `seq` (in
/// whichever segment, replayed or not) and it was made after `t`. A
/// segment that cannot be read here is left to the replay to report.
fn backup_made_by(segments: &[(u64, u64, PathBuf)], seq: u64, t: u64, backup: &Path) -> Result<()> {
    let Some((_, _, path)) = segments.iter().find(|(f, l, _)| *f <= seq && seq <= *l) else {
        return Ok(());
    };
    let Ok(bytes) = std::fs::read(path) else {
        return Ok(());
    };
    let Ok(lh) = LogHeader::decode(&bytes[..bytes.len().min(HEADER_BYTES as usize)]) else {
        return Ok(());
    };
    let scan = crate::wal::scan::scan(&bytes, &lh);
    match scan
        .records
        .iter()
        .find(|r| r.seq == seq)
        .and_then(|r| r.time)
    {
        Some(made) if made > t => Err(Error::Invalid(format!(
            "{} holds commit {seq}, made at {}, after the time {} asked for: \
             restore from an older backup",
            backup.display(),
            format_time(made),
            format_time(t)
        ))),
        _ => Ok(()),
    }
}

/// A time in nanoseconds since the Unix epoch, as UTC (RFC 3339).
pub fn format_time(ns: u64) -> String {
    let secs = ns / 1_000_000_000;
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil_from_days(days as i64);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:09}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60,
        ns % 1_000_000_000
    )
}

/// Year, month, day of a count of days since 1970-01-01 (the proleptic
/// Gregorian calendar; Howard Hinnant's "civil_from_days" algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// Copies the backup's data pages (after its header page).
fn copy_data(
    src: &FileStorage,
    from: &Path,
    data: &FileStorage,
    to: &Path,
    size: u64,
) -> Result<()> {
    let mut buf = vec![0u8; 1 << 20];
    let mut at = 0;
    while at < size {
        let n = (size - at).min(buf.len() as u64) as usize;
        src.read_at(&mut buf[..n], HEADER_BYTES + at)
            .map_err(|e| Error::io("read", from, e))?;
        data.write_at(&buf[..n], HEADER_BYTES + at)
            .map_err(|e| Error::io("write", to, e))?;
        at += n as u64;
    }
    Ok(())
}

/// A full checksum table for the restored data.
fn write_sums(data: &Part, sums: &Part, size: u64) -> Result<()> {
    let mut page = vec![0u8; PAGE];
    let mut entries = Vec::with_capacity((size / PAGE as u64 * 8) as usize);
    for p in 0..size / PAGE as u64 {
        data.file
            .read_at(&mut page, HEADER_BYTES + p * PAGE as u64)
            .map_err(|e| Error::io("read", &data.tmp, e))?;
        entries.extend_from_slice(&page_crc(&page).to_le_bytes());
        entries.extend_from_slice(&ENTRY_TAG.to_le_bytes());
    }
    sums.file
        .write_at(&entries, HEADER_BYTES)
        .map_err(|e| Error::io("write page checksums to", &sums.tmp, e))
}
