//! Ordered commits (TxOS+): a view may hold a number in one of
//! [`ORDER_GROUPS`] order groups; its next commit waits until every lower
//! number of the group committed or was skipped. The state lives in the
//! shared file (docs/FORMAT.md "Shared state"): per group the next number,
//! the next ticket and counts; per slot the number it holds (its claim).
//!
//! A number is *held* by the view whose slot claims it, from the claim until
//! its commit or skip. A holder whose process died (its slot's liveness
//! lock is free, or its pid is gone), or that closed its view still
//! holding the number (the slot's owner becomes [`ABANDONED`]), does not
//! block the group: the first waiter that finds it skips the number under
//! the commit lock (counted in `skipped`, the last one in `last_skipped`).
//! A holder that died inside its commit is settled by the commit lock's
//! repair ([`Mvcc::order_repair`]): if its record was published the number
//! committed, otherwise it is skipped like any dead holder's. A number that
//! nobody holds blocks the group until someone claims it or calls
//! [`Mvcc::order_skip_to`]; numbers handed out by [`Mvcc::order_take`] are
//! claimed by the same lock section that hands them out, so they are
//! always held.

use std::sync::atomic::Ordering;
use std::time::Duration;

use super::{Locked, Mvcc};
use crate::mvcc::layout::{ORDER_GROUPS, OrderGroup, Slot};
use crate::os::lock::{futex_wait_bits, futex_wake_all};
use crate::os::shm::process_alive;

/// Owner of a slot whose view is gone while its claim stays (see module doc).
pub const ABANDONED: u64 = u64::MAX;

/// How long a waiter sleeps before it checks whether the holder of the next
/// number is alive (a dead holder never wakes it).
const CHECK_HOLDER: Duration = Duration::from_millis(10);

/// The state of one order group.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OrderStatus {
    /// The number whose commit comes next.
    pub next: u64,
    /// The next number [`crate::View::order_next`] hands out.
    pub ticket: u64,
    /// Numbers committed.
    pub committed: u64,
    /// Numbers skipped (holder died or gave up, or `order_skip_to`).
    pub skipped: u64,
    /// The last number skipped.
    pub last_skipped: Option<u64>,
}

/// Why a claim cannot be made.
#[derive(Debug, PartialEq, Eq)]
pub enum ClaimError {
    /// No such group.
    NoGroup,
    /// The view already holds a number.
    Holding(u32, u64),
    /// The number's turn has passed (committed or skipped).
    Passed { next: u64 },
}

impl Mvcc {
    fn order_groups(&self) -> &[OrderGroup] {
        self.file.slice(self.layout.orders, ORDER_GROUPS)
    }

    fn group(&self, g: u32) -> Option<&OrderGroup> {
        self.order_groups().get(g as usize)
    }

    /// The number slot `i` holds: (group, number).
    #[inline]
    pub fn order_claim_of(&self, i: usize) -> Option<(u32, u64)> {
        let s = &self.slots()[i];
        match s.order_group.load(Ordering::SeqCst) {
            0 => None,
            g => Some(((g - 1) as u32, s.order_num.load(Ordering::SeqCst))),
        }
    }

    fn set_claim(s: &Slot, g: u32, num: u64) {
        s.order_num.store(num, Ordering::SeqCst);
        s.order_group.store(u64::from(g) + 1, Ordering::SeqCst);
    }

    /// Slot `i` claims `num` in group `g`.
    pub fn order_claim(&self, i: usize, g: u32, num: u64) -> Result<(), ClaimError> {
        let grp = self.group(g).ok_or(ClaimError::NoGroup)?;
        if let Some((hg, hn)) = self.order_claim_of(i) {
            return Err(ClaimError::Holding(hg, hn));
        }
        let next = grp.next.load(Ordering::SeqCst);
        if num < next {
            return Err(ClaimError::Passed { next });
        }
        Self::set_claim(&self.slots()[i], g, num);
        // A skip that passed `num` meanwhile is found at commit.
        Ok(())
    }

