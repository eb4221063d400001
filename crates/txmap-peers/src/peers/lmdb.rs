//! LMDB (liblmdb 0.9): one environment directory, its unnamed database,
//! `MDB_NOTLS` so read transactions belong to sessions rather than threads.
//!
//! LMDB's map size is fixed when the environment opens: a store that
//! outgrows it fails with `MDB_MAP_FULL`. It is only address space (without
//! `MDB_WRITEMAP` the file grows as pages are written), so the map is sized
//! generously: 16 × `Config::expected_bytes`, at least 1 GiB.
//!
//! Writers serialize on LMDB's writer mutex (no conflicts, so `write` never
//! retries). Each session keeps one read-only transaction, reset after each
//! read and renewed before the next (`mdb_txn_reset`/`mdb_txn_renew`), as
//! LMDB recommends for frequent readers.

use crate::{Durability, Kind, Peer};

#[cfg_attr(have_lmdb, allow(dead_code))]
const INSTALL: &str = "sudo apt-get install liblmdb-dev";

/// Map size: `expected_bytes` times this, at least [`MIN_MAP`].
const MAP_HEADROOM: u64 = 16;
const MIN_MAP: u64 = 1 << 30;
/// Reader slots: every session (in every process) holds one.
const MAX_READERS: u32 = 1024;

/// The LMDB peer.
pub fn peer() -> Peer {
    Peer {
        id: "lmdb",
        name: "LMDB 0.9",
        kind: Kind::Ordered,
        processes: true,
        #[cfg(have_lmdb)]
        available: Ok(()),
        #[cfg(not(have_lmdb))]
        available: Err(INSTALL),
        describe,
        open: imp::open,
    }
}

fn describe(d: Durability) -> String {
    let sync = match d {
        Durability::Durable => {
            "default sync: each commit fdatasyncs the data pages, then writes the meta page \
             O_DSYNC (two syncs per commit)"
        }
        Durability::Async => {
            "MDB_NOSYNC: commits write(2) pages and meta page without syncing, synced on close \
             (a process crash loses nothing; power loss may lose recent commits, and LMDB warns \
             it may corrupt the database if the file system reorders writes; MDB_NOMETASYNC was \
             not chosen: it still fdatasyncs every commit)"
        }
    };
    format!(
        "unnamed DB in one environment, map size max({MAP_HEADROOM} x expected_bytes, {} GiB) \
         (fixed; MDB_MAP_FULL past it), MDB_NOTLS, maxreaders {MAX_READERS}, {sync}; writers \
         serialize on LMDB's mutex; reads reuse a per-session read txn (mdb_txn_reset/renew)",
        MIN_MAP >> 30
    )
}

#[cfg(not(have_lmdb))]
mod imp {
    use crate::{Config, Error, Result, Store};

    pub fn open(_: &Config) -> Result<Box<dyn Store>> {
        Err(Error::NotInstalled {
            store: "lmdb",
            install: super::INSTALL,
        })
    }
}

#[cfg(have_lmdb)]
mod imp {
    use std::ffi::{CStr, CString, c_char, c_int, c_uint, c_void};
    use std::os::unix::ffi::OsStrExt;
    use std::path::PathBuf;
    use std::ptr::{null, null_mut};

    use super::{MAP_HEADROOM, MAX_READERS, MIN_MAP};
    use crate::{Config, Durability, Error, Op, Result, Session, Store};

    const ID: &str = "lmdb";

    #[repr(C)]
    struct MdbEnv {
        _p: [u8; 0],
    }
    #[repr(C)]
    struct MdbTxn {
        _p: [u8; 0],
    }
    #[repr(C)]
    struct MdbCursor {
        _p: [u8; 0],
    }
    /// `MDB_val`.
    #[repr(C)]
    struct Val {
        size: usize,
        data: *mut c_void,
    }

    impl Val {
        fn of(b: &[u8]) -> Val {
            Val {
                size: b.len(),
                data: b.as_ptr() as *mut c_void,
            }
        }
        fn empty() -> Val {
            Val {
                size: 0,
                data: null_mut(),
            }
        }
        /// # Safety
        /// `self` must describe readable memory for `'a` (LMDB's map, valid
        /// while the transaction that returned it is live).
        unsafe fn bytes<'a>(&self) -> &'a [u8] {
            if self.size == 0 {
                &[]
            } else {
                // SAFETY: the caller's contract.
                unsafe { std::slice::from_raw_parts(self.data.cast(), self.size) }
            }
        }
    }

