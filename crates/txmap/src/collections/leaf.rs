//! The B+-tree's node format and its logged operations' replay functions
//! (`BTREE_INSERT`, `BTREE_DELETE`, `BTREE_SPLIT`), over bytes only: no
//! `View`, no `ops`, so the log's replay (below the collections) runs them
//! without importing the tree. The layout is described in `btree`.

use super::format::{
    BLOCK_HEADER, PAGE, Val, cell_at, cell_bytes, cell_end, inline_at, invalid, put_cell,
    put_inline_cell, put16, put64, u16_at, u64_at,
};
use crate::error::Result;
use crate::opmem::OpMemory;

/// Bytes of a node.
pub const NODE: usize = (PAGE - BLOCK_HEADER) as usize;
/// Longest key.
pub const MAX_KEY: usize = 512;
/// Longest value kept inside a leaf.
pub const INLINE_MAX: usize = 512;
pub(super) const LEAF: u8 = 1;
pub(super) const INTERNAL: u8 = 2;
const HDR: usize = 16;
/// Bytes of a slot: the cell's offset u16, then the key's head
/// ([`head`], big-endian), so that a search decides most probes in the
/// slot array, a few lines, instead of at each probed cell's key.
pub(super) const SLOT: usize = 6;

/// Offset of slot `i`.
#[inline]
fn slot(i: usize) -> usize {
    HDR + SLOT * i
}

/// Writes slot `i`: the cell at `cell` holding `key`.
fn put_slot(b: &mut [u8], i: usize, cell: usize, key: &[u8]) {
    put16(b, slot(i), cell as u16);
    b[slot(i) + 2..slot(i) + SLOT].copy_from_slice(&head(key).to_be_bytes());
}

pub(super) const MAGIC: u64 = u64::from_le_bytes(*b"TXMBTRE2");
/// The magic of trees whose slots held no key heads (2-byte slots).
pub(super) const MAGIC_V1: u64 = u64::from_le_bytes(*b"TXMBTRE1");
// Tree header block fields.
pub(super) const T_MAGIC: u64 = 0;
pub(super) const T_ROOT: u64 = 8;
pub(super) const T_HEIGHT: u64 = 16;

pub(super) type Entry = (Vec<u8>, Val);

/// A node read for modification.
pub(super) struct Leaf {
    pub(super) next: u64,
    pub(super) ents: Vec<Entry>,
}
pub(super) struct Internal {
    pub(super) first: u64,
    pub(super) ents: Vec<(Vec<u8>, u64)>,
}

impl Internal {
    pub(super) fn child(&self, i: usize) -> u64 {
        if i == 0 {
            self.first
        } else {
            self.ents[i - 1].1
        }
    }
}

pub(super) fn leaf_cell(e: &Entry) -> usize {
    cell_bytes(&e.0, &e.1) + SLOT
}
pub(super) fn internal_cell(e: &(Vec<u8>, u64)) -> usize {
    16 + e.0.len() + SLOT
}
pub(super) fn leaf_bytes(ents: &[Entry]) -> usize {
    HDR + ents.iter().map(leaf_cell).sum::<usize>()
}
pub(super) fn internal_bytes(ents: &[(Vec<u8>, u64)]) -> usize {
    HDR + ents.iter().map(internal_cell).sum::<usize>()
}

pub(super) fn encode_leaf(l: &Leaf) -> Option<Vec<u8>> {
    if leaf_bytes(&l.ents) > NODE {
        return None;
    }
    let mut b = vec![0u8; NODE];
    b[0] = LEAF;
    put16(&mut b, 2, l.ents.len() as u16);
    put64(&mut b, 8, l.next);
    let mut end = NODE;
    for (i, (k, val)) in l.ents.iter().enumerate() {
        end -= cell_bytes(k, val);
        put_slot(&mut b, i, end, k);
        put_cell(&mut b, end, k, val);
    }
    Some(b)
}

pub(super) fn encode_internal(n: &Internal) -> Option<Vec<u8>> {
    if internal_bytes(&n.ents) > NODE {
        return None;
    }
    let mut b = vec![0u8; NODE];
    b[0] = INTERNAL;
    put16(&mut b, 2, n.ents.len() as u16);
    put64(&mut b, 8, n.first);
    let mut end = NODE;
    for (i, (k, child)) in n.ents.iter().enumerate() {
        end -= 16 + k.len();
        put_slot(&mut b, i, end, k);
        put16(&mut b, end, k.len() as u16);
        put64(&mut b, end + 8, *child);
        b[end + 16..end + 16 + k.len()].copy_from_slice(k);
    }
    Some(b)
}

