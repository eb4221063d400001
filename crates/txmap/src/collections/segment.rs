//! The CO B-tree's segment format and the replay function of its logged
//! slot operations (`COBTREE_INSERT`, `COBTREE_REMOVE`), over bytes only:
//! no `View`, no `ops`, so the log's replay runs it without importing the
//! tree. The layout is described in `cobtree`.

use super::format::{BLOCK_HEADER, PAGE, invalid};
use crate::error::Result;
use crate::opmem::OpMemory;

/// Slots per segment.
pub const SEG: u64 = (PAGE - BLOCK_HEADER) / 16;
pub(super) const SEG_BYTES: u64 = SEG * 16;

/// Built-in operations [`crate::ops::COBTREE_INSERT`] (arguments: segment
/// offset u64, slot index u32, key prefix u64, record offset u64) and
/// [`crate::ops::COBTREE_REMOVE`] (segment offset u64, slot index u32):
/// shift the segment's slots from the index one up (down) and store the new
/// slot. A segment is packed to the left, so its count is its first empty
/// slot's index.
pub(crate) fn slot_op(mem: &mut dyn OpMemory, args: &[u8]) -> Result<()> {
    let bad = |what: &str| invalid(format!("CO B-tree slot operation: {what}"));
    let insert = match args.len() {
        28 => true,
        12 => false,
        n => return Err(bad(&format!("12 or 28 argument bytes expected, got {n}"))),
    };
    let seg = u64::from_le_bytes(args[..8].try_into().expect("8 bytes"));
    let i = u32::from_le_bytes(args[8..12].try_into().expect("4 bytes")) as usize;
    let mut b = vec![0u8; SEG_BYTES as usize];
    mem.read(seg, &mut b)?;
    let count = slot_count(&b);
    let end = if insert {
        if i > count || count == SEG as usize {
            return Err(bad(&format!(
                "insert at slot {i} of {count} in segment {seg}"
            )));
        }
        b.copy_within(16 * i..16 * count, 16 * i + 16);
        b[16 * i..16 * i + 16].copy_from_slice(&args[12..]);
        count + 1
    } else {
        if i >= count {
            return Err(bad(&format!("remove slot {i} of {count} in segment {seg}")));
        }
        b.copy_within(16 * i + 16..16 * count, 16 * i);
        b[16 * count - 16..16 * count].fill(0);
        count
    };
    mem.write(seg + 16 * i as u64, &b[16 * i..16 * end])
}

/// Used slots of segment bytes `b` (packed to the left: the index of the
/// first empty slot).
pub(super) fn slot_count(b: &[u8]) -> usize {
    b.chunks_exact(16)
        .position(|c| c[8..] == [0u8; 8])
        .unwrap_or(SEG as usize)
}

/// [`slot_op`]'s arguments for inserting (`prefix`, `rec`) at slot `i`.
pub(super) fn insert_args(seg: u64, i: usize, prefix: u64, rec: u64) -> Vec<u8> {
    let mut a = seg.to_le_bytes().to_vec();
    a.extend_from_slice(&(i as u32).to_le_bytes());
    a.extend_from_slice(&prefix.to_le_bytes());
    a.extend_from_slice(&rec.to_le_bytes());
    a
}
