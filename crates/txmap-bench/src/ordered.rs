//! Ordered commits (issue 19, point 4): a loop of dependent iterations run
//! speculatively in parallel, each iteration an ordered transaction
//! holding its iteration number, must give the result of running the loop
//! sequentially; its time against 1 worker.
//!
//! The loop: a table of `CELLS` u64 cells, one per page. Iteration `n`
//! reads cell `src(n)`, does `WORK` rounds of arithmetic on it (the
//! iteration's computation, inside its transaction, so a conflict runs it
//! again), and writes the result, mixed with `n`, into cell `dst(n)`. An
//! iteration depends on every earlier one that wrote its source cell, so
//! only the sequential order gives the sequential table. Workers take
//! numbers with `View::order_next` (one view each, threads of one
//! process); the region is `Durability::Async`, so the commits wait for
//! their turn and the commit lock, not for a sync.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use txmap::{Durability, Error, Options, Region};

use crate::report::{Ctx, Res, Summary, Table, num};

const PAGE: u64 = 4096;
const CELLS: u64 = 1024;
const ITERATIONS: u64 = 10_000;
const WORK: u64 = 20_000;
const GROUP: u32 = 0;

pub fn steps(reps: usize) -> usize {
    2 * reps
}

fn mix(x: u64) -> u64 {
    let x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    let x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

fn src(n: u64) -> u64 {
    mix(n * 2 + 1) % CELLS
}

fn dst(n: u64) -> u64 {
    mix(n * 2 + 2) % CELLS
}

/// The iteration's computation on the value it read.
fn work(mut v: u64, n: u64) -> u64 {
    for i in 0..WORK {
        v = v
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(n ^ i);
    }
    std::hint::black_box(v)
}

/// The loop run sequentially in plain memory.
fn sequential() -> Vec<u64> {
    let mut t: Vec<u64> = (0..CELLS).collect();
    for n in 0..ITERATIONS {
        t[dst(n) as usize] = work(t[src(n) as usize], n);
    }
    t
}

/// One parallel run: (seconds, re-executions, table).
fn parallel(path: &std::path::Path, workers: u64) -> Res<(f64, u64, Vec<u64>)> {
    let o = Options {
        durability: Durability::Async,
        ..Options::default()
    };
    let r = Region::create(path, CELLS * PAGE, o)?;
    r.view()?.run(|v| {
        for c in 0..CELLS {
            v.write(c * PAGE, &c)?;
        }
        Ok(())
    })?;
    r.order_skip_to(GROUP, 0)?;
    let reruns = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let hs: Vec<_> = (0..workers)
        .map(|_| {
            let r = r.clone();
            let reruns = reruns.clone();
            std::thread::spawn(move || -> txmap::Result<()> {
                let mut v = r.view()?;
                loop {
                    let n = v.order_next(GROUP)?;
                    if n >= ITERATIONS {
                        return v.order_give_up();
                    }
                    loop {
                        v.begin()?;
                        let x: u64 = v.read(src(n) * PAGE)?;
                        v.write(dst(n) * PAGE, &work(x, n))?;
                        match v.commit() {
                            Err(Error::Conflict) => {
                                reruns.fetch_add(1, Ordering::Relaxed);
                            }
                            r => break r?,
                        }
                    }
                }
            })
        })
        .collect();
    for h in hs {
        h.join().map_err(|_| "an ordered worker panicked")??;
    }
    let secs = start.elapsed().as_secs_f64();
    let mut v = r.view()?;
    v.begin_read()?;
    let table = (0..CELLS)
        .map(|c| v.read::<u64>(c * PAGE))
        .collect::<txmap::Result<Vec<u64>>>()?;
    v.commit()?;
    Ok((secs, reruns.load(Ordering::Relaxed), table))
}

pub fn run(ctx: &mut Ctx) -> Res<()> {
    println!("## Ordered commits: a parallel loop with the sequential result (issue 19)\n");
    println!(
        "{ITERATIONS} iterations; iteration n reads cell src(n) of a table of {CELLS} u64 cells \
         (one per page), computes {WORK} multiply-add rounds on it and writes the result into \
         cell dst(n) (src, dst: hashes of n), so it depends on every earlier iteration that \
         wrote its source. Each iteration is an ordered transaction holding its number \
         (`View::order_next`, one view per worker thread, `Durability::Async`): it commits \
         only after every lower number, and runs again on conflict. *same as sequential*: \
         the table equals the loop run sequentially in plain memory. Median of {} runs.\n",
        ctx.reps
    );
    let want = sequential();
    let mut t = Table::new(&[
        "workers",
        "time (s)",
        "iterations/s",
        "re-executions",
        "same as sequential",
        "speedup vs 1 worker",
    ]);
    let mut base = None;
    let mut speedup4 = 0.0;
    let mut all_same = true;
    for workers in [1u64, 2, 4] {
        let mut times = Vec::new();
        let mut reruns = Vec::new();
        let mut same = true;
        for rep in 0..ctx.reps {
            ctx.progress(format!("ordered: {workers} workers, run {}", rep + 1));
            let (s, re, table) = parallel(
                &ctx.dir.join(format!("ordered-{workers}-{rep}.txm")),
                workers,
            )?;
            if table != want {
                same = false;
                ctx.anomaly(format!(
                    "ordered commits with {workers} workers: the table differs from the sequential loop's"
                ));
            }
            times.push(s);
            reruns.push(re as f64);
        }
        all_same &= same;
        let s = Summary::of(&times);
        let b = *base.get_or_insert(s.median);
        if workers == 4 {
            speedup4 = b / s.median;
        }
        t.row(vec![
            workers.to_string(),
            s.cell(),
            num(ITERATIONS as f64 / s.median),
            num(Summary::of(&reruns).median),
            if same { "yes" } else { "**no**" }.into(),
            format!("{:.2}x", b / s.median),
        ]);
    }
    t.print();
    println!(
        "Machine: {} CPUs available to this process.\n",
        std::thread::available_parallelism().map_or(1, |n| n.get())
    );
    ctx.target(
        "ordered commits: 10,000 dependent iterations over 4 workers give the sequential result",
        format!(
            "{}; speedup vs 1 worker {speedup4:.2}x",
            if all_same {
                "same table"
            } else {
                "table differs"
            }
        ),
        Some(all_same),
    );
    Ok(())
}
