//! Long-running readers (issue 3): a snapshot held for a long time, in
//! another process, while a writer commits many times.
//! - copy-on-checkpoint: checkpoints pass the old snapshot and empty the log,
//!   the reader still sees its snapshot (checked inside its transaction, on
//!   pages it touches for the first time after many checkpoints), and the
//!   versions held stay bounded by pages × snapshots, not by commits;
//! - the snapshot limit expires a too-old snapshot with a typed error, and
//!   nothing else;
//! - SIGKILL of a process in the middle of a copy-on-checkpoint checkpoint
//!   loses no acknowledged commit, neither for the processes still running
//!   nor after recovery from the files as the crash left them.
mod common;

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use common::*;
use txmap::debug::CrashPoint;
use txmap::{Error, Options, Region, SnapshotLimit, View};

const PAGE: u64 = 4096;
/// Pages that every commit rewrites, all with the same value.
const PAGES: u64 = 16;
/// Liveness bound for children (not a speed assertion).
const LIVENESS: Duration = Duration::from_secs(120);

fn at(p: u64) -> u64 {
    p * PAGE + 8 * (p % 7)
}

fn env(k: &str) -> String {
    std::env::var(k).unwrap_or_else(|_| panic!("{k} not set"))
}

fn small_log() -> Options {
    Options {
        checkpoint_bytes: 16 << 10,
        ..Options::default()
    }
}

/// `small_log` with a snapshot limit of `lag` commits.
fn lag_limit(lag: u64) -> Options {
    Options {
        snapshot_limit: SnapshotLimit {
            max_lag: Some(lag),
            ..SnapshotLimit::default()
        },
        ..small_log()
    }
}

/// Sets every page to `x` in one transaction.
fn set_all(v: &mut View, x: u64) {
    v.run(|v| {
        for p in 0..PAGES {
            v.write(at(p), &x)?;
        }
        Ok(())
    })
    .unwrap();
}

/// The values of pages `from..to` inside the current transaction; all must
/// be equal (a commit writes them all).
fn read_range(v: &View, from: u64, to: u64) -> txmap::Result<u64> {
    let first = v.read::<u64>(at(from))?;
    for p in from + 1..to {
        let x = v.read::<u64>(at(p))?;
        if x != first {
            eprintln!("torn snapshot: page {from} holds {first}, page {p} holds {x}");
            std::process::exit(3);
        }
    }
    Ok(first)
}

/// Writes a file the parent waits for: complete once it appears.
fn publish(path: String, content: String) {
    let tmp = format!("{path}.tmp");
    std::fs::write(&tmp, content).unwrap();
    std::fs::rename(tmp, path).unwrap();
}

fn wait_file(p: &Path) {
    let start = Instant::now();
    while !p.exists() {
        assert!(start.elapsed() < LIVENESS, "{} never appeared", p.display());
        std::thread::sleep(Duration::from_millis(1));
    }
}

// ---------------------------------------------------------------- children

/// Reader child: begins a read-only transaction, reads the first half of the
/// pages, says READY with the value; on GO reads every page (the second half
/// for the first time) and checks they all hold that value; writes the
/// outcome to RESULT and commits when END appears.
fn reader() {
    let r = Region::open(env("TXMAP_PATH").as_ref(), Options::default()).unwrap();
    let mut v = r.view().unwrap();
    v.begin_read().unwrap();
    let first = read_range(&v, 0, PAGES / 2).unwrap();
    publish(env("TXMAP_READY"), first.to_string());
    wait_file(env("TXMAP_GO").as_ref());
    let all = read_range(&v, 0, PAGES).unwrap();
    let again = read_range(&v, 0, PAGES).unwrap();
    let outcome = if all == first && again == first {
        format!("OK {first}")
    } else {
        format!("CHANGED {first} {all} {again}")
    };
    publish(env("TXMAP_RESULT"), outcome);
    wait_file(env("TXMAP_END").as_ref());
    v.commit()
        .expect("a read-only transaction failed under the default limit");
}

