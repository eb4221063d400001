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
//! than one. A follower whose leader holds the lock too long (stopped by
//! SIGSTOP, a debugger, swapping) syncs the file itself, without the lock.

use std::num::NonZeroU32;
use std::sync::atomic::{Ordering, fence};
use std::time::{Duration, Instant};

use super::format::{self, HEADER_BYTES, LogHeader, Range};
use super::shared::LogShared;
use crate::error::{Error, Result};
use crate::io::Storage;
use crate::os::lock::{Guard, futex_wait_bits, futex_wake_all, futex_wake_bits};

/// Log space is made real (zeros written) ahead of the records, so that
/// the per-commit sync has no file-size change to flush: at most this much
/// at a time (and the unit `reserve_len` rounds to).
const PREALLOCATE: u64 = 4 << 20;
/// The first extension of an empty log; each later one doubles the space
/// past the header, up to [`PREALLOCATE`] at a time: a region that logs
/// little writes few zeros (a one-time 4 MiB fill was most of the bytes a
/// few thousand small durable commits wrote), and a busy log still
/// extends once per 4 MiB.
const FIRST_EXTENSION: u64 = 64 << 10;
/// Records of at least this many bytes are written from their pieces
/// (`format::encode_pieces`) with one vectored write.
const VECTORED_FROM: usize = 64 << 10;
/// The zeros are written in pieces this large: one large write makes the
/// page cache hold the log in large folios, and then every small append
/// and every `fdatasync` walks a whole folio's blocks (measured on ext4,
/// kernel 6.18: 13 against 2 µs per append, 88 against 65 µs per sync).
const ZERO_PIECE: usize = 64 << 10;
/// How long a follower sleeps before checking whether the leader died.
const FOLLOWER_WAIT: Duration = Duration::from_millis(5);
/// The longest a sync leader gathers records before syncing (a slow
/// device's sync time does not make commits wait longer than this).
const MAX_GATHER: Duration = Duration::from_millis(2);
/// A follower stops waiting for the sync lock's holder, and syncs the log
/// itself, once the holder has held the lock (or the follower has waited)
/// this many times as long as the last `fdatasync` took, ...
const STALL_FACTOR: u64 = 4;
/// ... but never sooner than this (a leader preempted for a while is not
/// stalled; an early rescue would only cost one more sync) ...
const MIN_STALL: Duration = Duration::from_millis(50);
/// ... nor later than this (a slow device's sync time does not make a
/// stopped leader stall the others longer).
const MAX_STALL: Duration = Duration::from_secs(1);

/// How long the sync lock may be held before followers sync for themselves.
/// Before the first sync of a session its time is unknown: the upper bound
/// (a slow device's first sync would otherwise send every follower to sync
/// on its own).
fn stall_bound(h: &LogShared) -> Duration {
    match h.sync_nanos.load(Ordering::Relaxed) {
        0 => MAX_STALL,
        last => Duration::from_nanos(last.saturating_mul(STALL_FACTOR)).clamp(MIN_STALL, MAX_STALL),
    }
}

/// `CLOCK_MONOTONIC` in nanoseconds (one clock for every process of the
/// machine), never 0.
fn now_nanos() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    (t.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(t.tv_nsec as u64)
        .max(1)
}

/// The held sync lock: who holds it and since when is published in the
/// shared header (for followers and `txmap info`), and cleared before the
/// lock is released. A holder that dies leaves them behind; the next one
/// overwrites them.
struct Leading<'a> {
    h: &'a LogShared,
    _guard: Guard<'a>,
}

impl<'a> Leading<'a> {
    fn new(h: &'a LogShared, guard: Guard<'a>) -> Leading<'a> {
        h.sync_leader_pid
            .store(u64::from(std::process::id()), Ordering::Relaxed);
        h.sync_leader_since.store(now_nanos(), Ordering::Release);
        Leading { h, _guard: guard }
    }
}

impl Drop for Leading<'_> {
    fn drop(&mut self) {
        self.h.sync_leader_since.store(0, Ordering::Release);
        self.h.sync_leader_pid.store(0, Ordering::Relaxed);
    }
}

