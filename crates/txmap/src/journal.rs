//! The page journal (`PATH-journal`, docs/FORMAT.md "Page journal"): the
//! images of the pages a checkpoint (or a recovery) is about to write into
//! the region file, synced before the first of them is written.
//!
//! Why: replaying a byte-diff record onto a page that already holds its
//! effect changes nothing, but replaying a registered operation (an add, a
//! user's insert) applies it twice. A checkpoint killed between writing its
//! pages and its region header leaves pages newer than the header says, so
//! the next recovery would start from a state that never existed. When the
//! records being written hold operations, the writer journals the pages
//! first; recovery finds a journal that continues the header on disk,
//! writes its pages (absolute images: idempotent), and so starts from the
//! consistent state "as of" the journal's commit.
//!
//! Invariant: the region file plus a valid journal is the committed state
//! at the journal's `as_of`; a journal is valid only for the exact region
//! header (id, generation, checkpoint) that was on disk when it was written,
//! so any later header makes it stale.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::io::{FileStorage, Storage};
use crate::os::mem::PAGE;
use crate::wal::format::{HEADER_BYTES, RegionHeader};

const MAGIC: &[u8; 8] = b"TXMAPJNL";
const VERSION: u32 = 1;
/// Pages read or written per call.
const BATCH: usize = 256;

/// The journal file of the region at `region`.
pub fn journal_path(region: &Path) -> PathBuf {
    let mut s = region.as_os_str().to_owned();
    s.push("-journal");
    PathBuf::from(s)
}

/// What a journal continues and holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Head {
    pub region_id: u64,
    /// The region header on disk when the journal was written.
    pub generation: u64,
    pub from: u64,
    /// The commit whose state the pages hold.
    pub as_of: u64,
    /// Region data size at `as_of`.
    pub data_size: u64,
}

impl Head {
    fn encode(&self, count: u32) -> [u8; 56] {
        let mut b = [0u8; 56];
        b[0..8].copy_from_slice(MAGIC);
        b[8..12].copy_from_slice(&VERSION.to_le_bytes());
        b[12..16].copy_from_slice(&count.to_le_bytes());
        for (i, v) in [
            self.region_id,
            self.generation,
            self.from,
            self.as_of,
            self.data_size,
        ]
        .into_iter()
        .enumerate()
        {
            b[16 + 8 * i..24 + 8 * i].copy_from_slice(&v.to_le_bytes());
        }
        b
    }

    fn decode(b: &[u8]) -> Option<(Head, u32, u32)> {
        let u32_at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().expect("4 bytes"));
        let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().expect("8 bytes"));
        if &b[0..8] != MAGIC || u32_at(8) != VERSION || u32_at(60) != 0 {
            return None;
        }
        let head = Head {
            region_id: u64_at(16),
            generation: u64_at(24),
            from: u64_at(32),
            as_of: u64_at(40),
            data_size: u64_at(48),
        };
        Some((head, u32_at(12), u32_at(56)))
    }
}

/// Bytes of the page-number list, padded to whole pages.
pub(crate) fn list_bytes(count: usize) -> u64 {
    (count as u64 * 4).div_ceil(PAGE as u64) * PAGE as u64
}

/// Writes the journal of `pages` (page number, image) and syncs it, in
/// place of any older one. A new file's directory entry is synced too: the
/// journal must outlive a crash once the region file's pages are written.
pub(crate) fn write(path: &Path, head: &Head, pages: &[(u32, &[u8])]) -> Result<()> {
    let io = |e| Error::io("write page journal", path, e);
    let count = u32::try_from(pages.len()).map_err(|_| {
        Error::Invalid(format!(
            "{}: {} pages are too many for one journal",
            path.display(),
            pages.len()
        ))
    })?;
    let fresh = !path.exists();
    let f = FileStorage::open(path, true).map_err(|e| Error::io("open", path, e))?;
    let mut list = vec![0u8; list_bytes(pages.len()) as usize];
    for (i, (p, image)) in pages.iter().enumerate() {
        assert_eq!(image.len(), PAGE, "a journal holds whole pages");
        list[4 * i..4 * i + 4].copy_from_slice(&p.to_le_bytes());
    }
    let mut slot = head.encode(count).to_vec();
    let mut crc = crc32c::crc32c(&slot);
    crc = crc32c::crc32c_append(crc, &list);
    f.write_at(&list, HEADER_BYTES).map_err(io)?;
    // Straight from where the images are (a view's memory, versions).
    let images: Vec<&[u8]> = pages.iter().map(|&(_, b)| b).collect();
    let sum = |crc| {
        images
            .iter()
            .fold(crc, |c, im| crc32c::crc32c_append(c, im))
    };
    let at = HEADER_BYTES + list.len() as u64;
    // The checksum is taken on another thread while the images are written.
    let taken = crate::io::beside(
        images.len(),
        || sum(crc),
        || write_images(path, &f, &images, at),
    )?;
    let crc = taken.unwrap_or_else(|| sum(crc));
    slot.extend_from_slice(&crc.to_le_bytes());
    slot.extend_from_slice(&[0u8; 4]);
    f.write_at(&slot, 0).map_err(io)?;
    f.sync().map_err(io)?;
    if fresh {
        let dir = path.parent().unwrap_or(Path::new(""));
        crate::io::sync_dir(dir).map_err(|e| Error::io("sync directory", dir, e))?;
    }
    Ok(())
}

