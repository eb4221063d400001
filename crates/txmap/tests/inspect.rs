//! Read-only inspection (`txmap::inspect`): reports on live and closed
//! regions, and checks that find damage done by hand.

mod common;

use common::*;

use txmap::inspect::{check, inspect};
use txmap::wal::format::{HEADER_BYTES, LogHeader, RegionHeader, SLOT_OFFSETS};
use txmap::{Error, Options, Region, log_path};

const PAGE: u64 = 4096;

fn corrupt_offset(e: &Error) -> u64 {
    match e {
        Error::Corrupt { offset, .. } => *offset,
        other => panic!("expected a corruption error, got {other:?}"),
    }
}

#[test]
fn inspect_fresh_region_reports_its_size_and_nothing_else() {
    let d = ext4_dir("inspect-fresh");
    let p = d.join("r.txm");
    drop(Region::create(&p, 64 * PAGE, Options::default()).unwrap());
    let r = inspect(&p).unwrap();
    assert_eq!(r.data_size, 64 * PAGE);
    assert_eq!(r.pages(), 64);
    assert_eq!(r.file_len, HEADER_BYTES + 64 * PAGE);
    assert_eq!((r.format_version, r.page_size), (2, 4096));
    assert_eq!((r.checkpoint_seq, r.last_seq, r.log_records), (0, 0, 0));
    assert_eq!(r.log_start_seq, 1);
    assert_eq!(r.pages_in_use, 0);
    assert_eq!(r.log_bytes_used, 0);
    assert!(!r.needs_recovery);
    assert_eq!(r.torn_tail, None);
    assert!(r.open_by.is_empty());
    let c = check(&p).unwrap();
    assert!(c.is_sound(), "{c:?}");
    assert!(c.warnings.is_empty(), "{:?}", c.warnings);
}

#[test]
fn inspect_live_region_shows_logged_commits_then_checkpointed_pages() {
    let d = ext4_dir("inspect-live");
    let p = d.join("r.txm");
    let region = Region::create(&p, 16 * PAGE, Options::default()).unwrap();
    commit_n(&region, 3);
    // the region stays open: inspect takes no lock and writes nothing
    let r = inspect(&p).unwrap();
    assert_eq!(r.log_records, 3);
    assert_eq!(r.last_seq, 3);
    assert_eq!(r.checkpoint_seq, 0);
    assert!(r.needs_recovery);
    assert_eq!(r.pending_commits, 3);
    assert_eq!(r.pages_in_use, 0, "nothing checkpointed yet");
    assert!(r.log_bytes_used > 0);
    assert_eq!(r.open_by, vec![std::process::id()]);
    let before = (
        std::fs::read(&p).unwrap(),
        std::fs::read(log_path(&p)).unwrap(),
    );
    let c = check(&p).unwrap();
    assert!(c.is_sound(), "{c:?}");
    assert_eq!(
        before,
        (
            std::fs::read(&p).unwrap(),
            std::fs::read(log_path(&p)).unwrap()
        ),
        "inspection changed the files"
    );

    region.checkpoint().unwrap();
    let r = inspect(&p).unwrap();
    assert_eq!((r.checkpoint_seq, r.last_seq, r.log_records), (3, 3, 0));
    assert_eq!(r.log_start_seq, 4);
    assert_eq!(r.pages_in_use, 3);
    assert!(!r.needs_recovery);

    let mut v = region.view().unwrap();
    v.begin().unwrap();
    v.write(8, &99u64).unwrap();
    v.commit().unwrap();
    drop(v);
    drop(region);
    let r = inspect(&p).unwrap();
    assert_eq!((r.checkpoint_seq, r.last_seq, r.log_records), (4, 4, 0));
    assert!(r.open_by.is_empty());
    assert!(check(&p).unwrap().is_sound());
}

#[test]
fn inspect_a_copy_taken_while_open_needs_recovery_and_recovers() {
    let d = ext4_dir("inspect-copy");
    let (a, b) = (d.join("a.txm"), d.join("b.txm"));
    let region = Region::create(&a, 8 * PAGE, Options::default()).unwrap();
    commit_n(&region, 2);
    copy_region(&a, &b);
    let c = check(&b).unwrap();
    assert!(c.is_sound(), "{c:?}");
    assert!(c.report.needs_recovery);
    assert!(c.report.open_by.is_empty());
    assert!(
        c.warnings.iter().any(|w| w.contains("recovery is pending")),
        "{:?}",
        c.warnings
    );
    let rb = Region::open(&b, Options::default()).unwrap();
    assert_eq!(rb.stats().recovered_commits, 2);
    drop(rb);
    let r = inspect(&b).unwrap();
    assert_eq!((r.checkpoint_seq, r.log_records, r.pages_in_use), (2, 0, 2));
    assert!(!r.needs_recovery);
}

