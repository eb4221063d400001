//! Ordered commits (TxOS+): transactions holding numbers of an order group
//! commit in number order, whatever order they run in, so a loop run in
//! parallel gives the sequential result; a holder that dies or gives up
//! does not block the group. Processes are real and killed with SIGKILL.
//!
//! The workload: number `n` appends `n` to a list (page 1 on) and folds it
//! into an accumulator (page 0: count, accumulator). Checked inside every
//! transaction (the last number listed is below `n`) and afterwards (the
//! list is increasing and the accumulator is the fold of the list).

mod common;

use std::time::{Duration, Instant};

use common::*;
use txmap::debug::CrashPoint;
use txmap::{Durability, Error, Options, Region, View};

const PAGE: u64 = 4096;
const COUNT: u64 = 0;
const ACC: u64 = 8;
const GROUP: u32 = 3;

fn list(i: u64) -> u64 {
    PAGE + 8 * i
}

fn mix(acc: u64, n: u64) -> u64 {
    (acc ^ n.wrapping_mul(0x9E37_79B9_7F4A_7C15))
        .rotate_left(17)
        .wrapping_mul(31)
}

fn opts() -> Options {
    Options {
        durability: Durability::Durable,
        ..Options::default()
    }
}

/// The body of number `n` (its transaction is open).
fn step(v: &mut View, n: u64) -> txmap::Result<()> {
    let k: u64 = v.read(COUNT)?;
    if k > 0 {
        let last: u64 = v.read(list(k - 1))?;
        assert!(last < n, "number {n} runs after {last}: out of order");
    }
    let acc: u64 = v.read(ACC)?;
    v.write(ACC, &mix(acc, n))?;
    v.write(list(k), &n)?;
    v.write(COUNT, &(k + 1))
}

/// Checks the list and accumulator; returns the list.
fn check(v: &mut View) -> Vec<u64> {
    v.begin_read().unwrap();
    let k: u64 = v.read(COUNT).unwrap();
    let got: Vec<u64> = (0..k).map(|i| v.read(list(i)).unwrap()).collect();
    let acc: u64 = v.read(ACC).unwrap();
    v.commit().unwrap();
    assert!(
        got.windows(2).all(|w| w[0] < w[1]),
        "numbers committed out of order: {got:?}"
    );
    assert_eq!(
        acc,
        got.iter().fold(0, |a, &n| mix(a, n)),
        "accumulator is not the sequential fold of {got:?}"
    );
    got
}

/// Commits the number the view holds, running `step` again on conflict.
fn commit_held(v: &mut View, n: u64) -> txmap::Result<()> {
    loop {
        v.begin()?;
        step(v, n)?;
        match v.commit() {
            Err(Error::Conflict) => continue,
            r => return r,
        }
    }
}

#[test]
fn threads_commit_in_number_order_and_get_the_sequential_result() {
    let d = tmpfs_dir("ordered_threads");
    let p = d.join("r");
    let r = Region::create(&p, 64 * PAGE, opts()).unwrap();
    const N: u64 = 400;
    const W: u64 = 4;
    let hs: Vec<_> = (0..W)
        .map(|t| {
            let r = r.clone();
            std::thread::spawn(move || {
                let mut v = r.view().unwrap();
                // Worker t runs the numbers t, t + W, ...: in the reverse
                // order for odd workers, so later numbers often run first.
                let mut mine: Vec<u64> = (t..N).step_by(W as usize).collect();
                if t % 2 == 1 {
                    mine.reverse();
                }
                // Each worker holds one number at a time: reversed workers
                // would wait for their own lower numbers forever, so they
                // hand each number to a helper view.
                for n in mine {
                    if t % 2 == 1 {
                        let r = r.clone();
                        std::thread::spawn(move || {
                            let mut v = r.view().unwrap();
                            v.run_ordered(GROUP, n, |v| step(v, n)).unwrap();
                        });
                    } else {
                        v.run_ordered(GROUP, n, |v| step(v, n)).unwrap();
                    }
                }
            })
        })
        .collect();
    for h in hs {
        h.join().unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    while r.order_status(GROUP).unwrap().next < N {
        assert!(Instant::now() < deadline, "ordered commits blocked");
        std::thread::sleep(Duration::from_millis(5));
    }
    let got = check(&mut r.view().unwrap());
    assert_eq!(got, (0..N).collect::<Vec<_>>());
    let s = r.order_status(GROUP).unwrap();
    assert_eq!((s.next, s.committed, s.skipped), (N, N, 0));
}

/// Runs `f` in a thread; panics if it does not end within 30 s.
fn within<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || tx.send(f()).unwrap());
    rx.recv_timeout(Duration::from_secs(30))
        .unwrap_or_else(|_| panic!("{what}: blocked"))
}

