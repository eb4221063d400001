//! Registered operations: applied at once in the transaction, logged as
//! operation records, replayed by recovery in commit order mixed with the
//! byte diffs of the same transaction (and with commutative adds and
//! pauses in the same transactions); a log naming an operation this
//! process has not registered does not open and is left as it was.
mod common;

use common::*;
use txmap::ops::{self, OpMemory, Operation};
use txmap::wal::format;
use txmap::{Error, Options, Region, View};

const PAGE: u64 = 4096;
const PAGES: u64 = 6;
const SIZE: usize = (PAGES * PAGE) as usize;
/// Rewrites `len` bytes at `off` from what they hold (so replay must see
/// exactly the bytes the transaction saw).
const OP_MIX: u32 = 200;
/// Copies `len` bytes from `src` to `dst` (across pages).
const OP_COPY: u32 = 201;
/// Registered only by the child of the unregistered-operation test.
const OP_ONLY_CHILD: u32 = 250;

fn u64_at(a: &[u8], i: usize) -> u64 {
    u64::from_le_bytes(a[i..i + 8].try_into().unwrap())
}

fn mix(mem: &mut dyn OpMemory, args: &[u8]) -> txmap::Result<()> {
    let (off, len, k) = (u64_at(args, 0), u64_at(args, 8) as usize, args[16]);
    let mut b = vec![0u8; len];
    mem.read(off, &mut b)?;
    for (i, x) in b.iter_mut().enumerate() {
        *x = x.rotate_left(1) ^ k ^ i as u8;
    }
    mem.write(off, &b)
}

fn copy(mem: &mut dyn OpMemory, args: &[u8]) -> txmap::Result<()> {
    let (src, dst, len) = (u64_at(args, 0), u64_at(args, 8), u64_at(args, 16) as usize);
    let mut b = vec![0u8; len];
    mem.read(src, &mut b)?;
    mem.write(dst, &b)
}

fn set_marker(mem: &mut dyn OpMemory, args: &[u8]) -> txmap::Result<()> {
    mem.write(0, args)
}

fn register() {
    ops::register(
        OP_MIX,
        Operation {
            name: "mix",
            apply: mix,
        },
    )
    .unwrap();
    ops::register(
        OP_COPY,
        Operation {
            name: "copy",
            apply: copy,
        },
    )
    .unwrap();
}

/// The model's memory: a plain byte vector.
struct Bytes(Vec<u8>);

impl OpMemory for Bytes {
    fn size(&self) -> u64 {
        self.0.len() as u64
    }
    fn read(&mut self, off: u64, buf: &mut [u8]) -> txmap::Result<()> {
        buf.copy_from_slice(&self.0[off as usize..off as usize + buf.len()]);
        Ok(())
    }
    fn write(&mut self, off: u64, bytes: &[u8]) -> txmap::Result<()> {
        self.0[off as usize..off as usize + bytes.len()].copy_from_slice(bytes);
        Ok(())
    }
}

enum Step {
    Store(u64, Vec<u8>),
    Apply(u32, Vec<u8>),
    /// A commutative add to the aligned u64 at the offset.
    Add(u64, u64),
    /// Pause, run a read-only transaction on the same view, resume.
    Pause,
}

/// Transaction `t` of the seeded workload: stores and operations mixed,
/// often on the same bytes, one transaction in seven aborted.
fn txn(seed: u64, t: u64) -> (Vec<Step>, bool) {
    let mut x = seed ^ t.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    let mut next = || {
        x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = x;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    };
    // Hot bytes near page boundaries and at the start, so steps overlap.
    let place = |len: u64, r: u64| -> u64 {
        let spots = [0, PAGE - 24, 2 * PAGE - 8, 3 * PAGE + 100, 5 * PAGE - 40];
        let at = if r.is_multiple_of(3) {
            r / 3 % (SIZE as u64 - len)
        } else {
            spots[(r / 3 % spots.len() as u64) as usize]
        };
        at.min(SIZE as u64 - len)
    };
    let n = 1 + next() % 6;
    let mut steps = Vec::new();
    for _ in 0..n {
        let r = next();
        let len = 1 + next() % 48;
        let at = place(len, next());
        steps.push(match r % 5 {
            3 => Step::Add(at / 8 * 8, r >> 7),
            4 => Step::Pause,
            0 => Step::Store(at, (0..len).map(|i| (r >> 8) as u8 ^ i as u8).collect()),
            1 => {
                let mut a = at.to_le_bytes().to_vec();
                a.extend(len.to_le_bytes());
                a.push((r >> 16) as u8);
                Step::Apply(OP_MIX, a)
            }
            _ => {
                let dst = place(len, next());
                let mut a = at.to_le_bytes().to_vec();
                a.extend(dst.to_le_bytes());
                a.extend(len.to_le_bytes());
                Step::Apply(OP_COPY, a)
            }
        });
    }
    (steps, next().is_multiple_of(7))
}

