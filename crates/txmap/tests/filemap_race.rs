//! A plain load of a read-only transaction maps a run of the region file
//! at the user address (`view/filemap.rs`). A commit and a checkpoint that
//! overwrite one of the run's pages while the fault is choosing, mapping
//! or listing the run must not show the newer bytes: the check after the
//! run is listed catches the commit and maps the run back, and the load
//! reads its snapshot's version. The fault is held at each step by a test
//! hook (`debug::pause_file_run`, process-wide: the tests of this binary
//! run one at a time, under `SERIAL`).
//!
//! A fresh view's first read-only transaction maps the whole file at once
//! instead (no fault), at `begin_read` or at the first `View::base` call
//! in it: the same race, held there before the mapping and before the
//! check.
mod common;

use std::sync::Mutex;
use std::time::{Duration, Instant};

use common::*;
use txmap::debug::{FileRunPause, file_run_paused, pause_file_run, release_file_run};
use txmap::{Durability, Options, Region, View};

const PAGE: usize = 4096;
const PAGES: usize = 64;

/// The pause hook is process-wide: one test at a time.
static SERIAL: Mutex<()> = Mutex::new(());

/// Waits (bounded) until the hook armed at `at` holds a thread.
fn wait_paused(at: FileRunPause) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !file_run_paused() {
        assert!(Instant::now() < deadline, "nothing reached {at:?}");
        std::thread::yield_now();
    }
}

/// Plain loads of the first word of every page of `base`'s view.
fn load_all(base: usize) -> Vec<u64> {
    // SAFETY: the view's mapping of a region of PAGES pages, inside its
    // read-only transaction (the caller keeps the view open).
    (0..PAGES)
        .map(|p| unsafe { ((base + p * PAGE) as *const u64).read_volatile() })
        .collect()
}

/// Writes `x` into the first word of every page, then checkpoints.
fn commit_all(r: &Region, w: &mut View, x: u64) {
    w.run(|w| {
        for p in 0..PAGES {
            w.write((p * PAGE) as u64, &x)?;
        }
        Ok(())
    })
    .unwrap();
    r.checkpoint().unwrap();
}

/// A region of `PAGES` pages in a fresh directory (kept while the test
/// runs), in async mode, and a writer's view of it.
fn region(name: &str) -> (TestDir, Region, View) {
    let d = ext4_dir(name);
    let opts = Options {
        durability: Durability::Async,
        ..Options::default()
    };
    let r = Region::create(&d.join("r.txm"), (PAGES * PAGE) as u64, opts).unwrap();
    let w = r.view().unwrap();
    (d, r, w)
}

#[test]
fn a_checkpoint_racing_a_file_run_never_shows_a_load_the_newer_bytes() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (_d, r, mut w) = region("filemap-race");
    let mut x = 1;
    commit_all(&r, &mut w, x);
    for at in [FileRunPause::AfterScan, FileRunPause::AfterMap] {
        for page in [0, PAGES / 2, PAGES - 1] {
            // A fresh view reads the file at snapshot x; its load of `page`
            // waits at `at` while x + 1 is committed and checkpointed.
            let mut v = r.view().unwrap();
            // Not the view's first transaction, which maps the whole file
            // at begin (the test below): its loads fault and map runs.
            v.run(|_| Ok(())).unwrap();
            v.begin_read().unwrap();
            let base = v.base() as usize;
            pause_file_run(at);
            let reader = std::thread::spawn(move || {
                // SAFETY: the view's mapping of a region of PAGES pages,
                // inside its read-only transaction (the view outlives it).
                let got = unsafe { ((base + page * PAGE) as *const u64).read_volatile() };
                // The rest of the run, mapped by the same fault.
                let rest: Vec<u64> = (0..PAGES)
                    .map(|p| unsafe { ((base + p * PAGE) as *const u64).read_volatile() })
                    .collect();
                (got, rest)
            });
            wait_paused(at);
            commit_all(&r, &mut w, x + 1);
            release_file_run();
            let (got, rest) = reader.join().unwrap();
            assert_eq!(got, x, "page {page} read a newer commit at {at:?}");
            assert!(
                rest.iter().all(|&y| y == x),
                "a page read a newer commit at {at:?}: {rest:?}"
            );
            v.commit().unwrap();
            x += 1;
            // The next transaction of a fresh view reads the newest.
            let mut v = r.view().unwrap();
            v.begin_read().unwrap();
            assert_eq!(v.read::<u64>((page * PAGE) as u64).unwrap(), x);
            v.commit().unwrap();
        }
    }
}

