//! Isolation: serializable by default, snapshot isolation on request,
//! consistent snapshots for every transaction, read-only transactions never abort.
mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use common::*;
use txmap::{Error, Isolation, Options, Region, TxnOptions, View};

const PAGE: u64 = 4096;

/// Two transactions each read x and y (on different pages) and withdraw from one
/// if x + y covers it. Returns (result of the second commit, x + y afterwards).
fn write_skew(isolation: Isolation) -> (Result<(), Error>, i64) {
    let d = ext4_dir(&format!("skew-{isolation:?}"));
    let r = Region::create(&d.join("r.txm"), 2 * PAGE, Options::default()).unwrap();
    let mut a = r.view().unwrap();
    let mut b = r.view().unwrap();
    a.run(|v| {
        v.write(0, &50i64)?;
        v.write(PAGE, &50i64)
    })
    .unwrap();
    let opts = TxnOptions {
        read_only: false,
        isolation,
    };
    a.begin_with(opts).unwrap();
    b.begin_with(opts).unwrap();
    for v in [&a, &b] {
        assert_eq!(
            v.read::<i64>(0).unwrap() + v.read::<i64>(PAGE).unwrap(),
            100
        );
    }
    a.write(0, &-10i64).unwrap(); // x -= 60
    b.write(PAGE, &-10i64).unwrap(); // y -= 60
    a.commit().unwrap();
    let second = b.commit();
    b.begin_read().unwrap();
    let sum = b.read::<i64>(0).unwrap() + b.read::<i64>(PAGE).unwrap();
    b.commit().unwrap();
    (second, sum)
}

#[test]
fn write_skew_is_prevented_under_serializable() {
    let (second, sum) = write_skew(Isolation::Serializable);
    assert!(matches!(second, Err(Error::Conflict)), "{second:?}");
    assert_eq!(sum, 40);
}

#[test]
fn write_skew_is_allowed_under_snapshot_isolation() {
    let (second, sum) = write_skew(Isolation::Snapshot);
    assert!(second.is_ok(), "{second:?}");
    assert_eq!(sum, -20);
}

#[test]
fn snapshot_isolation_still_rejects_concurrent_writes_to_one_page() {
    let d = ext4_dir("si-ww");
    let r = Region::create(&d.join("r.txm"), PAGE, Options::default()).unwrap();
    let (mut a, mut b) = (r.view().unwrap(), r.view().unwrap());
    a.begin_with(TxnOptions::SNAPSHOT).unwrap();
    b.begin_with(TxnOptions::SNAPSHOT).unwrap();
    a.write(0, &1u8).unwrap();
    b.write(100, &2u8).unwrap(); // other bytes, same page
    a.commit().unwrap();
    assert!(matches!(b.commit(), Err(Error::Conflict)));
}

const ACCOUNTS: u64 = 16;
const TOTAL: i64 = 16_000;

fn account(i: u64) -> u64 {
    i * PAGE + 8 * (i % 7)
}

fn bank(d: &TestDir) -> Region {
    let r = Region::create(&d.join("bank.txm"), ACCOUNTS * PAGE, Options::default()).unwrap();
    r.view()
        .unwrap()
        .run(|v| (0..ACCOUNTS).try_for_each(|i| v.write(account(i), &(TOTAL / ACCOUNTS as i64))))
        .unwrap();
    r
}

fn sum(v: &View) -> i64 {
    (0..ACCOUNTS)
        .map(|i| v.read::<i64>(account(i)).unwrap())
        .sum()
}

