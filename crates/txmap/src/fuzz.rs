//! Bodies of the fuzz targets (`fuzz/` at the repository root, run with
//! `cargo +nightly fuzz`), one per on-disk parser. Each takes arbitrary bytes,
//! runs the parser the way the library does, and panics only when an
//! invariant of the parser itself breaks (a decoded value that re-encodes
//! differently, a record that reaches past its buffer). A stable test
//! (`tests/fuzz_smoke.rs`) runs every body over the committed seeds and
//! mutations of them, so the bodies stay built and panic-free without a
//! nightly toolchain. docs/reliability.md, "Fuzzing", has the commands.

use std::cell::RefCell;
use std::ops::Bound;

use crate::collections::{self, Map};
use crate::io::sim::SimStorage;
use crate::os::mem::PAGE;
use crate::wal::format::{
    self, HEADER_BYTES, LogHeader, RECORD_HEADER, RegionHeader, SLOT_OFFSETS,
};
use crate::wal::scan;
use crate::{Options, Region, View};

/// A target: name, corpus directory, body.
pub type Target = (&'static str, &'static str, fn(&[u8]));

/// The targets: name, the corpus directory of their seeds (targets reading
/// the same input format share one), body.
pub const TARGETS: [Target; 9] = [
    ("region_header", "region_header", region_header),
    ("log_header", "log_header", log_header),
    ("log_record", "log_record", log_record),
    ("log_scan", "log_scan", log_scan),
    ("recover", "files", recover),
    ("inspect", "files", inspect),
    ("collections", "data", collections),
    ("collection_ops", "data", collection_ops),
    ("journal", "journal", journal),
];

/// `data` as one header page: cut or zero-padded to [`HEADER_BYTES`].
fn header_page(data: &[u8]) -> Vec<u8> {
    let mut page = data[..data.len().min(HEADER_BYTES as usize)].to_vec();
    page.resize(HEADER_BYTES as usize, 0);
    page
}

/// Decodes a header page; a decoded header written alone into a fresh page
/// must decode to itself.
fn header_roundtrip<H: Copy + PartialEq + std::fmt::Debug>(
    data: &[u8],
    decode: fn(&[u8]) -> Result<H, format::HeaderError>,
    encode: fn(&H) -> (u64, [u8; 64]),
) {
    // Not padded: a short page must be refused or read, never panic.
    let page = &data[..data.len().min(HEADER_BYTES as usize)];
    if let Ok(h) = decode(page) {
        let (off, slot) = encode(&h);
        assert!(SLOT_OFFSETS.contains(&(off as usize)));
        let mut fresh = vec![0u8; HEADER_BYTES as usize];
        fresh[off as usize..off as usize + 64].copy_from_slice(&slot);
        assert_eq!(
            decode(&fresh),
            Ok(h),
            "a decoded header re-encodes differently"
        );
    }
}

/// The region header page (`RegionHeader::decode`), and the same bytes as
/// the plain record page that follows it in a plain file's side file
/// (`PlainRecord::decode`): a decoded record re-encodes to itself.
pub fn region_header(data: &[u8]) {
    header_roundtrip(data, RegionHeader::decode, RegionHeader::encode);
    use crate::io::plain::{PLAIN_PAGE, PlainRecord};
    if let Ok(r) = PlainRecord::decode(data) {
        let (off, slot) = r.encode();
        let mut fresh = vec![0u8; HEADER_BYTES as usize];
        let at = (off - PLAIN_PAGE) as usize;
        fresh[at..at + slot.len()].copy_from_slice(&slot);
        assert_eq!(
            PlainRecord::decode(&fresh),
            Ok(r),
            "a plain record re-encodes differently"
        );
    }
}

/// The log header page (`LogHeader::decode`).
pub fn log_header(data: &[u8]) {
    header_roundtrip(data, LogHeader::decode, LogHeader::encode);
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    b.get(at..at + 8)
        .map_or(0, |s| u64::from_le_bytes(s.try_into().expect("8 bytes")))
}

