//! `txmap restore` and `txmap compact`, run as the built binary: restored
//! and compacted regions are checked against a model of what was committed;
//! a missing or damaged archived segment, a gap, an unreachable commit and
//! bad arguments fail with one line naming the problem and a nonzero exit
//! status, and leave nothing at the destination.

mod cmd;
#[path = "../../txmap/tests/common/mod.rs"]
mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

use cmd::*;
use common::*;
use common::{check_model_state as check_state, model_commit as commit};
use txmap::{Options, Region};

const PAGE: u64 = 4096;
const PAGES: u64 = MODEL_PAGES;
/// The backup holds commits 1..=BACKUP_AT; the archive has 1..=LAST.
const BACKUP_AT: u64 = 30;
const LAST: u64 = 240;

struct Setup {
    d: TestDir,
    backup: PathBuf,
    archive: PathBuf,
}

/// A region archiving its log, backed up by `txmap backup` at BACKUP_AT,
/// then committed to LAST and closed.
fn setup(name: &str) -> Setup {
    let d = ext4_dir(name);
    let archive = d.join("archive");
    std::fs::create_dir(&archive).unwrap();
    let src = d.join("src.txm");
    let opts = Options {
        checkpoint_bytes: 16 << 10, // many epochs, so many segments
        log_archive: Some(archive.clone()),
        ..Options::default()
    };
    let r = Region::create(&src, PAGES * PAGE, opts).unwrap();
    let mut v = r.view().unwrap();
    for c in 1..=BACKUP_AT {
        commit(&mut v, c);
    }
    let backup = d.join("backup.txm");
    let out = succeeds(&txmap(&["backup", s(&src), s(&backup)]));
    assert!(out.contains(&format!("at commit {BACKUP_AT}")), "{out}");
    for c in BACKUP_AT + 1..=LAST {
        commit(&mut v, c);
    }
    drop(v);
    r.close().unwrap();
    Setup { d, backup, archive }
}

/// Nothing at `dst`: no region, log, checksum table or temporary file.
fn nothing_at(dst: &Path) {
    let name = dst.file_name().unwrap().to_str().unwrap();
    let left: Vec<String> = std::fs::read_dir(dst.parent().unwrap())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(name))
        .collect();
    assert!(left.is_empty(), "left at the destination: {left:?}");
}

fn restore(s_: &Setup, to: Option<u64>, dst: &Path) -> Output {
    let to = to.map(|t| t.to_string());
    match &to {
        Some(t) => restore_with(s_, &["--to-commit", t], dst),
        None => restore_with(s_, &[], dst),
    }
}

/// `txmap restore BACKUP --archive ARCHIVE EXTRA… DST`.
fn restore_with(s_: &Setup, extra: &[&str], dst: &Path) -> Output {
    let mut args = vec!["restore", s(&s_.backup), "--archive", s(&s_.archive)];
    args.extend(extra);
    args.push(s(dst));
    txmap(&args)
}

#[test]
fn restore_to_the_last_and_to_chosen_commits_matches_the_model() {
    let st = setup("cli-restore");
    assert!(archive_segments(&st.archive).len() > 5);
    let dst = st.d.join("last.txm");
    let out = succeeds(&restore(&st, None, &dst));
    assert!(
        out.contains(&format!("(commit {BACKUP_AT})"))
            && out.contains(&format!("{} archived commits", LAST - BACKUP_AT))
            && reached(&out) == LAST,
        "{out}"
    );
    check_state(&dst, LAST);
    let c = succeeds(&txmap(&["check", s(&dst)]));
    assert!(c.contains("sound"), "{c}");
    // Every 13th commit: each commit's write is then the newest on its
    // page at some chosen commit (pages are rewritten every 16 commits).
    let chosen = (BACKUP_AT..LAST)
        .step_by(13)
        .chain([BACKUP_AT + 1, LAST - 1]);
    for k in chosen {
        let dst = st.d.join(&format!("at{k}.txm"));
        let out = succeeds(&restore(&st, Some(k), &dst));
        assert_eq!(reached(&out), k, "{out}");
        check_state(&dst, k);
    }
    // A restored region is a region: it commits, and restores again.
    let r = Region::open(&dst, Options::default()).unwrap();
    let mut v = r.view().unwrap();
    commit(&mut v, LAST + 1);
    drop(v);
    r.close().unwrap();
    check_state(&dst, LAST + 1);
}

