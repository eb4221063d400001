//! Regions over plain files (issue 19 point 2, docs/FORMAT.md "Plain
//! files"): adopting an existing file (`Region::open_plain`), the check on
//! the first open that nobody else changed it while it was closed, and the
//! last close that cuts it back to its own length. The storage that makes
//! the file and its side file look like one region file is `io/plain.rs`.

use std::path::Path;
use std::sync::Arc;

use crate::engine::OpenLocks;
use crate::error::{Error, Result};
use crate::io::plain::{PlainRecord, PlainStorage, meta_path, pages_for, stamp};
use crate::io::{FileStorage, Storage};
use crate::options::Options;
use crate::os::mem::PAGE;
use crate::region::{CREATING, Region, log_path, open_rw, region_header_page};
use crate::wal::format::{HEADER_BYTES, RegionHeader};

impl Region {
    /// Maps an existing ordinary file as a region: its byte `o` is the
    /// region's byte `o` (as LIBXAC's `xMmap` maps a file), and txmap keeps
    /// its metadata beside it: `PATH-txmap` (header page and the file's
    /// recorded length), `PATH-log`, `PATH-sums`. The first call adopts the
    /// file (writes those, never the file); later ones, and
    /// [`Region::open`] of the same path, open it like any region.
    ///
    /// The file stays an ordinary file: when no process has it open (and
    /// after recovery, `txmap recover`) it holds exactly the committed
    /// bytes, and its length is its own (the region has `ceil(len / 4096)`
    /// pages, at least one; bytes stored past the length in the last page
    /// are not part of the file and are dropped when the last process
    /// closes it). Growing the region makes the file the grown size.
    /// A file changed by another program while nobody had it open fails
    /// with [`Error::PlainFileChanged`] unless
    /// [`Options::accept_outside_changes`]. Backup and compaction refuse
    /// plain regions ([`Error::Unsupported`]).
    pub fn open_plain(path: &Path, opts: Options) -> Result<Region> {
        if !meta_path(path).exists() {
            if opts.read_only {
                return Err(Error::ReadOnly {
                    op: "adopting a plain file (writing its side files)",
                    path: path.to_path_buf(),
                });
            }
            adopt(path, &opts)?;
        }
        Self::open_plain_existing(path, opts)
    }

    /// Opens a plain file whose side file exists.
    pub(crate) fn open_plain_existing(path: &Path, opts: Options) -> Result<Region> {
        let mut opts = opts;
        let meta = meta_path(path);
        let lp = log_path(path);
        if !lp.exists() {
            return Err(Error::io(
                "open log",
                &lp,
                std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    "the plain file's log is missing (its side file exists)",
                ),
            ));
        }
        let log = open_rw(&lp, &mut opts.read_only)?;
        let m = open_rw(&meta, &mut opts.read_only)?;
        let data = open_rw(path, &mut opts.read_only)?;
        let (m, data) = if opts.read_only {
            // Some file is not writable: none is written.
            let ro = |p: &Path| FileStorage::open_read_only(p).map_err(|e| Error::io("open", p, e));
            (ro(&meta)?, ro(path)?)
        } else {
            (m, data)
        };
        let log = if opts.read_only {
            FileStorage::open_read_only(&lp).map_err(|e| Error::io("open", &lp, e))?
        } else {
            log
        };
        // Separate open file descriptions for the locks: the side file
        // stands for the region (another program may lock the plain file).
        let users = std::fs::File::open(&meta).map_err(|e| Error::io("open", &meta, e))?;
        let transition = std::fs::File::open(&lp).map_err(|e| Error::io("open", &lp, e))?;
        let plain = Arc::new(PlainStorage::new(m, data));
        Self::open_locked(
            Box::new(Arc::clone(&plain)),
            Box::new(log),
            opts,
            Some(OpenLocks { users, transition }),
            Some(plain),
        )
    }

    /// Opens the region at `path`; an existing file that is no txmap
    /// region (no log, no side file, no region header) is mapped as a
    /// plain file ([`Region::open_plain`]). This is what `xMmap` does with
    /// an existing file.
    pub fn open_or_adopt(path: &Path, opts: Options) -> Result<Region> {
        let lp = log_path(path);
        if lp.exists() || meta_path(path).exists() {
            return Region::open(path, opts);
        }
        let mut page = vec![0u8; HEADER_BYTES as usize];
        let f = FileStorage::open_read_only(path).map_err(|e| Error::io("open", path, e))?;
        if f.read_at(&mut page, 0).is_ok() && RegionHeader::decode(&page).is_ok() {
            return Region::open(path, opts); // its log is missing: says so
        }
        Region::open_plain(path, opts)
    }

    /// Whether the region is a plain file ([`Region::open_plain`]).
    pub fn is_plain(&self) -> bool {
        self.inner.plain.is_some()
    }
}