/// A process holding the sync lock, as `txmap info` shows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SyncLeader {
    pub pid: u32,
    /// How long it has held the lock so far.
    pub held: Duration,
    /// It has held it longer than followers wait: they sync for themselves.
    pub stalled: bool,
}

/// The sync lock's holder, if a process holds it now (read without
/// taking part; the pid and time may belong to consecutive holders).
pub fn sync_leader(h: &LogShared) -> Option<SyncLeader> {
    let since = h.sync_leader_since.load(Ordering::Acquire);
    let pid = h.sync_leader_pid.load(Ordering::Relaxed);
    if since == 0 || pid == 0 {
        return None;
    }
    let held = Duration::from_nanos(now_nanos().saturating_sub(since));
    Some(SyncLeader {
        pid: pid as u32,
        held,
        stalled: held > stall_bound(h),
    })
}

/// Whether a follower that has waited `waited` for the sync lock's holder
/// should sync the log itself.
fn leader_stalled(h: &LogShared, waited: Duration) -> bool {
    let bound = stall_bound(h);
    if waited > bound {
        return true;
    }
    // A follower that arrives late need not wait the bound again.
    let since = h.sync_leader_since.load(Ordering::Acquire);
    since != 0 && Duration::from_nanos(now_nanos().saturating_sub(since)) > bound
}

/// After a sync: wakes one follower whose record arrived during it, to lead
/// the next round (the disk idles until it runs), then every follower the
/// sync covered (`covered`); the others sleep on until a round covers them.
fn wake_after_sync(h: &LogShared, covered: Option<NonZeroU32>) {
    let (synced, written) = (Log::synced_seq(h), Log::written_seq(h));
    if let Some(bits) = seq_bits(synced, written) {
        h.sync_gen.fetch_add(1, Ordering::SeqCst);
        futex_wake_bits(&h.sync_gen, bits, 1);
    }
    if let Some(bits) = covered {
        futex_wake_bits(&h.sync_gen, bits, u32::MAX);
    }
}

/// The futex bit a follower waiting for record `seq` sleeps on.
fn seq_bit(seq: u64) -> u32 {
    1 << (seq % 32)
}

/// The bits of the followers waiting for records `(before, after]`
/// (`None`: there are none).
fn seq_bits(before: u64, after: u64) -> Option<NonZeroU32> {
    if after.saturating_sub(before) >= 32 {
        return Some(NonZeroU32::MAX);
    }
    NonZeroU32::new((before + 1..=after).fold(0, |b, s| b | seq_bit(s)))
}

/// A record encoded for [`Log::append_encoded`].
pub struct Encoded<'a> {
    seq: u64,
    own: Vec<u8>,
    pieces: Vec<format::Piece<'a>>,
}

/// The log file of a region, as used by this process. Its position, salt and
/// sync progress live in the shared header.
pub struct Log {
    storage: Box<dyn Storage>,
    /// Log bytes kept when a new epoch starts; beyond it the file is cut.
    reserve: u64,
    /// Where each epoch is copied before the log is reset, if anywhere.
    archive: Option<std::path::PathBuf>,
    /// Pending nested top actions of the epoch, as far as read (`nta.rs`).
    nta: std::sync::Mutex<crate::nta::EpochScan>,
}

impl Log {
    pub fn new(storage: Box<dyn Storage>) -> Log {
        Log {
            storage,
            reserve: u64::MAX,
            archive: None,
            nta: Default::default(),
        }
    }

    /// Copies each epoch into `dir` before the log is reset.
    pub fn with_archive(mut self, dir: Option<std::path::PathBuf>) -> Log {
        self.archive = dir;
        self
    }

    /// Gives back the file's space beyond `reserve` bytes at each new epoch.
    pub fn with_reserve(mut self, reserve: u64) -> Log {
        self.reserve = reserve;
        self
    }

    pub fn storage(&self) -> &dyn Storage {
        &*self.storage
    }

    fn err(&self, op: &'static str, e: std::io::Error) -> Error {
        Error::io(op, self.storage.path(), e)
    }

