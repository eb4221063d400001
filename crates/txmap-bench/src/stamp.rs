//! STAMP-style workloads (issue 15): a travel reservation system in the
//! style of STAMP's vacation and a clustering in the style of its kmeans,
//! written for txmap from scratch.
//!
//! Both run the same code on a [`Flat`] memory: ordinary memory for the
//! sequential version, a txmap view for the transactional one, used as a
//! LIBXAC program would: plain loads and stores at offsets from the view's
//! base between `begin` and `commit`, retried on `Error::Conflict`. The only
//! difference between the versions is the transactions.
//!
//! Reservation system: four treaps (cars, flights, rooms, customers) of
//! 64-byte nodes linked by offsets; a customer holds a list of its
//! reservations. Nodes come from a bump + free-list allocator whose header
//! lives in the memory, one arena per process (processes never write each
//! other's allocator). Clustering: points and current centres in ordinary
//! memory of each process; each point's transaction adds it to its nearest
//! centre's accumulator (a count and a sum per dimension) in the region;
//! between iterations the processes wait for each other (the parent is the
//! barrier) and compute the next centres from the accumulators.
//!
//! Transactional runs are worker processes (this program with the hidden
//! `--stamp-worker SPEC`), 1 or 2 of them, timed by the parent from `go` to
//! the last `done` as in `procs`.

use std::io::{BufRead, Write};
use std::path::Path;
use std::time::Instant;

use txmap::{Durability, Error, Options, Region};

use crate::procs::{Worker, dur_name, reap, remove};
use crate::report::{Ctx, Res, Summary, Table, num};
use crate::sys::Flat;

const PAGE: u64 = 4096;
const MAX_REPS: usize = 3;
const PROCS: [usize; 2] = [1, 2];
const DURABILITIES: [Durability; 2] = [Durability::Async, Durability::Durable];

// ---------------------------------------------------------------- sizes

/// Sizes of one run of the part.
#[derive(Clone, Copy)]
struct Sizes {
    /// Rows of each table (cars, flights, rooms) and customers at start.
    relations: u64,
    /// Reservation transactions per measurement: sequential, async, durable.
    vac_txns: [u64; 3],
    /// Points: async (and sequential) and durable runs.
    points: [u64; 2],
    iters: u64,
}

fn sizes(ctx: &Ctx) -> Sizes {
    if std::env::var_os("TXMAP_BENCH_STAMP_TINY").is_some() {
        return Sizes {
            relations: 256,
            vac_txns: [200, 100, 20],
            points: [128, 32],
            iters: 2,
        };
    }
    if ctx.quick {
        Sizes {
            relations: 4096,
            vac_txns: [20_000, 2_000, 200],
            points: [2048, 256],
            iters: 4,
        }
    } else {
        Sizes {
            relations: 16_384,
            vac_txns: [100_000, 8_000, 600],
            points: [8192, 512],
            iters: 4,
        }
    }
}

fn options(durability: Durability) -> Options {
    Options {
        durability,
        max_size: 1 << 30,
        ..Options::default()
    }
}

// ---------------------------------------------------------------- random

/// splitmix64: cheap, deterministic, the same in every process.
#[derive(Clone)]
struct Rng(u64);

fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        mix(self.0)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

// ---------------------------------------------------------------- transactions

/// Runs `f` once on heap memory, or in a serializable transaction retried
/// until it commits on a view. Returns the conflicts (retries).
fn atomically(m: &mut Flat, mut f: impl FnMut(&Flat)) -> txmap::Result<u64> {
    let mut conflicts = 0;
    loop {
        let Some(v) = m.view_mut() else {
            f(m);
            return Ok(0);
        };
        v.begin()?;
        f(m);
        let v = m.view_mut().expect("a view");
        match v.commit() {
            Ok(()) => return Ok(conflicts),
            Err(Error::Conflict) => conflicts += 1,
            Err(e) => return Err(e),
        }
    }
}

/// Runs `f` in a read-only transaction on a view (directly on heap memory).
fn reading<T>(m: &mut Flat, f: impl FnOnce(&Flat) -> T) -> txmap::Result<T> {
    if let Some(v) = m.view_mut() {
        v.begin_read()?;
    }
    let r = f(m);
    if let Some(v) = m.view_mut() {
        v.commit()?;
    }
    Ok(r)
}

// ---------------------------------------------------------------- allocator

// Arena header words: next free byte, end, free-list head.
const A_NEXT: u64 = 0;
const A_END: u64 = 8;
const A_FREE: u64 = 16;
/// Every allocation (tree node or reservation) is one 64-byte block.
const NODE: u64 = 64;

