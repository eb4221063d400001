//! Issue 20's measurements for docs/design/shared-pages.md: what a view
//! costs when committed pages are shared instead of copied, for three
//! designs, beside today's fault + copy path:
//! (a) the region file mapped `MAP_PRIVATE` as the view's base (reads map
//!     the page cache; writes and older versions become private copies);
//! (b) a shared memory image (memfd / `/dev/shm`) mapped `MAP_SHARED`, with
//!     private pages mapped over it (`MAP_FIXED`);
//! (c) userfaultfd minor faults on that shared memory (SIGBUS +
//!     `UFFDIO_CONTINUE`).
//! Raw mappings only (`sys.rs`); today's path is measured through txmap.

use std::fs::File;
use std::hint::black_box;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::FileExt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use txmap::{Durability, Options, Region};

use crate::report::{Ctx, Res, Summary, Table, num};
use crate::sys::{
    FloorHandler, Mapping, MinorHandler, PAGE, Prot, ReaderProcess, UFFD_FEATURE_MINOR_SHMEM,
    UFFD_FEATURE_SIGBUS, Uffd,
};
use crate::touch::{CELLS, touch_once};
use crate::vm::{per_page, read_all, scratch_file, write_all};

/// Pages per repetition of the per-page measurements.
const N: usize = 1024;
/// Islands (every other page different) for the VMA counts.
const ISLANDS: usize = 4096;
/// Reader threads' views, and reader processes, in the memory measurement.
const READERS: usize = 8;
const PROCESSES: usize = 4;
const MADV_POPULATE_READ: libc::c_int = 22;
const MADV_POPULATE_WRITE: libc::c_int = 23;

pub fn steps(reps: usize) -> usize {
    2 * reps + 4
}

/// A file of `pages` pages on `--dir`, unlinked, read once so that its
/// pages are in the page cache (a hot region, as LMDB's readers see it).
fn region_file(ctx: &Ctx, pages: usize, tag: &str) -> Res<OwnedFd> {
    let path = ctx.dir.join(format!("shared-{tag}.dat"));
    let f = scratch_file(&path)?;
    fill(&f, pages)?;
    f.sync_all()?;
    let _ = std::fs::remove_file(&path);
    let mut buf = vec![0u8; 1 << 20];
    let mut off = 0;
    while off < (pages * PAGE) as u64 {
        off += f.read_at(&mut buf, off)?.max(1) as u64;
    }
    Ok(f.into())
}

/// A memfd of `pages` pages, all allocated (in its page cache).
fn shm_image(pages: usize) -> Res<OwnedFd> {
    let fd = rustix::fs::memfd_create("txmap-bench-image", rustix::fs::MemfdFlags::CLOEXEC)?;
    let f = File::from(fd);
    fill(&f, pages)?;
    Ok(f.into())
}

/// Writes `pages` pages whose first byte is the page number (mod 251, + 1).
fn fill(f: &File, pages: usize) -> Res<()> {
    let mut chunk = vec![0u8; 256 * PAGE];
    for start in (0..pages).step_by(256) {
        let k = (pages - start).min(256);
        for p in 0..k {
            chunk[p * PAGE] = ((start + p) % 251 + 1) as u8;
        }
        f.write_all_at(&chunk[..k * PAGE], (start * PAGE) as u64)?;
    }
    Ok(())
}

/// A thread of this process that keeps running on the other CPU (so that
/// changes to the page tables need a TLB shootdown) until dropped.
struct Spinner {
    stop: Arc<AtomicBool>,
    h: Option<std::thread::JoinHandle<()>>,
}

impl Spinner {
    fn start() -> Spinner {
        let stop = Arc::new(AtomicBool::new(false));
        let started = Arc::new(AtomicBool::new(false));
        let (s, st) = (Arc::clone(&stop), Arc::clone(&started));
        let h = std::thread::spawn(move || {
            st.store(true, Ordering::Release);
            let mut x = 0u64;
            while !s.load(Ordering::Relaxed) {
                x = black_box(x.wrapping_add(1));
            }
        });
        while !started.load(Ordering::Acquire) {
            std::thread::yield_now();
        }
        Spinner { stop, h: Some(h) }
    }
}

impl Drop for Spinner {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.h.take() {
            let _ = h.join();
        }
    }
}

