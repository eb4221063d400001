//! Transactions over several regions of one directory (issue 19 point 1,
//! docs/design/multi-region.md): committed atomically across them, also
//! when the committing process is killed with SIGKILL between the regions.
//!
//! The workload: regions `a` and `b` hold `ACCOUNTS` i64 balances each (one
//! per page); a transfer moves an amount between a random account of `a`
//! and one of `b` and bumps worker `w`'s counter in both regions (page
//! `COUNTERS`). Checked inside every transaction, the ones that will abort
//! included (the total of both regions is `TOTAL`), and after recovery
//! (the total, each worker's two counters equal, and at least as many
//! transfers as were acknowledged).

mod common;

use std::path::Path;
use std::time::Duration;

use common::*;
use txmap::debug::CrashPoint;
use txmap::{Durability, Error, Options, Region, View};

const PAGE: u64 = 4096;
const ACCOUNTS: u64 = 8;
const START: i64 = 1000;
const TOTAL: i64 = 2 * ACCOUNTS as i64 * START;
const COUNTERS: u64 = ACCOUNTS * PAGE;
/// A page no transfer writes.
const SPARE: u64 = (ACCOUNTS + 1) * PAGE;
const SIZE: u64 = (ACCOUNTS + 2) * PAGE;

fn opts() -> Options {
    Options {
        durability: Durability::Durable,
        ..Options::default()
    }
}

fn create(dir: &Path) {
    for name in ["a", "b"] {
        let r = Region::create(&dir.join(name), SIZE, opts()).unwrap();
        let mut v = r.view().unwrap();
        v.begin().unwrap();
        for i in 0..ACCOUNTS {
            v.write(i * PAGE, &START).unwrap();
        }
        v.commit().unwrap();
        drop(v);
        r.close().unwrap();
    }
}

/// The sum of both regions' balances, as the transaction sees them.
fn total(views: &mut [&mut View]) -> i64 {
    let mut sum = 0;
    for v in views.iter_mut() {
        for i in 0..ACCOUNTS {
            sum += v.read::<i64>(i * PAGE).unwrap();
        }
    }
    sum
}

/// One transfer by worker `w` (its transaction over both views is open).
fn transfer(views: &mut [&mut View], w: u64, x: u64) -> txmap::Result<()> {
    assert_eq!(total(views), TOTAL, "a transaction saw a torn total");
    let (i, j) = (x % ACCOUNTS, (x >> 8) % ACCOUNTS);
    let amount = (x >> 16) as i64 % 50 - 25;
    let a: i64 = views[0].read(i * PAGE)?;
    views[0].write(i * PAGE, &(a - amount))?;
    let b: i64 = views[1].read(j * PAGE)?;
    views[1].write(j * PAGE, &(b + amount))?;
    for v in views.iter_mut() {
        let c: u64 = v.read(COUNTERS + 8 * w)?;
        v.write(COUNTERS + 8 * w, &(c + 1))?;
    }
    Ok(())
}

/// Opens `a` and `b` (in the order given) and checks the total and that
/// each worker's counters agree and cover its acknowledged transfers.
fn check(dir: &Path, b_first: bool, acked: &[u64]) {
    let names = if b_first { ["b", "a"] } else { ["a", "b"] };
    let mut regions: Vec<(&str, Region)> = names
        .iter()
        .map(|n| (*n, Region::open(&dir.join(n), opts()).unwrap()))
        .collect();
    regions.sort_by_key(|(n, _)| *n);
    let mut va = regions[0].1.view().unwrap();
    let mut vb = regions[1].1.view().unwrap();
    let views = &mut [&mut va, &mut vb];
    View::begin_group(views).unwrap();
    assert_eq!(total(views), TOTAL, "the total changed across recovery");
    for (w, &n) in acked.iter().enumerate() {
        let off = COUNTERS + 8 * w as u64;
        let (ca, cb): (u64, u64) = (views[0].read(off).unwrap(), views[1].read(off).unwrap());
        assert_eq!(ca, cb, "worker {w}: a transfer is in one region only");
        assert!(
            ca >= n,
            "worker {w}: {n} transfers acknowledged, {ca} recovered"
        );
    }
    View::commit_group(views).unwrap();
}

