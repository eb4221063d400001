//! Log archiving and media recovery: a region rebuilt from a backup plus
//! the archived log reproduces the committed state at the last commit and
//! at a chosen one (checked against a model); a missing or damaged segment
//! is named, and nothing is written at the destination.

mod common;

use std::path::{Path, PathBuf};

use common::*;
use common::{check_model_state as check_state, model_commit as commit};
use txmap::archive::{RestoreTarget, restore, restore_to};
use txmap::{Options, Region};

const PAGE: u64 = 4096;
const PAGES: u64 = MODEL_PAGES;

fn opts(archive: &Path) -> Options {
    Options {
        checkpoint_bytes: 16 << 10, // many epochs
        log_archive: Some(archive.to_path_buf()),
        ..Options::default()
    }
}

struct Setup {
    _d: TestDir,
    dir: PathBuf,
    backup: PathBuf,
    archive: PathBuf,
    from: u64,
    last: u64,
    /// `after[s]`: the wall clock (ns since the epoch) right after commit `s`.
    after: Vec<u64>,
}

fn now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
}

/// A region at `src.txm` in a fresh directory, archiving into `archive/`.
fn archiving(name: &str) -> (TestDir, PathBuf, PathBuf, Region) {
    let d = ext4_dir(name);
    let dir = d.path().to_path_buf();
    let archive = dir.join("archive");
    std::fs::create_dir(&archive).unwrap();
    let r = Region::create(&dir.join("src.txm"), PAGES * PAGE, opts(&archive)).unwrap();
    (d, dir, archive, r)
}

/// Model commits `seqs`, each followed by the wall clock in `after`.
fn commit_timed(v: &mut txmap::View, seqs: std::ops::RangeInclusive<u64>, after: &mut Vec<u64>) {
    for s in seqs {
        commit(v, s);
        after.push(now_ns());
    }
}

fn setup(name: &str) -> Setup {
    let (d, dir, archive, r) = archiving(name);
    let mut v = r.view().unwrap();
    let mut after = vec![now_ns()];
    commit_timed(&mut v, 1..=30, &mut after);
    let backup = dir.join("backup.txm");
    let from = r.backup(&backup).unwrap().commit;
    assert_eq!(from, 30);
    commit_timed(&mut v, 31..=300, &mut after);
    drop(v);
    r.close().unwrap();
    Setup {
        _d: d,
        dir,
        backup,
        archive,
        from,
        last: 300,
        after,
    }
}

#[test]
fn restore_to_the_last_and_to_a_chosen_commit_reproduces_the_committed_states() {
    let s = setup("archive-restore");
    let segs = archive_segments(&s.archive);
    assert!(segs.len() > 5, "{} segments", segs.len());
    // Every commit is in exactly one segment, in order.
    let mut next = 1;
    for (f, l, _) in &segs {
        assert_eq!(*f, next);
        next = l + 1;
    }
    assert_eq!(next, s.last + 1);
    let dst = s.dir.join("restored.txm");
    let rep = restore(&s.backup, &s.archive, None, &dst).unwrap();
    assert_eq!(
        (rep.from, rep.commit, rep.replayed),
        (s.from, s.last, s.last - s.from)
    );
    check_state(&dst, s.last);
    for k in [s.from, s.from + 1, 137, s.last - 1] {
        let dst = s.dir.join(format!("at{k}.txm"));
        let rep = restore(&s.backup, &s.archive, Some(k), &dst).unwrap();
        assert_eq!(rep.commit, k);
        check_state(&dst, k);
    }
    let e = restore(
        &s.backup,
        &s.archive,
        Some(s.last + 1),
        &s.dir.join("x.txm"),
    )
    .unwrap_err();
    assert!(e.to_string().contains("ends at commit 300"), "{e}");
    assert!(!s.dir.join("x.txm").exists());
}