    const MDB_NOSYNC: c_uint = 0x10000;
    const MDB_RDONLY: c_uint = 0x20000;
    const MDB_NOTLS: c_uint = 0x200000;
    const MDB_NOTFOUND: c_int = -30798;
    /// `MDB_cursor_op` values.
    const MDB_NEXT: c_int = 8;
    const MDB_SET_RANGE: c_int = 17;

    unsafe extern "C" {
        fn mdb_strerror(err: c_int) -> *const c_char;
        fn mdb_env_create(env: *mut *mut MdbEnv) -> c_int;
        fn mdb_env_set_mapsize(env: *mut MdbEnv, size: usize) -> c_int;
        fn mdb_env_set_maxreaders(env: *mut MdbEnv, readers: c_uint) -> c_int;
        fn mdb_env_open(env: *mut MdbEnv, path: *const c_char, flags: c_uint, mode: u32) -> c_int;
        fn mdb_env_close(env: *mut MdbEnv);
        fn mdb_env_copy(env: *mut MdbEnv, path: *const c_char) -> c_int;
        fn mdb_env_sync(env: *mut MdbEnv, force: c_int) -> c_int;
        fn mdb_reader_check(env: *mut MdbEnv, dead: *mut c_int) -> c_int;
        fn mdb_txn_begin(
            env: *mut MdbEnv,
            parent: *mut MdbTxn,
            flags: c_uint,
            txn: *mut *mut MdbTxn,
        ) -> c_int;
        fn mdb_txn_commit(txn: *mut MdbTxn) -> c_int;
        fn mdb_txn_abort(txn: *mut MdbTxn);
        fn mdb_txn_reset(txn: *mut MdbTxn);
        fn mdb_txn_renew(txn: *mut MdbTxn) -> c_int;
        fn mdb_dbi_open(
            txn: *mut MdbTxn,
            name: *const c_char,
            flags: c_uint,
            dbi: *mut c_uint,
        ) -> c_int;
        fn mdb_get(txn: *mut MdbTxn, dbi: c_uint, key: *mut Val, data: *mut Val) -> c_int;
        fn mdb_put(
            txn: *mut MdbTxn,
            dbi: c_uint,
            key: *mut Val,
            data: *mut Val,
            flags: c_uint,
        ) -> c_int;
        fn mdb_del(txn: *mut MdbTxn, dbi: c_uint, key: *mut Val, data: *mut Val) -> c_int;
        fn mdb_cursor_open(txn: *mut MdbTxn, dbi: c_uint, cursor: *mut *mut MdbCursor) -> c_int;
        fn mdb_cursor_close(cursor: *mut MdbCursor);
        fn mdb_cursor_get(
            cursor: *mut MdbCursor,
            key: *mut Val,
            data: *mut Val,
            op: c_int,
        ) -> c_int;
    }

    fn fail(what: &str, code: c_int) -> Error {
        // SAFETY: mdb_strerror returns a static string (or strerror's) for
        // any code.
        let msg = unsafe { CStr::from_ptr(mdb_strerror(code)) }.to_string_lossy();
        Error::Failed {
            store: ID,
            what: format!("{what}: {msg} (error {code})"),
        }
    }

    fn check(what: &str, code: c_int) -> Result<()> {
        if code == 0 {
            Ok(())
        } else {
            Err(fail(what, code))
        }
    }

    struct LmdbStore {
        dir: PathBuf,
        env: *mut MdbEnv,
        /// mdb_env_open succeeded.
        opened: bool,
        dbi: c_uint,
    }

    // SAFETY: an MDB_env is thread-safe; with MDB_NOTLS transactions are
    // not tied to threads (a write transaction still begins and ends on one
    // thread, inside one `write` call). The dbi is a plain number.
    unsafe impl Send for LmdbStore {}
    // SAFETY: as for Send.
    unsafe impl Sync for LmdbStore {}

    impl Drop for LmdbStore {
        fn drop(&mut self) {
            if self.opened {
                // A clean close leaves the store durable even under
                // MDB_NOSYNC (as the other peers' closes do).
                // SAFETY: env is open.
                let r = unsafe { mdb_env_sync(self.env, 1) };
                if r != 0 {
                    eprintln!("{}", fail("mdb_env_sync", r));
                }
            }
            // SAFETY: no transaction is live (sessions borrow the store and
            // abort theirs when dropped); the handle is not used again.
            unsafe { mdb_env_close(self.env) }
        }
    }