#[test]
fn a_number_nobody_holds_blocks_until_skipped_and_a_skipped_holder_fails() {
    let d = tmpfs_dir("ordered_skip");
    let p = d.join("r");
    let r = Region::create(&p, 64 * PAGE, opts()).unwrap();
    // Number 1 waits for 0, which nobody holds.
    let r1 = r.clone();
    let (tx, rx) = std::sync::mpsc::channel();
    let h = std::thread::spawn(move || {
        let mut v = r1.view().unwrap();
        let x = v.run_ordered(GROUP, 1, |v| step(v, 1));
        tx.send(()).unwrap();
        x
    });
    assert!(
        rx.recv_timeout(Duration::from_millis(300)).is_err(),
        "number 1 committed before 0 was committed or skipped"
    );
    r.order_skip_to(GROUP, 1).unwrap();
    h.join().unwrap().unwrap();
    assert_eq!(check(&mut r.view().unwrap()), vec![1]);
    // A holder whose number is skipped past fails, and nothing of it shows.
    let mut v = r.view().unwrap();
    v.order(GROUP, 2).unwrap();
    r.order_skip_to(GROUP, 5).unwrap();
    v.begin().unwrap();
    step(&mut v, 2).unwrap();
    match v.commit() {
        Err(Error::OrderSkipped {
            group: GROUP,
            number: 2,
            next: 5,
        }) => {}
        other => panic!("commit of a skipped number: {other:?}"),
    }
    assert_eq!(v.order_held(), None);
    assert_eq!(check(&mut v), vec![1]);
    let s = r.order_status(GROUP).unwrap();
    assert_eq!((s.next, s.committed, s.skipped), (5, 1, 4));
    assert!(matches!(v.order(GROUP, 4), Err(Error::OrderSkipped { .. })));
}

#[test]
fn a_view_closed_or_giving_up_its_number_does_not_block_the_group() {
    let d = tmpfs_dir("ordered_closed");
    let p = d.join("r");
    let r = Region::create(&p, 64 * PAGE, opts()).unwrap();
    let mut a = r.view().unwrap();
    a.order(GROUP, 0).unwrap();
    drop(a); // closed holding 0
    let mut b = r.view().unwrap();
    b.order(GROUP, 1).unwrap();
    b.order_give_up().unwrap(); // gives 1 up at its turn
    let r2 = r.clone();
    within("number 2 after a closed holder of 0", move || {
        let mut v = r2.view().unwrap();
        v.run_ordered(GROUP, 2, |v| step(v, 2)).unwrap();
    });
    assert_eq!(check(&mut r.view().unwrap()), vec![2]);
    let s = r.order_status(GROUP).unwrap();
    assert_eq!((s.next, s.committed, s.skipped), (3, 1, 2));
    assert_eq!(s.last_skipped, Some(1));
}

/// A worker process: takes numbers with `order_next` until they reach
/// `TXMAP_N`, commits each in turn, prints "ACK n" once it committed.
/// `TXMAP_CRASH=point:nth` arms a crash point.
fn worker() {
    let p = std::path::PathBuf::from(std::env::var("TXMAP_PATH").unwrap());
    let n_max: u64 = std::env::var("TXMAP_N").unwrap().parse().unwrap();
    if let Ok(c) = std::env::var("TXMAP_CRASH") {
        let (pt, nth) = c.split_once(':').unwrap();
        let pt = CrashPoint::from_u32(pt.parse().unwrap()).unwrap();
        txmap::debug::crash_at(pt, nth.parse().unwrap());
    }
    let r = Region::open(&p, opts()).unwrap();
    let mut v = r.view().unwrap();
    // Start together, so each worker gets a share of the numbers.
    std::fs::write(
        p.with_file_name(format!("ready{}", std::process::id())),
        b"",
    )
    .unwrap();
    let go = p.with_file_name("go");
    while !go.exists() {
        std::thread::sleep(Duration::from_millis(1));
    }
    loop {
        let n = v.order_next(GROUP).unwrap();
        if n >= n_max {
            v.order_give_up().unwrap();
            return;
        }
        commit_held(&mut v, n).unwrap();
        println!("ACK {n}");
        // Work outside the transactions, so that the run lasts long
        // enough for every worker to take part.
        std::thread::sleep(Duration::from_micros(300));
    }
}

/// Child processes killed if the test fails (a blocked worker would stay).
struct Workers(Vec<std::process::Child>);

