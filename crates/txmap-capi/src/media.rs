//! Backup, media recovery and compaction from C, and region options for
//! page checksums, the log reserve and the log archive.

use std::ffi::{c_char, c_int};

use crate::native::{TXMAP_ASYNC, TXMAP_OPEN_READ_ONLY, put_region, region_options, region_ref};
use crate::{Failure, guarded, path_arg, status};
use txmap::{BackupOptions, Region};

/// Flag for `txmap_backup`: leave all-zero pages (never written, or freed
/// heap blocks) as holes in the copy.
pub const TXMAP_BACKUP_COMPACT: c_int = 1;
/// Flag in `txmap_options`: keep no page checksum table (by default every
/// data page a checkpoint writes has a CRC-32C in `path-sums`, verified on
/// the first open and by `txmap check`).
pub const TXMAP_NO_PAGE_CHECKSUMS: c_int = 8;
/// Flag in `txmap_options`: no priority for repeatedly conflicting
/// transactions (by default a transaction whose view conflicted 3 times in
/// a row takes priority: other commits wait until it commits; README,
/// "Fairness for long transactions").
pub const TXMAP_NO_PRIORITY: c_int = 16;
/// Flag in `txmap_options`: open a plain file (`txmap_region_open_plain`)
/// that another program changed while no process had it open, taking its
/// bytes as they are (without it: `TXMAP_ECHANGED`, nothing written).
pub const TXMAP_ACCEPT_CHANGES: c_int = 32;

/// Options for `txmap_region_open_options` and
/// `txmap_region_create_options`. All zero (and NULL) means the defaults of
/// `txmap_region_open`.
#[repr(C)]
#[derive(Clone, Copy)]
#[allow(non_camel_case_types)]
pub struct txmap_options {
    /// `TXMAP_ASYNC`, `TXMAP_OPEN_READ_ONLY`, `TXMAP_NO_PAGE_CHECKSUMS`,
    /// `TXMAP_NO_PRIORITY`, `TXMAP_ACCEPT_CHANGES`.
    pub flags: c_int,
    /// Log bytes kept when a checkpoint empties the log; the file is cut to
    /// this (rounded up to 4 MiB). 0: the default (4 MiB); `UINT64_MAX`:
    /// the log never shrinks.
    pub log_reserve: u64,
    /// A directory where every log epoch is kept (for `txmap_restore`), or
    /// NULL for none. Every process opening the region should name the same.
    pub log_archive: *const c_char,
    /// Pages of private memory each view keeps for later transactions
    /// beyond its open transaction's (`txmap_view_private_bytes`); the rest
    /// goes back to the system. 0: the default (4,096 pages, 16 MiB); the
    /// smallest cache is 1 page.
    pub view_private_pages: u64,
}

/// The Rust options for `o` (NULL: the defaults).
///
/// # Safety
/// `o` is NULL or points to a `txmap_options` whose `log_archive` is NULL
/// or a NUL-terminated string.
pub(crate) unsafe fn options(o: *const txmap_options) -> Result<txmap::Options, Failure> {
    // SAFETY: per the caller's contract.
    let Some(o) = (unsafe { o.as_ref() }) else {
        return Ok(txmap::Options::default());
    };
    let own = TXMAP_NO_PAGE_CHECKSUMS | TXMAP_NO_PRIORITY | TXMAP_ACCEPT_CHANGES;
    let known = TXMAP_ASYNC | TXMAP_OPEN_READ_ONLY | own;
    if o.flags & !known != 0 {
        return Err(Failure::invalid(format!(
            "unknown region flags {:#x}",
            o.flags
        )));
    }
    let mut opts = region_options(o.flags & !own)?;
    opts.accept_outside_changes = o.flags & TXMAP_ACCEPT_CHANGES != 0;
    opts.page_checksums = o.flags & TXMAP_NO_PAGE_CHECKSUMS == 0;
    if o.flags & TXMAP_NO_PRIORITY != 0 {
        opts.priority_after = 0;
    }
    if o.log_reserve != 0 {
        opts.log_reserve = o.log_reserve;
    }
    if o.view_private_pages != 0 {
        opts.view_private_pages = usize::try_from(o.view_private_pages).unwrap_or(usize::MAX);
    }
    if !o.log_archive.is_null() {
        // SAFETY: non-null, NUL-terminated per the caller's contract.
        opts.log_archive = Some(unsafe { path_arg(o.log_archive, "log_archive") }?.to_path_buf());
    }
    Ok(opts)
}

