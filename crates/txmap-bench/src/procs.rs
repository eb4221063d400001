//! Measurement 5: the thesis' concurrency tests A, B, C and durable commit
//! throughput with worker *processes* sharing one region.
//!
//! Workers are this program re-executed with the hidden `--worker SPEC`
//! argument. Each opens the region, opens a view, prints `ready`, waits for
//! `go` on stdin, runs, and prints `done <commits> <conflicts> <run> <queue>
//! <wall>` (ns; see [`Sched`]). The parent times from the first `go` to the
//! last `done`, so process start-up and `Region::open` are not timed.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use txmap::{Durability, Error, Options, Region, View};

use crate::report::{Ctx, Res, Summary, Table, num};

const PAGE: u64 = 4096;
/// Integers (C `int`, as in the thesis) per page.
const INTS: usize = PAGE as usize / 4;
/// Transactions per test, split evenly across the processes.
const TXNS: usize = 10_000;
/// Test C repeats test B's loop this many times per transaction.
const C_REPEATS: usize = 1000;
pub const PROCS: [usize; 3] = [1, 2, 4];
pub const COMMIT_PROCS: [usize; 4] = [1, 2, 4, 8];
const DURABILITIES: [Durability; 2] = [Durability::Durable, Durability::Async];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Test {
    /// Increment the first integer of the process's page.
    A,
    /// Increment every integer of the page.
    B,
    /// Test B's loop repeated 1,000 times in one transaction.
    C,
    /// Write a u64 to the page for a fixed time (commit throughput).
    Commit,
}

const TESTS: [Test; 3] = [Test::A, Test::B, Test::C];

impl Test {
    fn name(self) -> &'static str {
        match self {
            Test::A => "a",
            Test::B => "b",
            Test::C => "c",
            Test::Commit => "commit",
        }
    }

    fn parse(s: &str) -> Option<Test> {
        [Test::A, Test::B, Test::C, Test::Commit]
            .into_iter()
            .find(|t| t.name() == s)
    }

    /// How much every integer the test touches grows per commit.
    fn step(self) -> u32 {
        if self == Test::C { C_REPEATS as u32 } else { 1 }
    }
}

fn options(durability: Durability) -> Options {
    Options {
        durability,
        max_size: 1 << 20,
        ..Options::default()
    }
}

/// The worker-spec and table name of a durability.
pub fn dur_name(d: Durability) -> &'static str {
    match d {
        Durability::Durable => "durable",
        Durability::Async => "async",
    }
}

// ---------------------------------------------------------------- worker side

/// Entry point of a worker process; returns its exit code.
/// SPEC is `test,durable|async,page,count,path` (count: transactions, or ms for `commit`).
pub fn worker(spec: &str) -> i32 {
    match worker_inner(spec) {
        Ok((commits, conflicts, s)) => {
            println!(
                "done {commits} {conflicts} {} {} {}",
                s.run, s.queue, s.wall
            );
            0
        }
        Err(e) => {
            // One line, so the parent can show it.
            println!("error {}", e.to_string().replace('\n', " "));
            1
        }
    }
}

/// Where a worker's main thread spent a run, ns: on a CPU, runnable but
/// waiting for one (the kernel's schedstat), and in all (wall). The rest of
/// `wall` it was blocked: on a lock, a futex, fdatasync.
#[derive(Clone, Copy, Default)]
struct Sched {
    run: u64,
    queue: u64,
    wall: u64,
}

/// (ns on CPU, ns waiting on a run queue) of the calling thread so far.
fn schedstat() -> (u64, u64) {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").unwrap_or_default();
    let mut f = s.split_whitespace().map(|x| x.parse().unwrap_or(0));
    (f.next().unwrap_or(0), f.next().unwrap_or(0))
}

