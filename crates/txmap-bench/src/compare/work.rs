//! The workloads, each one run of one store. Multi-process runs re-execute
//! this program with the hidden `--peer-worker SPEC` argument: the worker
//! opens the store, prints `ready`, waits for `go`, runs, and prints
//! `done <ns> <write_bytes>` and a line of its most expensive latencies.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::Instant;

use txmap_peers::{Config, Durability, Op, Peer, Session, Store, stores};

use crate::report::Res;

/// How many of a run's most expensive operations are kept.
pub const TOP: usize = 1000;

/// Longest a single run's loop may take, s: slow stores (PMDK on a plain
/// file takes milliseconds per commit) stop early and report the rate of
/// what they did. Passed to worker processes in `TXMAP_BENCH_CAP`.
static CAP_SECS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(u64::MAX);

pub fn set_cap(secs: u64) {
    CAP_SECS.store(secs, std::sync::atomic::Ordering::Relaxed);
}

fn cap() -> std::time::Duration {
    let s = std::env::var("TXMAP_BENCH_CAP")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| CAP_SECS.load(std::sync::atomic::Ordering::Relaxed));
    std::time::Duration::from_secs(s)
}

/// xorshift64*: keys without a dependency, the same in every run.
pub struct Rng(u64);
impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    pub fn fill(&mut self, b: &mut [u8]) {
        for c in b.chunks_mut(8) {
            let x = self.next().to_le_bytes();
            c.copy_from_slice(&x[..c.len()]);
        }
    }
}

/// Bytes this process has passed to write system calls so far (`wchar` of
/// /proc/self/io). Stores that write through a shared mapping (PMDK) do not
/// show here. (`write_bytes` is no use: it counts dirtied page-cache folios,
/// and on ext4 with large folios one small append to a synced log re-dirties
/// up to 2 MiB.)
pub fn write_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/io")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("wchar:").map(|v| v.trim().parse().ok()))
                .flatten()
        })
        .unwrap_or(0)
}

/// Bytes written to the block device holding `dir` so far, by everyone
/// (sectors written, from /sys/dev/block/MAJ:MIN/stat); None if unknown.
pub fn device_bytes(dir: &Path) -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    let dev = std::fs::metadata(dir).ok()?.dev();
    let (major, minor) = (libc::major(dev), libc::minor(dev));
    let stat = std::fs::read_to_string(format!("/sys/dev/block/{major}:{minor}/stat")).ok()?;
    let sectors: u64 = stat.split_whitespace().nth(6)?.parse().ok()?;
    Some(sectors * 512)
}

pub fn config(
    dir: &Path,
    durability: Durability,
    keys: u64,
    bytes_per_key: u64,
    shared: bool,
) -> Config {
    Config {
        shared,
        expected_keys: keys,
        expected_bytes: keys * bytes_per_key,
        ..Config::new(dir, durability)
    }
}

/// Result of an insert run.
pub struct Inserts {
    pub secs: f64,
    /// Inserts done (fewer than asked if the time cap stopped the run).
    pub done: usize,
    /// Bytes passed to write calls by the inserting processes.
    pub write_bytes: u64,
    /// Bytes of log records the store wrote meanwhile, if it can tell
    /// (`Store::logged_bytes`; 1 process only).
    pub logged_bytes: Option<u64>,
    /// Bytes the device wrote meanwhile (the whole machine's writes).
    pub device_bytes: Option<u64>,
    /// Most expensive insert latencies, ns, most expensive first.
    pub top: Vec<u64>,
    pub retries: u64,
}

fn keep_top(lat: &mut Vec<u64>) {
    lat.sort_unstable_by(|a, b| b.cmp(a));
    lat.truncate(TOP);
}

/// `n` durable inserts of random 8-byte keys with 8-byte values, each its
/// own transaction, on an open session.
/// Stops early at the time cap; the latencies say how many were done.
pub fn insert_loop(s: &mut dyn Session, n: usize, seed: u64) -> Res<(Vec<u64>, u64)> {
    let mut rng = Rng::new(seed);
    let mut lat = Vec::with_capacity(n);
    let mut retries = 0u64;
    let (start, cap) = (Instant::now(), cap());
    for i in 0..n {
        if start.elapsed() > cap {
            break;
        }
        let k = rng.next().to_be_bytes();
        let v = (i as u64).to_le_bytes();
        let t = Instant::now();
        retries += u64::from(s.write(&[Op::Put(&k, &v)])?);
        lat.push(t.elapsed().as_nanos() as u64);
    }
    Ok((lat, retries))
}

