//! The binary tree example under concurrency and crashes: worker threads
//! and processes run enclosing ("parent") transactions of one to three
//! nested inserts and removes on keys of their own and on keys they share,
//! and each parent adds its deltas to its worker's table in the region in
//! its own work. Some parents abort or fail on purpose. The tree must then
//! hold exactly the sum of the tables: the nested actions of committed
//! parents, none of the others (compensated at abort, or at the next first
//! open when the parent's process was killed).
#[path = "../../../crates/txmap/tests/common/mod.rs"]
mod common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use common::*;
use txmap::debug::CrashPoint;
use txmap::{Error, Options, Region, View};
use txmap_example_bintree::{Tree, register};

const PAGE: u64 = 4096;
const PAGES: u64 = 64;
/// The tree takes pages 0..32.
const TREE_BYTES: u64 = 32 * PAGE;
/// Worker `w`'s table: page `TABLES / PAGE + w`: the number of parents it
/// committed, then one i64 per key (the sum of its committed deltas).
const TABLES: u64 = 32 * PAGE;
const WORKERS: u64 = 4;
/// Keys `w * OWN .. (w + 1) * OWN` are worker `w`'s alone.
const OWN: u64 = 32;
/// Keys every worker uses.
const SHARED: std::ops::Range<u64> = 200..224;
const KEYS: u64 = 256;
/// Nested actions per parent, at most.
const MAX_OPS: u64 = 3;

fn tree() -> Tree {
    Tree::at(0)
}

fn table(w: u64) -> u64 {
    TABLES + w * PAGE
}

fn own(w: u64, key: u64) -> bool {
    key / OWN == w
}

fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum End {
    Commit,
    /// `View::abort`: the parent's commit reports `Error::Aborted`.
    Abort,
    /// The parent's closure returns an error: `run` rolls it back.
    Fail,
}

/// Parent `p` of worker `w`: its nested actions (key, +1 insert / -1
/// remove) and how it ends. Fixed by the seed, `w` and `p`.
fn plan(seed: u64, w: u64, p: u64) -> (Vec<(u64, i64)>, End) {
    let mut x = mix(seed ^ mix(w << 32 | p));
    let mut next = || {
        x = mix(x);
        x
    };
    let ops = (0..1 + next() % MAX_OPS)
        .map(|_| {
            let key = if next() % 3 == 0 {
                SHARED.start + next() % (SHARED.end - SHARED.start)
            } else {
                w * OWN + next() % OWN
            };
            (key, if next() % 5 < 3 { 1 } else { -1 })
        })
        .collect();
    let end = match next() % 6 {
        0 => End::Abort,
        1 => End::Fail,
        _ => End::Commit,
    };
    (ops, end)
}

fn init(r: &Region) {
    let mut v = r.view().unwrap();
    v.run(|v| Tree::create(v, 0, TREE_BYTES).map(|_| ()))
        .unwrap();
}

fn create(path: &std::path::Path) {
    let r = Region::create(path, PAGES * PAGE, Options::default()).unwrap();
    init(&r);
    r.close().unwrap();
}

/// Worker `w`'s table as the view's transaction sees it: (parents
/// committed, the sum of deltas per key).
fn read_table(v: &View, w: u64) -> (u64, Vec<i64>) {
    let t = table(w);
    let n = v.read(t).unwrap();
    (
        n,
        (0..KEYS).map(|k| v.read(t + 8 + 8 * k).unwrap()).collect(),
    )
}

/// Runs parent `p` of worker `w`; returns its deltas if it committed.
/// `model` holds the counts of `w`'s own keys, which nobody else changes:
/// each nested action checks, in its own transaction, that the tree holds
/// them (plus this parent's earlier actions). `hold` is called after the
/// nested actions, before the parent's commit.
fn parent(
    v: &mut View,
    w: u64,
    p: u64,
    seed: u64,
    model: &BTreeMap<u64, i64>,
    mut hold: impl FnMut(),
) -> Option<BTreeMap<u64, i64>> {
    let (ops, end) = plan(seed, w, p);
    let r = v.run(|v| {
        let mut mine: BTreeMap<u64, i64> = BTreeMap::new();
        for &(key, delta) in &ops {
            let expect = own(w, key).then(|| {
                model.get(&key).copied().unwrap_or(0) + mine.get(&key).copied().unwrap_or(0)
            });
            let check = |v: &mut View| {
                if let Some(e) = expect {
                    let got = tree().count(v, key)?;
                    assert_eq!(got, e, "worker {w} parent {p}: count of its key {key}");
                }
                Ok(())
            };
            if delta > 0 {
                tree().insert_with(v, key, check)?;
            } else {
                tree().remove_with(v, key, check)?;
            }
            *mine.entry(key).or_default() += delta;
        }
        // The parent's own work: its worker's table (a page only it writes).
        let t = table(w);
        let n: u64 = v.read(t)?;
        v.write(t, &(n + 1))?;
        for (&key, &d) in &mine {
            let c: i64 = v.read(t + 8 + 8 * key)?;
            v.write(t + 8 + 8 * key, &(c + d))?;
        }
        hold();
        match end {
            End::Commit => {}
            End::Abort => v.abort()?,
            End::Fail => return Err(Error::Invalid("this parent fails on purpose".into())),
        }
        Ok(mine)
    });
    match (r, end) {
        (Ok(mine), End::Commit) => Some(mine),
        (Err(Error::Aborted), End::Abort) => None,
        (Err(Error::Invalid(m)), End::Fail) if m.contains("on purpose") => None,
        (r, end) => panic!("worker {w} parent {p} ({end:?}): {r:?}"),
    }
}