/// Child: transfers until killed (or `TXMAP_N` of them), one ack line each.
fn worker() {
    let dir = std::path::PathBuf::from(std::env::var("TXMAP_DIR").unwrap());
    let w: u64 = std::env::var("TXMAP_WORKER").unwrap().parse().unwrap();
    let n: u64 = std::env::var("TXMAP_N").map_or(u64::MAX, |s| s.parse().unwrap());
    if let Ok(p) = std::env::var("TXMAP_CRASH") {
        let (pt, nth) = p.split_once(':').unwrap();
        let pt = CrashPoint::from_u32(pt.parse().unwrap()).unwrap();
        if std::env::var("TXMAP_STOP").is_ok() {
            txmap::debug::stop_at(pt, nth.parse().unwrap());
        } else {
            txmap::debug::crash_at(pt, nth.parse().unwrap());
        }
    }
    let ra = Region::open(&dir.join("a"), opts()).unwrap();
    let rb = Region::open(&dir.join("b"), opts()).unwrap();
    let (mut va, mut vb) = (ra.view().unwrap(), rb.view().unwrap());
    let mut acks = Acks::open(dir.join(format!("acks{w}")).to_str().unwrap());
    let mut x = seed("worker") ^ (w + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    for _ in 0..n {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let xx = x >> 20;
        View::run_group(&mut [&mut va, &mut vb], |views| transfer(views, w, xx)).unwrap();
        acks.line("t");
    }
}

/// Worker `w`'s `n` transfers between regions `ra` and `rb`, from a
/// thread, with random amounts from `seed`.
fn thread_transfers(ra: &Region, rb: &Region, w: u64, seed: u64, n: u64) {
    let (mut va, mut vb) = (ra.view().unwrap(), rb.view().unwrap());
    let mut x = seed;
    for _ in 0..n {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
        let xx = x >> 20;
        View::run_group(&mut [&mut va, &mut vb], |v| transfer(v, w, xx)).unwrap();
    }
}

#[test]
fn transfers_in_threads_keep_the_total_in_every_transaction() {
    let d = ext4_dir("multiregion-threads");
    create(d.path());
    let ra = Region::open(&d.join("a"), opts()).unwrap();
    let rb = Region::open(&d.join("b"), opts()).unwrap();
    std::thread::scope(|s| {
        for w in 0..3u64 {
            let (ra, rb) = (&ra, &rb);
            s.spawn(move || thread_transfers(ra, rb, w, w + 11, 200));
        }
        // A reader of both regions, whose transactions never abort.
        s.spawn(|| {
            let (mut va, mut vb) = (ra.view().unwrap(), rb.view().unwrap());
            for _ in 0..200 {
                let views = &mut [&mut va, &mut vb];
                View::begin_group_with(views, txmap::TxnOptions::READ_ONLY).unwrap();
                assert_eq!(total(views), TOTAL, "a reader saw a torn total");
                View::commit_group(views).unwrap();
            }
        });
    });
    drop((ra, rb));
    check(d.path(), false, &[200, 200, 200]);
}

#[test]
fn no_group_is_visible_before_it_is_durable_in_every_region() {
    let d = ext4_dir("multiregion-visible-durable");
    create(d.path());
    let ra = Region::open(&d.join("a"), opts()).unwrap();
    let rb = Region::open(&d.join("b"), opts()).unwrap();
    // Slower syncs: groups wait longer between their append and their
    // sync, so committers release one another's groups more often.
    txmap::debug::slow_syncs(300);
    let done = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        let writers: Vec<_> = (0..3u64)
            .map(|w| {
                let (ra, rb) = (&ra, &rb);
                s.spawn(move || thread_transfers(ra, rb, w, w + 5, 100))
            })
            .collect();
        // Every commit writes both regions (one each at creation), so a
        // commit has one sequence number in both: what a snapshot of one
        // region may see must be durable in the other's log already.
        s.spawn(|| {
            let probe = txmap::debug::visible_then_synced;
            while !done.load(std::sync::atomic::Ordering::SeqCst) {
                let (seen_a, _) = probe(&ra);
                let (_, synced_b) = probe(&rb);
                assert!(seen_a <= synced_b, "a sees {seen_a}, b synced {synced_b}");
                let (seen_b, _) = probe(&rb);
                let (_, synced_a) = probe(&ra);
                assert!(seen_b <= synced_a, "b sees {seen_b}, a synced {synced_a}");
            }
        });
        for w in writers {
            w.join().unwrap();
        }
        done.store(true, std::sync::atomic::Ordering::SeqCst);
    });
    txmap::debug::slow_syncs(0);
    drop((ra, rb));
    check(d.path(), false, &[100; 3]);
}