/// Durable random inserts by `procs` processes (1: this one) into a fresh store.
pub fn inserts(p: &Peer, dir: &Path, n: usize, procs: usize, seed: u64) -> Res<Inserts> {
    let cfg = config(dir, Durability::Durable, n as u64, 64, procs > 1);
    let dev0 = device_bytes(dir);
    let dev = || Some(device_bytes(dir)? - dev0?);
    if procs == 1 {
        let before = write_bytes();
        let store = (p.open)(&cfg)?;
        let mut s = store.session()?;
        let t = Instant::now();
        let (mut lat, retries) = insert_loop(&mut *s, n, seed)?;
        let secs = t.elapsed().as_secs_f64();
        let logged_bytes = store.logged_bytes();
        drop(s);
        drop(store);
        let done = lat.len();
        keep_top(&mut lat);
        return Ok(Inserts {
            secs,
            done,
            write_bytes: write_bytes() - before,
            logged_bytes,
            device_bytes: dev(),
            top: lat,
            retries,
        });
    }
    let store = (p.open)(&cfg)?;
    let specs: Vec<String> = (0..procs)
        .map(|i| {
            format!(
                "insert|{}|{}|{}|{}",
                p.id,
                dir.display(),
                n / procs,
                seed.wrapping_add(i as u64 * 7919)
            )
        })
        .collect();
    let done = run_workers(&specs)?;
    drop(store);
    let secs = done.secs;
    let mut top: Vec<u64> = done
        .reports
        .iter()
        .flat_map(|r| r.top.iter().copied())
        .collect();
    keep_top(&mut top);
    Ok(Inserts {
        secs,
        done: done.reports.iter().map(|r| r.done as usize).sum(),
        write_bytes: done.reports.iter().map(|r| r.write_bytes).sum(),
        logged_bytes: None,
        device_bytes: dev(),
        top,
        retries: done.reports.iter().map(|r| r.retries).sum(),
    })
}

struct WorkerReport {
    done: u64,
    write_bytes: u64,
    retries: u64,
    top: Vec<u64>,
}

struct Done {
    secs: f64,
    reports: Vec<WorkerReport>,
}

struct Worker {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Worker {
    fn line(&mut self) -> Res<String> {
        let mut l = String::new();
        if self.stdout.read_line(&mut l)? == 0 {
            return Err("a worker process ended without reporting".into());
        }
        if let Some(e) = l.strip_prefix("error ") {
            return Err(format!("worker: {}", e.trim()).into());
        }
        Ok(l.trim().to_string())
    }
}

/// Starts one worker per spec, starts them together, waits for all.
fn run_workers(specs: &[String]) -> Res<Done> {
    let exe = std::env::current_exe()?;
    let mut ws = Vec::new();
    for spec in specs {
        let mut child = Command::new(&exe)
            .env("TXMAP_BENCH_CAP", cap().as_secs().to_string())
            .arg("--peer-worker")
            .arg(spec)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()?;
        let stdin = child.stdin.take().ok_or("no worker stdin")?;
        let stdout = BufReader::new(child.stdout.take().ok_or("no worker stdout")?);
        ws.push(Worker {
            child,
            stdin,
            stdout,
        });
    }
    let result = (|| -> Res<Done> {
        for w in &mut ws {
            let l = w.line()?;
            if l != "ready" {
                return Err(format!("worker said {l:?}, not ready").into());
            }
        }
        let t = Instant::now();
        for w in &mut ws {
            writeln!(w.stdin, "go")?;
            w.stdin.flush()?;
        }
        let mut reports = Vec::new();
        for w in &mut ws {
            let l = w.line()?;
            let f: Vec<u64> = l
                .strip_prefix("done ")
                .ok_or_else(|| format!("worker said {l:?}"))?
                .split_whitespace()
                .map(|x| x.parse().unwrap_or(0))
                .collect();
            let top = w
                .line()?
                .split_whitespace()
                .map(|x| x.parse().unwrap_or(0))
                .collect();
            reports.push(WorkerReport {
                done: f.get(3).copied().unwrap_or(0),
                write_bytes: f.get(1).copied().unwrap_or(0),
                retries: f.get(2).copied().unwrap_or(0),
                top,
            });
        }
        Ok(Done {
            secs: t.elapsed().as_secs_f64(),
            reports,
        })
    })();
    for w in &mut ws {
        if result.is_err() {
            let _ = w.child.kill();
        }
        let _ = w.child.wait();
    }
    result
}

/// Tells the parent this worker is ready, waits for its `go`; returns
/// stdout for the report.
fn ready_then_wait_for_go() -> Res<std::io::StdoutLock<'static>> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "ready")?;
    out.flush()?;
    let mut go = String::new();
    std::io::stdin().lock().read_line(&mut go)?;
    Ok(out)
}