    /// The current epoch's header, as published in shared memory.
    pub fn header(h: &LogShared) -> LogHeader {
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
        h: &LogShared,
        commit_lock: &Guard<'_>,
        seq: u64,
        data_size: u64,
        ranges: impl Iterator<Item = Range<'a>> + Clone,
        ops: &[format::LoggedOp<'_>],
    ) -> Result<()> {
        self.append_group(h, commit_lock, seq, data_size, ranges, ops, None)
    }

    /// `append`, with the trailer of a commit across several regions.
    #[allow(clippy::too_many_arguments)] // `append`'s, and the trailer
    pub fn append_group<'a>(
        &self,
        h: &LogShared,
        commit_lock: &Guard<'_>,
        seq: u64,
        data_size: u64,
        ranges: impl Iterator<Item = Range<'a>> + Clone,
        ops: &[format::LoggedOp<'_>],
        group: Option<&format::GroupTrailer>,
    ) -> Result<()> {
        let rec = Self::encode(h, commit_lock, (seq, data_size), ranges, ops, group);
        self.append_encoded(h, commit_lock, rec)
    }

    /// Encodes record `seq` as `append` would write it next (a large
    /// commit encodes it while the log is extended on another thread).
    /// The caller holds the commit lock until it is appended.
    /// `(seq, data_size)`: the record's number and the region's size.
    pub fn encode<'a>(
        h: &LogShared,
        _commit_lock: &Guard<'_>,
        (seq, data_size): (u64, u64),
        ranges: impl Iterator<Item = Range<'a>> + Clone,
        ops: &[format::LoggedOp<'_>],
        group: Option<&format::GroupTrailer>,
    ) -> Encoded<'a> {
        let salt = h.log_salt.load(Ordering::Acquire);
        let synced = h.synced_seq.load(Ordering::Acquire);
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        let mut own = Vec::new();
        let pieces = format::encode_pieces(
            &mut own,
            salt,
            seq,
            synced,
            data_size,
            ranges,
            ops,
            Some(now),
            group,
        );
        Encoded { seq, own, pieces }
    }

    /// Writes a record `encode` made at the shared log end.
    pub fn append_encoded(
        &self,
        h: &LogShared,
        _commit_lock: &Guard<'_>,
        rec: Encoded<'_>,
    ) -> Result<()> {
        let Encoded { seq, own, pieces } = rec;
        // Paired with the scan (wal/scan.rs), which calls a record out of
        // sequence damage: records go in sequence order, after what is
        // published, never into the header page.
        assert_eq!(
            Self::written_seq(h) + 1,
            seq,
            "records are appended in sequence order"
        );
        let bufs: Vec<&[u8]> = pieces.iter().map(|p| p.bytes(&own)).collect();
        let len: usize = bufs.iter().map(|b| b.len()).sum();
        // A small record in one buffer, one write; a large one (a bulk
        // load's) straight from the pages' bytes, not copied together first.
        let buf = if len < VECTORED_FROM {
            Some(bufs.concat())
        } else {
            None
        };
        let off = h.log_end.load(Ordering::Acquire);
        assert!(
            off >= HEADER_BYTES && h.published_end.load(Ordering::Acquire) <= off,
            "a record goes after the header and after every published record"
        );
        let end = off + len as u64;
        self.make_room(h, end)?;
        let r = match &buf {
            Some(b) => self.storage.write_at(b, off),
            None => self.storage.write_all_vectored_at(&bufs, off),
        }
        .map_err(|e| self.err("append to log", e));
        if let Err(e) = &r {
            poison(h, e);
            return r;
        }
        h.log_end.store(end, Ordering::Release);
        h.written_seq.store(seq, Ordering::SeqCst);
        let target = h.gather_target.load(Ordering::SeqCst);
        if target != 0 && seq >= target {
            h.append_gen.fetch_add(1, Ordering::SeqCst);
            futex_wake_bits(&h.append_gen, NonZeroU32::MAX, 1);
        }
        Ok(())
    }

    /// Makes the log hold a record of `len` bytes appended next, as
    /// `append` would before writing it. Only while the commit lock is
    /// held, by this thread or by the committer that asked for it and waits
    /// for it (`RegionInner::commit`, which reserves versions meanwhile).
    /// A failure poisons the log.
    pub fn make_room_next(&self, h: &LogShared, len: usize) -> Result<()> {
        self.make_room(h, h.log_end.load(Ordering::Acquire) + len as u64)
    }