impl Drop for Workers {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Three workers share the numbers `0..N`; one is killed (at `crash`, a
/// crash point with its nth hit, or by SIGKILL after a random delay). The
/// others finish (the group is not blocked), the numbers committed are in
/// order with the sequential fold, every acknowledged number is there,
/// and at most one number (the one the killed worker held) is missing;
/// all of it again after the last close and recovery.
fn kill_one_worker(test: &str, crash: Option<(CrashPoint, u64)>, seed: u64) {
    const N: u64 = 300;
    let d = tmpfs_dir(test);
    let p = d.join("r");
    let r = Region::create(&p, 64 * PAGE, opts()).unwrap();
    let mut rng = txmap::io::sim::SplitMix(seed);
    let mut procs = Workers(Vec::new());
    let mut acks = Vec::new();
    for w in 0..3 {
        let out = d.join(&format!("acks{w}"));
        let mut envs = vec![
            ("TXMAP_PATH", p.display().to_string()),
            ("TXMAP_N", N.to_string()),
        ];
        if w == 0
            && let Some((pt, nth)) = crash
        {
            envs.push(("TXMAP_CRASH", format!("{}:{nth}", pt as u32)));
        }
        let child = common::child(test, "worker", &envs)
            .stdout(std::fs::File::create(&out).unwrap())
            .stderr(std::fs::File::create(d.join(&format!("err{w}"))).unwrap())
            .spawn()
            .unwrap();
        procs.0.push(child);
        acks.push(out);
    }
    for c in &procs.0 {
        let ready = d.join(&format!("ready{}", c.id()));
        let deadline = Instant::now() + Duration::from_secs(60);
        while !ready.exists() {
            assert!(Instant::now() < deadline, "worker {} did not start", c.id());
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    std::fs::write(d.join("go"), b"").unwrap();
    if crash.is_none() {
        std::thread::sleep(Duration::from_millis(rng.next() % 40));
        procs.0[0].kill().unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    for (w, c) in procs.0.iter_mut().enumerate() {
        loop {
            if let Some(s) = c.try_wait().unwrap() {
                let err = std::fs::read_to_string(d.join(&format!("err{w}"))).unwrap();
                if w == 0 && crash.is_some() {
                    let acks = std::fs::read_to_string(&acks[0]).unwrap();
                    assert!(
                        !s.success(),
                        "worker 0 did not reach its crash point ({} commits): {err}",
                        acks.lines().filter(|l| l.starts_with("ACK")).count()
                    );
                } else if w == 0 {
                    // Killed, or done before the kill.
                } else {
                    assert!(s.success(), "worker {w} failed ({s}): {err}");
                }
                break;
            }
            assert!(
                Instant::now() < deadline,
                "worker {w} blocked: the group stalled"
            );
            std::thread::sleep(Duration::from_millis(2));
        }
    }
    let acked: Vec<u64> = acks
        .iter()
        .flat_map(|a| {
            std::fs::read_to_string(a)
                .unwrap()
                .lines()
                .filter_map(|l| l.strip_prefix("ACK ").map(|n| n.parse().unwrap()))
                .collect::<Vec<u64>>()
        })
        .collect();
    let got = check(&mut r.view().unwrap());
    for n in &acked {
        assert!(
            got.contains(n),
            "acknowledged number {n} is missing: {got:?}"
        );
    }
    let missing: Vec<u64> = (0..N).filter(|n| !got.contains(n)).collect();
    assert!(
        missing.len() <= 1,
        "more than the killed worker's number is missing: {missing:?}"
    );
    let s = r.order_status(GROUP).unwrap();
    assert_eq!(
        s.committed,
        got.len() as u64,
        "the group counts {} commits, the region holds {} ({s:?})",
        s.committed,
        got.len()
    );
    assert!(s.next >= N && s.committed + s.skipped == s.next, "{s:?}");
    if let Some(&m) = missing.first() {
        assert!(s.skipped >= 1 && s.last_skipped >= Some(m), "{s:?}");
    }
    drop(r);
    let r = Region::open(&p, opts()).unwrap();
    assert_eq!(check(&mut r.view().unwrap()), got, "after recovery");
}

/// Runs `kill_one_worker` once per entry of `points` (a crash point, hit
/// at a random nth time, or `None`: SIGKILL after a random delay).
fn kill_rounds(test: &str, points: &[Option<CrashPoint>]) {
    let mut rng = txmap::io::sim::SplitMix(seed(test));
    for &pt in points {
        let nth = 1 + rng.next() % 10;
        kill_one_worker(test, pt.map(|p| (p, nth)), rng.next());
    }
}

#[test]
fn sigkill_holding_the_next_number_skips_it() {
    if role().is_some() {
        return worker();
    }
    kill_rounds(
        "sigkill_holding_the_next_number_skips_it",
        &[Some(CrashPoint::OrderTurn); 3],
    );
}

#[test]
fn sigkill_inside_an_ordered_commit_settles_its_number() {
    if role().is_some() {
        return worker();
    }
    kill_rounds(
        "sigkill_inside_an_ordered_commit_settles_its_number",
        &[
            Some(CrashPoint::CommitLocked),
            Some(CrashPoint::CommitLogged),
            Some(CrashPoint::CommitPublishing),
        ],
    );
}

#[test]
fn sigkill_at_random_points_of_ordered_workers() {
    if role().is_some() {
        return worker();
    }
    kill_rounds("sigkill_at_random_points_of_ordered_workers", &[None; 6]);
}
