//! The write-ahead log: appending commit records, group commit, reset.
//!
//! Every process appends to the same log file. A committer writes its record
//! at the shared `log_end` while it holds the commit lock (records are in
//! sequence order, without holes), then advances `log_end`: that store is the
//! record's commit point. Durable commits then call [`Log::flush`]: the first
//! to take the shared sync lock syncs the file once for every record written
//! so far, in any process, and wakes the others (a futex word in shared
//! memory); those whose record the sync covered return without syncing. So
//! concurrent commits share one `fdatasync`, and a commit never needs more
//! than one.

use std::sync::atomic::Ordering;
use std::time::Duration;

use super::format::{self, HEADER_BYTES, LogHeader, Range};
use crate::error::{Error, Result};
use crate::io::Storage;
use crate::mvcc::Locked;
use crate::mvcc::layout::Header;
use crate::os::lock::{futex_wait, futex_wake_all};

/// Log space is made real (zeros written) this much at a time, so that the
/// per-commit sync has no file-size change to flush.
const PREALLOCATE: u64 = 4 << 20;
/// The zeros are written in pieces this large: one large write makes the
/// page cache hold the log in large folios, and then every small append
/// and every `fdatasync` walks a whole folio's blocks (measured on ext4,
/// kernel 6.18: 13 against 2 µs per append, 88 against 65 µs per sync).
const ZERO_PIECE: usize = 64 << 10;
/// How long a follower sleeps before checking whether the leader died.
const FOLLOWER_WAIT: Duration = Duration::from_millis(5);

/// The log file of a region, as used by this process. Its position, salt and
/// sync progress live in the shared header.
pub struct Log {
    storage: Box<dyn Storage>,
}

impl Log {
    pub fn new(storage: Box<dyn Storage>) -> Log {
        Log { storage }
    }

    pub fn storage(&self) -> &dyn Storage {
        &*self.storage
    }

    fn err(&self, op: &'static str, e: std::io::Error) -> Error {
        Error::io(op, self.storage.path(), e)
    }

    /// The current epoch's header, as published in shared memory.
    pub fn header(h: &Header) -> LogHeader {
        LogHeader {
            region_id: h.region_id.load(Ordering::Acquire),
            generation: h.log_generation.load(Ordering::Acquire),
            salt: h.log_salt.load(Ordering::Acquire),
            start_seq: h.log_start_seq.load(Ordering::Acquire),
        }
    }

    /// Writes commit record `seq` at the log's end and advances the end (the
    /// record's commit point). Called in sequence order under the commit lock.
    pub fn append<'a>(
        &self,
        h: &Header,
        _l: &Locked<'_>,
        seq: u64,
        data_size: u64,
        ranges: impl Iterator<Item = Range<'a>> + Clone,
    ) -> Result<()> {
        let mut buf = Vec::new();
        let salt = h.log_salt.load(Ordering::Acquire);
        let synced = h.synced_seq.load(Ordering::Acquire);
        format::encode_commit(&mut buf, salt, seq, synced, data_size, ranges);
        let off = h.log_end.load(Ordering::Acquire);
        let end = off + buf.len() as u64;
        let allocated = h.log_allocated.load(Ordering::Acquire);
        let r = (|| {
            if end > allocated {
                let new_alloc = end.div_ceil(PREALLOCATE) * PREALLOCATE;
                let zeros = vec![0u8; ZERO_PIECE];
                let mut at = allocated;
                while at < new_alloc {
                    let n = (new_alloc - at).min(ZERO_PIECE as u64) as usize;
                    self.storage
                        .write_at(&zeros[..n], at)
                        .map_err(|e| self.err("extend log", e))?;
                    at += n as u64;
                }
                h.log_allocated.store(new_alloc, Ordering::Release);
            }
            self.storage
                .write_at(&buf, off)
                .map_err(|e| self.err("append to log", e))
        })();
        if let Err(e) = &r {
            poison(h, e);
            return r;
        }
        h.log_end.store(end, Ordering::Release);
        h.written_seq.store(seq, Ordering::Release);
        Ok(())
    }

    /// Sequence number of the last record written to the OS.
    pub fn written_seq(h: &Header) -> u64 {
        h.written_seq.load(Ordering::Acquire)
    }

    /// Sequence number of the last record known durable.
    pub fn synced_seq(h: &Header) -> u64 {
        h.synced_seq.load(Ordering::Acquire)
    }

    /// Bytes of log in the current epoch (records written so far).
    pub fn epoch_bytes(h: &Header) -> u64 {
        h.log_end
            .load(Ordering::Acquire)
            .saturating_sub(HEADER_BYTES)
    }

    /// Makes record `seq` durable (it reached the OS when it was appended).
    /// Group commit happens here, across processes.
    pub fn flush(&self, h: &Header, seq: u64) -> Result<()> {
        loop {
            if Self::synced_seq(h) >= seq {
                return Ok(());
            }
            check_poison(h)?;
            let gen_before = h.sync_gen.load(Ordering::Acquire);
            let lead = h.sync_lock.try_lock().map_err(|e| {
                Error::os(
                    "lock the log",
                    rustix::io::Errno::from_io_error(&e).unwrap_or(rustix::io::Errno::INVAL),
                )
            })?;
            match lead {
                Some(g) => {
                    // A leader that died mid-round left nothing to repair: the
                    // sync it did not finish is simply done again.
                    let r = self.sync_locked(h);
                    h.sync_gen.fetch_add(1, Ordering::Release);
                    drop(g);
                    futex_wake_all(&h.sync_gen);
                    r?;
                }
                // Follow: sleep until the current leader finishes a round.
                None => futex_wait(&h.sync_gen, gen_before, FOLLOWER_WAIT),
            }
        }
    }

    /// Syncs the file for every record written so far. Caller holds the sync lock.
    fn sync_locked(&self, h: &Header) -> Result<()> {
        let hi = Self::written_seq(h);
        if Self::synced_seq(h) >= hi {
            return Ok(());
        }
        crate::debug::hit(crate::debug::CrashPoint::SyncLeader);
        if let Err(e) = self.storage.sync() {
            let e = self.err("sync log", e);
            poison(h, &e);
            return Err(e);
        }
        h.syncs.fetch_add(1, Ordering::Relaxed);
        h.synced_seq.fetch_max(hi, Ordering::AcqRel);
        Ok(())
    }

    /// Syncs everything written, under the sync lock.
    pub fn sync_all(&self, h: &Header) -> Result<()> {
        check_poison(h)?;
        let _g = h
            .sync_lock
            .lock()
            .map_err(|e| self.err("lock the log", e))?;
        self.sync_locked(h)
    }

    /// Starts a new epoch (the log becomes empty) if every record is covered
    /// by the checkpoint `checkpoint_seq`. Caller holds the commit lock (no
    /// record can be appended meanwhile) and has synced the log. Returns
    /// whether the log was reset.
    pub fn maybe_reset(&self, h: &Header, _l: &Locked<'_>, checkpoint_seq: u64) -> Result<bool> {
        check_poison(h)?;
        if checkpoint_seq < Self::written_seq(h)
            || h.commit_seq.load(Ordering::Acquire) > checkpoint_seq
        {
            return Ok(false);
        }
        let prev = Self::header(h);
        let r = start_epoch(&*self.storage, &prev, checkpoint_seq);
        let (next, _) = match r {
            Ok(x) => x,
            Err(e) => {
                poison(h, &e);
                return Err(e);
            }
        };
        crate::debug::hit(crate::debug::CrashPoint::LogReset);
        publish_epoch(h, &next);
        Ok(true)
    }
}