fn worker_inner(spec: &str) -> Res<(u64, u64, Sched)> {
    let f: Vec<&str> = spec.splitn(5, ',').collect();
    let bad = || format!("bad worker spec {spec:?}");
    if f.len() != 5 {
        return Err(bad().into());
    }
    let test = Test::parse(f[0]).ok_or_else(bad)?;
    let durability = match f[1] {
        "durable" => Durability::Durable,
        "async" => Durability::Async,
        _ => return Err(bad().into()),
    };
    let page: u64 = f[2].parse().map_err(|_| bad())?;
    let count: u64 = f[3].parse().map_err(|_| bad())?;
    let region = Region::open(Path::new(f[4]), options(durability))?;
    let mut v = region.view()?;
    let mut out = std::io::stdout().lock();
    writeln!(out, "ready")?;
    out.flush()?;
    let mut go = String::new();
    std::io::stdin().lock().read_line(&mut go)?;
    if go.trim() != "go" {
        return Err(format!("expected go, got {go:?}").into());
    }
    let off = page * PAGE;
    let (mut commits, mut conflicts) = (0u64, 0u64);
    let (run0, queue0) = schedstat();
    let t0 = Instant::now();
    if test == Test::Commit {
        let end = Instant::now() + Duration::from_millis(count);
        let mut x = 0u64;
        while Instant::now() < end {
            x += 1;
            match once(&mut v, |v| v.write(off, &x)) {
                Ok(()) => commits += 1,
                Err(Error::Conflict) => conflicts += 1,
                Err(e) => return Err(e.into()),
            }
        }
    } else {
        for _ in 0..count {
            // The thesis' retry loop: repeat the transaction until it commits.
            loop {
                match once(&mut v, |v| body(v, test, off)) {
                    Ok(()) => break,
                    Err(Error::Conflict) => conflicts += 1,
                    Err(e) => return Err(e.into()),
                }
            }
            commits += 1;
        }
    }
    let (run1, queue1) = schedstat();
    let sched = Sched {
        run: run1 - run0,
        queue: queue1 - queue0,
        wall: t0.elapsed().as_nanos() as u64,
    };
    drop(v);
    region.close()?;
    Ok((commits, conflicts, sched))
}

/// One serializable transaction running `f`.
fn once(v: &mut View, f: impl FnOnce(&mut View) -> txmap::Result<()>) -> txmap::Result<()> {
    v.begin()?;
    if let Err(e) = f(v) {
        v.rollback();
        return Err(e);
    }
    v.commit()
}

fn body(v: &mut View, test: Test, off: u64) -> txmap::Result<()> {
    match test {
        Test::A => {
            let x: u32 = v.read(off)?;
            v.write(off, &x.wrapping_add(1))
        }
        Test::B | Test::C => {
            let s = v.slice_mut(off, PAGE as usize)?;
            let passes = if test == Test::C { C_REPEATS } else { 1 };
            for _ in 0..passes {
                for c in s.chunks_exact_mut(4) {
                    let x = u32::from_ne_bytes([c[0], c[1], c[2], c[3]]).wrapping_add(1);
                    c.copy_from_slice(&x.to_ne_bytes());
                }
                // Each pass must really load and store the page (no folding
                // the 1,000 passes into one add).
                std::hint::black_box(&mut *s);
            }
            Ok(())
        }
        Test::Commit => unreachable!("commit has its own loop"),
    }
}

// ---------------------------------------------------------------- parent side

/// A worker process: this program run with a hidden worker flag, talking
/// by lines on its stdin and stdout.
pub struct Worker {
    child: Child,
    pub stdin: ChildStdin,
    out: BufReader<ChildStdout>,
}

impl Worker {
    /// Runs `exe FLAG SPEC` (`FLAG` is e.g. `--worker`).
    pub fn spawn(exe: &Path, flag: &str, spec: &str) -> Res<Worker> {
        let mut child = Command::new(exe)
            .arg(flag)
            .arg(spec)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()?;
        let stdin = child.stdin.take().ok_or("no worker stdin")?;
        let out = BufReader::new(child.stdout.take().ok_or("no worker stdout")?);
        Ok(Worker { child, stdin, out })
    }