/// Checks the tree's invariants and that it holds exactly the sum of the
/// workers' tables (the committed parents' nested actions); returns it.
fn check_exact(r: &Region) -> BTreeMap<u64, i64> {
    let mut v = r.view().unwrap();
    v.begin_read().unwrap();
    let got = tree().check(&v).unwrap();
    let mut want: BTreeMap<u64, i64> = BTreeMap::new();
    for w in 0..WORKERS {
        for (k, d) in read_table(&v, w).1.into_iter().enumerate() {
            *want.entry(k as u64).or_default() += d;
        }
    }
    v.commit().unwrap();
    want.retain(|_, c| *c != 0);
    assert_eq!(
        got, want,
        "the tree holds exactly the committed parents' actions"
    );
    got
}

#[test]
fn threads_on_disjoint_and_shared_keys_keep_only_committed_parents_actions() {
    register().unwrap();
    let d = ext4_dir("bintree-threads");
    let path = d.join("r.txm");
    let r = Region::create(&path, PAGES * PAGE, Options::default()).unwrap();
    init(&r);
    let seed = seed("bintree threads");
    let stop = AtomicBool::new(false);
    let checks = AtomicU64::new(0);
    let models: Vec<BTreeMap<u64, i64>> = std::thread::scope(|s| {
        // Checks, in read-only transactions while the workers commit, the
        // invariants and that the tree strays from the tables by at most
        // the nested actions of the parents in flight.
        let checker = s.spawn(|| {
            let mut v = r.view().unwrap();
            while !stop.load(Ordering::Relaxed) {
                v.begin_read().unwrap();
                let got = tree().check(&v).unwrap();
                let tables: Vec<_> = (0..WORKERS).map(|w| read_table(&v, w).1).collect();
                v.commit().unwrap();
                let mut stray = 0;
                for k in 0..KEYS {
                    let sum: i64 = tables.iter().map(|t| t[k as usize]).sum();
                    stray += (got.get(&k).copied().unwrap_or(0) - sum).unsigned_abs();
                }
                assert!(
                    stray <= MAX_OPS * WORKERS,
                    "{stray} actions in flight: {got:?}"
                );
                checks.fetch_add(1, Ordering::Relaxed);
            }
        });
        let workers: Vec<_> = (0..WORKERS)
            .map(|w| {
                let r = &r;
                s.spawn(move || {
                    let mut v = r.view().unwrap();
                    let mut model = BTreeMap::new();
                    for p in 0..80 {
                        if let Some(mine) = parent(&mut v, w, p, seed, &model, || {}) {
                            for (k, d) in mine {
                                *model.entry(k).or_default() += d;
                            }
                        }
                    }
                    model
                })
            })
            .collect();
        let models = workers.into_iter().map(|h| h.join().unwrap()).collect();
        stop.store(true, Ordering::Relaxed);
        checker.join().unwrap();
        models
    });
    assert!(checks.load(Ordering::Relaxed) > 0);
    let n = checks.load(Ordering::Relaxed);
    eprintln!("{n} checks");
    // The test's own model: what each worker saw its committed parents do.
    let mut want: BTreeMap<u64, i64> = BTreeMap::new();
    for m in &models {
        for (&k, &d) in m {
            *want.entry(k).or_default() += d;
        }
    }
    want.retain(|_, c| *c != 0);
    assert!(
        want.keys().any(|k| SHARED.contains(k)),
        "shared keys were used"
    );
    assert_eq!(check_exact(&r), want);
    r.close().unwrap();
    let r = Region::open(&path, Options::default()).unwrap();
    assert_eq!(check_exact(&r), want, "after reopen");
}

