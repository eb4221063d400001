//! The side-by-side comparison with the peers (`txmap-bench compare`):
//! txmap's structures and every peer database in one run, on the same file
//! system, each result a median of several runs with its spread, stores run
//! in a rotating order so that drift of the machine hits all of them alike.
//! Writes a Markdown report and SVG plots (default `target/bench-report/`).

mod python;
mod shared;
mod svg;
mod work;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use txmap_peers::{Durability, Kind, Peer, stores};

use crate::report::{Ctx, Res, Summary, num};
use work::{Abc, RedbSizes, TOP};
pub use work::{Rng, config, worker};

/// Sizes of one comparison run.
struct Plan {
    /// Longest one run's loop may take (s); slower stores report the rate
    /// of what they did.
    cap_secs: u64,
    /// Longest one store's redb workload may take (s): its worker process
    /// is killed then, and the steps it finished are kept.
    redb_deadline_secs: u64,
    abc_txns: usize,
    abc_durabilities: Vec<Durability>,
    inserts: usize,
    bulk: usize,
    committers: Vec<usize>,
    commit_secs: f64,
    redb: RedbSizes,
    /// Alternated pairs of redb runs, txmap's B+-tree and LMDB, behind the
    /// issue-20 targets (`redb_pairs`).
    redb_pairs: usize,
}

impl Plan {
    fn new(quick: bool) -> Plan {
        if quick {
            Plan {
                cap_secs: 10,
                redb_deadline_secs: 60,
                abc_txns: 500,
                abc_durabilities: vec![Durability::Durable],
                inserts: 5_000,
                bulk: 50_000,
                committers: vec![1, 4, 16, 64],
                commit_secs: 0.5,
                redb: RedbSizes {
                    entries: 20_000,
                    individual: 200,
                    batches: 20,
                    batch: 100,
                    ranges: 2_000,
                    range_len: 10,
                },
                redb_pairs: 20,
            }
        } else {
            Plan {
                cap_secs: 120,
                redb_deadline_secs: 300,
                abc_txns: 10_000,
                abc_durabilities: vec![Durability::Durable, Durability::Async],
                inserts: 250_000,
                bulk: 250_000,
                committers: vec![1, 2, 4, 8, 16, 32, 64],
                commit_secs: 2.0,
                redb: RedbSizes {
                    entries: 500_000,
                    individual: 1_000,
                    batches: 100,
                    batch: 1_000,
                    ranges: 20_000,
                    range_len: 10,
                },
                redb_pairs: 4,
            }
        }
    }
}

/// Whether bigger numbers are better.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Better {
    Higher,
    Lower,
}

/// One store's repetitions of one measurement, or why it has none.
enum Cell {
    Values(Vec<f64>),
    Skipped(String),
}

/// One measurement over all stores.
struct Row {
    title: String,
    unit: &'static str,
    better: Better,
    cells: Vec<Cell>,
}

impl Row {
    fn new(title: impl Into<String>, unit: &'static str, better: Better, n: usize) -> Row {
        Row {
            title: title.into(),
            unit,
            better,
            cells: (0..n).map(|_| Cell::Values(Vec::new())).collect(),
        }
    }
    fn push(&mut self, i: usize, x: f64) {
        if let Cell::Values(v) = &mut self.cells[i] {
            v.push(x);
        }
    }
    fn skip(&mut self, i: usize, why: impl Into<String>) {
        self.cells[i] = Cell::Skipped(why.into());
    }
    fn median(&self, i: usize) -> Option<f64> {
        match &self.cells[i] {
            Cell::Values(v) if !v.is_empty() => Some(Summary::of(v).median),
            _ => None,
        }
    }
}

/// The whole report: stores and rows, rendered at the end.
struct Report {
    /// The machine table, taken when the run starts (date, load average).
    machine: String,
    peers: Vec<Peer>,
    md: String,
    out: PathBuf,
    problems: Vec<String>,
    /// Runs the time cap stopped early.
    capped: Vec<String>,
    targets: Vec<[String; 3]>,
}

fn is_txmap(p: &Peer) -> bool {
    p.id.starts_with("txmap")
}

impl Report {
    /// Index of the best peer (not txmap) in a row.
    fn best_peer(&self, row: &Row) -> Option<usize> {
        (0..self.peers.len())
            .filter(|&i| !is_txmap(&self.peers[i]))
            .filter_map(|i| row.median(i).map(|m| (i, m)))
            .max_by(|a, b| match row.better {
                Better::Higher => a.1.total_cmp(&b.1),
                Better::Lower => b.1.total_cmp(&a.1),
            })
            .map(|(i, _)| i)
    }

    /// "× best peer": above 1 is better than the best peer, whichever way
    /// the measurement points.
    fn ratio(&self, row: &Row, i: usize) -> Option<f64> {
        let b = row.median(self.best_peer(row)?)?;
        let m = row.median(i)?;
        let x = match row.better {
            Better::Higher => m / b,
            Better::Lower => b / m,
        };
        // A zero (no retries) makes no ratio.
        x.is_finite().then_some(x).filter(|_| b > 0.0 && m > 0.0)
    }

