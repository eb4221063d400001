//! The C API of txmap: the native `txmap_*` calls ([`native`]), the
//! LIBXAC-style calls ([`xac`]), the collections' calls ([`collections`]) and
//! backup, restore, compact and region options ([`media`]),
//! over the `txmap` crate's public API. The `txmap-clib` crate builds it
//! into `libtxmap.so` (SONAME `libtxmap.so.0`) and `libtxmap.a`. The header
//! `include/txmap.h` is generated from this crate by `scripts/gen-header.sh`
//! (cbindgen); `scripts/install.sh` installs both with a `txmap.pc`.
//!
//! Conventions shared by every exported function:
//!
//! * No call ever unwinds into C: each catches Rust panics and reports them
//!   as [`TXMAP_EINTERNAL`] (native calls) or `-1` with `errno`
//!   `ENOTRECOVERABLE` (LIBXAC calls).
//! * Null pointers are rejected with [`TXMAP_EINVAL`] (`EINVAL`), except that
//!   the `*_close` calls accept `NULL` and do nothing, like `free`.
//! * After a failed call, [`txmap_errmsg`] returns a message that says what
//!   went wrong, on the calling thread.

#![cfg(all(target_os = "linux", target_arch = "x86_64"))]
#![deny(unsafe_op_in_unsafe_fn)]
#![deny(clippy::undocumented_unsafe_blocks)]

use std::cell::RefCell;
use std::ffi::{CStr, CString, OsStr, c_char, c_int};
use std::os::unix::ffi::OsStrExt;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;

use txmap::Error;

pub mod collections;
pub mod env;
pub mod media;
pub mod native;
pub mod ops;
pub mod ordered;
pub mod plain;
pub mod rounds;
pub mod xac;

pub use collections::*;
pub use env::*;
pub use media::*;
pub use native::*;
pub use ops::*;
pub use ordered::*;
pub use plain::*;
pub use rounds::*;
pub use xac::*;

/// Success.
pub const TXMAP_OK: c_int = 0;
/// The transaction conflicted with a concurrent commit; nothing of it is
/// visible. Retry it.
pub const TXMAP_CONFLICT: c_int = -1;
/// The transaction was aborted by the program (`txmap_abort`); nothing of it
/// is visible.
pub const TXMAP_ABORTED: c_int = -2;
/// Invalid argument, or a call not allowed in the current state (for example
/// `txmap_commit` outside a transaction, or a store in a read-only
/// transaction).
pub const TXMAP_EINVAL: c_int = -3;
/// A system call on a region or log file failed (see `txmap_errmsg`).
pub const TXMAP_EIO: c_int = -4;
/// A region or log file holds bytes that txmap cannot have written.
pub const TXMAP_ECORRUPT: c_int = -5;
/// A LIBXAC transaction of another thread is open, or the process already
/// called `xInit`.
pub const TXMAP_EBUSY: c_int = -6;
/// A memory-mapping system call failed (usually `ENOMEM` or
/// `vm.max_map_count`).
pub const TXMAP_EOS: c_int = -7;
/// An earlier write or sync failed; close and reopen the region to recover
/// from its log.
pub const TXMAP_EPOISONED: c_int = -8;
/// The operation is not supported (yet).
pub const TXMAP_ENOTSUP: c_int = -9;
/// A bug in txmap (a caught Rust panic); the handle may be unusable.
pub const TXMAP_EINTERNAL: c_int = -10;
/// The region's snapshot limit expired the transaction's snapshot (it fell
/// too far behind); nothing of it is visible. Run it again.
pub const TXMAP_ESNAPSHOT: c_int = -11;
/// The shared version store is full (old snapshots hold versions, or
/// /dev/shm is full); the commit did not happen.
pub const TXMAP_ENOSPACE: c_int = -12;

