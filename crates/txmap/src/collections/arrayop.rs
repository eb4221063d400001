//! The array list's header layout, the function of its commutative append
//! (`ops::ARRAY_APPEND`) and the element lookup of other operations, over
//! bytes only: no `View`, no `ops`, so the commit (and the log's replay)
//! runs them without importing the array. The layout is described in
//! `array`.

use super::format::{BLOCK_HEADER, PAGE, invalid};
use crate::error::{Error, Result};
use crate::opmem::OpMemory;

pub(super) const MAGIC: u64 = u64::from_le_bytes(*b"TXMARRY1");
pub(super) const A_MAGIC: u64 = 0;
pub(super) const A_ELEM: u64 = 8;
pub(super) const A_LEN: u64 = 16;
pub(super) const A_FIRST: u64 = 24;
pub(super) const A_SEGS: u64 = 64;
pub(super) const SEGMENTS: u64 = 48;
/// Bytes of the header block.
pub(super) const HEADER: u64 = PAGE - BLOCK_HEADER;
/// Largest element.
pub const MAX_ELEM: u64 = 1 << 20;

/// (segment, index inside it) of element `i` when segment 0 holds `b`.
pub(super) fn locate(b: u64, i: u64) -> (u64, u64) {
    if i < b {
        return (0, i);
    }
    let k = 64 - (i / b).leading_zeros() as u64; // i/b in [2^(k-1), 2^k)
    (k, i - (b << (k - 1)))
}

pub(super) fn seg_len(b: u64, k: u64) -> u64 {
    if k == 0 { b } else { b << (k - 1) }
}

/// The offset of element `i` of the array of 8-byte elements at `at`,
/// read through `mem` (a commit-time operation's memory), as
/// `ArrayList::offset` finds it.
pub(super) fn offset_u64_in(at: u64, mem: &mut dyn OpMemory, i: u64) -> Result<u64> {
    let mut h = [0u8; 32];
    mem.read(at, &mut h)?;
    let field =
        |f: u64| u64::from_le_bytes(h[f as usize..f as usize + 8].try_into().unwrap_or_default());
    let (e, len, b) = (field(A_ELEM), field(A_LEN), field(A_FIRST));
    if field(A_MAGIC) != MAGIC || e != 8 || b != HEADER / 8 {
        return Err(invalid(format!(
            "no array of 8-byte elements at offset {at}"
        )));
    }
    if i >= len {
        return Err(invalid(format!("index {i} out of bounds (length {len})")));
    }
    let (k, j) = locate(b, i);
    let seg = mem.read_u64(at + A_SEGS + 8 * k)?;
    if seg == 0 {
        return Err(invalid(format!("array at {at}: segment {k} missing")));
    }
    Ok(seg + j * e)
}

/// Built-in operation [`crate::ops::ARRAY_APPEND`]; arguments: the array's
/// header offset u64, then the element's bytes. Stores the element at the
/// array's current length and raises the length by one. Writes nothing
/// when it fails: `Error::Conflict` when the element's segment is not
/// allocated (the appending transaction grows the array itself, and a
/// commit that finds it full is retried), `Error::Invalid` for a header
/// that is not an array's or an element of the wrong size.
pub(crate) fn append_op(mem: &mut dyn OpMemory, args: &[u8]) -> Result<()> {
    let bad = |what: String| invalid(format!("array append: {what}"));
    if args.len() < 8 {
        return Err(bad(format!(
            "at least 8 argument bytes expected, got {}",
            args.len()
        )));
    }
    let at = u64::from_le_bytes(args[..8].try_into().expect("8 bytes"));
    let elem = &args[8..];
    let mut h = [0u8; 32];
    mem.read(at, &mut h)?;
    let field = |o: u64| u64::from_le_bytes(h[o as usize..][..8].try_into().expect("8 bytes"));
    let (e, len, b) = (field(A_ELEM), field(A_LEN), field(A_FIRST));
    if field(A_MAGIC) != MAGIC || e == 0 || e > MAX_ELEM || b != (HEADER / e).max(1) {
        return Err(bad(format!("no array header at offset {at}")));
    }
    if elem.len() as u64 != e {
        return Err(bad(format!(
            "the element is {} bytes, the array's are {e}",
            elem.len()
        )));
    }
    let (k, j) = locate(b, len);
    if k >= SEGMENTS {
        return Err(bad("the array is full".into()));
    }
    let seg = mem.read_u64(at + A_SEGS + 8 * k)?;
    if seg == 0 {
        return Err(Error::Conflict);
    }
    mem.write(seg + j * e, elem)?;
    mem.write_u64(at + A_LEN, len + 1)
}

#[cfg(test)]
mod tests {
    use super::locate;

    #[test]
    fn locate_walks_doubling_segments() {
        let b = 3;
        let mut want = Vec::new();
        for k in 0..6u64 {
            let n = if k == 0 { b } else { b << (k - 1) };
            for j in 0..n {
                want.push((k, j));
            }
        }
        let got: Vec<_> = (0..want.len() as u64).map(|i| locate(b, i)).collect();
        assert_eq!(got, want);
    }
}
