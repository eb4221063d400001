//! Plain files from C (issue 19 point 2): an existing ordinary file mapped
//! as a region, its bytes at offset 0 (`Region::open_plain`).

use std::ffi::{c_char, c_int};

use crate::media::{options, txmap_options};
use crate::native::{put_region, region_ref, txmap_region};
use crate::{guarded, path_arg, status};
use txmap::Region;

/// Opens the existing ordinary file at `path` as a region whose byte `o` is
/// the file's byte `o`. The first call adopts it: txmap writes its header
/// page to `path-txmap` and makes `path-log` (and `path-sums`), never
/// touching the file; later calls (and `txmap_region_open` of `path`) open
/// it like any region, from several processes at once. When no process has
/// it open, and after recovery, the file holds exactly the committed bytes
/// and keeps its own length (the region is its length rounded up to 4096,
/// at least 4096; bytes stored past the length are dropped at the last
/// close; `txmap_region_grow` makes the file the grown size). A file
/// another program changed while no process had it open fails with
/// `TXMAP_ECHANGED` and nothing is written, unless `opts->flags` has
/// `TXMAP_ACCEPT_CHANGES`. `txmap_backup` and `txmap_compact` refuse plain
/// files with `TXMAP_ENOTSUP`. `opts` may be NULL (the defaults). On
/// failure `*out` is set to NULL.
///
/// # Safety
/// `path` is NULL or a NUL-terminated string; `opts` is NULL or a valid
/// `txmap_options`; `out` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn txmap_region_open_plain(
    path: *const c_char,
    opts: *const txmap_options,
    out: *mut *mut txmap_region,
) -> c_int {
    status(guarded("txmap_region_open_plain", || {
        // SAFETY: per this function's contract.
        let path = unsafe { path_arg(path, "path") }?;
        // SAFETY: per this function's contract.
        let opts = unsafe { options(opts) }?;
        // SAFETY: per this function's contract.
        unsafe { put_region(out, || Region::open_plain(path, opts)) }
    }))
}

/// 1 if the region is a plain file (`txmap_region_open_plain`), 0 if not
/// or if `region` is NULL.
///
/// # Safety
/// `region` is NULL or a live region handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn txmap_region_is_plain(region: *const txmap_region) -> c_int {
    // SAFETY: per this function's contract.
    unsafe { region_ref(region) }.map_or(0, |r| c_int::from(r.region.is_plain()))
}