#[test]
fn a_checkpoint_racing_a_whole_file_mapping_at_begin_never_shows_a_load_the_newer_bytes() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (_d, r, mut w) = region("filemap-race-whole");
    commit_all(&r, &mut w, 1);
    for (x, at) in [
        (1, FileRunPause::WholeScanned),
        (2, FileRunPause::WholeMapped),
    ] {
        // A fresh view's first read-only transaction takes snapshot x; its
        // first `base` call maps the whole file and waits at `at` while
        // x + 1 is committed and checkpointed; its loads then
        // must read x, and the mapping it made must have been taken back
        // (its loads fault: the file no longer holds every page at x).
        let mut v = r.view().unwrap();
        pause_file_run(at);
        let reader = std::thread::spawn(move || {
            v.begin_read().unwrap();
            let got = load_all(v.base() as usize);
            (v, got)
        });
        wait_paused(at);
        commit_all(&r, &mut w, x + 1);
        release_file_run();
        let (mut v, got) = reader.join().unwrap();
        assert!(
            got.iter().all(|&y| y == x),
            "a load read a newer commit than its snapshot at {at:?}: {got:?}"
        );
        assert!(v.faults() > 0, "the whole mapping was kept at {at:?}");
        v.commit().unwrap();
    }
}

#[test]
fn a_fresh_views_first_read_only_transaction_reads_the_file_without_a_fault_and_keeps_its_snapshot()
{
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (_d, r, mut w) = region("filemap-whole");
    commit_all(&r, &mut w, 1);
    let mut v = r.view().unwrap();
    v.begin_read().unwrap();
    let base = v.base() as usize;
    // Half the pages read before the checkpoint below, half after.
    let first: Vec<u64> = load_all(base)[..PAGES / 2].to_vec();
    assert_eq!(v.faults(), 0, "the first read-only transaction took faults");
    // Newer commits, checkpointed while the transaction reads the file:
    // the fence makes every page it maps private with its snapshot's bytes,
    // read already or not.
    for x in 2..5 {
        commit_all(&r, &mut w, x);
    }
    let all = load_all(base);
    assert!(
        first.iter().chain(&all).all(|&y| y == 1),
        "a load read a commit after the snapshot: {all:?}"
    );
    assert_eq!(v.faults(), 0, "the mapping was taken back under a fence");
    v.commit().unwrap();
    // The next transaction reads the newest, mapping runs as it faults.
    v.begin_read().unwrap();
    assert!(load_all(base).iter().all(|&y| y == 4));
    assert!(
        v.faults() > 0,
        "a later transaction mapped the whole file too"
    );
    v.commit().unwrap();
    // The memory file is back: outside a transaction the view shows the
    // newest data, and a store there is still refused (tested elsewhere).
    assert_eq!(v.read::<u64>(0).unwrap(), 4);
}

/// A view never asked for its address (`View::base`) is used through the
/// accessors: its first read-only transaction does not map the whole file
/// (plain loads through the region's fixed address fault and map runs);
/// one asked for it before its first transaction does.
#[test]
fn only_a_view_whose_address_was_asked_for_maps_the_whole_file_at_begin() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (_d, r, mut w) = region("filemap-whole-asked");
    commit_all(&r, &mut w, 7);
    let at = r.address().expect("the region's fixed address");
    let mut v = r.view_fixed().unwrap();
    v.begin_read().unwrap();
    assert_eq!(v.read::<u64>(0).unwrap(), 7);
    assert!(load_all(at).iter().all(|&y| y == 7));
    assert!(
        v.faults() > 0,
        "a view used by the accessors mapped the whole file"
    );
    v.commit().unwrap();
    drop(v);
    let mut v = r.view_fixed().unwrap();
    assert_eq!(v.base() as usize, at);
    v.begin_read().unwrap();
    assert!(load_all(at).iter().all(|&y| y == 7));
    assert_eq!(
        v.faults(),
        0,
        "the first transaction of a view asked for its address took faults"
    );
    v.commit().unwrap();
}
