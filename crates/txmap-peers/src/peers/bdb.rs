//! Berkeley DB 5.3, transactional: a B-tree (`DB_BTREE`) and a hash table
//! (`DB_HASH`) in an environment with locking, logging, a shared buffer pool
//! and recovery, through the C shim `c/bdb.c` (the library's handles are
//! structs of function pointers).
//!
//! One process: `DB_PRIVATE`, the regions (cache, locks, log buffer) on the
//! heap. Shared (`Config::shared`): the regions are files in the store's
//! directory (counted by `disk_bytes`: the cache's file grows up to
//! 1.25 × `cache_bytes`), and `DB_REGISTER` keeps `DB_RECOVER` from
//! rebuilding them under another live process.
//!
//! Writes run in a transaction retried on `DB_LOCK_DEADLOCK` (the deadlock
//! detector runs whenever a lock request blocks); reads run in a read
//! transaction of their own, also retried, and call back only after it
//! committed. Every 1,024 commits a store checkpoints if 16 MiB of log were
//! written since the last, and old log files are removed
//! (`DB_LOG_AUTO_REMOVE`).

use crate::{Durability, Kind, Peer};

#[cfg_attr(have_bdb, allow(dead_code))]
const INSTALL: &str = "sudo apt-get install libdb5.3-dev";

/// The two Berkeley DB peers, B-tree first.
pub fn stores() -> Vec<Peer> {
    vec![
        Peer {
            id: "bdb-btree",
            name: "Berkeley DB 5.3 B-tree",
            kind: Kind::Ordered,
            processes: true,
            available: AVAILABLE,
            describe: |d| describe("DB_BTREE", d),
            open: |c| imp::open(c, "bdb-btree", false),
        },
        Peer {
            id: "bdb-hash",
            name: "Berkeley DB 5.3 hash",
            kind: Kind::Hash,
            processes: true,
            available: AVAILABLE,
            describe: |d| describe("DB_HASH", d),
            open: |c| imp::open(c, "bdb-hash", true),
        },
    ]
}

#[cfg(have_bdb)]
const AVAILABLE: Result<(), &str> = Ok(());
#[cfg(not(have_bdb))]
const AVAILABLE: Result<(), &str> = Err(INSTALL);

fn describe(access: &str, d: Durability) -> String {
    let commit = match d {
        Durability::Durable => "commits with DB_TXN_SYNC (log fdatasync per commit)",
        Durability::Async => {
            "commits with DB_TXN_WRITE_NOSYNC (log write(2) at commit, synced at checkpoints: \
             a process crash loses nothing, power loss may lose recent commits; not \
             DB_TXN_NOSYNC, which leaves commits in the log buffer for a process crash to lose)"
        }
    };
    format!(
        "{access}, default page size (the file system's block size), in an environment \
         DB_CREATE|DB_INIT_TXN|DB_INIT_LOCK|DB_INIT_LOG|DB_INIT_MPOOL|DB_THREAD|DB_RECOVER, \
         +DB_PRIVATE (heap regions) in one process, +DB_REGISTER (file-backed regions) when \
         shared; cache Config::cache_bytes (BDB adds 25%); {commit}; lk_detect DB_LOCK_DEFAULT, \
         retry on DB_LOCK_DEADLOCK; limits 100k locks/objects, 4096 lockers, 1024 txns; one \
         degree-3 read txn per get/range; checkpoint every 16 MiB of log, DB_LOG_AUTO_REMOVE"
    )
}

#[cfg(not(have_bdb))]
mod imp {
    use crate::{Config, Error, Result, Store};

    pub fn open(_: &Config, id: &'static str, _hash: bool) -> Result<Box<dyn Store>> {
        Err(Error::NotInstalled {
            store: id,
            install: super::INSTALL,
        })
    }
}

#[cfg(have_bdb)]
mod imp {
    use std::ffi::{CStr, CString, c_char, c_int, c_void};
    use std::os::unix::ffi::OsStrExt;
    use std::path::PathBuf;
    use std::ptr::{null, null_mut};
    use std::sync::atomic::{AtomicU64, Ordering};