#[test]
fn a_missing_segment_is_a_gap_named_with_its_commits() {
    let st = setup("cli-restore-gap");
    let (f, l, p) = archive_segments(&st.archive)
        .into_iter()
        .find(|(f, _, _)| *f > 100)
        .unwrap();
    let kept = std::fs::read(&p).unwrap();
    std::fs::remove_file(&p).unwrap();
    let dst = st.d.join("r.txm");
    let err = fails(&restore(&st, None, &dst), 2);
    assert!(err.contains("has a gap"), "{err}");
    assert!(
        err.contains(&format!("commits {f}..={l} are in no segment")),
        "{err}"
    );
    assert!(err.contains(s(&st.archive)), "{err}");
    nothing_at(&dst);
    // Up to the commit before the gap, it restores.
    succeeds(&restore(&st, Some(f - 1), &dst));
    check_state(&dst, f - 1);
    // That segment back, the last one gone: the archive ends early, so
    // the last commit cannot be reached, but the one before it can.
    std::fs::write(&p, kept).unwrap();
    let (f, _, last) = archive_segments(&st.archive).last().unwrap().clone();
    std::fs::remove_file(&last).unwrap();
    let dst = st.d.join("r2.txm");
    let err = fails(&restore(&st, Some(LAST), &dst), 2);
    assert!(
        err.contains(&format!(
            "ends at commit {}: commit {LAST} cannot be reached",
            f - 1
        )),
        "{err}"
    );
    nothing_at(&dst);
    succeeds(&restore(&st, None, &dst));
    check_state(&dst, f - 1);
}

#[test]
fn a_damaged_segment_is_named_with_its_file_and_offset() {
    let st = setup("cli-restore-damaged");
    let (f, _, p) = archive_segments(&st.archive)
        .into_iter()
        .find(|(f, _, _)| *f > 100)
        .unwrap();
    let len = std::fs::metadata(&p).unwrap().len();
    let at = 4096 + (len - 4096) / 2;
    flip(&p, at);
    let dst = st.d.join("r.txm");
    let err = fails(&restore(&st, None, &dst), 1);
    assert!(err.contains(s(&p)), "{err}");
    assert!(err.contains("damaged archived log segment"), "{err}");
    assert!(err.contains("offset"), "{err}");
    nothing_at(&dst);
    // Up to the commit before the damaged segment, it restores.
    succeeds(&restore(&st, Some(f - 1), &dst));
    check_state(&dst, f - 1);
    // A damaged segment header is named too.
    let (_, _, q) = archive_segments(&st.archive)
        .into_iter()
        .find(|(f2, _, _)| *f2 > f)
        .unwrap();
    let seg = std::fs::read(&q).unwrap();
    let slot = (0..4096).find(|&i| seg[i] != 0).unwrap();
    flip(&q, slot as u64 + 8);
    let dst = st.d.join("r2.txm");
    std::fs::write(&p, {
        let mut b = std::fs::read(&p).unwrap();
        b[at as usize] ^= 0x40; // the first one repaired
        b
    })
    .unwrap();
    let err = fails(&restore(&st, None, &dst), 1);
    assert!(err.contains(s(&q)), "{err}");
    nothing_at(&dst);
}

/// The commit a restore reports it reached (`… at commit N[, made at T]`).
fn reached(out: &str) -> u64 {
    let tail = out.trim_end().rsplit_once("at commit ").expect(out).1;
    tail.split(',').next().unwrap().parse().expect(out)
}