    /// A table of rows (columns) by store (rows of the table).
    fn table(&mut self, rows: &[&Row]) {
        let mut head = vec!["store".to_string()];
        for r in rows {
            head.push(format!("{} ({})", r.title, r.unit));
            head.push("× best peer".into());
        }
        let mut t = crate::report::Table::new(&head);
        for (i, p) in self.peers.iter().enumerate() {
            if rows.iter().all(|r| matches!(r.cells[i], Cell::Skipped(_)))
                && rows.iter().all(|r| match &r.cells[i] {
                    Cell::Skipped(w) => w.starts_with("not installed"),
                    _ => false,
                })
            {
                continue;
            }
            let mut cells = vec![p.name.to_string()];
            for r in rows {
                match &r.cells[i] {
                    Cell::Values(v) if !v.is_empty() => {
                        cells.push(Summary::of(v).cell());
                        let best = self.best_peer(r) == Some(i);
                        cells.push(match self.ratio(r, i) {
                            Some(x) if best => format!("{} (best)", num(x)),
                            Some(x) => num(x),
                            None => "–".into(),
                        });
                    }
                    Cell::Values(_) => {
                        cells.push("–".into());
                        cells.push("–".into());
                    }
                    Cell::Skipped(w) => {
                        cells.push(format!("n/a: {w}"));
                        cells.push("–".into());
                    }
                }
            }
            t.row(cells);
        }
        self.md.push_str(&t.render());
    }

    fn plot(&mut self, file: &str, svg: String, caption: &str) -> Res<()> {
        std::fs::write(self.out.join(file), svg)?;
        let _ = writeln!(self.md, "![{caption}]({file})\n");
        Ok(())
    }

    fn bars(&mut self, file: &str, title: &str, rows: &[&Row]) -> Res<()> {
        let cats: Vec<String> = rows
            .iter()
            .map(|r| format!("{} ({})", r.title, r.unit))
            .collect();
        let series: Vec<(String, Vec<Option<f64>>)> = self
            .peers
            .iter()
            .enumerate()
            .filter(|(i, _)| rows.iter().any(|r| r.median(*i).is_some()))
            .map(|(i, p)| {
                (
                    p.name.to_string(),
                    rows.iter().map(|r| r.median(i)).collect(),
                )
            })
            .collect();
        let unit = rows.first().map_or("", |r| r.unit);
        self.plot(file, svg::bars(title, unit, &cats, &series), title)
    }

    fn target(&mut self, what: &str, ratio: Option<f64>, goal: f64, detail: String) {
        let verdict = match ratio {
            Some(r) if r >= goal => "met".to_string(),
            Some(r) => format!("**missed** by {:.0} %", (1.0 - r / goal) * 100.0),
            None => "not measured (peer missing)".into(),
        };
        let measured = ratio.map_or("–".into(), |r| format!("{}× ({detail})", num(r)));
        self.targets.push([what.into(), measured, verdict]);
    }

    fn idx(&self, id: &str) -> Option<usize> {
        self.peers.iter().position(|p| p.id == id)
    }

    /// Ratio of store `a` over store `b` in a row, oriented so above 1 is better for `a`.
    fn versus(&self, row: &Row, a: &str, b: &str) -> Option<f64> {
        let (ma, mb) = (row.median(self.idx(a)?)?, row.median(self.idx(b)?)?);
        Some(match row.better {
            Better::Higher => ma / mb,
            Better::Lower => mb / ma,
        })
    }
}

/// Every store, or those named in `only`.
fn selected(only: &[String]) -> Vec<Peer> {
    stores()
        .into_iter()
        .filter(|p| only.is_empty() || only.iter().any(|o| o == p.id))
        .collect()
}

/// Rotating order of stores for repetition `rep`.
fn order(n: usize, rep: usize) -> impl Iterator<Item = usize> {
    (0..n).map(move |k| (k + rep) % n)
}

/// Number of progress steps of a run.
pub fn steps(reps: usize, quick: bool, only: &[String], workloads: &[String]) -> usize {
    let plan = Plan::new(quick);
    let n = selected(only).len();
    let want = |w: &str| usize::from(workloads.is_empty() || workloads.iter().any(|x| x == w));
    reps * (n
        * (2 * want("inserts")
            + (1 + plan.committers.len()) * want("hash")
            + want("redb")
            + plan.abc_durabilities.len() * 9 * want("abc"))
        + want("touch"))
        + want("python")
        + want("shared") * (reps + 3)
        + 2 * plan.redb_pairs * want("redb") * usize::from(pairs_selected(only))
}

/// The workloads, in report order.
pub const WORKLOADS: [&str; 7] = [
    "inserts", "hash", "redb", "abc", "touch", "shared", "python",
];

