//! redb (the pure-Rust crate): one file `data.redb`, one table `bench` of
//! `&[u8] -> &[u8]`, one write transaction per [`Session::write`], one read
//! transaction per get or range.
//!
//! Durability. redb 4 has two levels: `Durability::Immediate` (the commit is
//! written and fsynced before `commit` returns) and `Durability::None` (the
//! commit stays in the process's memory until a later `Immediate` commit or
//! the close, so a *process* crash loses it). Neither is the benchmark's
//! `Async` ("a process crash loses nothing, power loss may lose recent
//! commits"), and redb 4 has no level between them. So `Async` commits with
//! `Immediate` over a [`FileBackend`] whose `sync_data` does nothing: every
//! commit's pages and header reach the file (the OS page cache) before
//! `commit` returns, and nothing is fsynced. Power loss may lose recent
//! commits, and since redb's one-phase commit relies on the fsync to order
//! its page writes before the header, a power loss may also tear the newest
//! commit (redb verifies checksums on open and falls back to the previous
//! one, but without the fsyncs that one is not guaranteed whole either), as
//! with LMDB's `MDB_NOSYNC`. `Durable` uses redb's own file backend untouched.

use std::fmt;
use std::fs::OpenOptions;
use std::ops::Bound;
use std::path::PathBuf;

use ::redb::backends::FileBackend;
use ::redb::{
    BackendError, Builder, Database, Durability as RDurability, ReadableDatabase, StorageBackend,
    TableDefinition,
};

use crate::{Config, Durability, Error, Kind, Op, Peer, Result, Session, Store};

const ID: &str = "redb";
const TABLE: TableDefinition<&[u8], &[u8]> = TableDefinition::new("bench");
const FILE: &str = "data.redb";

pub fn peer() -> Peer {
    Peer {
        id: ID,
        name: "redb 4.5",
        kind: Kind::Ordered,
        processes: false,
        available: Ok(()),
        describe,
        open,
    }
}

fn describe(d: Durability) -> String {
    match d {
        Durability::Durable => "redb 4.5, one table of &[u8]->&[u8], ExclusiveWriter mode, \
             Durability::Immediate (one-phase commit with checksums, fsync per commit), \
             cache = Config::cache_bytes"
            .into(),
        Durability::Async => "redb 4.5, one table of &[u8]->&[u8], ExclusiveWriter mode, \
             Durability::Immediate over a file backend whose sync_data is a no-op \
             (every commit written to the file, never fsynced; \
             Durability::None would lose commits on a process crash), \
             cache = Config::cache_bytes"
            .into(),
    }
}

fn fail<E: fmt::Display>(e: E) -> Error {
    Error::Failed {
        store: ID,
        what: e.to_string(),
    }
}

/// redb's [`FileBackend`] with `sync_data` turned into nothing (see the
/// module comment); locks and I/O are passed through.
#[derive(Debug)]
struct NoSyncBackend(FileBackend);

impl StorageBackend for NoSyncBackend {
    fn len(&self) -> std::result::Result<u64, std::io::Error> {
        self.0.len()
    }
    fn read(&self, offset: u64, out: &mut [u8]) -> std::result::Result<(), std::io::Error> {
        self.0.read(offset, out)
    }
    fn set_len(&self, len: u64) -> std::result::Result<(), std::io::Error> {
        self.0.set_len(len)
    }
    fn sync_data(&self) -> std::result::Result<(), std::io::Error> {
        Ok(())
    }
    fn write(&self, offset: u64, data: &[u8]) -> std::result::Result<(), std::io::Error> {
        self.0.write(offset, data)
    }
    fn close(&self) -> std::result::Result<(), std::io::Error> {
        self.0.close()
    }
    fn try_lock_range(
        &self,
        start: Bound<u64>,
        end: Bound<u64>,
    ) -> std::result::Result<bool, BackendError> {
        self.0.try_lock_range(start, end)
    }
    fn try_lock_shared_range(
        &self,
        start: Bound<u64>,
        end: Bound<u64>,
    ) -> std::result::Result<bool, BackendError> {
        self.0.try_lock_shared_range(start, end)
    }
    fn lock_range(
        &self,
        start: Bound<u64>,
        end: Bound<u64>,
    ) -> std::result::Result<(), BackendError> {
        self.0.lock_range(start, end)
    }
    fn lock_shared_range(
        &self,
        start: Bound<u64>,
        end: Bound<u64>,
    ) -> std::result::Result<(), BackendError> {
        self.0.lock_shared_range(start, end)
    }
    fn unlock_range(
        &self,
        start: Bound<u64>,
        end: Bound<u64>,
    ) -> std::result::Result<(), BackendError> {
        self.0.unlock_range(start, end)
    }
    fn query_lock_range(
        &self,
        start: Bound<u64>,
        end: Bound<u64>,
    ) -> std::result::Result<bool, BackendError> {
        self.0.query_lock_range(start, end)
    }
}

