//! Registered operations: a program extends the log with its own redo
//! operations (Stasis's idea). An operation is a deterministic function
//! that changes region bytes given argument bytes, registered under a
//! stable id before a region is opened. `View::apply` runs it on the
//! transaction's memory at once and logs its id and arguments in place of
//! the byte diffs of what it changed; recovery (and every other reader of
//! the log that rebuilds pages) runs it again, in commit order, interleaved
//! with the byte diffs of the same commit (docs/FORMAT.md, kind 2 records).
//!
//! Ids below [`FIRST_USER_OP`] belong to txmap.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::RwLock;

use crate::error::{Error, Result};
use crate::io::Storage;
use crate::os::mem::PAGE;
use crate::wal::format::{CommitRecord, HEADER_BYTES};

pub use crate::opmem::OpMemory;

/// The first id a program may register; lower ids are txmap's own.
pub const FIRST_USER_OP: u32 = 128;

pub use builtin::{
    ADD_I64, ADD_U64, ARRAY_APPEND, BTREE_DELETE, BTREE_INSERT, BTREE_PUT, BTREE_SPLIT,
    COBTREE_INSERT, COBTREE_PUT, COBTREE_REMOVE, LHASH_PUT, MAX_I64, MAX_U64, MIN_I64, MIN_U64,
    PAGE_CHECK,
};

/// An operation's function: deterministic (the same bytes and arguments
/// give the same stores), touching the region only through `mem`. An error
/// dooms the transaction that applied it.
pub type OpFn = fn(mem: &mut dyn OpMemory, args: &[u8]) -> Result<()>;

/// A registered operation.
#[derive(Clone, Copy, Debug)]
pub struct Operation {
    /// Shown by `txmap info` and in errors.
    pub name: &'static str,
    pub apply: OpFn,
}

/// A function registered with a context ([`register_with`]).
pub type DynOpFn = std::sync::Arc<dyn Fn(&mut dyn OpMemory, &[u8]) -> Result<()> + Send + Sync>;

/// What the registry holds for an id.
#[derive(Clone)]
pub(crate) struct Registered {
    pub(crate) name: String,
    /// Identifies the function, so registering it again is allowed.
    key: usize,
    pub(crate) apply: DynOpFn,
}

static REGISTRY: RwLock<BTreeMap<u32, Registered>> = RwLock::new(BTreeMap::new());

/// Registers `op` under `id` (at least [`FIRST_USER_OP`]) for this
/// process. Register every operation a region's log may hold before
/// opening it. Registering the same function again under its id is
/// allowed; another function under a taken id is `Error::Invalid`.
pub fn register(id: u32, op: Operation) -> Result<()> {
    let f = op.apply;
    register_with(
        id,
        op.name,
        f as usize,
        std::sync::Arc::new(move |m: &mut dyn OpMemory, a: &[u8]| f(m, a)),
    )
}

/// [`register`] for a function with state (the C API's function and
/// context pointer): `key` identifies it, so registering the same key
/// again under `id` is allowed and keeps the first.
pub fn register_with(id: u32, name: &str, key: usize, apply: DynOpFn) -> Result<()> {
    if id < FIRST_USER_OP {
        return Err(Error::Invalid(format!(
            "operation id {id} is reserved for txmap (user ids start at {FIRST_USER_OP})"
        )));
    }
    let mut r = REGISTRY.write().unwrap_or_else(|e| e.into_inner());
    match r.get(&id) {
        Some(old) if old.key != key => Err(Error::Invalid(format!(
            "operation id {id} is already registered (as {:?})",
            old.name
        ))),
        Some(_) => Ok(()),
        None => {
            r.insert(
                id,
                Registered {
                    name: name.to_string(),
                    key,
                    apply,
                },
            );
            Ok(())
        }
    }
}

/// The operation registered under `id`, if any.
pub(crate) fn lookup(id: u32) -> Option<Registered> {
    if let Some(op) = builtin::get(id) {
        let f = op.apply;
        return Some(Registered {
            name: op.name.to_string(),
            key: f as usize,
            apply: std::sync::Arc::new(move |m: &mut dyn OpMemory, a: &[u8]| f(m, a)),
        });
    }
    REGISTRY
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .get(&id)
        .cloned()
}

