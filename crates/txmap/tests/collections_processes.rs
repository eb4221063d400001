//! The collections shared between processes: several processes (this test
//! binary re-executed with a role) open one region and at once insert into,
//! delete from and search a B+-tree, a CO B-tree and a linear hash table,
//! push onto an array list, and allocate and free heap blocks. Some are
//! killed with SIGKILL at random moments; others go on, and replacements
//! resume where the dead left off.
//!
//! Each process `q` keeps, on a page of its own (so processes do not
//! conflict over it), the number of operations it committed on each
//! structure, updated in the operation's transaction. What a process did is
//! a function of those counts, so any snapshot can be checked exactly:
//! - after each commit, inside a read transaction, a random key of a random
//!   process is looked up and must be present with the right value or
//!   absent, as that process's count in the same snapshot says; a random
//!   array element must be covered by its owner's count; a random process's
//!   live heap block must hold the bytes it wrote;
//! - every few operations (and by the parent while the children run, and
//!   after every kill and recovery), a full check in one snapshot: each
//!   structure's `check`, each map's scan strictly ordered and equal to the
//!   union of every process's expected keys, the array holding exactly the
//!   counted pushes, the heap checking clean and its blocks in use being
//!   exactly those the structures, the counters and the live blocks own;
//! - after a kill, the dead process's counts are its acknowledged commits
//!   or one more (the one it was committing), never fewer.
//!
//! `TXMAP_SEED` changes the random choices of the kill tests.
mod collections_common;
mod common;

use std::collections::BTreeMap;
use std::fs::File;
use std::io::Write;
use std::ops::Bound;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use collections_common as coll;
use common::*;
use txmap::collections::{AnyMap, ArrayList, Kind, Map, alloc};
use txmap::debug::CrashPoint;
use txmap::io::sim::SplitMix;
use txmap::{Region, Result, TxnOptions, View};

/// Processes (slots).
const P: u64 = 4;
/// Structures each process works on: the three maps, the array, the heap.
const KINDS: u64 = 5;
const ARRAY: u64 = 3;
const HEAP: u64 = 4;
const MAPS: [&str; 3] = ["btree", "cobtree", "lhash"];
/// Heap blocks a process keeps alive at once (a ring of slots).
const RING: u64 = 16;
/// Counter page: `KINDS` counts, then the ring of live block offsets.
const C_RING: u64 = 64;
/// A worker runs the full check every this many rounds.
const FULL_EVERY: u64 = 25;
/// Liveness bound (not a speed assertion): a child that takes longer is stuck.
const LIVENESS: Duration = Duration::from_secs(120);

// ---------------------------------------------------------------- what each process does

fn map_key(q: u64, i: u64) -> Vec<u8> {
    let mut k = format!("{q}:{i:06}").into_bytes();
    k.resize(8 + (i * 37 % 150) as usize, b'a' + (i % 26) as u8);
    k
}

/// Value of key `i` of process `q`, version `gen` (0 when put, 1 when replaced).
fn map_value(q: u64, i: u64, generation: u64) -> Vec<u8> {
    let len =
        (i * 97 % 700) as usize + if i.is_multiple_of(11) { 5000 } else { 0 } + generation as usize;
    coll::value(q << 40 | generation << 32 | i, len)
}

/// The value of key `i` of process `q` after its first `n` map operations:
/// operation `i` puts key `i` unless `i % 3 == 2`, when it deletes key
/// `i - 2` instead; operation `i ≡ 1 (mod 3)`, `i ≥ 4`, also replaces key `i - 3`.
fn expected(q: u64, i: u64, n: u64) -> Option<Vec<u8>> {
    match i % 3 {
        0 if i < n && n <= i + 2 => Some(map_value(q, i, 0)),
        1 if i < n => Some(map_value(q, i, u64::from(n > i + 3))),
        _ => None,
    }
}