/// Runs the comparison; `out` receives `README.md` and the plots. `only`
/// selects stores and `workloads` workloads (empty: all).
pub fn run(
    ctx: &mut Ctx,
    out: &Path,
    only: &[String],
    workloads: &[String],
    redb_deadline: Option<u64>,
) -> Res<()> {
    if let Some(w) = workloads.iter().find(|w| !WORKLOADS.contains(&w.as_str())) {
        return Err(format!("no workload {w:?} (there are: {})", WORKLOADS.join(", ")).into());
    }
    let want = |w: &str| workloads.is_empty() || workloads.iter().any(|x| x == w);
    std::fs::create_dir_all(out)?;
    let mut plan = Plan::new(ctx.quick);
    if let Some(d) = redb_deadline {
        plan.redb_deadline_secs = d;
    }
    let peers = selected(only);
    if peers.is_empty() {
        return Err(format!("no store matches --stores {}", only.join(",")).into());
    }
    let mut r = Report::new(crate::machine_table(&ctx.dir), peers, out);
    work::set_cap(plan.cap_secs);
    let skip = not_installed(&r.peers);
    let base = ctx.dir.join("compare");
    std::fs::create_dir_all(&base)?;

    let setup = Setup {
        plan: &plan,
        skip: &skip,
        base: &base,
    };
    if want("inserts") {
        let rows = measure_inserts(ctx, &mut r, &setup)?;
        report_inserts(&mut r, &plan, &rows)?;
    }
    if want("hash") {
        let rows = measure_hash(ctx, &mut r, &setup)?;
        report_hash(&mut r, &plan, &rows)?;
    }
    if want("redb") {
        let rows = measure_redb(ctx, &mut r, &setup)?;
        report_redb(&mut r, &plan, &rows)?;
        redb_pairs(ctx, &mut r, &setup)?;
    }
    if want("abc") {
        abc(ctx, &mut r, &setup)?;
    }
    if want("touch") {
        page_touch(ctx, &mut r, &base)?;
    }
    if want("shared") {
        shared::section(ctx, &mut r, &base)?;
    }
    if want("python") {
        ctx.progress("python: txmap beside py-lmdb and sqlite3");
        r.md.push_str(&python::section(ctx.quick));
    }
    render(ctx, &r, &plan)?;
    Ok(())
}

impl Report {
    /// An empty report on `peers`, written to `out`.
    fn new(machine: String, peers: Vec<Peer>, out: &Path) -> Report {
        Report {
            machine,
            peers,
            md: String::new(),
            out: out.to_path_buf(),
            problems: Vec::new(),
            capped: Vec::new(),
            targets: Vec::new(),
        }
    }
}

/// What every workload's measurements share.
struct Setup<'a> {
    plan: &'a Plan,
    /// For each store, why it is skipped (`None`: it runs).
    skip: &'a [Option<String>],
    /// The directory the stores' files go in.
    base: &'a Path,
}

/// For each store, why it is skipped: not installed (with the command that
/// installs it), or `None` to run it.
fn not_installed(peers: &[Peer]) -> Vec<Option<String>> {
    peers
        .iter()
        .map(|p| {
            p.available
                .err()
                .map(|cmd| format!("not installed (`{cmd}`)"))
        })
        .collect()
}

/// The rows of the durable random inserts.
struct InsertRows {
    /// Inserts per second with 1 and 2 processes.
    ins: [Row; 2],
    bytes: Row,
    logged: Row,
    device: Row,
    retried: Row,
    /// Per store, per run: the most expensive inserts (ns), 1 process.
    tops: Vec<Vec<Vec<u64>>>,
}

/// 1. Durable random inserts, 1 and 2 processes: the measurements.
fn measure_inserts(ctx: &mut Ctx, r: &mut Report, setup: &Setup) -> Res<InsertRows> {
    let n = r.peers.len();
    let mut rows = InsertRows {
        ins: [
            Row::new("1 process", "inserts/s", Better::Higher, n),
            Row::new("2 processes", "inserts/s", Better::Higher, n),
        ],
        bytes: Row::new("written per insert", "bytes", Better::Lower, n),
        logged: Row::new("logged per insert", "bytes", Better::Lower, n),
        device: Row::new("device writes per insert", "bytes", Better::Lower, n),
        retried: Row::new("retried, 2 processes", "per 1000 inserts", Better::Lower, n),
        tops: vec![Vec::new(); n],
    };
    for rep in 0..ctx.reps {
        for i in order(n, rep) {
            for (pi, procs) in [1usize, 2].into_iter().enumerate() {
                let p = &r.peers[i];
                ctx.progress(format!(
                    "inserts: {} × {procs} process(es), run {}",
                    p.name,
                    rep + 1
                ));
                if let Some(w) = &setup.skip[i] {
                    rows.ins[pi].skip(i, w.clone());
                    continue;
                }
                if procs > 1 && !p.processes {
                    rows.ins[pi].skip(i, "one process only");
                    rows.retried.skip(i, "one process only");
                    continue;
                }
                let dir = crate::report::fresh(setup.base, p.id)?;
                let x = work::inserts(p, &dir, setup.plan.inserts, procs, 1 + rep as u64);
                record_inserts(r, setup.plan, &mut rows, i, (pi, procs), x);
                let _ = std::fs::remove_dir_all(&dir);
            }
        }
    }
    Ok(rows)
}

/// Enters store `i`'s run of inserts with `procs` processes (row `pi` of
/// `rows.ins`) in `rows`.
fn record_inserts(
    r: &mut Report,
    plan: &Plan,
    rows: &mut InsertRows,
    i: usize,
    (pi, procs): (usize, usize),
    x: Res<work::Inserts>,
) {
    let p = &r.peers[i];
    match x {
        Ok(x) => {
            if x.done < plan.inserts / procs * procs {
                r.capped
                    .push(format!("inserts, {} × {procs}: {} inserts", p.name, x.done));
            }
            rows.ins[pi].push(i, x.done as f64 / x.secs);
            if procs == 1 {
                rows.bytes
                    .push(i, x.write_bytes as f64 / x.done.max(1) as f64);
                if let Some(d) = x.device_bytes {
                    rows.device.push(i, d as f64 / x.done.max(1) as f64);
                }
                match x.logged_bytes {
                    Some(b) => rows.logged.push(i, b as f64 / x.done.max(1) as f64),
                    None => rows.logged.skip(i, "cannot tell"),
                }
                rows.tops[i].push(x.top);
            } else {
                rows.retried
                    .push(i, x.retries as f64 * 1000.0 / x.done.max(1) as f64);
            }
        }
        Err(e) => {
            r.problems
                .push(format!("inserts, {} × {procs}: {e}", p.name));
            rows.ins[pi].skip(i, "failed (see problems)");
        }
    }
}

