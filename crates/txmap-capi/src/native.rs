//! The native C API: regions, views and transactions behind opaque handles.
//!
//! Every call returns `TXMAP_OK` (0) or a negative `TXMAP_*` code, and on
//! failure leaves a message for `txmap_errmsg`.

use std::ffi::{c_char, c_int, c_void};

use crate::{Failure, guarded, path_arg, status};
use txmap::{Durability, Error, Isolation, Options, PageAccess, Paused, Region, TxnOptions, View};

/// Region flag: commits return once their log record is written to the OS
/// (they survive a crash of the process, and after power loss the region
/// recovers to a prefix of the commits). Without it commits are durable.
pub const TXMAP_ASYNC: c_int = 1;
/// Region open flag: open read-only, writing nothing to the region's
/// files (a region whose files this process may not write opens read-only
/// without it). A commit that stored fails with `TXMAP_EREADONLY`.
pub const TXMAP_OPEN_READ_ONLY: c_int = 4;

/// Transaction flag: a read-only transaction, which never conflicts; a store
/// in it makes `txmap_commit` fail with `TXMAP_EINVAL`.
pub const TXMAP_READ_ONLY: c_int = 1;
/// Transaction flag: snapshot isolation; only pages written must be unchanged
/// at commit (write skew is possible). Without it transactions are
/// serializable.
pub const TXMAP_SNAPSHOT: c_int = 2;

/// Access for `txmap_set_page_access`: the transaction will read the pages.
pub const TXMAP_ACCESS_READ: c_int = 1;
/// Access for `txmap_set_page_access`: the transaction will write the pages.
pub const TXMAP_ACCESS_WRITE: c_int = 2;

/// An open region (a data file and its log). Opaque.
#[allow(non_camel_case_types)]
pub struct txmap_region {
    pub(crate) region: Region,
}

/// A view: one mapping of a region, used by one thread at a time. Opaque.
#[allow(non_camel_case_types)]
pub struct txmap_view {
    view: View,
}

pub(crate) fn region_options(flags: c_int) -> Result<Options, Failure> {
    if flags & !(TXMAP_ASYNC | TXMAP_OPEN_READ_ONLY) != 0 {
        return Err(Failure::invalid(format!("unknown region flags {flags:#x}")));
    }
    Ok(Options {
        read_only: flags & TXMAP_OPEN_READ_ONLY != 0,
        durability: if flags & TXMAP_ASYNC != 0 {
            Durability::Async
        } else {
            Durability::Durable
        },
        ..Options::default()
    })
}

/// Stores a new region handle in `*out`.
///
/// # Safety
/// `out` is NULL or valid for a write.
pub(crate) unsafe fn put_region(
    out: *mut *mut txmap_region,
    open: impl FnOnce() -> Result<Region, Error>,
) -> Result<(), Failure> {
    if out.is_null() {
        return Err(Failure::null("out"));
    }
    // SAFETY: non-null and writable per the caller's contract.
    unsafe { *out = std::ptr::null_mut() };
    let region = open()?;
    let h = Box::into_raw(Box::new(txmap_region { region }));
    // SAFETY: as above.
    unsafe { *out = h };
    Ok(())
}

/// # Safety
/// `r` is NULL or a live handle from `txmap_region_create`/`txmap_region_open`.
pub(crate) unsafe fn region_ref<'a>(r: *const txmap_region) -> Result<&'a txmap_region, Failure> {
    // SAFETY: per the caller's contract.
    unsafe { r.as_ref() }.ok_or_else(|| Failure::null("region"))
}

/// # Safety
/// `v` is NULL or a live handle from `txmap_view_open`, not in use by
/// another thread.
pub(crate) unsafe fn view_mut<'a>(v: *mut txmap_view) -> Result<&'a mut View, Failure> {
    // SAFETY: per the caller's contract.
    unsafe { v.as_mut() }
        .map(|h| &mut h.view)
        .ok_or_else(|| Failure::null("view"))
}

/// Creates a new zero-filled region of `size` bytes (a positive multiple of
/// 4096) at `path`, plus its log `path-log`, and opens it. Fails with
/// `TXMAP_EINVAL` if `path` exists. `flags`: 0 or `TXMAP_ASYNC`. On success
/// `*out` is the new handle; on failure it is set to NULL.
///
/// # Safety
/// `path` is NULL or a NUL-terminated string; `out` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn txmap_region_create(
    path: *const c_char,
    size: u64,
    flags: c_int,
    out: *mut *mut txmap_region,
) -> c_int {
    // SAFETY: the same contract.
    unsafe { txmap_region_create_at(path, size, flags, 0, out) }
}

