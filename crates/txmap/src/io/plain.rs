//! Plain files (issue 19 point 2): an ordinary file mapped as a region, its
//! bytes at region offset 0, with txmap's header page beside it in
//! `PATH-txmap` (docs/FORMAT.md, "Plain files").
//!
//! [`PlainStorage`] presents the pair as the storage of a region file: its
//! bytes 0–4095 are the side file's header page and byte `4096 + o` is the
//! plain file's byte `o`, so everything above (recovery, checkpoints, page
//! checksums) works unchanged on it. Only the two mappings of the file (the
//! image and a view's private mapping) and hole searches see the plain
//! file's descriptor: [`Storage::fd_shift`] tells them where its byte 0 is.
//!
//! The file's length is its own, not a multiple of the page size: the region
//! has `ceil(len / 4096)` pages (at least one), reads past the file's end
//! within them are zeros, and the last close cuts the file back to its
//! length (the plain record in the side file's second page keeps it).

use std::os::fd::BorrowedFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use super::{FileStorage, Storage};
use crate::error::{Error, Result};
use crate::os::mem::PAGE;
use crate::wal::format::HEADER_BYTES;

/// Magic of a plain record slot.
pub const PLAIN_MAGIC: &[u8; 8] = b"TXMPLAIN";
/// Version of the plain record.
pub const PLAIN_VERSION: u32 = 1;
/// Where the plain record's page starts in the side file.
pub const PLAIN_PAGE: u64 = HEADER_BYTES;
const SLOT_BODY: usize = 44;
const SLOT_LEN: usize = 48;

/// The side file of the plain file at `path`: `PATH-txmap`.
pub fn meta_path(path: &Path) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push("-txmap");
    PathBuf::from(s)
}

/// Whether `path` is a plain file mapped by txmap (its side file exists).
pub fn is_plain(path: &Path) -> bool {
    meta_path(path).is_file()
}

/// Pages of a region over a plain file of `len` bytes: at least one.
pub fn pages_for(len: u64) -> u64 {
    len.div_ceil(PAGE as u64).max(1)
}

/// The plain file's length for a region of `size` bytes whose file was
/// `base` bytes long: `base` while the region has the pages `base` needs,
/// else (it grew) `size`.
pub fn logical_len(size: u64, base: u64) -> u64 {
    if size == pages_for(base) * PAGE as u64 {
        base
    } else {
        size
    }
}

/// What the side file records about the plain file (docs/FORMAT.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PlainRecord {
    pub generation: u64,
    /// A process had the file open when this was written: the file may
    /// differ from `len`/`mtime` (a crash), and nothing is checked.
    pub open: bool,
    /// The file's length (its logical length, not padded).
    pub len: u64,
    /// The file's modification time when it was last closed cleanly.
    pub mtime_sec: i64,
    pub mtime_nsec: u32,
}

impl PlainRecord {
    /// The record of a clean close: the file's `(len, mtime sec, nsec)`.
    pub fn closed(generation: u64, (len, mtime_sec, mtime_nsec): (u64, i64, u32)) -> PlainRecord {
        PlainRecord {
            generation,
            open: false,
            len,
            mtime_sec,
            mtime_nsec,
        }
    }

    /// The slot's offset in the side file and its bytes.
    pub fn encode(&self) -> (u64, [u8; SLOT_LEN]) {
        let mut s = [0u8; SLOT_LEN];
        s[0..8].copy_from_slice(PLAIN_MAGIC);
        s[8..12].copy_from_slice(&PLAIN_VERSION.to_le_bytes());
        s[12..16].copy_from_slice(&u32::from(self.open).to_le_bytes());
        s[16..24].copy_from_slice(&self.generation.to_le_bytes());
        s[24..32].copy_from_slice(&self.len.to_le_bytes());
        s[32..40].copy_from_slice(&self.mtime_sec.to_le_bytes());
        s[40..44].copy_from_slice(&self.mtime_nsec.to_le_bytes());
        let crc = crc32c::crc32c(&s[..SLOT_BODY]);
        s[44..48].copy_from_slice(&crc.to_le_bytes());
        (PLAIN_PAGE + (self.generation % 2) * 2048, s)
    }

    /// The valid slot with the highest generation of the record's page.
    pub fn decode(page: &[u8]) -> std::result::Result<PlainRecord, String> {
        let slot = |at: usize| -> Option<PlainRecord> {
            let s = page.get(at..at + SLOT_LEN)?;
            let u32_at = |i: usize| u32::from_le_bytes(s[i..i + 4].try_into().unwrap_or([0; 4]));
            let u64_at = |i: usize| u64::from_le_bytes(s[i..i + 8].try_into().unwrap_or([0; 8]));
            let ok = &s[0..8] == PLAIN_MAGIC
                && u32_at(8) == PLAIN_VERSION
                && u32_at(12) <= 1
                && crc32c::crc32c(&s[..SLOT_BODY]) == u32_at(44);
            ok.then(|| PlainRecord {
                open: u32_at(12) == 1,
                generation: u64_at(16),
                len: u64_at(24),
                mtime_sec: u64_at(32) as i64,
                mtime_nsec: u32_at(40),
            })
        };
        [slot(0), slot(2048)]
            .into_iter()
            .flatten()
            .max_by_key(|r| r.generation)
            .ok_or_else(|| "no valid plain record slot (magic TXMPLAIN, version 1, CRC)".into())
    }
}

/// The file's length and modification time now.
pub fn stamp(f: BorrowedFd<'_>) -> std::io::Result<(u64, i64, u32)> {
    let st = rustix::fs::fstat(f)?;
    Ok((
        st.st_size as u64,
        st.st_mtime as i64,
        st.st_mtime_nsec as u32,
    ))
}

