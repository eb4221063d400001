//! Page checksums: a table beside the region (`PATH-sums`, docs/FORMAT.md
//! "Page checksums") holding a CRC-32C of every data page a checkpoint (or
//! recovery, or a backup) wrote. A page never written that way has no entry
//! and is never reported.
//!
//! The table is kept in step with the region header by generation: every
//! region header this build writes is preceded by a table header slot with
//! the same generation, synced. A table whose generation is below the
//! region header's was left behind by a writer that did not keep it (an
//! older build, or a session opened without checksums) and is reset.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::io::{FileStorage, Storage};
use crate::os::mem::PAGE;
use crate::wal::format::HEADER_BYTES;

/// Magic of a table header slot.
pub const SUMS_MAGIC: &[u8; 8] = b"TXMAPSUM";
/// Table format version written and read by this build.
pub const SUMS_VERSION: u32 = 1;
/// Second word of a present entry ("SUM1"); anything else is no entry.
pub const ENTRY_TAG: u32 = u32::from_le_bytes(*b"SUM1");
/// Bytes per entry: CRC-32C, then the tag.
pub const ENTRY_BYTES: u64 = 8;
const SLOT: [u64; 2] = [0, 2048];
const SLOT_LEN: usize = 64;

/// The page-checksum table's path for the region at `path`.
pub fn sums_path(path: &Path) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push("-sums");
    PathBuf::from(s)
}

/// The checksum of one data page.
pub fn page_crc(page: &[u8]) -> u32 {
    crc32c::crc32c(page)
}

/// Writes the table entries of `entries` (page, CRC-32C) with `write(bytes,
/// offset)`, one call per run of consecutive pages (sorted first; a page
/// listed twice keeps its last CRC).
pub(crate) fn write_entries(
    entries: &mut [(u64, u32)],
    mut write: impl FnMut(&[u8], u64) -> Result<()>,
) -> Result<()> {
    entries.sort_by_key(|e| e.0);
    let mut buf = Vec::new();
    let mut i = 0;
    while i < entries.len() {
        let first = entries[i].0;
        buf.clear();
        while i < entries.len() && entries[i].0 == first + (buf.len() as u64 / ENTRY_BYTES) {
            buf.extend_from_slice(&entries[i].1.to_le_bytes());
            buf.extend_from_slice(&ENTRY_TAG.to_le_bytes());
            i += 1;
            // A page recorded twice keeps its last crc.
            while i < entries.len() && entries[i].0 == entries[i - 1].0 {
                let at = buf.len() - ENTRY_BYTES as usize;
                buf[at..at + 4].copy_from_slice(&entries[i].1.to_le_bytes());
                i += 1;
            }
        }
        write(&buf, HEADER_BYTES + first * ENTRY_BYTES)?;
    }
    Ok(())
}

/// A decoded table header slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SumsHeader {
    pub region_id: u64,
    /// The region header generation the table is in step with.
    pub generation: u64,
}

impl SumsHeader {
    /// The slot's offset and bytes.
    pub fn encode(&self) -> (u64, [u8; SLOT_LEN]) {
        let mut b = [0u8; SLOT_LEN];
        b[0..8].copy_from_slice(SUMS_MAGIC);
        b[8..12].copy_from_slice(&SUMS_VERSION.to_le_bytes());
        b[12..16].copy_from_slice(&(PAGE as u32).to_le_bytes());
        b[16..24].copy_from_slice(&self.region_id.to_le_bytes());
        b[24..32].copy_from_slice(&self.generation.to_le_bytes());
        let crc = crc32c::crc32c(&b[0..32]);
        b[32..36].copy_from_slice(&crc.to_le_bytes());
        (SLOT[(self.generation % 2) as usize], b)
    }

    /// The newest valid slot of a header page. `Err` for a valid slot of
    /// another version or page size (named); `Ok(None)` when no slot is valid.
    pub fn decode(page: &[u8]) -> std::result::Result<Option<SumsHeader>, String> {
        let mut best: Option<SumsHeader> = None;
        for off in SLOT {
            let Some(b) = page.get(off as usize..off as usize + SLOT_LEN) else {
                continue;
            };
            let word = |at: usize| u32::from_le_bytes(b[at..at + 4].try_into().unwrap_or([0; 4]));
            let long = |at: usize| u64::from_le_bytes(b[at..at + 8].try_into().unwrap_or([0; 8]));
            if &b[0..8] != SUMS_MAGIC || word(32) != crc32c::crc32c(&b[0..32]) {
                continue;
            }
            if word(8) != SUMS_VERSION {
                return Err(format!(
                    "page checksum table format version {} (this build reads version {SUMS_VERSION})",
                    word(8)
                ));
            }
            if word(12) != PAGE as u32 {
                return Err(format!("page checksum table for page size {}", word(12)));
            }
            let h = SumsHeader {
                region_id: long(16),
                generation: long(24),
            };
            if best.is_none_or(|b| h.generation > b.generation) {
                best = Some(h);
            }
        }
        Ok(best)
    }
}

