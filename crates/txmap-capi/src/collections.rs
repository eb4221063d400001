//! C API of the collections: the heap (`txmap_alloc`, `txmap_free`,
//! `txmap_root`), named maps (B+-tree or linear hash) and array lists.
//!
//! Every call here works inside a transaction of the view it is given
//! (`txmap_begin` … `txmap_commit`), exactly like the Rust API: what it
//! changes commits or aborts with the transaction. Offsets are byte offsets
//! into the region (add them to `txmap_view_base` for a pointer). Return
//! values are `TXMAP_OK` (or a documented non-negative result) or a negative
//! `TXMAP_*` code with a message for `txmap_errmsg`.

use std::ffi::{CStr, c_char, c_int, c_void};
use std::ops::Bound;

use crate::native::{txmap_view, view_mut};
use crate::{Failure, guarded, status};
use txmap::View;
use txmap::collections::{AnyMap, ArrayList, BTree, CoBTree, Kind, LinearHash, Map, alloc};

/// Map kind: a B+-tree (ordered).
pub const TXMAP_BTREE: c_int = 1;
/// Map kind: a cache-oblivious B-tree (ordered; a packed memory array under
/// a van Emde Boas index).
pub const TXMAP_COBTREE: c_int = 2;
/// Map kind: a linear hash table (unordered; scans sort what they read).
pub const TXMAP_LHASH: c_int = 3;
/// Flag for `txmap_map_open`/`txmap_array_open`: create the structure if the
/// catalog has no entry of that name.
pub const TXMAP_CREATE: c_int = 1;

/// A map structure in a region: plain data, valid in every view of the
/// region while the structure exists. Fill it with `txmap_map_open`.
#[repr(C)]
#[derive(Clone, Copy)]
#[allow(non_camel_case_types)]
pub struct txmap_map {
    /// Offset of the structure's header block.
    pub at: u64,
    /// `TXMAP_BTREE`, `TXMAP_COBTREE` or `TXMAP_LHASH`.
    pub kind: c_int,
}

/// An array list in a region (plain data). Fill it with `txmap_array_open`.
#[repr(C)]
#[derive(Clone, Copy)]
#[allow(non_camel_case_types)]
pub struct txmap_array {
    /// Offset of the array's header block.
    pub at: u64,
}

/// Callback of `txmap_map_scan`: gets each entry; returns 0 to go on, any
/// other value to stop.
#[allow(non_camel_case_types)]
pub type txmap_scan_fn = Option<
    unsafe extern "C" fn(
        ctx: *mut c_void,
        key: *const c_void,
        key_len: usize,
        value: *const c_void,
        value_len: usize,
    ) -> c_int,
>;

/// # Safety
/// `p` is NULL only if `len` is 0; otherwise readable for `len` bytes.
unsafe fn bytes<'a>(p: *const c_void, len: usize, arg: &str) -> Result<&'a [u8], Failure> {
    if len == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return Err(Failure::null(arg));
    }
    // SAFETY: per the caller's contract.
    Ok(unsafe { std::slice::from_raw_parts(p.cast(), len) })
}

/// # Safety
/// `out` is NULL or writable.
unsafe fn put<T>(out: *mut T, x: T, arg: &str) -> Result<(), Failure> {
    if out.is_null() {
        return Err(Failure::null(arg));
    }
    // SAFETY: non-null and writable per the caller's contract.
    unsafe { out.write(x) };
    Ok(())
}

fn in_txn(v: &View) -> Result<(), Failure> {
    if !v.in_transaction() {
        return Err(Failure::invalid(
            "call it inside a transaction (txmap_begin)",
        ));
    }
    Ok(())
}

/// # Safety
/// `view` is NULL or a live view handle used by this thread only.
unsafe fn txn_view<'a>(view: *mut txmap_view) -> Result<&'a mut View, Failure> {
    // SAFETY: per the caller's contract.
    let v = unsafe { view_mut(view) }?;
    in_txn(v)?;
    Ok(v)
}

fn any_map(v: &View, m: &txmap_map) -> Result<AnyMap, Failure> {
    Ok(match m.kind {
        TXMAP_BTREE => AnyMap::BTree(BTree::open(v, m.at)?),
        TXMAP_COBTREE => AnyMap::CoBTree(CoBTree::open(v, m.at)?),
        TXMAP_LHASH => AnyMap::LinearHash(LinearHash::open(v, m.at)?),
        k => return Err(Failure::invalid(format!("unknown map kind {k}"))),
    })
}

