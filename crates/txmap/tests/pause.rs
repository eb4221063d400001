//! Pause and resume (TxOS+ `xpause`/`xresume`): a paused transaction keeps
//! its snapshot, reads and writes while its view runs other transactions,
//! and validates at commit as if it had never been paused.
mod common;

use common::*;
use txmap::{Error, Options, Region, View};

const PAGE: u64 = 4096;

fn region(name: &str, pages: u64) -> (TestDir, Region) {
    let d = ext4_dir(name);
    let r = Region::create(&d.join("r.txm"), pages * PAGE, Options::default()).unwrap();
    (d, r)
}

/// A plain load through the view's memory (no accessor, so an untracked
/// transaction may take no fault for it).
fn load(v: &View, off: u64) -> u64 {
    // SAFETY: in bounds of the view's mapping; u64-aligned.
    unsafe { std::ptr::read_volatile(v.base().add(off as usize).cast::<u64>()) }
}

#[test]
fn a_paused_transaction_keeps_its_writes_while_its_view_runs_another() {
    let (_d, r) = region("pause-keep", 4);
    let mut v = r.view().unwrap();
    v.begin().unwrap();
    v.write(0, &11u64).unwrap();
    assert_eq!(v.read::<u64>(PAGE).unwrap(), 0);
    let p = v.pause().unwrap();
    assert!(!v.in_transaction());
    // Its store is invisible outside it, also through this view.
    assert_eq!(load(&v, 0), 0);
    v.run(|v| v.write(2 * PAGE, &7u64)).unwrap();
    v.begin_read().unwrap();
    assert_eq!(v.read::<u64>(0).unwrap(), 0);
    v.commit().unwrap();
    v.resume(p).unwrap();
    assert!(v.in_transaction());
    assert_eq!(v.read::<u64>(0).unwrap(), 11);
    assert_eq!(load(&v, 0), 11);
    v.write(3 * PAGE, &13u64).unwrap();
    v.commit().unwrap();
    let mut w = r.view().unwrap();
    w.begin_read().unwrap();
    let got: Vec<u64> = (0..4).map(|p| w.read(p * PAGE).unwrap()).collect();
    assert_eq!(got, [11, 0, 7, 13]);
    w.commit().unwrap();
}

#[test]
fn a_resumed_transaction_reads_its_snapshot_not_what_committed_meanwhile() {
    let (_d, r) = region("pause-snapshot", 4);
    let mut v = r.view().unwrap();
    v.run(|v| v.write(PAGE, &1u64)).unwrap();
    v.begin().unwrap();
    v.write(0, &5u64).unwrap();
    let p = v.pause().unwrap();
    // The same view commits page 1 (so it holds the new version) and reads it.
    v.run(|v| v.write(PAGE, &2u64)).unwrap();
    assert_eq!(load(&v, PAGE), 2);
    v.resume(p).unwrap();
    assert_eq!(load(&v, PAGE), 1, "plain load after resume");
    assert_eq!(v.read::<u64>(PAGE).unwrap(), 1, "accessor after resume");
    // It read a page committed after its snapshot: serializable says no.
    assert!(matches!(v.commit(), Err(Error::Conflict)));
}

#[test]
fn a_commit_during_the_pause_of_a_page_read_before_it_conflicts() {
    for (plain, tracked) in [(false, false), (true, false), (false, true), (true, true)] {
        let (_d, r) = region(&format!("pause-conflict-{plain}-{tracked}"), 4);
        let mut v = r.view().unwrap();
        let mut other = r.view().unwrap();
        // Make page 1 valid in `v`, so an untracked plain load takes no fault.
        v.run(|v| v.write(PAGE, &1u64)).unwrap();
        assert_eq!(load(&v, PAGE), 1);
        if tracked {
            // An untracked conflict makes the view's next transaction track its reads.
            v.begin().unwrap();
            let _ = v.read::<u64>(3 * PAGE).unwrap();
            other.run(|o| o.write(3 * PAGE, &1u64)).unwrap();
            v.write(2 * PAGE, &1u64).unwrap();
            assert!(matches!(v.commit(), Err(Error::Conflict)));
        }
        v.begin().unwrap();
        let seen = if plain {
            load(&v, PAGE)
        } else {
            v.read::<u64>(PAGE).unwrap()
        };
        v.write(0, &(seen + 1)).unwrap();
        let p = v.pause().unwrap();
        other.run(|o| o.write(PAGE, &9u64)).unwrap();
        v.resume(p).unwrap();
        assert!(
            matches!(v.commit(), Err(Error::Conflict)),
            "plain load: {plain}, tracked: {tracked}"
        );
        other.begin_read().unwrap();
        assert_eq!(other.read::<u64>(0).unwrap(), 0, "nothing of it committed");
        other.commit().unwrap();
    }
}

