//! Several regions in one transaction (issue 19, point 1): durable
//! transfers between two regions (`View::run_group`, each commit written to
//! both logs under both commit locks, then synced in parallel) against the same transfers inside one
//! region, in commits per second; the target is within 10 %.
//!
//! A transfer moves an amount from a random account to another (one u64 per
//! page, `ACCOUNTS` per side): in the one-region workload both sides are in
//! one region, in the two-region one each side is a region of its own, so
//! both write two pages per commit.

use std::path::Path;
use std::time::Instant;

use txmap::{Durability, Options, Region, View};

use crate::report::{Ctx, Res, Summary, Table};

const PAGE: u64 = 4096;
const ACCOUNTS: u64 = 64;

pub fn steps(reps: usize) -> usize {
    4 * reps
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

/// `threads` threads each commit `n` transfers; returns commits/s.
fn one_region(dir: &Path, threads: u64, n: u64) -> Res<f64> {
    let r = Region::create(&dir.join("one"), 2 * ACCOUNTS * PAGE, opts())?;
    let start = Instant::now();
    std::thread::scope(|s| -> Res<()> {
        let hs: Vec<_> = (0..threads)
            .map(|t| {
                let r = &r;
                s.spawn(move || -> txmap::Result<()> {
                    let mut v = r.view()?;
                    let mut x = t + 1;
                    for _ in 0..n {
                        let (i, j) = (next(&mut x) % ACCOUNTS, ACCOUNTS + next(&mut x) % ACCOUNTS);
                        v.run(|v| {
                            let a: u64 = v.read(i * PAGE)?;
                            let b: u64 = v.read(j * PAGE)?;
                            v.write(i * PAGE, &a.wrapping_sub(7))?;
                            v.write(j * PAGE, &b.wrapping_add(7))
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
    r.close()?;
    Ok((threads * n) as f64 / secs)
}

/// As `one_region`, each side a region of its own.
fn two_regions(dir: &Path, threads: u64, n: u64) -> Res<f64> {
    let ra = Region::create(&dir.join("a"), ACCOUNTS * PAGE, opts())?;
    let rb = Region::create(&dir.join("b"), ACCOUNTS * PAGE, opts())?;
    let start = Instant::now();
    std::thread::scope(|s| -> Res<()> {
        let hs: Vec<_> = (0..threads)
            .map(|t| {
                let (ra, rb) = (&ra, &rb);
                s.spawn(move || -> txmap::Result<()> {
                    let (mut va, mut vb) = (ra.view()?, rb.view()?);
                    let mut x = t + 1;
                    for _ in 0..n {
                        let (i, j) = (next(&mut x) % ACCOUNTS, next(&mut x) % ACCOUNTS);
                        View::run_group(&mut [&mut va, &mut vb], |v| {
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
    ra.close()?;
    rb.close()?;
    Ok((threads * n) as f64 / secs)
}

pub fn run(ctx: &mut Ctx) -> Res<()> {
    println!("## Several regions in one transaction: durable transfers (issue 19)\n");
    let n: u64 = if ctx.quick { 300 } else { 2000 };
    println!(
        "Each thread commits {n} durable transfers (two u64 accounts, on two pages, of \
         {ACCOUNTS} per side): in one region (`View::run`), or between two regions of one \
         directory (`View::run_group`: both commit locks until a record is in each log, \
         then the two logs synced in parallel, shared with concurrent group commits, before \
         any snapshot sees it). Commits per second, median of {} runs; \
         *ratio*: two regions / one region.\n",
        ctx.reps
    );
    let mut t = Table::new(&[
        "threads",
        "one region (commits/s)",
        "two regions (commits/s)",
        "ratio",
    ]);
    let mut ratio1 = 0.0;
    for threads in [1u64, 4] {
        let (mut one, mut two) = (Vec::new(), Vec::new());
        for rep in 0..ctx.reps {
            ctx.progress(format!(
                "regions: {threads} threads, one region, run {}",
                rep + 1
            ));
            let d = crate::report::fresh(&ctx.dir, &format!("regions-one-{threads}-{rep}"))?;
            one.push(one_region(&d, threads, n)?);
            ctx.progress(format!(
                "regions: {threads} threads, two regions, run {}",
                rep + 1
            ));
            let d = crate::report::fresh(&ctx.dir, &format!("regions-two-{threads}-{rep}"))?;
            two.push(two_regions(&d, threads, n)?);
        }
        let (s1, s2) = (Summary::of(&one), Summary::of(&two));
        let ratio = s2.median / s1.median;
        if threads == 1 {
            ratio1 = ratio;
        }
        t.row(vec![
            threads.to_string(),
            s1.cell(),
            s2.cell(),
            format!("{ratio:.2}"),
        ]);
    }
    t.print();
    ctx.target(
        "two-region transfers: durable commits/s within 10 % of the one-region workload",
        format!("1 thread: {:.0} % of one region", ratio1 * 100.0),
        Some(ratio1 >= 0.9),
    );
    Ok(())
}
