//! Measurement 1: per-page cost of first reads and first writes inside a
//! transaction: plain loads and stores (caught by page protection), after
//! the advisory call, and through the accessors (tracked in software).

use std::hint::black_box;
use std::time::Instant;

use txmap::{Durability, Options, PageAccess, Region, View};

use crate::report::{Ctx, Res, Summary, Table, num};

pub const PAGE: u64 = 4096;
pub const SIZES: [usize; 11] = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024];
pub fn steps(reps: usize) -> usize {
    3 * reps
}
const MAX_N: usize = 1024;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    ReadOnly,
    SerialRead,
    Write,
}

/// How the pages are touched.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum How {
    /// Plain loads and stores through `View::base()`: one fault per page.
    Raw,
    /// `set_page_access` for the whole range, then plain loads and stores.
    Advisory,
    /// `View::read` / `View::write`, tracked in software: no faults.
    Accessor,
}

pub struct Cell {
    kind: Kind,
    pub how: How,
    pub name: &'static str,
}

/// Three kinds of transaction, each touched the three ways (in that order).
pub const CELLS: [Cell; 9] = [
    Cell {
        kind: Kind::ReadOnly,
        how: How::Raw,
        name: "read, begin_read",
    },
    Cell {
        kind: Kind::ReadOnly,
        how: How::Advisory,
        name: "read, begin_read + advisory",
    },
    Cell {
        kind: Kind::ReadOnly,
        how: How::Accessor,
        name: "read, begin_read, accessor",
    },
    Cell {
        kind: Kind::SerialRead,
        how: How::Raw,
        name: "read, begin",
    },
    Cell {
        kind: Kind::SerialRead,
        how: How::Advisory,
        name: "read, begin + advisory",
    },
    Cell {
        kind: Kind::SerialRead,
        how: How::Accessor,
        name: "read, begin, accessor",
    },
    Cell {
        kind: Kind::Write,
        how: How::Raw,
        name: "write, begin",
    },
    Cell {
        kind: Kind::Write,
        how: How::Advisory,
        name: "write, begin + advisory",
    },
    Cell {
        kind: Kind::Write,
        how: How::Accessor,
        name: "write, begin, accessor",
    },
];

pub struct Sample {
    pub us_per_page: f64,
    faults: u64,
    /// First page whose byte 0 did not read as expected: (page, value).
    wrong: Option<(usize, u8)>,
}

/// One transaction: begin, (advisory call), touch pages 0..n, end. Only the
/// part from before the advisory call / first touch to after the last touch
/// is timed. Writes are rolled back (the commit is not part of the measurement
/// and keeps the log empty); reads commit.
pub fn touch_once(v: &mut View, cell: &Cell, n: usize, expect: u8) -> txmap::Result<Sample> {
    match cell.kind {
        Kind::ReadOnly => v.begin_read()?,
        Kind::SerialRead | Kind::Write => v.begin()?,
    }
    let r = (|| {
        let f0 = v.faults();
        let mut wrong = None;
        let t = Instant::now();
        if cell.how == How::Advisory {
            let access = if cell.kind == Kind::Write {
                PageAccess::Write
            } else {
                PageAccess::Read
            };
            v.set_page_access(0, n * PAGE as usize, access)?;
        }
        let base = v.base();
        for p in 0..n {
            let off = p as u64 * PAGE;
            match (cell.kind, cell.how) {
                (Kind::Write, How::Accessor) => v.write(off + 8, &0x5au8)?,
                // SAFETY: inside a transaction, within the region's n pages.
                (Kind::Write, _) => unsafe { base.add(off as usize + 8).write_volatile(0x5a) },
                (_, how) => {
                    let b = if how == How::Accessor {
                        black_box(v.read::<u8>(off)?)
                    } else {
                        // SAFETY: as above.
                        unsafe { base.add(off as usize).read_volatile() }
                    };
                    if b != expect && wrong.is_none() {
                        wrong = Some((p, b));
                    }
                }
            }
        }
        let el = t.elapsed();
        Ok(Sample {
            us_per_page: el.as_secs_f64() * 1e6 / n as f64,
            faults: v.faults() - f0,
            wrong,
        })
    })();
    match (&r, cell.kind) {
        (Ok(_), Kind::ReadOnly | Kind::SerialRead) => v.commit()?,
        _ => v.rollback(),
    }
    r
}

