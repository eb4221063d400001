//! Registered operations inside a transaction (`View::apply`).
//!
//! An operation runs at once on the transaction's memory. Its effect is
//! logged as its id and arguments, not as byte diffs, so the commit record
//! becomes a sequence: diffs of the stores before the first operation, the
//! operation, diffs of the stores after it up to the next one, and so on.
//! To cut that sequence, each `apply` first diffs every written page
//! against its *shadow* (the page as the previous operation left it, or its
//! snapshot version) and keeps those diffs; after the operation the pages
//! it or those stores changed are copied into their shadows. Commit diffs
//! against the shadows for the last stretch. Replay then runs the same
//! steps on the same bytes (serializable validation guarantees that what
//! the operation read is what the commit order gives it).

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::Ordering;

use super::{View, diff};
use crate::error::{Error, Result};
use crate::ops::OpMemory;
use crate::os::mem::PAGE;
use crate::wal::format::{LoggedOp, Range};

/// The registered operations of the open transaction and the diffs of the
/// stores between them.
#[derive(Default)]
pub(crate) struct OpLog {
    /// Written pages as the last operation left them.
    shadow: HashMap<u32, Box<[u8]>>,
    /// Diffs of the stores before each operation, in order.
    ranges: Vec<(u64, Vec<u8>)>,
    /// (ranges before it, id, pages it wrote, arguments).
    ops: Vec<(u32, u32, Vec<u32>, Vec<u8>)>,
}

impl OpLog {
    /// The diffs taken so far, as the start of the commit record's ranges.
    pub(super) fn ranges(&self) -> Vec<Range<'_>> {
        self.ranges
            .iter()
            .map(|(offset, bytes)| Range {
                offset: *offset,
                bytes,
            })
            .collect()
    }

    /// `page` as the last operation left it, if an operation or the stores
    /// before one changed it.
    pub(super) fn shadow(&self, page: u32) -> Option<&[u8]> {
        self.shadow.get(&page).map(|b| &b[..])
    }

    /// The operations as the commit record holds them.
    pub(super) fn logged(&self) -> Vec<LoggedOp<'_>> {
        self.ops
            .iter()
            .map(|(at, id, pages, args)| LoggedOp {
                at: *at,
                id: *id,
                pages: pages.clone(),
                args,
            })
            .collect()
    }
}

/// An operation's view of the transaction's memory: the accessors, which
/// track its reads and writes like any others.
struct InView<'a> {
    view: &'a mut View,
    pages: BTreeSet<u32>,
}

impl OpMemory for InView<'_> {
    fn size(&self) -> u64 {
        self.view.len() as u64
    }
    fn read(&mut self, off: u64, buf: &mut [u8]) -> Result<()> {
        buf.copy_from_slice(self.view.slice(off, buf.len())?);
        Ok(())
    }
    fn write(&mut self, off: u64, bytes: &[u8]) -> Result<()> {
        self.view
            .slice_mut(off, bytes.len())?
            .copy_from_slice(bytes);
        if !bytes.is_empty() {
            let (first, last) = (
                off / PAGE as u64,
                (off + bytes.len() as u64 - 1) / PAGE as u64,
            );
            self.pages.extend((first..=last).map(|p| p as u32));
        }
        Ok(())
    }
}

impl View {
    /// Runs the registered operation `id` (`txmap::ops::register`) with
    /// `args` on this transaction's memory at once (the transaction sees its
    /// effect) and logs it as one operation record (id and arguments) in
    /// place of the byte diffs of what it changed. Recovery runs it again,
    /// in commit order, with the byte diffs of stores before and after it.
    /// Needs a serializable transaction (what the operation reads must be
    /// validated, or its replay could differ). If the operation fails, the
    /// transaction is aborted (its commit returns `Error::Aborted`) and its
    /// error returned.
    pub fn apply(&mut self, id: u32, args: &[u8]) -> Result<()> {
        self.inner.region.check_owner()?;
        if self.depth == 0 {
            return Err(Error::NotInTransaction { op: "apply" });
        }
        let op = crate::ops::lookup(id)
            .ok_or_else(|| Error::Invalid(format!("operation {id} is not registered")))?;
        let v = &*self.inner;
        if !v.read_only.load(Ordering::Relaxed)
            && !v.track_reads.load(Ordering::Relaxed)
            && !v.untracked_reads.load(Ordering::Relaxed)
        {
            return Err(Error::Invalid(format!(
                "operation {id} ({}): registered operations need a serializable transaction \
                 (under snapshot isolation what they read is not validated)",
                op.name
            )));
        }
        self.check_expired()?;
        let mut log = self.op_log.take().unwrap_or_default();
        // The diffs of the stores since the last operation.
        let snapshot = v.snapshot.load(Ordering::Relaxed);
        let mut changed = Vec::new();
        {
            let side = v.read_side();
            let mut found = Vec::new();
            v.for_each_written(|page| {
                // SAFETY: as in `commit_outermost`: our alias page is mapped and
                // only we write it; the snapshot version stays while we are on
                // the read side.
                let (old, cur) = unsafe {
                    (
                        std::slice::from_raw_parts(side.source(page, snapshot), PAGE),
                        std::slice::from_raw_parts(v.mem.alias.base().add(page * PAGE), PAGE),
                    )
                };
                let base = log.shadow(page as u32).unwrap_or(old);
                let before = found.len();
                diff(base, cur, (page * PAGE) as u64, &mut found);
                if found.len() > before {
                    changed.push(page as u32);
                }
            });
            log.ranges
                .extend(found.into_iter().map(|r| (r.offset, r.bytes.to_vec())));
        }
        let at = log.ranges.len() as u32;
        let mut mem = InView {
            view: self,
            pages: BTreeSet::new(),
        };
        if let Err(e) = (op.apply)(&mut mem, args) {
            self.abort()?;
            return Err(e);
        }
        let pages: Vec<u32> = mem.pages.into_iter().collect();
        let v = &*self.inner;
        for &page in changed.iter().chain(&pages) {
            // SAFETY: as above (the page is in the write set, so mapped).
            let cur = unsafe {
                std::slice::from_raw_parts(v.mem.alias.base().add(page as usize * PAGE), PAGE)
            };
            log.shadow.insert(page, Box::from(cur));
        }
        log.ops.push((at, id, pages, args.to_vec()));
        self.op_log = Some(log);
        Ok(())
    }
}
