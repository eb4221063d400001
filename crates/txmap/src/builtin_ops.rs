//! txmap's own registered operations (ids below `ops::FIRST_USER_OP`): the
//! commutative updates of one aligned 8-byte word. Arguments: the word's
//! region offset (u64, a multiple of 8) and the operand (8 bytes), both
//! little-endian.

use crate::error::{Error, Result};
use crate::ops::{OpMemory, Operation};

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

/// Marks a commit as a nested top action (`View::nested_top`): arguments
/// are the enclosing transaction's token (u64), the action's index in it
/// (u32), the undo operation's id (u32) and its arguments. Changes nothing.
pub const NTA_UNDO: u32 = 16;
/// Marks nested top actions finished: the enclosing transaction's token
/// (u64) and an action's index (u32), or `u32::MAX` for all of them (the
/// enclosing transaction committed). Changes nothing.
pub const NTA_DONE: u32 = 17;

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

/// The built-in operation with id `id`, if there is one.
pub(crate) fn get(id: u32) -> Option<Operation> {
    let (name, apply): (&'static str, crate::ops::OpFn) = match id {
        ADD_U64 => ("add u64", add),
        ADD_I64 => ("add i64", add),
        MIN_U64 => ("min u64", min_u),
        MAX_U64 => ("max u64", max_u),
        MIN_I64 => ("min i64", min_i),
        MAX_I64 => ("max i64", max_i),
        NTA_UNDO => ("nested top action", marker),
        NTA_DONE => ("nested top actions done", marker),
        _ => return None,
    };
    Some(Operation { name, apply })
}

/// Whether built-in `id` commutes with itself on one word (so it may be
/// applied at commit to the newest committed value).
pub(crate) fn is_commutative(id: u32) -> bool {
    (ADD_U64..=MAX_I64).contains(&id)
}
