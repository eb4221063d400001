//! RocksDB through its C API (`rocksdb/c.h`, declared here; no shim): one
//! database in the store's directory, default column family. A write is
//! one `rocksdb_writebatch` committed by `rocksdb_write` (RocksDB groups
//! concurrent writers' batches into one WAL write itself); a get is
//! `rocksdb_get_pinned`; a range is an iterator `seek` (an iterator reads
//! one implicit snapshot, so a range is one consistent read).

use crate::{Durability, Kind, Peer};

const ID: &str = "rocksdb";
const INSTALL: &str = "sudo apt-get install librocksdb-dev";

pub fn peer() -> Peer {
    Peer {
        id: ID,
        name: "RocksDB 7.8 (LSM)",
        kind: Kind::Ordered,
        processes: false,
        available: if cfg!(have_rocksdb) {
            Ok(())
        } else {
            Err(INSTALL)
        },
        describe,
        open,
    }
}

fn describe(d: Durability) -> String {
    let sync = match d {
        Durability::Durable => "sync=true (WAL fsynced before each commit returns)",
        Durability::Async => {
            "sync=false (WAL written at each commit, not synced: survives a process crash)"
        }
    };
    format!(
        "RocksDB 7.8 C API, one WriteBatch per commit, write options {sync}; \
         LRU block cache = Config::cache_bytes, 10-bit bloom filters, \
         level compaction with dynamic level bytes, 4 background jobs, \
         bytes_per_sync 1 MiB, default compression ({})",
        compression()
    )
}

/// The library's default compression (RocksDB picks Snappy when it was
/// built with it).
#[cfg(have_rocksdb)]
fn compression() -> &'static str {
    imp::default_compression()
}

#[cfg(not(have_rocksdb))]
fn compression() -> &'static str {
    "not installed"
}

#[cfg(not(have_rocksdb))]
fn open(_: &crate::Config) -> crate::Result<Box<dyn crate::Store>> {
    Err(crate::Error::NotInstalled {
        store: ID,
        install: INSTALL,
    })
}

#[cfg(have_rocksdb)]
use imp::open;

#[cfg(have_rocksdb)]
mod imp {
    use std::ffi::{CStr, CString, c_char, c_int, c_uchar, c_void};
    use std::os::unix::ffi::OsStrExt;
    use std::path::PathBuf;
    use std::ptr;

    use super::ID;
    use crate::{Config, Durability, Error, Op, Result, Session, Store};

    #[repr(C)]
    struct Opaque {
        _p: [u8; 0],
    }
    type Db = Opaque;
    type Options = Opaque;
    type BlockOptions = Opaque;
    type Cache = Opaque;
    type FilterPolicy = Opaque;
    type WriteOptions = Opaque;
    type ReadOptions = Opaque;
    type WriteBatch = Opaque;
    type Pinnable = Opaque;
    type Iter = Opaque;