/// Sets up an arena of `bytes` at `at`: its header alone on the first page.
fn arena_init(m: &Flat, at: u64, bytes: u64) {
    m.store(at + A_NEXT, at + PAGE);
    m.store(at + A_END, at + bytes);
    m.store(at + A_FREE, 0);
}

fn alloc(m: &Flat, arena: u64) -> u64 {
    let f = m.load(arena + A_FREE);
    if f != 0 {
        m.store(arena + A_FREE, m.load(f));
        return f;
    }
    let n = m.load(arena + A_NEXT);
    assert!(
        n + NODE <= m.load(arena + A_END),
        "arena at {arena} is full"
    );
    m.store(arena + A_NEXT, n + NODE);
    n
}

fn free(m: &Flat, arena: u64, n: u64) {
    m.store(n, m.load(arena + A_FREE));
    m.store(arena + A_FREE, n);
}

// ---------------------------------------------------------------- treap

// Node words. Resources: total, used, price; customers: reservation list.
const KEY: u64 = 0;
const LEFT: u64 = 8;
const RIGHT: u64 = 16;
const TOTAL: u64 = 24;
const USED: u64 = 32;
const PRICE: u64 = 40;
const LIST: u64 = 24;
// Reservation words.
const R_KIND: u64 = 0;
const R_ID: u64 = 8;
const R_PRICE: u64 = 16;
const R_NEXT: u64 = 24;

/// Heap priority of a key (distinct keys, so ties break by key).
fn prio(key: u64) -> (u64, u64) {
    (mix(key ^ 0x5eed), key)
}

fn find(m: &Flat, root: u64, key: u64) -> u64 {
    let mut n = m.load(root);
    while n != 0 {
        let k = m.load(n + KEY);
        if k == key {
            return n;
        }
        n = m.load(n + if key < k { LEFT } else { RIGHT });
    }
    0
}

/// Inserts a node for `key` (absent) under the child pointer at `slot`;
/// returns it with key and children set.
fn insert(m: &Flat, arena: u64, slot: u64, key: u64) -> u64 {
    let n = m.load(slot);
    if n == 0 {
        let x = alloc(m, arena);
        m.store(x + KEY, key);
        m.store(x + LEFT, 0);
        m.store(x + RIGHT, 0);
        m.store(slot, x);
        return x;
    }
    let k = m.load(n + KEY);
    let (side, other) = if key < k {
        (LEFT, RIGHT)
    } else {
        (RIGHT, LEFT)
    };
    let x = insert(m, arena, n + side, key);
    let c = m.load(n + side);
    if prio(m.load(c + KEY)) > prio(k) {
        // Rotate the child above n.
        m.store(n + side, m.load(c + other));
        m.store(c + other, n);
        m.store(slot, c);
    }
    x
}

/// Unlinks the node of `key` from the tree at `root`; returns it (0 if absent).
fn unlink(m: &Flat, root: u64, key: u64) -> u64 {
    let mut slot = root;
    let n = loop {
        let n = m.load(slot);
        if n == 0 {
            return 0;
        }
        let k = m.load(n + KEY);
        if k == key {
            break n;
        }
        slot = n + if key < k { LEFT } else { RIGHT };
    };
    loop {
        let (l, r) = (m.load(n + LEFT), m.load(n + RIGHT));
        if l == 0 || r == 0 {
            m.store(slot, l | r);
            return n;
        }
        // Rotate the child of higher priority above n and follow n down.
        if prio(m.load(l + KEY)) > prio(m.load(r + KEY)) {
            m.store(n + LEFT, m.load(l + RIGHT));
            m.store(l + RIGHT, n);
            m.store(slot, l);
            slot = l + RIGHT;
        } else {
            m.store(n + RIGHT, m.load(r + LEFT));
            m.store(r + LEFT, n);
            m.store(slot, r);
            slot = r + LEFT;
        }
    }
}

// ---------------------------------------------------------------- reservations

const CUSTOMERS: u64 = 3;
/// Queries per transaction (vacation's -n), percent of ids queried (-q),
/// percent of reservation transactions (-u; the rest split between
/// deleting customers and updating tables).
const QUERIES: u64 = 4;
const QUERIED_PERCENT: u64 = 90;
const USER_PERCENT: u64 = 90;
const MAGIC: u64 = 0x7374_616d_7076_6163;

/// Where things are: the header page (magic, 4 roots), the populating
/// arena, then one arena per process.
#[derive(Clone, Copy)]
struct Layout {
    relations: u64,
    /// Transactions each worker runs (sizes its arena).
    txns: u64,
}