/// Entry point of a `--peer-worker` process; returns its exit code.
pub fn worker(spec: &str) -> i32 {
    match worker_inner(spec) {
        Ok(()) => 0,
        Err(e) => {
            println!("error {}", e.to_string().replace('\n', " "));
            1
        }
    }
}

fn worker_inner(spec: &str) -> Res<()> {
    let f: Vec<&str> = spec.split('|').collect();
    let bad = || format!("bad worker spec {spec:?}");
    if f.first() == Some(&"abc") {
        return abc_worker(&f).map_err(|e| format!("{e} (spec {spec:?})").into());
    }
    if f.first() == Some(&"memread") {
        return super::shared::reader_worker(&f).map_err(|e| format!("{e} (spec {spec:?})").into());
    }
    if f.first() == Some(&"redb") {
        return redb_worker(&f).map_err(|e| format!("{e} (spec {spec:?})").into());
    }
    let [task, id, dir, n, seed] = f[..] else {
        return Err(bad().into());
    };
    if task != "insert" {
        return Err(bad().into());
    }
    let n: usize = n.parse().map_err(|_| bad())?;
    let seed: u64 = seed.parse().map_err(|_| bad())?;
    let p = stores()
        .into_iter()
        .find(|p| p.id == id)
        .ok_or_else(|| format!("no store {id}"))?;
    let before = write_bytes();
    let cfg = Config {
        create: false,
        ..config(Path::new(dir), Durability::Durable, n as u64, 64, true)
    };
    let store: Box<dyn Store> = (p.open)(&cfg)?;
    let mut s = store.session()?;
    let mut out = ready_then_wait_for_go()?;
    let t = Instant::now();
    let (mut lat, retries) = insert_loop(&mut *s, n, seed)?;
    let ns = t.elapsed().as_nanos();
    drop(s);
    drop(store);
    let done = lat.len();
    keep_top(&mut lat);
    writeln!(out, "done {ns} {} {retries} {done}", write_bytes() - before)?;
    let top: Vec<String> = lat.iter().map(|x| x.to_string()).collect();
    writeln!(out, "{}", top.join(" "))?;
    out.flush()?;
    Ok(())
}

/// One transaction putting `n` random entries (8-byte keys and values).
pub fn bulk_load(p: &Peer, dir: &Path, n: usize, seed: u64) -> Res<f64> {
    let store = (p.open)(&config(dir, Durability::Durable, n as u64, 64, false))?;
    let mut s = store.session()?;
    let mut rng = Rng::new(seed);
    let kv: Vec<([u8; 8], [u8; 8])> = (0..n)
        .map(|i| (rng.next().to_be_bytes(), (i as u64).to_le_bytes()))
        .collect();
    let ops: Vec<Op> = kv.iter().map(|(k, v)| Op::Put(k, v)).collect();
    let t = Instant::now();
    s.write(&ops)?;
    Ok(t.elapsed().as_secs_f64())
}