#[test]
fn restore_to_a_time_stops_at_the_last_commit_made_at_or_before_it() {
    let s = setup("archive-time");
    for k in [s.from, s.from + 1, 137, s.last - 1, s.last] {
        let dst = s.dir.join(format!("t{k}.txm"));
        let rep = restore_to(
            &s.backup,
            &s.archive,
            RestoreTarget::Time(s.after[k as usize]),
            &dst,
        )
        .unwrap();
        assert_eq!(rep.commit, k);
        check_state(&dst, k);
        if k > s.from {
            // The record's time lies between the clock read before and after the commit.
            let t = rep.time.expect("records carry their time");
            assert!(
                s.after[k as usize - 1] < t && t <= s.after[k as usize],
                "{t}"
            );
        }
    }
    // Before the backup's own commit: the backup is too new.
    let dst = s.dir.join("early.txm");
    let e = restore_to(
        &s.backup,
        &s.archive,
        RestoreTarget::Time(s.after[10]),
        &dst,
    )
    .unwrap_err();
    assert!(
        e.to_string().contains("restore from an older backup"),
        "{e}"
    );
    assert!(!dst.exists());
}

#[test]
fn a_missing_segment_is_named_as_a_gap() {
    let s = setup("archive-gap");
    let segs = archive_segments(&s.archive);
    let (f, l, p) = segs.iter().find(|(f, _, _)| *f > 100).unwrap().clone();
    std::fs::remove_file(&p).unwrap();
    let dst = s.dir.join("restored.txm");
    let e = restore(&s.backup, &s.archive, None, &dst).unwrap_err();
    assert!(
        e.to_string()
            .contains(&format!("commits {f}..={l} are in no segment")),
        "{e}"
    );
    assert!(!dst.exists());
    // Up to the gap, restore still works.
    let rep = restore(&s.backup, &s.archive, Some(f - 1), &dst).unwrap();
    assert_eq!(rep.commit, f - 1);
    check_state(&dst, f - 1);
}

#[test]
fn a_damaged_segment_is_named_with_its_offset() {
    let s = setup("archive-damaged");
    let segs = archive_segments(&s.archive);
    let (_, _, p) = segs.iter().find(|(f, _, _)| *f > 100).unwrap().clone();
    let len = std::fs::metadata(&p).unwrap().len();
    flip(&p, 4096 + (len - 4096) / 2);
    let dst = s.dir.join("restored.txm");
    let e = restore(&s.backup, &s.archive, None, &dst).unwrap_err();
    let msg = e.to_string();
    assert!(msg.contains(p.to_str().unwrap()), "{msg}");
    assert!(msg.contains("damaged archived log segment"), "{msg}");
    assert!(!dst.exists());
}

#[test]
fn an_epoch_left_by_a_crash_is_archived_by_the_first_opener() {
    let d = ext4_dir("archive-crash");
    let a = d.join("archive-a");
    let b = d.join("archive-b");
    std::fs::create_dir(&a).unwrap();
    std::fs::create_dir(&b).unwrap();
    let src = d.join("src.txm");
    let r = Region::create(&src, PAGES * PAGE, opts(&a)).unwrap();
    let mut v = r.view().unwrap();
    for s in 1..=10 {
        commit(&mut v, s);
    }
    let backup = d.join("backup.txm");
    assert_eq!(r.backup(&backup).unwrap().commit, 10);
    for s in 11..=45 {
        commit(&mut v, s);
    }
    // A crash now: the files as they are, the live epoch not archived.
    let crashed = d.join("crashed.txm");
    copy_region(&src, &crashed);
    for (_, _, p) in archive_segments(&a) {
        std::fs::copy(&p, b.join(p.file_name().unwrap())).unwrap();
    }
    let last_archived = archive_segments(&b).last().map_or(0, |s| s.1);
    assert!(last_archived < 45, "the live epoch is not archived yet");
    drop(v);
    drop(r);
    drop(Region::open(&crashed, opts(&b)).unwrap());
    let dst = d.join("restored.txm");
    let rep = restore(&backup, &b, None, &dst).unwrap();
    assert_eq!(rep.commit, 45);
    check_state(&dst, 45);
}

/// Every file in `dir` and below with its bytes, sorted by path.
fn contents(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        if e.file_type().unwrap().is_dir() {
            out.extend(contents(&e.path()));
        } else {
            out.push((e.path(), std::fs::read(e.path()).unwrap()));
        }
    }
    out.sort();
    out
}

