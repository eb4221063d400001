//! Registered operations from C: `txmap_op_register`, `txmap_apply` and the
//! memory calls an operation uses (`txmap_op_read`, `txmap_op_write`,
//! `txmap_op_size`).

use std::ffi::{c_char, c_int, c_void};

use crate::native::{txmap_view, view_mut};
use crate::{Failure, guarded, status};
use txmap::ops::{self, OpMemory};

/// The bytes an operation works on while it runs (the transaction's
/// memory, or pages being rebuilt by recovery). Valid only during the call.
/// Opaque.
#[allow(non_camel_case_types)]
pub struct txmap_op_mem {
    /// Points at a `&mut dyn OpMemory` on the caller's stack.
    mem: *mut c_void,
}

/// An operation: changes region bytes through `mem`, given `args_len`
/// argument bytes, deterministically (the same bytes and arguments give the
/// same stores: recovery runs it again). Returns 0, or nonzero to fail
/// (the transaction that applied it is aborted). `ctx` is the pointer given
/// to `txmap_op_register`.
#[allow(non_camel_case_types)]
pub type txmap_op_fn = Option<
    unsafe extern "C" fn(
        mem: *mut txmap_op_mem,
        args: *const c_void,
        args_len: usize,
        ctx: *mut c_void,
    ) -> c_int,
>;

/// Registers operation `f` (with `ctx`) under `id`, at least 128 (lower
/// ids are txmap's), for this process: before opening a region whose log
/// may hold it. Registering the same function and context again is
/// allowed; anything else under a taken id fails with `TXMAP_EINVAL`.
/// `name` (copied) is shown in errors; NULL for none.
///
/// # Safety
/// `name` is NULL or a NUL-terminated string; `f` stays callable with
/// `ctx`, from any thread, for the rest of the process.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn txmap_op_register(
    id: u32,
    name: *const c_char,
    f: txmap_op_fn,
    ctx: *mut c_void,
) -> c_int {
    status(guarded("txmap_op_register", || {
        let f = f.ok_or_else(|| Failure::null("f"))?;
        let name = if name.is_null() {
            String::new()
        } else {
            // SAFETY: non-null and NUL-terminated per this function's contract.
            unsafe { std::ffi::CStr::from_ptr(name) }
                .to_string_lossy()
                .into_owned()
        };
        let ctx = ctx as usize;
        let key = (f as usize).wrapping_mul(31) ^ ctx;
        let apply = move |m: &mut dyn OpMemory, args: &[u8]| {
            let mut inner: &mut dyn OpMemory = m;
            let mut h = txmap_op_mem {
                mem: (&mut inner as *mut &mut dyn OpMemory).cast(),
            };
            // SAFETY: `f` is callable with `ctx` per the registration's
            // contract; `h` and `args` live through the call.
            let rc = unsafe { f(&mut h, args.as_ptr().cast(), args.len(), ctx as *mut c_void) };
            match rc {
                0 => Ok(()),
                rc => Err(txmap::Error::Invalid(format!(
                    "operation {id} returned {rc}"
                ))),
            }
        };
        ops::register_with(id, &name, key, std::sync::Arc::new(apply))?;
        Ok(())
    }))
}

/// The operation memory behind `m`.
///
/// # Safety
/// `m` is NULL or the handle an operation was called with, during the call.
unsafe fn op_mem<'a>(m: *mut txmap_op_mem) -> Result<&'a mut dyn OpMemory, Failure> {
    // SAFETY: per the caller's contract, `mem` points at a live `&mut dyn OpMemory`.
    let h = unsafe { m.as_mut() }.ok_or_else(|| Failure::null("mem"))?;
    // SAFETY: as above.
    Ok(unsafe { &mut **h.mem.cast::<&mut dyn OpMemory>() })
}