/// A view could not be mapped at its address: something else is mapped
/// there (`txmap_errmsg` names the range, the region and what holds it).
/// Nothing was mapped elsewhere instead.
pub const TXMAP_EADDR: c_int = -13;
/// The region is open read-only (its files are not writable by this
/// process, or it was opened with `TXMAP_OPEN_READ_ONLY`): a commit that
/// stored, a grow or a checkpoint cannot happen.
pub const TXMAP_EREADONLY: c_int = -14;
/// A file to be created exists already (`txmap_region_create` on an
/// existing path, or another process is creating it).
pub const TXMAP_EEXIST: c_int = -15;
/// The file is not a txmap region (no valid region header), or a log file
/// was named instead of its region.
pub const TXMAP_ENOTREGION: c_int = -16;
/// A size or transaction exceeds a limit: a region larger than its maximum
/// size, more pages read or written than one transaction may, too many
/// views.
pub const TXMAP_ETOOLARGE: c_int = -17;
/// The call needs an open transaction (commit, abort, a store through the
/// accessors, `txmap_set_page_access`).
pub const TXMAP_ENOTXN: c_int = -18;
/// A store inside a read-only transaction (`TXMAP_READ_ONLY`); the
/// transaction was rolled back.
pub const TXMAP_ESTOREREADONLY: c_int = -19;
/// A region or view used in a process forked after it was opened: the
/// child must open the region itself.
pub const TXMAP_EFORK: c_int = -20;
/// Other processes have the region open with other settings (durability,
/// snapshot limit, fixed address, txmap version): open it with theirs, or
/// when they have closed it.
pub const TXMAP_EINCOMPAT: c_int = -21;
/// A byte range outside the region.
pub const TXMAP_ERANGE: c_int = -22;
/// The region's log holds an operation this process has not registered
/// (`txmap_op_register`); `txmap_errmsg` names its id and commit. Nothing
/// was changed.
pub const TXMAP_EUNKNOWNOP: c_int = -23;
/// An ordered commit's number was skipped before it could commit (its
/// group's next number is past it); nothing of the transaction is visible.
pub const TXMAP_ESKIPPED: c_int = -24;
/// A plain file (`txmap_open_plain`) was changed by another program since
/// txmap last closed it (its length or modification time differs); nothing
/// was written. `TXMAP_ACCEPT_CHANGES` takes it as it is.
pub const TXMAP_ECHANGED: c_int = -25;
/// A commit across several regions cannot be decided or made: a region it
/// wrote is missing, renamed or damaged, a process died inside it (close
/// the region everywhere and reopen it), or another region holds it in
/// doubt (open that region first).
pub const TXMAP_EGROUP: c_int = -26;

/// Why an exported call failed: its return code, the `errno` the LIBXAC calls
/// set, and the message for `txmap_errmsg`.
pub(crate) struct Failure {
    pub code: c_int,
    pub errno: c_int,
    pub msg: String,
}

impl Failure {
    pub fn new(code: c_int, errno: c_int, msg: impl Into<String>) -> Failure {
        Failure {
            code,
            errno,
            msg: msg.into(),
        }
    }

    pub fn invalid(msg: impl Into<String>) -> Failure {
        Failure::new(TXMAP_EINVAL, libc::EINVAL, msg)
    }

    pub fn null(arg: &str) -> Failure {
        Failure::invalid(format!("argument `{arg}` is NULL"))
    }
}

impl From<Error> for Failure {
    fn from(e: Error) -> Failure {
        let os = |s: &std::io::Error, default| s.raw_os_error().unwrap_or(default);
        let (code, errno) = match &e {
            Error::Io { source, .. } => (TXMAP_EIO, os(source, libc::EIO)),
            Error::Corrupt { .. } => (TXMAP_ECORRUPT, libc::EIO),
            Error::Conflict => (TXMAP_CONFLICT, libc::EAGAIN),
            Error::Aborted => (TXMAP_ABORTED, libc::ECANCELED),
            Error::Invalid(_) => (TXMAP_EINVAL, libc::EINVAL),
            Error::Os { source, .. } => (TXMAP_EOS, os(source, libc::ENOMEM)),
            Error::Poisoned(_) => (TXMAP_EPOISONED, libc::EIO),
            Error::SnapshotTooOld { .. } => (TXMAP_ESNAPSHOT, libc::ESTALE),
            Error::VersionStoreFull { .. } => (TXMAP_ENOSPACE, libc::ENOSPC),
            Error::AddressTaken { .. } => (TXMAP_EADDR, libc::EEXIST),
            Error::ReadOnly { .. } => (TXMAP_EREADONLY, libc::EROFS),
            Error::Exists { .. } => (TXMAP_EEXIST, libc::EEXIST),
            Error::NotARegion { .. } => (TXMAP_ENOTREGION, libc::EINVAL),
            Error::TooLarge(_) => (TXMAP_ETOOLARGE, libc::EFBIG),
            Error::NotInTransaction { .. } => (TXMAP_ENOTXN, libc::EINVAL),
            Error::StoreInReadOnlyTransaction => (TXMAP_ESTOREREADONLY, libc::EPERM),
            Error::ForkedChild { .. } => (TXMAP_EFORK, libc::EPERM),
            Error::Incompatible { .. } => (TXMAP_EINCOMPAT, libc::EBUSY),
            Error::OutOfRange { .. } => (TXMAP_ERANGE, libc::EINVAL),
            Error::UnknownOperation { .. } => (TXMAP_EUNKNOWNOP, libc::ENOSYS),
            Error::OrderSkipped { .. } => (TXMAP_ESKIPPED, libc::ECANCELED),
            Error::PlainFileChanged { .. } => (TXMAP_ECHANGED, libc::ESTALE),
            Error::Unsupported { .. } => (TXMAP_ENOTSUP, libc::ENOTSUP),
            Error::Group { .. } => (TXMAP_EGROUP, libc::EIO),
        };
        Failure::new(code, errno, e.to_string())
    }
}

