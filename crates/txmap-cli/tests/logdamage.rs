//! A damaged log is told from a torn one (issue 16, point 4): a real region
//! with 20 durable commits after its checkpoint, left by a process that exited
//! without closing, then one damaged byte in the log header or a log cut
//! inside its synced records. `txmap check` fails naming what is lost,
//! opening refuses without writing, and `txmap recover --accept-loss`
//! recovers what can be recovered and says what it dropped.

mod cmd;
#[path = "../../txmap/tests/common/mod.rs"]
mod common;

use std::path::Path;

use cmd::*;
use common::*;
use txmap::wal::format::{HEADER_BYTES, LogHeader, SLOT_OFFSETS};
use txmap::{Error, Lost, Options, Region, log_path};

const PAGE: u64 = 4096;
const N: u64 = 20;

/// Value `i` of the region: `old` before the child's commits, `new` after.
fn at(i: u64) -> u64 {
    i * PAGE + 8
}

/// If this process is the child: commits `N` durable transactions (the i-th
/// writes `i + 1`) and exits without closing the region.
fn child_role() {
    if role().as_deref() != Some("writer") {
        return;
    }
    let p = std::env::var("TXMAP_PATH").unwrap();
    let r = Region::open(p.as_ref(), Options::default()).unwrap();
    commit_n(&r, N);
    std::mem::forget(r);
    std::process::exit(0);
}

/// A region with `N` commits checkpointed (the i-th wrote `1000 + i`), then
/// `N` durable commits in the log only (seq N+1 ..= 2N), made by a process
/// that exited without closing.
fn region_with_commits_after_checkpoint(d: &TestDir, test: &str) -> std::path::PathBuf {
    let p = d.join("r.txm");
    let r = Region::create(&p, 32 * PAGE, Options::default()).unwrap();
    let mut v = r.view().unwrap();
    for i in 0..N {
        v.run(|v| v.write(at(i), &(1000 + i))).unwrap();
    }
    drop(v);
    r.close().unwrap();
    let st = child(test, "writer", &[("TXMAP_PATH", p.display().to_string())])
        .status()
        .unwrap();
    assert!(st.success(), "writer child failed");
    p
}

fn values(p: &Path) -> Vec<u64> {
    let r = Region::open(p, Options::default()).unwrap();
    let mut v = r.view().unwrap();
    v.begin().unwrap();
    let out = (0..N).map(|i| v.read::<u64>(at(i)).unwrap()).collect();
    v.commit().unwrap();
    out
}

fn files(p: &Path) -> (Vec<u8>, Vec<u8>) {
    (
        std::fs::read(p).unwrap(),
        std::fs::read(log_path(p)).unwrap(),
    )
}

/// Opening fails with `Error::Corrupt` on the log, naming the lost commits,
/// and changes neither file.
fn open_refuses(p: &Path) -> (u64, Lost) {
    let before = files(p);
    let e = Region::open(p, Options::default())
        .err()
        .expect("open refuses");
    let (offset, lost) = match &e {
        Error::Corrupt {
            path,
            offset,
            lost: Some(lost),
            ..
        } if path == &log_path(p) => (*offset, *lost),
        other => panic!("not a typed log damage: {other:?}"),
    };
    let msg = e.to_string();
    assert!(msg.contains("--accept-loss"), "{msg}");
    assert!(files(p) == before, "a refused open wrote to the files");
    (offset, lost)
}

#[test]
fn one_damaged_byte_in_the_live_log_header_slot_is_an_error_not_a_silent_loss() {
    child_role();
    let d = ext4_dir("logdmg-header");
    let p = region_with_commits_after_checkpoint(
        &d,
        "one_damaged_byte_in_the_live_log_header_slot_is_an_error_not_a_silent_loss",
    );
    let lp = log_path(&p);
    // Damage the live slot, as `printf '\xff' | dd seek=10` does in the issue.
    let log = std::fs::read(&lp).unwrap();
    let h = LogHeader::decode(&log[..HEADER_BYTES as usize]).unwrap();
    let live = SLOT_OFFSETS[(h.generation % 2) as usize];
    let mut bad = log.clone();
    bad[live + 10] = 0xff;
    std::fs::write(&lp, &bad).unwrap();

    let o = txmap(&["check", p.to_str().unwrap()]);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(1), "check says sound: {out}");
    assert!(out.contains(&lp.display().to_string()), "{out}");
    assert!(out.contains("commits 21..=40 (20) would be lost"), "{out}");

    let (offset, lost) = open_refuses(&p);
    assert_eq!(offset, live as u64);
    assert_eq!(
        lost,
        Lost {
            first: N + 1,
            last: Some(2 * N)
        }
    );
    let o = txmap(&["kv", p.to_str().unwrap(), "get", "a"]);
    assert_ne!(o.status.code(), Some(0), "{}", text(&o));

    // Plain recover refuses too; --accept-loss rebuilds the header from the
    // records and keeps every commit.
    let o = txmap(&["recover", p.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let o = txmap(&["recover", "--accept-loss", p.to_str().unwrap()]);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(0), "{out}");
    assert!(out.contains("damaged log:"), "{out}");
    assert!(out.contains("20 commits replayed"), "{out}");
    assert_eq!(values(&p), (1..=N).collect::<Vec<_>>());
    let o = txmap(&["check", p.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
}

#[test]
fn a_log_truncated_inside_synced_records_is_an_error_not_a_torn_tail() {
    child_role();
    let d = ext4_dir("logdmg-trunc");
    let p = region_with_commits_after_checkpoint(
        &d,
        "a_log_truncated_inside_synced_records_is_an_error_not_a_torn_tail",
    );
    let lp = log_path(&p);
    let recs = record_offsets(&lp);
    assert_eq!(recs.len() as u64, N, "the child's commits are the epoch");
    // Cut inside the 10th record (commit N + 10): every record was synced.
    let cut = recs[9] + 60;
    std::fs::OpenOptions::new()
        .write(true)
        .open(&lp)
        .unwrap()
        .set_len(cut)
        .unwrap();

    let o = txmap(&["check", p.to_str().unwrap()]);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(1), "check says sound: {out}");
    assert!(out.contains(&format!("offset {}", recs[9])), "{out}");
    assert!(
        out.contains("commit 30 and any after it would be lost"),
        "{out}"
    );

    let (offset, lost) = open_refuses(&p);
    assert_eq!(offset, recs[9]);
    assert_eq!(
        lost,
        Lost {
            first: N + 10,
            last: None
        }
    );

    let o = txmap(&["recover", "--accept-loss", p.to_str().unwrap()]);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(0), "{out}");
    assert!(out.contains("dropped anything after it"), "{out}");
    assert!(out.contains("9 commits replayed"), "{out}");
    let want: Vec<u64> = (0..N)
        .map(|i| if i < 9 { i + 1 } else { 1000 + i })
        .collect();
    assert_eq!(values(&p), want);
    let o = txmap(&["check", p.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
}