/// One damaged page: its index and where it lies in the region file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BadPage {
    pub page: u64,
    /// Offset of the page in the region file (header page included).
    pub file_offset: u64,
    pub stored: u32,
    pub computed: u32,
}

impl std::fmt::Display for BadPage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "page {} at file offset {} fails its checksum (stored {:08x}, computed {:08x})",
            self.page, self.file_offset, self.stored, self.computed
        )
    }
}

/// The open table of a region.
pub struct PageSums {
    file: FileStorage,
}

impl PageSums {
    /// Opens the table of the region at `region`; creates an empty one
    /// (no valid header: the first opener resets it) when `create`.
    /// `None` when it does not exist and `create` is false.
    pub fn open(region: &Path, create: bool) -> Result<Option<PageSums>> {
        let p = sums_path(region);
        match FileStorage::open(&p, create) {
            Ok(file) => Ok(Some(PageSums { file })),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && !create => Ok(None),
            Err(e) => Err(Error::io("open page checksum table", p, e)),
        }
    }

    /// A table over an open file (a backup's, under its temporary name).
    pub(crate) fn from_file(file: FileStorage) -> PageSums {
        PageSums { file }
    }

    /// The table file's descriptor.
    pub(crate) fn fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.file.fd()
    }

    pub fn path(&self) -> &Path {
        self.file.path()
    }

    /// The table's header, `None` when it has no valid slot (new, or torn).
    pub fn header(&self) -> Result<Option<SumsHeader>> {
        let mut page = vec![0u8; HEADER_BYTES as usize];
        let len = self.len()?;
        let n = len.min(HEADER_BYTES) as usize;
        self.file
            .read_at(&mut page[..n], 0)
            .map_err(|e| Error::io("read header of", self.path(), e))?;
        SumsHeader::decode(&page).map_err(|what| Error::corrupt(self.path(), 0, what))
    }

    fn len(&self) -> Result<u64> {
        self.file
            .len()
            .map_err(|e| Error::io("stat", self.path(), e))
    }

    /// Writes the header slot for `generation` (not synced).
    pub fn write_header(&self, region_id: u64, generation: u64) -> Result<()> {
        let (off, slot) = SumsHeader {
            region_id,
            generation,
        }
        .encode();
        self.file
            .write_at(&slot, off)
            .map_err(|e| Error::io("write header of", self.path(), e))
    }

    /// Drops every entry and makes the table in step with `generation`; synced.
    pub fn reset(&self, region_id: u64, generation: u64) -> Result<()> {
        let e = |op, x| Error::io(op, self.path(), x);
        self.file.set_len(0).map_err(|x| e("truncate", x))?;
        self.file
            .write_at(&vec![0u8; HEADER_BYTES as usize], 0)
            .map_err(|x| e("write", x))?;
        self.write_header(region_id, generation)?;
        self.sync()
    }

    /// Records `(page, crc)` entries (not synced): sorted, and each run of
    /// consecutive pages written at once.
    pub fn record(&self, entries: &mut [(u64, u32)]) -> Result<()> {
        write_entries(entries, |buf, at| {
            self.file
                .write_at(buf, at)
                .map_err(|e| Error::io("write page checksums to", self.path(), e))
        })
    }

    /// Removes page `page`'s entry (not synced): it is no longer verified.
    pub fn forget(&self, page: u64) -> Result<()> {
        if self.len()? < HEADER_BYTES + (page + 1) * ENTRY_BYTES {
            return Ok(());
        }
        self.file
            .write_at(
                &[0u8; ENTRY_BYTES as usize],
                HEADER_BYTES + page * ENTRY_BYTES,
            )
            .map_err(|e| Error::io("write page checksums to", self.path(), e))
    }

    /// The entries of pages `0..pages` (`None`: no entry).
    pub fn entries(&self, pages: u64) -> Result<Vec<Option<u32>>> {
        let len = self.len()?;
        let have = len.saturating_sub(HEADER_BYTES).min(pages * ENTRY_BYTES);
        let mut buf = vec![0u8; have as usize];
        self.file
            .read_at(&mut buf, HEADER_BYTES)
            .map_err(|e| Error::io("read page checksums from", self.path(), e))?;
        Ok(decode_entries(&buf, pages))
    }

    pub fn sync(&self) -> Result<()> {
        self.file
            .sync()
            .map_err(|e| Error::io("sync", self.path(), e))
    }

    /// Truncates the table to `pages` entries (a region that shrank).
    pub fn truncate(&self, pages: u64) -> Result<()> {
        let want = HEADER_BYTES + pages * ENTRY_BYTES;
        if self.len()? > want {
            self.file
                .set_len(want)
                .map_err(|e| Error::io("truncate", self.path(), e))?;
        }
        Ok(())
    }
}

/// Decodes table bytes (after the header page) into `pages` entries.
pub fn decode_entries(buf: &[u8], pages: u64) -> Vec<Option<u32>> {
    let mut out = vec![None; pages as usize];
    for (i, e) in buf.chunks_exact(ENTRY_BYTES as usize).enumerate() {
        if i >= out.len() {
            break;
        }
        let crc = u32::from_le_bytes([e[0], e[1], e[2], e[3]]);
        let tag = u32::from_le_bytes([e[4], e[5], e[6], e[7]]);
        if tag == ENTRY_TAG {
            out[i] = Some(crc);
        }
    }
    out
}

