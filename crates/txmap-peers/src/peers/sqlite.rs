//! SQLite 3 in WAL mode: one table `kv(k BLOB PRIMARY KEY, v BLOB) WITHOUT
//! ROWID` in `data.db`, one connection per session with its statements
//! prepared once, writes in `BEGIN IMMEDIATE` transactions.
//!
//! Lock waits go through SQLite's busy handler (`sqlite3_busy_timeout`);
//! a write that still gets `SQLITE_BUSY` is rolled back and retried, and
//! those retries are what `write` counts. The store keeps one connection
//! of its own open so the WAL is not checkpointed and removed whenever the
//! last session closes.

use crate::{Durability, Kind, Peer};

#[cfg_attr(have_sqlite, allow(dead_code))]
const INSTALL: &str = "sudo apt-get install libsqlite3-dev";

/// Milliseconds SQLite's busy handler waits for a lock before `SQLITE_BUSY`.
const BUSY_TIMEOUT_MS: i32 = 5_000;

/// The SQLite peer.
pub fn peer() -> Peer {
    Peer {
        id: "sqlite",
        name: "SQLite 3 (WAL)",
        kind: Kind::Ordered,
        processes: true,
        #[cfg(have_sqlite)]
        available: Ok(()),
        #[cfg(not(have_sqlite))]
        available: Err(INSTALL),
        describe,
        open: imp::open,
    }
}

fn describe(d: Durability) -> String {
    let sync = match d {
        Durability::Durable => "synchronous=FULL (WAL fsync per commit)",
        Durability::Async => {
            "synchronous=NORMAL (WAL written at commit, synced only at checkpoints: a process \
             crash loses nothing, power loss may roll back recent commits)"
        }
    };
    format!(
        "journal_mode=WAL, {sync}, table kv(k BLOB PRIMARY KEY, v BLOB) WITHOUT ROWID, one \
         connection per session (SQLITE_OPEN_NOMUTEX) with prepared statements, \
         cache_size = Config::cache_bytes per connection, default auto-checkpoint (1000 pages), \
         BEGIN IMMEDIATE writes, busy_timeout {BUSY_TIMEOUT_MS} ms then rollback and retry; \
         reads are single statements (implicit read txn)"
    )
}

#[cfg(not(have_sqlite))]
mod imp {
    use crate::{Config, Error, Result, Store};

    pub fn open(_: &Config) -> Result<Box<dyn Store>> {
        Err(Error::NotInstalled {
            store: "sqlite",
            install: super::INSTALL,
        })
    }
}

#[cfg(have_sqlite)]
mod imp {
    use std::ffi::{CStr, CString, c_char, c_int, c_void};
    use std::os::unix::ffi::OsStrExt;
    use std::path::PathBuf;
    use std::ptr::{null, null_mut};

    use super::BUSY_TIMEOUT_MS;
    use crate::{Config, Durability, Error, Op, Result, Session, Store};

    const ID: &str = "sqlite";

    #[repr(C)]
    struct Sqlite3 {
        _p: [u8; 0],
    }
    #[repr(C)]
    struct Stmt {
        _p: [u8; 0],
    }

    const SQLITE_OK: c_int = 0;
    const SQLITE_BUSY: c_int = 5;
    const SQLITE_ROW: c_int = 100;
    const SQLITE_DONE: c_int = 101;
    const SQLITE_OPEN_READWRITE: c_int = 0x2;
    const SQLITE_OPEN_CREATE: c_int = 0x4;
    const SQLITE_OPEN_NOMUTEX: c_int = 0x8000;
    /// Writes and reads that give up after this many `SQLITE_BUSY`s (each
    /// after the busy handler's own waiting).
    const MAX_ATTEMPTS: u32 = 1_000;

    /// `sqlite3_destructor_type`; `None` is `SQLITE_STATIC`.
    type Destructor = Option<unsafe extern "C" fn(*mut c_void)>;

