//! The cost of one random read, txmap's B+-tree beside LMDB: the redb
//! workload's 24-byte keys and 150-byte values, loaded in one transaction,
//! then read in random order, one read-only transaction per get, as the
//! compare report's random reads do. Three kinds of view: the one that
//! loaded the keys (it holds every page), a fresh one per round (pages read
//! in place), and two fresh ones in two threads at once, each opened inside
//! the timed part (as the report's 2-thread reads do). Rounds alternate between the
//! stores and the fastest round of each is kept: on a shared machine the
//! other rounds mostly measure the neighbours.

use std::time::Instant;

use txmap_peers::{Durability, Op, Session, Store, stores};

use crate::report::{Ctx, Res, Table, num};

const STORES: [&str; 2] = ["txmap-btree", "lmdb"];
const KEYS: [usize; 2] = [100, 20_000];
/// Who reads: the session that loaded the keys, a fresh session per
/// round, or two fresh sessions at once in two threads.
#[derive(Clone, Copy, PartialEq)]
enum View {
    Held,
    Fresh,
    FreshPair,
}
const VIEWS: [(View, &str); 3] = [
    (View::Held, "held"),
    (View::Fresh, "fresh"),
    (View::FreshPair, "fresh, 2 threads"),
];

pub fn steps(_reps: usize) -> usize {
    KEYS.len() * VIEWS.len()
}

/// The fastest round's nanoseconds per get of each store (in `STORES`
/// order) over `n` keys, read by `view`.
fn one(ctx: &Ctx, n: usize, view: View) -> Res<[f64; 2]> {
    let mut rng = crate::compare::Rng::new(n as u64);
    let loaded: Vec<([u8; 24], [u8; 150])> = (0..n)
        .map(|_| {
            let (mut k, mut v) = ([0u8; 24], [0u8; 150]);
            rng.fill(&mut k);
            rng.fill(&mut v);
            (k, v)
        })
        .collect();
    let mut open: Vec<Box<dyn Store>> = Vec::new();
    for id in STORES {
        let peer = stores()
            .into_iter()
            .find(|p| p.id == id)
            .ok_or_else(|| format!("no store {id}"))?;
        if let Err(install) = peer.available {
            return Err(format!("{id} is not installed (install with `{install}`)").into());
        }
        let dir = ctx.dir.join(format!("gets-{id}-{n}"));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)?;
        let c = crate::compare::config(&dir, Durability::Durable, n as u64, 200, false);
        open.push((peer.open)(&c)?);
    }
    let mut sessions: Vec<Box<dyn Session + '_>> = Vec::new();
    for st in &open {
        let mut s = st.session()?;
        let ops: Vec<Op> = loaded.iter().map(|(k, v)| Op::Put(k, v)).collect();
        s.write(&ops)?;
        sessions.push(s);
    }
    let gets = ctx.count(80_000).max(n);
    let rounds = if ctx.quick { 10 } else { 30 };
    let mut order: Vec<usize> = (0..n).collect();
    let mut best = [f64::MAX; 2];
    for _ in 0..rounds {
        for i in (1..n).rev() {
            order.swap(i, (rng.next() % (i as u64 + 1)) as usize);
        }
        for (w, s) in sessions.iter_mut().enumerate() {
            let read = |s: &mut dyn Session, from: usize| -> Res<usize> {
                let mut found = 0usize;
                for g in 0..gets {
                    let (k, v) = &loaded[order[(from + g) % n]];
                    s.get(k, &mut |got| found += usize::from(got == &v[..]))?;
                }
                Ok(found)
            };
            if view == View::Fresh {
                *s = open[w].session()?;
            }
            let t = Instant::now();
            let found = match view {
                View::Held | View::Fresh => read(&mut **s, 0)?,
                View::FreshPair => {
                    // Each thread opens its session inside the timed
                    // part, as the report's reader threads do, and starts
                    // at another place in the order.
                    let st = &*open[w];
                    let read = &read;
                    std::thread::scope(|sc| -> Res<usize> {
                        let hs: Vec<_> = (0..2)
                            .map(|i| {
                                sc.spawn(move || -> Result<usize, String> {
                                    let mut s = st.session().map_err(|e| e.to_string())?;
                                    read(&mut *s, i * n / 2).map_err(|e| e.to_string())
                                })
                            })
                            .collect();
                        let mut f = 0;
                        for h in hs {
                            f += h.join().map_err(|_| "reader thread panicked")??;
                        }
                        Ok(f / 2)
                    })?
                }
            };
            let ns = t.elapsed().as_nanos() as f64 / gets as f64;
            if found != gets {
                return Err(
                    format!("{}: {} gets of {gets} found their value", STORES[w], found).into(),
                );
            }
            best[w] = best[w].min(ns);
        }
    }
    drop(sessions);
    drop(open);
    for id in STORES {
        let _ = std::fs::remove_dir_all(ctx.dir.join(format!("gets-{id}-{n}")));
    }
    Ok(best)
}

pub fn run(ctx: &mut Ctx) -> Res<()> {
    println!("## One random read, txmap's B+-tree beside LMDB\n");
    println!(
        "Nanoseconds per get (one read-only transaction each) of keys loaded in one \
         transaction, read in random order: by the session that loaded them (its view holds \
         every page), by a fresh session each round (pages read in place), and by two fresh \
         sessions in two threads at once, opened inside the timed part (nanoseconds per get \
         of one thread). The fastest of {} rounds alternating between the stores.\n",
        if ctx.quick { 10 } else { 30 }
    );
    let mut t = Table::new(&["keys", "view", "txmap B+-tree", "LMDB", "txmap ÷ LMDB"]);
    for n in KEYS {
        for (view, name) in VIEWS {
            ctx.progress(format!("gets: {n} keys, {name} view"));
            let [tx, lmdb] = one(ctx, n, view)?;
            t.row(vec![
                n.to_string(),
                name.into(),
                num(tx),
                num(lmdb),
                num(tx / lmdb),
            ]);
        }
    }
    t.print();
    Ok(())
}