/// Runs transaction `t` on the view; whether it committed.
fn run_txn(v: &mut View, seed: u64, t: u64) -> bool {
    let (steps, abort) = txn(seed, t);
    v.begin().unwrap();
    for s in &steps {
        match s {
            Step::Store(at, b) => v.slice_mut(*at, b.len()).unwrap().copy_from_slice(b),
            Step::Apply(id, a) => v.apply(*id, a).unwrap(),
            Step::Add(at, x) => v.add_u64(*at, *x).unwrap(),
            Step::Pause => {
                let p = v.pause().unwrap();
                v.begin_read().unwrap();
                let _ = v.slice(0, SIZE).unwrap();
                v.commit().unwrap();
                v.resume(p).unwrap();
            }
        }
    }
    if abort {
        v.abort().unwrap();
        assert!(matches!(v.commit(), Err(Error::Aborted)));
        return false;
    }
    v.commit().unwrap();
    true
}

/// The model's bytes after transactions `0..n`.
fn model(seed: u64, n: u64) -> Vec<u8> {
    let mut m = Bytes(vec![0u8; SIZE]);
    for t in 0..n {
        let (steps, abort) = txn(seed, t);
        if abort {
            continue;
        }
        for s in steps {
            match s {
                Step::Store(at, b) => m.write(at, &b).unwrap(),
                Step::Apply(OP_MIX, a) => mix(&mut m, &a).unwrap(),
                Step::Apply(_, a) => copy(&mut m, &a).unwrap(),
                Step::Add(at, x) => {
                    let o = at as usize;
                    let old = u64_at(&m.0, o);
                    m.write(at, &old.wrapping_add(x).to_le_bytes()).unwrap();
                }
                Step::Pause => {}
            }
        }
    }
    m.0
}

fn contents(path: &std::path::Path) -> Vec<u8> {
    let r = Region::open(path, Options::default()).unwrap();
    let v = r.view().unwrap();
    v.slice(0, SIZE).unwrap().to_vec()
}

/// Records in the log with operations, and operations in them.
fn logged_ops(region: &std::path::Path) -> (usize, usize) {
    let log = std::fs::read(txmap::log_path(region)).unwrap();
    let h = format::LogHeader::decode(&log[..4096]).unwrap();
    let mut off = 4096;
    let (mut recs, mut ops) = (0, 0);
    while let Ok(r) = format::decode_record(&log[off..], h.salt) {
        if !r.ops.is_empty() {
            recs += 1;
            ops += r.ops.len();
        }
        off += r.len;
    }
    (recs, ops)
}

fn opts_without_checkpoints() -> Options {
    Options {
        checkpoint_bytes: u64::MAX / 2,
        ..Options::default()
    }
}

#[test]
fn operations_mixed_with_stores_match_the_model_in_the_transaction_and_after_reopen() {
    register();
    let seed = seed("ops-model");
    let d = ext4_dir("ops-model");
    let p = d.join("r.txm");
    let r = Region::create(&p, PAGES * PAGE, Options::default()).unwrap();
    let mut v = r.view().unwrap();
    for t in 0..300 {
        run_txn(&mut v, seed, t);
        if t % 50 == 49 {
            v.begin_read().unwrap();
            assert!(v.slice(0, SIZE).unwrap() == model(seed, t + 1), "after {t}");
            v.commit().unwrap();
        }
    }
    drop(v);
    drop(r);
    assert!(contents(&p) == model(seed, 300));
}