/// The section of the durable random inserts, with its target.
fn report_inserts(r: &mut Report, plan: &Plan, rows: &InsertRows) -> Res<()> {
    let _ = writeln!(
        r.md,
        "## Durable random inserts\n\n{} random 8-byte keys with 8-byte values, each insert its own durable \
     transaction, into an empty store; with 2 processes each inserts half. Written per insert: bytes passed to \
     write calls (`wchar` of /proc/self/io, including closing the store; PMDK writes through a mapping and \
     shows only its log); logged: bytes of log records the store wrote (txmap's log records, Berkeley DB's \
     bytes written to its log by its own statistics; not told by the other stores); device writes: sectors the file system's device wrote \
     meanwhile (whole machine). All with 1 process.\n",
        plan.inserts
    );
    let ins = &rows.ins;
    r.table(&[&ins[0], &ins[1], &rows.retried]);
    r.table(&[&rows.bytes, &rows.logged, &rows.device]);
    r.bars(
        "inserts.svg",
        "Durable random inserts per second",
        &[&ins[0], &ins[1]],
    )?;
    kth_insert(r, rows)?;
    let v = r.versus(&ins[0], "txmap-btree", "bdb-btree");
    r.target(
        "durable random inserts into the B+-tree ≥ 2× Berkeley DB",
        v,
        2.0,
        "txmap B+-tree / Berkeley DB B-tree, 1 process".into(),
    );
    Ok(())
}

/// The k-th most expensive insert (thesis figure 5-3): median over runs of
/// each rank, as a table and a plot.
fn kth_insert(r: &mut Report, rows: &InsertRows) -> Res<()> {
    let mut kth = crate::report::Table::new(&[
        "store",
        "1st",
        "10th",
        "100th",
        "1000th",
        "median insert (µs)",
    ]);
    let mut curves = Vec::new();
    for (i, p) in r.peers.iter().enumerate() {
        let tops = &rows.tops[i];
        if tops.is_empty() {
            continue;
        }
        let rank = |k: usize| {
            let v: Vec<f64> = tops
                .iter()
                .filter_map(|t| t.get(k).map(|&x| x as f64 / 1e3))
                .collect();
            (!v.is_empty()).then(|| Summary::of(&v).median)
        };
        let cell = |k: usize| rank(k).map_or("–".into(), num);
        let med = rows.ins[0]
            .median(i)
            .map_or("–".into(), |ips| num(1e6 / ips));
        kth.row(vec![
            p.name.into(),
            cell(0),
            cell(9),
            cell(99),
            cell(TOP - 1),
            med,
        ]);
        let pts: Vec<(f64, f64)> = (0..TOP)
            .filter_map(|k| rank(k).map(|y| ((k + 1) as f64, y)))
            .collect();
        curves.push((p.name.to_string(), pts));
    }
    let _ = writeln!(
        r.md,
        "The k-th most expensive insert, 1 process (µs; median over runs of each rank; the last column is the mean time per insert):\n"
    );
    r.md.push_str(&kth.render());
    r.plot(
        "inserts-kth.svg",
        svg::loglog("k-th most expensive durable insert", "k", "µs", &curves),
        "k-th most expensive insert",
    )
}

/// The rows of the hash table workload.
struct HashRows {
    bulk: Row,
    /// Commits per second, one row per number of committers.
    tps: Vec<Row>,
    /// Retries with the most committers.
    tps_retries: Row,
}

/// 2. Hash: bulk load in one transaction; committers. The measurements.
fn measure_hash(ctx: &mut Ctx, r: &mut Report, setup: &Setup) -> Res<HashRows> {
    let n = r.peers.len();
    let last = setup.plan.committers.last().copied().unwrap_or(0);
    let mut rows = HashRows {
        bulk: Row::new("bulk load, one transaction", "entries/s", Better::Higher, n),
        tps: setup
            .plan
            .committers
            .iter()
            .map(|t| Row::new(format!("{t} committers"), "commits/s", Better::Higher, n))
            .collect(),
        tps_retries: Row::new(
            format!("retried, {last} committers"),
            "per 1000 commits",
            Better::Lower,
            n,
        ),
    };
    for rep in 0..ctx.reps {
        for i in order(n, rep) {
            let p = &r.peers[i];
            ctx.progress(format!("bulk load: {}, run {}", p.name, rep + 1));
            if let Some(w) = &setup.skip[i] {
                rows.bulk.skip(i, w.clone());
                for t in &mut rows.tps {
                    t.skip(i, w.clone());
                }
                rows.tps_retries.skip(i, w.clone());
                continue;
            }
            let dir = crate::report::fresh(setup.base, p.id)?;
            match work::bulk_load(p, &dir, setup.plan.bulk, 100 + rep as u64) {
                Ok(s) => rows.bulk.push(i, setup.plan.bulk as f64 / s),
                Err(e) => {
                    r.problems.push(format!("bulk load, {}: {e}", p.name));
                    rows.bulk.skip(i, "failed (see problems)");
                }
            }
            measure_committers(ctx, r, setup, &mut rows, i, rep)?;
            let _ = std::fs::remove_dir_all(&dir);
        }
    }
    Ok(rows)
}