/// A node's bytes, parsed in place (no copies) for searching.
pub(super) struct Raw<'a> {
    pub(super) b: &'a [u8],
    pub(super) kind: u8,
    pub(super) n: usize,
    pub(super) link: u64,
}

impl<'a> Raw<'a> {
    pub(super) fn parse(b: &'a [u8]) -> Option<Raw<'a>> {
        let kind = *b.first()?;
        let n = u16_at(b, 2)? as usize;
        if !(kind == LEAF || kind == INTERNAL) || slot(n) > b.len() {
            return None;
        }
        Some(Raw {
            b,
            kind,
            n,
            link: u64_at(b, 8)?,
        })
    }
    pub(super) fn cell(&self, i: usize) -> Option<usize> {
        let c = u16_at(self.b, slot(i))? as usize;
        (c >= slot(self.n) && c < self.b.len()).then_some(c)
    }
    pub(super) fn key(&self, i: usize) -> Option<&'a [u8]> {
        let c = self.cell(i)?;
        let klen = u16_at(self.b, c)? as usize;
        let at = c + if self.kind == LEAF { 8 } else { 16 };
        self.b.get(at..at + klen)
    }
    /// Child `i` of an internal node (0..=n).
    pub(super) fn child(&self, i: usize) -> Option<u64> {
        if i == 0 {
            return Some(self.link);
        }
        u64_at(self.b, self.cell(i - 1)? + 8)
    }
    pub(super) fn val(&self, i: usize) -> Option<Val> {
        cell_at(self.b, self.cell(i)?).map(|(_, val, _)| val)
    }
    /// Leaf entry `i`'s value if it is stored inline.
    pub(super) fn inline(&self, i: usize) -> Option<&'a [u8]> {
        inline_at(self.b, self.cell(i)?)
    }
    /// Ok(i): key i equals `key`; Err(i): `key` belongs before key i.
    pub(super) fn search(&self, key: &[u8]) -> Option<Result<usize, usize>> {
        let (mut lo, mut hi) = (0, self.n);
        let (want_head, want) = (head(key), prefix(key));
        while lo < hi {
            let mid = (lo + hi) / 2;
            let at = slot(mid) + 2;
            let h = u32::from_be_bytes(self.b.get(at..at + 4)?.try_into().ok()?);
            // Most probes are decided by the slot's head, without a load of
            // the cell; then most of the rest by the first eight bytes: one
            // integer comparison instead of a call to memcmp.
            let ord = match h.cmp(&want_head) {
                std::cmp::Ordering::Equal => {
                    let k = self.key(mid)?;
                    prefix(k).cmp(&want).then_with(|| k.cmp(key))
                }
                o => o,
            };
            match ord {
                std::cmp::Ordering::Less => lo = mid + 1,
                std::cmp::Ordering::Greater => hi = mid,
                std::cmp::Ordering::Equal => return Some(Ok(mid)),
            }
        }
        Some(Err(lo))
    }
    /// Whether every slot's head is its key's ([`head`]): the search
    /// trusts the heads, so the tree's check compares them.
    pub(super) fn heads_match(&self) -> bool {
        (0..self.n).all(|i| {
            let at = slot(i) + 2;
            self.key(i)
                .is_some_and(|k| self.b[at..at + 4] == head(k).to_be_bytes())
        })
    }
    /// Asks the processor to start loading the first line of entry `i`'s
    /// cell (its header and key), if `i` is an entry: a scan asks a few
    /// entries ahead, so that the cells of a leaf it enters cold load side
    /// by side instead of one after the other.
    #[inline]
    pub(super) fn prefetch_cell(&self, i: usize) {
        if i < self.n
            && let Some(c) = self.cell(i)
        {
            crate::os::mem::prefetch(self.b[c..].as_ptr());
        }
    }
    /// Index of the child of an internal node that may hold `key`.
    pub(super) fn route(&self, key: &[u8]) -> Option<usize> {
        Some(match self.search(key)? {
            Ok(i) => i + 1,
            Err(i) => i,
        })
    }
    /// Bytes a leaf's entries take (header, slots and cells), as
    /// [`leaf_bytes`] counts them, without decoding: free space left by
    /// in-place deletes is not counted.
    pub(super) fn leaf_used(&self) -> Option<usize> {
        let mut used = HDR;
        for i in 0..self.n {
            let c = self.cell(i)?;
            used += cell_end(self.b, c)? - c + SLOT;
        }
        Some(used)
    }
    pub(super) fn to_leaf(&self) -> Option<Leaf> {
        let mut ents = Vec::with_capacity(self.n);
        for i in 0..self.n {
            ents.push((self.key(i)?.to_vec(), self.val(i)?));
        }
        Some(Leaf {
            next: self.link,
            ents,
        })
    }
    pub(super) fn to_internal(&self) -> Option<Internal> {
        let mut ents = Vec::with_capacity(self.n);
        for i in 0..self.n {
            ents.push((self.key(i)?.to_vec(), self.child(i + 1)?));
        }
        Some(Internal {
            first: self.link,
            ents,
        })
    }
}

