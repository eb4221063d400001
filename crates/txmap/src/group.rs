//! Commits across several regions of one directory (issue 19 point 1,
//! docs/design/multi-region.md): the engine's side (commit locks in
//! region-id order, one record per writer with a group trailer, published
//! but pending under the locks, the logs synced in parallel after they are
//! released, then released to snapshots), the repair's refusal
//! of a group a dead committer left, and recovery's rule (a group record is
//! replayed only if every writer has it; a first opener that lacks a group
//! another region holds has that region recover first).

use std::path::Path;
use std::sync::mpsc::{Sender, channel};
use std::sync::{Arc, Mutex};

use crate::engine::{CommitRequest, RegionInner};
use crate::error::{Error, Result};
use crate::mvcc::Locked;
use crate::wal::format::{GroupMember, GroupTrailer, MAX_GROUP};
use crate::wal::log::Log;

/// The region's id (from the log's part of the shared state).
pub(crate) fn region_id(r: &RegionInner) -> u64 {
    Log::header(&r.mvcc.hdr().log).region_id
}

/// The region file's name in its directory, for a group trailer.
fn file_name(r: &RegionInner) -> Result<String> {
    r.path
        .file_name()
        .and_then(|n| n.to_str())
        .filter(|n| n.len() <= u16::MAX as usize)
        .map(str::to_string)
        .ok_or_else(|| {
            Error::Invalid(format!(
                "{}: a region in a commit across several regions needs a UTF-8 file name",
                r.path.display()
            ))
        })
}

/// Checks that `regions` are distinct regions of one directory, and
/// returns their indices in region-id order (the lock order).
pub(crate) fn lock_order(regions: &[&RegionInner]) -> Result<Vec<usize>> {
    if regions.len() > MAX_GROUP {
        return Err(Error::Invalid(format!(
            "a transaction spans at most {MAX_GROUP} regions, not {}",
            regions.len()
        )));
    }
    // Called for every begin, commit and release of such a transaction:
    // each id read once, and the directories compared without copies.
    let ids: Vec<u64> = regions.iter().map(|r| region_id(r)).collect();
    let mut order: Vec<usize> = (0..regions.len()).collect();
    order.sort_unstable_by_key(|&i| ids[i]);
    for w in order.windows(2) {
        if ids[w[0]] == ids[w[1]] {
            return Err(Error::Invalid(format!(
                "{} appears twice in one transaction (one view per region)",
                regions[w[0]].path.display()
            )));
        }
    }
    fn dir(r: &RegionInner) -> Option<&Path> {
        r.path.parent()
    }
    if let Some(first) = regions.first()
        && let Some(other) = regions.iter().find(|r| dir(r) != dir(first))
    {
        return Err(Error::Invalid(format!(
            "{} and {} are in different directories: a transaction spans regions of one directory",
            first.path.display(),
            other.path.display()
        )));
    }
    Ok(order)
}

/// Takes the commit locks of `regions` in region-id order. Holding all of
/// them, no commit across any of them is half published.
pub(crate) fn lock_all<'a>(regions: &[&'a RegionInner]) -> Result<Vec<Locked<'a>>> {
    let order = lock_order(regions)?;
    let mut locks = Vec::with_capacity(order.len());
    for i in order {
        locks.push(regions[i].lock_commit()?);
    }
    Ok(locks)
}

/// Lock-free tries of `snapshots` before it takes the commit locks.
const SNAPSHOT_TRIES: usize = 4;

