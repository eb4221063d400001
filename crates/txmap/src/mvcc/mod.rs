//! Versions and validation: the commit sequence, committed page versions not
//! yet in the region file, the last commit that wrote each page, snapshot
//! slots of live transactions, and the journal of which pages each commit
//! changed.
//!
//! Invariants:
//! - A page's version chain is ordered newest first; a reader with snapshot S
//!   uses the first version with `seq <= S`, else the region file.
//! - The checkpointer writes version `w` of a page to the region file only if
//!   `w <= horizon <= every live snapshot`, and unlinks versions `<= w` after
//!   the write. So whatever a live snapshot reads from the file is its version.
//! - A version unlinked at epoch `e` is freed only when no slot entered the
//!   read side at an epoch `<= e` and is still in it (epoch-based reclamation),
//!   which lets the fault handler walk chains without locks.
//!
//! All state is atomics and fixed arrays, laid out so it can move to memory
//! shared between processes.

use std::collections::{BTreeSet, VecDeque};
use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

use crate::os::mem::{PAGE, ReservedArray};

/// Largest number of views (threads) open on one region at once.
pub const MAX_SLOTS: usize = 256;
/// A reclamation slot reserved for the checkpointer (one at a time), which
/// reads versions while it writes them to the region file.
const CHECKPOINT_SLOT: usize = MAX_SLOTS;
/// Page lists kept in the change journal; a view further behind is reset whole.
const JOURNAL_PAGES: usize = 1 << 20;

/// One committed version of a page.
pub struct Version {
    pub seq: u64,
    next: AtomicPtr<Version>,
    pub data: Box<[u8; PAGE]>,
}

impl Version {
    pub fn new(seq: u64, data: &[u8]) -> Box<Version> {
        let mut page = Box::new([0u8; PAGE]);
        page.copy_from_slice(data);
        Box::new(Version {
            seq,
            next: AtomicPtr::new(std::ptr::null_mut()),
            data: page,
        })
    }
}

/// A live transaction's registration.
#[derive(Default)]
pub struct Slot {
    /// Claimed by a view (1) or free (0).
    owner: AtomicU64,
    /// Snapshot + 1 while a transaction is open, 0 otherwise.
    snapshot: AtomicU64,
    /// Reclamation epoch while reading version chains, 0 otherwise.
    epoch: AtomicU64,
}

struct Journal {
    entries: VecDeque<(u64, Box<[u32]>)>,
    pages: usize,
    /// Every commit after this sequence number is in `entries`.
    complete_after: u64,
}

/// A version taken out of a chain: a whole tail (its `next` links are its
/// own) or a single node (whose `next` still points into the live chain).
#[derive(Clone, Copy)]
struct Unlinked {
    node: usize,
    whole_tail: bool,
}

/// Unlinks the part of a chain at or below `bound`.
/// Caller holds `Mvcc::dirty`, which every writer of chains holds.
fn cut(head: &AtomicPtr<Version>, bound: u64) -> Option<Unlinked> {
    let mut link: &AtomicPtr<Version> = head;
    loop {
        let cur = link.load(Ordering::Acquire);
        // SAFETY: nodes reachable from a head are alive (see module docs), and
        // only the holder of `dirty` unlinks them.
        let v = unsafe { cur.as_ref() }?;
        if v.seq <= bound {
            link.store(std::ptr::null_mut(), Ordering::SeqCst);
            return Some(Unlinked {
                node: cur as usize,
                whole_tail: true,
            });
        }
        link = &v.next;
    }
}

/// Which versions a chain must keep: every one newer than `durable`, the
/// newest at or below it, and the newest at or below each live snapshot in
/// `live` (those below `durable`, newest first).
struct PrunePlan {
    durable: u64,
    live: Vec<u64>,
}

