//! Abort rates of concurrent writers on the collections (issue 4).
//!
//! Each run: a fresh region (`Durability::Async`, so commits do not wait for
//! a sync and the measured conflicts are those of the structure), a
//! structure prefilled with random keys, then T threads (one view each)
//! insert random 16-byte keys with 100-byte values, one insert per
//! transaction, retrying on conflict. Abort rate = conflicts / attempts.
//! Strategies, cumulative:
//! - `naive`: serializable, immediate retry;
//! - `backoff`: randomised exponential backoff before a retry;
//! - `split apart`: structural changes (B+-tree leaf splits, CO B-tree
//!   rebalances, hash bucket splits) committed in a transaction of their
//!   own, before (trees) or after (hash) the insert, so an insert transaction stays short and a
//!   split that conflicts is retried alone;
//! - `snapshot`: as `split apart`, under snapshot isolation, so only pages
//!   both transactions wrote conflict (reading a node another transaction
//!   split is no longer a conflict); single-operation transactions on these
//!   structures stay correct, because every change that could invalidate an
//!   insert writes the page the insert writes (docs/COLLECTIONS.md).

use std::sync::{Arc, Barrier};
use std::time::Instant;

use txmap::collections::btree::TryPut;
use txmap::collections::{BTree, CoBTree, LinearHash, Map};
use txmap::{Durability, Error, Options, Region, TxnOptions, View};

use crate::report::{Ctx, Res, Summary, Table, num};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Strategy {
    Naive,
    Backoff,
    SplitApart,
    Snapshot,
}

const STRATEGIES: [Strategy; 4] = [
    Strategy::Naive,
    Strategy::Backoff,
    Strategy::SplitApart,
    Strategy::Snapshot,
];