/// TLB shootdown interrupts received so far, all CPUs (/proc/interrupts).
fn tlb_shootdowns() -> u64 {
    std::fs::read_to_string("/proc/interrupts")
        .ok()
        .and_then(|s| {
            let l = s.lines().find(|l| l.trim_start().starts_with("TLB:"))?;
            Some(
                l.split_whitespace()
                    .skip(1)
                    .map_while(|w| w.parse::<u64>().ok())
                    .sum(),
            )
        })
        .unwrap_or(0)
}

/// Lines of /proc/self/maps (VMAs) that overlap `m`.
fn vmas(m: &Mapping) -> Res<usize> {
    let (lo, hi) = (m.addr(), m.addr() + m.len());
    let maps = std::fs::read_to_string("/proc/self/maps")?;
    Ok(maps
        .lines()
        .filter_map(|l| l.split_once(' ')?.0.split_once('-'))
        .filter_map(|(a, b)| {
            Some((
                usize::from_str_radix(a, 16).ok()?,
                usize::from_str_radix(b, 16).ok()?,
            ))
        })
        .filter(|&(a, b)| a < hi && b > lo)
        .count())
}

/// Fields of /proc/self/smaps_rollup and /proc/self/status, in KiB.
#[derive(Clone, Copy, Default)]
pub struct Mem {
    pub pss_anon: i64,
    pub pss_file: i64,
    pub pss_shmem: i64,
    pub pte: i64,
}

impl Mem {
    /// Every kind together, KiB (each physical page once, by Pss).
    pub fn total(&self) -> i64 {
        self.pss_anon + self.pss_file + self.pss_shmem + self.pte
    }

    /// Field by field, `self + k * o`.
    pub fn plus(self, o: Mem, k: i64) -> Mem {
        Mem {
            pss_anon: self.pss_anon + k * o.pss_anon,
            pss_file: self.pss_file + k * o.pss_file,
            pss_shmem: self.pss_shmem + k * o.pss_shmem,
            pte: self.pte + k * o.pte,
        }
    }
}

pub fn mem() -> Res<Mem> {
    mem_of("self")
}

/// [`mem`] of process `pid` ("self" for this one).
pub fn mem_of(pid: &str) -> Res<Mem> {
    let field = |text: &str, name: &str| -> i64 {
        text.lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l[name.len()..].split_whitespace().next()?.parse().ok())
            .unwrap_or(0)
    };
    let roll = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup"))?;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    Ok(Mem {
        pss_anon: field(&roll, "Pss_Anon:"),
        pss_file: field(&roll, "Pss_File:"),
        pss_shmem: field(&roll, "Pss_Shmem:"),
        pte: field(&status, "VmPTE:"),
    })
}

fn mib(kib: i64) -> String {
    num(kib as f64 / 1024.0)
}

/// Per-page samples of one row, with its label.
struct Row {
    label: &'static str,
    v: Vec<f64>,
    err: Option<String>,
}

impl Row {
    fn new(label: &'static str) -> Row {
        Row {
            label,
            v: Vec::new(),
            err: None,
        }
    }

    /// Records one repetition's result (µs per page) or its error.
    fn take(&mut self, r: Res<f64>) {
        match r {
            Ok(x) => self.v.push(x),
            Err(e) => self.err = Some(format!("not measured: {e}")),
        }
    }

    fn cell(&self) -> String {
        match (&self.err, self.v.is_empty()) {
            (Some(e), _) => e.clone(),
            (None, true) => "not measured".into(),
            (None, false) => Summary::of(&self.v).cell(),
        }
    }

    fn median(&self) -> Option<f64> {
        (self.err.is_none() && !self.v.is_empty()).then(|| Summary::of(&self.v).median)
    }
}

/// First loads of the n pages of `m`, timed per page.
pub fn timed_reads(m: &Mapping) -> f64 {
    let t = Instant::now();
    black_box(read_all(m));
    per_page(t, m.len() / PAGE)
}

/// Loads of one page per 64 KiB of `m` (the kernel maps up to 16 cached
/// pages around a file fault, `fault_around_bytes`), timed per load.
fn sparse_reads(m: &Mapping) -> f64 {
    let t = Instant::now();
    let mut sum = 0u64;
    for p in (0..m.len() / PAGE).step_by(16) {
        sum += u64::from(m.read_byte(p * PAGE));
    }
    black_box(sum);
    per_page(t, m.len() / PAGE / 16)
}