#[test]
fn restore_to_the_time_a_restore_printed_reaches_the_same_commit() {
    let st = setup("cli-restore-time");
    for k in [BACKUP_AT + 1, 150, LAST] {
        let out = succeeds(&restore(&st, Some(k), &st.d.join(&format!("c{k}.txm"))));
        let made = out
            .trim_end()
            .rsplit_once(", made at ")
            .map(|(_, t)| t.to_string())
            .expect(&out);
        let dst = st.d.join(&format!("t{k}.txm"));
        let out = succeeds(&restore_with(&st, &["--to-time", &made], &dst));
        assert!(
            out.ends_with(&format!("at commit {k}, made at {made}\n")),
            "{out}"
        );
        check_state(&dst, k);
    }
    // Times that are not times, and both limits at once.
    let dst = st.d.join("bad.txm");
    for bad in ["yesterday", "2026-02-30T00:00:00Z", "@x"] {
        let o = restore_with(&st, &["--to-time", bad], &dst);
        assert_eq!(o.status.code(), Some(2), "{bad}");
        assert!(stderr(&o).contains("is not a time"), "{}", stderr(&o));
    }
    let o = restore_with(&st, &["--to-time", "@0", "--to-commit", "40"], &dst);
    assert_eq!(o.status.code(), Some(2));
    // Before the backup's commit was made.
    let o = restore_with(&st, &["--to-time", "@1"], &dst);
    assert!(fails(&o, 2).contains("restore from an older backup"));
    nothing_at(&dst);
}

#[test]
fn restore_refuses_bad_arguments_with_one_line_and_status_2() {
    let st = setup("cli-restore-args");
    let dst = st.d.join("r.txm");
    // A commit before the backup's.
    let err = fails(&restore(&st, Some(BACKUP_AT - 1), &dst), 2);
    assert!(err.contains("restore from an older backup"), "{err}");
    nothing_at(&dst);
    // A commit past the archive's end.
    let err = fails(&restore(&st, Some(LAST + 1), &dst), 2);
    assert!(err.contains(&format!("ends at commit {LAST}")), "{err}");
    nothing_at(&dst);
    // An existing destination is never replaced.
    std::fs::write(&dst, b"mine").unwrap();
    let err = fails(&restore(&st, None, &dst), 2);
    assert!(err.contains("already exists"), "{err}");
    assert_eq!(std::fs::read(&dst).unwrap(), b"mine");
    std::fs::remove_file(&dst).unwrap();
    // Nor a log left at the destination.
    std::fs::write(txmap::log_path(&dst), b"mine").unwrap();
    let err = fails(&restore(&st, None, &dst), 2);
    assert!(err.contains("-log already exists"), "{err}");
    assert!(!dst.exists());
    std::fs::remove_file(txmap::log_path(&dst)).unwrap();
    // A missing archive directory or backup is named.
    let none = st.d.join("no-such-dir");
    let o = txmap(&["restore", s(&st.backup), "--archive", s(&none), s(&dst)]);
    assert!(fails(&o, 2).contains(s(&none)));
    nothing_at(&dst);
    let o = txmap(&["restore", s(&none), "--archive", s(&st.archive), s(&dst)]);
    assert!(fails(&o, 2).contains(s(&none)));
    nothing_at(&dst);
    // A file that is not a region as the backup.
    let junk = st.d.join("junk");
    std::fs::write(&junk, vec![7u8; 8192]).unwrap();
    let o = txmap(&["restore", s(&junk), "--archive", s(&st.archive), s(&dst)]);
    let err = fails(&o, 1);
    assert!(err.contains(s(&junk)), "{err}");
    nothing_at(&dst);
    // Command-line mistakes.
    for args in [
        vec!["restore", s(&st.backup), s(&dst)],
        vec![
            "restore",
            s(&st.backup),
            "--archive",
            s(&st.archive),
            "--to-commit",
            "x",
            s(&dst),
        ],
        vec!["restore", s(&st.backup), "--archive", s(&st.archive)],
    ] {
        let err = fails(&txmap(&args), 2);
        assert!(err.contains("txmap --help"), "{args:?}: {err}");
    }
    nothing_at(&dst);
    // The backup and the archive are as they were: a full restore works.
    succeeds(&restore(&st, None, &dst));
    check_state(&dst, LAST);
}

fn key(i: u32) -> Vec<u8> {
    format!("key-{i:06}").into_bytes()
}

