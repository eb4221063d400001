//! Hot backup (`Region::backup`): the copy holds exactly the snapshot it
//! reports, however commits and checkpoints race it; a backup killed at
//! any point leaves the source intact and no region at the destination.

mod common;

use std::sync::Mutex;

use common::*;
use txmap::debug::CrashPoint;
use txmap::inspect::check;
use txmap::{BackupOptions, Options, Region};

const PAGE: u64 = 4096;

fn stamp(v: &mut txmap::View, page: u64, value: u64) {
    v.begin().unwrap();
    v.write(page * PAGE, &value).unwrap();
    v.write(page * PAGE + PAGE - 8, &value).unwrap();
    v.commit().unwrap();
}

fn read_page(v: &txmap::View, page: u64) -> (u64, u64) {
    (
        v.read::<u64>(page * PAGE).unwrap(),
        v.read::<u64>(page * PAGE + PAGE - 8).unwrap(),
    )
}

#[test]
fn a_backup_holds_its_snapshot_while_commits_and_checkpoints_go_on() {
    let d = ext4_dir("backup-snapshot");
    let src = d.join("src.txm");
    let dst = d.join("dst.txm");
    let r = Region::create(&src, 4096 * PAGE, Options::default()).unwrap();
    let mut v = r.view().unwrap();
    for p in [0, 10, 1500, 2700, 4095] {
        stamp(&mut v, p, 1);
    }
    r.checkpoint().unwrap();
    stamp(&mut v, 2700, 2); // only in the log and in memory
    let before = r.stats().commit_seq;
    let writer = Mutex::new(v);
    let raced = Mutex::new(false);
    // After the first batch (1,024 pages: 4 MiB) is copied, commit to
    // pages on both sides of it and checkpoint, so the file holds newer
    // content.
    let progress = |done: u64, _total: u64| {
        let mut first = raced.lock().unwrap();
        if done < 4096 && !*first {
            *first = true;
            let mut w = writer.lock().unwrap();
            for p in [0, 10, 1500, 2700, 4095] {
                stamp(&mut w, p, 9);
            }
            r.checkpoint().unwrap();
        }
    };
    let rep = r
        .backup_with(
            &dst,
            &BackupOptions {
                compact: false,
                progress: Some(&progress),
            },
        )
        .unwrap();
    assert!(*raced.lock().unwrap());
    assert_eq!(
        rep.commit, before,
        "the backup reports the commit it began at"
    );
    assert_eq!(rep.size, 4096 * PAGE);
    assert!(r.stats().commit_seq > before);
    drop(writer);
    drop(r);
    let c = check(&dst).unwrap();
    assert!(c.is_sound(), "{c:?}");
    assert_eq!(c.report.checkpoint_seq, before);
    assert!(!c.report.needs_recovery);
    assert_eq!(c.report.checksummed_pages, Some(4096));
    let b = Region::open(&dst, Options::default()).unwrap();
    assert_eq!(b.stats().recovered_commits, 0, "opens without recovery");
    assert_eq!(b.stats().commit_seq, before);
    let v = b.view().unwrap();
    for (p, want) in [(0, 1), (10, 1), (1500, 1), (2700, 2), (4095, 1), (5, 0)] {
        assert_eq!(read_page(&v, p), (want, want), "page {p}");
    }
}

#[test]
fn a_compact_backup_skips_zero_pages_and_reads_the_same() {
    let d = ext4_dir("backup-compact");
    let src = d.join("src.txm");
    let dst = d.join("dst.txm");
    let r = Region::create(&src, 4096 * PAGE, Options::default()).unwrap();
    let mut v = r.view().unwrap();
    for p in [3, 2000, 4095] {
        stamp(&mut v, p, p + 1);
    }
    drop(v);
    let rep = r
        .backup_with(
            &dst,
            &BackupOptions {
                compact: true,
                progress: None,
            },
        )
        .unwrap();
    assert_eq!(rep.pages_written, 3);
    use std::os::unix::fs::MetadataExt;
    let blocks = std::fs::metadata(&dst).unwrap().blocks() * 512;
    assert!(
        blocks < 1 << 20,
        "a 16 MiB region with 3 pages in use takes {blocks} bytes"
    );
    drop(r);
    let b = Region::open(&dst, Options::default()).unwrap();
    let v = b.view().unwrap();
    for p in [3, 2000, 4095] {
        assert_eq!(read_page(&v, p), (p + 1, p + 1), "page {p}");
    }
    assert_eq!(read_page(&v, 4), (0, 0));
}

