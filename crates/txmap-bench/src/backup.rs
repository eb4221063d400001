//! Backups and page checksums (issue 21): what page checksums cost durable
//! commits and checkpoints (the same run, on and off side by side), and
//! online backup throughput of txmap beside LMDB's `mdb_env_copy` and
//! SQLite's backup API on the same data.

use std::path::Path;
use std::time::{Duration, Instant};

use txmap::{Options, Region};
use txmap_peers::{Config, Durability, Op, Store, stores};

use crate::report::{Ctx, Res, Summary, Table, num};

const PAGE: u64 = 4096;
/// Stores whose online backups are compared.
const STORES: [&str; 3] = ["txmap-btree", "lmdb", "sqlite"];

pub fn steps(reps: usize) -> usize {
    reps * 3 + STORES.len() * (1 + reps)
}

pub fn run(ctx: &mut Ctx) -> Res<()> {
    checksum_cost(ctx)?;
    backup_throughput(ctx)
}

/// One region of the cost measurement: page checksums on or off, the log
/// archived into a directory of its own or not.
fn region(ctx: &Ctx, name: &str, sums: bool, archive: bool) -> Res<Region> {
    let path = ctx.dir.join(name);
    let archive = archive.then(|| ctx.dir.join(format!("{name}-archive")));
    if let Some(a) = &archive {
        let _ = std::fs::remove_dir_all(a);
        std::fs::create_dir_all(a)?;
    }
    for p in [
        path.clone(),
        txmap::log_path(&path),
        txmap::sums::sums_path(&path),
    ] {
        let _ = std::fs::remove_file(p);
    }
    let opts = Options {
        max_size: 1 << 30,
        // Checkpoints every 1 MiB of log, so their cost shows in the rate.
        checkpoint_bytes: 1 << 20,
        page_checksums: sums,
        log_archive: archive,
        ..Options::default()
    };
    Ok(Region::create(&path, 4096 * PAGE, opts)?)
}

/// Durable commits per second for `d`, one thread, each commit writing
/// 64 bytes on one of `spread` pages (so checkpoints write many pages).
fn commit_rate(r: &Region, spread: u64, d: Duration) -> Res<f64> {
    let mut v = r.view()?;
    let start = r.stats().commit_seq << 20;
    let end = Instant::now() + d;
    let t = Instant::now();
    let mut n = 0u64;
    while Instant::now() < end {
        let page = (n * 7919) % spread;
        v.begin()?;
        // The commit number itself: never equal to what was there (an
        // unchanged page would make an empty commit, with no log record).
        let at = page * PAGE + (n % 64) * 64;
        v.slice_mut(at, 64)?.fill(0x5a);
        v.write(at, &(n + start))?;
        v.commit()?;
        n += 1;
    }
    Ok(n as f64 / t.elapsed().as_secs_f64())
}

/// Seconds to checkpoint `pages` dirty pages.
fn checkpoint_time(r: &Region, pages: u64) -> Res<f64> {
    let mut v = r.view()?;
    let round = r.stats().commit_seq;
    v.begin()?;
    for p in 0..pages {
        v.write(p * PAGE, &(round + p + 1))?;
    }
    v.commit()?;
    let t = Instant::now();
    r.checkpoint()?;
    Ok(t.elapsed().as_secs_f64())
}

