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

use std::borrow::Cow;
use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::Ordering;

use super::{TOUCH_WRITE, View, ViewInner, diff};
use crate::engine::Commuted;
use crate::error::{Error, Result};
use crate::ops::OpMemory;
use crate::os::mem::{Access, PAGE};
use crate::viewmem::page_state;
use crate::wal::format::{LoggedOp, Range};

/// Most pages a transaction may have written for a collection to log its
/// next change as an operation ([`View::logs_ops`]).
const LOGICAL_MAX_PAGES: usize = 16;
/// Most operations a transaction logs before its collections fall back to
/// byte diffs ([`View::logs_ops`]).
const LOGICAL_MAX_OPS: usize = 64;

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
    /// Commit-time operations (commutative word updates, blind puts).
    commutes: Vec<Commute>,
    /// A nested-top-action marker is among `ops`: the commit is logged
    /// even if it changed no bytes.
    marker: bool,
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

    /// What a written `page` is diffed against: its shadow; else, if a
    /// commutative operation wrote it (unshadowed), the snapshot's bytes
    /// `old` with those the operation wrote made to differ from `cur`, so
    /// the diff always carries them (a store that put the old bytes back
    /// must be logged: replay runs the operation first); else `old`.
    pub(super) fn base<'s>(&'s self, page: u32, old: &'s [u8], cur: &[u8]) -> Cow<'s, [u8]> {
        if let Some(s) = self.shadow(page) {
            return Cow::Borrowed(s);
        }
        let start = u64::from(page) * PAGE as u64;
        let end = start + PAGE as u64;
        let mut patched: Option<Vec<u8>> = None;
        for c in &self.commutes {
            for &(off, len) in &c.writes {
                let (a, b) = (off.max(start), (off + len as u64).min(end));
                if a >= b {
                    continue;
                }
                let buf = patched.get_or_insert_with(|| old.to_vec());
                for i in (a - start) as usize..(b - start) as usize {
                    buf[i] = !cur[i];
                }
            }
        }
        patched.map_or(Cow::Borrowed(old), Cow::Owned)
    }

    /// Pages commit-time operations changed in this view (their local
    /// results, not committed versions).
    pub(super) fn commuted_pages(&self) -> BTreeSet<u32> {
        self.commutes
            .iter()
            .flat_map(|c| c.wrote.iter().copied())
            .collect()
    }

    /// Which commit-time operations stay where they ran in the record
    /// (`true`): those that touched a page the transaction wrote otherwise
    /// (`written`), and, since the pages such an operation wrote are then
    /// published from this transaction, every operation that touched one
    /// of those, and so on. An operation left outside must touch none of
    /// the published pages: the commit runs it again on the newest
    /// committed versions of its pages, and a page this commit publishes
    /// has none to run on (the commit would conflict with itself).
    pub(super) fn inside(&self, written: impl Fn(u32) -> bool) -> Vec<bool> {
        let mut inside = vec![false; self.commutes.len()];
        let mut published = BTreeSet::new();
        loop {
            let mut grew = false;
            for (i, c) in self.commutes.iter().enumerate() {
                if !inside[i]
                    && c.touched
                        .iter()
                        .any(|&p| written(p) || published.contains(&p))
                {
                    inside[i] = true;
                    published.extend(c.wrote.iter().copied());
                    grew = true;
                }
            }
            if !grew {
                return inside;
            }
        }
    }

    /// The commit-time operations left outside (`inside`), as (index in
    /// the logged operations, id, arguments): the commit applies them
    /// again to the newest committed versions of the pages they touch.
    pub(super) fn commuted_outside(&self, inside: &[bool]) -> Vec<(usize, u32, &[u8])> {
        self.commutes
            .iter()
            .zip(inside)
            .filter(|&(_, &i)| !i)
            .map(|(c, _)| (c.op, self.ops[c.op].1, &self.ops[c.op].3[..]))
            .collect()
    }

    /// The commit-time operations that stay inside (`inside`): they stay
    /// where they ran in the record (replayed before the stores after
    /// them), so every page they read is validated like a read (first),
    /// and the pages they changed that are not in the write set
    /// (`written`) are published with their local result (second).
    pub(super) fn commuted_inside(
        &self,
        inside: &[bool],
        written: impl Fn(u32) -> bool,
    ) -> (Vec<u32>, Vec<u32>) {
        let (mut reads, mut pages) = (Vec::new(), Vec::new());
        for (c, _) in self.commutes.iter().zip(inside).filter(|&(_, &i)| i) {
            reads.extend_from_slice(&c.touched);
            pages.extend(c.wrote.iter().copied().filter(|&p| !written(p)));
        }
        pages.sort_unstable();
        pages.dedup();
        (reads, pages)
    }

    /// The result at commit of the commit-time operations, as they ran
    /// here: every page they touched, the pages they wrote as they left
    /// them, and each one's writes. It is their result on the newest
    /// committed pages too if no commit after the snapshot wrote a page
    /// they touched (`RegionInner::commit_time` checks that). `None` unless
    /// each is a blind operation and none touched a page the transaction
    /// wrote otherwise (`n_outside`: how many `commuted_outside` gave).
    pub(super) fn local_run(&self, n_outside: usize) -> Option<(Vec<u32>, Commuted<'_>)> {
        if self.commutes.is_empty() || n_outside != self.commutes.len() {
            return None;
        }
        let mut touched = BTreeSet::new();
        let mut wrote = BTreeSet::new();
        let mut writes = Vec::with_capacity(self.commutes.len());
        for c in &self.commutes {
            writes.push(Cow::Borrowed(&c.recorded.as_ref()?[..]));
            touched.extend(c.touched.iter().copied());
            wrote.extend(c.wrote.iter().copied());
        }
        let pages = wrote
            .into_iter()
            .map(|p| Some((p, Cow::Borrowed(self.shadow(p)?))))
            .collect::<Option<Vec<_>>>()?;
        Some((touched.into_iter().collect(), Commuted { pages, writes }))
    }

    /// Whether the commit must be logged although it changed nothing.
    pub(super) fn has_marker(&self) -> bool {
        self.marker
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

/// A commit-time operation of the open transaction.
struct Commute {
    /// Index in `OpLog::ops`.
    op: usize,
    /// Pages it read or wrote when it ran here.
    touched: Vec<u32>,
    /// Pages it wrote when it ran here.
    wrote: Vec<u32>,
    /// The bytes it wrote here (offset, length), for pages it left without
    /// a shadow (`OpLog::base`).
    writes: Vec<(u64, usize)>,
    /// A blind operation's writes here, bytes and all, in order: with the
    /// shadows of the pages it wrote, its result at commit if no page it
    /// touched changed since the snapshot (`OpLog::local_run`).
    recorded: Option<Vec<(u64, Vec<u8>)>>,
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
    fn borrow(&mut self, off: u64, len: usize) -> Result<std::borrow::Cow<'_, [u8]>> {
        self.view.slice(off, len).map(std::borrow::Cow::Borrowed)
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
        let changed = self.cut(&mut log);
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
            log.shadow
                .insert(page, Box::from(v.alias_page(page as usize)));
        }
        log.ops.push((at, id, pages, args.to_vec()));
        self.op_log = Some(log);
        Ok(())
    }

    /// Whether a collection should log a change as a built-in operation
    /// (`ops::BTREE_INSERT` …) rather than as the bytes it changes: the
    /// transaction is serializable (`apply` needs that) and small. Each
    /// `apply` diffs every page written so far and copies the pages it
    /// changed, so in a large transaction that cost outgrows the log bytes
    /// saved (and its pages' diffs coalesce anyway).
    pub(crate) fn logs_ops(&self) -> bool {
        let v = &*self.inner;
        self.depth > 0
            && !v.read_only.load(Ordering::Relaxed)
            && (v.track_reads.load(Ordering::Relaxed) || v.untracked_reads.load(Ordering::Relaxed))
            && v.write_n.load(Ordering::Relaxed) <= LOGICAL_MAX_PAGES
            && self
                .op_log
                .as_ref()
                .is_none_or(|l| l.ops.len() < LOGICAL_MAX_OPS)
    }

    /// Whether [`View::apply_blind`] could run a commit-time operation now
    /// (the transaction is small): a caller checks it before building the
    /// operation's arguments, which a bulk load would build for nothing.
    pub(crate) fn blind_fits(&self) -> bool {
        let v = &*self.inner;
        v.write_n.load(Ordering::Relaxed) <= LOGICAL_MAX_PAGES
            && self
                .op_log
                .as_ref()
                .is_none_or(|l| l.ops.len() < LOGICAL_MAX_OPS)
    }

    /// Logs built-in marker `id` (it changes no bytes, so it needs no cut
    /// and no shadows) with the transaction's commit.
    pub(super) fn log_marker(&mut self, id: u32, args: &[u8]) {
        let mut log = self.op_log.take().unwrap_or_default();
        let at = log.ranges.len() as u32;
        log.ops.push((at, id, Vec::new(), args.to_vec()));
        log.marker = true;
        self.op_log = Some(log);
    }

    /// Diffs the written pages against their shadows (the stores since the
    /// last operation) into `log`; returns the pages that changed.
    fn cut(&self, log: &mut OpLog) -> Vec<u32> {
        let v = &*self.inner;
        let snapshot = v.snapshot.load(Ordering::Relaxed);
        let mut changed = Vec::new();
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
            let base = log.base(page as u32, old, cur);
            let before = found.len();
            diff(&base, cur, (page * PAGE) as u64, &mut found);
            if found.len() > before {
                changed.push(page as u32);
            }
        });
        log.ranges
            .extend(found.into_iter().map(|r| (r.offset, r.bytes.to_vec())));
        changed
    }

    /// Applies a commutative built-in operation (`txmap::ops::ADD_U64`,
    /// `ADD_I64`, `MIN_U64`, `MAX_U64`, `MIN_I64`, `MAX_I64`; arguments: the
    /// 8-byte-aligned offset of the word and the operand, little-endian) to
    /// this transaction's memory at once, without putting the word in the
    /// read or write set: at commit it is applied again, under the commit
    /// lock, to the newest committed value, so transactions that only
    /// update one counter this way all commit (escrow style). Reading the
    /// word (accessors or plain loads) puts its page in the read set as
    /// usual, and storing to its page in the write set; then the page is
    /// validated as today. Also in snapshot-isolated transactions.
    pub fn commute(&mut self, id: u32, args: &[u8]) -> Result<()> {
        self.inner.region.check_owner()?;
        if self.depth == 0 {
            return Err(Error::NotInTransaction { op: "commute" });
        }
        if !crate::ops::builtin::is_commutative(id) {
            return Err(Error::Invalid(format!(
                "operation {id} is not a commutative built-in operation"
            )));
        }
        let (off, _) = crate::ops::builtin::word_args(args)?;
        self.check_range(off, 8)?;
        self.commute_op(id, args)
    }

    /// Runs commutative built-in `id` (a word operation, or
    /// `ops::ARRAY_APPEND`) on this transaction's private memory, tracking
    /// none of what it reads or writes, and logs it: at commit it runs
    /// again on the newest committed state (`RegionInner::commit_pages`).
    /// If the transaction writes a page the operation wrote (before or
    /// after it), every page it wrote is written: validated, and published
    /// from this transaction as a whole. An operation that fails wrote
    /// nothing (the built-ins check before they store) and is not logged.
    pub(crate) fn commute_op(&mut self, id: u32, args: &[u8]) -> Result<()> {
        self.inner.region.check_owner()?;
        if self.depth == 0 {
            return Err(Error::NotInTransaction { op: "commute" });
        }
        let v = &*self.inner;
        if v.read_only.load(Ordering::Relaxed) {
            v.doom(super::DOOM_READ_ONLY_WRITE);
            return Err(Error::StoreInReadOnlyTransaction);
        }
        let mut log = self.op_log.take().unwrap_or_default();
        let changed = self.cut(&mut log);
        let v = &*self.inner;
        let op = crate::ops::lookup(id).expect("built-in");
        let mut mem = Private {
            view: v,
            pages: BTreeSet::new(),
            writes: Vec::new(),
        };
        let r = (op.apply)(&mut mem, args);
        let (pages, writes): (Vec<u32>, _) = if r.is_ok() {
            (mem.pages.into_iter().collect(), mem.writes)
        } else {
            Default::default()
        };
        let written = |p: u32| v.touch_bits(p as usize) & super::TOUCH_WRITE != 0;
        if pages.iter().any(|&p| written(p)) {
            for &p in &pages {
                v.touch(p as usize, true);
            }
        }
        // A page needs a shadow only if commit diffs it (it is written, or
        // has a shadow already): otherwise a later store makes it written
        // and validated, and it is diffed against the snapshot with the
        // operation's bytes always included (`OpLog::base`), which then
        // replays to the same bytes.
        let diffed: Vec<u32> = pages
            .iter()
            .copied()
            .filter(|&p| written(p) || log.shadow.contains_key(&p))
            .collect();
        for &p in changed.iter().chain(&diffed) {
            log.shadow.insert(p, Box::from(v.alias_page(p as usize)));
        }
        if r.is_ok() {
            let at = log.ranges.len() as u32;
            log.ops.push((at, id, pages.clone(), args.to_vec()));
            log.commutes.push(Commute {
                op: log.ops.len() - 1,
                touched: pages.clone(),
                wrote: pages,
                writes,
                recorded: None,
            });
            v.commuted.store(true, Ordering::Relaxed);
        }
        self.op_log = Some(log);
        r
    }

    /// The little-endian u64 at `off` as this transaction sees it, without
    /// tracking the read (a commutative operation's local result).
    pub(crate) fn peek_u64(&self, off: u64) -> Result<u64> {
        let mut b = [0u8; 8];
        Private {
            view: &self.inner,
            pages: BTreeSet::new(),
            writes: Vec::new(),
        }
        .read(off, &mut b)?;
        Ok(u64::from_le_bytes(b))
    }

    /// Runs registered operation `id` as a *commit-time* (blind) operation:
    /// at once on this transaction's memory, so it sees the effect, but
    /// without putting the pages the operation reads or writes in the read
    /// or write set. At commit it runs again, under the commit lock, on the
    /// newest committed versions of its pages (re-traversing whatever it
    /// traverses), and that result is published and logged as the
    /// operation. So the operation must give the right result on any
    /// committed state: a blind put of a key, whose outcome the transaction
    /// does not read. It signals "cannot run blindly here" (a leaf without
    /// room) by `Err(Error::Conflict)`: then nothing is changed and this
    /// returns false (the caller takes its ordinary path); at commit the
    /// same signal is a conflict (the retry takes the ordinary path).
    ///
    /// False too, changing nothing, in a large transaction (as for
    /// [`View::logs_ops`]), or if the transaction already wrote a page
    /// the operation touches (its stores must stay ordered with it). If it
    /// writes one later, the operation stays where it ran in the record and
    /// every page it touched is validated at commit like a read. Reads by
    /// lookups (accessors, plain loads) are validated as usual.
    pub(crate) fn apply_blind(&mut self, id: u32, args: &[u8]) -> Result<bool> {
        self.inner.region.check_owner()?;
        if self.depth == 0 {
            return Err(Error::NotInTransaction { op: "apply_blind" });
        }
        self.check_expired()?;
        let v = &*self.inner;
        if v.read_only.load(Ordering::Relaxed) {
            v.doom(super::DOOM_READ_ONLY_WRITE);
            return Err(Error::StoreInReadOnlyTransaction);
        }
        // A large transaction gains nothing (it conflicts on its other
        // pages) and would replay every operation under the commit lock.
        if !self.blind_fits() {
            return Ok(false);
        }
        let v = &*self.inner;
        let snapshot = v.snapshot.load(Ordering::Relaxed);
        let mapped = v.mem.mapped.load(Ordering::Relaxed);
        let peek = |p: u32| -> Result<&[u8]> {
            let page = p as usize;
            if (page + 1) * PAGE > mapped {
                return Err(Error::OutOfRange {
                    off: (page * PAGE) as u64,
                    len: PAGE,
                    size: mapped,
                });
            }
            if v.mem
                .valid
                .get(page)
                .is_some_and(|x| x.load(Ordering::Acquire) == page_state::NONE)
            {
                v.install(page, snapshot);
            }
            Ok(v.alias_page(page))
        };
        let mut load = |p: u32, buf: &mut [u8]| {
            buf.copy_from_slice(peek(p)?);
            Ok(())
        };
        let mut ov = crate::ops::Overlay::with_peek(mapped as u64, &mut load, &peek);
        let recorded = match ov.run_recorded(id, args) {
            Ok(w) => w,
            Err(Error::Conflict) => return Ok(false),
            Err(e) => return Err(e),
        };
        let touched = ov.seen_pages();
        if touched
            .iter()
            .any(|&p| v.touch_bits(p as usize) & TOUCH_WRITE != 0)
        {
            return Ok(false);
        }
        let pages = ov.into_pages();
        let mut log = self.op_log.take().unwrap_or_default();
        let changed = self.cut(&mut log);
        let v = &*self.inner;
        for &p in &changed {
            log.shadow.insert(p, Box::from(v.alias_page(p as usize)));
        }
        for (p, bytes) in &pages {
            // SAFETY: below the mapped size (the overlay loaded it from the
            // alias), which is private to this view; no reference into it is
            // alive (the view is borrowed mutably).
            unsafe {
                std::ptr::copy_nonoverlapping(
                    bytes.as_ptr(),
                    v.mem.alias.base().add(*p as usize * PAGE),
                    PAGE,
                )
            };
        }
        // If the transaction stores to one of these pages later, the
        // operation stays in order, and those stores must be diffed against
        // its result, not the snapshot (a store that undoes part of it
        // would otherwise leave no diff, and replay would keep the part).
        let wrote: Vec<u32> = pages.keys().copied().collect();
        for (p, bytes) in pages {
            log.shadow.insert(p, bytes.into_boxed_slice());
        }
        let at = log.ranges.len() as u32;
        log.ops.push((at, id, wrote.clone(), args.to_vec()));
        log.commutes.push(Commute {
            op: log.ops.len() - 1,
            touched,
            wrote,
            // Every page it wrote has a shadow.
            writes: Vec::new(),
            recorded: Some(recorded),
        });
        self.op_log = Some(log);
        v.commuted.store(true, Ordering::Relaxed);
        Ok(true)
    }

    /// Adds `delta` to the u64 (or i64) at `off` by [`View::commute`].
    pub fn add_u64(&mut self, off: u64, delta: u64) -> Result<()> {
        self.commute(crate::ops::ADD_U64, &word(off, delta))
    }

    /// Adds `delta` to the i64 at `off` by [`View::commute`].
    pub fn add_i64(&mut self, off: u64, delta: i64) -> Result<()> {
        self.commute(crate::ops::ADD_I64, &word(off, delta as u64))
    }

    /// Forgets the operations of the ending (or pausing) transaction: the
    /// pages commutative ones changed in this view hold its local result,
    /// not a committed version, so they are read again when next touched.
    pub(super) fn drop_op_log(&mut self) {
        if let Some(log) = self.op_log.take() {
            self.inner.forget_pages(&log.commuted_pages());
        }
        self.inner.commuted.store(false, Ordering::Relaxed);
    }
}

