//! txmap-bench: measures txmap's page tracking, transaction overhead and
//! commit throughput and prints Markdown tables (see docs/benchmarks.md).
//!
//! `cargo run --release -p txmap-bench [-- --dir DIR --quick --only NAME | NAME]`

mod aborts;
mod backup;
mod commit;
mod compare;
mod counter;
mod fairness;
mod gets;
mod longreader;
mod ordered;
mod procs;
mod regions;
mod report;
mod rounds;
mod sharedpages;
mod stamp;
mod sys;
mod touch;
mod txn;
mod vm;

use std::path::{Path, PathBuf};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use clap::{Parser, ValueEnum};

use report::{Ctx, Res, Table};

#[derive(Parser)]
#[command(
    name = "txmap-bench",
    about = "Benchmarks for txmap; prints Markdown tables to stdout, progress to stderr"
)]
struct Args {
    /// Directory for the benchmark's files (a fresh subdirectory is created in
    /// it and removed afterwards). Default: <workspace>/target/bench-tmp.
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Fewer repetitions and shorter loops.
    #[arg(long)]
    quick: bool,
    /// Run one part only (default: core, everything).
    #[arg(long, value_enum, default_value_t = Section::Core)]
    only: Section,
    /// The same as --only NAME (`txmap-bench procs`).
    #[arg(value_enum)]
    part: Option<Section>,
    /// Where `compare` writes its report (README.md and SVG plots).
    /// Default: <workspace>/target/bench-report.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Repetitions per measurement (default 7; 3 with --quick and for compare).
    #[arg(long)]
    reps: Option<usize>,
    /// `compare` only these workloads (comma-separated: inserts, hash, redb, abc, touch, shared, python).
    #[arg(long, value_delimiter = ',')]
    workloads: Vec<String>,
    /// `compare` only these stores (comma-separated ids, e.g. txmap-btree,lmdb).
    #[arg(long, value_delimiter = ',')]
    stores: Vec<String>,
    /// `compare`: stop one store's redb workload after this many seconds
    /// (default 300; 60 with --quick). The steps it finished are reported.
    #[arg(long, value_name = "SECS")]
    redb_deadline: Option<u64>,
    /// Internal: run as a worker process of the `procs` part.
    #[arg(long, hide = true)]
    worker: Option<String>,
    /// Internal: run as a worker process of the `stamp` part.
    #[arg(long, hide = true)]
    stamp_worker: Option<String>,
    /// Internal: run as a worker process of the `compare` part.
    #[arg(long, hide = true)]
    peer_worker: Option<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Section {
    /// Everything below.
    Core,
    /// SIGSEGV + mprotect round trip and memcpy.
    Floor,
    /// First read / first write per page, with and without the advisory call.
    Touch,
    /// begin+commit of read-only and one-page write transactions.
    Txn,
    /// Durable commits/s with 1–8 threads vs fdatasync.
    Commit,
    /// userfaultfd async write-protect probe and comparison.
    Uffd,
    /// Abort rates of 2 and 4 writer threads on the collections (not part of core).
    Aborts,
    /// Thesis concurrency tests A/B/C and durable commits/s with 1–8 processes.
    Procs,
    /// txmap against the peer databases (not part of core): writes a report and plots.
    Compare,
    /// Log size and version memory with a long-running reader (not part of core).
    Longreader,
    /// STAMP-style reservations and clustering, sequential vs transactional, 1 and 2 processes.
    Stamp,
    /// Page checksum cost, and online backup beside LMDB's and SQLite's (not part of core).
    Backup,
    /// 16 threads on one counter: commutative add vs read-modify-write (not part of core).
    Counter,
    /// Issue 20's designs for shared pages: first touch, invalidation, VMAs, memory per view (not part of core).
    SharedPages,
    /// Ordered commits: a parallel loop of dependent iterations, 1 and 4 workers (not part of core).
    Ordered,
    /// Fairness: attempts of a long transaction among short committers, per priority policy (not part of core).
    Fairness,
    /// Rounds: one 256 MiB round made durable, beside dd (not part of core).
    Rounds,
    /// Several regions in one transaction: durable transfers in one region, two named regions of one environment and two region files (not part of core).
    Regions,
    /// One random read, txmap's B+-tree beside LMDB: held and fresh views (not part of core).
    Gets,
}

/// One part of the benchmark: how many progress steps it takes and what it
/// runs. `compare` is not one (it has its own arguments and report).
struct Part {
    section: Section,
    /// Run by `core` (everything); the others only when named.
    in_core: bool,
    steps: fn(reps: usize) -> usize,
    run: fn(&mut Ctx) -> Res<()>,
}

/// Every part, in the order they run: the one table of the sections.
const PARTS: [Part; 17] = [
    Part {
        section: Section::Floor,
        in_core: true,
        steps: |_| vm::FLOOR_STEPS,
        run: vm::run_floor,
    },
    Part {
        section: Section::Touch,
        in_core: true,
        steps: touch::steps,
        run: touch::run,
    },
    Part {
        section: Section::Txn,
        in_core: true,
        steps: |_| txn::STEPS,
        run: txn::run,
    },
    Part {
        section: Section::Commit,
        in_core: true,
        steps: commit::steps,
        run: commit::run,
    },
    Part {
        section: Section::Uffd,
        in_core: true,
        steps: |_| vm::UFFD_STEPS,
        run: vm::run_uffd,
    },
    Part {
        section: Section::Procs,
        in_core: true,
        steps: procs::steps,
        run: procs::run,
    },
    Part {
        section: Section::Stamp,
        in_core: true,
        steps: stamp::steps,
        run: stamp::run,
    },
    Part {
        section: Section::Aborts,
        in_core: false,
        steps: aborts::steps,
        run: aborts::run,
    },
    Part {
        section: Section::Longreader,
        in_core: false,
        steps: longreader::steps,
        run: longreader::run,
    },
    Part {
        section: Section::Backup,
        in_core: false,
        steps: backup::steps,
        run: backup::run,
    },
    Part {
        section: Section::Counter,
        in_core: false,
        steps: counter::steps,
        run: counter::run,
    },
    Part {
        section: Section::SharedPages,
        in_core: false,
        steps: sharedpages::steps,
        run: sharedpages::run,
    },
    Part {
        section: Section::Ordered,
        in_core: false,
        steps: ordered::steps,
        run: ordered::run,
    },
    Part {
        section: Section::Fairness,
        in_core: false,
        steps: fairness::steps,
        run: fairness::run,
    },
    Part {
        section: Section::Rounds,
        in_core: false,
        steps: rounds::steps,
        run: rounds::run,
    },
    Part {
        section: Section::Regions,
        in_core: false,
        steps: regions::steps,
        run: regions::run,
    },
    Part {
        section: Section::Gets,
        in_core: false,
        steps: gets::steps,
        run: gets::run,
    },
];

/// The parts `--only only` runs, in order (none for `compare`).
fn selected(only: Section) -> impl Iterator<Item = &'static Part> {
    PARTS.iter().filter(move |p| {
        if only == Section::Core {
            p.in_core
        } else {
            p.section == only
        }
    })
}