thread_local! {
    static LAST_ERROR: RefCell<Option<CString>> = const { RefCell::new(None) };
}

/// Records `msg` as the calling thread's last error message.
fn set_errmsg(msg: String) {
    let mut bytes = msg.into_bytes();
    bytes.retain(|&b| b != 0);
    let c = CString::new(bytes).unwrap_or_default();
    let _ = LAST_ERROR.try_with(|m| {
        if let Ok(mut m) = m.try_borrow_mut() {
            *m = Some(c);
        }
    });
}

/// Sets the calling thread's `errno`.
pub(crate) fn set_errno(code: c_int) {
    // SAFETY: `__errno_location` returns a valid pointer to the calling
    // thread's errno, which lives as long as the thread.
    unsafe { *libc::__errno_location() = code };
}

/// Runs the body of exported function `name`: catches panics and records the
/// message of any failure for `txmap_errmsg`.
pub(crate) fn guarded<T>(name: &str, f: impl FnOnce() -> Result<T, Failure>) -> Result<T, Failure> {
    let r = match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(payload) => {
            let what = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            Err(Failure::new(
                TXMAP_EINTERNAL,
                libc::ENOTRECOVERABLE,
                format!("internal error (please report): {what}"),
            ))
        }
    };
    r.inspect_err(|e| set_errmsg(format!("{name}: {}", e.msg)))
}

/// The status code of a native call's result.
pub(crate) fn status(r: Result<(), Failure>) -> c_int {
    match r {
        Ok(()) => TXMAP_OK,
        Err(e) => e.code,
    }
}

/// A path argument (any bytes but NUL; need not be UTF-8).
///
/// # Safety
/// `p` is NULL or points to a NUL-terminated string that outlives `'a`.
pub(crate) unsafe fn path_arg<'a>(p: *const c_char, arg: &str) -> Result<&'a Path, Failure> {
    if p.is_null() {
        return Err(Failure::null(arg));
    }
    // SAFETY: non-null, and NUL-terminated and live per the caller's contract.
    let bytes = unsafe { CStr::from_ptr(p) }.to_bytes();
    if bytes.is_empty() {
        return Err(Failure::invalid(format!("argument `{arg}` is empty")));
    }
    Ok(Path::new(OsStr::from_bytes(bytes)))
}

/// Message of the last failed txmap call (native or LIBXAC) on the calling
/// thread, or "" if none failed yet. The string stays valid until the next
/// failing call on this thread; copy it to keep it.
#[unsafe(no_mangle)]
pub extern "C" fn txmap_errmsg() -> *const c_char {
    static EMPTY: &CStr = c"";
    catch_unwind(|| {
        LAST_ERROR
            .try_with(|m| {
                m.try_borrow()
                    .ok()
                    .and_then(|s| s.as_ref().map(|s| s.as_ptr()))
            })
            .ok()
            .flatten()
    })
    .ok()
    .flatten()
    .unwrap_or(EMPTY.as_ptr())
}