fn timed_writes(m: &Mapping) -> f64 {
    let t = Instant::now();
    write_all(m, 0x5a);
    per_page(t, m.len() / PAGE)
}

pub fn run(ctx: &mut Ctx) -> Res<()> {
    println!("## Shared pages (issue 20): first touch, invalidation, VMAs, memory per view\n");
    let file = region_file(ctx, N, "touch")?;
    let image = shm_image(N)?;
    let len = N * PAGE;

    // Today's path, through txmap: a new view per repetition on one region
    // handle (it takes over a closed view's memory, so no page is valid).
    let path = ctx.dir.join("shared-touch.txm");
    let opts = Options {
        max_size: 8 << 20,
        durability: Durability::Async,
        ..Options::default()
    };
    let region = Region::create(&path, (N * PAGE) as u64, opts)?;

    let mut rows = [
        Row::new(
            "today: txmap view, plain load after begin_read (SIGSEGV + mprotect + 4 KiB copy)",
        ),
        Row::new("today: txmap view, `View::read` accessor (4 KiB copy, no fault)"),
        Row::new("today: txmap view, plain store after begin (SIGSEGV + mprotect + 4 KiB copy)"),
        Row::new("floor: SIGSEGV + mprotect(R), anonymous page already populated"),
        Row::new(
            "bare fault: plain load, fresh MAP_PRIVATE PROT_READ mapping of the region file (page cache hot) = (a) untracked read",
        ),
        Row::new("(a) advisory: MADV_POPULATE_READ of the range, then loads"),
        Row::new("(a) tracked read: PROT_NONE file mapping, SIGSEGV + mprotect(R) + minor fault"),
        Row::new(
            "(a) first write: PROT_NONE file mapping, SIGSEGV + mprotect(RW) + copy-on-write fault",
        ),
        Row::new(
            "(a) private older version: mprotect(RW) + copy-on-write + memcpy 4 KiB + mprotect(R)",
        ),
        Row::new(
            "(a) private older version: pwrite to /proc/self/mem (copy-on-write through PROT_READ, no mprotect)",
        ),
        Row::new(
            "(b) plain load, fresh MAP_SHARED PROT_READ mapping of the memfd image (untracked read)",
        ),
        Row::new("(b) private page: MAP_FIXED anonymous page over the image page + memcpy 4 KiB"),
        Row::new("(c) uffd minor fault on the memfd image: SIGBUS + UFFDIO_CONTINUE (first load)"),
        Row::new(
            "one load per 64 KiB (each a fault of its own, no fault-around), region file MAP_PRIVATE: (a) untracked random read",
        ),
        Row::new("one load per 64 KiB, memfd image MAP_SHARED: (b) untracked random read"),
        Row::new(
            "(a) accessor-style first write: mprotect(RW) of the page, store (copy-on-write fault)",
        ),
        Row::new(
            "(a) accessor-style first writes of a run: one mprotect(RW) + MADV_POPULATE_WRITE for 1024 pages, stores",
        ),
    ];
    let uffd_features = UFFD_FEATURE_SIGBUS | UFFD_FEATURE_MINOR_SHMEM;
    let src = vec![0x33u8; PAGE];
    for rep in 1..=ctx.reps {
        ctx.progress(format!("shared pages: first touch, rep {rep}/{}", ctx.reps));
        for (i, c) in [0, 2, 6].into_iter().enumerate() {
            let mut v = region.view()?;
            let s = touch_once(&mut v, &CELLS[c], N, 0)?;
            rows[i].v.push(s.us_per_page);
        }
        let anon = Mapping::anon(len, Prot::ReadWrite)?;
        write_all(&anon, 1);
        anon.protect(0, len, Prot::None)?;
        {
            let _h = FloorHandler::install(&anon)?;
            rows[3].v.push(timed_reads(&anon));
        }
        rows[4].take(
            Mapping::file(file.as_fd(), len, Prot::Read, true)
                .map(|m| timed_reads(&m))
                .map_err(Into::into),
        );
        rows[5].take((|| {
            let m = Mapping::file(file.as_fd(), len, Prot::Read, true)?;
            let t = Instant::now();
            m.advise(0, len, MADV_POPULATE_READ)?;
            black_box(read_all(&m));
            Ok(per_page(t, N))
        })());
        for (row, write) in [(6, false), (7, true)] {
            rows[row].take((|| {
                let m = Mapping::file(file.as_fd(), len, Prot::None, true)?;
                let _h = FloorHandler::install(&m)?;
                Ok(if write {
                    timed_writes(&m)
                } else {
                    timed_reads(&m)
                })
            })());
        }
        rows[8].take((|| {
            let m = Mapping::file(file.as_fd(), len, Prot::None, true)?;
            let t = Instant::now();
            for p in 0..N {
                m.protect(p * PAGE, PAGE, Prot::ReadWrite)?;
                m.copy_in(p * PAGE, &src);
                m.protect(p * PAGE, PAGE, Prot::Read)?;
            }
            Ok(per_page(t, N))
        })());
        rows[9].take((|| {
            let m = Mapping::file(file.as_fd(), len, Prot::Read, true)?;
            let mem = File::options()
                .read(true)
                .write(true)
                .open("/proc/self/mem")?;
            let t = Instant::now();
            for p in 0..N {
                m.poke(&mem, p * PAGE, &src)?;
            }
            Ok(per_page(t, N))
        })());
        rows[15].take((|| {
            let m = Mapping::file(file.as_fd(), len, Prot::Read, true)?;
            let t = Instant::now();
            for p in 0..N {
                m.protect(p * PAGE, PAGE, Prot::ReadWrite)?;
                m.write_byte(p * PAGE, 0x5a);
            }
            Ok(per_page(t, N))
        })());
        rows[16].take((|| {
            let m = Mapping::file(file.as_fd(), len, Prot::Read, true)?;
            let t = Instant::now();
            m.protect(0, len, Prot::ReadWrite)?;
            m.advise(0, len, MADV_POPULATE_WRITE)?;
            write_all(&m, 0x5a);
            Ok(per_page(t, N))
        })());
        for (row, fd, private) in [(13, &file, true), (14, &image, false)] {
            rows[row].take(
                Mapping::file(fd.as_fd(), len, Prot::Read, private)
                    .map(|m| sparse_reads(&m))
                    .map_err(Into::into),
            );
        }
        rows[10].take(
            Mapping::file(image.as_fd(), len, Prot::Read, false)
                .map(|m| timed_reads(&m))
                .map_err(Into::into),
        );
        rows[11].take((|| {
            let m = Mapping::file(image.as_fd(), len, Prot::Read, false)?;
            black_box(read_all(&m));
            let t = Instant::now();
            for p in 0..N {
                m.overlay(p * PAGE, PAGE, None, Prot::ReadWrite, true)?;
                m.copy_in(p * PAGE, &src);
            }
            Ok(per_page(t, N))
        })());
        rows[12].take((|| {
            let m = Mapping::file(image.as_fd(), len, Prot::Read, false)?;
            let u = Uffd::new(uffd_features)?;
            if u.features & uffd_features != uffd_features {
                return Err(format!("features {:#x} not offered", uffd_features).into());
            }
            u.register_minor(&m)?;
            let _h = MinorHandler::install(&u, &m)?;
            Ok(timed_reads(&m))
        })());
    }
    let mut t = Table::new(&["first touch of a page", "µs per page, median (min–max)"]);
    for r in &rows {
        t.row(vec![r.label.into(), r.cell()]);
    }
    t.print();
    println!(
        "{N} pages per repetition, {} repetitions; each raw row maps afresh, so every page's first \
         touch takes the fault it names. One byte read or written per page. The txmap rows are \
         `touch`'s cells \"read, begin_read\", \"read, begin_read, accessor\" and \"write, begin\" \
         (reopened view, n={N}).\n",
        ctx.reps
    );
    if let (Some(bare), Some(adv), Some(today)) =
        (rows[4].median(), rows[5].median(), rows[0].median())
    {
        ctx.target(
            "first read of a current page ≤ 1.2× the bare fault (issue 20; design (a) untracked)",
            format!(
                "(a) {} µs = the bare fault itself; today {} µs ({}× the bare fault)",
                num(bare),
                num(today),
                num(today / bare)
            ),
            None,
        );
        ctx.target(
            "with the advisory call ≤ 0.5 µs (issue 20; design (a))",
            format!("{} µs", num(adv)),
            Some(adv <= 0.5),
        );
    }

    fence(ctx)?;
    invalidation(ctx, &file, &image)?;
    vma_counts(ctx, &image)?;
    memory(ctx)?;
    drop(region);
    let _ = std::fs::remove_file(&path);
    let _ = std::fs::remove_file(txmap::log_path(&path));
    Ok(())
}

