//! Space given back: a checkpoint that empties the log cuts the log file to
//! the reserve (`Options::log_reserve`), and commits and recovery go on
//! as before.

mod common;

use common::*;
use txmap::{Options, Region, log_path};

const PAGE: u64 = 4096;
const MIB: u64 = 1 << 20;

fn opts(reserve: u64) -> Options {
    Options {
        checkpoint_bytes: 1 << 40, // only explicit checkpoints
        log_reserve: reserve,
        ..Options::default()
    }
}

/// Commits `n` transactions, each rewriting 16 whole pages with `round`.
fn churn(r: &Region, n: u64, round: u8) {
    let mut v = r.view().unwrap();
    for i in 0..n {
        v.begin().unwrap();
        let b = v
            .slice_mut((i % 4) * 16 * PAGE, 16 * PAGE as usize)
            .unwrap();
        b.fill(round.wrapping_add(i as u8));
        v.commit().unwrap();
    }
}

fn log_len(p: &std::path::Path) -> u64 {
    std::fs::metadata(log_path(p)).unwrap().len()
}

#[test]
fn a_checkpoint_that_empties_the_log_cuts_it_to_the_reserve() {
    let d = ext4_dir("logspace-cut");
    let p = d.join("r.txm");
    let r = Region::create(&p, 64 * PAGE, opts(4 * MIB)).unwrap();
    churn(&r, 200, 1); // ~13 MiB of log
    let grown = log_len(&p);
    assert!(grown > 12 * MIB, "log only {grown} bytes");
    r.checkpoint().unwrap();
    assert_eq!(
        log_len(&p),
        4096 + 4 * MIB,
        "cut to the header and the reserve"
    );
    // Commits go on, the log grows again, and a crash copy recovers them.
    churn(&r, 100, 2);
    assert!(log_len(&p) > 4 * MIB + 4096);
    let crashed = d.join("crashed.txm");
    copy_region(&p, &crashed);
    std::fs::copy(txmap::sums::sums_path(&p), txmap::sums::sums_path(&crashed)).unwrap();
    let want = {
        let v = r.view().unwrap();
        v.slice(0, 64 * PAGE as usize).unwrap().to_vec()
    };
    drop(r);
    let r = Region::open(&crashed, opts(4 * MIB)).unwrap();
    assert_eq!(r.stats().recovered_commits, 100);
    let v = r.view().unwrap();
    assert!(v.slice(0, 64 * PAGE as usize).unwrap() == &want[..]);
    drop(v);
    drop(r);
    assert_eq!(
        log_len(&crashed),
        4096 + 4 * MIB,
        "the first open cuts it too"
    );
}

#[test]
fn an_unlimited_reserve_keeps_the_log_at_its_high_water_mark() {
    let d = ext4_dir("logspace-keep");
    let p = d.join("r.txm");
    let r = Region::create(&p, 64 * PAGE, opts(u64::MAX)).unwrap();
    churn(&r, 200, 1);
    let grown = log_len(&p);
    r.checkpoint().unwrap();
    assert_eq!(log_len(&p), grown);
    drop(r);
    let r = Region::open(&p, opts(u64::MAX)).unwrap();
    drop(r);
    assert_eq!(log_len(&p), grown);
}

const AREA: u64 = 16; // pages each child rewrites per commit

fn child_opts() -> Options {
    Options {
        // Epochs of ~8 MiB, cut back to 4 MiB at each checkpoint.
        checkpoint_bytes: 8 * MIB,
        log_reserve: 4 * MIB,
        ..Options::default()
    }
}

/// Child: durable commits rewriting its 16 pages with its counter, each
/// acknowledged after commit returns; runs until killed.
#[test]
fn churn_child() {
    if role().as_deref() != Some("churn") {
        return;
    }
    let w: u64 = std::env::var("TXMAP_W").unwrap().parse().unwrap();
    let path = std::env::var("TXMAP_SRC").unwrap();
    let r = Region::open(path.as_ref(), child_opts()).unwrap();
    let mut v = r.view().unwrap();
    let mut acks = Acks::open(&std::env::var("TXMAP_ACK").unwrap());
    let base = w * AREA * PAGE;
    let mut n: u64 = v.run(|v| v.read::<u64>(base)).unwrap();
    loop {
        n += 1;
        v.begin().unwrap();
        let b = v.slice_mut(base, (AREA * PAGE) as usize).unwrap();
        b.fill((n % 251) as u8);
        b[..8].copy_from_slice(&n.to_le_bytes());
        v.commit().unwrap();
        acks.line(&n.to_string());
    }
}

