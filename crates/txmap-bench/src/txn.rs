//! Measurement 2: begin+commit cost of small transactions.

use std::hint::black_box;
use std::path::Path;
use std::time::{Duration, Instant};

use txmap::{Durability, Options, Region, TxnOptions, View};

use crate::report::{Ctx, Res, Summary, Table, num};

const PAGE: u64 = 4096;
pub const STEPS: usize = 4;

fn options(durability: Durability) -> Options {
    Options {
        durability,
        max_size: 1 << 20,
        ..Options::default()
    }
}

fn remove(path: &Path) {
    let _ = std::fs::remove_file(path);
    let _ = std::fs::remove_file(txmap::log_path(path));
}

/// Runs `body` `k` times per repetition; returns ns per call and faults per call.
fn timed(
    ctx: &Ctx,
    v: &mut View,
    k: usize,
    mut body: impl FnMut(&mut View, u64) -> txmap::Result<()>,
) -> txmap::Result<(Vec<f64>, f64)> {
    let mut vals = Vec::new();
    let mut faults = 0;
    let mut calls = 0;
    for rep in 0..ctx.reps {
        let f0 = v.faults();
        let t = Instant::now();
        for i in 0..k {
            body(v, (rep * k + i) as u64 + 1)?;
        }
        vals.push(t.elapsed().as_secs_f64() * 1e9 / k as f64);
        faults += v.faults() - f0;
        calls += k;
    }
    Ok((vals, faults as f64 / calls as f64))
}

/// Runs `body` until `max` calls or `limit` elapsed per repetition.
fn timed_capped(
    ctx: &Ctx,
    v: &mut View,
    max: usize,
    limit: Duration,
    mut body: impl FnMut(&mut View, u64) -> txmap::Result<()>,
) -> txmap::Result<(Vec<f64>, f64, u64)> {
    let mut vals = Vec::new();
    let mut faults = 0;
    let mut calls = 0;
    let mut x = 0;
    for _ in 0..ctx.reps {
        let f0 = v.faults();
        let t = Instant::now();
        let mut k = 0;
        while k < max && t.elapsed() < limit {
            x += 1;
            body(v, x)?;
            k += 1;
        }
        vals.push(t.elapsed().as_secs_f64() * 1e9 / k as f64);
        faults += v.faults() - f0;
        calls += k;
    }
    Ok((vals, faults as f64 / calls as f64, x))
}

fn one_page_write(v: &mut View, x: u64) -> txmap::Result<()> {
    v.begin()?;
    if let Err(e) = v.write(8 * PAGE, &x) {
        v.rollback();
        return Err(e);
    }
    v.commit()
}

fn check_last(ctx: &mut Ctx, v: &mut View, what: &str, want: u64) -> txmap::Result<()> {
    v.begin_read()?;
    let got = v.read::<u64>(8 * PAGE);
    v.commit()?;
    if got? != want {
        ctx.anomaly(format!(
            "{what}: the last committed value {want} did not read back"
        ));
    }
    Ok(())
}

/// µs per 64-byte appending pwrite (what an Async commit waits for), per repetition.
fn pwrite_append(ctx: &Ctx) -> Res<Vec<f64>> {
    use std::os::unix::fs::FileExt;
    let path = ctx.dir.join("pwrite.dat");
    let k = ctx.count(20_000);
    let buf = [0x3cu8; 64];
    let mut vals = Vec::new();
    for _ in 0..ctx.reps {
        let f = std::fs::File::create(&path)?;
        let t = Instant::now();
        for i in 0..k as u64 {
            f.write_all_at(&buf, i * 64)?;
        }
        vals.push(t.elapsed().as_secs_f64() * 1e6 / k as f64);
    }
    let _ = std::fs::remove_file(&path);
    Ok(vals)
}

/// Faults per transaction: whole numbers plainly, small fractions in e-notation.
fn per_txn(x: f64) -> String {
    if x == x.round() {
        format!("{x:.0}")
    } else if x >= 0.01 {
        format!("{x:.2}")
    } else {
        format!("{x:.1e}")
    }
}

