//! Archiving a log epoch (`Options::log_archive`): before a log reset, the
//! epoch's bytes go into a segment file of the archive directory, named
//! after the region and the commits it holds. Reading the archive back
//! (media recovery) is `crate::archive`.

use std::path::{Path, PathBuf};

use super::format::HEADER_BYTES;
use crate::error::{Error, Result};
use crate::io::{FileStorage, Storage};

/// The file name of the segment holding commits `first..=last` of a region.
pub fn segment_name(region_id: u64, first: u64, last: u64) -> String {
    format!("{region_id:016x}-{first:020}-{last:020}.txlog")
}

/// (region id, first, last) of a segment's file name.
pub fn parse_segment_name(name: &str) -> Option<(u64, u64, u64)> {
    let stem = name.strip_suffix(".txlog")?;
    let mut it = stem.split('-');
    let id = u64::from_str_radix(it.next()?, 16).ok()?;
    let first = it.next()?.parse().ok()?;
    let last = it.next()?.parse().ok()?;
    it.next().is_none().then_some((id, first, last))
}

/// Copies the log's bytes `[0, end)` (its header page and the records of
/// commits `first..=last`) into a segment in `dir`, durably (written under
/// a temporary name, synced, renamed, directory synced). Nothing to do for
/// an epoch without records, or one already archived.
pub(crate) fn archive_epoch(
    log: &dyn Storage,
    dir: &Path,
    region_id: u64,
    first: u64,
    last: u64,
    end: u64,
) -> Result<()> {
    if last < first || end <= HEADER_BYTES {
        return Ok(());
    }
    let path = dir.join(segment_name(region_id, first, last));
    if path.exists() {
        return Ok(()); // archived before a crash stopped the reset
    }
    let mut bytes = vec![0u8; end as usize + 8];
    log.read_at(&mut bytes[..end as usize], 0)
        .map_err(|e| Error::io("read log for the archive", log.path(), e))?;
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(format!(".tmp-{}", std::process::id()));
    let tmp = PathBuf::from(tmp);
    let _ = std::fs::remove_file(&tmp);
    let f = FileStorage::create_new(&tmp).map_err(|e| Error::io("create", &tmp, e))?;
    let r = f
        .write_at(&bytes, 0)
        .and_then(|_| f.sync())
        .and_then(|_| std::fs::rename(&tmp, &path))
        .and_then(|_| crate::io::sync_dir(dir));
    if let Err(e) = r {
        let _ = std::fs::remove_file(&tmp);
        return Err(Error::io("archive log epoch to", path, e));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segment_names_round_trip() {
        let n = segment_name(0xabc, 7, 1234);
        assert_eq!(parse_segment_name(&n), Some((0xabc, 7, 1234)));
        assert_eq!(parse_segment_name("x.txlog"), None);
        assert_eq!(parse_segment_name(&format!("{n}.tmp-5")), None);
    }
}
