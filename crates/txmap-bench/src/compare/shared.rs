//! Issue 20's rows in `compare` (txmap only: the peers have no views): the
//! first read of a current page in a fresh view beside the bare kernel fault
//! on the region file, measured in the same run, and the resident memory of
//! 8 reader threads and of 4 reader processes that each read a whole region.

use std::fmt::Write as _;
use std::hint::black_box;
use std::io::{BufRead, Write as _};
use std::os::fd::AsFd;
use std::path::Path;
use std::sync::{Arc, Barrier};
use std::time::Instant;

use txmap::{Durability, Options, Region};

use super::Report;
use crate::procs::{Worker, reap};
use crate::report::{Ctx, Res, Summary, num};
use crate::sharedpages::{Mem, mem, mem_of};
use crate::sys::{Mapping, PAGE, Prot};

/// Pages of the first-read rows (each repetition on a fresh view).
const TOUCH_PAGES: usize = 1024;
/// First-read rounds per run: each takes a few milliseconds, and single
/// rounds vary by tens of percent.
const ROUNDS_PER_RUN: usize = 5;
const THREADS: usize = 8;
const PROCESSES: usize = 4;

fn opts() -> Options {
    Options {
        durability: Durability::Async,
        ..Options::default()
    }
}

/// Runs the section and adds its rows and targets to the report.
pub fn section(ctx: &mut Ctx, r: &mut Report, base: &Path) -> Res<()> {
    let dir = crate::report::fresh(base, "shared")?;
    let path = dir.join("touch.txm");
    let region = Region::create(&path, (TOUCH_PAGES * PAGE) as u64, opts())?;
    let file = std::fs::File::open(&path)?;
    // The same reads of pages that hold data (written and checkpointed):
    // the page cache then holds them in large folios, which the bare
    // fault maps many pages at a time.
    let data_path = dir.join("data.txm");
    let data = filled(&data_path, (TOUCH_PAGES * PAGE) >> 20, opts())?;
    let data_file = std::fs::File::open(&data_path)?;
    let (mut plain, mut advised, mut bare) = (Vec::new(), Vec::new(), Vec::new());
    let (mut data_plain, mut data_bare) = (Vec::new(), Vec::new());
    // One round of every measurement, each txmap read in a fresh view.
    let mut round = |keep: bool| -> Res<()> {
        let p = view_first_read(&mut region.view()?, false, |_| 0)?;
        let a = view_first_read(&mut region.view()?, true, |_| 0)?;
        // The same file, pages in the cache, a fresh mapping each time.
        let b = bare_first_read(&file)?;
        // Page `p` holds `p + 1` in its first 8 bytes (`filled`).
        let dp = view_first_read(&mut data.view()?, false, |p| (p + 1) as u8)?;
        let db = bare_first_read(&data_file)?;
        if keep {
            plain.push(p);
            advised.push(a);
            bare.push(b);
            data_plain.push(dp);
            data_bare.push(db);
        }
        Ok(())
    };
    // Not kept: the process's first views make their memory (the pool is
    // empty), a cost per process, not per view.
    round(false)?;
    for rep in 1..=ctx.reps {
        ctx.progress(format!("shared: first read in a fresh view, run {rep}"));
        for _ in 0..ROUNDS_PER_RUN {
            round(true)?;
        }
    }
    drop((region, data));
    let (p, a, b) = (
        Summary::of(&plain),
        Summary::of(&advised),
        Summary::of(&bare),
    );
    let (dp, db) = (Summary::of(&data_plain), Summary::of(&data_bare));
    let _ = writeln!(
        r.md,
        "## Shared pages (issue 20, txmap only)\n\n### First read of a current page in a fresh view\n\n\
         {TOUCH_PAGES} pages read once each by plain loads in a read-only transaction, µs per page from before \
         its `begin_read` to the last load ({ROUNDS_PER_RUN} rounds per run after one not kept, each txmap read in a fresh view), beside \
         the bare kernel fault: plain loads of a fresh `MAP_PRIVATE` `PROT_READ` mapping of the same region file \
         (page cache hot), from before its `mmap` to the last load, measured in the same runs. Pages never written (holes in the file), and pages \
         holding data (each written and checkpointed; the page cache holds them in large folios, which a \
         fault maps many at a time).\n"
    );
    let mut t = crate::report::Table::new(&["first read", "µs per page", "× bare fault"]);
    for (what, s) in [
        ("txmap view, plain load after begin_read", &p),
        ("txmap view, advisory call (set_page_access) then loads", &a),
        ("bare fault on the region file", &b),
    ] {
        t.row(vec![
            what.into(),
            s.cell(),
            num(s.median / b.median.max(1e-9)),
        ]);
    }
    for (what, s) in [
        (
            "pages with data: txmap view, plain load after begin_read",
            &dp,
        ),
        ("pages with data: bare fault on the region file", &db),
    ] {
        t.row(vec![
            what.into(),
            s.cell(),
            num(s.median / db.median.max(1e-9)),
        ]);
    }
    r.md.push_str(&t.render());
    r.target(
        "first read of a current page in a fresh view ≤ 1.2× the bare fault (issue 20)",
        Some(1.2 * b.median / p.median.max(1e-9)),
        1.0,
        format!(
            "1.2 × fault ÷ view: the view {} µs, the fault {} µs, so {}× the fault",
            num(p.median),
            num(b.median),
            num(p.median / b.median.max(1e-9))
        ),
    );
    r.target(
        "first read of a current page holding data in a fresh view ≤ 1.2× the bare fault (issue 20)",
        Some(1.2 * db.median / dp.median.max(1e-9)),
        1.0,
        format!(
            "1.2 × fault ÷ view: the view {} µs, the fault {} µs, so {}× the fault",
            num(dp.median),
            num(db.median),
            num(dp.median / db.median.max(1e-9))
        ),
    );
    r.target(
        "first read with the advisory call ≤ 0.5 µs (issue 20)",
        Some(0.5 / a.median.max(1e-9)),
        1.0,
        format!("0.5 µs ÷ the view's {} µs", num(a.median)),
    );
    memory(ctx, r, &dir)?;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

/// µs per page of a fresh view's first read of `TOUCH_PAGES` pages by
/// plain loads, from before its `begin_read` (and the advisory call if
/// `advisory`) to the last load: what the view's transaction adds to the
/// kernel's faults, wherever it does it. Each page's first byte must be
/// `expect(page)`.
fn view_first_read(v: &mut txmap::View, advisory: bool, expect: impl Fn(usize) -> u8) -> Res<f64> {
    let mut got = vec![0u8; TOUCH_PAGES];
    let t = Instant::now();
    v.begin_read()?;
    if advisory {
        v.set_page_access(0, TOUCH_PAGES * PAGE, txmap::PageAccess::Read)?;
    }
    let base = v.base();
    for (p, g) in got.iter_mut().enumerate() {
        // SAFETY: inside a transaction, within the region's pages.
        *g = unsafe { base.add(p * PAGE).read_volatile() };
    }
    let us = t.elapsed().as_secs_f64() * 1e6 / TOUCH_PAGES as f64;
    v.commit()?;
    match got.iter().enumerate().find(|&(p, &g)| g != expect(p)) {
        Some((p, g)) => Err(format!(
            "first read in a fresh view: page {p} read {g}, expected {}",
            expect(p)
        )
        .into()),
        None => Ok(us),
    }
}

/// µs per page of the bare kernel fault's first read of `TOUCH_PAGES`
/// pages of `file`, from before a fresh `MAP_PRIVATE` `PROT_READ` mapping's
/// `mmap` to the last load.
fn bare_first_read(file: &std::fs::File) -> Res<f64> {
    let t = Instant::now();
    let m = Mapping::file(file.as_fd(), TOUCH_PAGES * PAGE, Prot::Read, true)?;
    black_box(crate::vm::read_all(&m));
    Ok(t.elapsed().as_secs_f64() * 1e6 / TOUCH_PAGES as f64)
}

/// Makes a region of `mib` MiB with every page written once (none reads
/// as a hole), checkpointed.
fn filled(path: &Path, mib: usize, opts: Options) -> Res<Region> {
    let pages = (mib << 20) / PAGE;
    let region = Region::create(path, (mib << 20) as u64, opts)?;
    {
        let mut v = region.view()?;
        for chunk in (0..pages).collect::<Vec<_>>().chunks(4096) {
            v.run(|v| {
                for &p in chunk {
                    v.write((p * PAGE) as u64, &(p as u64 + 1))?;
                }
                Ok(())
            })?;
        }
    }
    region.checkpoint()?;
    Ok(region)
}

/// The change of this process's memory while `THREADS` readers hold a
/// view each after reading every page of `region` with `read`.
fn threads_memory(
    region: &Region,
    pages: usize,
    read: fn(&mut txmap::View, usize) -> txmap::Result<()>,
) -> Res<Mem> {
    let before = mem()?;
    let ready = Arc::new(Barrier::new(THREADS + 1));
    let done = Arc::new(Barrier::new(THREADS + 1));
    let threads: Vec<_> = (0..THREADS)
        .map(|_| {
            let (region, ready, done) = (region.clone(), ready.clone(), done.clone());
            std::thread::spawn(move || -> txmap::Result<()> {
                let r = (|| {
                    let mut v = region.view()?;
                    read(&mut v, pages)?;
                    Ok(v)
                })();
                ready.wait();
                done.wait();
                r.map(drop)
            })
        })
        .collect();
    ready.wait();
    let m = mem()?.plus(before, -1);
    done.wait();
    for t in threads {
        t.join().map_err(|_| "a reader thread panicked")??;
    }
    Ok(m)
}

/// Resident memory of readers that each read every page of one region.
fn memory(ctx: &mut Ctx, r: &mut Report, dir: &Path) -> Res<()> {
    let mib: usize = if ctx.quick { 64 } else { 1024 };
    let pages = (mib << 20) / PAGE;
    let path = dir.join("memory.txm");
    let region = filled(&path, mib, opts())?;

    ctx.progress(format!("shared: memory of {THREADS} reader threads"));
    let threads_mem = threads_memory(&region, pages, read_all)?;
    ctx.progress(format!(
        "shared: memory of {THREADS} plain-load reader threads"
    ));
    let plain_mem = threads_memory(&region, pages, load_all)?;
    ctx.progress(format!(
        "shared: memory of {THREADS} read-write reader threads"
    ));
    let rw_mem = threads_memory(&region, pages, rw_read_all)?;
    ctx.progress(format!(
        "shared: memory of {THREADS} plain-load read-write reader threads"
    ));
    let rw_plain_mem = threads_memory(&region, pages, rw_load_all)?;
    // The same without a bound on private pages, as views were before it
    // (quick mode only: at 1 GiB that is 8 GiB of private copies).
    let unbounded_mem = if ctx.quick {
        let unbounded = Options {
            view_private_pages: usize::MAX,
            ..opts()
        };
        let other = filled(&dir.join("unbounded.txm"), mib, unbounded)?;
        Some(threads_memory(&other, pages, load_all)?)
    } else {
        None
    };

    ctx.progress(format!("shared: memory of {PROCESSES} reader processes"));
    let exe = std::env::current_exe()?;
    let spec = format!("memread|{}|{pages}", path.display());
    let mut workers = Vec::new();
    let procs_mem = (|| -> Res<Mem> {
        for _ in 0..PROCESSES {
            workers.push(Worker::spawn(&exe, "--peer-worker", &spec)?);
        }
        let mut sum = Mem::default();
        for w in &mut workers {
            let line = w.line()?;
            if line != "ready" {
                return Err(format!("reader process said {line:?}").into());
            }
        }
        for w in &workers {
            sum = sum.plus(mem_of(&w.pid().to_string())?, 1);
        }
        Ok(sum)
    })();
    let procs_mem = reap(workers, procs_mem)?;
    drop(region);

    let cache = Options::default().view_private_pages;
    let _ = writeln!(
        r.md,
        "### Memory of readers over a {mib} MiB region\n\n\
         Each reader opens a view, reads every page once (`View::read` in one read-only transaction; \
         plain loads: a load through `View::base()` of every page, in read-only transactions of \
         {LOAD_CHUNK} pages, with the default `view_private_pages` ({cache}) or none; read-write: \
         `View::read` of every page and a store into one in a serializable read-write transaction, \
         still open while the memory is sampled; plain loads, read-write: the same by plain loads \
         and a plain store) and keeps the \
         view open while the memory is sampled. Threads: the change of this process's \
         `/proc/self/smaps_rollup` Pss and `VmPTE` across the readers; processes: the sum of the \
         {PROCESSES} reader processes' whole counts (their program and libraries included). MiB.\n"
    );
    let mut t = crate::report::Table::new(&[
        "readers",
        "Pss anon",
        "Pss file",
        "Pss shmem",
        "page tables",
        "total",
        "× region size",
    ]);
    let m = |kib: i64| num(kib as f64 / 1024.0);
    let mut rows = vec![
        (format!("{THREADS} threads, a view each"), threads_mem),
        (format!("{PROCESSES} processes, a view each"), procs_mem),
        (format!("{THREADS} threads, plain loads"), plain_mem),
        (
            format!("{THREADS} threads, read-write transactions, open"),
            rw_mem,
        ),
        (
            format!("{THREADS} threads, plain loads, read-write, open"),
            rw_plain_mem,
        ),
    ];
    if let Some(m) = unbounded_mem {
        rows.push((format!("{THREADS} threads, plain loads, no bound"), m));
    }
    for (what, d) in rows {
        t.row(vec![
            what,
            m(d.pss_anon),
            m(d.pss_file),
            m(d.pss_shmem),
            m(d.pte),
            m(d.total()),
            num(d.total() as f64 / (mib as f64 * 1024.0)),
        ]);
    }
    r.md.push_str(&t.render());
    for (what, d) in [
        ("threads", threads_mem),
        ("processes", procs_mem),
        ("threads in read-write transactions", rw_mem),
        (
            "threads in read-write transactions by plain loads",
            rw_plain_mem,
        ),
    ] {
        let n = if what == "processes" {
            PROCESSES
        } else {
            THREADS
        };
        r.target(
            &format!(
                "memory of {n} reader {what} that each read all of a region ≤ 1.25× its size (issue 20)"
            ),
            Some(1.25 * (mib as f64 * 1024.0) / d.total().max(1) as f64),
            1.0,
            format!(
                "1.25 × size ÷ memory: {} MiB for {mib} MiB, so {}× its size",
                m(d.total()),
                num(d.total() as f64 / (mib as f64 * 1024.0))
            ),
        );
    }
    Ok(())
}

/// Reads one byte of every page in one read-only transaction.
fn read_all(v: &mut txmap::View, pages: usize) -> txmap::Result<()> {
    v.begin_read()?;
    for p in 0..pages {
        black_box(v.read::<u8>((p * PAGE) as u64)?);
    }
    v.commit()
}

/// Reads one byte of every page and stores one in a serializable
/// read-write transaction, and leaves it open (the view's drop rolls it
/// back): its private memory is the page it wrote.
fn rw_read_all(v: &mut txmap::View, pages: usize) -> txmap::Result<()> {
    v.begin()?;
    for p in 0..pages {
        black_box(v.read::<u8>((p * PAGE) as u64)?);
    }
    let b: u8 = v.read(0)?;
    v.write(0, &b)
}

/// Loads one byte of every page through the view's own address and
/// stores one by a plain store, in one serializable read-write
/// transaction left open, as `rw_read_all`.
fn rw_load_all(v: &mut txmap::View, pages: usize) -> txmap::Result<()> {
    v.begin()?;
    assert!(pages * PAGE <= v.len());
    for p in 0..pages {
        // SAFETY: inside the view's mapping (checked); the first load of
        // each page faults into txmap's handler.
        black_box(unsafe { std::ptr::read_volatile(v.base().add(p * PAGE)) });
    }
    // SAFETY: as above; the store faults and installs the page.
    unsafe {
        let b = std::ptr::read_volatile(v.base());
        std::ptr::write_volatile(v.base(), b);
    }
    Ok(())
}

/// Pages per read-only transaction in `load_all`.
const LOAD_CHUNK: usize = 4096;

/// Loads one byte of every page through the view's own address, in
/// read-only transactions of `LOAD_CHUNK` pages.
fn load_all(v: &mut txmap::View, pages: usize) -> txmap::Result<()> {
    for start in (0..pages).step_by(LOAD_CHUNK) {
        v.begin_read()?;
        for p in start..(start + LOAD_CHUNK).min(pages) {
            assert!((p + 1) * PAGE <= v.len());
            // SAFETY: inside the view's mapping (checked); the first load of
            // each page faults into txmap's handler.
            black_box(unsafe { std::ptr::read_volatile(v.base().add(p * PAGE)) });
        }
        v.commit()?;
    }
    Ok(())
}

/// `--peer-worker memread|PATH|PAGES`: opens the region, reads every page
/// through a view, says `ready`, and keeps the view until stdin closes.
pub fn reader_worker(f: &[&str]) -> Res<()> {
    let [_, path, pages] = f[..] else {
        return Err("bad memread spec".into());
    };
    let pages: usize = pages.parse().map_err(|_| "bad page count")?;
    let region = Region::open(Path::new(path), opts())?;
    let mut v = region.view()?;
    read_all(&mut v, pages)?;
    let mut out = std::io::stdout();
    writeln!(out, "ready")?;
    out.flush()?;
    let mut line = String::new();
    let _ = std::io::stdin().lock().read_line(&mut line);
    drop(v);
    Ok(())
}