    use crate::{Config, Durability, Error, Op, Result, Session, Store};

    /// Opaque Berkeley DB handles.
    #[repr(C)]
    struct DbEnv {
        _p: [u8; 0],
    }
    #[repr(C)]
    struct Db {
        _p: [u8; 0],
    }
    #[repr(C)]
    struct DbTxn {
        _p: [u8; 0],
    }
    #[repr(C)]
    struct Dbc {
        _p: [u8; 0],
    }
    #[repr(C)]
    struct Bufs {
        _p: [u8; 0],
    }

    /// `struct txb_opts` in c/bdb.c.
    #[repr(C)]
    struct Opts {
        hash: u32,
        durable: u32,
        create: u32,
        shared: u32,
        cache_bytes: u64,
        hash_nelem: u32,
    }

    const DB_NOTFOUND: c_int = -30988;
    const DB_LOCK_DEADLOCK: c_int = -30993;
    const DB_LOCK_NOTGRANTED: c_int = -30992;

    /// Log kilobytes between checkpoints, and commits between checks.
    const CHECKPOINT_KB: u32 = 16 << 10;
    const CHECK_EVERY: u64 = 1024;
    /// Attempts before a write or read gives up on deadlocks.
    const MAX_ATTEMPTS: u32 = 100_000;

    unsafe extern "C" {
        fn txb_take_msg() -> *const c_char;
        fn txb_strerror(code: c_int) -> *const c_char;
        fn txb_open(
            dir: *const c_char,
            o: *const Opts,
            env: *mut *mut DbEnv,
            db: *mut *mut Db,
        ) -> c_int;
        fn txb_close(env: *mut DbEnv, db: *mut Db) -> c_int;
        fn txb_checkpoint(env: *mut DbEnv, kbytes: u32) -> c_int;
        fn txb_log_bytes(env: *mut DbEnv, out: *mut u64) -> c_int;
        fn txb_begin(env: *mut DbEnv, txn: *mut *mut DbTxn) -> c_int;
        fn txb_commit(txn: *mut DbTxn, durable: c_int) -> c_int;
        fn txb_abort(txn: *mut DbTxn) -> c_int;
        fn txb_put(
            db: *mut Db,
            txn: *mut DbTxn,
            k: *const c_void,
            kn: u32,
            v: *const c_void,
            vn: u32,
        ) -> c_int;
        fn txb_del(db: *mut Db, txn: *mut DbTxn, k: *const c_void, kn: u32) -> c_int;
        fn txb_bufs_new() -> *mut Bufs;
        fn txb_bufs_free(b: *mut Bufs);
        fn txb_get(
            db: *mut Db,
            txn: *mut DbTxn,
            b: *mut Bufs,
            k: *const c_void,
            kn: u32,
            v: *mut *const c_void,
            vn: *mut u32,
        ) -> c_int;
        fn txb_cursor(db: *mut Db, txn: *mut DbTxn, c: *mut *mut Dbc) -> c_int;
        fn txb_cursor_close(c: *mut Dbc) -> c_int;
        fn txb_cursor_next(
            c: *mut Dbc,
            b: *mut Bufs,
            start: *const c_void,
            sn: u32,
            k: *mut *const c_void,
            kn: *mut u32,
            v: *mut *const c_void,
            vn: *mut u32,
        ) -> c_int;
    }

    /// The error for Berkeley DB code `code` returned by `what`, with the
    /// library's message and the last message its error callback got.
    fn fail(store: &'static str, what: &str, code: c_int) -> Error {
        // SAFETY: db_strerror returns a static or thread-local NUL-terminated
        // string for any code; txb_take_msg returns this thread's buffer.
        let (msg, detail) = unsafe {
            (
                CStr::from_ptr(txb_strerror(code))
                    .to_string_lossy()
                    .into_owned(),
                CStr::from_ptr(txb_take_msg())
                    .to_string_lossy()
                    .into_owned(),
            )
        };
        let detail = if detail.is_empty() {
            String::new()
        } else {
            format!("; {detail}")
        };
        Error::Failed {
            store,
            what: format!("{what}: {msg} (error {code}){detail}"),
        }
    }

