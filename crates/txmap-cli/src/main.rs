//! `txmap`: create, describe, check and recover txmap regions, and use a
//! region as a key-value store (`kv`).
//!
//! `info` and `check` only read (no lock is taken, nothing is written), so
//! they work while a program has the region open; `check --structures`
//! opens the region to verify the heap and data structures in it. `recover` opens the region
//! like a program would, which replays the log, and closes it again; a damaged log (not
//! merely torn by a crash) makes it fail unless `--accept-loss` is given.
//!
//! Exit status: 0 success (`check`: sound), 1 the region is damaged
//! (`check`: unsound), 2 usage, I/O or any other error, 3 `kv get`/`kv
//! delete` of an absent key. Errors are one line on
//! standard error, starting with `txmap: `.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

mod kv;
mod time;

use clap::error::ErrorKind;
use clap::{Parser, Subcommand};
use txmap::inspect::{self, CheckReport, Report};
use txmap::{Error, Options, Region};

const PAGE: u64 = 4096;

#[derive(Parser, Debug)]
#[command(
    name = "txmap",
    version,
    about = "Create, inspect, check and recover txmap regions",
    after_help = "A region is two files: PATH (header page and data) and PATH-log (its write-ahead log).\n\
                  Exit status: 0 success (check: sound), 1 region damaged (check: unsound), 2 usage or I/O error."
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Create a new zero-filled region at PATH (and PATH-log); fails if either exists
    Create {
        /// The region file to create (its log is PATH-log)
        path: PathBuf,
        /// Region size in bytes, a multiple of 4096; suffixes K, M, G, T (binary) are accepted
        #[arg(long, short, value_parser = parse_size)]
        size: u64,
    },
    /// Describe a region and its log (read-only; works while the region is open)
    Info {
        /// The region file (its log is PATH-log)
        path: PathBuf,
        /// Print one JSON object instead of text
        #[arg(long)]
        json: bool,
    },
    /// List the named regions of an environment (a directory holding env.txm,
    /// `txmap::Env`); opens it read-only, so it works while processes use it
    Env {
        /// The environment's directory
        dir: PathBuf,
        /// Print one JSON object instead of text
        #[arg(long)]
        json: bool,
    },
    /// Verify a region and its log (read-only); exit status 0 only if sound
    Check {
        /// The region file (its log is PATH-log)
        path: PathBuf,
        /// Print one JSON object instead of text
        #[arg(long)]
        json: bool,
        /// Also open the region (replaying its log, like any program) and verify the heap
        /// and every data structure in it: ordering, fill, PMA density, hash split
        /// state, allocator free lists (with --json: a "structures" field)
        #[arg(long)]
        structures: bool,
    },
    /// Use a named map structure in the region as a key-value store
    ///
    /// Keys and values are text with escapes \\ \t \n \r \xHH. Files for load and dump:
    /// one KEY<TAB>VALUE line per entry (text), or the binary format (docs/COLLECTIONS.md).
    Kv {
        /// The region file (created by put and load if absent)
        path: PathBuf,
        /// The structure's name in the region's catalog
        #[arg(long, default_value = "kv")]
        name: String,
        /// The kind of structure to create if it does not exist yet
        #[arg(long, value_enum, default_value_t = kv::KindArg::Btree)]
        kind: kv::KindArg,
        #[command(subcommand)]
        op: kv::KvOp,
    },
    /// Replay logged commits into the region file (as opening it does) and checkpoint it
    Recover {
        /// The region file (its log is PATH-log)
        path: PathBuf,
        /// Recover from a damaged log too: replay the commits before the damage, rebuild a
        /// damaged log header from its records, drop the rest and say what was dropped
        #[arg(long)]
        accept_loss: bool,
        /// A plain file changed by another program while no one had it open: take its
        /// bytes as they are (without it, such a file is refused and nothing is written)
        #[arg(long)]
        accept_changes: bool,
    },
    /// Remove shared state files in /dev/shm that no process uses (left by a
    /// killed last user of a region); files in use are never removed
    Clean,
    /// Copy a region (and its page checksums) to DST as of one commit, while
    /// other processes keep committing; prints the commit the copy holds. The
    /// copy opens without recovery. DST must not exist
    Backup {
        /// The region file to copy (open or not)
        src: PathBuf,
        /// The copy's region file (DST, DST-log and DST-sums are written)
        dst: PathBuf,
        /// Leave all-zero pages (never written, or freed heap blocks) as holes in the copy
        #[arg(long)]
        compact: bool,
    },
    /// Give back space offline: replay and cut the log to its reserve, and cut
    /// a collections region's file above its heap's top (data is never moved)
    Compact {
        /// The region file (no process may have it open)
        path: PathBuf,
    },
    /// Rebuild a region at DST from a backup plus the log segments archived
    /// after it (Options::log_archive), up to the last archived commit,
    /// --to-commit N or --to-time T; a gap or damage in the archive is an
    /// error naming it
    Restore {
        /// The backup (a region made by `txmap backup`, or any closed region)
        backup: PathBuf,
        /// The directory of archived log segments
        #[arg(long)]
        archive: PathBuf,
        /// Stop after this commit (default: the last one archived)
        #[arg(long, value_name = "N", conflicts_with = "to_time")]
        to_commit: Option<u64>,
        /// Stop after the last commit made at or before this time:
        /// RFC 3339 (2026-11-24T05:00:00Z, 2026-11-24 06:00:00.5+01:00) or
        /// @SECONDS since the Unix epoch
        #[arg(long, value_name = "T", value_parser = time::parse)]
        to_time: Option<u64>,
        /// The region to create (must not exist)
        dst: PathBuf,
    },
}