/// A collections region with a B+-tree "m": 12,000 entries put, every
/// third deleted, values varying by key. Returns the model.
fn make_heap_region(p: &Path) -> BTreeMap<Vec<u8>, Vec<u8>> {
    use txmap::collections::{AnyMap, Kind, Map};
    let r = Region::create(p, 256 * 1024, Options::default()).unwrap();
    let mut v = r.view().unwrap();
    let m = v
        .run(|v| AnyMap::open_or_create(v, "m", Kind::BTree))
        .unwrap();
    let mut model = BTreeMap::new();
    for chunk in 0..24u32 {
        v.run(|v| {
            for i in chunk * 500..(chunk + 1) * 500 {
                let val = vec![(i % 251) as u8; 40 + (i % 60) as usize];
                m.put(v, &key(i), &val)?;
            }
            Ok(())
        })
        .unwrap();
        for i in chunk * 500..(chunk + 1) * 500 {
            model.insert(key(i), vec![(i % 251) as u8; 40 + (i % 60) as usize]);
        }
    }
    v.run(|v| {
        for i in (0..12_000).step_by(3) {
            m.delete(v, &key(i))?;
        }
        Ok(())
    })
    .unwrap();
    for i in (0..12_000).step_by(3) {
        model.remove(&key(i));
    }
    drop(v);
    r.close().unwrap();
    model
}

/// Every entry of map "m" as `txmap kv scan` prints it, against the model.
fn check_entries(p: &Path, model: &BTreeMap<Vec<u8>, Vec<u8>>) {
    let out = succeeds(&txmap(&["kv", s(p), "--name", "m", "scan"]));
    let want: String = model
        .iter()
        .map(|(k, v)| {
            let hex: String = v.iter().map(|b| format!("\\x{b:02x}")).collect();
            format!("{}\t{hex}\n", String::from_utf8_lossy(k))
        })
        .collect();
    // Values are bytes 0..251: compare unescaped, not the escaping.
    let parse = |s: &str| -> Vec<(String, Vec<u8>)> {
        s.lines()
            .map(|l| {
                let (k, v) = l.split_once('\t').unwrap();
                (k.to_string(), unescape(v))
            })
            .collect()
    };
    let got = parse(&out);
    assert_eq!(got.len(), model.len(), "entries after compact");
    assert!(got == parse(&want), "entries differ from the model");
}

/// `\\`, `\t`, `\n`, `\r`, `\xHH` and other characters as their UTF-8 bytes.
fn unescape(s: &str) -> Vec<u8> {
    let b = s.as_bytes();
    let (mut out, mut i) = (Vec::new(), 0);
    while i < b.len() {
        if b[i] != b'\\' {
            out.push(b[i]);
            i += 1;
            continue;
        }
        match b[i + 1] {
            b'x' => {
                out.push(u8::from_str_radix(&s[i + 2..i + 4], 16).unwrap());
                i += 4;
            }
            c => {
                out.push(match c {
                    b't' => b'\t',
                    b'n' => b'\n',
                    b'r' => b'\r',
                    _ => c,
                });
                i += 2;
            }
        }
    }
    out
}

/// The data size `txmap compact` reports: `data A -> B bytes`.
fn sizes(out: &str) -> (u64, u64) {
    let at = out.find("data ").expect(out) + 5;
    let mut it = out[at..].split_whitespace();
    let a = it.next().unwrap().parse().expect(out);
    assert_eq!(it.next(), Some("->"));
    let b = it.next().unwrap().parse().expect(out);
    (a, b)
}