struct RedbStore {
    dir: PathBuf,
    db: Database,
}

fn open(c: &Config) -> Result<Box<dyn Store>> {
    if c.shared {
        return Err(Error::Unsupported {
            store: ID,
            what: "several processes at once (this peer opens redb in ExclusiveWriter mode, which locks the file to one process)".into(),
        });
    }
    let path = c.dir.join(FILE);
    let mut b = Builder::new();
    b.set_cache_size(usize::try_from(c.cache_bytes).unwrap_or(usize::MAX));
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(c.create)
        .truncate(false)
        .open(&path)
        .map_err(|e| fail(format!("{}: {e}", path.display())))?;
    let backend = FileBackend::new(file).map_err(fail)?;
    // `create_with_backend` opens the file's database, or makes one if
    // the file is empty; `create: false` has already refused a missing file.
    let db = match c.durability {
        Durability::Durable => b.create_with_backend(backend),
        Durability::Async => b.create_with_backend(NoSyncBackend(backend)),
    }
    .map_err(fail)?;
    // Make the table, so that read transactions find it.
    let tx = db.begin_write().map_err(fail)?;
    tx.open_table(TABLE).map_err(fail)?;
    tx.commit().map_err(fail)?;
    Ok(Box::new(RedbStore {
        dir: c.dir.clone(),
        db,
    }))
}

impl Store for RedbStore {
    fn session(&self) -> Result<Box<dyn Session + '_>> {
        Ok(Box::new(RedbSession { db: &self.db }))
    }
    fn disk_bytes(&self) -> Result<u64> {
        crate::store_disk_bytes(ID, &self.dir)
    }
}

struct RedbSession<'a> {
    db: &'a Database,
}

impl Session for RedbSession<'_> {
    fn write(&mut self, ops: &[Op<'_>]) -> Result<u32> {
        // redb has one writer at a time: `begin_write` waits for the
        // previous one, so nothing is ever retried.
        let mut tx = self.db.begin_write().map_err(fail)?;
        tx.set_durability(RDurability::Immediate).map_err(fail)?;
        {
            let mut t = tx.open_table(TABLE).map_err(fail)?;
            for op in ops {
                match *op {
                    Op::Put(k, v) => {
                        t.insert(k, v).map_err(fail)?;
                    }
                    Op::Delete(k) => {
                        t.remove(k).map_err(fail)?;
                    }
                }
            }
        }
        tx.commit().map_err(fail)?;
        Ok(0)
    }

    fn get(&mut self, key: &[u8], f: &mut dyn FnMut(&[u8])) -> Result<bool> {
        let tx = self.db.begin_read().map_err(fail)?;
        let t = tx.open_table(TABLE).map_err(fail)?;
        match t.get(key).map_err(fail)? {
            Some(v) => {
                f(v.value());
                Ok(true)
            }
            None => Ok(false),
        }
    }

    fn range(&mut self, start: &[u8], n: usize, f: &mut dyn FnMut(&[u8], &[u8])) -> Result<usize> {
        let tx = self.db.begin_read().map_err(fail)?;
        let t = tx.open_table(TABLE).map_err(fail)?;
        let mut seen = 0;
        if n == 0 {
            return Ok(0);
        }
        for item in t.range::<&[u8]>(start..).map_err(fail)? {
            let (k, v) = item.map_err(fail)?;
            f(k.value(), v.value());
            seen += 1;
            if seen == n {
                break;
            }
        }
        Ok(seen)
    }
}