/// Whether an operation is registered under `id` in this process.
pub fn is_registered(id: u32) -> bool {
    lookup(id).is_some()
}

/// Fails with `Error::UnknownOperation` for the first operation in
/// `records` this process has not registered: checked before anything is
/// replayed, so such a log changes nothing.
pub(crate) fn check_registered<'a>(
    records: impl IntoIterator<Item = &'a CommitRecord<'a>>,
    log: &std::path::Path,
) -> Result<()> {
    for r in records {
        if let Some(o) = r.ops.iter().find(|o| lookup(o.id).is_none()) {
            return Err(Error::UnknownOperation {
                id: o.id,
                commit: r.seq,
                path: log.to_path_buf(),
            });
        }
    }
    Ok(())
}

/// Pages rebuilt from a base (the file, or versions) as records replay.
pub(crate) struct Overlay<'a> {
    pages: BTreeMap<u32, Vec<u8>>,
    /// Pages written (the others were only read).
    dirty: BTreeSet<u32>,
    size: u64,
    load: &'a mut dyn FnMut(u32, &mut [u8]) -> Result<()>,
    /// The writes made while recording (`run_recorded`).
    recorded: Option<Vec<(u64, Vec<u8>)>>,
    /// A page's base content in place: reads of pages not written yet
    /// copy only the bytes asked for, not the page (commit-time
    /// operations under the commit lock read more pages than they write).
    peek: Option<Peek<'a>>,
    /// Pages read through `peek`.
    peeked: BTreeSet<u32>,
}

/// A page's base content, borrowed ([`Overlay::with_peek`]).
pub(crate) type Peek<'a> = &'a dyn Fn(u32) -> Result<&'a [u8]>;

impl<'a> Overlay<'a> {
    /// `load(page, buf)` fills a page's base content.
    pub(crate) fn new(size: u64, load: &'a mut dyn FnMut(u32, &mut [u8]) -> Result<()>) -> Self {
        Overlay {
            pages: BTreeMap::new(),
            dirty: BTreeSet::new(),
            size,
            load,
            recorded: None,
            peek: None,
            peeked: BTreeSet::new(),
        }
    }

    /// [`Overlay::new`], reading pages not written yet through `peek`
    /// (which must give what `load` would copy).
    pub(crate) fn with_peek(
        size: u64,
        load: &'a mut dyn FnMut(u32, &mut [u8]) -> Result<()>,
        peek: Peek<'a>,
    ) -> Self {
        Overlay {
            peek: Some(peek),
            ..Overlay::new(size, load)
        }
    }

    fn page(&mut self, p: u32) -> Result<&mut Vec<u8>> {
        if !self.pages.contains_key(&p) {
            let mut buf = vec![0u8; PAGE];
            (self.load)(p, &mut buf)?;
            self.pages.insert(p, buf);
        }
        Ok(self.pages.get_mut(&p).expect("inserted above"))
    }

    fn check(&self, off: u64, len: usize) -> Result<()> {
        if off.checked_add(len as u64).is_none_or(|e| e > self.size) {
            return Err(Error::OutOfRange {
                off,
                len,
                size: self.size as usize,
            });
        }
        Ok(())
    }

    /// Applies one record: its ranges, with its operations run where they
    /// were applied among them.
    pub(crate) fn apply(&mut self, r: &CommitRecord<'_>) -> Result<()> {
        self.size = self.size.max(r.data_size);
        let mut ops = r.ops.iter().peekable();
        for i in 0..=r.ranges.len() {
            while let Some(o) = ops.next_if(|o| o.at as usize == i) {
                let op = lookup(o.id).ok_or_else(|| {
                    Error::Invalid(format!(
                        "operation {} of commit {} is not registered",
                        o.id, r.seq
                    ))
                })?;
                (op.apply)(self, o.args).map_err(|e| {
                    Error::Invalid(format!(
                        "replaying operation {} ({}) of commit {} failed: {e}",
                        o.id, op.name, r.seq
                    ))
                })?;
            }
            if let Some(x) = r.ranges.get(i) {
                self.write(x.offset, x.bytes)?;
            }
        }
        Ok(())
    }