impl Strategy {
    fn name(self) -> &'static str {
        match self {
            Strategy::Naive => "naive",
            Strategy::Backoff => "backoff",
            Strategy::SplitApart => "split apart",
            Strategy::Snapshot => "snapshot",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Structure {
    BTree(BTree),
    CoBTree(CoBTree),
    Hash(LinearHash),
}

const KINDS: [&str; 3] = ["B+-tree", "CO B-tree", "linear hash"];
const THREADS: [usize; 2] = [2, 4];
/// Keys in the structure before the writers start (scaled by --quick): an
/// empty structure splits its root often, a large one rarely.
const PREFILL: [usize; 2] = [0, 20_000];

pub fn steps(reps: usize) -> usize {
    KINDS.len() * STRATEGIES.len() * THREADS.len() * PREFILL.len() * reps.min(3)
}

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

#[derive(Default, Clone, Copy)]
struct Counts {
    attempts: u64,
    conflicts: u64,
}

/// Runs one transaction `f` until it commits; counts attempts and conflicts.
fn txn<T>(
    v: &mut View,
    opts: TxnOptions,
    backoff: bool,
    rng: &mut Rng,
    c: &mut Counts,
    mut f: impl FnMut(&mut View) -> txmap::Result<T>,
) -> txmap::Result<T> {
    let mut limit = 2u64;
    loop {
        c.attempts += 1;
        v.begin_with(opts)?;
        let r = match f(v) {
            Ok(x) => v.commit().map(|_| x),
            Err(e) => {
                v.rollback();
                Err(e)
            }
        };
        match r {
            Err(Error::Conflict) => {
                c.conflicts += 1;
                if backoff {
                    let us = rng.next() % limit;
                    limit = (limit * 2).min(5_000);
                    if us < 2 {
                        std::thread::yield_now();
                    } else {
                        std::thread::sleep(std::time::Duration::from_micros(us));
                    }
                }
            }
            other => return other,
        }
    }
}

fn key(rng: &mut Rng) -> [u8; 16] {
    let mut k = [0u8; 16];
    k[..8].copy_from_slice(&rng.next().to_be_bytes());
    k[8..].copy_from_slice(&rng.next().to_be_bytes());
    k
}

fn insert(
    s: Structure,
    v: &mut View,
    strat: Strategy,
    rng: &mut Rng,
    c: &mut Counts,
    k: &[u8],
    val: &[u8],
) -> txmap::Result<()> {
    let opts = if strat == Strategy::Snapshot {
        TxnOptions::SNAPSHOT
    } else {
        TxnOptions::default()
    };
    let backoff = strat != Strategy::Naive;
    let apart = matches!(strat, Strategy::SplitApart | Strategy::Snapshot);
    match s {
        Structure::BTree(t) if apart => loop {
            match txn(v, opts, backoff, rng, c, |v| t.try_put(v, k, val))? {
                TryPut::NeedsSplit => txn(v, opts, backoff, rng, c, |v| t.split_for(v, k))?,
                _ => return Ok(()),
            }
        },
        Structure::CoBTree(t) if apart => loop {
            match txn(v, opts, backoff, rng, c, |v| t.try_put(v, k, val))? {
                TryPut::NeedsSplit => txn(v, opts, backoff, rng, c, |v| t.rebalance_for(v, k))?,
                _ => return Ok(()),
            }
        },
        Structure::Hash(h) if apart => {
            let (_, split) = txn(v, opts, backoff, rng, c, |v| h.put_deferred(v, k, val))?;
            if split {
                txn(v, opts, backoff, rng, c, |v| h.split_step(v))?;
            }
            Ok(())
        }
        Structure::BTree(t) => txn(v, opts, backoff, rng, c, |v| t.put(v, k, val)).map(drop),
        Structure::CoBTree(t) => txn(v, opts, backoff, rng, c, |v| t.put(v, k, val)).map(drop),
        Structure::Hash(h) => txn(v, opts, backoff, rng, c, |v| h.put(v, k, val)).map(drop),
    }
}

struct Outcome {
    counts: Counts,
    secs: f64,
    inserts: u64,
}

fn one_run(
    ctx: &Ctx,
    kind: usize,
    threads: usize,
    strat: Strategy,
    prefill: u64,
    rep: usize,
) -> Res<Outcome> {
    let path = ctx.dir.join(format!("aborts-{kind}-{threads}-{rep}.txm"));
    let opts = Options {
        durability: Durability::Async,
        ..Options::default()
    };
    let region = Region::create(&path, 1 << 20, opts)?;
    let per_thread = ctx.count(2_000) as u64;
    let s = {
        let mut v = region.view()?;
        let s = v.run(|v| {
            Ok(match kind {
                0 => Structure::BTree(BTree::create(v)?),
                1 => Structure::CoBTree(CoBTree::create(v)?),
                _ => Structure::Hash(LinearHash::create(v, 4)?),
            })
        })?;
        let mut rng = Rng(rep as u64 * 1000 + kind as u64);
        let val = [7u8; 100];
        for _ in 0..prefill / 1000 {
            v.run(|v| {
                for _ in 0..1000 {
                    let k = key(&mut rng);
                    match s {
                        Structure::BTree(t) => t.put(v, &k, &val)?,
                        Structure::CoBTree(t) => t.put(v, &k, &val)?,
                        Structure::Hash(h) => h.put(v, &k, &val)?,
                    };
                }
                Ok(())
            })?;
        }
        s
    };
    let barrier = Arc::new(Barrier::new(threads));
    let start = Instant::now();
    let hs: Vec<_> = (0..threads)
        .map(|t| {
            let region = region.clone();
            let barrier = barrier.clone();
            std::thread::spawn(move || -> txmap::Result<Counts> {
                txmap::collections::alloc::set_thread_arena(t as u64);
                let mut v = region.view()?;
                let mut rng = Rng((rep * 100 + t + 1) as u64 * 7919);
                let mut c = Counts::default();
                let val = [t as u8; 100];
                barrier.wait();
                for _ in 0..per_thread {
                    let k = key(&mut rng);
                    insert(s, &mut v, strat, &mut rng, &mut c, &k, &val)?;
                }
                Ok(c)
            })
        })
        .collect();
    let mut total = Counts::default();
    for h in hs {
        let c = h.join().map_err(|_| "writer thread panicked")??;
        total.attempts += c.attempts;
        total.conflicts += c.conflicts;
    }
    let secs = start.elapsed().as_secs_f64();
    // The structure must hold every insert and pass its check.
    let mut v = region.view()?;
    v.begin_read()?;
    let rep_ = match s {
        Structure::BTree(t) => Map::check(&t, &v)?,
        Structure::CoBTree(t) => Map::check(&t, &v)?,
        Structure::Hash(h) => Map::check(&h, &v)?,
    };
    v.commit()?;
    drop(v);
    let want = prefill + per_thread * threads as u64;
    if rep_.entries != want {
        return Err(format!(
            "{} holds {} entries after the run, expected {want}",
            KINDS[kind], rep_.entries
        )
        .into());
    }
    drop(region);
    let _ = std::fs::remove_file(&path);
    let _ = std::fs::remove_file(txmap::log_path(&path));
    Ok(Outcome {
        counts: total,
        secs,
        inserts: per_thread * threads as u64,
    })
}

pub fn run(ctx: &mut Ctx) -> Res<()> {
    println!("## Collections: abort rates of concurrent writers\n");
    println!(
        "Random 16-byte keys with 100-byte values inserted into an empty or prefilled structure, \
         {} inserts per thread, one insert per transaction, `Durability::Async`, one view and one \
         heap arena per thread. Abort rate = conflicts / transaction attempts, median (min–max) of \
         {} runs; structural-change transactions count as attempts too.\n",
        ctx.count(2_000),
        ctx.reps.min(3)
    );
    let mut t = Table::new(&[
        "structure",
        "prefill",
        "threads",
        "strategy",
        "abort rate %",
        "attempts per insert",
        "inserts/s",
    ]);
    for (kind, kind_name) in KINDS.iter().enumerate() {
        for (&pf, &threads) in PREFILL
            .iter()
            .flat_map(|p| THREADS.iter().map(move |t| (p, t)))
        {
            let prefill = ctx.count(pf) as u64 / 1000 * 1000;
            for strat in STRATEGIES {
                let mut rates = Vec::new();
                let mut per = Vec::new();
                let mut rate_s = Vec::new();
                for rep in 0..ctx.reps.min(3) {
                    ctx.progress(format!(
                        "aborts: {} prefill {prefill} {threads} threads {} run {}",
                        kind_name,
                        strat.name(),
                        rep + 1
                    ));
                    let o = one_run(ctx, kind, threads, strat, prefill, rep)?;
                    rates.push(100.0 * o.counts.conflicts as f64 / o.counts.attempts as f64);
                    per.push(o.counts.attempts as f64 / o.inserts as f64);
                    rate_s.push(o.inserts as f64 / o.secs);
                }
                t.row(vec![
                    (*kind_name).into(),
                    prefill.to_string(),
                    threads.to_string(),
                    strat.name().into(),
                    Summary::of(&rates).cell(),
                    num(Summary::of(&per).median),
                    num(Summary::of(&rate_s).median),
                ]);
            }
        }
    }
    t.print();
    Ok(())
}