/// Store `i`'s committers runs in run `rep`, one per number of committers,
/// each in a fresh directory.
fn measure_committers(
    ctx: &mut Ctx,
    r: &mut Report,
    setup: &Setup,
    rows: &mut HashRows,
    i: usize,
    rep: usize,
) -> Res<()> {
    let (p, plan) = (&r.peers[i], setup.plan);
    for (ti, &t) in plan.committers.iter().enumerate() {
        ctx.progress(format!("{t} committers: {}, run {}", p.name, rep + 1));
        let dir = crate::report::fresh(setup.base, p.id)?;
        match work::committers(p, &dir, t, plan.commit_secs) {
            Ok((x, retries)) => {
                rows.tps[ti].push(i, x);
                if ti + 1 == plan.committers.len() {
                    rows.tps_retries.push(i, retries * 1000.0);
                }
            }
            Err(e) => {
                r.problems.push(format!("{t} committers, {}: {e}", p.name));
                rows.tps[ti].skip(i, "failed (see problems)");
            }
        }
    }
    Ok(())
}

/// The section of the hash table workload, with its target.
fn report_hash(r: &mut Report, plan: &Plan, rows: &HashRows) -> Res<()> {
    let _ = writeln!(
        r.md,
        "## Hash table (Lemon): bulk load and concurrent committers\n\n\
     Bulk load: {} random 8-byte keys and values in one durable transaction. Committers: threads, each \
     committing one random 8-byte put per durable transaction for {} s, on an empty store.\n",
        plan.bulk, plan.commit_secs
    );
    let tps = &rows.tps;
    r.table(&[&rows.bulk]);
    let trefs: Vec<&Row> = tps.iter().collect();
    r.table(&trefs);
    r.table(&[&rows.tps_retries]);
    let curves: Vec<(String, Vec<(f64, f64)>)> = r
        .peers
        .iter()
        .enumerate()
        .filter(|(i, _)| tps.iter().any(|t| t.median(*i).is_some()))
        .map(|(i, p)| {
            let pts = plan
                .committers
                .iter()
                .zip(tps)
                .filter_map(|(&c, t)| t.median(i).map(|m| (c as f64, m)))
                .collect();
            (p.name.to_string(), pts)
        })
        .collect();
    r.plot(
        "committers.svg",
        svg::loglog(
            "Durable commits/s against concurrent committers",
            "committers (threads)",
            "commits/s",
            &curves,
        ),
        "commits per second against committers",
    )?;
    if let Some(last) = tps.last() {
        let v = r.versus(last, "txmap-hash", "bdb-hash");
        let c = plan.committers.last().copied().unwrap_or(0);
        r.target(
            &format!("commits/s with {c} committers ≥ 3× Berkeley DB"),
            v,
            3.0,
            "txmap linear hash / Berkeley DB hash".into(),
        );
    }
    Ok(())
}

/// 3. The redb workload: one row per step (`work::REDB_STEPS`).
fn measure_redb(ctx: &mut Ctx, r: &mut Report, setup: &Setup) -> Res<Vec<Row>> {
    let n = r.peers.len();
    let mut redb: Vec<Row> = work::REDB_STEPS
        .iter()
        .map(|s| {
            if *s == "file size" {
                Row::new(*s, "MiB", Better::Lower, n)
            } else {
                Row::new(*s, "s", Better::Lower, n)
            }
        })
        .collect();
    // Why a store's later runs are skipped: an earlier one hit the deadline.
    let mut stopped: Vec<Option<String>> = vec![None; n];
    for rep in 0..ctx.reps {
        for i in order(n, rep) {
            let p = &r.peers[i];
            ctx.progress(format!("redb workload: {}, run {}", p.name, rep + 1));
            if let Some(w) = setup.skip[i].as_ref().or(stopped[i].as_ref()) {
                for row in &mut redb {
                    row.skip(i, w.clone());
                }
                continue;
            }
            match redb_run(setup, p, 200 + rep as u64)? {
                Ok(run) => stopped[i] = record_redb(r, setup.plan, &mut redb, i, rep, run),
                Err(e) => {
                    r.problems.push(format!("redb workload, {}: {e}", p.name));
                    for row in &mut redb {
                        row.skip(i, "failed (see problems)");
                    }
                }
            }
        }
    }
    Ok(redb)
}

/// One run of the redb workload by store `p` in a fresh directory, removed
/// after it: `Err` only if the directory cannot be made; the inner result
/// is the run's.
fn redb_run(setup: &Setup, p: &Peer, seed: u64) -> Res<Res<work::RedbRun>> {
    let dir = crate::report::fresh(setup.base, p.id)?;
    let deadline = std::time::Duration::from_secs(setup.plan.redb_deadline_secs);
    let run = work::redb_capped(p, &dir, setup.plan.redb, seed, deadline);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(run)
}