/// Copies `len` bytes at region offset `off` into `buf`. `TXMAP_ERANGE`
/// past the region's end.
///
/// # Safety
/// `mem` is the handle the operation was called with; `buf` is writable
/// for `len` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn txmap_op_read(
    mem: *mut txmap_op_mem,
    off: u64,
    buf: *mut c_void,
    len: usize,
) -> c_int {
    status(guarded("txmap_op_read", || {
        if buf.is_null() && len > 0 {
            return Err(Failure::null("buf"));
        }
        // SAFETY: per this function's contract.
        let m = unsafe { op_mem(mem) }?;
        let out = if len == 0 {
            &mut [][..]
        } else {
            // SAFETY: writable for `len` bytes per this function's contract.
            unsafe { std::slice::from_raw_parts_mut(buf.cast::<u8>(), len) }
        };
        Ok(m.read(off, out)?)
    }))
}

/// Stores `len` bytes from `bytes` at region offset `off`. `TXMAP_ERANGE`
/// past the region's end.
///
/// # Safety
/// `mem` is the handle the operation was called with; `bytes` is readable
/// for `len` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn txmap_op_write(
    mem: *mut txmap_op_mem,
    off: u64,
    bytes: *const c_void,
    len: usize,
) -> c_int {
    status(guarded("txmap_op_write", || {
        if bytes.is_null() && len > 0 {
            return Err(Failure::null("bytes"));
        }
        // SAFETY: per this function's contract.
        let m = unsafe { op_mem(mem) }?;
        let b = if len == 0 {
            &[][..]
        } else {
            // SAFETY: readable for `len` bytes per this function's contract.
            unsafe { std::slice::from_raw_parts(bytes.cast::<u8>(), len) }
        };
        Ok(m.write(off, b)?)
    }))
}

/// Bytes of the region the operation sees (0 if `mem` is NULL).
///
/// # Safety
/// `mem` is NULL or the handle the operation was called with.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn txmap_op_size(mem: *mut txmap_op_mem) -> u64 {
    guarded("txmap_op_size", || {
        // SAFETY: per this function's contract.
        Ok(unsafe { op_mem(mem) }?.size())
    })
    .unwrap_or(0)
}

/// The `len` argument bytes at `args` (NULL only when `len` is 0).
///
/// # Safety
/// `args` is NULL or readable for `len` bytes, for `'a`.
unsafe fn arg_bytes<'a>(args: *const c_void, len: usize) -> Result<&'a [u8], Failure> {
    if len == 0 {
        return Ok(&[]);
    }
    if args.is_null() {
        return Err(Failure::null("args"));
    }
    // SAFETY: readable per this function's contract.
    Ok(unsafe { std::slice::from_raw_parts(args.cast::<u8>(), len) })
}

/// Runs registered operation `id` with the `args_len` bytes at `args` in
/// the view's transaction at once, and logs it as one operation record in
/// place of the byte diffs of what it changed (recovery runs it again).
/// Needs a serializable transaction (`TXMAP_EINVAL` otherwise, or when `id`
/// is not registered); an operation that fails aborts the transaction
/// (its commit returns `TXMAP_ABORTED`) and this returns its error
/// (`TXMAP_EINVAL` for a nonzero return, whose value the message gives).
///
/// # Safety
/// `view` is NULL or a live view handle, not in use by another thread;
/// `args` is readable for `args_len` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn txmap_apply(
    view: *mut txmap_view,
    id: u32,
    args: *const c_void,
    args_len: usize,
) -> c_int {
    status(guarded("txmap_apply", || {
        // SAFETY: readable per this function's contract.
        let a = unsafe { arg_bytes(args, args_len) }?;
        // SAFETY: per this function's contract.
        unsafe { view_mut(view) }?.apply(id, a)?;
        Ok(())
    }))
}

/// Begins a nested top action of the view's open transaction: pauses it
/// and begins a transaction of the action's own on the view. End it with
/// `txmap_nta_end` (its commit, visible at once, names the undo: registered
/// operation `undo` with the `args_len` bytes at `args`) or
/// `txmap_nta_abort`. If the enclosing transaction then aborts or fails to
/// commit, the undo runs as a compensating commit; if the process dies
/// first, the next checkpoint of a process that has the region open runs
/// it (or else the next first opener of the region). `TXMAP_ENOTXN`
/// outside a transaction, `TXMAP_EINVAL` if `undo` is not registered.
///
/// # Safety
/// `view` is NULL or a live view handle, not in use by another thread;
/// `args` is readable for `args_len` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn txmap_nta_begin(
    view: *mut txmap_view,
    undo: u32,
    args: *const c_void,
    args_len: usize,
) -> c_int {
    status(guarded("txmap_nta_begin", || {
        // SAFETY: readable per this function's contract.
        let a = unsafe { arg_bytes(args, args_len) }?;
        // SAFETY: per this function's contract.
        unsafe { view_mut(view) }?.nta_begin(undo, a)?;
        Ok(())
    }))
}

