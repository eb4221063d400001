//! A blind put's commit-time run goes stale when another commit writes
//! its leaf between the run and the commit lock: it then runs again before
//! the lock (not under it, while every other committer waits), and the
//! commit still holds both puts. One test in its own binary: the counters
//! of `txmap::debug::commit_time_runs` are per process.
mod collections_common;
mod common;
use collections_common as coll;

use std::sync::Mutex;

use common::*;
use txmap::collections::{AnyMap, Kind, Map};
use txmap::{Region, debug};

type Inject = Box<dyn FnMut() + Send>;
static INJECT: Mutex<Option<Inject>> = Mutex::new(None);

fn hook() {
    if let Some(f) = INJECT.lock().unwrap().as_mut() {
        f();
    }
}

#[test]
fn a_stale_run_ahead_runs_again_before_the_commit_lock() {
    let d = ext4_dir("commit-ahead");
    let r = Region::create(&d.join("r.txm"), 1 << 20, coll::opts()).unwrap();
    let mut v = r.view().unwrap();
    let m = v
        .run(|v| AnyMap::open_or_create(v, "t", Kind::BTree))
        .unwrap();
    // A few keys: one leaf, so the other put writes the page ours touches.
    for i in 0u64..4 {
        v.run(|v| m.put(v, &i.to_be_bytes(), b"old")).unwrap();
    }
    let mut other = r.view().unwrap();
    let calls = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
    let c2 = calls.clone();
    *INJECT.lock().unwrap() = Some(Box::new(move || {
        // Only before the first try for the lock: a put into the same leaf.
        if c2.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0 {
            other
                .run(|v| m.put(v, &100u64.to_be_bytes(), b"other"))
                .unwrap();
        }
    }));
    debug::before_commit_lock(Some(hook));
    let (reruns0, locked0) = debug::commit_time_runs();
    v.begin().unwrap();
    m.put_blind(&mut v, &7u64.to_be_bytes(), b"mine").unwrap();
    v.commit().unwrap();
    let (reruns, locked) = debug::commit_time_runs();
    debug::before_commit_lock(None);
    *INJECT.lock().unwrap() = None;
    assert_eq!(
        calls.load(std::sync::atomic::Ordering::SeqCst),
        2,
        "the hook runs before each try for the lock"
    );
    assert_eq!(
        reruns - reruns0,
        1,
        "the stale run ran again before the lock"
    );
    assert_eq!(locked - locked0, 0, "nothing ran under the commit lock");
    v.begin_read().unwrap();
    assert_eq!(
        m.get(&v, &7u64.to_be_bytes()).unwrap().as_deref(),
        Some(&b"mine"[..])
    );
    assert_eq!(
        m.get(&v, &100u64.to_be_bytes()).unwrap().as_deref(),
        Some(&b"other"[..])
    );
    assert_eq!(m.check(&v).unwrap().entries, 6);
    v.commit().unwrap();
}
