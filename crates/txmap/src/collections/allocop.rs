//! The heap's block and arena header layout and allocation inside a
//! commit-time operation (`alloc_op`, which `ops::COBTREE_PUT` runs), over
//! bytes only: no `View`, no `ops`, so the commit (and the log's replay)
//! runs it without importing the heap. The layout is described in `alloc`.

use super::format::{BLOCK_HEADER, PAGE, invalid};
use crate::error::{Error, Result};
use crate::opmem::OpMemory;

/// Number of arenas (each has its own header page).
pub const ARENAS: u64 = 8;
/// Size classes: class k holds blocks of `32 << k` bytes.
pub const CLASSES: usize = 41;
/// Largest allocation.
pub const MAX_ALLOC: u64 = (32u64 << (CLASSES - 1)) - BLOCK_HEADER;

pub(super) const ARENA_MAGIC: u64 = u64::from_le_bytes(*b"TXMARNA1");
pub(super) const BLOCK_MAGIC: u64 = 0xB10C;
pub(super) const STATE_USED: u64 = 1;
pub(super) const STATE_FREE: u64 = 2;

pub(super) const ARENA0: u64 = 2 * PAGE;
/// First byte of the heap.
pub const HEAP_START: u64 = (2 + ARENAS) * PAGE;

// Arena header fields.
pub(super) const A_MAGIC: u64 = 0;
pub(super) const A_CUR: u64 = 8;
pub(super) const A_END: u64 = 16;
pub(super) const A_USED_BLOCKS: u64 = 24;
pub(super) const A_USED_BYTES: u64 = 32;
pub(super) const A_HEADS: u64 = 64;

pub(super) fn arena_off(a: u64) -> u64 {
    ARENA0 + a * PAGE
}

pub(super) fn block_size(class: u64) -> u64 {
    32 << class
}

/// A block header's tagged word.
pub(super) fn meta(class: u64, state: u64, arena: u64) -> u64 {
    BLOCK_MAGIC << 48 | arena << 24 | state << 16 | class
}

pub(super) fn class_for(size: u64) -> Result<u64> {
    if size > MAX_ALLOC {
        return Err(invalid(format!(
            "allocation of {size} bytes is larger than {MAX_ALLOC}"
        )));
    }
    let need = (size + BLOCK_HEADER).max(32);
    Ok(need.next_power_of_two().trailing_zeros() as u64 - 5)
}

/// `alloc::alloc_in` inside a commit-time operation (`View::apply_blind`), over
/// `mem`: the block comes from arena `a`'s free list or its bump range as
/// they are in `mem`. `Err(Error::Conflict)`, changing nothing, where
/// `alloc_in` would carve or take a new chunk (then the caller allocates
/// the ordinary way). Deterministic, so replay allocates the same block.
pub(super) fn alloc_op(mem: &mut dyn OpMemory, size: u64, a: u64) -> Result<u64> {
    let class = class_for(size)?;
    let ao = arena_off(a % ARENAS);
    let bad = |at: u64, what: &str| invalid(format!("heap at offset {at}: {what}"));
    if mem.read_u64(ao + A_MAGIC)? != ARENA_MAGIC {
        return Err(bad(ao, "bad arena magic"));
    }
    let head_at = ao + A_HEADS + class * 8;
    let head = mem.read_u64(head_at)?;
    let bs = block_size(class);
    let block = if head != 0 {
        let m = mem.read_u64(head + 8)?;
        if head < HEAP_START
            || !head.is_multiple_of(32)
            || m >> 48 != BLOCK_MAGIC
            || m & 0xffff != class
            || (m >> 16) & 0xff != STATE_FREE
        {
            return Err(bad(
                head,
                "free list holds a block that is not free or of another class",
            ));
        }
        let next = mem.read_u64(head)?;
        mem.write_u64(head_at, next)?;
        head
    } else {
        let (cur, end) = (mem.read_u64(ao + A_CUR)?, mem.read_u64(ao + A_END)?);
        if !cur.is_multiple_of(bs.min(PAGE)) || cur + bs > end {
            return Err(Error::Conflict);
        }
        mem.write_u64(ao + A_CUR, cur + bs)?;
        cur
    };
    mem.write_u64(block, 0)?;
    mem.write_u64(block + 8, meta(class, STATE_USED, a % ARENAS))?;
    let n = mem.read_u64(ao + A_USED_BLOCKS)?;
    // Counts may be below zero (wrapped), as in `alloc::alloc`.
    mem.write_u64(ao + A_USED_BLOCKS, n.wrapping_add(1))?;
    let b = mem.read_u64(ao + A_USED_BYTES)?;
    mem.write_u64(ao + A_USED_BYTES, b.wrapping_add(bs))?;
    Ok(block + BLOCK_HEADER)
}