    fn retryable(code: c_int) -> bool {
        code == DB_LOCK_DEADLOCK || code == DB_LOCK_NOTGRANTED
    }

    fn len32(store: &'static str, b: &[u8]) -> Result<u32> {
        u32::try_from(b.len()).map_err(|_| Error::Failed {
            store,
            what: format!("{} bytes: too long for a DBT", b.len()),
        })
    }

    /// A slice from a pointer and length Berkeley DB returned.
    ///
    /// # Safety
    /// `p` must point at `n` readable bytes (or `n` be 0) for `'a`.
    unsafe fn slice<'a>(p: *const c_void, n: u32) -> &'a [u8] {
        if n == 0 {
            &[]
        } else {
            // SAFETY: the caller's contract.
            unsafe { std::slice::from_raw_parts(p.cast(), n as usize) }
        }
    }

    struct BdbStore {
        id: &'static str,
        hash: bool,
        dir: PathBuf,
        durable: bool,
        env: *mut DbEnv,
        db: *mut Db,
        commits: AtomicU64,
        /// Bytes logged at open (`Store::logged_bytes`).
        log0: u64,
    }

    /// Bytes written to the environment's log since it was opened
    /// (`log_stat`).
    fn log_bytes(env: *mut DbEnv) -> Option<u64> {
        let mut out = 0;
        // SAFETY: `env` is open; the call writes `out` only.
        (unsafe { txb_log_bytes(env, &mut out) } == 0).then_some(out)
    }

    // SAFETY: the environment and database were opened with DB_THREAD, which
    // makes their handles free-threaded; everything else is plain data.
    unsafe impl Send for BdbStore {}
    // SAFETY: as for Send.
    unsafe impl Sync for BdbStore {}

    pub fn open(c: &Config, id: &'static str, hash: bool) -> Result<Box<dyn Store>> {
        let dir = CString::new(c.dir.as_os_str().as_bytes()).map_err(|_| Error::Failed {
            store: id,
            what: format!("{}: NUL in path", c.dir.display()),
        })?;
        let opts = Opts {
            hash: hash.into(),
            durable: (c.durability == Durability::Durable).into(),
            create: c.create.into(),
            shared: c.shared.into(),
            cache_bytes: c.cache_bytes.max(1 << 20),
            hash_nelem: u32::try_from(c.expected_keys).unwrap_or(u32::MAX),
        };
        let mut env = null_mut();
        let mut db = null_mut();
        // SAFETY: `dir` and `opts` outlive the call; txb_open writes both
        // out-pointers (null on failure) and cleans up after itself on error.
        let r = unsafe { txb_open(dir.as_ptr(), &opts, &mut env, &mut db) };
        if r != 0 {
            return Err(fail(id, &format!("open {}", c.dir.display()), r));
        }
        Ok(Box::new(BdbStore {
            id,
            hash,
            dir: c.dir.clone(),
            durable: c.durability == Durability::Durable,
            env,
            db,
            commits: AtomicU64::new(0),
            log0: log_bytes(env).unwrap_or(0),
        }))
    }

    impl Drop for BdbStore {
        fn drop(&mut self) {
            // SAFETY: the handles are open and no session is left (sessions
            // borrow the store); they are not used again.
            let r = unsafe { txb_close(self.env, self.db) };
            if r != 0 {
                eprintln!("{}", fail(self.id, "close", r));
            }
        }
    }