impl ViewInner {
    /// Makes `pages` invalid here (and inaccessible at the user address),
    /// so their next touch installs them afresh.
    pub(super) fn forget_pages(&self, pages: &BTreeSet<u32>) {
        // Nothing is accessible at the user address while no fault or
        // `set_page_access` exposed a page (the accessors never do).
        let exposed = self.exposed();
        for &p in pages {
            if let Some(x) = self.mem.valid.get(p as usize) {
                x.store(0, Ordering::Release);
            }
            if !exposed {
                continue;
            }
            let ok = self
                .mem
                .user
                .protect(p as usize * PAGE, PAGE, Access::None)
                .is_ok();
            assert!(ok, "cannot re-protect a view");
        }
    }
}

/// A built-in operation's arguments.
fn word(off: u64, x: u64) -> [u8; 16] {
    let mut a = [0u8; 16];
    a[..8].copy_from_slice(&off.to_le_bytes());
    a[8..].copy_from_slice(&x.to_le_bytes());
    a
}

/// The view's private memory, untracked: where a commutative operation
/// shows the transaction its effect. Pages not valid in the view are
/// installed (their snapshot version) before they are read or written;
/// `pages` collects the pages written.
struct Private<'a> {
    view: &'a ViewInner,
    pages: BTreeSet<u32>,
    /// The writes (offset, length), in order.
    writes: Vec<(u64, usize)>,
}

