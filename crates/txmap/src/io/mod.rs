//! The I/O backend: every durable change (log append, region write, sync,
//! resize) goes through [`Storage`], so tests can swap in [`sim::SimStorage`],
//! which injects errors and, at a simulated crash, drops or tears unsynced writes.

pub mod plain;
#[cfg(any(test, feature = "testing"))]
pub mod sim;

use std::fs::File;
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A file-like store of bytes with explicit durability.
#[allow(clippy::len_without_is_empty)] // an empty file is not a special case here
pub trait Storage: Send + Sync {
    /// Current length in bytes.
    fn len(&self) -> std::io::Result<u64>;
    /// Reads exactly `buf.len()` bytes at `offset`.
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()>;
    /// Writes all of `buf` at `offset` (not yet durable).
    fn write_at(&self, buf: &[u8], offset: u64) -> std::io::Result<()>;
    /// Writes `bufs` one after the other from `offset` (not yet durable),
    /// in as few system calls as the storage can (a file: `pwritev` of up
    /// to 1,024 buffers), without copying them together first.
    fn write_all_vectored_at(&self, bufs: &[&[u8]], offset: u64) -> std::io::Result<()> {
        let mut at = offset;
        for b in bufs {
            self.write_at(b, at)?;
            at += b.len() as u64;
        }
        Ok(())
    }
    /// Changes the length (not yet durable); new bytes read as zeros and,
    /// in a file, have disk blocks allocated: touching them through a shared
    /// mapping never needs an allocation (on tmpfs a failed one is SIGBUS).
    /// A failed extension leaves the old length.
    fn set_len(&self, len: u64) -> std::io::Result<()>;
    /// Allocates disk blocks for every hole below the current length (a
    /// sparse copy, or a file extended by an older txmap), without changing
    /// any byte. Fails (ENOSPC) when the file system has no room. Only while
    /// nobody else writes the storage: where the file system cannot allocate,
    /// holes are filled by writing zeros.
    fn allocate(&self) -> std::io::Result<()> {
        Ok(())
    }
    /// Makes every earlier write and resize durable (`fdatasync`).
    fn sync(&self) -> std::io::Result<()>;
    /// A descriptor whose shared mapping shows the current contents.
    fn fd(&self) -> BorrowedFd<'_>;
    /// Bytes of this storage before byte 0 of [`Storage::fd`]: offset `o`
    /// here is `o - fd_shift()` there (a plain file, whose header page
    /// lives in another file, `plain.rs`); 0 for a file.
    fn fd_shift(&self) -> u64 {
        0
    }
    /// Where this storage lives, for error messages.
    fn path(&self) -> &Path;
}

impl<T: Storage + ?Sized> Storage for Arc<T> {
    fn len(&self) -> std::io::Result<u64> {
        (**self).len()
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        (**self).read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> std::io::Result<()> {
        (**self).write_at(buf, offset)
    }
    fn write_all_vectored_at(&self, bufs: &[&[u8]], offset: u64) -> std::io::Result<()> {
        (**self).write_all_vectored_at(bufs, offset)
    }
    fn set_len(&self, len: u64) -> std::io::Result<()> {
        (**self).set_len(len)
    }
    fn allocate(&self) -> std::io::Result<()> {
        (**self).allocate()
    }
    fn sync(&self) -> std::io::Result<()> {
        (**self).sync()
    }
    fn fd(&self) -> BorrowedFd<'_> {
        (**self).fd()
    }
    fn fd_shift(&self) -> u64 {
        (**self).fd_shift()
    }
    fn path(&self) -> &Path {
        (**self).path()
    }
}

/// A regular file.
#[derive(Debug)]
pub struct FileStorage {
    file: File,
    path: PathBuf,
}

impl FileStorage {
    /// Opens `path` read-write, creating it if `create` is set. Anything
    /// but a regular file is refused (`O_NONBLOCK`: a FIFO does not block).
    pub fn open(path: &Path, create: bool) -> std::io::Result<FileStorage> {
        Self::open_mode(path, create, true)
    }

    /// Opens `path` for reading only: writes fail with `EBADF`.
    pub fn open_read_only(path: &Path) -> std::io::Result<FileStorage> {
        Self::open_mode(path, false, false)
    }

    fn open_mode(path: &Path, create: bool, write: bool) -> std::io::Result<FileStorage> {
        use std::os::unix::fs::OpenOptionsExt;
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(write)
            .create(create)
            .truncate(false)
            .custom_flags(libc::O_NONBLOCK)
            .open(path)?;
        if !file.metadata()?.is_file() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "not a regular file",
            ));
        }
        Ok(FileStorage {
            file,
            path: path.to_path_buf(),
        })
    }

    /// Creates `path`, failing if it exists.
    pub fn create_new(path: &Path) -> std::io::Result<FileStorage> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(path)?;
        Ok(FileStorage {
            file,
            path: path.to_path_buf(),
        })
    }

    pub fn file(&self) -> &File {
        &self.file
    }
}

