//! Harder checks of the rocksdb, pmemobj and redb peers than tests/stores.rs:
//! thousands of keys (so B-tree nodes split at every level and leaves empty
//! out), a process killed with SIGKILL in the middle of its commits (with
//! `Durability::Async`, a process crash must lose no acknowledged commit),
//! and a pmemobj pool that fills up (a clean error, the store still usable).

mod common;

use common::{Rng, apply_batch};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use txmap_peers::{Config, Durability, Error, Op, Peer, Session, stores};

const MINE: &[&str] = &["rocksdb", "pmemobj", "redb"];

fn fresh_dir(name: &str) -> PathBuf {
    common::fresh_dir("stress", name)
}

fn mine() -> Vec<Peer> {
    stores()
        .into_iter()
        .filter(|p| MINE.contains(&p.id))
        .filter(|p| match p.available {
            Ok(()) => true,
            Err(cmd) => {
                eprintln!("skipping {} (not installed: {cmd})", p.id);
                false
            }
        })
        .collect()
}

fn get(s: &mut dyn Session, k: &[u8]) -> Option<Vec<u8>> {
    let mut got = None;
    let found = s.get(k, &mut |v| got = Some(v.to_vec())).unwrap();
    assert_eq!(found, got.is_some());
    got
}

fn check_all(id: &str, s: &mut dyn Session, model: &BTreeMap<Vec<u8>, Vec<u8>>, keys: u64) {
    for i in 0..keys {
        let k = format!("k{i:07}").into_bytes();
        assert_eq!(get(s, &k).as_ref(), model.get(&k), "{id}: key {i}");
    }
    // A full scan, and scans from a few starting points (also between keys).
    let mut all = Vec::new();
    let n = s
        .range(b"", usize::MAX, &mut |k, v| {
            all.push((k.to_vec(), v.to_vec()))
        })
        .unwrap();
    assert_eq!(n, model.len(), "{id}: full scan count");
    assert!(
        all.iter().map(|(k, v)| (k, v)).eq(model.iter()),
        "{id}: full scan contents"
    );
    for start in [&b"k0000500"[..], b"k00012345", b"k9", b"a", b"k0003"] {
        let mut got = Vec::new();
        s.range(start, 300, &mut |k, v| got.push((k.to_vec(), v.to_vec())))
            .unwrap();
        let want: Vec<_> = model
            .range(start.to_vec()..)
            .take(300)
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        assert_eq!(
            got,
            want,
            "{id}: range from {:?}",
            String::from_utf8_lossy(start)
        );
    }
}

