//! The bulk load's shortcuts (issue 20). Pages a grow added are read from
//! a static zero page until the region file is written there
//! (`FileShared::zero_from`): what a checkpoint wrote into them must be read
//! back, never zeros. A large record is written from its pieces with one
//! vectored write (`format::encode_pieces`): recovery must replay it.
mod common;

use common::*;
use txmap::{Options, Region};

const PAGE: u64 = 4096;

fn pattern(page: u64, i: u64) -> u64 {
    page.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ i.wrapping_add(1)
}

/// Closes `r` (its views closed first) and opens it again, with a view in
/// a read-only transaction.
fn reopen(r: Region, p: &std::path::Path) -> (Region, txmap::View) {
    drop(r);
    let r = Region::open(p, Options::default()).unwrap();
    let mut v = r.view().unwrap();
    v.begin_read().unwrap();
    (r, v)
}

#[test]
fn grown_pages_a_checkpoint_wrote_read_back_in_a_fresh_view() {
    let d = ext4_dir("fresh-pages");
    let p = d.join("r.txm");
    let r = Region::create(&p, 16 * PAGE, Options::default()).unwrap();
    let mut v = r.view().unwrap();
    v.begin().unwrap();
    v.grow(64 * PAGE).unwrap();
    // Pages 20..40 are fresh: every word but the last of each is written,
    // so a page's tail must still read as the zeros the file holds.
    for page in 20..40 {
        for i in 0..PAGE / 8 - 1 {
            v.write(page * PAGE + i * 8, &pattern(page, i)).unwrap();
        }
    }
    v.commit().unwrap();
    // Into the file, and the versions trimmed: a fresh snapshot now takes
    // these pages from the file, not from the version chains.
    r.checkpoint().unwrap();
    r.checkpoint().unwrap();

    // Read through pages this transaction writes (installed from their
    // snapshot source; read-only reads may take the file's pages directly).
    let mut w = r.view().unwrap();
    w.begin().unwrap();
    for page in 20..40 {
        w.write(page * PAGE + PAGE - 1, &0u8).unwrap();
        for i in 0..PAGE / 8 - 1 {
            assert_eq!(
                w.read::<u64>(page * PAGE + i * 8).unwrap(),
                pattern(page, i),
                "page {page} word {i}: a page the checkpoint wrote read as the grow's zeros"
            );
        }
        assert_eq!(w.read::<u64>(page * PAGE + PAGE - 8).unwrap(), 0);
    }
    // Pages the grow added and nothing wrote read as zeros.
    for page in (16..20).chain(40..64) {
        assert!(
            w.slice(page * PAGE, PAGE as usize)
                .unwrap()
                .iter()
                .all(|&b| b == 0)
        );
    }
    w.commit().unwrap();

    // A write to a page the file has (written by the checkpoint) diffs
    // against the file's content: only the changed word is new.
    w.begin().unwrap();
    w.write(25 * PAGE + 16, &7u64).unwrap();
    w.commit().unwrap();
    drop((v, w));
    let (_r, mut v) = reopen(r, &p);
    for page in 20..40 {
        for i in 0..PAGE / 8 - 1 {
            let want = if page == 25 && i == 2 {
                7
            } else {
                pattern(page, i)
            };
            assert_eq!(v.read::<u64>(page * PAGE + i * 8).unwrap(), want);
        }
    }
    v.commit().unwrap();
}

#[test]
fn a_second_grow_keeps_pages_a_checkpoint_wrote() {
    // Checkpoints after each of two grows: pages written in the first
    // grow's range and in the second's are read back, untouched ones as zeros.
    let d = ext4_dir("fresh-pages-regrow");
    let p = d.join("r.txm");
    let r = Region::create(&p, 16 * PAGE, Options::default()).unwrap();
    let mut v = r.view().unwrap();
    v.begin().unwrap();
    v.grow(32 * PAGE).unwrap();
    v.write(20 * PAGE, &0x1234_u64).unwrap();
    v.commit().unwrap();
    r.checkpoint().unwrap();
    v.begin().unwrap();
    v.grow(128 * PAGE).unwrap();
    v.write(100 * PAGE + 8, &0x5678_u64).unwrap();
    v.commit().unwrap();
    r.checkpoint().unwrap();
    r.checkpoint().unwrap();
    let mut w = r.view().unwrap();
    w.begin().unwrap();
    for page in [20, 60, 100] {
        w.write(page * PAGE + PAGE - 1, &0u8).unwrap();
    }
    assert_eq!(w.read::<u64>(20 * PAGE).unwrap(), 0x1234);
    assert_eq!(w.read::<u64>(100 * PAGE + 8).unwrap(), 0x5678);
    assert_eq!(w.read::<u64>(100 * PAGE).unwrap(), 0);
    assert_eq!(w.read::<u64>(60 * PAGE).unwrap(), 0);
    w.commit().unwrap();
}

