//! Tests shared by the map structures (B+-tree, CO B-tree, linear hash):
//! a model-based test, large values, threads, and SIGKILL crash rounds.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::ops::Bound;
use std::process::Stdio;
use std::time::Duration;

use proptest::prelude::*;
use txmap::collections::{Map, alloc};
use txmap::{Durability, Error, Options, Region, Result, TxnOptions, View};

use crate::common::*;

pub fn opts() -> Options {
    Options {
        max_size: 4 << 30,
        ..Options::default()
    }
}

/// Key number `i`: a distinct key whose length depends on `i` (1..~200 bytes).
pub fn key(i: u32) -> Vec<u8> {
    let mut k = format!("{i:05}").into_bytes();
    k.resize(5 + (i as usize * 37) % 190, b'a' + (i % 26) as u8);
    k
}

/// A value of `len` bytes determined by `seed`.
pub fn value(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

#[derive(Clone, Debug)]
pub enum Op {
    Put(u32, u64, usize),
    Delete(u32),
    Get(u32),
    Scan(u32, u32),
}

fn op(keys: u32) -> impl Strategy<Value = Op> {
    let len = prop_oneof![6 => 0..40usize, 2 => 100..600usize, 1 => 4000..9000usize];
    prop_oneof![
        6 => (0..keys, any::<u64>(), len).prop_map(|(k, s, l)| Op::Put(k, s, l)),
        3 => (0..keys).prop_map(Op::Delete),
        2 => (0..keys).prop_map(Op::Get),
        1 => (0..keys, 0..keys).prop_map(|(a, b)| Op::Scan(a.min(b), a.max(b))),
    ]
}

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

fn scan_all<M: Map>(
    m: &M,
    v: &View,
    lo: Bound<&[u8]>,
    hi: Bound<&[u8]>,
) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
    let mut out = Vec::new();
    m.scan(v, lo, hi, &mut |k, val| {
        out.push((k.to_vec(), val.to_vec()));
        Ok(true)
    })?;
    Ok(out)
}

/// A scan of `(lo, hi)` returns the model's entries in that range, in order.
fn check_scan<M: Map>(
    m: &M,
    v: &View,
    model: &Model,
    lo: Bound<&[u8]>,
    hi: Bound<&[u8]>,
) -> Result<()> {
    let got = scan_all(m, v, lo, hi)?;
    let want: Vec<_> = model
        .range::<[u8], _>((lo, hi))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    assert_eq!(got, want, "scan of {lo:?}..{hi:?}");
    Ok(())
}

fn apply<M: Map>(m: &M, v: &mut View, model: &mut Model, op: &Op) -> Result<()> {
    match *op {
        Op::Put(k, s, l) => {
            let (k, val) = (key(k), value(s, l));
            let had = m.put(v, &k, &val)?;
            assert_eq!(had, model.insert(k, val).is_some(), "put: presence");
        }
        Op::Delete(k) => {
            let k = key(k);
            assert_eq!(
                m.delete(v, &k)?,
                model.remove(&k).is_some(),
                "delete: presence"
            );
        }
        Op::Get(k) => {
            let k = key(k);
            assert_eq!(m.get(v, &k)?, model.get(&k).cloned(), "get");
        }
        Op::Scan(a, b) => {
            let (a, b) = (key(a), key(b));
            let (a, b) = (a.clone().min(b.clone()), a.max(b));
            check_scan(m, v, model, Bound::Included(&a), Bound::Excluded(&b))?;
            // The other bounds: the start key itself left out, the end kept.
            check_scan(m, v, model, Bound::Excluded(&a), Bound::Included(&b))?;
        }
    }
    Ok(())
}

/// Checks the structure and the heap; the structure's content must equal the model.
pub fn check_all<M: Map>(m: &M, v: &mut View, model: &Model) -> alloc::HeapReport {
    check_all_with(m, v, model, 0)
}

/// [`check_all`] when `extra` blocks in use belong to others (the root object).
pub fn check_all_with<M: Map>(m: &M, v: &mut View, model: &Model, extra: u64) -> alloc::HeapReport {
    v.begin_read().unwrap();
    let rep = m.check(v).unwrap();
    assert_eq!(rep.entries, model.len() as u64, "entry count");
    let all = scan_all(m, v, Bound::Unbounded, Bound::Unbounded).unwrap();
    let want: Vec<_> = model.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    assert_eq!(all, want, "content after commit");
    let heap = alloc::check(v).unwrap();
    // Every block in use belongs to the structure (no leaks).
    assert_eq!(
        heap.used_blocks,
        rep.blocks + extra,
        "blocks in use vs owned by the structure"
    );
    v.commit().unwrap();
    heap
}

