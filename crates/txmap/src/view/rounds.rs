//! Round durability (Thistle): a view in round mode always has a
//! transaction open, so stores between two rounds need none; `round`
//! commits everything stored since the last round as one durable commit
//! and opens the next. After a crash the region is at the last completed
//! round (the log replays whole commits only).

use super::{Isolation, TxnOptions, View};
use crate::error::{Error, Result};

/// Rounds use snapshot isolation: only pages both a round and a concurrent
/// commit wrote conflict (a round-mode view should be the only writer of
/// the pages it writes: a conflicting round's stores are discarded).
const ROUND: TxnOptions = TxnOptions {
    read_only: false,
    isolation: Isolation::Snapshot,
};

impl View {
    /// Enters round mode: opens the first round (a transaction that stays
    /// open; loads and stores through the view need no `begin`).
    /// `Error::Invalid` inside a transaction.
    pub fn start_rounds(&mut self) -> Result<()> {
        if self.depth > 0 {
            return Err(Error::Invalid(
                "start_rounds inside a transaction: commit or roll it back first".into(),
            ));
        }
        self.begin_round()
    }

    /// Opens a round's transaction, whose write faults take runs of pages.
    fn begin_round(&mut self) -> Result<()> {
        self.begin_with(ROUND)?;
        self.inner
            .round_window
            .store(1, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }

    /// Ends the current round: every store since the last round becomes
    /// durable (as durable as the region's mode promises) atomically, and
    /// the next round opens, also when this one failed (a conflict, or a
    /// round too large: its stores are discarded). When the view is alone
    /// with the region (no other process has it open, no other view or
    /// paused transaction here), the round's pages go straight into the
    /// region file through the page journal, without a log record or
    /// versions: then a round may write up to `MAX_WRITE_PAGES`; otherwise
    /// it is a commit like any other (at most 2 GiB of changes). A large
    /// commit outside round mode goes in place the same way
    /// (`View::large_enough_for_place`).
    /// `Error::NotInTransaction` outside round mode.
    pub fn round(&mut self) -> Result<()> {
        if self.depth != 1 {
            return Err(match self.depth {
                0 => Error::NotInTransaction { op: "round" },
                _ => Error::Invalid("round inside a nested transaction".into()),
            });
        }
        // Alone with the region, the round's pages go straight into the
        // file (`RegionInner::commit_round_in_place`).
        self.rounds = true;
        let r = self.commit();
        self.rounds = false;
        self.begin_round()?;
        r
    }

    /// Leaves round mode: the stores since the last round are discarded.
    pub fn stop_rounds(&mut self) {
        self.rollback();
    }
}