/// Transfers between random accounts on several threads while other threads
/// check the total inside their transactions (read-only, serializable and
/// snapshot), including transactions that will abort.
fn invariant_under_load(isolation: Isolation) {
    let d = ext4_dir(&format!("bank-{isolation:?}"));
    let r = bank(&d);
    let torn = Arc::new(AtomicBool::new(false));
    let ro_failures = Arc::new(AtomicU64::new(0));
    let commits = Arc::new(AtomicU64::new(0));
    let mut hs = Vec::new();
    for t in 0..3u64 {
        let (r, torn, commits) = (r.clone(), torn.clone(), commits.clone());
        hs.push(std::thread::spawn(move || {
            let mut v = r.view().unwrap();
            let mut rng = txmap::io::sim::SplitMix(t + 1);
            let opts = TxnOptions {
                read_only: false,
                isolation,
            };
            for _ in 0..300 {
                let (from, to) = (rng.next() % ACCOUNTS, rng.next() % ACCOUNTS);
                let amount = (rng.next() % 50) as i64;
                v.run_with(opts, |v| {
                    if sum(v) != TOTAL {
                        torn.store(true, Ordering::SeqCst);
                    }
                    let a = v.read::<i64>(account(from))?;
                    v.write(account(from), &(a - amount))?;
                    let b = v.read::<i64>(account(to))?;
                    v.write(account(to), &(b + amount))
                })
                .unwrap();
                commits.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    for _ in 0..2 {
        let (r, torn, ro_failures) = (r.clone(), torn.clone(), ro_failures.clone());
        hs.push(std::thread::spawn(move || {
            let mut v = r.view().unwrap();
            for _ in 0..400 {
                v.begin_read().unwrap();
                if sum(&v) != TOTAL {
                    torn.store(true, Ordering::SeqCst);
                }
                if v.commit().is_err() {
                    ro_failures.fetch_add(1, Ordering::SeqCst);
                }
            }
        }));
    }
    for h in hs {
        h.join().unwrap();
    }
    assert!(
        !torn.load(Ordering::SeqCst),
        "a transaction saw a torn snapshot"
    );
    assert_eq!(
        ro_failures.load(Ordering::SeqCst),
        0,
        "read-only transactions never abort"
    );
    assert_eq!(commits.load(Ordering::SeqCst), 900);
    let mut v = r.view().unwrap();
    v.begin_read().unwrap();
    assert_eq!(sum(&v), TOTAL);
    v.commit().unwrap();
}

#[test]
fn bank_invariant_holds_inside_every_serializable_transaction() {
    invariant_under_load(Isolation::Serializable);
}

#[test]
fn bank_invariant_holds_inside_every_snapshot_transaction() {
    invariant_under_load(Isolation::Snapshot);
}

#[test]
fn concurrent_increments_lose_no_update() {
    let d = ext4_dir("incr");
    let r = Region::create(&d.join("r.txm"), PAGE, Options::default()).unwrap();
    let hs: Vec<_> = (0..4)
        .map(|t| {
            let r = r.clone();
            std::thread::spawn(move || {
                let mut v = r.view().unwrap();
                let opts = if t % 2 == 0 {
                    TxnOptions::default()
                } else {
                    TxnOptions::SNAPSHOT
                };
                for _ in 0..250 {
                    v.run_with(opts, |v| {
                        let n: u64 = v.read(64)?;
                        v.write(64, &(n + 1))
                    })
                    .unwrap();
                }
            })
        })
        .collect();
    for h in hs {
        h.join().unwrap();
    }
    let mut v = r.view().unwrap();
    v.begin_read().unwrap();
    assert_eq!(v.read::<u64>(64).unwrap(), 1000);
    v.commit().unwrap();
}

#[test]
fn a_long_reader_keeps_its_snapshot_across_commits_and_checkpoints() {
    let d = ext4_dir("longreader");
    let r = Region::create(&d.join("r.txm"), 4 * PAGE, Options::default()).unwrap();
    let mut reader = r.view().unwrap();
    let mut writer = r.view().unwrap();
    writer.run(|v| v.write(0, &1u64)).unwrap();
    reader.begin_read().unwrap();
    assert_eq!(reader.read::<u64>(0).unwrap(), 1);
    for i in 2..50u64 {
        writer
            .run(|v| {
                v.write(0, &i)?;
                v.write(3 * PAGE, &i)
            })
            .unwrap();
        r.checkpoint().unwrap();
    }
    assert_eq!(r.stats().oldest_snapshot, Some(1));
    assert_eq!(
        reader.read::<u64>(0).unwrap(),
        1,
        "snapshot changed under a reader"
    );
    assert_eq!(
        reader.read::<u64>(3 * PAGE).unwrap(),
        0,
        "first touch after commits must still see the snapshot"
    );
    let s = r.stats();
    assert_eq!(
        (s.log_bytes, s.checkpoint_seq),
        (0, 49),
        "checkpoints pass the reader's snapshot and empty the log"
    );
    assert!(
        s.version_pages <= 4,
        "the reader holds one version per page it may read: {s:?}"
    );
    reader.commit().unwrap();
    r.checkpoint().unwrap();
    let s = r.stats();
    assert_eq!((s.log_bytes, s.version_pages, s.checkpoint_seq), (0, 0, 49));
    reader.begin_read().unwrap();
    assert_eq!(reader.read::<u64>(0).unwrap(), 49);
    reader.commit().unwrap();
}

#[test]
fn superseded_versions_are_freed_without_waiting_for_a_checkpoint() {
    let d = ext4_dir("prune");
    let o = Options {
        checkpoint_bytes: u64::MAX,
        ..Options::default()
    };
    let r = Region::create(&d.join("r.txm"), 2 * PAGE, o).unwrap();
    let mut w = r.view().unwrap();
    for i in 0..500u64 {
        w.run(|v| v.write(8, &i)).unwrap();
    }
    let s = r.stats();
    assert_eq!(s.checkpoint_seq, 0, "no checkpoint ran");
    assert!(
        s.version_pages <= 2,
        "{} versions kept for one page",
        s.version_pages
    );
    // A live reader keeps the versions after its snapshot (a precise policy
    // for long readers is future work); once it ends they are freed again.
    let mut reader = r.view().unwrap();
    let snapshot = r.stats().commit_seq;
    assert_eq!(snapshot, 499, "writing 0 over 0 commits nothing");
    reader.begin_read().unwrap();
    for i in 500..600u64 {
        w.run(|v| v.write(8, &i)).unwrap();
    }
    assert_eq!(reader.read::<u64>(8).unwrap(), 499);
    assert_eq!(r.stats().oldest_snapshot, Some(snapshot));
    reader.commit().unwrap();
    w.run(|v| v.write(8, &600u64)).unwrap();
    assert!(r.stats().version_pages <= 2, "{}", r.stats().version_pages);
}

#[test]
fn concurrent_durable_commits_share_syncs() {
    let d = ext4_dir("group");
    let r = Region::create(&d.join("r.txm"), 8 * PAGE, Options::default()).unwrap();
    let before = r.stats();
    let hs: Vec<_> = (0..8u64)
        .map(|t| {
            let r = r.clone();
            std::thread::spawn(move || {
                let mut v = r.view().unwrap();
                for i in 1..=40u64 {
                    v.run(|v| v.write(t * PAGE, &i)).unwrap();
                }
            })
        })
        .collect();
    for h in hs {
        h.join().unwrap();
    }
    let after = r.stats();
    let commits = after.commit_seq - before.commit_seq;
    let syncs = after.log_syncs - before.log_syncs;
    assert_eq!(commits, 320);
    assert!(
        syncs <= commits,
        "more than one sync per commit: {syncs} for {commits}"
    );
    assert!(
        syncs < commits,
        "no commits shared a sync: {syncs} for {commits}"
    );
}

#[test]
fn async_versions_are_freed_once_synced() {
    let d = ext4_dir("prune-async");
    let o = Options {
        durability: txmap::Durability::Async,
        async_sync_interval: std::time::Duration::from_secs(3600),
        checkpoint_bytes: u64::MAX,
        ..Options::default()
    };
    let r = Region::create(&d.join("r.txm"), 2 * PAGE, o).unwrap();
    let mut w = r.view().unwrap();
    for i in 1..=300u64 {
        w.run(|v| v.write(8, &i)).unwrap();
    }
    assert!(
        r.stats().version_pages >= 300,
        "unsynced versions must stay until synced"
    );
    r.sync().unwrap();
    let s = r.stats();
    assert!(
        s.version_pages <= 1,
        "{} versions of one page after a sync",
        s.version_pages
    );
}

#[test]
fn a_page_first_written_then_read_is_validated_like_a_read() {
    let d = ext4_dir("blindwrite");
    let r = Region::create(&d.join("r.txm"), 2 * PAGE, Options::default()).unwrap();
    let (mut t1, mut t2) = (r.view().unwrap(), r.view().unwrap());
    t1.run(|v| v.write(0, &5u64)).unwrap();
    t1.begin().unwrap();
    t1.write(0, &5u64).unwrap(); // first access to page 0 is a store that changes nothing
    let y: u64 = t1.read(8).unwrap(); // then a read of another word on that page
    t2.run(|v| v.write(8, &7u64)).unwrap(); // a concurrent commit changes that word
    t1.write(PAGE, &(y + 1)).unwrap(); // and t1 acts on what it read
    assert!(
        matches!(t1.commit(), Err(Error::Conflict)),
        "a stale read of page 0 committed"
    );
}

#[test]
fn a_long_reader_pins_one_version_per_page_not_every_later_commit() {
    let d = ext4_dir("longpin");
    let o = Options {
        checkpoint_bytes: u64::MAX,
        ..Options::default()
    };
    let r = Region::create(&d.join("r.txm"), 2 * PAGE, o).unwrap();
    let (mut w, mut old, mut mid) = (r.view().unwrap(), r.view().unwrap(), r.view().unwrap());
    w.run(|v| v.write(8, &1u64)).unwrap();
    old.begin_read().unwrap();
    assert_eq!(old.read::<u64>(8).unwrap(), 1);
    for i in 2..=300u64 {
        w.run(|v| v.write(8, &i)).unwrap();
        if i == 150 {
            mid.begin_read().unwrap();
        }
    }
    // At most: the head, the newest synced version (a checkpoint may need it
    // until the head is synced), and one per live reader (commits 1 and 150).
    let kept = r.stats().version_pages;
    assert!(
        kept <= 4,
        "{kept} versions kept for one page with two readers"
    );
    assert_eq!(
        old.read::<u64>(8).unwrap(),
        1,
        "the old snapshot still reads its version"
    );
    assert_eq!(mid.read::<u64>(8).unwrap(), 150);
    old.commit().unwrap();
    mid.commit().unwrap();
}

#[test]
fn an_aborted_store_gives_back_the_snapshot_not_a_later_commit() {
    let d = ext4_dir("abort-snapshot");
    let r = Region::create(&d.join("r.txm"), 4 * 4096, Options::default()).unwrap();
    let (mut a, mut b) = (r.view().unwrap(), r.view().unwrap());
    b.run(|b| b.write(8, &1u64)).unwrap();
    r.checkpoint().unwrap(); // the file holds 1: no version in memory
    a.begin_with(TxnOptions::SNAPSHOT).unwrap();
    assert_eq!(a.read::<u64>(8).unwrap(), 1);
    b.run(|b| b.write(8, &2u64)).unwrap();
    r.checkpoint().unwrap(); // the file holds 2; A's snapshot keeps 1
    // A's first store to the page: its private copy holds the snapshot.
    a.write(16, &5u64).unwrap();
    a.abort().unwrap();
    assert_eq!(a.read::<u64>(8).unwrap(), 1, "A still reads its snapshot");
    assert_eq!(a.read::<u64>(16).unwrap(), 0, "A's store is gone");
    assert!(matches!(a.commit(), Err(Error::Aborted)));
    // A commit must not carry bytes A did not write: B's 2 stays.
    a.begin_with(TxnOptions::SNAPSHOT).unwrap();
    assert_eq!(a.read::<u64>(8).unwrap(), 2);
    a.write(16, &6u64).unwrap();
    a.commit().unwrap();
    b.begin_read().unwrap();
    assert_eq!(
        (b.read::<u64>(8).unwrap(), b.read::<u64>(16).unwrap()),
        (2, 6)
    );
    b.commit().unwrap();
    drop((a, b, r));
    let r = Region::open(&d.join("r.txm"), Options::default()).unwrap();
    let mut v = r.view().unwrap();
    v.begin_read().unwrap();
    assert_eq!(
        (v.read::<u64>(8).unwrap(), v.read::<u64>(16).unwrap()),
        (2, 6)
    );
    v.commit().unwrap();
}

/// A serializable transaction reads the pages its view holds valid without
/// a fault (untracked); its commit then validates against the pages commits
/// since its snapshot changed: a stale read conflicts, a commit elsewhere
/// does not. After such a conflict the next transaction tracks its reads.
#[test]
fn untracked_reads_take_no_fault_and_still_validate() {
    let d = ext4_dir("untracked");
    let r = Region::create(&d.join("r.txm"), 4 * PAGE, Options::default()).unwrap();
    let mut a = r.view().unwrap();
    let mut b = r.view().unwrap();
    let base = a.base() as *mut u64;
    let (x, y) = (0usize, PAGE as usize / 8);
    // SAFETY (all raw accesses below): inside the region, in a transaction.
    let read_x = || unsafe { std::ptr::read_volatile(base.add(x)) };
    let write_y = |n: u64| unsafe { std::ptr::write_volatile(base.add(y), n) };
    // A brings x and y in (valid, readable at its address) and commits.
    // Twice: a first plain load of a page the file holds maps the file's
    // page for that transaction alone; the view copies it at the next.
    let touch = |v: &mut View| -> Result<(), Error> {
        v.begin()?;
        write_y(read_x() + 1);
        v.commit()
    };
    touch(&mut a).unwrap();
    touch(&mut a).unwrap();
    b.run(|v| v.write(2 * PAGE, &7u64)).unwrap();
    a.begin().unwrap();
    let f = a.faults();
    assert_eq!(read_x(), 0);
    assert_eq!(a.faults(), f, "a valid page was read with a fault");
    // A commit elsewhere (a page not valid in A) does not conflict with A.
    b.run(|v| v.write(2 * PAGE, &8u64)).unwrap();
    write_y(100);
    a.commit().unwrap();

    // B changes x, which A read without a fault: A must not commit.
    a.begin().unwrap();
    let f = a.faults();
    let seen = read_x();
    assert_eq!(a.faults(), f);
    b.run(|v| v.write(0, &(seen + 5))).unwrap();
    write_y(seen);
    assert!(
        matches!(a.commit(), Err(Error::Conflict)),
        "a read of a page changed since the snapshot committed"
    );
    // The retry tracks its reads: a load of y, valid and unchanged, faults
    // (x faults either way: B's commit made it stale).
    a.begin().unwrap();
    let f = a.faults();
    let now = read_x();
    assert_eq!(now, seen + 5);
    // SAFETY: as above.
    assert_eq!(unsafe { std::ptr::read_volatile(base.add(y)) }, 100);
    assert_eq!(
        a.faults(),
        f + 2,
        "the retry of an untracked conflict did not track its reads"
    );
    write_y(now + 1);
    a.commit().unwrap();
    // Then untracked again.
    a.begin().unwrap();
    let f = a.faults();
    assert_eq!(read_x(), seen + 5);
    assert_eq!(a.faults(), f);
    a.commit().unwrap();
    a.begin_read().unwrap();
    assert_eq!(a.read::<u64>(PAGE).unwrap(), seen + 6);
    a.commit().unwrap();
}
