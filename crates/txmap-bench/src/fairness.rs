//! Fairness for long transactions (issue 19, point 5): attempts a
//! transaction touching 256 pages needs to commit while 4 threads commit
//! one-page transactions on those pages without pause, for each setting of
//! `Options::priority_after` (0: no priority).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

use txmap::{Durability, Error, Options, Region};

use crate::report::{Ctx, Res, Summary, Table, num};

const PAGE: u64 = 4096;
const PAGES: u64 = 256;
const SHORT_THREADS: u64 = 4;
/// A long transaction that has not committed after this many attempts is
/// abandoned (counted as this many).
const GIVE_UP: u64 = 2_000;
const POLICIES: [u32; 5] = [0, 1, 2, 3, 5];
/// Arithmetic rounds per page of the long transaction (a few µs), so it
/// runs for about a millisecond, as a long transaction computes.
const WORK: u64 = 2_000;

fn work(mut v: u64) -> u64 {
    for i in 0..WORK {
        v = v.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(i);
    }
    std::hint::black_box(v)
}

pub fn steps(_reps: usize) -> usize {
    POLICIES.len()
}

/// One setting: (attempts of each long transaction, short commits/s,
/// commits that waited for a priority holder).
fn measure(path: &std::path::Path, after: u32, longs: usize) -> Res<(Vec<u64>, f64, u64)> {
    let o = Options {
        durability: Durability::Async,
        priority_after: after,
        ..Options::default()
    };
    let r = Region::create(path, (PAGES + 1) * PAGE, o)?;
    let stop = Arc::new(AtomicBool::new(false));
    let shorts = Arc::new(AtomicU64::new(0));
    let hs: Vec<_> = (0..SHORT_THREADS)
        .map(|t| {
            let (r, stop, shorts) = (r.clone(), stop.clone(), shorts.clone());
            std::thread::spawn(move || -> txmap::Result<()> {
                let mut v = r.view()?;
                let mut x = 0x9E37_79B9_7F4A_7C15u64.wrapping_mul(t + 1);
                while !stop.load(Ordering::Relaxed) {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let p = x % PAGES;
                    v.run(|v| {
                        let c: u64 = v.read(p * PAGE)?;
                        v.write(p * PAGE, &(c + 1))
                    })?;
                    shorts.fetch_add(1, Ordering::Relaxed);
                }
                Ok(())
            })
        })
        .collect();
    let mut v = r.view()?;
    let mut attempts = Vec::new();
    let start = Instant::now();
    for _ in 0..longs {
        let mut n = 0;
        loop {
            n += 1;
            v.begin()?;
            for p in 0..PAGES {
                let c: u64 = v.read(p * PAGE)?;
                v.write(p * PAGE, &(c + 1))?;
                v.write(p * PAGE + 8, &work(c))?;
            }
            match v.commit() {
                Ok(()) => break,
                Err(Error::Conflict) if n < GIVE_UP => continue,
                Err(Error::Conflict) => break,
                Err(e) => return Err(e.into()),
            }
        }
        attempts.push(n);
    }
    let secs = start.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    for h in hs {
        h.join().map_err(|_| "a short writer panicked")??;
    }
    Ok((
        attempts,
        shorts.load(Ordering::Relaxed) as f64 / secs,
        r.priority_counts().1,
    ))
}

pub fn run(ctx: &mut Ctx) -> Res<()> {
    println!("## Fairness: a long transaction among short ones (issue 19)\n");
    let longs = ctx.count(40);
    println!(
        "A long transaction reads and increments a u64 on each of {PAGES} pages, computing \
         {WORK} multiply-add rounds per page (about a millisecond in all); {SHORT_THREADS} \
         threads (one view each) meanwhile commit one-page transactions (increment a random one \
         of those pages) without pause, retrying on conflict. One view runs {longs} long \
         transactions in a row, each retried at once on conflict until it commits (abandoned \
         after {GIVE_UP} attempts); `Durability::Async`, so short commits do not wait for a \
         sync. `priority_after` = k: after k conflicts in a row the long transaction takes \
         priority and other commits wait until it commits; 0: no priority. Attempts per long \
         transaction (1 = committed at once).\n"
    );
    let mut t = Table::new(&[
        "priority_after",
        "attempts: median",
        "max",
        "within 10",
        "short commits/s",
        "commits that waited",
    ]);
    for after in POLICIES {
        ctx.progress(format!("fairness: priority_after {after}"));
        let path = ctx.dir.join(format!("fairness-{after}.txm"));
        let (attempts, rate, waited) = measure(&path, after, longs)?;
        let max = attempts.iter().copied().max().unwrap_or(0);
        let within = attempts.iter().filter(|&&a| a <= 10).count();
        let med = Summary::of(&attempts.iter().map(|&a| a as f64).collect::<Vec<_>>()).median;
        t.row(vec![
            if after == 0 {
                "0 (off)".into()
            } else {
                after.to_string()
            },
            num(med),
            if max >= GIVE_UP {
                format!("≥ {GIVE_UP} (gave up)")
            } else {
                max.to_string()
            },
            format!("{within} of {}", attempts.len()),
            num(rate),
            waited.to_string(),
        ]);
        if after == txmap::Options::default().priority_after {
            ctx.target(
                "fairness: a 256-page transaction commits within 10 attempts among 4 one-page committers",
                format!("default priority_after {after}: max {max} attempts"),
                Some(max <= 10),
            );
        }
    }
    t.print();
    Ok(())
}