    unsafe extern "C" {
        fn sqlite3_open_v2(
            filename: *const c_char,
            db: *mut *mut Sqlite3,
            flags: c_int,
            vfs: *const c_char,
        ) -> c_int;
        fn sqlite3_close(db: *mut Sqlite3) -> c_int;
        fn sqlite3_backup_init(
            dst: *mut Sqlite3,
            dst_name: *const c_char,
            src: *mut Sqlite3,
            src_name: *const c_char,
        ) -> *mut c_void;
        fn sqlite3_backup_step(b: *mut c_void, pages: c_int) -> c_int;
        fn sqlite3_backup_finish(b: *mut c_void) -> c_int;
        fn sqlite3_errmsg(db: *mut Sqlite3) -> *const c_char;
        fn sqlite3_errstr(code: c_int) -> *const c_char;
        fn sqlite3_extended_errcode(db: *mut Sqlite3) -> c_int;
        fn sqlite3_busy_timeout(db: *mut Sqlite3, ms: c_int) -> c_int;
        fn sqlite3_prepare_v2(
            db: *mut Sqlite3,
            sql: *const c_char,
            n: c_int,
            stmt: *mut *mut Stmt,
            tail: *mut *const c_char,
        ) -> c_int;
        fn sqlite3_step(stmt: *mut Stmt) -> c_int;
        fn sqlite3_reset(stmt: *mut Stmt) -> c_int;
        fn sqlite3_clear_bindings(stmt: *mut Stmt) -> c_int;
        fn sqlite3_finalize(stmt: *mut Stmt) -> c_int;
        fn sqlite3_bind_blob(
            stmt: *mut Stmt,
            i: c_int,
            p: *const c_void,
            n: c_int,
            d: Destructor,
        ) -> c_int;
        fn sqlite3_bind_int64(stmt: *mut Stmt, i: c_int, v: i64) -> c_int;
        fn sqlite3_column_blob(stmt: *mut Stmt, i: c_int) -> *const c_void;
        fn sqlite3_column_bytes(stmt: *mut Stmt, i: c_int) -> c_int;
        fn sqlite3_column_text(stmt: *mut Stmt, i: c_int) -> *const c_char;
    }

    /// A connection and the statements prepared on it (finalized, then the
    /// connection closed, on drop).
    struct Conn {
        db: *mut Sqlite3,
        stmts: Vec<*mut Stmt>,
    }

    impl Drop for Conn {
        fn drop(&mut self) {
            for &s in &self.stmts {
                // SAFETY: prepared on this connection, finalized once.
                unsafe { sqlite3_finalize(s) };
            }
            // SAFETY: every statement is finalized; the handle is not used again.
            let r = unsafe { sqlite3_close(self.db) };
            if r != SQLITE_OK {
                eprintln!("{}", code_error("sqlite3_close", r));
            }
        }
    }

    fn code_error(what: &str, code: c_int) -> Error {
        // SAFETY: sqlite3_errstr returns a static string for any code.
        let msg = unsafe { CStr::from_ptr(sqlite3_errstr(code)) }.to_string_lossy();
        Error::Failed {
            store: ID,
            what: format!("{what}: {msg} (code {code})"),
        }
    }

    impl Conn {
        fn open(path: &CStr, create: bool) -> Result<Conn> {
            let flags = SQLITE_OPEN_READWRITE
                | SQLITE_OPEN_NOMUTEX
                | if create { SQLITE_OPEN_CREATE } else { 0 };
            let mut db = null_mut();
            // SAFETY: `path` outlives the call; a handle is returned in `db`
            // even on most errors (null only when out of memory).
            let r = unsafe { sqlite3_open_v2(path.as_ptr(), &mut db, flags, null()) };
            if db.is_null() {
                return Err(code_error("sqlite3_open_v2", r));
            }
            let conn = Conn {
                db,
                stmts: Vec::new(),
            };
            if r != SQLITE_OK {
                return Err(conn.error(&format!("open {}", path.to_string_lossy())));
            }
            // SAFETY: db is open.
            unsafe { sqlite3_busy_timeout(db, BUSY_TIMEOUT_MS) };
            Ok(conn)
        }

        /// The connection's last error, with SQLite's message and extended code.
        fn error(&self, what: &str) -> Error {
            // SAFETY: db is open; errmsg's string is valid until the next call
            // on the connection, and copied at once.
            let (msg, code) = unsafe {
                (
                    CStr::from_ptr(sqlite3_errmsg(self.db))
                        .to_string_lossy()
                        .into_owned(),
                    sqlite3_extended_errcode(self.db),
                )
            };
            Error::Failed {
                store: ID,
                what: format!("{what}: {msg} (code {code})"),
            }
        }