/// Checks the two kernel behaviours design (a)'s checkpoint fence rests on,
/// and times the fence's step: (1) a checkpoint's `pwrite` to the region
/// file shows through a page a `MAP_PRIVATE` view maps shared (the hazard);
/// (2) after the page is made private with its own content (written to
/// itself through `/proc/self/mem`), the `pwrite` no longer shows, and a
/// thread reading the page meanwhile never sees another or a torn page.
fn fence(ctx: &mut Ctx) -> Res<()> {
    ctx.progress("shared pages: fence mechanism");
    const PAGES: usize = 256;
    let path = ctx.dir.join("shared-fence.dat");
    let f = scratch_file(&path)?;
    let _ = std::fs::remove_file(&path);
    // Page p holds the byte p + 1 throughout, the "checkpoint" writes 0xEE.
    for p in 0..PAGES {
        f.write_all_at(&[(p + 1) as u8; PAGE], (p * PAGE) as u64)?;
    }
    let m = Arc::new(Mapping::file(f.as_fd(), PAGES * PAGE, Prot::Read, true)?);
    black_box(read_all(&m));
    let mem = File::options()
        .read(true)
        .write(true)
        .open("/proc/self/mem")?;
    // (1) The hazard, on page 0.
    f.write_all_at(&[0xEE; PAGE], 0)?;
    let leaked = m.read_byte(0) == 0xEE;
    // (2) The fence on pages 1.., with a reader checking every page whole.
    let stop = Arc::new(AtomicBool::new(false));
    let reader = {
        let (m, stop) = (Arc::clone(&m), Arc::clone(&stop));
        std::thread::spawn(move || {
            let mut page = vec![0u8; PAGE];
            let (mut checks, mut bad) = (0u64, 0u64);
            while !stop.load(Ordering::Relaxed) {
                for p in 1..PAGES {
                    m.copy_out(p * PAGE, &mut page);
                    let want = (p + 1) as u8;
                    bad += u64::from(page.iter().any(|&b| b != want));
                    checks += 1;
                }
            }
            (checks, bad)
        })
    };
    let mut own = vec![0u8; PAGE];
    let mut us = Vec::new();
    for p in 1..PAGES {
        let t = Instant::now();
        m.copy_out(p * PAGE, &mut own);
        m.poke(&mem, p * PAGE, &own)?;
        us.push(t.elapsed().as_secs_f64() * 1e6);
        f.write_all_at(&[0xEE; PAGE], (p * PAGE) as u64)?;
    }
    // Let the reader see every page after the overwrites too.
    std::thread::sleep(std::time::Duration::from_millis(20));
    stop.store(true, Ordering::Relaxed);
    let (checks, bad) = reader.join().map_err(|_| "fence reader panicked")?;
    let kept = (1..PAGES).all(|p| m.read_byte(p * PAGE) == (p + 1) as u8);
    println!(
        "### The fence of design (a), checked
"
    );
    let mut t = Table::new(&["check", "result"]);
    t.row(vec![
        "a file write shows through a shared page of a MAP_PRIVATE mapping (the hazard)".into(),
        if leaked { "yes, as expected" } else { "NO" }.into(),
    ]);
    t.row(vec![
        format!(
            "after privatizing ({} pages, one `/proc/self/mem` write of the page's own bytes each), file writes stay hidden",
            PAGES - 1
        ),
        if kept { "yes" } else { "NO" }.into(),
    ]);
    t.row(vec![
        "whole-page checks by a concurrent reader thread that saw another or a torn page".into(),
        format!("{bad} of {checks}"),
    ]);
    t.row(vec![
        "µs per page: read the page, write it to itself through /proc/self/mem".into(),
        Summary::of(&us).cell(),
    ]);
    t.print();
    if !leaked {
        ctx.anomaly("fence: a file write did not show through a shared MAP_PRIVATE page");
    }
    if !kept || bad > 0 {
        ctx.anomaly(format!(
            "fence: privatized pages changed (kept: {kept}, bad reader checks: {bad})"
        ));
    }
    Ok(())
}

