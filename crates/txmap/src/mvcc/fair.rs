//! Priority for a transaction that conflicted repeatedly (LIBXAC's
//! contention manager; `Options::priority_after`). One view at a time, in
//! any process, holds priority: from the `begin` of its transaction after
//! that many conflicts in a row until its commit is published (before the
//! log sync) or that view's transaction ends other than by a conflict. While it holds it, every other read-write commit
//! waits before the commit lock; the holder, once it took priority, waits
//! for the commits already past that point (at most [`DRAIN`]) before its
//! snapshot, so nothing commits during its attempt and it commits. A
//! commit counts itself in `inflight` before it checks for a holder, and a
//! holder publishes itself before it reads `inflight` (both sequentially
//! consistent), so one of the two always sees the other. A holder that is gone (its process died, its view
//! closed) or has held priority longer than [`MAX_HOLD`] no longer makes
//! anyone wait.

use std::sync::atomic::Ordering;
use std::time::Duration;

use super::Mvcc;
use crate::mvcc::layout::{ORDER_GROUPS, OrderGroup, Priority};
use crate::os::lock::{futex_wait_bits, futex_wake_all};

/// The longest a holder makes others wait (a holder that stopped
/// transacting must not stall the region).
pub const MAX_HOLD: Duration = Duration::from_secs(1);

/// The longest a new holder waits for commits already past the check (a
/// committer killed in between never leaves).
pub const DRAIN: Duration = Duration::from_millis(100);

/// How long a waiter sleeps before it checks the holder again.
const RECHECK: Duration = Duration::from_millis(10);

/// A commit in flight past the priority check (`Mvcc::priority_enter`).
pub struct PriorityPass<'a>(&'a Priority);

impl Drop for PriorityPass<'_> {
    fn drop(&mut self) {
        self.0.inflight.fetch_sub(1, Ordering::SeqCst);
    }
}

fn now_nanos() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

impl Mvcc {
    fn priority(&self) -> &Priority {
        self.file
            .at(self.layout.orders + ORDER_GROUPS * size_of::<OrderGroup>())
    }

    /// Whether holder `h` (slot + 1) no longer counts: gone or held too long.
    fn priority_void(&self, p: &Priority, h: u64) -> bool {
        let held = now_nanos().saturating_sub(p.since.load(Ordering::SeqCst));
        held > MAX_HOLD.as_nanos() as u64 || self.holder_gone(h as usize - 1)
    }

    /// Slot `i` takes priority unless another live view holds it. Returns
    /// whether it holds it.
    pub fn priority_take(&self, i: usize) -> bool {
        let p = self.priority();
        let me = i as u64 + 1;
        loop {
            let h = p.holder.load(Ordering::SeqCst);
            if h == me {
                return true;
            }
            if h != 0 && !self.priority_void(p, h) {
                return false;
            }
            p.since.store(now_nanos(), Ordering::SeqCst);
            if p.holder
                .compare_exchange(h, me, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
            {
                p.since.store(now_nanos(), Ordering::SeqCst);
                p.taken.fetch_add(1, Ordering::Relaxed);
                let start = now_nanos();
                while p.inflight.load(Ordering::SeqCst) > 0
                    && now_nanos() - start < DRAIN.as_nanos() as u64
                {
                    std::thread::yield_now();
                }
                return true;
            }
        }
    }

    /// Slot `i` gives priority up if it holds it.
    pub fn priority_release(&self, i: usize) {
        let p = self.priority();
        // A load first: every transaction's end passes here, and a locked
        // compare-exchange takes the region-wide line exclusive even when it
        // fails, so readers in other threads and processes would bounce it.
        // Only this slot sets the holder to itself.
        if p.holder.load(Ordering::SeqCst) != i as u64 + 1 {
            return;
        }
        if p.holder
            .compare_exchange(i as u64 + 1, 0, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
        {
            p.wake.fetch_add(1, Ordering::SeqCst);
            futex_wake_all(&p.wake);
        }
    }

    /// Before slot `i` commits: waits while another view holds priority
    /// (and counts), then counts the commit as in flight until the pass
    /// is dropped (after its publication).
    pub fn priority_enter(&self, i: usize) -> PriorityPass<'_> {
        let p = self.priority();
        let me = i as u64 + 1;
        let mut counted = false;
        loop {
            let w = p.wake.load(Ordering::SeqCst);
            p.inflight.fetch_add(1, Ordering::SeqCst);
            let h = p.holder.load(Ordering::SeqCst);
            if h == 0 || h == me || self.priority_void(p, h) {
                return PriorityPass(p);
            }
            p.inflight.fetch_sub(1, Ordering::SeqCst);
            if !counted {
                p.waits.fetch_add(1, Ordering::Relaxed);
                counted = true;
            }
            futex_wait_bits(&p.wake, w, RECHECK, std::num::NonZeroU32::MAX);
        }
    }

    /// (times priority was taken, commits that waited for a holder).
    pub fn priority_counts(&self) -> (u64, u64) {
        let p = self.priority();
        (
            p.taken.load(Ordering::Relaxed),
            p.waits.load(Ordering::Relaxed),
        )
    }
}