impl Layout {
    fn root(t: u64) -> u64 {
        8 + 8 * t
    }
    fn pop_bytes(self) -> u64 {
        PAGE + (4 * self.relations * NODE).div_ceil(PAGE) * PAGE
    }
    fn arena_bytes(self) -> u64 {
        // At most 4 blocks per transaction (3 reservations and a customer,
        // or 4 new rows).
        PAGE + (self.txns * 4 * NODE).div_ceil(PAGE) * PAGE
    }
    /// Arena of process `i` (0: the one that populated).
    fn arena(self, i: u64) -> u64 {
        if i == 0 {
            PAGE
        } else {
            PAGE + self.pop_bytes() + (i - 1) * self.arena_bytes()
        }
    }
    fn size(self, procs: u64) -> u64 {
        self.arena(procs + 1)
    }
}

/// The tables at start: every id of each table and every customer, in a
/// random order, as one transaction.
fn populate(m: &mut Flat, l: Layout) -> txmap::Result<()> {
    atomically(m, |m| {
        m.store(0, MAGIC);
        let a = l.arena(0);
        arena_init(m, a, l.pop_bytes());
        let mut rng = Rng(42);
        for t in 0..4 {
            let mut ids: Vec<u64> = (0..l.relations).collect();
            for i in (1..ids.len()).rev() {
                ids.swap(i, rng.below(i as u64 + 1) as usize);
            }
            for id in ids {
                let n = insert(m, a, Layout::root(t), id);
                if t == CUSTOMERS {
                    m.store(n + LIST, 0);
                } else {
                    m.store(n + TOTAL, (rng.below(5) + 1) * 100);
                    m.store(n + USED, 0);
                    m.store(n + PRICE, rng.below(5) * 10 + 50);
                }
            }
        }
    })
    .map(drop)
}

/// One client transaction, its choices drawn from `rng` (the same draws on
/// every attempt).
fn client(m: &Flat, arena: u64, range: u64, rng: &mut Rng) {
    let action = rng.below(100);
    if action < USER_PERCENT {
        make_reservation(m, arena, range, rng);
    } else if action.is_multiple_of(2) {
        delete_customer(m, arena, rng.below(range));
    } else {
        update_tables(m, arena, range, rng);
    }
}

fn make_reservation(m: &Flat, arena: u64, range: u64, rng: &mut Rng) {
    let cust = rng.below(range);
    // Per table, the most expensive queried row with a free unit.
    let mut best = [(0u64, 0u64); 3];
    for _ in 0..QUERIES {
        let t = rng.below(3);
        let n = find(m, Layout::root(t), rng.below(range));
        if n == 0 || m.load(n + USED) >= m.load(n + TOTAL) {
            continue;
        }
        let price = m.load(n + PRICE);
        let b = &mut best[t as usize];
        if b.0 == 0 || price > b.1 {
            *b = (n, price);
        }
    }
    if best.iter().all(|b| b.0 == 0) {
        return;
    }
    let root = Layout::root(CUSTOMERS);
    let mut c = find(m, root, cust);
    if c == 0 {
        c = insert(m, arena, root, cust);
        m.store(c + LIST, 0);
    }
    for (t, &(n, price)) in best.iter().enumerate() {
        if n == 0 {
            continue;
        }
        m.store(n + USED, m.load(n + USED) + 1);
        let r = alloc(m, arena);
        m.store(r + R_KIND, t as u64);
        m.store(r + R_ID, m.load(n + KEY));
        m.store(r + R_PRICE, price);
        m.store(r + R_NEXT, m.load(c + LIST));
        m.store(c + LIST, r);
    }
}

fn delete_customer(m: &Flat, arena: u64, cust: u64) {
    let c = unlink(m, Layout::root(CUSTOMERS), cust);
    if c == 0 {
        return;
    }
    let mut r = m.load(c + LIST);
    while r != 0 {
        let n = find(m, Layout::root(m.load(r + R_KIND)), m.load(r + R_ID));
        // Rows with reservations are never deleted; the audit counts them.
        if n != 0 {
            m.store(n + USED, m.load(n + USED) - 1);
        }
        let next = m.load(r + R_NEXT);
        free(m, arena, r);
        r = next;
    }
    free(m, arena, c);
}

fn update_tables(m: &Flat, arena: u64, range: u64, rng: &mut Rng) {
    for _ in 0..QUERIES {
        let t = rng.below(3);
        let id = rng.below(range);
        let add = rng.below(2) == 0;
        let price = rng.below(5) * 10 + 50;
        let root = Layout::root(t);
        let n = find(m, root, id);
        if add {
            if n != 0 {
                m.store(n + TOTAL, m.load(n + TOTAL) + 100);
            } else {
                let n = insert(m, arena, root, id);
                m.store(n + TOTAL, 100);
                m.store(n + USED, 0);
            }
            let n = find(m, root, id);
            m.store(n + PRICE, price);
        } else if n != 0 {
            let (total, used) = (m.load(n + TOTAL), m.load(n + USED));
            if used == 0 {
                free(m, arena, unlink(m, root, id));
            } else {
                m.store(n + TOTAL, total.saturating_sub(100).max(used));
            }
        }
    }
}

