//! Starting writeback of a file range early (`sync_file_range`), so that a
//! later `fdatasync` of a large copy has little left to write.

use std::os::fd::{AsRawFd, BorrowedFd};

/// Asks the kernel to start writing `[off, off + len)` of `fd` to disk now,
/// without waiting. Only a hint: durability still needs a sync.
pub fn start(fd: BorrowedFd<'_>, off: u64, len: u64) -> std::io::Result<()> {
    // SAFETY: sync_file_range reads no memory of ours; `fd` is a live
    // descriptor borrowed for the call.
    let r = unsafe {
        libc::sync_file_range(
            fd.as_raw_fd(),
            off as libc::off64_t,
            len as libc::off64_t,
            libc::SYNC_FILE_RANGE_WRITE,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}
