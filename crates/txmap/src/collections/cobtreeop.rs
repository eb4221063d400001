//! The CO B-tree's header and index format and the function of its
//! commit-time blind put (`ops::COBTREE_PUT`), over bytes only: no `View`,
//! no `ops`, so the commit (and the log's replay) runs it without
//! importing the tree. The layout is described in `cobtree`.

use std::cmp::Ordering;

use super::allocop::alloc_op;
use super::format::invalid;
use super::segment::{SEG, SEG_BYTES, insert_args, slot_count, slot_op};
use crate::error::{Error, Result};
use crate::opmem::OpMemory;

pub(super) const MAGIC: u64 = u64::from_le_bytes(*b"TXMCOBT1");
pub(super) const NODE: u64 = 24;
/// Longest key.
pub const MAX_KEY: usize = 512;
pub(super) const H_MAGIC: u64 = 0;
pub(super) const H_SEGS: u64 = 8;
pub(super) const H_INDEX: u64 = 16;
pub(super) const H_LEVELS: u64 = 24;

/// Whether a header's segment count `n` and tree levels agree.
pub(super) fn header_ok(n: u64, levels: u64) -> bool {
    n != 0 && n.is_power_of_two() && n <= 1 << 40 && levels == n.trailing_zeros() as u64 + 1
}

/// Position in van Emde Boas order of node `i` (1-based breadth-first) of a
/// complete binary tree with `h` levels.
pub fn veb_pos(i: u64, h: u32) -> u64 {
    if h <= 1 {
        return 0;
    }
    let depth = 63 - i.leading_zeros();
    let top = h / 2;
    let bot = h - top;
    if depth < top {
        return veb_pos(i, top);
    }
    let d = depth - top;
    let subtree = (i >> d) - (1 << top);
    let local = (1 << d) | (i & ((1 << d) - 1));
    ((1 << top) - 1) + subtree * ((1 << bot) - 1) + veb_pos(local, bot)
}