fn check(ctx: &mut Ctx, scenario: &str, cell: &Cell, n: usize, s: &Sample, expect: u8) {
    let want = if cell.how == How::Raw { n as u64 } else { 0 };
    // A read fault of a read-only transaction maps a run of pages from the
    // region file (issue 20): fewer faults than pages, never more.
    let ok = if cell.how == How::Raw && cell.kind == Kind::ReadOnly {
        (1..=want).contains(&s.faults)
    } else {
        s.faults == want
    };
    if !ok {
        ctx.anomaly(format!(
            "page touch ({scenario}, {}, n={n}): {} faults, expected {want}",
            cell.name, s.faults
        ));
    }
    if let Some((p, b)) = s.wrong {
        ctx.anomaly(format!(
            "page touch ({scenario}, {}, n={n}): page {p} read {b}, expected {expect} (the last committed value)",
            cell.name
        ));
    }
}

/// Commits `stamp` into byte 0 of pages 0..n from another view, so that these
/// pages are stale in every other view.
fn invalidate(w: &mut View, n: usize, stamp: u8) -> txmap::Result<()> {
    w.begin()?;
    for p in 0..n {
        if let Err(e) = w.write(p as u64 * PAGE, &stamp) {
            w.rollback();
            return Err(e);
        }
    }
    w.commit()
}