/// Writes `v` to `out` unless it is NULL.
///
/// # Safety
/// `out` is NULL or writable.
unsafe fn put_u64(out: *mut u64, v: u64) {
    if !out.is_null() {
        // SAFETY: non-null and writable per the caller's contract.
        unsafe { *out = v };
    }
}

/// `txmap_region_open` with options (`opts` NULL: the defaults).
///
/// # Safety
/// `path` is NULL or a NUL-terminated string; `opts` is NULL or valid (its
/// `log_archive` NULL or a NUL-terminated string); `out` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn txmap_region_open_options(
    path: *const c_char,
    opts: *const txmap_options,
    out: *mut *mut crate::native::txmap_region,
) -> c_int {
    status(guarded("txmap_region_open_options", || {
        // SAFETY: per this function's contract.
        let path = unsafe { path_arg(path, "path") }?;
        // SAFETY: per this function's contract.
        let opts = unsafe { options(opts) }?;
        // SAFETY: per this function's contract.
        unsafe { put_region(out, || Region::open(path, opts)) }
    }))
}

/// `txmap_region_create` with options (`opts` NULL: the defaults).
///
/// # Safety
/// As `txmap_region_open_options`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn txmap_region_create_options(
    path: *const c_char,
    size: u64,
    opts: *const txmap_options,
    out: *mut *mut crate::native::txmap_region,
) -> c_int {
    status(guarded("txmap_region_create_options", || {
        // SAFETY: per this function's contract.
        let path = unsafe { path_arg(path, "path") }?;
        // SAFETY: per this function's contract.
        let opts = unsafe { options(opts) }?;
        // SAFETY: per this function's contract.
        unsafe { put_region(out, || Region::create(path, size, opts)) }
    }))
}

/// Copies the open region to `dst_path` (and `dst_path-log`,
/// `dst_path-sums`) as of one commit while other threads and processes
/// keep committing; nobody waits for it. The copy is written under
/// temporary names and renamed into place, region file last, so a region
/// at `dst_path` is always a whole copy; it opens without recovery.
/// `flags`: 0 or `TXMAP_BACKUP_COMPACT`. On success `*out_commit` (if not
/// NULL) is the commit the copy holds. `TXMAP_EEXIST` if `dst_path`, its
/// log or its checksum table exists (a copy never replaces a file).
///
/// # Safety
/// `region` is NULL or a live region handle; `dst_path` is NULL or a
/// NUL-terminated string; `out_commit` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn txmap_backup(
    region: *const crate::native::txmap_region,
    dst_path: *const c_char,
    flags: c_int,
    out_commit: *mut u64,
) -> c_int {
    status(guarded("txmap_backup", || {
        if flags & !TXMAP_BACKUP_COMPACT != 0 {
            return Err(Failure::invalid(format!("unknown backup flags {flags:#x}")));
        }
        // SAFETY: per this function's contract.
        let r = unsafe { region_ref(region) }?;
        // SAFETY: per this function's contract.
        let dst = unsafe { path_arg(dst_path, "dst_path") }?;
        let rep = r.region.backup_with(
            dst,
            &BackupOptions {
                compact: flags & TXMAP_BACKUP_COMPACT != 0,
                progress: None,
            },
        )?;
        // SAFETY: per this function's contract.
        unsafe { put_u64(out_commit, rep.commit) };
        Ok(())
    }))
}