    /// The worker's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The worker's next line (an `error ...` line or none is an error).
    pub fn line(&mut self) -> Res<String> {
        let mut s = String::new();
        self.out.read_line(&mut s)?;
        let s = s.trim().to_string();
        if s.is_empty() {
            return Err("worker exited without a report".into());
        }
        if let Some(e) = s.strip_prefix("error ") {
            return Err(format!("worker failed: {e}").into());
        }
        Ok(s)
    }
}

/// Waits for `workers` after a run that ended with `result`: on an error
/// kills them first; a worker that failed after a good run fails it.
pub fn reap<T>(workers: Vec<Worker>, result: Res<T>) -> Res<T> {
    for mut w in workers {
        if result.is_err() {
            // Only our own children, by handle.
            let _ = w.child.kill();
        }
        drop(w.stdin);
        let status = w.child.wait()?;
        if result.is_ok() && !status.success() {
            return Err(format!("a worker exited with {status}").into());
        }
    }
    result
}

/// What one run of P processes did.
struct Run {
    /// Seconds from the first `go` to the last `done`.
    wall: f64,
    commits: u64,
    conflicts: u64,
    /// Log syncs during the run (all processes).
    syncs: u64,
    /// Per worker: its page and commits.
    per_page: Vec<(u64, u64)>,
    /// Summed over the workers.
    sched: Sched,
}

/// Runs `procs` workers of `test` on pages 1..=procs of `region`.
fn run_procs(region: &Region, dur: Durability, test: Test, procs: usize, count: u64) -> Res<Run> {
    let exe = std::env::current_exe()?;
    let path = region.path().to_path_buf();
    let durability = dur_name(dur);
    let mut ws = Vec::new();
    let result = (|| {
        for i in 0..procs {
            let spec = format!(
                "{},{durability},{},{count},{}",
                test.name(),
                i + 1,
                path.display()
            );
            ws.push(Worker::spawn(&exe, "--worker", &spec)?);
        }
        for w in &mut ws {
            let l = w.line()?;
            if l != "ready" {
                return Err(format!("worker said {l:?}, expected ready").into());
            }
        }
        let syncs = region.stats().log_syncs;
        let t = Instant::now();
        for w in &mut ws {
            w.stdin.write_all(b"go\n")?;
            w.stdin.flush()?;
        }
        let mut run = Run {
            wall: 0.0,
            commits: 0,
            conflicts: 0,
            syncs: 0,
            per_page: Vec::new(),
            sched: Sched::default(),
        };
        for (i, w) in ws.iter_mut().enumerate() {
            let l = w.line()?;
            let n: Vec<u64> = l
                .strip_prefix("done ")
                .map(|r| r.split(' ').filter_map(|x| x.parse().ok()).collect())
                .unwrap_or_default();
            if n.len() != 5 {
                return Err(format!("worker said {l:?}, expected done").into());
            }
            run.commits += n[0];
            run.conflicts += n[1];
            run.sched.run += n[2];
            run.sched.queue += n[3];
            run.sched.wall += n[4];
            run.per_page.push((i as u64 + 1, n[0]));
        }
        run.wall = t.elapsed().as_secs_f64();
        run.syncs = region.stats().log_syncs - syncs;
        Ok::<Run, Box<dyn std::error::Error>>(run)
    })();
    reap(ws, result)
}

/// The integers a test touches on `page`: first and last (test A: first only).
fn probe(region: &Region, page: u64, test: Test) -> Res<(u32, u32)> {
    let mut v = region.view()?;
    v.begin_read()?;
    let off = page * PAGE;
    let first = v.read::<u32>(off);
    let last = v.read::<u32>(off + PAGE - 4);
    v.commit()?;
    let first = first?;
    Ok((first, if test == Test::A { first } else { last? }))
}