/// Resident memory of this process, KiB.
fn rss_kib() -> usize {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

pub fn run(ctx: &mut Ctx) -> Res<()> {
    println!("## 2. Transaction overhead (begin + commit)\n");
    let mut t = Table::new(&[
        "transaction",
        "time per transaction, median (min–max)",
        "faults per transaction",
        "transactions per repetition",
    ]);

    let path = ctx.dir.join("txn.txm");
    let region = Region::create(&path, 64 * PAGE, options(Durability::Durable))?;
    let mut v = region.view()?;

    ctx.progress("read-only transaction on current pages");
    v.begin_read()?;
    for p in 0..4 {
        black_box(v.read::<u64>(p * PAGE)?);
    }
    v.commit()?;
    let k = ctx.count(200_000);
    let (vals, faults) = timed(ctx, &mut v, k, |v, i| {
        v.begin_read()?;
        let r = v.read::<u64>((i & 3) * PAGE).map(black_box);
        v.commit()?;
        r.map(drop)
    })?;
    if faults != 0.0 {
        ctx.anomaly(format!(
            "read-only transactions on current pages took {faults} faults per transaction (expected none)"
        ));
    }
    let ro = Summary::of(&vals);
    ctx.target(
        "read-only transaction on current pages: begin+commit ≤ 1 µs, no faults",
        format!("{} ns, {faults} faults per transaction", num(ro.median)),
        Some(ro.median <= 1000.0 && faults == 0.0),
    );
    t.row(vec![
        "read-only (`begin_read`), read one u64 of 4 current pages, commit".into(),
        format!("{} ns", Summary::of(&vals).cell()),
        per_txn(faults),
        k.to_string(),
    ]);

    ctx.progress("serializable and snapshot read transactions on current pages");
    let k = ctx.count(50_000);
    let (vals, faults) = timed(ctx, &mut v, k, |v, i| {
        v.begin()?;
        let r = v.read::<u64>((i & 3) * PAGE).map(black_box);
        v.commit()?;
        r.map(drop)
    })?;
    t.row(vec![
        "serializable read-write (`begin`), read one u64 of 4 current pages, commit".into(),
        format!("{} ns", Summary::of(&vals).cell()),
        per_txn(faults),
        k.to_string(),
    ]);

    let k = ctx.count(50_000);
    let (vals, faults) = timed(ctx, &mut v, k, |v, i| {
        v.begin_with(TxnOptions::SNAPSHOT)?;
        let r = v.read::<u64>((i & 3) * PAGE).map(black_box);
        v.commit()?;
        r.map(drop)
    })?;
    t.row(vec![
        "snapshot-isolation read-write (`TxnOptions::SNAPSHOT`), read one u64 of 4 current pages, commit".into(),
        format!("{} ns", Summary::of(&vals).cell()),
        per_txn(faults),
        k.to_string(),
    ]);

    ctx.progress("one-page write transaction, durable");
    let max = ctx.count(400);
    let limit = Duration::from_millis(if ctx.quick { 300 } else { 1000 });
    let (vals, faults, last) = timed_capped(ctx, &mut v, max, limit, one_page_write)?;
    check_last(ctx, &mut v, "durable one-page writes", last)?;
    let us: Vec<f64> = vals.iter().map(|ns| ns / 1e3).collect();
    t.row(vec![
        "one-page write (8 bytes), `Durability::Durable`".into(),
        format!("{} µs", Summary::of(&us).cell()),
        per_txn(faults),
        format!("≤{max} (≤{} ms)", limit.as_millis()),
    ]);
    drop((v, region));
    remove(&path);

    ctx.progress("one-page write transaction, async");
    let path = ctx.dir.join("txn-async.txm");
    let region = Region::create(&path, 64 * PAGE, options(Durability::Async))?;
    let mut v = region.view()?;
    let k = ctx.count(20_000);
    let rss0 = rss_kib();
    let (vals, faults) = timed(ctx, &mut v, k, one_page_write)?;
    let held = region.stats();
    let rss1 = rss_kib();
    check_last(ctx, &mut v, "async one-page writes", (ctx.reps * k) as u64)?;
    let us: Vec<f64> = vals.iter().map(|ns| ns / 1e3).collect();
    t.row(vec![
        "one-page write (8 bytes), `Durability::Async`".into(),
        format!("{} µs", Summary::of(&us).cell()),
        per_txn(faults),
        k.to_string(),
    ]);
    let commits = ctx.reps * k;
    let memory = format!(
        "After the {commits} async one-page commits (all to the same page, no checkpoint yet: \
         the log holds {} KiB), the region keeps {} page versions in memory \
         (`Stats::version_pages`; {} MiB of page data), and the process's resident memory \
         grew by {} MiB ({:.1} KiB per commit).",
        held.log_bytes / 1024,
        held.version_pages,
        (held.version_pages * PAGE as usize) >> 20,
        rss1.saturating_sub(rss0) >> 10,
        rss1.saturating_sub(rss0) as f64 / commits as f64,
    );
    // Versions newer than the last sync must stay (a checkpoint may need
    // them); once synced, the next commit to the page frees the old ones.
    region.sync()?;
    v.run(|v| v.write(0, &u64::MAX))?;
    let after = region.stats().version_pages;
    let memory = format!(
        "{memory} They are the commits since the last sync (async mode syncs every 50 ms); \
         after `Region::sync` and one more commit, {after} remain."
    );
    if after > 2 {
        ctx.anomaly(format!(
            "memory: after a sync and one more commit, {after} versions of one page remain in memory \
             (expected at most 2)"
        ));
    }
    region.sync()?;
    drop((v, region));
    remove(&path);
    let us = pwrite_append(ctx)?;
    t.row(vec![
        "for reference: pwrite of 64 bytes appended to a file in --dir, no sync".into(),
        format!("{} µs", Summary::of(&us).cell()),
        "–".into(),
        ctx.count(20_000).to_string(),
    ]);

    t.print();
    println!(
        "Each repetition runs the transaction in a loop on one view and divides the elapsed \
         time by the count. The read-only view was warmed once (4 pages touched) before timing; \
         its fault counter is compared before and after each repetition.\n"
    );
    println!("{memory}\n");
    Ok(())
}