        /// Prepares `sql`; the statement is finalized when the connection
        /// closes.
        fn prepare(&mut self, sql: &str) -> Result<*mut Stmt> {
            let mut s = null_mut();
            let n = c_int::try_from(sql.len()).map_err(|_| Error::Failed {
                store: ID,
                what: format!("{} bytes of SQL", sql.len()),
            })?;
            // SAFETY: db is open; `sql` is read for `n` bytes.
            let r =
                unsafe { sqlite3_prepare_v2(self.db, sql.as_ptr().cast(), n, &mut s, null_mut()) };
            if r != SQLITE_OK {
                return Err(self.error(&format!("prepare {sql:?}")));
            }
            self.stmts.push(s);
            Ok(s)
        }

        /// Runs a statement with no parameters to completion: SQLITE_DONE or
        /// SQLITE_ROW (its first row ignored) is Ok, anything else its code.
        fn run(&self, s: *mut Stmt) -> std::result::Result<(), c_int> {
            // SAFETY: s is a statement of this connection.
            let r = unsafe { sqlite3_step(s) };
            // SAFETY: as above; reset returns the step's error again, ignored.
            unsafe { sqlite3_reset(s) };
            if r == SQLITE_DONE || r == SQLITE_ROW {
                Ok(())
            } else {
                Err(r)
            }
        }

        /// Executes one SQL statement now (setup only).
        fn exec(&mut self, sql: &str) -> Result<()> {
            let s = self.prepare(sql)?;
            self.run(s).map_err(|_| self.error(sql))
        }

        /// Binds blob parameter `i`; the bytes must stay put until the
        /// statement is reset and its bindings cleared.
        fn bind(&self, s: *mut Stmt, i: c_int, b: &[u8]) -> Result<()> {
            let n = c_int::try_from(b.len()).map_err(|_| Error::Failed {
                store: ID,
                what: format!("{} bytes: too long for a blob", b.len()),
            })?;
            // SAFETY: s is this connection's; SQLITE_STATIC: the caller keeps
            // `b` alive until reset + clear_bindings. A slice's pointer is
            // never null, so an empty slice binds an empty blob, not NULL.
            if unsafe { sqlite3_bind_blob(s, i, b.as_ptr().cast(), n, None) } != SQLITE_OK {
                return Err(self.error("bind"));
            }
            Ok(())
        }
    }

    /// Resets `s` and clears its bindings (so it holds no borrowed bytes).
    fn done(s: *mut Stmt) {
        // SAFETY: s is a live statement; reset's result repeats the step's.
        unsafe {
            sqlite3_reset(s);
            sqlite3_clear_bindings(s);
        }
    }

    /// Column `i` of the current row of `s` as bytes.
    ///
    /// # Safety
    /// `s` must be on a row; the bytes are valid until it steps or resets.
    unsafe fn column<'a>(s: *mut Stmt, i: c_int) -> &'a [u8] {
        // SAFETY: the caller's contract; blob before bytes, as SQLite says.
        unsafe {
            let p = sqlite3_column_blob(s, i);
            let n = sqlite3_column_bytes(s, i);
            if p.is_null() || n <= 0 {
                &[]
            } else {
                std::slice::from_raw_parts(p.cast(), n as usize)
            }
        }
    }

    struct SqliteStore {
        path: CString,
        dir: PathBuf,
        durable: bool,
        cache_kib: u64,
        /// Held open so the WAL persists between sessions; not used.
        _keeper: Conn,
    }

    // SAFETY: the keeper connection is only closed (on drop), never used
    // concurrently; the rest is plain data.
    unsafe impl Send for SqliteStore {}
    // SAFETY: shared references never touch the keeper connection.
    unsafe impl Sync for SqliteStore {}

    pub fn open(c: &Config) -> Result<Box<dyn Store>> {
        let file = c.dir.join("data.db");
        let path = CString::new(file.as_os_str().as_bytes()).map_err(|_| Error::Failed {
            store: ID,
            what: format!("{}: NUL in path", file.display()),
        })?;
        let mut keeper = Conn::open(&path, c.create)?;
        if c.create {
            let s = keeper.prepare("PRAGMA journal_mode=WAL")?;
            // SAFETY: s is keeper's statement; the mode's name is read before
            // the reset.
            let mode = unsafe {
                let r = sqlite3_step(s);
                let p = sqlite3_column_text(s, 0);
                let mode = if r == SQLITE_ROW && !p.is_null() {
                    CStr::from_ptr(p).to_string_lossy().into_owned()
                } else {
                    String::new()
                };
                sqlite3_reset(s);
                mode
            };
            if !mode.eq_ignore_ascii_case("wal") {
                return Err(Error::Failed {
                    store: ID,
                    what: format!("journal_mode=WAL refused (mode {mode:?})"),
                });
            }
            keeper
                .exec("CREATE TABLE IF NOT EXISTS kv(k BLOB PRIMARY KEY, v BLOB) WITHOUT ROWID")?;
        }
        Ok(Box::new(SqliteStore {
            path,
            dir: c.dir.clone(),
            durable: c.durability == Durability::Durable,
            cache_kib: (c.cache_bytes / 1024).max(64),
            _keeper: keeper,
        }))
    }

