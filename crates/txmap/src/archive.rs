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
    /// Segments read, and commits replayed from them.
    pub segments: usize,
    pub replayed: u64,
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
        let (mut used, mut replayed) = (0, 0);
        for (first, last, path) in &segments {
            if *last <= cur || to.is_some_and(|t| cur >= t) {
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
                if r.data_size > size {
                    size = r.data_size;
                    data.set_len(HEADER_BYTES + size)
                        .map_err(|e| Error::io("grow", &parts[0].tmp, e))?;
                }
                crate::ops::check_registered([r], path)?;
                crate::ops::redo_into_file(data, r)?;
                cur = r.seq;
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