/// The first `N` bytes of `key`, zero-padded.
#[inline]
fn padded<const N: usize>(key: &[u8]) -> [u8; N] {
    match key.first_chunk::<N>() {
        Some(b) => *b,
        None => {
            let mut b = [0u8; N];
            b[..key.len()].copy_from_slice(key);
            b
        }
    }
}

/// The first four bytes of `key` as a big-endian number, zero-padded,
/// ordered as [`prefix`] is: a slot's head.
#[inline]
fn head(key: &[u8]) -> u32 {
    u32::from_be_bytes(padded(key))
}

/// The first eight bytes of `key` as a big-endian number, zero-padded:
/// two keys whose prefixes differ compare as their prefixes do (a shorter
/// key pads with zeros, which sort below any byte that differs from them);
/// equal prefixes leave the rest to decide.
#[inline]
fn prefix(key: &[u8]) -> u64 {
    u64::from_be_bytes(padded(key))
}

/// Where an in-place insert of `key` with an inline value of `vlen` bytes
/// goes in leaf `r`: (slot index, entries, cell offset); `None` if the key
/// is present or the gap between the slots and the cells is too small.
pub(super) fn in_place_spot(
    r: &Raw<'_>,
    key: &[u8],
    vlen: usize,
) -> std::result::Result<Option<(usize, usize, usize)>, &'static str> {
    let pos = match r.search(key).ok_or("bad key")? {
        Ok(_) => return Ok(None),
        Err(i) => i,
    };
    let mut lowest = NODE;
    for i in 0..r.n {
        lowest = lowest.min(r.cell(i).ok_or("bad cell")?);
    }
    let cell = 8 + key.len() + vlen;
    let slots_end = slot(r.n + 1);
    if lowest < slots_end + cell {
        return Ok(None);
    }
    // Every cell lies at or above `lowest`, so [slots_end, lowest) is free.
    Ok(Some((pos, r.n, lowest - cell)))
}

/// Puts the cell at `at` and its slot at `pos` (of `n`) into node bytes `b`.
pub(super) fn put_in_place(
    b: &mut [u8],
    (pos, n, at): (usize, usize, usize),
    key: &[u8],
    value: &[u8],
) {
    b.copy_within(slot(pos)..slot(n), slot(pos + 1));
    put_slot(b, pos, at, key);
    put16(b, 2, (n + 1) as u16);
    put_inline_cell(b, at, key, value);
}

/// Takes slot `i` (of `n`) out of node bytes `b`; its cell becomes a hole.
pub(super) fn remove_slot(b: &mut [u8], i: usize, n: usize) {
    b.copy_within(slot(i + 1)..slot(n), slot(i));
    put16(b, 2, (n - 1) as u16);
}

/// The arguments of [`crate::ops::BTREE_INSERT`] and `BTREE_DELETE`
/// (docs/FORMAT.md): node offset u64, key length u16, key, value.
pub(crate) fn op_args(node: u64, key: &[u8], value: &[u8]) -> Vec<u8> {
    let mut a = Vec::with_capacity(10 + key.len() + value.len());
    a.extend_from_slice(&node.to_le_bytes());
    a.extend_from_slice(&(key.len() as u16).to_le_bytes());
    a.extend_from_slice(key);
    a.extend_from_slice(value);
    a
}

/// Splits [`op_args`] into (node, key, value), checking the lengths.
fn parse_op_args(args: &[u8]) -> Result<(u64, &[u8], &[u8])> {
    parse_kv_args(args, "B+-tree operation")
}

/// Splits arguments laid out as [`op_args`] lays them out (offset u64, key
/// length u16, key, value) into their parts, checking the lengths against
/// 512-byte keys and inline values; errors name `what`.
pub(super) fn parse_kv_args<'a>(args: &'a [u8], what: &str) -> Result<(u64, &'a [u8], &'a [u8])> {
    let bad = || {
        invalid(format!(
            "{what}: malformed arguments ({} bytes)",
            args.len()
        ))
    };
    let node = u64_at(args, 0).ok_or_else(bad)?;
    let klen = u16_at(args, 8).ok_or_else(bad)? as usize;
    let key = args.get(10..10 + klen).ok_or_else(bad)?;
    let value = &args[10 + klen..];
    if klen > MAX_KEY || value.len() > INLINE_MAX {
        return Err(bad());
    }
    Ok((node, key, value))
}

