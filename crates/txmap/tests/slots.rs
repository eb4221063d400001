//! A view's slot in the region's shared state (its snapshot, its fence
//! acknowledgements, its nested top actions) belongs to that view alone
//! while it is open, however many threads of one process open and close
//! views at once, and however often checkpoints reap the slots of dead
//! processes meanwhile.
mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use common::*;
use txmap::{Durability, Options, Region};

const THREADS: usize = 4;
const OPENS: usize = 3000;

/// Threads open and close views (each holding its old view while it opens
/// the next, as a loop of `*v = region.view()` does) while another commits
/// and checkpoints, which reaps the slots of dead processes: no slot is ever
/// held by two open views. (Failed when a closing view released its slot's
/// lock after another thread claimed the slot: the reaper then took the
/// slot from its live view and gave it to the next.)
#[test]
fn no_two_open_views_share_a_slot_while_threads_open_and_close_views() {
    let d = ext4_dir("slots-threads");
    let opts = Options {
        durability: Durability::Async,
        ..Options::default()
    };
    let r = Region::create(&d.join("r.txm"), 1 << 16, opts).unwrap();
    let held: Arc<Vec<AtomicBool>> = Arc::new((0..1024).map(|_| AtomicBool::new(false)).collect());
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (r, stop) = (r.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut w = r.view().unwrap();
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                w.run(|v| v.write(0, &n)).unwrap();
                r.checkpoint().unwrap();
            }
            n
        })
    };
    let take = |held: &[AtomicBool], s: usize| {
        assert!(
            !held[s].swap(true, Ordering::SeqCst),
            "slot {s} is held by two open views"
        );
    };
    let openers: Vec<_> = (0..THREADS)
        .map(|_| {
            let (r, held) = (r.clone(), held.clone());
            std::thread::spawn(move || {
                let mut v = r.view().unwrap();
                take(&held, v.slot());
                for _ in 0..OPENS {
                    let next = r.view().unwrap();
                    take(&held, next.slot());
                    // Given up before the view closes: the slot is free
                    // for another view from then on.
                    held[v.slot()].store(false, Ordering::SeqCst);
                    v = next;
                    v.begin_read().unwrap();
                    let _: u64 = v.read(0).unwrap();
                    v.commit().unwrap();
                }
                held[v.slot()].store(false, Ordering::SeqCst);
            })
        })
        .collect();
    let mut failed = None;
    for h in openers {
        if let Err(e) = h.join() {
            failed = Some(e);
        }
    }
    stop.store(true, Ordering::Relaxed);
    assert!(writer.join().unwrap() > 0);
    if let Some(e) = failed {
        std::panic::resume_unwind(e);
    }
}
