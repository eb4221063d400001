//! Commutative operations: applied again at commit, under the commit lock,
//! to the newest committed value, so concurrent updates of one counter all
//! commit; reading the counter still validates it.
mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use common::*;
use txmap::{Error, Options, Region, TxnOptions};

const PAGE: u64 = 4096;

fn region(name: &str) -> (TestDir, Region) {
    let d = ext4_dir(name);
    let r = Region::create(&d.join("r.txm"), 4 * PAGE, Options::default()).unwrap();
    (d, r)
}

fn committed(r: &Region, off: u64) -> u64 {
    let mut v = r.view().unwrap();
    v.begin_read().unwrap();
    let x = v.read(off).unwrap();
    v.commit().unwrap();
    x
}

#[test]
fn interleaved_adds_to_one_counter_both_commit() {
    let (_d, r) = region("commute-two");
    let mut a = r.view().unwrap();
    let mut b = r.view().unwrap();
    a.begin().unwrap();
    b.begin().unwrap();
    a.add_u64(8, 1).unwrap();
    b.add_u64(8, 2).unwrap();
    a.commit().unwrap();
    b.commit().unwrap();
    assert_eq!(committed(&r, 8), 3);
    // Each view sees the newest value afterwards, not its own local result.
    a.begin_read().unwrap();
    assert_eq!(a.read::<u64>(8).unwrap(), 3);
    a.commit().unwrap();
    b.begin_read().unwrap();
    assert_eq!(b.read::<u64>(8).unwrap(), 3);
    b.commit().unwrap();
}

#[test]
fn the_transaction_sees_its_update_and_a_read_of_the_counter_is_validated() {
    let (_d, r) = region("commute-read");
    let mut a = r.view().unwrap();
    let mut b = r.view().unwrap();
    a.run(|v| v.write(8, &10u64)).unwrap();
    a.begin().unwrap();
    b.begin().unwrap();
    a.add_u64(8, 5).unwrap();
    assert_eq!(a.read::<u64>(8).unwrap(), 15, "its own update, at once");
    b.add_u64(8, 1).unwrap();
    b.commit().unwrap();
    // `a` read the counter: it validates like any read.
    assert!(matches!(a.commit(), Err(Error::Conflict)));
    assert_eq!(committed(&r, 8), 11);
    // A plain load reads it too (the page is caught on first touch).
    a.begin().unwrap();
    b.begin().unwrap();
    a.add_u64(8, 5).unwrap();
    // SAFETY: inside a transaction; in bounds and aligned.
    let seen = unsafe { std::ptr::read_volatile(a.base().add(8).cast::<u64>()) };
    assert_eq!(seen, 16);
    b.add_u64(8, 1).unwrap();
    b.commit().unwrap();
    assert!(matches!(a.commit(), Err(Error::Conflict)));
    assert_eq!(committed(&r, 8), 12);
}

#[test]
fn plain_read_modify_write_of_the_same_counter_conflicts() {
    // The contrast the commutative add removes.
    let (_d, r) = region("commute-rmw");
    let mut a = r.view().unwrap();
    let mut b = r.view().unwrap();
    a.begin().unwrap();
    b.begin().unwrap();
    let x: u64 = a.read(8).unwrap();
    a.write(8, &(x + 1)).unwrap();
    let y: u64 = b.read(8).unwrap();
    b.write(8, &(y + 2)).unwrap();
    a.commit().unwrap();
    assert!(matches!(b.commit(), Err(Error::Conflict)));
}