fn map_op(m: &AnyMap, v: &mut View, q: u64, i: u64) -> Result<()> {
    // Inside the transaction, the process's own earlier commits are all
    // visible: what it deletes or replaces must be there, what it adds not.
    match i % 3 {
        2 => assert!(
            m.delete(v, &map_key(q, i - 2))?,
            "own key {q}:{} lost",
            i - 2
        ),
        _ => {
            assert!(
                !m.put(v, &map_key(q, i), &map_value(q, i, 0))?,
                "new key present"
            );
            if i % 3 == 1 && i >= 4 {
                let k = map_key(q, i - 3);
                assert!(
                    m.put(v, &k, &map_value(q, i - 3, 1))?,
                    "own key {q}:{} lost",
                    i - 3
                );
            }
        }
    }
    Ok(())
}

fn element(q: u64, i: u64) -> u64 {
    q << 32 | i
}

fn block_size(i: u64) -> u64 {
    8 + i * 131 % 2000 + if i.is_multiple_of(13) { 6000 } else { 0 }
}

fn block_bytes(q: u64, i: u64) -> Vec<u8> {
    coll::value(1 << 63 | q << 32 | i, block_size(i) as usize)
}

/// The heap operation `i` that last filled ring slot `j` among the first `n`.
fn ring_owner(j: u64, n: u64) -> Option<u64> {
    (n > j).then(|| j + (n - 1 - j) / RING * RING)
}

/// Checks that the live block in ring slot `j` of process `q` (count `n`) holds its bytes.
fn check_block(v: &View, q: u64, c: u64, j: u64, n: u64) -> Result<()> {
    let off: u64 = v.read(c + C_RING + 8 * j)?;
    match ring_owner(j, n) {
        None => assert_eq!(off, 0, "process {q} ring slot {j} should be empty"),
        Some(i) => {
            assert!(alloc::usable_size(v, off)? >= block_size(i));
            assert!(
                v.slice(off, block_size(i) as usize)? == &block_bytes(q, i)[..],
                "process {q}: block of operation {i} at {off} was overwritten"
            );
        }
    }
    Ok(())
}

/// Operation `i` on the heap: frees the block in ring slot `i % RING` (after
/// checking it) and allocates and fills a new one there.
fn heap_op(v: &mut View, q: u64, c: u64, i: u64) -> Result<()> {
    let j = i % RING;
    check_block(v, q, c, j, i)?;
    let old: u64 = v.read(c + C_RING + 8 * j)?;
    if old != 0 {
        alloc::free(v, old)?;
    }
    let off = alloc::alloc(v, block_size(i))?;
    v.slice_mut(off, block_size(i) as usize)?
        .copy_from_slice(&block_bytes(q, i));
    v.write(c + C_RING + 8 * j, &off)
}

// ---------------------------------------------------------------- the shared structures

#[derive(Clone, Copy)]
struct Shared {
    maps: [AnyMap; 3],
    array: ArrayList,
    /// Each process's counter page.
    counters: [u64; P as usize],
}

fn create(p: &Path) {
    let r = Region::create(p, 1 << 20, coll::opts()).unwrap();
    r.view()
        .unwrap()
        .run(|v| {
            let root = alloc::root(v, 8 * P)?;
            for q in 0..P {
                let c = alloc::alloc(v, 4080)?; // a page of its own
                v.write(root + 8 * q, &c)?;
            }
            for (name, kind) in MAPS
                .iter()
                .zip([Kind::BTree, Kind::CoBTree, Kind::LinearHash])
            {
                AnyMap::create_named(v, name, kind)?;
            }
            let a = ArrayList::create(v, 8)?;
            alloc::register(v, "array", Kind::Array, a.at)
        })
        .unwrap();
    r.close().unwrap();
}