    impl Store for BdbStore {
        fn session(&self) -> Result<Box<dyn Session + '_>> {
            // SAFETY: allocates a pair of empty DBTs; freed in Drop.
            let bufs = unsafe { txb_bufs_new() };
            if bufs.is_null() {
                return Err(Error::Failed {
                    store: self.id,
                    what: "out of memory for a session".into(),
                });
            }
            Ok(Box::new(BdbSession {
                store: self,
                bufs,
                arena: Vec::new(),
                pairs: Vec::new(),
            }))
        }
        fn disk_bytes(&self) -> Result<u64> {
            crate::store_disk_bytes(self.id, &self.dir)
        }
        fn logged_bytes(&self) -> Option<u64> {
            log_bytes(self.env)?.checked_sub(self.log0)
        }
    }

    struct BdbSession<'a> {
        store: &'a BdbStore,
        bufs: *mut Bufs,
        /// A range's pairs, copied out before its transaction ends (so a
        /// retried range calls back only once per pair).
        arena: Vec<u8>,
        pairs: Vec<(usize, usize, usize)>,
    }

    impl Drop for BdbSession<'_> {
        fn drop(&mut self) {
            // SAFETY: allocated by txb_bufs_new, freed once.
            unsafe { txb_bufs_free(self.bufs) }
        }
    }

    impl BdbSession<'_> {
        fn begin(&self) -> Result<*mut DbTxn> {
            let mut txn = null_mut();
            // SAFETY: the environment is open; txn_begin sets `txn` on success.
            let r = unsafe { txb_begin(self.store.env, &mut txn) };
            if r != 0 {
                return Err(fail(self.store.id, "txn_begin", r));
            }
            Ok(txn)
        }

        /// One attempt at applying `ops` in `txn` (left open).
        fn apply(&self, txn: *mut DbTxn, ops: &[Op<'_>]) -> Result<c_int> {
            let (id, db) = (self.store.id, self.store.db);
            for op in ops {
                let r = match *op {
                    Op::Put(k, v) => {
                        let (kn, vn) = (len32(id, k)?, len32(id, v)?);
                        // SAFETY: db and txn are live; the DBTs point at the
                        // slices, which outlive the call (put copies them).
                        unsafe { txb_put(db, txn, k.as_ptr().cast(), kn, v.as_ptr().cast(), vn) }
                    }
                    Op::Delete(k) => {
                        let kn = len32(id, k)?;
                        // SAFETY: as for put.
                        unsafe { txb_del(db, txn, k.as_ptr().cast(), kn) }
                    }
                };
                if r != 0 {
                    return Ok(r);
                }
            }
            Ok(0)
        }

        /// Ends a read transaction.
        fn end_read(&self, txn: *mut DbTxn, commit: bool) -> Result<()> {
            // SAFETY: txn is live and not used after (commit and abort free it).
            let r = unsafe {
                if commit {
                    txb_commit(txn, 0)
                } else {
                    txb_abort(txn)
                }
            };
            if r != 0 {
                return Err(fail(self.store.id, "read txn end", r));
            }
            Ok(())
        }

        fn retries_exhausted(&self, what: &str) -> Error {
            Error::Failed {
                store: self.store.id,
                what: format!("{what}: still deadlocking after {MAX_ATTEMPTS} attempts"),
            }
        }
    }

    impl Session for BdbSession<'_> {
        fn write(&mut self, ops: &[Op<'_>]) -> Result<u32> {
            let s = self.store;
            for attempt in 0..MAX_ATTEMPTS {
                let txn = self.begin()?;
                let r = match self.apply(txn, ops) {
                    Ok(r) => r,
                    Err(e) => {
                        // SAFETY: txn is live; abort frees it.
                        unsafe { txb_abort(txn) };
                        return Err(e);
                    }
                };
                if r != 0 {
                    // SAFETY: txn is live; abort frees it.
                    unsafe { txb_abort(txn) };
                    if retryable(r) {
                        continue;
                    }
                    return Err(fail(s.id, "put/del", r));
                }
                // SAFETY: txn is live; commit frees it whatever the result.
                let r = unsafe { txb_commit(txn, s.durable.into()) };
                if r != 0 {
                    if retryable(r) {
                        continue;
                    }
                    return Err(fail(s.id, "commit", r));
                }
                if s.commits.fetch_add(1, Ordering::Relaxed) % CHECK_EVERY == CHECK_EVERY - 1 {
                    // SAFETY: the environment is open and free-threaded.
                    let r = unsafe { txb_checkpoint(s.env, CHECKPOINT_KB) };
                    if r != 0 {
                        return Err(fail(s.id, "checkpoint", r));
                    }
                }
                return Ok(attempt);
            }
            Err(self.retries_exhausted("write"))
        }

        fn get(&mut self, key: &[u8], f: &mut dyn FnMut(&[u8])) -> Result<bool> {
            let kn = len32(self.store.id, key)?;
            for _ in 0..MAX_ATTEMPTS {
                let txn = self.begin()?;
                let (mut v, mut vn) = (null(), 0u32);
                // SAFETY: db, txn and bufs are live; the key outlives the call;
                // on success v/vn describe the value in bufs.
                let r = unsafe {
                    txb_get(
                        self.store.db,
                        txn,
                        self.bufs,
                        key.as_ptr().cast(),
                        kn,
                        &mut v,
                        &mut vn,
                    )
                };
                match r {
                    0 => {
                        self.end_read(txn, true)?;
                        // SAFETY: the value stays in bufs until the next call
                        // on this session.
                        f(unsafe { slice(v, vn) });
                        return Ok(true);
                    }
                    DB_NOTFOUND => {
                        self.end_read(txn, true)?;
                        return Ok(false);
                    }
                    r => {
                        self.end_read(txn, false)?;
                        if !retryable(r) {
                            return Err(fail(self.store.id, "get", r));
                        }
                    }
                }
            }
            Err(self.retries_exhausted("get"))
        }

        fn range(
            &mut self,
            start: &[u8],
            n: usize,
            f: &mut dyn FnMut(&[u8], &[u8]),
        ) -> Result<usize> {
            let id = self.store.id;
            if self.store.hash {
                return Err(Error::Unsupported {
                    store: id,
                    what: "range reads on a hash table".into(),
                });
            }
            let sn = len32(id, start)?;
            'attempt: for _ in 0..MAX_ATTEMPTS {
                self.arena.clear();
                self.pairs.clear();
                let txn = self.begin()?;
                let mut cur = null_mut();
                // SAFETY: db and txn are live; sets `cur` on success.
                let r = unsafe { txb_cursor(self.store.db, txn, &mut cur) };
                if r != 0 {
                    self.end_read(txn, false)?;
                    if retryable(r) {
                        continue;
                    }
                    return Err(fail(id, "cursor", r));
                }
                let mut r = 0;
                while self.pairs.len() < n {
                    let (mut k, mut kn, mut v, mut vn) = (null(), 0u32, null(), 0u32);
                    let first = self.pairs.is_empty();
                    // SAFETY: cur and bufs are live; `start` (read only on the
                    // first call) outlives it; on success k/v point into bufs.
                    r = unsafe {
                        txb_cursor_next(
                            cur,
                            self.bufs,
                            if first { start.as_ptr().cast() } else { null() },
                            sn,
                            &mut k,
                            &mut kn,
                            &mut v,
                            &mut vn,
                        )
                    };
                    if r != 0 {
                        break;
                    }
                    // SAFETY: k/v point into bufs until the next cursor call.
                    let (k, v) = unsafe { (slice(k, kn), slice(v, vn)) };
                    let at = self.arena.len();
                    self.arena.extend_from_slice(k);
                    self.arena.extend_from_slice(v);
                    self.pairs.push((at, k.len(), v.len()));
                }
                // SAFETY: the cursor is live and not used again.
                let rc = unsafe { txb_cursor_close(cur) };
                let ok = (r == 0 || r == DB_NOTFOUND) && rc == 0;
                self.end_read(txn, ok)?;
                for code in [r, rc] {
                    if code != 0 && code != DB_NOTFOUND {
                        if retryable(code) {
                            continue 'attempt;
                        }
                        return Err(fail(id, "cursor get", code));
                    }
                }
                for &(at, kl, vl) in &self.pairs {
                    f(&self.arena[at..at + kl], &self.arena[at + kl..at + kl + vl]);
                }
                return Ok(self.pairs.len());
            }
            Err(self.retries_exhausted("range"))
        }
    }
}