/// # Safety
/// `name` is NULL or a NUL-terminated string.
unsafe fn name_arg<'a>(name: *const c_char) -> Result<&'a str, Failure> {
    if name.is_null() {
        return Err(Failure::null("name"));
    }
    // SAFETY: per the caller's contract.
    unsafe { CStr::from_ptr(name) }
        .to_str()
        .map_err(|_| Failure::invalid("name is not UTF-8"))
}

/// Allocates `size` zeroed bytes in the region's heap (formatting the heap on
/// first use) and stores their offset in `*offset`.
///
/// # Safety
/// `view` is NULL or a live view handle; `offset` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn txmap_alloc(view: *mut txmap_view, size: u64, offset: *mut u64) -> c_int {
    status(guarded("txmap_alloc", || {
        // SAFETY: per this function's contract.
        let v = unsafe { txn_view(view) }?;
        let o = alloc::alloc(v, size)?;
        // SAFETY: per this function's contract.
        unsafe { put(offset, o, "offset") }
    }))
}

/// Frees the block at `offset` (from `txmap_alloc`): it is zeroed, and a
/// concurrent transaction that read it will conflict.
///
/// # Safety
/// `view` is NULL or a live view handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn txmap_free(view: *mut txmap_view, offset: u64) -> c_int {
    status(guarded("txmap_free", || {
        // SAFETY: per this function's contract.
        let v = unsafe { txn_view(view) }?;
        Ok(alloc::free(v, offset)?)
    }))
}

/// The region's root object: `size` zeroed bytes allocated on first use;
/// later calls give the same offset (and fail if `size` is larger).
///
/// # Safety
/// `view` is NULL or a live view handle; `offset` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn txmap_root(view: *mut txmap_view, size: u64, offset: *mut u64) -> c_int {
    status(guarded("txmap_root", || {
        // SAFETY: per this function's contract.
        let v = unsafe { txn_view(view) }?;
        let o = alloc::root(v, size)?;
        // SAFETY: per this function's contract.
        unsafe { put(offset, o, "offset") }
    }))
}

/// Opens the map named `name` in the region's catalog into `*out`; with
/// `TXMAP_CREATE` in `flags`, creates it as `kind` (`TXMAP_BTREE`,
/// `TXMAP_COBTREE` or `TXMAP_LHASH`) if absent. Without it, an absent name is `TXMAP_EINVAL`.
///
/// # Safety
/// `view` is NULL or a live view handle; `name` NULL or NUL-terminated;
/// `out` NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn txmap_map_open(
    view: *mut txmap_view,
    name: *const c_char,
    kind: c_int,
    flags: c_int,
    out: *mut txmap_map,
) -> c_int {
    status(guarded("txmap_map_open", || {
        // SAFETY: per this function's contract.
        let (v, name) = unsafe { (txn_view(view)?, name_arg(name)?) };
        if flags & !TXMAP_CREATE != 0 {
            return Err(Failure::invalid(format!("unknown flags {flags:#x}")));
        }
        let m = match AnyMap::open_named(v, name)? {
            Some(m) => m,
            None if flags & TXMAP_CREATE != 0 => {
                let k = match kind {
                    TXMAP_BTREE => Kind::BTree,
                    TXMAP_COBTREE => Kind::CoBTree,
                    TXMAP_LHASH => Kind::LinearHash,
                    k => return Err(Failure::invalid(format!("unknown map kind {k}"))),
                };
                AnyMap::create_named(v, name, k)?
            }
            None => return Err(Failure::invalid(format!("no structure named {name:?}"))),
        };
        let kind = match m {
            AnyMap::BTree(_) => TXMAP_BTREE,
            AnyMap::CoBTree(_) => TXMAP_COBTREE,
            AnyMap::LinearHash(_) => TXMAP_LHASH,
        };
        // SAFETY: per this function's contract.
        unsafe { put(out, txmap_map { at: m.at(), kind }, "out") }
    }))
}

/// Stores `value` under `key`. Returns 0 if the key was new, 1 if it
/// replaced a value, or a negative code.
///
/// # Safety
/// `view` is NULL or a live view handle; `map` NULL or readable; `key` and
/// `value` readable for their lengths (NULL allowed for length 0).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn txmap_map_put(
    view: *mut txmap_view,
    map: *const txmap_map,
    key: *const c_void,
    key_len: usize,
    value: *const c_void,
    value_len: usize,
) -> c_int {
    guarded("txmap_map_put", || {
        // SAFETY: per this function's contract.
        let (v, k, val, m) = unsafe {
            (
                txn_view(view)?,
                bytes(key, key_len, "key")?,
                bytes(value, value_len, "value")?,
                map.as_ref().ok_or_else(|| Failure::null("map"))?,
            )
        };
        let m = any_map(v, m)?;
        Ok(c_int::from(m.put(v, k, val)?))
    })
    .unwrap_or_else(|e| e.code)
}