/// Child: runs the workload with acknowledgements until killed.
fn workload_child() {
    register();
    let p = std::path::PathBuf::from(std::env::var("TXMAP_REGION").unwrap());
    let seed: u64 = std::env::var("TXMAP_OPS_SEED").unwrap().parse().unwrap();
    let mut acks = Acks::open(&std::env::var("TXMAP_ACKS").unwrap());
    let r = Region::open(&p, opts_without_checkpoints()).unwrap();
    let mut v = r.view().unwrap();
    for t in 0.. {
        run_txn(&mut v, seed, t);
        acks.line(&t.to_string());
    }
}

#[test]
fn operations_are_replayed_in_commit_order_after_sigkill() {
    if role().as_deref() == Some("ops-workload") {
        return workload_child();
    }
    register();
    let seed = seed("ops-sigkill");
    let d = ext4_dir("ops-sigkill");
    let p = d.join("r.txm");
    drop(Region::create(&p, PAGES * PAGE, Options::default()).unwrap());
    for round in 0..3u64 {
        let acks = d.join(&format!("acks-{round}"));
        let s = seed + round;
        // Each round starts from zeros: a fresh region.
        let _ = std::fs::remove_file(&p);
        let _ = std::fs::remove_file(txmap::log_path(&p));
        remove_shared_state(d.path());
        drop(Region::create(&p, PAGES * PAGE, Options::default()).unwrap());
        let mut c = Proc::spawn(
            "operations_are_replayed_in_commit_order_after_sigkill",
            "ops-workload",
            &[
                ("TXMAP_REGION", p.display().to_string()),
                ("TXMAP_OPS_SEED", s.to_string()),
                ("TXMAP_ACKS", acks.display().to_string()),
            ],
            d.join(&format!("err-{round}")),
        );
        wait_for_acks(&mut c, &acks, 40 + round as usize * 60);
        c.signal(rustix::process::Signal::KILL);
        c.kill();
        let acked = std::fs::read_to_string(&acks).unwrap().lines().count() as u64;
        let (recs, nops) = logged_ops(&p);
        assert!(recs > 0 && nops > 0, "the log holds operation records");
        let got = contents(&p);
        // The transaction in flight may have committed without its ack.
        assert!(
            got == model(seed + round, acked) || got == model(seed + round, acked + 1),
            "round {round}: the region after recovery is not the model after {acked} or {} transactions",
            acked + 1
        );
    }
}

/// Registers the operation only the child has at first.
fn register_marker() {
    ops::register(
        OP_ONLY_CHILD,
        Operation {
            name: "marker",
            apply: set_marker,
        },
    )
    .unwrap();
}

/// Child: commits one operation the parent never registers, then dies.
fn unregistered_child() {
    register_marker();
    let p = std::path::PathBuf::from(std::env::var("TXMAP_REGION").unwrap());
    let r = Region::open(&p, opts_without_checkpoints()).unwrap();
    let mut v = r.view().unwrap();
    v.run(|v| v.write(PAGE, &7u64)).unwrap();
    v.run(|v| v.apply(OP_ONLY_CHILD, &0xabcdu64.to_le_bytes()))
        .unwrap();
    // Dies without closing: the next opener must replay.
    rustix::process::kill_process(rustix::process::getpid(), rustix::process::Signal::KILL)
        .unwrap();
}