/// Writes the journal's images at `at` through the page cache, starting
/// the writeback of each batch as soon as it is written, so the disk works
/// while the next batch is copied and the final sync finds little left.
fn write_images(path: &Path, f: &FileStorage, images: &[&[u8]], at: u64) -> Result<()> {
    let io = |e| Error::io("write page journal", path, e);
    let mut at = at;
    for batch in images.chunks(WRITEBACK_PAGES) {
        f.write_all_vectored_at(batch, at).map_err(io)?;
        let len = (batch.len() * PAGE) as u64;
        let _ = crate::os::writeback::start(f.fd(), at, len);
        at += len;
    }
    Ok(())
}

/// Pages written before their writeback is started (16 MiB).
const WRITEBACK_PAGES: usize = 4096;

/// Empties the journal after the region header it led to is on disk. Not
/// synced: a journal is stale once a newer header exists, so an undone
/// truncation is harmless.
pub(crate) fn clear(path: &Path) -> Result<()> {
    match FileStorage::open(path, false) {
        Ok(f) => f
            .set_len(0)
            .map_err(|e| Error::io("empty page journal", path, e)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::io("open", path, e)),
    }
}

/// A journal that continues the region header on disk: its pages must be
/// written before anything is replayed.
pub(crate) struct Pending {
    pub head: Head,
    count: u32,
    file: FileStorage,
}

/// The journal at `path` if it is complete (its checksum matches) and
/// continues `header`; `None` if there is none, it is torn (its writer
/// died before syncing it, so no page of it was written) or stale.
pub(crate) fn pending(path: &Path, header: &RegionHeader) -> Result<Option<Pending>> {
    let file = match FileStorage::open_read_only(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io("open", path, e)),
    };
    let io = |e| Error::io("read page journal", path, e);
    let len = file.len().map_err(io)?;
    if len < HEADER_BYTES {
        return Ok(None);
    }
    let mut slot = [0u8; 64];
    file.read_at(&mut slot, 0).map_err(io)?;
    let Some((head, count, want)) = Head::decode(&slot) else {
        return Ok(None);
    };
    let continues = head.region_id == header.region_id
        && head.generation == header.generation
        && head.from == header.checkpoint_seq
        && head.as_of > head.from;
    let list = list_bytes(count as usize);
    let end = HEADER_BYTES + list + u64::from(count) * PAGE as u64;
    if !continues || len < end {
        return Ok(None);
    }
    let p = Pending { head, count, file };
    let mut crc = crc32c::crc32c(&slot[..56]);
    p.each(|bytes, _| {
        crc = crc32c::crc32c_append(crc, bytes);
        Ok(())
    })?;
    Ok((crc == want).then_some(p))
}

impl Pending {
    /// Calls `f` with the page list, then with each batch of images and
    /// their page numbers, in file order.
    fn each(&self, mut f: impl FnMut(&[u8], &[u32]) -> Result<()>) -> Result<()> {
        let io = |e| Error::io("read page journal", self.file.path(), e);
        let mut list = vec![0u8; list_bytes(self.count as usize) as usize];
        self.file.read_at(&mut list, HEADER_BYTES).map_err(io)?;
        f(&list, &[])?;
        let pages: Vec<u32> = list
            .chunks_exact(4)
            .take(self.count as usize)
            .map(|c| u32::from_le_bytes(c.try_into().expect("4 bytes")))
            .collect();
        let mut at = HEADER_BYTES + list.len() as u64;
        let mut buf = vec![0u8; BATCH.min(pages.len()) * PAGE];
        for batch in pages.chunks(BATCH) {
            let b = &mut buf[..batch.len() * PAGE];
            self.file.read_at(b, at).map_err(io)?;
            f(b, batch)?;
            at += b.len() as u64;
        }
        Ok(())
    }