/// Checks every page of `data` that has an entry and for which `skip` is
/// false; returns the pages that fail. Reads 1 MiB at a time.
pub fn verify(
    data: &dyn Storage,
    entries: &[Option<u32>],
    skip: impl Fn(u64) -> bool,
) -> Result<Vec<BadPage>> {
    verify_with(|b, off| data.read_at(b, off), data.path(), entries, skip)
}

/// [`verify`] over any reader of the region file (`pread`-like).
pub fn verify_with(
    read: impl Fn(&mut [u8], u64) -> std::io::Result<()>,
    path: &Path,
    entries: &[Option<u32>],
    skip: impl Fn(u64) -> bool,
) -> Result<Vec<BadPage>> {
    const CHUNK: u64 = 256;
    let mut bad = Vec::new();
    let mut buf = vec![0u8; CHUNK as usize * PAGE];
    let pages = entries.len() as u64;
    let mut first = 0;
    while first < pages {
        let n = CHUNK.min(pages - first);
        let want = (first..first + n).any(|p| entries[p as usize].is_some() && !skip(p));
        if want {
            let b = &mut buf[..n as usize * PAGE];
            read(b, HEADER_BYTES + first * PAGE as u64)
                .map_err(|e| Error::io("read page of", path, e))?;
            for k in 0..n {
                let p = first + k;
                let Some(stored) = entries[p as usize] else {
                    continue;
                };
                if skip(p) {
                    continue;
                }
                let computed = page_crc(&b[(k as usize) * PAGE..(k as usize + 1) * PAGE]);
                if computed != stored {
                    bad.push(BadPage {
                        page: p,
                        file_offset: HEADER_BYTES + p * PAGE as u64,
                        stored,
                        computed,
                    });
                }
            }
        }
        first += n;
    }
    Ok(bad)
}

/// Pages that byte ranges (region offset, bytes) touch.
pub fn touched_pages<'a>(
    ranges: impl Iterator<Item = &'a crate::wal::format::Range<'a>>,
) -> BTreeSet<u64> {
    let mut out = BTreeSet::new();
    for r in ranges {
        if r.bytes.is_empty() {
            continue;
        }
        let first = r.offset / PAGE as u64;
        let last = (r.offset + r.bytes.len() as u64 - 1) / PAGE as u64;
        out.extend(first..=last);
    }
    out
}

/// Records the checksums of `pages` (those below `size` bytes) as they are
/// in the region file now (not synced).
pub fn record_from_file(
    s: &PageSums,
    data: &dyn Storage,
    pages: &BTreeSet<u64>,
    size: u64,
) -> Result<()> {
    let mut page = vec![0u8; PAGE];
    let mut crcs = Vec::with_capacity(pages.len());
    for &p in pages.iter().take_while(|&&p| p < size / PAGE as u64) {
        data.read_at(&mut page, HEADER_BYTES + p * PAGE as u64)
            .map_err(|e| Error::io("read page of", data.path(), e))?;
        crcs.push((p, page_crc(&page)));
    }
    s.record(&mut crcs)
}

/// The error for damaged pages found on open: names the first by offset
/// and lists up to 16.
pub fn damaged_error(path: &Path, bad: &[BadPage]) -> Error {
    let list = bad
        .iter()
        .take(16)
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ");
    let more = match bad.len() {
        n if n > 16 => format!(" (and {} more)", n - 16),
        _ => String::new(),
    };
    Error::corrupt(
        path,
        bad.first().map_or(0, |b| b.file_offset),
        format!(
            "{} damaged data page(s): {list}{more}; the log does not cover them, so they \
             cannot be repaired from it: restore the region from a backup",
            bad.len()
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_slots_round_trip_and_the_newest_wins() {
        let mut page = vec![0u8; HEADER_BYTES as usize];
        for g in [4u64, 5] {
            let (off, slot) = SumsHeader {
                region_id: 7,
                generation: g,
            }
            .encode();
            page[off as usize..off as usize + SLOT_LEN].copy_from_slice(&slot);
        }
        let h = SumsHeader::decode(&page).unwrap().unwrap();
        assert_eq!((h.region_id, h.generation), (7, 5));
        page[2048 + 3] ^= 1; // damage slot of generation 5
        assert_eq!(SumsHeader::decode(&page).unwrap().unwrap().generation, 4);
        page[3] ^= 1;
        assert_eq!(SumsHeader::decode(&page).unwrap(), None);
    }

    #[test]
    fn entries_without_the_tag_are_absent() {
        let mut buf = vec![0u8; 24];
        buf[8..12].copy_from_slice(&0xdead_beefu32.to_le_bytes());
        buf[12..16].copy_from_slice(&ENTRY_TAG.to_le_bytes());
        buf[16..20].copy_from_slice(&5u32.to_le_bytes()); // no tag
        assert_eq!(
            decode_entries(&buf, 4),
            vec![None, Some(0xdead_beef), None, None]
        );
    }
}