/// Like `txmap_region_create`, recording `address` as the region's fixed
/// address (`txmap_region_address`; 0: chosen at random as by
/// `txmap_region_create`). It must be a multiple of 4096 with room for the
/// view reservation (64 GiB) below 128 TiB, else `TXMAP_EINVAL`.
///
/// # Safety
/// `path` is NULL or a NUL-terminated string; `out` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn txmap_region_create_at(
    path: *const c_char,
    size: u64,
    flags: c_int,
    address: usize,
    out: *mut *mut txmap_region,
) -> c_int {
    status(guarded("txmap_region_create_at", || {
        // SAFETY: per this function's contract.
        let path = unsafe { path_arg(path, "path") }?;
        let mut opts = region_options(flags)?;
        opts.address = (address != 0).then_some(address);
        // SAFETY: per this function's contract.
        unsafe { put_region(out, || Region::create(path, size, opts)) }
    }))
}

/// Opens the existing region at `path`, recovering it from its log if a
/// process died with it open. Other processes (and handles) may have it open
/// at once; `flags` (0 or `TXMAP_ASYNC`) must then match theirs, else
/// `TXMAP_EINVAL`. `TXMAP_OPEN_READ_ONLY` opens it read-only, and so does a
/// region whose files this process may not write. On failure `*out` is set
/// to NULL.
///
/// # Safety
/// `path` is NULL or a NUL-terminated string; `out` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn txmap_region_open(
    path: *const c_char,
    flags: c_int,
    out: *mut *mut txmap_region,
) -> c_int {
    status(guarded("txmap_region_open", || {
        // SAFETY: per this function's contract.
        let path = unsafe { path_arg(path, "path") }?;
        let opts = region_options(flags)?;
        // SAFETY: per this function's contract.
        unsafe { put_region(out, || Region::open(path, opts)) }
    }))
}

/// Opens the existing region at `path` like `txmap_region_open`, asking for
/// a snapshot limit: a transaction whose snapshot falls more than `max_lag`
/// commits behind, or the oldest one while old page versions take more than
/// `max_version_bytes` of shared memory, is expired: its next commit fails
/// with `TXMAP_ESNAPSHOT`. 0 means no limit (the default of
/// `txmap_region_open`, under which read-only transactions are never
/// expired unless the version store is full). The first process to open the
/// region sets its limit; a later one asking for another gets
/// `TXMAP_EINVAL`.
///
/// # Safety
/// `path` is NULL or a NUL-terminated string; `out` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn txmap_region_open_limited(
    path: *const c_char,
    flags: c_int,
    max_lag: u64,
    max_version_bytes: u64,
    out: *mut *mut txmap_region,
) -> c_int {
    status(guarded("txmap_region_open_limited", || {
        // SAFETY: per this function's contract.
        let path = unsafe { path_arg(path, "path") }?;
        let mut opts = region_options(flags)?;
        opts.snapshot_limit = txmap::SnapshotLimit {
            max_lag: (max_lag != 0).then_some(max_lag),
            max_version_bytes: (max_version_bytes != 0).then_some(max_version_bytes),
        };
        // SAFETY: per this function's contract.
        unsafe { put_region(out, || Region::open(path, opts)) }
    }))
}

/// Closes a region handle. Views opened on it stay usable; the region is
/// checkpointed and closed when its last view is closed too. NULL is
/// accepted and ignored.
///
/// # Safety
/// `region` is NULL or a live region handle, not used again afterwards.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn txmap_region_close(region: *mut txmap_region) -> c_int {
    status(guarded("txmap_region_close", || {
        if !region.is_null() {
            // SAFETY: a live handle made by Box::into_raw, given up by the caller.
            drop(unsafe { Box::from_raw(region) });
        }
        Ok(())
    }))
}

/// Bytes in the region, or 0 if `region` is NULL.
///
/// # Safety
/// `region` is NULL or a live region handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn txmap_region_size(region: *const txmap_region) -> u64 {
    guarded("txmap_region_size", || {
        // SAFETY: per this function's contract.
        Ok(unsafe { region_ref(region) }?.region.size())
    })
    .unwrap_or(0)
}