/// Random transactions of random operations, about half of them aborted.
pub fn model_test<M: Map + Copy>(create: fn(&mut View) -> Result<M>, cases: u32) {
    let cfg = ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    };
    proptest!(cfg, |(txns in prop::collection::vec((prop::collection::vec(op(300), 1..40), any::<bool>(), any::<bool>()), 1..25))| {
        let d = tmpfs_dir("coll-model");
        let r = Region::create(&d.join("m.txm"), 1 << 20, opts()).unwrap();
        let mut v = r.view().unwrap();
        let m = v.run(create).unwrap();
        let mut model = Model::new();
        let mut heap = check_all(&m, &mut v, &model);
        for (ops, commit, _) in &txns {
            let mut local = model.clone();
            v.begin().unwrap();
            for op in ops {
                apply(&m, &mut v, &mut local, op).unwrap();
            }
            if *commit {
                v.commit().unwrap();
                model = local;
                heap = check_all(&m, &mut v, &model);
            } else {
                v.abort().unwrap();
                assert!(matches!(v.commit(), Err(Error::Aborted)));
                // The aborted transaction's allocations and frees vanished.
                assert_eq!(check_all(&m, &mut v, &model), heap);
            }
        }
    });
}

pub fn large_values<M: Map + Copy>(create: fn(&mut View) -> Result<M>) {
    let d = tmpfs_dir("coll-large");
    let r = Region::create(&d.join("l.txm"), 1 << 20, opts()).unwrap();
    let mut v = r.view().unwrap();
    let m = v.run(create).unwrap();
    let mut model = Model::new();
    for i in 0..40u32 {
        let val = value(i as u64, 3000 + i as usize * 5000); // up to ~200 KB
        let k = vec![b'k'; (i as usize * 13) % 400 + 1];
        v.run(|v| m.put(v, &k, &val)).unwrap();
        model.insert(k, val);
    }
    check_all(&m, &mut v, &model);
    // Replace and delete big values: their blocks are freed.
    for i in 0..40u32 {
        let k = vec![b'k'; (i as usize * 13) % 400 + 1];
        if i % 2 == 0 {
            v.run(|v| m.delete(v, &k)).unwrap();
            model.remove(&k);
        } else {
            v.run(|v| m.put(v, &k, b"small")).unwrap();
            model.insert(k, b"small".to_vec());
        }
    }
    let heap = check_all(&m, &mut v, &model);
    assert!(heap.free_bytes > 1 << 20, "big value blocks were freed");
    // A key over the limit is a typed error, not a panic.
    let long = vec![0u8; 100_000];
    v.begin().unwrap();
    assert!(matches!(m.put(&mut v, &long, b"x"), Err(Error::Invalid(_))));
    v.rollback();
}

/// One writer/searcher: inserts keys `t:i` (each in its own transaction) and
/// looks up earlier keys of every thread, which must be absent or right.
/// Written against a region handle so that a process variant can call it.
pub fn worker<M: Map + Copy>(
    r: &Region,
    m: M,
    t: u32,
    threads: u32,
    n: u32,
    opts: TxnOptions,
) -> u64 {
    let mut v = r.view().unwrap();
    let mut rng = txmap::io::sim::SplitMix(t as u64 + 1);
    let mut found = 0;
    for i in 0..n {
        let k = format!("{t}:{i:06}:{}", "p".repeat((i % 50) as usize));
        let val = value((t as u64) << 32 | i as u64, (i % 300) as usize);
        v.run_with(opts, |v| m.put(v, k.as_bytes(), &val)).unwrap();
        let (ot, oi) = (
            (rng.next() % threads as u64) as u32,
            (rng.next() % (i as u64 + 1)) as u32,
        );
        let ok = format!("{ot}:{oi:06}:{}", "p".repeat((oi % 50) as usize));
        v.begin_read().unwrap();
        let got = m.get(&v, ok.as_bytes()).unwrap();
        v.commit().unwrap();
        if let Some(g) = got {
            assert_eq!(g, value((ot as u64) << 32 | oi as u64, (oi % 300) as usize));
            found += 1;
        } else {
            assert_ne!(ot, t, "own committed key missing");
        }
        if i % 50 == 49 {
            // The whole structure checks clean in a snapshot taken while the
            // other threads commit, and holds all of this thread's keys.
            v.begin_read().unwrap();
            m.check(&v).unwrap();
            let mut own = 0;
            let lo = format!("{t}:");
            let hi = format!("{t};");
            m.scan(
                &v,
                Bound::Included(lo.as_bytes()),
                Bound::Excluded(hi.as_bytes()),
                &mut |_, _| {
                    own += 1;
                    Ok(true)
                },
            )
            .unwrap();
            v.commit().unwrap();
            assert_eq!(own, i + 1, "thread {t} sees {own} of its {} keys", i + 1);
        }
    }
    found
}