    /// Slot `i` takes the group's next ticket and claims it, in one lock
    /// section (a death in between is settled by `order_repair`).
    pub fn order_take(&self, _l: &Locked<'_>, i: usize, g: u32) -> Result<u64, ClaimError> {
        let grp = self.group(g).ok_or(ClaimError::NoGroup)?;
        if let Some((hg, hn)) = self.order_claim_of(i) {
            return Err(ClaimError::Holding(hg, hn));
        }
        let num = grp
            .ticket
            .load(Ordering::SeqCst)
            .max(grp.next.load(Ordering::SeqCst));
        Self::set_claim(&self.slots()[i], g, num);
        grp.ticket.store(num + 1, Ordering::SeqCst);
        Ok(num)
    }

    /// Drops slot `i`'s claim (after its commit or skip).
    pub fn order_clear(&self, i: usize) {
        let s = &self.slots()[i];
        s.order_group.store(0, Ordering::SeqCst);
        s.order_commit.store(0, Ordering::SeqCst);
    }

    /// The state of group `g`.
    pub fn order_status(&self, g: u32) -> Option<OrderStatus> {
        let grp = self.group(g)?;
        Some(OrderStatus {
            next: grp.next.load(Ordering::SeqCst),
            ticket: grp.ticket.load(Ordering::SeqCst),
            committed: grp.committed.load(Ordering::SeqCst),
            skipped: grp.skipped.load(Ordering::SeqCst),
            last_skipped: grp.last_skipped.load(Ordering::SeqCst).checked_sub(1),
        })
    }

    /// Whether slot `i`'s number is its group's next (under the commit lock:
    /// it stays so until this lock section moves it).
    pub fn order_is_next(&self, _l: &Locked<'_>, i: usize) -> bool {
        self.order_claim_of(i)
            .and_then(|(g, n)| {
                self.group(g)
                    .map(|grp| grp.next.load(Ordering::SeqCst) == n)
            })
            .unwrap_or(false)
    }

    /// Slot `i`'s commit is about to be logged as commit `seq`.
    pub fn order_committing(&self, _l: &Locked<'_>, i: usize, seq: u64) {
        self.slots()[i].order_commit.store(seq, Ordering::SeqCst);
    }

    /// Moves group `g` past `num` (committed or skipped) and wakes waiters.
    fn advance(&self, grp: &OrderGroup, num: u64, committed: bool) {
        if committed {
            grp.committed.fetch_add(1, Ordering::SeqCst);
        } else {
            grp.skipped.fetch_add(1, Ordering::SeqCst);
            grp.last_skipped.store(num + 1, Ordering::SeqCst);
        }
        grp.ticket.fetch_max(num + 1, Ordering::SeqCst);
        grp.next.store(num + 1, Ordering::SeqCst);
        grp.wake.fetch_add(1, Ordering::SeqCst);
        futex_wake_all(&grp.wake);
    }

    /// Slot `i`'s number committed (or, with `committed` false, its holder
    /// gives it up at its turn): the group moves on and the claim is dropped.
    pub fn order_done(&self, _l: &Locked<'_>, i: usize, committed: bool) {
        if let Some((g, n)) = self.order_claim_of(i)
            && let Some(grp) = self.group(g)
            && grp.next.load(Ordering::SeqCst) == n
        {
            self.advance(grp, n, committed);
        }
        self.order_clear(i);
    }

    /// Moves group `g`'s next number up to `num`; the numbers passed count
    /// as skipped. Returns false if there is no such group.
    pub fn order_skip_to(&self, _l: &Locked<'_>, g: u32, num: u64) -> bool {
        let Some(grp) = self.group(g) else {
            return false;
        };
        let next = grp.next.load(Ordering::SeqCst);
        if num > next {
            grp.skipped.fetch_add(num - next - 1, Ordering::SeqCst);
            self.advance(grp, num - 1, false);
        }
        true
    }

    /// The slot claiming `num` in group `g`, if any.
    fn holder(&self, g: u32, num: u64) -> Option<usize> {
        self.view_slots().iter().position(|s| {
            s.order_group.load(Ordering::SeqCst) == u64::from(g) + 1
                && s.order_num.load(Ordering::SeqCst) == num
        })
    }