/// Looks `key` up. Returns 1 if found (the value's length goes to
/// `*value_len`, and its first `min(cap, length)` bytes to `buf`), 0 if
/// absent, or a negative code. Call again with a larger buffer if
/// `*value_len > cap`.
///
/// # Safety
/// `view` is NULL or a live view handle; `map` NULL or readable; `key`
/// readable for `key_len`; `buf` writable for `cap` (NULL if `cap` is 0);
/// `value_len` NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn txmap_map_get(
    view: *mut txmap_view,
    map: *const txmap_map,
    key: *const c_void,
    key_len: usize,
    buf: *mut c_void,
    cap: usize,
    value_len: *mut usize,
) -> c_int {
    guarded("txmap_map_get", || {
        // SAFETY: per this function's contract.
        let (v, k, m) = unsafe {
            (
                txn_view(view)?,
                bytes(key, key_len, "key")?,
                map.as_ref().ok_or_else(|| Failure::null("map"))?,
            )
        };
        if cap > 0 && buf.is_null() {
            return Err(Failure::null("buf"));
        }
        let m = any_map(v, m)?;
        let Some(val) = m.get(v, k)? else {
            return Ok(0);
        };
        let n = val.len().min(cap);
        if n > 0 {
            // SAFETY: buf is writable for cap >= n bytes per the contract.
            unsafe { std::ptr::copy_nonoverlapping(val.as_ptr(), buf.cast(), n) };
        }
        // SAFETY: per this function's contract.
        unsafe { put(value_len, val.len(), "value_len") }?;
        Ok(1)
    })
    .unwrap_or_else(|e| e.code)
}

/// Removes `key`. Returns 1 if it was present, 0 if not, or a negative code.
///
/// # Safety
/// As `txmap_map_get`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn txmap_map_delete(
    view: *mut txmap_view,
    map: *const txmap_map,
    key: *const c_void,
    key_len: usize,
) -> c_int {
    guarded("txmap_map_delete", || {
        // SAFETY: per this function's contract.
        let (v, k, m) = unsafe {
            (
                txn_view(view)?,
                bytes(key, key_len, "key")?,
                map.as_ref().ok_or_else(|| Failure::null("map"))?,
            )
        };
        let m = any_map(v, m)?;
        Ok(c_int::from(m.delete(v, k)?))
    })
    .unwrap_or_else(|e| e.code)
}

/// Calls `f` for each entry with `lo <= key < hi` in key order (`lo` NULL:
/// from the first key; `hi` NULL: to the last) until `f` returns non-zero.
/// The pointers passed to `f` are valid during that call only.
///
/// # Safety
/// As `txmap_map_get`; `lo`/`hi` readable for their lengths or NULL; `f`
/// a valid function (called with `ctx`).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn txmap_map_scan(
    view: *mut txmap_view,
    map: *const txmap_map,
    lo: *const c_void,
    lo_len: usize,
    hi: *const c_void,
    hi_len: usize,
    f: txmap_scan_fn,
    ctx: *mut c_void,
) -> c_int {
    status(guarded("txmap_map_scan", || {
        // SAFETY: per this function's contract.
        let (v, m) = unsafe {
            (
                txn_view(view)?,
                map.as_ref().ok_or_else(|| Failure::null("map"))?,
            )
        };
        let f = f.ok_or_else(|| Failure::null("f"))?;
        // SAFETY: per this function's contract (NULL means unbounded).
        let (lo, hi) = unsafe {
            (
                if lo.is_null() {
                    None
                } else {
                    Some(bytes(lo, lo_len, "lo")?)
                },
                if hi.is_null() {
                    None
                } else {
                    Some(bytes(hi, hi_len, "hi")?)
                },
            )
        };
        let m = any_map(v, m)?;
        let lo = lo.map_or(Bound::Unbounded, Bound::Included);
        let hi = hi.map_or(Bound::Unbounded, Bound::Excluded);
        m.scan(v, lo, hi, &mut |k, val| {
            // SAFETY: f is a valid callback per the contract; the slices live during the call.
            let stop = unsafe {
                f(
                    ctx,
                    k.as_ptr().cast(),
                    k.len(),
                    val.as_ptr().cast(),
                    val.len(),
                )
            };
            Ok(stop == 0)
        })?;
        Ok(())
    }))
}

