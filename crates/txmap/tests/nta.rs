//! Nested top actions: each commits on its own inside an enclosing
//! (parent) transaction and leaves a logical undo that runs if the parent
//! aborts, fails to commit, or its process dies first. Checked against a
//! model: after the runs and after reopening, the cells hold exactly the
//! nested actions of parents that committed.
mod common;

use common::*;
use txmap::ops::{self, OpMemory, Operation};
use txmap::{Error, Options, Region, View};

const PAGE: u64 = 4096;
const PAGES: u64 = 8;
/// Cells the nested actions add to: one per page of pages 1..=4, 64 each.
const CELLS: u64 = 256;
/// Parent `p` sets the u64 at `FLAGS + 8 p` in its own (not nested) work.
const FLAGS: u64 = 6 * PAGE;
const MAX_PARENTS: u64 = 1024;
/// Adds the operand to the u64 at the offset (wrapping); its own undo
/// with the operand negated.
const OP_ADD: u32 = 140;

fn add(mem: &mut dyn OpMemory, a: &[u8]) -> txmap::Result<()> {
    let off = u64::from_le_bytes(a[..8].try_into().unwrap());
    let x = u64::from_le_bytes(a[8..16].try_into().unwrap());
    let old = mem.read_u64(off)?;
    mem.write_u64(off, old.wrapping_add(x))
}

fn register() {
    ops::register(
        OP_ADD,
        Operation {
            name: "test add",
            apply: add,
        },
    )
    .unwrap();
}

fn args(off: u64, x: u64) -> Vec<u8> {
    [off.to_le_bytes(), x.to_le_bytes()].concat()
}

fn cell_off(c: u64) -> u64 {
    PAGE + (c % 4) * PAGE + (c / 4) * 8
}

/// Parent `p`'s nested actions: (cell, amount). Fixed by `p`, so the
/// checker knows them without being told.
fn actions(p: u64) -> Vec<(u64, u64)> {
    (0..1 + p % 3)
        .map(|i| ((p * 7 + i * 13) % CELLS, (p * 31 + i * 3) % 1000 + 1))
        .collect()
}

/// One nested top action: adds `x` to cell `c` (by the registered
/// operation if `by_op`, else by a load and a store); its undo subtracts it.
fn nested_add(v: &mut View, c: u64, x: u64, by_op: bool) -> txmap::Result<()> {
    let off = cell_off(c);
    v.nested_top(OP_ADD, &args(off, x.wrapping_neg()), |v| {
        if by_op {
            v.apply(OP_ADD, &args(off, x))
        } else {
            let old: u64 = v.read(off)?;
            v.write(off, &old.wrapping_add(x))
        }
    })
}

/// What the region must hold when exactly the parents in `committed` did.
fn expected(committed: impl IntoIterator<Item = u64>) -> Vec<u64> {
    let mut cells = vec![0u64; CELLS as usize];
    for p in committed {
        for (c, x) in actions(p) {
            cells[c as usize] = cells[c as usize].wrapping_add(x);
        }
    }
    cells
}

/// (cells, parents whose flag is set).
fn state(r: &Region) -> (Vec<u64>, Vec<u64>) {
    let mut v = r.view().unwrap();
    v.begin_read().unwrap();
    let cells = (0..CELLS).map(|c| v.read(cell_off(c)).unwrap()).collect();
    let flags = (0..MAX_PARENTS)
        .filter(|p| v.read::<u64>(FLAGS + 8 * p).unwrap() == 1)
        .collect();
    v.commit().unwrap();
    (cells, flags)
}

fn check(r: &Region, committed: &[u64]) {
    let mut committed = committed.to_vec();
    committed.sort_unstable();
    let (cells, flags) = state(r);
    assert_eq!(flags, committed, "parents whose own work is visible");
    assert_eq!(
        cells,
        expected(committed.iter().copied()),
        "cells: exactly the nested actions of committed parents"
    );
}

/// How a parent ends in the thread model.
#[derive(Clone, Copy)]
enum End {
    Commit,
    Abort,
    Rollback,
}

