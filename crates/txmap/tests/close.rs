//! Closing a region: the last handle dropped closes it on the dropping
//! thread, before the call returns, even while the async flusher is in the
//! middle of a round, or a log sync helper of a commit across several
//! regions holds it. Its own binary: it slows every flusher, log sync and
//! sync helper of the process.
mod common;

use common::*;
use std::time::Duration;
use txmap::{Durability, Options, Region, View};

/// A region in async mode is closed and at once opened in durable mode,
/// which is refused while any opener in async mode remains. The flusher
/// holds the region 100 ms per round, so a close lands inside a round most
/// of the time; before, the flusher then closed it later, on its thread,
/// and the reopen failed ("open in Async mode by another process").
#[test]
fn the_last_handle_dropped_closes_the_region_before_returning() {
    let d = ext4_dir("close-flusher");
    let p = d.join("r.txm");
    drop(Region::create(&p, 4 * 4096, Options::default()).unwrap());
    txmap::debug::slow_flusher_rounds(100_000);
    let asynchronous = Options {
        durability: Durability::Async,
        async_sync_interval: Duration::from_millis(1),
        ..Options::default()
    };
    for round in 0..5 {
        let r = Region::open(&p, asynchronous.clone()).unwrap();
        let mut v = r.view().unwrap();
        v.run(|v| v.write(8, &(round as u64))).unwrap();
        std::thread::sleep(Duration::from_millis(30)); // the flusher is inside a round
        drop(v);
        drop(r);
        let again = Region::open(&p, Options::default());
        let again = again.unwrap_or_else(|e| panic!("round {round}: reopen after close: {e}"));
        let mut v = again.view().unwrap();
        v.begin_read().unwrap();
        assert_eq!(v.read::<u64>(8).unwrap(), round as u64);
        v.commit().unwrap();
    }
    txmap::debug::slow_flusher_rounds(0);
}

/// As above, for the helper thread that syncs the second log of a commit
/// across two regions (`group.rs`): it holds region `b` 200 ms per job
/// (the committer meanwhile syncs that log itself and returns), so the
/// drop of `b` lands while the helper holds it. Before, the helper then
/// closed `b` later, on its thread, and the reopen in durable mode failed.
#[test]
fn a_region_a_group_sync_helper_holds_is_closed_before_the_drop_returns() {
    let d = ext4_dir("close-group-helper");
    let (pa, pb) = (d.join("a"), d.join("b"));
    for p in [&pa, &pb] {
        drop(Region::create(p, 4 * 4096, Options::default()).unwrap());
    }
    // Syncs dearer than a handoff to the helper, on any device.
    txmap::debug::slow_syncs(200);
    txmap::debug::slow_group_sync_helpers(200_000);
    let asynchronous = Options {
        durability: Durability::Async,
        ..Options::default()
    };
    for round in 0..3u64 {
        let ra = Region::open(&pa, asynchronous.clone()).unwrap();
        let rb = Region::open(&pb, asynchronous.clone()).unwrap();
        let (mut va, mut vb) = (ra.view().unwrap(), rb.view().unwrap());
        // The first commit measures the syncs; the second is handed over.
        for k in 0..2 {
            View::run_group(&mut [&mut va, &mut vb], |v| {
                v[0].write(8, &(round * 2 + k))?;
                v[1].write(8, &(round * 2 + k))
            })
            .unwrap();
        }
        drop((va, vb));
        drop((ra, rb));
        for p in [&pa, &pb] {
            let again = Region::open(p, Options::default());
            let again = again.unwrap_or_else(|e| panic!("round {round}: reopen after close: {e}"));
            let mut v = again.view().unwrap();
            v.begin_read().unwrap();
            assert_eq!(v.read::<u64>(8).unwrap(), round * 2 + 1);
            v.commit().unwrap();
        }
    }
    txmap::debug::slow_group_sync_helpers(0);
    txmap::debug::slow_syncs(0);
}