/// Registers a snapshot of each of `regions` (in slot `slots[i]`) that
/// agree on every commit across them, and returns them. Without the commit
/// locks: each region's visibility word (`LogShared::release_gen`, odd
/// while a commit across several regions changes what snapshots see, in
/// every writer before and after the change in any) is read before and
/// after the snapshots; a word odd or moved means such a change may lie
/// between two of them, so they are taken again. And every region but the
/// last must still show its snapshot after the last was taken: then all
/// are the regions' state at that moment, and a commit that finished
/// before another began (in another region) is never seen without it.
/// After `SNAPSHOT_TRIES` tries (commits keep coming), taken under all the
/// commit locks, where no such change can be under way.
pub(crate) fn snapshots(regions: &[&RegionInner], slots: &[usize]) -> Result<Vec<u64>> {
    let word = |r: &RegionInner| r.mvcc.hdr().log.release_gen();
    for _ in 0..SNAPSHOT_TRIES {
        let before: Vec<u32> = regions.iter().map(|r| word(r)).collect();
        if before.iter().any(|g| g % 2 == 1) {
            std::hint::spin_loop();
            continue;
        }
        let s: Vec<u64> = regions
            .iter()
            .zip(slots)
            .map(|(r, &i)| r.mvcc.begin(i))
            .collect();
        let n = regions.len();
        let stable = regions.iter().zip(&before).all(|(r, &g)| word(r) == g)
            && regions[..n.saturating_sub(1)]
                .iter()
                .zip(&s)
                .all(|(r, &s)| r.mvcc.visible_seq() == s);
        if stable {
            return Ok(s);
        }
    }
    let locks = lock_all(regions)?;
    let s = regions
        .iter()
        .zip(slots)
        .map(|(r, &i)| r.mvcc.begin(i))
        .collect();
    drop(locks);
    Ok(s)
}

/// One region's part of a commit across several regions.
pub(crate) struct Part<'a> {
    pub region: &'a Arc<RegionInner>,
    /// What the transaction did in it (a part that only read has no pages).
    pub req: CommitRequest<'a>,
}

fn writes(req: &CommitRequest<'_>) -> bool {
    !req.pages.is_empty() || !req.commute.is_empty() || !req.ops.is_empty()
}