/// Checks every page grew by exactly its worker's commits.
fn verify(ctx: &mut Ctx, region: &Region, test: Test, before: &[(u32, u32)], run: &Run) -> Res<()> {
    for (&(page, commits), &(f0, l0)) in run.per_page.iter().zip(before) {
        let (f1, l1) = probe(region, page, test)?;
        let want = (commits as u32).wrapping_mul(test.step());
        if f1.wrapping_sub(f0) != want || l1.wrapping_sub(l0) != want {
            ctx.anomaly(format!(
                "test {test:?}: page {page} grew by {} / {}, expected {want} ({commits} commits)",
                f1.wrapping_sub(f0),
                l1.wrapping_sub(l0)
            ));
        }
    }
    Ok(())
}

/// Repetitions of this part: a repetition runs 180,000 transactions and
/// 4 s of commits, minutes when the machine is busy.
const MAX_REPS: usize = 3;

pub fn steps(reps: usize) -> usize {
    reps.min(MAX_REPS) * (DURABILITIES.len() * TESTS.len() * PROCS.len() + 1 + COMMIT_PROCS.len())
}

/// Per test and durability: per P, µs per transaction of each repetition,
/// paired speedups, commits per sync and conflicts.
#[derive(Default, Clone)]
struct Cell {
    us: Vec<f64>,
    speedup: Vec<f64>,
    per_sync: Vec<f64>,
    conflicts: u64,
    /// Process-µs per transaction, summed over the processes: on CPU,
    /// waiting for a CPU, blocked.
    split: [Vec<f64>; 3],
}

impl Run {
    /// Process-µs per commit: on CPU, waiting for a CPU, blocked.
    fn split(&self) -> [f64; 3] {
        let s = self.sched;
        let per = |ns: u64| ns as f64 / 1e3 / self.commits.max(1) as f64;
        [
            per(s.run),
            per(s.queue),
            per(s.wall.saturating_sub(s.run + s.queue)),
        ]
    }
}

/// "cpu / queue / blocked" medians.
fn split_cell(split: &[Vec<f64>; 3]) -> String {
    split
        .iter()
        .map(|v| num(Summary::of(v).median))
        .collect::<Vec<_>>()
        .join(" / ")
}

