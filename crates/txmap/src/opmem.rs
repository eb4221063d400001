//! The memory a registered operation works on, below both the log's replay
//! (`ops`) and the collections' replay functions, so neither imports the
//! other. Re-exported as `ops::OpMemory`.

use std::borrow::Cow;

use crate::error::Result;

/// The bytes an operation works on: the transaction's memory when it runs
/// in a transaction, the pages being rebuilt when the log is replayed.
pub trait OpMemory {
    /// Bytes of the region.
    fn size(&self) -> u64;
    /// Fills `buf` with the bytes at `off`.
    fn read(&mut self, off: u64, buf: &mut [u8]) -> Result<()>;
    /// Stores `bytes` at `off`.
    fn write(&mut self, off: u64, bytes: &[u8]) -> Result<()>;
    /// The `len` bytes at `off`, borrowed where the memory holds them in
    /// place, else copied (the default): an operation that scans a page to
    /// change a few of its bytes need not copy the page.
    fn borrow(&mut self, off: u64, len: usize) -> Result<Cow<'_, [u8]>> {
        let mut buf = vec![0u8; len];
        self.read(off, &mut buf)?;
        Ok(Cow::Owned(buf))
    }
}

impl dyn OpMemory + '_ {
    /// The little-endian u64 at `off`.
    pub fn read_u64(&mut self, off: u64) -> Result<u64> {
        let mut b = [0u8; 8];
        self.read(off, &mut b)?;
        Ok(u64::from_le_bytes(b))
    }
    /// Stores `v` little-endian at `off`.
    pub fn write_u64(&mut self, off: u64, v: u64) -> Result<()> {
        self.write(off, &v.to_le_bytes())
    }
}