/// Durable one-put commits per second from `threads` committers for `secs`,
/// and retries (conflicts, deadlocks, busy) per commit.
pub fn committers(p: &Peer, dir: &Path, threads: usize, secs: f64) -> Res<(f64, f64)> {
    let store = (p.open)(&config(dir, Durability::Durable, 100_000, 64, false))?;
    let store = &*store;
    let stop = std::sync::atomic::AtomicBool::new(false);
    let start = std::sync::Barrier::new(threads + 1);
    let (commits, retries, elapsed) = std::thread::scope(|sc| -> Res<(u64, u64, f64)> {
        let hs: Vec<_> = (0..threads)
            .map(|t| {
                let (stop, start) = (&stop, &start);
                sc.spawn(move || -> Result<(u64, u64), String> {
                    let s = store.session();
                    start.wait();
                    let mut s = s.map_err(|e| e.to_string())?;
                    let mut rng = Rng::new(t as u64 + 1);
                    let (mut n, mut r) = (0u64, 0u64);
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        let k = rng.next().to_be_bytes();
                        r += u64::from(s.write(&[Op::Put(&k, &k)]).map_err(|e| e.to_string())?);
                        n += 1;
                    }
                    Ok((n, r))
                })
            })
            .collect();
        start.wait();
        let t = Instant::now();
        std::thread::sleep(std::time::Duration::from_secs_f64(secs));
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let (mut n, mut r) = (0, 0);
        let mut err = None;
        for h in hs {
            match h.join() {
                Ok(Ok((a, b))) => {
                    n += a;
                    r += b;
                }
                Ok(Err(e)) => err = Some(e),
                Err(_) => err = Some("a committer thread panicked".into()),
            }
        }
        let el = t.elapsed().as_secs_f64();
        match err {
            Some(e) => Err(e.into()),
            None => Ok((n, r, el)),
        }
    })?;
    Ok((
        commits as f64 / elapsed,
        retries as f64 / commits.max(1) as f64,
    ))
}

/// The redb benchmark's steps, in order, for one store.
pub const REDB_STEPS: [&str; 8] = [
    "bulk load",
    "individual writes",
    "batch writes",
    "random reads",
    "random reads (2 threads)",
    "range reads",
    "removals",
    "file size",
];

/// Sizes of the redb workload.
#[derive(Clone, Copy)]
pub struct RedbSizes {
    pub entries: usize,
    pub individual: usize,
    pub batches: usize,
    pub batch: usize,
    pub ranges: usize,
    pub range_len: usize,
}

/// What a capped run of the redb workload measured.
pub struct RedbRun {
    /// Seconds per step (MiB for the file size) for the steps done, in
    /// order; `None` where the store has no such operation.
    pub steps: Vec<Option<f64>>,
    /// Reads that did not find their value, and the like.
    pub problems: Vec<String>,
    /// Set when the deadline stopped the run before its last step.
    pub stopped: bool,
}

/// Runs the redb workload on a fresh store in a worker process, which the
/// deadline kills: the workload's bulk load and removals are single
/// transactions that a time cap inside the loop cannot stop (PMDK's bulk
/// load of 500,000 entries ran over 25 minutes here). The steps done before
/// the deadline are kept.
pub fn redb_capped(
    p: &Peer,
    dir: &Path,
    z: RedbSizes,
    seed: u64,
    deadline: std::time::Duration,
) -> Res<RedbRun> {
    let spec = format!(
        "redb|{}|{}|{},{},{},{},{},{}|{seed}",
        p.id,
        dir.display(),
        z.entries,
        z.individual,
        z.batches,
        z.batch,
        z.ranges,
        z.range_len
    );
    let mut child = Command::new(std::env::current_exe()?)
        .arg("--peer-worker")
        .arg(&spec)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()?;
    let stdout = BufReader::new(child.stdout.take().ok_or("no worker stdout")?);
    // A reader thread, so that the parent can wait with a deadline.
    let (tx, rx) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        for l in stdout.lines() {
            let Ok(l) = l else { break };
            if tx.send(l).is_err() {
                break;
            }
        }
    });
    let end = Instant::now() + deadline;
    let mut run = RedbRun {
        steps: Vec::new(),
        problems: Vec::new(),
        stopped: false,
    };
    let result = loop {
        let left = end.saturating_duration_since(Instant::now());
        let l = match rx.recv_timeout(left) {
            Ok(l) => l,
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                run.stopped = true;
                break Ok(());
            }
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                break Err("the redb worker ended without reporting its end".into());
            }
        };
        if let Some(v) = l.strip_prefix("step ") {
            run.steps.push(v.trim().parse().ok());
        } else if let Some(e) = l.strip_prefix("problem ") {
            run.problems.push(e.to_string());
        } else if l == "end" {
            break Ok(());
        } else if let Some(e) = l.strip_prefix("error ") {
            break Err(format!("worker: {}", e.trim()).into());
        } else {
            break Err(format!("the redb worker said {l:?}").into());
        }
    };
    if run.stopped || result.is_err() {
        let _ = child.kill();
    }
    let _ = child.wait();
    let _ = reader.join();
    result.map(|()| run)
}