/// Runs parent `p` on `v`; true if it committed.
fn parent(v: &mut View, p: u64, end: End) -> bool {
    match end {
        End::Rollback => {
            v.begin().unwrap();
            v.write(FLAGS + 8 * p, &1u64).unwrap();
            for (c, x) in actions(p) {
                nested_add(v, c, x, p.is_multiple_of(2)).unwrap();
            }
            v.rollback();
            false
        }
        _ => {
            let r = v.run(|v| {
                v.write(FLAGS + 8 * p, &1u64)?;
                for (c, x) in actions(p) {
                    nested_add(v, c, x, p.is_multiple_of(2))?;
                    if p.is_multiple_of(5) {
                        // Paused between actions: they go with it.
                        let paused = v.pause()?;
                        v.run(|v| v.read::<u64>(FLAGS).map(|_| ()))?;
                        v.resume(paused)?;
                    }
                }
                if matches!(end, End::Abort) {
                    v.abort()?;
                }
                Ok(())
            });
            match r {
                Ok(()) => true,
                Err(Error::Aborted) => false,
                Err(e) => panic!("parent {p}: {e}"),
            }
        }
    }
}

#[test]
fn threads_parents_commit_abort_conflict_and_pause_only_committed_effects_stay() {
    register();
    let d = ext4_dir("nta-threads");
    let path = d.join("r.txm");
    let r = Region::create(&path, PAGES * PAGE, Options::default()).unwrap();
    let mut seed = seed("nta threads");
    let mut plans = Vec::new();
    for t in 0..4u64 {
        let mut plan = Vec::new();
        for k in 0..40u64 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let end = match seed % 5 {
                0 => End::Abort,
                1 => End::Rollback,
                _ => End::Commit,
            };
            plan.push((t * 40 + k, end));
        }
        plans.push(plan);
    }
    // Parents of all threads write flags on one page and nested actions
    // meet on the cells' pages: parents conflict (their commit fails and
    // their actions are compensated before the retry) and nested actions
    // retry.
    let committed: Vec<u64> = std::thread::scope(|s| {
        let hs: Vec<_> = plans
            .iter()
            .map(|plan| {
                let r = &r;
                s.spawn(move || {
                    let mut v = r.view().unwrap();
                    plan.iter()
                        .filter(|&&(p, end)| parent(&mut v, p, end))
                        .map(|&(p, _)| p)
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        hs.into_iter().flat_map(|h| h.join().unwrap()).collect()
    });
    assert!(!committed.is_empty() && committed.len() < 160);
    check(&r, &committed);
    r.close().unwrap();
    // Recovery finds nothing pending: every parent finished.
    let r = Region::open(&path, Options::default()).unwrap();
    check(&r, &committed);
}

/// A fresh region in `dir` whose parent transaction (its own store, one
/// nested action adding 5 to cell 0) is paused; the action is visible to
/// everyone meanwhile.
fn paused_parent(dir: &str) -> (TestDir, Region, txmap::Paused) {
    register();
    let d = ext4_dir(dir);
    let r = Region::create(&d.join("r.txm"), PAGES * PAGE, Options::default()).unwrap();
    let mut v = r.view().unwrap();
    v.begin().unwrap();
    v.write(FLAGS, &1u64).unwrap();
    nested_add(&mut v, 0, 5, true).unwrap();
    let paused = v.pause().unwrap();
    assert_eq!(state(&r).0[0], 5);
    (d, r, paused)
}

#[test]
fn a_paused_parent_keeps_its_nested_actions_until_it_ends() {
    let (_d, r, paused) = paused_parent("nta-pause");
    let mut w = r.view().unwrap();
    w.resume(paused).unwrap();
    w.abort().unwrap();
    assert!(matches!(w.commit(), Err(Error::Aborted)));
    check(&r, &[]);
}

#[test]
fn a_paused_parent_dropped_without_resuming_is_compensated_by_the_next_checkpoint() {
    let (_d, r, paused) = paused_parent("nta-pause-dropped");
    // Nobody can resume it any more: its slot goes, and with it the token
    // that kept checkpoints from compensating its action.
    drop(paused);
    assert_eq!(state(&r).0[0], 5, "not before a checkpoint");
    r.checkpoint().unwrap();
    check(&r, &[]);
}

/// Runs parents `from..to` as the child process: acknowledges each nested
/// action (`n P I`), commit (`c P`) and abort (`a P`); with `NTA_HOLD=P`
/// it stops for good after parent P's last nested action (`hold`).
fn child_parents() {
    register();
    let path = std::env::var("NTA_REGION").unwrap();
    let acks = std::env::var("NTA_ACKS").unwrap();
    let from: u64 = std::env::var("NTA_FROM").unwrap().parse().unwrap();
    let to: u64 = std::env::var("NTA_TO").unwrap().parse().unwrap();
    let hold: Option<u64> = std::env::var("NTA_HOLD").ok().map(|s| s.parse().unwrap());
    // Registered operations replayed twice (a recovery killed after
    // replaying them) apply twice: see `a_recovery_killed_...`.
    let by_op = std::env::var("NTA_BY_OP").is_ok();
    let mut acks = Acks::open(&acks);
    let r = Region::open(std::path::Path::new(&path), Options::default()).unwrap();
    let mut v = r.view().unwrap();
    for p in from..to {
        let abort = p % 4 == 3;
        let n = actions(p).len();
        let res = v.run(|v| {
            v.write(FLAGS + 8 * p, &1u64)?;
            for (i, (c, x)) in actions(p).into_iter().enumerate() {
                nested_add(v, c, x, by_op)?;
                acks.line(&format!("n {p} {i}"));
                if hold == Some(p) && i + 1 == n {
                    acks.line("hold");
                    loop {
                        std::thread::sleep(std::time::Duration::from_secs(1));
                    }
                }
            }
            if abort {
                v.abort()?;
            }
            Ok(())
        });
        match res {
            Ok(()) => acks.line(&format!("c {p}")),
            Err(Error::Aborted) => acks.line(&format!("a {p}")),
            Err(e) => panic!("parent {p}: {e}"),
        }
    }
}

fn acked(acks: &std::path::Path, what: &str) -> Vec<u64> {
    std::fs::read_to_string(acks)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.strip_prefix(what)?.trim().parse().ok())
        .collect()
}

/// Parents `from..to` in a child; `hold` as `NTA_HOLD`; nested actions by
/// the registered operation (`NTA_BY_OP`) or by loads and stores.
struct Run {
    from: u64,
    to: u64,
    hold: Option<u64>,
    by_op: bool,
}

fn spawn(d: &TestDir, test: &str, run: Run, n: u32) -> Proc {
    let Run {
        from,
        to,
        hold,
        by_op,
    } = run;
    let mut envs = vec![
        ("NTA_REGION", d.join("r.txm").display().to_string()),
        (
            "NTA_ACKS",
            d.join(&format!("acks{n}")).display().to_string(),
        ),
        ("NTA_FROM", from.to_string()),
        ("NTA_TO", to.to_string()),
    ];
    if let Some(h) = hold {
        envs.push(("NTA_HOLD", h.to_string()));
    }
    if by_op {
        envs.push(("NTA_BY_OP", "1".into()));
    }
    Proc::spawn(test, "parents", &envs, d.join(&format!("err{n}")))
}

fn create(path: &std::path::Path) {
    Region::create(path, PAGES * PAGE, Options::default())
        .unwrap()
        .close()
        .unwrap();
}

/// Runs parents 0..20 in a child (nested actions by the registered
/// operation if `by_op`) and SIGKILLs it after parent `hold`'s
/// nested actions committed, before the parent commits.
fn kill_holding(d: &TestDir, test: &str, hold: u64, by_op: bool) {
    let run = Run {
        from: 0,
        to: 20,
        hold: Some(hold),
        by_op,
    };
    let mut c = spawn(d, test, run, 0);
    let acks = d.join("acks0");
    loop {
        c.check_running("the child");
        if std::fs::read_to_string(&acks)
            .unwrap_or_default()
            .lines()
            .any(|l| l == "hold")
        {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    c.signal(rustix::process::Signal::KILL);
    c.kill();
}

#[test]
fn sigkill_between_nested_actions_and_the_parents_commit_compensates_at_reopen() {
    if role().as_deref() == Some("parents") {
        return child_parents();
    }
    register();
    let test = "sigkill_between_nested_actions_and_the_parents_commit_compensates_at_reopen";
    let d = ext4_dir("nta-kill");
    let path = d.join("r.txm");
    create(&path);
    kill_holding(&d, test, 6, true);
    // `txmap check` names what the next open will compensate.
    let report = txmap::inspect::check(&path).unwrap();
    assert!(
        report
            .warnings
            .iter()
            .any(|w| w.contains("1 nested top action(s)")),
        "{:?}",
        report.warnings
    );
    let r = Region::open(&path, Options::default()).unwrap();
    // Parents 0..6 ended (3 aborted); parent 6 never committed.
    check(&r, &[0, 1, 2, 4, 5]);
}

/// Opens the region as the first opener, SIGKILLed after `NTA_NTH`
/// compensations of recovery.
fn child_recover() {
    register();
    let nth = std::env::var("NTA_NTH").unwrap().parse().unwrap();
    txmap::debug::crash_at(txmap::debug::CrashPoint::Compensating, nth);
    let path = std::env::var("NTA_REGION").unwrap();
    let _ = Region::open(std::path::Path::new(&path), Options::default());
    panic!("not killed while compensating");
}

#[test]
fn a_recovery_killed_between_compensations_neither_repeats_nor_skips_one() {
    match role().as_deref() {
        Some("parents") => return child_parents(),
        Some("recover") => return child_recover(),
        _ => {}
    }
    register();
    let test = "a_recovery_killed_between_compensations_neither_repeats_nor_skips_one";
    // Nested actions by loads and stores, and by the registered operation
    // (replayed through the page journal, so a killed recovery applies
    // none twice). Parent 5 has three nested actions.
    assert_eq!(actions(5).len(), 3);
    for (nth, by_op) in [(1, false), (2, false), (1, true), (2, true)] {
        let d = ext4_dir(&format!("nta-kill-recovery-{nth}-{by_op}"));
        let path = d.join("r.txm");
        create(&path);
        kill_holding(&d, test, 5, by_op);
        let envs = [
            ("NTA_REGION", path.display().to_string()),
            ("NTA_NTH", nth.to_string()),
        ];
        let mut c = Proc::spawn(test, "recover", &envs, d.join("err-recover"));
        c.wait_killed("the recovery");
        let r = Region::open(&path, Options::default()).unwrap();
        check(&r, &[0, 1, 2, 4]);
    }
}

#[test]
fn sigkill_at_random_points_leaves_exactly_the_committed_parents() {
    if role().as_deref() == Some("parents") {
        return child_parents();
    }
    register();
    let test = "sigkill_at_random_points_leaves_exactly_the_committed_parents";
    let d = ext4_dir("nta-kill-random");
    let path = d.join("r.txm");
    create(&path);
    let mut rng = seed("nta kill random");
    let mut committed: Vec<u64> = Vec::new();
    for round in 0..5u32 {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let from = u64::from(round) * 100;
        let acks = d.join(&format!("acks{round}"));
        let run = Run {
            from,
            to: from + 60,
            hold: None,
            by_op: round % 2 == 0,
        };
        let mut c = spawn(&d, test, run, round);
        // A peer process runs parents alongside and finishes.
        let peer_run = Run {
            from: from + 60,
            to: from + 100,
            hold: None,
            by_op: round % 2 == 1,
        };
        let mut peer = spawn(&d, test, peer_run, 100 + round);
        let lines = 1 + (rng % 80) as usize;
        loop {
            let n = std::fs::read_to_string(&acks)
                .unwrap_or_default()
                .lines()
                .count();
            if n >= lines || c.try_wait().is_some() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_micros(200));
        }
        c.signal(rustix::process::Signal::KILL);
        c.kill();
        peer.wait_ok("the peer");
        let r = Region::open(&path, Options::default()).unwrap();
        let (_, flags) = state(&r);
        for p in from + 60..from + 100 {
            assert_eq!(flags.contains(&p), p % 4 != 3, "the peer's parent {p}");
        }
        let acked_commits = acked(&acks, "c ");
        let acked_aborts = acked(&acks, "a ");
        let this: Vec<u64> = flags.iter().copied().filter(|&p| p >= from).collect();
        for p in &acked_commits {
            assert!(this.contains(p), "acknowledged commit of parent {p} lost");
        }
        for p in &this {
            assert!(!acked_aborts.contains(p) && *p < from + 100, "parent {p}");
        }
        committed.extend(this);
        check(&r, &committed);
        r.close().unwrap();
    }
}

#[test]
fn a_dead_parents_compensation_survives_a_peers_checkpoints() {
    if role().as_deref() == Some("parents") {
        return child_parents();
    }
    register();
    let test = "a_dead_parents_compensation_survives_a_peers_checkpoints";
    let d = ext4_dir("nta-peer");
    let path = d.join("r.txm");
    let opts = Options {
        checkpoint_bytes: 64 * 1024,
        ..Options::default()
    };
    let peer = Region::create(&path, PAGES * PAGE, opts.clone()).unwrap();
    kill_holding(&d, test, 2, true);
    // The peer keeps the region open and commits far past a checkpoint's
    // worth of log (its commits write page 7, which nobody checks).
    let mut v = peer.view().unwrap();
    for i in 0..200u64 {
        v.run(|v| v.slice_mut(7 * PAGE, 2048).map(|s| s.fill(i as u8)))
            .unwrap();
    }
    drop(v);
    peer.close().unwrap();
    let r = Region::open(&path, opts).unwrap();
    check(&r, &[0, 1]);
}

#[test]
fn bracketing_form_an_aborted_action_has_no_undo_and_an_ended_one_is_compensated() {
    register();
    let d = ext4_dir("nta-bracket");
    let r = Region::create(&d.join("r.txm"), PAGES * PAGE, Options::default()).unwrap();
    let mut v = r.view().unwrap();
    let (a, b) = (cell_off(0), cell_off(1));
    v.begin().unwrap();
    v.write(FLAGS, &1u64).unwrap();
    // Rolled back: no effect, and nothing to undo later.
    v.nta_begin(OP_ADD, &args(a, 5u64.wrapping_neg())).unwrap();
    v.write(a, &5u64).unwrap();
    v.nta_abort().unwrap();
    assert!(v.in_transaction());
    assert_eq!(state(&r).0[0], 0);
    // Ended: visible at once; the parent still sees its own store.
    v.nta_begin(OP_ADD, &args(b, 7u64.wrapping_neg())).unwrap();
    v.write(b, &7u64).unwrap();
    v.nta_end().unwrap();
    assert_eq!(state(&r).0[1], 7);
    assert_eq!(v.read::<u64>(FLAGS).unwrap(), 1);
    assert!(matches!(v.nta_end(), Err(Error::Invalid(_))));
    v.rollback();
    // Only the ended action was compensated (an undo of the rolled-back
    // one would leave cell 0 at -5).
    check(&r, &[]);
}

#[test]
fn a_peers_checkpoint_compensates_a_dead_parent_while_the_region_stays_open() {
    if role().as_deref() == Some("parents") {
        return child_parents();
    }
    register();
    let test = "a_peers_checkpoint_compensates_a_dead_parent_while_the_region_stays_open";
    let d = ext4_dir("nta-peer-live");
    let path = d.join("r.txm");
    let peer = Region::create(&path, PAGES * PAGE, Options::default()).unwrap();
    kill_holding(&d, test, 2, true);
    // The dead parent's actions committed on their own: visible until undone.
    assert_eq!(state(&peer).0, expected([0, 1, 2]));
    // A parent of this process with a nested action, open across the
    // checkpoint: its slot names it, so it is not compensated.
    let mut v = peer.view().unwrap();
    v.begin().unwrap();
    v.write(FLAGS + 8 * 40, &1u64).unwrap();
    let (c, x) = actions(40)[0];
    nested_add(&mut v, c, x, true).unwrap();
    let pending = |n: usize| {
        let report = txmap::inspect::check(&path).unwrap();
        let what = format!("{n} nested top action(s)");
        assert!(
            report.warnings.iter().any(|w| w.contains(&what)),
            "{what}: {:?}",
            report.warnings
        );
    };
    assert_eq!(actions(2).len(), 3);
    pending(4);
    peer.checkpoint().unwrap();
    // Parent 2's actions are undone while the region stays open; only the
    // live parent's action is pending.
    let mut want = expected([0, 1]);
    want[c as usize] = want[c as usize].wrapping_add(x);
    assert_eq!(state(&peer).0, want, "after the checkpoint");
    pending(1);
    v.commit().unwrap();
    drop(v);
    peer.close().unwrap();
    let r = Region::open(&path, Options::default()).unwrap();
    let (cells, flags) = state(&r);
    assert_eq!(flags, [0, 1, 40]);
    assert_eq!(
        cells, want,
        "compensated once, the live parent's action kept"
    );
}
