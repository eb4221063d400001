//! Environments from C (issue 19 point 1): several named regions in one
//! file and one log, so a transaction across them is one commit and one
//! sync (`txmap::Env`).

use std::ffi::{c_char, c_int};

use crate::media::{options, txmap_options};
use crate::native::{put_region, region_ref, txmap_region};
use crate::{Failure, guarded, path_arg, status};
use txmap::Env;

/// Opens the environment in directory `dir`, creating the directory and its
/// file `dir/env.txm` (with its log) if absent, as a region handle: open
/// views with `txmap_view_open` and find named regions with
/// `txmap_env_region`. Any number of processes may have it open at once;
/// close it with `txmap_region_close`. `opts` may be NULL (the defaults).
/// A region file that is not an environment fails with
/// `TXMAP_ENOTREGION`. On failure `*out` is set to NULL.
///
/// # Safety
/// `dir` is NULL or a NUL-terminated string; `opts` is NULL or a valid
/// `txmap_options`; `out` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn txmap_env_open(
    dir: *const c_char,
    opts: *const txmap_options,
    out: *mut *mut txmap_region,
) -> c_int {
    status(guarded("txmap_env_open", || {
        // SAFETY: per this function's contract.
        let dir = unsafe { path_arg(dir, "dir") }?;
        // SAFETY: per this function's contract.
        let opts = unsafe { options(opts) }?;
        // SAFETY: per this function's contract.
        unsafe { put_region(out, || Env::open(dir, opts).map(Env::into_region)) }
    }))
}

/// Finds the named region `name` of the environment `env` (a handle from
/// `txmap_env_open`), creating it with `size` bytes (rounded up to whole
/// pages, zero-filled) if there is none of that name; `size` 0 only finds.
/// Sets `*offset` to its first byte in the environment's views and `*len`
/// to its length: its memory in a view is `txmap_view_base(view) +
/// *offset` (a view opened before the region was created sees it from its
/// next transaction on). A named region keeps the size it was created
/// with: a larger `size` fails with `TXMAP_EINVAL`, as do a name of more
/// than 47 bytes and `size` 0 for a name not there; an environment holds
/// at most 63 named regions (`TXMAP_ETOOLARGE`). Creating one commits a
/// transaction of its own, so call it outside the caller's transactions.
///
/// # Safety
/// `env` is NULL or a live region handle; `name` is NULL or a
/// NUL-terminated string; `offset` and `len` are NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn txmap_env_region(
    env: *mut txmap_region,
    name: *const c_char,
    size: u64,
    offset: *mut u64,
    len: *mut u64,
) -> c_int {
    status(guarded("txmap_env_region", || {
        // SAFETY: per this function's contract.
        let region = unsafe { region_ref(env) }?;
        if name.is_null() {
            return Err(Failure::null("name"));
        }
        // SAFETY: non-null and NUL-terminated per this function's contract.
        let name = unsafe { std::ffi::CStr::from_ptr(name) }
            .to_str()
            .map_err(|_| Failure::invalid("the region name is not UTF-8"))?;
        let r = Env::from_region(region.region.clone())?.region(name, size)?;
        // SAFETY: NULL or writable per this function's contract.
        unsafe {
            if let Some(o) = offset.as_mut() {
                *o = r.offset();
            }
            if let Some(l) = len.as_mut() {
                *l = r.len();
            }
        }
        Ok(())
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::native::txmap_region_close;

    #[test]
    fn a_named_region_is_found_again_at_the_offset_it_was_created_at() {
        let dir = std::env::temp_dir().join(format!("txmap-capi-env-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let cdir = std::ffi::CString::new(dir.to_str().unwrap()).unwrap();
        let mut env = std::ptr::null_mut();
        // SAFETY: valid string and out pointer.
        let r = unsafe { txmap_env_open(cdir.as_ptr(), std::ptr::null(), &mut env) };
        assert_eq!(r, 0);
        let (mut off, mut len) = (0u64, 0u64);
        // SAFETY: live handle, valid strings and out pointers.
        unsafe {
            assert_eq!(
                txmap_env_region(env, c"a".as_ptr(), 5000, &mut off, &mut len),
                0
            );
            assert_eq!((off, len), (4096, 8192));
            assert_eq!(
                txmap_env_region(env, c"b".as_ptr(), 1, &mut off, &mut len),
                0
            );
            assert_eq!((off, len), (3 * 4096, 4096));
            assert_eq!(
                txmap_env_region(env, c"a".as_ptr(), 0, &mut off, &mut len),
                0
            );
            assert_eq!((off, len), (4096, 8192));
            assert!(txmap_env_region(env, c"a".as_ptr(), 3 * 4096, &mut off, &mut len) < 0);
            assert!(txmap_env_region(env, c"c".as_ptr(), 0, &mut off, &mut len) < 0);
            assert!(txmap_env_region(env, std::ptr::null(), 1, &mut off, &mut len) < 0);
            assert_eq!(txmap_region_close(env), 0);
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
