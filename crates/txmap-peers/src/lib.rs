//! The stores compared by the benchmark, behind one key-value interface:
//! txmap's B+-tree, cache-oblivious B-tree and linear hash table, and the
//! peers (Berkeley DB, LMDB, SQLite, RocksDB, PMDK libpmemobj, redb).
//!
//! A peer whose library is not installed is still listed, with
//! [`Peer::available`] giving the command that installs it, so a report can
//! say why it was skipped instead of dropping it.
//!
//! ```no_run
//! use txmap_peers::{Config, Durability, Op, stores};
//!
//! let dir = std::path::PathBuf::from("/tmp/bench-btree");
//! std::fs::create_dir_all(&dir)?;
//! let peer = stores().into_iter().find(|p| p.id == "txmap-btree").unwrap();
//! let store = (peer.open)(&Config::new(&dir, Durability::Durable))?;
//! let mut s = store.session()?;
//! s.write(&[Op::Put(b"key", b"value")])?;
//! assert!(s.get(b"key", &mut |v| assert_eq!(v, b"value"))?);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::path::{Path, PathBuf};

pub mod peers;
pub mod txmap_store;

/// What went wrong in a store, named by the store.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The store reported an error.
    #[error("{store}: {what}")]
    Failed { store: &'static str, what: String },
    /// The store cannot do this (e.g. a range read on a hash table, or a
    /// second process on a single-process store).
    #[error("{store}: not supported: {what}")]
    Unsupported { store: &'static str, what: String },
    /// The store's library is not installed; `install` is the command.
    #[error("{store}: not installed (install with `{install}`)")]
    NotInstalled {
        store: &'static str,
        install: &'static str,
    },
}

pub type Result<T> = std::result::Result<T, Error>;

/// When a commit returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Durability {
    /// After the commit is on stable storage (one or more fsync/fdatasync).
    Durable,
    /// Before it is synced: a process crash loses nothing, power loss may
    /// lose recent commits.
    Async,
}

/// Kind of index a store offers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Ordered keys: [`Session::range`] works.
    Ordered,
    /// Hash table: no range reads.
    Hash,
}

/// How to open a store.
#[derive(Clone, Debug)]
pub struct Config {
    /// Directory the store owns: empty when `create`, else made by an
    /// earlier open with `create`.
    pub dir: PathBuf,
    pub durability: Durability,
    /// Create the store (the first process) or open an existing one
    /// (a second process joining the first).
    pub create: bool,
    /// Other processes will open the same store at the same time.
    pub shared: bool,
    /// Expected number of keys and total key+value bytes: a hint for map
    /// and pool sizes (LMDB's map size, PMDK's pool, txmap's region).
    pub expected_keys: u64,
    pub expected_bytes: u64,
    /// Cache size for stores that have one (Berkeley DB, RocksDB, SQLite).
    pub cache_bytes: u64,
}

impl Config {
    /// Creates a store in `dir` with defaults sized for a 250,000-key run.
    pub fn new(dir: &Path, durability: Durability) -> Config {
        Config {
            dir: dir.to_path_buf(),
            durability,
            create: true,
            shared: false,
            expected_keys: 250_000,
            expected_bytes: 250_000 * 200,
            cache_bytes: 256 << 20,
        }
    }
}

/// One write in a transaction.
#[derive(Clone, Copy, Debug)]
pub enum Op<'a> {
    Put(&'a [u8], &'a [u8]),
    Delete(&'a [u8]),
}

