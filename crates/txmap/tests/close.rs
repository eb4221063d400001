//! Closing a region: the last handle dropped closes it on the dropping
//! thread, before the call returns, even while the async flusher is in the
//! middle of a round. Its own binary: it slows every flusher of the process.
mod common;

use common::*;
use std::time::Duration;
use txmap::{Durability, Options, Region};

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