/// One log record (`decode_record`). Byte 0 chooses the epoch salt: odd, the
/// salt the record claims (so the fuzzer gets past it), even, bytes 1..9.
/// The record is `data[9..]`. A record that decodes must lie inside its
/// buffer, and encoding its fields must give back its bytes.
pub fn log_record(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let buf = rest.get(8..).unwrap_or_default();
    let salt = match mode & 1 {
        1 => u64_at(buf, 16),
        _ => u64_at(rest, 0),
    };
    let Ok(r) = format::decode_record(buf, salt) else {
        return;
    };
    let payload = u32::from_le_bytes(buf[12..16].try_into().expect("4 bytes")) as usize;
    assert!(r.len >= RECORD_HEADER && r.len <= buf.len());
    assert!(r.synced < r.seq);
    let mut out = Vec::new();
    format::encode_commit_ops(
        &mut out,
        salt,
        r.seq,
        r.synced,
        r.data_size,
        r.ranges.iter().cloned(),
        &r.ops,
        r.time,
    );
    assert_eq!(
        &out[..RECORD_HEADER + payload],
        &buf[..RECORD_HEADER + payload],
        "an accepted record re-encodes differently"
    );
}

/// The log header a scan of `log` uses: the decoded one, or else the raw
/// fields of slot 0 (so the records are fuzzed even when the header's
/// checksum is not right).
fn scan_header(log: &[u8]) -> LogHeader {
    LogHeader::decode(&header_page(log)).unwrap_or(LogHeader {
        region_id: u64_at(log, 16),
        generation: u64_at(log, 24),
        salt: u64_at(log, 32),
        start_seq: u64_at(log, 40),
    })
}

/// A whole log file (`scan::scan`), then what `txmap check` reads where the
/// scan stopped. Records come out in sequence, each inside the file.
pub fn log_scan(log: &[u8]) {
    let h = scan_header(log);
    let s = scan::scan(log, &h);
    let mut off = HEADER_BYTES;
    for (i, r) in s.records.iter().enumerate() {
        assert_eq!(r.seq, h.start_seq.wrapping_add(i as u64));
        off += r.len as u64;
    }
    assert_eq!(off.max(HEADER_BYTES), s.end.max(HEADER_BYTES));
    if let Some(c) = &s.damage {
        assert!(c.offset >= HEADER_BYTES && c.offset <= log.len() as u64);
    }
    let end = (s.end as usize).min(log.len());
    crate::inspect::fuzz_tail(log, end, &h, h.start_seq + s.records.len() as u64);
}

/// Splits an input into a region file and a log file: a little-endian u32
/// (the region file's length, cut to what is there), then the region file,
/// then the log.
pub fn split_files(data: &[u8]) -> (&[u8], &[u8]) {
    let n = data.get(..4).map_or(0, |b| {
        u32::from_le_bytes(b.try_into().expect("4 bytes")) as usize
    });
    let rest = data.get(4..).unwrap_or_default();
    rest.split_at(n.min(rest.len()))
}

/// The inverse of [`split_files`], for writing seeds.
pub fn join_files(region: &[u8], log: &[u8]) -> Vec<u8> {
    let mut out = (region.len() as u32).to_le_bytes().to_vec();
    out.extend_from_slice(region);
    out.extend_from_slice(log);
    out
}

/// Largest region a fuzzed log may grow recovery to: the in-memory device
/// keeps a copy of its durable bytes, so a record claiming terabytes would
/// exhaust memory in the harness, not in the library (which only
/// `ftruncate`s a sparse file).
const RECOVER_MAX: u64 = 64 << 20;

/// Recovery as `Region::open` runs it (`region::recover`): both headers,
/// their pairing, the log scan and the replay, on in-memory files.
pub fn recover(data: &[u8]) {
    let (region, log) = split_files(data);
    let h = scan_header(log);
    let big = |size: u64| size > RECOVER_MAX;
    if RegionHeader::decode(&header_page(region)).is_ok_and(|r| big(r.data_size))
        || scan::scan(log, &h).records.iter().any(|r| big(r.data_size))
    {
        return;
    }
    // As an open does, then as `txmap recover --accept-loss` does.
    for accept_loss in [false, true] {
        let (Ok(d), Ok(l)) = (
            SimStorage::from_bytes("fuzz-region", region.to_vec()),
            SimStorage::from_bytes("fuzz-log", log.to_vec()),
        ) else {
            return;
        };
        let _ = crate::recovery::recover(
            crate::recovery::Files {
                data: &d,
                log: &l,
                sums: None,
                journal: None,
            },
            None,
            accept_loss,
        );
    }
}

