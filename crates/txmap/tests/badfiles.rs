//! Bad input gets a clear error naming what and where, and loses nothing.
mod common;

use std::path::{Path, PathBuf};

use common::*;
use txmap::{Error, Options, Region, log_path};

const PAGE: u64 = 4096;

/// A region with `n` durable commits still in its log: the files are copied
/// while the region is open, as a crash would leave them.
fn region_with_log(d: &TestDir, name: &str, n: u64) -> PathBuf {
    let live = d.join(&format!("{name}-live.txm"));
    let copy = d.join(&format!("{name}.txm"));
    let r = Region::create(&live, 4 * PAGE, Options::default()).unwrap();
    let mut v = r.view().unwrap();
    for i in 1..=n {
        v.run(|v| v.write(i * 8, &i)).unwrap();
    }
    copy_region(&live, &copy);
    copy
}

fn files(p: &Path) -> (Vec<u8>, Vec<u8>) {
    (
        std::fs::read(p).unwrap(),
        std::fs::read(log_path(p)).unwrap(),
    )
}

#[test]
fn a_copied_log_recovers_every_commit() {
    let d = ext4_dir("copied");
    let p = region_with_log(&d, "r", 20);
    static LAST: std::sync::Mutex<Option<(u64, u64)>> = std::sync::Mutex::new(None);
    fn progress(done: u64, total: u64) {
        *LAST.lock().unwrap() = Some((done, total));
    }
    let o = Options {
        on_recovery_progress: Some(progress),
        ..Options::default()
    };
    let r = Region::open(&p, o).unwrap();
    assert_eq!(r.stats().recovered_commits, 20);
    assert_eq!(
        *LAST.lock().unwrap(),
        Some((20, 20)),
        "progress reports the end of replay"
    );
    let mut v = r.view().unwrap();
    v.begin_read().unwrap();
    for i in 1..=20u64 {
        assert_eq!(v.read::<u64>(i * 8).unwrap(), i);
    }
    v.commit().unwrap();
}

#[test]
fn a_damaged_durable_record_is_an_error_naming_offset_and_record_and_changes_nothing() {
    let d = ext4_dir("midlog");
    let p = region_with_log(&d, "r", 10);
    let mut log = std::fs::read(log_path(&p)).unwrap();
    let third = 4096 + 2 * 80; // each record: 40-byte header, its time, 12-byte payload head, 12 + 8 bytes of range
    log[third + 50] ^= 0x40;
    std::fs::write(log_path(&p), &log).unwrap();
    let before = files(&p);
    let e = Region::open(&p, Options::default())
        .err()
        .expect("must refuse");
    let msg = e.to_string();
    assert!(
        matches!(e, Error::Corrupt { offset, .. } if offset == third as u64),
        "{msg}"
    );
    assert!(msg.contains("-log") && msg.contains("record 3"), "{msg}");
    assert_eq!(files(&p), before, "a failed open must not modify the files");
}

#[test]
fn a_torn_last_record_is_ignored() {
    let d = ext4_dir("tornlast");
    let p = region_with_log(&d, "r", 5);
    let mut log = std::fs::read(log_path(&p)).unwrap();
    let last = 4096 + 4 * 72;
    log[last + 60] ^= 1;
    std::fs::write(log_path(&p), &log).unwrap();
    let r = Region::open(&p, Options::default()).unwrap();
    assert_eq!(r.stats().recovered_commits, 4);
}

#[test]
fn garbage_and_truncated_files_are_refused_clearly() {
    let d = ext4_dir("garbage");
    let p = region_with_log(&d, "g", 1);
    std::fs::write(&p, vec![0x5a; 3 * PAGE as usize]).unwrap();
    let msg = Region::open(&p, Options::default())
        .err()
        .unwrap()
        .to_string();
    assert!(
        msg.contains("not a txmap file") && msg.contains("g.txm"),
        "{msg}"
    );

    let p = region_with_log(&d, "t", 1);
    let f = std::fs::OpenOptions::new().write(true).open(&p).unwrap();
    f.set_len(2 * PAGE).unwrap();
    let msg = Region::open(&p, Options::default())
        .err()
        .unwrap()
        .to_string();
    assert!(msg.contains("truncated"), "{msg}");

    let p = region_with_log(&d, "empty", 1);
    std::fs::write(log_path(&p), b"").unwrap();
    let msg = Region::open(&p, Options::default())
        .err()
        .unwrap()
        .to_string();
    assert!(msg.contains("log shorter than its header"), "{msg}");
}

#[test]
fn a_log_from_another_region_is_refused() {
    let d = ext4_dir("swap");
    let a = region_with_log(&d, "a", 2);
    let b = region_with_log(&d, "b", 2);
    std::fs::copy(log_path(&b), log_path(&a)).unwrap();
    let msg = Region::open(&a, Options::default())
        .err()
        .unwrap()
        .to_string();
    assert!(msg.contains("log belongs to region"), "{msg}");
}

