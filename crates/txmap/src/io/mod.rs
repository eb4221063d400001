//! The I/O backend: every durable change (log append, region write, sync,
//! resize) goes through [`Storage`], so tests can swap in [`sim::SimStorage`],
//! which injects errors and, at a simulated crash, drops or tears unsynced writes.

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
    /// Changes the length (not yet durable); new bytes read as zeros.
    fn set_len(&self, len: u64) -> std::io::Result<()>;
    /// Makes every earlier write and resize durable (`fdatasync`).
    fn sync(&self) -> std::io::Result<()>;
    /// A descriptor whose shared mapping shows the current contents.
    fn fd(&self) -> BorrowedFd<'_>;
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
    fn set_len(&self, len: u64) -> std::io::Result<()> {
        (**self).set_len(len)
    }
    fn sync(&self) -> std::io::Result<()> {
        (**self).sync()
    }
    fn fd(&self) -> BorrowedFd<'_> {
        (**self).fd()
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
        use std::os::unix::fs::OpenOptionsExt;
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
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
    fn set_len(&self, len: u64) -> std::io::Result<()> {
        self.file.set_len(len)
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

/// Makes a directory entry durable (after creating or renaming a file in it).
pub fn sync_dir(dir: &Path) -> std::io::Result<()> {
    let d = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    File::open(d)?.sync_all()
}