/// Unlinks the versions of a chain that no snapshot can read and no
/// checkpoint will write (see `PrunePlan`). Caller holds `Mvcc::dirty`.
fn prune_chain(head: &AtomicPtr<Version>, plan: &PrunePlan, out: &mut Vec<Unlinked>) {
    let mut cur = head.load(Ordering::Acquire);
    // SAFETY (all derefs below): nodes reachable from a head are alive, and
    // only the holder of `dirty` unlinks them.
    let mut kept = loop {
        let Some(v) = (unsafe { cur.as_ref() }) else {
            return;
        };
        if v.seq <= plan.durable {
            break v; // the newest at or below `durable`
        }
        cur = v.next.load(Ordering::Acquire);
    };
    let mut want = plan
        .live
        .iter()
        .copied()
        .filter(|&s| s < kept.seq)
        .peekable();
    loop {
        let next = kept.next.load(Ordering::Acquire);
        let Some(n) = (unsafe { next.as_ref() }) else {
            return;
        };
        match want.peek() {
            None => {
                // Nobody needs anything older: drop the whole tail at once.
                kept.next.store(std::ptr::null_mut(), Ordering::SeqCst);
                out.push(Unlinked {
                    node: next as usize,
                    whole_tail: true,
                });
                return;
            }
            Some(&s) if n.seq <= s => {
                // The newest at or below snapshot `s` (and maybe older ones).
                while want.next_if(|&s| s >= n.seq).is_some() {}
                kept = n;
            }
            Some(_) => {
                // Superseded before any live snapshot: readers skip it.
                kept.next
                    .store(n.next.load(Ordering::Acquire), Ordering::SeqCst);
                out.push(Unlinked {
                    node: next as usize,
                    whole_tail: false,
                });
            }
        }
    }
}

/// The checkpointer's hold on version memory (see `Mvcc::pin_for_checkpoint`).
pub struct CheckpointPin<'a> {
    mvcc: &'a Mvcc,
}

impl CheckpointPin<'_> {
    /// Pages with in-memory versions, and for each the version to write at horizon `t`.
    pub fn pages(&self, t: u64) -> Vec<(u32, &Version)> {
        let dirty = lock(&self.mvcc.dirty).clone();
        dirty
            .into_iter()
            .filter_map(|p| self.mvcc.lookup(p as usize, t).map(|v| (p, v)))
            .collect()
    }
}

impl Drop for CheckpointPin<'_> {
    fn drop(&mut self) {
        self.mvcc.leave(CHECKPOINT_SLOT);
    }
}

/// The multiversion state of one region.
pub struct Mvcc {
    heads: ReservedArray<AtomicPtr<Version>>,
    page_seq: ReservedArray<AtomicU64>,
    /// Per page: the bound its chain was last cut at. A cut frees something
    /// only after the bound advanced, so a chain is walked once per advance
    /// (not per commit while a reader or an unsynced log holds the bound).
    pruned_to: ReservedArray<AtomicU64>,
    /// Commits up to this one have had their pages swept by `prune_synced`.
    swept: Mutex<u64>,
    slots: Box<[Slot]>,
    commit_seq: AtomicU64,
    horizon: AtomicU64,
    epoch: AtomicU64,
    /// Pages that have versions in memory (the checkpointer's work list).
    dirty: Mutex<BTreeSet<u32>>,
    retired: Mutex<Vec<(u64, Unlinked)>>,
    journal: Mutex<Journal>,
}

// SAFETY: all fields are atomics or mutex-protected; raw version pointers are
// only dereferenced under the reclamation protocol above.
unsafe impl Send for Mvcc {}
// SAFETY: as above.
unsafe impl Sync for Mvcc {}

// SAFETY: a null pointer is all zeros and an AtomicPtr has no drop glue.
unsafe impl<T> crate::os::mem::ZeroIsValid for AtomicPtr<T> {}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Mvcc {
    /// State for a region of at most `max_pages` pages whose last commit is `seq`.
    pub fn new(max_pages: usize, seq: u64) -> rustix::io::Result<Mvcc> {
        Ok(Mvcc {
            heads: ReservedArray::new(max_pages)?,
            page_seq: ReservedArray::new(max_pages)?,
            pruned_to: ReservedArray::new(max_pages)?,
            swept: Mutex::new(seq),
            slots: (0..=MAX_SLOTS).map(|_| Slot::default()).collect(),
            commit_seq: AtomicU64::new(seq),
            horizon: AtomicU64::new(0),
            epoch: AtomicU64::new(1),
            dirty: Mutex::new(BTreeSet::new()),
            retired: Mutex::new(Vec::new()),
            journal: Mutex::new(Journal {
                entries: VecDeque::new(),
                pages: 0,
                complete_after: seq,
            }),
        })
    }