/// Validates every part under all the commit locks and commits the writes
/// atomically: returns each part's commit sequence (0 where it wrote
/// nothing). With two or more writers, every writer's record carries the
/// group trailer and is published in memory under the locks (so later
/// commits validate against it), but snapshots stay below it (`pending`,
/// `Mvcc::visible_seq`) until every log is synced, whatever the durability
/// mode: nothing can read or depend on the group before it is durable in
/// all of them. The locks are released before the sync, so group commits
/// to the same regions share syncs (wal/log.rs group commit), and taken
/// again briefly to release the group to snapshots.
pub(crate) fn commit(parts: Vec<Part<'_>>) -> Result<Vec<u64>> {
    for p in &parts {
        p.region.check_owner()?;
        if writes(&p.req) {
            p.region.check_writable("commit")?;
        }
        crate::wal::log::check_poison(&p.region.mvcc.hdr().log)?;
    }
    let regions: Vec<&RegionInner> = parts.iter().map(|p| &**p.region).collect();
    let order = lock_order(&regions)?;
    let mut locks: Vec<Option<Locked<'_>>> = (0..parts.len()).map(|_| None).collect();
    for &i in &order {
        locks[i] = Some(parts[i].region.lock_commit()?);
    }
    let lock = |i: usize| locks[i].as_ref().expect("every part's lock is held");
    let valid = parts.iter().try_for_each(|p| p.region.validate(&p.req));
    if let Err(e) = valid {
        drop(locks);
        for p in &parts {
            p.region.wait_after_conflict(&e);
        }
        return Err(e);
    }
    // Each writer's pages (its own and those commutative operations
    // change), room for their versions, and its sequence number.
    let mut writers = Vec::new();
    let mut owned: Vec<crate::engine::Commuted> = Vec::new();
    for &i in &order {
        let p = &parts[i];
        if !writes(&p.req) {
            continue;
        }
        let commuted = p.region.commit_time(&p.req, None)?;
        owned.push(commuted);
        writers.push(i);
    }
    // Each writer's record: its commit-time operations as the bytes they
    // wrote or with their pages (`commit_record`).
    let records: Vec<_> = writers
        .iter()
        .enumerate()
        .map(|(k, &i)| {
            let r = &parts[i].req;
            crate::engine::commit_record(&r.ranges, &r.ops, &r.commute, &owned[k])
        })
        .collect();
    let mut pages: Vec<Vec<(u32, &[u8])>> = Vec::new();
    for (k, &i) in writers.iter().enumerate() {
        let mut all = parts[i].req.pages.clone();
        all.extend(owned[k].pages.iter().map(|(p, b)| (*p, &b[..])));
        let r = parts[i].region;
        r.mvcc
            .reserve(lock(i), all.len())
            .map_err(|e| r.version_store_full(e))?;
        pages.push(all);
    }
    let seqs: Vec<u64> = writers
        .iter()
        .map(|&i| parts[i].region.mvcc.commit_seq() + 1)
        .collect();
    let trailer = if writers.len() >= 2 {
        let mut members = Vec::with_capacity(writers.len());
        for (k, &i) in writers.iter().enumerate() {
            let r = parts[i].region;
            members.push(GroupMember {
                region_id: region_id(r),
                seq: seqs[k],
                salt: Log::header(&r.mvcc.hdr().log).salt,
                name: file_name(r)?,
            });
        }
        Some(GroupTrailer {
            id: crate::rand::fresh().max(1),
            members,
        })
    } else {
        None
    };
    if let Some(t) = &trailer {
        for &i in &writers {
            parts[i].region.mvcc.hdr().log.set_group_in_flight(t.id);
        }
    }
    // Any failure from here on may leave the group in some logs: every
    // writer is poisoned, and the next first opener's recovery decides.
    let fail = |e: Error| {
        if trailer.is_some() {
            for &i in &writers {
                crate::wal::log::poison(&parts[i].region.mvcc.hdr().log, &e);
            }
        }
        e
    };
    for (k, &i) in writers.iter().enumerate() {
        let r = parts[i].region;
        let h = r.mvcc.hdr();
        if k == 1 {
            crate::debug::hit(crate::debug::CrashPoint::GroupAppended);
        }
        let (ranges, ops) = &records[k];
        if crate::ops::changes_bytes(ops) {
            // Its checkpoint journals the pages first (`journal.rs`).
            h.file.note_ops(seqs[k]);
        }
        r.log
            .append_group(
                &h.log,
                lock(i).guard(),
                seqs[k],
                r.size(),
                ranges.iter().cloned(),
                ops,
                trailer.as_ref(),
            )
            .map_err(fail)?;
    }
    let logs: Vec<&Arc<RegionInner>> = writers.iter().map(|&i| parts[i].region).collect();
    // Pending in every writer (snapshots stop below it), or, where a ring
    // is full, synced here holding the locks as a whole.
    let pending = trailer.is_some()
        && writers.iter().enumerate().all(|(k, &i)| {
            let r = parts[i].region;
            r.mvcc.hdr().log.add_pending(seqs[k], r.pid()) || {
                for (kk, &ii) in writers[..k].iter().enumerate() {
                    parts[ii].region.mvcc.hdr().log.release_pending(seqs[kk]);
                }
                false
            }
        });
    if trailer.is_some() && !pending {
        sync_all(&logs, &seqs).map_err(fail)?;
        crate::debug::hit(crate::debug::CrashPoint::GroupSynced);
        // Published below: visible at once in every writer.
        for r in &logs {
            r.mvcc.hdr().log.begin_visibility_change();
        }
    }
    for (k, &i) in writers.iter().enumerate() {
        let r = parts[i].region;
        let h = r.mvcc.hdr();
        if k == 1 {
            crate::debug::hit(crate::debug::CrashPoint::GroupPublished);
        }
        let published = r
            .mvcc
            .publish(lock(i), seqs[k], &pages[k], Log::synced_seq(&h.log));
        assert!(
            published.is_ok(),
            "publishing a logged commit failed after space was reserved: {published:?}"
        );
        h.log.mark_published();
        h.log.set_group_in_flight(0);
    }
    if trailer.is_some() && !pending {
        for r in &logs {
            r.mvcc.hdr().log.end_visibility_change();
        }
    }
    let mine = pending.then(|| register(&logs, &seqs));
    drop(pages);
    drop(locks);
    if let Some(mine) = mine {
        crate::debug::hit(crate::debug::CrashPoint::GroupUnlocked);
        let synced = sync_all(&logs, &seqs).map_err(fail);
        if let Err(e) = synced {
            unregister(&mine);
            return Err(e);
        }
        crate::debug::hit(crate::debug::CrashPoint::GroupSynced);
        release(&logs, &mine).map_err(fail)?;
    }
    let mut out = vec![0; parts.len()];
    for (k, &i) in writers.iter().enumerate() {
        out[i] = seqs[k];
        let r = parts[i].region;
        let h = r.mvcc.hdr();
        if trailer.is_none() && r.opts.durability == crate::options::Durability::Durable {
            r.log.flush(&h.log, seqs[k])?;
        }
        r.wait_visible(seqs[k])?;
        if Log::epoch_bytes(&h.log) > r.opts.checkpoint_bytes {
            // As in `RegionInner::commit`: durable already, and the
            // transaction's snapshot must not hold the checkpoint back.
            r.mvcc.end(parts[i].req.slot);
            let _ = r.checkpoint_unless_busy();
        }
    }
    Ok(out)
}