    /// Extends the log, if it must, to hold records up to `end` and 8 zero
    /// bytes after them.
    fn make_room(&self, h: &LogShared, end: u64) -> Result<()> {
        let allocated = h.log_allocated.load(Ordering::Acquire);
        // At least 8 zero bytes stay after the last record, and the new
        // length is synced before a record goes there: a crash then never
        // leaves a log that ends inside or right after a record, so
        // recovery can tell truncation (damage) from a torn tail.
        if end + 8 <= allocated {
            return Ok(());
        }
        let r = (|| {
            let new_alloc = extended_len(allocated, end + 8);
            let at = self
                .extend_under(allocated, end)
                .map_err(|e| self.err("extend log", e))?;
            let zeros = vec![0u8; ZERO_PIECE];
            let mut at = at;
            while at < new_alloc {
                let n = (new_alloc - at).min(ZERO_PIECE as u64) as usize;
                self.storage
                    .write_at(&zeros[..n], at)
                    .map_err(|e| self.err("extend log", e))?;
                at += n as u64;
            }
            self.storage
                .sync()
                .map_err(|e| self.err("sync extended log", e))?;
            h.log_allocated.store(new_alloc, Ordering::Release);
            Ok(())
        })();
        if let Err(e) = &r {
            poison(h, e);
        }
        r
    }

    /// Extends the log over the whole pieces of zeros that a record ending
    /// at `end` fills past `allocated` without writing them: `set_len`
    /// (unwritten extents, read as zeros like written ones). The record
    /// goes there right after, so writing zeros first only doubled a large
    /// record's writes (a bulk load's). Returns where zeros must still be
    /// written from. Only when the file is no longer than `allocated`: past
    /// it may lie an older epoch's bytes (a death before a cut), which
    /// only written zeros clear.
    fn extend_under(&self, allocated: u64, end: u64) -> std::io::Result<u64> {
        let piece = ZERO_PIECE as u64;
        let whole = allocated + (end.saturating_sub(allocated) / piece) * piece;
        if whole == allocated || self.storage.len()? > allocated {
            return Ok(allocated);
        }
        self.storage.set_len(whole)?;
        Ok(whole)
    }

    /// Sequence number of the last record written to the OS. (`SeqCst`:
    /// gathering needs a store-then-load order on both sides.)
    pub fn written_seq(h: &LogShared) -> u64 {
        h.written_seq.load(Ordering::SeqCst)
    }

    /// Sequence number of the last record known durable.
    pub fn synced_seq(h: &LogShared) -> u64 {
        h.synced_seq()
    }

    /// Bytes of log in the current epoch (records written so far).
    pub fn epoch_bytes(h: &LogShared) -> u64 {
        h.log_end
            .load(Ordering::Acquire)
            .saturating_sub(HEADER_BYTES)
    }