#[test]
fn a_log_naming_an_unregistered_operation_fails_to_open_and_changes_nothing() {
    if role().as_deref() == Some("ops-unregistered") {
        return unregistered_child();
    }
    let d = ext4_dir("ops-unregistered");
    let p = d.join("r.txm");
    drop(Region::create(&p, 2 * PAGE, Options::default()).unwrap());
    let st = child(
        "a_log_naming_an_unregistered_operation_fails_to_open_and_changes_nothing",
        "ops-unregistered",
        &[("TXMAP_REGION", p.display().to_string())],
    )
    .status()
    .unwrap();
    assert!(!st.success(), "the child killed itself");
    let before = (
        std::fs::read(&p).unwrap(),
        std::fs::read(txmap::log_path(&p)).unwrap(),
    );
    // `txmap check`/`info` show the operation record and warn that it is
    // not registered here.
    let c = txmap::inspect::check(&p).unwrap();
    assert_eq!(c.report.log_records, 2);
    assert_eq!(c.report.log_op_records, 1);
    // The operation, and the check of the page it wrote.
    assert_eq!(
        c.report.log_operations,
        [(ops::PAGE_CHECK, 1), (OP_ONLY_CHILD, 1)]
    );
    assert!(c.problems.is_empty(), "{:?}", c.problems);
    assert!(
        c.warnings.iter().any(|w| w.contains("operation 250")),
        "{:?}",
        c.warnings
    );
    let Err(e) = Region::open(&p, Options::default()) else {
        panic!("opened a log naming an unregistered operation")
    };
    match &e {
        Error::UnknownOperation { id, commit, .. } => {
            assert_eq!(*id, OP_ONLY_CHILD);
            assert_eq!(*commit, 2, "the second commit holds it");
        }
        e => panic!("expected UnknownOperation, got {e}"),
    }
    let msg = e.to_string();
    assert!(msg.contains("250") && msg.contains("commit 2"), "{msg}");
    let after = (
        std::fs::read(&p).unwrap(),
        std::fs::read(txmap::log_path(&p)).unwrap(),
    );
    assert!(before == after, "a failed open changed the region's files");
    // Read-only openers refuse it the same way.
    let ro = Options {
        read_only: true,
        ..Options::default()
    };
    assert!(matches!(
        Region::open(&p, ro),
        Err(Error::UnknownOperation {
            id: OP_ONLY_CHILD,
            commit: 2,
            ..
        })
    ));
    // Once registered, the log replays.
    register_marker();
    let r = Region::open(&p, Options::default()).unwrap();
    let v = r.view().unwrap();
    assert_eq!(v.read::<u64>(0).unwrap(), 0xabcd);
    assert_eq!(v.read::<u64>(PAGE).unwrap(), 7);
}

#[test]
fn registration_rules() {
    fn other(_: &mut dyn OpMemory, _: &[u8]) -> txmap::Result<()> {
        Ok(())
    }
    register();
    register(); // the same functions again: fine
    assert!(matches!(
        ops::register(
            5,
            Operation {
                name: "low",
                apply: other
            }
        ),
        Err(Error::Invalid(_))
    ));
    assert!(matches!(
        ops::register(
            OP_MIX,
            Operation {
                name: "other",
                apply: other
            }
        ),
        Err(Error::Invalid(_))
    ));
    let d = ext4_dir("ops-rules");
    let r = Region::create(&d.join("r.txm"), PAGE, Options::default()).unwrap();
    let mut v = r.view().unwrap();
    assert!(matches!(
        v.apply(OP_MIX, &[]),
        Err(Error::NotInTransaction { .. })
    ));
    v.begin().unwrap();
    assert!(matches!(v.apply(9999, &[]), Err(Error::Invalid(_))));
    v.commit().unwrap();
    v.begin_with(txmap::TxnOptions::SNAPSHOT).unwrap();
    assert!(matches!(v.apply(OP_COPY, &[0; 24]), Err(Error::Invalid(_))));
    v.commit().unwrap();
    // A failing operation aborts its transaction.
    v.begin().unwrap();
    v.write(0, &1u64).unwrap();
    let mut a = (PAGE - 4).to_le_bytes().to_vec();
    a.extend(0u64.to_le_bytes());
    a.extend(8u64.to_le_bytes()); // reads past the end of the region
    assert!(matches!(
        v.apply(OP_COPY, &a),
        Err(Error::OutOfRange { .. })
    ));
    assert!(matches!(v.commit(), Err(Error::Aborted)));
}