    pub fn max_pages(&self) -> usize {
        self.heads.capacity()
    }

    /// The sequence number of the newest commit.
    pub fn commit_seq(&self) -> u64 {
        self.commit_seq.load(Ordering::Acquire)
    }

    pub fn claim_slot(&self) -> Option<usize> {
        self.slots[..MAX_SLOTS].iter().position(|s| {
            s.owner
                .compare_exchange(0, 1, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
        })
    }

    pub fn release_slot(&self, i: usize) {
        self.end(i);
        self.slots[i].owner.store(0, Ordering::SeqCst);
    }

    /// Registers a snapshot for slot `i` and enters the read side; returns the snapshot.
    pub fn begin(&self, i: usize) -> u64 {
        let slot = &self.slots[i];
        loop {
            let s = self.commit_seq.load(Ordering::SeqCst);
            slot.snapshot.store(s + 1, Ordering::SeqCst);
            slot.epoch
                .store(self.epoch.load(Ordering::SeqCst), Ordering::SeqCst);
            // A checkpoint that missed our slot published its horizon first; if
            // it is past our snapshot, take a newer one.
            if self.horizon.load(Ordering::SeqCst) <= s {
                return s;
            }
        }
    }

    /// Leaves the read side and drops the snapshot of slot `i`.
    pub fn end(&self, i: usize) {
        self.slots[i].snapshot.store(0, Ordering::SeqCst);
        self.slots[i].epoch.store(0, Ordering::SeqCst);
    }

    /// Enters the read side without a snapshot (a fault outside a transaction).
    /// Returns false if the slot was already inside.
    pub fn enter(&self, i: usize) -> bool {
        let slot = &self.slots[i];
        if slot.epoch.load(Ordering::Relaxed) != 0 {
            return false;
        }
        slot.epoch
            .store(self.epoch.load(Ordering::SeqCst), Ordering::SeqCst);
        true
    }

    pub fn leave(&self, i: usize) {
        self.slots[i].epoch.store(0, Ordering::SeqCst);
    }

    /// Live snapshots: (count, oldest).
    pub fn snapshots(&self) -> (usize, Option<u64>) {
        let live = self
            .slots
            .iter()
            .map(|s| s.snapshot.load(Ordering::SeqCst))
            .filter(|&v| v != 0);
        let (n, min) = live.fold((0, u64::MAX), |(n, m), v| (n + 1, m.min(v - 1)));
        (n, (n > 0).then_some(min))
    }

    /// The newest version of `page` visible to snapshot `s`, if it is still in
    /// memory (else the region file holds it). Must be called on the read side.
    pub fn lookup(&self, page: usize, s: u64) -> Option<&Version> {
        let mut p = self.heads.get(page)?.load(Ordering::SeqCst);
        // SAFETY: nodes reachable from a head are freed only after every reader
        // that could have seen them left the read side (see module docs).
        while let Some(v) = unsafe { p.as_ref() } {
            if v.seq <= s {
                return Some(v);
            }
            p = v.next.load(Ordering::SeqCst);
        }
        None
    }

    /// The sequence number of the last commit that wrote `page`.
    pub fn page_seq(&self, page: usize) -> u64 {
        self.page_seq
            .get(page)
            .map_or(0, |a| a.load(Ordering::Acquire))
    }

    /// Publishes a commit: new versions, per-page sequence, journal entry, then
    /// the commit sequence itself. Caller holds the region's commit lock.
    ///
    /// The chains of these pages are pruned to what some snapshot or the next
    /// checkpoint can still need (see `PrunePlan`).
    pub fn publish(&self, seq: u64, versions: Vec<(u32, Box<Version>)>, durable: u64) {
        assert_eq!(
            seq,
            self.commit_seq.load(Ordering::Acquire) + 1,
            "commits publish in order"
        );
        let plan = self.prune_plan(durable);
        let mut pages = Vec::with_capacity(versions.len());
        let mut unlinked = Vec::new();
        {
            let mut dirty = lock(&self.dirty);
            for (page, v) in versions {
                let head = self.heads.get(page as usize).expect("page within max size");
                assert_eq!(v.seq, seq);
                v.next
                    .store(head.load(Ordering::Acquire), Ordering::Relaxed);
                head.store(Box::into_raw(v), Ordering::SeqCst);
                self.prune_page(page as usize, &plan, &mut unlinked);
                self.page_seq
                    .get(page as usize)
                    .expect("page")
                    .store(seq, Ordering::Release);
                dirty.insert(page);
                pages.push(page);
            }
        }
        {
            let mut j = lock(&self.journal);
            j.pages += pages.len();
            j.entries.push_back((seq, pages.into_boxed_slice()));
            while j.pages > JOURNAL_PAGES {
                let (s, p) = j.entries.pop_front().expect("nonempty");
                j.pages -= p.len();
                j.complete_after = s;
            }
        }
        self.commit_seq.store(seq, Ordering::Release);
        if !unlinked.is_empty() {
            self.retire(unlinked);
        }
    }

    /// Prunes one page's chain if the plan's bound advanced since its last
    /// pruning. Caller holds `dirty`.
    fn prune_page(&self, page: usize, plan: &PrunePlan, out: &mut Vec<Unlinked>) {
        let (Some(head), Some(pruned)) = (self.heads.get(page), self.pruned_to.get(page)) else {
            return;
        };
        if plan.durable > pruned.load(Ordering::Relaxed) {
            prune_chain(head, plan, out);
            pruned.store(plan.durable, Ordering::Relaxed);
        }
    }

    /// After the log was synced up to `durable`: prunes the chains of pages
    /// that commits since the last sweep wrote (a page written many times and
    /// then left alone would otherwise keep its versions until a checkpoint).
    /// Cost follows the number of commits since the last sweep.
    pub fn prune_synced(&self, durable: u64) {
        let mut swept = lock(&self.swept);
        let upto = self.commit_seq();
        if upto <= *swept {
            return;
        }
        let mut pages = Vec::new();
        if !self.changed_pages(*swept, upto, |p| pages.push(p)) {
            // The journal was trimmed: sweep every page with versions instead.
            pages.extend(lock(&self.dirty).iter().copied());
        }
        *swept = upto;
        drop(swept);
        pages.sort_unstable();
        pages.dedup();
        let plan = self.prune_plan(durable);
        let mut unlinked = Vec::new();
        {
            let _dirty = lock(&self.dirty);
            for p in pages {
                self.prune_page(p as usize, &plan, &mut unlinked);
            }
        }
        if !unlinked.is_empty() {
            self.retire(unlinked);
        }
    }

    /// Calls `f` for each page changed by commits in `(after, upto]`; false if
    /// the journal no longer reaches back that far.
    pub fn changed_pages(&self, after: u64, upto: u64, mut f: impl FnMut(u32)) -> bool {
        let j = lock(&self.journal);
        if after < j.complete_after {
            return false;
        }
        for (s, pages) in j.entries.iter().rev() {
            if *s <= after {
                break;
            }
            if *s <= upto {
                pages.iter().for_each(|&p| f(p));
            }
        }
        true
    }

    /// What chains must keep now (see `PrunePlan`). Publishes the horizon
    /// first, so a snapshot that registers after the scan is at or above
    /// `durable` and needs nothing the plan drops.
    fn prune_plan(&self, durable: u64) -> PrunePlan {
        let durable = durable.min(self.commit_seq());
        self.horizon.fetch_max(durable, Ordering::SeqCst);
        let mut live: Vec<u64> = self
            .slots
            .iter()
            .map(|s| s.snapshot.load(Ordering::SeqCst))
            .filter(|&v| v != 0 && v - 1 < durable)
            .map(|v| v - 1)
            .collect();
        live.sort_unstable_by(|a, b| b.cmp(a));
        live.dedup();
        PrunePlan { durable, live }
    }

    /// Returns `T <= min(limit, every live snapshot)` such that no snapshot
    /// below `T` can start from now on. The published horizon only grows: a
    /// `begin` that loaded an older commit sequence but registered after the
    /// slot scan sees it and takes a newer snapshot.
    pub fn horizon(&self, limit: u64) -> u64 {
        let t0 = limit.min(self.commit_seq());
        self.horizon.fetch_max(t0, Ordering::SeqCst);
        let oldest = self.snapshots().1.unwrap_or(u64::MAX);
        t0.min(oldest)
    }

    /// Enters the read side for a checkpoint: versions it looks up stay
    /// allocated until the guard drops, even if a commit unlinks them
    /// meanwhile. Callers serialise checkpoints (one slot serves them all).
    pub fn pin_for_checkpoint(&self) -> CheckpointPin<'_> {
        let entered = self.enter(CHECKPOINT_SLOT);
        debug_assert!(entered, "two checkpoints at once");
        CheckpointPin { mvcc: self }
    }

