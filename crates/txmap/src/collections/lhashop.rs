//! The linear hash's header and bucket page format and the function of
//! its commit-time blind put (`ops::LHASH_PUT`), over bytes only: no
//! `View`, no `ops`, so the commit (and the log's replay) runs it without
//! importing the table. The layout is described in `lhash`.

use super::arrayop::offset_u64_in;
use super::format::{
    BLOCK_HEADER, PAGE, Val, cell_at, invalid, put_cell, put_inline_cell, put16, put64, u16_at,
    u32_at, u64_at,
};
use crate::error::{Error, Result};
use crate::opmem::OpMemory;

pub(super) const MAGIC: u64 = u64::from_le_bytes(*b"TXMLHSH1");
pub(super) const BUCKET: usize = (PAGE - BLOCK_HEADER) as usize;
pub(super) const H_MAGIC: u64 = 0;
pub(super) const H_N0: u64 = 8;
pub(super) const H_LEVEL: u64 = 16;
pub(super) const H_SPLIT: u64 = 24;
pub(super) const H_DIR: u64 = 32;
pub(super) const PAGE_HDR: usize = 16;

pub(super) type Entry = (Vec<u8>, Val);

/// The table's hash: FNV-1a, then a 64-bit finaliser (stable: it is on disk).
pub fn hash(key: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in key {
        h ^= b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

/// The bucket of hash `h` in a table of (initial buckets, level, split
/// pointer) `m`.
pub(super) fn bucket_of(m: (u64, u64, u64), h: u64) -> u64 {
    let (n0, level, split) = m;
    let b = h % (n0 << level);
    if b < split {
        h % (n0 << (level + 1))
    } else {
        b
    }
}

/// A bucket page: its entries, the next overflow page, and the bucket's depth.
pub(super) fn parse_page(b: &[u8]) -> Option<(Vec<Entry>, u64, u16)> {
    let n = u16_at(b, 0)? as usize;
    let depth = u16_at(b, 2)?;
    let next = u64_at(b, 8)?;
    let mut at = PAGE_HDR;
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let (key, val, end) = cell_at(b, at)?;
        out.push((key.to_vec(), val));
        at = end;
    }
    Some((out, next, depth))
}

/// A bucket page read in place, for one key: where that key's cell is
/// (its offset and the offset after it), where the last cell starts and
/// where the page's cells end, the page's count and its next overflow page.
/// No copies.
pub(super) struct PageScan {
    pub(super) found: Option<(usize, usize)>,
    pub(super) last: usize,
    pub(super) end: usize,
    pub(super) count: u16,
    pub(super) next: u64,
}

pub(super) fn scan_page(b: &[u8], key: &[u8]) -> Option<PageScan> {
    let count = u16_at(b, 0)?;
    let next = u64_at(b, 8)?;
    let mut at = PAGE_HDR;
    let mut last = PAGE_HDR;
    let mut found = None;
    // A key's first eight bytes as one word: most cells differ there, and
    // comparing a word is cheaper than a call to compare bytes (a bucket
    // page holds up to ~170 cells, and a put scans them all).
    let head = key
        .get(..8)
        .map(|h| u64::from_le_bytes(h.try_into().unwrap_or_default()));
    for _ in 0..count {
        last = at;
        let klen = u16_at(b, at)? as usize;
        let vo = at + 8 + klen;
        let end = match b.get(at + 2)? {
            0 => vo + u32_at(b, at + 4)? as usize,
            _ => vo + 16,
        };
        if end > b.len() {
            return None;
        }
        if found.is_none()
            && klen == key.len()
            && head.is_none_or(|h| u64_at(b, at + 8) == Some(h))
            && b[at + 8..vo] == *key
        {
            found = Some((at, end));
        }
        at = end;
    }
    Some(PageScan {
        found,
        last,
        end: at,
        count,
        next,
    })
}

pub(super) fn encode_page(ents: &[Entry], next: u64, depth: u16) -> Vec<u8> {
    let mut b = vec![0u8; BUCKET];
    put16(&mut b, 0, ents.len() as u16);
    put16(&mut b, 2, depth);
    put64(&mut b, 8, next);
    let mut at = PAGE_HDR;
    for (k, val) in ents {
        at = put_cell(&mut b, at, k, val);
    }
    b
}

/// Built-in operation [`crate::ops::LHASH_PUT`], a commit-time blind put
/// (`LinearHash::put_blind`). Arguments: the table's header offset u64,
/// key length u16, key, value (the rest, inline). Finds the key's bucket
/// from the header and directory as they are, then puts as
/// `put_in_place` does; `Err(Error::Conflict)`, changing nothing, when
/// that does not apply (the chain must be rewritten).
pub(crate) fn put_op(mem: &mut dyn OpMemory, args: &[u8]) -> Result<()> {
    let (at, key, value) = super::leaf::parse_kv_args(args, "linear hash blind put")?;
    let mut h = [0u8; 40];
    mem.read(at, &mut h)?;
    let field = |f: u64| u64_at(&h, f as usize).unwrap_or(0);
    let m = (field(H_N0), field(H_LEVEL), field(H_SPLIT));
    if field(H_MAGIC) != MAGIC || m.0 == 0 || !m.0.is_power_of_two() || m.1 > 40 {
        return Err(invalid(format!("no linear hash header at offset {at}")));
    }
    let bucket = bucket_of(m, hash(key));
    let slot = offset_u64_in(field(H_DIR), mem, bucket)?;
    let first = mem.read_u64(slot)?;
    let need = 8 + key.len() + value.len();
    let (mut p, mut hops, mut room) = (first, 0u64, None);
    while p != 0 {
        // The page is scanned where it lies: the operation runs two or
        // three times per commit (in the transaction, ahead of the commit
        // lock, under it) and writes a few of its bytes.
        let b = mem.borrow(p, BUCKET)?;
        let s = scan_page(&b, key)
            .ok_or_else(|| invalid(format!("malformed bucket page at offset {p}")))?;
        if let Some((c, end)) = s.found {
            if b[c + 2] == 0 && u32_at(&b, c + 4) == Some(value.len() as u32) {
                drop(b);
                return mem.write(p + (end - value.len()) as u64, value);
            }
            return Err(Error::Conflict);
        }
        if room.is_none() && s.end + need <= BUCKET {
            room = Some((p, s.end, s.count));
        }
        p = s.next;
        hops += 1;
        if hops > mem.size() / PAGE {
            return Err(invalid(format!("bucket chain at {first} has a cycle")));
        }
    }
    let Some((p, end, count)) = room else {
        return Err(Error::Conflict);
    };
    let mut cell = vec![0u8; need];
    put_inline_cell(&mut cell, 0, key, value);
    mem.write(p + end as u64, &cell)?;
    mem.write(p, &(count + 1).to_le_bytes())
}