/// Verifies the map's invariants (and the heap's); stores its number of
/// entries in `*entries`. `TXMAP_ECORRUPT` if something is wrong.
///
/// # Safety
/// As `txmap_map_get`; `entries` NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn txmap_map_check(
    view: *mut txmap_view,
    map: *const txmap_map,
    entries: *mut u64,
) -> c_int {
    status(guarded("txmap_map_check", || {
        // SAFETY: per this function's contract.
        let (v, m) = unsafe {
            (
                txn_view(view)?,
                map.as_ref().ok_or_else(|| Failure::null("map"))?,
            )
        };
        let m = any_map(v, m)?;
        alloc::check(v)?;
        let r = m.check(v)?;
        // SAFETY: per this function's contract.
        unsafe { put(entries, r.entries, "entries") }
    }))
}

/// Opens the array list named `name` into `*out`; with `TXMAP_CREATE`,
/// creates it with `elem_size`-byte elements if absent.
///
/// # Safety
/// As `txmap_map_open`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn txmap_array_open(
    view: *mut txmap_view,
    name: *const c_char,
    elem_size: u64,
    flags: c_int,
    out: *mut txmap_array,
) -> c_int {
    status(guarded("txmap_array_open", || {
        // SAFETY: per this function's contract.
        let (v, name) = unsafe { (txn_view(view)?, name_arg(name)?) };
        if flags & !TXMAP_CREATE != 0 {
            return Err(Failure::invalid(format!("unknown flags {flags:#x}")));
        }
        let a = match alloc::lookup(v, name)? {
            Some(e) if e.kind == Kind::Array => ArrayList::open(v, e.at)?,
            Some(e) => {
                return Err(Failure::invalid(format!(
                    "{name:?} is a {}, not an array",
                    e.kind.name()
                )));
            }
            None if flags & TXMAP_CREATE != 0 => {
                alloc::init(v)?;
                let a = ArrayList::create(v, elem_size)?;
                alloc::register(v, name, Kind::Array, a.at)?;
                a
            }
            None => return Err(Failure::invalid(format!("no structure named {name:?}"))),
        };
        // SAFETY: per this function's contract.
        unsafe { put(out, txmap_array { at: a.at }, "out") }
    }))
}

/// # Safety
/// `a` is NULL or readable.
unsafe fn array(v: &View, a: *const txmap_array) -> Result<ArrayList, Failure> {
    // SAFETY: per the caller's contract.
    let a = unsafe { a.as_ref() }.ok_or_else(|| Failure::null("array"))?;
    Ok(ArrayList::open(v, a.at)?)
}

/// Appends an element (`elem` holds the array's element size in bytes);
/// stores its index in `*index` unless `index` is NULL.
///
/// # Safety
/// `view` a live view handle or NULL; `a` readable or NULL; `elem` readable
/// for the element size; `index` NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn txmap_array_push(
    view: *mut txmap_view,
    a: *const txmap_array,
    elem: *const c_void,
    index: *mut u64,
) -> c_int {
    status(guarded("txmap_array_push", || {
        // SAFETY: per this function's contract.
        let v = unsafe { txn_view(view) }?;
        // SAFETY: per this function's contract.
        let a = unsafe { array(v, a) }?;
        let e = a.elem_size(v)? as usize;
        // SAFETY: elem is readable for the element size per the contract.
        let b = unsafe { bytes(elem, e, "elem") }?.to_vec();
        let i = a.push(v, &b)?;
        if !index.is_null() {
            // SAFETY: non-null and writable per the contract.
            unsafe { index.write(i) };
        }
        Ok(())
    }))
}