/// `threads` workers at once; each insert is a transaction run with `opts`
/// (serializable, or snapshot isolation, which single operations allow).
pub fn threads_test<M: Map + Copy + Send + 'static>(
    name: &str,
    create: fn(&mut View) -> Result<M>,
    threads: u32,
    n: u32,
    txn: TxnOptions,
) {
    let d = tmpfs_dir(name);
    let r = Region::create(
        &d.join("t.txm"),
        1 << 20,
        Options {
            durability: Durability::Async,
            ..opts()
        },
    )
    .unwrap();
    let m = r.view().unwrap().run(create).unwrap();
    let hs: Vec<_> = (0..threads)
        .map(|t| {
            let r = r.clone();
            std::thread::spawn(move || worker(&r, m, t, threads, n, txn))
        })
        .collect();
    for h in hs {
        h.join().unwrap();
    }
    let mut model = Model::new();
    for t in 0..threads {
        for i in 0..n {
            let k = format!("{t}:{i:06}:{}", "p".repeat((i % 50) as usize));
            model.insert(
                k.into_bytes(),
                value((t as u64) << 32 | i as u64, (i % 300) as usize),
            );
        }
    }
    check_all(&m, &mut r.view().unwrap(), &model);
}

/// Operation `i` of crash-writer thread `t`: puts key `t/i`, and every third
/// operation deletes key `t/(i-2)` instead.
fn crash_op<M: Map>(m: &M, v: &mut View, t: u64, i: u64) -> Result<()> {
    if i % 3 == 2 {
        m.delete(v, format!("{t}/{:06}", i - 2).as_bytes())?;
    } else {
        let len = (i * 97 % 700) as usize + if i.is_multiple_of(11) { 6000 } else { 0 };
        m.put(
            v,
            format!("{t}/{i:06}").as_bytes(),
            &value(t << 32 | i, len),
        )?;
    }
    Ok(())
}

fn crash_model(t: u64, n: u64, model: &mut Model) {
    for i in 0..n {
        if i % 3 == 2 {
            model.remove(format!("{t}/{:06}", i - 2).as_bytes());
        } else {
            let len = (i * 97 % 700) as usize + if i.is_multiple_of(11) { 6000 } else { 0 };
            model.insert(format!("{t}/{i:06}").into_bytes(), value(t << 32 | i, len));
        }
    }
}

const CRASH_THREADS: u64 = 2;

/// The child: each thread runs its operations, one durable transaction each,
/// counting them in the root object, and prints "ACK t n" after each commit.
pub fn crash_child<M: Map + Copy + Send + 'static>(open: fn(&View, u64) -> Result<M>) {
    let path = std::env::var("TXMAP_PATH").unwrap();
    let r = Region::open(path.as_ref(), opts()).unwrap();
    let m = {
        let mut v = r.view().unwrap();
        v.begin_read().unwrap();
        let root = alloc::root_offset(&v).unwrap().unwrap();
        let m = open(&v, v.read(root + 8 * CRASH_THREADS).unwrap()).unwrap();
        v.commit().unwrap();
        m
    };
    let hs: Vec<_> = (0..CRASH_THREADS)
        .map(|t| {
            let r = r.clone();
            std::thread::spawn(move || {
                let mut v = r.view().unwrap();
                loop {
                    let n = v
                        .run(|v| {
                            let root = alloc::root(v, 8 * (CRASH_THREADS + 1))?;
                            let i: u64 = v.read(root + 8 * t)?;
                            crash_op(&m, v, t, i)?;
                            v.write(root + 8 * t, &(i + 1))?;
                            Ok(i + 1)
                        })
                        .unwrap();
                    println!("ACK {t} {n}");
                }
            })
        })
        .collect();
    drop(hs);
    loop {
        std::thread::park();
    }
}