    pub fn open(c: &Config) -> Result<Box<dyn Store>> {
        let data = c.dir.join("data.mdb");
        if !c.create && !data.exists() {
            return Err(Error::Failed {
                store: ID,
                what: format!("{}: no such store", data.display()),
            });
        }
        let path = CString::new(c.dir.as_os_str().as_bytes()).map_err(|_| Error::Failed {
            store: ID,
            what: format!("{}: NUL in path", c.dir.display()),
        })?;
        let map = (c.expected_bytes.saturating_mul(MAP_HEADROOM)).max(MIN_MAP);
        let map = usize::try_from(map.next_multiple_of(1 << 20)).unwrap_or(usize::MAX);
        let flags = MDB_NOTLS
            | match c.durability {
                Durability::Durable => 0,
                Durability::Async => MDB_NOSYNC,
            };
        let mut env = null_mut();
        // SAFETY: allocates an environment handle into `env`.
        check("mdb_env_create", unsafe { mdb_env_create(&mut env) })?;
        let mut store = LmdbStore {
            dir: c.dir.clone(),
            env,
            opened: false,
            dbi: 0,
        };
        // From here on, dropping `store` closes the environment.
        // SAFETY: env is a created, not yet opened, environment.
        check("mdb_env_set_mapsize", unsafe {
            mdb_env_set_mapsize(env, map)
        })?;
        // SAFETY: as above.
        check("mdb_env_set_maxreaders", unsafe {
            mdb_env_set_maxreaders(env, MAX_READERS)
        })?;
        // SAFETY: `path` outlives the call.
        check("mdb_env_open", unsafe {
            mdb_env_open(env, path.as_ptr(), flags, 0o644)
        })?;
        store.opened = true;
        let mut dead = 0;
        // SAFETY: env is open; frees reader slots of dead processes.
        check("mdb_reader_check", unsafe {
            mdb_reader_check(env, &mut dead)
        })?;
        let mut txn = null_mut();
        // SAFETY: env is open; a write txn to open the unnamed database.
        check("mdb_txn_begin", unsafe {
            mdb_txn_begin(env, null_mut(), 0, &mut txn)
        })?;
        let mut dbi = 0;
        // SAFETY: txn is live; the unnamed database always exists.
        let r = unsafe { mdb_dbi_open(txn, null(), 0, &mut dbi) };
        if r != 0 {
            // SAFETY: txn is live and not used again.
            unsafe { mdb_txn_abort(txn) };
            return Err(fail("mdb_dbi_open", r));
        }
        // SAFETY: txn is live; commit frees it.
        check("mdb_txn_commit", unsafe { mdb_txn_commit(txn) })?;
        store.dbi = dbi;
        Ok(Box::new(store))
    }