fn open_shared(v: &mut View) -> Shared {
    v.begin_read().unwrap();
    let root = alloc::root_offset(v).unwrap().unwrap();
    let maps = MAPS.map(|n| AnyMap::open_named(v, n).unwrap().unwrap());
    let a = alloc::lookup(v, "array").unwrap().unwrap();
    let sh = Shared {
        maps,
        array: ArrayList::open(v, a.at).unwrap(),
        counters: std::array::from_fn(|q| v.read(root + 8 * q as u64).unwrap()),
    };
    v.commit().unwrap();
    sh
}

impl Shared {
    /// Every process's counts, as of the current snapshot.
    fn counts(&self, v: &View) -> Result<Vec<[u64; KINDS as usize]>> {
        self.counters
            .iter()
            .map(|&c| {
                let mut n = [0; KINDS as usize];
                for (k, x) in n.iter_mut().enumerate() {
                    *x = v.read(c + 8 * k as u64)?;
                }
                Ok(n)
            })
            .collect()
    }

    /// One spot check in the current snapshot.
    fn spot_check(&self, v: &View, rng: &mut SplitMix) -> Result<()> {
        let counts = self.counts(v)?;
        let q = rng.next() % P;
        let k = rng.next() % KINDS;
        let n = counts[q as usize][k as usize];
        match k {
            ARRAY => {
                let len = self.array.len(v)?;
                assert_eq!(len, counts.iter().map(|c| c[ARRAY as usize]).sum::<u64>());
                if len > 0 {
                    let e: u64 = self.array.get_pod(v, rng.next() % len)?;
                    let (owner, i) = (e >> 32, e & 0xffff_ffff);
                    assert!(
                        owner < P && i < counts[owner as usize][ARRAY as usize],
                        "array element {e:#x} not counted by its owner"
                    );
                }
            }
            HEAP => check_block(v, q, self.counters[q as usize], rng.next() % RING, n)?,
            _ if n > 0 => {
                let i = rng.next() % n;
                let got = self.maps[k as usize].get(v, &map_key(q, i))?;
                assert!(
                    got == expected(q, i, n),
                    "{}: key {q}:{i} after {n} operations: found {:?} bytes",
                    MAPS[k as usize],
                    got.map(|g| g.len())
                );
            }
            _ => {}
        }
        Ok(())
    }

    /// The full check of one snapshot; returns the counts it checked against.
    fn full_check(&self, v: &View) -> Result<Vec<[u64; KINDS as usize]>> {
        let counts = self.counts(v)?;
        let mut owned = 1 + P; // the root object and the counter pages
        for (k, m) in self.maps.iter().enumerate() {
            let rep = m.check(v)?;
            owned += rep.blocks;
            let mut want = BTreeMap::new();
            for (q, n) in counts.iter().enumerate() {
                let (q, n) = (q as u64, n[k]);
                for i in 0..n {
                    if let Some(val) = expected(q, i, n) {
                        want.insert(map_key(q, i), val);
                    }
                }
            }
            let mut got: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
            m.scan(v, Bound::Unbounded, Bound::Unbounded, &mut |key, val| {
                if let Some((last, _)) = got.last() {
                    assert!(last.as_slice() < key, "{}: scan out of order", MAPS[k]);
                }
                got.push((key.to_vec(), val.to_vec()));
                Ok(true)
            })?;
            assert_eq!(rep.entries, want.len() as u64, "{}: entries", MAPS[k]);
            assert!(
                got.iter().map(|(k, v)| (k, v)).eq(want.iter()),
                "{}: content differs from the union of the processes' commits ({} entries, {} expected)",
                MAPS[k],
                got.len(),
                want.len()
            );
        }
        let a = self.array.check(v)?;
        owned += 1 + a.segments;
        let mut elems = (0..a.len)
            .map(|i| self.array.get_pod::<u64>(v, i))
            .collect::<Result<Vec<_>>>()?;
        elems.sort_unstable();
        let mut want: Vec<u64> = (0..P)
            .flat_map(|q| (0..counts[q as usize][ARRAY as usize]).map(move |i| element(q, i)))
            .collect();
        want.sort_unstable();
        assert!(
            elems == want,
            "array: {} elements, {} pushes counted",
            elems.len(),
            want.len()
        );
        for (q, &c) in self.counters.iter().enumerate() {
            let n = counts[q][HEAP as usize];
            for j in 0..RING {
                check_block(v, q as u64, c, j, n)?;
            }
            owned += n.min(RING);
        }
        let heap = alloc::check(v)?;
        assert_eq!(
            heap.used_blocks, owned,
            "heap blocks in use vs blocks owned by the structures, counters and live blocks"
        );
        Ok(counts)
    }
}

