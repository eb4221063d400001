//! Round durability: a view in round mode stores without transactions;
//! `round` makes every store since the last round durable at once. A
//! process SIGKILLed at a random point (mostly in the middle of a round)
//! leaves the region exactly at its last completed round.

mod common;

use std::time::Duration;

use common::*;
use txmap::{Durability, Options, Region};

const PAGE: u64 = 4096;
const PAGES: u64 = 64;
/// Pages of a round large enough that its pages go into the region file
/// off `round`'s path (at least 4,096 changed pages).
const LARGE: u64 = 4608;

/// `TXMAP_PAGES` of a child, else `PAGES`.
fn env_pages() -> u64 {
    std::env::var("TXMAP_PAGES").map_or(PAGES, |s| s.parse().unwrap())
}

/// The child: in round r, stores r into the first u64 of every page (one
/// page at a time, with pauses, so a kill lands mid-round), then ends the
/// round and acknowledges "ROUND r" (one `write` per line).
fn rounder() {
    let p = std::path::PathBuf::from(std::env::var("TXMAP_PATH").unwrap());
    let mut acks = Acks::open(&std::env::var("TXMAP_ACKS").unwrap());
    let r = Region::open(&p, Options::default()).unwrap();
    let mut v = r.view().unwrap();
    v.start_rounds().unwrap();
    let first = v.read::<u64>(0).unwrap() + 1;
    for round in first.. {
        for pg in 0..PAGES {
            v.write(pg * PAGE, &round).unwrap();
            if pg % 16 == 0 {
                std::thread::sleep(Duration::from_micros(200));
            }
        }
        v.round().unwrap();
        acks.line(&format!("ROUND {round}"));
    }
}

/// The region at `p` opened again, with a view in a read-only transaction.
fn reopened(p: &std::path::Path) -> (Region, txmap::View) {
    let r = Region::open(p, Options::default()).unwrap();
    let mut v = r.view().unwrap();
    v.begin_read().unwrap();
    (r, v)
}

/// Every page holds the same round number; returns it.
fn check(p: &std::path::Path) -> u64 {
    check_pages(p, PAGES)
}

/// `check` over the first `pages` pages.
fn check_pages(p: &std::path::Path, pages: u64) -> u64 {
    let r = Region::open(p, Options::default()).unwrap();
    let mut v = r.view().unwrap();
    v.begin_read().unwrap();
    let vals: Vec<u64> = (0..pages).map(|pg| v.read(pg * PAGE).unwrap()).collect();
    v.commit().unwrap();
    assert!(
        vals.iter().all(|&x| x == vals[0]),
        "the region is not at one round: {vals:?}"
    );
    vals[0]
}

#[test]
fn sigkill_in_the_middle_of_a_round_leaves_the_last_completed_round() {
    if role().is_some() {
        return rounder();
    }
    let test = "sigkill_in_the_middle_of_a_round_leaves_the_last_completed_round";
    let mut rng = txmap::io::sim::SplitMix(seed(test));
    let d = ext4_dir("rounds_kill");
    let p = d.join("r");
    let o = Options {
        durability: Durability::Durable,
        ..Options::default()
    };
    drop(Region::create(&p, PAGES * PAGE, o).unwrap());
    let mut acked = 0;
    for _ in 0..8 {
        let out = d.join("acks");
        let _ = std::fs::remove_file(&out);
        let envs = [
            ("TXMAP_PATH", p.display().to_string()),
            ("TXMAP_ACKS", out.display().to_string()),
        ];
        let mut c = child(test, "rounder", &envs)
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(20 + rng.next() % 80));
        c.kill().unwrap();
        c.wait().unwrap();
        let printed = std::fs::read_to_string(&out)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.strip_prefix("ROUND ").map(|n| n.parse::<u64>().unwrap()))
            .max();
        if let Some(n) = printed {
            acked = acked.max(n);
        }
        let at = check(&p);
        assert!(
            at >= acked,
            "round {acked} was completed, the region is at {at}"
        );
        // At most the round under way when the kill came is there beyond it.
        assert!(
            at <= acked + 1,
            "the region is at round {at}, beyond {acked} + 1"
        );
        eprintln!("killed at round {at} (acknowledged {acked})");
        acked = at;
    }
}

