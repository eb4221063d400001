//! The write-ahead log: appending commit records, group commit, reset.
//!
//! Committers encode their record into an in-memory buffer in sequence order
//! (under the region's commit lock), then call [`Log::flush`]. The first
//! caller to take the I/O lock writes everything buffered so far with one
//! `pwrite` and, for durable commits, one `fdatasync`; the callers that queued
//! behind it find their record already written or synced and return. So many
//! concurrent commits share one sync, and a commit never needs more than one.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};

use super::format::{self, HEADER_BYTES, LogHeader, Range};
use crate::error::{Error, Result};
use crate::io::Storage;

/// Log space is made real (zeros written) this much at a time, so that the
/// per-commit sync has no file-size change to flush.
const PREALLOCATE: u64 = 4 << 20;

struct Appended {
    /// Salt of the current epoch; changed only with this lock held (reset).
    salt: u64,
    buf: Vec<u8>,
    /// Sequence number of the last record in `buf` (or written before it).
    last_seq: u64,
}

struct Io {
    header: LogHeader,
    write_off: u64,
    allocated: u64,
}

/// An open log file.
pub struct Log {
    storage: Box<dyn Storage>,
    appended: Mutex<Appended>,
    io: Mutex<Io>,
    written: AtomicU64,
    synced: AtomicU64,
    /// Mirror of `Io::write_off`, readable without waiting for a sync.
    write_off: AtomicU64,
    /// Syncs of the log for commits (group commit makes this < commits).
    commit_syncs: AtomicU64,
    poisoned: Mutex<Option<String>>,
    /// True while someone holds `io` to write or sync; waiters sleep on
    /// `progress` until it turns false, instead of queueing on `io` behind
    /// the next leader's sync.
    busy: Mutex<bool>,
    progress: Condvar,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Log {
    /// Starts a fresh epoch on `storage`: a new header whose first record will be
    /// `last_seq + 1`. Everything in the file before this is ignored from now on.
    pub fn start(
        storage: Box<dyn Storage>,
        region_id: u64,
        previous: Option<LogHeader>,
        last_seq: u64,
    ) -> Result<Log> {
        let header = LogHeader {
            region_id,
            generation: previous.map_or(1, |h| h.generation + 1),
            salt: fresh_salt(previous.map(|h| h.salt)),
            start_seq: last_seq + 1,
        };
        let log = Log {
            storage,
            appended: Mutex::new(Appended {
                salt: header.salt,
                buf: Vec::new(),
                last_seq,
            }),
            io: Mutex::new(Io {
                header,
                write_off: HEADER_BYTES,
                allocated: 0,
            }),
            written: AtomicU64::new(last_seq),
            synced: AtomicU64::new(last_seq),
            write_off: AtomicU64::new(HEADER_BYTES),
            commit_syncs: AtomicU64::new(0),
            poisoned: Mutex::new(None),
            busy: Mutex::new(false),
            progress: Condvar::new(),
        };
        {
            let mut io = lock(&log.io);
            io.allocated = log.storage.len().map_err(|e| log.err("stat", e))?;
            log.write_header(&mut io)?;
        }
        Ok(log)
    }

    fn err(&self, op: &'static str, e: std::io::Error) -> Error {
        Error::io(op, self.storage.path(), e)
    }

    fn write_header(&self, io: &mut Io) -> Result<()> {
        if io.allocated < HEADER_BYTES {
            self.storage
                .write_at(&vec![0; HEADER_BYTES as usize], 0)
                .map_err(|e| self.err("write log header", e))?;
            io.allocated = HEADER_BYTES;
        }
        let (off, slot) = io.header.encode();
        self.storage
            .write_at(&slot, off)
            .and_then(|_| self.storage.sync())
            .map_err(|e| self.err("write log header", e))
    }

    pub fn header(&self) -> LogHeader {
        lock(&self.io).header
    }

    /// Appends a commit record to the buffer. Called in sequence order. Never
    /// waits for I/O: the salt is read under the same lock a reset changes it
    /// under, so a record always carries the epoch it will be written in.
    pub fn append<'a>(
        &self,
        seq: u64,
        data_size: u64,
        ranges: impl Iterator<Item = Range<'a>> + Clone,
    ) {
        let mut a = lock(&self.appended);
        let salt = a.salt;
        assert_eq!(
            seq,
            a.last_seq + 1,
            "log records must be appended in sequence order"
        );
        let synced = self.synced.load(Ordering::Acquire);
        format::encode_commit(&mut a.buf, salt, seq, synced, data_size, ranges);
        a.last_seq = seq;
    }

    /// Sequence number of the last record written to the OS.
    pub fn written_seq(&self) -> u64 {
        self.written.load(Ordering::Acquire)
    }

    /// Sequence number of the last record known durable.
    pub fn synced_seq(&self) -> u64 {
        self.synced.load(Ordering::Acquire)
    }

    /// Syncs issued to make records durable.
    pub fn syncs(&self) -> u64 {
        self.commit_syncs.load(Ordering::Relaxed)
    }

    /// Bytes of log in the current epoch (records written so far).
    pub fn epoch_bytes(&self) -> u64 {
        self.write_off.load(Ordering::Acquire) - HEADER_BYTES
    }

