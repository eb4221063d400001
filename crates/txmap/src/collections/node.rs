//! Values stored inline or in a separate heap block: the parts of [`Val`]
//! that need a [`View`] (its byte format is in `format`), and key checks.

use crate::Result;
use crate::View;

use super::alloc;
use super::format::Val;

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