/// Rebuilds a region at `dst_path` from the backup at `backup_path` (made
/// by `txmap_backup`, or any closed region) plus the log segments archived
/// in `archive_dir` (`txmap_options.log_archive`): every commit after the
/// backup's up to `to_commit`, or up to the last archived one if
/// `to_commit` is 0. Checks every record's checksum and that no commit is
/// missing: a gap, an archive that ends before `to_commit` or a
/// `to_commit` before the backup's commit is `TXMAP_EINVAL`, a damaged
/// segment `TXMAP_ECORRUPT`, with `txmap_errmsg` naming it; an existing
/// `dst_path` (or its log or checksum table) is `TXMAP_EEXIST`. On failure
/// nothing is left at `dst_path`. On success `*out_commit` (if not NULL)
/// is the commit the region holds; it opens without recovery.
///
/// # Safety
/// The paths are NULL or NUL-terminated strings; `out_commit` is NULL or
/// writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn txmap_restore(
    backup_path: *const c_char,
    archive_dir: *const c_char,
    to_commit: u64,
    dst_path: *const c_char,
    out_commit: *mut u64,
) -> c_int {
    status(guarded("txmap_restore", || {
        // SAFETY: per this function's contract.
        let (backup, archive, dst) = unsafe {
            (
                path_arg(backup_path, "backup_path")?,
                path_arg(archive_dir, "archive_dir")?,
                path_arg(dst_path, "dst_path")?,
            )
        };
        let to = (to_commit != 0).then_some(to_commit);
        let rep = txmap::archive::restore(backup, archive, to, dst)?;
        // SAFETY: per this function's contract.
        unsafe { put_u64(out_commit, rep.commit) };
        Ok(())
    }))
}

/// `txmap_restore` up to a point in time: every archived commit made at or
/// before `to_time_ns` (nanoseconds since the Unix epoch, UTC; replay stops
/// at the first commit made after it). `TXMAP_EINVAL` if the backup's own
/// commit was made after it, or a record to replay carries no time
/// (written by a format-1 build). On success `*out_commit` (if not NULL)
/// is the commit the region holds.
///
/// # Safety
/// As `txmap_restore`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn txmap_restore_to_time(
    backup_path: *const c_char,
    archive_dir: *const c_char,
    to_time_ns: u64,
    dst_path: *const c_char,
    out_commit: *mut u64,
) -> c_int {
    status(guarded("txmap_restore_to_time", || {
        // SAFETY: per this function's contract.
        let (backup, archive, dst) = unsafe {
            (
                path_arg(backup_path, "backup_path")?,
                path_arg(archive_dir, "archive_dir")?,
                path_arg(dst_path, "dst_path")?,
            )
        };
        let target = txmap::archive::RestoreTarget::Time(to_time_ns);
        let rep = txmap::archive::restore_to(backup, archive, target, dst)?;
        // SAFETY: per this function's contract.
        unsafe { put_u64(out_commit, rep.commit) };
        Ok(())
    }))
}

/// Gives back space of the region at `path`, which no process may have
/// open (`TXMAP_EINVAL` otherwise): replays and cuts its log to the
/// smallest reserve, and cuts a region holding the collections' heap above
/// the heap's top (data is never moved; a raw region keeps its size). On
/// success `*out_size` (if not NULL) is the region's data size after.
///
/// # Safety
/// `path` is NULL or a NUL-terminated string; `out_size` is NULL or
/// writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn txmap_compact(path: *const c_char, out_size: *mut u64) -> c_int {
    status(guarded("txmap_compact", || {
        // SAFETY: per this function's contract.
        let path = unsafe { path_arg(path, "path") }?;
        let rep = txmap::compact::compact(path)?;
        // SAFETY: per this function's contract.
        unsafe { put_u64(out_size, rep.size_after) };
        Ok(())
    }))
}
