//! Transactions between processes: several processes (this test binary
//! re-executed with a role) open one region and commit concurrently; some are
//! killed with SIGKILL at exact points of the commit path or at random
//! moments. Checked: the bank total inside every transaction and after every
//! recovery, each writer's counter against the commits it acknowledged (in
//! an ack file), liveness of the survivors, reclamation of a dead process's
//! snapshot slot and versions, group commit across processes, and the error
//! for disagreeing options.
//!
//! `TXMAP_SOAK_ROUNDS=n` multiplies the rounds of the kill tests;
//! `TXMAP_SEED` changes their random choices; `TXMAP_KEEP=dir` copies the
//! files and shared state of a failed kill round there.
mod common;

use std::fs::File;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::*;
use txmap::debug::CrashPoint;
use txmap::io::sim::SplitMix;
use txmap::{Durability, Error, Isolation, Options, Region, TxnOptions, View};

const PAGE: u64 = 4096;
const ACCOUNTS: u64 = 8;
const TOTAL: i64 = 800_000;
/// Writer slots; slot w's counter is kept on two pages (a partial commit
/// shows as mirrors that disagree).
const SLOTS: u64 = 4;
/// Keys with version counters, incremented by every transfer.
const KEYS: u64 = 4;
const PAGES: u64 = ACCOUNTS + 2 * SLOTS + KEYS;
/// Liveness bound for survivors (not a speed assertion).
const LIVENESS: Duration = Duration::from_secs(60);
/// Commits each survivor makes after the victim died.
const AFTER_DEATH: u64 = 10;

fn account(i: u64) -> u64 {
    i * PAGE + 8 * (i % 5)
}

fn counter(w: u64, m: u64) -> u64 {
    (ACCOUNTS + 2 * w + m) * PAGE + 16
}

fn key(k: u64) -> u64 {
    (ACCOUNTS + 2 * SLOTS + k) * PAGE + 32
}

fn opts(ckpt: u64) -> Options {
    Options {
        checkpoint_bytes: ckpt,
        ..Options::default()
    }
}

fn env(k: &str) -> String {
    std::env::var(k).unwrap_or_else(|_| panic!("{k} not set"))
}

fn env_u64(k: &str) -> u64 {
    env(k).parse().unwrap()
}