/// A command's failure: one line for standard error and the exit status.
pub(crate) struct Fail {
    pub msg: String,
    pub code: u8,
}

impl From<Error> for Fail {
    fn from(e: Error) -> Fail {
        Fail {
            code: if matches!(e, Error::Corrupt { .. } | Error::PlainFileChanged { .. }) {
                1
            } else {
                2
            },
            msg: e.to_string(),
        }
    }
}

pub(crate) fn usage(msg: impl Into<String>) -> Fail {
    Fail {
        msg: msg.into(),
        code: 2,
    }
}

/// Parses a size such as `4096`, `64K`, `1M`, `2GiB`: a positive multiple of the page size.
fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, suffix) = t.split_at(split);
    if num.is_empty() {
        return Err(
            "expected a number of bytes, optionally with a suffix K, M, G or T (as in 64M)".into(),
        );
    }
    let n: u64 = num.parse().map_err(|_| "number too large".to_string())?;
    let unit: u64 = match suffix.trim().to_ascii_uppercase().as_str() {
        "" | "B" => 1,
        "K" | "KB" | "KIB" => 1 << 10,
        "M" | "MB" | "MIB" => 1 << 20,
        "G" | "GB" | "GIB" => 1 << 30,
        "T" | "TB" | "TIB" => 1 << 40,
        _ => return Err(format!("unknown suffix '{suffix}' (use K, M, G or T)")),
    };
    let size = n
        .checked_mul(unit)
        .ok_or_else(|| "size too large".to_string())?;
    if size == 0 || !size.is_multiple_of(PAGE) {
        return Err(format!(
            "the size must be a positive multiple of the page size, {PAGE} bytes ({size} is not)"
        ));
    }
    Ok(size)
}

/// `1048576` → `1 MiB`, `1572864` → `1.5 MiB`.
fn human(n: u64) -> String {
    const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut unit = 1024u64;
    let mut i = 0;
    while i + 1 < UNITS.len() && n >= unit * 1024 {
        unit *= 1024;
        i += 1;
    }
    if n.is_multiple_of(unit) {
        format!("{} {}", n / unit, UNITS[i])
    } else {
        format!("{:.1} {}", n as f64 / unit as f64, UNITS[i])
    }
}