    unsafe extern "C" {
        fn rocksdb_options_create() -> *mut Options;
        fn rocksdb_options_destroy(o: *mut Options);
        fn rocksdb_options_get_compression(o: *mut Options) -> c_int;
        fn rocksdb_options_set_create_if_missing(o: *mut Options, v: c_uchar);
        fn rocksdb_options_set_error_if_exists(o: *mut Options, v: c_uchar);
        fn rocksdb_options_set_max_background_jobs(o: *mut Options, n: c_int);
        fn rocksdb_options_set_bytes_per_sync(o: *mut Options, n: u64);
        fn rocksdb_options_set_level_compaction_dynamic_level_bytes(o: *mut Options, v: c_uchar);
        fn rocksdb_options_set_block_based_table_factory(o: *mut Options, t: *mut BlockOptions);
        fn rocksdb_block_based_options_create() -> *mut BlockOptions;
        fn rocksdb_block_based_options_destroy(t: *mut BlockOptions);
        fn rocksdb_block_based_options_set_block_cache(t: *mut BlockOptions, c: *mut Cache);
        fn rocksdb_block_based_options_set_filter_policy(
            t: *mut BlockOptions,
            f: *mut FilterPolicy,
        );
        fn rocksdb_filterpolicy_create_bloom_full(bits_per_key: f64) -> *mut FilterPolicy;
        fn rocksdb_cache_create_lru(capacity: usize) -> *mut Cache;
        fn rocksdb_cache_destroy(c: *mut Cache);
        fn rocksdb_open(o: *const Options, name: *const c_char, err: *mut *mut c_char) -> *mut Db;
        fn rocksdb_close(db: *mut Db);
        fn rocksdb_free(p: *mut c_void);
        fn rocksdb_writeoptions_create() -> *mut WriteOptions;
        fn rocksdb_writeoptions_destroy(w: *mut WriteOptions);
        fn rocksdb_writeoptions_set_sync(w: *mut WriteOptions, v: c_uchar);
        fn rocksdb_readoptions_create() -> *mut ReadOptions;
        fn rocksdb_readoptions_destroy(r: *mut ReadOptions);
        fn rocksdb_writebatch_create() -> *mut WriteBatch;
        fn rocksdb_writebatch_destroy(b: *mut WriteBatch);
        fn rocksdb_writebatch_clear(b: *mut WriteBatch);
        fn rocksdb_writebatch_put(
            b: *mut WriteBatch,
            k: *const c_char,
            klen: usize,
            v: *const c_char,
            vlen: usize,
        );
        fn rocksdb_writebatch_delete(b: *mut WriteBatch, k: *const c_char, klen: usize);
        fn rocksdb_write(
            db: *mut Db,
            w: *const WriteOptions,
            b: *mut WriteBatch,
            err: *mut *mut c_char,
        );
        fn rocksdb_get_pinned(
            db: *mut Db,
            r: *const ReadOptions,
            k: *const c_char,
            klen: usize,
            err: *mut *mut c_char,
        ) -> *mut Pinnable;
        fn rocksdb_pinnableslice_value(p: *const Pinnable, len: *mut usize) -> *const c_char;
        fn rocksdb_pinnableslice_destroy(p: *mut Pinnable);
        fn rocksdb_create_iterator(db: *mut Db, r: *const ReadOptions) -> *mut Iter;
        fn rocksdb_iter_destroy(i: *mut Iter);
        fn rocksdb_iter_seek(i: *mut Iter, k: *const c_char, klen: usize);
        fn rocksdb_iter_valid(i: *const Iter) -> c_uchar;
        fn rocksdb_iter_next(i: *mut Iter);
        fn rocksdb_iter_key(i: *const Iter, len: *mut usize) -> *const c_char;
        fn rocksdb_iter_value(i: *const Iter, len: *mut usize) -> *const c_char;
        fn rocksdb_iter_get_error(i: *const Iter, err: *mut *mut c_char);
    }