/// The `redb` worker: runs the workload, printing `step <value>` (or `step
/// none`) as each step ends, `problem <text>` lines, and `end`.
fn redb_worker(f: &[&str]) -> Res<()> {
    let [_, id, dir, sizes, seed] = f[..] else {
        return Err("bad redb worker spec".into());
    };
    let z: Vec<usize> = sizes
        .split(',')
        .map(|x| x.parse())
        .collect::<Result<_, _>>()
        .map_err(|_| "bad redb sizes")?;
    let [entries, individual, batches, batch, ranges, range_len] = z[..] else {
        return Err("bad redb sizes".into());
    };
    let z = RedbSizes {
        entries,
        individual,
        batches,
        batch,
        ranges,
        range_len,
    };
    let seed: u64 = seed.parse().map_err(|_| "bad redb seed")?;
    let p = stores()
        .into_iter()
        .find(|p| p.id == id)
        .ok_or_else(|| format!("no store {id}"))?;
    let mut emit = |l: String| {
        // Flushed at once: the parent keeps what arrived before a deadline.
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{l}");
        let _ = out.flush();
    };
    redb_workload(&p, Path::new(dir), z, seed, &mut emit)?;
    emit("end".into());
    Ok(())
}

/// A `redb` worker's line for one step's value.
fn step_line(v: Option<f64>) -> String {
    match v {
        Some(v) => format!("step {v}"),
        None => "step none".into(),
    }
}

/// Runs the redb workload on a fresh store, reporting each step's seconds
/// (file size in MiB for the last) and each problem through `emit`.
fn redb_workload(
    p: &Peer,
    dir: &Path,
    z: RedbSizes,
    seed: u64,
    emit: &mut dyn FnMut(String),
) -> Res<()> {
    let total = z.entries + z.individual + z.batches * z.batch;
    let store = (p.open)(&config(dir, Durability::Durable, total as u64, 200, false))?;
    let mut s = store.session()?;
    let mut rng = Rng::new(seed);
    let mut entry = || {
        let mut k = [0u8; 24];
        let mut v = [0u8; 150];
        rng.fill(&mut k);
        rng.fill(&mut v);
        (k, v)
    };
    let loaded: Vec<([u8; 24], [u8; 150])> = (0..z.entries).map(|_| entry()).collect();

    let ops: Vec<Op> = loaded.iter().map(|(k, v)| Op::Put(k, v)).collect();
    let t = Instant::now();
    s.write(&ops)?;
    emit(step_line(Some(t.elapsed().as_secs_f64())));
    drop(ops);

    let t = Instant::now();
    for _ in 0..z.individual {
        let (k, v) = entry();
        s.write(&[Op::Put(&k, &v)])?;
    }
    emit(step_line(Some(t.elapsed().as_secs_f64())));

    let t = Instant::now();
    for _ in 0..z.batches {
        let b: Vec<_> = (0..z.batch).map(|_| entry()).collect();
        let ops: Vec<Op> = b.iter().map(|(k, v)| Op::Put(k, v)).collect();
        s.write(&ops)?;
    }
    emit(step_line(Some(t.elapsed().as_secs_f64())));

    // Reads in a shuffled order of the loaded keys.
    let mut order: Vec<usize> = (0..loaded.len()).collect();
    let mut r2 = Rng::new(seed ^ 0x5555);
    for i in (1..order.len()).rev() {
        order.swap(i, (r2.next() % (i as u64 + 1)) as usize);
    }
    let read_all = |s: &mut dyn Session, order: &[usize]| -> Res<usize> {
        let mut missing = 0;
        for &i in order {
            let (k, v) = &loaded[i];
            let mut same = false;
            if !s.get(k, &mut |got| same = got == &v[..])? || !same {
                missing += 1;
            }
        }
        Ok(missing)
    };
    let t = Instant::now();
    let missing = read_all(&mut *s, &order)?;
    emit(step_line(Some(t.elapsed().as_secs_f64())));
    if missing > 0 {
        emit(format!(
            "problem {}: {missing} random reads did not find their value",
            p.name
        ));
    }

    let st = &*store;
    let t = Instant::now();
    let missing2 = std::thread::scope(|sc| -> Res<usize> {
        let hs: Vec<_> = (0..2)
            .map(|i| {
                let order = &order;
                let read_all = &read_all;
                sc.spawn(move || -> Result<usize, String> {
                    let mut s = st.session().map_err(|e| e.to_string())?;
                    // Each thread reads every key, starting at a different place.
                    let (a, b) = order.split_at(order.len() * i / 2);
                    let mut m = read_all(&mut *s, b).map_err(|e| e.to_string())?;
                    m += read_all(&mut *s, a).map_err(|e| e.to_string())?;
                    Ok(m)
                })
            })
            .collect();
        let mut m = 0;
        for h in hs {
            m += h.join().map_err(|_| "reader thread panicked")??;
        }
        Ok(m)
    })?;
    emit(step_line(Some(t.elapsed().as_secs_f64())));
    if missing2 > 0 {
        emit(format!(
            "problem {}: {missing2} two-thread reads did not find their value",
            p.name
        ));
    }

    let t = Instant::now();
    let mut ranged = Some(0usize);
    for i in 0..z.ranges {
        let (k, _) = &loaded[order[i % order.len()]];
        match s.range(k, z.range_len, &mut |_, _| {}) {
            Ok(n) => ranged = ranged.map(|r| r + n),
            Err(txmap_peers::Error::Unsupported { .. }) => {
                ranged = None;
                break;
            }
            Err(e) => return Err(e.into()),
        }
    }
    emit(step_line(ranged.map(|_| t.elapsed().as_secs_f64())));

    let half: Vec<Op> = order[..order.len() / 2]
        .iter()
        .map(|&i| Op::Delete(&loaded[i].0))
        .collect();
    let t = Instant::now();
    s.write(&half)?;
    emit(step_line(Some(t.elapsed().as_secs_f64())));
    drop(s);
    drop(store);
    let mib = txmap_peers::dir_disk_bytes(dir)? as f64 / (1 << 20) as f64;
    emit(step_line(Some(mib)));
    Ok(())
}

