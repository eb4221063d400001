//! Group commit on a slow device: a sync leader gathers the committers the
//! last round woke before it syncs. In a test binary of its own, because
//! `debug::slow_syncs` slows every sync of the process.

mod common;

use std::sync::{Arc, Barrier};

use common::*;
use txmap::{Options, Region};

const PAGE: u64 = 4096;

#[test]
fn a_slow_sync_covers_every_committer_it_woke_the_round_before() {
    // Each sync takes 20 ms more: far longer than a woken thread needs to
    // commit again. Without gathering, the woken threads append during the
    // next round's sync and make the round after it, so the 8 threads
    // split into two cohorts of about 4 that alternate.
    gathers(20_000);
    // 200 ms: longer than followers waited for a leader before the first
    // sync's time was known (50 ms): each then synced on its own (14 syncs
    // for 48 commits).
    gathers(200_000);
}

fn gathers(sync_us: u64) {
    txmap::debug::slow_syncs(sync_us);
    let d = ext4_dir(&format!("gather-{sync_us}"));
    let r = Region::create(&d.join("r.txm"), 8 * PAGE, Options::default()).unwrap();
    let threads = 8u64;
    let rounds = 6u64;
    let start = Arc::new(Barrier::new(threads as usize));
    let before = r.stats();
    let hs: Vec<_> = (0..threads)
        .map(|t| {
            let (r, start) = (r.clone(), start.clone());
            std::thread::spawn(move || {
                let mut v = r.view().unwrap();
                start.wait();
                for i in 1..=rounds {
                    v.run(|v| v.write(t * PAGE, &i)).unwrap();
                }
                v
            })
        })
        .collect();
    let views: Vec<_> = hs.into_iter().map(|h| h.join().unwrap()).collect();
    let after = r.stats();
    let commits = after.commit_seq - before.commit_seq;
    let syncs = after.log_syncs - before.log_syncs;
    assert_eq!(commits, threads * rounds);
    // The first round covers whoever appended before it; every later one
    // should cover all 8 (7 syncs for 48 commits). Without gathering it takes
    // about 12; 5 per sync leaves room for threads that were late.
    assert!(
        commits >= 5 * syncs,
        "{syncs} syncs for {commits} commits of {threads} threads ({sync_us} µs syncs): \
         rounds did not gather"
    );
    // Every commit is in the log and reads back after reopening.
    drop(views);
    drop(r);
    let r = Region::open(&d.join("r.txm"), Options::default()).unwrap();
    let mut v = r.view().unwrap();
    v.begin_read().unwrap();
    for t in 0..threads {
        assert_eq!(v.read::<u64>(t * PAGE).unwrap(), rounds, "thread {t}");
    }
    v.commit().unwrap();
}
