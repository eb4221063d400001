//! Measurement 3: durable one-page commits per second with 1–8 writer
//! threads, beside the cost of one fdatasync on the same file system.

use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::sync::Barrier;
use std::time::{Duration, Instant};

use txmap::{Error, Options, Region};

use crate::report::{Ctx, Res, Summary, Table, num};

const PAGE: u64 = 4096;
pub const THREADS: [usize; 4] = [1, 2, 4, 8];
/// The "slower device" rows: each log sync takes this much longer.
const SLOW_SYNC_US: u64 = 1000;

/// Mean time of one `pwrite(4 KiB) + fdatasync` over a burst, in µs.
/// `append` grows the file every time (so the sync must also flush its size);
/// otherwise the same preallocated, synced block is overwritten.
pub fn fsync_cost(ctx: &Ctx, append: bool) -> Res<f64> {
    let path = ctx
        .dir
        .join(if append { "append.dat" } else { "fsync.dat" });
    let ops = ctx.count(60);
    let buf = [0xa5u8; PAGE as usize];
    let _ = std::fs::remove_file(&path);
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&path)?;
    if !append {
        f.write_all_at(&vec![0u8; 1 << 20], 0)?;
        f.sync_all()?;
    }
    let t = Instant::now();
    for i in 0..ops as u64 {
        f.write_all_at(&buf, if append { i * PAGE } else { 0 })?;
        f.sync_data()?;
    }
    let us = t.elapsed().as_secs_f64() * 1e6 / ops as f64;
    drop(f);
    let _ = std::fs::remove_file(&path);
    Ok(us)
}

struct Outcome {
    commits: u64,
    conflicts: u64,
    error: Option<String>,
}

/// `threads` writers, each with its own view and page, committing durable
/// one-page transactions for `d`. Returns commits per second in total and
/// commits per fdatasync call.
fn throughput(ctx: &mut Ctx, region: &Region, threads: usize, d: Duration) -> Res<(f64, f64)> {
    let views = (0..threads)
        .map(|_| region.view())
        .collect::<txmap::Result<Vec<_>>>()?;
    let barrier = Barrier::new(threads + 1);
    let syncs = crate::sys::fdatasync_calls();
    let (outcomes, elapsed) = std::thread::scope(|s| {
        let barrier = &barrier;
        let handles: Vec<_> = views
            .into_iter()
            .enumerate()
            .map(|(i, mut v)| {
                s.spawn(move || {
                    let page = (i as u64 + 1) * PAGE;
                    let mut o = Outcome {
                        commits: 0,
                        conflicts: 0,
                        error: None,
                    };
                    barrier.wait();
                    let end = Instant::now() + d;
                    let mut x = 0u64;
                    while Instant::now() < end {
                        x += 1;
                        let r = v.begin().and_then(|_| {
                            let w = v.write(page, &x);
                            if w.is_err() {
                                v.rollback();
                            }
                            w
                        });
                        match r.and_then(|_| v.commit()) {
                            Ok(()) => o.commits += 1,
                            Err(Error::Conflict) => o.conflicts += 1,
                            Err(e) => {
                                o.error = Some(e.to_string());
                                v.rollback();
                                break;
                            }
                        }
                    }
                    o
                })
            })
            .collect();
        barrier.wait();
        let t = Instant::now();
        let outcomes: Vec<Outcome> = handles
            .into_iter()
            .map(|h| {
                h.join().unwrap_or_else(|_| Outcome {
                    commits: 0,
                    conflicts: 0,
                    error: Some("writer thread panicked".into()),
                })
            })
            .collect();
        (outcomes, t.elapsed())
    });
    let mut total = 0;
    for (i, o) in outcomes.iter().enumerate() {
        total += o.commits;
        if o.conflicts > 0 {
            ctx.anomaly(format!(
                "{threads} writers on disjoint pages: thread {i} got {} conflicts",
                o.conflicts
            ));
        }
        if let Some(e) = &o.error {
            ctx.anomaly(format!("{threads} writers: thread {i} failed: {e}"));
        }
    }
    let syncs = crate::sys::fdatasync_calls() - syncs;
    // No counted call at all means the interposition did not take effect.
    let per_sync = if syncs == 0 {
        f64::NAN
    } else {
        total as f64 / syncs as f64
    };
    Ok((total as f64 / elapsed.as_secs_f64(), per_sync))
}

