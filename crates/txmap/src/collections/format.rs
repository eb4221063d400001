//! Byte formats of the collections' nodes, below the structures and the
//! log's replay: bounds-checked little-endian fields in a node's bytes (a
//! corrupt node gives `None`, never a panic) and the entry cells of values
//! stored inline or in a heap block. Imports no `View` and no `ops`, so the
//! operation functions built on it (`leaf`, `segment`, `arrayop`,
//! `allocop`, `lhashop`, `cobtreeop`) sit below both.

use crate::error::Error;

/// Bytes of a heap page.
pub const PAGE: u64 = 4096;
/// Bytes before the user's part of a block.
pub const BLOCK_HEADER: u64 = 16;

/// `Error::Invalid`: bad arguments, or an operation's malformed input.
pub(crate) fn invalid(what: impl Into<String>) -> Error {
    Error::Invalid(what.into())
}

pub(crate) fn u16_at(b: &[u8], o: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(o..o + 2)?.try_into().ok()?))
}
pub(crate) fn u32_at(b: &[u8], o: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(o..o + 4)?.try_into().ok()?))
}
pub(crate) fn u64_at(b: &[u8], o: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(o..o + 8)?.try_into().ok()?))
}
pub(crate) fn put16(b: &mut [u8], o: usize, x: u16) {
    b[o..o + 2].copy_from_slice(&x.to_le_bytes());
}
pub(crate) fn put32(b: &mut [u8], o: usize, x: u32) {
    b[o..o + 4].copy_from_slice(&x.to_le_bytes());
}
pub(crate) fn put64(b: &mut [u8], o: usize, x: u64) {
    b[o..o + 8].copy_from_slice(&x.to_le_bytes());
}

/// A value: inline bytes, or a heap block holding `len` bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Val {
    Inline(Vec<u8>),
    Block { at: u64, len: u64 },
}

impl Val {
    /// Bytes it takes in a node: inline bytes, or 16 (offset and length).
    pub fn node_bytes(&self) -> usize {
        match self {
            Val::Inline(b) => b.len(),
            Val::Block { .. } => 16,
        }
    }
}

/// Bytes of an entry cell (see [`put_cell`]).
pub(crate) fn cell_bytes(key: &[u8], val: &Val) -> usize {
    8 + key.len() + val.node_bytes()
}

/// Writes an entry cell at `at`, as the B+-tree's leaves and the hash
/// table's buckets store them: key length u16, flags u8 (1 = value in a
/// block), 0, inline value length u32, the key, then the value or (block
/// offset u64, value length u64). Returns the offset after it. The caller
/// has checked that it fits.
pub(crate) fn put_cell(b: &mut [u8], at: usize, key: &[u8], val: &Val) -> usize {
    put16(b, at, key.len() as u16);
    b[at + 8..at + 8 + key.len()].copy_from_slice(key);
    let vo = at + 8 + key.len();
    match val {
        Val::Inline(x) => {
            put32(b, at + 4, x.len() as u32);
            b[vo..vo + x.len()].copy_from_slice(x);
        }
        Val::Block { at: o, len } => {
            b[at + 2] = 1;
            put64(b, vo, *o);
            put64(b, vo + 8, *len);
        }
    }
    vo + val.node_bytes()
}

/// Writes an entry cell with an inline value at `at`, clearing its flags
/// (the space may hold old bytes, unlike a fresh node).
pub(crate) fn put_inline_cell(b: &mut [u8], at: usize, key: &[u8], value: &[u8]) {
    b[at + 2] = 0;
    b[at + 3] = 0;
    put16(b, at, key.len() as u16);
    put32(b, at + 4, value.len() as u32);
    let vo = at + 8 + key.len();
    b[at + 8..vo].copy_from_slice(key);
    b[vo..vo + value.len()].copy_from_slice(value);
}

/// The value bytes of the cell at `at` if it is stored inline.
pub(crate) fn inline_at(b: &[u8], at: usize) -> Option<&[u8]> {
    if *b.get(at + 2)? != 0 {
        return None;
    }
    let vo = at + 8 + u16_at(b, at)? as usize;
    b.get(vo..vo + u32_at(b, at + 4)? as usize)
}

/// The offset after the entry cell at `at` (without copying its value);
/// `None` if it does not fit in `b`.
pub(crate) fn cell_end(b: &[u8], at: usize) -> Option<usize> {
    let vo = at + 8 + u16_at(b, at)? as usize;
    let end = if *b.get(at + 2)? == 1 {
        vo + 16
    } else {
        vo + u32_at(b, at + 4)? as usize
    };
    (end <= b.len()).then_some(end)
}

/// The entry cell at `at`: its key, value and the offset after it; `None`
/// if it does not fit in `b`.
pub(crate) fn cell_at(b: &[u8], at: usize) -> Option<(&[u8], Val, usize)> {
    let klen = u16_at(b, at)? as usize;
    let key = b.get(at + 8..at + 8 + klen)?;
    let vo = at + 8 + klen;
    if *b.get(at + 2)? == 1 {
        let val = Val::Block {
            at: u64_at(b, vo)?,
            len: u64_at(b, vo + 8)?,
        };
        Some((key, val, vo + 16))
    } else {
        let x = inline_at(b, at)?;
        Some((key, Val::Inline(x.to_vec()), vo + x.len()))
    }
}