/// A pending commit across several regions of this process, until it is
/// released to snapshots (by its committer or, once durable, by another
/// committer holding every writer's lock: `release`).
struct Pending {
    /// Each writer and the group's sequence number there.
    members: Vec<(Arc<RegionInner>, u64)>,
    released: std::sync::atomic::AtomicBool,
}

/// This process's pending groups (a forked child starts its own).
static PENDING: Mutex<(u32, Vec<Arc<Pending>>)> = Mutex::new((0, Vec::new()));

fn pending_groups() -> std::sync::MutexGuard<'static, (u32, Vec<Arc<Pending>>)> {
    let mut g = PENDING.lock().unwrap_or_else(|e| e.into_inner());
    let pid = std::process::id();
    if g.0 != pid {
        *g = (pid, Vec::new());
    }
    g
}

/// Notes a group just made pending (caller holds its writers' locks).
fn register(logs: &[&Arc<RegionInner>], seqs: &[u64]) -> Arc<Pending> {
    let p = Arc::new(Pending {
        members: logs
            .iter()
            .zip(seqs)
            .map(|(r, &s)| (Arc::clone(r), s))
            .collect(),
        released: false.into(),
    });
    pending_groups().1.push(Arc::clone(&p));
    p
}

fn unregister(p: &Arc<Pending>) {
    pending_groups().1.retain(|q| !Arc::ptr_eq(q, p));
}

/// Releases group `mine` (durable in every writer) to snapshots, in every
/// writer at once under all their locks, so a snapshot over several
/// regions sees it in all of them or none; and with it every other pending
/// group of this process whose writers are all among these and which is
/// durable in each, so their committers find it released and need not
/// take the locks again (one lock round per sync round, not per commit).
fn release(logs: &[&Arc<RegionInner>], mine: &Arc<Pending>) -> Result<()> {
    use std::sync::atomic::Ordering::{Acquire, Release};
    if mine.released.load(Acquire) {
        return Ok(());
    }
    let writer_regions: Vec<&RegionInner> = logs.iter().map(|r| &***r).collect();
    let relocked = lock_all(&writer_regions);
    let relocked = match relocked {
        Ok(l) => l,
        Err(e) => {
            unregister(mine);
            return Err(e);
        }
    };
    if mine.released.load(Acquire) {
        return Ok(());
    }
    let covered = |p: &Pending| {
        p.members.iter().all(|(r, s)| {
            logs.iter().any(|l| Arc::ptr_eq(l, r)) && Log::synced_seq(&r.mvcc.hdr().log) >= *s
        })
    };
    let ready: Vec<Arc<Pending>> = {
        let mut g = pending_groups();
        let (ready, rest) = std::mem::take(&mut g.1)
            .into_iter()
            .partition(|p| Arc::ptr_eq(p, mine) || covered(p));
        g.1 = rest;
        ready
    };
    for r in logs {
        r.mvcc.hdr().log.begin_visibility_change();
    }
    for p in &ready {
        for (k, (r, s)) in p.members.iter().enumerate() {
            if k == 1 {
                crate::debug::hit(crate::debug::CrashPoint::GroupReleasing);
            }
            r.mvcc.hdr().log.release_pending(*s);
        }
        p.released.store(true, Release);
    }
    for r in logs {
        r.mvcc.hdr().log.end_visibility_change();
    }
    drop(relocked);
    Ok(())
}