/// Writes the side file and the log of the plain file at `path`, which
/// stays as it is: the region has the pages its length needs.
fn adopt(path: &Path, opts: &Options) -> Result<()> {
    let md = std::fs::metadata(path).map_err(|e| Error::io("open", path, e))?;
    if !md.is_file() {
        return Err(Error::NotARegion {
            path: path.to_path_buf(),
            what: "not a regular file, so it cannot be mapped as a plain file".into(),
        });
    }
    let lp = log_path(path);
    if lp.exists() {
        let mut page = vec![0u8; HEADER_BYTES as usize];
        let f = FileStorage::open_read_only(path).map_err(|e| Error::io("open", path, e))?;
        if f.read_at(&mut page, 0).is_ok() && RegionHeader::decode(&page).is_ok() {
            return Err(Error::Invalid(format!(
                "{} is a txmap region (region header and log), not a plain file: open it \
                 with Region::open",
                path.display()
            )));
        }
        // Another program's file by that name is never taken for a log
        // left by a dead adopter (which would be removed).
        let mut lpage = vec![0u8; HEADER_BYTES as usize];
        let l = FileStorage::open_read_only(&lp).map_err(|e| Error::io("open", &lp, e))?;
        let n = l
            .len()
            .map_err(|e| Error::io("stat", &lp, e))?
            .min(HEADER_BYTES) as usize;
        l.read_at(&mut lpage[..n], 0)
            .map_err(|e| Error::io("read", &lp, e))?;
        if n > 0 && crate::wal::format::LogHeader::decode(&lpage).is_err() {
            return Err(Error::Exists {
                path: lp,
                what: " and is not a txmap log: move it away to map the plain file",
            });
        }
    }
    let meta = meta_path(path);
    // As `Region::create`: the log is created exclusively and held locked
    // until the side file is renamed into place, so of two adopters one
    // writes and the other waits for it.
    let mut tries = 0;
    let log = loop {
        if meta.exists() {
            return Ok(());
        }
        if let Some(l) = crate::region::create_locked_log(&lp)? {
            break l;
        }
        if !crate::region::remove_abandoned_create(&meta, &lp)? {
            tries += 1;
            if tries > 500 {
                return Err(Error::Exists {
                    path: meta,
                    what: " (another process is adopting the plain file)",
                });
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    };
    let mut tmp = meta.as_os_str().to_owned();
    tmp.push(format!("{CREATING}{}", std::process::id()));
    let tmp = std::path::PathBuf::from(tmp);
    let dir = path.parent().unwrap_or(Path::new(""));
    let made = (|| {
        let _ = std::fs::remove_file(&tmp);
        let region_id = crate::rand::fresh();
        let address = opts
            .address
            .or_else(|| crate::os::mem::fixed_address(crate::rand::fresh(), opts.max_size));
        let f = FileStorage::create_new(&tmp).map_err(|e| Error::io("create", &tmp, e))?;
        let (len, sec, nsec) = {
            let d = FileStorage::open_read_only(path).map_err(|e| Error::io("open", path, e))?;
            stamp(d.fd()).map_err(|e| Error::io("stat", path, e))?
        };
        let mut page = region_header_page(&RegionHeader {
            region_id,
            generation: 1,
            checkpoint_seq: 0,
            data_size: pages_for(len) * PAGE as u64,
            address: address.unwrap_or(0) as u64,
        });
        page.resize(2 * PAGE, 0);
        let (off, slot) = PlainRecord::closed(1, (len, sec, nsec)).encode();
        page[off as usize..off as usize + slot.len()].copy_from_slice(&slot);
        f.write_at(&page, 0)
            .and_then(|_| f.sync())
            .map_err(|e| Error::io("write", &tmp, e))?;
        std::fs::hard_link(&tmp, &meta).map_err(|e| Error::io("link into place", &meta, e))?;
        let _ = std::fs::remove_file(&tmp);
        crate::io::sync_dir(dir).map_err(|e| Error::io("sync directory of", &meta, e))?;
        crate::region::write_new_log_header(&log, region_id)
    })();
    if let Err(e) = made {
        let _ = std::fs::remove_file(&tmp);
        if !meta.exists() {
            let _ = std::fs::remove_file(&lp);
        }
        return Err(e);
    }
    Ok(())
}