/// Every `TXMAP_*` return code with its description: the one table
/// `txmap_strerror` reads (a test checks it covers every code).
const CODES: [(c_int, &CStr); 27] = [
    (TXMAP_OK, c"success"),
    (
        TXMAP_CONFLICT,
        c"transaction conflicted with a concurrent commit; retry it",
    ),
    (TXMAP_ABORTED, c"transaction aborted by the program"),
    (TXMAP_EINVAL, c"invalid argument or call"),
    (TXMAP_EIO, c"I/O error on a region or log file"),
    (TXMAP_ECORRUPT, c"region or log file is corrupt"),
    (TXMAP_EBUSY, c"region or transaction is busy"),
    (TXMAP_EOS, c"memory-mapping call failed"),
    (
        TXMAP_EPOISONED,
        c"region unusable after an I/O failure; reopen it",
    ),
    (TXMAP_ENOTSUP, c"operation not supported"),
    (TXMAP_EINTERNAL, c"internal error in txmap"),
    (
        TXMAP_ESNAPSHOT,
        c"transaction's snapshot expired by the region's snapshot limit; retry it",
    ),
    (
        TXMAP_ENOSPACE,
        c"shared version store is full; the commit did not happen",
    ),
    (
        TXMAP_EADDR,
        c"the region's address is taken by another mapping",
    ),
    (
        TXMAP_EREADONLY,
        c"the region is open read-only; nothing was written",
    ),
    (TXMAP_EEXIST, c"the file to create exists already"),
    (TXMAP_ENOTREGION, c"the file is not a txmap region"),
    (
        TXMAP_ETOOLARGE,
        c"a size or a transaction exceeds its limit",
    ),
    (TXMAP_ENOTXN, c"the call needs an open transaction"),
    (
        TXMAP_ESTOREREADONLY,
        c"store inside a read-only transaction; it was rolled back",
    ),
    (
        TXMAP_EFORK,
        c"the handle belongs to the parent process; open the region in the child",
    ),
    (
        TXMAP_EINCOMPAT,
        c"other processes have the region open with other settings",
    ),
    (TXMAP_ERANGE, c"byte range outside the region"),
    (
        TXMAP_EUNKNOWNOP,
        c"the log holds an operation this process has not registered",
    ),
    (TXMAP_ESKIPPED, c"the ordered commit's number was skipped"),
    (
        TXMAP_ECHANGED,
        c"the plain file was changed by another program while no one had it open",
    ),
    (
        TXMAP_EGROUP,
        c"a commit across several regions is in doubt or its regions are missing",
    ),
];

/// A static description of a `TXMAP_*` return code ("unknown code" for
/// others). Never NULL.
#[unsafe(no_mangle)]
pub extern "C" fn txmap_strerror(code: c_int) -> *const c_char {
    CODES
        .iter()
        .find(|(c, _)| *c == code)
        .map_or(c"unknown code", |(_, s)| *s)
        .as_ptr()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Codes are 0 and -1, -2, ... with no gap: each has its own text.
    #[test]
    fn every_code_has_a_description_of_its_own() {
        let text = |c| {
            // SAFETY: txmap_strerror returns a static NUL-terminated string.
            unsafe { CStr::from_ptr(txmap_strerror(c)) }
        };
        let mut seen = std::collections::HashSet::new();
        for c in (TXMAP_EGROUP..=TXMAP_OK).rev() {
            assert_ne!(text(c), c"unknown code", "code {c}");
            assert!(seen.insert(text(c)), "code {c} shares its text");
        }
        assert_eq!(text(TXMAP_EGROUP - 1), c"unknown code");
        assert_eq!(CODES.len(), seen.len());
    }

    fn errmsg() -> String {
        // SAFETY: txmap_errmsg returns a NUL-terminated string valid until
        // the next failing call on this thread.
        unsafe { CStr::from_ptr(txmap_errmsg()) }
            .to_string_lossy()
            .into_owned()
    }

    #[test]
    fn panics_become_internal_errors_with_a_message() {
        let r: Result<(), Failure> = guarded("txmap_test", || panic!("boom"));
        assert_eq!(status(r), TXMAP_EINTERNAL);
        assert!(
            errmsg().contains("txmap_test: internal error"),
            "{}",
            errmsg()
        );
        assert!(errmsg().contains("boom"));
    }

    #[test]
    fn errors_map_to_codes_and_errno() {
        let f = Failure::from(Error::Conflict);
        assert_eq!((f.code, f.errno), (TXMAP_CONFLICT, libc::EAGAIN));
        let f = Failure::from(Error::Io {
            op: "open",
            path: "x".into(),
            source: std::io::Error::from_raw_os_error(libc::ENOENT),
        });
        assert_eq!((f.code, f.errno), (TXMAP_EIO, libc::ENOENT));
        let r = guarded("txmap_test", || {
            Err::<(), _>(Failure::from(Error::Conflict))
        });
        assert_eq!(status(r), TXMAP_CONFLICT);
        assert!(errmsg().starts_with("txmap_test: transaction aborted: conflict"));
    }

    #[test]
    fn messages_never_hold_nul_bytes() {
        set_errmsg("a\0b".into());
        assert_eq!(errmsg(), "ab");
    }
}