/// Child: arms a crash point and restores `TXMAP_BACKUP` plus
/// `TXMAP_ARCHIVE` to `TXMAP_DST`.
#[test]
fn restore_child() {
    if role().as_deref() != Some("restore") {
        return;
    }
    let var = |k: &str| PathBuf::from(std::env::var(k).unwrap());
    let point: u32 = std::env::var("TXMAP_POINT").unwrap().parse().unwrap();
    let nth: u64 = std::env::var("TXMAP_NTH").unwrap().parse().unwrap();
    txmap::debug::crash_at(txmap::debug::CrashPoint::from_u32(point).unwrap(), nth);
    let r = restore(
        &var("TXMAP_BACKUP"),
        &var("TXMAP_ARCHIVE"),
        None,
        &var("TXMAP_DST"),
    );
    eprintln!("restore finished without reaching its crash point: {r:?}");
}

#[test]
fn a_restore_killed_at_any_point_leaves_backup_and_archive_intact_and_no_region_at_dst() {
    use txmap::debug::CrashPoint;
    let s = setup("archive-restore-killed");
    // The backup's files and the archive, byte for byte.
    let sources = || {
        let mut c = contents(&s.archive);
        for p in [
            s.backup.clone(),
            txmap::log_path(&s.backup),
            txmap::sums::sums_path(&s.backup),
        ] {
            c.push((p.clone(), std::fs::read(&p).unwrap()));
        }
        c
    };
    let before = sources();
    let dst = s.dir.join("restored.txm");
    for (point, nth) in [
        (CrashPoint::RestoreReplaying, 1),
        (CrashPoint::RestoreReplaying, 4),
        (CrashPoint::RestorePlacing, 1),
    ] {
        let status = child(
            "restore_child",
            "restore",
            &[
                ("TXMAP_POINT", (point as u32).to_string()),
                ("TXMAP_NTH", nth.to_string()),
                ("TXMAP_BACKUP", s.backup.display().to_string()),
                ("TXMAP_ARCHIVE", s.archive.display().to_string()),
                ("TXMAP_DST", dst.display().to_string()),
            ],
        )
        .status()
        .unwrap();
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(status.signal(), Some(9), "{point:?} {nth}: killed");
        assert!(
            !dst.exists(),
            "{point:?} {nth}: no region at the destination"
        );
        assert!(
            sources() == before,
            "{point:?} {nth}: backup or archive changed"
        );
        let temporaries = std::fs::read_dir(&s.dir)
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().contains(".backup-"))
            .count();
        assert_eq!(temporaries, 3, "{point:?} {nth}: the parts, unplaced");
    }
    // The next restore removes the dead one's files and succeeds.
    let rep = restore(&s.backup, &s.archive, None, &dst).unwrap();
    assert_eq!(rep.commit, s.last);
    check_state(&dst, s.last);
    let left: Vec<_> = std::fs::read_dir(&s.dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".backup-"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn a_backup_newer_than_the_time_is_refused_when_its_commit_ends_a_segment() {
    let (_d, dir, archive, r) = archiving("archive-time-edge");
    let mut v = r.view().unwrap();
    let mut after = vec![now_ns()];
    commit_timed(&mut v, 1..=10, &mut after);
    // The checkpoint archives the epoch: a segment that ends at commit 10.
    r.checkpoint().unwrap();
    let backup = dir.join("backup.txm");
    assert_eq!(r.backup(&backup).unwrap().commit, 10);
    commit_timed(&mut v, 11..=20, &mut after);
    drop(v);
    r.close().unwrap();
    assert!(
        archive_segments(&archive).iter().any(|(_, l, _)| *l == 10),
        "a segment ends at the backup's commit"
    );
    let dst = dir.join("early.txm");
    let e = restore_to(&backup, &archive, RestoreTarget::Time(after[5]), &dst).unwrap_err();
    assert!(
        e.to_string().contains("restore from an older backup"),
        "{e}"
    );
    assert!(!dst.exists());
    // At or after the backup's commit, it restores.
    let rep = restore_to(&backup, &archive, RestoreTarget::Time(after[15]), &dst).unwrap();
    assert_eq!(rep.commit, 15);
    check_state(&dst, 15);
}
