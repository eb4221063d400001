//! Reading a region's files back: both headers, the log's records after the
//! checkpoint (torn tail or damage), redo into the region file, page
//! checksums; and publishing a logged commit as page versions (the repair
//! after a dead committer, a read-only first opener). Used by the handle's
//! open and by the engine.

use std::path::Path;

use crate::error::{Error, Result};
use crate::headers::read_headers_raw;
use crate::io::Storage;
use crate::mvcc::Mvcc;
use crate::os::mem::PAGE;
use crate::wal::format::{HEADER_BYTES, LogHeader, RegionHeader};
use crate::wal::log::Log;
use crate::wal::scan;

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

/// The files recovery reads and writes.
#[derive(Clone, Copy)]
pub(crate) struct Files<'a> {
    pub data: &'a dyn Storage,
    pub log: &'a dyn Storage,
    pub sums: Option<&'a crate::sums::PageSums>,
    /// The page journal's path (`journal.rs`); `None` over given storages.
    pub journal: Option<&'a Path>,
}

/// Changed pages replayed in memory before they are written (with their
/// journal) when the log holds registered operations: 64 MiB.
const REPLAY_BATCH_PAGES: usize = 16384;

/// Redo recovery: finishes a checkpoint that was interrupted after its page
/// journal was synced, replays every logged commit after the checkpoint
/// into the data file, syncs it and records the new checkpoint. Idempotent:
/// a crash during recovery leaves files that recover to the same result
/// (records with registered operations are replayed in memory and written
/// through the page journal, since applying them twice would not be).
///
/// A damaged log (docs/FORMAT.md, "Reading the log") is an error naming
/// the commits it would lose, and nothing is written; with `accept_loss`
/// the commits before the damage are replayed and the rest dropped.
pub(crate) fn recover(
    files: Files<'_>,
    progress: Option<fn(u64, u64)>,
    accept_loss: bool,
) -> Result<Recovered> {
    let Files {
        data,
        log,
        sums,
        journal,
    } = files;
    let (mut header, page) = read_headers_raw(data, log)?;
    let pending = match journal {
        Some(j) => crate::journal::pending(j, &header)?,
        None => None,
    };
    let ll = log.len().map_err(|e| Error::io("stat", log.path(), e))?;
    // Mapped, not read: a log held long by old snapshots may be large.
    let image = crate::os::mem::FileImage::map(log.fd(), ll as usize)
        .map_err(|e| Error::os("map log", e))?;
    // With a journal, the commits up to its own are safe in it.
    let reading_from = RegionHeader {
        checkpoint_seq: pending
            .as_ref()
            .map_or(header.checkpoint_seq, |j| j.head.as_of),
        ..header
    };
    let (mut reading, mut loss) =
        read_log(image.bytes(), &page, &reading_from, log.path(), accept_loss)?;
    crate::grouplog::resolve(&mut reading.scan.records, &header, data.path())?;
    if let (Some(j), Some(path)) = (&pending, journal) {
        finish_checkpoint(files, path, j, &mut header)?;
    }
    let lh = reading.header;
    // After a gap nothing can be replayed onto the checkpoint.
    let gap = lh.start_seq > header.checkpoint_seq.saturating_add(1);
    let records: &[_] = if gap { &[] } else { &reading.scan.records };
    let mut replayed = 0;
    let mut size = header.data_size;
    let base = header.checkpoint_seq;
    let replay: Vec<_> = records.iter().filter(|r| r.seq > base).collect();
    let total = replay.len() as u64;
    crate::ops::check_registered(replay.iter().copied(), log.path())?;
    // Nested top actions whose parents never committed (`nta.rs`): only
    // in a whole epoch that continues the checkpoint.
    let nta = if gap || !reading.damage.is_empty() {
        Vec::new()
    } else {
        crate::nta::pending(records)?
    };
    crate::nta::check_registered(&nta, log.path())?;
    let mut touched = crate::ops::touched_pages(replay.iter().copied());
    if let Some(s) = sums {
        check_pages(data, s, &header, &touched, accept_loss, &mut loss)?;
    }
    let mut report = |done: u64| {
        if let Some(f) = progress
            && (done.is_multiple_of(1024) || done == total)
        {
            f(done, total);
        }
    };
    // The header on disk is behind what was replayed.
    let mut behind = false;
    let careful = replay.iter().any(|r| crate::ops::changes_bytes(&r.ops));
    match journal {
        Some(path) if careful => {
            replay_journaled(files, path, &mut header, &replay, &mut report)?;
            replayed = total;
            size = header.data_size;
        }
        _ => {
            for r in &replay {
                if r.data_size > size {
                    size = r.data_size;
                    data.set_len(HEADER_BYTES + size)
                        .map_err(|e| Error::io("allocate disk space to grow", data.path(), e))?;
                }
                crate::ops::redo_into_file(data, r)?;
                header.checkpoint_seq = r.seq;
                replayed += 1;
                behind = true;
                report(replayed);
            }
        }
    }
    let last = reading.scan.records.last().map_or(0, |r| r.seq);
    let mut log_end = reading.scan.end;
    let mut log_last = reading
        .scan
        .records
        .last()
        .map_or(lh.start_seq.saturating_sub(1), |r| r.seq);
    if !nta.is_empty() && last == header.checkpoint_seq {
        let c = crate::nta::compensate(data, log, lh.salt, &nta, last, log_end, size)?;
        header.checkpoint_seq = c.last;
        replayed += c.count;
        log_end = c.log_end;
        log_last = c.last;
        touched.extend(c.pages);
        behind = true;
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
    if behind {
        header.generation += 1;
        header.data_size = size;
        if let Some(s) = sums {
            // Replayed pages are checkpointed now: their content is the
            // log's, and their checksums are taken from it.
            data.sync().map_err(|e| Error::io("sync", data.path(), e))?;
            crate::sums::record_from_file(s, data, &touched, size)?;
        }
        crate::debug::hit(crate::debug::CrashPoint::RecoveryWriting);
        write_region_header(data, sums, &header)?;
    }
    Ok(Recovered {
        header,
        log_header: lh,
        replayed,
        log_end,
        log_last,
        loss,
    })
}

/// Replays `records` over the region file's pages in memory, as recovery
/// does, writing nothing (`txmap check`): the first failure, such as an
/// operation that replays to other bytes than its commit wrote.
pub(crate) fn replay_in_memory(
    data: &dyn Storage,
    size: u64,
    records: &[&crate::wal::format::CommitRecord<'_>],
) -> Result<()> {
    let mut load = crate::ops::file_pages(data)?;
    let mut ov = crate::ops::Overlay::new(size, &mut load);
    for r in records {
        ov.apply(r)?;
    }
    Ok(())
}

/// Completes a checkpoint (or recovery batch) that died after syncing its
/// page journal: writes the journal's pages and a region header at the
/// journal's commit, then empties the journal.
fn finish_checkpoint(
    files: Files<'_>,
    path: &Path,
    j: &crate::journal::Pending,
    header: &mut RegionHeader,
) -> Result<()> {
    let pages = j.apply(files.data)?;
    let size = header.data_size.max(j.head.data_size);
    journaled_header(files, path, header, j.head.as_of, size, &pages)
}

/// After the journaled pages (`pages`) of the state at commit `as_of` are
/// in the region file: their checksums from the file, a region header at
/// `as_of` (the file synced first), and the journal emptied.
fn journaled_header(
    files: Files<'_>,
    path: &Path,
    header: &mut RegionHeader,
    as_of: u64,
    size: u64,
    pages: &std::collections::BTreeSet<u64>,
) -> Result<()> {
    header.generation += 1;
    header.checkpoint_seq = as_of;
    header.data_size = size;
    if let Some(s) = files.sums {
        files
            .data
            .sync()
            .map_err(|e| Error::io("sync", files.data.path(), e))?;
        crate::sums::record_from_file(s, files.data, pages, size)?;
    }
    write_region_header(files.data, files.sums, header)?;
    crate::journal::clear(path)
}

/// Replays records holding registered operations through pages rebuilt in
/// memory from the region file, and writes them as a checkpoint does: the
/// page journal, then the pages, then the region header; in batches of
/// `REPLAY_BATCH_PAGES` changed pages, so memory stays bounded.
fn replay_journaled(
    files: Files<'_>,
    path: &Path,
    header: &mut RegionHeader,
    records: &[&crate::wal::format::CommitRecord<'_>],
    report: &mut dyn FnMut(u64),
) -> Result<()> {
    let data = files.data;
    let mut done = 0;
    let mut rest = records;
    while !rest.is_empty() {
        let mut load = crate::ops::file_pages(data)?;
        let mut ov = crate::ops::Overlay::new(header.data_size, &mut load);
        let mut size = header.data_size;
        let mut as_of = header.checkpoint_seq;
        let mut n = 0;
        for r in rest {
            ov.apply(r)?;
            size = size.max(r.data_size);
            as_of = r.seq;
            n += 1;
            done += 1;
            report(done);
            if ov.dirty_pages() >= crate::debug::replay_batch().unwrap_or(REPLAY_BATCH_PAGES) {
                break;
            }
        }
        rest = &rest[n..];
        let pages = ov.into_pages();
        let head = crate::journal::Head {
            region_id: header.region_id,
            generation: header.generation,
            from: header.checkpoint_seq,
            as_of,
            data_size: size,
        };
        let images: Vec<(u32, &[u8])> = pages.iter().map(|(p, b)| (*p, &b[..])).collect();
        crate::journal::write(path, &head, &images)?;
        let len = data.len().map_err(|e| Error::io("stat", data.path(), e))?;
        if len < HEADER_BYTES + size {
            data.set_len(HEADER_BYTES + size)
                .map_err(|e| Error::io("allocate disk space to grow", data.path(), e))?;
        }
        for (p, b) in &images {
            data.write_at(b, HEADER_BYTES + u64::from(*p) * PAGE as u64)
                .map_err(|e| Error::io("replay into", data.path(), e))?;
        }
        let written = pages.keys().map(|&p| u64::from(p)).collect();
        crate::debug::hit(crate::debug::CrashPoint::RecoveryWriting);
        journaled_header(files, path, header, as_of, size, &written)?;
    }
    Ok(())
}

/// Reads the log's records after the region's checkpoint. Damage a crash
/// cannot explain is an error naming the commits it loses, unless
/// `accept_loss`: then it is described in the returned lines.
pub(crate) fn read_log<'a>(
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
/// (or the region file's page) with the record's byte ranges and
/// registered operations applied.
///
/// A checkpoint that writes a record holding operations journals its pages
/// first (`journal.rs`): the shared state learns of such records here too.
pub(crate) fn publish_record(
    mvcc: &Mvcc,
    data: &dyn Storage,
    l: &crate::mvcc::Locked<'_>,
    r: &crate::wal::format::CommitRecord<'_>,
) -> Result<()> {
    let len = data.len().map_err(|e| Error::io("stat", data.path(), e))?;
    let mut load = |p: u32, buf: &mut [u8]| {
        match mvcc.lookup(p as usize, r.seq - 1) {
            Some(v) => buf.copy_from_slice(v.data),
            None => {
                let at = HEADER_BYTES + u64::from(p) * PAGE as u64;
                if at + PAGE as u64 <= len {
                    data.read_at(buf, at)
                        .map_err(|e| Error::io("read", data.path(), e))?;
                }
            }
        }
        Ok(())
    };
    if crate::ops::changes_bytes(&r.ops) {
        mvcc.hdr().file.note_ops(r.seq);
    }
    let mut overlay = crate::ops::Overlay::new(r.data_size, &mut load);
    overlay.apply(r)?;
    let pages = overlay.into_pages();
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