/// Appends an element by the commutative append (`ArrayList::append`):
/// transactions appending to one array concurrently do not conflict. The
/// element lands, at commit, at the array's length then; `*index` (unless
/// `index` is NULL) gets its index as this transaction sees it, which is
/// provisional: the final index is at least this one, known after the
/// commit. Reading the array (length, elements) or storing to its pages
/// in the same transaction is validated as usual. `size` is the element's
/// size in bytes (the array's element size, else `TXMAP_EINVAL`): the
/// array's header is not read for it, which would validate it.
///
/// # Safety
/// `view` a live view handle or NULL; `a` readable or NULL; `elem` readable
/// for `size` bytes; `index` NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn txmap_array_append(
    view: *mut txmap_view,
    a: *const txmap_array,
    elem: *const c_void,
    size: usize,
    index: *mut u64,
) -> c_int {
    status(guarded("txmap_array_append", || {
        // SAFETY: per this function's contract.
        let v = unsafe { txn_view(view) }?;
        // SAFETY: readable or NULL per the contract.
        let a = unsafe { a.as_ref() }.ok_or_else(|| Failure::null("array"))?;
        let a = ArrayList { at: a.at };
        // SAFETY: elem is readable for `size` bytes per the contract.
        let b = unsafe { bytes(elem, size, "elem") }?.to_vec();
        let i = a.append(v, &b)?;
        if !index.is_null() {
            // SAFETY: non-null and writable per the contract.
            unsafe { index.write(i) };
        }
        Ok(())
    }))
}

/// Allocates the array's segments up to `capacity` elements, so appends
/// up to it never grow the array (`ArrayList::reserve`).
///
/// # Safety
/// As `txmap_array_push`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn txmap_array_reserve(
    view: *mut txmap_view,
    a: *const txmap_array,
    capacity: u64,
) -> c_int {
    status(guarded("txmap_array_reserve", || {
        // SAFETY: per this function's contract.
        let v = unsafe { txn_view(view) }?;
        // SAFETY: per this function's contract.
        let a = unsafe { array(v, a) }?;
        Ok(a.reserve(v, capacity)?)
    }))
}

/// Copies element `i` to `out` (writable for the element size).
///
/// # Safety
/// As `txmap_array_push`; `out` writable for the element size.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn txmap_array_get(
    view: *mut txmap_view,
    a: *const txmap_array,
    i: u64,
    out: *mut c_void,
) -> c_int {
    status(guarded("txmap_array_get", || {
        // SAFETY: per this function's contract.
        let v = unsafe { txn_view(view) }?;
        // SAFETY: per this function's contract.
        let a = unsafe { array(v, a) }?;
        let b = a.get(v, i)?;
        if out.is_null() {
            return Err(Failure::null("out"));
        }
        // SAFETY: out is writable for the element size per the contract.
        unsafe { std::ptr::copy_nonoverlapping(b.as_ptr(), out.cast(), b.len()) };
        Ok(())
    }))
}

/// Overwrites element `i` with `elem`.
///
/// # Safety
/// As `txmap_array_push`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn txmap_array_set(
    view: *mut txmap_view,
    a: *const txmap_array,
    i: u64,
    elem: *const c_void,
) -> c_int {
    status(guarded("txmap_array_set", || {
        // SAFETY: per this function's contract.
        let v = unsafe { txn_view(view) }?;
        // SAFETY: per this function's contract.
        let a = unsafe { array(v, a) }?;
        let e = a.elem_size(v)? as usize;
        // SAFETY: elem is readable for the element size per the contract.
        let b = unsafe { bytes(elem, e, "elem") }?.to_vec();
        Ok(a.set(v, i, &b)?)
    }))
}

/// Removes the last element, copying it to `out` unless NULL. Returns 1 if
/// an element was removed, 0 if the array was empty, or a negative code.
///
/// # Safety
/// As `txmap_array_get` (`out` may be NULL).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn txmap_array_pop(
    view: *mut txmap_view,
    a: *const txmap_array,
    out: *mut c_void,
) -> c_int {
    guarded("txmap_array_pop", || {
        // SAFETY: per this function's contract.
        let v = unsafe { txn_view(view) }?;
        // SAFETY: per this function's contract.
        let a = unsafe { array(v, a) }?;
        let Some(b) = a.pop(v)? else {
            return Ok(0);
        };
        if !out.is_null() {
            // SAFETY: out is writable for the element size per the contract.
            unsafe { std::ptr::copy_nonoverlapping(b.as_ptr(), out.cast(), b.len()) };
        }
        Ok(1)
    })
    .unwrap_or_else(|e| e.code)
}

/// The number of elements, or `u64::MAX` (all ones) on error.
///
/// # Safety
/// As `txmap_array_push`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn txmap_array_len(view: *mut txmap_view, a: *const txmap_array) -> u64 {
    guarded("txmap_array_len", || {
        // SAFETY: per this function's contract.
        let v = unsafe { txn_view(view) }?;
        // SAFETY: per this function's contract.
        let a = unsafe { array(v, a) }?;
        Ok(a.len(v)?)
    })
    .unwrap_or(u64::MAX)
}