/// Walks every tree: a digest of the contents (not of where they are), or
/// what is inconsistent (order, heap property, used vs reservations).
fn audit(m: &Flat) -> Result<u64, String> {
    fn walk(
        m: &Flat,
        n: u64,
        lo: Option<u64>,
        hi: Option<u64>,
        visit: &mut dyn FnMut(u64),
    ) -> Result<(), String> {
        if n == 0 {
            return Ok(());
        }
        let k = m.load(n + KEY);
        if lo.is_some_and(|lo| k <= lo) || hi.is_some_and(|hi| k >= hi) {
            return Err(format!("key {k} out of order"));
        }
        for side in [LEFT, RIGHT] {
            let c = m.load(n + side);
            if c != 0 && prio(m.load(c + KEY)) > prio(k) {
                return Err(format!("heap order broken below key {k}"));
            }
        }
        walk(m, m.load(n + LEFT), lo, Some(k), visit)?;
        visit(n);
        walk(m, m.load(n + RIGHT), Some(k), hi, visit)
    }
    if m.load(0) != MAGIC {
        return Err("header not written".into());
    }
    let mut digest = 0u64;
    let mut used = 0u64;
    let mut reservations = 0u64;
    for t in 0..4 {
        walk(m, m.load(Layout::root(t)), None, None, &mut |n| {
            let mut h = mix(t ^ m.load(n + KEY) << 2);
            if t == CUSTOMERS {
                let mut r = m.load(n + LIST);
                while r != 0 {
                    reservations += 1;
                    h = mix(h
                        ^ m.load(r + R_KIND)
                        ^ m.load(r + R_ID) << 2
                        ^ m.load(r + R_PRICE) << 40);
                    r = m.load(r + R_NEXT);
                }
            } else {
                let (total, u) = (m.load(n + TOTAL), m.load(n + USED));
                used += u;
                h = mix(h ^ total ^ u << 20 ^ m.load(n + PRICE) << 40);
            }
            digest = digest.wrapping_add(h);
        })?;
    }
    if used != reservations {
        return Err(format!(
            "{used} units in use but {reservations} reservations"
        ));
    }
    Ok(digest)
}

/// Runs `txns` client transactions of process `idx` (seeded by it); returns
/// the conflicts.
fn vac_run(m: &mut Flat, l: Layout, idx: u64, txns: u64) -> txmap::Result<u64> {
    let arena = l.arena(idx + 1);
    atomically(m, |m| arena_init(m, arena, l.arena_bytes()))?;
    let range = (l.relations * QUERIED_PERCENT / 100).max(1);
    let mut rng = Rng(1000 + idx);
    let mut conflicts = 0;
    for _ in 0..txns {
        let start = rng.clone();
        conflicts += atomically(m, |m| {
            rng = start.clone();
            client(m, arena, range, &mut rng);
        })?;
    }
    Ok(conflicts)
}

// ---------------------------------------------------------------- clustering

const DIMS: usize = 32;
const CLUSTERS: usize = 16;

/// Accumulator of centre `c` in iteration `it`: a count, then the sums.
fn acc(it: u64, c: usize) -> u64 {
    PAGE + (it * CLUSTERS as u64 + c as u64) * (DIMS as u64 + 1) * 8
}

fn km_size(iters: u64) -> u64 {
    acc(iters, 0).div_ceil(PAGE) * PAGE
}

/// The points, the same in every process: clusters around random centres.
fn km_points(n: u64) -> Vec<[f32; DIMS]> {
    let mut rng = Rng(7);
    let unit = |rng: &mut Rng| (rng.next() >> 11) as f32 / (1u64 << 53) as f32;
    let centres: Vec<[f32; DIMS]> = (0..CLUSTERS)
        .map(|_| std::array::from_fn(|_| unit(&mut rng) * 100.0))
        .collect();
    (0..n)
        .map(|_| {
            let c = &centres[rng.below(CLUSTERS as u64) as usize];
            std::array::from_fn(|j| c[j] + (unit(&mut rng) - 0.5) * 20.0)
        })
        .collect()
}

fn nearest(centres: &[[f64; DIMS]], p: &[f32; DIMS]) -> usize {
    let mut best = (f64::INFINITY, 0);
    for (c, x) in centres.iter().enumerate() {
        let d: f64 = x
            .iter()
            .zip(p)
            .map(|(a, &b)| (a - f64::from(b)) * (a - f64::from(b)))
            .sum();
        if d < best.0 {
            best = (d, c);
        }
    }
    best.1
}

