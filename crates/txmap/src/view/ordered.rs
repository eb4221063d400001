//! Ordered commits on a view (TxOS+; the shared state is `mvcc/order.rs`):
//! a view holds at most one number of one order group, and its next commit
//! that changes something (or commits nothing) waits until every lower
//! number of the group committed or was skipped.

use super::View;
use crate::error::{Error, Result};

impl View {
    /// Claims `number` in order group `group` (0..64) for this view's next
    /// commit: it waits until every lower number of the group committed or
    /// was skipped, then validates as usual. A conflict keeps the number:
    /// run the transaction again. Fails with `Error::OrderSkipped` if the
    /// number's turn has passed, `Error::Invalid` if the view holds one.
    pub fn order(&mut self, group: u32, number: u64) -> Result<()> {
        self.inner
            .region
            .order_claim(self.inner.slot(), group, number)
    }

    /// Takes the next number nobody has taken in `group` and claims it (as
    /// [`View::order`]); returns it. Taking and claiming are one step, so
    /// a number handed out is always held (until committed or skipped),
    /// even if its process dies: do not mix with [`View::order`] in one group.
    pub fn order_next(&mut self, group: u32) -> Result<u64> {
        self.inner.region.order_take(self.inner.slot(), group)
    }

    /// The (group, number) this view holds, if any.
    pub fn order_held(&self) -> Option<(u32, u64)> {
        self.inner.region.mvcc.order_claim_of(self.inner.slot())
    }

    /// Gives up the number this view holds: waits for its turn, then skips
    /// it (counted in [`crate::OrderStatus::skipped`]). Not inside a
    /// transaction.
    pub fn order_give_up(&mut self) -> Result<()> {
        if self.depth > 0 {
            return Err(Error::Invalid(
                "order_give_up inside a transaction: commit or roll it back first".into(),
            ));
        }
        self.inner.region.order_pass(self.inner.slot(), false)
    }

    /// Runs `f` as the ordered transaction `number` of `group`: claims the
    /// number, runs `f` in a serializable transaction and commits in turn,
    /// running `f` again on conflict. If `f` fails, the number is given up
    /// (skipped at its turn) and its error returned.
    pub fn run_ordered<T>(
        &mut self,
        group: u32,
        number: u64,
        mut f: impl FnMut(&mut View) -> Result<T>,
    ) -> Result<T> {
        self.order(group, number)?;
        loop {
            self.begin()?;
            let r = match f(self) {
                Ok(x) => self.commit().map(|_| x),
                Err(e) => {
                    self.rollback();
                    self.order_give_up()?;
                    return Err(e);
                }
            };
            match r {
                // Its turn has come: run again at once.
                Err(Error::Conflict) => continue,
                Err(e)
                    if self.order_held().is_some() && !matches!(e, Error::OrderSkipped { .. }) =>
                {
                    self.order_give_up()?;
                    return Err(e);
                }
                other => return other,
            }
        }
    }
}

impl crate::Region {
    /// The state of order group `group`: its next number, counts of
    /// numbers committed and skipped.
    pub fn order_status(&self, group: u32) -> Result<crate::OrderStatus> {
        self.inner.order_status(group)
    }

    /// Moves order group `group` on to `number` if it is behind: every
    /// lower number not yet committed is skipped (its holder's commit
    /// fails with `Error::OrderSkipped`). The way on after a number
    /// nobody holds, and to start a group at a number after a restart
    /// (the order state lives only while the region is open).
    pub fn order_skip_to(&self, group: u32, number: u64) -> Result<()> {
        self.inner.order_skip_to(group, number)
    }
}