thread_local! {
    static FILES: RefCell<Option<tempdir::Dir>> = const { RefCell::new(None) };
}

mod tempdir {
    /// A directory removed when dropped.
    pub struct Dir(pub std::path::PathBuf);
    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

/// A private directory for files written by the targets (on tmpfs when
/// `/dev/shm` exists).
fn scratch_dir() -> std::path::PathBuf {
    FILES.with(|f| {
        f.borrow_mut()
            .get_or_insert_with(|| {
                let base = match std::path::Path::new("/dev/shm").is_dir() {
                    true => std::path::PathBuf::from("/dev/shm"),
                    false => std::env::temp_dir(),
                };
                let d = base.join(format!(
                    "txmap-fuzz-{}-{:?}",
                    std::process::id(),
                    std::thread::current().id()
                ));
                std::fs::create_dir_all(&d).expect("scratch directory");
                tempdir::Dir(d)
            })
            .0
            .clone()
    })
}

/// `txmap check` (`inspect::check`, and `inspect` when it passes) on a region
/// file and its log written from the input.
pub fn inspect(data: &[u8]) {
    let (region, log) = split_files(data);
    let dir = scratch_dir();
    let path = dir.join("r.txm");
    if std::fs::write(&path, region).is_err()
        || std::fs::write(crate::log_path(&path), log).is_err()
    {
        return;
    }
    if let Ok(c) = crate::inspect::check(&path)
        && c.is_sound()
    {
        let _ = crate::inspect::inspect(&path);
    }
}

/// Region data pages the collection targets overwrite (the rest stay zero).
const COLLECTION_PAGES: u64 = 256;

struct Fixture {
    view: View,
    _region: Region,
}

thread_local! {
    static VIEW: RefCell<Option<Fixture>> = const { RefCell::new(None) };
}

/// Runs `f` on a view of a scratch region whose data starts with `data` (the
/// rest zero), inside a transaction that is then aborted.
fn with_data(data: &[u8], f: impl FnOnce(&mut View)) {
    VIEW.with(|cell| {
        let mut cell = cell.borrow_mut();
        let fx = cell.get_or_insert_with(|| {
            let dir = scratch_dir();
            let path = dir.join(format!("c{}.txm", std::process::id()));
            let _ = std::fs::remove_file(&path);
            let _ = std::fs::remove_file(crate::log_path(&path));
            // Growth (a put into a full heap) is not undone with the
            // transaction: a small maximum keeps the fuzzer's memory bounded.
            let opts = Options {
                max_size: 64 << 20,
                ..Options::default()
            };
            let region = Region::create(&path, COLLECTION_PAGES * PAGE as u64, opts)
                .expect("scratch region");
            let view = region.view().expect("scratch view");
            // Nothing is committed and the mappings hold what is needed: the
            // files and the shared state go now, so that a fuzzer that
            // exits without dropping the view leaves nothing behind.
            let page = std::fs::read(&path).unwrap_or_default();
            if let Ok(h) = RegionHeader::decode(&header_page(&page))
                && let Ok(shared) = crate::shared_path(&path, h.region_id)
            {
                let _ = std::fs::remove_file(shared);
            }
            let _ = std::fs::remove_file(crate::log_path(&path));
            let _ = std::fs::remove_file(&path);
            Fixture {
                view,
                _region: region,
            }
        });
        let v = &mut fx.view;
        let n = data.len().min(v.len());
        v.begin().expect("begin");
        if n > 0 {
            v.slice_mut(0, n)
                .expect("whole data")
                .copy_from_slice(&data[..n]);
        }
        f(v);
        // Ends the transaction, discarding its stores (`abort` alone would
        // leave it open, and the next `begin` would nest in it).
        v.rollback();
    });
}

/// `txmap check --structures` (`collections::check_region`) on region data
/// from the input: the heap, the catalog and every structure in it (B+-tree
/// nodes, cobtree PMA and index, linear hash buckets, array segments).
pub fn collections(data: &[u8]) {
    with_data(data, |v| {
        let _ = collections::check_region_in(v);
    });
}

/// Reads and writes through each map of the catalog of region data from the
/// input: get, scan, put, delete (what an application does with a damaged
/// structure it has not checked). Errors are fine; panics are not.
pub fn collection_ops(data: &[u8]) {
    with_data(data, |v| {
        let Ok(entries) = collections::alloc::catalog(v) else {
            return;
        };
        for e in entries.iter().take(4) {
            let m = match collections::Structure::open(v, e.kind, e.at) {
                Ok(collections::Structure::Map(m)) => m,
                Ok(collections::Structure::Array(a)) => {
                    let _ = a.get(v, 0);
                    let _ = a.push(v, &[1; 8]);
                    let _ = a.pop(v);
                    continue;
                }
                Err(_) => continue,
            };
            let _ = m.get(v, b"key-1");
            let mut seen = 0;
            let _ = m.scan(v, Bound::Unbounded, Bound::Unbounded, &mut |_, _| {
                seen += 1;
                Ok(seen < 64)
            });
            let _ = m.put(v, b"key-1", b"fuzz");
            let _ = m.put(v, b"fuzz-new-key", &[7; 300]);
            let _ = m.delete(v, b"key-2");
        }
    });
}

/// Largest page count of a fuzzed journal that is applied (each page is
/// written into an in-memory region file).
const JOURNAL_MAX_PAGES: u64 = 256;

/// The page journal (`journal.rs`) as recovery reads it: checked against
/// the region header it names, then written into an in-memory region file.
/// Run on the bytes as they are (the checksum rejects almost every
/// mutation) and with the checksum recomputed, so the fields behind it are
/// exercised too.
pub fn journal(data: &[u8]) {
    let mut sealed = data.to_vec();
    seal_journal(&mut sealed);
    for bytes in [data, &sealed[..]] {
        journal_once(bytes);
    }
}

fn journal_once(data: &[u8]) {
    let path = scratch_dir().join("journal");
    if std::fs::write(&path, data).is_err() {
        return;
    }
    // The header it claims to continue, so a well-formed journal is used.
    let word = |o: usize| {
        data.get(o..o + 8)
            .map_or(0, |b| u64::from_le_bytes(b.try_into().expect("8 bytes")))
    };
    let header = RegionHeader {
        region_id: word(16),
        generation: word(24),
        checkpoint_seq: word(32),
        data_size: PAGE as u64,
        address: 0,
    };
    let Ok(Some(j)) = crate::journal::pending(&path, &header) else {
        return;
    };
    assert!(j.head.as_of > j.head.from, "a used journal moves forward");
    assert_eq!(j.head.generation, header.generation);
    if j.head.data_size > RECOVER_MAX || u64::from(j.pages()) > JOURNAL_MAX_PAGES {
        return;
    }
    let Ok(d) = SimStorage::from_bytes("fuzz-region", vec![0; HEADER_BYTES as usize]) else {
        return;
    };
    if let Ok(pages) = j.apply(&d) {
        for p in pages {
            assert!(
                p * (PAGE as u64) < j.head.data_size,
                "page {p} past the size"
            );
        }
    }
}

/// Recomputes a journal's checksum over what its page count covers.
fn seal_journal(b: &mut [u8]) {
    if b.len() < HEADER_BYTES as usize {
        return;
    }
    let count = u32::from_le_bytes(b[12..16].try_into().expect("4 bytes")) as u64;
    let list = crate::journal::list_bytes(count as usize);
    let end = HEADER_BYTES + list + count * PAGE as u64;
    if end > b.len() as u64 {
        return;
    }
    let mut crc = crc32c::crc32c(&b[..56]);
    crc = crc32c::crc32c_append(crc, &b[HEADER_BYTES as usize..end as usize]);
    b[56..60].copy_from_slice(&crc.to_le_bytes());
}

/// A journal of two pages, continuing a region header with id 7,
/// generation 3 and checkpoint 10 (seeds for the `journal` target).
pub fn journal_seed() -> Vec<u8> {
    let path = scratch_dir().join("journal-seed");
    let head = crate::journal::Head {
        region_id: 7,
        generation: 3,
        from: 10,
        as_of: 12,
        data_size: 4 * PAGE as u64,
    };
    let a: Vec<u8> = (0..PAGE).map(|i| (i % 251) as u8).collect();
    let b = vec![0x5a; PAGE];
    crate::journal::write(&path, &head, &[(2, &a), (0, &b)]).expect("write a journal seed");
    std::fs::read(&path).expect("read the journal seed")
}
