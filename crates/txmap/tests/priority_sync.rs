//! A transaction holding priority (`Options::priority_after`) stops making
//! other commits wait once its own commit is published, not after its log
//! sync: held through a slow sync, priority stalled every committer of a
//! busy region and sent 64 committers into a regime of 1,000–2,000 retries
//! per 1,000 commits. In a test binary of its own, because
//! `debug::slow_syncs` slows every sync of the process.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use common::*;
use txmap::{Error, Options, Region};

const PAGE: u64 = 4096;

#[test]
fn a_priority_holder_in_its_log_sync_makes_no_commit_wait() {
    let d = ext4_dir("priority-sync");
    let opts = Options {
        priority_after: 1,
        ..Options::default()
    };
    let r = Region::create(&d.join("r.txm"), 4 * PAGE, opts).unwrap();
    let mut a = r.view().unwrap();
    let mut b = r.view().unwrap();
    // One conflict: `a` read page 0, which `b` changed before `a` committed.
    a.begin().unwrap();
    let _: u64 = a.read(0).unwrap();
    b.run(|v| v.write(0, &1u64)).unwrap();
    a.write(PAGE, &1u64).unwrap();
    assert!(matches!(a.commit(), Err(Error::Conflict)));
    // Its next transaction takes priority at begin and commits durably
    // through a sync made slow; `b` commits while that sync runs.
    txmap::debug::slow_syncs(1_000_000);
    let (taken, waited) = r.priority_counts();
    let done = Arc::new(AtomicBool::new(false));
    let holder = {
        let done = done.clone();
        std::thread::spawn(move || {
            a.begin().unwrap();
            a.write(PAGE, &2u64).unwrap();
            a.commit().unwrap();
            done.store(true, Ordering::SeqCst);
            a
        })
    };
    // Published: visible to a new snapshot (its sync is still running).
    loop {
        b.begin_read().unwrap();
        let seen: u64 = b.read(PAGE).unwrap();
        b.commit().unwrap();
        if seen == 2 {
            break;
        }
        std::thread::yield_now();
    }
    assert!(
        !done.load(Ordering::SeqCst),
        "the holder's commit returned before the test could commit beside its sync"
    );
    b.run(|v| v.write(2 * PAGE, &3u64)).unwrap();
    let a = holder.join().unwrap();
    txmap::debug::slow_syncs(0);
    let (taken_after, waited_after) = r.priority_counts();
    assert_eq!(taken_after, taken + 1, "the holder took priority");
    assert_eq!(
        waited_after, waited,
        "a commit waited for a holder whose commit was already published"
    );
    drop(a);
}