/// Child: joins the region and checkpoints it, killed at `TXMAP_POINT`
/// (after its page journal is synced, or after its pages are written).
fn checkpoint_killed_child() {
    register();
    let p = std::path::PathBuf::from(std::env::var("TXMAP_REGION").unwrap());
    let point: u32 = std::env::var("TXMAP_POINT").unwrap().parse().unwrap();
    let r = Region::open(&p, opts_without_checkpoints()).unwrap();
    txmap::debug::crash_at(txmap::debug::CrashPoint::from_u32(point).unwrap(), 1);
    r.checkpoint().unwrap();
    panic!("the checkpoint did not reach crash point {point}");
}

/// Child: the first opener, recovering in batches of two changed pages,
/// killed after writing the pages of batch `TXMAP_NTH`, before its header.
fn recovery_killed_child() {
    register();
    let p = std::path::PathBuf::from(std::env::var("TXMAP_REGION").unwrap());
    let nth: u64 = std::env::var("TXMAP_NTH").unwrap().parse().unwrap();
    txmap::debug::replay_batch_pages(2);
    txmap::debug::crash_at(txmap::debug::CrashPoint::RecoveryWriting, nth);
    let _ = Region::open(&p, Options::default());
    panic!("recovery did not reach batch {nth}");
}

fn acks_in(p: &std::path::Path) -> u64 {
    std::fs::read_to_string(p).unwrap().lines().count() as u64
}

/// A fresh region at `p` with the workload running on it in a child.
fn start_workload(
    test: &str,
    d: &TestDir,
    p: &std::path::Path,
    seed: u64,
    acks: &std::path::Path,
) -> Proc {
    drop(Region::create(p, PAGES * PAGE, Options::default()).unwrap());
    Proc::spawn(
        test,
        "ops-workload",
        &[
            ("TXMAP_REGION", p.display().to_string()),
            ("TXMAP_OPS_SEED", seed.to_string()),
            ("TXMAP_ACKS", acks.display().to_string()),
        ],
        d.join("err-workload"),
    )
}

/// The region's bytes are the model after the acknowledged transactions
/// (or one more: the one in flight may have committed unacknowledged).
fn check_model(p: &std::path::Path, seed: u64, acks: &std::path::Path, what: &str) {
    let acked = acks_in(acks);
    let got = contents(p);
    assert!(
        got == model(seed, acked) || got == model(seed, acked + 1),
        "{what}: the region is not the model after {acked} or {} transactions",
        acked + 1
    );
}

#[test]
fn a_checkpoint_killed_between_its_pages_and_its_header_applies_no_operation_twice() {
    const TEST: &str =
        "a_checkpoint_killed_between_its_pages_and_its_header_applies_no_operation_twice";
    match role().as_deref() {
        Some("ops-workload") => return workload_child(),
        Some("ops-checkpoint") => return checkpoint_killed_child(),
        _ => {}
    }
    register();
    use txmap::debug::CrashPoint;
    for point in [
        CrashPoint::CheckpointJournaled,
        CrashPoint::CheckpointWriting,
    ] {
        let seed = seed("ops-checkpoint-killed") + point as u64;
        let d = ext4_dir(&format!("ops-checkpoint-killed-{}", point as u32));
        let p = d.join("r.txm");
        let acks = d.join("acks");
        let mut w = start_workload(TEST, &d, &p, seed, &acks);
        wait_for_acks(&mut w, &acks, 60);
        // Another process checkpoints what the workload committed and dies
        // between its journal, its pages and its header.
        let mut c = Proc::spawn(
            TEST,
            "ops-checkpoint",
            &[
                ("TXMAP_REGION", p.display().to_string()),
                ("TXMAP_POINT", (point as u32).to_string()),
            ],
            d.join("err-checkpoint"),
        );
        c.wait_killed("the checkpoint");
        // The workload goes on: records after the journaled ones.
        let n = acks_in(&acks) as usize;
        wait_for_acks(&mut w, &acks, n + 30);
        w.signal(rustix::process::Signal::KILL);
        w.kill();
        remove_shared_state(d.path());
        assert_journal_pending(&p, &format!("{point:?}"));
        // A read-only opener cannot finish it.
        let ro = Options {
            read_only: true,
            ..Options::default()
        };
        assert!(
            matches!(Region::open(&p, ro), Err(Error::ReadOnly { .. })),
            "{point:?}"
        );
        check_model(&p, seed, &acks, &format!("{point:?}"));
        // Finished: the journal is spent.
        let report = txmap::inspect::check(&p).unwrap();
        assert!(report.warnings.is_empty(), "{:?}", report.warnings);
    }
}