/// One iteration's share of process `idx` of `procs`: a transaction per
/// point. Returns the conflicts.
fn km_iteration(
    m: &mut Flat,
    it: u64,
    points: &[[f32; DIMS]],
    centres: &[[f64; DIMS]],
    idx: usize,
    procs: usize,
) -> txmap::Result<u64> {
    let mut conflicts = 0;
    for p in points.iter().skip(idx).step_by(procs) {
        let a = acc(it, nearest(centres, p));
        conflicts += atomically(m, |m| {
            m.store(a, m.load(a) + 1);
            for (j, &x) in p.iter().enumerate() {
                let o = a + 8 + 8 * j as u64;
                m.store(o, (f64::from_bits(m.load(o)) + f64::from(x)).to_bits());
            }
        })?;
    }
    Ok(conflicts)
}

/// The next centres from iteration `it`'s accumulators, and the points they
/// counted.
fn km_centres(m: &mut Flat, it: u64, centres: &mut [[f64; DIMS]]) -> txmap::Result<u64> {
    reading(m, |m| {
        let mut total = 0;
        for (c, x) in centres.iter_mut().enumerate() {
            let a = acc(it, c);
            let n = m.load(a);
            total += n;
            if n > 0 {
                for (j, v) in x.iter_mut().enumerate() {
                    *v = f64::from_bits(m.load(a + 8 + 8 * j as u64)) / n as f64;
                }
            }
        }
        total
    })
}

fn km_start(points: &[[f32; DIMS]]) -> Vec<[f64; DIMS]> {
    (0..CLUSTERS)
        .map(|c| std::array::from_fn(|j| f64::from(points[c % points.len()][j])))
        .collect()
}

fn km_digest(centres: &[[f64; DIMS]]) -> u64 {
    centres
        .iter()
        .flatten()
        .fold(0, |h, x| mix(h ^ x.to_bits()))
}

// ---------------------------------------------------------------- worker side

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Vac,
    Km,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Vac => "vac",
            Kind::Km => "km",
        }
    }
    fn title(self) -> &'static str {
        match self {
            Kind::Vac => "reservations (vacation-style)",
            Kind::Km => "clustering (kmeans-style)",
        }
    }
}

/// What a worker was asked: `kind,durability,idx,procs,count,size,init,path`.
/// count: transactions (vac) or iterations (km); size: relations or points;
/// init 1: create and populate the region first (for tracing one worker).
struct Spec {
    kind: Kind,
    durability: Durability,
    idx: u64,
    procs: u64,
    count: u64,
    size: u64,
    init: bool,
    path: std::path::PathBuf,
}

impl Spec {
    fn parse(s: &str) -> Option<Spec> {
        let f: Vec<&str> = s.splitn(8, ',').collect();
        if f.len() != 8 {
            return None;
        }
        Some(Spec {
            kind: match f[0] {
                "vac" => Kind::Vac,
                "km" => Kind::Km,
                _ => return None,
            },
            durability: match f[1] {
                "async" => Durability::Async,
                "durable" => Durability::Durable,
                _ => return None,
            },
            idx: f[2].parse().ok()?,
            procs: f[3].parse().ok()?,
            count: f[4].parse().ok()?,
            size: f[5].parse().ok()?,
            init: f[6] == "1",
            path: f[7].into(),
        })
    }

    fn render(&self) -> String {
        format!(
            "{},{},{},{},{},{},{},{}",
            self.kind.name(),
            dur_name(self.durability),
            self.idx,
            self.procs,
            self.count,
            self.size,
            u8::from(self.init),
            self.path.display()
        )
    }

    fn layout(&self) -> Layout {
        Layout {
            relations: self.size,
            txns: self.count,
        }
    }
}

/// Entry point of a worker process; returns its exit code. Prints `ready`,
/// waits for `go`; clustering prints `iter` after each iteration and waits
/// for `go`; at the end `done <commits> <conflicts> <faults> <digest>`.
pub fn worker(spec: &str) -> i32 {
    match worker_inner(spec) {
        Ok(()) => 0,
        Err(e) => {
            println!("error {}", e.to_string().replace('\n', " "));
            1
        }
    }
}

fn wait_go() -> Res<()> {
    let mut out = std::io::stdout().lock();
    out.flush()?;
    let mut go = String::new();
    std::io::stdin().lock().read_line(&mut go)?;
    if go.trim() != "go" {
        return Err(format!("expected go, got {go:?}").into());
    }
    Ok(())
}