    /// After versions up to `t` reached the region file: unlinks them and frees
    /// what no reader can still see.
    pub fn trim(&self, t: u64) {
        let mut unlinked = Vec::new();
        {
            let mut dirty = lock(&self.dirty);
            dirty.retain(|&p| {
                let head = self.heads.get(p as usize).expect("page");
                unlinked.extend(cut(head, t));
                !head.load(Ordering::Acquire).is_null()
            });
        }
        self.retire(unlinked);
    }

    /// Hands unlinked chain tails to reclamation and frees those no reader can reach.
    fn retire(&self, unlinked: Vec<Unlinked>) {
        let e = self.epoch.fetch_add(1, Ordering::SeqCst);
        let mut retired = lock(&self.retired);
        retired.extend(unlinked.into_iter().map(|u| (e, u)));
        let min_active = self
            .slots
            .iter()
            .map(|s| s.epoch.load(Ordering::SeqCst))
            .filter(|&e| e != 0)
            .min()
            .unwrap_or(u64::MAX);
        retired.retain(|&(e, u)| {
            if e >= min_active {
                return true;
            }
            let mut q = u.node as *mut Version;
            while !q.is_null() {
                // SAFETY: unlinked at epoch e, and no reader entered at or before e
                // is still reading, so nothing references these nodes. A single
                // node's `next` belongs to the live chain and is not followed.
                let b = unsafe { Box::from_raw(q) };
                q = if u.whole_tail {
                    b.next.load(Ordering::Relaxed)
                } else {
                    std::ptr::null_mut()
                };
            }
            false
        });
    }

