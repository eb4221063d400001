//! A growable array of fixed-size elements (Lemon's ArrayList): segments
//! that double in size, so growing never copies and an index is found with
//! one shift.
//!
//! Header (a heap block alone on its page):
//! ```text
//! 0 magic  8 element size  16 length  24 first-segment elements B
//! 64 segment offsets [48]: segment 0 holds B elements, segment k >= 1 holds B << (k-1)
//! ```
//! Elements past the length are zero (pop zeroes the element).

use super::alloc::{self, corrupt, invalid};
pub use super::arrayop::MAX_ELEM;
use super::arrayop::{
    A_ELEM, A_FIRST, A_LEN, A_MAGIC, A_SEGS, HEADER, MAGIC, SEGMENTS, locate, seg_len,
};
use crate::{Pod, Result, View};

/// A growable array in a region, named by the offset of its header block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ArrayList {
    pub at: u64,
}

/// What [`ArrayList::check`] found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ArrayReport {
    pub len: u64,
    pub elem_size: u64,
    pub segments: u64,
    pub capacity: u64,
}

impl ArrayList {
    /// Creates an empty array of `elem_size`-byte elements.
    pub fn create(v: &mut View, elem_size: u64) -> Result<ArrayList> {
        if elem_size == 0 || elem_size > MAX_ELEM {
            return Err(invalid(format!(
                "element size must be 1..={MAX_ELEM} bytes"
            )));
        }
        let at = alloc::alloc(v, HEADER)?;
        v.write(at + A_MAGIC, &MAGIC)?;
        v.write(at + A_ELEM, &elem_size)?;
        v.write(at + A_FIRST, &(HEADER / elem_size).max(1))?;
        Ok(ArrayList { at })
    }

    pub fn open(v: &View, at: u64) -> Result<ArrayList> {
        let a = ArrayList { at };
        a.meta(v)?;
        Ok(a)
    }

    /// (element size, length, first-segment elements).
    fn meta(&self, v: &View) -> Result<(u64, u64, u64)> {
        if v.read::<u64>(self.at + A_MAGIC)? != MAGIC {
            return Err(corrupt(v, self.at, "not an array header"));
        }
        let e: u64 = v.read(self.at + A_ELEM)?;
        let len: u64 = v.read(self.at + A_LEN)?;
        let b: u64 = v.read(self.at + A_FIRST)?;
        if e == 0 || e > MAX_ELEM || b != (HEADER / e).max(1) {
            return Err(corrupt(v, self.at, "bad array element size"));
        }
        if len > b << (SEGMENTS - 1) {
            return Err(corrupt(v, self.at, "array length beyond its segments"));
        }
        Ok((e, len, b))
    }

    pub fn len(&self, v: &View) -> Result<u64> {
        Ok(self.meta(v)?.1)
    }

    pub fn is_empty(&self, v: &View) -> Result<bool> {
        Ok(self.len(v)? == 0)
    }

    pub fn elem_size(&self, v: &View) -> Result<u64> {
        Ok(self.meta(v)?.0)
    }

    /// Offset of element `i` (which must be below the length).
    pub fn offset(&self, v: &View, i: u64) -> Result<u64> {
        let (e, len, b) = self.meta(v)?;
        if i >= len {
            return Err(invalid(format!("index {i} out of bounds (length {len})")));
        }
        let (k, j) = locate(b, i);
        let seg: u64 = v.read(self.at + A_SEGS + 8 * k)?;
        if seg == 0 {
            return Err(corrupt(v, self.at, format!("segment {k} missing")));
        }
        Ok(seg + j * e)
    }