/// Per-page cost of taking a page back from a view (alone, and with a
/// second thread of the process running: TLB shootdowns).
fn invalidation(ctx: &mut Ctx, file: &OwnedFd, image: &OwnedFd) -> Res<()> {
    let len = N * PAGE;
    type Op = fn(&OwnedFd, &OwnedFd) -> Res<f64>;
    let ops: [(&str, Op); 6] = [
        (
            "today / tracking: mprotect(NONE) of one populated page",
            |_, _| {
                let m = written(None)?;
                let t = Instant::now();
                for p in 0..N {
                    m.protect(p * PAGE, PAGE, Prot::None)?;
                }
                Ok(per_page(t, N))
            },
        ),
        (
            "mprotect(NONE) of all 1024 populated pages in one call (per page)",
            |_, _| {
                let m = written(None)?;
                let t = Instant::now();
                m.protect(0, N * PAGE, Prot::None)?;
                Ok(per_page(t, N))
            },
        ),
        (
            "(a) MADV_DONTNEED of one private (copied-on-write) page of the file mapping: memory given back, next load maps the shared page",
            |f, _| {
                let m = written(Some(f))?;
                let t = Instant::now();
                for p in 0..N {
                    m.advise(p * PAGE, PAGE, libc::MADV_DONTNEED)?;
                }
                Ok(per_page(t, N))
            },
        ),
        (
            "(a) the load after it: minor fault on the shared page",
            |f, _| {
                let m = written(Some(f))?;
                m.advise(0, N * PAGE, libc::MADV_DONTNEED)?;
                Ok(timed_reads(&m))
            },
        ),
        (
            "(b) MAP_FIXED the image page back over a private page (undo an overlay)",
            |_, img| {
                let m = Mapping::file(img.as_fd(), N * PAGE, Prot::Read, false)?;
                for p in 0..N {
                    m.overlay(p * PAGE, PAGE, None, Prot::ReadWrite, true)?;
                    m.write_byte(p * PAGE, 1);
                }
                let t = Instant::now();
                for p in 0..N {
                    m.overlay(
                        p * PAGE,
                        PAGE,
                        Some((img.as_fd(), (p * PAGE) as u64)),
                        Prot::Read,
                        false,
                    )?;
                }
                Ok(per_page(t, N))
            },
        ),
        (
            "(c) MADV_DONTNEED of one mapped page of the shared image (the page stays in the memfd)",
            |_, img| {
                let m = Mapping::file(img.as_fd(), N * PAGE, Prot::Read, false)?;
                black_box(read_all(&m));
                let t = Instant::now();
                for p in 0..N {
                    m.advise(p * PAGE, PAGE, libc::MADV_DONTNEED)?;
                }
                Ok(per_page(t, N))
            },
        ),
    ];
    let _ = len;
    let mut alone: Vec<Row> = ops.iter().map(|(l, _)| Row::new(l)).collect();
    let mut busy: Vec<Row> = ops.iter().map(|(l, _)| Row::new(l)).collect();
    let mut ipis = vec![[0u64; 2]; ops.len()];
    for rep in 1..=ctx.reps {
        ctx.progress(format!(
            "shared pages: invalidation, rep {rep}/{}",
            ctx.reps
        ));
        for (i, (_, op)) in ops.iter().enumerate() {
            let t0 = tlb_shootdowns();
            alone[i].take(op(file, image));
            let s = Spinner::start();
            let t1 = tlb_shootdowns();
            busy[i].take(op(file, image));
            let t2 = tlb_shootdowns();
            drop(s);
            ipis[i][0] += t1 - t0;
            ipis[i][1] += t2 - t1;
        }
    }
    println!("### Taking a page back (invalidation under an old snapshot, eviction)\n");
    let mut t = Table::new(&[
        "operation",
        "µs per page, alone",
        "µs per page, a 2nd thread running (TLB shootdown)",
        "TLB shootdown interrupts per page: alone / 2nd thread",
    ]);
    let per = (ctx.reps * N) as f64;
    for ((a, b), n) in alone.iter().zip(&busy).zip(&ipis) {
        let i = format!("{} / {}", num(n[0] as f64 / per), num(n[1] as f64 / per));
        t.row(vec![a.label.into(), a.cell(), b.cell(), i]);
    }
    t.print();
    println!(
        "{N} pages one call each (except where stated), median (min–max) of {} repetitions. \
         The second thread spins on the other CPU in the same address space, so each change \
         to the page tables must flush its TLB too. The interrupt counts are the machine's \
         (/proc/interrupts, all CPUs, so other work adds to them), per page of the repetitions.\n",
        ctx.reps
    );
    Ok(())
}

