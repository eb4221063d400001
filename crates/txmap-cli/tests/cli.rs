//! Runs the built `txmap` binary against regions made with the library.

mod cmd;
#[path = "../../txmap/tests/common/mod.rs"]
mod common;

use cmd::*;
use common::*;

use txmap::{Options, Region, log_path};

const PAGE: u64 = 4096;

#[test]
fn create_then_info_shows_the_size_and_check_is_sound() {
    let d = ext4_dir("cli-create");
    let p = d.join("r.txm");
    let out = succeeds(&txmap(&["create", s(&p), "--size", "64K"]));
    assert!(out.contains("65536 bytes"), "{out}");
    assert!(p.exists() && log_path(&p).exists());
    let info = succeeds(&txmap(&["info", s(&p)]));
    assert!(info.contains("65536 bytes (64 KiB, 16 pages)"), "{info}");
    assert!(info.contains("pages in use:    0 of 16"), "{info}");
    assert!(info.contains("recovery:        not needed"), "{info}");
    let json = succeeds(&txmap(&["info", "--json", s(&p)]));
    assert!(
        json.starts_with('{') && json.trim_end().ends_with('}'),
        "{json}"
    );
    for field in [
        "\"size\":65536",
        "\"pages\":16",
        "\"pages_in_use\":0",
        "\"commits\":0",
        "\"needs_recovery\":false",
        "\"torn_tail\":null",
    ] {
        assert!(json.contains(field), "{field} missing from {json}");
    }
    let check = succeeds(&txmap(&["check", s(&p)]));
    assert!(check.contains("sound"), "{check}");
    assert!(succeeds(&txmap(&["check", "--json", s(&p)])).contains("\"sound\":true"));
    // sizes with other suffixes
    let q = d.join("q.txm");
    succeeds(&txmap(&["create", s(&q), "-s", "2M"]));
    assert!(succeeds(&txmap(&["info", s(&q)])).contains("2097152 bytes"));
}

#[test]
fn check_on_a_corrupted_log_fails_and_names_the_offset() {
    let d = ext4_dir("cli-corrupt");
    let (a, b) = (d.join("a.txm"), d.join("b.txm"));
    let region = Region::create(&a, 16 * PAGE, Options::default()).unwrap();
    commit_n(&region, 4);
    copy_region(&a, &b);
    let offs = record_offsets(&log_path(&b));
    assert_eq!(offs.len(), 4);
    flip(&log_path(&b), offs[1] + 36);
    let o = txmap(&["check", s(&b)]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains(&format!("offset {}", offs[1])), "{out}");
    assert!(out.contains("record 2"), "{out}");
    assert!(out.contains("NOT SOUND"), "{out}");
    let j = stdout(&txmap(&["check", "--json", s(&b)]));
    assert!(j.contains("\"sound\":false"), "{j}");
    // info and recover refuse it, naming the offset too
    let err = fails(&txmap(&["info", s(&b)]), 1);
    assert!(err.contains(&format!("offset {}", offs[1])), "{err}");
    let err = fails(&txmap(&["recover", s(&b)]), 1);
    assert!(err.contains(&format!("offset {}", offs[1])), "{err}");
    // the original, still open, is sound and says who has it open
    assert!(succeeds(&txmap(&["check", s(&a)])).contains("sound"));
    let info = succeeds(&txmap(&["info", s(&a)]));
    assert!(
        info.contains(&format!("open by:         process {}", std::process::id())),
        "{info}"
    );
    assert!(info.contains("not needed while open"), "{info}");
}

#[test]
fn a_torn_last_record_is_only_a_warning() {
    let d = ext4_dir("cli-torn");
    let (a, b) = (d.join("a.txm"), d.join("b.txm"));
    let region = Region::create(&a, 16 * PAGE, Options::default()).unwrap();
    commit_n(&region, 3);
    copy_region(&a, &b);
    let offs = record_offsets(&log_path(&b));
    flip(&log_path(&b), offs[2] + 40);
    let out = succeeds(&txmap(&["check", s(&b)]));
    assert!(out.contains("warning:") && out.contains("torn"), "{out}");
    let info = succeeds(&txmap(&["info", s(&b)]));
    assert!(info.contains("torn tail:"), "{info}");
    assert!(info.contains("commits:         2"), "{info}");
    let out = succeeds(&txmap(&["recover", s(&b)]));
    assert!(out.contains("2 commits replayed"), "{out}");
}

