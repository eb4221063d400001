//! A plain load of a read-only transaction maps a run of the region file
//! at the user address (`view/filemap.rs`). A commit and a checkpoint that
//! overwrite one of the run's pages while the fault is choosing, mapping
//! or listing the run must not show the newer bytes: the check after the
//! run is listed catches the commit and maps the run back, and the load
//! reads its snapshot's version. The fault is held at each step by a test
//! hook (`debug::pause_file_run`, process-wide: one test in its own binary).
mod common;

use std::time::{Duration, Instant};

use common::*;
use txmap::debug::{FileRunPause, file_run_paused, pause_file_run, release_file_run};
use txmap::{Durability, Options, Region, View};

const PAGE: usize = 4096;
const PAGES: usize = 64;

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

#[test]
fn a_checkpoint_racing_a_file_run_never_shows_a_load_the_newer_bytes() {
    let d = ext4_dir("filemap-race");
    let opts = Options {
        durability: Durability::Async,
        ..Options::default()
    };
    let r = Region::create(&d.join("r.txm"), (PAGES * PAGE) as u64, opts).unwrap();
    let mut w = r.view().unwrap();
    let mut x = 1;
    commit_all(&r, &mut w, x);
    for at in [FileRunPause::AfterScan, FileRunPause::AfterMap] {
        for page in [0, PAGES / 2, PAGES - 1] {
            // A fresh view reads the file at snapshot x; its load of `page`
            // waits at `at` while x + 1 is committed and checkpointed.
            let mut v = r.view().unwrap();
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
            let deadline = Instant::now() + Duration::from_secs(60);
            while !file_run_paused() {
                assert!(Instant::now() < deadline, "the fault never reached {at:?}");
                std::thread::yield_now();
            }
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