/// N pages, each written once: anonymous, or a private mapping of `file`
/// (so each page is a private copy).
fn written(file: Option<&OwnedFd>) -> Res<Mapping> {
    let m = match file {
        None => Mapping::anon(N * PAGE, Prot::ReadWrite)?,
        Some(f) => Mapping::file(f.as_fd(), N * PAGE, Prot::ReadWrite, true)?,
    };
    write_all(&m, 1);
    Ok(m)
}

/// VMAs that islands of pages cost, against vm.max_map_count.
fn vma_counts(ctx: &mut Ctx, image: &OwnedFd) -> Res<()> {
    ctx.progress("shared pages: VMA counts");
    let pages = 2 * ISLANDS;
    let len = pages * PAGE;
    let img = shm_image(pages)?;
    let _ = image;
    let max = std::fs::read_to_string("/proc/sys/vm/max_map_count")
        .ok()
        .and_then(|s| s.trim().parse::<usize>().ok())
        .unwrap_or(0);
    let mut t = Table::new(&[
        "every other page of 8,192 different",
        "VMAs",
        "µs per island to make",
        "islands per process before vm.max_map_count",
    ]);
    let row = |t: &mut Table, what: &str, m: &Mapping, us: f64| -> Res<()> {
        let n = vmas(m)?;
        let per = n as f64 / ISLANDS as f64;
        let fit = if per < 0.01 {
            "unbounded (no split)".to_string()
        } else {
            format!("{:.0}", max as f64 / per)
        };
        t.row(vec![what.into(), n.to_string(), num(us), fit]);
        Ok(())
    };
    // Today: protection islands on one memfd mapping.
    let m = Mapping::file(img.as_fd(), len, Prot::None, false)?;
    let s = Instant::now();
    for i in 0..ISLANDS {
        m.protect(2 * i * PAGE, PAGE, Prot::Read)?;
    }
    row(
        &mut t,
        "today / any design's tracking: PROT_READ islands in a PROT_NONE mapping (mprotect)",
        &m,
        per_page(s, ISLANDS),
    )?;
    drop(m);
    // (a): private copies inside one MAP_PRIVATE mapping do not split it.
    let f = shm_image(pages)?;
    let m = Mapping::file(f.as_fd(), len, Prot::ReadWrite, true)?;
    black_box(read_all(&m));
    let s = Instant::now();
    for i in 0..ISLANDS {
        m.write_byte(2 * i * PAGE, 9);
    }
    let us = per_page(s, ISLANDS);
    m.protect(0, len, Prot::Read)?;
    row(
        &mut t,
        "(a) private copy-on-write pages in one MAP_PRIVATE mapping (then all PROT_READ)",
        &m,
        us,
    )?;
    drop(m);
    // (b): private pages mapped over a shared image.
    let m = Mapping::file(img.as_fd(), len, Prot::Read, false)?;
    let s = Instant::now();
    for i in 0..ISLANDS {
        m.overlay(2 * i * PAGE, PAGE, None, Prot::Read, true)?;
    }
    row(
        &mut t,
        "(b) MAP_FIXED private pages over a MAP_SHARED image",
        &m,
        per_page(s, ISLANDS),
    )?;
    drop(m);
    println!("### VMAs for many islands (vm.max_map_count = {max})\n");
    t.print();
    println!(
        "Counted in /proc/self/maps over the mapping. Design (c) maps pages into one registered \
         VMA with UFFDIO_CONTINUE and splits nothing; its private pages split like (b)'s or \
         (a)'s, depending on how they are made.\n"
    );
    Ok(())
}