    /// Runs operation `id` on the pages.
    pub(crate) fn run(&mut self, id: u32, args: &[u8]) -> Result<()> {
        let op = lookup(id)
            .ok_or_else(|| Error::Invalid(format!("operation {id} is not registered")))?;
        (op.apply)(self, args)
    }

    /// [`Overlay::run`], returning the writes the operation made (offset,
    /// bytes), in order: replayed as byte ranges they give the same pages.
    pub(crate) fn run_recorded(&mut self, id: u32, args: &[u8]) -> Result<Vec<(u64, Vec<u8>)>> {
        self.recorded = Some(Vec::new());
        let r = self.run(id, args);
        let writes = self.recorded.take().unwrap_or_default();
        r.map(|()| writes)
    }

    /// Every page read or written so far, in order.
    pub(crate) fn seen_pages(&self) -> Vec<u32> {
        let mut all: BTreeSet<u32> = self.pages.keys().copied().collect();
        all.extend(self.peeked.iter().copied());
        all.into_iter().collect()
    }

    /// How many pages were written so far.
    pub(crate) fn dirty_pages(&self) -> usize {
        self.dirty.len()
    }

    /// The pages written, rebuilt.
    pub(crate) fn into_pages(self) -> BTreeMap<u32, Vec<u8>> {
        let dirty = self.dirty;
        let mut pages = self.pages;
        pages.retain(|p, _| dirty.contains(p));
        pages
    }
}

impl OpMemory for Overlay<'_> {
    fn size(&self) -> u64 {
        self.size
    }
    fn read(&mut self, mut off: u64, mut buf: &mut [u8]) -> Result<()> {
        self.check(off, buf.len())?;
        while !buf.is_empty() {
            let (p, at) = ((off / PAGE as u64) as u32, (off % PAGE as u64) as usize);
            let n = buf.len().min(PAGE - at);
            match self.peek {
                Some(peek) if !self.pages.contains_key(&p) => {
                    let src = peek(p)?;
                    buf[..n].copy_from_slice(&src[at..at + n]);
                    self.peeked.insert(p);
                }
                _ => buf[..n].copy_from_slice(&self.page(p)?[at..at + n]),
            }
            off += n as u64;
            buf = &mut buf[n..];
        }
        Ok(())
    }
    fn borrow(&mut self, off: u64, len: usize) -> Result<Cow<'_, [u8]>> {
        self.check(off, len)?;
        let (p, at) = ((off / PAGE as u64) as u32, (off % PAGE as u64) as usize);
        if at + len > PAGE {
            let mut buf = vec![0u8; len];
            self.read(off, &mut buf)?;
            return Ok(Cow::Owned(buf));
        }
        match self.peek {
            Some(peek) if !self.pages.contains_key(&p) => {
                let src = peek(p)?;
                self.peeked.insert(p);
                Ok(Cow::Borrowed(&src[at..at + len]))
            }
            _ => Ok(Cow::Borrowed(&self.page(p)?[at..at + len])),
        }
    }
    fn write(&mut self, mut off: u64, mut bytes: &[u8]) -> Result<()> {
        self.check(off, bytes.len())?;
        if let Some(w) = &mut self.recorded {
            w.push((off, bytes.to_vec()));
        }
        while !bytes.is_empty() {
            let (p, at) = ((off / PAGE as u64) as u32, (off % PAGE as u64) as usize);
            let n = bytes.len().min(PAGE - at);
            self.page(p)?[at..at + n].copy_from_slice(&bytes[..n]);
            self.dirty.insert(p);
            off += n as u64;
            bytes = &bytes[n..];
        }
        Ok(())
    }
}