/// Grows the region to at least `size` bytes (rounded up to 4096); new bytes
/// are zero. Views map the new pages at their next transaction (or at once
/// with `txmap_view_grow`).
///
/// # Safety
/// `region` is NULL or a live region handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn txmap_region_grow(region: *mut txmap_region, size: u64) -> c_int {
    status(guarded("txmap_region_grow", || {
        // SAFETY: per this function's contract.
        Ok(unsafe { region_ref(region) }?.region.grow(size)?)
    }))
}

/// Copies committed data into the region file and empties the log when no
/// open transaction needs older data.
///
/// # Safety
/// `region` is NULL or a live region handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn txmap_region_checkpoint(region: *mut txmap_region) -> c_int {
    status(guarded("txmap_region_checkpoint", || {
        // SAFETY: per this function's contract.
        Ok(unsafe { region_ref(region) }?.region.checkpoint()?)
    }))
}

/// Makes every commit so far durable (useful with `TXMAP_ASYNC`).
///
/// # Safety
/// `region` is NULL or a live region handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn txmap_region_sync(region: *mut txmap_region) -> c_int {
    status(guarded("txmap_region_sync", || {
        // SAFETY: per this function's contract.
        Ok(unsafe { region_ref(region) }?.region.sync()?)
    }))
}

/// Opens a new view of the region. A view is used by one thread at a time;
/// open one per thread. On failure `*out` is set to NULL.
///
/// # Safety
/// `region` is NULL or a live region handle; `out` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn txmap_view_open(
    region: *mut txmap_region,
    out: *mut *mut txmap_view,
) -> c_int {
    status(guarded("txmap_view_open", || {
        // SAFETY: per this function's contract.
        unsafe { put_view(region, out, Region::view) }
    }))
}

/// Opens a new view of the region at address `addr`, or at the region's
/// fixed address (`txmap_region_address`) when `addr` is 0, so that raw
/// pointers stored in the region are valid in every process and execution
/// that maps it there. It is never mapped elsewhere: when something is
/// mapped in the range (another view of this process at that address, or
/// one inherited through `fork` and not closed) it fails with `TXMAP_EADDR`,
/// and `txmap_errmsg` names the range, the region and what holds it. One
/// view per process can be at an address at a time; its memory is freed
/// when it closes. On failure `*out` is set to NULL.
///
/// # Safety
/// `region` is NULL or a live region handle; `out` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn txmap_view_open_at(
    region: *mut txmap_region,
    addr: usize,
    out: *mut *mut txmap_view,
) -> c_int {
    status(guarded("txmap_view_open_at", || {
        // SAFETY: per this function's contract.
        unsafe {
            put_view(region, out, |r| match addr {
                0 => r.view_fixed(),
                a => r.view_at(a),
            })
        }
    }))
}

/// Opens a view of `region` with `open` and stores its handle in `*out`.
///
/// # Safety
/// `region` is NULL or a live region handle; `out` is NULL or writable.
unsafe fn put_view(
    region: *mut txmap_region,
    out: *mut *mut txmap_view,
    open: impl FnOnce(&Region) -> Result<View, Error>,
) -> Result<(), Failure> {
    if out.is_null() {
        return Err(Failure::null("out"));
    }
    // SAFETY: non-null and writable per the caller's contract.
    unsafe { *out = std::ptr::null_mut() };
    // SAFETY: per the caller's contract.
    let view = open(&unsafe { region_ref(region) }?.region)?;
    let h = Box::into_raw(Box::new(txmap_view { view }));
    // SAFETY: as above.
    unsafe { *out = h };
    Ok(())
}

/// The region's fixed address: where `txmap_view_open_at(region, 0, ...)`
/// and `xMmap` map it in every process and every execution. It is chosen
/// at random in 17–64 TiB when the region is created (or given to
/// `txmap_region_create_at`) and recorded in the region file. 0 if
/// `region` is NULL (or the region has none).
///
/// # Safety
/// `region` is NULL or a live region handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn txmap_region_address(region: *const txmap_region) -> usize {
    guarded("txmap_region_address", || {
        // SAFETY: per this function's contract.
        Ok(unsafe { region_ref(region) }?.region.address().unwrap_or(0))
    })
    .unwrap_or(0)
}