    /// Whether the view of slot `i` is gone: closed while holding a number,
    /// or its process died.
    pub(super) fn holder_gone(&self, i: usize) -> bool {
        let s = &self.slots()[i];
        let owner = s.owner.load(Ordering::SeqCst);
        if owner == ABANDONED || owner == 0 {
            return true;
        }
        // Under `claims`, as the reaper: a slot not `mine` is then held by
        // no thread of this process, so its lock is free only if its owner
        // is gone (and the probe cannot unlock a claim under way here).
        let _claims = crate::os::lock::lock(&self.claims);
        if self.mine[i].load(Ordering::Relaxed) {
            return false;
        }
        // The liveness lock is free once every descriptor of the owner is
        // closed (also while it is a zombie, which `kill(pid, 0)` misses).
        if matches!(self.file.lock_byte(i as u64), Ok(true)) {
            let _ = self.file.unlock_byte(i as u64);
            return s.owner.load(Ordering::SeqCst) == owner;
        }
        !process_alive(owner as u32)
    }

    /// Waits until slot `i`'s number is next in its group. Returns false if
    /// its turn passed (it was skipped). `lock` takes the commit lock (with
    /// the engine's repair), to skip a gone holder's number.
    pub fn order_wait<'a, E>(
        &'a self,
        i: usize,
        lock: impl Fn() -> Result<Locked<'a>, E>,
    ) -> Result<bool, E> {
        let Some((g, num)) = self.order_claim_of(i) else {
            return Ok(true);
        };
        let Some(grp) = self.group(g) else {
            return Ok(false);
        };
        let mut idle = false;
        loop {
            let w = grp.wake.load(Ordering::SeqCst);
            let next = grp.next.load(Ordering::SeqCst);
            if next >= num {
                return Ok(next == num);
            }
            if idle
                && let Some(h) = self.holder(g, next)
                && self.holder_gone(h)
            {
                let l = lock()?;
                self.skip_gone(&l, g, next);
                idle = false;
                continue;
            }
            let before = grp.next.load(Ordering::SeqCst);
            futex_wait_bits(&grp.wake, w, CHECK_HOLDER, std::num::NonZeroU32::MAX);
            idle = grp.next.load(Ordering::SeqCst) == before;
        }
    }

    /// Under the commit lock: skips `num` in group `g` if it is still next
    /// and its holder is gone.
    fn skip_gone(&self, _l: &Locked<'_>, g: u32, num: u64) {
        let Some(grp) = self.group(g) else { return };
        if grp.next.load(Ordering::SeqCst) != num {
            return;
        }
        let Some(h) = self.holder(g, num) else { return };
        if !self.holder_gone(h) {
            return;
        }
        self.advance(grp, num, false);
        self.order_clear(h);
        let s = &self.slots()[h];
        // The view is gone: the slot is free again.
        let _ = s
            .owner
            .compare_exchange(ABANDONED, 0, Ordering::SeqCst, Ordering::SeqCst);
    }

    /// Part of the commit lock's repair after a dead holder: a claim that
    /// was committing committed if its record was published (the repair
    /// published every logged one first), else it stays a claim, skipped
    /// when its turn comes. A ticket handed out by a lock section that
    /// died before moving the ticket on is moved on.
    pub fn order_repair(&self, _l: &Locked<'_>) {
        let published = self.commit_seq();
        for (i, s) in self.view_slots().iter().enumerate() {
            let Some((g, n)) = self.order_claim_of(i) else {
                continue;
            };
            let Some(grp) = self.group(g) else { continue };
            grp.ticket.fetch_max(n + 1, Ordering::SeqCst);
            let c = s.order_commit.load(Ordering::SeqCst);
            if c == 0 {
                continue;
            }
            if c <= published && grp.next.load(Ordering::SeqCst) == n {
                self.advance(grp, n, true);
                self.order_clear(i);
                let _ = s
                    .owner
                    .compare_exchange(ABANDONED, 0, Ordering::SeqCst, Ordering::SeqCst);
            } else {
                s.order_commit.store(0, Ordering::SeqCst);
            }
        }
    }
}