/// An `Overlay` loader of the region file's pages (zeros past its end).
pub(crate) fn file_pages(
    data: &dyn Storage,
) -> Result<impl FnMut(u32, &mut [u8]) -> Result<()> + '_> {
    let len = data.len().map_err(|e| Error::io("stat", data.path(), e))?;
    Ok(move |p: u32, buf: &mut [u8]| {
        let at = HEADER_BYTES + u64::from(p) * PAGE as u64;
        if at + PAGE as u64 <= len {
            data.read_at(buf, at)
                .map_err(|e| Error::io("read", data.path(), e))?;
        }
        Ok(())
    })
}

/// Redoes one record into a region file (recovery, restore): its ranges
/// written in place, or, when it holds operations, its pages rebuilt from
/// the file and written back whole.
pub(crate) fn redo_into_file(data: &dyn Storage, r: &CommitRecord<'_>) -> Result<()> {
    let replay = |e| Error::io("replay into", data.path(), e);
    if r.ops.is_empty() {
        for x in &r.ranges {
            data.write_at(x.bytes, HEADER_BYTES + x.offset)
                .map_err(replay)?;
        }
        return Ok(());
    }
    let mut load = file_pages(data)?;
    let mut ov = Overlay::new(r.data_size, &mut load);
    ov.apply(r)?;
    for (p, bytes) in ov.into_pages() {
        data.write_at(&bytes, HEADER_BYTES + u64::from(p) * PAGE as u64)
            .map_err(replay)?;
    }
    Ok(())
}

/// Whether logged operations change bytes (the nested-top-action markers
/// change none): replaying them twice would then change the result.
pub(crate) fn changes_bytes(ops: &[crate::wal::format::LoggedOp<'_>]) -> bool {
    ops.iter().any(|o| !o.pages.is_empty())
}

/// Every page a record may change: its ranges' pages and those its
/// operations wrote when they ran.
pub(crate) fn touched_pages<'a>(
    records: impl IntoIterator<Item = &'a CommitRecord<'a>> + Clone,
) -> BTreeSet<u64> {
    let mut t =
        crate::sums::touched_pages(records.clone().into_iter().flat_map(|r| r.ranges.iter()));
    for r in records {
        for o in &r.ops {
            t.extend(o.pages.iter().map(|&p| u64::from(p)));
        }
    }
    t
}

/// txmap's own registered operations (ids below `ops::FIRST_USER_OP`): the
/// commutative updates of one aligned 8-byte word (arguments: the word's
/// region offset, u64, a multiple of 8, and the operand, 8 bytes, both
/// little-endian), the nested-top-action markers, the page check, and the
/// collections' logical changes (docs/FORMAT.md).
pub(crate) mod builtin {
    use super::{OpMemory, Operation};
    use crate::error::{Error, Result};

    /// Adds the operand to a u64 (wrapping); also adds an i64 (same bits).
    pub const ADD_U64: u32 = 1;
    /// Adds the operand to an i64 (wrapping).
    pub const ADD_I64: u32 = 2;
    /// Lowers a u64 to the operand if the operand is smaller.
    pub const MIN_U64: u32 = 3;
    /// Raises a u64 to the operand if the operand is larger.
    pub const MAX_U64: u32 = 4;
    /// Lowers an i64 to the operand if the operand is smaller.
    pub const MIN_I64: u32 = 5;
    /// Raises an i64 to the operand if the operand is larger.
    pub const MAX_I64: u32 = 6;
    /// The collections' array list (`collections::ArrayList::append`):
    /// stores an element at the array's length and raises the length by
    /// one. Arguments: the array's header offset u64, then the element.
    /// Commutative (appends in any order give the same set of elements);
    /// resolved at commit, so it reaches the log only when the
    /// transaction also wrote the array's pages.
    pub const ARRAY_APPEND: u32 = 7;