pub(super) fn prefix(key: &[u8]) -> u64 {
    let mut b = [0u8; 8];
    let n = key.len().min(8);
    b[..n].copy_from_slice(&key[..n]);
    u64::from_be_bytes(b)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub(super) struct Slot {
    pub(super) prefix: u64,
    pub(super) rec: u64,
}

/// Built-in operation [`crate::ops::COBTREE_PUT`], a commit-time blind
/// put (`CoBTree::put_blind`). Arguments: the tree's header offset u64,
/// arena u32, key length u16, key, value (the rest). Routes the key
/// through the index as it is, allocates its record from the arena
/// (`alloc_op`), inserts its slot into the segment and fixes the
/// index minimum as `CoBTree::put` does. `Err(Error::Conflict)`, changing
/// nothing, if the key is present or its segment is full, or the arena
/// must take a chunk (the caller then puts the ordinary way).
pub(crate) fn put_op(mem: &mut dyn OpMemory, args: &[u8]) -> Result<()> {
    let bad = |what: String| invalid(format!("CO B-tree blind put: {what}"));
    if args.len() < 14 {
        return Err(bad(format!("malformed arguments ({} bytes)", args.len())));
    }
    let at = u64::from_le_bytes(args[..8].try_into().expect("8 bytes"));
    let arena = u32::from_le_bytes(args[8..12].try_into().expect("4 bytes")) as u64;
    let klen = u16::from_le_bytes(args[12..14].try_into().expect("2 bytes")) as usize;
    let (key, value) = match args.get(14..14 + klen) {
        Some(k) if klen <= MAX_KEY => (k, &args[14 + klen..]),
        _ => return Err(bad(format!("malformed arguments ({} bytes)", args.len()))),
    };
    let mut h = [0u8; 32];
    mem.read(at, &mut h)?;
    let field = |f: u64| u64::from_le_bytes(h[f as usize..f as usize + 8].try_into().expect("8"));
    let (n, index, levels) = (field(H_SEGS), field(H_INDEX), field(H_LEVELS));
    if field(H_MAGIC) != MAGIC || !header_ok(n, levels) {
        return Err(bad(format!("no CO B-tree header at offset {at}")));
    }
    let levels = levels as u32;
    let node_at = |i: u64| index + veb_pos(i, levels) * NODE;
    let slot_at = |mem: &mut dyn OpMemory, o: u64| -> Result<Slot> {
        Ok(Slot {
            prefix: mem.read_u64(o)?,
            rec: mem.read_u64(o + 8)?,
        })
    };
    let cmp = |mem: &mut dyn OpMemory, s: Slot| -> Result<Ordering> {
        match prefix(key).cmp(&s.prefix) {
            Ordering::Equal => {
                let kl = mem.read_u64(s.rec)? as u32 as usize;
                if kl > MAX_KEY {
                    return Err(bad(format!("record at {} has a key too long", s.rec)));
                }
                let mut k = vec![0u8; kl];
                mem.read(s.rec + 12, &mut k)?;
                Ok(key.cmp(&k[..]))
            }
            o => Ok(o),
        }
    };
    let mut i = 1;
    while i < n {
        let r = slot_at(mem, node_at(2 * i + 1))?;
        i = if r.rec != 0 && cmp(mem, r)? != Ordering::Less {
            2 * i + 1
        } else {
            2 * i
        };
    }
    let seg = mem.read_u64(node_at(i) + 16)?;
    if seg == 0 {
        return Err(bad(format!("segment {} missing", i - n)));
    }
    let mut b = vec![0u8; SEG_BYTES as usize];
    mem.read(seg, &mut b)?;
    let count = slot_count(&b);
    if count as u64 >= SEG {
        return Err(Error::Conflict);
    }
    let slot = |j: usize| Slot {
        prefix: u64::from_le_bytes(b[16 * j..16 * j + 8].try_into().expect("8")),
        rec: u64::from_le_bytes(b[16 * j + 8..16 * j + 16].try_into().expect("8")),
    };
    let (mut lo, mut hi) = (0, count);
    while lo < hi {
        let mid = (lo + hi) / 2;
        match cmp(mem, slot(mid))? {
            Ordering::Greater => lo = mid + 1,
            Ordering::Less => hi = mid,
            Ordering::Equal => return Err(Error::Conflict),
        }
    }
    let rec = alloc_op(mem, 12 + key.len() as u64 + value.len() as u64, arena)?;
    let mut r = Vec::with_capacity(12 + key.len() + value.len());
    r.extend_from_slice(&(key.len() as u32).to_le_bytes());
    r.extend_from_slice(&(value.len() as u64).to_le_bytes());
    r.extend_from_slice(key);
    r.extend_from_slice(value);
    mem.write(rec, &r)?;
    let new = Slot {
        prefix: prefix(key),
        rec,
    };
    slot_op(mem, &insert_args(seg, lo, new.prefix, new.rec))?;
    if lo > 0 {
        return Ok(());
    }
    // The segment's minimum changed: as `CoBTree::fix_min`.
    let set = |mem: &mut dyn OpMemory, i: u64, s: Slot| -> Result<()> {
        mem.write_u64(node_at(i), s.prefix)?;
        mem.write_u64(node_at(i) + 8, s.rec)
    };
    if slot_at(mem, node_at(i))? == new {
        return Ok(());
    }
    set(mem, i, new)?;
    while i > 1 {
        i /= 2;
        let l = slot_at(mem, node_at(2 * i))?;
        let r = slot_at(mem, node_at(2 * i + 1))?;
        let s = if l.rec != 0 { l } else { r };
        if slot_at(mem, node_at(i))? == s {
            break;
        }
        set(mem, i, s)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::veb_pos;

    /// Reference: lay out a tree of `h` levels recursively and list BFS indices in order.
    fn layout(root: u64, h: u32, out: &mut Vec<u64>) {
        if h == 1 {
            out.push(root);
            return;
        }
        let top = h / 2;
        let bot = h - top;
        layout(root, top, out);
        // Bottom trees hang below the top tree's leaves, left to right.
        let first = root << top;
        for k in 0..(1u64 << top) {
            layout(first + k, bot, out);
        }
    }

    #[test]
    fn veb_positions_match_the_recursive_layout() {
        for h in 1..=9 {
            let mut order = Vec::new();
            layout(1, h, &mut order);
            assert_eq!(order.len() as u64, (1 << h) - 1);
            for (pos, &i) in order.iter().enumerate() {
                assert_eq!(veb_pos(i, h), pos as u64, "h {h} node {i}");
            }
        }
        // Height 4 by hand: top is nodes 1,2,3; bottoms 4,8,9 / 5,10,11 / 6,12,13 / 7,14,15.
        let mut o = Vec::new();
        layout(1, 4, &mut o);
        assert_eq!(o, vec![1, 2, 3, 4, 8, 9, 5, 10, 11, 6, 12, 13, 7, 14, 15]);
    }
}