fn worker_inner(spec: &str) -> Res<()> {
    let s = Spec::parse(spec).ok_or_else(|| format!("bad worker spec {spec:?}"))?;
    let region = if s.init {
        let size = match s.kind {
            Kind::Vac => s.layout().size(s.procs),
            Kind::Km => km_size(s.count),
        };
        let r = Region::create(&s.path, size, options(s.durability))?;
        if s.kind == Kind::Vac {
            populate(&mut Flat::view(r.view()?), s.layout())?;
        }
        r
    } else {
        Region::open(&s.path, options(s.durability))?
    };
    let mut m = Flat::view(region.view()?);
    let points = if s.kind == Kind::Km {
        km_points(s.size)
    } else {
        Vec::new()
    };
    println!("ready");
    wait_go()?;
    let faults0 = m.view_mut().map_or(0, |v| v.faults());
    let (commits, conflicts, digest) = match s.kind {
        Kind::Vac => {
            let c = vac_run(&mut m, s.layout(), s.idx, s.count)?;
            (s.count, c, 0)
        }
        Kind::Km => {
            let mut centres = km_start(&points);
            let mut conflicts = 0;
            let mut commits = 0;
            for it in 0..s.count {
                conflicts += km_iteration(
                    &mut m,
                    it,
                    &points,
                    &centres,
                    s.idx as usize,
                    s.procs as usize,
                )?;
                commits += points
                    .iter()
                    .skip(s.idx as usize)
                    .step_by(s.procs as usize)
                    .count() as u64;
                println!("iter");
                wait_go()?;
                km_centres(&mut m, it, &mut centres)?;
            }
            (commits, conflicts, km_digest(&centres))
        }
    };
    let faults = m.view_mut().map_or(0, |v| v.faults()) - faults0;
    drop(m);
    region.close()?;
    println!("done {commits} {conflicts} {faults} {digest}");
    Ok(())
}

// ---------------------------------------------------------------- parent side

/// The worker's next line, which must start with `what`.
fn expect(w: &mut Worker, what: &str) -> Res<String> {
    let s = w.line()?;
    if !s.starts_with(what) {
        return Err(format!("worker said {s:?}, expected {what}").into());
    }
    Ok(s)
}

fn go(w: &mut Worker) -> Res<()> {
    w.stdin.write_all(b"go\n")?;
    Ok(w.stdin.flush()?)
}

/// One measurement: seconds, transactions, conflicts, faults, digest (of
/// the last worker).
#[derive(Default)]
struct Run {
    secs: f64,
    commits: u64,
    conflicts: u64,
    faults: u64,
    digest: u64,
}

impl Run {
    fn us_per_txn(&self) -> f64 {
        self.secs * 1e6 / self.commits.max(1) as f64
    }
}

/// Runs `procs` workers on the region at `path` (already populated).
fn run_workers(
    kind: Kind,
    durability: Durability,
    procs: usize,
    count: u64,
    size: u64,
    path: &Path,
) -> Res<Run> {
    let exe = std::env::current_exe()?;
    let mut ws = Vec::new();
    let result = (|| {
        for i in 0..procs {
            let spec = Spec {
                kind,
                durability,
                idx: i as u64,
                procs: procs as u64,
                count,
                size,
                init: false,
                path: path.to_path_buf(),
            };
            ws.push(Worker::spawn(&exe, "--stamp-worker", &spec.render())?);
        }
        for w in &mut ws {
            expect(w, "ready")?;
        }
        let t = Instant::now();
        for w in &mut ws {
            go(w)?;
        }
        if kind == Kind::Km {
            for _ in 0..count {
                for w in &mut ws {
                    expect(w, "iter")?;
                }
                for w in &mut ws {
                    go(w)?;
                }
            }
        }
        let mut run = Run::default();
        for w in &mut ws {
            let l = expect(w, "done ")?;
            let n: Vec<u64> = l[5..].split(' ').filter_map(|x| x.parse().ok()).collect();
            if n.len() != 4 {
                return Err(format!("worker said {l:?}").into());
            }
            run.commits += n[0];
            run.conflicts += n[1];
            run.faults += n[2];
            run.digest = n[3];
        }
        run.secs = t.elapsed().as_secs_f64();
        Ok::<Run, Box<dyn std::error::Error>>(run)
    })();
    reap(ws, result)
}

/// Sequential reservations on ordinary memory: (µs per transaction, digest).
fn vac_sequential(relations: u64, txns: u64) -> Res<(f64, u64)> {
    let l = Layout { relations, txns };
    let mut m = Flat::heap(l.size(1) as usize)?;
    populate(&mut m, l)?;
    let t = Instant::now();
    vac_run(&mut m, l, 0, txns)?;
    let us = t.elapsed().as_secs_f64() * 1e6 / txns as f64;
    Ok((us, audit(&m)?))
}