    /// Marks a commit as a nested top action (`View::nested_top`): arguments
    /// are the enclosing transaction's token (u64), the action's index in it
    /// (u32), the undo operation's id (u32) and its arguments. Changes nothing.
    pub const NTA_UNDO: u32 = 16;
    /// Marks nested top actions finished: the enclosing transaction's token
    /// (u64) and an action's index (u32), or `u32::MAX` for all of them (the
    /// enclosing transaction committed). Changes nothing.
    pub const NTA_DONE: u32 = 17;
    /// Checks pages after the record's other operations and ranges: the
    /// arguments are (page u32, CRC-32C u32) pairs of the pages operations
    /// wrote, as the committing transaction left them. Changes nothing;
    /// fails if replay made other bytes (an operation that is not
    /// deterministic, or registered differently where it is replayed).
    pub const PAGE_CHECK: u32 = 18;
    /// The collections' B+-tree (`collections::BTree`): inserts a new key
    /// with an inline value into the free gap of a leaf. Arguments: the
    /// leaf's region offset u64, key length u16, key, value (the rest).
    pub const BTREE_INSERT: u32 = 32;
    /// The B+-tree: takes a key's slot out of a leaf. Arguments as for
    /// [`BTREE_INSERT`], with no value.
    pub const BTREE_DELETE: u32 = 33;
    /// The B+-tree: moves the upper half of a full leaf into a new leaf
    /// linked after it. Arguments: the leaf's offset u64, the new leaf's
    /// offset u64.
    pub const BTREE_SPLIT: u32 = 34;
    /// The collections' CO B-tree (`collections::CoBTree`): inserts a slot
    /// into a segment, shifting the slots after it. Arguments: the
    /// segment's offset u64, the slot index u32, the key prefix u64, the
    /// record's offset u64.
    pub const COBTREE_INSERT: u32 = 35;
    /// The CO B-tree: removes a slot from a segment, shifting the slots
    /// after it down. Arguments: the segment's offset u64, the index u32.
    pub const COBTREE_REMOVE: u32 = 36;
    /// The B+-tree's commit-time blind put (`BTree::put_blind`): descends
    /// from the root and inserts the key in place into its leaf, or
    /// overwrites its inline value of the same length. Arguments: the
    /// tree's header offset u64, key length u16, key, value (the rest).
    pub const BTREE_PUT: u32 = 37;
    /// The linear hash's commit-time blind put (`LinearHash::put_blind`):
    /// finds the key's bucket from the header and directory and appends
    /// the entry to the first page of its chain with room, or overwrites
    /// its inline value of the same length. Arguments as [`BTREE_PUT`],
    /// with the table's header offset.
    pub const LHASH_PUT: u32 = 38;
    /// The CO B-tree's commit-time blind put of a new key
    /// (`CoBTree::put_blind`): routes it through the index, allocates its
    /// record from an arena, inserts its slot and fixes the index minimum.
    /// Arguments: the tree's header offset u64, arena u32, key length u16,
    /// key, value (the rest).
    pub const COBTREE_PUT: u32 = 39;