pub fn steps(reps: usize) -> usize {
    reps * (1 + 2 * THREADS.len())
}

pub fn run(ctx: &mut Ctx) -> Res<()> {
    println!("## 3. Durable commit throughput vs fdatasync\n");
    let path = ctx.dir.join("commit.txm");
    let opts = Options {
        max_size: 1 << 20,
        ..Options::default()
    };
    let region = Region::create(&path, 64 * PAGE, opts)?;
    let d = Duration::from_millis(if ctx.quick { 400 } else { 1000 });
    let (mut sync, mut append) = (Vec::new(), Vec::new());
    let mut rates = vec![Vec::new(); THREADS.len()];
    let mut groups = vec![Vec::new(); THREADS.len()];
    let mut slow_rates = vec![Vec::new(); THREADS.len()];
    let mut slow_groups = vec![Vec::new(); THREADS.len()];
    let (mut single_ratio, mut scale_ratio) = (Vec::new(), Vec::new());
    // Every repetition measures the fdatasync reference and all thread counts
    // back to back, so that each ratio compares numbers taken under the same
    // background load; the ratios are computed per repetition.
    for rep in 1..=ctx.reps {
        ctx.progress(format!("rep {rep}/{}: pwrite 4 KiB + fdatasync", ctx.reps));
        sync.push(fsync_cost(ctx, false)?);
        append.push(fsync_cost(ctx, true)?);
        for (i, threads) in THREADS.into_iter().enumerate() {
            ctx.progress(format!(
                "rep {rep}/{}: durable commits, {threads} writer thread(s)",
                ctx.reps
            ));
            let (rate, group) = throughput(ctx, &region, threads, d)?;
            rates[i].push(rate);
            groups[i].push(group);
            region.checkpoint()?;
        }
        // The same with every log sync made SLOW_SYNC_US longer (a sleep
        // after each fdatasync), as on a device whose flush costs ~1 ms.
        txmap::debug::slow_syncs(SLOW_SYNC_US);
        for (i, threads) in THREADS.into_iter().enumerate() {
            ctx.progress(format!(
                "rep {rep}/{}: durable commits, syncs {SLOW_SYNC_US} µs slower, {threads} writer thread(s)",
                ctx.reps
            ));
            let r = throughput(ctx, &region, threads, d / 2);
            if r.is_err() {
                txmap::debug::slow_syncs(0);
            }
            let (rate, group) = r?;
            slow_rates[i].push(rate);
            slow_groups[i].push(group);
        }
        txmap::debug::slow_syncs(0);
        region.checkpoint()?;
        let r1 = rates[0][rep - 1];
        single_ratio.push(1e6 / r1 / sync[rep - 1]);
        scale_ratio.push(rates[THREADS.len() - 1][rep - 1] / r1);
    }
    let sync = Summary::of(&sync);
    let append = Summary::of(&append);
    let rates: Vec<Summary> = rates.iter().map(|r| Summary::of(r)).collect();
    let single_ratio = Summary::of(&single_ratio);
    let scale_ratio = Summary::of(&scale_ratio);

    let mut t = Table::new(&[
        "operation on the --dir file system",
        "µs per operation, median (min–max)",
        "implied operations/s",
    ]);
    t.row(vec![
        "pwrite 4 KiB in place + fdatasync (the reference)".into(),
        sync.cell(),
        num(1e6 / sync.median),
    ]);
    t.row(vec![
        "pwrite 4 KiB appended + fdatasync (file grows each time)".into(),
        append.cell(),
        num(1e6 / append.median),
    ]);
    t.print();
    println!(
        "Each repetition: {} operations in a row, mean per operation.\n",
        ctx.count(60)
    );

    let mut t = Table::new(&[
        "writer threads",
        "durable commits/s, median (min–max)",
        "µs per commit (1 / rate)",
        "× 1 thread",
        "× 1/fdatasync",
        "commits per fdatasync call",
    ]);
    for ((threads, r), g) in THREADS.iter().zip(&rates).zip(&groups) {
        t.row(vec![
            threads.to_string(),
            r.cell(),
            num(1e6 / r.median),
            num(r.median / rates[0].median),
            num(r.median * sync.median / 1e6),
            per_sync_cell(g),
        ]);
    }
    t.print();
    println!(
        "Each writer has its own view and writes 8 bytes to its own page, then commits \
         (`Durability::Durable`), for {} ms per repetition; a checkpoint runs between \
         runs (not timed). \"Commits per fdatasync call\" counts the process's `fdatasync` \
         calls during the run (the benchmark interposes libc's `fdatasync` with a counting \
         wrapper): it is the group-commit factor, independent of how fast the disk is.\n",
        d.as_millis()
    );
    let slow: Vec<Summary> = slow_rates.iter().map(|r| Summary::of(r)).collect();
    let mut t = Table::new(&[
        "writer threads",
        "durable commits/s, each sync 1 ms slower, median (min–max)",
        "× 1 thread",
        "commits per fdatasync call",
    ]);
    for ((threads, r), g) in THREADS.iter().zip(&slow).zip(&slow_groups) {
        t.row(vec![
            threads.to_string(),
            r.cell(),
            num(r.median / slow[0].median),
            per_sync_cell(g),
        ]);
    }
    t.print();
    println!(
        "The same writers for {} ms per repetition, with every log sync made {SLOW_SYNC_US} µs \
         longer (`txmap::debug::slow_syncs`, a sleep after each `fdatasync`), as on a device \
         whose flush costs about 1 ms: there a sync round is long beside the time woken \
         writers need to commit again, which is what group commit's gathering is for.\n",
        (d / 2).as_millis()
    );
    println!(
        "- single-writer commit time / fdatasync time, per repetition: **{}** (target ≤ 1.3: {}); \
         from the medians above: {} / {} µs = {}",
        single_ratio.cell(),
        verdict(single_ratio.median <= 1.3),
        num(1e6 / rates[0].median),
        num(sync.median),
        num(1e6 / rates[0].median / sync.median),
    );
    println!(
        "- 8-thread commits/s / 1-thread commits/s, per repetition: **{}** (target ≥ 4: {}); \
         from the medians above: {} / {} = {}\n",
        scale_ratio.cell(),
        verdict(scale_ratio.median >= 4.0),
        num(rates[THREADS.len() - 1].median),
        num(rates[0].median),
        num(rates[THREADS.len() - 1].median / rates[0].median),
    );
    ctx.target(
        "durable single-writer commit ≤ 1.3 × one fdatasync",
        format!(
            "{} µs per commit vs {} µs per fdatasync; paired ratio {}",
            num(1e6 / rates[0].median),
            num(sync.median),
            single_ratio.cell()
        ),
        Some(single_ratio.median <= 1.3),
    );
    ctx.target(
        "8 concurrent writers ≥ 4 × the commits/s of 1",
        format!(
            "{} vs {} commits/s; paired ratio {}",
            num(rates[THREADS.len() - 1].median),
            num(rates[0].median),
            scale_ratio.cell()
        ),
        Some(scale_ratio.median >= 4.0),
    );
    drop(region);
    let _ = std::fs::remove_file(&path);
    let _ = std::fs::remove_file(txmap::log_path(&path));
    Ok(())
}

/// Commits per fdatasync call over the repetitions (NaN: not counted).
fn per_sync_cell(g: &[f64]) -> String {
    if g.iter().any(|x| x.is_nan()) {
        "n/a (fdatasync calls not counted)".into()
    } else {
        Summary::of(g).cell()
    }
}

fn verdict(met: bool) -> &'static str {
    if met { "met" } else { "missed" }
}