/// The thesis' concurrency tests on a key-value store: each process (or
/// thread) owns one 4 KiB value of 1,024 integers and runs transactions that
/// A: increment its first integer; B: increment all of them; C: B 1,000 times.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Abc {
    A,
    B,
    C,
}

impl Abc {
    pub const ALL: [Abc; 3] = [Abc::A, Abc::B, Abc::C];
    fn name(self) -> &'static str {
        match self {
            Abc::A => "A",
            Abc::B => "B",
            Abc::C => "C",
        }
    }
    fn parse(s: &str) -> Option<Abc> {
        Abc::ALL.into_iter().find(|t| t.name() == s)
    }
    fn apply(self, v: &mut [u8]) {
        let ints = |v: &mut [u8], n: usize| {
            for c in v.chunks_exact_mut(4).take(n) {
                let x = u32::from_le_bytes([c[0], c[1], c[2], c[3]]).wrapping_add(1);
                c.copy_from_slice(&x.to_le_bytes());
            }
        };
        match self {
            Abc::A => ints(v, 1),
            Abc::B => ints(v, 1024),
            Abc::C => {
                for _ in 0..1000 {
                    ints(v, 1024);
                }
            }
        }
    }
    /// Value of each touched integer after `n` transactions.
    fn expect(self, n: usize) -> u32 {
        let per = if self == Abc::C { 1000 } else { 1 };
        (n as u64 * per) as u32
    }
}

fn abc_key(i: usize) -> Vec<u8> {
    format!("page{i:04}").into_bytes()
}

/// `txns` transactions of `test` on value `who`.
/// Stops early at the time cap; returns (retries, transactions done).
fn abc_loop(s: &mut dyn Session, test: Abc, who: usize, txns: usize) -> Res<(u64, usize)> {
    let key = abc_key(who);
    let mut retries = 0u64;
    let (start, cap) = (Instant::now(), cap());
    for done in 0..txns {
        if start.elapsed() > cap {
            return Ok((retries, done));
        }
        let r = s.update(&key, &mut |v| test.apply(v))?;
        retries += u64::from(r.ok_or("the test's value vanished")?);
    }
    Ok((retries, txns))
}

