//! PMDK libpmemobj on an ordinary file: a pool `data.pmemobj` holding a
//! B+-tree written in C (`c/pmemobj.c`, since libpmemobj has transactions
//! but no key-value index), each [`Session::write`] one pmemobj transaction.
//!
//! This is not real persistent memory: on a file that is not on a DAX
//! file system libpmemobj makes its stores durable with `msync` (several
//! per transaction: undo log, data, allocator metadata), which is what a
//! commit costs here. `PMEM_IS_PMEM_FORCE` is not set: it would replace the
//! msyncs by CPU cache flushes that do not reach the disk, and it is read
//! once per process, so it cannot differ between a Durable and an Async
//! store. libpmemobj has no cheaper commit, so Async is the same as
//! Durable.
//!
//! A pool does not grow: it is allocated whole on disk (so `disk_bytes` is
//! the pool's size from the start) and sized once at create from
//! `Config::expected_bytes` and `expected_keys` (see `imp::pool_bytes`); a
//! write that does not fit aborts its transaction with an out-of-memory
//! error. libpmemobj does not isolate transactions from other threads, so
//! the shim orders them with one rwlock (writes exclusive, reads shared).

use crate::{Durability, Kind, Peer};

const ID: &str = "pmemobj";
const INSTALL: &str = "sudo apt-get install libpmemobj-dev";

pub fn peer() -> Peer {
    Peer {
        id: ID,
        name: "PMDK libpmemobj 1.12 B+-tree (on a file)",
        kind: Kind::Ordered,
        processes: false,
        available: if cfg!(have_pmemobj) {
            Ok(())
        } else {
            Err(INSTALL)
        },
        describe,
        open,
    }
}

fn describe(d: Durability) -> String {
    let mode = match d {
        Durability::Durable => "durable",
        Durability::Async => "same as durable (libpmemobj has no cheaper commit)",
    };
    format!(
        "libpmemobj 1.12 pool on an ordinary ext4 file (not persistent memory: \
         persisted by msync, PMEM_IS_PMEM_FORCE unset), our C B+-tree (32 keys \
         a node; a leaf emptied by deletes is freed, nodes are not merged), one pmemobj transaction per write, \
         {mode}; writers serialized and readers excluded by one rwlock; \
         fixed pool of 2 x expected_bytes + 256 B x expected_keys + 32 MiB, \
         all allocated on disk at create"
    )
}

#[cfg(not(have_pmemobj))]
fn open(_: &crate::Config) -> crate::Result<Box<dyn crate::Store>> {
    Err(crate::Error::NotInstalled {
        store: ID,
        install: INSTALL,
    })
}

#[cfg(have_pmemobj)]
use imp::open;

#[cfg(have_pmemobj)]
mod imp {
    use std::any::Any;
    use std::ffi::{CStr, CString, c_char, c_int, c_void};
    use std::os::unix::ffi::OsStrExt;
    use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
    use std::path::PathBuf;

    use super::ID;
    use crate::{Config, Error, Op, Result, Session, Store};

    #[repr(C)]
    struct Handle {
        _p: [u8; 0],
    }

    /// `struct pmkv_op` in the shim.
    #[repr(C)]
    struct COp {
        key: *const u8,
        klen: usize,
        val: *const u8,
        vlen: usize,
        put: c_int,
    }

    type GetCb = unsafe extern "C" fn(*mut c_void, *const u8, usize);
    type RangeCb = unsafe extern "C" fn(*mut c_void, *const u8, usize, *const u8, usize);

    unsafe extern "C" {
        fn pmkv_open(
            path: *const c_char,
            pool_bytes: u64,
            create: c_int,
            err: *mut c_char,
            errlen: usize,
        ) -> *mut Handle;
        fn pmkv_close(h: *mut Handle);
        fn pmkv_write(
            h: *mut Handle,
            ops: *const COp,
            n: usize,
            err: *mut c_char,
            errlen: usize,
        ) -> c_int;
        fn pmkv_get(
            h: *mut Handle,
            k: *const u8,
            klen: usize,
            cb: GetCb,
            ctx: *mut c_void,
        ) -> c_int;
        fn pmkv_range(
            h: *mut Handle,
            start: *const u8,
            slen: usize,
            n: usize,
            cb: RangeCb,
            ctx: *mut c_void,
        ) -> usize;
    }