#[test]
fn compact_cuts_a_collections_region_and_keeps_every_entry() {
    let d = ext4_dir("cli-compact");
    let p = d.join("r.txm");
    let model = make_heap_region(&p);
    let before = std::fs::metadata(&p).unwrap().len();
    let out = succeeds(&txmap(&["compact", s(&p)]));
    assert!(out.contains("collections heap"), "{out}");
    let (a, b) = sizes(&out);
    assert_eq!(a + PAGE, before, "{out}");
    assert!(b < a, "{out}");
    assert_eq!(std::fs::metadata(&p).unwrap().len(), b + PAGE, "file cut");
    let log = std::fs::metadata(txmap::log_path(&p)).unwrap().len();
    assert!(log <= PAGE + (4 << 20), "log cut to its reserve: {log}");
    let c = succeeds(&txmap(&["check", "--structures", s(&p)]));
    assert!(c.contains("sound"), "{c}");
    check_entries(&p, &model);
    // Compacting again gives back nothing more and changes nothing.
    let out = succeeds(&txmap(&["compact", s(&p)]));
    assert_eq!(sizes(&out), (b, b), "{out}");
    check_entries(&p, &model);
}

#[test]
fn compact_keeps_a_raw_region_and_refuses_an_open_or_missing_one() {
    let d = ext4_dir("cli-compact-raw");
    let p = d.join("r.txm");
    let r = Region::create(&p, PAGES * PAGE, Options::default()).unwrap();
    let mut v = r.view().unwrap();
    for c in 1..=50 {
        commit(&mut v, c);
    }
    drop(v);
    // Open here: compact must refuse and change nothing.
    let err = fails(&txmap(&["compact", s(&p)]), 2);
    assert!(err.contains("open in another process"), "{err}");
    assert!(err.contains(s(&p)), "{err}");
    r.close().unwrap();
    let out = succeeds(&txmap(&["compact", s(&p)]));
    assert!(out.contains("size kept"), "{out}");
    assert_eq!(sizes(&out), (PAGES * PAGE, PAGES * PAGE), "{out}");
    // Same model as restore's: the raw bytes are untouched.
    let r = Region::open(&p, Options::default()).unwrap();
    assert_eq!(r.stats().commit_seq, 50);
    drop(r);
    check_state(&p, 50);
    let none = d.join("none.txm");
    let err = fails(&txmap(&["compact", s(&none)]), 2);
    assert!(err.contains(s(&none)), "{err}");
    assert!(!none.exists());
    let err = fails(&txmap(&["compact"]), 2);
    assert!(err.contains("txmap --help"), "{err}");
}

/// Runs `cmd` and kills it with SIGKILL after a random delay below
/// `whole`; returns its status and standard output.
fn run_killed(mut cmd: Command, x: &mut u64, whole: Duration) -> (ExitStatus, String) {
    *x = x
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    let delay = Duration::from_micros((*x >> 33) % (whole.as_micros() as u64 + 1));
    let mut c = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(delay);
    let _ = c.kill();
    let status = c.wait().unwrap();
    let mut out = String::new();
    use std::io::Read;
    c.stdout.take().unwrap().read_to_string(&mut out).unwrap();
    (status, out)
}

/// Every file in `dir` (not below) whose name starts with `prefix`, with its bytes.
fn files(dir: &Path, prefix: &str) -> Vec<(String, Vec<u8>)> {
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| (e.file_name().to_string_lossy().into_owned(), e.path()))
        .filter(|(n, p)| n.starts_with(prefix) && p.is_file())
        .map(|(n, p)| (n, std::fs::read(p).unwrap()))
        .collect();
    v.sort();
    v
}