/// Starts a fresh epoch in `storage`: a new header whose first record will be
/// `last_seq + 1`. Everything in the file before this is ignored from now
/// on. Returns the header and the bytes of file already allocated.
pub fn start_epoch(
    storage: &dyn Storage,
    previous: &LogHeader,
    last_seq: u64,
) -> Result<(LogHeader, u64)> {
    let err = |op, e| Error::io(op, storage.path(), e);
    let header = LogHeader {
        region_id: previous.region_id,
        generation: previous.generation + 1,
        salt: fresh_salt(Some(previous.salt)),
        start_seq: last_seq + 1,
    };
    let allocated = storage.len().map_err(|e| err("stat", e))?;
    if allocated < HEADER_BYTES {
        storage
            .write_at(&vec![0; HEADER_BYTES as usize], 0)
            .map_err(|e| err("write log header", e))?;
    }
    let (off, slot) = header.encode();
    storage
        .write_at(&slot, off)
        .and_then(|_| storage.sync())
        .map_err(|e| err("write log header", e))?;
    Ok((header, allocated.max(HEADER_BYTES)))
}

/// Makes a new epoch (already written to the file) current in shared memory.
/// The generation goes last: a process that dies before it leaves shared
/// memory an older generation than the file's, so the repair under the
/// commit lock publishes the epoch again. Stored first, it would leave the
/// old salt or end in use under the new generation, and every later record
/// would be one recovery cannot see.
pub fn publish_epoch(h: &Header, next: &LogHeader) {
    h.log_salt.store(next.salt, Ordering::Release);
    crate::debug::hit(crate::debug::CrashPoint::EpochPublishing);
    h.log_start_seq.store(next.start_seq, Ordering::Release);
    h.log_end.store(HEADER_BYTES, Ordering::Release);
    h.published_end.store(HEADER_BYTES, Ordering::Release);
    h.log_generation.store(next.generation, Ordering::Release);
}

/// Fails if an earlier write or sync of the log failed (in any process).
pub fn check_poison(h: &Header) -> Result<()> {
    match poison_message(h) {
        None => Ok(()),
        Some(m) => Err(Error::Poisoned(m)),
    }
}

/// Why the region was made unusable, if it was (in any process).
pub fn poison_message(h: &Header) -> Option<String> {
    if h.poisoned.load(Ordering::Acquire) == 0 {
        return None;
    }
    let bytes: Vec<u8> = h
        .poison_msg
        .iter()
        .map(|b| b.load(Ordering::Relaxed))
        .take_while(|&b| b != 0)
        .collect();
    Some(String::from_utf8_lossy(&bytes).into_owned())
}

/// Marks the region unusable after a failed write or sync.
pub fn poison(h: &Header, e: &Error) {
    h.poison(&e.to_string());
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