/// Closes a view, rolling back its open transaction if any. Its memory is
/// unmapped: pointers into it become invalid. NULL is accepted and ignored.
///
/// # Safety
/// `view` is NULL or a live view handle, not used again afterwards.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn txmap_view_close(view: *mut txmap_view) -> c_int {
    status(guarded("txmap_view_close", || {
        if !view.is_null() {
            // SAFETY: a live handle made by Box::into_raw, given up by the caller.
            drop(unsafe { Box::from_raw(view) });
        }
        Ok(())
    }))
}

/// Address of byte 0 of the region in this view, or NULL if `view` is NULL.
/// Inside a transaction the memory may be read and written with plain loads
/// and stores; outside one it is read-only and shows committed data, not
/// necessarily the latest (pages keep their content as of the view's last
/// transaction), and a store crashes the program. A view whose address was
/// asked for is read by plain loads: its first transaction, if read-only,
/// maps the region file over the whole range when it can, so its first
/// loads take only the kernel's faults.
///
/// # Safety
/// `view` is NULL or a live view handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn txmap_view_base(view: *mut txmap_view) -> *mut c_void {
    guarded("txmap_view_base", || {
        // SAFETY: per this function's contract.
        Ok(unsafe { view_mut(view) }?.base().cast::<c_void>())
    })
    .unwrap_or(std::ptr::null_mut())
}

/// Bytes of the region mapped in this view (0 if `view` is NULL). It catches
/// up with `txmap_region_grow` at the next `txmap_begin`.
///
/// # Safety
/// `view` is NULL or a live view handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn txmap_view_len(view: *mut txmap_view) -> usize {
    guarded("txmap_view_len", || {
        // SAFETY: per this function's contract.
        Ok(unsafe { view_mut(view) }?.len())
    })
    .unwrap_or(0)
}

/// Bytes of private memory this view holds now (0 if `view` is NULL): the
/// pages its open transaction touched plus at most the region's
/// `view_private_pages` (`txmap_options`) kept for later transactions.
///
/// # Safety
/// `view` is NULL or a live view handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn txmap_view_private_bytes(view: *mut txmap_view) -> u64 {
    guarded("txmap_view_private_bytes", || {
        // SAFETY: per this function's contract.
        Ok(unsafe { view_mut(view) }?.private_bytes())
    })
    .unwrap_or(0)
}

/// Grows the region to at least `size` bytes and maps the new pages in this
/// view at once.
///
/// # Safety
/// `view` is NULL or a live view handle, not in use by another thread.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn txmap_view_grow(view: *mut txmap_view, size: u64) -> c_int {
    status(guarded("txmap_view_grow", || {
        // SAFETY: per this function's contract.
        Ok(unsafe { view_mut(view) }?.grow(size)?)
    }))
}

/// The transaction options `flags` names (`txmap_begin`).
fn txn_flags(flags: c_int) -> Result<TxnOptions, Failure> {
    if flags & !(TXMAP_READ_ONLY | TXMAP_SNAPSHOT) != 0 {
        return Err(Failure::invalid(format!(
            "unknown transaction flags {flags:#x}"
        )));
    }
    Ok(TxnOptions {
        read_only: flags & TXMAP_READ_ONLY != 0,
        isolation: if flags & TXMAP_SNAPSHOT != 0 {
            Isolation::Snapshot
        } else {
            Isolation::Serializable
        },
    })
}

/// Begins a transaction on the view. `flags`: 0 (serializable read-write),
/// `TXMAP_READ_ONLY`, `TXMAP_SNAPSHOT`. A nested begin is folded into the
/// outermost transaction (its flags are ignored).
///
/// # Safety
/// `view` is NULL or a live view handle, not in use by another thread.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn txmap_begin(view: *mut txmap_view, flags: c_int) -> c_int {
    status(guarded("txmap_begin", || {
        let opts = txn_flags(flags)?;
        // SAFETY: per this function's contract.
        Ok(unsafe { view_mut(view) }?.begin_with(opts)?)
    }))
}

/// Commits. A nested (inner) commit returns `TXMAP_OK` at once. The
/// outermost returns `TXMAP_OK` once the commit is as durable as the region
/// promises, `TXMAP_CONFLICT` if a concurrent commit changed what it read
/// (nothing of it is visible: retry), `TXMAP_ABORTED` after `txmap_abort`,
/// `TXMAP_EINVAL` after a store in a read-only transaction, `TXMAP_EIO` or
/// `TXMAP_EPOISONED` if the log could not be written (the commit may be
/// visible but not durable; reopen the region to recover). In every case
/// the outermost transaction is over.
///
/// # Safety
/// `view` is NULL or a live view handle, not in use by another thread.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn txmap_commit(view: *mut txmap_view) -> c_int {
    status(guarded("txmap_commit", || {
        // SAFETY: per this function's contract.
        Ok(unsafe { view_mut(view) }?.commit()?)
    }))
}

