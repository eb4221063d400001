//! Runs of the region file mapped at a view's address by plain loads
//! (`view/filemap.rs`): a transaction maps a bounded number of separate
//! runs (each may split the view's mapping), but runs that lie side by
//! side are one mapping in the kernel and do not count. A test binary of
//! its own: it lowers the process-wide limit (`debug::file_run_limit`).
mod common;

use common::*;
use txmap::{Durability, Options, View};

const PAGE: usize = 4096;
/// Pages of the aligned block a read-only transaction's fault maps a run
/// within (`BLOCK` in `view/filemap.rs`; a read-write one's is 64).
const BLOCK: usize = 1024;
const PAGES: usize = 8 * BLOCK;

/// Loads the first word of every page by plain loads; their sum.
fn load_all(v: &View) -> u64 {
    (0..PAGES)
        .map(|p| {
            // SAFETY: an aligned word of the region, in a transaction.
            unsafe { v.base().add(p * PAGE).cast::<u64>().read_volatile() }
        })
        .sum()
}

/// Pages `v` copied in one transaction, begun by `begin`, that loads every
/// page (and checks their sum).
fn copied_reading_all(v: &mut View, begin: fn(&mut View) -> txmap::Result<()>) -> u64 {
    let before = v.installed_pages();
    begin(v).unwrap();
    assert_eq!(load_all(v), PAGES as u64);
    let copied = v.installed_pages() - before;
    v.commit().unwrap();
    copied
}

/// With at most 2 runs per transaction, a read-only and a read-write
/// transaction that each read 8 blocks in order (8 runs, and 128 for the
/// read-write one) copy no page: each run lies beside the last (failed
/// when every run counted, and the read-write runs of 64 pages copied
/// half of a 1 GiB region).
#[test]
fn runs_side_by_side_count_once_and_copy_nothing() {
    txmap::debug::file_run_limit(2);
    let opts = Options {
        durability: Durability::Async,
        ..Options::default()
    };
    let (_d, _p, r) = new_region("file-runs", (PAGES * PAGE) as u64, opts);
    let mut w = r.view().unwrap();
    w.run(|v| {
        for p in 0..PAGES {
            v.write((p * PAGE) as u64, &1u64)?;
        }
        Ok(())
    })
    .unwrap();
    r.checkpoint().unwrap();
    drop(w);
    let mut v = r.view().unwrap();
    // A view's first read-only transaction would map the whole file at
    // once: the runs come from the next one.
    v.begin_read().unwrap();
    v.commit().unwrap();
    assert_eq!(
        copied_reading_all(&mut v, View::begin_read),
        0,
        "a read-only transaction copied"
    );
    // Pages that view read are copied in its later transactions: a fresh one.
    let mut v = r.view().unwrap();
    assert_eq!(
        copied_reading_all(&mut v, View::begin),
        0,
        "a read-write transaction copied"
    );
}