#[test]
fn stores_between_rounds_need_no_transaction_and_a_failed_round_goes_on() {
    let d = tmpfs_dir("rounds_basic");
    let p = d.join("r");
    let r = Region::create(&p, PAGES * PAGE, Options::default()).unwrap();
    let mut v = r.view().unwrap();
    assert!(matches!(
        v.round(),
        Err(txmap::Error::NotInTransaction { .. })
    ));
    v.start_rounds().unwrap();
    v.write(0, &7u64).unwrap();
    // Not visible to others before the round ends.
    let mut o = r.view().unwrap();
    o.begin_read().unwrap();
    assert_eq!(o.read::<u64>(0).unwrap(), 0);
    o.commit().unwrap();
    v.round().unwrap();
    o.begin_read().unwrap();
    assert_eq!(o.read::<u64>(0).unwrap(), 7);
    o.commit().unwrap();
    // A round that conflicts loses its stores; the next round opens anyway.
    v.write(PAGE, &1u64).unwrap();
    o.run(|o| o.write(PAGE, &2u64)).unwrap();
    assert!(matches!(v.round(), Err(txmap::Error::Conflict)));
    assert!(v.in_transaction());
    assert_eq!(v.read::<u64>(PAGE).unwrap(), 2);
    v.write(2 * PAGE, &3u64).unwrap();
    v.round().unwrap();
    v.stop_rounds();
    drop((v, o, r));
    let (_r, mut v) = reopened(&p);
    assert_eq!(
        [0, 1, 2].map(|pg| v.read::<u64>(pg * PAGE).unwrap()),
        [7, 2, 3]
    );
    v.commit().unwrap();
}

/// Log records (`txmap check`) and the u64 the region file holds at
/// region offset `off` (read as a plain file).
fn records_and_file_word(p: &std::path::Path, off: u64) -> (u64, u64) {
    let report = txmap::inspect::check(p).unwrap();
    let bytes = std::fs::read(p).unwrap();
    let at = (4096 + off) as usize;
    let word = u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap());
    (report.report.log_records, word)
}

#[test]
fn a_round_alone_with_the_region_goes_straight_into_the_file() {
    let d = ext4_dir("rounds_in_place");
    let p = d.join("r");
    let r = Region::create(&p, PAGES * PAGE, Options::default()).unwrap();
    let mut v = r.view().unwrap();
    v.start_rounds().unwrap();
    for pg in 0..PAGES {
        v.write(pg * PAGE, &(pg + 1)).unwrap();
    }
    v.round().unwrap();
    // No log record, and the region file holds the round at once.
    assert_eq!(records_and_file_word(&p, 5 * PAGE), (0, 6));
    // With another view open the round is an ordinary commit: logged,
    // and the file waits for a checkpoint.
    let mut o = r.view().unwrap();
    v.write(5 * PAGE, &60u64).unwrap();
    v.round().unwrap();
    assert_eq!(records_and_file_word(&p, 5 * PAGE), (1, 6));
    o.begin_read().unwrap();
    assert_eq!(o.read::<u64>(5 * PAGE).unwrap(), 60);
    o.commit().unwrap();
    drop(o);
    // Alone again: the logged round is checkpointed first, then this one.
    v.write(5 * PAGE, &600u64).unwrap();
    v.write(6 * PAGE, &700u64).unwrap();
    v.round().unwrap();
    assert_eq!(records_and_file_word(&p, 6 * PAGE), (0, 700));
    assert_eq!(records_and_file_word(&p, 5 * PAGE).1, 600);
    // Views opened later read it; so does the next open.
    let mut o = r.view().unwrap();
    o.begin_read().unwrap();
    assert_eq!(o.read::<u64>(6 * PAGE).unwrap(), 700);
    o.commit().unwrap();
    drop(o);
    v.stop_rounds();
    drop((v, r));
    let r = Region::open(&p, Options::default()).unwrap();
    let v = r.view().unwrap();
    assert_eq!(v.read::<u64>(5 * PAGE).unwrap(), 600);
    assert_eq!(v.read::<u64>(PAGE).unwrap(), 2);
}

/// The child: completes rounds 1 and 2 (each storing the round number in
/// every page of `TXMAP_PAGES`, default `PAGES`), then dies at crash point
/// `TXMAP_POINT` in round 3 (0: right after round 3 returned, before any
/// checkpoint wrote its header; its copy into the file, when it has one,
/// made to start late).
fn killed_rounder() {
    let p = std::path::PathBuf::from(std::env::var("TXMAP_PATH").unwrap());
    let point: u32 = std::env::var("TXMAP_POINT").unwrap().parse().unwrap();
    let pages = env_pages();
    let r = Region::open(&p, Options::default()).unwrap();
    let mut v = r.view().unwrap();
    v.start_rounds().unwrap();
    for round in 1..=3u64 {
        match (round, txmap::debug::CrashPoint::from_u32(point)) {
            (3, Some(point)) => {
                // Round 2's copy into the file done first (not killed there).
                r.checkpoint().unwrap();
                txmap::debug::crash_at(point, 1);
            }
            (3, None) => txmap::debug::slow_round_copies(10_000_000),
            _ => {}
        }
        for pg in 0..pages {
            v.write(pg * PAGE, &round).unwrap();
        }
        v.round().unwrap();
    }
    if point == 0 {
        rustix::process::kill_process(rustix::process::getpid(), rustix::process::Signal::KILL)
            .unwrap();
    }
    panic!("round 3 did not reach crash point {point}");
}

