//! A large write transaction's helper thread (`view/prefill.rs`): it backs
//! the version blocks the commit will fill while the transaction still
//! stores, maps the fresh pages installed ahead of its stores, and is gone
//! when the transaction ends or its view is dropped in the middle. One test
//! in its own binary: it counts this process's threads by name.
mod common;

use std::time::{Duration, Instant};

use common::*;
use txmap::{Options, Region};

const PAGE: u64 = 4096;

/// Pages written: beyond the version store's first chunk (1,024 blocks),
/// so only backing ahead makes room for all of them before the commit.
const PAGES: u64 = 2_500;

fn word(page: u64, i: u64) -> u64 {
    page.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ (i + 1)
}

/// Live threads of this process named as the helper.
fn helpers() -> usize {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .filter(|c| c.trim() == "txmap-prefill")
        .count()
}

/// Waits until `helpers()` is `n`: a new thread names itself once it
/// runs, and a joined one leaves `/proc` a moment after. The bound is only
/// there so that a wrong count fails the test; it measures no speed.
fn helpers_become(n: usize, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while helpers() != n {
        assert!(
            Instant::now() < deadline,
            "{what}: {} helpers, not {n}",
            helpers()
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Stores two words into each of `PAGES` fresh pages from page 1 on.
fn store_pages(v: &mut txmap::View) {
    for page in 1..=PAGES {
        v.write(page * PAGE + 8 * (page % 500), &word(page, 0))
            .unwrap();
        v.write(page * PAGE + PAGE - 8, &word(page, 1)).unwrap();
    }
}

/// Each page holds its two words and zeros elsewhere.
fn check_pages(v: &txmap::View) {
    for page in 1..=PAGES {
        let mut want = vec![0u8; PAGE as usize];
        let at = (8 * (page % 500)) as usize;
        want[at..at + 8].copy_from_slice(&word(page, 0).to_le_bytes());
        want[PAGE as usize - 8..].copy_from_slice(&word(page, 1).to_le_bytes());
        assert!(
            v.slice(page * PAGE, PAGE as usize).unwrap() == &want[..],
            "page {page} lost or gained bytes"
        );
    }
}

#[test]
fn a_large_transaction_has_its_versions_backed_before_it_commits_and_its_helper_ends_with_it() {
    let d = ext4_dir("prefill");
    let p = d.join("r.txm");
    let r = Region::create(&p, (PAGES + 1) * PAGE, Options::default()).unwrap();
    helpers_become(0, "before any transaction");

    // A large transaction dropped in the middle: its helper is joined.
    let mut v = r.view().unwrap();
    v.begin().unwrap();
    store_pages(&mut v);
    helpers_become(1, "a large transaction");
    drop(v);
    helpers_become(0, "the helper outlived its view");

    // The next view may take the dropped view's memory: nothing stored
    // there survives.
    let mut v = r.view().unwrap();
    v.begin().unwrap();
    for page in 1..=PAGES {
        assert_eq!(v.read::<u64>(page * PAGE + PAGE - 8).unwrap(), 0);
    }
    store_pages(&mut v);
    // Backed while the transaction stores, not by its commit. Waiting for
    // the helper to be scheduled is not a measure of speed: the bound is
    // only there so that a helper that never backs fails the test.
    let deadline = Instant::now() + Duration::from_secs(120);
    while r.stats().version_pages_backed < PAGES && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(2));
    }
    assert!(
        r.stats().version_pages_backed >= PAGES,
        "{} version pages backed before a commit of {PAGES} pages",
        r.stats().version_pages_backed
    );
    // Pages the helper mapped read as the view stored them.
    check_pages(&v);
    v.commit().unwrap();
    helpers_become(0, "the helper outlived its transaction");
    let mut w = r.view().unwrap();
    w.begin_read().unwrap();
    check_pages(&w);
    w.commit().unwrap();
    drop((v, w));
    drop(r);

    let r = Region::open(&p, Options::default()).unwrap();
    let mut v = r.view().unwrap();
    v.begin_read().unwrap();
    check_pages(&v);
    v.commit().unwrap();
}
