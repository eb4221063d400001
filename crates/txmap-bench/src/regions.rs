//! Several regions in one transaction (issue 19, point 1): durable
//! transfers in one region, between two named regions of one environment
//! (`txmap::Env`: one file, one log, one commit), and between two region
//! files (`View::run_group`: a record in each log under both commit locks,
//! then both logs synced in parallel), in commits per second; the target
//! is two regions within 10 % of one.
//!
//! A transfer moves an amount from a random account to another (one u64 per
//! page, `ACCOUNTS` per side): in the one-region workload both sides are in
//! one region, in the two-region ones each side is a region of its own, so
//! all write two pages per commit.

use std::path::Path;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Instant;

use txmap::{Durability, Env, Options, Region, View};

use crate::report::{Ctx, Res, Summary, Table};

const PAGE: u64 = 4096;
const ACCOUNTS: u64 = 64;

/// µs added to every log sync in the slow-device row (as `commit`'s).
const SLOW_SYNC_US: u64 = 1000;

pub fn steps(reps: usize) -> usize {
    9 * reps
}

fn opts() -> Options {
    Options {
        durability: Durability::Durable,
        ..Options::default()
    }
}

fn next(x: &mut u64) -> u64 {
    *x = x
        .wrapping_mul(6_364_136_223_846_793_005)
        .wrapping_add(1_442_695_040_888_963_407);
    *x >> 24
}

/// One run: commits/s, log syncs per commit (every log), CPU time (user +
/// system, the whole process) per commit in µs.
struct Run {
    rate: f64,
    syncs: f64,
    cpu_us: f64,
    /// Voluntary context switches per commit (sleeps: futex, sync).
    switches: f64,
    /// Attempts per commit (1: no conflict).
    tries: f64,
}

/// CPU time (user + system) of the process so far in µs, and its
/// voluntary context switches (every thread, ended ones included).
fn usage() -> (f64, f64) {
    // SAFETY: getrusage writes one `rusage` into the zeroed struct it is given.
    let u = unsafe {
        let mut u: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut u);
        u
    };
    let us = |t: libc::timeval| t.tv_sec as f64 * 1e6 + t.tv_usec as f64;
    (us(u.ru_utime) + us(u.ru_stime), u.ru_nvcsw as f64)
}

impl Run {
    fn of(commits: u64, secs: f64, syncs: u64, used: (f64, f64), tries: u64) -> Run {
        let (cpu, switches) = used;
        Run {
            switches: switches / commits as f64,
            tries: tries as f64 / commits as f64,
            rate: commits as f64 / secs,
            syncs: syncs as f64 / commits as f64,
            cpu_us: cpu / commits as f64,
        }
    }
}

/// `threads` threads each commit `n` transfers in `r`, each through
/// `transfer(view, i, j)` (accounts `i` and `j` of the two sides).
fn transfers(
    r: &Region,
    threads: u64,
    n: u64,
    transfer: impl Fn(&mut View, u64, u64) -> txmap::Result<()> + Sync,
) -> Res<Run> {
    let syncs0 = r.stats().log_syncs;
    let used0 = usage();
    let tries = AtomicU64::new(0);
    let start = Instant::now();
    std::thread::scope(|s| -> Res<()> {
        let hs: Vec<_> = (0..threads)
            .map(|t| {
                let (tries, transfer) = (&tries, &transfer);
                s.spawn(move || -> txmap::Result<()> {
                    let mut v = r.view()?;
                    let mut x = t + 1;
                    for _ in 0..n {
                        let (i, j) = (next(&mut x) % ACCOUNTS, next(&mut x) % ACCOUNTS);
                        v.run(|v| {
                            tries.fetch_add(1, Relaxed);
                            transfer(v, i, j)
                        })?;
                    }
                    Ok(())
                })
            })
            .collect();
        for h in hs {
            h.join().map_err(|_| "a transfer thread panicked")??;
        }
        Ok(())
    })?;
    let secs = start.elapsed().as_secs_f64();
    Ok(Run::of(
        threads * n,
        secs,
        r.stats().log_syncs - syncs0,
        {
            let u = usage();
            (u.0 - used0.0, u.1 - used0.1)
        },
        tries.into_inner(),
    ))
}