/// Commits the nested top action begun last by `txmap_nta_begin` and
/// resumes the enclosing transaction. `TXMAP_CONFLICT`: the action left no
/// trace (the enclosing transaction is resumed all the same; begin the
/// action again). `TXMAP_EINVAL` if none is open, or inner transactions of
/// the action are.
///
/// # Safety
/// `view` is NULL or a live view handle, not in use by another thread.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn txmap_nta_end(view: *mut txmap_view) -> c_int {
    status(guarded("txmap_nta_end", || {
        // SAFETY: per this function's contract.
        Ok(unsafe { view_mut(view) }?.nta_end()?)
    }))
}

/// Rolls back the nested top action begun last by `txmap_nta_begin` and
/// resumes the enclosing transaction.
///
/// # Safety
/// `view` is NULL or a live view handle, not in use by another thread.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn txmap_nta_abort(view: *mut txmap_view) -> c_int {
    status(guarded("txmap_nta_abort", || {
        // SAFETY: per this function's contract.
        Ok(unsafe { view_mut(view) }?.nta_abort()?)
    }))
}

/// `txmap_commute`: adds the operand to a u64 (wrapping).
pub const TXMAP_OP_ADD_U64: u32 = 1;
/// `txmap_commute`: adds the operand to an i64 (wrapping).
pub const TXMAP_OP_ADD_I64: u32 = 2;
/// `txmap_commute`: lowers a u64 to the operand if it is smaller.
pub const TXMAP_OP_MIN_U64: u32 = 3;
/// `txmap_commute`: raises a u64 to the operand if it is larger.
pub const TXMAP_OP_MAX_U64: u32 = 4;
/// `txmap_commute`: lowers an i64 to the operand if it is smaller.
pub const TXMAP_OP_MIN_I64: u32 = 5;
/// `txmap_commute`: raises an i64 to the operand if it is larger.
pub const TXMAP_OP_MAX_I64: u32 = 6;

// The header needs literals (cbindgen); they must be txmap's ids.
const _: () = assert!(
    TXMAP_OP_ADD_U64 == ops::ADD_U64
        && TXMAP_OP_ADD_I64 == ops::ADD_I64
        && TXMAP_OP_MIN_U64 == ops::MIN_U64
        && TXMAP_OP_MAX_U64 == ops::MAX_U64
        && TXMAP_OP_MIN_I64 == ops::MIN_I64
        && TXMAP_OP_MAX_I64 == ops::MAX_I64
);

/// Applies a commutative built-in operation (`TXMAP_OP_ADD_U64`, …) with
/// `operand` (an i64 passed as its bits) to the 8-byte-aligned word at
/// region offset `off`, in the view's transaction: the transaction sees
/// the result at once, but the word joins neither its read nor its write
/// set; at commit the operation is applied again, under the commit lock,
/// to the newest committed value, so concurrent updates of one counter all
/// commit. Reading the word validates it as any read. `TXMAP_EINVAL` for
/// another id or an unaligned word, `TXMAP_ERANGE` past the region,
/// `TXMAP_ESTOREREADONLY` in a read-only transaction.
///
/// # Safety
/// `view` is NULL or a live view handle, not in use by another thread.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn txmap_commute(
    view: *mut txmap_view,
    id: u32,
    off: u64,
    operand: u64,
) -> c_int {
    status(guarded("txmap_commute", || {
        let mut a = [0u8; 16];
        a[..8].copy_from_slice(&off.to_le_bytes());
        a[8..].copy_from_slice(&operand.to_le_bytes());
        // SAFETY: per this function's contract.
        unsafe { view_mut(view) }?.commute(id, &a)?;
        Ok(())
    }))
}