/// A plain file and its side file as the storage of one region file.
pub struct PlainStorage {
    meta: FileStorage,
    data: FileStorage,
    meta_dirty: AtomicBool,
    data_dirty: AtomicBool,
}

impl PlainStorage {
    /// Pairs the side file `meta` (header page, plain record) with the
    /// plain file `data`.
    pub fn new(meta: FileStorage, data: FileStorage) -> PlainStorage {
        PlainStorage {
            meta,
            data,
            meta_dirty: AtomicBool::new(false),
            data_dirty: AtomicBool::new(false),
        }
    }

    /// The side file.
    pub fn meta(&self) -> &FileStorage {
        &self.meta
    }

    /// The plain file.
    pub fn data(&self) -> &FileStorage {
        &self.data
    }

    /// The plain record.
    pub fn record(&self) -> Result<PlainRecord> {
        let mut page = vec![0u8; PAGE];
        self.meta
            .read_at(&mut page, PLAIN_PAGE)
            .map_err(|e| Error::io("read the plain record of", self.meta.path(), e))?;
        PlainRecord::decode(&page).map_err(|w| Error::corrupt(self.meta.path(), PLAIN_PAGE, w))
    }

    /// Writes `r`'s slot and syncs the side file.
    pub fn write_record(&self, r: &PlainRecord) -> Result<()> {
        let (off, slot) = r.encode();
        self.meta
            .write_at(&slot, off)
            .and_then(|_| self.meta.sync())
            .map_err(|e| Error::io("write the plain record of", self.meta.path(), e))
    }

    fn data_len(&self) -> std::io::Result<u64> {
        self.data.len()
    }
}

/// Splits `[offset, offset + len)` at the header page's end: the part in
/// the side file and the part in the plain file (at its own offset).
fn split(offset: u64, len: usize) -> (usize, u64) {
    let head = HEADER_BYTES.saturating_sub(offset).min(len as u64) as usize;
    (head, (offset + head as u64).saturating_sub(HEADER_BYTES))
}

impl Storage for PlainStorage {
    /// The header page plus the plain file's pages (its last page whole).
    fn len(&self) -> std::io::Result<u64> {
        Ok(HEADER_BYTES + pages_for(self.data_len()?) * PAGE as u64)
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        let (head, at) = split(offset, buf.len());
        let (h, rest) = buf.split_at_mut(head);
        if !h.is_empty() {
            self.meta.read_at(h, offset)?;
        }
        if rest.is_empty() {
            return Ok(());
        }
        let dl = self.data_len()?;
        if at + rest.len() as u64 > pages_for(dl) * PAGE as u64 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "read past the plain file's last page",
            ));
        }
        // Past the file's end (inside its last page): zeros, as a mapping shows.
        let have = dl.saturating_sub(at).min(rest.len() as u64) as usize;
        self.data.read_at(&mut rest[..have], at)?;
        rest[have..].fill(0);
        Ok(())
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> std::io::Result<()> {
        let (head, at) = split(offset, buf.len());
        if head > 0 {
            self.meta_dirty.store(true, Ordering::Release);
            self.meta.write_at(&buf[..head], offset)?;
        }
        if head < buf.len() {
            self.data_dirty.store(true, Ordering::Release);
            self.data.write_at(&buf[head..], at)?;
        }
        Ok(())
    }
    fn set_len(&self, len: u64) -> std::io::Result<()> {
        self.data_dirty.store(true, Ordering::Release);
        self.data.set_len(len.saturating_sub(HEADER_BYTES))
    }
    fn allocate(&self) -> std::io::Result<()> {
        self.meta.allocate()?;
        self.data.allocate()
    }
    /// Syncs the files written since the last sync (one `fdatasync` when
    /// only one of them was).
    fn sync(&self) -> std::io::Result<()> {
        for (dirty, f) in [
            (&self.data_dirty, &self.data),
            (&self.meta_dirty, &self.meta),
        ] {
            if dirty.swap(false, Ordering::AcqRel) {
                f.sync()
                    .inspect_err(|_| dirty.store(true, Ordering::Release))?;
            }
        }
        Ok(())
    }
    fn fd(&self) -> BorrowedFd<'_> {
        self.data.fd()
    }
    fn fd_shift(&self) -> u64 {
        HEADER_BYTES
    }
    fn path(&self) -> &Path {
        self.data.path()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_the_newest_slot_wins() {
        let mut page = vec![0u8; PAGE];
        for g in [1, 2, 3] {
            let r = PlainRecord {
                generation: g,
                open: g == 2,
                len: 5000 + g,
                mtime_sec: -7,
                mtime_nsec: 9,
            };
            let (off, slot) = r.encode();
            let at = (off - PLAIN_PAGE) as usize;
            page[at..at + SLOT_LEN].copy_from_slice(&slot);
            assert_eq!(PlainRecord::decode(&page), Ok(r));
        }
        page[2048 + 3] ^= 1; // generation 3's slot is damaged: 2 is used
        assert_eq!(PlainRecord::decode(&page).map(|r| r.len), Ok(5002));
    }

    #[test]
    fn logical_length_follows_growth() {
        assert_eq!(pages_for(0), 1);
        assert_eq!(pages_for(4097), 2);
        assert_eq!(logical_len(8192, 5000), 5000);
        assert_eq!(logical_len(4096, 0), 0);
        assert_eq!(logical_len(12288, 5000), 12288);
    }
}