#[test]
fn unrelated_commits_during_the_pause_do_not_conflict() {
    let (_d, r) = region("pause-unrelated", 4);
    let mut v = r.view().unwrap();
    let mut other = r.view().unwrap();
    v.begin().unwrap();
    let x: u64 = v.read(PAGE).unwrap();
    v.write(0, &(x + 1)).unwrap();
    let p = v.pause().unwrap();
    other.run(|o| o.write(2 * PAGE, &3u64)).unwrap();
    v.run(|v| v.write(3 * PAGE, &4u64)).unwrap();
    v.resume(p).unwrap();
    v.commit().unwrap();
    other.begin_read().unwrap();
    let got: Vec<u64> = (0..4).map(|p| other.read(p * PAGE).unwrap()).collect();
    assert_eq!(got, [1, 0, 3, 4]);
    other.commit().unwrap();
}

#[test]
fn a_dropped_paused_transaction_rolls_back_and_frees_its_snapshot() {
    let (_d, r) = region("pause-drop", 2);
    let mut v = r.view().unwrap();
    v.begin().unwrap();
    v.write(0, &1u64).unwrap();
    let p = v.pause().unwrap();
    assert_eq!(r.stats().live_snapshots, 1);
    drop(p);
    assert_eq!(r.stats().live_snapshots, 0);
    v.begin_read().unwrap();
    assert_eq!(v.read::<u64>(0).unwrap(), 0);
    v.commit().unwrap();
}

#[test]
fn a_paused_transaction_resumes_on_another_view_and_keeps_its_nesting() {
    let (_d, r) = region("pause-move", 2);
    let mut a = r.view().unwrap();
    let mut b = r.view().unwrap();
    a.begin().unwrap();
    a.begin().unwrap();
    a.write(0, &21u64).unwrap();
    let p = a.pause().unwrap();
    b.resume(p).unwrap();
    assert_eq!(b.read::<u64>(0).unwrap(), 21);
    b.commit().unwrap(); // inner
    assert!(b.in_transaction());
    b.commit().unwrap();
    a.begin_read().unwrap();
    assert_eq!(a.read::<u64>(0).unwrap(), 21);
    a.commit().unwrap();
}

#[test]
fn resume_refuses_inside_a_transaction_and_across_regions() {
    let (_d, r) = region("pause-refuse", 2);
    let (_d2, r2) = region("pause-refuse2", 2);
    let mut v = r.view().unwrap();
    assert!(matches!(
        v.pause(),
        Err(Error::NotInTransaction { op: "pause" })
    ));
    v.begin().unwrap();
    v.write(0, &1u64).unwrap();
    let p = v.pause().unwrap();
    v.begin().unwrap();
    assert!(matches!(v.resume(p), Err(Error::Invalid(_))));
    v.commit().unwrap();
    v.begin().unwrap();
    v.write(0, &2u64).unwrap();
    let p = v.pause().unwrap();
    let mut w = r2.view().unwrap();
    assert!(matches!(w.resume(p), Err(Error::Invalid(_))));
    // Both refusals dropped (rolled back) the paused transaction.
    v.begin_read().unwrap();
    assert_eq!(v.read::<u64>(0).unwrap(), 0);
    v.commit().unwrap();
}

#[test]
fn a_resumed_transaction_that_aborts_leaves_its_view_reading_what_it_committed_meanwhile() {
    let (_d, r) = region("pause-own-commit", 2);
    let mut v = r.view().unwrap();
    v.begin().unwrap();
    v.write(0, &1u64).unwrap();
    let p = v.pause().unwrap();
    // The same view commits to the page the paused transaction wrote.
    v.run(|v| v.write(8, &7u64)).unwrap();
    v.resume(p).unwrap();
    assert_eq!(v.read::<u64>(8).unwrap(), 0); // its snapshot
    v.abort().unwrap();
    assert!(matches!(v.commit(), Err(Error::Aborted)));
    v.begin_read().unwrap();
    assert_eq!(v.read::<u64>(8).unwrap(), 7, "the view's own commit");
    assert_eq!(v.read::<u64>(0).unwrap(), 0);
    v.commit().unwrap();
}