    /// Unlinked versions not yet freed (waiting for readers to move on).
    pub fn retired(&self) -> usize {
        lock(&self.retired).len()
    }

    /// Bytes of page versions held in memory.
    pub fn version_pages(&self) -> usize {
        let dirty = lock(&self.dirty);
        dirty
            .iter()
            .map(|&p| {
                let mut n = 0;
                let mut q = self
                    .heads
                    .get(p as usize)
                    .expect("page")
                    .load(Ordering::Acquire);
                // SAFETY: we hold `dirty`, so no trim runs concurrently.
                while let Some(v) = unsafe { q.as_ref() } {
                    n += 1;
                    q = v.next.load(Ordering::Acquire);
                }
                n
            })
            .sum()
    }
}

impl Drop for Mvcc {
    fn drop(&mut self) {
        self.trim(u64::MAX);
        for s in self.slots.iter() {
            s.epoch.store(0, Ordering::SeqCst);
        }
        self.trim(u64::MAX);
        debug_assert!(lock(&self.retired).is_empty());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page(b: u8) -> Vec<u8> {
        vec![b; PAGE]
    }

    #[test]
    fn a_checkpoint_pin_keeps_unlinked_versions_alive() {
        let m = Mvcc::new(4, 0).unwrap();
        m.publish(1, vec![(0, Version::new(1, &page(1)))], 0);
        m.publish(2, vec![(0, Version::new(2, &page(2)))], 0);
        let pin = m.pin_for_checkpoint();
        let pages = pin.pages(1);
        assert_eq!(pages.len(), 1);
        let v1 = pages[0].1;
        assert_eq!((v1.seq, v1.data[0]), (1, 1));
        // Synced up to 2: a commit now unlinks version 1 (only 2 is needed).
        m.publish(3, vec![(0, Version::new(3, &page(3)))], 2);
        assert_eq!(m.lookup(0, 1).map(|v| v.seq), None, "version 1 is unlinked");
        assert_eq!(
            m.retired(),
            1,
            "but not freed while the checkpoint holds it"
        );
        assert_eq!((v1.seq, v1.data[4095]), (1, 1));
        drop(pin);
        m.publish(4, vec![(0, Version::new(4, &page(4)))], 3);
        assert_eq!(m.retired(), 0, "freed once the checkpoint let go");
    }
}