/// Sequential clustering on ordinary memory: (µs per point, digest).
fn km_sequential(points: u64, iters: u64) -> Res<(f64, u64)> {
    let pts = km_points(points);
    let mut m = Flat::heap(km_size(iters) as usize)?;
    let mut centres = km_start(&pts);
    let t = Instant::now();
    for it in 0..iters {
        km_iteration(&mut m, it, &pts, &centres, 0, 1)?;
        km_centres(&mut m, it, &mut centres)?;
    }
    let us = t.elapsed().as_secs_f64() * 1e6 / (points * iters) as f64;
    Ok((us, km_digest(&centres)))
}

/// A transactional measurement on a fresh region; checks the result.
fn transactional(
    ctx: &mut Ctx,
    kind: Kind,
    dur: Durability,
    procs: usize,
    count: u64,
    size: u64,
) -> Res<(Run, u64)> {
    let path = ctx.dir.join(format!(
        "stamp-{}-{}-{procs}.txm",
        kind.name(),
        dur_name(dur)
    ));
    remove(&path);
    let (region_size, layout) = match kind {
        Kind::Vac => {
            let l = Layout {
                relations: size,
                txns: count / procs as u64,
            };
            (l.size(procs as u64), Some(l))
        }
        Kind::Km => (km_size(count), None),
    };
    let region = Region::create(&path, region_size, options(dur))?;
    let mut m = Flat::view(region.view()?);
    if let Some(l) = layout {
        populate(&mut m, l)?;
    }
    let per = match kind {
        Kind::Vac => count / procs as u64,
        Kind::Km => count,
    };
    let run = run_workers(kind, dur, procs, per, size, &path)?;
    let what = format!("{}, {}, {procs} process(es)", kind.title(), dur_name(dur));
    let check = match kind {
        Kind::Vac => reading(&mut m, audit)?.map_err(|e| e.to_string()),
        Kind::Km => {
            let mut bad = Ok(run.digest);
            for it in 0..count {
                let n = km_centres(&mut m, it, &mut vec![[0.0; DIMS]; CLUSTERS])?;
                if n != size {
                    bad = Err(format!("iteration {it} counted {n} of {size} points"));
                }
            }
            bad
        }
    };
    drop(m);
    region.close()?;
    remove(&path);
    match check {
        Ok(d) => Ok((run, d)),
        Err(e) => {
            ctx.anomaly(format!("{what}: {e}"));
            Ok((run, 0))
        }
    }
}

pub fn steps(reps: usize) -> usize {
    reps.min(MAX_REPS) * 2 * (1 + DURABILITIES.len() * PROCS.len())
}

/// Per workload: medians over repetitions of each cell.
#[derive(Default)]
struct Cells {
    seq: Vec<f64>,
    /// [durability][procs]: µs per transaction, aborts/txn, faults/txn.
    us: [[Vec<f64>; 2]; 2],
    aborts: [[Vec<f64>; 2]; 2],
    faults: [[Vec<f64>; 2]; 2],
    speedup: [Vec<f64>; 2],
}

fn med(v: &[f64]) -> f64 {
    Summary::of(v).median
}

pub fn run(ctx: &mut Ctx) -> Res<()> {
    println!("## 8. STAMP-style workloads: reservations and clustering (issue 15)\n");
    let sz = sizes(ctx);
    let reps = ctx.reps.min(MAX_REPS);
    let mut cells = [Cells::default(), Cells::default()];
    for rep in 1..=reps {
        for (ki, kind) in [Kind::Vac, Kind::Km].into_iter().enumerate() {
            ctx.progress(format!("rep {rep}/{reps}: {}, sequential", kind.title()));
            let (us, digest) = match kind {
                Kind::Vac => vac_sequential(sz.relations, sz.vac_txns[0])?,
                Kind::Km => km_sequential(sz.points[0], sz.iters)?,
            };
            cells[ki].seq.push(us);
            for (di, &dur) in DURABILITIES.iter().enumerate() {
                for (pi, &procs) in PROCS.iter().enumerate() {
                    ctx.progress(format!(
                        "rep {rep}/{reps}: {}, {}, {procs} process(es)",
                        kind.title(),
                        dur_name(dur)
                    ));
                    let (count, size) = match kind {
                        Kind::Vac => (sz.vac_txns[1 + di], sz.relations),
                        Kind::Km => (sz.iters, sz.points[di]),
                    };
                    let (r, d) = transactional(ctx, kind, dur, procs, count, size)?;
                    // One process runs exactly the sequential version's
                    // transactions (same seeds, same order).
                    let want = match (kind, procs) {
                        (_, 2) => d,
                        (Kind::Vac, _) if count == sz.vac_txns[0] => digest,
                        (Kind::Vac, _) => vac_sequential(size, count)?.1,
                        (Kind::Km, _) if size == sz.points[0] => digest,
                        (Kind::Km, _) => km_sequential(size, count)?.1,
                    };
                    if d != want {
                        ctx.anomaly(format!(
                            "{}, {}: one process ended in another state than the sequential run",
                            kind.title(),
                            dur_name(dur)
                        ));
                    }
                    let c = &mut cells[ki];
                    let n = r.commits.max(1) as f64;
                    c.us[di][pi].push(r.us_per_txn());
                    c.aborts[di][pi].push(r.conflicts as f64 / n);
                    c.faults[di][pi].push(r.faults as f64 / n);
                    if pi == 1 {
                        let one = c.us[di][0][rep - 1];
                        c.speedup[di].push(one / r.us_per_txn());
                    }
                }
            }
        }
    }
    print_tables(ctx, &cells, sz, reps);
    Ok(())
}