    const ERRLEN: usize = 512;

    /// The pool's size: pools do not grow, so leave room for the allocator's
    /// rounding, the tree's nodes, separators and the undo logs.
    fn pool_bytes(c: &Config) -> u64 {
        let want = c
            .expected_bytes
            .saturating_mul(2)
            .saturating_add(c.expected_keys.saturating_mul(256))
            .saturating_add(32 << 20);
        want.max(64 << 20)
    }

    fn message(buf: &[u8]) -> String {
        CStr::from_bytes_until_nul(buf)
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|_| String::from_utf8_lossy(buf).into_owned())
    }

    /// # Safety
    /// `p` must point at `len` readable bytes for `'a` (anything if 0).
    unsafe fn bytes<'a>(p: *const u8, len: usize) -> &'a [u8] {
        if len == 0 {
            &[]
        } else {
            // SAFETY: guaranteed by the caller.
            unsafe { std::slice::from_raw_parts(p, len) }
        }
    }

    struct PmemStore {
        dir: PathBuf,
        h: *mut Handle,
    }

    // SAFETY: the shim's handle is safe to share between threads: every
    // entry point takes its rwlock before touching the pool.
    unsafe impl Send for PmemStore {}
    // SAFETY: as above.
    unsafe impl Sync for PmemStore {}

    impl Drop for PmemStore {
        fn drop(&mut self) {
            // SAFETY: the handle came from pmkv_open and is closed once;
            // sessions borrow the store, so none is left.
            unsafe { pmkv_close(self.h) }
        }
    }

    pub fn open(c: &Config) -> Result<Box<dyn Store>> {
        if c.shared {
            return Err(Error::Unsupported {
                store: ID,
                what: "several processes at once (a pmemobj pool is opened by one process: it takes a lock on the pool file)".into(),
            });
        }
        let path = c.dir.join("data.pmemobj");
        let cpath = CString::new(path.as_os_str().as_bytes()).map_err(|e| Error::Failed {
            store: ID,
            what: format!("{}: {e}", path.display()),
        })?;
        let mut err = [0u8; ERRLEN];
        // SAFETY: cpath is NUL-terminated and err has ERRLEN bytes; the
        // shim writes a NUL-terminated message there on failure.
        let h = unsafe {
            pmkv_open(
                cpath.as_ptr(),
                pool_bytes(c),
                c.create as c_int,
                err.as_mut_ptr().cast(),
                ERRLEN,
            )
        };
        if h.is_null() {
            return Err(Error::Failed {
                store: ID,
                what: format!("{}: {}", path.display(), message(&err)),
            });
        }
        Ok(Box::new(PmemStore {
            dir: c.dir.clone(),
            h,
        }))
    }

    impl Store for PmemStore {
        fn session(&self) -> Result<Box<dyn Session + '_>> {
            Ok(Box::new(PmemSession {
                store: self,
                ops: Vec::new(),
            }))
        }
        fn disk_bytes(&self) -> Result<u64> {
            crate::store_disk_bytes(ID, &self.dir)
        }
    }

    struct PmemSession<'a> {
        store: &'a PmemStore,
        /// Reused for each write's ops (pointers are only valid during it).
        ops: Vec<COp>,
    }

    /// What a callback passes through C: the caller's closure, and a panic
    /// it raised, re-raised once the shim has returned (and unlocked).
    struct Ctx<'f, F: ?Sized> {
        f: &'f mut F,
        panic: Option<Box<dyn Any + Send>>,
    }
    type GetCtx<'f> = Ctx<'f, dyn FnMut(&[u8]) + 'f>;
    type RangeCtx<'f> = Ctx<'f, dyn FnMut(&[u8], &[u8]) + 'f>;

    unsafe extern "C" fn get_cb(ctx: *mut c_void, v: *const u8, vlen: usize) {
        // SAFETY: ctx is the `Ctx` that `get` passed for this call, and v
        // points at vlen bytes of the pool, valid while the shim holds its
        // read lock (until this returns).
        let (ctx, v) = unsafe { (&mut *ctx.cast::<GetCtx<'_>>(), bytes(v, vlen)) };
        if ctx.panic.is_none()
            && let Err(p) = catch_unwind(AssertUnwindSafe(|| (ctx.f)(v)))
        {
            ctx.panic = Some(p);
        }
    }

    unsafe extern "C" fn range_cb(
        ctx: *mut c_void,
        k: *const u8,
        klen: usize,
        v: *const u8,
        vlen: usize,
    ) {
        // SAFETY: as in get_cb, for the key and the value.
        let (ctx, k, v) = unsafe {
            (
                &mut *ctx.cast::<RangeCtx<'_>>(),
                bytes(k, klen),
                bytes(v, vlen),
            )
        };
        if ctx.panic.is_none()
            && let Err(p) = catch_unwind(AssertUnwindSafe(|| (ctx.f)(k, v)))
        {
            ctx.panic = Some(p);
        }
    }

    impl Session for PmemSession<'_> {
        fn write(&mut self, ops: &[Op<'_>]) -> Result<u32> {
            self.ops.clear();
            self.ops.extend(ops.iter().map(|op| match *op {
                Op::Put(k, v) => COp {
                    key: k.as_ptr(),
                    klen: k.len(),
                    val: v.as_ptr(),
                    vlen: v.len(),
                    put: 1,
                },
                Op::Delete(k) => COp {
                    key: k.as_ptr(),
                    klen: k.len(),
                    val: std::ptr::null(),
                    vlen: 0,
                    put: 0,
                },
            }));
            let mut err = [0u8; ERRLEN];
            // SAFETY: the handle is live; each COp points into `ops`,
            // borrowed for this call; err has ERRLEN bytes.
            let rc = unsafe {
                pmkv_write(
                    self.store.h,
                    self.ops.as_ptr(),
                    self.ops.len(),
                    err.as_mut_ptr().cast(),
                    ERRLEN,
                )
            };
            self.ops.clear();
            if rc != 0 {
                return Err(Error::Failed {
                    store: ID,
                    what: message(&err),
                });
            }
            // Writers are serialized by the shim's lock: nothing to retry.
            Ok(0)
        }

        fn get(&mut self, key: &[u8], f: &mut dyn FnMut(&[u8])) -> Result<bool> {
            let mut ctx: GetCtx<'_> = Ctx { f, panic: None };
            // SAFETY: the handle is live; key is valid for its length; ctx
            // outlives the call and get_cb casts it back to its type.
            let found = unsafe {
                pmkv_get(
                    self.store.h,
                    key.as_ptr(),
                    key.len(),
                    get_cb,
                    (&raw mut ctx).cast(),
                )
            };
            if let Some(p) = ctx.panic {
                resume_unwind(p);
            }
            Ok(found != 0)
        }

        fn range(
            &mut self,
            start: &[u8],
            n: usize,
            f: &mut dyn FnMut(&[u8], &[u8]),
        ) -> Result<usize> {
            let mut ctx: RangeCtx<'_> = Ctx { f, panic: None };
            // SAFETY: as in get, with range_cb.
            let seen = unsafe {
                pmkv_range(
                    self.store.h,
                    start.as_ptr(),
                    start.len(),
                    n,
                    range_cb,
                    (&raw mut ctx).cast(),
                )
            };
            if let Some(p) = ctx.panic {
                resume_unwind(p);
            }
            Ok(seen)
        }
    }
}
