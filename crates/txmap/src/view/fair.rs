//! A view's side of priority for repeatedly conflicting transactions
//! (`mvcc/fair.rs`, `Options::priority_after`).

use super::View;
use crate::error::{Error, Result};

impl View {
    /// At an outermost read-write `begin`: takes priority after
    /// `priority_after` conflicts in a row. Not for an ordered transaction:
    /// its turn already bounds its attempts, and holding priority while it
    /// waits for its turn would stall the holders of the numbers before it.
    pub(super) fn take_priority_if_due(&mut self) {
        let after = self.inner.region.opts.priority_after;
        if after > 0 && self.conflicts >= after && self.order_held().is_none() {
            self.inner.region.mvcc.priority_take(self.inner.slot());
        }
    }

    /// After an outermost commit: counts conflicts in a row; any other end
    /// gives priority up.
    pub(super) fn note_outcome(&mut self, r: &Result<()>) {
        if matches!(r, Err(Error::Conflict)) {
            self.conflicts = self.conflicts.saturating_add(1);
        } else {
            self.end_priority();
        }
    }

    /// Gives priority up (if held) and starts counting conflicts anew.
    pub(super) fn end_priority(&mut self) {
        self.conflicts = 0;
        self.inner.region.mvcc.priority_release(self.inner.slot());
    }

    /// Conflicts in a row of this view's transactions (reset by any other
    /// end of a transaction).
    pub fn conflicts_in_row(&self) -> u32 {
        self.conflicts
    }
}

impl crate::Region {
    /// (times a transaction took priority, commits that waited for one),
    /// across every process since the region was first opened.
    pub fn priority_counts(&self) -> (u64, u64) {
        self.inner.mvcc.priority_counts()
    }
}