/// A worker process: `BT_WORKER` runs parents `0..BT_PARENTS` of its
/// plan, acknowledging each commit (`c N`: N parents committed so far);
/// `BT_HOLD=P` stops for good after parent P's nested actions, before its
/// commit (`hold`); `BT_CRASH=point,nth` arms a crash point.
fn child_worker() {
    register().unwrap();
    let env = |k: &str| std::env::var(k).unwrap();
    let w: u64 = env("BT_WORKER").parse().unwrap();
    let parents: u64 = env("BT_PARENTS").parse().unwrap();
    let seed: u64 = env("BT_SEED").parse().unwrap();
    let hold: Option<u64> = std::env::var("BT_HOLD").ok().map(|s| s.parse().unwrap());
    if let Ok(c) = std::env::var("BT_CRASH") {
        let (point, nth) = c.split_once(',').unwrap();
        let point = CrashPoint::ALL[point.parse::<usize>().unwrap() - 1];
        txmap::debug::crash_at(point, nth.parse().unwrap());
    }
    let mut acks = Acks::open(&env("BT_ACKS"));
    let r = Region::open(std::path::Path::new(&env("BT_REGION")), Options::default()).unwrap();
    let mut v = r.view().unwrap();
    v.begin_read().unwrap();
    let (mut done, t) = read_table(&v, w);
    v.commit().unwrap();
    let mut model: BTreeMap<u64, i64> = (0..KEYS)
        .filter(|&k| own(w, k))
        .map(|k| (k, t[k as usize]))
        .collect();
    for p in 0..parents {
        let held = |acks: &mut Acks| {
            if hold == Some(p) {
                acks.line("hold");
                loop {
                    std::thread::sleep(std::time::Duration::from_secs(1));
                }
            }
        };
        if let Some(mine) = parent(&mut v, w, p, seed, &model, || held(&mut acks)) {
            for (k, d) in mine {
                *model.entry(k).or_default() += d;
            }
            done += 1;
            acks.line(&format!("c {done}"));
        }
    }
}

fn acked(acks: &std::path::Path) -> u64 {
    std::fs::read_to_string(acks)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.strip_prefix("c ")?.parse().ok())
        .max()
        .unwrap_or(0)
}

struct Worker<'a> {
    d: &'a TestDir,
    test: &'a str,
    w: u64,
    parents: u64,
    seed: u64,
    name: String,
}

impl Worker<'_> {
    fn spawn(&self, extra: &[(&str, String)]) -> Proc {
        let mut envs = vec![
            ("BT_REGION", self.d.join("r.txm").display().to_string()),
            ("BT_ACKS", self.acks().display().to_string()),
            ("BT_WORKER", self.w.to_string()),
            ("BT_PARENTS", self.parents.to_string()),
            ("BT_SEED", self.seed.to_string()),
        ];
        envs.extend(extra.iter().cloned());
        let err = self.d.join(&format!("err-{}", self.name));
        Proc::spawn(self.test, "worker", &envs, err)
    }
    fn acks(&self) -> std::path::PathBuf {
        self.d.join(&format!("acks-{}", self.name))
    }
}

/// Parents committed by each worker, from the tables.
fn committed(r: &Region) -> Vec<u64> {
    let mut v = r.view().unwrap();
    v.begin_read().unwrap();
    let n = (0..WORKERS).map(|w| read_table(&v, w).0).collect();
    v.commit().unwrap();
    n
}