#[test]
fn inspect_damage_in_the_middle_of_the_log_is_reported_at_its_offset() {
    let d = ext4_dir("inspect-midlog");
    let (a, b) = (d.join("a.txm"), d.join("b.txm"));
    let region = Region::create(&a, 8 * PAGE, Options::default()).unwrap();
    commit_n(&region, 5);
    copy_region(&a, &b);
    let offs = record_offsets(&log_path(&b));
    assert_eq!(offs.len(), 5);
    flip(&log_path(&b), offs[2] + 40);
    let c = check(&b).unwrap();
    assert!(!c.is_sound());
    let p = &c.problems[0];
    assert!(p.contains(&format!("offset {}", offs[2])), "{p}");
    assert!(p.contains("record 3"), "{p}");
    assert_eq!(c.report.log_records, 2, "records before the damage");
    let e = inspect(&b).unwrap_err();
    assert_eq!(corrupt_offset(&e), offs[2]);
    // recovery refuses it the same way
    let e = Region::open(&b, Options::default()).err().unwrap();
    assert_eq!(corrupt_offset(&e), offs[2]);
}

#[test]
fn inspect_a_torn_last_record_is_a_warning() {
    let d = ext4_dir("inspect-torn");
    let (a, b) = (d.join("a.txm"), d.join("b.txm"));
    let region = Region::create(&a, 8 * PAGE, Options::default()).unwrap();
    commit_n(&region, 3);
    copy_region(&a, &b);
    let offs = record_offsets(&log_path(&b));
    flip(&log_path(&b), offs[2] + 40);
    let c = check(&b).unwrap();
    assert!(c.is_sound(), "{c:?}");
    let r = &c.report;
    assert_eq!((r.log_records, r.last_seq), (2, 2));
    assert_eq!(r.log_bytes_used, offs[2] - HEADER_BYTES);
    let t = r.torn_tail.as_deref().unwrap();
    assert!(t.contains(&format!("offset {}", offs[2])), "{t}");
    assert!(
        c.warnings.iter().any(|w| w.contains("torn")),
        "{:?}",
        c.warnings
    );
    assert!(inspect(&b).is_ok());
}

#[test]
fn inspect_damage_in_an_unsynced_batch_ends_the_log_with_a_warning() {
    let d = ext4_dir("inspect-batch");
    let (a, b) = (d.join("a.txm"), d.join("b.txm"));
    let opts = Options {
        durability: txmap::Durability::Async,
        async_sync_interval: std::time::Duration::from_secs(3600),
        ..Options::default()
    };
    let region = Region::create(&a, 8 * PAGE, opts).unwrap();
    commit_n(&region, 5); // written to the OS, none synced
    copy_region(&a, &b);
    let offs = record_offsets(&log_path(&b));
    assert_eq!(offs.len(), 5);
    flip(&log_path(&b), offs[1] + 44);
    let c = check(&b).unwrap();
    assert!(c.is_sound(), "{c:?}");
    assert_eq!(c.report.log_records, 1);
    let t = c.report.torn_tail.as_deref().unwrap();
    assert!(t.contains(&format!("offset {}", offs[1])), "{t}");
    assert!(t.contains("3 later record(s)"), "{t}");
    let rb = Region::open(&b, Options::default()).unwrap();
    assert_eq!(rb.stats().recovered_commits, 1);
}

#[test]
fn inspect_a_truncated_region_file_is_an_error() {
    let d = ext4_dir("inspect-trunc");
    let p = d.join("r.txm");
    drop(Region::create(&p, 8 * PAGE, Options::default()).unwrap());
    let f = std::fs::OpenOptions::new().write(true).open(&p).unwrap();
    f.set_len(HEADER_BYTES + 3 * PAGE).unwrap();
    drop(f);
    let e = inspect(&p).unwrap_err();
    assert_eq!(corrupt_offset(&e), HEADER_BYTES + 3 * PAGE);
    assert!(e.to_string().contains("truncated"), "{e}");
    let c = check(&p).unwrap();
    assert!(!c.is_sound());
    assert!(c.problems[0].contains("truncated"), "{:?}", c.problems);
    // shorter than the header page: no report at all
    std::fs::OpenOptions::new()
        .write(true)
        .open(&p)
        .unwrap()
        .set_len(100)
        .unwrap();
    assert_eq!(corrupt_offset(&check(&p).unwrap_err()), 100);
}