/// Enters store `i`'s redb run `rep` in `redb`; why later runs are skipped
/// if the deadline stopped it.
fn record_redb(
    r: &mut Report,
    plan: &Plan,
    redb: &mut [Row],
    i: usize,
    rep: usize,
    run: work::RedbRun,
) -> Option<String> {
    r.problems.extend(run.problems);
    let done = run.steps.len();
    for (row, v) in redb.iter_mut().zip(run.steps) {
        match v {
            Some(v) => row.push(i, v),
            None => row.skip(i, "hash: no ranges"),
        }
    }
    if !run.stopped {
        return None;
    }
    // Later runs would stop at the same step: skip them.
    let step = work::REDB_STEPS.get(done).copied().unwrap_or("?");
    let why = format!(
        "stopped in its {step} at {} s (run {})",
        plan.redb_deadline_secs,
        rep + 1
    );
    r.capped
        .push(format!("redb workload, {}: {why}", r.peers[i].name));
    for row in &mut redb[done..] {
        row.skip(i, why.clone());
    }
    Some(why)
}

/// Whether txmap's B+-tree and LMDB are both selected and installed
/// (`redb_pairs`).
fn pairs_selected(only: &[String]) -> bool {
    let sel = selected(only);
    ["txmap-btree", "lmdb"]
        .iter()
        .all(|id| sel.iter().any(|p| p.id == *id && p.available.is_ok()))
}

/// The issue-20 targets, txmap's B+-tree against LMDB on the redb workload:
/// on a shared machine one store's runs spread over 2× while a ratio of two
/// runs made back to back spreads less, so the targets take the median
/// of `redb_pairs` such ratios (which store runs first alternates), beside
/// the section's medians.
fn redb_pairs(ctx: &mut Ctx, r: &mut Report, setup: &Setup) -> Res<()> {
    let pairs = setup.plan.redb_pairs;
    let ids = ["txmap-btree", "lmdb"];
    let Some(ix) = ids
        .iter()
        .map(|id| r.idx(id).filter(|&i| setup.skip[i].is_none()))
        .collect::<Option<Vec<usize>>>()
    else {
        return Ok(());
    };
    // ratios[step]: txmap ÷ LMDB of each pair.
    let mut ratios: Vec<Vec<f64>> = vec![Vec::new(); work::REDB_STEPS.len()];
    for k in 0..pairs {
        let mut runs: [Option<work::RedbRun>; 2] = [None, None];
        for w in [k % 2, 1 - k % 2] {
            let p = &r.peers[ix[w]];
            ctx.progress(format!(
                "redb workload, paired runs: {}, pair {}",
                p.name,
                k + 1
            ));
            match redb_run(setup, p, 500 + k as u64)? {
                Ok(run) if !run.stopped && run.problems.is_empty() => runs[w] = Some(run),
                Ok(run) => {
                    r.problems.extend(run.problems);
                    r.problems
                        .push(format!("redb paired runs, {}: incomplete run", p.name));
                }
                Err(e) => r
                    .problems
                    .push(format!("redb paired runs, {}: {e}", p.name)),
            }
        }
        if let [Some(t), Some(l)] = &runs {
            for (s, (a, b)) in t.steps.iter().zip(&l.steps).enumerate() {
                if let (Some(a), Some(b)) = (a, b) {
                    ratios[s].push(a / b);
                }
            }
        }
    }
    let med = |s: usize| -> Option<(f64, f64, f64)> {
        let mut v = ratios[s].clone();
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        // Interpolated between neighbours: the median of an even count is
        // the mean of the middle two.
        let q = |f: f64| {
            let at = (v.len() - 1) as f64 * f;
            let (lo, hi) = (v[at.floor() as usize], v[at.ceil() as usize]);
            lo + (hi - lo) * at.fract()
        };
        Some((q(0.5), q(0.25), q(0.75)))
    };
    // (step, what, most of LMDB's time)
    let goals = [
        (0, "bulk load ≤ 1.0× LMDB's time", 1.0),
        (3, "random reads, 1 thread ≤ 1.0× LMDB's time", 1.0),
        (4, "random reads, 2 threads ≤ 1.25× LMDB's time", 1.25),
        (5, "range reads ≤ 1.5× LMDB's time", 1.5),
    ];
    for (s, what, most) in goals {
        let m = med(s);
        r.target(
            &format!("redb workload: {what} (issue 20)"),
            m.map(|(m, _, _)| 1.0 / m),
            1.0 / most,
            m.map_or(String::new(), |(m, lo, hi)| {
                format!(
                    "LMDB time ÷ txmap B+-tree time, the goal {} ({most}× LMDB's time); \
                     median of {} paired runs: txmap ÷ LMDB {} (quartiles {}–{})",
                    num(1.0 / most),
                    ratios[s].len(),
                    num(m),
                    num(lo),
                    num(hi)
                )
            }),
        );
    }
    Ok(())
}

