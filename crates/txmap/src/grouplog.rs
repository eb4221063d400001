//! The rules of commits across several regions that read other regions'
//! files (docs/design/multi-region.md): whether each other writer of a
//! group record has it (recovery's `resolve`, `txmap check`'s `examine`),
//! and which group records of other regions name this one at a commit it
//! lacks (`in_doubt`, for the first opener). Below recovery; the commit
//! itself is `group.rs`.

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::wal::format::{CommitRecord, GroupMember, LogHeader, RegionHeader};

pub(crate) fn group_err(path: &Path, what: String) -> Error {
    Error::Group {
        path: path.to_path_buf(),
        what,
    }
}

/// A region's files as a group check reads them: its header, its log's
/// header, and the log's bytes.
struct Files {
    header: RegionHeader,
    log_header: LogHeader,
    log: crate::os::mem::FileImage,
}

fn read_files(path: &Path) -> Result<Files> {
    use crate::io::{FileStorage, Storage};
    let open = |p: &Path| FileStorage::open_read_only(p).map_err(|e| Error::io("open", p, e));
    let data = open(path)?;
    let log = open(&crate::wal::log_path(path))?;
    let (header, log_header) = crate::headers::read_headers(&data, &log)?;
    let ll = log.len().map_err(|e| Error::io("stat", log.path(), e))?;
    let image = crate::os::mem::FileImage::map(log.fd(), ll as usize)
        .map_err(|e| Error::os("map log", e))?;
    Ok(Files {
        header,
        log_header,
        log: image,
    })
}

/// Whether writer `m` of group `gid` has the group: its log, still in the
/// epoch the trailer names, holds the listed commit with the same group id;
/// or its log has left that epoch (docs/design/multi-region.md: a region
/// leaves the epoch of a group it lacks only after every region holding
/// the group has recovered). `from` is the record that names it.
fn member_has(dir: &Path, m: &GroupMember, gid: u64, from: &Path, seq: u64) -> Result<bool> {
    let path = dir.join(&m.name);
    let names = || {
        format!(
            "commit {seq} of {} belongs to commit {gid:016x} across several regions, which \
             also wrote region {} ({:016x})",
            from.display(),
            path.display(),
            m.region_id
        )
    };
    if !path.exists() {
        return Err(group_err(
            &path,
            format!(
                "{}: that file is missing (restore or move it back)",
                names()
            ),
        ));
    }
    let f = read_files(&path).map_err(|e| group_err(&path, format!("{}: {e}", names())))?;
    if f.header.region_id != m.region_id {
        return Err(group_err(
            &path,
            format!(
                "{}: that file is region {:016x} (renamed or replaced; put the region back under its name)",
                names(),
                f.header.region_id
            ),
        ));
    }
    if f.log_header.salt != m.salt {
        return Ok(true);
    }
    let s = crate::wal::scan::scan(f.log.bytes(), &f.log_header);
    if let Some(r) = s.records.iter().find(|r| r.seq == m.seq) {
        return Ok(r.group.as_ref().is_some_and(|g| g.id == gid));
    }
    if let Some(d) = s.damage {
        return Err(group_err(
            &path,
            format!(
                "{}: its log is damaged at offset {} ({})",
                names(),
                d.offset,
                d.what
            ),
        ));
    }
    Ok(false)
}

/// Recovery's rule for the records of one log after its checkpoint: a
/// group record every other writer has is kept; any other is emptied (its
/// sequence number stays used, nothing of it is replayed). Returns the
/// commits emptied.
pub(crate) fn resolve(
    records: &mut [CommitRecord<'_>],
    header: &RegionHeader,
    path: &Path,
) -> Result<Vec<u64>> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut skipped = Vec::new();
    for r in records.iter_mut().filter(|r| r.seq > header.checkpoint_seq) {
        let Some(g) = &r.group else { continue };
        let me = g
            .members
            .iter()
            .any(|m| m.region_id == header.region_id && m.seq == r.seq);
        if !me {
            return Err(Error::corrupt(
                path,
                0,
                format!(
                    "commit {} carries group {:016x}, whose writers do not list this region at it",
                    r.seq, g.id
                ),
            ));
        }
        let mut all = true;
        for m in g.members.iter().filter(|m| m.region_id != header.region_id) {
            if !member_has(dir, m, g.id, path, r.seq)? {
                all = false;
                break;
            }
        }
        if !all {
            r.ranges.clear();
            r.ops.clear();
            skipped.push(r.seq);
        }
    }
    Ok(skipped)
}

/// For `txmap info`/`check`: what recovery would do with the group records
/// after the checkpoint (read only). A writer that lacks one is a warning
/// (recovery drops the group: it was never acknowledged); a writer that is
/// missing, replaced or unreadable is a problem (recovery refuses).
pub(crate) fn examine(
    records: &[CommitRecord<'_>],
    header: &RegionHeader,
    path: &Path,
    warnings: &mut Vec<String>,
    problems: &mut Vec<Error>,
) {
    let dir = path.parent().unwrap_or(Path::new("."));
    for r in records.iter().filter(|r| r.seq > header.checkpoint_seq) {
        let Some(g) = &r.group else { continue };
        for m in g.members.iter().filter(|m| m.region_id != header.region_id) {
            match member_has(dir, m, g.id, path, r.seq) {
                Ok(true) => {}
                Ok(false) => warnings.push(format!(
                    "{}: commit {} is part of commit {:016x} across several regions, which \
                     region {} lacks: recovery drops it (it was never acknowledged)",
                    path.display(),
                    r.seq,
                    g.id,
                    dir.join(&m.name).display()
                )),
                Err(e) => problems.push(e),
            }
        }
    }
}

/// Region files of `dir` other than `me` (those with a log beside them).
pub(crate) fn regions_in(dir: &Path, me: &Path) -> Vec<PathBuf> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for e in rd.flatten() {
        let p = e.path();
        if p.file_name() == me.file_name() || !e.file_type().is_ok_and(|t| t.is_file()) {
            continue;
        }
        if crate::wal::log_path(&p).is_file() {
            out.push(p);
        }
    }
    out.sort();
    out
}

/// The first group record in `other`'s live log (after its checkpoint)
/// that names region `id` (file `me`) at a commit `me` lacks.
pub(crate) fn in_doubt(other: &Path, me: &Path, id: u64) -> Result<Option<(u64, u64)>> {
    let Ok(f) = read_files(other) else {
        return Ok(None); // not a region, or its own opener reports it
    };
    let dir = me.parent().unwrap_or(Path::new("."));
    let s = crate::wal::scan::scan(f.log.bytes(), &f.log_header);
    for r in s.records.iter().filter(|r| r.seq > f.header.checkpoint_seq) {
        let Some(g) = &r.group else { continue };
        // Checked at our own path, whatever name the group recorded.
        let Some(m) = g.members.iter().find(|m| m.region_id == id) else {
            continue;
        };
        let m = GroupMember {
            name: me
                .file_name()
                .map_or(String::new(), |n| n.to_string_lossy().into()),
            ..m.clone()
        };
        if !member_has(dir, &m, g.id, other, r.seq)? {
            return Ok(Some((r.seq, g.id)));
        }
    }
    Ok(None)
}

/// The region id in the header of the region file at `path`, if it reads.
pub(crate) fn region_id_of(path: &Path) -> Option<u64> {
    read_files(path).ok().map(|f| f.header.region_id)
}