/// Below this, a log's last `fdatasync` took less than handing its sync to
/// a helper thread costs (two thread wake-ups on a loaded 2-CPU VM,
/// docs/benchmarks.md): such logs are synced one after the other.
const INLINE_SYNC: std::time::Duration = std::time::Duration::from_micros(40);

/// Syncs every writer's log up to its record. The committer leads or
/// follows the first log's group commit; each other log is handed to a
/// helper thread (kept for the next commits: starting a thread per commit
/// cost more than the sync on a fast device), which leads that log's round
/// meanwhile, and the committer then follows it there like any other
/// committer of that log (`Log::flush`): no answer comes back from the
/// helper, and a record another round covered by then costs no wait at
/// all. No handoff for a log already synced that far, nor where syncs are
/// cheaper than a handoff.
fn sync_all(writers: &[&Arc<RegionInner>], seqs: &[u64]) -> Result<()> {
    let log = |k: usize| &writers[k].mvcc.hdr().log;
    let cheap = (0..writers.len()).all(|k| log(k).last_sync() < INLINE_SYNC);
    if !cheap {
        for k in 1..writers.len() {
            if Log::synced_seq(log(k)) >= seqs[k] {
                continue;
            }
            let job = SyncJob {
                region: Arc::downgrade(writers[k]),
                round: Arc::clone(&writers[k].round),
                seq: seqs[k],
            };
            // Without a helper the log is synced below, after the first.
            if let Some(h) = helper(k - 1) {
                let _ = h.send(job);
            }
        }
    }
    let mut r = Ok(());
    for (k, w) in writers.iter().enumerate() {
        r = r.and(w.log.flush(log(k), seqs[k]));
    }
    r
}

/// A log for a helper to sync up to `seq`. The helper holds the region
/// strongly only while it holds the region's `round` lock, as the async
/// flusher does (`engine::RegionRef`): a handle dropped meanwhile waits,
/// so the region is never closed on the helper's thread.
struct SyncJob {
    region: std::sync::Weak<RegionInner>,
    round: Arc<Mutex<()>>,
    seq: u64,
}

/// This process's sync helpers (a forked child starts its own).
static HELPERS: Mutex<(u32, Vec<Sender<SyncJob>>)> = Mutex::new((0, Vec::new()));

/// Helper thread `k`, started when first needed (`None` if it cannot be).
fn helper(k: usize) -> Option<Sender<SyncJob>> {
    let mut g = HELPERS.lock().unwrap_or_else(|e| e.into_inner());
    let pid = std::process::id();
    if g.0 != pid {
        *g = (pid, Vec::new());
    }
    while g.1.len() <= k {
        let (tx, rx) = channel::<SyncJob>();
        std::thread::Builder::new()
            .name("txmap-group-sync".into())
            .stack_size(64 << 10)
            .spawn(move || {
                for job in rx {
                    let _round = crate::os::lock::lock(&job.round);
                    if let Some(r) = job.region.upgrade() {
                        crate::debug::group_helper_pause();
                        // A failed sync poisons the log; its committer's own
                        // `flush` reports it.
                        let _ = r.log.flush(&r.mvcc.hdr().log, job.seq);
                    }
                }
            })
            .ok()?;
        g.1.push(tx);
    }
    Some(g.1[k].clone())
}