#[test]
fn inspect_swapped_logs_are_an_id_mismatch() {
    let d = ext4_dir("inspect-swap");
    let (a, b) = (d.join("a.txm"), d.join("b.txm"));
    drop(Region::create(&a, 4 * PAGE, Options::default()).unwrap());
    drop(Region::create(&b, 4 * PAGE, Options::default()).unwrap());
    let tmp = d.join("t");
    std::fs::rename(log_path(&a), &tmp).unwrap();
    std::fs::rename(log_path(&b), log_path(&a)).unwrap();
    std::fs::rename(&tmp, log_path(&b)).unwrap();
    for p in [&a, &b] {
        let e = inspect(p).unwrap_err();
        assert!(e.to_string().contains("log belongs to region"), "{e}");
        let c = check(p).unwrap();
        assert!(!c.is_sound());
        assert!(
            c.problems[0].contains("belongs to region"),
            "{:?}",
            c.problems
        );
    }
}

#[test]
fn inspect_a_damaged_header_slot_is_a_warning_and_both_are_an_error() {
    let d = ext4_dir("inspect-slot");
    let p = d.join("r.txm");
    drop(Region::create(&p, 4 * PAGE, Options::default()).unwrap());
    let h = inspect(&p).unwrap();
    let used = SLOT_OFFSETS[(h.region_header_generation % 2) as usize] as u64;
    flip(&p, used + 20);
    let c = check(&p).unwrap();
    assert!(c.is_sound(), "{c:?}");
    assert_eq!(
        c.report.region_header_generation,
        h.region_header_generation - 1
    );
    assert!(
        c.warnings
            .iter()
            .any(|w| w.contains(&format!("header slot at offset {used}"))),
        "{:?}",
        c.warnings
    );
    let other = SLOT_OFFSETS[((h.region_header_generation + 1) % 2) as usize] as u64;
    flip(&p, other + 20);
    let e = check(&p).unwrap_err();
    assert!(e.to_string().contains("checksum"), "{e}");
}

#[test]
fn inspect_a_log_that_starts_after_the_checkpoint_is_missing_commits() {
    let d = ext4_dir("inspect-gap");
    let p = d.join("r.txm");
    drop(Region::create(&p, 4 * PAGE, Options::default()).unwrap());
    let bytes = std::fs::read(log_path(&p)).unwrap();
    let lh = LogHeader::decode(&bytes[..HEADER_BYTES as usize]).unwrap();
    let next = LogHeader {
        generation: lh.generation + 1,
        start_seq: 10,
        ..lh
    };
    let (off, slot) = next.encode();
    let mut bytes = bytes;
    bytes[off as usize..off as usize + 64].copy_from_slice(&slot);
    std::fs::write(log_path(&p), bytes).unwrap();
    let c = check(&p).unwrap();
    assert!(!c.is_sound());
    assert!(
        c.problems[0].contains("commits are missing"),
        "{:?}",
        c.problems
    );
    assert!(inspect(&p).is_err());
}

#[test]
fn inspect_a_region_header_with_an_impossible_size_is_a_problem() {
    let d = ext4_dir("inspect-size");
    let p = d.join("r.txm");
    drop(Region::create(&p, 4 * PAGE, Options::default()).unwrap());
    let page = std::fs::read(&p).unwrap();
    let h = RegionHeader::decode(&page[..HEADER_BYTES as usize]).unwrap();
    let bad = RegionHeader {
        generation: h.generation + 1,
        data_size: 1000,
        ..h
    };
    let (off, slot) = bad.encode();
    let mut page = page;
    page[off as usize..off as usize + 64].copy_from_slice(&slot);
    std::fs::write(&p, page).unwrap();
    let c = check(&p).unwrap();
    assert!(
        c.problems
            .iter()
            .any(|x| x.contains("multiple of the page size")),
        "{:?}",
        c.problems
    );
}

