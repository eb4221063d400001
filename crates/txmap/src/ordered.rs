//! Ordered commits on the engine's side (the shared state is in
//! `mvcc/order.rs`): the wait for a commit's turn, the commit of a
//! transaction that wrote nothing, giving a number up, skipping ahead.

use crate::engine::RegionInner;
use crate::error::{Error, Result};
use crate::mvcc::order::ClaimError;

pub use crate::mvcc::order::OrderStatus;

impl RegionInner {
    fn claim_error(&self, g: u32, e: ClaimError) -> Error {
        match e {
            ClaimError::NoGroup => Error::Invalid(format!(
                "{}: order group {g} does not exist (groups are 0..{})",
                self.path.display(),
                crate::mvcc::layout::ORDER_GROUPS
            )),
            ClaimError::Holding(hg, hn) => Error::Invalid(format!(
                "the view already holds ordered-commit number {hn} of group {hg}; \
                 commit it or give it up first"
            )),
            ClaimError::Passed { next } => Error::OrderSkipped {
                group: g,
                number: next.saturating_sub(1),
                next,
            },
        }
    }

    /// Slot `slot` claims `number` in `group`.
    pub(crate) fn order_claim(&self, slot: usize, group: u32, number: u64) -> Result<()> {
        self.check_owner()?;
        self.mvcc
            .order_claim(slot, group, number)
            .map_err(|e| match e {
                ClaimError::Passed { next } => Error::OrderSkipped {
                    group,
                    number,
                    next,
                },
                e => self.claim_error(group, e),
            })
    }

    /// Slot `slot` takes and claims the next number of `group`.
    pub(crate) fn order_take(&self, slot: usize, group: u32) -> Result<u64> {
        self.check_owner()?;
        let l = self.lock_commit()?;
        self.mvcc
            .order_take(&l, slot, group)
            .map_err(|e| self.claim_error(group, e))
    }

    /// The error for slot `slot`'s skipped number (and its claim dropped).
    pub(crate) fn order_skipped(&self, slot: usize) -> Error {
        let (group, number) = self.mvcc.order_claim_of(slot).unwrap_or((0, 0));
        let next = self.mvcc.order_status(group).map_or(0, |s| s.next);
        self.mvcc.order_clear(slot);
        Error::OrderSkipped {
            group,
            number,
            next,
        }
    }

    /// Waits for slot `slot`'s turn if it holds a number; returns the claim.
    pub(crate) fn order_turn(&self, slot: usize) -> Result<Option<(u32, u64)>> {
        let Some(claim) = self.mvcc.order_claim_of(slot) else {
            return Ok(None);
        };
        if !self.mvcc.order_wait(slot, || self.lock_commit())? {
            return Err(self.order_skipped(slot));
        }
        crate::debug::hit(crate::debug::CrashPoint::OrderTurn);
        Ok(Some(claim))
    }

    /// The commit of an ordered transaction that changed nothing: it waits
    /// for its turn and moves the group on. `committed` false gives the
    /// number up instead (counted as skipped).
    pub(crate) fn order_pass(&self, slot: usize, committed: bool) -> Result<()> {
        if self.order_turn(slot)?.is_none() {
            return Ok(());
        }
        let l = self.lock_commit()?;
        if !self.mvcc.order_is_next(&l, slot) {
            return Err(self.order_skipped(slot));
        }
        self.mvcc.order_done(&l, slot, committed);
        Ok(())
    }

    pub(crate) fn order_status(&self, group: u32) -> Result<OrderStatus> {
        self.mvcc
            .order_status(group)
            .ok_or_else(|| self.claim_error(group, ClaimError::NoGroup))
    }

    pub(crate) fn order_skip_to(&self, group: u32, number: u64) -> Result<()> {
        self.check_owner()?;
        let l = self.lock_commit()?;
        if !self.mvcc.order_skip_to(&l, group, number) {
            return Err(self.claim_error(group, ClaimError::NoGroup));
        }
        Ok(())
    }
}