/// The leaf at `node` in `mem`, copied.
fn op_leaf(mem: &mut dyn OpMemory, node: u64) -> Result<Vec<u8>> {
    let mut b = vec![0u8; NODE];
    mem.read(node, &mut b)?;
    if Raw::parse(&b).is_none_or(|r| r.kind != LEAF) {
        return Err(invalid(format!(
            "B+-tree operation: no leaf at offset {node}"
        )));
    }
    Ok(b)
}

/// Built-in operation [`crate::ops::BTREE_INSERT`]: inserts a new key with
/// an inline value into a leaf's free gap, as `BTree::insert_in_place`
/// does. Fails (the caller checked first) if the key is present or the gap
/// is too small.
pub(crate) fn insert_op(mem: &mut dyn OpMemory, args: &[u8]) -> Result<()> {
    let (node, key, value) = parse_op_args(args)?;
    let mut b = op_leaf(mem, node)?;
    let r = Raw::parse(&b).expect("checked by op_leaf");
    let spot = in_place_spot(&r, key, value.len())
        .map_err(|what| invalid(format!("B+-tree insert into leaf {node}: {what}")))?
        .ok_or_else(|| {
            invalid(format!(
                "B+-tree insert into leaf {node}: the key is present or the leaf is full"
            ))
        })?;
    write_in_place(mem, node, &mut b, spot, key, value)
}

/// Inserts in place into the leaf at `node`, whose bytes `b` are, at
/// `spot` ([`in_place_spot`]): writes only the count, the shifted slots and
/// the new cell.
fn write_in_place(
    mem: &mut dyn OpMemory,
    node: u64,
    b: &mut [u8],
    spot: (usize, usize, usize),
    key: &[u8],
    value: &[u8],
) -> Result<()> {
    put_in_place(b, spot, key, value);
    let (pos, n, at) = spot;
    mem.write(node + 2, &b[2..4])?;
    mem.write(node + slot(pos) as u64, &b[slot(pos)..slot(n + 1)])?;
    let cell = 8 + key.len() + value.len();
    mem.write(node + at as u64, &b[at..at + cell])
}

/// Built-in operation [`crate::ops::BTREE_PUT`], a commit-time blind put
/// (`BTree::put_blind`): descends from the tree's root (arguments as
/// [`op_args`], with the tree's header offset for the node) and inserts the
/// key in place into its leaf's free gap, or overwrites its inline value
/// of the same length. `Err(Error::Conflict)`, changing nothing, when
/// neither fits (the leaf must split, or the value changes size): the
/// caller then puts the ordinary way.
pub(crate) fn put_op(mem: &mut dyn OpMemory, args: &[u8]) -> Result<()> {
    let (tree, key, value) = parse_op_args(args)?;
    let bad = |at: u64, what: &str| invalid(format!("B+-tree blind put at node {at}: {what}"));
    let mut hdr = [0u8; 24];
    mem.read(tree, &mut hdr)?;
    let field = |f: u64| u64_at(&hdr, f as usize).unwrap_or(0);
    let (mut node, height) = (field(T_ROOT), field(T_HEIGHT));
    if field(T_MAGIC) != MAGIC || height == 0 || height > 64 {
        return Err(bad(tree, "not a B+-tree header"));
    }
    // Nodes are read where they lie (the operation runs two or three times
    // per commit); the leaf is copied only when the put changes it.
    for _ in 1..height {
        let b = mem.borrow(node, NODE)?;
        let r = Raw::parse(&b)
            .filter(|r| r.kind == INTERNAL)
            .ok_or_else(|| bad(node, "malformed internal node"))?;
        let i = r.route(key).ok_or_else(|| bad(node, "bad key"))?;
        node = r.child(i).ok_or_else(|| bad(node, "bad child"))?;
    }
    let b = mem.borrow(node, NODE)?;
    let r = Raw::parse(&b)
        .filter(|r| r.kind == LEAF)
        .ok_or_else(|| bad(node, "malformed leaf"))?;
    if let Ok(i) = r.search(key).ok_or_else(|| bad(node, "bad key"))? {
        let c = r.cell(i).ok_or_else(|| bad(node, "bad cell"))?;
        if inline_at(&b, c).is_some_and(|old| old.len() == value.len()) {
            drop(b);
            return mem.write(node + (c + 8 + key.len()) as u64, value);
        }
        return Err(crate::error::Error::Conflict);
    }
    let Some(spot) = in_place_spot(&r, key, value.len()).map_err(|what| bad(node, what))? else {
        return Err(crate::error::Error::Conflict);
    };
    let mut b = b.into_owned();
    write_in_place(mem, node, &mut b, spot, key, value)
}

