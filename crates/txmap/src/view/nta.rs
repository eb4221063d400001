//! Nested top actions (`View::nested_top`; the log side is `crate::nta`).
//!
//! The parent transaction is paused (`pause.rs`) while the action runs as
//! a transaction of its own on the same view, so the action validates and
//! commits by itself; its record carries the logical undo. The parent's
//! commit logs that its actions are finished; if it ends any other way,
//! the undos run here, newest first, each as its own commit.

use super::View;
use crate::error::{Error, Result};
use crate::nta::{ALL, done_args, undo_args as undo_args_of};
use crate::ops::builtin::{NTA_DONE, NTA_UNDO};

/// The nested top actions of the open transaction.
pub(crate) struct Nested {
    /// Names the transaction in the log (random, so never reused).
    token: u64,
    /// The parent's slot, which holds `token` while the parent lives (so a
    /// peer's checkpoint compensates its actions if the process dies).
    slot: usize,
    /// (index, undo operation, its arguments), in order.
    actions: Vec<(u32, u32, Vec<u8>)>,
    next: u32,
}

/// A nested top action begun by [`View::nta_begin`], not yet ended.
pub(crate) struct Open {
    parent: super::pause::Paused,
    nested: Box<Nested>,
    index: u32,
    tag: Vec<u8>,
    undo: u32,
    args: Vec<u8>,
}

impl View {
    /// Runs `f` as a nested top action of the open transaction: a
    /// transaction of its own on this view (retried on conflict like
    /// [`View::run`]), which commits at once, visible to everyone, while
    /// the enclosing transaction is paused (it sees the action's effect only
    /// on pages it has not read or written yet; its commit validates what it
    /// read as usual). The action's commit record names its logical undo:
    /// the registered operation `undo` with `undo_args`. If the enclosing
    /// transaction then aborts, rolls back or fails to commit, the undo runs
    /// as a compensating transaction of its own (newest action first); if
    /// the process dies before the enclosing transaction commits, the next
    /// checkpoint of a process that has the region open runs it, or else
    /// the next first opener of the region (docs/FORMAT.md, "Nested top
    /// actions"). The undo must be registered (`txmap::ops::register`) in
    /// every process that opens the region, and must be correct to run
    /// after any later commits (a logical undo, like Stasis's).
    pub fn nested_top<T>(
        &mut self,
        undo: u32,
        undo_args: &[u8],
        mut f: impl FnMut(&mut View) -> Result<T>,
    ) -> Result<T> {
        let mut backoff = super::Backoff::new(self.inner.slot() as u64);
        loop {
            self.nta_begin(undo, undo_args)?;
            let r = match f(self) {
                Ok(x) => self.nta_end().map(|_| x),
                Err(e) => self.nta_abort().and(Err(e)),
            };
            match r {
                Err(Error::Conflict) => backoff.wait(),
                other => return other,
            }
        }
    }

    /// Begins a nested top action of the open transaction (the bracketing
    /// form of [`View::nested_top`], C `txmap_nta_begin`): pauses it and
    /// begins a serializable transaction of the action's own on this view.
    /// End it with [`View::nta_end`] (commit) or [`View::nta_abort`].
    pub fn nta_begin(&mut self, undo: u32, undo_args: &[u8]) -> Result<()> {
        self.inner.region.check_owner()?;
        if self.depth == 0 {
            return Err(Error::NotInTransaction { op: "nta_begin" });
        }
        if !crate::ops::is_registered(undo) {
            return Err(Error::Invalid(format!(
                "nested top action: undo operation {undo} is not registered"
            )));
        }
        let nested = self.nta.take().unwrap_or_else(|| {
            let n = Box::new(Nested {
                token: crate::rand::fresh(),
                slot: self.inner.slot(),
                actions: Vec::new(),
                next: 0,
            });
            // Before the first action's record names the token.
            self.inner.region.mvcc.set_nta_token(n.slot, n.token);
            n
        });
        let index = nested.next;
        let tag = undo_args_of(nested.token, index, undo, undo_args);
        let parent = match self.pause() {
            Ok(p) => p,
            Err(e) => {
                self.nta = Some(nested);
                return Err(e);
            }
        };
        if let Err(e) = self.begin() {
            self.nta = Some(nested);
            self.resume(parent)?;
            return Err(e);
        }
        self.nta_open.push(Open {
            parent,
            nested,
            index,
            tag,
            undo,
            args: undo_args.to_vec(),
        });
        Ok(())
    }

    /// Commits the nested top action begun last by [`View::nta_begin`]
    /// (with its undo in its record) and resumes the enclosing transaction.
    /// On a conflict (`Error::Conflict`) the action left no trace and the
    /// enclosing transaction is resumed all the same: begin it again.
    pub fn nta_end(&mut self) -> Result<()> {
        self.nta_finish(true)
    }

    /// Rolls back the nested top action begun last by [`View::nta_begin`]
    /// and resumes the enclosing transaction.
    pub fn nta_abort(&mut self) -> Result<()> {
        self.nta_finish(false)
    }

    fn nta_finish(&mut self, commit: bool) -> Result<()> {
        self.inner.region.check_owner()?;
        if self.nta_open.is_empty() {
            return Err(Error::Invalid("no nested top action is open".into()));
        }
        if self.depth != 1 {
            return Err(Error::Invalid(format!(
                "ending a nested top action inside {} levels of nested transactions: \
                 commit them first",
                self.depth.saturating_sub(1)
            )));
        }
        let Open {
            parent,
            mut nested,
            index,
            tag,
            undo,
            args,
        } = self.nta_open.pop().expect("checked above");
        let r = if commit {
            self.log_marker(NTA_UNDO, &tag);
            self.commit()
        } else {
            self.rollback();
            Ok(())
        };
        if commit && r.is_ok() {
            nested.actions.push((index, undo, args));
            nested.next += 1;
        }
        if let Err(e) = self.resume(parent) {
            // The parent was rolled back.
            let (slot, token) = (nested.slot, nested.token);
            let _ = self.compensate(*nested);
            self.inner.region.mvcc.clear_nta_token(slot, token);
            return Err(e);
        }
        self.nta = Some(nested);
        r
    }

    /// Before the outermost commit: logs that the transaction's nested top
    /// actions are finished (with the commit, atomically).
    pub(super) fn nta_before_commit(&mut self) {
        if let Some(n) = &self.nta
            && !n.actions.is_empty()
        {
            let done = done_args(n.token, ALL);
            self.log_marker(NTA_DONE, &done);
        }
    }

    /// After the outermost transaction ended: compensates its nested top
    /// actions unless it committed.
    pub(super) fn nta_after_end(&mut self, committed: bool) -> Result<()> {
        let Some(n) = self.nta.take() else {
            return Ok(());
        };
        let (slot, token) = (n.slot, n.token);
        let r = match committed || n.actions.is_empty() {
            true => Ok(()),
            false => self.compensate(*n),
        };
        // Its actions are done or compensated (one whose compensation
        // failed is left to a checkpoint: no slot names it any more).
        self.inner.region.mvcc.clear_nta_token(slot, token);
        r
    }

    /// Runs the undos of `n`'s actions, newest first, each with its
    /// `NTA_DONE` marker in one commit. One that fails stays pending in the
    /// log (the next first opener runs it).
    fn compensate(&mut self, n: Nested) -> Result<()> {
        for (index, undo, args) in n.actions.iter().rev() {
            let done = done_args(n.token, *index);
            self.run(|v| {
                v.apply(*undo, args)?;
                v.log_marker(NTA_DONE, &done);
                Ok(())
            })?;
        }
        Ok(())
    }
}