fn main() {
    let mut args = Args::parse();
    if let Some(spec) = &args.worker {
        std::process::exit(procs::worker(spec));
    }
    if let Some(spec) = &args.stamp_worker {
        std::process::exit(stamp::worker(spec));
    }
    if let Some(spec) = &args.peer_worker {
        std::process::exit(compare::worker(spec));
    }
    if let Some(part) = args.part {
        args.only = part;
    }
    let started = Instant::now();
    let base = args.dir.clone().unwrap_or_else(|| {
        PathBuf::from(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../target/bench-tmp"
        ))
    });
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let dir = base.join(format!("run-{now}-{}", std::process::id()));
    if let Err(e) = std::fs::create_dir_all(&dir) {
        eprintln!("txmap-bench: cannot create {}: {e}", dir.display());
        std::process::exit(2);
    }
    let dir = dir.canonicalize().unwrap_or(dir);
    let reps = args
        .reps
        .unwrap_or(if args.quick || args.only == Section::Compare {
            3
        } else {
            report::REPS
        })
        .max(1);
    let total = if args.only == Section::Compare {
        compare::steps(reps, args.quick, &args.stores, &args.workloads)
    } else {
        selected(args.only).map(|p| (p.steps)(reps)).sum()
    };
    let mut ctx = Ctx::new(dir.clone(), args.quick, reps, total);
    if args.only == Section::Compare {
        let out = args.out.clone().unwrap_or_else(|| {
            PathBuf::from(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../../target/bench-report"
            ))
        });
        let r = compare::run(
            &mut ctx,
            &out,
            &args.stores,
            &args.workloads,
            args.redb_deadline,
        );
        ctx.finish();
        let _ = std::fs::remove_dir_all(&dir);
        if let Err(e) = r {
            eprintln!("txmap-bench: compare stopped with an error: {e}");
            std::process::exit(1);
        }
        eprintln!("Total run time: {:.0} s.", started.elapsed().as_secs_f64());
        return;
    }

    header(&args, &dir, now, ctx.reps);
    let mut failed = false;
    for part in selected(args.only) {
        if let Err(e) = (part.run)(&mut ctx) {
            failed = true;
            let name = part.section;
            println!("\n**{name:?} stopped with an error: {e}**\n");
            ctx.anomaly(format!("{name:?} stopped with an error: {e}"));
        }
    }

    ctx.finish();
    if !ctx.targets.is_empty() {
        println!("## Against the targets\n");
        let mut t = Table::new(&["target (from the issue)", "measured (medians)", "verdict"]);
        for row in &ctx.targets {
            t.row(row.to_vec());
        }
        t.print();
    }
    println!("## Anomalies\n");
    if ctx.anomalies.is_empty() {
        println!("None: every fault count, read-back value and commit result was as expected.\n");
    } else {
        for a in &ctx.anomalies {
            println!("- {a}");
        }
        println!();
    }
    println!("Total run time: {:.0} s.", started.elapsed().as_secs_f64());
    let _ = std::fs::remove_dir_all(&dir);
    if failed {
        std::process::exit(1);
    }
}

