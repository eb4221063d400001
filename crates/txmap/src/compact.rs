//! Offline compaction (`txmap compact`): gives back what can be given back
//! without knowing what the region's bytes mean.
//!
//! - The log: the region is opened and closed, which replays it, checkpoints
//!   and cuts it to its smallest reserve (4 MiB and its header page).
//! - The region file: only for a region that holds the collections' heap,
//!   and only above the heap's top (the heap grows the region in steps of up
//!   to double its size, so the top can be far below the end); every byte
//!   there must be zero, or nothing is cut. Data is never moved: pointers
//!   stored in a region are offsets, which moving would break, so free
//!   blocks inside the heap stay where they are (`txmap backup --compact`
//!   leaves them out of a copy as holes).
//!
//! This module sits above the collections (it reads the heap's top); nothing
//! else in the core depends on it.

use std::path::Path;

use crate::error::{Error, Result};
use crate::io::{FileStorage, Storage};
use crate::os::mem::{PAGE, round_up};
use crate::wal::format::{HEADER_BYTES, RegionHeader};
use crate::{Options, Region};

/// What [`compact`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CompactReport {
    /// Region data size before and after.
    pub size_before: u64,
    pub size_after: u64,
    /// Log file length before and after.
    pub log_before: u64,
    pub log_after: u64,
    /// The region holds the collections' heap (else its size is kept).
    pub heap: bool,
}

/// Compacts the region at `path`, which no process may have open (see the
/// module docs for what is given back).
pub fn compact(path: &Path) -> Result<CompactReport> {
    if crate::io::plain::is_plain(path) {
        // Its length is the program's: nothing to cut.
        return Err(Error::Unsupported {
            op: "compact",
            path: path.to_path_buf(),
            why: "it is a plain file (Region::open_plain), whose length belongs to the program",
        });
    }
    let lp = crate::wal::log_path(path);
    let len = |p: &Path| {
        std::fs::metadata(p)
            .map(|m| m.len())
            .map_err(|e| Error::io("stat", p, e))
    };
    let log_before = len(&lp)?;
    let opts = Options {
        log_reserve: 0,
        ..Options::default()
    };
    let r = Region::open(path, opts)?;
    if !r.stats().opened_alone {
        return Err(Error::Invalid(format!(
            "{} is open in another process: compact works only on a region nobody has open",
            path.display()
        )));
    }
    let size_before = r.size();
    let mut v = r.view()?;
    v.begin_read()?;
    let heap = crate::collections::alloc::is_formatted(&v)?;
    let mut keep = size_before;
    if heap {
        let top = round_up(crate::collections::alloc::check(&v)?.top as usize) as u64;
        // Only zeros above the top, or the region holds something else there.
        let mut at = top;
        let mut zero = true;
        while zero && at < size_before {
            let n = (size_before - at).min(1 << 20) as usize;
            zero = v.slice(at, n)?.iter().all(|&b| b == 0);
            at += n as u64;
        }
        if zero {
            keep = top.max(PAGE as u64);
        }
    }
    v.commit()?;
    drop(v);
    let seen = (r.stats().commit_seq, size_before);
    // The last close replays nothing more, checkpoints and cuts the log.
    r.close()?;
    // A file longer than its data is also cut: a compact killed after it
    // recorded the smaller size left it so.
    if keep < size_before || len(path)? > HEADER_BYTES + keep {
        shrink(path, keep, seen)?;
    }
    Ok(CompactReport {
        size_before,
        size_after: keep,
        log_before,
        log_after: len(&lp)?,
        heap,
    })
}

/// Records the smaller size in the region header (table first), then cuts
/// the region file and the checksum table, holding the locks every opener
/// takes, so nobody opens meanwhile. A crash after the header leaves a file
/// longer than its data size, which is allowed. `seen` is the (commit,
/// size) compact saw; a region another process opened and changed between
/// the close and the locks here is left alone.
fn shrink(path: &Path, size: u64, seen: (u64, u64)) -> Result<()> {
    use rustix::fs::FlockOperation as F;
    let lp = crate::wal::log_path(path);
    let transition = std::fs::File::open(&lp).map_err(|e| Error::io("open", &lp, e))?;
    rustix::fs::flock(&transition, F::LockExclusive)
        .map_err(|e| Error::io("lock", &lp, e.into()))?;
    let users = std::fs::File::open(path).map_err(|e| Error::io("open", path, e))?;
    if rustix::fs::flock(&users, F::NonBlockingLockExclusive).is_err() {
        return Err(Error::Invalid(format!(
            "{} was opened by another process during compact; its size is kept",
            path.display()
        )));
    }
    let data = FileStorage::open(path, false).map_err(|e| Error::io("open", path, e))?;
    let mut page = vec![0u8; HEADER_BYTES as usize];
    data.read_at(&mut page, 0)
        .map_err(|e| Error::io("read header of", path, e))?;
    let mut h = RegionHeader::decode(&page).map_err(|e| Error::corrupt(path, 0, e.to_string()))?;
    if (h.checkpoint_seq, h.data_size) != seen {
        return Err(Error::Invalid(format!(
            "{} was changed by another process during compact (now at commit {} with {} bytes, \
             compacted at commit {} with {}); its size is kept",
            path.display(),
            h.checkpoint_seq,
            h.data_size,
            seen.0,
            seen.1
        )));
    }
    h.generation += 1;
    h.data_size = size;
    let sums = crate::sums::PageSums::open(path, false)?;
    crate::recovery::write_region_header(&data, sums.as_ref(), &h)?;
    crate::debug::hit(crate::debug::CrashPoint::CompactShrinking);
    data.set_len(HEADER_BYTES + size)
        .and_then(|_| data.sync())
        .map_err(|e| Error::io("truncate", path, e))?;
    if let Some(s) = &sums {
        s.truncate(size / PAGE as u64)?;
        s.sync()?;
    }
    Ok(())
}