    /// Writes the journal's pages into the region file (extended to the
    /// journal's data size first), not synced; returns their numbers.
    pub(crate) fn apply(&self, data: &dyn Storage) -> Result<BTreeSet<u64>> {
        let len = data.len().map_err(|e| Error::io("stat", data.path(), e))?;
        let need = HEADER_BYTES.saturating_add(self.head.data_size);
        if len < need {
            data.set_len(need)
                .map_err(|e| Error::io("allocate disk space to grow", data.path(), e))?;
        }
        let mut written = BTreeSet::new();
        self.each(|bytes, pages| {
            for (k, &p) in pages.iter().enumerate() {
                if u64::from(p) * PAGE as u64 >= self.head.data_size {
                    return Err(Error::corrupt(
                        self.file.path(),
                        HEADER_BYTES + 4 * k as u64,
                        format!(
                            "journal page {p} lies beyond its data size of {} bytes",
                            self.head.data_size
                        ),
                    ));
                }
                data.write_at(
                    &bytes[k * PAGE..(k + 1) * PAGE],
                    HEADER_BYTES + u64::from(p) * PAGE as u64,
                )
                .map_err(|e| Error::io("write journal pages into", data.path(), e))?;
                written.insert(u64::from(p));
            }
            Ok(())
        })?;
        Ok(written)
    }

    pub(crate) fn pages(&self) -> u32 {
        self.count
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(generation: u64, checkpoint_seq: u64) -> RegionHeader {
        RegionHeader {
            region_id: 7,
            generation,
            checkpoint_seq,
            data_size: 4 * PAGE as u64,
            address: 0,
        }
    }

    fn head() -> Head {
        Head {
            region_id: 7,
            generation: 3,
            from: 10,
            as_of: 12,
            data_size: 4 * PAGE as u64,
        }
    }

    /// A journal larger than one writeback batch is written whole, each
    /// batch where it belongs.
    #[test]
    fn a_journal_of_several_writeback_batches_holds_every_page() {
        let d = std::env::temp_dir().join(format!("txmap-journal-batches-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        let n = WRITEBACK_PAGES + WRITEBACK_PAGES / 2;
        let images: Vec<Vec<u8>> = (0..n)
            .map(|k| {
                let mut page = vec![(k % 251) as u8; PAGE];
                page[..8].copy_from_slice(&(k as u64).to_le_bytes());
                page
            })
            .collect();
        // Pages in reverse order, so the list and the images disagree
        // wherever a batch lands at the wrong place.
        let pages: Vec<(u32, &[u8])> = images
            .iter()
            .enumerate()
            .map(|(k, im)| ((n - 1 - k) as u32, &im[..]))
            .collect();
        let p = journal_path(&d.join("r"));
        let head = Head {
            data_size: (n * PAGE) as u64,
            ..head()
        };
        write(&p, &head, &pages).unwrap();
        let j = pending(&p, &header(3, 10)).unwrap().expect("whole");
        let data = FileStorage::open(&d.join("r"), true).unwrap();
        assert_eq!(j.apply(&data).unwrap().len(), n);
        let mut page = vec![0u8; PAGE];
        for k in [0, WRITEBACK_PAGES - 1, WRITEBACK_PAGES, n - 1] {
            let at = HEADER_BYTES + ((n - 1 - k) * PAGE) as u64;
            data.read_at(&mut page, at).unwrap();
            assert_eq!(page, images[k], "image {k}");
        }
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_journal_continues_only_the_header_it_was_written_over_and_only_whole() {
        let d = std::env::temp_dir().join(format!("txmap-journal-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        let p = journal_path(&d.join("r"));
        let a = vec![1u8; PAGE];
        let b = vec![2u8; PAGE];
        write(&p, &head(), &[(3, &a), (1, &b)]).unwrap();
        let j = pending(&p, &header(3, 10)).unwrap().expect("continues");
        assert_eq!((j.head, j.pages()), (head(), 2));
        // Another generation, checkpoint or region: stale.
        for h in [header(4, 10), header(3, 11)] {
            assert!(pending(&p, &h).unwrap().is_none(), "{h:?}");
        }
        let other = RegionHeader {
            region_id: 8,
            ..header(3, 10)
        };
        assert!(pending(&p, &other).unwrap().is_none());
        // Applying writes the images where they belong.
        let data = FileStorage::open(&d.join("r"), true).unwrap();
        let written = j.apply(&data).unwrap();
        assert_eq!(written.into_iter().collect::<Vec<_>>(), vec![1, 3]);
        let mut page = vec![0u8; PAGE];
        data.read_at(&mut page, HEADER_BYTES + 3 * PAGE as u64)
            .unwrap();
        assert_eq!(page, a);
        data.read_at(&mut page, HEADER_BYTES + PAGE as u64).unwrap();
        assert_eq!(page, b);
        // A torn image (one byte of the last page lost) is no journal.
        let f = FileStorage::open(&p, false).unwrap();
        let last = HEADER_BYTES + PAGE as u64 + PAGE as u64 + 17;
        f.write_at(&[9], last).unwrap();
        assert!(pending(&p, &header(3, 10)).unwrap().is_none());
        // Cleared: none.
        write(&p, &head(), &[(3, &a)]).unwrap();
        assert!(pending(&p, &header(3, 10)).unwrap().is_some());
        clear(&p).unwrap();
        assert!(pending(&p, &header(3, 10)).unwrap().is_none());
        std::fs::remove_dir_all(&d).unwrap();
    }
}