/// 20,000 keys inserted in random order in batches, then three quarters of
/// them deleted (emptying whole leaves), updated with other sizes, reopened.
/// pmemobj gets 6,000 (still three levels of its B+-tree): on a file each of
/// its puts costs about a millisecond of msyncs.
#[test]
fn many_keys_against_a_model() {
    for p in mine() {
        let keys: u64 = if p.id == "pmemobj" { 6_000 } else { 20_000 };
        let dir = fresh_dir(&format!("{}-many", p.id));
        let t = Instant::now();
        let mut model = BTreeMap::<Vec<u8>, Vec<u8>>::new();
        let mut rng = Rng(0x2545f4914f6cdd1d);
        let mut order: Vec<u64> = (0..keys).collect();
        for i in (1..order.len()).rev() {
            order.swap(i, (rng.next() % (i as u64 + 1)) as usize);
        }
        {
            let store = (p.open)(&Config::new(&dir, Durability::Async)).unwrap();
            let mut s = store.session().unwrap();
            let mut apply = |s: &mut dyn Session, batch| apply_batch(s, &mut model, batch);
            for chunk in order.chunks(200) {
                let batch = chunk
                    .iter()
                    .map(|&i| {
                        let len = (rng.next() % 120) as usize;
                        (format!("k{i:07}").into_bytes(), Some(vec![i as u8; len]))
                    })
                    .collect();
                apply(&mut *s, batch);
            }
            // Delete the first three quarters of the keys except every
            // 50th: whole leaves empty.
            for chunk in order.chunks(500) {
                let batch = chunk
                    .iter()
                    .filter(|&&i| i < keys / 4 * 3 && i % 50 != 0)
                    .map(|&i| (format!("k{i:07}").into_bytes(), None))
                    .collect();
                apply(&mut *s, batch);
            }
            // Updates to other sizes, some of them large, and re-inserts.
            for chunk in order.chunks(100).take(40) {
                let batch = chunk
                    .iter()
                    .map(|&i| {
                        let len = (rng.next() % 3000) as usize;
                        (format!("k{i:07}").into_bytes(), Some(vec![!(i as u8); len]))
                    })
                    .collect();
                apply(&mut *s, batch);
            }
            check_all(p.id, &mut *s, &model, keys);
        }
        let store = (p.open)(&Config {
            create: false,
            ..Config::new(&dir, Durability::Async)
        })
        .unwrap();
        check_all(p.id, &mut *store.session().unwrap(), &model, keys);
        eprintln!("{}: {keys} keys in {:?}", p.id, t.elapsed());
        drop(store);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

fn crash_value(i: u64) -> Vec<u8> {
    format!("value-{i}-")
        .repeat(1 + (i % 40) as usize)
        .into_bytes()
}

/// Run by `process_crash_loses_no_acknowledged_commit` in a child process
/// (the test binary run again): writes commits until killed, printing
/// `acked N` after commit N returns. Does nothing when run as a test.
#[test]
fn crash_child() {
    let (Ok(dir), Ok(id)) = (
        std::env::var("PEERS_CRASH_DIR"),
        std::env::var("PEERS_CRASH_PEER"),
    ) else {
        return;
    };
    use std::io::Write;
    let p = stores().into_iter().find(|p| p.id == id).unwrap();
    let store = (p.open)(&Config::new(Path::new(&dir), Durability::Async)).unwrap();
    let mut s = store.session().unwrap();
    let mut out = std::io::stdout().lock();
    for i in 0u64.. {
        // Each commit: its own key, and an update of a counter key, and a
        // delete of the key of two commits ago's odd twin.
        let k = format!("c{i:08}").into_bytes();
        let twin = format!("d{i:08}").into_bytes();
        let old_twin = format!("d{:08}", i.wrapping_sub(2)).into_bytes();
        let v = crash_value(i);
        let count = i.to_string().into_bytes();
        s.write(&[
            Op::Put(&k, &v),
            Op::Put(&twin, &v),
            Op::Delete(&old_twin),
            Op::Put(b"counter", &count),
        ])
        .unwrap();
        writeln!(out, "acked {i}").unwrap();
        out.flush().unwrap();
    }
}

#[test]
fn process_crash_loses_no_acknowledged_commit() {
    let exe = std::env::current_exe().unwrap();
    for p in mine() {
        let dir = fresh_dir(&format!("{}-crash", p.id));
        let mut child = Command::new(&exe)
            .args(["--exact", "crash_child", "--nocapture", "--test-threads=1"])
            .env("PEERS_CRASH_DIR", &dir)
            .env("PEERS_CRASH_PEER", p.id)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let mut acked = None;
        let t = Instant::now();
        // Let it commit a while (at least 300 commits or 3 s), then kill
        // it between or inside commits.
        for line in lines.by_ref() {
            if let Some(n) = line.unwrap().strip_prefix("acked ") {
                acked = Some(n.parse::<u64>().unwrap());
            }
            if acked.is_some_and(|a| a >= 300) || t.elapsed() > Duration::from_secs(3) {
                break;
            }
        }
        child.kill().unwrap();
        // Acknowledgements printed before the kill still count.
        for line in lines {
            if let Some(n) = line.unwrap().strip_prefix("acked ") {
                acked = Some(n.parse::<u64>().unwrap());
            }
        }
        child.wait().unwrap();
        let acked = acked.unwrap_or_else(|| panic!("{}: the child committed nothing", p.id));

        let store = (p.open)(&Config {
            create: false,
            ..Config::new(&dir, Durability::Async)
        })
        .unwrap_or_else(|e| panic!("{}: reopen after a crash: {e}", p.id));
        let mut s = store.session().unwrap();
        // The last commit that survived: at least the last acknowledged
        // one, perhaps the one in flight at the kill.
        let last: u64 = String::from_utf8(get(&mut *s, b"counter").unwrap())
            .unwrap()
            .parse()
            .unwrap();
        assert!(
            last >= acked,
            "{}: lost commits {}..={acked}",
            p.id,
            last + 1
        );
        assert!(last <= acked + 1, "{}: commit {last} from nowhere", p.id);
        // Every commit up to `last` is there, whole, and none after it.
        for i in 0..=last + 1 {
            let c = get(&mut *s, format!("c{i:08}").as_bytes());
            let d = get(&mut *s, format!("d{i:08}").as_bytes());
            if i <= last {
                assert_eq!(c, Some(crash_value(i)), "{}: commit {i}", p.id);
                let d_live = i + 2 > last;
                assert_eq!(d.is_some(), d_live, "{}: commit {i}'s twin", p.id);
            } else {
                assert_eq!((c, d), (None, None), "{}: commit {i} half there", p.id);
            }
        }
        let mut n = 0;
        s.range(b"c", usize::MAX, &mut |k, _| {
            n += usize::from(k.starts_with(b"c0"))
        })
        .unwrap();
        assert_eq!(n as u64, last + 1, "{}: scan after crash", p.id);
        eprintln!(
            "{}: killed after {acked} acknowledged commits, {last} survived",
            p.id
        );
        drop(s);
        drop(store);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

/// A pmemobj pool does not grow: filling it fails the write that does not
/// fit with an error (its transaction rolled back), and the store stays
/// usable and consistent.
#[test]
fn pmemobj_pool_full_is_an_error() {
    let Some(p) = mine().into_iter().find(|p| p.id == "pmemobj") else {
        return;
    };
    let dir = fresh_dir("pmemobj-full");
    let c = Config {
        expected_keys: 1000,
        expected_bytes: 1 << 20,
        ..Config::new(&dir, Durability::Async)
    };
    let store = (p.open)(&c).unwrap();
    let mut s = store.session().unwrap();
    let big = vec![7u8; 64 << 10];
    let mut written = 0u64;
    let err = loop {
        let keys: Vec<Vec<u8>> = (0..16)
            .map(|j| format!("big{:06}", written * 16 + j).into_bytes())
            .collect();
        let ops: Vec<Op> = keys.iter().map(|k| Op::Put(k, &big)).collect();
        match s.write(&ops) {
            Ok(_) => written += 1,
            Err(e) => break e,
        }
        assert!(written < 10_000, "the pool never filled");
    };
    eprintln!("pmemobj: pool full after {written} writes: {err}");
    assert!(
        matches!(
            err,
            Error::Failed {
                store: "pmemobj",
                ..
            }
        ),
        "{err}"
    );
    // The failed write left nothing behind; earlier ones are all there.
    assert_eq!(
        get(&mut *s, format!("big{:06}", written * 16).as_bytes()),
        None
    );
    for i in 0..written * 16 {
        assert_eq!(
            get(&mut *s, format!("big{i:06}").as_bytes()).map(|v| v.len()),
            Some(big.len())
        );
    }
    // Deleting makes room again.
    let keys: Vec<Vec<u8>> = (0..32).map(|i| format!("big{i:06}").into_bytes()).collect();
    let ops: Vec<Op> = keys.iter().map(|k| Op::Delete(k)).collect();
    s.write(&ops).unwrap();
    s.write(&[Op::Put(b"small", b"fits")]).unwrap();
    assert_eq!(get(&mut *s, b"small").as_deref(), Some(&b"fits"[..]));
    drop(s);
    drop(store);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Readers and writers at once: each write puts the same value under two
/// keys, and a range read (one read transaction) must always see both
/// with the same value: never half a write.
#[test]
fn readers_never_see_half_a_write() {
    for p in mine() {
        let dir = fresh_dir(&format!("{}-isolation", p.id));
        let store = (p.open)(&Config::new(&dir, Durability::Async)).unwrap();
        store
            .session()
            .unwrap()
            .write(&[Op::Put(b"pair-a", b"0"), Op::Put(b"pair-b", b"0")])
            .unwrap();
        let done = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|sc| {
            for t in 0..2u64 {
                let (store, done) = (&store, &done);
                sc.spawn(move || {
                    let mut s = store.session().unwrap();
                    for i in 0..150u64 {
                        let v = format!("{t}-{i}").into_bytes();
                        let filler = format!("f{t}-{i:04}").into_bytes();
                        s.write(&[
                            Op::Put(b"pair-a", &v),
                            Op::Put(&filler, &v),
                            Op::Put(b"pair-b", &v),
                        ])
                        .unwrap();
                    }
                    done.store(true, std::sync::atomic::Ordering::Relaxed);
                });
            }
            for _ in 0..2 {
                let (store, done) = (&store, &done);
                sc.spawn(move || {
                    let mut s = store.session().unwrap();
                    let mut reads = 0;
                    while !done.load(std::sync::atomic::Ordering::Relaxed) || reads < 10 {
                        let mut seen = Vec::new();
                        let n = s
                            .range(b"pair-", 2, &mut |k, v| seen.push((k.to_vec(), v.to_vec())))
                            .unwrap();
                        assert_eq!(n, 2, "{}", p.id);
                        assert_eq!(seen[0].0, b"pair-a");
                        assert_eq!(seen[1].0, b"pair-b");
                        assert_eq!(seen[0].1, seen[1].1, "{}: half a write seen", p.id);
                        reads += 1;
                    }
                });
            }
        });
        drop(store);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

/// A queue: keys inserted in increasing order and deleted from the front,
/// then everything deleted and the store used again. Emptied parts of a
/// tree must not break (or slow) later reads and writes.
#[test]
fn queue_then_empty_then_reuse() {
    for p in mine() {
        let dir = fresh_dir(&format!("{}-queue", p.id));
        let store = (p.open)(&Config::new(&dir, Durability::Async)).unwrap();
        let mut s = store.session().unwrap();
        let mut model = BTreeMap::<Vec<u8>, Vec<u8>>::new();
        let key = |i: u64| format!("q{i:07}").into_bytes();
        let (mut head, mut tail) = (0u64, 0u64);
        for round in 0..60 {
            let puts: Vec<Vec<u8>> = (tail..tail + 60).map(key).collect();
            let dels: Vec<Vec<u8>> = (head..head + if round < 5 { 0 } else { 60 })
                .map(key)
                .collect();
            let mut ops: Vec<Op> = puts.iter().map(|k| Op::Put(k, k)).collect();
            ops.extend(dels.iter().map(|k| Op::Delete(k)));
            s.write(&ops).unwrap();
            for k in puts {
                model.insert(k.clone(), k);
            }
            for k in dels {
                model.remove(&k);
            }
            tail += 60;
            head += if round < 5 { 0 } else { 60 };
        }
        check_queue(p.id, &mut *s, &model);
        // Delete everything, in a shuffled order, in batches.
        let mut all: Vec<Vec<u8>> = model.keys().cloned().collect();
        let mut rng = Rng(7);
        for i in (1..all.len()).rev() {
            all.swap(i, (rng.next() % (i as u64 + 1)) as usize);
        }
        for chunk in all.chunks(37) {
            let ops: Vec<Op> = chunk.iter().map(|k| Op::Delete(k)).collect();
            s.write(&ops).unwrap();
        }
        model.clear();
        check_queue(p.id, &mut *s, &model);
        // And fill it again.
        for chunk in (0..2000u64).collect::<Vec<_>>().chunks(100) {
            let keys: Vec<Vec<u8>> = chunk.iter().map(|&i| key(i * 7 % 2000)).collect();
            let ops: Vec<Op> = keys.iter().map(|k| Op::Put(k, b"again")).collect();
            s.write(&ops).unwrap();
            for k in keys {
                model.insert(k, b"again".to_vec());
            }
        }
        check_queue(p.id, &mut *s, &model);
        drop(s);
        drop(store);
        let store = (p.open)(&Config {
            create: false,
            ..Config::new(&dir, Durability::Async)
        })
        .unwrap();
        check_queue(p.id, &mut *store.session().unwrap(), &model);
        drop(store);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

fn check_queue(id: &str, s: &mut dyn Session, model: &BTreeMap<Vec<u8>, Vec<u8>>) {
    let mut all = Vec::new();
    s.range(b"", usize::MAX, &mut |k, v| {
        all.push((k.to_vec(), v.to_vec()))
    })
    .unwrap();
    assert!(
        all.iter().map(|(k, v)| (k, v)).eq(model.iter()),
        "{id}: scan has {} pairs, model {}",
        all.len(),
        model.len()
    );
    for i in (0..4000u64).step_by(13) {
        let k = format!("q{i:07}").into_bytes();
        assert_eq!(get(s, &k).as_ref(), model.get(&k), "{id}: key {i}");
    }
    let mut first = Vec::new();
    s.range(b"q0001000", 5, &mut |k, _| first.push(k.to_vec()))
        .unwrap();
    let want: Vec<Vec<u8>> = model
        .range(b"q0001000".to_vec()..)
        .take(5)
        .map(|(k, _)| k.clone())
        .collect();
    assert_eq!(first, want, "{id}: range into emptied keys");
}