#[test]
fn processes_killed_at_random_points_leave_only_committed_parents_actions() {
    if role().as_deref() == Some("worker") {
        return child_worker();
    }
    register().unwrap();
    let test = "processes_killed_at_random_points_leave_only_committed_parents_actions";
    let d = ext4_dir("bintree-procs");
    let path = d.join("r.txm");
    create(&path);
    let mut rng = seed(test);
    // Crash points inside a commit (the nested actions' and the parents').
    let points = [
        CrashPoint::CommitLocked,
        CrashPoint::CommitLogged,
        CrashPoint::CommitPublishing,
    ];
    for round in 0..6u64 {
        rng = mix(rng);
        let victim = round % WORKERS;
        let worker = |w: u64, parents: u64| Worker {
            d: &d,
            test,
            w,
            parents,
            seed: rng ^ w,
            name: format!("{round}-{w}"),
        };
        // Peers run a fixed number of parents beside the victim and finish.
        let mut peers: Vec<_> = (0..WORKERS)
            .filter(|&w| w != victim)
            .take(2)
            .map(|w| worker(w, 30).spawn(&[]))
            .collect();
        let v = worker(victim, 1_000_000);
        let mut c = if round % 2 == 0 {
            // Killed by the test after a random number of its commits.
            let mut c = v.spawn(&[]);
            wait_for_acks(&mut c, &v.acks(), 1 + (rng % 25) as usize);
            c.signal(rustix::process::Signal::KILL);
            c
        } else {
            // Killed by itself at the nth time it reaches a point in a commit.
            let point = points[(rng % 3) as usize] as usize;
            let nth = 5 + (rng >> 8) % 100;
            v.spawn(&[("BT_CRASH", format!("{point},{nth}"))])
        };
        let start = std::time::Instant::now();
        let status = loop {
            if let Some(s) = c.try_wait() {
                break s;
            }
            assert!(start.elapsed() < PROC_LIVENESS, "the victim blocked");
            std::thread::sleep(std::time::Duration::from_millis(2));
        };
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(status.signal(), Some(9), "killed: {}", c.stderr());
        for p in &mut peers {
            p.wait_ok("a peer");
        }
        // The first opener compensates the victim's parent in flight.
        let r = Region::open(&path, Options::default()).unwrap();
        let keys = check_exact(&r);
        let n = committed(&r);
        eprintln!("round {round}: committed {n:?}, {} keys", keys.len());
        assert!(
            n[victim as usize] >= acked(&v.acks()),
            "an acknowledged commit was lost"
        );
        r.close().unwrap();
    }
}

#[test]
fn sigkill_between_nested_actions_and_the_parents_commit_compensates_them_at_reopen() {
    if role().as_deref() == Some("worker") {
        return child_worker();
    }
    register().unwrap();
    let test = "sigkill_between_nested_actions_and_the_parents_commit_compensates_them_at_reopen";
    let d = ext4_dir("bintree-hold");
    let path = d.join("r.txm");
    create(&path);
    let seed = seed(test);
    // Worker 0's first parent that commits and acts on its own keys
    // only, after a few others: the one to hold.
    let hold = (5..)
        .find(|&p| {
            let (ops, end) = plan(seed, 0, p);
            end == End::Commit && ops.iter().all(|&(k, _)| own(0, k))
        })
        .unwrap();
    let victim = Worker {
        d: &d,
        test,
        w: 0,
        parents: hold + 1,
        seed,
        name: "victim".into(),
    };
    let mut c = victim.spawn(&[("BT_HOLD", hold.to_string())]);
    loop {
        c.check_running("the victim");
        if std::fs::read_to_string(victim.acks())
            .unwrap_or_default()
            .contains("hold")
        {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    // The region stays open here (so nobody compensates yet): the held
    // parent's nested actions are committed and visible.
    let r = Region::open(&path, Options::default()).unwrap();
    let mut v = r.view().unwrap();
    v.begin_read().unwrap();
    let (_, t) = read_table(&v, 0);
    let mut delta: BTreeMap<u64, i64> = BTreeMap::new();
    for (k, d) in plan(seed, 0, hold).0 {
        *delta.entry(k).or_default() += d;
    }
    for (&k, &d) in &delta {
        assert_eq!(
            tree().count(&v, k).unwrap(),
            t[k as usize] + d,
            "key {k} before the kill"
        );
    }
    v.commit().unwrap();
    c.signal(rustix::process::Signal::KILL);
    c.kill();
    // Peers change shared keys and worker 0's keys (recorded in worker
    // 3's table) while the dead parent's actions are still pending: their
    // compensation, run later, must still be exact.
    let mut model: BTreeMap<u64, i64> = BTreeMap::new();
    for p in 0..20 {
        for (k, d) in parent(&mut v, 1, p, seed, &model, || {}).unwrap_or_default() {
            *model.entry(k).or_default() += d;
        }
    }
    v.run(|v| {
        for &k in delta.keys() {
            tree().insert(v, k)?;
            let o = table(3) + 8 + 8 * k;
            let c: i64 = v.read(o)?;
            v.write(o, &(c + 1))?;
        }
        Ok(())
    })
    .unwrap();
    drop(v);
    r.close().unwrap();
    // The first opener (nobody has it open now) compensates.
    let r = Region::open(&path, Options::default()).unwrap();
    let got = check_exact(&r);
    for &k in delta.keys() {
        let now = got.get(&k).copied().unwrap_or(0);
        assert_eq!(
            now,
            t[k as usize] + 1,
            "key {k}: the held parent's actions undone"
        );
    }
}
