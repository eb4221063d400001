//! Round durability (Thistle) in the native C API.

use std::ffi::c_int;

use crate::native::{txmap_view, view_mut};
use crate::{guarded, status};

/// Enters round mode on the view: a transaction stays open, so loads and
/// stores through the view need no `txmap_begin`; `txmap_round` ends each
/// round. `TXMAP_EINVAL` inside a transaction.
///
/// # Safety
/// `view` is NULL or a live view handle, not in use by another thread.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn txmap_round_start(view: *mut txmap_view) -> c_int {
    status(guarded("txmap_round_start", || {
        // SAFETY: per this function's contract.
        Ok(unsafe { view_mut(view) }?.start_rounds()?)
    }))
}

/// Ends the current round: every store since the last round becomes
/// durable atomically (a crash leaves the region at the last completed
/// round), and the next round opens, also when this one failed
/// (`TXMAP_CONFLICT`: another commit wrote a page this round wrote, or
/// `TXMAP_ETOOLARGE`: the round is over the transaction limit; its stores
/// are discarded). `TXMAP_ENOTXN` outside round mode.
///
/// # Safety
/// `view` is NULL or a live view handle, not in use by another thread.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn txmap_round(view: *mut txmap_view) -> c_int {
    status(guarded("txmap_round", || {
        // SAFETY: per this function's contract.
        Ok(unsafe { view_mut(view) }?.round()?)
    }))
}

/// Leaves round mode; the stores since the last round are discarded.
///
/// # Safety
/// `view` is NULL or a live view handle, not in use by another thread.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn txmap_round_stop(view: *mut txmap_view) -> c_int {
    status(guarded("txmap_round_stop", || {
        // SAFETY: per this function's contract.
        unsafe { view_mut(view) }?.stop_rounds();
        Ok(())
    }))
}