#[test]
fn a_backup_refuses_an_existing_destination() {
    let d = ext4_dir("backup-exists");
    let src = d.join("src.txm");
    let r = Region::create(&src, 16 * PAGE, Options::default()).unwrap();
    let e = r.backup(&src).unwrap_err();
    assert!(
        matches!(&e, txmap::Error::Exists { path, .. } if *path == src),
        "{e}"
    );
    std::fs::write(txmap::log_path(&d.join("other.txm")), b"x").unwrap();
    let e = r.backup(&d.join("other.txm")).unwrap_err();
    assert!(matches!(e, txmap::Error::Exists { .. }), "{e}");
    assert!(
        e.to_string().contains("other.txm-log already exists"),
        "{e}"
    );
}

/// Child: arms a crash point and takes a backup of `TXMAP_SRC` to `TXMAP_DST`.
#[test]
fn backup_child() {
    if role().as_deref() != Some("backup") {
        return;
    }
    let point: u32 = std::env::var("TXMAP_POINT").unwrap().parse().unwrap();
    let nth: u64 = std::env::var("TXMAP_NTH").unwrap().parse().unwrap();
    let r = Region::open(
        std::path::Path::new(&std::env::var("TXMAP_SRC").unwrap()),
        Options::default(),
    )
    .unwrap();
    txmap::debug::crash_at(CrashPoint::from_u32(point).unwrap(), nth);
    let _ = r.backup(std::path::Path::new(&std::env::var("TXMAP_DST").unwrap()));
    eprintln!("backup finished without reaching its crash point");
}

#[test]
fn a_backup_killed_at_any_point_leaves_the_source_intact_and_no_region_at_dst() {
    let d = ext4_dir("backup-killed");
    let src = d.join("src.txm");
    let dst = d.join("dst.txm");
    // Three batches of 16 MiB.
    let r = Region::create(&src, 3 * 4096 * PAGE, Options::default()).unwrap();
    let mut v = r.view().unwrap();
    for p in (0..3 * 4096).step_by(12) {
        stamp(&mut v, p, p + 7);
    }
    let last = r.stats().commit_seq;
    drop(v);
    r.close().unwrap();
    for (point, nth) in [
        (CrashPoint::BackupCopying, 1),
        (CrashPoint::BackupCopying, 2),
        (CrashPoint::BackupPlacing, 1),
    ] {
        let status = child(
            "backup_child",
            "backup",
            &[
                ("TXMAP_POINT", (point as u32).to_string()),
                ("TXMAP_NTH", nth.to_string()),
                ("TXMAP_SRC", src.display().to_string()),
                ("TXMAP_DST", dst.display().to_string()),
            ],
        )
        .status()
        .unwrap();
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(status.signal(), Some(9), "{point:?}: killed");
        assert!(!dst.exists(), "{point:?}: no region at the destination");
        let leftovers = std::fs::read_dir(d.path())
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().contains(".backup-"))
            .count();
        assert!(
            leftovers > 0,
            "{point:?}: the dead backup's files are under temporary names"
        );
        let c = check(&src).unwrap();
        assert!(c.is_sound(), "{point:?}: {c:?}");
        assert_eq!(c.report.last_seq, last);
    }
    // The next backup cleans up the dead one's files and succeeds.
    let r = Region::open(&src, Options::default()).unwrap();
    let rep = r.backup(&dst).unwrap();
    assert_eq!(rep.commit, last);
    drop(r);
    let leftovers: Vec<_> = std::fs::read_dir(d.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".backup-"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
    let b = Region::open(&dst, Options::default()).unwrap();
    let v = b.view().unwrap();
    for p in [0, 4092, 3 * 4096 - 12] {
        assert_eq!(read_page(&v, p), (p + 7, p + 7));
    }
}

#[test]
fn a_full_backup_allocates_zero_pages_without_leaving_holes() {
    let d = ext4_dir("backup-full-zeros");
    let src = d.join("src.txm");
    let dst = d.join("dst.txm");
    let r = Region::create(&src, 4096 * PAGE, Options::default()).unwrap();
    let mut v = r.view().unwrap();
    for p in [3, 2000, 2001, 4095] {
        stamp(&mut v, p, p + 1);
    }
    drop(v);
    let rep = r.backup(&dst).unwrap();
    assert_eq!(rep.pages_written, 4, "zero pages are not written");
    // Every block allocated, as a region's must be (ext4's SEEK_HOLE
    // reports allocated blocks never written as holes, so count them).
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(&dst).unwrap();
    assert_eq!(m.len(), 4097 * PAGE);
    assert!(
        m.blocks() * 512 >= 4097 * PAGE,
        "{} bytes allocated",
        m.blocks() * 512
    );
    drop(r);
    let b = Region::open(&dst, Options::default()).unwrap();
    let v = b.view().unwrap();
    for p in [3, 2000, 2001, 4095] {
        assert_eq!(read_page(&v, p), (p + 1, p + 1), "page {p}");
    }
    for p in [0, 4, 1999, 2002, 4094] {
        assert_eq!(read_page(&v, p), (0, 0), "page {p}");
    }
    let c = check(&dst).unwrap();
    assert!(c.is_sound(), "{c:?}");
}