fn checksum_cost(ctx: &mut Ctx) -> Res<()> {
    println!("## Page checksums and log archiving: cost on durable commits and checkpoints\n");
    println!(
        "Three regions side by side: page checksums on (log not archived), the log archived \
         (every epoch copied to a directory before the log is reset; checksums off), and \
         both off. Each repetition runs them in 8 alternating slices.\n"
    );
    let d = Duration::from_millis(if ctx.quick { 500 } else { 2000 });
    let regions = [
        region(ctx, "sums-on.txm", true, false)?,
        region(ctx, "archive-on.txm", false, true)?,
        region(ctx, "sums-off.txm", false, false)?,
    ];
    let mut rate = [Vec::new(), Vec::new(), Vec::new()];
    let mut ckpt = [Vec::new(), Vec::new(), Vec::new()];
    for rep in 1..=ctx.reps {
        ctx.progress(format!(
            "rep {rep}/{}: durable commits, checksums / archiving / neither",
            ctx.reps
        ));
        // In 8 slices, each in a rotated order, so load changes hit all alike.
        let mut sums = [0.0; 3];
        for slice in 0..8 {
            for k in 0..3 {
                let i = (slice + k) % 3;
                sums[i] += commit_rate(&regions[i], 4096, d / 8)? / 8.0;
            }
        }
        for i in 0..3 {
            rate[i].push(sums[i]);
        }
        ctx.progress(format!("rep {rep}/{}: checkpoint of 4096 pages", ctx.reps));
        for (i, r) in regions.iter().enumerate() {
            ckpt[i].push(checkpoint_time(r, 4096)? * 1e3);
        }
        ctx.progress(format!("rep {rep}/{}: idle", ctx.reps));
    }
    drop(regions);
    let _ = std::fs::remove_dir_all(ctx.dir.join("archive-on.txm-archive"));
    let mut t = Table::new(&[
        "measurement",
        "checksums on",
        "log archived",
        "neither",
        "checksums / neither (medians)",
        "archived / neither (medians)",
    ]);
    let rs: Vec<Summary> = rate.iter().map(|x| Summary::of(x)).collect();
    let cs: Vec<Summary> = ckpt.iter().map(|x| Summary::of(x)).collect();
    t.row(vec![
        format!(
            "durable commits/s, 1 thread, 64 B on one of 4096 pages, checkpoint every 1 MiB of log ({} s)",
            d.as_secs_f64()
        ),
        rs[0].cell(),
        rs[1].cell(),
        rs[2].cell(),
        num(rs[0].median / rs[2].median),
        num(rs[1].median / rs[2].median),
    ]);
    t.row(vec![
        "checkpoint of 4096 dirty pages (16 MiB), ms".into(),
        cs[0].cell(),
        cs[1].cell(),
        cs[2].cell(),
        num(cs[0].median / cs[2].median),
        num(cs[1].median / cs[2].median),
    ]);
    t.print();
    for (i, what) in [(0, "checksums"), (1, "log archiving")] {
        let cost = 1.0 - rs[i].median / rs[2].median;
        ctx.target(
            format!("durable commit rate with {what} within 5 % of without"),
            if cost >= 0.0 {
                format!("{:.1} % slower", cost * 100.0)
            } else {
                format!("{:.1} % faster", -cost * 100.0)
            },
            Some(cost <= 0.05),
        );
    }
    Ok(())
}

fn key(i: u64) -> [u8; 24] {
    let mut k = [0u8; 24];
    let x = i.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    k[..8].copy_from_slice(&x.to_be_bytes());
    k[8..16].copy_from_slice(&i.to_le_bytes());
    k
}