#[test]
fn recover_replays_the_log_of_a_region_left_open() {
    let d = ext4_dir("cli-recover");
    let (a, b) = (d.join("a.txm"), d.join("b.txm"));
    let region = Region::create(&a, 16 * PAGE, Options::default()).unwrap();
    commit_n(&region, 3);
    // b is what a crash with a open would have left
    copy_region(&a, &b);
    drop(region);
    let info = succeeds(&txmap(&["info", s(&b)]));
    assert!(
        info.contains("recovery:        pending: 3 commits"),
        "{info}"
    );
    assert!(succeeds(&txmap(&["info", "--json", s(&b)])).contains("\"needs_recovery\":true"));
    let check = succeeds(&txmap(&["check", s(&b)]));
    assert!(check.contains("recovery is pending"), "{check}");

    let out = succeeds(&txmap(&["recover", s(&b)]));
    assert!(out.contains("3 commits replayed"), "{out}");
    assert!(out.contains("checkpoint at commit 3"), "{out}");
    assert!(succeeds(&txmap(&["check", s(&b)])).contains(": sound"));
    let json = succeeds(&txmap(&["info", "--json", s(&b)]));
    for field in [
        "\"checkpoint_seq\":3",
        "\"commits\":3",
        "\"pages_in_use\":3",
        "\"log_records\":0",
        "\"needs_recovery\":false",
        "\"open_by\":[]",
    ] {
        assert!(json.contains(field), "{field} missing from {json}");
    }
    // a second recovery has nothing to do
    assert!(succeeds(&txmap(&["recover", s(&b)])).contains("0 commits replayed"));
    // the values are there
    let r = Region::open(&b, Options::default()).unwrap();
    let mut v = r.view().unwrap();
    v.begin_read().unwrap();
    for i in 0..3 {
        assert_eq!(v.read::<u64>(i * PAGE + 8).unwrap(), i + 1);
    }
    v.commit().unwrap();
}

#[test]
fn recover_on_a_region_another_process_has_open_joins_it_and_checkpoints() {
    let d = ext4_dir("cli-busy");
    let p = d.join("r.txm");
    let region = Region::create(&p, 4 * PAGE, Options::default()).unwrap();
    let mut v = region.view().unwrap();
    v.begin().unwrap();
    v.write(0, &7u64).unwrap();
    v.commit().unwrap();
    let out = succeeds(&txmap(&["recover", s(&p)]));
    assert!(out.contains("open in another process"), "{out}");
    assert!(out.contains("checkpoint at commit 1"), "{out}");
    assert_eq!(
        region.stats().log_bytes,
        0,
        "the checkpoint emptied the shared log"
    );
    drop((v, region));
    let out = succeeds(&txmap(&["recover", s(&p)]));
    assert!(out.contains("0 commits replayed"), "{out}");
}

#[test]
fn bad_arguments_are_one_line_errors() {
    let d = ext4_dir("cli-args");
    let p = d.join("r.txm");
    let missing = d.join("missing.txm");
    for (args, expect) in [
        (
            vec!["create", s(&p), "--size", "0"],
            "multiple of the page size",
        ),
        (
            vec!["create", s(&p), "--size", "1000"],
            "multiple of the page size",
        ),
        (vec!["create", s(&p), "--size", "12Q"], "suffix"),
        (vec!["create", s(&p), "--size", "lots"], "number"),
        (vec!["create", s(&p)], "--size"),
        (vec!["info", s(&missing)], "No such file"),
        (vec!["check", s(&missing)], "No such file"),
        (vec!["recover", s(&missing)], "No such file"),
        (vec!["info", s(d.path())], "directory"),
        (vec!["info"], "PATH"),
        (vec!["frobnicate"], "frobnicate"),
        (vec![], "missing command"),
        (vec!["info", "--bogus", s(&p)], "--bogus"),
    ] {
        let err = fails(&txmap(&args), 2);
        assert!(err.contains(expect), "{args:?}: {err}");
    }
    assert!(!p.exists(), "a failed create left a file");

    succeeds(&txmap(&["create", s(&p), "--size", "4K"]));
    let err = fails(&txmap(&["create", s(&p), "--size", "4K"]), 2);
    assert!(err.contains("already exists"), "{err}");
    // the log named instead of the region
    let err = fails(&txmap(&["check", s(&log_path(&p))]), 2);
    assert!(err.contains("log file"), "{err}");
    // a missing log
    std::fs::remove_file(log_path(&p)).unwrap();
    let err = fails(&txmap(&["check", s(&p)]), 2);
    assert!(err.contains("log file is missing"), "{err}");
    // garbage where the region should be: damaged (1), one line
    let junk = d.join("junk");
    std::fs::write(&junk, vec![0x5a; 10000]).unwrap();
    std::fs::write(log_path(&junk), vec![0xa5; 5000]).unwrap();
    for cmd in ["info", "check", "recover"] {
        let err = fails(&txmap(&[cmd, s(&junk)]), 1);
        assert!(err.contains("not a txmap file"), "{cmd}: {err}");
    }
    std::fs::write(&junk, []).unwrap();
    let err = fails(&txmap(&["check", s(&junk)]), 1);
    assert!(err.contains("empty"), "{err}");
    // help and version are not errors
    assert!(succeeds(&txmap(&["--help"])).contains("recover"));
    assert!(succeeds(&txmap(&["--version"])).starts_with("txmap "));
}