    /// The bytes of element `i`.
    pub fn get<'v>(&self, v: &'v View, i: u64) -> Result<&'v [u8]> {
        let (e, _, _) = self.meta(v)?;
        let o = self.offset(v, i)?;
        v.slice(o, e as usize)
    }

    /// Element `i` as a plain value (its size must match).
    pub fn get_pod<T: Pod>(&self, v: &View, i: u64) -> Result<T> {
        self.check_pod::<T>(v)?;
        v.read(self.offset(v, i)?)
    }

    fn check_pod<T: Pod>(&self, v: &View) -> Result<()> {
        if std::mem::size_of::<T>() as u64 != self.meta(v)?.0 {
            return Err(invalid("element type size differs from the array's"));
        }
        Ok(())
    }

    /// Overwrites element `i`.
    pub fn set(&self, v: &mut View, i: u64, bytes: &[u8]) -> Result<()> {
        let (e, _, _) = self.meta(v)?;
        if bytes.len() as u64 != e {
            return Err(invalid(format!("element must be {e} bytes")));
        }
        let o = self.offset(v, i)?;
        v.slice_mut(o, e as usize)?.copy_from_slice(bytes);
        Ok(())
    }

    pub fn set_pod<T: Pod>(&self, v: &mut View, i: u64, x: &T) -> Result<()> {
        self.check_pod::<T>(v)?;
        let o = self.offset(v, i)?;
        v.write(o, x)
    }

    /// Appends an element; returns its index.
    pub fn push(&self, v: &mut View, bytes: &[u8]) -> Result<u64> {
        let (e, len, b) = self.meta(v)?;
        if bytes.len() as u64 != e {
            return Err(invalid(format!("element must be {e} bytes")));
        }
        let (k, j) = locate(b, len);
        if k >= SEGMENTS {
            return Err(invalid("array is full"));
        }
        let mut seg: u64 = v.read(self.at + A_SEGS + 8 * k)?;
        if seg == 0 {
            seg = alloc::alloc(v, seg_len(b, k) * e)?;
            v.write(self.at + A_SEGS + 8 * k, &seg)?;
        }
        v.slice_mut(seg + j * e, e as usize)?.copy_from_slice(bytes);
        v.write(self.at + A_LEN, &(len + 1))?;
        Ok(len)
    }

    /// Appends an element as a commutative operation (`ops::ARRAY_APPEND`):
    /// concurrent appenders do not conflict on the array's header or its
    /// last page. The element is stored at once in this transaction's
    /// memory, at the length its snapshot shows, and the length grows by
    /// one, so the transaction reads its element back (`get`, `len`). At
    /// commit the append runs again, under the commit lock, on the newest
    /// committed array: the element lands at the length *then*, after the
    /// appends that committed first. So the index returned is provisional:
    /// the element's final index is at least this one, and is known only
    /// after the commit (other appenders' elements may come before it).
    /// Appends of one transaction keep their order and stay adjacent.
    ///
    /// What the transaction reads of the array is validated as usual:
    /// reading the length or an element by `len`, `get`, `offset`
    /// (accessors or plain loads) puts the page in the read set, and
    /// storing to the header's or the element's page (`set`, `push`, `pop`)
    /// makes the append an ordinary validated write of those pages, with
    /// its provisional index final. When the element's segment is not yet
    /// allocated the append is an ordinary [`ArrayList::push`] (it grows the
    /// array, and conflicts like one); a commit whose append finds the
    /// segment missing then (others filled it first) fails with
    /// `Error::Conflict` and `View::run` retries it. [`ArrayList::reserve`]
    /// ahead of concurrent appends avoids both.
    pub fn append(&self, v: &mut View, bytes: &[u8]) -> Result<u64> {
        let mut args = Vec::with_capacity(8 + bytes.len());
        args.extend_from_slice(&self.at.to_le_bytes());
        args.extend_from_slice(bytes);
        match v.commute_op(crate::ops::ARRAY_APPEND, &args) {
            Ok(()) => Ok(v.peek_u64(self.at + A_LEN)? - 1),
            Err(crate::Error::Conflict) => self.push(v, bytes),
            Err(e) => Err(e),
        }
    }

    /// [`ArrayList::append`] of a plain value (its size must match).
    pub fn append_pod<T: Pod>(&self, v: &mut View, x: &T) -> Result<u64> {
        // Not `check_pod`: reading the header would validate it.
        self.append(v, &crate::view::pod_bytes(x))
    }

    /// Allocates segments until the array holds at least `capacity`
    /// elements without growing (an ordinary validated write of the
    /// header): appends up to it never allocate.
    pub fn reserve(&self, v: &mut View, capacity: u64) -> Result<()> {
        let (e, _, b) = self.meta(v)?;
        let mut have = 0;
        for k in 0..SEGMENTS {
            if have >= capacity {
                return Ok(());
            }
            let slot = self.at + A_SEGS + 8 * k;
            if v.read::<u64>(slot)? == 0 {
                let seg = alloc::alloc(v, seg_len(b, k) * e)?;
                v.write(slot, &seg)?;
            }
            have += seg_len(b, k);
        }
        if have >= capacity {
            Ok(())
        } else {
            Err(invalid(format!("an array cannot hold {capacity} elements")))
        }
    }

    pub fn push_pod<T: Pod>(&self, v: &mut View, x: &T) -> Result<u64> {
        self.check_pod::<T>(v)?;
        let i = self.push(v, &vec![0u8; std::mem::size_of::<T>()])?;
        let o = self.offset(v, i)?;
        v.write(o, x)?;
        Ok(i)
    }

    /// Removes the last element and returns its bytes.
    pub fn pop(&self, v: &mut View) -> Result<Option<Vec<u8>>> {
        let (e, len, _) = self.meta(v)?;
        if len == 0 {
            return Ok(None);
        }
        let o = self.offset(v, len - 1)?;
        let out = v.slice(o, e as usize)?.to_vec();
        v.slice_mut(o, e as usize)?.fill(0);
        v.write(self.at + A_LEN, &(len - 1))?;
        Ok(Some(out))
    }

    /// Frees the segments and the header.
    pub fn destroy(self, v: &mut View) -> Result<()> {
        self.meta(v)?;
        for k in 0..SEGMENTS {
            let seg: u64 = v.read(self.at + A_SEGS + 8 * k)?;
            if seg != 0 {
                alloc::free(v, seg)?;
            }
        }
        alloc::free(v, self.at)
    }

    /// Verifies: segments present exactly up to the length's segment (later
    /// ones may stay allocated after pops), each large enough, and every
    /// element past the length zero.
    pub fn check(&self, v: &View) -> Result<ArrayReport> {
        let (e, len, b) = self.meta(v)?;
        let mut r = ArrayReport {
            len,
            elem_size: e,
            ..Default::default()
        };
        let need = if len == 0 {
            0
        } else {
            locate(b, len - 1).0 + 1
        };
        for k in 0..SEGMENTS {
            let seg: u64 = v.read(self.at + A_SEGS + 8 * k)?;
            if seg == 0 {
                if k < need {
                    return Err(corrupt(v, self.at, format!("segment {k} missing")));
                }
                continue;
            }
            let n = seg_len(b, k);
            if alloc::usable_size(v, seg)? < n * e {
                return Err(corrupt(v, seg, "array segment too small"));
            }
            r.segments += 1;
            r.capacity += n;
            let first = if k == 0 { 0 } else { b << (k - 1) };
            let live = len.saturating_sub(first).min(n);
            if v.slice(seg + live * e, ((n - live) * e) as usize)?
                .iter()
                .any(|&x| x != 0)
            {
                return Err(corrupt(v, seg, "element past the length is not zero"));
            }
        }
        Ok(r)
    }
}