    pub fn check_poison(&self) -> Result<()> {
        match &*lock(&self.poisoned) {
            Some(why) => Err(Error::Poisoned(why.clone())),
            None => Ok(()),
        }
    }

    fn poison(&self, e: &Error) {
        lock(&self.poisoned).get_or_insert_with(|| e.to_string());
    }

    /// Makes record `seq` reach the OS (survives a crash of the process), and
    /// with `sync` the disk (survives power loss). Group commit happens here.
    pub fn flush(&self, seq: u64, sync: bool) -> Result<()> {
        let done = |s: &Self| {
            if sync {
                s.synced_seq() >= seq
            } else {
                s.written_seq() >= seq
            }
        };
        loop {
            if done(self) {
                return Ok(());
            }
            self.check_poison()?;
            let mut busy = lock(&self.busy);
            if !*busy {
                // Lead: write and sync everything appended so far, for everyone.
                let mut io = lock(&self.io); // free: `busy` is false only while it is
                *busy = true;
                drop(busy);
                let r = if done(self) {
                    Ok(())
                } else {
                    self.flush_locked(&mut io, sync)
                };
                if let Err(e) = &r {
                    self.poison(e);
                }
                self.end_lead(io);
                return r;
            }
            // Follow: sleep until the current leader finishes, then look again.
            if !done(self) {
                drop(self.progress.wait(busy).unwrap_or_else(|e| e.into_inner()));
            }
        }
    }

    /// Takes the I/O lock, waiting for any leader, and marks the log busy.
    /// `busy` changes only under its own lock and is true exactly while some
    /// thread holds the I/O lock, so nobody spins on it.
    fn lead(&self) -> MutexGuard<'_, Io> {
        let mut busy = lock(&self.busy);
        while *busy {
            busy = self.progress.wait(busy).unwrap_or_else(|e| e.into_inner());
        }
        *busy = true;
        lock(&self.io)
    }

    /// Releases the I/O lock and wakes every follower.
    fn end_lead(&self, io: MutexGuard<'_, Io>) {
        let mut busy = lock(&self.busy);
        *busy = false;
        drop(io);
        self.progress.notify_all();
    }

    fn flush_locked(&self, io: &mut Io, sync: bool) -> Result<()> {
        let (buf, hi) = {
            let mut a = lock(&self.appended);
            (std::mem::take(&mut a.buf), a.last_seq)
        };
        if !buf.is_empty() {
            let end = io.write_off + buf.len() as u64;
            if end > io.allocated {
                let new_alloc = end.div_ceil(PREALLOCATE) * PREALLOCATE;
                let zeros = vec![0u8; (new_alloc - io.allocated) as usize];
                self.storage
                    .write_at(&zeros, io.allocated)
                    .map_err(|e| self.err("extend log", e))?;
                io.allocated = new_alloc;
            }
            self.storage
                .write_at(&buf, io.write_off)
                .map_err(|e| self.err("append to log", e))?;
            io.write_off = end;
            self.write_off.store(end, Ordering::Release);
            self.written.store(hi, Ordering::Release);
        }
        if sync && self.synced_seq() < hi {
            self.storage.sync().map_err(|e| self.err("sync log", e))?;
            self.commit_syncs.fetch_add(1, Ordering::Relaxed);
            self.synced.store(hi, Ordering::Release);
        }
        Ok(())
    }

    /// Writes and syncs everything appended, then, if every record is covered by
    /// the checkpoint `checkpoint_seq`, starts a new epoch (the log becomes empty).
    /// Returns whether the log was reset.
    pub fn sync_and_maybe_reset(
        &self,
        checkpoint_seq: impl FnOnce(u64) -> Result<u64>,
    ) -> Result<bool> {
        let mut io = self.lead();
        if let Err(e) = self.check_poison() {
            self.end_lead(io);
            return Err(e);
        }
        let r = (|| {
            self.flush_locked(&mut io, true)?;
            let last = self.synced_seq();
            let ckpt = checkpoint_seq(last)?;
            // Hold `appended`: no record can be encoded with the old salt after this.
            let mut a = lock(&self.appended);
            if ckpt < a.last_seq || !a.buf.is_empty() {
                return Ok(false);
            }
            let prev = io.header;
            io.header = LogHeader {
                region_id: prev.region_id,
                generation: prev.generation + 1,
                salt: fresh_salt(Some(prev.salt)),
                start_seq: a.last_seq + 1,
            };
            io.write_off = HEADER_BYTES;
            self.write_off.store(HEADER_BYTES, Ordering::Release);
            // Records appended from now on belong to the new epoch; the header
            // is written before any of them (we hold the I/O lock).
            a.salt = io.header.salt;
            drop(a);
            self.write_header(&mut io)?;
            Ok(true)
        })();
        if let Err(e) = &r {
            self.poison(e);
        }
        self.end_lead(io);
        r
    }
}

/// A salt that differs from the previous one (time and address entropy; it
/// need not be secret, only different from every earlier epoch's).
fn fresh_salt(previous: Option<u64>) -> u64 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let local = 0u8;
    let mut s = crate::io::sim::SplitMix(
        t ^ (&local as *const u8 as u64).rotate_left(32) ^ u64::from(std::process::id()),
    );
    loop {
        let v = s.next();
        if Some(v) != previous && v != 0 {
            return v;
        }
    }
}