/// Writer child: commits `set_all(i)` for i = 1, 2, ... and appends "ACK i"
/// after each returns (durable); TXMAP_CRASH=point:nth arms a crash point.
fn writer() {
    let r = Region::open(env("TXMAP_PATH").as_ref(), small_log()).unwrap();
    let (p, nth) = env("TXMAP_CRASH")
        .split_once(':')
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .unwrap();
    let point = match p.as_str() {
        "preserved" => CrashPoint::CheckpointPreserved,
        "writing" => CrashPoint::CheckpointWriting,
        "reset" => CrashPoint::LogReset,
        other => panic!("unknown point {other}"),
    };
    let mut acks = File::options()
        .create(true)
        .append(true)
        .open(env("TXMAP_ACK"))
        .unwrap();
    let mut v = r.view().unwrap();
    let start: u64 = env("TXMAP_START").parse().unwrap();
    txmap::debug::crash_at(point, nth.parse().unwrap());
    for i in start.. {
        set_all(&mut v, i);
        acks.write_all(format!("ACK {i}\n").as_bytes()).unwrap();
    }
}

/// Expiring reader child: opens with the default options (so takes the
/// region's limit), reads, says READY; on GO reads again and reports how
/// the snapshot limit answered, in RESULT.
fn expiring_reader() {
    let r = Region::open(env("TXMAP_PATH").as_ref(), Options::default()).unwrap();
    let mut v = r.view().unwrap();
    v.begin_read().unwrap();
    let first = read_range(&v, 0, 2).unwrap();
    publish(env("TXMAP_READY"), first.to_string());
    wait_file(env("TXMAP_GO").as_ref());
    let outcome = match v.read::<u64>(at(3)) {
        Err(Error::SnapshotTooOld { snapshot, lag }) => {
            // Raw loads still see the snapshot until the transaction ends.
            // SAFETY: inside the view's mapping; the fault is txmap's.
            let raw =
                unsafe { std::ptr::read_volatile(v.base().add(at(4) as usize) as *const u64) };
            match v.commit() {
                Err(Error::SnapshotTooOld { .. }) => format!("EXPIRED {snapshot} {lag} {raw}"),
                other => format!("COMMIT {other:?}"),
            }
        }
        other => format!("READ {other:?}"),
    };
    publish(env("TXMAP_RESULT"), outcome);
}

fn as_child() -> bool {
    match role().as_deref() {
        None => false,
        Some("expiring-reader") => {
            expiring_reader();
            true
        }
        Some("reader") => {
            reader();
            true
        }
        Some("writer") => {
            writer();
            true
        }
        Some(r) => panic!("unknown role {r}"),
    }
}

struct Proc(Child, PathBuf);