/// Built-in operation [`crate::ops::BTREE_SPLIT`]: moves the upper half
/// (by bytes, [`split_point`]) of the leaf at `node` into the new leaf at
/// `rnode`, linked after it, and repacks both ([`split_leaf_bytes`]).
/// Arguments: `node` u64, `rnode` u64.
pub(crate) fn split_op(mem: &mut dyn OpMemory, args: &[u8]) -> Result<()> {
    let (Some(node), Some(rnode), 16) = (u64_at(args, 0), u64_at(args, 8), args.len()) else {
        return Err(invalid(format!(
            "B+-tree split: 16 argument bytes expected, got {}",
            args.len()
        )));
    };
    let b = op_leaf(mem, node)?;
    let (mut lb, mut rb) = (vec![0u8; NODE], vec![0u8; NODE]);
    split_leaf_bytes(&b, rnode, &mut lb, &mut rb)
        .map_err(|what| invalid(format!("B+-tree split of leaf {node}: {what}")))?;
    mem.write(node, &lb)?;
    mem.write(rnode, &rb)
}

/// The cells of leaf `r` in slot order, as (offset, end), checked as
/// [`Raw::to_leaf`] checks them (flags 0 or 1, the cell inside the node).
pub(super) fn leaf_cells(r: &Raw<'_>) -> Option<Vec<(usize, usize)>> {
    let mut cells = Vec::with_capacity(r.n);
    for i in 0..r.n {
        let c = r.cell(i)?;
        if *r.b.get(c + 2)? > 1 {
            return None;
        }
        cells.push((c, cell_end(r.b, c)?));
    }
    Some(cells)
}

/// Bytes the cell at `(offset, end)` takes in a leaf with its slot.
pub(super) fn packed_cell(&(c, e): &(usize, usize)) -> usize {
    e - c + SLOT
}

/// Bytes an entry of a `klen`-byte key whose value takes `vbytes` in the
/// node (the inline value, or 16 for a block's offset and length) takes
/// in a leaf with its slot.
pub(super) fn entry_bytes(klen: usize, vbytes: usize) -> usize {
    8 + klen + vbytes + SLOT
}

/// Bytes a leaf of cells `cells` takes as [`leaf_bytes`] counts them
/// (header, a slot and the cell's bytes each).
pub(super) fn packed_bytes(cells: &[(usize, usize)]) -> usize {
    HDR + cells.iter().map(packed_cell).sum::<usize>()
}

/// Writes the leaf of cells `cells` of node bytes `src` (from
/// [`leaf_cells`]) into `out` (a node's bytes) with next leaf `link`,
/// exactly as [`encode_leaf`] writes the same entries: cells packed down
/// from the node's end in key order, each header written anew, every other
/// byte zero. Each cell's key and value are copied once, nothing decoded.
pub(super) fn pack_leaf(
    src: &[u8],
    cells: &[(usize, usize)],
    link: u64,
    out: &mut [u8],
) -> std::result::Result<(), &'static str> {
    if out.len() != NODE || packed_bytes(cells) > NODE {
        return Err("halves do not fit");
    }
    // Every byte is written once: the header, the slots, the zeroed gap,
    // the cells (`out` may be a node of the view; no fill of it first).
    out[..HDR].fill(0);
    out[0] = LEAF;
    put16(out, 2, cells.len() as u16);
    put64(out, 8, link);
    let mut end = NODE;
    for (i, &(c, e)) in cells.iter().enumerate() {
        end -= e - c;
        let klen = usize::from(u16::from_le_bytes([src[c], src[c + 1]]));
        put_slot(out, i, end, &src[c + 8..c + 8 + klen]);
        // Key length and flags as they are; byte 3 zero; the inline
        // length only for an inline value (`put_cell` leaves it zero for
        // a block).
        out[end..end + 3].copy_from_slice(&src[c..c + 3]);
        out[end + 3] = 0;
        if src[c + 2] == 0 {
            out[end + 4..end + 8].copy_from_slice(&src[c + 4..c + 8]);
        } else {
            out[end + 4..end + 8].fill(0);
        }
        out[end + 8..end + e - c].copy_from_slice(&src[c + 8..e]);
    }
    out[slot(cells.len())..end].fill(0);
    Ok(())
}