/// Both sides in one region: accounts `0..ACCOUNTS` and `ACCOUNTS..`.
fn one_region(dir: &Path, threads: u64, n: u64) -> Res<Run> {
    let r = Region::create(&dir.join("one"), 2 * ACCOUNTS * PAGE, opts())?;
    let run = transfers(&r, threads, n, |v, i, j| {
        let a: u64 = v.read(i * PAGE)?;
        let b: u64 = v.read((ACCOUNTS + j) * PAGE)?;
        v.write(i * PAGE, &a.wrapping_sub(7))?;
        v.write((ACCOUNTS + j) * PAGE, &b.wrapping_add(7))
    })?;
    r.close()?;
    Ok(run)
}

/// Each side a named region of one environment (`txmap::Env`): one file,
/// one log.
fn env_regions(dir: &Path, threads: u64, n: u64) -> Res<Run> {
    let env = Env::open(&dir.join("env"), opts())?;
    let (ra, rb) = (
        env.region("a", ACCOUNTS * PAGE)?,
        env.region("b", ACCOUNTS * PAGE)?,
    );
    let run = transfers(env.as_region(), threads, n, |v, i, j| {
        let a: u64 = ra.read(v, i * PAGE)?;
        let b: u64 = rb.read(v, j * PAGE)?;
        ra.write(v, i * PAGE, &a.wrapping_sub(7))?;
        rb.write(v, j * PAGE, &b.wrapping_add(7))
    })?;
    env.close()?;
    Ok(run)
}

/// Each side a region file of its own, committed together by
/// `View::run_group` (a record in each log, both logs synced).
fn two_regions(dir: &Path, threads: u64, n: u64) -> Res<Run> {
    let ra = Region::create(&dir.join("a"), ACCOUNTS * PAGE, opts())?;
    let rb = Region::create(&dir.join("b"), ACCOUNTS * PAGE, opts())?;
    let syncs = || ra.stats().log_syncs + rb.stats().log_syncs;
    let syncs0 = syncs();
    let used0 = usage();
    let tries = AtomicU64::new(0);
    let start = Instant::now();
    std::thread::scope(|s| -> Res<()> {
        let hs: Vec<_> = (0..threads)
            .map(|t| {
                let (ra, rb, tries) = (&ra, &rb, &tries);
                s.spawn(move || -> txmap::Result<()> {
                    let (mut va, mut vb) = (ra.view()?, rb.view()?);
                    let mut x = t + 1;
                    for _ in 0..n {
                        let (i, j) = (next(&mut x) % ACCOUNTS, next(&mut x) % ACCOUNTS);
                        View::run_group(&mut [&mut va, &mut vb], |v| {
                            tries.fetch_add(1, Relaxed);
                            let a: u64 = v[0].read(i * PAGE)?;
                            let b: u64 = v[1].read(j * PAGE)?;
                            v[0].write(i * PAGE, &a.wrapping_sub(7))?;
                            v[1].write(j * PAGE, &b.wrapping_add(7))
                        })?;
                    }
                    Ok(())
                })
            })
            .collect();
        for h in hs {
            h.join().map_err(|_| "a transfer thread panicked")??;
        }
        Ok(())
    })?;
    let secs = start.elapsed().as_secs_f64();
    let run = Run::of(
        threads * n,
        secs,
        syncs() - syncs0,
        {
            let u = usage();
            (u.0 - used0.0, u.1 - used0.1)
        },
        tries.into_inner(),
    );
    ra.close()?;
    rb.close()?;
    Ok(run)
}