/// The section of the redb workload, with its targets.
fn report_redb(r: &mut Report, plan: &Plan, redb: &[Row]) -> Res<()> {
    let z = plan.redb;
    let _ = writeln!(
        r.md,
        "## The redb workload\n\n24-byte random keys, 150-byte random values, every commit durable. Bulk load: {} \
     entries in one transaction; individual writes: {} transactions of one put; batch writes: {} transactions \
     of {} puts; random reads: every loaded key once in random order (2 threads: each thread reads every key); \
     range reads: {} reads of {} entries from a random loaded key; removals: half the loaded keys in one \
     transaction; file size: the store's directory after closing.\n",
        z.entries, z.individual, z.batches, z.batch, z.ranges, z.range_len
    );
    let (a, b) = redb.split_at(4);
    r.table(&a.iter().collect::<Vec<_>>());
    r.table(&b.iter().collect::<Vec<_>>());
    r.bars(
        "redb.svg",
        "redb workload (seconds, lower is better)",
        &redb[..7].iter().collect::<Vec<_>>(),
    )?;
    let v = r.versus(&redb[1], "txmap-btree", "lmdb");
    r.target(
        "durable individual commits ≥ 1.5× LMDB",
        v,
        1.5,
        "txmap B+-tree / LMDB, redb individual writes".into(),
    );
    let v = r.versus(&redb[1], "txmap-btree", "bdb-btree");
    r.target(
        "durable individual commits ≥ Berkeley DB",
        v,
        1.0,
        "txmap B+-tree / Berkeley DB B-tree".into(),
    );
    let v = r.versus(&redb[3], "txmap-btree", "lmdb");
    r.target(
        "random reads within 1.25× of LMDB's time",
        v,
        0.8,
        "LMDB time / txmap B+-tree time; 0.8 is 1.25× slower".into(),
    );
    Ok(())
}

fn render(ctx: &mut Ctx, r: &Report, plan: &Plan) -> Res<()> {
    let mut md = String::new();
    let _ = writeln!(md, "# txmap against its peers\n");
    let _ = writeln!(
        md,
        "Every number is the median of {} runs with (min–max); stores run in a rotating order in each run. \
         \"× best peer\" compares with the best store that is not txmap: above 1 means better than it, \
         whichever way the measurement points. Mode: {}.\n",
        ctx.reps,
        if ctx.quick { "--quick" } else { "full" }
    );
    md.push_str(&r.machine);
    let _ = writeln!(
        md,
        "In docs/bench/, ANALYSIS.md reads the committed run: where txmap wins, where it loses and why.\n"
    );
    let _ = writeln!(md, "## Stores and how they are configured (durable rows)\n");
    for p in &r.peers {
        let how = (p.describe)(Durability::Durable);
        let kind = match p.kind {
            Kind::Ordered => "ordered",
            Kind::Hash => "hash",
        };
        match p.available {
            Ok(()) => {
                let _ = writeln!(
                    md,
                    "- **{}** ({kind}{}): {how}",
                    p.name,
                    if p.processes { ", multi-process" } else { "" }
                );
            }
            Err(cmd) => {
                let _ = writeln!(
                    md,
                    "- **{}**: skipped, not installed; install with `{cmd}`",
                    p.name
                );
            }
        }
    }
    md.push('\n');
    let _ = writeln!(md, "## Against the targets\n");
    let mut t =
        crate::report::Table::new(&["target (issue 5)", "measured (ratio of medians)", "verdict"]);
    for row in &r.targets {
        t.row(row.to_vec());
    }
    md.push_str(&t.render());
    md.push_str(&r.md);
    if !r.capped.is_empty() {
        let _ = writeln!(
            md,
            "## Runs stopped by the time cap\n\nEach run's loop stops after {} s, and these report the rate of what they did; \
             one store's redb workload is stopped after {} s, and its unfinished steps are not reported:\n",
            plan.cap_secs, plan.redb_deadline_secs
        );
        for c in &r.capped {
            let _ = writeln!(md, "- {c}");
        }
        md.push('\n');
    }
    let _ = writeln!(md, "## Problems\n");
    if r.problems.is_empty() {
        let _ = writeln!(
            md,
            "None: every store completed every run, and every read found its value.\n"
        );
    } else {
        for p in &r.problems {
            let _ = writeln!(md, "- {p}");
            ctx.anomaly(p);
        }
        md.push('\n');
    }
    std::fs::write(r.out.join("README.md"), &md)?;
    print!("{md}");
    eprintln!("report written to {}", r.out.join("README.md").display());
    Ok(())
}

const ABC_PROCS: [usize; 3] = [1, 2, 4];

/// The thesis' concurrency tests A/B/C on every store.
fn abc(ctx: &mut Ctx, r: &mut Report, setup: &Setup) -> Res<()> {
    let _ = writeln!(
        r.md,
        "## Concurrency tests A, B, C (thesis)\n\n{} transactions split over 1, 2, 4 processes (threads for \
         single-process stores, marked *t*); each process owns one 4 KiB value of 1,024 integers; A increments \
         its first integer, B all of them, C does B 1,000 times, one transaction each. txmap and stores with one \
         read-modify-write transaction run it as one; the others read, then write (same result here: no two \
         writers share a value). The values are checked afterwards. Time per transaction in µs, and speedup \
         against 1 process.\n",
        setup.plan.abc_txns
    );
    for &d in &setup.plan.abc_durabilities {
        let rows = measure_abc(ctx, r, setup, d)?;
        report_abc(r, setup.skip, d, &rows)?;
    }
    Ok(())
}