pub fn run(ctx: &mut Ctx) -> Res<()> {
    println!("## 1. First touch per page inside a transaction\n");
    println!(
        "Time from before the first touch (or the advisory `set_page_access` call for \
         the whole range) to after the last touch, divided by n; begin and commit are \
         not included. One byte is read or written per page: by plain loads and stores \
         through `View::base()` (a fault each), by plain loads and stores after the advisory \
         call, or through `View::read`/`View::write` (tracked in software). Writes are rolled back \
         after timing. The region is opened with `Durability::Async` so that no repetition \
         starts right after the thread slept in fdatasync. Each cell: median (min–max) of {} repetitions, in µs per page.\n",
        ctx.reps
    );
    let path = ctx.dir.join("touch.txm");
    // Async: the other view's invalidating commits must not leave this thread
    // just back from sleeping in fdatasync (cold caches add ~20 µs to the next
    // first fault, which would swamp the n=1 rows). Durability plays no part
    // in first touches.
    let opts = Options {
        max_size: 8 << 20,
        durability: Durability::Async,
        ..Options::default()
    };
    let region = Region::create(&path, MAX_N as u64 * PAGE, opts.clone())?;
    let mut writer = region.view()?;
    let mut stamp: u8 = 0;

    // vals[scenario][size][cell]: repetitions outermost, so that every size
    // and cell sees the same mix of background load (other work on the machine
    // changes over seconds).
    let mut vals = vec![vec![vec![Vec::new(); CELLS.len()]; SIZES.len()]; 3];

    // Scenario A: the first view of a region handle opened for the
    // repetition: its private memory is allocated on first touch.
    // Scenario B: a new view per repetition, on a region handle whose views
    // closed before: it takes over a closed view's memory (no page valid).
    for (scenario, name) in [(0, "first view"), (1, "reopened view")] {
        for rep in 1..=ctx.reps {
            ctx.progress(format!(
                "page touch, {name}, rep {rep}/{}, n=1..1024",
                ctx.reps
            ));
            for (n, vals) in SIZES.iter().zip(&mut vals[scenario]) {
                for (cell, vals) in CELLS.iter().zip(vals) {
                    let handle = match scenario {
                        0 => Region::open(&path, opts.clone())?,
                        _ => region.clone(),
                    };
                    let mut v = handle.view()?;
                    let s = touch_once(&mut v, cell, *n, stamp)?;
                    check(ctx, name, cell, *n, &s, stamp);
                    vals.push(s.us_per_page);
                }
            }
        }
    }

    // Scenario C: one long-lived view whose pages another view's commit made
    // stale before each repetition (the steady state of a long-running program).
    // Warmed with plain loads and stores, as a program using raw pointers
    // would be: its pages are mapped at the user address, not only in the
    // view's private memory (the accessors would leave them unmapped there).
    let mut reader = region.view()?;
    let base = reader.base();
    reader.begin_read()?;
    for p in 0..MAX_N {
        // SAFETY: inside a transaction, within the region's MAX_N pages.
        black_box(unsafe { base.add(p * PAGE as usize).read_volatile() });
    }
    reader.commit()?;
    reader.begin()?;
    for p in 0..MAX_N {
        // SAFETY: as above; rolled back below.
        unsafe { base.add(p * PAGE as usize + 8).write_volatile(1) };
    }
    reader.rollback();
    for rep in 1..=ctx.reps {
        ctx.progress(format!(
            "page touch, long-lived view, rep {rep}/{}, n=1..1024",
            ctx.reps
        ));
        for (n, vals) in SIZES.iter().zip(&mut vals[2]) {
            for (cell, vals) in CELLS.iter().zip(vals) {
                stamp = stamp.wrapping_add(1).max(1);
                invalidate(&mut writer, *n, stamp)?;
                if region.stats().version_pages > 4096 {
                    region.checkpoint()?;
                }
                let s = touch_once(&mut reader, cell, *n, stamp)?;
                check(ctx, "long-lived view", cell, *n, &s, stamp);
                vals.push(s.us_per_page);
            }
        }
    }
    let summarize = |v: &Vec<Vec<Vec<f64>>>| -> Vec<Vec<Summary>> {
        v.iter()
            .map(|row| row.iter().map(|c| Summary::of(c)).collect())
            .collect()
    };
    let first = summarize(&vals[0]);
    let fresh = summarize(&vals[1]);
    let warm = summarize(&vals[2]);

    let print = |title: &str, rows: &[Vec<Summary>]| {
        println!("{title}\n");
        let mut head = vec!["n pages".to_string()];
        head.extend(CELLS.iter().map(|c| c.name.to_string()));
        let mut t = Table::new(&head);
        for (n, r) in SIZES.iter().zip(rows) {
            let mut cells = vec![n.to_string()];
            cells.extend(r.iter().map(Summary::cell));
            t.row(cells);
        }
        t.print();
    };
    print(
        "### 1a. First view (a new region handle and view per repetition; the view's private memory is allocated on first touch)",
        &first,
    );
    print(
        "### 1b. Reopened view (a new `View` per repetition on one region handle; it takes over the memory of a closed view, no page valid)",
        &fresh,
    );
    print(
        "### 1c. Long-lived view (pages made stale by another view's commit before each repetition)",
        &warm,
    );
    let at = |rows: &[Vec<Summary>], n: usize, c: usize| {
        let i = SIZES.iter().position(|&s| s == n).expect("size");
        num(rows[i][c].median)
    };
    println!(
        "At n=256 (µs/page, medians): first view read {} / read+advisory {} / read by accessor {} / \
         write {} / write+advisory {} / write by accessor {}; \
         reopened view read {} / read+advisory {} / read by accessor {} / \
         write {} / write+advisory {} / write by accessor {}; long-lived view read {} / read+advisory {} / \
         read by accessor {} / write {} / write+advisory {} / write by accessor {}. \
         Fault counts were checked in every repetition (n faults for plain loads and stores, \
         none after the advisory call or through the accessors) and every read returned the last committed value{}.\n",
        at(&first, 256, 0),
        at(&first, 256, 1),
        at(&first, 256, 2),
        at(&first, 256, 6),
        at(&first, 256, 7),
        at(&first, 256, 8),
        at(&fresh, 256, 0),
        at(&fresh, 256, 1),
        at(&fresh, 256, 2),
        at(&fresh, 256, 6),
        at(&fresh, 256, 7),
        at(&fresh, 256, 8),
        at(&warm, 256, 0),
        at(&warm, 256, 1),
        at(&warm, 256, 2),
        at(&warm, 256, 6),
        at(&warm, 256, 7),
        at(&warm, 256, 8),
        if ctx.anomalies.iter().any(|a| a.starts_with("page touch")) {
            " — except as listed under Anomalies"
        } else {
            ""
        }
    );
    for (name, rows) in [
        ("first view", &first),
        ("reopened view", &fresh),
        ("long-lived view", &warm),
    ] {
        let i = SIZES.iter().position(|&s| s == 256).expect("size");
        let m = |c: usize| rows[i][c].median;
        let plain = [m(0), m(3), m(6)];
        let advisory = [m(1), m(4), m(7)];
        ctx.target(
            format!("first touch ≤ 6 µs per page ({name}, n=256)"),
            format!(
                "read {} (begin_read) / {} (begin), write {} µs",
                num(plain[0]),
                num(plain[1]),
                num(plain[2])
            ),
            Some(plain.iter().all(|&x| x <= 6.0)),
        );
        ctx.target(
            format!("advisory call well under that, taken as ≤ 3 µs ({name}, n=256)"),
            format!(
                "read {} (begin_read) / {} (begin), write {} µs",
                num(advisory[0]),
                num(advisory[1]),
                num(advisory[2])
            ),
            Some(advisory.iter().all(|&x| x <= 3.0)),
        );
    }
    drop((reader, writer, region));
    let _ = std::fs::remove_file(&path);
    let _ = std::fs::remove_file(txmap::log_path(&path));
    Ok(())
}