pub fn run(ctx: &mut Ctx) -> Res<()> {
    println!("## 5. Processes: the thesis' concurrency tests A, B, C; durable commits/s\n");
    let regions = DURABILITIES
        .iter()
        .map(|&d| {
            let path = ctx.dir.join(format!("procs-{}.txm", dur_name(d)));
            Region::create(&path, 16 * PAGE, options(d)).map(|r| (d, r))
        })
        .collect::<txmap::Result<Vec<_>>>()?;
    let total = ctx.count(TXNS);
    let per_proc = |p: usize| (total / p) as u64;
    let d = Duration::from_millis(if ctx.quick { 400 } else { 1000 });

    // cells[durability][test][procs]
    let mut cells = vec![vec![vec![Cell::default(); PROCS.len()]; TESTS.len()]; DURABILITIES.len()];
    let mut sync = Vec::new();
    let mut rates = vec![Vec::new(); COMMIT_PROCS.len()];
    let mut groups = vec![Vec::new(); COMMIT_PROCS.len()];
    let mut splits: Vec<[Vec<f64>; 3]> = vec![Default::default(); COMMIT_PROCS.len()];
    let mut scale = Vec::new();
    // Repetitions are the outer loop so background load spreads over every
    // cell alike; speedups are paired within a repetition.
    let reps = ctx.reps.min(MAX_REPS);
    for rep in 1..=reps {
        for (di, (dur, region)) in regions.iter().enumerate() {
            for (ti, &test) in TESTS.iter().enumerate() {
                for (pi, &p) in PROCS.iter().enumerate() {
                    ctx.progress(format!(
                        "rep {rep}/{reps}: test {test:?}, {}, {p} process(es) × {} transactions",
                        dur_name(*dur),
                        per_proc(p)
                    ));
                    let before = (1..=p as u64)
                        .map(|pg| probe(region, pg, test))
                        .collect::<Res<Vec<_>>>()?;
                    let r = run_procs(region, *dur, test, p, per_proc(p))?;
                    verify(ctx, region, test, &before, &r)?;
                    region.checkpoint()?;
                    let c = &mut cells[di][ti][pi];
                    c.us.push(r.wall * 1e6 / r.commits as f64);
                    c.per_sync.push(r.commits as f64 / r.syncs.max(1) as f64);
                    c.conflicts += r.conflicts;
                    for (v, x) in c.split.iter_mut().zip(r.split()) {
                        v.push(x);
                    }
                    let t1 = cells[di][ti][0].us[rep - 1];
                    let c = &mut cells[di][ti][pi];
                    c.speedup.push(t1 / c.us[rep - 1]);
                }
            }
        }
        ctx.progress(format!("rep {rep}/{reps}: pwrite 4 KiB + fdatasync"));
        sync.push(crate::commit::fsync_cost(ctx, false)?);
        let region = &regions[0].1;
        for (i, &p) in COMMIT_PROCS.iter().enumerate() {
            ctx.progress(format!(
                "rep {rep}/{reps}: durable one-page commits, {p} process(es)"
            ));
            let r = run_procs(
                region,
                Durability::Durable,
                Test::Commit,
                p,
                d.as_millis() as u64,
            )?;
            if r.conflicts > 0 {
                ctx.anomaly(format!(
                    "{p} processes on disjoint pages got {} conflicts",
                    r.conflicts
                ));
            }
            rates[i].push(r.commits as f64 / r.wall);
            groups[i].push(r.commits as f64 / r.syncs.max(1) as f64);
            for (v, x) in splits[i].iter_mut().zip(r.split()) {
                v.push(x);
            }
            region.checkpoint()?;
        }
        scale.push(rates[COMMIT_PROCS.len() - 1][rep - 1] / rates[0][rep - 1]);
    }

    println!("Cells: median (min–max) of {reps} repetitions.\n");
    print_tests(ctx, &cells, total);
    print_commits(ctx, &sync, &rates, &groups, &splits, &scale, d);
    for (_, region) in regions {
        let path = region.path().to_path_buf();
        region.close()?;
        remove(&path);
    }
    Ok(())
}

/// Deletes a region file and its log (whatever of them exists).
pub fn remove(path: &Path) {
    let _ = std::fs::remove_file(path);
    let _ = std::fs::remove_file(txmap::log_path(path));
}