impl Proc {
    fn spawn(test: &str, role: &str, envs: &[(&str, String)], err: PathBuf) -> Proc {
        let c = child(test, role, envs)
            .stdout(Stdio::null())
            .stderr(File::create(&err).unwrap())
            .spawn()
            .unwrap();
        Proc(c, err)
    }
    fn stderr(&self) -> String {
        std::fs::read_to_string(&self.1).unwrap_or_default()
    }
    fn wait(&mut self) -> std::process::ExitStatus {
        let start = Instant::now();
        loop {
            if let Some(s) = self.0.try_wait().unwrap() {
                return s;
            }
            assert!(start.elapsed() < LIVENESS, "child hangs: {}", self.stderr());
            std::thread::sleep(Duration::from_millis(2));
        }
    }
    fn wait_for(&mut self, p: &Path) {
        let start = Instant::now();
        while !p.exists() {
            // The child may have published and exited since the check.
            if let Some(s) = self.0.try_wait().unwrap()
                && !p.exists()
            {
                panic!(
                    "child exited ({s}) before {}: {}",
                    p.display(),
                    self.stderr()
                );
            }
            assert!(start.elapsed() < LIVENESS, "{} never appeared", p.display());
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

// ---------------------------------------------------------------- tests

/// A reader in another process holds its snapshot while this process commits
/// 1,500 times with a small log: every checkpoint passes the snapshot and the
/// log is emptied again and again; the versions held stay below
/// pages × (2 + snapshots) however many commits pass; the reader then reads
/// pages it never touched and finds its snapshot, and commits.
#[test]
fn a_long_reader_in_another_process_does_not_hold_the_log() {
    let test = "a_long_reader_in_another_process_does_not_hold_the_log";
    if as_child() {
        return;
    }
    const COMMITS: u64 = 1500;
    let d = ext4_dir("lr-log");
    let p = d.join("r.txm");
    let r = Region::create(&p, PAGES * PAGE, small_log()).unwrap();
    let mut w = r.view().unwrap();
    set_all(&mut w, 7);
    // The reader then reads the region file (no versions in memory).
    r.checkpoint().unwrap();
    let (ready, go, result, end) = (
        d.join("ready"),
        d.join("go"),
        d.join("result"),
        d.join("end"),
    );
    let envs = [
        ("TXMAP_PATH", p.display().to_string()),
        ("TXMAP_READY", ready.display().to_string()),
        ("TXMAP_GO", go.display().to_string()),
        ("TXMAP_RESULT", result.display().to_string()),
        ("TXMAP_END", end.display().to_string()),
    ];
    let mut reader = Proc::spawn(test, "reader", &envs, d.join("err-reader"));
    reader.wait_for(&ready);
    assert_eq!(std::fs::read_to_string(&ready).unwrap(), "7");
    let snap = r.stats().oldest_snapshot.expect("the reader's snapshot");
    let (mut max_log, mut max_versions, mut resets) = (0, 0, 0);
    let mut last_log = 0;
    for i in 8..8 + COMMITS {
        set_all(&mut w, i);
        let s = r.stats();
        assert_eq!(s.oldest_snapshot, Some(snap), "the reader's snapshot moved");
        max_log = max_log.max(s.log_bytes);
        max_versions = max_versions.max(s.version_pages);
        if s.log_bytes < last_log {
            resets += 1;
        }
        last_log = s.log_bytes;
    }
    let s = r.stats();
    println!(
        "{COMMITS} commits with a reader at {snap}: log at most {max_log} bytes, {resets} resets, \
         at most {max_versions} page versions, {} pages preserved",
        s.preserved_pages
    );
    // The log records of one commit of 16 pages are < 1 KiB; a checkpoint
    // runs once the log passes 16 KiB.
    assert!(resets >= 10, "the log was reset only {resets} times");
    assert!(max_log < (16 << 10) + 4096, "log grew to {max_log} bytes");
    // Head, newest synced, one for the checkpoint to write, one for the reader.
    assert!(
        max_versions as u64 <= PAGES * 4,
        "{max_versions} versions held for {PAGES} pages and one reader"
    );
    assert!(s.preserved_pages >= PAGES / 2, "{s:?}");
    File::create(&go).unwrap();
    reader.wait_for(&result);
    assert_eq!(std::fs::read_to_string(&result).unwrap(), "OK 7");
    File::create(&end).unwrap();
    let st = reader.wait();
    assert!(st.success(), "reader failed ({st}): {}", reader.stderr());
    r.checkpoint().unwrap();
    let s = r.stats();
    assert_eq!((s.log_bytes, s.version_pages), (0, 0), "{s:?}");
    w.begin_read().unwrap();
    assert_eq!(read_range(&w, 0, PAGES).unwrap(), 7 + COMMITS);
    w.commit().unwrap();
}

/// In one process, the same without checkpoints triggered by commits: the
/// memory held by one old snapshot is one version per page it may read,
/// not one per commit.
#[test]
fn versions_held_by_an_old_snapshot_do_not_grow_with_commits() {
    let d = ext4_dir("lr-bound");
    let r = Region::create(&d.join("r.txm"), PAGES * PAGE, small_log()).unwrap();
    let (mut w, mut old) = (r.view().unwrap(), r.view().unwrap());
    set_all(&mut w, 1);
    r.checkpoint().unwrap();
    old.begin_read().unwrap();
    assert_eq!(old.read::<u64>(at(0)).unwrap(), 1);
    let mut held = Vec::new();
    for round in 0..4 {
        for i in 0..250 {
            set_all(&mut w, 2 + round * 250 + i);
        }
        r.checkpoint().unwrap();
        let s = r.stats();
        assert_eq!(s.log_bytes, 0, "{s:?}");
        held.push(s.version_pages);
    }
    assert!(
        held.iter().all(|&h| h == held[0]) && held[0] as u64 <= 2 * PAGES,
        "versions held after 250, 500, 750, 1000 commits: {held:?}"
    );
    assert_eq!(read_range(&old, 0, PAGES).unwrap(), 1);
    old.commit().unwrap();
}

#[test]
fn the_snapshot_limit_expires_a_snapshot_too_many_commits_behind() {
    let d = ext4_dir("lr-lag");
    let o = lag_limit(10);
    let r = Region::create(&d.join("r.txm"), PAGES * PAGE, o).unwrap();
    let (mut w, mut old, mut young) = (r.view().unwrap(), r.view().unwrap(), r.view().unwrap());
    set_all(&mut w, 1);
    old.begin_read().unwrap();
    assert_eq!(old.read::<u64>(at(0)).unwrap(), 1);
    for i in 2..=10 {
        set_all(&mut w, i);
    }
    young.begin_read().unwrap();
    assert_eq!(
        old.read::<u64>(at(1)).unwrap(),
        1,
        "10 commits behind: not expired yet"
    );
    for i in 11..=13 {
        set_all(&mut w, i);
    }
    let s = r.stats();
    assert_eq!(s.expired_snapshots, 1, "{s:?}");
    assert_eq!(s.snapshot_limit.max_lag, Some(10));
    assert!(
        s.snapshots.iter().any(|x| x.expired && x.snapshot == 1),
        "{s:?}"
    );
    match old.read::<u64>(at(2)) {
        Err(Error::SnapshotTooOld {
            snapshot: 1,
            lag: 12,
        }) => {}
        other => panic!("expected SnapshotTooOld at snapshot 1, lag 12: {other:?}"),
    }
    let e = old.commit().unwrap_err();
    assert!(
        matches!(e, Error::SnapshotTooOld { snapshot: 1, .. }),
        "{e}"
    );
    assert!(
        e.to_string().contains("snapshot of commit 1 expired"),
        "{e}"
    );
    // The younger reader is within the limit and reads on.
    assert_eq!(read_range(&young, 0, PAGES).unwrap(), 10);
    young.commit().unwrap();
    // A new transaction on the expired view works.
    old.begin_read().unwrap();
    assert_eq!(read_range(&old, 0, PAGES).unwrap(), 13);
    old.commit().unwrap();
    // A writer too old fails the same way, and writes nothing.
    old.begin().unwrap();
    old.write(at(0), &99u64).unwrap();
    for i in 14..=25 {
        set_all(&mut w, i);
    }
    assert!(matches!(old.commit(), Err(Error::SnapshotTooOld { .. })));
    w.begin_read().unwrap();
    assert_eq!(read_range(&w, 0, PAGES).unwrap(), 25);
    w.commit().unwrap();
}

/// An expired read-only transaction still reads the pages its view holds
/// (its snapshot's own content, as raw loads do), but fails on a page it
/// would read from a shared copy, and at its commit.
#[test]
fn an_expired_reader_reads_the_pages_its_view_holds_and_fails_elsewhere() {
    let d = ext4_dir("lr-held");
    let o = lag_limit(2);
    let r = Region::create(&d.join("r.txm"), PAGES * PAGE, o).unwrap();
    let (mut w, mut old) = (r.view().unwrap(), r.view().unwrap());
    set_all(&mut w, 1);
    // `old` writes page 0: its view keeps the page it committed.
    old.run(|v| v.write(at(0), &7u64)).unwrap();
    old.begin_read().unwrap();
    assert_eq!(old.read::<u64>(at(0)).unwrap(), 7);
    for i in 2..6 {
        w.run(|v| v.write(at(1), &i)).unwrap();
    }
    assert_eq!(r.stats().expired_snapshots, 1, "{:?}", r.stats());
    assert_eq!(
        old.read::<u64>(at(0)).unwrap(),
        7,
        "a page the expired view holds"
    );
    assert!(
        matches!(old.read::<u64>(at(1)), Err(Error::SnapshotTooOld { .. })),
        "a page it reads from the shared versions"
    );
    assert!(matches!(old.commit(), Err(Error::SnapshotTooOld { .. })));
}

#[test]
fn the_snapshot_limit_on_memory_expires_the_oldest_snapshot_only() {
    let d = ext4_dir("lr-mem");
    let o = Options {
        checkpoint_bytes: u64::MAX,
        snapshot_limit: SnapshotLimit {
            max_version_bytes: Some(3 * PAGES * PAGE),
            ..SnapshotLimit::default()
        },
        ..Options::default()
    };
    let r = Region::create(&d.join("r.txm"), PAGES * PAGE, o).unwrap();
    let (mut w, mut old, mut mid) = (r.view().unwrap(), r.view().unwrap(), r.view().unwrap());
    set_all(&mut w, 1);
    old.begin_read().unwrap();
    assert_eq!(old.read::<u64>(at(0)).unwrap(), 1);
    set_all(&mut w, 2);
    mid.begin_read().unwrap();
    assert_eq!(mid.read::<u64>(at(0)).unwrap(), 2);
    let mut i = 3;
    while r.stats().expired_snapshots == 0 {
        assert!(i < 100, "never expired: {:?}", r.stats());
        set_all(&mut w, i);
        i += 1;
    }
    for _ in 0..20 {
        set_all(&mut w, i);
        i += 1;
    }
    let s = r.stats();
    assert_eq!(
        s.expired_snapshots, 1,
        "one at a time, the oldest first: {s:?}"
    );
    assert!(matches!(
        old.read::<u64>(at(3)),
        Err(Error::SnapshotTooOld { snapshot: 1, .. })
    ));
    assert_eq!(
        read_range(&mid, 0, PAGES).unwrap(),
        2,
        "the younger one still reads"
    );
    // The expired transaction still sees its snapshot through raw loads.
    let raw = unsafe { std::ptr::read_volatile(old.base().add(at(5) as usize) as *const u64) };
    assert_eq!(raw, 1);
    old.rollback();
    // Its versions go at the next commit, and the younger reader stays.
    set_all(&mut w, i);
    let s = r.stats();
    assert_eq!(s.expired_snapshots, 1, "{s:?}");
    assert!(s.version_pages as u64 <= 3 * PAGES, "{s:?}");
    assert_eq!(read_range(&mid, 0, PAGES).unwrap(), 2);
    mid.commit().unwrap();
}

#[test]
fn a_second_opener_asking_for_another_snapshot_limit_is_refused() {
    let d = ext4_dir("lr-opts");
    let p = d.join("r.txm");
    let lim = |lag| Options {
        snapshot_limit: SnapshotLimit {
            max_lag: Some(lag),
            ..SnapshotLimit::default()
        },
        ..Options::default()
    };
    let r = Region::create(&p, PAGE, lim(100)).unwrap();
    let e = Region::open(&p, lim(5))
        .err()
        .expect("a different limit must fail");
    assert!(e.to_string().contains("snapshot limit"), "{e}");
    let same = Region::open(&p, lim(100)).unwrap();
    let default = Region::open(&p, Options::default()).unwrap();
    assert_eq!(default.stats().snapshot_limit.max_lag, Some(100));
    assert!(matches!(
        Region::create(&d.join("z.txm"), PAGE, lim(0)),
        Err(Error::Invalid(_))
    ));
    drop((same, default, r));
}

/// A writer process is killed inside a checkpoint that copies pages for an
/// old snapshot held by this process (after the copies, or after writing the
/// region file, before its header), round after round. The reader keeps its
/// snapshot; this process commits on (repairing the checkpoint lock); and
/// the files as the crash left them recover every acknowledged commit.
#[test]
fn sigkill_during_copy_on_checkpoint_loses_nothing() {
    let test = "sigkill_during_copy_on_checkpoint_loses_nothing";
    if as_child() {
        return;
    }
    let d = ext4_dir("lr-kill");
    let p = d.join("r.txm");
    let r = Region::create(&p, PAGES * PAGE, small_log()).unwrap();
    let mut w = r.view().unwrap();
    set_all(&mut w, 1);
    // Each round starts with no versions in memory: the old snapshot reads
    // the region file, which the writer's checkpoints then overwrite.
    r.checkpoint().unwrap();
    let mut next = 2;
    let points = [
        "preserved",
        "writing",
        "preserved",
        "reset",
        "writing",
        "preserved",
    ];
    for (round, point) in points.iter().enumerate() {
        let mut old = r.view().unwrap();
        old.begin_read().unwrap();
        let seen = read_range(&old, 0, PAGES / 4).unwrap();
        let ack = d.join(&format!("ack-{round}"));
        let envs = [
            ("TXMAP_PATH", p.display().to_string()),
            ("TXMAP_ACK", ack.display().to_string()),
            ("TXMAP_START", next.to_string()),
            // A snapshot is preserved once per page: only the first
            // checkpoint of a round copies anything.
            (
                "TXMAP_CRASH",
                format!(
                    "{point}:{}",
                    if *point == "preserved" {
                        1
                    } else {
                        1 + round % 3
                    }
                ),
            ),
        ];
        let mut c = Proc::spawn(test, "writer", &envs, d.join(&format!("err-{round}")));
        eprintln!("round {round}: {point}");
        let st = c.wait();
        assert_eq!(
            std::os::unix::process::ExitStatusExt::signal(&st),
            Some(9),
            "round {round}: the writer was not killed at {point}: {st} {}",
            c.stderr()
        );
        let acked = std::fs::read_to_string(&ack)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.strip_prefix("ACK ")?.parse::<u64>().ok())
            .max()
            .unwrap_or(next - 1);
        // The files as the crash left them (this process's reader is no
        // part of them): recovery finds every acknowledged commit.
        let copy = d.join(&format!("copy-{round}.txm"));
        copy_region(&p, &copy);
        {
            let rc = Region::open(&copy, Options::default()).unwrap();
            let mut v = rc.view().unwrap();
            v.begin_read().unwrap();
            let got = read_range(&v, 0, PAGES).unwrap();
            assert!(
                got >= acked,
                "round {round} ({point}): acked {acked}, recovered {got}"
            );
            v.commit().unwrap();
        }
        // The old snapshot is intact, on pages touched before and after.
        assert_eq!(read_range(&old, 0, PAGES).unwrap(), seen, "round {round}");
        // Commits and checkpoints go on here.
        w.begin_read().unwrap();
        let now = read_range(&w, 0, PAGES).unwrap();
        w.commit().unwrap();
        assert!(now >= acked, "round {round}: acked {acked}, live {now}");
        for i in now + 1..now + 40 {
            set_all(&mut w, i);
        }
        r.checkpoint().unwrap();
        assert_eq!(read_range(&old, 0, PAGES).unwrap(), seen, "round {round}");
        old.commit().unwrap();
        r.checkpoint().unwrap();
        let s = r.stats();
        assert_eq!(
            (s.log_bytes, s.version_pages),
            (0, 0),
            "round {round}: {s:?}"
        );
        next = now + 40;
    }
    drop(w);
    drop(r);
    let r = Region::open(&p, Options::default()).unwrap();
    let mut v = r.view().unwrap();
    v.begin_read().unwrap();
    assert_eq!(read_range(&v, 0, PAGES).unwrap(), next - 1);
    v.commit().unwrap();
}

/// Versions the version store cannot take: a typed error, nothing
/// published, and the store usable again once versions can be pruned.
#[test]
fn a_full_version_store_is_a_typed_error_not_a_panic() {
    let d = ext4_dir("lr-full");
    let o = Options {
        durability: txmap::Durability::Async,
        async_sync_interval: Duration::from_secs(3600),
        checkpoint_bytes: u64::MAX,
        max_size: 16 * PAGE,
        ..Options::default()
    };
    let r = Region::create(&d.join("r.txm"), PAGE, o).unwrap();
    let mut w = r.view().unwrap();
    // Unsynced versions must stay (a checkpoint may need them): one per commit.
    let mut full = None;
    for i in 1..200_000u64 {
        match w.run(|v| v.write(0, &i)) {
            Ok(()) => {}
            Err(e) => {
                full = Some((i, e));
                break;
            }
        }
    }
    let (i, e) = full.expect("the version store never filled");
    assert!(matches!(e, Error::VersionStoreFull { .. }), "{e}");
    assert!(e.to_string().contains("version store"), "{e}");
    // Nothing of the failed commit is visible; syncing lets pruning free the rest.
    r.sync().unwrap();
    w.begin_read().unwrap();
    assert_eq!(w.read::<u64>(0).unwrap(), i - 1);
    w.commit().unwrap();
    w.run(|v| v.write(0, &0u64)).unwrap();
    assert!(r.stats().version_pages <= 4, "{:?}", r.stats());
}

/// The lag limit set by the first process expires a reader in another
/// process (which opened with the default options): its next checked read
/// and its commit fail with `SnapshotTooOld`, raw loads still see its
/// snapshot, and every process sees the expiry in `stats`.
#[test]
fn the_snapshot_limit_expires_a_reader_in_another_process() {
    let test = "the_snapshot_limit_expires_a_reader_in_another_process";
    if as_child() {
        return;
    }
    let d = ext4_dir("lr-expire");
    let p = d.join("r.txm");
    let o = lag_limit(50);
    let r = Region::create(&p, PAGES * PAGE, o).unwrap();
    let mut w = r.view().unwrap();
    set_all(&mut w, 5);
    r.checkpoint().unwrap();
    let (ready, go, result) = (d.join("ready"), d.join("go"), d.join("result"));
    let envs = [
        ("TXMAP_PATH", p.display().to_string()),
        ("TXMAP_READY", ready.display().to_string()),
        ("TXMAP_GO", go.display().to_string()),
        ("TXMAP_RESULT", result.display().to_string()),
    ];
    let mut reader = Proc::spawn(test, "expiring-reader", &envs, d.join("err"));
    reader.wait_for(&ready);
    let snap = r.stats().oldest_snapshot.expect("the reader's snapshot");
    for i in 0..60 {
        set_all(&mut w, 6 + i);
    }
    let s = r.stats();
    assert_eq!(s.expired_snapshots, 1, "{s:?}");
    assert!(
        s.snapshots.iter().any(|x| x.snapshot == snap && x.expired),
        "{s:?}"
    );
    File::create(&go).unwrap();
    reader.wait_for(&result);
    let st = reader.wait();
    assert!(st.success(), "reader failed ({st}): {}", reader.stderr());
    assert_eq!(
        std::fs::read_to_string(&result).unwrap(),
        format!("EXPIRED {snap} 60 5")
    );
    assert_eq!(r.stats().live_snapshots, 0);
}

/// The word of page `p` through `View::slice`, which installs the page in
/// the view (the accessors of a read-only transaction read pages in place,
/// and would not race an install).
fn installed(v: &View, p: u64) -> u64 {
    u64::from_le_bytes(v.slice(at(p), 8).unwrap().try_into().unwrap())
}

/// Readers on other threads fault pages in while the writer's checkpoints
/// copy and overwrite those pages (copy-on-checkpoint racing lookups from
/// the file): every reader, old or new, sees all pages equal, on pages it
/// touches early or late in its transaction.
#[test]
fn readers_racing_copy_on_checkpoint_see_whole_snapshots() {
    let d = ext4_dir("lr-race");
    let o = Options {
        checkpoint_bytes: 4 << 10,
        durability: txmap::Durability::Async,
        ..Options::default()
    };
    let r = Region::create(&d.join("r.txm"), PAGES * PAGE, o).unwrap();
    let mut w = r.view().unwrap();
    set_all(&mut w, 1);
    // Readers pause between finding a page and copying it, so checkpoints
    // overwrite pages while readers are about to copy them from the file.
    txmap::debug::slow_installs(20_000);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let readers: Vec<_> = (0..3u64)
        .map(|k| {
            let (r, stop) = (r.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut v = r.view().unwrap();
                let mut rng = txmap::io::sim::SplitMix(k);
                let mut txns = 0u64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    v.begin_read().unwrap();
                    let first = installed(&v, rng.next() % PAGES);
                    // Long or short, pages in random order, with pauses.
                    let hold = rng.next() % 4;
                    for _ in 0..hold * 40 {
                        let p = rng.next() % PAGES;
                        assert_eq!(installed(&v, p), first, "reader {k}, page {p}");
                        std::thread::yield_now();
                    }
                    assert_eq!(read_range(&v, 0, PAGES).unwrap(), first);
                    v.commit().unwrap();
                    txns += 1;
                }
                txns
            })
        })
        .collect();
    // At least 3,000 commits, and on until some checkpoint has preserved a
    // page for a reader (how soon depends on scheduling; on an idle machine
    // readers may finish before the checkpoints reach them for a while).
    for i in 2..200_000 {
        set_all(&mut w, i);
        if i >= 3000 && i % 100 == 0 && r.stats().preserved_pages > 0 {
            break;
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let txns: u64 = readers.into_iter().map(|h| h.join().unwrap()).sum();
    txmap::debug::slow_installs(0);
    let s = r.stats();
    assert!(txns > 0 && s.preserved_pages > 0, "{txns} reads, {s:?}");
}
