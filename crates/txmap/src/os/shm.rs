//! A file mapped `MAP_SHARED` by every process that has a region open: typed
//! references into it, space allocation, and per-byte liveness locks.
//!
//! The file is created sparse at its full layout size; parts are backed with
//! `fallocate` before first use, so running out of shared memory is an error
//! at allocation time, never a SIGBUS on a later store.

use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use super::mem::{Access, Reservation, round_up};

/// Types that may be viewed in shared memory: every bit pattern is valid
/// (all zeros in particular) and concurrent access goes through atomics or
/// process-shared locks.
///
/// # Safety
/// Implementors must be `repr(C)` structs of atomics, `SharedMutex`es
/// (initialised before use) and arrays of those.
pub unsafe trait SharedPod: Sync {}

// SAFETY: atomics are valid for every bit pattern and Sync.
unsafe impl SharedPod for std::sync::atomic::AtomicU64 {}
// SAFETY: as above.
unsafe impl SharedPod for std::sync::atomic::AtomicU32 {}
// SAFETY: as above.
unsafe impl SharedPod for std::sync::atomic::AtomicU8 {}

/// An open, mapped shared file.
pub struct SharedFile {
    fd: OwnedFd,
    map: Reservation,
    path: PathBuf,
}

impl SharedFile {
    /// Opens (or creates, mode 0600 unless `mode` says otherwise) `path` and maps `len` bytes of it.
    pub fn open(path: &Path, len: usize, mode: u32) -> std::io::Result<SharedFile> {
        use rustix::fs::{Mode, OFlags};
        let fd = rustix::fs::open(
            path,
            OFlags::RDWR | OFlags::CREATE | OFlags::CLOEXEC,
            Mode::from_raw_mode(mode),
        )?;
        Self::map(fd, path, len)
    }

    /// Opens an existing `path` (never creates it) and maps `len` bytes.
    pub fn open_existing(path: &Path, len: usize) -> std::io::Result<SharedFile> {
        use rustix::fs::{Mode, OFlags};
        let fd = rustix::fs::open(path, OFlags::RDWR | OFlags::CLOEXEC, Mode::empty())?;
        Self::map(fd, path, len)
    }

