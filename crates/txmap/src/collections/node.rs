//! Byte helpers shared by the structures: bounds-checked little-endian
//! fields in a node's bytes (a corrupt node gives `None`, never a panic),
//! and values stored inline or in a separate heap block.

use crate::Result;
use crate::View;

use super::alloc;

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
    /// Stores `bytes` inline if at most `inline_max` long, else in a new block.
    pub fn store(v: &mut View, bytes: &[u8], inline_max: usize) -> Result<Val> {
        if bytes.len() <= inline_max {
            return Ok(Val::Inline(bytes.to_vec()));
        }
        let at = alloc::alloc(v, bytes.len() as u64)?;
        v.slice_mut(at, bytes.len())?.copy_from_slice(bytes);
        Ok(Val::Block {
            at,
            len: bytes.len() as u64,
        })
    }
    /// The value's bytes.
    pub fn load(&self, v: &View) -> Result<Vec<u8>> {
        match self {
            Val::Inline(b) => Ok(b.clone()),
            Val::Block { .. } => {
                let mut out = Vec::new();
                self.with(v, &mut |b| out = b.to_vec())?;
                Ok(out)
            }
        }
    }
    /// Calls `f` with the value's bytes, borrowed from the view when the
    /// value is in a block.
    pub fn with(&self, v: &View, f: &mut dyn FnMut(&[u8])) -> Result<()> {
        match self {
            Val::Inline(b) => f(b),
            Val::Block { at, len } => {
                let have = alloc::usable_size(v, *at)?;
                if *len > have {
                    return Err(alloc::corrupt(
                        v,
                        *at,
                        format!("value of {len} bytes in a block of {have}"),
                    ));
                }
                f(v.slice(*at, *len as usize)?);
            }
        }
        Ok(())
    }
    /// Frees the value's block, if any.
    pub fn release(&self, v: &mut View) -> Result<()> {
        match self {
            Val::Inline(_) => Ok(()),
            Val::Block { at, .. } => alloc::free(v, *at),
        }
    }
    /// Checks a block value (it must be an allocated block large enough).
    pub fn check(&self, v: &View) -> Result<u64> {
        match self {
            Val::Inline(_) => Ok(0),
            Val::Block { at, len } => {
                let have = alloc::usable_size(v, *at)?;
                if *len > have {
                    return Err(alloc::corrupt(v, *at, "value longer than its block"));
                }
                Ok(1)
            }
        }
    }
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

/// Fails if `key` is longer than a map's `max` key length.
pub(crate) fn check_key(key: &[u8], max: usize) -> crate::Result<()> {
    if key.len() > max {
        return Err(alloc::invalid(format!(
            "key of {} bytes is longer than {max}",
            key.len()
        )));
    }
    Ok(())
}