#[test]
fn a_region_only_read_is_validated_at_the_commit() {
    let d = ext4_dir("multiregion-read-only-part");
    create(d.path());
    let ra = Region::open(&d.join("a"), opts()).unwrap();
    let rb = Region::open(&d.join("b"), opts()).unwrap();
    let (mut va, mut vb, mut other) = (ra.view().unwrap(), rb.view().unwrap(), rb.view().unwrap());
    for tracked in [false, true] {
        let views = &mut [&mut va, &mut vb];
        View::begin_group(views).unwrap();
        if tracked {
            // A read through a plain load is tracked by the fault handler.
            // SAFETY: the view maps the region; page 0 lies inside it.
            let _ = unsafe { std::ptr::read_volatile(views[1].base() as *const i64) };
        }
        let x: i64 = views[1].read(0).unwrap();
        views[0].write(0, &(x + 1)).unwrap();
        // Another transaction changes what this one read in `b`.
        other.run(|v| v.write(0, &(x - 5))).unwrap();
        let r = View::commit_group(views);
        assert!(
            matches!(r, Err(Error::Conflict)),
            "tracked {tracked}: {r:?}"
        );
    }
}

#[test]
fn sigkill_at_random_points_keeps_transfers_atomic() {
    let test = "sigkill_at_random_points_keeps_transfers_atomic";
    if role().is_some() {
        return worker();
    }
    let d = ext4_dir("multiregion-sigkill");
    create(d.path());
    let mut rng = seed(test);
    for round in 0..12u64 {
        let procs = spawn_workers(test, &d, 0..2);
        rng = rng.wrapping_mul(6364136223846793005).wrapping_add(1);
        std::thread::sleep(Duration::from_millis(30 + (rng >> 33) % 120));
        kill_workers(procs);
        let acked = acked(d.path(), 2);
        // Alternate which region recovers first.
        check(d.path(), round % 2 == 1, &acked);
        eprintln!("round {round}: acknowledged {acked:?}");
    }
}

/// Spawns worker 0 armed at `point` (its `nth` time), to be killed or
/// stopped there.
fn armed(name: &str, d: &TestDir, point: CrashPoint, nth: u64, stop: bool) -> Proc {
    let mut env = vec![
        ("TXMAP_DIR", d.path().display().to_string()),
        ("TXMAP_WORKER", "0".to_string()),
        ("TXMAP_CRASH", format!("{}:{nth}", point as u32)),
    ];
    if stop {
        env.push(("TXMAP_STOP", String::new()));
    }
    Proc::spawn(name, "worker", &env, d.join("err"))
}