#[test]
fn processes_killed_while_checkpoints_cut_the_log_lose_no_acknowledged_commit() {
    let d = ext4_dir("logspace-kill");
    let p = d.join("r.txm");
    drop(Region::create(&p, 2 * AREA * PAGE, child_opts()).unwrap());
    let mut x = seed("processes_killed_while_checkpoints_cut_the_log");
    let mut cut = false;
    for round in 0..4 {
        let mut procs: Vec<Proc> = (0..2)
            .map(|w| {
                Proc::spawn(
                    "churn_child",
                    "churn",
                    &[
                        ("TXMAP_W", w.to_string()),
                        ("TXMAP_SRC", p.display().to_string()),
                        (
                            "TXMAP_ACK",
                            d.join(&format!("ack{w}")).display().to_string(),
                        ),
                    ],
                    d.join(&format!("err{w}")),
                )
            })
            .collect();
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let run = std::time::Duration::from_millis(300 + (x >> 33) % 700);
        let t = std::time::Instant::now();
        while t.elapsed() < run {
            for pr in procs.iter_mut() {
                pr.check_running("churn child");
            }
            let len = std::fs::metadata(log_path(&p)).unwrap().len();
            cut |= len == 4096 + 4 * MIB;
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        for pr in procs.iter_mut() {
            pr.kill();
        }
        let r = Region::open(&p, child_opts()).unwrap();
        let v = r.view().unwrap();
        for w in 0..2u64 {
            let acked = std::fs::read_to_string(d.join(&format!("ack{w}")))
                .unwrap()
                .lines()
                .filter_map(|l| l.parse::<u64>().ok())
                .max()
                .unwrap_or(0);
            let b = v.slice(w * AREA * PAGE, (AREA * PAGE) as usize).unwrap();
            let n = u64::from_le_bytes(b[..8].try_into().unwrap());
            assert!(
                n >= acked,
                "round {round}, child {w}: commit {acked} acknowledged, {n} found"
            );
            assert!(
                b[8..].iter().all(|&c| c == (n % 251) as u8),
                "round {round}, child {w}: a partial commit"
            );
        }
    }
    assert!(cut, "no checkpoint cut the log while the children ran");
}

fn key(i: u32) -> Vec<u8> {
    format!("key-{i:08}").into_bytes()
}

#[test]
fn compact_cuts_a_heap_region_above_its_top_and_keeps_every_entry() {
    use txmap::collections::Map;
    let d = ext4_dir("logspace-compact");
    let p = d.join("r.txm");
    let m = make_heap_region(&p);
    let rep = txmap::compact::compact(&p).unwrap();
    assert!(rep.heap);
    assert!(
        rep.size_after < rep.size_before,
        "the heap's growth left room above its top: {rep:?}"
    );
    assert!(rep.log_after <= 4096 + 4 * MIB, "{rep:?}");
    let c = txmap::inspect::check(&p).unwrap();
    assert!(c.is_sound(), "{c:?}");
    assert_eq!(c.report.data_size, rep.size_after);
    let r = Region::open(&p, Options::default()).unwrap();
    assert_eq!(r.size(), rep.size_after);
    let mut v = r.view().unwrap();
    v.begin_read().unwrap();
    let top = txmap::collections::alloc::check(&v).unwrap().top;
    assert!(top <= rep.size_after);
    for i in (0..20_000).step_by(97) {
        assert_eq!(
            m.get(&v, &key(i)).unwrap().as_deref(),
            Some(&[7u8; 100][..]),
            "key {i}"
        );
    }
    v.commit().unwrap();
    // The heap grows the region again when it needs room.
    v.run(|v| {
        for i in 20_000..25_000 {
            m.put(v, &key(i), &[8u8; 100])?;
        }
        Ok(())
    })
    .unwrap();
    assert!(r.size() > rep.size_after);
}

#[test]
fn compact_keeps_the_size_of_a_raw_region_and_cuts_its_log() {
    let d = ext4_dir("logspace-compact-raw");
    let p = d.join("r.txm");
    let r = Region::create(&p, 64 * PAGE, opts(u64::MAX)).unwrap();
    churn(&r, 200, 1);
    drop(r);
    let rep = txmap::compact::compact(&p).unwrap();
    assert!(!rep.heap);
    assert_eq!(rep.size_after, 64 * PAGE);
    assert!(rep.log_before > 12 * MIB, "{rep:?}");
    assert_eq!(rep.log_after, 4096 + 4 * MIB);
}

/// A collections region whose heap grew in steps (room above its top):
/// 20,000 B+-tree entries `key(i) -> [7; 100]`.
fn make_heap_region(p: &std::path::Path) -> txmap::collections::AnyMap {
    use txmap::collections::{AnyMap, Kind, Map};
    let r = Region::create(p, 256 * 1024, Options::default()).unwrap();
    let mut v = r.view().unwrap();
    let m = v
        .run(|v| AnyMap::open_or_create(v, "m", Kind::BTree))
        .unwrap();
    for chunk in 0..40u32 {
        v.run(|v| {
            for i in chunk * 500..(chunk + 1) * 500 {
                m.put(v, &key(i), &[7u8; 100])?;
            }
            Ok(())
        })
        .unwrap();
    }
    drop(v);
    r.close().unwrap();
    m
}

/// Child: arms a crash point and compacts `TXMAP_REGION`.
#[test]
fn compact_child() {
    if role().as_deref() != Some("compact") {
        return;
    }
    let point: u32 = std::env::var("TXMAP_POINT").unwrap().parse().unwrap();
    txmap::debug::crash_at(txmap::debug::CrashPoint::from_u32(point).unwrap(), 1);
    let p = std::path::PathBuf::from(std::env::var("TXMAP_REGION").unwrap());
    let r = txmap::compact::compact(&p);
    eprintln!("compact finished without reaching its crash point: {r:?}");
}

#[test]
fn a_compact_killed_while_shrinking_leaves_every_entry_and_the_next_one_finishes() {
    use txmap::collections::Map;
    let d = ext4_dir("logspace-compact-killed");
    let p = d.join("r.txm");
    let m = make_heap_region(&p);
    let size_before = txmap::inspect::check(&p).unwrap().report.data_size;
    let status = child(
        "compact_child",
        "compact",
        &[
            (
                "TXMAP_POINT",
                (txmap::debug::CrashPoint::CompactShrinking as u32).to_string(),
            ),
            ("TXMAP_REGION", p.display().to_string()),
        ],
    )
    .status()
    .unwrap();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(status.signal(), Some(9), "killed at CompactShrinking");
    // The header records the smaller size; the file is still longer.
    let c = txmap::inspect::check(&p).unwrap();
    assert!(c.is_sound(), "{c:?}");
    let small = c.report.data_size;
    assert!(small < size_before);
    assert!(std::fs::metadata(&p).unwrap().len() > small + PAGE);
    let check_entries = || {
        let r = Region::open(&p, Options::default()).unwrap();
        assert_eq!(r.size(), small);
        let v = r.view().unwrap();
        for i in (0..20_000).step_by(7) {
            assert_eq!(
                m.get(&v, &key(i)).unwrap().as_deref(),
                Some(&[7u8; 100][..]),
                "key {i}"
            );
        }
    };
    check_entries();
    // The next compact finishes the cut.
    let rep = txmap::compact::compact(&p).unwrap();
    assert_eq!(rep.size_after, small, "{rep:?}");
    assert_eq!(std::fs::metadata(&p).unwrap().len(), small + PAGE);
    assert!(txmap::inspect::check(&p).unwrap().is_sound());
    check_entries();
}
