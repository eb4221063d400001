//! Writing page images with direct I/O (`O_DIRECT`): from where they are
//! (a view's memory, versions) straight to the device, without copying
//! them into the page cache first. Images adjacent in memory go out as one
//! buffer, so a run of a view's pages is one large request.

use std::os::fd::{AsRawFd, BorrowedFd};
use std::path::Path;

/// Opens `path` (which exists) for direct writes; `None` where the file
/// system refuses direct I/O (tmpfs).
pub fn open(path: &Path) -> Option<std::fs::File> {
    use rustix::fs::{Mode, OFlags};
    rustix::fs::open(
        path,
        OFlags::WRONLY | OFlags::DIRECT | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .ok()
    .map(std::fs::File::from)
}

/// Writes `bufs` one after the other from `off` through `fd` (opened by
/// [`open`]). `Ok(false)`, having written nothing, when a buffer or `off`
/// is not page-aligned; `EINVAL` when the file system refuses after all
/// (the caller writes through the page cache instead).
pub fn write(fd: BorrowedFd<'_>, bufs: &[&[u8]], off: u64) -> std::io::Result<bool> {
    const PAGE: usize = 4096;
    let aligned = |b: &&[u8]| (b.as_ptr() as usize | b.len()).is_multiple_of(PAGE);
    if !off.is_multiple_of(PAGE as u64) || !bufs.iter().all(aligned) {
        return Ok(false);
    }
    // Runs of buffers adjacent in memory, as (address, length).
    let mut runs: Vec<(usize, usize)> = Vec::new();
    for b in bufs.iter().filter(|b| !b.is_empty()) {
        let start = b.as_ptr() as usize;
        match runs.last_mut() {
            Some((s, l)) if *s + *l == start && *l < (1 << 30) => *l += b.len(),
            _ => runs.push((start, b.len())),
        }
    }
    let mut at = off;
    let mut i = 0;
    while i < runs.len() {
        let n = (runs.len() - i).min(1024);
        let iov: Vec<libc::iovec> = runs[i..i + n]
            .iter()
            .map(|&(s, l)| libc::iovec {
                iov_base: s as *mut libc::c_void,
                iov_len: l,
            })
            .collect();
        // SAFETY: each iovec covers bytes of the caller's buffers (adjacent
        // ones joined), readable for the call; the kernel only reads them.
        let r = unsafe {
            libc::pwritev(
                fd.as_raw_fd(),
                iov.as_ptr(),
                n as libc::c_int,
                at as libc::off_t,
            )
        };
        if r < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let mut done = r as usize;
        at += done as u64;
        // A short write: go on from where it stopped (whole pages).
        while done > 0 {
            let (s, l) = runs[i];
            if done >= l {
                done -= l;
                i += 1;
            } else {
                runs[i] = (s + done, l - done);
                done = 0;
            }
        }
        if r == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
    }
    Ok(true)
}