/// An open store. Shared by threads; each thread takes its own [`Session`].
pub trait Store: Send + Sync {
    /// A handle for one thread (a txmap view, a SQLite connection, …).
    fn session(&self) -> Result<Box<dyn Session + '_>>;
    /// Bytes the store occupies on disk now (allocated blocks of its files).
    fn disk_bytes(&self) -> Result<u64> {
        Err(Error::Unsupported {
            store: "store",
            what: "disk_bytes".into(),
        })
    }
    /// Bytes of log records the store has written since it was opened, if
    /// it can tell: txmap's log records (`Stats::log_bytes`; none once a
    /// checkpoint started a new log epoch), Berkeley DB's bytes written to
    /// its log (`log_stat`). Stores that do not tell say `None`.
    fn logged_bytes(&self) -> Option<u64> {
        None
    }
    /// Copies the store, consistently, into the empty directory `dst` with
    /// the store's own online backup (txmap's `Region::backup`, LMDB's
    /// `mdb_env_copy`, SQLite's backup API), while it stays open.
    fn backup(&self, dst: &Path) -> Result<()> {
        let _ = dst;
        Err(Error::Unsupported {
            store: "store",
            what: "backup".into(),
        })
    }
}

/// One thread's handle on a store.
pub trait Session {
    /// Applies `ops` in one transaction and commits it with the store's
    /// durability. Conflicts, deadlocks and busy errors are retried inside;
    /// returns how many attempts were retried.
    fn write(&mut self, ops: &[Op<'_>]) -> Result<u32>;
    /// Calls `f` with the value of `key` in a read transaction; false if absent.
    fn get(&mut self, key: &[u8], f: &mut dyn FnMut(&[u8])) -> Result<bool>;
    /// Read-modify-write of one existing key: `f` changes the value in place.
    /// Returns the retries, or `None` if the key is absent. The default reads and
    /// writes in two transactions (right only while no one else writes the
    /// key, as in the concurrency tests A/B/C); stores override it with one.
    fn update(&mut self, key: &[u8], f: &mut dyn FnMut(&mut Vec<u8>)) -> Result<Option<u32>> {
        let mut v = None;
        if !self.get(key, &mut |x| v = Some(x.to_vec()))? {
            return Ok(None);
        }
        let mut v = v.unwrap_or_default();
        f(&mut v);
        self.write(&[Op::Put(key, &v)]).map(Some)
    }
    /// Calls `f` on up to `n` pairs with keys `>= start`, in key order, in one
    /// read transaction; returns how many. Hash stores return
    /// [`Error::Unsupported`].
    fn range(&mut self, start: &[u8], n: usize, f: &mut dyn FnMut(&[u8], &[u8])) -> Result<usize>;
}

/// A store the benchmark can run.
pub struct Peer {
    /// Short id used on the command line: `txmap-btree`, `bdb-btree`, `lmdb`, ….
    pub id: &'static str,
    /// Name in reports: "Berkeley DB 5.3 B-tree".
    pub name: &'static str,
    pub kind: Kind,
    /// Whether several processes can open it at once.
    pub processes: bool,
    /// `Ok` if its library is present; else the install command.
    pub available: std::result::Result<(), &'static str>,
    /// How it is configured at this durability (for the report).
    pub describe: fn(Durability) -> String,
    pub open: fn(&Config) -> Result<Box<dyn Store>>,
}

/// Every store: txmap's first, then the peers (installed or not).
pub fn stores() -> Vec<Peer> {
    let mut v = txmap_store::stores();
    v.extend(peers::stores());
    v
}

/// [`dir_disk_bytes`] for a store's `disk_bytes`, errors named by the store.
pub(crate) fn store_disk_bytes(store: &'static str, dir: &Path) -> Result<u64> {
    dir_disk_bytes(dir).map_err(|e| Error::Failed {
        store,
        what: format!("{}: {e}", dir.display()),
    })
}

/// Sum of allocated bytes of the files under `dir` (what `du` says).
pub fn dir_disk_bytes(dir: &Path) -> std::io::Result<u64> {
    use std::os::unix::fs::MetadataExt;
    let mut total = 0;
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        let m = e.metadata()?;
        if m.is_dir() {
            total += dir_disk_bytes(&e.path())?;
        } else {
            total += m.blocks() * 512;
        }
    }
    Ok(total)
}
