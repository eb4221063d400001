//! A child forked right after its parent closed a region opens one, and
//! so starts threads of its own. A close returns only after the region's
//! threads (the fence thread, the async flusher) are gone: a thread still
//! exiting holds the standard library's thread bookkeeping lock for a
//! moment, and a child forked then inherited it held and hung in its first
//! thread's start (`c/xac_alloc.c`'s processes, forked after `xShutdown`,
//! hung so once in CI). The threads dawdle at their end
//! (`debug::slow_thread_ends`), so a close that does not wait for them
//! returns before they are gone (`debug::region_threads`). Its own binary:
//! no other test's threads, and the hook slows every region thread.
mod common;

use common::*;
use std::time::{Duration, Instant};
use txmap::{Durability, Options, Region};

#[test]
fn a_child_forked_right_after_a_close_opens_a_region() {
    let d = ext4_dir("fork-after-close");
    let p = d.join("r.txm");
    drop(Region::create(&p, 16 * 4096, Options::default()).unwrap());
    let opts = Options {
        durability: Durability::Async,
        async_sync_interval: Duration::from_millis(1),
        ..Options::default()
    };
    // Each thread dawdles at its end: a close that does not wait for it
    // returns before it is gone.
    txmap::debug::slow_thread_ends(2_000);
    for round in 0..100u64 {
        {
            let r = Region::open(&p, opts.clone()).unwrap();
            // A view starts the fence thread.
            let mut v = r.view().unwrap();
            v.run(|v| v.write(0, &round)).unwrap();
        }
        assert_eq!(
            txmap::debug::region_threads(),
            0,
            "round {round}: a thread of the closed region still runs"
        );
        // SAFETY: the child opens and closes its own region, then _exits.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            let ok = Region::open(&p, opts.clone())
                .and_then(|r| r.view()?.run(|v| v.read::<u64>(0)))
                .is_ok_and(|x| x == round);
            // SAFETY: leave without running the parent's destructors.
            unsafe { libc::_exit(if ok { 0 } else { 1 }) };
        }
        let t = Instant::now();
        let mut status = 0;
        loop {
            // SAFETY: polling our own child.
            let w = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
            if w == pid {
                break;
            }
            if t.elapsed() > Duration::from_secs(30) {
                // SAFETY: our own child.
                unsafe { libc::kill(pid, libc::SIGKILL) };
                panic!("round {round}: the child forked after the close hung");
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "round {round}: the child could not read the parent's commit ({status:#x})"
        );
    }
}