impl Private<'_> {
    /// Checks `[off, off + len)` against the view's size and installs its
    /// pages that are not valid here.
    fn prepare(&self, off: u64, len: usize) -> Result<()> {
        let size = self.size();
        if off.checked_add(len as u64).is_none_or(|e| e > size) {
            return Err(Error::OutOfRange {
                off,
                len,
                size: size as usize,
            });
        }
        if len == 0 {
            return Ok(());
        }
        let v = self.view;
        for page in off as usize / PAGE..=(off as usize + len - 1) / PAGE {
            if v.mem
                .valid
                .get(page)
                .is_some_and(|x| x.load(Ordering::Acquire) == 0)
            {
                v.install(page, v.snapshot.load(Ordering::Relaxed));
            }
        }
        Ok(())
    }
}

impl OpMemory for Private<'_> {
    fn size(&self) -> u64 {
        self.view.mem.mapped.load(Ordering::Relaxed) as u64
    }
    fn read(&mut self, off: u64, buf: &mut [u8]) -> Result<()> {
        buf.copy_from_slice(&self.borrow(off, buf.len())?);
        Ok(())
    }
    fn borrow(&mut self, off: u64, len: usize) -> Result<std::borrow::Cow<'_, [u8]>> {
        self.prepare(off, len)?;
        // SAFETY: in bounds of the alias (checked), which is always mapped;
        // nothing writes it while the borrow of `self` lives.
        let src = unsafe {
            std::slice::from_raw_parts(self.view.mem.alias.base().add(off as usize), len)
        };
        Ok(std::borrow::Cow::Borrowed(src))
    }
    fn write(&mut self, off: u64, bytes: &[u8]) -> Result<()> {
        self.prepare(off, bytes.len())?;
        if bytes.is_empty() {
            return Ok(());
        }
        // SAFETY: in bounds of the alias (checked), private to this view, and
        // no reference into it is alive (the view is borrowed mutably).
        let dst = unsafe {
            std::slice::from_raw_parts_mut(
                self.view.mem.alias.base().add(off as usize),
                bytes.len(),
            )
        };
        dst.copy_from_slice(bytes);
        let (first, last) = (
            off / PAGE as u64,
            (off + bytes.len() as u64 - 1) / PAGE as u64,
        );
        self.pages.extend((first..=last).map(|p| p as u32));
        self.writes.push((off, bytes.len()));
        Ok(())
    }
}