    impl Store for LmdbStore {
        fn session(&self) -> Result<Box<dyn Session + '_>> {
            Ok(Box::new(LmdbSession {
                store: self,
                read: null_mut(),
            }))
        }
        fn disk_bytes(&self) -> Result<u64> {
            crate::store_disk_bytes(ID, &self.dir)
        }
        fn backup(&self, dst: &std::path::Path) -> Result<()> {
            use std::os::unix::ffi::OsStrExt;
            let path =
                std::ffi::CString::new(dst.as_os_str().as_bytes()).map_err(|_| Error::Failed {
                    store: ID,
                    what: format!("{}: NUL in path", dst.display()),
                })?;
            // SAFETY: the environment is open (as long as `self`); `path`
            // outlives the call.
            check("mdb_env_copy", unsafe {
                mdb_env_copy(self.env, path.as_ptr())
            })
        }
    }

    struct LmdbSession<'a> {
        store: &'a LmdbStore,
        /// The session's read-only transaction, reset between reads (null
        /// until the first read).
        read: *mut MdbTxn,
    }

    impl Drop for LmdbSession<'_> {
        fn drop(&mut self) {
            if !self.read.is_null() {
                // SAFETY: a reset read txn may be aborted; not used again.
                unsafe { mdb_txn_abort(self.read) }
            }
        }
    }

    impl LmdbSession<'_> {
        /// Begins (or renews) the read transaction.
        fn begin_read(&mut self) -> Result<*mut MdbTxn> {
            if self.read.is_null() {
                let mut txn = null_mut();
                // SAFETY: env is open; sets `txn` on success.
                check("mdb_txn_begin(RDONLY)", unsafe {
                    mdb_txn_begin(self.store.env, null_mut(), MDB_RDONLY, &mut txn)
                })?;
                self.read = txn;
            } else {
                // SAFETY: self.read is a reset read-only txn.
                check("mdb_txn_renew", unsafe { mdb_txn_renew(self.read) })?;
            }
            Ok(self.read)
        }

        fn end_read(&mut self) {
            // SAFETY: self.read is live; reset releases its snapshot, keeping
            // the handle (and its reader slot) for the next renew.
            unsafe { mdb_txn_reset(self.read) }
        }

        fn apply(&self, txn: *mut MdbTxn, ops: &[Op<'_>]) -> Result<()> {
            let dbi = self.store.dbi;
            for op in ops {
                match *op {
                    Op::Put(k, v) => {
                        let (mut k, mut v) = (Val::of(k), Val::of(v));
                        // SAFETY: txn is a live write txn; put copies the
                        // key and value, which outlive the call.
                        check("mdb_put", unsafe { mdb_put(txn, dbi, &mut k, &mut v, 0) })?;
                    }
                    Op::Delete(k) => {
                        let mut k = Val::of(k);
                        // SAFETY: as for put; no data: delete the key.
                        let r = unsafe { mdb_del(txn, dbi, &mut k, null_mut()) };
                        if r != MDB_NOTFOUND {
                            check("mdb_del", r)?;
                        }
                    }
                }
            }
            Ok(())
        }
    }

    impl Session for LmdbSession<'_> {
        fn write(&mut self, ops: &[Op<'_>]) -> Result<u32> {
            let mut txn = null_mut();
            // SAFETY: env is open; waits for LMDB's writer mutex.
            check("mdb_txn_begin", unsafe {
                mdb_txn_begin(self.store.env, null_mut(), 0, &mut txn)
            })?;
            if let Err(e) = self.apply(txn, ops) {
                // SAFETY: txn is live; abort frees it.
                unsafe { mdb_txn_abort(txn) };
                return Err(e);
            }
            // SAFETY: txn is live; commit frees it whatever the result.
            check("mdb_txn_commit", unsafe { mdb_txn_commit(txn) })?;
            Ok(0)
        }

        fn get(&mut self, key: &[u8], f: &mut dyn FnMut(&[u8])) -> Result<bool> {
            let txn = self.begin_read()?;
            let mut k = Val::of(key);
            let mut v = Val::empty();
            // SAFETY: txn is live; the key outlives the call; v points into
            // the map while txn is live.
            let r = unsafe { mdb_get(txn, self.store.dbi, &mut k, &mut v) };
            let found = match r {
                0 => {
                    // SAFETY: txn is still live.
                    f(unsafe { v.bytes() });
                    Ok(true)
                }
                MDB_NOTFOUND => Ok(false),
                r => Err(fail("mdb_get", r)),
            };
            self.end_read();
            found
        }

        fn range(
            &mut self,
            start: &[u8],
            n: usize,
            f: &mut dyn FnMut(&[u8], &[u8]),
        ) -> Result<usize> {
            let txn = self.begin_read()?;
            let mut cur = null_mut();
            // SAFETY: txn is live; sets `cur` on success.
            if let Err(e) = check("mdb_cursor_open", unsafe {
                mdb_cursor_open(txn, self.store.dbi, &mut cur)
            }) {
                self.end_read();
                return Err(e);
            }
            let mut seen = 0;
            let mut k = Val::of(start);
            let mut v = Val::empty();
            let mut op = MDB_SET_RANGE;
            let result = loop {
                if seen == n {
                    break Ok(seen);
                }
                // SAFETY: cur is live; `start` outlives the first call; k and v
                // then point into the map while txn is live.
                match unsafe { mdb_cursor_get(cur, &mut k, &mut v, op) } {
                    0 => {
                        // SAFETY: txn is still live.
                        f(unsafe { k.bytes() }, unsafe { v.bytes() });
                        seen += 1;
                        op = MDB_NEXT;
                    }
                    MDB_NOTFOUND => break Ok(seen),
                    r => break Err(fail("mdb_cursor_get", r)),
                }
            };
            // SAFETY: cur is live (a read-only txn's cursor must be closed
            // explicitly) and not used again.
            unsafe { mdb_cursor_close(cur) };
            self.end_read();
            result
        }
    }
}
