//! Ordered commits (TxOS+) in the native C API (the LIBXAC-style calls
//! `xorder`/`xorderNext` are in `xac.rs`), and the counts of priority for
//! repeatedly conflicting transactions.

use std::ffi::c_int;

use crate::native::{region_ref, txmap_region, txmap_view, view_mut};
use crate::{Failure, guarded, status};

/// The state of one order group (`txmap_order_status`).
#[repr(C)]
#[derive(Clone, Copy, Default)]
#[allow(non_camel_case_types)]
pub struct txmap_order_state {
    /// The number whose commit comes next: every lower one committed or
    /// was skipped.
    pub next: u64,
    /// The next number `txmap_order_next` hands out.
    pub ticket: u64,
    /// Numbers committed.
    pub committed: u64,
    /// Numbers skipped (holder died, closed its view or gave up, or
    /// `txmap_order_skip_to`).
    pub skipped: u64,
    /// The last number skipped + 1; 0 if none was.
    pub last_skipped_plus_1: u64,
}

/// Claims `number` in order group `group` (0..64) for the view's next
/// commit: that commit waits until every lower number of the group
/// committed or was skipped, then validates as usual (`TXMAP_CONFLICT`
/// keeps the number: run the transaction again). A transaction that
/// stored nothing still waits for its turn and moves the group on. A
/// number whose holder's process dies, or whose view is closed, is skipped
/// when its turn comes. `TXMAP_ESKIPPED` if the number's turn has passed,
/// `TXMAP_EINVAL` if the view holds a number or the group does not exist.
///
/// # Safety
/// `view` is NULL or a live view handle, not in use by another thread.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn txmap_order(view: *mut txmap_view, group: u32, number: u64) -> c_int {
    status(guarded("txmap_order", || {
        // SAFETY: per this function's contract.
        Ok(unsafe { view_mut(view) }?.order(group, number)?)
    }))
}

/// Takes the next number nobody has taken in `group`, claims it as
/// `txmap_order` does and stores it in `*number`. Taking and claiming are
/// one step, so every number handed out is held until it commits or is
/// skipped, even if its process dies; do not mix with `txmap_order` in
/// one group.
///
/// # Safety
/// `view` is NULL or a live view handle, not in use by another thread;
/// `number` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn txmap_order_next(
    view: *mut txmap_view,
    group: u32,
    number: *mut u64,
) -> c_int {
    status(guarded("txmap_order_next", || {
        if number.is_null() {
            return Err(Failure::null("number"));
        }
        // SAFETY: per this function's contract.
        let n = unsafe { view_mut(view) }?.order_next(group)?;
        // SAFETY: checked non-NULL; writable per the contract.
        unsafe { number.write(n) };
        Ok(())
    }))
}

/// Gives up the number the view holds: waits for its turn, then skips it.
/// Not inside a transaction (`TXMAP_EINVAL`).
///
/// # Safety
/// `view` is NULL or a live view handle, not in use by another thread.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn txmap_order_give_up(view: *mut txmap_view) -> c_int {
    status(guarded("txmap_order_give_up", || {
        // SAFETY: per this function's contract.
        Ok(unsafe { view_mut(view) }?.order_give_up()?)
    }))
}

/// Stores the state of order group `group` in `*out`. The order state
/// lives while any process has the region open; it starts at 0 after
/// the last close.
///
/// # Safety
/// `region` is NULL or a live region handle; `out` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn txmap_order_status(
    region: *const txmap_region,
    group: u32,
    out: *mut txmap_order_state,
) -> c_int {
    status(guarded("txmap_order_status", || {
        if out.is_null() {
            return Err(Failure::null("out"));
        }
        // SAFETY: per this function's contract.
        let s = unsafe { region_ref(region) }?.region.order_status(group)?;
        let st = txmap_order_state {
            next: s.next,
            ticket: s.ticket,
            committed: s.committed,
            skipped: s.skipped,
            last_skipped_plus_1: s.last_skipped.map_or(0, |n| n + 1),
        };
        // SAFETY: checked non-NULL; writable per the contract.
        unsafe { out.write(st) };
        Ok(())
    }))
}

/// Moves order group `group` on to `number` if it is behind: every lower
/// number not yet committed is skipped (its holder's commit fails with
/// `TXMAP_ESKIPPED`). The way on after a number nobody holds, and to start
/// a group at a later number after a restart.
///
/// # Safety
/// `region` is NULL or a live region handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn txmap_order_skip_to(
    region: *const txmap_region,
    group: u32,
    number: u64,
) -> c_int {
    status(guarded("txmap_order_skip_to", || {
        // SAFETY: per this function's contract.
        Ok(unsafe { region_ref(region) }?
            .region
            .order_skip_to(group, number)?)
    }))
}

/// Stores in `*taken` how many times a transaction took priority after
/// conflicting repeatedly, and in `*waits` how many commits waited for
/// such a holder, across every process since the region was first opened
/// (README, "Fairness for long transactions"; `TXMAP_NO_PRIORITY` turns
/// priority off). Either pointer may be NULL.
///
/// # Safety
/// `region` is NULL or a live region handle; `taken` and `waits` are NULL
/// or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn txmap_priority_counts(
    region: *const txmap_region,
    taken: *mut u64,
    waits: *mut u64,
) -> c_int {
    status(guarded("txmap_priority_counts", || {
        // SAFETY: per this function's contract.
        let (t, w) = unsafe { region_ref(region) }?.region.priority_counts();
        for (out, v) in [(taken, t), (waits, w)] {
            if !out.is_null() {
                // SAFETY: non-NULL and writable per the contract.
                unsafe { out.write(v) };
            }
        }
        Ok(())
    }))
}
