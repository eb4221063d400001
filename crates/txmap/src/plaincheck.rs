//! The first open's part of plain files (`plainfile.rs` adopts them): the
//! file must be as the last clean close left it, and the record then says
//! a process has it open. Below the handle (`region.rs`), which calls it.

use crate::error::{Error, Result};
use crate::headers::read_headers;
use crate::io::Storage;
use crate::io::plain::{PlainRecord, PlainStorage, logical_len, pages_for, stamp};
use crate::options::Options;
use crate::os::mem::PAGE;
use crate::recovery::write_region_header;

/// On the first open: unless a process had the file open when it ended
/// (a crash, which recovery repairs from the log), the file must be as the
/// last clean close left it (length and modification time). A changed file
/// is refused, or with `accept_outside_changes` taken as it is: the region
/// gets the pages its new length needs and a new header generation (so the
/// page checksums, which no longer match, are reset).
pub(crate) fn check_unchanged(p: &PlainStorage, log: &dyn Storage, opts: &Options) -> Result<()> {
    let rec = p.record()?;
    let path = p.data().path();
    let (len, sec, nsec) = stamp(p.data().fd()).map_err(|e| Error::io("stat", path, e))?;
    if len == 0 && opts.read_only {
        // Its one page lies wholly past the end: a mapping of it faults.
        return Err(Error::Unsupported {
            op: "opening read-only",
            path: path.to_path_buf(),
            why: "an empty plain file has no page to map (open it writable)",
        });
    }
    if rec.open {
        return Ok(());
    }
    if (len, sec, nsec) == (rec.len, rec.mtime_sec, rec.mtime_nsec) {
        return Ok(());
    }
    let what = if len != rec.len {
        format!("it is {len} bytes long, not {} as txmap left it", rec.len)
    } else {
        "its modification time is not the one txmap recorded when it closed it".into()
    };
    if !opts.accept_outside_changes {
        return Err(Error::PlainFileChanged {
            path: path.to_path_buf(),
            what,
        });
    }
    if opts.read_only {
        return Err(Error::ReadOnly {
            op: "taking a plain file changed by another program",
            path: path.to_path_buf(),
        });
    }
    let (mut h, _) = read_headers(p, log)?;
    h.data_size = pages_for(len) * PAGE as u64;
    h.generation += 1;
    write_region_header(p, None, &h)?;
    p.write_record(&PlainRecord::closed(rec.generation + 1, (len, sec, nsec)))
}

/// After the first writable open recovered the region (`size` bytes): the
/// record says a process has the file open, with the length it has now.
/// An empty file gets one page of zeros while open (a mapping past a
/// file's end faults); the last close cuts it back.
pub(crate) fn mark_open(p: &PlainStorage, size: u64) -> Result<()> {
    let rec = p.record()?;
    let len = logical_len(size, rec.len);
    p.write_record(&PlainRecord {
        generation: rec.generation + 1,
        open: true,
        len,
        ..rec
    })?;
    let d = p.data();
    if d.len().map_err(|e| Error::io("stat", d.path(), e))? == 0 {
        d.set_len(PAGE as u64)
            .map_err(|e| Error::io("extend", d.path(), e))?;
    }
    Ok(())
}