// ---------------------------------------------------------------- children

fn env(k: &str) -> String {
    std::env::var(k).unwrap_or_else(|_| panic!("{k} not set"))
}

/// A worker: process slot TXMAP_SLOT resumes from its counts in the region
/// and runs operations until each count reaches TXMAP_QUOTA (0: until
/// killed), one transaction each (snapshot isolation if TXMAP_SI is set),
/// appending "kind count" to TXMAP_ACK after each commit.
fn worker() {
    let mut opts = coll::opts();
    if let Ok(c) = std::env::var("TXMAP_CKPT") {
        opts.checkpoint_bytes = c.parse().unwrap();
    }
    if let Ok(c) = std::env::var("TXMAP_CRASH") {
        let (p, nth) = c.split_once(':').unwrap();
        let p: u32 = p.parse().unwrap();
        let point = CrashPoint::from_u32(p).unwrap();
        txmap::debug::crash_at(point, nth.parse().unwrap());
    }
    let r = Region::open(env("TXMAP_PATH").as_ref(), opts).unwrap();
    let mut v = r.view().unwrap();
    let q: u64 = env("TXMAP_SLOT").parse().unwrap();
    let quota: u64 = env("TXMAP_QUOTA").parse().unwrap();
    let txn = if std::env::var("TXMAP_SI").is_ok() {
        TxnOptions::SNAPSHOT
    } else {
        TxnOptions::default()
    };
    let mut acks = File::options()
        .create(true)
        .append(true)
        .open(env("TXMAP_ACK"))
        .unwrap();
    let mut rng = SplitMix(u64::from(std::process::id()) << 8 | q);
    let sh = open_shared(&mut v);
    let c = sh.counters[q as usize];
    for round in 0.. {
        let mut busy = false;
        for k in 0..KINDS {
            let n = v
                .run_with(txn, |v| {
                    let i: u64 = v.read(c + 8 * k)?;
                    if quota > 0 && i >= quota {
                        return Ok(None);
                    }
                    match k {
                        ARRAY => {
                            sh.array.push_pod(v, &element(q, i))?;
                        }
                        HEAP => heap_op(v, q, c, i)?,
                        _ => map_op(&sh.maps[k as usize], v, q, i)?,
                    }
                    v.write(c + 8 * k, &(i + 1))?;
                    Ok(Some(i + 1))
                })
                .unwrap();
            if let Some(n) = n {
                busy = true;
                acks.write_all(format!("{k} {n}\n").as_bytes()).unwrap();
            }
        }
        v.begin_read().unwrap();
        sh.spot_check(&v, &mut rng).unwrap();
        if round % FULL_EVERY == FULL_EVERY - 1 || !busy {
            sh.full_check(&v).unwrap();
        }
        v.commit().expect("a read-only transaction aborted");
        if !busy {
            break;
        }
    }
}

// ---------------------------------------------------------------- parent side

struct Proc {
    child: Child,
    err: PathBuf,
    what: String,
}