#[test]
fn a_recovery_killed_between_batches_of_replayed_operations_applies_each_once() {
    const TEST: &str = "a_recovery_killed_between_batches_of_replayed_operations_applies_each_once";
    match role().as_deref() {
        Some("ops-workload") => return workload_child(),
        Some("ops-recover") => return recovery_killed_child(),
        _ => {}
    }
    register();
    let seed = seed("ops-recovery-killed");
    let d = ext4_dir("ops-recovery-killed");
    let p = d.join("r.txm");
    let acks = d.join("acks");
    let mut w = start_workload(TEST, &d, &p, seed, &acks);
    wait_for_acks(&mut w, &acks, 80);
    w.signal(rustix::process::Signal::KILL);
    w.kill();
    // Two recoveries killed after writing a batch's pages (the first batch,
    // then the second of what is left), each before its region header.
    for nth in [1, 2] {
        remove_shared_state(d.path());
        let mut c = Proc::spawn(
            TEST,
            "ops-recover",
            &[
                ("TXMAP_REGION", p.display().to_string()),
                ("TXMAP_NTH", nth.to_string()),
            ],
            d.join(&format!("err-recover-{nth}")),
        );
        c.wait_killed("the recovery");
    }
    remove_shared_state(d.path());
    check_model(&p, seed, &acks, "after two killed recoveries");
}

/// Writes this process's id at the offset: a different result in every
/// process, as an operation that reads the clock or a global would give.
const OP_NONDET: u32 = 202;

fn nondet(mem: &mut dyn OpMemory, args: &[u8]) -> txmap::Result<()> {
    mem.write_u64(u64_at(args, 0), u64::from(std::process::id()))
}

fn register_nondet() {
    ops::register(
        OP_NONDET,
        Operation {
            name: "process id",
            apply: nondet,
        },
    )
    .unwrap();
}

/// Child: commits the non-deterministic operation, then dies.
fn nondet_child() {
    register_nondet();
    let p = std::path::PathBuf::from(std::env::var("TXMAP_REGION").unwrap());
    let r = Region::open(&p, opts_without_checkpoints()).unwrap();
    let mut v = r.view().unwrap();
    v.run(|v| v.write(8, &5u64)).unwrap();
    v.run(|v| v.apply(OP_NONDET, &PAGE.to_le_bytes())).unwrap();
    rustix::process::kill_process(rustix::process::getpid(), rustix::process::Signal::KILL)
        .unwrap();
}

#[test]
fn an_operation_that_replays_to_other_bytes_is_caught_by_check_and_open() {
    if role().as_deref() == Some("ops-nondet") {
        return nondet_child();
    }
    register_nondet();
    let d = ext4_dir("ops-nondet");
    let p = d.join("r.txm");
    drop(Region::create(&p, 2 * PAGE, Options::default()).unwrap());
    let st = child(
        "an_operation_that_replays_to_other_bytes_is_caught_by_check_and_open",
        "ops-nondet",
        &[("TXMAP_REGION", p.display().to_string())],
    )
    .status()
    .unwrap();
    assert!(!st.success(), "the child killed itself");
    remove_shared_state(d.path());
    let before = std::fs::read(&p).unwrap();
    // Replayed here, the operation writes this process's id, not the
    // child's: `txmap check` (which replays it in memory) reports it.
    let c = txmap::inspect::check(&p).unwrap();
    assert!(
        c.problems
            .iter()
            .any(|e| e.contains("commit 2") && e.contains("not deterministic")),
        "{:?}",
        c.problems
    );
    let Err(e) = Region::open(&p, Options::default()) else {
        panic!("opened a log whose operation replays to other bytes");
    };
    let msg = e.to_string();
    assert!(
        msg.contains("commit 2") && msg.contains("not deterministic"),
        "{msg}"
    );
    assert!(
        std::fs::read(&p).unwrap() == before,
        "a failed recovery wrote the region file"
    );
}