impl Storage for FileStorage {
    fn len(&self) -> std::io::Result<u64> {
        Ok(self.file.metadata()?.len())
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        self.file.read_exact_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> std::io::Result<()> {
        self.file.write_all_at(buf, offset)
    }
    fn write_all_vectored_at(&self, bufs: &[&[u8]], mut offset: u64) -> std::io::Result<()> {
        for chunk in bufs.chunks(1024) {
            let slices: Vec<std::io::IoSlice<'_>> =
                chunk.iter().map(|b| std::io::IoSlice::new(b)).collect();
            let total: usize = chunk.iter().map(|b| b.len()).sum();
            let mut done = rustix::io::pwritev(&self.file, &slices, offset)?;
            if done < total {
                // A short write: the rest one buffer at a time.
                let mut at = offset + done as u64;
                for b in chunk {
                    if done >= b.len() {
                        done -= b.len();
                        continue;
                    }
                    self.file.write_all_at(&b[done..], at)?;
                    at += (b.len() - done) as u64;
                    done = 0;
                }
            }
            offset += total as u64;
        }
        Ok(())
    }
    fn set_len(&self, len: u64) -> std::io::Result<()> {
        let old = self.len()?;
        if len <= old {
            return self.file.set_len(len);
        }
        allocate_range(&self.file, old, len - old).inspect_err(|_| {
            // Give back what a partial allocation took.
            let _ = self.file.set_len(old);
        })
    }
    fn allocate(&self) -> std::io::Result<()> {
        use rustix::fs::SeekFrom;
        let len = self.len()?;
        let mut at = 0;
        while at < len {
            let hole = match rustix::fs::seek(&self.file, SeekFrom::Hole(at)) {
                Ok(h) => h,
                // No way to find holes here: such file systems read them
                // as zeros without allocating.
                Err(rustix::io::Errno::INVAL | rustix::io::Errno::NXIO) => return Ok(()),
                Err(e) => return Err(e.into()),
            };
            if hole >= len {
                return Ok(());
            }
            let data = match rustix::fs::seek(&self.file, SeekFrom::Data(hole)) {
                Ok(d) => d.min(len),
                Err(rustix::io::Errno::NXIO) => len,
                Err(e) => return Err(e.into()),
            };
            allocate_range(&self.file, hole, data - hole)?;
            at = data;
        }
        Ok(())
    }
    fn sync(&self) -> std::io::Result<()> {
        self.file.sync_data()
    }
    fn fd(&self) -> BorrowedFd<'_> {
        self.file.as_fd()
    }
    fn path(&self) -> &Path {
        &self.path
    }
}

/// The next run of data in `file` at or after `off`: `(start, end)`, where
/// `end` is the hole after it or the end of the file; `None` when only
/// holes follow. Unwritten (allocated, never written) extents count as
/// holes where the file system says so (ext4, XFS); file systems that
/// cannot tell report everything as data.
pub(crate) fn next_data(file: impl AsFd, off: u64) -> std::io::Result<Option<(u64, u64)>> {
    use rustix::fs::SeekFrom;
    use rustix::io::Errno;
    let file = file.as_fd();
    let start = match rustix::fs::seek(file, SeekFrom::Data(off)) {
        Ok(d) => d,
        Err(Errno::NXIO) => return Ok(None),
        Err(Errno::INVAL | Errno::OPNOTSUPP) => off,
        Err(e) => return Err(e.into()),
    };
    let end = match rustix::fs::seek(file, SeekFrom::Hole(start)) {
        Ok(h) => h,
        Err(Errno::INVAL | Errno::OPNOTSUPP) => rustix::fs::fstat(file)?.st_size as u64,
        Err(e) => return Err(e.into()),
    };
    Ok((end > start).then_some((start, end)))
}

/// Runs `side` on another thread while `main` runs on this one (large
/// writes, whose checksums need not wait for them): `main`'s error, or
/// `side`'s result, `None` if no thread could be made or `pages` (what
/// `main` writes) are too few to be worth one (the caller then computes it
/// itself).
pub(crate) fn beside<T: Send, E>(
    pages: usize,
    side: impl FnOnce() -> T + Send,
    main: impl FnOnce() -> Result<(), E>,
) -> Result<Option<T>, E> {
    // Below 4 MiB a thread costs more than it saves.
    if pages < 1024 {
        return main().map(|()| None);
    }
    std::thread::scope(|s| {
        let worker = std::thread::Builder::new()
            .name("txmap-checksum".into())
            .spawn_scoped(s, side);
        main()?;
        Ok(worker.ok().and_then(|w| w.join().ok()))
    })
}