fn print_tests(ctx: &mut Ctx, cells: &[Vec<Vec<Cell>>], total: usize) {
    println!("### 5a. Concurrency tests A, B, C (thesis §4, figures 4-5 and 4-6)\n");
    let mut head = vec!["test".to_string(), "durability".to_string()];
    for &p in &PROCS {
        head.push(format!("{p} proc: µs per txn"));
        if p > 1 {
            head.push(format!("speedup ×{p}"));
        }
    }
    head.push("commits per log sync (1 / 2 / 4 procs)".into());
    head.push("conflicts".into());
    let mut t = Table::new(&head);
    for (di, &dur) in DURABILITIES.iter().enumerate() {
        for (ti, &test) in TESTS.iter().enumerate() {
            let row = &cells[di][ti];
            let mut r = vec![format!("{test:?}"), dur_name(dur).to_string()];
            for (pi, c) in row.iter().enumerate() {
                r.push(Summary::of(&c.us).cell());
                if pi > 0 {
                    r.push(Summary::of(&c.speedup).cell());
                }
            }
            r.push(
                row.iter()
                    .map(|c| num(Summary::of(&c.per_sync).median))
                    .collect::<Vec<_>>()
                    .join(" / "),
            );
            let conflicts: u64 = row.iter().map(|c| c.conflicts).sum();
            if conflicts > 0 {
                ctx.anomaly(format!(
                    "test {test:?} {}: {conflicts} conflicts on disjoint pages",
                    dur_name(dur)
                ));
            }
            r.push(conflicts.to_string());
            t.row(r);
        }
    }
    t.print();
    println!(
        "{total} transactions per test in total, split evenly across the processes; each \
         process increments integers on its own page (page i for process i), in a \
         serializable transaction retried on conflict. A: the first integer of the page; \
         B: all {INTS} integers; C: B's loop {C_REPEATS} times in one transaction. Time per \
         transaction = wall time from the start signal to the last process's report / \
         {total}; process start-up and `Region::open` are not timed. Speedup = time per \
         transaction on 1 process / on P, paired per repetition. Every page's integers are \
         checked afterwards to have grown by exactly the committed increments. \
         `async` = `Durability::Async` (the thesis' non-durable).\n"
    );

    println!("### 5b. Where the processes' time went (tests A, B, C)\n");
    let mut t = Table::new(&[
        "test",
        "durability",
        "processes",
        "µs per txn (wall)",
        "process-µs per txn: on CPU / waiting for CPU / blocked",
    ]);
    for (di, &dur) in DURABILITIES.iter().enumerate() {
        for (ti, &test) in TESTS.iter().enumerate() {
            for (pi, &p) in PROCS.iter().enumerate() {
                let c = &cells[di][ti][pi];
                t.row(vec![
                    format!("{test:?}"),
                    dur_name(dur).to_string(),
                    p.to_string(),
                    num(Summary::of(&c.us).median),
                    split_cell(&c.split),
                ]);
            }
        }
    }
    t.print();
    println!(
        "From each worker's main thread's `/proc/thread-self/schedstat` over its run, summed \
         over the processes and divided by the transactions (medians): time on a CPU, time \
         runnable but waiting for a CPU (the machine's cores are the limit: other processes, \
         ours or not, hold them), and the rest of its wall time, blocked (fdatasync, the \
         shared commit lock, group-commit waits). With P processes the wall time per \
         transaction is about the sum of the three / P.\n"
    );
}

fn print_commits(
    ctx: &mut Ctx,
    sync: &[f64],
    rates: &[Vec<f64>],
    groups: &[Vec<f64>],
    splits: &[[Vec<f64>; 3]],
    scale: &[f64],
    d: Duration,
) {
    println!("### 5c. Durable one-page commits/s with 1–8 processes\n");
    let sync = Summary::of(sync);
    let rates: Vec<Summary> = rates.iter().map(|r| Summary::of(r)).collect();
    let mut t = Table::new(&[
        "processes",
        "durable commits/s, median (min–max)",
        "µs per commit (1 / rate)",
        "× 1 process",
        "× 1/fdatasync",
        "commits per log sync",
        "process-µs per commit: on CPU / waiting for CPU / blocked",
    ]);
    for (((p, r), g), sp) in COMMIT_PROCS.iter().zip(&rates).zip(groups).zip(splits) {
        t.row(vec![
            p.to_string(),
            r.cell(),
            num(1e6 / r.median),
            num(r.median / rates[0].median),
            num(r.median * sync.median / 1e6),
            Summary::of(g).cell(),
            split_cell(sp),
        ]);
    }
    t.print();
    let scale = Summary::of(scale);
    println!(
        "Each process has its own view and page, writes 8 bytes and commits \
         (`Durability::Durable`) for {} ms per repetition. Commits per log sync = commits / \
         the change in `Region::stats().log_syncs` (kept in the shared state, so it counts \
         every process's syncs). Reference: `pwrite` 4 KiB in place + `fdatasync` on the \
         same file system, {} µs (median, min–max {}–{}). 8 processes / 1, paired per \
         repetition: **{}**.\n",
        d.as_millis(),
        num(sync.median),
        num(sync.min),
        num(sync.max),
        scale.cell(),
    );
    let g8 = Summary::of(&groups[COMMIT_PROCS.len() - 1]);
    ctx.target(
        "group commit across processes: 8 processes share syncs (commits per log sync ≥ 1.5)",
        format!(
            "{} commits per log sync; {} vs {} commits/s (1 process)",
            g8.cell(),
            num(rates[COMMIT_PROCS.len() - 1].median),
            num(rates[0].median)
        ),
        Some(g8.median >= 1.5),
    );
}