impl Proc {
    fn stderr(&self) -> String {
        std::fs::read_to_string(&self.err).unwrap_or_default()
    }
    /// Panics (with its stderr) if the child failed; true if it exited.
    fn exited(&mut self) -> bool {
        match self.child.try_wait().unwrap() {
            None => false,
            Some(s) => {
                assert!(s.success(), "{} failed ({s}): {}", self.what, self.stderr());
                true
            }
        }
    }
    /// SIGKILLs the child unless it already exited (successfully).
    fn kill(&mut self) {
        if !self.exited() {
            let _ = self.child.kill();
            let s = self.child.wait().unwrap();
            // It may have finished (or failed) just before the signal.
            assert!(
                s.success() || s.signal() == Some(9),
                "{} failed ({s}): {}",
                self.what,
                self.stderr()
            );
        }
    }
    fn wait_ok(&mut self) {
        let start = Instant::now();
        while !self.exited() {
            if start.elapsed() > LIVENESS {
                let _ = self.child.kill();
                panic!("{} did not finish within {LIVENESS:?}: stuck", self.what);
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

struct Run<'a> {
    test: &'a str,
    dir: &'a TestDir,
}

impl Run<'_> {
    fn path(&self) -> PathBuf {
        self.dir.join("c.txm")
    }
    fn ack(&self, q: u64) -> PathBuf {
        self.dir.join(&format!("ack-{q}"))
    }
    fn spawn(&self, q: u64, quota: u64, si: bool) -> Proc {
        self.spawn_with(q, quota, si, &[])
    }
    fn spawn_with(&self, q: u64, quota: u64, si: bool, more: &[(&str, String)]) -> Proc {
        let mut envs = vec![
            ("TXMAP_PATH", self.path().display().to_string()),
            ("TXMAP_SLOT", q.to_string()),
            ("TXMAP_QUOTA", quota.to_string()),
            ("TXMAP_ACK", self.ack(q).display().to_string()),
        ];
        if si {
            envs.push(("TXMAP_SI", "1".into()));
        }
        envs.extend(more.iter().cloned());
        let err = self.dir.join(&format!("err-{q}-{}", next_tag()));
        let child = child(self.test, "worker", &envs)
            .stdout(Stdio::null())
            .stderr(File::create(&err).unwrap())
            .spawn()
            .unwrap();
        Proc {
            child,
            err,
            what: format!("process {q}"),
        }
    }
    /// The last acknowledged count of each kind, and how many acks there are.
    fn acks(&self, q: u64) -> ([u64; KINDS as usize], usize) {
        let s = std::fs::read_to_string(self.ack(q)).unwrap_or_default();
        let mut last = [0; KINDS as usize];
        let mut lines = 0;
        // Whole lines only (one write each, but a kill could still split one).
        let whole = s.rfind('\n').map_or("", |i| &s[..i]);
        for l in whole.lines() {
            let (k, n) = l.split_once(' ').unwrap();
            let (k, n): (usize, u64) = (k.parse().unwrap(), n.parse().unwrap());
            assert!(n > last[k], "acknowledgements go forward");
            last[k] = n;
            lines += 1;
        }
        (last, lines)
    }
    /// Opens the region, checks process `q`'s counts against its acks (for
    /// each `q` in `dead`) and runs the full check; returns the counts.
    fn check(&self, dead: &[u64], alone: bool) -> Vec<[u64; KINDS as usize]> {
        // After every process died: what they left, for a failure's message.
        let crash = if alone {
            format!(
                "\nleft by the crash: {}",
                describe_crash_state(&self.path())
            )
        } else {
            String::new()
        };
        let r = Region::open(&self.path(), coll::opts())
            .unwrap_or_else(|e| panic!("recovery failed: {e}{crash}"));
        if alone {
            assert!(r.stats().opened_alone, "a killed process still counted");
        }
        let mut v = r.view().unwrap();
        let sh = open_shared(&mut v);
        v.begin_read().unwrap();
        let counts = sh
            .full_check(&v)
            .unwrap_or_else(|e| panic!("full check: {e}{crash}"));
        v.commit().unwrap();
        for &q in dead {
            let (acked, _) = self.acks(q);
            let c = counts[q as usize];
            let extra: u64 = (0..KINDS as usize)
                .map(|k| {
                    assert!(
                        c[k] == acked[k] || c[k] == acked[k] + 1,
                        "process {q}, kind {k}: {} committed, {} acknowledged{crash}",
                        c[k],
                        acked[k]
                    );
                    c[k] - acked[k]
                })
                .sum();
            assert!(
                extra <= 1,
                "process {q}: {extra} unacknowledged commits{crash}"
            );
        }
        r.close().unwrap();
        counts
    }
}

fn next_tag() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    N.fetch_add(1, Ordering::Relaxed)
}

fn wait_acks(run: &Run, q: u64, at_least: usize, procs: &mut [Proc]) {
    let start = Instant::now();
    while run.acks(q).1 < at_least {
        for p in procs.iter_mut() {
            p.exited();
        }
        assert!(
            start.elapsed() < LIVENESS,
            "process {q} never made {at_least} commits"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Four processes insert, delete and search each structure at once, two of
/// them under snapshot isolation; the parent, a fifth process, runs the
/// full check in snapshots while they commit. At the end every structure
/// holds exactly the union of the four processes' operations.
#[test]
fn processes_insert_and_search_each_structure_at_once() {
    if role().is_some() {
        return worker();
    }
    const N: u64 = 150;
    let d = tmpfs_dir("cp-at-once");
    let run = Run {
        test: "processes_insert_and_search_each_structure_at_once",
        dir: &d,
    };
    create(&run.path());
    let mut procs: Vec<Proc> = (0..P).map(|q| run.spawn(q, N, q % 2 == 1)).collect();
    {
        let r = Region::open(&run.path(), coll::opts()).unwrap();
        let mut v = r.view().unwrap();
        let sh = open_shared(&mut v);
        let mut checks = 0;
        loop {
            let done = procs.iter_mut().all(|p| p.exited());
            v.begin_read().unwrap();
            let counts = sh.full_check(&v).unwrap();
            v.commit().unwrap();
            checks += 1;
            if done {
                assert!(counts.iter().all(|c| c.iter().all(|&n| n == N)));
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        eprintln!("{checks} full checks by the parent");
    }
    for p in &mut procs {
        p.wait_ok();
    }
    let counts = run.check(&[], true);
    assert!(counts.iter().all(|c| c.iter().all(|&n| n == N)));
}

/// Four processes work on every structure; one is SIGKILLed mid-run and the
/// others continue; the parent checks the dead one's counts against its
/// acknowledgements and everything in a snapshot, then a replacement
/// resumes the dead one's work. Then every process is killed at once, the
/// region is recovered by the next open and checked, and all four resume to
/// the end, which is checked exactly.
#[test]
fn sigkill_processes_mid_run_then_recover_and_resume() {
    if role().is_some() {
        return worker();
    }
    const N: u64 = 120;
    let test = "sigkill_processes_mid_run_then_recover_and_resume";
    let mut rng = SplitMix(seed(test));
    let d = tmpfs_dir("cp-kill");
    let run = Run { test, dir: &d };
    create(&run.path());
    let victim = rng.next() % P;
    let mut procs: Vec<Proc> = (0..P)
        .map(|q| run.spawn(q, if q == victim { 0 } else { N }, q % 2 == 1))
        .collect();
    // One process dies; the others go on.
    wait_acks(&run, victim, 20 + (rng.next() % 200) as usize, &mut procs);
    std::thread::sleep(Duration::from_micros(rng.next() % 2000));
    procs[victim as usize].kill();
    let during = run.check(&[victim], false);
    eprintln!("victim {victim} killed at {:?}", during[victim as usize]);
    procs[victim as usize] = run.spawn(victim, N, victim % 2 == 1);
    // A few more commits by the replacement, then everyone dies.
    let (_, before) = run.acks(victim);
    wait_acks(
        &run,
        victim,
        before + 1 + (rng.next() % 100) as usize,
        &mut procs,
    );
    std::thread::sleep(Duration::from_micros(rng.next() % 2000));
    for p in &mut procs {
        p.kill();
    }
    // Nobody has the region open: this open recovers it from the log.
    let after = run.check(&(0..P).collect::<Vec<_>>(), true);
    eprintln!("all killed at {after:?}");
    // Everyone resumes and finishes.
    let mut procs: Vec<Proc> = (0..P).map(|q| run.spawn(q, N, q % 2 == 1)).collect();
    for p in &mut procs {
        p.wait_ok();
    }
    let counts = run.check(&[], true);
    assert!(counts.iter().all(|c| c.iter().all(|&n| n == N)));
}

/// One process at a time dies at an exact point of the commit, sync or
/// checkpoint path (holding the lock there) while the other three go on
/// working on every structure: they must repair what it left and finish;
/// then the region is recovered and checked, the dead process's counts
/// against its acknowledgements. A round per crash point, on one region;
/// at the end all four finish and the content is checked exactly.
#[test]
fn processes_die_at_crash_points_while_the_others_continue() {
    if role().is_some() {
        return worker();
    }
    let test = "processes_die_at_crash_points_while_the_others_continue";
    let mut rng = SplitMix(seed(test));
    let d = tmpfs_dir("cp-points");
    let run = Run { test, dir: &d };
    create(&run.path());
    // Small checkpoints, so that checkpoints and log resets happen often.
    let ckpt = ("TXMAP_CKPT", (64u64 << 10).to_string());
    let mut reached = Vec::new();
    for (round, point) in CrashPoint::ALL.iter().enumerate() {
        let victim = round as u64 % P;
        let quota = 40 * (round as u64 + 1);
        // Checkpoints and log resets come seldom: die at one of the first.
        let nth = 1 + rng.next() % if round < 4 { 20 } else { 3 };
        let crash = ("TXMAP_CRASH", format!("{}:{nth}", *point as u32));
        let (_, acked_before) = run.acks(victim);
        let mut victim_proc = run.spawn_with(victim, 0, victim % 2 == 1, &[ckpt.clone(), crash]);
        let mut others: Vec<Proc> = (0..P)
            .filter(|&q| q != victim)
            .map(|q| run.spawn_with(q, quota, q % 2 == 1, std::slice::from_ref(&ckpt)))
            .collect();
        // The victim dies by itself, or is killed once the others are done.
        let start = Instant::now();
        let hit = loop {
            if let Some(s) = victim_proc.child.try_wait().unwrap() {
                assert_eq!(
                    s.signal(),
                    Some(9),
                    "victim at {point:?} ended otherwise: {}",
                    victim_proc.stderr()
                );
                break true;
            }
            if others.iter_mut().all(|p| p.exited()) {
                victim_proc.kill();
                break false;
            }
            assert!(start.elapsed() < LIVENESS, "round {round} never ended");
            std::thread::sleep(Duration::from_millis(2));
        };
        for p in &mut others {
            p.wait_ok();
        }
        let counts = run.check(&[victim], true);
        let commits = run.acks(victim).1 - acked_before;
        eprintln!(
            "{point:?} (hit {nth}): reached {hit} after {commits} commits, counts {counts:?}"
        );
        // Every commit passes the first three points once: a victim that
        // made `nth` commits must have died there.
        assert!(
            hit || round >= 3 || (commits as u64) < nth,
            "{point:?}: {commits} commits, no death at the {nth}th"
        );
        if hit {
            reached.push(*point);
        }
    }
    assert!(!reached.is_empty(), "no crash point reached");
    let counts = run.check(&[], true);
    let end = counts.iter().flatten().max().unwrap() + 10;
    let mut procs: Vec<Proc> = (0..P).map(|q| run.spawn(q, end, q % 2 == 1)).collect();
    for p in &mut procs {
        p.wait_ok();
    }
    let counts = run.check(&[], true);
    assert!(counts.iter().all(|c| c.iter().all(|&n| n == end)));
}