/// Dooms the whole transaction (whatever the nesting depth): its stores are
/// discarded at once, and the outermost `txmap_commit` returns
/// `TXMAP_ABORTED`. Until then the transaction stays open and its loads see
/// its snapshot (without its discarded stores).
///
/// # Safety
/// `view` is NULL or a live view handle, not in use by another thread.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn txmap_abort(view: *mut txmap_view) -> c_int {
    status(guarded("txmap_abort", || {
        // SAFETY: per this function's contract.
        Ok(unsafe { view_mut(view) }?.abort()?)
    }))
}

/// Ends the transaction now, whatever the nesting depth, discarding its
/// stores. Does nothing outside a transaction.
///
/// # Safety
/// `view` is NULL or a live view handle, not in use by another thread.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn txmap_rollback(view: *mut txmap_view) -> c_int {
    status(guarded("txmap_rollback", || {
        // SAFETY: per this function's contract.
        unsafe { view_mut(view) }?.rollback();
        Ok(())
    }))
}

/// The `n` views at `views`, each a distinct live view handle.
///
/// # Safety
/// `views` is NULL or points to `n` pointers, each NULL or a live view
/// handle, all distinct and not in use by another thread.
unsafe fn views_mut<'a>(
    views: *const *mut txmap_view,
    n: usize,
) -> Result<Vec<&'a mut View>, Failure> {
    if views.is_null() || n == 0 {
        return Err(Failure::invalid("no views given"));
    }
    // SAFETY: per this function's contract.
    let ptrs = unsafe { std::slice::from_raw_parts(views, n) };
    for (i, p) in ptrs.iter().enumerate() {
        if ptrs[..i].contains(p) {
            return Err(Failure::invalid("the same view is given twice"));
        }
    }
    // SAFETY: per this function's contract (distinct handles: no aliasing).
    ptrs.iter().map(|&v| unsafe { view_mut(v) }).collect()
}

/// Begins one serializable transaction over `n` views, each of a different
/// region of one directory: it reads one snapshot of all of them (a commit
/// across them is seen in all or none). `flags` as `txmap_begin`. A nested
/// call (every view already in the transaction) is folded into it.
///
/// # Safety
/// `views` is NULL or points to `n` distinct live view handles, not in use
/// by another thread.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn txmap_group_begin(
    views: *const *mut txmap_view,
    n: usize,
    flags: c_int,
) -> c_int {
    status(guarded("txmap_group_begin", || {
        let opts = txn_flags(flags)?;
        // SAFETY: per this function's contract.
        let mut v = unsafe { views_mut(views, n) }?;
        Ok(View::begin_group_with(&mut v, opts)?)
    }))
}

/// Commits a transaction begun by `txmap_group_begin` atomically across
/// its regions: after a crash at any point all of it is there or none.
/// Returns as `txmap_commit` (`TXMAP_CONFLICT`: nothing of it is visible in
/// any region); `TXMAP_EGROUP` if a process died inside a commit across
/// these regions (close them everywhere and reopen to recover). In every
/// case the outermost transaction is over on every view.
///
/// # Safety
/// `views` is NULL or points to `n` distinct live view handles, not in use
/// by another thread.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn txmap_group_commit(views: *const *mut txmap_view, n: usize) -> c_int {
    status(guarded("txmap_group_commit", || {
        // SAFETY: per this function's contract.
        let mut v = unsafe { views_mut(views, n) }?;
        Ok(View::commit_group(&mut v)?)
    }))
}

/// 1 inside a transaction, 0 outside one (or if `view` is NULL).
///
/// # Safety
/// `view` is NULL or a live view handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn txmap_in_transaction(view: *mut txmap_view) -> c_int {
    guarded("txmap_in_transaction", || {
        // SAFETY: per this function's contract.
        Ok(c_int::from(unsafe { view_mut(view) }?.in_transaction()))
    })
    .unwrap_or(0)
}

