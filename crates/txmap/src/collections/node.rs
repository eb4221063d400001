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
            Val::Block { at, len } => {
                let have = alloc::usable_size(v, *at)?;
                if *len > have {
                    return Err(alloc::corrupt(
                        v,
                        *at,
                        format!("value of {len} bytes in a block of {have}"),
                    ));
                }
                Ok(v.slice(*at, *len as usize)?.to_vec())
            }
        }
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