    /// Maps `len` bytes of the open file `fd` (at `path`).
    fn map(fd: OwnedFd, path: &Path, len: usize) -> std::io::Result<SharedFile> {
        let len = round_up(len);
        let map = Reservation::new(len, None)?;
        map.map_shared(0, len, fd.as_fd(), 0, Access::ReadWrite)?;
        Ok(SharedFile {
            fd,
            map,
            path: path.to_path_buf(),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// Current file length.
    pub fn file_len(&self) -> std::io::Result<u64> {
        Ok(rustix::fs::fstat(&self.fd)?.st_size as u64)
    }

    /// Sets the file length (sparse: no memory is used until written).
    pub fn set_len(&self, len: u64) -> std::io::Result<()> {
        rustix::fs::ftruncate(&self.fd, len)?;
        Ok(())
    }

    /// Backs `[off, off + len)` with memory now, or fails (ENOSPC) now.
    pub fn allocate(&self, off: u64, len: u64) -> std::io::Result<()> {
        if len == 0 {
            return Ok(());
        }
        assert!(
            off + len <= self.map.len() as u64,
            "allocation beyond the mapping"
        );
        rustix::fs::fallocate(&self.fd, rustix::fs::FallocateFlags::KEEP_SIZE, off, len)?;
        Ok(())
    }

    /// Maps `[off, off + len)` into this process now, writable
    /// (`MADV_POPULATE_WRITE`), so that stores to a run of pages about to be
    /// filled take one call instead of a page fault each. Only a hint.
    pub fn populate(&self, off: u64, len: u64) {
        assert!(
            off + len <= self.map.len() as u64,
            "population beyond the mapping"
        );
        self.map.populate(off as usize, len as usize, true);
    }

    /// A reference to a `T` at byte offset `off`.
    pub fn at<T: SharedPod>(&self, off: usize) -> &T {
        assert!(
            off + size_of::<T>() <= self.map.len(),
            "shared offset out of range"
        );
        assert!(
            off.is_multiple_of(align_of::<T>()),
            "misaligned shared offset"
        );
        // SAFETY: in range and aligned (checked); the mapping lives as long as
        // self; any bit pattern is a valid T (SharedPod) and T is Sync.
        unsafe { &*(self.map.base().add(off) as *const T) }
    }

    /// `n` consecutive `T`s from byte offset `off`.
    pub fn slice<T: SharedPod>(&self, off: usize, n: usize) -> &[T] {
        assert!(
            off + n * size_of::<T>() <= self.map.len(),
            "shared offset out of range"
        );
        assert!(
            off.is_multiple_of(align_of::<T>()),
            "misaligned shared offset"
        );
        // SAFETY: as in `at`, for n elements.
        unsafe { std::slice::from_raw_parts(self.map.base().add(off) as *const T, n) }
    }

    /// Raw address of byte `off` (page contents copied with `memcpy`).
    pub fn addr(&self, off: usize, len: usize) -> *mut u8 {
        assert!(off + len <= self.map.len(), "shared offset out of range");
        // SAFETY: in range of the mapping.
        unsafe { self.map.base().add(off) }
    }

    /// Takes (`exclusive`) or tests a lock on byte `off` of the file: an
    /// open-file-description lock, released by the kernel when the process
    /// dies. Returns false if another holder has it.
    pub fn lock_byte(&self, off: u64) -> std::io::Result<bool> {
        ofd_lock(&self.fd, off, libc::F_OFD_SETLK, libc::F_WRLCK as i16)
    }

    /// Takes a shared lock on byte `off` (many holders; `lock_byte` by
    /// anyone else fails while one is held). Returns false if an exclusive
    /// holder has it.
    pub fn share_byte(&self, off: u64) -> std::io::Result<bool> {
        ofd_lock(&self.fd, off, libc::F_OFD_SETLK, libc::F_RDLCK as i16)
    }

    /// True if the file at `self.path()` is still the one this maps (it
    /// was not removed or replaced meanwhile).
    pub fn still_at_path(&self) -> bool {
        same_file(self.fd.as_fd(), &self.path)
    }

    /// Releases a byte lock taken by `lock_byte`.
    pub fn unlock_byte(&self, off: u64) -> std::io::Result<()> {
        ofd_lock(&self.fd, off, libc::F_OFD_SETLK, libc::F_UNLCK as i16).map(|_| ())
    }

    /// True if some other open file description holds a lock on byte `off`.
    pub fn byte_locked_by_other(&self, off: u64) -> std::io::Result<bool> {
        ofd_lock(&self.fd, off, libc::F_OFD_GETLK, libc::F_WRLCK as i16).map(|free| !free)
    }
}

/// One `fcntl` OFD lock call on a single byte. For SETLK: true if taken.
/// For GETLK: true if the byte could be locked (nobody else holds it).
fn ofd_lock(fd: &OwnedFd, off: u64, cmd: i32, kind: i16) -> std::io::Result<bool> {
    use std::os::fd::AsRawFd;
    // SAFETY: an all-zero `flock` is a valid value to fill in.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = kind;
    fl.l_whence = libc::SEEK_SET as i16;
    fl.l_start = off as i64;
    fl.l_len = 1;
    // SAFETY: valid fd and a pointer to a live `flock` (OFD commands require l_pid 0).
    let r = unsafe { libc::fcntl(fd.as_raw_fd(), cmd, &mut fl) };
    if r == -1 {
        let e = std::io::Error::last_os_error();
        return match e.raw_os_error() {
            Some(libc::EAGAIN) | Some(libc::EACCES) if cmd == libc::F_OFD_SETLK => Ok(false),
            _ => Err(e),
        };
    }
    if cmd == libc::F_OFD_GETLK {
        return Ok(fl.l_type == libc::F_UNLCK as i16);
    }
    Ok(true)
}

/// True if `fd` is the file now at `path` (same device and inode): it was
/// not removed or replaced since it was opened.
pub fn same_file(fd: std::os::fd::BorrowedFd<'_>, path: &Path) -> bool {
    match (rustix::fs::fstat(fd), rustix::fs::stat(path)) {
        (Ok(a), Ok(b)) => a.st_dev == b.st_dev && a.st_ino == b.st_ino,
        _ => false,
    }
}

/// Is process `pid` still running? (kill with signal 0; EPERM means it exists.)
pub fn process_alive(pid: u32) -> bool {
    let Some(p) = rustix::process::Pid::from_raw(pid as i32) else {
        return false;
    };
    !matches!(
        rustix::process::test_kill_process(p),
        Err(rustix::io::Errno::SRCH)
    )
}