/// Declares that the current transaction will read (`TXMAP_ACCESS_READ`) or
/// write (`TXMAP_ACCESS_WRITE`) the `length` bytes at `addr` (inside the
/// view): the pages are brought in and tracked in one call instead of one
/// page fault each. Advisory; fails with `TXMAP_EINVAL` outside a
/// transaction or the view.
///
/// # Safety
/// `view` is NULL or a live view handle, not in use by another thread.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn txmap_set_page_access(
    view: *mut txmap_view,
    addr: *const c_void,
    length: usize,
    access: c_int,
) -> c_int {
    status(guarded("txmap_set_page_access", || {
        // SAFETY: per this function's contract.
        let view = unsafe { view_mut(view) }?;
        set_page_access(view, addr, length, access)
    }))
}

/// `View::set_page_access` by address; shared with `setPageAccess`.
pub(crate) fn set_page_access(
    view: &mut View,
    addr: *const c_void,
    length: usize,
    access: c_int,
) -> Result<(), Failure> {
    let access = match access {
        TXMAP_ACCESS_READ => PageAccess::Read,
        a if a & TXMAP_ACCESS_WRITE != 0 && a & !(TXMAP_ACCESS_READ | TXMAP_ACCESS_WRITE) == 0 => {
            PageAccess::Write
        }
        a => return Err(Failure::invalid(format!("unknown access {a}"))),
    };
    let base = view.base() as usize;
    let off = (addr as usize)
        .checked_sub(base)
        .filter(|&o| o <= view.len())
        .ok_or_else(|| {
            Failure::invalid(format!(
                "address {addr:p} is not inside the view ({base:#x}, {} bytes)",
                view.len()
            ))
        })?;
    Ok(view.set_page_access(off as u64, length, access)?)
}

/// A transaction paused by `txmap_pause`. Opaque.
#[allow(non_camel_case_types)]
pub struct txmap_paused {
    paused: Paused,
}

/// Pauses the view's open transaction (whatever its nesting depth) and
/// stores it in `*out`: the view is then outside any transaction, free for
/// other transactions or committed reads, and the paused transaction's
/// stores are invisible to them. `txmap_resume` continues it with its
/// snapshot, reads and writes as they were; its commit validates it as if
/// it had never been paused. `TXMAP_ENOTXN` outside a transaction.
///
/// # Safety
/// `view` is NULL or a live view handle, not in use by another thread;
/// `out` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn txmap_pause(view: *mut txmap_view, out: *mut *mut txmap_paused) -> c_int {
    status(guarded("txmap_pause", || {
        if out.is_null() {
            return Err(Failure::null("out"));
        }
        // SAFETY: non-null and writable per this function's contract.
        unsafe { *out = std::ptr::null_mut() };
        // SAFETY: per this function's contract.
        let paused = unsafe { view_mut(view) }?.pause()?;
        // SAFETY: as above.
        unsafe { *out = Box::into_raw(Box::new(txmap_paused { paused })) };
        Ok(())
    }))
}

/// Continues a paused transaction on `view` (any view of the same region in
/// this process, outside a transaction). `paused` is consumed whatever the
/// result: on failure (`TXMAP_EINVAL`: the view is in a transaction or maps
/// another region) the paused transaction is rolled back.
///
/// # Safety
/// `view` is NULL or a live view handle, not in use by another thread;
/// `paused` is NULL or a live handle from `txmap_pause`, not used again.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn txmap_resume(view: *mut txmap_view, paused: *mut txmap_paused) -> c_int {
    status(guarded("txmap_resume", || {
        if paused.is_null() {
            return Err(Failure::null("paused"));
        }
        // SAFETY: a live handle made by Box::into_raw, given up by the caller.
        let p = unsafe { Box::from_raw(paused) };
        // SAFETY: per this function's contract.
        Ok(unsafe { view_mut(view) }?.resume(p.paused)?)
    }))
}

/// Rolls back a paused transaction without resuming it. NULL is accepted
/// and ignored.
///
/// # Safety
/// `paused` is NULL or a live handle from `txmap_pause`, not used again.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn txmap_paused_free(paused: *mut txmap_paused) -> c_int {
    status(guarded("txmap_paused_free", || {
        if !paused.is_null() {
            // SAFETY: a live handle made by Box::into_raw, given up by the caller.
            drop(unsafe { Box::from_raw(paused) });
        }
        Ok(())
    }))
}