#[test]
fn missing_files_and_bad_arguments_give_clear_errors() {
    let d = ext4_dir("args");
    let missing = d.join("nope.txm");
    let msg = Region::open(&missing, Options::default())
        .err()
        .unwrap()
        .to_string();
    assert!(
        msg.contains("nope.txm") && msg.contains("No such file"),
        "{msg}"
    );
    for size in [0, 100, 4097] {
        let msg = Region::create(&d.join("x.txm"), size, Options::default())
            .err()
            .unwrap()
            .to_string();
        assert!(msg.contains("multiple of the page size"), "{size}: {msg}");
    }
    let small = Options {
        max_size: 1 << 20,
        ..Options::default()
    };
    let msg = Region::create(&d.join("big.txm"), 2 << 20, small)
        .err()
        .unwrap()
        .to_string();
    assert!(msg.contains("max_size"), "{msg}");
    let p = d.join("r.txm");
    let r = Region::create(&p, PAGE, Options::default()).unwrap();
    let msg = Region::create(&p, PAGE, Options::default())
        .err()
        .unwrap()
        .to_string();
    assert!(msg.contains("already exists"), "{msg}");
    // A second handle on an open region must agree with its durability mode.
    let async_opts = Options {
        durability: txmap::Durability::Async,
        ..Options::default()
    };
    let msg = Region::open(&p, async_opts).err().unwrap().to_string();
    assert!(
        msg.contains("open in Durable mode by another process"),
        "{msg}"
    );
    std::fs::remove_file(log_path(&p)).unwrap();
    let mut v = r.view().unwrap();
    assert!(v.commit().is_err(), "commit outside a transaction");
    v.begin().unwrap();
    assert!(v.read::<u64>(PAGE - 4).is_err(), "read past the end");
    assert!(v.slice_mut(u64::MAX - 2, 8).is_err(), "overflowing range");
    v.commit().unwrap();
    drop((v, r));
    let msg = Region::open(&p, Options::default())
        .err()
        .unwrap()
        .to_string();
    assert!(msg.contains("log file is missing"), "{msg}");
}

#[test]
fn random_bytes_never_panic_the_opener() {
    let d = ext4_dir("fuzz");
    let base = region_with_log(&d, "f", 6);
    let (region, log) = files(&base);
    let mut rng = txmap::io::sim::SplitMix(3);
    for round in 0..300 {
        let (mut r, mut l) = (region.clone(), log.clone());
        let target = if round % 2 == 0 { &mut l } else { &mut r };
        let limit = if round % 4 < 2 {
            4096 + 600
        } else {
            target.len()
        };
        for _ in 0..1 + rng.next() % 8 {
            let i = (rng.next() as usize) % limit.min(target.len());
            target[i] = rng.next() as u8;
        }
        if rng.next().is_multiple_of(5) {
            let n = (rng.next() as usize) % target.len();
            target.truncate(n);
        }
        let p = d.join(&format!("case{round}.txm"));
        std::fs::write(&p, &r).unwrap();
        std::fs::write(log_path(&p), &l).unwrap();
        // Either a clean open or a typed error; a panic fails the test.
        if let Ok(reg) = Region::open(&p, Options::default()) {
            let mut v = reg.view().unwrap();
            v.begin_read().unwrap();
            let _ = v
                .slice(0, v.len())
                .unwrap()
                .iter()
                .map(|&b| b as u64)
                .sum::<u64>();
            v.commit().unwrap();
        }
        let _ = std::fs::remove_file(&p);
        let _ = std::fs::remove_file(log_path(&p));
    }
}

/// A FIFO (or other special file) named as a region is refused at once by
/// `open`, `inspect` and `check` (opening one used to wait for a writer).
#[test]
fn a_fifo_is_refused_without_blocking() {
    let d = ext4_dir("fifo");
    let p = d.join("pipe.txm");
    let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let (tx, rx) = std::sync::mpsc::channel();
    let q = p.clone();
    std::thread::spawn(move || {
        let open = Region::open(&q, Options::default())
            .err()
            .map(|e| e.to_string());
        let info = txmap::inspect::inspect(&q).err().map(|e| e.to_string());
        let check = txmap::inspect::check(&q).err().map(|e| e.to_string());
        let _ = tx.send((open, info, check));
    });
    // A liveness bound, not a timing assertion: before, this never returned.
    let (open, info, check) = rx
        .recv_timeout(std::time::Duration::from_secs(60))
        .expect("opening a FIFO blocked");
    for e in [open, info, check] {
        let e = e.expect("a FIFO was accepted as a region");
        assert!(e.contains("not a regular file"), "{e}");
    }
}

/// A file that is not a region at all (and has no log) is named as such,
/// not as a region whose log is missing.
#[test]
fn a_file_that_is_not_a_region_says_so() {
    let d = ext4_dir("notregion");
    let p = d.join("notes.txt");
    std::fs::write(&p, b"shopping list: apples, pears\n".repeat(400)).unwrap();
    let e = Region::open(&p, Options::default())
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("is not a txmap region"), "{e}");
}

/// Where `renameat2(RENAME_NOREPLACE)` is missing (NFS), create falls back
/// to a hard link, which never replaces either.
#[test]
fn create_works_without_rename_noreplace() {
    let d = ext4_dir("norename2");
    let p = d.join("r.txm");
    txmap::debug::no_rename_noreplace(true);
    let made = Region::create(&p, 4 * 4096, Options::default());
    let again = Region::create(&p, 4 * 4096, Options::default()).err();
    txmap::debug::no_rename_noreplace(false);
    let r = made.unwrap();
    let mut v = r.view().unwrap();
    v.run(|v| v.write(0, &3u64)).unwrap();
    assert!(again.unwrap().to_string().contains("already exists"));
    let names: Vec<_> = std::fs::read_dir(d.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(!names.iter().any(|n| n.contains(".creating-")), "{names:?}");
}
