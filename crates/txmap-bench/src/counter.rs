//! One shared counter updated by 16 threads: the commutative add
//! (`View::add_u64`, applied again at commit to the newest value) against
//! the same counter by plain read-modify-write (conflicts and retries).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::Instant;

use txmap::{Durability, Options, Region};

use crate::report::{Ctx, Res, Summary, Table, num};

const THREADS: usize = 16;
const WAYS: [&str; 2] = ["commutative add", "read-modify-write"];

const MODES: [Durability; 2] = [Durability::Async, Durability::Durable];

pub fn steps(reps: usize) -> usize {
    MODES.len() * WAYS.len() * reps.min(3)
}

/// One run: (commits/s, retries per 1,000 commits).
fn one_run(ctx: &Ctx, durability: Durability, commutative: bool, rep: usize) -> Res<(f64, f64)> {
    let path = ctx
        .dir
        .join(format!("counter-{durability:?}-{commutative}-{rep}.txm"));
    let opts = Options {
        durability,
        ..Options::default()
    };
    let r = Region::create(&path, 4096, opts)?;
    let per = ctx.count(per_thread(durability)) as u64;
    let attempts = Arc::new(AtomicU64::new(0));
    let start = Arc::new(Barrier::new(THREADS + 1));
    let workers: Vec<_> = (0..THREADS)
        .map(|_| {
            let (r, attempts, start) = (r.clone(), attempts.clone(), start.clone());
            std::thread::spawn(move || -> txmap::Result<()> {
                let mut v = r.view()?;
                start.wait();
                for _ in 0..per {
                    v.run(|v| {
                        attempts.fetch_add(1, Ordering::Relaxed);
                        if commutative {
                            v.add_u64(0, 1)
                        } else {
                            let n: u64 = v.read(0)?;
                            v.write(0, &(n + 1))
                        }
                    })?;
                }
                Ok(())
            })
        })
        .collect();
    start.wait();
    let t0 = Instant::now();
    for w in workers {
        w.join().map_err(|_| "counter worker panicked")??;
    }
    let secs = t0.elapsed().as_secs_f64();
    let commits = per * THREADS as u64;
    let mut v = r.view()?;
    v.begin_read()?;
    let n: u64 = v.read(0)?;
    v.commit()?;
    if n != commits {
        return Err(format!("counter holds {n} after {commits} commits").into());
    }
    let retries = attempts.load(Ordering::Relaxed) - commits;
    drop(v);
    drop(r);
    let _ = std::fs::remove_file(&path);
    let _ = std::fs::remove_file(txmap::log_path(&path));
    let _ = std::fs::remove_file(path.with_file_name(format!(
        "{}-sums",
        path.file_name().map_or_else(String::new, |f| f.to_string_lossy().into_owned())
    )));
    Ok((
        commits as f64 / secs,
        1000.0 * retries as f64 / commits as f64,
    ))
}

/// Transactions per thread (before --quick scaling).
fn per_thread(d: Durability) -> usize {
    match d {
        Durability::Durable => 400,
        _ => 2_000,
    }
}

pub fn run(ctx: &mut Ctx) -> Res<()> {
    println!("## One shared counter, {THREADS} threads\n");
    println!(
        "Each thread commits {} (async) or {} (durable) transactions that add 1 to one u64, \
         one view per thread: by the commutative add (`View::add_u64`) or by a plain read \
         and write. Median (min–max) of {} runs.\n",
        ctx.count(per_thread(Durability::Async)),
        ctx.count(per_thread(Durability::Durable)),
        ctx.reps.min(3)
    );
    let mut t = Table::new(&[
        "durability",
        "update",
        "commits/s",
        "retries per 1,000 commits",
    ]);
    for d in MODES {
        let mut medians = Vec::new();
        for (i, way) in WAYS.iter().enumerate() {
            let (mut rate, mut retries) = (Vec::new(), Vec::new());
            for rep in 0..ctx.reps.min(3) {
                ctx.progress(format!("counter: {d:?} {way} run {}", rep + 1));
                let (c, r) = one_run(ctx, d, i == 0, rep)?;
                rate.push(c);
                retries.push(r);
            }
            let s = Summary::of(&rate);
            medians.push(s.median);
            t.row(vec![
                format!("{d:?}"),
                (*way).into(),
                s.cell(),
                num(Summary::of(&retries).median),
            ]);
        }
        let ratio = medians[0] / medians[1];
        ctx.target(
            format!(
                "{THREADS}-thread counter ({d:?}): commutative add ≥ 10× read-modify-write commits/s"
            ),
            format!("{ratio:.1}×"),
            Some(ratio >= 10.0),
        );
    }
    t.print();
    Ok(())
}