#[test]
fn a_round_killed_after_its_journal_is_synced_is_there_after_recovery() {
    const TEST: &str = "a_round_killed_after_its_journal_is_synced_is_there_after_recovery";
    if role().is_some() {
        return killed_rounder();
    }
    use txmap::debug::CrashPoint;
    for point in [
        Some(CrashPoint::RoundJournaled),
        Some(CrashPoint::RoundWriting),
        None,
    ] {
        let n = point.map_or(0, |p| p as u32);
        let d = ext4_dir(&format!("rounds_killed_{n}"));
        let p = d.join("r");
        drop(Region::create(&p, PAGES * PAGE, Options::default()).unwrap());
        let envs = [
            ("TXMAP_PATH", p.display().to_string()),
            ("TXMAP_POINT", n.to_string()),
        ];
        let mut c = Proc::spawn(TEST, "killed-rounder", &envs, d.join("err"));
        c.wait_killed(&format!("the round at {point:?}"));
        if point.is_none() {
            // Its header waits for a checkpoint: the journal has it.
            assert_journal_pending(&p, "a round killed after it returned");
        }
        remove_shared_state(d.path());
        // Durable once its journal was synced: recovery finishes it.
        assert_eq!(check(&p), 3, "{point:?}");
    }
}

/// Raw stores in round mode: a write fault that continues the last run
/// makes a longer run writable at once (installed at its snapshot), so
/// sequential stores take few faults; pages of a run the round does not
/// change are neither written nor conflict with another view's commit.
#[test]
fn a_rounds_write_faults_take_runs_and_pages_it_does_not_change_stay_others() {
    const N: u64 = 1024;
    let d = ext4_dir("rounds_runs");
    let p = d.join("r");
    let r = Region::create(&p, N * PAGE, Options::default()).unwrap();
    let mut w = r.view().unwrap();
    // Every page of the first half holds data in the file; the rest are holes.
    w.begin().unwrap();
    for pg in 0..N / 2 {
        w.write(pg * PAGE + 16, &(pg + 1000)).unwrap();
    }
    w.commit().unwrap();
    r.checkpoint().unwrap();
    let mut v = r.view().unwrap();
    v.start_rounds().unwrap();
    let base = v.base();
    let f = v.faults();
    // SAFETY: inside the round's transaction, in the region.
    let store =
        |pg: u64, x: u64| unsafe { (base.add((pg * PAGE) as usize) as *mut u64).write_volatile(x) };
    for pg in 0..N {
        store(pg, pg + 1);
    }
    assert!(
        v.faults() - f < N / 16,
        "{} faults for {N} pages",
        v.faults() - f
    );
    v.round().unwrap();
    // Pages 0, 1 and 3: the run the store to 3 makes writable (3..7)
    // holds page 5, which another view changes before the round ends.
    store(0, 7);
    store(1, 7);
    store(3, 7);
    w.begin().unwrap();
    w.write(5 * PAGE, &55u64).unwrap();
    w.commit().unwrap();
    v.round().unwrap();
    v.stop_rounds();
    drop((v, w, r));
    let (_r, mut v) = reopened(&p);
    for pg in 0..N {
        let first = match pg {
            0 | 1 | 3 => 7,
            5 => 55,
            _ => pg + 1,
        };
        let kept = if pg < N / 2 { pg + 1000 } else { 0 };
        assert_eq!(v.read::<u64>(pg * PAGE).unwrap(), first, "page {pg}");
        assert_eq!(v.read::<u64>(pg * PAGE + 16).unwrap(), kept, "page {pg}");
        assert_eq!(v.read::<u64>(pg * PAGE + 8).unwrap(), 0, "page {pg}");
    }
    v.commit().unwrap();
}