    /// Makes record `seq` durable (it reached the OS when it was appended).
    /// Group commit happens here, across processes.
    ///
    /// The leader of a round gathers (`gather`, below), syncs for every
    /// record written so far, then wakes only the followers that round
    /// covered (each sleeps on a futex bit, its sequence number modulo 32)
    /// and one follower whose record arrived during the sync, to lead the
    /// next round. Waking every follower cost each uncovered one two context
    /// switches to find the lead taken and sleep again.
    ///
    /// A follower does not wait for a leader forever: the lock's holder may
    /// be stopped (SIGSTOP, a debugger, swapping) while it holds it, which
    /// a robust mutex does not detect. Once the holder has held the lock
    /// (or the follower has waited) longer than [`stall_bound`], the
    /// follower syncs the log itself without the lock ([`Log::rescue`]).
    pub fn flush(&self, h: &LogShared, seq: u64) -> Result<()> {
        let mut waiting: Option<Instant> = None;
        loop {
            // The generation is read before the check, so a round that ends
            // in between changes it and the wait below returns at once.
            let gen_before = h.sync_gen.load(Ordering::SeqCst);
            if Self::synced_seq(h) >= seq {
                return Ok(());
            }
            check_poison(h)?;
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
                    let leading = Leading::new(h, g);
                    let r = self.lead(h);
                    drop(leading);
                    // Records written after the last round's check, by
                    // committers that found the lock held, need a new leader.
                    fence(Ordering::SeqCst);
                    let covered = match r {
                        Ok(covered) => covered,
                        Err(e) => {
                            h.sync_gen.fetch_add(1, Ordering::SeqCst);
                            futex_wake_all(&h.sync_gen);
                            return Err(e);
                        }
                    };
                    wake_after_sync(h, covered);
                }
                // The holder is stopped (or very slow): sync for ourselves.
                None if leader_stalled(h, waiting.get_or_insert_with(Instant::now).elapsed()) => {
                    self.rescue(h)?;
                }
                // Follow: sleep until a round covers `seq` (or the lead is free).
                None => {
                    let bit = NonZeroU32::new(seq_bit(seq)).unwrap_or(NonZeroU32::MAX);
                    futex_wait_bits(&h.sync_gen, gen_before, FOLLOWER_WAIT, bit);
                }
            }
        }
    }

    /// One sync round: syncs every record written so far and wakes the
    /// followers it covered.
    fn lead(&self, h: &LogShared) -> Result<Option<NonZeroU32>> {
        self.gather(h);
        let before = Self::synced_seq(h);
        let hi = self.sync_written(h, true)?;
        let after = Self::synced_seq(h);
        // Those it woke will likely commit again, and those that arrived
        // during the sync still wait. (Records a follower's own sync covered
        // meanwhile, `after` past `hi`, were not this round's.)
        let expect = hi.saturating_sub(before) + Self::written_seq(h).saturating_sub(after);
        h.sync_expect.store(expect, Ordering::Relaxed);
        h.sync_gen.fetch_add(1, Ordering::SeqCst);
        Ok(seq_bits(before, after))
    }

    /// Before a round, waits until as many records are written as the last
    /// round expects (the committers it woke, appending again), for at most
    /// as long as the last `fdatasync` took. Without this, followers woken
    /// by one round append during the next round's sync and make the round
    /// after it: committers split into two cohorts that alternate, and a
    /// round covers about half of them. When one `fdatasync` costs more than
    /// the woken committers need to append again, gathering them makes it
    /// cover all. The wait is bounded by the last sync's time because waiting
    /// longer would cost more than a second sync. Only in a durable region:
    /// there every record's committer waits for a sync, while in an async
    /// one only `Region::sync` and the background syncer do. Caller holds the
    /// sync lock.
    fn gather(&self, h: &LogShared) {
        if !h.durable() {
            return;
        }
        // A leader that died while gathering left its target behind (only
        // the sync lock's holder sets it): appends would go on waking nobody.
        if h.gather_target.load(Ordering::Relaxed) != 0 {
            h.gather_target.store(0, Ordering::SeqCst);
        }
        let expect = h.sync_expect.load(Ordering::Relaxed);
        let limit = Duration::from_nanos(h.sync_nanos.load(Ordering::Relaxed)).min(MAX_GATHER);
        // Only a follower's own sync moves the synced sequence meanwhile,
        // which makes the target come sooner: the wait only gets shorter.
        let target = Self::synced_seq(h) + expect;
        if expect <= 1 || Self::written_seq(h) >= target {
            return;
        }
        let deadline = Instant::now() + limit;
        loop {
            let seen = h.append_gen.load(Ordering::SeqCst);
            h.gather_target.store(target, Ordering::SeqCst);
            // Appends store the written sequence, then read the target: one
            // of the two sides sees the other's store.
            if Self::written_seq(h) >= target {
                break;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            futex_wait_bits(&h.append_gen, seen, left, NonZeroU32::MAX);
        }
        h.gather_target.store(0, Ordering::SeqCst);
    }

    /// A follower's own sync while the sync lock's holder is stalled: syncs
    /// every record written so far (whoever wrote it) without the lock,
    /// then wakes the followers it covered and one it did not, as a leader
    /// would. Several may run at once, with each other and with the holder.
    fn rescue(&self, h: &LogShared) -> Result<()> {
        let before = Self::synced_seq(h);
        let r = self.sync_written(h, false);
        h.sync_gen.fetch_add(1, Ordering::SeqCst);
        match r {
            Ok(_) => {
                wake_after_sync(h, seq_bits(before, Self::synced_seq(h)));
                Ok(())
            }
            Err(e) => {
                futex_wake_all(&h.sync_gen);
                Err(e)
            }
        }
    }

    /// Syncs the file for every record written so far and publishes that;
    /// returns the last record the sync covers. `fdatasync` on any
    /// descriptor covers every write to the file that returned before it
    /// started, in any process, so the written sequence is read before it,
    /// and `synced_seq` is only ever raised (`fetch_max`): a slower sync that
    /// started earlier cannot lower what a later one published. Called by
    /// the sync lock's holder (`leader`), or by a follower whose leader is
    /// stalled.
    fn sync_written(&self, h: &LogShared, leader: bool) -> Result<u64> {
        let hi = Self::written_seq(h);
        if Self::synced_seq(h) >= hi {
            return Ok(hi);
        }
        if leader {
            crate::debug::hit(crate::debug::CrashPoint::SyncLeader);
        }
        let started = Instant::now();
        if let Err(e) = self.storage.sync() {
            let e = self.err("sync log", e);
            poison(h, &e);
            return Err(e);
        }
        crate::debug::sync_pause();
        let took = started.elapsed().as_nanos().min(u128::from(u64::MAX)) as u64;
        h.sync_nanos.store(took, Ordering::Relaxed);
        h.syncs.fetch_add(1, Ordering::Relaxed);
        h.synced_seq.fetch_max(hi, Ordering::AcqRel);
        Ok(hi)
    }

    /// Syncs everything written so far, as a durable commit of the last
    /// record would (so a stopped sync leader does not block it either).
    pub fn sync_all(&self, h: &LogShared) -> Result<()> {
        check_poison(h)?;
        self.flush(h, Self::written_seq(h))
    }

    /// The nested top actions of the epoch still pending, oldest first, as
    /// far as the log is written (the caller holds the commit lock, so
    /// nothing is appended meanwhile).
    pub(crate) fn pending_nta(
        &self,
        h: &LogShared,
        _commit_lock: &Guard<'_>,
    ) -> Result<Vec<crate::nta::Pending>> {
        let mut scan = self.nta.lock().unwrap_or_else(|e| e.into_inner());
        scan.any_pending(
            &*self.storage,
            h.log_salt.load(Ordering::Acquire),
            h.log_end.load(Ordering::Acquire),
        )?;
        Ok(scan.open().to_vec())
    }

    /// Starts a new epoch (the log becomes empty) if every record is covered
    /// by the checkpoint `checkpoint_seq`. Caller holds the commit lock (no
    /// record can be appended meanwhile) and has synced the log. Returns
    /// whether the log was reset.
    pub fn maybe_reset(
        &self,
        h: &LogShared,
        _commit_lock: &Guard<'_>,
        commit_seq: u64,
        checkpoint_seq: u64,
    ) -> Result<bool> {
        check_poison(h)?;
        if checkpoint_seq < Self::written_seq(h) || commit_seq > checkpoint_seq {
            return Ok(false);
        }
        // A pending nested top action's undo lives only in this epoch: the
        // log grows until its parent ends (or it is compensated).
        if !self.pending_nta(h, _commit_lock)?.is_empty() {
            return Ok(false);
        }
        if let Some(dir) = &self.archive {
            // Before the reset: a failure leaves the log as it is.
            super::archive::archive_epoch(
                &*self.storage,
                dir,
                h.region_id.load(Ordering::Acquire),
                h.log_start_seq.load(Ordering::Acquire),
                Self::written_seq(h),
                h.log_end.load(Ordering::Acquire),
            )?;
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
        let allocated = h.log_allocated.load(Ordering::Acquire);
        give_back(&*self.storage, allocated, self.reserve, |a| {
            h.log_allocated.store(a, Ordering::Release)
        });
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

/// The log's allocated length after extending `allocated` to hold `need`
/// bytes: the space past the header doubles (from [`FIRST_EXTENSION`], by
/// at most [`PREALLOCATE`]), in whole [`ZERO_PIECE`]s, and covers `need`.
fn extended_len(allocated: u64, need: u64) -> u64 {
    let used = allocated.saturating_sub(HEADER_BYTES);
    let step = used.clamp(FIRST_EXTENSION, PREALLOCATE);
    let piece = ZERO_PIECE as u64;
    let to = (allocated + step).max(need);
    HEADER_BYTES + (to - HEADER_BYTES).div_ceil(piece) * piece
}

/// The length a log is cut to at a new epoch: `reserve` rounded up to
/// whole extensions, and never less than the header and one extension.
pub fn reserve_len(reserve: u64) -> u64 {
    HEADER_BYTES + reserve.max(PREALLOCATE).div_ceil(PREALLOCATE) * PREALLOCATE
}

/// At the start of an epoch (no record of it written yet, and none can be:
/// the caller holds the commit lock or is alone), cuts the log file to
/// [`reserve_len`] if it is longer. Every byte past the header belongs to
/// older epochs, all in the checkpoint. `publish` records the new allocated
/// length first: if the process dies before the cut, the file is only
/// longer than recorded (appends extend it again from there, writing
/// zeros); recorded after, a death would leave appends going past the
/// file's end without the synced extension that recovery relies on. Best
/// effort: a failed cut or sync leaves a longer file, which is harmless.
pub fn give_back(storage: &dyn Storage, allocated: u64, reserve: u64, publish: impl FnOnce(u64)) {
    if reserve == u64::MAX {
        return;
    }
    let keep = reserve_len(reserve);
    if allocated <= keep {
        return;
    }
    publish(keep);
    if storage.set_len(keep).is_ok() {
        let _ = storage.sync();
    }
}

/// Makes a new epoch (already written to the file) current in shared memory.
/// The generation goes last: a process that dies before it leaves shared
/// memory an older generation than the file's, so the repair under the
/// commit lock publishes the epoch again. Stored first, it would leave the
/// old salt or end in use under the new generation, and every later record
/// would be one recovery cannot see.
pub fn publish_epoch(h: &LogShared, next: &LogHeader) {
    h.log_salt.store(next.salt, Ordering::Release);
    crate::debug::hit(crate::debug::CrashPoint::EpochPublishing);
    h.log_start_seq.store(next.start_seq, Ordering::Release);
    h.log_end.store(HEADER_BYTES, Ordering::Release);
    h.published_end.store(HEADER_BYTES, Ordering::Release);
    h.log_generation.store(next.generation, Ordering::Release);
}

/// Fails if an earlier write or sync of the log failed (in any process).
pub fn check_poison(h: &LogShared) -> Result<()> {
    match poison_message(h) {
        None => Ok(()),
        Some(m) => Err(Error::Poisoned(m)),
    }
}

/// Why the region was made unusable, if it was (in any process).
pub fn poison_message(h: &LogShared) -> Option<String> {
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
pub fn poison(h: &LogShared, e: &Error) {
    h.poison(&e.to_string());
}

/// A salt that differs from the previous one (`rand::fresh`; it
/// need not be secret, only different from every earlier epoch's).
fn fresh_salt(previous: Option<u64>) -> u64 {
    loop {
        let v = crate::rand::fresh();
        if Some(v) != previous && v != 0 {
            return v;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{FIRST_EXTENSION, HEADER_BYTES, PREALLOCATE, extended_len};

    #[test]
    fn log_extensions_double_from_the_first_up_to_the_largest_step() {
        let mut a = HEADER_BYTES;
        let mut steps = Vec::new();
        for _ in 0..10 {
            let b = extended_len(a, a + 8);
            steps.push(b - a);
            a = b;
        }
        let k = 1 << 10;
        assert_eq!(
            steps,
            [64, 64, 128, 256, 512, 1024, 2048, 4096, 4096, 4096].map(|x| x * k)
        );
        assert_eq!(steps[0], FIRST_EXTENSION);
        assert_eq!(*steps.iter().max().unwrap(), PREALLOCATE);
        // A record larger than the step: the extension covers it, in whole
        // 64 KiB pieces.
        let big = extended_len(HEADER_BYTES, HEADER_BYTES + 10_000_000);
        assert!(big >= HEADER_BYTES + 10_000_000);
        assert_eq!((big - HEADER_BYTES) % (64 * k), 0);
    }
}