#[test]
fn info_shows_the_snapshot_limit_and_how_close_the_oldest_reader_is() {
    let d = ext4_dir("cli-limit");
    let p = d.join("r.txm");
    let o = Options {
        snapshot_limit: txmap::SnapshotLimit {
            max_lag: Some(1000),
            max_version_bytes: Some(64 << 20),
        },
        ..Options::default()
    };
    let r = Region::create(&p, 4 * PAGE, o).unwrap();
    let (mut w, mut old) = (r.view().unwrap(), r.view().unwrap());
    w.run(|v| v.write(0, &1u64)).unwrap();
    r.checkpoint().unwrap();
    old.begin_read().unwrap();
    assert_eq!(old.read::<u64>(0).unwrap(), 1);
    for i in 2..=31u64 {
        w.run(|v| v.write(0, &i)).unwrap();
    }
    r.checkpoint().unwrap();
    let info = succeeds(&txmap(&["info", s(&p)]));
    assert!(
        info.contains("snapshot limit:  lag 30 of 1000 commits; versions "),
        "{info}"
    );
    assert!(info.contains(" of 64 MiB; 0 snapshots expired"), "{info}");
    assert!(
        info.contains("oldest: commit 1 (30 commits behind)"),
        "{info}"
    );
    let json = succeeds(&txmap(&["info", "--json", s(&p)]));
    assert!(json.contains("\"max_lag\":1000"), "{json}");
    assert!(json.contains("\"oldest_lag\":30"), "{json}");
    assert!(json.contains("\"lag\":30,\"expired\":false"), "{json}");
    old.commit().unwrap();
}

#[test]
fn info_shows_why_a_region_open_elsewhere_cannot_commit() {
    let d = ext4_dir("cli-poisoned");
    let p = d.join("r.txm");
    let r = Region::create(&p, 4 * PAGE, Options::default()).unwrap();
    let json = succeeds(&txmap(&["info", "--json", s(&p)]));
    assert!(json.contains("\"poisoned\":null"), "{json}");
    let info = succeeds(&txmap(&["info", s(&p)]));
    assert!(!info.lines().any(|l| l.starts_with("poisoned:")), "{info}");
    txmap::debug::poison(&r, "sync log /x: disk on fire");
    let mut v = r.view().unwrap();
    let e = v.run(|v| v.write(0, &1u64)).unwrap_err();
    assert!(matches!(e, txmap::Error::Poisoned(_)), "{e:?}");
    assert_eq!(
        r.stats().poisoned.as_deref(),
        Some("sync log /x: disk on fire")
    );
    let info = succeeds(&txmap(&["info", s(&p)]));
    assert!(
        info.contains("poisoned:        sync log /x: disk on fire (commits fail until every process has closed it)"),
        "{info}"
    );
    let json = succeeds(&txmap(&["info", "--json", s(&p)]));
    assert!(
        json.contains("\"poisoned\":\"sync log /x: disk on fire\""),
        "{json}"
    );
}

/// `txmap clean` keeps the shared state of a region that is open (here,
/// by this test process) and reports what it removed and kept.
#[test]
fn clean_keeps_the_shared_state_of_an_open_region() {
    let d = ext4_dir("cli-clean");
    let p = d.join("r.txm");
    let r = txmap::Region::create(&p, 4096, txmap::Options::default()).unwrap();
    let shm = r.stats().shared_path;
    let out = succeeds(&txmap(&["clean"]));
    assert!(out.contains("kept"), "{out}");
    assert!(!out.contains(&shm.display().to_string()), "{out}");
    assert!(
        shm.exists(),
        "clean removed the shared state of an open region"
    );
}