/// Memory of `READERS` views that have each read a whole region.
fn memory(ctx: &mut Ctx) -> Res<()> {
    let mb: usize = if ctx.quick { 64 } else { 256 };
    let pages = (mb << 20) / PAGE;
    let mut t = Table::new(&[
        "readers, each read every page once",
        "Pss anon MiB",
        "Pss file MiB",
        "Pss shmem MiB",
        "page tables MiB",
        "total MiB",
        "per reader MiB",
    ]);
    let mut put = |what: &str, a: Mem, b: Mem, readers: usize| {
        let d = b.plus(a, -1);
        let total = d.total();
        t.row(vec![
            what.into(),
            mib(d.pss_anon),
            mib(d.pss_file),
            mib(d.pss_shmem),
            mib(d.pte),
            mib(total),
            mib(total / readers as i64),
        ]);
    };

    ctx.progress(format!("shared pages: memory, today ({mb} MiB region)"));
    let path = ctx.dir.join("shared-mem.txm");
    let opts = Options {
        durability: Durability::Async,
        ..Options::default()
    };
    {
        let region = Region::create(&path, (mb << 20) as u64, opts)?;
        let before = mem()?;
        let mut views = Vec::new();
        for _ in 0..READERS {
            let mut v = region.view()?;
            v.begin_read()?;
            for p in 0..pages {
                black_box(v.read::<u8>((p * PAGE) as u64)?);
            }
            v.commit()?;
            views.push(v);
        }
        put(
            "today: txmap views (`View::read`: a private copy per view)",
            before,
            mem()?,
            READERS,
        );
    }
    let _ = std::fs::remove_file(&path);
    let _ = std::fs::remove_file(txmap::log_path(&path));

    ctx.progress(format!(
        "shared pages: memory, (a) and (b) ({mb} MiB region)"
    ));
    let file = region_file(ctx, pages, "mem")?;
    let before = mem()?;
    let maps: Vec<Mapping> = (0..READERS)
        .map(|_| Mapping::file(file.as_fd(), pages * PAGE, Prot::Read, true))
        .collect::<Result<_, _>>()?;
    for m in &maps {
        black_box(read_all(m));
    }
    put(
        "(a) MAP_PRIVATE mappings of the region file (page cache shared)",
        before,
        mem()?,
        READERS,
    );
    drop(maps);
    let procs: Vec<ReaderProcess> = (0..PROCESSES)
        .map(|_| ReaderProcess::spawn(file.as_fd(), pages * PAGE))
        .collect::<Result<_, _>>()?;
    let mut sum = Mem::default();
    for p in &procs {
        sum = sum.plus(mem_of(&p.pid().to_string())?, 1);
    }
    drop(procs);
    drop(file);
    let img = shm_image(pages)?;
    let before = mem()?;
    let maps: Vec<Mapping> = (0..READERS)
        .map(|_| Mapping::file(img.as_fd(), pages * PAGE, Prot::Read, false))
        .collect::<Result<_, _>>()?;
    for m in &maps {
        black_box(read_all(m));
    }
    put(
        "(b)/(c) MAP_SHARED mappings of one memfd image",
        before,
        mem()?,
        READERS,
    );
    drop(maps);
    put(
        "(a) 4 reader processes, each a MAP_PRIVATE mapping of the region file (sum of the processes' own counts)",
        Mem::default(),
        sum,
        PROCESSES,
    );
    println!(
        "### Memory of {READERS} reader views (and {PROCESSES} reader processes) over a {mb} MiB region\n"
    );
    t.print();
    println!(
        "Deltas of /proc/self/smaps_rollup (Pss: a page mapped k times counts 1/k to each \
         mapping) and VmPTE, before the readers and after all of them read every page, all in \
         this process; the processes row sums the 4 forked children's whole counts (with what \
         they share with this process since the fork). For (b)/(c) the memfd's own pages (allocated before the \"before\" \
         sample) are not in the delta until mapped; the totals count each physical page \
         once. Pages of the region file can be reclaimed under memory pressure; shared memory \
         (memfd, /dev/shm) only to swap.\n"
    );
    Ok(())
}