/// Splits leaf bytes `b` as [`split_op`] does: the lower half (by bytes,
/// [`split_point`]) repacked into `left` linked to `rnode`, the upper half
/// into `right` linked to `b`'s next leaf; byte for byte what
/// [`encode_leaf`] writes for the halves of [`Raw::to_leaf`]'s entries,
/// so a log replayed by either gives the same node. Returns the index of
/// the first entry moved right.
pub(super) fn split_leaf_bytes(
    b: &[u8],
    rnode: u64,
    left: &mut [u8],
    right: &mut [u8],
) -> std::result::Result<usize, &'static str> {
    let r = Raw::parse(b)
        .filter(|r| r.kind == LEAF)
        .ok_or("malformed leaf")?;
    let cells = leaf_cells(&r).ok_or("malformed leaf")?;
    if cells.len() < 2 {
        return Err("fewer than two entries");
    }
    let at = split_point(&cells, packed_cell);
    pack_leaf(b, &cells[..at], rnode, left)?;
    pack_leaf(b, &cells[at..], r.link, right)?;
    Ok(at)
}

/// Inserts separator `key` with child `child` (keys `>= key`) as entry `i`
/// of the internal node in bytes `b`, in place: its cell just below the
/// lowest cell, the slots from `i` on moved up by one. False (nothing
/// changed) if the gap between the slots and the cells is too small.
pub(super) fn internal_put_in_place(
    b: &mut [u8],
    i: usize,
    key: &[u8],
    child: u64,
) -> std::result::Result<bool, &'static str> {
    let r = Raw::parse(b)
        .filter(|r| r.kind == INTERNAL)
        .ok_or("malformed B+-tree node")?;
    let n = r.n;
    if i > n {
        return Err("bad child index");
    }
    let mut lowest = NODE.min(b.len());
    for j in 0..n {
        lowest = lowest.min(r.cell(j).ok_or("bad cell")?);
    }
    let cell = 16 + key.len();
    let slots_end = slot(n + 1);
    if lowest < slots_end + cell {
        return Ok(false);
    }
    let at = lowest - cell;
    b.copy_within(slot(i)..slot(n), slot(i + 1));
    put_slot(b, i, at, key);
    put16(b, 2, (n + 1) as u16);
    put16(b, at, key.len() as u16);
    b[at + 2..at + 8].fill(0);
    put64(b, at + 8, child);
    b[at + 16..at + cell].copy_from_slice(key);
    Ok(true)
}

/// Built-in operation [`crate::ops::BTREE_DELETE`]: takes a key's slot out
/// of a leaf, as `BTree::delete` does in place (a value block was
/// released before). Fails if the key is absent.
pub(crate) fn delete_op(mem: &mut dyn OpMemory, args: &[u8]) -> Result<()> {
    let (node, key, _) = parse_op_args(args)?;
    let mut b = op_leaf(mem, node)?;
    let r = Raw::parse(&b).expect("checked by op_leaf");
    let n = r.n;
    let Some(Ok(i)) = r.search(key) else {
        return Err(invalid(format!(
            "B+-tree delete from leaf {node}: the key is absent"
        )));
    };
    remove_slot(&mut b, i, n);
    mem.write(node + 2, &b[2..4])?;
    mem.write(node + slot(i) as u64, &b[slot(i)..slot(n - 1)])
}