pub(crate) fn plural(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

fn create(path: &Path, size: u64) -> Result<String, Fail> {
    let lp = txmap::log_path(path);
    for p in [path, lp.as_path()] {
        if std::fs::symlink_metadata(p).is_ok() {
            return Err(usage(format!("{} already exists", p.display())));
        }
    }
    let opts = Options {
        max_size: size.max(Options::default().max_size),
        ..Options::default()
    };
    drop(Region::create(path, size, opts)?);
    Ok(format!(
        "created {}: {size} bytes ({}, {}); log {}\n",
        path.display(),
        human(size),
        plural(size / PAGE, "page", "pages"),
        lp.display()
    ))
}

fn sums_name(p: &Path) -> String {
    txmap::sums::sums_path(p).display().to_string()
}

fn info_text(r: &Report) -> String {
    let mut lines: Vec<(&str, String)> = vec![
        ("region", r.path.display().to_string()),
        ("region id", format!("{:016x}", r.region_id)),
        (
            "size",
            format!(
                "{} bytes ({}, {})",
                r.data_size,
                human(r.data_size),
                plural(r.pages(), "page", "pages")
            ),
        ),
        (
            "fixed address",
            if r.address == 0 {
                "none recorded (the next open assigns one)".to_string()
            } else {
                format!("{:#x}", r.address)
            },
        ),
        (
            "pages in use",
            format!("{} of {} in the data file", r.pages_in_use, r.pages()),
        ),
        (
            "page checksums",
            match r.checksummed_pages {
                Some(n) => format!(
                    "{} (table {})",
                    plural(n, "page", "pages"),
                    sums_name(&r.path)
                ),
                None => "none kept".to_string(),
            },
        ),
        match &r.plain {
            None => (
                "region file",
                format!(
                    "{} bytes (format {}, header generation {})",
                    r.file_len, r.format_version, r.region_header_generation
                ),
            ),
            Some(p) => (
                "plain file",
                format!(
                    "{} bytes, {} (header page in {}, format {}, header generation {})",
                    p.len,
                    if p.record.open {
                        "open, or left open by a crash".to_string()
                    } else {
                        format!("closed cleanly at {} bytes", p.record.len)
                    },
                    p.meta_path.display(),
                    r.format_version,
                    r.region_header_generation
                ),
            ),
        },
        (
            "log size",
            if r.log_records == 0 {
                format!(
                    "{} bytes on disk ({}), no records (next commit is {})",
                    r.log_len,
                    r.log_path.display(),
                    r.log_start_seq
                )
            } else {
                format!(
                    "{} bytes on disk ({}), {} bytes in {} ({}..{})",
                    r.log_len,
                    r.log_path.display(),
                    r.log_bytes_used,
                    plural(r.log_records, "record", "records"),
                    r.log_start_seq,
                    r.log_start_seq + r.log_records - 1
                )
            },
        ),
        (
            "last checkpoint",
            if r.checkpoint_seq == 0 {
                "none (commit 0)".to_string()
            } else {
                format!("commit {}", r.checkpoint_seq)
            },
        ),
        ("commits", r.last_seq.to_string()),
    ];
    if r.log_op_records > 0 {
        lines.push((
            "operations",
            format!(
                "{} with registered operations: {}",
                plural(r.log_op_records, "record", "records"),
                r.log_operations
                    .iter()
                    .map(|(id, n)| format!("id {id} x{n}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ));
    }
    if r.log_group_records > 0 {
        lines.push((
            "group commits",
            format!(
                "{} of commits across several regions",
                plural(r.log_group_records, "record", "records")
            ),
        ));
    }
    let recovery = match (r.pending_commits, r.open_by.is_empty()) {
        (0, _) => "not needed".to_string(),
        (n, false) => format!(
            "not needed while open: {} since the checkpoint {} in the log",
            plural(n, "commit", "commits"),
            if n == 1 { "is" } else { "are" }
        ),
        (n, true) => format!(
            "pending: {} in the log {} not in the data file (`txmap recover` or the next open applies them)",
            plural(n, "commit", "commits"),
            if n == 1 { "is" } else { "are" }
        ),
    };
    lines.push(("recovery", recovery));
    if let Some(t) = &r.torn_tail {
        lines.push(("torn tail", format!("{t} (ignored by recovery)")));
    }
    if !r.open_by.is_empty() {
        let who: Vec<String> = r
            .open_by
            .iter()
            .map(|&p| match p {
                0 => "a process outside this PID namespace".to_string(),
                p => format!("process {p}"),
            })
            .collect();
        lines.push(("open by", who.join(", ")));
    }
    if let Some(l) = &r.live {
        lines.push((
            "live state",
            format!(
                "commit {}, {} in the log, {} in memory ({})",
                l.commit_seq,
                human(l.log_bytes),
                plural(l.version_pages as u64, "page version", "page versions"),
                l.shared_path.display()
            ),
        ));
        if let Some(m) = &l.poisoned {
            lines.push((
                "poisoned",
                format!("{m} (commits fail until every process has closed it)"),
            ));
        }
        if let Some(s) = &l.sync_leader {
            lines.push((
                "sync leader",
                format!(
                    "process {} for {:.3} s{}",
                    s.pid,
                    s.held.as_secs_f64(),
                    if s.stalled {
                        " (stalled: stopped or stuck; other processes sync for themselves)"
                    } else {
                        ""
                    }
                ),
            ));
        }
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let expired = l.snapshots.iter().filter(|s| s.expired).count();
        let snaps = match l.snapshots.iter().min_by_key(|s| s.snapshot) {
            None => "none".to_string(),
            Some(o) => format!(
                "{}{}; oldest: commit {} ({} behind) held by process {} for {} s",
                l.snapshots.len(),
                if expired > 0 {
                    format!(" ({expired} expired, ending)")
                } else {
                    String::new()
                },
                o.snapshot,
                plural(l.commit_seq.saturating_sub(o.snapshot), "commit", "commits"),
                o.pid,
                now.saturating_sub(o.since)
            ),
        };
        lines.push(("live snapshots", snaps));
        let lim = &l.snapshot_limit;
        let oldest_lag = l
            .snapshots
            .iter()
            .map(|s| l.commit_seq.saturating_sub(s.snapshot))
            .max();
        let mut parts = Vec::new();
        match lim.max_lag {
            None => parts.push("no lag limit".to_string()),
            Some(m) => parts.push(format!("lag {} of {m} commits", oldest_lag.unwrap_or(0))),
        }
        match lim.max_version_bytes {
            None => parts.push("no memory limit".to_string()),
            Some(b) => parts.push(format!(
                "versions {} of {}",
                human(l.version_pages as u64 * 4096),
                human(b)
            )),
        }
        parts.push(format!(
            "{} expired, {} preserved for old snapshots so far",
            plural(l.expired_snapshots, "snapshot", "snapshots"),
            plural(l.preserved_pages, "page", "pages")
        ));
        lines.push(("snapshot limit", parts.join("; ")));
    }
    let mut out = String::new();
    for (k, v) in lines {
        out.push_str(&format!("{:<16} {v}\n", format!("{k}:")));
    }
    out
}

/// A JSON string literal.
pub(crate) fn js(s: &str) -> String {
    let mut o = String::with_capacity(s.len() + 2);
    o.push('"');
    for c in s.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            '\n' => o.push_str("\\n"),
            '\r' => o.push_str("\\r"),
            '\t' => o.push_str("\\t"),
            c if (c as u32) < 0x20 => o.push_str(&format!("\\u{:04x}", c as u32)),
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

fn js_opt<T>(v: &Option<T>, f: impl Fn(&T) -> String) -> String {
    v.as_ref().map_or_else(|| "null".to_string(), f)
}

fn info_json(r: &Report) -> String {
    let fields = [
        ("path", js(&r.path.to_string_lossy())),
        ("log_path", js(&r.log_path.to_string_lossy())),
        ("region_id", js(&format!("{:016x}", r.region_id))),
        ("format_version", r.format_version.to_string()),
        ("page_size", r.page_size.to_string()),
        ("size", r.data_size.to_string()),
        ("pages", r.pages().to_string()),
        ("pages_in_use", r.pages_in_use.to_string()),
        (
            "checksummed_pages",
            js_opt(&r.checksummed_pages, |n| n.to_string()),
        ),
        ("file_len", r.file_len.to_string()),
        (
            "plain_len",
            js_opt(&r.plain.as_ref().map(|p| p.len), |n| n.to_string()),
        ),
        (
            "plain_open",
            js_opt(&r.plain.as_ref().map(|p| p.record.open), |b| b.to_string()),
        ),
        (
            "region_header_generation",
            r.region_header_generation.to_string(),
        ),
        ("checkpoint_seq", r.checkpoint_seq.to_string()),
        ("address", r.address.to_string()),
        ("commits", r.last_seq.to_string()),
        ("last_seq", r.last_seq.to_string()),
        ("log_len", r.log_len.to_string()),
        ("log_header_generation", r.log_header_generation.to_string()),
        ("log_start_seq", r.log_start_seq.to_string()),
        ("log_records", r.log_records.to_string()),
        ("log_op_records", r.log_op_records.to_string()),
        ("log_group_records", r.log_group_records.to_string()),
        (
            "log_operations",
            format!(
                "{{{}}}",
                r.log_operations
                    .iter()
                    .map(|(id, n)| format!("\"{id}\":{n}"))
                    .collect::<Vec<_>>()
                    .join(",")
            ),
        ),
        ("log_bytes_used", r.log_bytes_used.to_string()),
        ("torn_tail", js_opt(&r.torn_tail, |t| js(t))),
        ("pending_commits", r.pending_commits.to_string()),
        ("needs_recovery", r.needs_recovery.to_string()),
        (
            "open_by",
            format!(
                "[{}]",
                r.open_by
                    .iter()
                    .map(|p| p.to_string())
                    .collect::<Vec<_>>()
                    .join(",")
            ),
        ),
        (
            "live_snapshots",
            js_opt(&r.live, |l| {
                format!(
                    "[{}]",
                    l.snapshots
                        .iter()
                        .map(|s| format!(
                            "{{\"snapshot\":{},\"pid\":{},\"since\":{},\"lag\":{},\"expired\":{}}}",
                            s.snapshot,
                            s.pid,
                            s.since,
                            l.commit_seq.saturating_sub(s.snapshot),
                            s.expired
                        ))
                        .collect::<Vec<_>>()
                        .join(",")
                )
            }),
        ),
        (
            "poisoned",
            js_opt(&r.live, |l| l.poisoned.as_deref().map_or("null".into(), js)),
        ),
        (
            "sync_leader",
            js_opt(&r.live, |l| {
                l.sync_leader.map_or("null".into(), |s| {
                    format!(
                        "{{\"pid\":{},\"held_ms\":{},\"stalled\":{}}}",
                        s.pid,
                        s.held.as_millis(),
                        s.stalled
                    )
                })
            }),
        ),
        (
            "snapshot_limit",
            js_opt(&r.live, |l| {
                let o = |v: Option<u64>| v.map_or_else(|| "null".to_string(), |x| x.to_string());
                format!(
                    "{{\"max_lag\":{},\"max_version_bytes\":{},\"version_bytes\":{},\"oldest_lag\":{},\"expired_snapshots\":{},\"preserved_pages\":{}}}",
                    o(l.snapshot_limit.max_lag),
                    o(l.snapshot_limit.max_version_bytes),
                    l.version_pages as u64 * 4096,
                    o(l.snapshots
                        .iter()
                        .map(|s| l.commit_seq.saturating_sub(s.snapshot))
                        .max()),
                    l.expired_snapshots,
                    l.preserved_pages
                )
            }),
        ),
    ];
    let body: Vec<String> = fields
        .iter()
        .map(|(k, v)| format!("{}:{v}", js(k)))
        .collect();
    format!("{{{}}}", body.join(","))
}

/// The named regions of the environment in `dir`, in the order they were
/// created.
fn env(dir: &Path, json: bool) -> Result<String, Fail> {
    let opts = txmap::Options {
        read_only: true,
        ..txmap::Options::default()
    };
    let env = txmap::Env::open(dir, opts)?;
    let regions = env.regions()?;
    let size = env.as_region().size();
    if json {
        let items: Vec<String> = regions
            .iter()
            .map(|r| {
                format!(
                    "{{\"name\":{},\"offset\":{},\"length\":{}}}",
                    js(r.name()),
                    r.offset(),
                    r.len()
                )
            })
            .collect();
        return Ok(format!(
            "{{\"path\":{},\"size\":{size},\"regions\":[{}]}}\n",
            js(&env.path().display().to_string()),
            items.join(",")
        ));
    }
    let mut out = format!(
        "environment {} ({}, {} bytes)\n",
        env.path().display(),
        plural(regions.len() as u64, "named region", "named regions"),
        size
    );
    for r in &regions {
        out.push_str(&format!(
            "{}: offset {}, {} bytes ({})\n",
            r.name(),
            r.offset(),
            r.len(),
            human(r.len())
        ));
    }
    Ok(out)
}

fn info(path: &Path, json: bool) -> Result<String, Fail> {
    let r = inspect::inspect(path).map_err(|e| {
        let mut f = Fail::from(e);
        if f.code == 1 {
            f.msg.push_str(" (`txmap check` lists every problem)");
        }
        f
    })?;
    Ok(if json {
        info_json(&r) + "\n"
    } else {
        info_text(&r)
    })
}

fn check_text(c: &CheckReport) -> String {
    let mut out = String::new();
    for p in &c.problems {
        out.push_str(&format!("problem: {p}\n"));
    }
    for w in &c.warnings {
        out.push_str(&format!("warning: {w}\n"));
    }
    let r = &c.report;
    let counts = format!(
        "{}, checkpoint at commit {}, {}",
        plural(r.last_seq, "commit", "commits"),
        r.checkpoint_seq,
        plural(c.warnings.len() as u64, "warning", "warnings")
    );
    if c.is_sound() {
        out.push_str(&format!("{}: sound ({counts})\n", r.path.display()));
    } else {
        out.push_str(&format!(
            "{}: NOT SOUND: {} ({counts})\n",
            r.path.display(),
            plural(c.problems.len() as u64, "problem", "problems")
        ));
    }
    out
}

/// `structures`: with `--structures`, the `"structures"` field's value
/// (`null` when the region itself is unsound and they were not checked) and
/// whether they are sound.
fn check_json(c: &CheckReport, structures: Option<(String, bool)>) -> String {
    let list = |v: &[String]| {
        let items: Vec<String> = v.iter().map(|s| js(s)).collect();
        format!("[{}]", items.join(","))
    };
    let sound = c.is_sound() && structures.as_ref().is_none_or(|(_, ok)| *ok);
    let structures = structures.map_or_else(String::new, |(s, _)| format!(",\"structures\":{s}"));
    format!(
        "{{\"sound\":{sound},\"problems\":{},\"warnings\":{},\"report\":{}{structures}}}\n",
        list(&c.problems),
        list(&c.warnings),
        info_json(&c.report)
    )
}

/// Output and exit status (1 when unsound). With `structures`, a sound
/// region is also opened and its heap and data structures checked.
fn check(path: &Path, json: bool, structures: bool) -> Result<(String, u8), Fail> {
    let c = inspect::check(path)?;
    // Damaged files are not opened: the structures are checked only then.
    let deep = structures && c.is_sound();
    let (text, sound) = if json {
        let st = match (structures, deep) {
            (false, _) => None,
            (true, false) => Some(("null".to_string(), true)),
            (true, true) => Some(kv::check_structures_json(path)?),
        };
        let sound = c.is_sound() && st.as_ref().is_none_or(|(_, ok)| *ok);
        (check_json(&c, st), sound)
    } else {
        let mut text = check_text(&c);
        let mut sound = c.is_sound();
        if deep {
            let (t, ok) = kv::check_structures(path)?;
            text.push_str(&t);
            sound &= ok;
        }
        (text, sound)
    };
    Ok((text, if sound { 0 } else { 1 }))
}

static RECOVERY_BAR: std::sync::OnceLock<indicatif::ProgressBar> = std::sync::OnceLock::new();

/// Draws recovery progress on stderr (indicatif hides it when stderr is not a terminal).
fn show_recovery_progress(done: u64, total: u64) {
    let bar = RECOVERY_BAR.get_or_init(|| {
        let b = indicatif::ProgressBar::new(total);
        if let Ok(style) = indicatif::ProgressStyle::with_template(
            "replaying log {bar:40} {pos}/{len} commits ({eta})",
        ) {
            b.set_style(style);
        }
        b
    });
    bar.set_position(done);
}

fn recover(path: &Path, accept_loss: bool, accept_changes: bool) -> Result<String, Fail> {
    // Open reserves address space for whatever size the files say.
    let opts = Options {
        on_recovery_progress: Some(show_recovery_progress),
        accept_loss,
        accept_outside_changes: accept_changes,
        ..Options::default()
    };
    let region = Region::open(path, opts)?;
    if let Some(bar) = RECOVERY_BAR.get() {
        bar.finish_and_clear();
    }
    let st = region.stats();
    region.checkpoint()?;
    let ckpt = region.stats().checkpoint_seq;
    drop(region);
    if !st.opened_alone {
        return Ok(format!(
            "{}: open in another process, whose live state needs no recovery; \
             checkpoint at commit {ckpt}\n",
            path.display()
        ));
    }
    let mut out: String = st
        .recovery_loss
        .iter()
        .map(|l| format!("damaged log: {l}\n"))
        .collect();
    out.push_str(&format!(
        "{}: {} replayed; checkpoint at commit {ckpt}\n",
        path.display(),
        plural(st.recovered_commits, "commit", "commits")
    ));
    Ok(out)
}

fn run(cmd: Cmd) -> Result<(String, u8), Fail> {
    match cmd {
        Cmd::Create { path, size } => create(&path, size).map(|s| (s, 0)),
        Cmd::Info { path, json } => info(&path, json).map(|s| (s, 0)),
        Cmd::Env { dir, json } => env(&dir, json).map(|s| (s, 0)),
        Cmd::Check {
            path,
            json,
            structures,
        } => check(&path, json, structures),
        Cmd::Kv {
            path,
            name,
            kind,
            op,
        } => kv::kv(&path, &name, kind, op),
        Cmd::Recover {
            path,
            accept_loss,
            accept_changes,
        } => recover(&path, accept_loss, accept_changes).map(|s| (s, 0)),
        Cmd::Clean => clean().map(|s| (s, 0)),
        Cmd::Backup { src, dst, compact } => backup(&src, &dst, compact).map(|s| (s, 0)),
        Cmd::Compact { path } => {
            let r = txmap::compact::compact(&path)?;
            let what = if r.heap {
                "collections heap: data cut above its top"
            } else {
                "not a collections heap: size kept (a raw region has no notion of free space)"
            };
            Ok((
                format!(
                    "{}: data {} -> {} bytes ({what}); log {} -> {} bytes\n",
                    path.display(),
                    r.size_before,
                    r.size_after,
                    r.log_before,
                    r.log_after
                ),
                0,
            ))
        }
        Cmd::Restore {
            backup,
            archive,
            to_commit,
            to_time,
            dst,
        } => {
            use txmap::archive::RestoreTarget;
            let target = match (to_commit, to_time) {
                (Some(c), _) => RestoreTarget::Commit(c),
                (None, Some(t)) => RestoreTarget::Time(t),
                (None, None) => RestoreTarget::Last,
            };
            let r = txmap::archive::restore_to(&backup, &archive, target, &dst)?;
            let made = r
                .time
                .map(|t| format!(", made at {}", txmap::archive::format_time(t)))
                .unwrap_or_default();
            Ok((
                format!(
                    "{} restored from {} (commit {}) and {} of {}: at commit {}{made}\n",
                    dst.display(),
                    backup.display(),
                    r.from,
                    plural(r.replayed, "archived commit", "archived commits"),
                    plural(r.segments as u64, "segment", "segments"),
                    r.commit
                ),
                0,
            ))
        }
    }
}

/// Opens an existing region in the durability mode of the processes that
/// have it open (durable when none does).
pub(crate) fn open_joining(path: &Path) -> Result<Region, Fail> {
    match Region::open(path, Options::default()) {
        Err(Error::Invalid(m)) if m.contains("Async mode by another process") => {
            let opts = Options {
                durability: txmap::Durability::Async,
                ..Options::default()
            };
            Ok(Region::open(path, opts)?)
        }
        r => Ok(r?),
    }
}

fn backup(src: &Path, dst: &Path, compact: bool) -> Result<String, Fail> {
    let region = open_joining(src)?;
    let bar = indicatif::ProgressBar::new(region.size() / PAGE);
    if let Ok(style) =
        indicatif::ProgressStyle::with_template("backup {bar:40} {pos}/{len} pages ({eta})")
    {
        bar.set_style(style);
    }
    let show = |done: u64, _total: u64| bar.set_position(done);
    let started = std::time::Instant::now();
    let r = region.backup_with(
        dst,
        &txmap::BackupOptions {
            compact,
            progress: Some(&show),
        },
    )?;
    let secs = started.elapsed().as_secs_f64();
    bar.finish_and_clear();
    drop(region);
    Ok(format!(
        "{} backed up to {} at commit {}: {} bytes of data, {} written in {secs:.2} s ({:.0} MiB/s)\n",
        src.display(),
        dst.display(),
        r.commit,
        r.size,
        plural(r.pages_written, "page", "pages"),
        r.size as f64 / (1 << 20) as f64 / secs.max(1e-9)
    ))
}

fn clean() -> Result<String, Fail> {
    let sweep = txmap::remove_stale_shared_state()?;
    let mut out = String::new();
    for p in &sweep.removed {
        out.push_str(&format!("removed {}\n", p.display()));
    }
    out.push_str(&format!(
        "{} removed, {} in use (or made by another txmap version) kept\n",
        plural(
            sweep.removed.len() as u64,
            "shared state file",
            "shared state files"
        ),
        sweep.kept.len()
    ));
    Ok(out)
}

/// A clap error as one line: its first paragraph, without the `error: ` prefix.
fn clap_line(e: &clap::Error) -> String {
    if e.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
        || e.kind() == ErrorKind::MissingSubcommand
    {
        return "missing command (create, info, check, kv, recover or clean); see 'txmap --help'"
            .into();
    }
    let text = e.render().to_string();
    let first = text.split("\n\n").next().unwrap_or_default();
    let first = first.trim().trim_start_matches("error:");
    let words: Vec<&str> = first.split_whitespace().collect();
    format!("{}; see 'txmap --help'", words.join(" "))
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn main() -> ExitCode {
    std::panic::set_hook(Box::new(|info| {
        let msg = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown".into());
        let at = info
            .location()
            .map(|l| format!(" at {}:{}", l.file(), l.line()))
            .unwrap_or_default();
        eprintln!("txmap: internal error: {}{at}", one_line(&msg));
    }));
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) => {
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("txmap: {}", clap_line(&e));
            return ExitCode::from(2);
        }
    };
    match run(cli.cmd) {
        Ok((out, code)) => {
            let mut stdout = std::io::stdout().lock();
            if let Err(e) = stdout
                .write_all(out.as_bytes())
                .and_then(|_| stdout.flush())
                && e.kind() != std::io::ErrorKind::BrokenPipe
            {
                eprintln!("txmap: write to standard output: {e}");
                return ExitCode::from(2);
            }
            ExitCode::from(code)
        }
        Err(f) => {
            eprintln!("txmap: {}", one_line(&f.msg));
            ExitCode::from(f.code)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_suffixes_and_must_be_whole_pages() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("64K"), Ok(64 << 10));
        assert_eq!(parse_size("1m"), Ok(1 << 20));
        assert_eq!(parse_size("2GiB"), Ok(2 << 30));
        assert_eq!(parse_size("1T"), Ok(1 << 40));
        for bad in [
            "",
            "0",
            "1000",
            "4097",
            "1X",
            "K",
            "-4096",
            "99999999999999999999",
            "20000000T",
        ] {
            assert!(parse_size(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn human_sizes_and_json_strings() {
        assert_eq!(human(4096), "4 KiB");
        assert_eq!(human(1 << 20), "1 MiB");
        assert_eq!(human(3 << 19), "1.5 MiB");
        assert_eq!(human(100), "100 B");
        assert_eq!(js("a\"b\\c\n\u{1}"), "\"a\\\"b\\\\c\\n\\u0001\"");
    }

    #[test]
    fn the_command_line_is_well_formed() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