/// A large round is durable when `round` returns, its pages copied into
/// the region file on another thread; a kill while that copy is under way
/// (at its first batch, or later while it has not started) leaves the
/// synced journal, and recovery finishes the round.
#[test]
fn a_large_round_killed_while_its_pages_go_into_the_file_is_there_after_recovery() {
    const TEST: &str =
        "a_large_round_killed_while_its_pages_go_into_the_file_is_there_after_recovery";
    if role().is_some() {
        return killed_rounder();
    }
    use txmap::debug::CrashPoint;
    for point in [Some(CrashPoint::RoundCopying), None] {
        let n = point.map_or(0, |p| p as u32);
        let d = ext4_dir(&format!("rounds_large_killed_{n}"));
        let p = d.join("r");
        drop(Region::create(&p, LARGE * PAGE, Options::default()).unwrap());
        let envs = [
            ("TXMAP_PATH", p.display().to_string()),
            ("TXMAP_POINT", n.to_string()),
            ("TXMAP_PAGES", LARGE.to_string()),
        ];
        let mut c = Proc::spawn(TEST, "killed-rounder", &envs, d.join("err"));
        c.wait_killed(&format!("the large round at {point:?}"));
        assert_journal_pending(&p, "a large round killed while it is copied");
        remove_shared_state(d.path());
        assert_eq!(check_pages(&p, LARGE), 3, "{point:?}");
    }
}

/// The child: opens the region at `TXMAP_PATH` (waiting while another
/// process copies a round into its file) and prints the first u64 of each
/// of its first `TXMAP_PAGES` pages that does not hold `TXMAP_WANT`.
fn round_reader() {
    let p = std::path::PathBuf::from(std::env::var("TXMAP_PATH").unwrap());
    let want: u64 = std::env::var("TXMAP_WANT").unwrap().parse().unwrap();
    let r = Region::open(&p, Options::default()).unwrap();
    read_all(&mut r.view().unwrap(), want, "read by another process");
}

/// In a read-only transaction of `v`, the first u64 of each of the first
/// `TXMAP_PAGES` pages (else `LARGE`) is `want`.
fn read_all(v: &mut txmap::View, want: u64, what: &str) {
    v.begin_read().unwrap();
    let pages = std::env::var("TXMAP_PAGES").map_or(LARGE, |s| s.parse().unwrap());
    for pg in 0..pages {
        assert_eq!(v.read::<u64>(pg * PAGE).unwrap(), want, "page {pg} {what}");
    }
    v.commit().unwrap();
}

/// While a large round's pages are still being copied into the region
/// file (the copy made to start late), everything that reads the file
/// sees the round: the stores of the next round discarded go back to it,
/// a view opened meanwhile reads it, another process opening the region
/// waits for the copy and reads it, and the region holds it after close.
#[test]
fn while_a_large_rounds_pages_go_into_the_file_every_reader_sees_the_round() {
    const TEST: &str = "while_a_large_rounds_pages_go_into_the_file_every_reader_sees_the_round";
    if role().is_some() {
        return round_reader();
    }
    let d = ext4_dir("rounds_large_readers");
    let p = d.join("r");
    let r = Region::create(&p, LARGE * PAGE, Options::default()).unwrap();
    let mut v = r.view().unwrap();
    v.start_rounds().unwrap();
    let fill = |v: &mut txmap::View, x: u64| {
        let all = v.slice_mut(0, (LARGE * PAGE) as usize).unwrap();
        for page in all.chunks_mut(PAGE as usize) {
            page[..8].copy_from_slice(&x.to_le_bytes());
        }
    };
    fill(&mut v, 1);
    v.round().unwrap();
    txmap::debug::slow_round_copies(300_000);
    fill(&mut v, 2);
    v.round().unwrap();
    // Round 3's stores discarded: each page reads round 2 again.
    fill(&mut v, 3);
    v.stop_rounds();
    read_all(&mut v, 2, "after discarding");
    // The next round again, then a view opened while it is copied.
    v.start_rounds().unwrap();
    fill(&mut v, 4);
    v.round().unwrap();
    read_all(&mut r.view().unwrap(), 4, "in a new view");
    // And another process while the next one is copied.
    fill(&mut v, 5);
    v.round().unwrap();
    let envs = [
        ("TXMAP_PATH", p.display().to_string()),
        ("TXMAP_WANT", "5".to_string()),
        ("TXMAP_PAGES", LARGE.to_string()),
    ];
    let mut c = Proc::spawn(TEST, "round-reader", &envs, d.join("err"));
    c.wait_ok("another process reading the round");
    txmap::debug::slow_round_copies(0);
    v.stop_rounds();
    drop((v, r));
    let bytes = std::fs::read(&p).unwrap();
    for pg in 0..LARGE as usize {
        let at = 4096 + pg * PAGE as usize;
        let x = u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap());
        assert_eq!(x, 5, "page {pg} of the closed region file");
    }
}
