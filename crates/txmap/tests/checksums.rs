//! Page checksums (`PATH-sums`): a flipped bit in a checkpointed page is
//! found by `check` and refused on open; pages never checkpointed, pages
//! the log rewrites, and tables a session without checksums left behind are
//! not reported.

mod common;

use std::path::Path;

use common::*;
use txmap::inspect::check;
use txmap::sums::sums_path;
use txmap::wal::format::HEADER_BYTES;
use txmap::{Error, Options, Region};

const PAGE: u64 = 4096;

/// Page `p`'s content in these tests: every byte derived from `p` and `round`.
fn fill(p: u64, round: u8) -> Vec<u8> {
    (0..PAGE).map(|i| (i as u8) ^ (p as u8) ^ round).collect()
}

fn write_pages(r: &Region, pages: std::ops::Range<u64>, round: u8) {
    let mut v = r.view().unwrap();
    for p in pages {
        v.begin().unwrap();
        v.slice_mut(p * PAGE, PAGE as usize)
            .unwrap()
            .copy_from_slice(&fill(p, round));
        v.commit().unwrap();
    }
}

fn copy_all(from: &Path, to: &Path) {
    copy_region(from, to);
    std::fs::copy(sums_path(from), sums_path(to)).unwrap();
}

fn corrupt_offset(e: &Error) -> u64 {
    match e {
        Error::Corrupt { offset, .. } => *offset,
        other => panic!("expected a corruption error, got {other:?}"),
    }
}

#[test]
fn a_flipped_bit_in_any_checkpointed_page_is_named_by_check_and_refused_on_open() {
    let d = ext4_dir("sums-flip");
    let src = d.join("src.txm");
    let r = Region::create(&src, 32 * PAGE, Options::default()).unwrap();
    write_pages(&r, 0..20, 1);
    r.close().unwrap();
    let c = check(&src).unwrap();
    assert!(c.is_sound(), "{c:?}");
    assert_eq!(c.report.checksummed_pages, Some(20));
    for (n, (page, byte)) in [(0u64, 0u64), (7, 1234), (19, PAGE - 1)]
        .into_iter()
        .enumerate()
    {
        let p = d.join(&format!("copy{n}.txm"));
        copy_all(&src, &p);
        let at = HEADER_BYTES + page * PAGE + byte;
        flip(&p, at);
        let c = check(&p).unwrap();
        assert!(!c.is_sound(), "page {page}: check found nothing");
        assert_eq!(c.problems.len(), 1, "{:?}", c.problems);
        assert!(
            c.problems[0].contains(&format!("at file offset {}", HEADER_BYTES + page * PAGE)),
            "{:?}",
            c.problems
        );
        let e = Region::open(&p, Options::default())
            .err()
            .expect("open refuses");
        assert_eq!(corrupt_offset(&e), HEADER_BYTES + page * PAGE, "{e}");
        // The damaged copy is left as it was: the refusal wrote nothing.
        let c = check(&p).unwrap();
        assert_eq!(c.problems.len(), 1, "{:?}", c.problems);
    }
}

#[test]
fn pages_never_checkpointed_are_not_reported() {
    let d = ext4_dir("sums-never");
    let p = d.join("r.txm");
    let r = Region::create(&p, 32 * PAGE, Options::default()).unwrap();
    write_pages(&r, 0..4, 1);
    r.close().unwrap();
    // Page 20 was never written, so never checkpointed: it has no entry.
    flip(&p, HEADER_BYTES + 20 * PAGE + 5);
    let c = check(&p).unwrap();
    assert!(c.is_sound(), "{c:?}");
    assert_eq!(c.report.checksummed_pages, Some(4));
    drop(Region::open(&p, Options::default()).unwrap());
}

#[test]
fn a_page_torn_by_an_interrupted_checkpoint_is_repaired_from_the_log() {
    let d = ext4_dir("sums-torn");
    let src = d.join("src.txm");
    let r = Region::create(&src, 16 * PAGE, Options::default()).unwrap();
    write_pages(&r, 0..4, 1);
    r.checkpoint().unwrap();
    // Newer versions of pages 1 and 2, only in the log.
    write_pages(&r, 1..3, 2);
    let crashed = d.join("crashed.txm");
    copy_all(&src, &crashed);
    drop(r);
    // An interrupted checkpoint: page 1 fully written, page 2 half, and
    // neither entry updated.
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&crashed)
        .unwrap();
    use std::os::unix::fs::FileExt;
    f.write_all_at(&fill(1, 2), HEADER_BYTES + PAGE).unwrap();
    f.write_all_at(&fill(2, 2)[..2048], HEADER_BYTES + 2 * PAGE)
        .unwrap();
    drop(f);
    let c = check(&crashed).unwrap();
    assert!(c.is_sound(), "pages the log rewrites are not damage: {c:?}");
    let r = Region::open(&crashed, Options::default()).unwrap();
    let v = r.view().unwrap();
    for p in 0..4 {
        let want = fill(p, if (1..3).contains(&p) { 2 } else { 1 });
        assert_eq!(
            v.slice(p * PAGE, PAGE as usize).unwrap(),
            &want[..],
            "page {p}"
        );
    }
    drop(v);
    drop(r);
    let c = check(&crashed).unwrap();
    assert!(c.is_sound(), "{c:?}");
    assert_eq!(c.report.checksummed_pages, Some(4));
}

#[test]
fn a_table_left_behind_by_a_session_without_checksums_is_reset_not_trusted() {
    let d = ext4_dir("sums-stale");
    let p = d.join("r.txm");
    let r = Region::create(&p, 16 * PAGE, Options::default()).unwrap();
    write_pages(&r, 0..4, 1);
    r.close().unwrap();
    let saved = std::fs::read(sums_path(&p)).unwrap();
    let off = Options {
        page_checksums: false,
        ..Options::default()
    };
    let r = Region::open(&p, off).unwrap();
    assert!(
        !sums_path(&p).exists(),
        "opening without checksums drops the table"
    );
    write_pages(&r, 0..4, 3);
    r.close().unwrap();
    // As if a build without the table had checkpointed over it.
    std::fs::write(sums_path(&p), saved).unwrap();
    let c = check(&p).unwrap();
    assert!(c.is_sound(), "{c:?}");
    assert_eq!(c.report.checksummed_pages, None);
    let r = Region::open(&p, Options::default()).unwrap();
    write_pages(&r, 0..2, 4);
    r.close().unwrap();
    let c = check(&p).unwrap();
    assert!(c.is_sound(), "{c:?}");
    assert_eq!(c.report.checksummed_pages, Some(2));
}