fn backup_throughput(ctx: &mut Ctx) -> Res<()> {
    println!("\n## Online backup of the same data\n");
    let n: u64 = if ctx.quick { 100_000 } else { 250_000 };
    println!(
        "{n} pairs (24-byte keys, 150-byte values) loaded in transactions of 1,000, then \
         copied with each store's online backup call while the store is open; the page \
         cache is warm; the stores take turns, one copy each per round. txmap's copy is \
         synced (three files and the directory); SQLite's backup commits into a new database \
         file in rollback-journal mode (synchronous=FULL syncs it); `mdb_env_copy` writes \
         the copy (LMDB does not document a sync). \"then synced\" adds an `fdatasync` of \
         every file of the copy and of its directory where the backup call did not sync \
         (LMDB's).\n"
    );
    let mut t = Table::new(&[
        "store",
        "source on disk (MiB)",
        "copy (MiB)",
        "backup time (ms)",
        "then synced (ms)",
        "copy MiB/s",
        "pairs/s (millions)",
    ]);
    // Every store is loaded first and the repetitions then take turns, so
    // a change in the machine's load (other builds) hits every store.
    let mut loaded = Vec::new();
    for id in STORES {
        let Some(p) = stores().into_iter().find(|p| p.id == id) else {
            continue;
        };
        if let Err(install) = p.available {
            println!("- {id}: not available ({install})\n");
            continue;
        }
        ctx.progress(format!("{id}: load {n} pairs"));
        let dir = ctx.dir.join(format!("backup-src-{id}"));
        std::fs::create_dir_all(&dir)?;
        let mut cfg = Config::new(&dir, Durability::Durable);
        cfg.expected_keys = n;
        cfg.expected_bytes = n * 174;
        let store: Box<dyn Store> = (p.open)(&cfg)?;
        load(&*store, n)?;
        let src_mib = txmap_peers::dir_disk_bytes(&dir)? as f64 / (1 << 20) as f64;
        loaded.push((id, p.name, dir, store, src_mib));
    }
    let mut times = vec![(Vec::new(), Vec::new(), 0.0); loaded.len()];
    for rep in 1..=ctx.reps {
        for ((id, _, _, store, _), (ms, synced, copy_mib)) in loaded.iter().zip(&mut times) {
            ctx.progress(format!("{id}: backup {rep}/{}", ctx.reps));
            let dst = ctx.dir.join(format!("backup-dst-{id}"));
            let _ = std::fs::remove_dir_all(&dst);
            std::fs::create_dir_all(&dst)?;
            let t0 = Instant::now();
            store.backup(&dst)?;
            ms.push(t0.elapsed().as_secs_f64() * 1e3);
            // What a durable copy costs: every file of it and its
            // directory synced, unless the backup did (a sync of what is
            // synced still flushes the device's cache: it would count
            // the flush twice).
            if !SYNCS_ITSELF.contains(id) {
                sync_all(&dst)?;
            }
            synced.push(t0.elapsed().as_secs_f64() * 1e3);
            *copy_mib = apparent_bytes(&dst)? as f64 / (1 << 20) as f64;
            std::fs::remove_dir_all(&dst)?;
        }
    }
    let mut medians = Vec::new();
    for ((id, name, dir, store, src_mib), (ms, synced, copy_mib)) in loaded.into_iter().zip(times) {
        drop(store);
        let _ = std::fs::remove_dir_all(&dir);
        let s = Summary::of(&ms);
        let s_synced = Summary::of(&synced);
        medians.push((id, s.median, s_synced.median));
        t.row(vec![
            name.to_string(),
            num(src_mib),
            num(copy_mib),
            s.cell(),
            s_synced.cell(),
            num(copy_mib / (s.median / 1e3)),
            num(n as f64 / (s.median / 1e3) / 1e6),
        ]);
    }
    t.print();
    if let Some(&(_, ours, ours_synced)) = medians.iter().find(|m| m.0 == "txmap-btree") {
        let best = |f: fn(&(&str, f64, f64)) -> f64| {
            medians
                .iter()
                .filter(|m| m.0 != "txmap-btree")
                .map(f)
                .fold(f64::INFINITY, f64::min)
        };
        let (best, best_synced) = (best(|m| m.1), best(|m| m.2));
        if best.is_finite() {
            ctx.target(
                "backup of the same data at least as fast as the faster of mdb_env_copy and SQLite's backup",
                format!("{}× the faster one's speed", num(best / ours)),
                Some(ours <= best),
            );
            ctx.target(
                "the same, each copy synced to disk (txmap's backup syncs; mdb_env_copy does not)",
                format!("{}× the faster one's speed", num(best_synced / ours_synced)),
                Some(ours_synced <= best_synced),
            );
        }
    }
    Ok(())
}

/// Stores whose backup call syncs the copy itself: txmap's (three files
/// and the directory) and SQLite's (a commit with synchronous=FULL).
const SYNCS_ITSELF: [&str; 2] = ["txmap-btree", "sqlite"];

fn load(store: &dyn Store, n: u64) -> Res<()> {
    let mut s = store.session()?;
    let value = [0x5au8; 150];
    let keys: Vec<[u8; 24]> = (0..n).map(key).collect();
    for chunk in keys.chunks(1000) {
        let ops: Vec<Op<'_>> = chunk.iter().map(|k| Op::Put(k, &value)).collect();
        s.write(&ops)?;
    }
    Ok(())
}

/// Syncs every file in `dir` (`fdatasync`) and then `dir` itself.
fn sync_all(dir: &Path) -> Res<()> {
    for e in std::fs::read_dir(dir)? {
        std::fs::File::open(e?.path())?.sync_data()?;
    }
    std::fs::File::open(dir)?.sync_all()?;
    Ok(())
}

/// Sum of the lengths of the files in `dir`.
fn apparent_bytes(dir: &Path) -> Res<u64> {
    let mut total = 0;
    for e in std::fs::read_dir(dir)? {
        total += e?.metadata()?.len();
    }
    Ok(total)
}