    /// `PAGE_CHECK`'s arguments for `pages` (page, content).
    pub(crate) fn page_check_args<'a>(pages: impl Iterator<Item = (u32, &'a [u8])>) -> Vec<u8> {
        let mut a = Vec::new();
        for (p, bytes) in pages {
            a.extend_from_slice(&p.to_le_bytes());
            a.extend_from_slice(&crc32c::crc32c(bytes).to_le_bytes());
        }
        a
    }

    /// The word's offset and the operand of a built-in operation's arguments.
    pub(crate) fn word_args(args: &[u8]) -> Result<(u64, u64)> {
        let bad = || {
            Error::Invalid(format!(
                "built-in operation arguments: 16 bytes (offset, operand) expected, got {}",
                args.len()
            ))
        };
        if args.len() != 16 {
            return Err(bad());
        }
        let off = u64::from_le_bytes(args[..8].try_into().map_err(|_| bad())?);
        let x = u64::from_le_bytes(args[8..].try_into().map_err(|_| bad())?);
        if !off.is_multiple_of(8) {
            return Err(Error::Invalid(format!(
                "built-in operation on offset {off}: the word must be 8-byte aligned"
            )));
        }
        Ok((off, x))
    }

    fn word(mem: &mut dyn OpMemory, args: &[u8], f: fn(u64, u64) -> u64) -> Result<()> {
        let (off, x) = word_args(args)?;
        let old = mem.read_u64(off)?;
        mem.write_u64(off, f(old, x))
    }

    fn add(m: &mut dyn OpMemory, a: &[u8]) -> Result<()> {
        word(m, a, u64::wrapping_add)
    }
    fn min_u(m: &mut dyn OpMemory, a: &[u8]) -> Result<()> {
        word(m, a, u64::min)
    }
    fn max_u(m: &mut dyn OpMemory, a: &[u8]) -> Result<()> {
        word(m, a, u64::max)
    }
    fn min_i(m: &mut dyn OpMemory, a: &[u8]) -> Result<()> {
        word(m, a, |o, x| (o as i64).min(x as i64) as u64)
    }
    fn max_i(m: &mut dyn OpMemory, a: &[u8]) -> Result<()> {
        word(m, a, |o, x| (o as i64).max(x as i64) as u64)
    }

    /// The nested-top-action markers change no bytes; their arguments are
    /// checked by `crate::nta::decode`.
    fn marker(_: &mut dyn OpMemory, a: &[u8]) -> Result<()> {
        if a.len() < 12 {
            return Err(Error::Invalid(format!(
                "nested top action marker: at least 12 argument bytes expected, got {}",
                a.len()
            )));
        }
        Ok(())
    }

    fn page_check(m: &mut dyn OpMemory, a: &[u8]) -> Result<()> {
        if !a.len().is_multiple_of(8) {
            return Err(Error::Invalid(format!(
                "page check: (page, checksum) pairs of 8 bytes expected, got {} bytes",
                a.len()
            )));
        }
        let mut page = vec![0u8; crate::os::mem::PAGE];
        for pair in a.chunks_exact(8) {
            let p = u32::from_le_bytes(pair[..4].try_into().expect("4 bytes"));
            let want = u32::from_le_bytes(pair[4..].try_into().expect("4 bytes"));
            m.read(u64::from(p) * page.len() as u64, &mut page)?;
            let got = crc32c::crc32c(&page);
            if got != want {
                return Err(Error::Invalid(format!(
                    "page {p} replays to other bytes than its commit wrote (checksum \
                     {got:08x}, logged {want:08x}): an operation of this commit is not \
                     deterministic, or is registered differently in this process"
                )));
            }
        }
        Ok(())
    }

    /// The built-in operation with id `id`, if there is one.
    pub(crate) fn get(id: u32) -> Option<Operation> {
        let (name, apply): (&'static str, crate::ops::OpFn) = match id {
            ADD_U64 => ("add u64", add),
            ADD_I64 => ("add i64", add),
            MIN_U64 => ("min u64", min_u),
            MAX_U64 => ("max u64", max_u),
            MIN_I64 => ("min i64", min_i),
            MAX_I64 => ("max i64", max_i),
            ARRAY_APPEND => ("array append", crate::collections::arrayop::append_op),
            NTA_UNDO => ("nested top action", marker),
            NTA_DONE => ("nested top actions done", marker),
            PAGE_CHECK => ("page check", page_check),
            BTREE_INSERT => ("B+-tree insert", crate::collections::leaf::insert_op),
            BTREE_DELETE => ("B+-tree delete", crate::collections::leaf::delete_op),
            BTREE_SPLIT => ("B+-tree leaf split", crate::collections::leaf::split_op),
            BTREE_PUT => ("B+-tree blind put", crate::collections::leaf::put_op),
            LHASH_PUT => ("linear hash blind put", crate::collections::lhashop::put_op),
            COBTREE_PUT => ("CO B-tree blind put", crate::collections::cobtreeop::put_op),
            COBTREE_INSERT => (
                "CO B-tree slot insert",
                crate::collections::segment::slot_op,
            ),
            COBTREE_REMOVE => (
                "CO B-tree slot remove",
                crate::collections::segment::slot_op,
            ),
            _ => return None,
        };
        Some(Operation { name, apply })
    }

    /// Whether built-in `id` commutes with itself on one word (so it may be
    /// applied at commit to the newest committed value).
    pub(crate) fn is_commutative(id: u32) -> bool {
        (ADD_U64..=MAX_I64).contains(&id)
    }
}