#[test]
fn threads_adding_to_one_counter_never_conflict_and_lose_nothing() {
    let (_d, r) = region("commute-threads");
    let attempts = Arc::new(AtomicU64::new(0));
    let threads: Vec<_> = (0..8u64)
        .map(|t| {
            let r = r.clone();
            let attempts = attempts.clone();
            std::thread::spawn(move || {
                let mut v = r.view().unwrap();
                for i in 0..150u64 {
                    v.run(|v| {
                        attempts.fetch_add(1, Ordering::Relaxed);
                        v.add_u64(8, 1)?;
                        v.add_i64(16, -1)?;
                        v.commute(txmap::ops::MAX_U64, &word(24, t * 1000 + i))?;
                        v.commute(txmap::ops::MIN_I64, &word(32, (-(i as i64) - 5) as u64))
                    })
                    .unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(attempts.load(Ordering::Relaxed), 8 * 150, "no retries");
    assert_eq!(committed(&r, 8), 8 * 150);
    assert_eq!(committed(&r, 16) as i64, -(8 * 150));
    assert_eq!(committed(&r, 24), 7 * 1000 + 149);
    assert_eq!(committed(&r, 32) as i64, -154);
}

fn word(off: u64, x: u64) -> [u8; 16] {
    let mut a = [0u8; 16];
    a[..8].copy_from_slice(&off.to_le_bytes());
    a[8..].copy_from_slice(&x.to_le_bytes());
    a
}

#[test]
fn stores_to_the_counters_page_are_validated_and_nothing_is_lost() {
    let (_d, r) = region("commute-mixed");
    let mut a = r.view().unwrap();
    let mut b = r.view().unwrap();
    a.begin().unwrap();
    b.begin().unwrap();
    a.add_u64(8, 1).unwrap();
    a.write(40, &7u64).unwrap(); // the counter's page is written too
    b.add_u64(8, 2).unwrap();
    b.commit().unwrap();
    assert!(matches!(a.commit(), Err(Error::Conflict)));
    assert_eq!(committed(&r, 8), 2);
    a.run(|v| {
        v.write(40, &7u64)?;
        v.add_u64(8, 1)?;
        v.write(48, &9u64)
    })
    .unwrap();
    assert_eq!(
        (committed(&r, 8), committed(&r, 40), committed(&r, 48)),
        (3, 7, 9)
    );
}

#[test]
fn abort_discards_the_update_and_bad_calls_fail() {
    let (_d, r) = region("commute-abort");
    let mut a = r.view().unwrap();
    a.begin().unwrap();
    a.add_u64(8, 4).unwrap();
    a.abort().unwrap();
    assert_eq!(a.read::<u64>(8).unwrap(), 0);
    assert!(matches!(a.commit(), Err(Error::Aborted)));
    assert_eq!(committed(&r, 8), 0);
    a.begin_read().unwrap();
    assert_eq!(a.read::<u64>(8).unwrap(), 0);
    assert!(matches!(
        a.add_u64(8, 1),
        Err(Error::StoreInReadOnlyTransaction)
    ));
    a.rollback();
    a.begin().unwrap();
    assert!(
        matches!(a.add_u64(4, 1), Err(Error::Invalid(_))),
        "unaligned"
    );
    assert!(matches!(
        a.add_u64(4 * PAGE, 1),
        Err(Error::OutOfRange { .. })
    ));
    assert!(matches!(
        a.commute(200, &word(8, 1)),
        Err(Error::Invalid(_))
    ));
    a.commit().unwrap();
    assert!(matches!(
        a.add_u64(8, 1),
        Err(Error::NotInTransaction { .. })
    ));
    // Snapshot isolation may use them too.
    a.begin_with(TxnOptions::SNAPSHOT).unwrap();
    a.add_u64(8, 6).unwrap();
    a.commit().unwrap();
    assert_eq!(committed(&r, 8), 6);
}

#[test]
fn a_paused_transaction_keeps_its_commutative_update() {
    let (_d, r) = region("commute-pause");
    let mut a = r.view().unwrap();
    a.begin().unwrap();
    a.add_u64(8, 5).unwrap();
    let p = a.pause().unwrap();
    a.run(|v| v.add_u64(8, 1)).unwrap();
    assert_eq!(committed(&r, 8), 1);
    a.resume(p).unwrap();
    a.commit().unwrap();
    assert_eq!(committed(&r, 8), 6);
}

/// Child: adds 1 per transaction, acknowledging each, until killed.
fn adder_child() {
    let (mut acks, r) = child_region();
    let mut v = r.view().unwrap();
    let store = std::env::var("TXMAP_ONLY_ADD").is_err();
    for i in 0.. {
        v.run(|v| {
            v.add_u64(8, 1)?;
            if store {
                v.write(PAGE + 8 * (i % 100), &i)?;
            }
            Ok(())
        })
        .unwrap();
        acks.line(&i.to_string());
    }
}

#[test]
fn commutative_updates_are_replayed_after_sigkill() {
    if role().as_deref() == Some("adder") {
        return adder_child();
    }
    let d = ext4_dir("commute-sigkill");
    let p = d.join("r.txm");
    drop(Region::create(&p, 4 * PAGE, Options::default()).unwrap());
    let acks = d.join("acks");
    let mut c = Proc::spawn(
        "commutative_updates_are_replayed_after_sigkill",
        "adder",
        &[
            ("TXMAP_REGION", p.display().to_string()),
            ("TXMAP_ACKS", acks.display().to_string()),
        ],
        d.join("err"),
    );
    wait_for_acks(&mut c, &acks, 200);
    c.signal(rustix::process::Signal::KILL);
    c.kill();
    let acked = std::fs::read_to_string(&acks).unwrap().lines().count() as u64;
    let r = Region::open(&p, Options::default()).unwrap();
    assert!(r.stats().recovered_commits > 0, "recovery replayed the log");
    let n = committed(&r, 8);
    assert!(
        n == acked || n == acked + 1,
        "counter {n} after {acked} acks"
    );
    // The store of the last committed transaction is there too.
    let last = n - 1;
    assert_eq!(committed(&r, PAGE + 8 * (last % 100)), last);
}

#[test]
fn two_processes_adding_to_one_counter_lose_nothing_after_sigkill() {
    if role().as_deref() == Some("adder") {
        return adder_child();
    }
    let d = ext4_dir("commute-procs");
    let p = d.join("r.txm");
    drop(Region::create(&p, 4 * PAGE, Options::default()).unwrap());
    let mut kids = spawn_ackers(
        "two_processes_adding_to_one_counter_lose_nothing_after_sigkill",
        "adder",
        &d,
        2,
        |_| {
            vec![
                ("TXMAP_REGION", p.display().to_string()),
                ("TXMAP_ONLY_ADD", "1".to_string()),
            ]
        },
    );
    for (c, acks) in &mut kids {
        wait_for_acks(c, acks, 150);
    }
    // While they run, the published counter covers every acknowledged add
    // (each commit added to the newest value, none was lost in memory).
    let live = Region::open(&p, Options::default()).unwrap();
    for _ in 0..20 {
        let acked: u64 = ack_counts(&kids).iter().sum();
        let n = committed(&live, 8);
        assert!(
            n >= acked,
            "live counter {n} below {acked} acknowledged adds"
        );
    }
    drop(live);
    for (c, _) in &mut kids {
        c.signal(rustix::process::Signal::KILL);
        c.kill();
    }
    let acked: u64 = ack_counts(&kids).iter().sum();
    let r = Region::open(&p, Options::default()).unwrap();
    let n = committed(&r, 8);
    // Each child may have committed one transaction it did not acknowledge.
    assert!(
        (acked..=acked + 2).contains(&n),
        "counter {n} after {acked} acknowledged adds"
    );
}

/// A record's byte ranges, as (offset, bytes).
type Ranges = Vec<(u64, Vec<u8>)>;

/// How many operations each of the log's records holds, and its ranges.
fn log_records(region: &std::path::Path) -> Vec<(usize, Ranges)> {
    use txmap::wal::format;
    let log = std::fs::read(txmap::log_path(region)).unwrap();
    let h = format::LogHeader::decode(&log[..4096]).unwrap();
    let mut off = 4096;
    let mut out = Vec::new();
    while let Ok(r) = format::decode_record(&log[off..], h.salt) {
        let ranges = r
            .ranges
            .iter()
            .map(|x| (x.offset, x.bytes.to_vec()))
            .collect();
        out.push((r.ops.len(), ranges));
        off += r.len;
    }
    out
}

#[test]
fn adds_resolved_at_commit_are_logged_as_the_bytes_they_wrote() {
    let (d, r) = region("commute-logged");
    let mut a = r.view().unwrap();
    let mut b = r.view().unwrap();
    a.begin().unwrap();
    b.begin().unwrap();
    a.add_u64(8, 0x0102).unwrap();
    b.add_u64(8, 0x0300).unwrap();
    a.commit().unwrap();
    b.commit().unwrap();
    let recs = log_records(&d.join("r.txm"));
    assert_eq!(recs.len(), 2, "one record per commit: {recs:?}");
    // No operation to replay (so no page check, and no page journal at
    // the checkpoint): each record holds the counter's bytes as they were
    // after its add was applied to the newest value under the commit lock.
    for (ops, ranges) in &recs {
        assert_eq!(*ops, 0, "an add resolved at commit is logged as bytes");
        assert!(
            ranges
                .iter()
                .all(|(o, b)| *o >= 8 && o + b.len() as u64 <= 16),
            "only the counter's bytes: {ranges:?}"
        );
    }
    let word = |ranges: &[(u64, Vec<u8>)], base: [u8; 8]| {
        let mut w = base;
        for (o, b) in ranges {
            w[(*o - 8) as usize..][..b.len()].copy_from_slice(b);
        }
        w
    };
    let first = word(&recs[0].1, [0; 8]);
    assert_eq!(u64::from_le_bytes(first), 0x0102);
    assert_eq!(u64::from_le_bytes(word(&recs[1].1, first)), 0x0402);
    drop((a, b));
    r.close().unwrap();
    let r = Region::open(&d.join("r.txm"), Options::default()).unwrap();
    assert_eq!(committed(&r, 8), 0x0402);
}

#[test]
fn adds_in_a_commit_across_two_regions_are_logged_as_bytes_and_replayed() {
    let d = ext4_dir("commute-group");
    let (pa, pb) = (d.join("a.txm"), d.join("b.txm"));
    let ra = Region::create(&pa, 4 * PAGE, Options::default()).unwrap();
    let rb = Region::create(&pb, 4 * PAGE, Options::default()).unwrap();
    let (mut a, mut b) = (ra.view().unwrap(), rb.view().unwrap());
    let mut other = ra.view().unwrap();
    for i in 1..=3u64 {
        txmap::View::begin_group(&mut [&mut a, &mut b]).unwrap();
        a.add_u64(8, i).unwrap();
        b.add_u64(16, 10 * i).unwrap();
        // Another commit to the counter meanwhile: no conflict.
        other.run(|v| v.add_u64(8, 100)).unwrap();
        txmap::View::commit_group(&mut [&mut a, &mut b]).unwrap();
    }
    for path in [&pa, &pb] {
        for (ops, _) in log_records(path) {
            assert_eq!(
                ops, 0,
                "{path:?}: adds resolved at commit are logged as bytes"
            );
        }
    }
    drop((a, b, other));
    // Dropped without closing: reopening replays the logs.
    std::mem::forget(ra);
    std::mem::forget(rb);
    let ra = Region::open(&pa, Options::default()).unwrap();
    let rb = Region::open(&pb, Options::default()).unwrap();
    assert_eq!(committed(&ra, 8), 6 + 300);
    assert_eq!(committed(&rb, 16), 60);
}

/// The child of the test below: an add, then a store of the old value,
/// committed; then it dies before any checkpoint.
fn undo_child() {
    let p = std::env::var("TXMAP_REGION").unwrap();
    let r = Region::open(std::path::Path::new(&p), Options::default()).unwrap();
    let mut v = r.view().unwrap();
    v.run(|v| v.write(8, &100u64)).unwrap();
    v.run(|v| {
        v.add_u64(8, 5)?;
        v.write(8, &100u64)?;
        v.write(16, &1u64)
    })
    .unwrap();
    assert_eq!(committed(&r, 8), 100);
    // The next open replays the log.
    std::process::abort();
}

#[test]
fn a_store_that_undoes_an_add_to_an_unwritten_page_is_what_recovery_replays() {
    // The add's page is written only after the add, by a store that puts
    // the old value back: the record must say so, not just "add 5".
    if role().as_deref() == Some("undo") {
        return undo_child();
    }
    let d = ext4_dir("commute-undo-store");
    let p = d.join("r.txm");
    drop(Region::create(&p, 4 * PAGE, Options::default()).unwrap());
    let st = child(
        "a_store_that_undoes_an_add_to_an_unwritten_page_is_what_recovery_replays",
        "undo",
        &[("TXMAP_REGION", p.display().to_string())],
    )
    .status()
    .unwrap();
    assert!(!st.success(), "the child aborts after committing");
    let r = Region::open(&p, Options::default()).unwrap();
    assert!(r.stats().recovered_commits > 0, "recovery replayed the log");
    assert_eq!((committed(&r, 8), committed(&r, 16)), (100, 1));
}

/// Random interleavings of three views' transactions of adds, stores and
/// loads on the words of two pages, with commits, aborts and checkpoints:
/// every load in every transaction (also those that go on to abort or
/// conflict) reads its snapshot with its own changes applied, and every
/// commit that succeeds leaves, word by word, its stores, or the newest
/// value plus its adds. A view keeps the pages of its own commit only when
/// the adds ran again at commit on what they ran on in the transaction;
/// one that kept them after another view's commit into the same page
/// would load a stale word in its next transaction.
#[test]
fn random_adds_stores_and_loads_read_their_snapshots() {
    const WORDS: u64 = 8;
    // Words 0..4 on page 0, 4..8 on page 1.
    let at = |w: u64| (w / 4) * PAGE + (w % 4) * 8;
    let (_d, r) = region("commute-model");
    let mut rng = seed("random_adds_stores_and_loads_read_their_snapshots");
    let mut next = move |n: u64| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng % n
    };
    let mut views: Vec<txmap::View> = (0..3).map(|_| r.view().unwrap()).collect();
    // The committed words; per open transaction its snapshot, its local
    // words, and per word its stored value or its adds' sum.
    let mut committed = [0u64; WORDS as usize];
    struct Txn {
        snap: [u64; WORDS as usize],
        local: [u64; WORDS as usize],
        stored: [Option<u64>; WORDS as usize],
        added: [u64; WORDS as usize],
    }
    let mut txns: Vec<Option<Txn>> = (0..3).map(|_| None).collect();
    let (mut commits, mut conflicts) = (0, 0);
    for step in 0..20_000 {
        let v = next(3) as usize;
        let w = next(WORDS);
        let Some(t) = &mut txns[v] else {
            views[v].begin().unwrap();
            txns[v] = Some(Txn {
                snap: committed,
                local: committed,
                stored: [None; WORDS as usize],
                added: [0; WORDS as usize],
            });
            continue;
        };
        match next(10) {
            0..=3 => {
                let d = 1 + next(5);
                views[v].add_u64(at(w), d).unwrap();
                t.local[w as usize] += d;
                match &mut t.stored[w as usize] {
                    Some(x) => *x += d,
                    None => t.added[w as usize] += d,
                }
            }
            4 => {
                let x = 1000 * (step + 1);
                views[v].write(at(w), &x).unwrap();
                t.local[w as usize] = x;
                t.stored[w as usize] = Some(x);
                t.added[w as usize] = 0;
            }
            5..=6 => {
                let got: u64 = views[v].read(at(w)).unwrap();
                assert_eq!(
                    got, t.local[w as usize],
                    "step {step}: view {v} loaded word {w}: snapshot {:?}, local {:?}",
                    t.snap, t.local
                );
            }
            7 => {
                views[v].abort().unwrap();
                assert!(matches!(views[v].commit(), Err(Error::Aborted)));
                txns[v] = None;
            }
            8 => {
                let t = txns[v].take().unwrap();
                match views[v].commit() {
                    Ok(()) => {
                        commits += 1;
                        for (i, c) in committed.iter_mut().enumerate() {
                            match t.stored[i] {
                                Some(x) => *c = x,
                                None => *c += t.added[i],
                            }
                        }
                    }
                    Err(Error::Conflict) => conflicts += 1,
                    Err(e) => panic!("step {step}: {e}"),
                }
            }
            _ => {
                let _ = r.checkpoint();
            }
        }
    }
    assert!(
        commits > 1000 && conflicts > 0,
        "{commits} commits, {conflicts} conflicts"
    );
    let mut v = r.view().unwrap();
    v.begin_read().unwrap();
    for w in 0..WORDS {
        assert_eq!(
            v.read::<u64>(at(w)).unwrap(),
            committed[w as usize],
            "word {w}"
        );
    }
    v.commit().unwrap();
}