fn header(args: &Args, dir: &Path, _now: u64, reps: usize) {
    println!("# txmap benchmarks\n");
    print!("{}", machine_table(dir));
    println!(
        "Repetitions: {reps} per measurement{}, part: {:?}.\n",
        if args.quick { " (--quick)" } else { "" },
        args.only
    );
}

/// The machine, file system and command, as a Markdown table.
pub fn machine_table(dir: &Path) -> String {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let mut t = Table::new(&["", ""]);
    t.row(vec!["kernel".into(), sys::uname()]);
    t.row(vec!["CPU".into(), cpu_model()]);
    let online = std::thread::available_parallelism().map_or(0, |n| n.get());
    t.row(vec![
        "cores".into(),
        format!("{online} available to this process"),
    ]);
    t.row(vec!["memory".into(), mem_total()]);
    t.row(vec!["--dir file system".into(), fs_description(dir)]);
    t.row(vec!["directory".into(), dir.display().to_string()]);
    t.row(vec!["date (UTC)".into(), utc(now)]);
    t.row(vec!["load average at start".into(), loadavg()]);
    // As a reader reruns it (`cargo run` builds the binary this ran as,
    // which the row names too: a copy elsewhere cannot be mistaken for it).
    let args: Vec<String> = std::env::args().skip(1).collect();
    let exe = std::env::current_exe().map_or_else(|_| "?".into(), |p| p.display().to_string());
    t.row(vec![
        "command".into(),
        format!(
            "`cargo run --release -p txmap-bench -- {}` (binary {exe})",
            args.join(" ")
        ),
    ]);
    t.render()
}

fn cpu_model() -> String {
    let info = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let field = |name: &str| {
        info.lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_once(':'))
            .map(|(_, v)| v.trim().to_string())
    };
    let model = field("model name").unwrap_or_else(|| "unknown".into());
    let procs = info.lines().filter(|l| l.starts_with("processor")).count();
    let mhz = field("cpu MHz").map_or(String::new(), |m| format!(", {m} MHz"));
    format!("{model} ({procs} logical processors{mhz})")
}

/// The 1/5/15-minute load averages (other work on the machine shows here).
fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

fn mem_total() -> String {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("MemTotal:"))
                .map(|l| l["MemTotal:".len()..].trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into())
}

/// statfs type of `dir`, plus the mount's source and options from mountinfo.
fn fs_description(dir: &Path) -> String {
    let ty = match rustix::fs::statfs(dir) {
        Ok(s) => {
            let magic = s.f_type as u64 & 0xffff_ffff;
            let name = match magic {
                0xEF53 => "ext4 (ext2/3/4 magic)",
                0x5846_5342 => "xfs",
                0x9123_683E => "btrfs",
                0x0102_1994 => "tmpfs",
                0x794C_7630 => "overlayfs",
                0x6969 => "nfs",
                0x2FC1_2FC1 => "zfs",
                0xF2F5_2010 => "f2fs",
                0x6573_5546 => "fuse",
                0x0102_1997 => "9p",
                _ => "unknown",
            };
            format!("{name}, statfs f_type {magic:#x}")
        }
        Err(e) => format!("statfs failed: {e}"),
    };
    match mount_of(dir) {
        Some(m) => format!("{ty}; mounted {m}"),
        None => ty,
    }
}

fn mount_of(dir: &Path) -> Option<String> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let dir = dir.to_string_lossy();
    let mut best: Option<(usize, String)> = None;
    for line in info.lines() {
        let f: Vec<&str> = line.split(' ').collect();
        let sep = f.iter().position(|&x| x == "-")?;
        let (mnt, opts) = (*f.get(4)?, *f.get(5)?);
        let (fstype, source) = (*f.get(sep + 1)?, *f.get(sep + 2)?);
        let inside = dir == mnt
            || mnt == "/"
            || (dir.starts_with(mnt) && dir.as_bytes().get(mnt.len()) == Some(&b'/'));
        if inside && best.as_ref().is_none_or(|(l, _)| mnt.len() >= *l) {
            best = Some((
                mnt.len(),
                format!("at {mnt} from {source} ({fstype}, {opts})"),
            ));
        }
    }
    best.map(|(_, s)| s)
}

/// "YYYY-MM-DD HH:MM:SS" for seconds since the epoch (UTC).
fn utc(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every section a user can name runs something: core and compare
    /// themselves, each other one through its single entry in `PARTS`.
    #[test]
    fn every_section_is_in_the_parts_table_once() {
        for &s in Section::value_variants() {
            let entries = PARTS.iter().filter(|p| p.section == s).count();
            let expected = usize::from(!matches!(s, Section::Core | Section::Compare));
            assert_eq!(entries, expected, "{s:?} has {entries} entries in PARTS");
        }
    }
}
