//! Fairness for long transactions (`Options::priority_after`): a
//! transaction that conflicted k times in a row takes priority, and other
//! views' commits wait until it commits; so a long transaction commits
//! within 10 attempts while short transactions hammer its pages; the
//! holder's end gives priority up at once and other views' ends leave it; a
//! priority holder killed with SIGKILL does not stall other writers.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use common::*;
use txmap::{Durability, Error, Options, Region};

const PAGE: u64 = 4096;
const PAGES: u64 = 256;

fn opts(after: u32) -> Options {
    Options {
        durability: Durability::Async,
        priority_after: after,
        ..Options::default()
    }
}

fn work(mut v: u64) -> u64 {
    for i in 0..2_000u64 {
        v = v.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(i);
    }
    std::hint::black_box(v)
}

/// Sum of the counters of the first `PAGES` pages.
fn total(r: &Region) -> u64 {
    let mut v = r.view().unwrap();
    v.begin_read().unwrap();
    let t = (0..PAGES).map(|p| v.read::<u64>(p * PAGE).unwrap()).sum();
    v.commit().unwrap();
    t
}

#[test]
fn a_long_transaction_commits_within_10_attempts_among_short_writers() {
    const K: u32 = 3;
    const LONGS: u64 = 30;
    let d = tmpfs_dir("fairness_long");
    let r = Region::create(&d.join("r"), PAGES * PAGE, opts(K)).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let shorts = Arc::new(AtomicU64::new(0));
    let hs: Vec<_> = (0..4u64)
        .map(|t| {
            let (r, stop, shorts) = (r.clone(), stop.clone(), shorts.clone());
            std::thread::spawn(move || {
                let mut v = r.view().unwrap();
                let mut x = 0x9E37_79B9_7F4A_7C15u64.wrapping_mul(t + 1);
                while !stop.load(Ordering::Relaxed) {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let p = x % PAGES;
                    v.run(|v| {
                        let c: u64 = v.read(p * PAGE)?;
                        v.write(p * PAGE, &(c + 1))
                    })
                    .unwrap();
                    shorts.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    let mut v = r.view().unwrap();
    let mut worst = 0;
    for _ in 0..LONGS {
        let mut n = 0;
        loop {
            n += 1;
            // K + 1 when no short transaction holds priority meanwhile
            // (one that conflicted K times in a row takes it too).
            assert!(n <= 10, "a long transaction needed more than 10 attempts");
            v.begin().unwrap();
            for p in 0..PAGES {
                let c: u64 = v.read(p * PAGE).unwrap();
                v.write(p * PAGE, &(c + 1)).unwrap();
                v.write(p * PAGE + 8, &work(c)).unwrap();
            }
            match v.commit() {
                Ok(()) => break,
                Err(Error::Conflict) => {}
                Err(e) => panic!("{e}"),
            }
        }
        worst = worst.max(n);
    }
    stop.store(true, Ordering::Relaxed);
    for h in hs {
        h.join().unwrap();
    }
    eprintln!(
        "worst {worst} attempts; priority taken/waits {:?}",
        r.priority_counts()
    );
    // Every commit counted once, the long ones on every page.
    assert_eq!(
        total(&r),
        shorts.load(Ordering::Relaxed) + LONGS * PAGES,
        "lost or doubled increments"
    );
}

/// Makes view `a` conflict `k` times in a row (view `b` commits page 0
/// during each of its transactions).
fn conflict_times(a: &mut txmap::View, b: &mut txmap::View, k: u32) {
    for _ in 0..k {
        a.begin().unwrap();
        let x: u64 = a.read(0).unwrap();
        a.write(0, &(x + 1)).unwrap();
        b.run(|b| {
            let y: u64 = b.read(0)?;
            b.write(0, &(y + 10))
        })
        .unwrap();
        assert!(matches!(a.commit(), Err(Error::Conflict)));
    }
}

/// A region taking priority after 2 conflicts, and two views of it.
fn region_and_two_views(name: &str) -> (TestDir, Region, txmap::View, txmap::View) {
    let d = tmpfs_dir(name);
    let r = Region::create(&d.join("r"), PAGES * PAGE, opts(2)).unwrap();
    let (a, b) = (r.view().unwrap(), r.view().unwrap());
    (d, r, a, b)
}

#[test]
fn a_commit_waits_while_another_view_holds_priority() {
    let (_d, r, mut a, mut b) = region_and_two_views("fairness_wait");
    conflict_times(&mut a, &mut b, 1);
    // One conflict: no priority yet; another view commits freely.
    a.begin().unwrap();
    assert_eq!(r.priority_counts().0, 0);
    a.rollback();
    conflict_times(&mut a, &mut b, 2);
    assert_eq!(a.conflicts_in_row(), 2);
    a.begin().unwrap(); // takes priority
    assert_eq!(r.priority_counts().0, 1);
    a.write(PAGE, &1u64).unwrap();
    let r2 = r.clone();
    let (tx, rx) = std::sync::mpsc::channel();
    let h = std::thread::spawn(move || {
        let mut w = r2.view().unwrap();
        w.run(|w| w.write(2 * PAGE, &2u64)).unwrap();
        tx.send(()).unwrap();
    });
    assert!(
        rx.recv_timeout(Duration::from_millis(300)).is_err(),
        "another view committed while a view held priority"
    );
    a.commit().unwrap(); // gives priority up
    rx.recv_timeout(Duration::from_secs(30))
        .expect("the waiting commit did not go on after the holder committed");
    h.join().unwrap();
    assert_eq!(a.conflicts_in_row(), 0);
    assert_eq!(r.priority_counts(), (1, 1));
}

#[test]
fn the_holders_end_gives_priority_up_and_other_ends_leave_it() {
    let (_d, r, mut a, mut b) = region_and_two_views("fairness_release");
    conflict_times(&mut a, &mut b, 2);
    a.begin().unwrap(); // takes priority
    assert_eq!(r.priority_counts(), (1, 0));
    a.write(PAGE, &1u64).unwrap();
    a.commit().unwrap();
    // The holder's own end gave it up: the next commit does not wait.
    b.run(|b| b.write(3 * PAGE, &3u64)).unwrap();
    assert_eq!(
        r.priority_counts(),
        (1, 0),
        "a commit waited after the holder ended"
    );

    // Another view's read-only transaction ends while a holds priority: a
    // keeps it, so a third view's commit waits for a's.
    conflict_times(&mut a, &mut b, 2);
    a.begin().unwrap();
    assert_eq!(r.priority_counts(), (2, 0));
    b.begin_read().unwrap();
    let _: u64 = b.read(0).unwrap();
    b.commit().unwrap();
    a.write(PAGE, &2u64).unwrap();
    let r2 = r.clone();
    let h = std::thread::spawn(move || {
        let mut w = r2.view().unwrap();
        w.run(|w| w.write(2 * PAGE, &2u64)).unwrap();
    });
    while r.priority_counts().1 == 0 && !h.is_finished() {
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(r.priority_counts(), (2, 1), "priority was given up early");
    a.commit().unwrap();
    h.join().unwrap();
}

/// The child: takes priority (a conflict, then a new transaction), stores
/// into page 1, says so, and waits to be killed.
fn holder() {
    let p = std::path::PathBuf::from(std::env::var("TXMAP_PATH").unwrap());
    let r = Region::open(&p, opts(1)).unwrap();
    let (mut a, mut b) = (r.view().unwrap(), r.view().unwrap());
    conflict_times(&mut a, &mut b, 1);
    a.begin().unwrap(); // takes priority
    a.write(PAGE, &77u64).unwrap();
    assert_eq!(r.priority_counts().0, 1, "priority not taken");
    println!("HOLDING");
    loop {
        std::thread::park();
    }
}

#[test]
fn a_priority_holder_killed_does_not_stall_other_writers() {
    if role().is_some() {
        return holder();
    }
    let d = tmpfs_dir("fairness_killed");
    let p = d.join("r");
    let r = Region::create(&p, PAGES * PAGE, opts(1)).unwrap();
    let out = d.join("out");
    let mut c = child(
        "a_priority_holder_killed_does_not_stall_other_writers",
        "holder",
        &[("TXMAP_PATH", p.display().to_string())],
    )
    .stdout(std::fs::File::create(&out).unwrap())
    .spawn()
    .unwrap();
    let mut waited = 0;
    while !std::fs::read_to_string(&out).unwrap().contains("HOLDING") {
        assert!(c.try_wait().unwrap().is_none(), "the holder exited");
        waited += 1;
        assert!(waited < 30_000, "the holder did not take priority");
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(r.priority_counts().0, 1);
    c.kill().unwrap();
    c.wait().unwrap();
    let r2 = r.clone();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut v = r2.view().unwrap();
        v.run(|v| v.write(2 * PAGE, &9u64)).unwrap();
        tx.send(()).unwrap();
    });
    rx.recv_timeout(Duration::from_secs(30))
        .expect("a commit after the priority holder died is blocked");
    let mut v = r.view().unwrap();
    v.begin_read().unwrap();
    assert_eq!(
        v.read::<u64>(PAGE).unwrap(),
        0,
        "the killed holder's store is visible"
    );
    assert_eq!(v.read::<u64>(2 * PAGE).unwrap(), 9);
    assert_eq!(v.read::<u64>(0).unwrap(), 10);
    v.commit().unwrap();
}