/// Splits entries in two halves by bytes, each non-empty.
pub(super) fn split_point<T>(ents: &[T], size: impl Fn(&T) -> usize) -> usize {
    let total: usize = ents.iter().map(&size).sum();
    let mut acc = 0;
    for (i, e) in ents.iter().enumerate() {
        acc += size(e);
        if acc * 2 >= total {
            return (i + 1).clamp(1, ents.len() - 1);
        }
    }
    ents.len() / 2
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rand::SplitMix;

    /// The search's prefix comparison orders keys as bytes do: keys of 0
    /// to 11 bytes over {0, 1, 255}, so short keys, zero padding and equal
    /// prefixes all occur.
    #[test]
    fn prefixes_order_keys_as_their_bytes() {
        let mut rng = SplitMix(7);
        let mut key = || -> Vec<u8> {
            let n = rng.next() % 12;
            (0..n)
                .map(|_| [0u8, 1, 255][(rng.next() % 3) as usize])
                .collect()
        };
        for _ in 0..20_000 {
            let (a, b) = (key(), key());
            assert_eq!(
                prefix(&a).cmp(&prefix(&b)).then_with(|| a.cmp(&b)),
                a.cmp(&b),
                "{a:?} {b:?}"
            );
            assert_eq!(
                head(&a).cmp(&head(&b)).then_with(|| a.cmp(&b)),
                a.cmp(&b),
                "heads: {a:?} {b:?}"
            );
        }
    }

    /// The search, which decides probes by the slots' heads, finds what a
    /// search of the sorted keys finds, in leaves and internal nodes built
    /// whole and then changed in place (inserts, removals, a split), with
    /// keys that share heads and prefixes (bytes from {0, 1, 255}, 0 to 11
    /// of them). Fails if any writer of a slot leaves a wrong head.
    #[test]
    fn searches_by_slot_heads_find_what_the_sorted_keys_give() {
        let mut rng = SplitMix(11);
        let key = |rng: &mut SplitMix| -> Vec<u8> {
            let n = rng.next() % 12;
            (0..n)
                .map(|_| [0u8, 1, 255][(rng.next() % 3) as usize])
                .collect()
        };
        let check = |b: &[u8], model: &[Vec<u8>], probes: &[Vec<u8>]| {
            let r = Raw::parse(b).unwrap();
            assert!(r.heads_match());
            for p in probes {
                let want = model.binary_search(p);
                assert_eq!(r.search(p), Some(want), "{p:?} among {model:?}");
            }
        };
        for _ in 0..300 {
            let mut model: Vec<Vec<u8>> = Vec::new();
            for _ in 0..rng.next() % 60 {
                let k = key(&mut rng);
                if let Err(i) = model.binary_search(&k) {
                    model.insert(i, k);
                }
            }
            let probes: Vec<Vec<u8>> = (0..200).map(|_| key(&mut rng)).collect();
            let ents = model
                .iter()
                .map(|k| (k.clone(), Val::Inline(vec![7; 3])))
                .collect();
            let mut b = encode_leaf(&Leaf { next: 0, ents }).unwrap();
            let seps = model.iter().map(|k| (k.clone(), 9)).collect();
            let mut ib = encode_internal(&Internal {
                first: 1,
                ents: seps,
            })
            .unwrap();
            let mut imodel = model.clone();
            check(&b, &model, &probes);
            check(&ib, &imodel, &probes);
            for _ in 0..40 {
                let k = key(&mut rng);
                match model.binary_search(&k) {
                    Ok(i) => {
                        remove_slot(&mut b, i, model.len());
                        model.remove(i);
                    }
                    Err(i) => {
                        let r = Raw::parse(&b).unwrap();
                        if let Ok(Some(spot)) = in_place_spot(&r, &k, 3) {
                            put_in_place(&mut b, spot, &k, &[1, 2, 3]);
                            model.insert(i, k.clone());
                        }
                    }
                }
                if let Err(i) = imodel.binary_search(&k)
                    && internal_put_in_place(&mut ib, i, &k, 5).unwrap()
                {
                    imodel.insert(i, k);
                }
            }
            check(&b, &model, &probes);
            check(&ib, &imodel, &probes);
            if model.len() >= 2 {
                let (mut lb, mut rb) = (vec![0u8; NODE], vec![0u8; NODE]);
                let at = split_leaf_bytes(&b, 0, &mut lb, &mut rb).unwrap();
                check(&lb, &model[..at], &probes);
                check(&rb, &model[at..], &probes);
            }
        }
    }

    /// A leaf of random entries (inline and block values, keys of 0 to 40
    /// bytes) as a tree leaves it: packed, then in-place inserts into the
    /// gap and in-place deletes (holes), and junk in the cells' zero byte.
    fn random_leaf(rng: &mut SplitMix) -> Vec<u8> {
        let mut ents: Vec<Entry> = Vec::new();
        loop {
            let key: Vec<u8> = (0..rng.next() % 41).map(|_| rng.next() as u8).collect();
            let val = if rng.next().is_multiple_of(5) {
                Val::Block {
                    at: rng.next(),
                    len: rng.next(),
                }
            } else {
                Val::Inline((0..rng.next() % 200).map(|_| rng.next() as u8).collect())
            };
            if leaf_bytes(&ents) + cell_bytes(&key, &val) + 2 > NODE / 2 {
                break;
            }
            if let Err(i) = ents.binary_search_by(|e| e.0.cmp(&key)) {
                ents.insert(i, (key, val));
            }
        }
        let mut b = encode_leaf(&Leaf {
            next: rng.next(),
            ents,
        })
        .unwrap();
        for _ in 0..rng.next() % 30 {
            let r = Raw::parse(&b).unwrap();
            let n = r.n;
            if n > 2 && rng.next().is_multiple_of(3) {
                remove_slot(&mut b, (rng.next() % n as u64) as usize, n);
                continue;
            }
            let key: Vec<u8> = (0..rng.next() % 41).map(|_| rng.next() as u8).collect();
            let value: Vec<u8> = (0..rng.next() % 200).map(|_| rng.next() as u8).collect();
            if let Ok(Some(spot)) = in_place_spot(&r, &key, value.len()) {
                put_in_place(&mut b, spot, &key, &value);
            }
        }
        let r = Raw::parse(&b).unwrap();
        let cells: Vec<usize> = (0..r.n).map(|i| r.cell(i).unwrap()).collect();
        for c in cells {
            if rng.next().is_multiple_of(4) {
                b[c + 3] = rng.next() as u8;
            }
            // A block value's cell has no inline length: junk there too.
            if b[c + 2] == 1 && rng.next().is_multiple_of(2) {
                b[c + 4] = rng.next() as u8;
            }
        }
        b
    }

    /// The split as `split_op` did it before `split_leaf_bytes`: decode,
    /// split the entries, encode both halves.
    fn split_decoded(b: &[u8], rnode: u64) -> Option<(Vec<u8>, Vec<u8>)> {
        let mut leaf = Raw::parse(b)?.to_leaf()?;
        if leaf.ents.len() < 2 {
            return None;
        }
        let at = split_point(&leaf.ents, leaf_cell);
        let right = Leaf {
            next: leaf.next,
            ents: leaf.ents.split_off(at),
        };
        leaf.next = rnode;
        Some((encode_leaf(&leaf)?, encode_leaf(&right)?))
    }

    #[test]
    fn split_leaf_bytes_writes_what_decoding_and_encoding_wrote() {
        let mut rng = SplitMix(7);
        for _ in 0..2000 {
            let b = random_leaf(&mut rng);
            let rnode = rng.next();
            let (mut lb, mut rb) = (vec![0xAAu8; NODE], vec![0x55u8; NODE]);
            let ours = split_leaf_bytes(&b, rnode, &mut lb, &mut rb);
            match split_decoded(&b, rnode) {
                Some((l, r)) => {
                    assert!(ours.is_ok());
                    assert_eq!(lb, l, "left half");
                    assert_eq!(rb, r, "right half");
                }
                None => assert!(ours.is_err()),
            }
        }
    }

    #[test]
    fn split_leaf_bytes_refuses_what_decoding_refused() {
        let mut rng = SplitMix(11);
        let b = random_leaf(&mut rng);
        let r = Raw::parse(&b).unwrap();
        let c = r.cell(r.n / 2).unwrap();
        let (mut lb, mut rb) = (vec![0u8; NODE], vec![0u8; NODE]);
        // A flags byte neither 0 nor 1: `to_leaf` fails on it.
        let mut bad = b.clone();
        bad[c + 2] = 2;
        assert!(split_decoded(&bad, 1).is_none());
        assert!(split_leaf_bytes(&bad, 1, &mut lb, &mut rb).is_err());
        // A cell running past the node.
        let mut bad = b.clone();
        put16(&mut bad, c, 4000);
        assert!(split_decoded(&bad, 1).is_none());
        assert!(split_leaf_bytes(&bad, 1, &mut lb, &mut rb).is_err());
        // One entry only.
        let one = encode_leaf(&Leaf {
            next: 0,
            ents: vec![(b"k".to_vec(), Val::Inline(b"v".to_vec()))],
        })
        .unwrap();
        assert!(split_leaf_bytes(&one, 1, &mut lb, &mut rb).is_err());
    }

    #[test]
    fn internal_put_in_place_inserts_the_separator_and_child() {
        let mut rng = SplitMix(3);
        for _ in 0..500 {
            let mut ents: Vec<(Vec<u8>, u64)> = Vec::new();
            for _ in 0..rng.next() % 120 {
                let key: Vec<u8> = (0..1 + rng.next() % 30).map(|_| rng.next() as u8).collect();
                if let Err(i) = ents.binary_search_by(|e| e.0.cmp(&key)) {
                    ents.insert(i, (key, rng.next()));
                }
            }
            let Some(mut b) = encode_internal(&Internal {
                first: rng.next(),
                ents: ents.clone(),
            }) else {
                continue;
            };
            let first = Raw::parse(&b).unwrap().link;
            // Insert until the gap is full, checking every entry each time.
            loop {
                let key: Vec<u8> = (0..1 + rng.next() % 30).map(|_| rng.next() as u8).collect();
                let Err(i) = ents.binary_search_by(|e| e.0.cmp(&key)) else {
                    continue;
                };
                let child = rng.next();
                let before = b.clone();
                if !internal_put_in_place(&mut b, i, &key, child).unwrap() {
                    assert_eq!(b, before, "a refused insert changes nothing");
                    assert!(internal_bytes(&ents) + 16 + key.len() + SLOT > NODE);
                    break;
                }
                ents.insert(i, (key, child));
                let n = Raw::parse(&b).unwrap().to_internal().unwrap();
                assert_eq!(n.ents, ents);
                assert_eq!(n.first, first);
            }
        }
    }
}