fn soak() -> u64 {
    std::env::var("TXMAP_SOAK_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1)
}

fn sum(v: &View) -> txmap::Result<i64> {
    (0..ACCOUNTS).try_fold(0, |s, i| Ok(s + v.read::<i64>(account(i))?))
}

/// Creates the bank region: every account holds TOTAL / ACCOUNTS.
fn create_bank(p: &Path) -> Region {
    let r = Region::create(p, PAGES * PAGE, Options::default()).unwrap();
    r.view()
        .unwrap()
        .run(|v| (0..ACCOUNTS).try_for_each(|i| v.write(account(i), &(TOTAL / ACCOUNTS as i64))))
        .unwrap();
    r
}

/// What recovery (or a live reader) finds: slot counters and key counters.
struct State {
    counters: Vec<u64>,
    keys: Vec<u64>,
}

/// Reads the state in a read-only transaction, checking the invariants.
fn read_state(r: &Region) -> State {
    let mut v = r.view().unwrap();
    v.begin_read().unwrap();
    assert_eq!(
        sum(&v).unwrap(),
        TOTAL,
        "money created or destroyed: a partial commit is visible"
    );
    let counters = (0..SLOTS)
        .map(|w| {
            let c = v.read::<u64>(counter(w, 0)).unwrap();
            assert_eq!(
                v.read::<u64>(counter(w, 1)).unwrap(),
                c,
                "slot {w}: mirrors disagree (partial commit)"
            );
            c
        })
        .collect();
    let keys = (0..KEYS).map(|k| v.read::<u64>(key(k)).unwrap()).collect();
    v.commit().unwrap();
    State { counters, keys }
}

// ---------------------------------------------------------------- children

/// One transfer that also bumps the slot's counter (both mirrors) and a key's
/// counter; checks the total inside the transaction, where a torn snapshot
/// is a bug even if the transaction then aborts. Returns (counter, key).
fn transfer(v: &mut View, w: u64, rng: &mut SplitMix) -> (u64, u64) {
    let (from, to) = (rng.next() % ACCOUNTS, rng.next() % ACCOUNTS);
    let (amount, k) = ((rng.next() % 100) as i64, rng.next() % KEYS);
    v.run(|v| {
        let s = sum(v)?;
        let c0 = v.read::<u64>(counter(w, 0))?;
        let c1 = v.read::<u64>(counter(w, 1))?;
        if s != TOTAL || c0 != c1 {
            eprintln!("torn snapshot inside a transaction: total {s}, mirrors {c0} {c1}");
            std::process::exit(3);
        }
        let c = c0 + 1;
        v.write(counter(w, 0), &c)?;
        v.write(counter(w, 1), &c)?;
        let a = v.read::<i64>(account(from))?;
        v.write(account(from), &(a - amount))?;
        let b = v.read::<i64>(account(to))?;
        v.write(account(to), &(b + amount))?;
        let n = v.read::<u64>(key(k))?;
        v.write(key(k), &(n + 1))?;
        Ok((c, k))
    })
    .unwrap()
}

fn wait_file(p: &Path) {
    let start = Instant::now();
    while !p.exists() {
        assert!(start.elapsed() < LIVENESS, "{} never appeared", p.display());
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Writer child. TXMAP_MODE:
/// - `quota`: TXMAP_COMMITS transfers (after TXMAP_GO appears), then exit;
/// - `survivor`: transfers until TXMAP_DEAD appears (holding the victim's
///   pid); checks the victim's snapshot slot was reaped; AFTER_DEATH more,
///   "DONE", and on until killed;
/// - `victim`: transfers until killed; TXMAP_CRASH=point:nth arms a crash
///   point; TXMAP_PARK_AFTER=n parks inside a transaction after n commits.
fn writer() {
    let path = env("TXMAP_PATH");
    let w = env_u64("TXMAP_SLOT");
    if let Ok(us) = std::env::var("TXMAP_SLOW_SYNC") {
        txmap::debug::slow_syncs(us.parse().unwrap());
    }
    let r = Region::open(path.as_ref(), opts(env_u64("TXMAP_CKPT"))).unwrap();
    let mut v = r.view().unwrap();
    let mut acks = Acks::open(&env("TXMAP_ACK"));
    let mut rng = SplitMix(u64::from(std::process::id()) << 8 | w);
    let mode = env("TXMAP_MODE");
    let pause = std::env::var("TXMAP_PAUSE").is_ok();
    let commit = |v: &mut View, rng: &mut SplitMix, acks: &mut Acks| {
        let (c, k) = transfer(v, w, rng);
        acks.line(&format!("ACK {c} {k}"));
        // Every few commits a read-only check, which must never abort.
        if rng.next().is_multiple_of(4) {
            v.begin_read().unwrap();
            assert_eq!(sum(v).unwrap(), TOTAL);
            v.commit().expect("a read-only transaction aborted");
        }
        // Quiet moments let a checkpoint in another process reset the log.
        if pause && rng.next().is_multiple_of(3) {
            std::thread::sleep(Duration::from_micros(rng.next() % 3000));
        }
    };
    match mode.as_str() {
        "quota" => {
            if let Ok(go) = std::env::var("TXMAP_GO") {
                File::create(env("TXMAP_READY")).unwrap();
                wait_file(go.as_ref());
            }
            for _ in 0..env_u64("TXMAP_COMMITS") {
                commit(&mut v, &mut rng, &mut acks);
            }
        }
        "survivor" => {
            let dead = PathBuf::from(env("TXMAP_DEAD"));
            let start = Instant::now();
            while !dead.exists() {
                assert!(start.elapsed() < LIVENESS, "the victim never died");
                commit(&mut v, &mut rng, &mut acks);
            }
            let pid: u32 = std::fs::read_to_string(&dead).unwrap().parse().unwrap();
            let st = r.stats();
            assert!(
                st.snapshots.iter().all(|s| s.pid != pid),
                "the dead process {pid} still holds a snapshot: {:?}",
                st.snapshots
            );
            for _ in 0..AFTER_DEATH {
                commit(&mut v, &mut rng, &mut acks);
            }
            acks.line("DONE");
            loop {
                commit(&mut v, &mut rng, &mut acks);
            }
        }
        "victim" => {
            if let Ok(c) = std::env::var("TXMAP_CRASH") {
                let (p, nth) = c.split_once(':').unwrap();
                txmap::debug::crash_at(
                    CrashPoint::from_u32(p.parse().unwrap()).unwrap(),
                    nth.parse().unwrap(),
                );
            }
            let park = std::env::var("TXMAP_PARK_AFTER").map(|s| s.parse::<u64>().unwrap());
            let mut n = 0;
            loop {
                if park.as_ref().is_ok_and(|&p| n == p) {
                    // Half a transfer and a counter bump, never committed.
                    v.begin().unwrap();
                    let c = v.read::<u64>(counter(w, 0)).unwrap();
                    v.write(counter(w, 0), &(c + 1)).unwrap();
                    let a = v.read::<i64>(account(0)).unwrap();
                    v.write(account(0), &(a - 1)).unwrap();
                    acks.line("PARKED");
                    loop {
                        std::thread::park();
                    }
                }
                commit(&mut v, &mut rng, &mut acks);
                n += 1;
            }
        }
        m => panic!("unknown mode {m}"),
    }
}

/// Reader child: holds a read snapshot until killed.
fn long_reader() {
    let r = Region::open(env("TXMAP_PATH").as_ref(), Options::default()).unwrap();
    let mut v = r.view().unwrap();
    v.begin_read().unwrap();
    assert_eq!(sum(&v).unwrap(), TOTAL);
    File::create(env("TXMAP_READY")).unwrap();
    loop {
        std::thread::park();
    }
}

/// Write skew child (A or B): both read x and y (on two pages), each
/// withdraws 60 from its own if x + y covers it; A commits first.
fn skew() {
    let r = Region::open(env("TXMAP_PATH").as_ref(), Options::default()).unwrap();
    let mut v = r.view().unwrap();
    let me = env("TXMAP_ME");
    let dir = PathBuf::from(env("TXMAP_DIR"));
    let isolation = if env("TXMAP_ISOLATION") == "snapshot" {
        Isolation::Snapshot
    } else {
        Isolation::Serializable
    };
    v.begin_with(TxnOptions {
        read_only: false,
        isolation,
    })
    .unwrap();
    let (x, y) = (v.read::<i64>(0).unwrap(), v.read::<i64>(PAGE).unwrap());
    assert_eq!(x + y, 100);
    let mine = if me == "a" { 0 } else { PAGE };
    let old = v.read::<i64>(mine).unwrap();
    v.write(mine, &(old - 60)).unwrap();
    File::create(dir.join(format!("{me}-ready"))).unwrap();
    let other = if me == "a" { "b" } else { "a" };
    wait_file(&dir.join(format!("{other}-ready")));
    if me == "b" {
        wait_file(&dir.join("a-result"));
    }
    let res = match v.commit() {
        Ok(()) => "committed",
        Err(Error::Conflict) => "conflict",
        Err(e) => panic!("{e}"),
    };
    std::fs::write(dir.join(format!("{me}-tmp")), res).unwrap();
    std::fs::rename(
        dir.join(format!("{me}-tmp")),
        dir.join(format!("{me}-result")),
    )
    .unwrap();
}

/// Opens with TXMAP_DURABILITY; `hold` commits x = TXMAP_X and parks,
/// `refused` expects the mismatch error, `alone` expects to be the only
/// user, checks x and commits x + 1.
fn opener() {
    let durability = if env("TXMAP_DURABILITY") == "async" {
        Durability::Async
    } else {
        Durability::Durable
    };
    let o = Options {
        durability,
        ..Options::default()
    };
    let path = env("TXMAP_PATH");
    match env("TXMAP_MODE").as_str() {
        "refused" => match Region::open(path.as_ref(), o) {
            Err(e @ Error::Incompatible { .. }) => {
                let msg = e.to_string();
                let theirs = if durability == Durability::Async {
                    "Durable"
                } else {
                    "Async"
                };
                assert!(
                    msg.contains(&format!("open in {theirs} mode by another process")),
                    "unclear error: {msg}"
                );
            }
            Err(e) => panic!("wrong error: {e}"),
            Ok(_) => panic!("opened with {durability:?} while another process uses the other mode"),
        },
        mode => {
            let r = Region::open(path.as_ref(), o).unwrap();
            let mut v = r.view().unwrap();
            let x = env_u64("TXMAP_X");
            if mode == "alone" {
                assert!(r.stats().opened_alone, "another process still counted");
                v.begin_read().unwrap();
                assert_eq!(
                    v.read::<u64>(0).unwrap(),
                    x,
                    "lost the dead holder's commit"
                );
                v.commit().unwrap();
            }
            v.run(|v| v.write(0, &(x + 1))).unwrap();
            File::create(env("TXMAP_READY")).unwrap();
            loop {
                std::thread::park();
            }
        }
    }
}

/// Grows the region to TXMAP_PAGES pages and commits `7` at the start of
/// its last page.
fn grower() {
    let r = Region::open(env("TXMAP_PATH").as_ref(), Options::default()).unwrap();
    let pages = env_u64("TXMAP_PAGES");
    let mut v = r.view().unwrap();
    v.grow(pages * PAGE).unwrap();
    v.run(|v| v.write((pages - 1) * PAGE, &7u64)).unwrap();
}

/// Runs this process's role if it is a child; true if it was.
fn as_child() -> bool {
    let Some(role) = role() else { return false };
    match role.as_str() {
        "writer" => writer(),
        "reader" => long_reader(),
        "skew" => skew(),
        "opener" => opener(),
        "grower" => grower(),
        r => panic!("unknown role {r}"),
    }
    true
}

// ---------------------------------------------------------------- parent side

/// Acknowledged (counter, key) pairs of an ack file, and whether it says `word`.
fn read_acks(p: &Path) -> (Vec<(u64, u64)>, bool, bool) {
    let s = std::fs::read_to_string(p).unwrap_or_default();
    let mut acks = Vec::new();
    let (mut done, mut parked) = (false, false);
    // Only whole lines: a killed writer may leave none half written, but be safe.
    let whole = s.rfind('\n').map_or("", |i| &s[..i]);
    for l in whole.lines() {
        let mut it = l.split_whitespace();
        match it.next() {
            Some("ACK") => {
                let c = it.next().unwrap().parse().unwrap();
                acks.push((c, it.next().unwrap().parse().unwrap()));
            }
            Some("DONE") => done = true,
            Some("PARKED") => parked = true,
            _ => {}
        }
    }
    (acks, done, parked)
}

fn wait_for(what: &str, procs: &mut [&mut Proc], mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while !f() {
        for p in procs.iter_mut() {
            p.check_running(what);
        }
        assert!(start.elapsed() < LIVENESS, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn writer_env(d: &TestDir, w: u64, ack: &Path, mode: &str) -> Vec<(&'static str, String)> {
    vec![
        ("TXMAP_PATH", d.join("bank.txm").display().to_string()),
        ("TXMAP_SLOT", w.to_string()),
        ("TXMAP_ACK", ack.display().to_string()),
        ("TXMAP_MODE", mode.to_string()),
        ("TXMAP_CKPT", (256u64 << 10).to_string()),
    ]
}

/// N processes make `commits` transfers each, all durable on ext4. Checks
/// the total inside every transaction (children) and after, each slot's
/// counter and each key's counter against the acknowledged commits; if
/// `region` is given it stays open during the run and is returned.
fn bank_processes(test: &str, d: &TestDir, n: u64, commits: u64, hold: bool) -> Option<Region> {
    bank_processes_with(test, d, n, commits, hold, &[])
}

/// [`bank_processes`] with more environment for the writers.
fn bank_processes_with(
    test: &str,
    d: &TestDir,
    n: u64,
    commits: u64,
    hold: bool,
    extra: &[(&'static str, String)],
) -> Option<Region> {
    let p = d.join("bank.txm");
    let r = create_bank(&p);
    let held = if hold {
        Some(r)
    } else {
        drop(r);
        None
    };
    let mut procs: Vec<Proc> = (0..n)
        .map(|w| {
            let mut e = writer_env(d, w, &d.join(&format!("ack-{w}")), "quota");
            e.push(("TXMAP_COMMITS", commits.to_string()));
            e.push((
                "TXMAP_READY",
                d.join(&format!("ready-{w}")).display().to_string(),
            ));
            e.push(("TXMAP_GO", d.join("go").display().to_string()));
            e.extend(extra.iter().cloned());
            Proc::spawn(test, "writer", &e, d.join(&format!("err-{w}")))
        })
        .collect();
    // Start together, so the commits really overlap.
    for w in 0..n {
        let ready = d.join(&format!("ready-{w}"));
        wait_for(
            "writers to open",
            &mut procs.iter_mut().collect::<Vec<_>>(),
            || ready.exists(),
        );
    }
    File::create(d.join("go")).unwrap();
    for (w, p) in procs.iter_mut().enumerate() {
        p.wait_ok(&format!("writer {w}"));
    }
    let mut keys = vec![0u64; KEYS as usize];
    let mut counters = vec![0u64; SLOTS as usize];
    for w in 0..n {
        let (acks, _, _) = read_acks(&d.join(&format!("ack-{w}")));
        assert_eq!(
            acks.len() as u64,
            commits,
            "writer {w} acknowledged too few"
        );
        for (i, &(c, k)) in acks.iter().enumerate() {
            assert_eq!(
                c,
                i as u64 + 1,
                "writer {w}: its counter skipped or repeated"
            );
            keys[k as usize] += 1;
        }
        counters[w as usize] = commits;
    }
    let check = |r: &Region| {
        let st = read_state(r);
        assert_eq!(
            st.counters, counters,
            "slot counters vs acknowledged commits"
        );
        assert_eq!(st.keys, keys, "key counters vs acknowledged increments");
    };
    match held {
        Some(r) => {
            check(&r);
            Some(r)
        }
        None => {
            let r = Region::open(&p, Options::default()).unwrap();
            assert!(r.stats().opened_alone);
            check(&r);
            None
        }
    }
}

#[test]
fn bank_transfers_between_two_processes_durable() {
    if as_child() {
        return;
    }
    let test = "bank_transfers_between_two_processes_durable";
    let d = ext4_dir("proc-bank2");
    bank_processes(test, &d, 2, 150, false);
}

#[test]
fn bank_transfers_between_four_processes_durable() {
    if as_child() {
        return;
    }
    let test = "bank_transfers_between_four_processes_durable";
    let d = ext4_dir("proc-bank4");
    bank_processes(test, &d, 4, 100, false);
}

#[test]
fn group_commit_shares_syncs_across_processes() {
    if as_child() {
        return;
    }
    let test = "group_commit_shares_syncs_across_processes";
    let d = ext4_dir("proc-group");
    let r = bank_processes(test, &d, 4, 150, true).unwrap();
    let st = r.stats();
    let commits = 4 * 150;
    assert!(st.commit_seq > commits, "{st:?}");
    assert!(st.log_syncs > 0, "durable commits without a sync: {st:?}");
    assert!(
        st.log_syncs < commits,
        "{} syncs for {commits} durable commits of 4 processes: no group commit across processes",
        st.log_syncs
    );
}

#[test]
fn group_commit_gathers_across_processes_on_a_slow_device() {
    if as_child() {
        return;
    }
    // Each writer's syncs take 20 ms more: far longer than a woken process
    // needs to commit again, so a leader that gathers covers all 4 (without
    // gathering, 2 cohorts of 2 alternate).
    let test = "group_commit_gathers_across_processes_on_a_slow_device";
    let d = ext4_dir("proc-gather");
    let slow = [("TXMAP_SLOW_SYNC", "20000".to_string())];
    let r = bank_processes_with(test, &d, 4, 20, true, &slow).unwrap();
    let st = r.stats();
    assert!(st.commit_seq > 80, "{st:?}");
    // About 3.7 commits per sync when rounds gather, 2.0 when they do not.
    assert!(
        5 * st.commit_seq >= 14 * st.log_syncs,
        "{} syncs for {} commits of 4 processes on a slow device (under 2.8 per sync): \
         rounds did not gather",
        st.log_syncs,
        st.commit_seq
    );
}

fn write_skew(test: &str, isolation: &str) -> (String, String, i64) {
    let d = ext4_dir(&format!("proc-skew-{isolation}"));
    let p = d.join("skew.txm");
    {
        let r = Region::create(&p, 2 * PAGE, Options::default()).unwrap();
        r.view()
            .unwrap()
            .run(|v| {
                v.write(0, &50i64)?;
                v.write(PAGE, &50i64)
            })
            .unwrap();
    }
    let mut procs: Vec<Proc> = ["a", "b"]
        .iter()
        .map(|me| {
            let e = [
                ("TXMAP_PATH", p.display().to_string()),
                ("TXMAP_ME", me.to_string()),
                ("TXMAP_DIR", d.path().display().to_string()),
                ("TXMAP_ISOLATION", isolation.to_string()),
            ];
            Proc::spawn(test, "skew", &e, d.join(&format!("err-{me}")))
        })
        .collect();
    for p in &mut procs {
        p.wait_ok("write skew child");
    }
    let res = |me: &str| std::fs::read_to_string(d.join(&format!("{me}-result"))).unwrap();
    let r = Region::open(&p, Options::default()).unwrap();
    let mut v = r.view().unwrap();
    v.begin_read().unwrap();
    let s = v.read::<i64>(0).unwrap() + v.read::<i64>(PAGE).unwrap();
    v.commit().unwrap();
    (res("a"), res("b"), s)
}

#[test]
fn write_skew_between_processes_is_prevented_under_serializable() {
    if as_child() {
        return;
    }
    let (a, b, s) = write_skew(
        "write_skew_between_processes_is_prevented_under_serializable",
        "serializable",
    );
    assert_eq!((a.as_str(), b.as_str()), ("committed", "conflict"));
    assert_eq!(s, 40);
}

#[test]
fn write_skew_between_processes_is_allowed_under_snapshot_isolation() {
    if as_child() {
        return;
    }
    let (a, b, s) = write_skew(
        "write_skew_between_processes_is_allowed_under_snapshot_isolation",
        "snapshot",
    );
    assert_eq!((a.as_str(), b.as_str()), ("committed", "committed"));
    assert_eq!(s, -20);
}

/// How the victim of a kill round dies.
#[derive(Clone, Copy, Debug)]
enum Victim {
    /// Kills itself at a crash point.
    At(CrashPoint),
    /// Killed by the test at a random moment under load.
    Random,
    /// Killed by the test while parked inside a read-write transaction.
    InTransaction,
}

/// Rounds: a victim and survivors commit transfers; the victim dies (see
/// `Victim`); the survivors must notice nothing but reap its slot and make
/// AFTER_DEATH more commits each within LIVENESS; then they are killed at a
/// random moment too, and the region is recovered alone and checked: total,
/// mirrors, each slot's counter against its acknowledgements. Returns (kill
/// points, rounds in which the armed crash point was reached).
fn kill_rounds(test: &str, victim: Victim, rounds: u64) -> (u64, u64) {
    let d = ext4_dir(test);
    drop(create_bank(&d.join("bank.txm")));
    let survivors: u64 = if matches!(victim, Victim::Random) {
        3
    } else {
        2
    };
    let mut acked = vec![0u64; SLOTS as usize];
    let mut rng = SplitMix(seed(test));
    let (mut kills, mut hits) = (0, 0);
    for round in 0..rounds * soak() {
        let ack = |w: u64| d.join(&format!("ack-{round}-{w}"));
        let dead = d.join(&format!("dead-{round}"));
        // Slot 0 is the victim.
        let mut e = writer_env(&d, 0, &ack(0), "victim");
        match victim {
            Victim::At(p) => {
                let nth = 1 + rng.next() % 4;
                e.push(("TXMAP_CRASH", format!("{}:{nth}", p as u32)));
                if matches!(
                    p,
                    CrashPoint::CheckpointWriting
                        | CrashPoint::LogReset
                        | CrashPoint::EpochPublishing
                ) {
                    e.push(("TXMAP_CKPT", "1".into())); // a checkpoint per commit
                }
            }
            Victim::Random => {
                if rng.next().is_multiple_of(2) {
                    e.push(("TXMAP_CKPT", "1".into()));
                }
            }
            Victim::InTransaction => e.push(("TXMAP_PARK_AFTER", (rng.next() % 10).to_string())),
        }
        let mut v = Proc::spawn(test, "writer", &e, d.join(&format!("err-{round}-0")));
        // Under random kills, a third of the rounds have the survivors
        // checkpoint (and reset the log) every 16 KiB too, so that their own
        // deaths come in the middle of checkpoints as often as the victim's.
        let small_log = matches!(victim, Victim::Random) && rng.next().is_multiple_of(3);
        let mut s: Vec<Proc> = (1..=survivors)
            .map(|w| {
                let mut e = writer_env(&d, w, &ack(w), "survivor");
                e.push(("TXMAP_DEAD", dead.display().to_string()));
                e.push(("TXMAP_PAUSE", "1".into()));
                if small_log {
                    e.push(("TXMAP_CKPT", (16u64 << 10).to_string()));
                }
                Proc::spawn(test, "writer", &e, d.join(&format!("err-{round}-{w}")))
            })
            .collect();
        let mut hit = false;
        match victim {
            Victim::At(_) => {
                let start = Instant::now();
                loop {
                    if let Some(st) = v.try_wait() {
                        assert_eq!(st.signal(), Some(9), "victim: {}", v.stderr());
                        hit = true;
                        break;
                    }
                    for p in &mut s {
                        p.check_running("survivor");
                    }
                    // Not reached (say, the log never became resettable): a plain kill.
                    if start.elapsed() > Duration::from_secs(10) {
                        v.kill();
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
            Victim::Random => {
                let n = 1 + rng.next() % 30;
                let mut all: Vec<&mut Proc> = s.iter_mut().chain([&mut v]).collect();
                wait_for("victim commits", &mut all, || {
                    read_acks(&ack(0)).0.len() as u64 >= n
                });
                std::thread::sleep(Duration::from_micros(rng.next() % 2000));
                v.kill();
            }
            Victim::InTransaction => {
                let mut all: Vec<&mut Proc> = s.iter_mut().chain([&mut v]).collect();
                wait_for("victim to park", &mut all, || read_acks(&ack(0)).2);
                v.kill();
            }
        }
        hits += u64::from(hit);
        let tmp = d.join("dead.tmp");
        std::fs::write(&tmp, v.pid().to_string()).unwrap();
        std::fs::rename(&tmp, &dead).unwrap();
        // Survivors must go on: AFTER_DEATH commits each, within LIVENESS.
        for w in 0..survivors as usize {
            let a = ack(w as u64 + 1);
            wait_for(
                "survivors to commit after the death",
                &mut s.iter_mut().collect::<Vec<_>>(),
                || read_acks(&a).1,
            );
        }
        std::thread::sleep(Duration::from_micros(rng.next() % 3000));
        for p in &mut s {
            p.kill();
        }
        kills += 1 + survivors;
        // Recover alone and check every slot against its acknowledgements.
        take_evidence(&d.join("bank.txm"), &d.join("evidence"));
        let crash = describe_crash_state(&d.join("bank.txm"));
        let r = Region::open(&d.join("bank.txm"), Options::default()).unwrap_or_else(|e| {
            keep_on_failure(&d, test);
            panic!("round {round}: recovery failed: {e}\n{crash}")
        });
        assert!(
            r.stats().opened_alone,
            "round {round}: a dead process still counted"
        );
        let st = read_state(&r);
        drop(r);
        let mut failures = Vec::new();
        for w in 0..=survivors {
            let acks = read_acks(&ack(w)).0;
            let last = acks.last().map_or(acked[w as usize], |a| a.0);
            let got = st.counters[w as usize];
            // A process killed with its commit logged but unacknowledged may
            // or may not have it; past the commit point it must be there.
            let (lo, hi) = match (w, victim, hit) {
                (0, Victim::InTransaction, _) | (0, Victim::At(CrashPoint::CommitLocked), true) => {
                    (last, last)
                }
                (0, Victim::At(_), true) => (last + 1, last + 1),
                _ => (last, last + 1),
            };
            if !(lo..=hi).contains(&got) {
                failures.push(format!(
                    "slot {w} holds {got}, acknowledged {last}, expected {lo}..={hi}"
                ));
            }
            acked[w as usize] = got;
        }
        if !failures.is_empty() {
            keep_on_failure(&d, test);
            panic!(
                "round {round} ({victim:?}, reached: {hit}): {}\nleft by the crash: {crash}",
                failures.join("; ")
            );
        }
    }
    eprintln!("{test}: {kills} kill points, crash point reached in {hits} rounds");
    (kills, hits)
}

fn crash_point_rounds(test: &str, p: CrashPoint) {
    let rounds = 12;
    let (_, hits) = kill_rounds(test, Victim::At(p), rounds);
    assert!(hits > 0, "{p:?} was never reached in {rounds} rounds");
}

#[test]
fn sigkill_holding_the_commit_lock_before_logging() {
    if as_child() {
        return;
    }
    crash_point_rounds(
        "sigkill_holding_the_commit_lock_before_logging",
        CrashPoint::CommitLocked,
    );
}

#[test]
fn sigkill_after_logging_before_publishing() {
    if as_child() {
        return;
    }
    crash_point_rounds(
        "sigkill_after_logging_before_publishing",
        CrashPoint::CommitLogged,
    );
}

#[test]
fn sigkill_halfway_through_publishing() {
    if as_child() {
        return;
    }
    crash_point_rounds(
        "sigkill_halfway_through_publishing",
        CrashPoint::CommitPublishing,
    );
}

#[test]
fn sigkill_as_group_commit_leader() {
    if as_child() {
        return;
    }
    crash_point_rounds("sigkill_as_group_commit_leader", CrashPoint::SyncLeader);
}

#[test]
fn sigkill_while_checkpointing() {
    if as_child() {
        return;
    }
    crash_point_rounds("sigkill_while_checkpointing", CrashPoint::CheckpointWriting);
}

#[test]
fn sigkill_while_resetting_the_log() {
    if as_child() {
        return;
    }
    crash_point_rounds("sigkill_while_resetting_the_log", CrashPoint::LogReset);
}

#[test]
fn sigkill_halfway_through_publishing_a_log_epoch() {
    if as_child() {
        return;
    }
    crash_point_rounds(
        "sigkill_halfway_through_publishing_a_log_epoch",
        CrashPoint::EpochPublishing,
    );
}

#[test]
fn sigkill_at_random_moments_under_load() {
    if as_child() {
        return;
    }
    kill_rounds("sigkill_at_random_moments_under_load", Victim::Random, 20);
}

#[test]
fn sigkill_inside_a_transaction_leaves_no_trace() {
    if as_child() {
        return;
    }
    kill_rounds(
        "sigkill_inside_a_transaction_leaves_no_trace",
        Victim::InTransaction,
        12,
    );
}

/// A reader holds a snapshot in another process while writers commit: the
/// checkpoint passes it (keeping what it reads in memory) and empties the
/// log. Once the reader is killed, `stats` reaps its
/// slot, and a checkpoint then empties the log and frees every version,
/// round after round.
#[test]
fn sigkill_holding_a_long_read_snapshot_releases_it() {
    if as_child() {
        return;
    }
    const ROUNDS: u64 = 6;
    let test = "sigkill_holding_a_long_read_snapshot_releases_it";
    let d = ext4_dir("proc-reader");
    let p = d.join("bank.txm");
    let r = create_bank(&p);
    for round in 0..ROUNDS * soak() {
        let ready = d.join(&format!("reading-{round}"));
        let e = [
            ("TXMAP_PATH", p.display().to_string()),
            ("TXMAP_READY", ready.display().to_string()),
        ];
        let mut reader = Proc::spawn(test, "reader", &e, d.join(&format!("err-r{round}")));
        wait_for("the reader", &mut [&mut reader], || ready.exists());
        let pid = reader.pid();
        let snap = r
            .stats()
            .snapshots
            .iter()
            .find(|s| s.pid == pid)
            .unwrap_or_else(|| panic!("no snapshot of reader {pid}"))
            .snapshot;
        for w in 0..2 {
            let mut e = writer_env(&d, w, &d.join(&format!("ack-{round}-{w}")), "quota");
            e.push(("TXMAP_COMMITS", "30".into()));
            Proc::spawn(test, "writer", &e, d.join(&format!("err-{round}-{w}"))).wait_ok("writer");
        }
        r.checkpoint().unwrap();
        let st = r.stats();
        assert!(
            st.snapshots.iter().any(|s| s.pid == pid),
            "a live reader's slot was reaped: {st:?}"
        );
        assert!(st.commit_seq >= snap + 60, "{st:?}");
        // Copy-on-checkpoint: the checkpoint passes the live snapshot and
        // empties the log; the reader's pages are kept in memory instead.
        assert_eq!(st.checkpoint_seq, st.commit_seq, "{st:?}");
        assert!(st.checkpoint_seq > snap, "{st:?}");
        assert_eq!(st.log_bytes, 0, "{st:?}");
        assert!(st.version_pages > 0 && st.preserved_pages > 0, "{st:?}");
        reader.kill();
        let st = r.stats();
        assert_eq!(
            st.live_snapshots, 0,
            "the dead reader's slot was not reaped: {st:?}"
        );
        r.checkpoint().unwrap();
        let st = r.stats();
        assert_eq!(st.checkpoint_seq, st.commit_seq, "{st:?}");
        assert_eq!(
            st.log_bytes, 0,
            "log not reset after the reader died: {st:?}"
        );
        assert_eq!(st.version_pages, 0, "versions still pinned: {st:?}");
    }
    assert_eq!(read_state(&r).counters[0], ROUNDS * soak() * 30);
}

/// Two processes must agree on the durability mode; once the holder died, a
/// process with the other mode opens alone, recovers and may use it.
#[test]
fn durability_mismatch_between_processes_is_refused() {
    if as_child() {
        return;
    }
    let test = "durability_mismatch_between_processes_is_refused";
    let d = ext4_dir("proc-mismatch");
    let p = d.join("m.txm");
    drop(Region::create(&p, PAGE, Options::default()).unwrap());
    let run = |name: &str, mode: &str, durability: &str, x: u64| {
        let e = [
            ("TXMAP_PATH", p.display().to_string()),
            ("TXMAP_MODE", mode.to_string()),
            ("TXMAP_DURABILITY", durability.to_string()),
            ("TXMAP_X", x.to_string()),
            ("TXMAP_READY", d.join(name).display().to_string()),
        ];
        Proc::spawn(test, "opener", &e, d.join(&format!("err-{name}")))
    };
    let mut a = run("a", "hold", "durable", 0);
    wait_for("a to open", &mut [&mut a], || d.join("a").exists());
    run("b", "refused", "async", 0).wait_ok("b");
    a.kill();
    // x = 1 was committed by a, which died without closing.
    let mut c = run("c", "alone", "async", 1);
    wait_for("c to open", &mut [&mut c], || d.join("c").exists());
    run("d", "refused", "durable", 0).wait_ok("d");
    c.kill();
    let r = Region::open(&p, Options::default()).unwrap();
    let st = r.stats();
    assert!(st.opened_alone);
    assert!(st.recovered_commits >= 1, "{st:?}");
    let mut v = r.view().unwrap();
    v.begin_read().unwrap();
    assert_eq!(v.read::<u64>(0).unwrap(), 2, "c's commit was lost");
    v.commit().unwrap();
}

/// A region grown by another process: this process's views see the new
/// pages, the ones never written (zeros, read from the region file) as well
/// as the one written there. (Until views mapped the file's new part at
/// their next `begin`, reading an unwritten new page killed the process with
/// SIGSEGV; the collections' heap grows the region this way.)
#[test]
fn a_region_grown_by_another_process_is_readable_here() {
    if as_child() {
        return;
    }
    let d = tmpfs_dir("proc-grow");
    let p = d.join("g.txm");
    let r = Region::create(&p, PAGE, Options::default()).unwrap();
    let mut v = r.view().unwrap();
    v.run(|v| v.write(0, &1u64)).unwrap();
    let e = [
        ("TXMAP_PATH", p.display().to_string()),
        ("TXMAP_PAGES", "64".to_string()),
    ];
    Proc::spawn(
        "a_region_grown_by_another_process_is_readable_here",
        "grower",
        &e,
        d.join("err"),
    )
    .wait_ok("grower");
    v.begin_read().unwrap();
    assert_eq!(v.len() as u64, 64 * PAGE);
    for page in 1..63 {
        assert_eq!(v.read::<u64>(page * PAGE).unwrap(), 0);
    }
    assert_eq!(v.read::<u64>(63 * PAGE).unwrap(), 7);
    assert_eq!(v.read::<u64>(0).unwrap(), 1);
    v.commit().unwrap();
    v.run(|v| v.write(40 * PAGE, &9u64)).unwrap();
}