#[test]
fn a_large_record_written_from_its_pieces_is_recovered() {
    let d = ext4_dir("bulk-record");
    let p = d.join("r.txm");
    let q = d.join("copy.txm");
    let opts = Options {
        checkpoint_bytes: 1 << 30,
        ..Options::default()
    };
    let r = Region::create(&p, 256 * PAGE, opts.clone()).unwrap();
    let mut v = r.view().unwrap();
    // 200 pages, each with a gap that splits it into two ranges: a record
    // of about 800 KiB, far above the size written from pieces.
    v.begin().unwrap();
    for page in 0..200 {
        for i in (0..PAGE / 8).filter(|&i| i != 100) {
            v.write(page * PAGE + i * 8, &pattern(page, i)).unwrap();
        }
    }
    v.commit().unwrap();
    // The commit is in the log only (no checkpoint yet): a copy of the
    // files must recover it from the record.
    let log = txmap::log_path(&p);
    assert_eq!(
        record_offsets(&log).len(),
        1,
        "the bulk commit's record decodes (its CRC matches)"
    );
    copy_region(&p, &q);
    let r2 = Region::open(&q, opts).unwrap();
    let mut w = r2.view().unwrap();
    w.begin_read().unwrap();
    for page in 0..200 {
        for i in 0..PAGE / 8 {
            let want = if i == 100 { 0 } else { pattern(page, i) };
            assert_eq!(
                w.read::<u64>(page * PAGE + i * 8).unwrap(),
                want,
                "page {page} word {i} after recovery"
            );
        }
    }
    w.commit().unwrap();
}

/// A store into a page a grow added installs the fresh pages after it at
/// once (`install_zeros_ahead`): a page this transaction wrote already and
/// a page another view committed since the grow keep their bytes, the run
/// ends at the region's end, the rest reads as zeros, and a commit by
/// another view into a page installed ahead is seen by the next
/// transaction.
#[test]
fn a_store_into_a_fresh_page_installs_the_next_ones_and_loses_no_bytes() {
    let d = ext4_dir("zeros-ahead");
    let p = d.join("r.txm");
    let r = Region::create(&p, 16 * PAGE, Options::default()).unwrap();
    // Page 12 in the region file, the pages around it holes.
    let mut b = r.view().unwrap();
    b.run(|b| b.write(12 * PAGE, &pattern(12, 0))).unwrap();
    r.checkpoint().unwrap();
    r.checkpoint().unwrap();
    r.grow(200 * PAGE).unwrap();
    b.run(|b| b.write(30 * PAGE + 8, &0xB0B0u64)).unwrap();
    let mut v = r.view().unwrap();
    v.begin().unwrap();
    // Each store's run of fresh pages would reach a page that must keep
    // its bytes: 150 written here, 30 committed by `b`, 12 in the file,
    // the region's end.
    let pages = [150u64, 140, 25, 198, 10];
    for page in pages {
        v.write(page * PAGE, &pattern(page, 0)).unwrap();
    }
    for page in 10..200u64 {
        let bytes = v.slice(page * PAGE, PAGE as usize).unwrap();
        let mut want = vec![0u8; PAGE as usize];
        if pages.contains(&page) || page == 12 {
            want[..8].copy_from_slice(&pattern(page, 0).to_le_bytes());
        }
        if page == 30 {
            want[8..16].copy_from_slice(&0xB0B0u64.to_le_bytes());
        }
        assert!(bytes == &want[..], "page {page} lost or gained bytes");
    }
    v.commit().unwrap();
    // Page 141 was installed ahead of the store into 140.
    b.run(|b| b.write(141 * PAGE + 16, &0xC0C0u64)).unwrap();
    v.begin().unwrap();
    assert_eq!(v.read::<u64>(141 * PAGE + 16).unwrap(), 0xC0C0);
    v.write(142 * PAGE, &1u64).unwrap();
    v.commit().unwrap();
    drop((b, v));
    let (_r, mut v) = reopen(r, &p);
    for page in pages {
        assert_eq!(v.read::<u64>(page * PAGE).unwrap(), pattern(page, 0));
    }
    assert_eq!(v.read::<u64>(12 * PAGE).unwrap(), pattern(12, 0));
    assert_eq!(v.read::<u64>(30 * PAGE + 8).unwrap(), 0xB0B0);
    assert_eq!(v.read::<u64>(141 * PAGE + 16).unwrap(), 0xC0C0);
    assert_eq!(v.read::<u64>(142 * PAGE).unwrap(), 1);
    v.commit().unwrap();
}