fn abc_worker(f: &[&str]) -> Res<()> {
    let [_, id, dir, test, txns, who, durable] = f[..] else {
        return Err("bad abc spec".into());
    };
    let test = Abc::parse(test).ok_or("bad test")?;
    let txns: usize = txns.parse()?;
    let who: usize = who.parse()?;
    let d = if durable == "durable" {
        Durability::Durable
    } else {
        Durability::Async
    };
    let p = stores()
        .into_iter()
        .find(|p| p.id == id)
        .ok_or("no such store")?;
    let cfg = Config {
        create: false,
        ..config(Path::new(dir), d, 64, 4096, true)
    };
    let store = (p.open)(&cfg)?;
    let mut s = store.session()?;
    let mut out = ready_then_wait_for_go()?;
    let t = Instant::now();
    let (retries, done) = abc_loop(&mut *s, test, who, txns)?;
    let ns = t.elapsed().as_nanos();
    drop(s);
    drop(store);
    writeln!(out, "done {ns} 0 {retries} {done}")?;
    writeln!(out)?;
    out.flush()?;
    Ok(())
}

/// Runs test `test` with `txns` transactions split over `procs` processes
/// (threads for single-process stores); returns seconds and problems found
/// in the values afterwards.
pub fn abc(
    p: &Peer,
    dir: &Path,
    test: Abc,
    txns: usize,
    procs: usize,
    d: Durability,
) -> Res<(f64, usize, Vec<String>)> {
    let store = (p.open)(&config(dir, d, 64, 4096, p.processes && procs > 1))?;
    let zero = vec![0u8; 4096];
    let keys: Vec<Vec<u8>> = (0..procs).map(abc_key).collect();
    let ops: Vec<Op> = keys.iter().map(|k| Op::Put(k, &zero)).collect();
    store.session()?.write(&ops)?;
    let each = txns / procs;
    // Transactions done on each value (fewer than `each` if capped).
    let (secs, done): (f64, Vec<usize>) = if procs == 1 {
        let mut s = store.session()?;
        let t = Instant::now();
        let (_, n) = abc_loop(&mut *s, test, 0, each)?;
        (t.elapsed().as_secs_f64(), vec![n])
    } else if p.processes {
        let dname = if d == Durability::Durable {
            "durable"
        } else {
            "async"
        };
        let specs: Vec<String> = (0..procs)
            .map(|i| {
                format!(
                    "abc|{}|{}|{}|{each}|{i}|{dname}",
                    p.id,
                    dir.display(),
                    test.name()
                )
            })
            .collect();
        let d = run_workers(&specs)?;
        (d.secs, d.reports.iter().map(|r| r.done as usize).collect())
    } else {
        let st = &*store;
        let start = std::sync::Barrier::new(procs + 1);
        std::thread::scope(|sc| -> Res<(f64, Vec<usize>)> {
            let hs: Vec<_> = (0..procs)
                .map(|i| {
                    let start = &start;
                    sc.spawn(move || -> Result<usize, String> {
                        let s = st.session();
                        start.wait();
                        let mut s = s.map_err(|e| e.to_string())?;
                        abc_loop(&mut *s, test, i, each)
                            .map(|(_, n)| n)
                            .map_err(|e| e.to_string())
                    })
                })
                .collect();
            start.wait();
            let t = Instant::now();
            let mut done = Vec::new();
            for h in hs {
                done.push(h.join().map_err(|_| "a test thread panicked")??);
            }
            Ok((t.elapsed().as_secs_f64(), done))
        })?
    };
    let mut problems = Vec::new();
    let mut s = store.session()?;
    for (i, k) in keys.iter().enumerate() {
        let want = test.expect(done.get(i).copied().unwrap_or(0));
        let mut v = Vec::new();
        s.get(k, &mut |x| v = x.to_vec())?;
        let n = if test == Abc::A { 1 } else { 1024 };
        let bad = v
            .chunks_exact(4)
            .take(n)
            .filter(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]) != want)
            .count();
        if v.len() != 4096 || bad > 0 {
            problems.push(format!(
                "{}: test {} with {procs}: value {i} has {bad} wrong integers (want {want}) or length {}",
                p.name,
                test.name(),
                v.len()
            ));
        }
    }
    Ok((secs, done.iter().sum(), problems))
}
