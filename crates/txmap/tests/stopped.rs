//! A stopped process must not stall the others (docs/reliability.md,
//! "Stopped processes"). Process A leads a group commit and stops itself
//! with SIGSTOP while it holds the sync lock (`debug::stop_at`); processes
//! B commit durably meanwhile and must finish while A is still stopped.
//! Then A is continued (or everyone is SIGKILLed) and every acknowledged
//! commit must be there after reopening. Children are this test binary
//! re-executed with a role.
mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::*;
use txmap::debug::CrashPoint;
use txmap::{Options, Region};

const PAGE: u64 = 4096;
/// Committer processes besides the stopped one.
const COMMITTERS: u64 = 2;
/// Durable commits each committer makes while the leader is stopped.
const COMMITS: u64 = 200;
/// Commits the leader makes after it is continued.
const MORE: u64 = 20;

fn env(k: &str) -> String {
    std::env::var(k).unwrap_or_else(|_| panic!("{k} not set"))
}

/// Commits `counter + 1` at page `w`, durably; returns the new value.
fn bump(r: &Region, w: u64) -> u64 {
    let mut v = r.view().unwrap();
    v.run(|v| {
        let c = v.read::<u64>(w * PAGE)?;
        v.write(w * PAGE, &(c + 1))?;
        Ok(c + 1)
    })
    .unwrap()
}

/// Child roles. `leader` (page 0): stops itself inside its first sync as
/// the group-commit leader; once continued, acknowledges that commit, makes
/// MORE, says DONE and exits. `committer` (page TXMAP_SLOT): COMMITS
/// durable commits, acknowledging each, with small checkpoints (they sync
/// the log too), then DONE; with TXMAP_PARK it then parks until killed.
fn as_child() -> bool {
    let Some(role) = role() else { return false };
    let path = env("TXMAP_PATH");
    let mut acks = Acks::open(&env("TXMAP_ACK"));
    match role.as_str() {
        "leader" => {
            let r = Region::open(path.as_ref(), Options::default()).unwrap();
            txmap::debug::stop_at(CrashPoint::SyncLeader, 1);
            for _ in 0..=MORE {
                let c = bump(&r, 0);
                acks.line(&format!("ACK {c}"));
            }
            acks.line("DONE");
        }
        "checkpointer" => {
            let r = Region::open(path.as_ref(), Options::default()).unwrap();
            let c = bump(&r, 0);
            txmap::debug::stop_at(CrashPoint::CheckpointWriting, 1);
            r.checkpoint().unwrap();
            acks.line(&format!("ACK {c}"));
            acks.line("DONE");
        }
        "committer" => {
            let w: u64 = env("TXMAP_SLOT").parse().unwrap();
            let opts = Options {
                checkpoint_bytes: 16 << 10,
                ..Options::default()
            };
            let r = Region::open(path.as_ref(), opts).unwrap();
            for _ in 0..COMMITS {
                let c = bump(&r, w);
                acks.line(&format!("ACK {c}"));
            }
            acks.line("DONE");
            if std::env::var("TXMAP_PARK").is_ok() {
                loop {
                    std::thread::park();
                }
            }
        }
        r => panic!("unknown role {r}"),
    }
    true
}

/// The acknowledged values of an ack file (in order) and whether it says DONE.
fn read_acks(p: &Path) -> (Vec<u64>, bool) {
    let s = std::fs::read_to_string(p).unwrap_or_default();
    let mut acks = Vec::new();
    let mut done = false;
    for l in s.lines() {
        match l.split_once(' ') {
            Some(("ACK", n)) => acks.push(n.parse().unwrap()),
            _ => done |= l == "DONE",
        }
    }
    (acks, done)
}

fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(
            start.elapsed() < PROC_LIVENESS,
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Reads each page's counter after a fresh open (recovery if needed).
fn counters(p: &Path) -> Vec<u64> {
    let r = Region::open(p, Options::default()).unwrap();
    let mut v = r.view().unwrap();
    v.begin_read().unwrap();
    let c = (0..=COMMITTERS)
        .map(|w| v.read::<u64>(w * PAGE).unwrap())
        .collect();
    v.commit().unwrap();
    c
}

/// A child's environment: the region, and the file it acknowledges in.
fn env_of(p: &Path, ack: &Path) -> Vec<(&'static str, String)> {
    vec![
        ("TXMAP_PATH", p.display().to_string()),
        ("TXMAP_ACK", ack.display().to_string()),
    ]
}

/// A fresh region (one page per process) and process A started in `role`
/// (acknowledging in `ack-a`), once it has stopped itself (`what`).
fn start_stopped(test: &str, role: &str, what: &str) -> (TestDir, PathBuf, Proc) {
    let d = ext4_dir(test);
    let p = d.join("r.txm");
    drop(Region::create(&p, (COMMITTERS + 1) * PAGE, Options::default()).unwrap());
    let a = Proc::spawn(test, role, &env_of(&p, &d.join("ack-a")), d.join("err-a"));
    wait_until(what, || a.state() == 'T');
    (d, p, a)
}

/// Runs the scenario; `kill`: SIGKILL everyone while A is still stopped
/// instead of continuing it.
fn stopped_leader(test: &str, kill: bool) {
    let (d, p, mut a) = start_stopped(test, "leader", "the leader to stop inside its sync");
    let a_ack = d.join("ack-a");
    let base = |ack: &Path| env_of(&p, ack);

    let mut bs: Vec<Proc> = (1..=COMMITTERS)
        .map(|w| {
            let mut e = base(&d.join(&format!("ack-{w}")));
            e.push(("TXMAP_SLOT", w.to_string()));
            if kill {
                e.push(("TXMAP_PARK", "1".into()));
            }
            Proc::spawn(test, "committer", &e, d.join(&format!("err-{w}")))
        })
        .collect();
    // Every committer finishes while A stays stopped, holding the sync lock.
    for (w, b) in (1..).zip(bs.iter_mut()) {
        let ack = d.join(&format!("ack-{w}"));
        let what = format!("committer {w} while the sync leader is stopped");
        match kill {
            true => wait_until(&what, || read_acks(&ack).1),
            false => b.wait_ok(&what),
        }
        assert_eq!(read_acks(&ack).0, (1..=COMMITS).collect::<Vec<_>>());
    }
    assert_eq!(a.state(), 'T', "the leader was continued too early");
    assert!(
        read_acks(&a_ack).0.is_empty(),
        "the stopped leader acknowledged {:?}; its stderr: {}",
        read_acks(&a_ack),
        a.stderr()
    );
    // `txmap info` names the stopped leader, and says it is stalled once it
    // has held the lock longer than followers wait.
    wait_until("info to show the stopped sync leader", || {
        let live = txmap::inspect::inspect(&p)
            .unwrap()
            .live
            .expect("live state");
        live.sync_leader
            .is_some_and(|l| l.pid == a.pid() && l.stalled)
    });

    if kill {
        a.kill();
        for b in &mut bs {
            b.kill();
        }
        let c = counters(&p);
        // A's first commit was never acknowledged: either value is right.
        assert!(c[0] <= 1, "{c:?}");
        assert_eq!(
            &c[1..],
            &[COMMITS; COMMITTERS as usize],
            "lost acknowledged commits"
        );
        return;
    }
    a.signal(rustix::process::Signal::CONT);
    a.wait_ok("the leader after SIGCONT");
    let (acked, done) = read_acks(&a_ack);
    assert!(done);
    assert_eq!(acked, (1..=MORE + 1).collect::<Vec<_>>());
    let mut want = vec![MORE + 1];
    want.extend([COMMITS; COMMITTERS as usize]);
    assert_eq!(counters(&p), want, "after a clean reopen");
}

#[test]
fn a_stopped_sync_leader_does_not_stall_other_processes() {
    if as_child() {
        return;
    }
    stopped_leader(
        "a_stopped_sync_leader_does_not_stall_other_processes",
        false,
    );
}

#[test]
fn commits_made_while_the_sync_leader_is_stopped_survive_sigkill() {
    if as_child() {
        return;
    }
    stopped_leader(
        "commits_made_while_the_sync_leader_is_stopped_survive_sigkill",
        true,
    );
}

/// A process stopped inside a checkpoint (holding the checkpoint lock)
/// stalls no committer: commits past `checkpoint_bytes` skip the automatic
/// checkpoint while another one is under way, instead of waiting for it.
/// (Before: every committer waited in its automatic checkpoint for as long
/// as the checkpointer stayed stopped.)
#[test]
fn a_stopped_checkpointer_does_not_stall_commits() {
    if as_child() {
        return;
    }
    let test = "a_stopped_checkpointer_does_not_stall_commits";
    let (d, p, mut a) = start_stopped(
        test,
        "checkpointer",
        "the checkpointer to stop inside its checkpoint",
    );
    let a_ack = d.join("ack-a");
    let base = |ack: &Path| env_of(&p, ack);
    for w in 1..=COMMITTERS {
        let mut e = base(&d.join(&format!("ack-{w}")));
        e.push(("TXMAP_SLOT", w.to_string()));
        let mut b = Proc::spawn(test, "committer", &e, d.join(&format!("err-{w}")));
        b.wait_ok(&format!("committer {w} while the checkpointer is stopped"));
        assert_eq!(
            read_acks(&d.join(&format!("ack-{w}"))).0,
            (1..=COMMITS).collect::<Vec<_>>()
        );
    }
    assert_eq!(a.state(), 'T', "the checkpointer was continued too early");
    a.signal(rustix::process::Signal::CONT);
    a.wait_ok("the checkpointer after SIGCONT");
    assert_eq!(read_acks(&a_ack), (vec![1], true));
    let mut want = vec![1];
    want.extend([COMMITS; COMMITTERS as usize]);
    assert_eq!(counters(&p), want, "after a clean reopen");
}