pub fn run(ctx: &mut Ctx) -> Res<()> {
    println!("## Several regions in one transaction: durable transfers (issue 19)\n");
    let n: u64 = if ctx.quick { 300 } else { 2000 };
    println!(
        "Each thread commits {n} durable transfers (two u64 accounts, on two pages, of \
         {ACCOUNTS} per side): in one region (`View::run`); between two named regions of one \
         environment (`txmap::Env`: one file and one log, so one commit and one sync); and \
         between two region files of one directory (`View::run_group`: both commit locks \
         until a record is in each log, then the two logs synced in parallel, shared with \
         concurrent group commits, before any snapshot sees it). Commits per second, median \
         of {} runs; *ratio*: two regions / one region. Per commit (medians; one / \
         environment / files): log syncs (every log counted), CPU time of the process (user + \
         system), voluntary context switches, and attempts (1 + retries after conflicts). \
         The last row adds {SLOW_SYNC_US} µs to every log sync (`txmap::debug::slow_syncs`), \
         as on a device whose flush costs ~1 ms: there syncs, not CPU, bound the rate.\n",
        ctx.reps
    );
    let mut t = Table::new(&[
        "threads",
        "one region (commits/s)",
        "two regions, one environment (commits/s)",
        "ratio",
        "two region files (commits/s)",
        "ratio",
        "log syncs per commit",
        "CPU µs per commit",
        "context switches per commit",
        "attempts per commit",
    ]);
    // (ratio of the environment, of the files) per row
    let mut ratios = Vec::new();
    // (threads, µs added to every log sync: 0, or as on a device whose
    // flush costs ~1 ms, where syncs and not CPU bound the rate)
    for (threads, slow) in [(1u64, 0u64), (4, 0), (4, SLOW_SYNC_US)] {
        let label = if slow == 0 {
            threads.to_string()
        } else {
            format!("{threads}, syncs {slow} µs slower")
        };
        let mut runs: [Vec<Run>; 3] = Default::default();
        type Workload = fn(&Path, u64, u64) -> Res<Run>;
        let workloads: [(&str, Workload); 3] = [
            ("one region", one_region),
            ("two regions of one environment", env_regions),
            ("two region files", two_regions),
        ];
        for rep in 0..ctx.reps {
            // Rotated, so that no workload always runs first.
            for k in 0..3 {
                let w = (k + rep) % 3;
                let (what, f) = workloads[w];
                ctx.progress(format!("regions: {label} threads, {what}, run {}", rep + 1));
                let d =
                    crate::report::fresh(&ctx.dir, &format!("regions-{w}-{threads}-{slow}-{rep}"))?;
                txmap::debug::slow_syncs(slow);
                let r = f(&d, threads, n);
                txmap::debug::slow_syncs(0);
                runs[w].push(r?);
            }
        }
        let rates = |v: &[Run]| Summary::of(&v.iter().map(|r| r.rate).collect::<Vec<_>>());
        let med = |v: &[Run], f: fn(&Run) -> f64| {
            Summary::of(&v.iter().map(f).collect::<Vec<_>>()).median
        };
        // "one / environment / files" medians of a per-commit figure.
        let three = |digits: usize, f: fn(&Run) -> f64| {
            let [a, b, c] = [0, 1, 2].map(|w| med(&runs[w], f));
            format!("{a:.digits$} / {b:.digits$} / {c:.digits$}")
        };
        let [s1, se, sf] = [0, 1, 2].map(|w| rates(&runs[w]));
        let (re, rf) = (se.median / s1.median, sf.median / s1.median);
        ratios.push((label.clone(), re, rf));
        t.row(vec![
            label,
            s1.cell(),
            se.cell(),
            format!("{re:.2}"),
            sf.cell(),
            format!("{rf:.2}"),
            three(2, |r| r.syncs),
            three(0, |r| r.cpu_us),
            three(1, |r| r.switches),
            three(3, |r| r.tries),
        ]);
    }
    t.print();
    let pct = |i: usize, f: fn(&(String, f64, f64)) -> f64| f(&ratios[i]) * 100.0;
    ctx.target(
        "two-region transfers: durable commits/s within 10 % of the one-region workload",
        format!(
            "two regions of one environment: {:.0} % of one region with 1 thread, {:.0} % with 4 \
             ({:.0} % with 1 ms slower syncs); two region files: {:.0} %, {:.0} %, {:.0} %",
            pct(0, |r| r.1),
            pct(1, |r| r.1),
            pct(2, |r| r.1),
            pct(0, |r| r.2),
            pct(1, |r| r.2),
            pct(2, |r| r.2),
        ),
        Some(ratios.iter().all(|r| r.1 >= 0.9)),
    );
    Ok(())
}