/// Answers "is this byte of a file in a hole?" for offsets met mostly in
/// ascending order, with one `SEEK_DATA`/`SEEK_HOLE` pair per run of data
/// or holes rather than one per page. A hole (or unwritten extent) reads as
/// zeros, so callers skip reading it. Errors and file systems that cannot
/// tell answer "data", which is always correct. Valid while nobody writes
/// the file's bytes being asked about.
#[derive(Default)]
pub(crate) struct Holes {
    /// `[from, hole_end)` is a hole, `[hole_end, data_end)` data.
    known: Option<(u64, u64, u64)>,
}

impl Holes {
    /// Whether `off` lies in a hole, and how many bytes of the same kind
    /// follow from it.
    pub(crate) fn at(&mut self, file: impl AsFd, off: u64) -> (bool, u64) {
        let fresh = match self.known {
            Some((from, _, data_end)) => off < from || off >= data_end,
            None => true,
        };
        if fresh {
            self.known = Some(match next_data(file, off) {
                Ok(Some((start, end))) => (off, start.max(off), end.max(off + 1)),
                Ok(None) => (off, u64::MAX, u64::MAX),
                Err(_) => (off, off, off + 1),
            });
        }
        let (_, hole_end, data_end) = self.known.unwrap_or((off, off, off + 1));
        if off < hole_end {
            (true, hole_end - off)
        } else {
            (false, data_end - off)
        }
    }
}

/// Allocates disk blocks for `[off, off + len)` of `file` (a hole or past
/// its end), extending it if needed; where the file system cannot allocate
/// (`EOPNOTSUPP`), writes zeros there instead.
pub(crate) fn allocate_range(file: &File, off: u64, len: u64) -> std::io::Result<()> {
    use rustix::io::Errno;
    match rustix::fs::fallocate(file, rustix::fs::FallocateFlags::empty(), off, len) {
        Ok(()) => return Ok(()),
        Err(Errno::OPNOTSUPP | Errno::NOSYS) => {}
        Err(e) => return Err(e.into()),
    }
    if file.metadata()?.len() < off + len {
        file.set_len(off + len)?;
    }
    let zeros = vec![0u8; 1 << 20];
    let mut at = off;
    while at < off + len {
        let n = (off + len - at).min(zeros.len() as u64) as usize;
        file.write_all_at(&zeros[..n], at)?;
        at += n as u64;
    }
    Ok(())
}

/// Makes a directory entry durable (after creating or renaming a file in it).
pub fn sync_dir(dir: &Path) -> std::io::Result<()> {
    let d = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    File::open(d)?.sync_all()?;
    crate::debug::note_dir_sync(dir);
    Ok(())
}

/// Creates `dir` and its missing ancestors, each made durable (its parent
/// synced) before this returns: otherwise a power loss could take the
/// directory, and every region and commit in it, with it.
pub fn create_dir_durable(dir: &Path) -> std::io::Result<()> {
    if dir.as_os_str().is_empty() || dir.is_dir() {
        return Ok(());
    }
    let parent = dir.parent().unwrap_or(Path::new(""));
    create_dir_durable(parent)?;
    match std::fs::create_dir(dir) {
        Ok(()) => {}
        // Another process made it: it may not have synced it yet.
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && dir.is_dir() => {}
        Err(e) => return Err(e),
    }
    sync_dir(parent)
}

#[cfg(test)]
mod tests {
    use super::{FileStorage, Storage};

    /// More buffers than one `pwritev` takes, of uneven sizes: the file
    /// holds them one after the other from the offset.
    #[test]
    fn vectored_writes_land_in_order_across_system_calls() {
        let d = std::env::temp_dir().join(format!("txmap-io-vec-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        let f = FileStorage::open(&d.join("f"), true).unwrap();
        let bufs: Vec<Vec<u8>> = (0..2500u32)
            .map(|i| vec![(i % 251) as u8; 1 + (i as usize * 7) % 300])
            .collect();
        let refs: Vec<&[u8]> = bufs.iter().map(|b| &b[..]).collect();
        f.write_all_vectored_at(&refs, 100).unwrap();
        let want: Vec<u8> = bufs.concat();
        let mut got = vec![0u8; want.len()];
        f.read_at(&mut got, 100).unwrap();
        assert!(got == want, "the bytes differ from the buffers in order");
        assert_eq!(f.len().unwrap(), 100 + want.len() as u64);
        std::fs::remove_dir_all(&d).unwrap();
    }
}