fn print_tables(ctx: &mut Ctx, cells: &[Cells; 2], sz: Sizes, reps: usize) {
    println!("### 8a. One process: transactional against sequential\n");
    let mut t = Table::new(&[
        "workload",
        "sequential µs/txn",
        "async µs/txn",
        "async × seq",
        "durable µs/txn",
        "durable × seq",
        "faults/txn (async / durable)",
        "aborts/txn (async / durable)",
    ]);
    for (ki, kind) in [Kind::Vac, Kind::Km].into_iter().enumerate() {
        let c = &cells[ki];
        let seq = med(&c.seq);
        let (a, d) = (med(&c.us[0][0]), med(&c.us[1][0]));
        t.row(vec![
            kind.title().into(),
            Summary::of(&c.seq).cell(),
            Summary::of(&c.us[0][0]).cell(),
            num(a / seq),
            Summary::of(&c.us[1][0]).cell(),
            num(d / seq),
            format!(
                "{} / {}",
                num(med(&c.faults[0][0])),
                num(med(&c.faults[1][0]))
            ),
            format!(
                "{} / {}",
                num(med(&c.aborts[0][0])),
                num(med(&c.aborts[1][0]))
            ),
        ]);
        let limit = if kind == Kind::Vac { 10.0 } else { 5.0 };
        ctx.target(
            format!(
                "{}: transactional ≤ {limit}× sequential at 1 process",
                kind.title()
            ),
            format!(
                "{}× async ({} vs {} µs per transaction), {}× durable",
                num(a / seq),
                num(a),
                num(seq),
                num(d / seq)
            ),
            Some(a / seq <= limit),
        );
    }
    t.print();
    println!("### 8b. Two processes\n");
    let mut t = Table::new(&[
        "workload",
        "durability",
        "1 proc txn/s",
        "2 procs txn/s",
        "speedup ×2",
        "aborts/txn, 2 procs",
        "faults/txn, 2 procs",
    ]);
    for (ki, kind) in [Kind::Vac, Kind::Km].into_iter().enumerate() {
        let c = &cells[ki];
        for (di, &dur) in DURABILITIES.iter().enumerate() {
            t.row(vec![
                kind.title().into(),
                dur_name(dur).into(),
                num(1e6 / med(&c.us[di][0])),
                num(1e6 / med(&c.us[di][1])),
                Summary::of(&c.speedup[di]).cell(),
                num(med(&c.aborts[di][1])),
                num(med(&c.faults[di][1])),
            ]);
        }
    }
    t.print();
    println!(
        "Cells: median (min–max) of {reps} repetitions; speedup paired per repetition. \
         Reservations: {r} rows in each of cars, flights, rooms and {r} customers at start \
         (treaps of 64-byte nodes); {QUERIES} queries per transaction over {QUERIED_PERCENT} % \
         of the ids; {USER_PERCENT} % make reservations, the rest delete customers or update \
         tables; {} transactions sequentially, {} async and {} durable (split across the \
         processes). Clustering: {} points (durable: {}) of {DIMS} dimensions, {CLUSTERS} \
         centres, {} iterations, one transaction per point adding it to its nearest centre's \
         accumulator (accumulators contiguous, {} bytes each). Transactional runs are worker \
         processes on a fresh region, timed from the start signal to the last report; a \
         transaction that conflicts is retried at once. Faults are `View::faults()` (first \
         touches) per committed transaction, aborts are conflicts per committed transaction. \
         Every run is audited afterwards (tree order, units used = reservations held; every \
         point counted once per iteration), and one process must end in the sequential run's \
         state.\n",
        sz.vac_txns[0],
        sz.vac_txns[1],
        sz.vac_txns[2],
        sz.points[0],
        sz.points[1],
        sz.iters,
        (DIMS + 1) * 8,
        r = sz.relations,
    );
}