#[test]
fn inspect_bad_inputs_are_errors_not_panics() {
    let d = ext4_dir("inspect-bad");
    let io = |e: Error| assert!(matches!(e, Error::Io { .. }), "{e:?}");
    let corrupt = |e: Error| assert!(matches!(e, Error::Corrupt { .. }), "{e:?}");
    // missing file, directory
    io(inspect(&d.join("none")).unwrap_err());
    io(check(&d.0).unwrap_err());
    // a region without its log
    let p = d.join("r.txm");
    drop(Region::create(&p, 4 * PAGE, Options::default()).unwrap());
    let log = std::fs::read(log_path(&p)).unwrap();
    std::fs::remove_file(log_path(&p)).unwrap();
    let e = inspect(&p).unwrap_err();
    assert!(e.to_string().contains("log file is missing"), "{e}");
    io(e);
    // the log named instead of the region
    std::fs::write(log_path(&p), &log).unwrap();
    let e = inspect(&log_path(&p)).unwrap_err();
    assert!(e.to_string().contains("log file"), "{e}");
    // empty, short and random files, as region or as log
    let mut seed = 0x1234_5678_9abc_def0_u64;
    let mut random = |n: usize| {
        (0..n)
            .map(|_| {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                seed as u8
            })
            .collect::<Vec<u8>>()
    };
    let good = std::fs::read(&p).unwrap();
    for junk in [
        vec![],
        vec![0; 10],
        random(100),
        random(8192),
        vec![0; 8192],
    ] {
        std::fs::write(&p, &junk).unwrap();
        corrupt(inspect(&p).unwrap_err());
        corrupt(check(&p).unwrap_err());
        std::fs::write(&p, &good).unwrap();
        std::fs::write(log_path(&p), &junk).unwrap();
        corrupt(inspect(&p).unwrap_err());
        corrupt(check(&p).unwrap_err());
        std::fs::write(log_path(&p), &log).unwrap();
    }
    // random record bytes after a valid log header: a bounded scan, no panic
    let mut l = log.clone();
    l.extend(random(1 << 16));
    std::fs::write(log_path(&p), &l).unwrap();
    let _ = check(&p).unwrap();
    std::fs::write(log_path(&p), &log).unwrap();
    assert!(check(&p).unwrap().is_sound());
}

#[test]
fn inspect_checks_stay_sound_while_another_thread_commits_and_checkpoints() {
    let d = ext4_dir("inspect-concurrent");
    let p = d.join("r.txm");
    let opts = Options {
        checkpoint_bytes: 2000, // a checkpoint and log reset every few commits
        ..Options::default()
    };
    let region = Region::create(&p, 32 * PAGE, opts).unwrap();
    let writer = {
        let region = region.clone();
        std::thread::spawn(move || {
            let mut v = region.view().unwrap();
            for i in 0..1500u64 {
                v.begin().unwrap();
                v.write((i % 32) * PAGE + (i % 500) * 8, &(i + 1)).unwrap();
                v.commit().unwrap();
            }
        })
    };
    let mut checks = 0;
    while !writer.is_finished() || checks == 0 {
        let c = check(&p).unwrap();
        assert!(c.problems.is_empty(), "{:?}", c.problems);
        assert!(c.report.last_seq >= c.report.checkpoint_seq);
        checks += 1;
    }
    writer.join().unwrap();
    eprintln!("{checks} checks during 1500 commits");
    let r = inspect(&p).unwrap();
    assert_eq!(r.last_seq, 1500);
}

#[test]
fn inspect_shows_the_live_snapshots_of_processes_that_have_the_region_open() {
    let d = ext4_dir("inspect-snapshots");
    let p = d.join("r.txm");
    let region = Region::create(&p, 16 * PAGE, Options::default()).unwrap();
    commit_n(&region, 2);
    // A second handle stands for another process: its own mapping of the
    // shared state, its own views.
    let other = Region::open(&p, Options::default()).unwrap();
    let mut reader = other.view().unwrap();
    reader.begin_read().unwrap();
    commit_n(&region, 3);
    let r = inspect(&p).unwrap();
    let live = r.live.expect("the region is open: its live state is shown");
    // commit_n rewrites the same values: only page 2 changes the second time.
    assert_eq!(live.commit_seq, 3);
    assert_eq!(live.snapshots.len(), 1, "{:?}", live.snapshots);
    assert_eq!(
        live.snapshots[0].snapshot, 2,
        "the reader began after commit 2"
    );
    assert_eq!(live.snapshots[0].pid, std::process::id());
    assert_eq!(region.stats().oldest_snapshot, Some(2));
    reader.commit().unwrap();
    assert!(inspect(&p).unwrap().live.unwrap().snapshots.is_empty());
    drop((reader, other, region));
    let r = inspect(&p).unwrap();
    assert!(r.live.is_none() && r.open_by.is_empty());
}