/// Waits until `p` has exited.
fn wait_exit(p: &mut Proc) -> std::process::ExitStatus {
    loop {
        if let Some(s) = p.try_wait() {
            return s;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Stops worker 0 at `point` of its second group commit (holding both
/// commit locks), begins a transaction over both regions meanwhile and
/// resumes the worker 300 ms later: returns the total the reader saw and
/// worker 0's counter in each region.
fn read_while_stopped_at(name: &str, point: CrashPoint) -> (i64, Vec<u64>) {
    let d = ext4_dir(name);
    create(d.path());
    let ra = Region::open(&d.join("a"), opts()).unwrap();
    let rb = Region::open(&d.join("b"), opts()).unwrap();
    let mut p = armed(name, &d, point, 2, true);
    while p.state() != 'T' {
        p.check_running("the stopping worker");
        std::thread::sleep(Duration::from_millis(2));
    }
    let seen = std::thread::scope(|s| {
        let reader = s.spawn(|| {
            let (mut va, mut vb) = (ra.view().unwrap(), rb.view().unwrap());
            let views = &mut [&mut va, &mut vb];
            View::begin_group_with(views, txmap::TxnOptions::READ_ONLY).unwrap();
            let t = total(views);
            let counters: Vec<u64> = views
                .iter_mut()
                .map(|v| v.read(COUNTERS).unwrap())
                .collect();
            View::commit_group(views).unwrap();
            (t, counters)
        });
        std::thread::sleep(Duration::from_millis(300));
        p.signal(rustix::process::Signal::CONT);
        reader.join().unwrap()
    });
    p.kill();
    seen
}

#[test]
fn a_reader_never_sees_a_group_published_in_one_region_only() {
    if role().is_some() {
        return worker();
    }
    let name = "a_reader_never_sees_a_group_published_in_one_region_only";
    // Stopped with its group published in one region, not yet the other.
    let (total, counters) = read_while_stopped_at(name, CrashPoint::GroupPublished);
    assert_eq!(
        total, TOTAL,
        "a reader saw a group commit in one region only"
    );
    assert_eq!(counters[0], counters[1], "a reader saw a torn group");
}

#[test]
fn a_reader_never_sees_a_group_released_in_one_region_only() {
    if role().is_some() {
        return worker();
    }
    let name = "a_reader_never_sees_a_group_released_in_one_region_only";
    // Stopped with its group durable and released to snapshots in one
    // region, not yet the other. Snapshots over both regions are taken
    // without the commit locks while no such release is under way: this
    // one must not be.
    let (total, counters) = read_while_stopped_at(name, CrashPoint::GroupReleasing);
    assert_eq!(total, TOTAL, "a reader saw a torn total");
    assert_eq!(
        counters[0], counters[1],
        "a reader saw a group released in one region only"
    );
}

/// Kills a worker at `point` of its `nth` group commit, then recovers
/// with the regions opened in the order given; `alone` is opened first by
/// itself, commits in it alone and checkpoints, before both are checked.
fn kill_at(name: &str, point: CrashPoint, nth: u64, b_first: bool, alone: Option<&str>) {
    let d = ext4_dir(name);
    create(d.path());
    let status = wait_exit(&mut armed(name, &d, point, nth, false));
    assert!(!status.success(), "the worker was not killed at {point:?}");
    let acked = acked(d.path(), 1);
    assert_eq!(acked[0], nth - 1, "acknowledged before the crash");
    if let Some(alone) = alone {
        // One region goes on alone: if it lacks the group, it must not
        // reuse the group's commit number while the other holds the group.
        let rb = Region::open(&d.join(alone), opts()).unwrap();
        let mut v = rb.view().unwrap();
        for _ in 0..3 {
            v.run(|v| {
                let x: i64 = v.read(0)?;
                let y: i64 = v.read(PAGE)?;
                v.write(0, &(x - 1))?;
                v.write(PAGE, &(y + 1))
            })
            .unwrap();
        }
        drop(v);
        rb.checkpoint().unwrap();
        rb.close().unwrap();
    }
    check(d.path(), b_first, &acked);
}

#[test]
fn sigkill_after_the_first_region_of_a_group_commit() {
    if role().is_some() {
        return worker();
    }
    let name = "sigkill_after_the_first_region_of_a_group_commit";
    // Which region has the record depends on the random region ids (lock
    // order): each case runs with both regions going on alone.
    for (b_first, alone) in [
        (false, None),
        (true, None),
        (false, Some("a")),
        (false, Some("b")),
        (true, Some("a")),
        (true, Some("b")),
    ] {
        kill_at(name, CrashPoint::GroupAppended, 5, b_first, alone);
    }
}

#[test]
fn sigkill_after_every_region_of_a_group_commit_is_synced() {
    if role().is_some() {
        return worker();
    }
    let name = "sigkill_after_every_region_of_a_group_commit_is_synced";
    for (point, b_first) in [
        (CrashPoint::GroupUnlocked, false),
        (CrashPoint::GroupUnlocked, true),
        (CrashPoint::GroupSynced, false),
        (CrashPoint::GroupSynced, true),
        (CrashPoint::GroupPublished, false),
        (CrashPoint::GroupPublished, true),
    ] {
        kill_at(name, point, 4, b_first, None);
    }
}

#[test]
fn a_missing_or_renamed_region_of_a_group_is_a_clear_error() {
    if role().is_some() {
        return worker();
    }
    let name = "a_missing_or_renamed_region_of_a_group_is_a_clear_error";
    let d = ext4_dir(name);
    create(d.path());
    wait_exit(&mut armed(name, &d, CrashPoint::GroupSynced, 3, false));
    // `txmap check` shows the group records and finds every writer.
    let c = txmap::inspect::check(&d.join("a")).unwrap();
    assert!(
        c.report.log_group_records >= 3,
        "{:?}",
        c.report.log_group_records
    );
    assert!(c.problems.is_empty(), "{:?}", c.problems);
    std::fs::rename(d.join("b"), d.join("c")).unwrap();
    std::fs::rename(d.join("b-log"), d.join("c-log")).unwrap();
    let c = txmap::inspect::check(&d.join("a")).unwrap();
    assert!(
        c.problems.iter().any(|p| p.contains("missing")),
        "check of a without b: {:?}",
        c.problems
    );
    match Region::open(&d.join("a"), opts()) {
        Err(Error::Group { path, what }) => {
            assert_eq!(path, d.join("b"), "{what}");
            assert!(what.contains("missing"), "{what}");
        }
        other => panic!("opening a without b: {:?}", other.map(|_| ())),
    }
    // Another region under b's name: named as such, nothing decided.
    let other = Region::create(&d.join("b"), SIZE, opts()).unwrap();
    other.close().unwrap();
    match Region::open(&d.join("a"), opts()) {
        Err(Error::Group { what, .. }) => assert!(what.contains("renamed"), "{what}"),
        other => panic!("opening a beside another b: {:?}", other.map(|_| ())),
    }
    for f in ["b", "b-log", "b-sums"] {
        let _ = std::fs::remove_file(d.join(f));
    }
    std::fs::rename(d.join("c"), d.join("b")).unwrap();
    std::fs::rename(d.join("c-log"), d.join("b-log")).unwrap();
    check(d.path(), false, &[2]);
}

#[test]
fn a_process_killed_inside_a_group_commit_poisons_the_regions_until_reopened() {
    if role().is_some() {
        return worker();
    }
    let name = "a_process_killed_inside_a_group_commit_poisons_the_regions_until_reopened";
    let d = ext4_dir(name);
    create(d.path());
    let ra = Region::open(&d.join("a"), opts()).unwrap();
    let rb = Region::open(&d.join("b"), opts()).unwrap();
    wait_exit(&mut armed(name, &d, CrashPoint::GroupAppended, 3, false));
    // The dead committer holds both commit locks, and one region has its record.
    let (mut va, mut vb) = (ra.view().unwrap(), rb.view().unwrap());
    let r = View::run_group(&mut [&mut va, &mut vb], |v| transfer(v, 1, 77));
    assert!(matches!(r, Err(Error::Group { .. })), "{r:?}");
    for v in [&mut va, &mut vb] {
        let r = v.run(|v| v.write(PAGE, &0i64));
        assert!(r.is_err(), "a commit in a region left poisoned: {r:?}");
    }
    drop((va, vb));
    drop((ra, rb));
    check(d.path(), false, &[2]);
}

/// Worker 0's transfers as a snapshot of `a` alone sees them.
fn transfers_seen_in_a(ra: &Region) -> u64 {
    let mut v = ra.view().unwrap();
    v.begin_read().unwrap();
    let n: u64 = v.read(COUNTERS).unwrap();
    v.commit().unwrap();
    n
}

#[test]
fn a_group_waiting_for_its_sync_is_seen_by_nobody_and_holds_later_commits_back() {
    if role().is_some() {
        return worker();
    }
    let name = "a_group_waiting_for_its_sync_is_seen_by_nobody_and_holds_later_commits_back";
    let d = ext4_dir(name);
    create(d.path());
    let ra = Region::open(&d.join("a"), opts()).unwrap();
    let rb = Region::open(&d.join("b"), opts()).unwrap();
    // Stopped with its third group appended and published in both regions,
    // the commit locks released, before the logs are synced.
    let mut p = armed(name, &d, CrashPoint::GroupUnlocked, 3, true);
    while p.state() != 'T' {
        p.check_running("the stopping worker");
        std::thread::sleep(Duration::from_millis(2));
    }
    // No snapshot sees the group: not one over both regions (whose total
    // holds), not one of a region alone.
    let (mut va, mut vb) = (ra.view().unwrap(), rb.view().unwrap());
    let views = &mut [&mut va, &mut vb];
    View::begin_group_with(views, txmap::TxnOptions::READ_ONLY).unwrap();
    assert_eq!(total(views), TOTAL, "a reader saw a torn total");
    let seen: Vec<u64> = views
        .iter_mut()
        .map(|v| v.read(COUNTERS).unwrap())
        .collect();
    View::commit_group(views).unwrap();
    assert_eq!(seen, [2, 2], "a snapshot saw a group not yet durable");
    assert_eq!(
        transfers_seen_in_a(&ra),
        2,
        "a group not yet durable is visible in a"
    );
    // A later commit in `a` that touches nothing the group wrote is not
    // acknowledged before the group is durable everywhere.
    let answered = std::sync::atomic::AtomicBool::new(false);
    let r = std::thread::scope(|s| {
        let later = s.spawn(|| {
            let mut v = ra.view().unwrap();
            let r = v.run(|v| v.write(SPARE, &7u64));
            answered.store(true, std::sync::atomic::Ordering::SeqCst);
            r
        });
        std::thread::sleep(Duration::from_millis(300));
        assert!(
            !answered.load(std::sync::atomic::Ordering::SeqCst),
            "a commit after a group not yet durable was acknowledged"
        );
        // The committer dies before the sync: the group is in doubt, and
        // so is the commit after it.
        p.kill();
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while !later.is_finished() {
            if std::time::Instant::now() > deadline {
                // A panic here would wait for the blocked thread forever.
                eprintln!("a commit waits forever for a dead committer's group");
                std::process::abort();
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        later.join().unwrap()
    });
    assert!(matches!(r, Err(Error::Group { .. })), "{r:?}");
    drop((va, vb));
    drop((ra, rb));
    // Recovery keeps the group (both logs have it: a SIGKILL loses no
    // written record), in both regions.
    check(d.path(), false, &[2]);
    let ra = Region::open(&d.join("a"), opts()).unwrap();
    assert_eq!(transfers_seen_in_a(&ra), 3, "the group is in both logs");
}

/// A transaction spans distinct regions of one directory: the same region
/// twice (two views of it), or regions of two directories, are refused at
/// the begin, with both paths named.
#[test]
fn one_region_twice_or_two_directories_are_refused() {
    let d = ext4_dir("multiregion-refused");
    std::fs::create_dir_all(d.join("sub")).unwrap();
    let (pa, pb, pc) = (d.join("a"), d.join("b"), d.join("sub").join("c"));
    let ra = Region::create(&pa, SIZE, opts()).unwrap();
    let rb = Region::create(&pb, SIZE, opts()).unwrap();
    let rc = Region::create(&pc, SIZE, opts()).unwrap();
    let (mut a1, mut a2) = (ra.view().unwrap(), ra.view().unwrap());
    let (mut b, mut c) = (rb.view().unwrap(), rc.view().unwrap());
    match View::begin_group(&mut [&mut b, &mut a1, &mut a2]) {
        Err(Error::Invalid(m)) => assert!(
            m.contains("twice") && m.contains(&*pa.to_string_lossy()),
            "{m}"
        ),
        other => panic!("a twice: {other:?}"),
    }
    match View::begin_group(&mut [&mut a1, &mut b, &mut c]) {
        Err(Error::Invalid(m)) => assert!(
            m.contains("different directories") && m.contains(&*pc.to_string_lossy()),
            "{m}"
        ),
        other => panic!("a, b and sub/c: {other:?}"),
    }
    // Distinct regions of one directory, in any order, are one transaction.
    View::run_group(&mut [&mut b, &mut a1], |v| {
        v[0].write(SPARE, &1u64)?;
        v[1].write(SPARE, &2u64)
    })
    .unwrap();
}