pub fn crash_test<M: Map + Copy>(
    test: &str,
    dir: &str,
    create: fn(&mut View) -> Result<M>,
    open: fn(&View, u64) -> Result<M>,
    rounds: u64,
) {
    let d = ext4_dir(dir);
    let p = d.join("crash.txm");
    {
        let r = Region::create(&p, 1 << 20, opts()).unwrap();
        let mut v = r.view().unwrap();
        v.run(|v| {
            let root = alloc::root(v, 8 * (CRASH_THREADS + 1))?;
            let m = create(v)?;
            v.write(root + 8 * CRASH_THREADS, &m.at())
        })
        .unwrap();
    }
    let mut acked = [0u64; CRASH_THREADS as usize];
    let mut rng = txmap::io::sim::SplitMix(rounds);
    for round in 0..rounds {
        let envs = [("TXMAP_PATH", p.display().to_string())];
        let mut c = child(test, "writer", &envs)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut out = BufReader::new(c.stdout.take().unwrap());
        let wait_for = 1 + rng.next() % 60;
        let mut seen = 0;
        let mut line = String::new();
        let record = |l: &str, acked: &mut [u64]| {
            let Some(x) = l.find("ACK ") else {
                return false;
            };
            let mut it = l[x + 4..]
                .split_whitespace()
                .map(|x| x.parse::<u64>().unwrap());
            let (t, n) = (it.next().unwrap() as usize, it.next().unwrap());
            assert!(n > acked[t], "acknowledgements go forward");
            acked[t] = n;
            true
        };
        while seen < wait_for {
            line.clear();
            if out.read_line(&mut line).unwrap() == 0 {
                let mut err = String::new();
                std::io::Read::read_to_string(&mut c.stderr.take().unwrap(), &mut err).unwrap();
                panic!("child exited early in round {round}: {err}");
            }
            if record(&line, &mut acked) {
                seen += 1;
            }
        }
        std::thread::sleep(Duration::from_micros(rng.next() % 3000));
        c.kill().unwrap(); // SIGKILL
        c.wait().unwrap();
        for l in out.lines() {
            record(&l.unwrap(), &mut acked);
        }
        let r = Region::open(&p, opts()).unwrap();
        let mut v = r.view().unwrap();
        v.begin_read().unwrap();
        let root = alloc::root_offset(&v).unwrap().unwrap();
        let mut model = Model::new();
        for t in 0..CRASH_THREADS {
            let n: u64 = v.read(root + 8 * t).unwrap();
            assert!(
                n >= acked[t as usize] && n <= acked[t as usize] + 1,
                "round {round}: thread {t} did {n} operations, acknowledged {}",
                acked[t as usize]
            );
            acked[t as usize] = n;
            crash_model(t, n, &mut model);
        }
        let m = open(&v, v.read(root + 8 * CRASH_THREADS).unwrap()).unwrap();
        v.commit().unwrap();
        // The structure holds exactly the committed operations and checks;
        // the heap holds the structure's blocks and the root object.
        let heap = check_all_with(&m, &mut v, &model, 1);
        assert!(heap.used_blocks > 0);
    }
}

/// Inserts `n` keys in random order (batches of 50 per transaction), then
/// deletes them in another order, checking against the model after every
/// batch; returns the largest report seen (for depth assertions).
pub fn bulk_test<M: Map + Copy>(create: fn(&mut View) -> Result<M>, n: u32) -> Vec<String> {
    let d = tmpfs_dir("coll-bulk");
    let r = Region::create(&d.join("b.txm"), 1 << 20, opts()).unwrap();
    let mut v = r.view().unwrap();
    let m = v.run(create).unwrap();
    let mut model = Model::new();
    let mut order: Vec<u32> = (0..n).collect();
    let mut rng = txmap::io::sim::SplitMix(n as u64);
    for i in (1..order.len()).rev() {
        order.swap(i, (rng.next() % (i as u64 + 1)) as usize);
    }
    let mut details = Vec::new();
    for chunk in order.chunks(50) {
        v.run(|v| {
            for &i in chunk {
                m.put(v, &key(i), &value(i as u64, (i % 90) as usize))?;
            }
            Ok(())
        })
        .unwrap();
        for &i in chunk {
            model.insert(key(i), value(i as u64, (i % 90) as usize));
        }
        check_all(&m, &mut v, &model);
    }
    v.begin_read().unwrap();
    details.push(m.check(&v).unwrap().detail);
    v.commit().unwrap();
    order.sort_by_key(|&i| (i % 7, i));
    for chunk in order.chunks(50) {
        v.run(|v| {
            for &i in chunk {
                assert!(m.delete(v, &key(i))?);
            }
            Ok(())
        })
        .unwrap();
        for &i in chunk {
            model.remove(&key(i));
        }
        check_all(&m, &mut v, &model);
    }
    v.begin_read().unwrap();
    details.push(m.check(&v).unwrap().detail);
    v.commit().unwrap();
    details
}