#[test]
fn a_restore_killed_at_random_leaves_its_sources_and_no_half_region() {
    let st = setup("cli-restore-killed");
    let sources = || (files(&st.d.0, "backup.txm"), files(&st.archive, ""));
    let before = sources();
    let dst = st.d.join("r.txm");
    let cmd = || {
        let mut c = Command::new(env!("CARGO_BIN_EXE_txmap"));
        c.args([
            "restore",
            s(&st.backup),
            "--archive",
            s(&st.archive),
            s(&dst),
        ]);
        c
    };
    let t = Instant::now();
    succeeds(&cmd().output().unwrap());
    let whole = t.elapsed();
    let mut x = seed("a_restore_killed_at_random_leaves_its_sources_and_no_half_region");
    let (mut killed, mut finished) = (0, 0);
    for round in 0..12 {
        for p in [&dst, &txmap::log_path(&dst), &txmap::sums::sums_path(&dst)] {
            let _ = std::fs::remove_file(p);
        }
        let (status, out) = run_killed(cmd(), &mut x, whole);
        if status.success() {
            finished += 1;
            assert_eq!(reached(&out), LAST, "{out}");
        } else {
            killed += 1;
        }
        // Whatever is at DST is a whole restore (killed after the renames).
        if dst.exists() {
            check_state(&dst, LAST);
        }
        assert!(
            sources() == before,
            "round {round}: backup or archive changed"
        );
    }
    eprintln!("{killed} killed, {finished} finished");
    for p in [&dst, &txmap::log_path(&dst), &txmap::sums::sums_path(&dst)] {
        let _ = std::fs::remove_file(p);
    }
    // A last restore succeeds and removes every dead one's temporaries.
    succeeds(&cmd().output().unwrap());
    check_state(&dst, LAST);
    let left: Vec<_> = files(&st.d.0, "r.txm")
        .into_iter()
        .map(|(n, _)| n)
        .filter(|n| n.contains(".backup-"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn a_compact_killed_at_random_loses_no_entry() {
    use txmap::collections::{AnyMap, Kind, Map};
    let d = ext4_dir("cli-compact-killed");
    let p = d.join("r.txm");
    let mut model = make_heap_region(&p);
    let cmd = || {
        let mut c = Command::new(env!("CARGO_BIN_EXE_txmap"));
        c.args(["compact", s(&p)]);
        c
    };
    let mut x = seed("a_compact_killed_at_random_loses_no_entry");
    let (mut killed, mut finished) = (0, 0);
    for round in 0..10u32 {
        // More entries, left in the log (no checkpoint), so that each
        // compact replays, checkpoints, cuts the log and the file.
        let opts = Options {
            checkpoint_bytes: 1 << 40,
            ..Options::default()
        };
        let r = Region::open(&p, opts).unwrap();
        let mut v = r.view().unwrap();
        let m = v
            .run(|v| AnyMap::open_or_create(v, "m", Kind::BTree))
            .unwrap();
        let first = 20_000 + round * 2000;
        v.run(|v| {
            for i in first..first + 2000 {
                m.put(v, &key(i), &round.to_le_bytes())?;
            }
            for i in (round..12_000).step_by(37) {
                m.delete(v, &key(i))?;
            }
            Ok(())
        })
        .unwrap();
        for i in first..first + 2000 {
            model.insert(key(i), round.to_le_bytes().to_vec());
        }
        for i in (round..12_000).step_by(37) {
            model.remove(&key(i));
        }
        drop(v);
        // Leave without checkpointing: a copy of the files as they are,
        // as a crash would leave them, replaces the region.
        let copy = d.join("copy.txm");
        let parts = |r: &Path| {
            [
                r.to_path_buf(),
                txmap::log_path(r),
                txmap::sums::sums_path(r),
            ]
        };
        for (from, to) in parts(&p).iter().zip(parts(&copy)) {
            std::fs::copy(from, to).unwrap();
        }
        drop(r);
        for (from, to) in parts(&copy).iter().zip(parts(&p)) {
            std::fs::rename(from, to).unwrap();
        }
        remove_shared_state(&d.0);
        let t = Instant::now();
        let whole = {
            // Time a compact of another copy, for the kill's range.
            let c2 = d.join("timing.txm");
            for (from, to) in parts(&p).iter().zip(parts(&c2)) {
                std::fs::copy(from, to).unwrap();
            }
            let o = Command::new(env!("CARGO_BIN_EXE_txmap"))
                .args(["compact", s(&c2)])
                .output()
                .unwrap();
            succeeds(&o);
            for f in parts(&c2) {
                let _ = std::fs::remove_file(f);
            }
            t.elapsed()
        };
        let (status, _) = run_killed(cmd(), &mut x, whole);
        if status.success() {
            finished += 1;
        } else {
            killed += 1;
        }
        remove_shared_state(&d.0);
        let c = succeeds(&txmap(&["check", "--structures", s(&p)]));
        assert!(c.contains("sound"), "round {round}: {c}");
        check_entries(&p, &model);
    }
    eprintln!("{killed} killed, {finished} finished");
}