    impl Store for SqliteStore {
        fn session(&self) -> Result<Box<dyn Session + '_>> {
            let mut conn = Conn::open(&self.path, false)?;
            let sync = if self.durable { "FULL" } else { "NORMAL" };
            conn.exec(&format!("PRAGMA synchronous={sync}"))?;
            conn.exec(&format!("PRAGMA cache_size=-{}", self.cache_kib))?;
            Ok(Box::new(SqliteSession {
                begin: conn.prepare("BEGIN IMMEDIATE")?,
                commit: conn.prepare("COMMIT")?,
                rollback: conn.prepare("ROLLBACK")?,
                put: conn.prepare(
                    "INSERT INTO kv(k, v) VALUES (?1, ?2) ON CONFLICT(k) DO UPDATE SET v = excluded.v",
                )?,
                del: conn.prepare("DELETE FROM kv WHERE k = ?1")?,
                get: conn.prepare("SELECT v FROM kv WHERE k = ?1")?,
                range: conn.prepare("SELECT k, v FROM kv WHERE k >= ?1 ORDER BY k LIMIT ?2")?,
                conn,
            }))
        }
        fn disk_bytes(&self) -> Result<u64> {
            crate::store_disk_bytes(ID, &self.dir)
        }
        fn backup(&self, dst: &std::path::Path) -> Result<()> {
            let file = dst.join("data.db");
            let path = CString::new(file.as_os_str().as_bytes()).map_err(|_| Error::Failed {
                store: ID,
                what: format!("{}: NUL in path", file.display()),
            })?;
            let src = Conn::open(&self.path, false)?;
            let to = Conn::open(&path, true)?;
            let main = c"main";
            // SAFETY: both connections are open for the whole copy and used
            // by this thread only; the backup handle is finished once.
            unsafe {
                let b = sqlite3_backup_init(to.db, main.as_ptr(), src.db, main.as_ptr());
                if b.is_null() {
                    return Err(code_error(
                        "sqlite3_backup_init",
                        sqlite3_extended_errcode(to.db),
                    ));
                }
                // -1: every page in one step (one read transaction on the source).
                let r = sqlite3_backup_step(b, -1);
                let f = sqlite3_backup_finish(b);
                if r != SQLITE_DONE {
                    return Err(code_error("sqlite3_backup_step", r));
                }
                if f != SQLITE_OK {
                    return Err(code_error("sqlite3_backup_finish", f));
                }
            }
            Ok(())
        }
    }

    struct SqliteSession {
        conn: Conn,
        begin: *mut Stmt,
        commit: *mut Stmt,
        rollback: *mut Stmt,
        put: *mut Stmt,
        del: *mut Stmt,
        get: *mut Stmt,
        range: *mut Stmt,
    }

    /// Why an attempt at a write failed: busy (retry) or for good.
    enum Failure {
        Busy,
        Fatal(Error),
    }

    impl SqliteSession {
        /// Steps a bound write statement to completion, then resets it.
        fn step_write(&self, s: *mut Stmt, what: &str) -> std::result::Result<(), Failure> {
            // SAFETY: s is this connection's statement, its blobs bound to
            // slices the caller holds until `done`.
            let r = unsafe { sqlite3_step(s) };
            let out = match r {
                SQLITE_DONE => Ok(()),
                r if r & 0xff == SQLITE_BUSY => Err(Failure::Busy),
                _ => Err(Failure::Fatal(self.conn.error(what))),
            };
            done(s);
            out
        }

        /// One attempt: ops between BEGIN IMMEDIATE and COMMIT.
        fn attempt(&self, ops: &[Op<'_>]) -> std::result::Result<(), Failure> {
            match self.conn.run(self.begin) {
                Ok(()) => {}
                Err(r) if r & 0xff == SQLITE_BUSY => return Err(Failure::Busy),
                Err(_) => return Err(Failure::Fatal(self.conn.error("BEGIN IMMEDIATE"))),
            }
            let applied = ops.iter().try_for_each(|op| match *op {
                Op::Put(k, v) => {
                    self.conn.bind(self.put, 1, k).map_err(Failure::Fatal)?;
                    if let Err(e) = self.conn.bind(self.put, 2, v) {
                        done(self.put);
                        return Err(Failure::Fatal(e));
                    }
                    self.step_write(self.put, "insert")
                }
                Op::Delete(k) => {
                    self.conn.bind(self.del, 1, k).map_err(Failure::Fatal)?;
                    self.step_write(self.del, "delete")
                }
            });
            let committed = applied.and_then(|()| match self.conn.run(self.commit) {
                Ok(()) => Ok(()),
                Err(r) if r & 0xff == SQLITE_BUSY => Err(Failure::Busy),
                Err(_) => Err(Failure::Fatal(self.conn.error("COMMIT"))),
            });
            if committed.is_err() {
                // A failed COMMIT leaves the transaction open; roll it back
                // (an error here means it was already rolled back).
                let _ = self.conn.run(self.rollback);
            }
            committed
        }
    }

    impl Session for SqliteSession {
        fn write(&mut self, ops: &[Op<'_>]) -> Result<u32> {
            for attempt in 0..MAX_ATTEMPTS {
                match self.attempt(ops) {
                    Ok(()) => return Ok(attempt),
                    Err(Failure::Busy) => continue,
                    Err(Failure::Fatal(e)) => return Err(e),
                }
            }
            Err(Error::Failed {
                store: ID,
                what: format!("write: still busy after {MAX_ATTEMPTS} attempts"),
            })
        }

        fn get(&mut self, key: &[u8], f: &mut dyn FnMut(&[u8])) -> Result<bool> {
            let s = self.get;
            for _ in 0..MAX_ATTEMPTS {
                self.conn.bind(s, 1, key)?;
                // SAFETY: s is this connection's statement, bound to `key`,
                // which outlives the step.
                let r = unsafe { sqlite3_step(s) };
                let out = match r {
                    SQLITE_ROW => {
                        // SAFETY: on a row; the bytes are used before reset.
                        f(unsafe { column(s, 0) });
                        Ok(true)
                    }
                    SQLITE_DONE => Ok(false),
                    r if r & 0xff == SQLITE_BUSY => {
                        done(s);
                        continue;
                    }
                    _ => Err(self.conn.error("select")),
                };
                done(s);
                return out;
            }
            Err(Error::Failed {
                store: ID,
                what: format!("get: still busy after {MAX_ATTEMPTS} attempts"),
            })
        }

        fn range(
            &mut self,
            start: &[u8],
            n: usize,
            f: &mut dyn FnMut(&[u8], &[u8]),
        ) -> Result<usize> {
            let s = self.range;
            let limit = i64::try_from(n).unwrap_or(i64::MAX);
            'attempt: for _ in 0..MAX_ATTEMPTS {
                self.conn.bind(s, 1, start)?;
                // SAFETY: s is this connection's statement.
                if unsafe { sqlite3_bind_int64(s, 2, limit) } != SQLITE_OK {
                    let e = self.conn.error("bind limit");
                    done(s);
                    return Err(e);
                }
                let mut seen = 0;
                let out = loop {
                    // SAFETY: s is bound to `start`, alive until `done`.
                    match unsafe { sqlite3_step(s) } {
                        SQLITE_ROW => {
                            // SAFETY: on a row; used before the next step.
                            f(unsafe { column(s, 0) }, unsafe { column(s, 1) });
                            seen += 1;
                        }
                        SQLITE_DONE => break Ok(seen),
                        // Busy before the first row: no read lock yet, retry.
                        r if r & 0xff == SQLITE_BUSY && seen == 0 => {
                            done(s);
                            continue 'attempt;
                        }
                        _ => break Err(self.conn.error("select range")),
                    }
                };
                done(s);
                return out;
            }
            Err(Error::Failed {
                store: ID,
                what: format!("range: still busy after {MAX_ATTEMPTS} attempts"),
            })
        }
    }
}