/// Tests A/B/C with commits of durability `d`: per test, one row per
/// number of processes (`ABC_PROCS`).
fn measure_abc(ctx: &mut Ctx, r: &mut Report, setup: &Setup, d: Durability) -> Res<Vec<Vec<Row>>> {
    let n = r.peers.len();
    let mut rows: Vec<Vec<Row>> = Abc::ALL
        .iter()
        .map(|t| {
            ABC_PROCS
                .iter()
                .map(|p| Row::new(format!("{t:?}, {p}"), "µs/txn", Better::Lower, n))
                .collect()
        })
        .collect();
    for rep in 0..ctx.reps {
        for i in order(n, rep) {
            let p = &r.peers[i];
            for (ti, &t) in Abc::ALL.iter().enumerate() {
                for (pi, &procs) in ABC_PROCS.iter().enumerate() {
                    ctx.progress(format!(
                        "test {t:?} {d:?}: {} × {procs}, run {}",
                        p.name,
                        rep + 1
                    ));
                    if let Some(w) = &setup.skip[i] {
                        rows[ti][pi].skip(i, w.clone());
                        continue;
                    }
                    let dir = crate::report::fresh(setup.base, p.id)?;
                    match work::abc(p, &dir, t, setup.plan.abc_txns, procs, d) {
                        Ok((secs, done, problems)) => {
                            r.problems.extend(problems);
                            if done < setup.plan.abc_txns / procs * procs {
                                r.capped.push(format!(
                                    "test {t:?} {d:?}, {} × {procs}: {done} transactions",
                                    p.name
                                ));
                            }
                            rows[ti][pi].push(i, secs * 1e6 / done.max(1) as f64);
                        }
                        Err(e) => {
                            r.problems
                                .push(format!("test {t:?} {d:?}, {} × {procs}: {e}", p.name));
                            rows[ti][pi].skip(i, "failed (see problems)");
                        }
                    }
                    let _ = std::fs::remove_dir_all(&dir);
                }
            }
        }
    }
    Ok(rows)
}

/// The table and plot of tests A/B/C with commits of durability `d`.
fn report_abc(
    r: &mut Report,
    skip: &[Option<String>],
    d: Durability,
    rows: &[Vec<Row>],
) -> Res<()> {
    let _ = writeln!(r.md, "{d:?} commits:\n");
    let mut head = vec!["store".to_string()];
    for t in Abc::ALL {
        head.push(format!("{t:?}: 1 / 2 / 4 (µs/txn)"));
        head.push(format!("{t:?} speedup at 2 / 4"));
    }
    let mut table = crate::report::Table::new(&head);
    for (i, p) in r.peers.iter().enumerate() {
        if skip[i].is_some() {
            continue;
        }
        let tag = if p.processes { "" } else { " *t*" };
        let mut cells = vec![format!("{}{tag}", p.name)];
        for row in rows {
            let m: Vec<Option<f64>> = row.iter().map(|x| x.median(i)).collect();
            cells.push(
                m.iter()
                    .map(|x| x.map_or("–".into(), num))
                    .collect::<Vec<_>>()
                    .join(" / "),
            );
            let sp = |k: usize| match (m[0], m[k]) {
                (Some(a), Some(b)) => num(a / b),
                _ => "–".into(),
            };
            cells.push(format!("{} / {}", sp(1), sp(2)));
        }
        table.row(cells);
    }
    r.md.push_str(&table.render());
    let flat: Vec<&Row> = rows.iter().map(|r| &r[0]).collect();
    let file = format!(
        "abc-{}.svg",
        if d == Durability::Durable {
            "durable"
        } else {
            "async"
        }
    );
    r.bars(
        &file,
        &format!("Tests A/B/C, 1 process, {d:?} (µs per transaction)"),
        &flat,
    )?;
    Ok(())
}

/// Per-page cost of first touches (txmap only: the peers have no page-level
/// mechanism to compare; they appear in the rows above through the same data).
fn page_touch(ctx: &mut Ctx, r: &mut Report, base: &Path) -> Res<()> {
    use crate::touch::{CELLS, PAGE, touch_once};
    const NS: [usize; 4] = [1, 16, 256, 1024];
    let opts = txmap::Options {
        durability: txmap::Durability::Async,
        ..txmap::Options::default()
    };
    let dir = crate::report::fresh(base, "touch")?;
    let region = txmap::Region::create(&dir.join("touch.txm"), 1024 * PAGE, opts)?;
    let mut vals = vec![vec![Vec::new(); NS.len()]; CELLS.len()];
    for rep in 0..ctx.reps {
        ctx.progress(format!("page touch, run {}", rep + 1));
        for (ni, &n) in NS.iter().enumerate() {
            for (ci, cell) in CELLS.iter().enumerate() {
                let mut v = region.view()?;
                vals[ci][ni].push(touch_once(&mut v, cell, n, 0)?.us_per_page);
            }
        }
    }
    drop(region);
    let _ = std::fs::remove_dir_all(&dir);
    let _ = writeln!(
        r.md,
        "## Page touch (txmap only)\n\nFirst read or write of each of n pages inside a transaction on a fresh view, \
         by plain loads and stores (a fault each), after the advisory call for the whole range, and through the accessors, µs per page (begin and commit not included; \
         `txmap-bench touch` has the full table). The peers have no page-level mechanism to set beside it.\n"
    );
    let mut head = vec!["".to_string()];
    head.extend(NS.iter().map(|n| format!("n = {n}")));
    let mut t = crate::report::Table::new(&head);
    for (ci, cell) in CELLS.iter().enumerate() {
        let mut row = vec![cell.name.to_string()];
        row.extend(vals[ci].iter().map(|v| Summary::of(v).cell()));
        t.row(row);
    }
    r.md.push_str(&t.render());
    Ok(())
}