    pub fn default_compression() -> &'static str {
        // SAFETY: a fresh options object, read and freed here.
        let c = unsafe {
            let o = rocksdb_options_create();
            let c = rocksdb_options_get_compression(o);
            rocksdb_options_destroy(o);
            c
        };
        // The values of c.h's compression enum.
        match c {
            0 => "none",
            1 => "Snappy",
            2 => "zlib",
            3 => "bzip2",
            4 => "LZ4",
            5 => "LZ4HC",
            6 => "Xpress",
            7 => "ZSTD",
            _ => "unknown",
        }
    }

    /// Turns RocksDB's `errptr` into a typed error, freeing its string.
    fn check(err: *mut c_char) -> Result<()> {
        if err.is_null() {
            return Ok(());
        }
        // SAFETY: a non-null errptr is a NUL-terminated string RocksDB
        // malloc'ed for us; we copy it out, then free it once with
        // rocksdb_free.
        let what = unsafe {
            let s = CStr::from_ptr(err).to_string_lossy().into_owned();
            rocksdb_free(err.cast());
            s
        };
        Err(Error::Failed { store: ID, what })
    }

    /// Bytes RocksDB lent us (`len` of them at `p`), as a slice.
    ///
    /// # Safety
    /// `p` must point at `len` readable bytes that live as long as `'a`
    /// (or be anything when `len` is 0).
    unsafe fn bytes<'a>(p: *const c_char, len: usize) -> &'a [u8] {
        if len == 0 {
            &[]
        } else {
            // SAFETY: guaranteed by the caller.
            unsafe { std::slice::from_raw_parts(p.cast(), len) }
        }
    }

    struct RocksStore {
        dir: PathBuf,
        db: *mut Db,
        options: *mut Options,
        table: *mut BlockOptions,
        cache: *mut Cache,
        write: *mut WriteOptions,
        read: *mut ReadOptions,
    }

    // SAFETY: rocksdb_t is safe to use from many threads at once (RocksDB
    // documents DB as thread-safe); the option objects are only read after
    // open, and are freed only in Drop, when no session borrows the store.
    unsafe impl Send for RocksStore {}
    // SAFETY: as above.
    unsafe impl Sync for RocksStore {}

    impl Drop for RocksStore {
        fn drop(&mut self) {
            // SAFETY: each pointer was made by its create function in open
            // and is freed exactly once here; the database is closed first,
            // and no session outlives the store (they borrow it).
            unsafe {
                if !self.db.is_null() {
                    rocksdb_close(self.db);
                }
                rocksdb_writeoptions_destroy(self.write);
                rocksdb_readoptions_destroy(self.read);
                rocksdb_options_destroy(self.options);
                rocksdb_block_based_options_destroy(self.table);
                rocksdb_cache_destroy(self.cache);
            }
        }
    }

    pub fn open(c: &Config) -> Result<Box<dyn Store>> {
        if c.shared {
            return Err(Error::Unsupported {
                store: ID,
                what: "several processes at once (RocksDB locks its directory to one process)"
                    .into(),
            });
        }
        let name = CString::new(c.dir.as_os_str().as_bytes()).map_err(|e| Error::Failed {
            store: ID,
            what: format!("{}: {e}", c.dir.display()),
        })?;
        // SAFETY: plain constructors with no preconditions; the store owns
        // (and its Drop frees) everything they return, even if open fails.
        let mut s = unsafe {
            RocksStore {
                dir: c.dir.clone(),
                db: ptr::null_mut(),
                options: rocksdb_options_create(),
                table: rocksdb_block_based_options_create(),
                cache: rocksdb_cache_create_lru(
                    usize::try_from(c.cache_bytes).unwrap_or(usize::MAX),
                ),
                write: rocksdb_writeoptions_create(),
                read: rocksdb_readoptions_create(),
            }
        };
        // SAFETY: the pointers are the live objects made above. The table
        // options take ownership of the bloom filter policy, and the table
        // factory copies the table options (which hold a reference to the
        // cache), so freeing ours in Drop is fine.
        unsafe {
            rocksdb_block_based_options_set_block_cache(s.table, s.cache);
            rocksdb_block_based_options_set_filter_policy(
                s.table,
                rocksdb_filterpolicy_create_bloom_full(10.0),
            );
            rocksdb_options_set_block_based_table_factory(s.options, s.table);
            rocksdb_options_set_create_if_missing(s.options, c.create as c_uchar);
            rocksdb_options_set_error_if_exists(s.options, c.create as c_uchar);
            rocksdb_options_set_max_background_jobs(s.options, 4);
            rocksdb_options_set_bytes_per_sync(s.options, 1 << 20);
            rocksdb_options_set_level_compaction_dynamic_level_bytes(s.options, 1);
            rocksdb_writeoptions_set_sync(
                s.write,
                (c.durability == Durability::Durable) as c_uchar,
            );
        }
        let mut err = ptr::null_mut();
        // SAFETY: options and name are valid for the call; err is an out
        // pointer RocksDB sets on failure.
        s.db = unsafe { rocksdb_open(s.options, name.as_ptr(), &mut err) };
        check(err)?;
        if s.db.is_null() {
            return Err(Error::Failed {
                store: ID,
                what: "rocksdb_open returned no database".into(),
            });
        }
        Ok(Box::new(s))
    }

    impl Store for RocksStore {
        fn session(&self) -> Result<Box<dyn Session + '_>> {
            // SAFETY: no preconditions; the session frees it.
            let batch = unsafe { rocksdb_writebatch_create() };
            Ok(Box::new(RocksSession { store: self, batch }))
        }
        fn disk_bytes(&self) -> Result<u64> {
            crate::store_disk_bytes(ID, &self.dir)
        }
    }

    struct RocksSession<'a> {
        store: &'a RocksStore,
        batch: *mut WriteBatch,
    }

    impl Drop for RocksSession<'_> {
        fn drop(&mut self) {
            // SAFETY: made in session(), freed once here.
            unsafe { rocksdb_writebatch_destroy(self.batch) }
        }
    }

    impl Session for RocksSession<'_> {
        fn write(&mut self, ops: &[Op<'_>]) -> Result<u32> {
            // SAFETY: the batch is ours; put/delete copy the key and value
            // bytes, which are valid for the given lengths.
            unsafe {
                rocksdb_writebatch_clear(self.batch);
                for op in ops {
                    match *op {
                        Op::Put(k, v) => rocksdb_writebatch_put(
                            self.batch,
                            k.as_ptr().cast(),
                            k.len(),
                            v.as_ptr().cast(),
                            v.len(),
                        ),
                        Op::Delete(k) => {
                            rocksdb_writebatch_delete(self.batch, k.as_ptr().cast(), k.len())
                        }
                    }
                }
            }
            let mut err = ptr::null_mut();
            // SAFETY: db and write options live as long as the store we
            // borrow; the batch is ours; err is an out pointer.
            unsafe { rocksdb_write(self.store.db, self.store.write, self.batch, &mut err) };
            check(err)?;
            // RocksDB has no conflicts between plain writes: never retried.
            Ok(0)
        }

        fn get(&mut self, key: &[u8], f: &mut dyn FnMut(&[u8])) -> Result<bool> {
            let mut err = ptr::null_mut();
            // SAFETY: db and read options are live; key is valid for its
            // length; err is an out pointer.
            let p = unsafe {
                rocksdb_get_pinned(
                    self.store.db,
                    self.store.read,
                    key.as_ptr().cast(),
                    key.len(),
                    &mut err,
                )
            };
            check(err)?;
            if p.is_null() {
                return Ok(false);
            }
            let mut len = 0;
            // SAFETY: p is a live pinnable slice; its value stays valid
            // until p is destroyed, which is after f returns.
            unsafe {
                let v = rocksdb_pinnableslice_value(p, &mut len);
                f(bytes(v, len));
                rocksdb_pinnableslice_destroy(p);
            }
            Ok(true)
        }

        fn range(
            &mut self,
            start: &[u8],
            n: usize,
            f: &mut dyn FnMut(&[u8], &[u8]),
        ) -> Result<usize> {
            // SAFETY: db and read options are live; the iterator is freed
            // below on every path.
            let it = unsafe { rocksdb_create_iterator(self.store.db, self.store.read) };
            let mut seen = 0;
            // SAFETY: it is a live iterator; key and value pointers are
            // valid until the next move of the iterator, after f returns.
            let err = unsafe {
                rocksdb_iter_seek(it, start.as_ptr().cast(), start.len());
                while seen < n && rocksdb_iter_valid(it) != 0 {
                    let (mut kl, mut vl) = (0, 0);
                    let k = rocksdb_iter_key(it, &mut kl);
                    let v = rocksdb_iter_value(it, &mut vl);
                    f(bytes(k, kl), bytes(v, vl));
                    seen += 1;
                    rocksdb_iter_next(it);
                }
                let mut err = ptr::null_mut();
                rocksdb_iter_get_error(it, &mut err);
                rocksdb_iter_destroy(it);
                err
            };
            check(err)?;
            Ok(seen)
        }
    }
}
