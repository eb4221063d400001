//! The bulk load's shortcuts (issue 20). Pages a grow added are read from
//! a static zero page until the region file is written there
//! (`FileShared::zero_from`): what a checkpoint wrote into them must be read
//! back, never zeros. A large record is written from its pieces with one
//! vectored write (`format::encode_pieces`): recovery must replay it.
mod common;

use common::*;
use txmap::{Options, Region};

const PAGE: u64 = 4096;

fn pattern(page: u64, i: u64) -> u64 {
    page.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ i.wrapping_add(1)
}

/// Closes `r` (its views closed first) and opens it again, with a view in
/// a read-only transaction.
fn reopen(r: Region, p: &std::path::Path) -> (Region, txmap::View) {
    drop(r);
    let r = Region::open(p, Options::default()).unwrap();
    let mut v = r.view().unwrap();
    v.begin_read().unwrap();
    (r, v)
}

#[test]
fn grown_pages_a_checkpoint_wrote_read_back_in_a_fresh_view() {
    let d = ext4_dir("fresh-pages");
    let p = d.join("r.txm");
    let r = Region::create(&p, 16 * PAGE, Options::default()).unwrap();
    let mut v = r.view().unwrap();
    v.begin().unwrap();
    v.grow(64 * PAGE).unwrap();
    // Pages 20..40 are fresh: every word but the last of each is written,
    // so a page's tail must still read as the zeros the file holds.
    for page in 20..40 {
        for i in 0..PAGE / 8 - 1 {
            v.write(page * PAGE + i * 8, &pattern(page, i)).unwrap();
        }
    }
    v.commit().unwrap();
    // Into the file, and the versions trimmed: a fresh snapshot now takes
    // these pages from the file, not from the version chains.
    r.checkpoint().unwrap();
    r.checkpoint().unwrap();

    // Read through pages this transaction writes (installed from their
    // snapshot source; read-only reads may take the file's pages directly).
    let mut w = r.view().unwrap();
    w.begin().unwrap();
    for page in 20..40 {
        w.write(page * PAGE + PAGE - 1, &0u8).unwrap();
        for i in 0..PAGE / 8 - 1 {
            assert_eq!(
                w.read::<u64>(page * PAGE + i * 8).unwrap(),
                pattern(page, i),
                "page {page} word {i}: a page the checkpoint wrote read as the grow's zeros"
            );
        }
        assert_eq!(w.read::<u64>(page * PAGE + PAGE - 8).unwrap(), 0);
    }
    // Pages the grow added and nothing wrote read as zeros.
    for page in (16..20).chain(40..64) {
        assert!(
            w.slice(page * PAGE, PAGE as usize)
                .unwrap()
                .iter()
                .all(|&b| b == 0)
        );
    }
    w.commit().unwrap();

    // A write to a page the file has (written by the checkpoint) diffs
    // against the file's content: only the changed word is new.
    w.begin().unwrap();
    w.write(25 * PAGE + 16, &7u64).unwrap();
    w.commit().unwrap();
    drop((v, w));
    let (_r, mut v) = reopen(r, &p);
    for page in 20..40 {
        for i in 0..PAGE / 8 - 1 {
            let want = if page == 25 && i == 2 {
                7
            } else {
                pattern(page, i)
            };
            assert_eq!(v.read::<u64>(page * PAGE + i * 8).unwrap(), want);
        }
    }
    v.commit().unwrap();
}

#[test]
fn a_second_grow_keeps_pages_a_checkpoint_wrote() {
    // Checkpoints after each of two grows: pages written in the first
    // grow's range and in the second's are read back, untouched ones as zeros.
    let d = ext4_dir("fresh-pages-regrow");
    let p = d.join("r.txm");
    let r = Region::create(&p, 16 * PAGE, Options::default()).unwrap();
    let mut v = r.view().unwrap();
    v.begin().unwrap();
    v.grow(32 * PAGE).unwrap();
    v.write(20 * PAGE, &0x1234_u64).unwrap();
    v.commit().unwrap();
    r.checkpoint().unwrap();
    v.begin().unwrap();
    v.grow(128 * PAGE).unwrap();
    v.write(100 * PAGE + 8, &0x5678_u64).unwrap();
    v.commit().unwrap();
    r.checkpoint().unwrap();
    r.checkpoint().unwrap();
    let mut w = r.view().unwrap();
    w.begin().unwrap();
    for page in [20, 60, 100] {
        w.write(page * PAGE + PAGE - 1, &0u8).unwrap();
    }
    assert_eq!(w.read::<u64>(20 * PAGE).unwrap(), 0x1234);
    assert_eq!(w.read::<u64>(100 * PAGE + 8).unwrap(), 0x5678);
    assert_eq!(w.read::<u64>(100 * PAGE).unwrap(), 0);
    assert_eq!(w.read::<u64>(60 * PAGE).unwrap(), 0);
    w.commit().unwrap();
}

#[test]
fn a_large_record_written_from_its_pieces_is_recovered() {
    let d = ext4_dir("bulk-record");
    let p = d.join("r.txm");
    let q = d.join("copy.txm");
    let opts = Options {
        checkpoint_bytes: 1 << 30,
        ..Options::default()
    };
    let r = Region::create(&p, 256 * PAGE, opts.clone()).unwrap();
    let mut v = r.view().unwrap();
    // 200 pages, each with a gap that splits it into two ranges: a record
    // of about 800 KiB, far above the size written from pieces.
    v.begin().unwrap();
    for page in 0..200 {
        for i in (0..PAGE / 8).filter(|&i| i != 100) {
            v.write(page * PAGE + i * 8, &pattern(page, i)).unwrap();
        }
    }
    v.commit().unwrap();
    // The commit is in the log only (no checkpoint yet): a copy of the
    // files must recover it from the record.
    let log = txmap::log_path(&p);
    assert_eq!(
        record_offsets(&log).len(),
        1,
        "the bulk commit's record decodes (its CRC matches)"
    );
    copy_region(&p, &q);
    let r2 = Region::open(&q, opts).unwrap();
    let mut w = r2.view().unwrap();
    w.begin_read().unwrap();
    for page in 0..200 {
        for i in 0..PAGE / 8 {
            let want = if i == 100 { 0 } else { pattern(page, i) };
            assert_eq!(
                w.read::<u64>(page * PAGE + i * 8).unwrap(),
                want,
                "page {page} word {i} after recovery"
            );
        }
    }
    w.commit().unwrap();
}

/// A store into a page a grow added installs the fresh pages after it at
/// once (`install_zeros_ahead`): a page this transaction wrote already and
/// a page another view committed since the grow keep their bytes, the run
/// ends at the region's end, the rest reads as zeros, and a commit by
/// another view into a page installed ahead is seen by the next
/// transaction.
#[test]
fn a_store_into_a_fresh_page_installs_the_next_ones_and_loses_no_bytes() {
    let d = ext4_dir("zeros-ahead");
    let p = d.join("r.txm");
    let r = Region::create(&p, 16 * PAGE, Options::default()).unwrap();
    // Page 12 in the region file, the pages around it holes.
    let mut b = r.view().unwrap();
    b.run(|b| b.write(12 * PAGE, &pattern(12, 0))).unwrap();
    r.checkpoint().unwrap();
    r.checkpoint().unwrap();
    r.grow(200 * PAGE).unwrap();
    b.run(|b| b.write(30 * PAGE + 8, &0xB0B0u64)).unwrap();
    let mut v = r.view().unwrap();
    v.begin().unwrap();
    // Each store's run of fresh pages would reach a page that must keep
    // its bytes: 150 written here, 30 committed by `b`, 12 in the file,
    // the region's end.
    let pages = [150u64, 140, 25, 198, 10];
    for page in pages {
        v.write(page * PAGE, &pattern(page, 0)).unwrap();
    }
    for page in 10..200u64 {
        let bytes = v.slice(page * PAGE, PAGE as usize).unwrap();
        let mut want = vec![0u8; PAGE as usize];
        if pages.contains(&page) || page == 12 {
            want[..8].copy_from_slice(&pattern(page, 0).to_le_bytes());
        }
        if page == 30 {
            want[8..16].copy_from_slice(&0xB0B0u64.to_le_bytes());
        }
        assert!(bytes == &want[..], "page {page} lost or gained bytes");
    }
    v.commit().unwrap();
    // Page 141 was installed ahead of the store into 140.
    b.run(|b| b.write(141 * PAGE + 16, &0xC0C0u64)).unwrap();
    v.begin().unwrap();
    assert_eq!(v.read::<u64>(141 * PAGE + 16).unwrap(), 0xC0C0);
    v.write(142 * PAGE, &1u64).unwrap();
    v.commit().unwrap();
    drop((b, v));
    let (_r, mut v) = reopen(r, &p);
    for page in pages {
        assert_eq!(v.read::<u64>(page * PAGE).unwrap(), pattern(page, 0));
    }
    assert_eq!(v.read::<u64>(12 * PAGE).unwrap(), pattern(12, 0));
    assert_eq!(v.read::<u64>(30 * PAGE + 8).unwrap(), 0xB0B0);
    assert_eq!(v.read::<u64>(141 * PAGE + 16).unwrap(), 0xC0C0);
    assert_eq!(v.read::<u64>(142 * PAGE).unwrap(), 1);
    v.commit().unwrap();
}

/// Pages of the large commits below: over 1 MiB of changed bytes, so the
/// commit syncs its record on a thread of its own while it publishes, and
/// extends the log on another while it reserves versions.
const LARGE_PAGES: u64 = 320;

/// Fills every page with generation `g`'s words, in one transaction.
fn write_generation(r: &Region, g: u64) {
    let mut v = r.view().unwrap();
    v.run(|v| {
        for page in 0..LARGE_PAGES {
            let bytes: Vec<u8> = (0..PAGE / 8)
                .flat_map(|w| pattern(page * PAGE + w, g).to_le_bytes())
                .collect();
            v.slice_mut(page * PAGE, PAGE as usize)?
                .copy_from_slice(&bytes);
        }
        Ok(())
    })
    .unwrap();
}

/// The generation every page holds in a read transaction of `v`, which
/// must be the same for all pages and whole in each.
fn generation(v: &mut txmap::View) -> u64 {
    v.begin_read().unwrap();
    let g = read_generation(v);
    v.commit().unwrap();
    g
}

/// `generation` in the transaction `v` has open.
fn read_generation(v: &txmap::View) -> u64 {
    let mut seen = None;
    for page in 0..LARGE_PAGES {
        let first = v.read::<u64>(page * PAGE).unwrap();
        let g = [1, 2]
            .into_iter()
            .find(|&g| pattern(page * PAGE, g) == first)
            .unwrap_or_else(|| panic!("page {page} holds neither generation"));
        for w in 1..PAGE / 8 {
            assert_eq!(
                v.read::<u64>(page * PAGE + 8 * w).unwrap(),
                pattern(page * PAGE + w, g),
                "page {page} is torn at word {w}"
            );
        }
        assert!(
            seen.is_none_or(|s| s == g),
            "page {page} holds generation {g}, the pages before it {seen:?}: a partial commit"
        );
        seen = Some(g);
    }
    seen.unwrap()
}

/// A region of `LARGE_PAGES` pages holding generation 1 (closed again).
fn large_region(test: &str) -> (TestDir, std::path::PathBuf) {
    let d = ext4_dir(test);
    let p = d.join("r.txm");
    let r = Region::create(&p, LARGE_PAGES * PAGE, Options::default()).unwrap();
    write_generation(&r, 1);
    drop(r);
    (d, p)
}

/// Child: writes generation 2 in one large durable commit, stopped
/// (`TXMAP_HOW=stop`) or killed at crash point `TXMAP_POINT` on the way;
/// says DONE once the commit returned.
fn large_commit_child() -> bool {
    if role().is_none() {
        return false;
    }
    let env = |k: &str| std::env::var(k).unwrap();
    let r = Region::open(env("TXMAP_PATH").as_ref(), Options::default()).unwrap();
    let point = txmap::debug::CrashPoint::from_u32(env("TXMAP_POINT").parse().unwrap()).unwrap();
    match env("TXMAP_HOW").as_str() {
        "stop" => txmap::debug::stop_at(point, 1),
        _ => txmap::debug::crash_at(point, 1),
    }
    write_generation(&r, 2);
    Acks::open(&env("TXMAP_ACK")).line("DONE");
    true
}

fn large_commit_env(
    d: &TestDir,
    p: &std::path::Path,
    point: u32,
    how: &str,
) -> Vec<(&'static str, String)> {
    vec![
        ("TXMAP_PATH", p.display().to_string()),
        ("TXMAP_POINT", point.to_string()),
        ("TXMAP_HOW", how.into()),
        ("TXMAP_ACK", d.join("ack").display().to_string()),
    ]
}

/// A large commit killed with SIGKILL at each of its steps: before its
/// record is written (the log extended and versions reserved on two
/// threads), after it (the commit point), halfway through publishing while
/// its sync runs on another thread, and in that sync. Reopened, the region
/// holds the commit whole once its record was written, and not at all
/// before.
#[test]
fn a_large_commit_killed_in_each_step_recovers_whole_or_not_at_all() {
    use txmap::debug::CrashPoint as C;
    const TEST: &str = "a_large_commit_killed_in_each_step_recovers_whole_or_not_at_all";
    if large_commit_child() {
        return;
    }
    for (point, want) in [
        (C::CommitLocked, 1),
        (C::CommitLogged, 2),
        (C::CommitPublishing, 2),
        (C::SyncLeader, 2),
    ] {
        let (d, p) = large_region(&format!("large-kill-{}", point as u32));
        let env = large_commit_env(&d, &p, point as u32, "kill");
        let mut c = Proc::spawn(TEST, "large", &env, d.join("err"));
        c.wait_killed(&format!("the large commit at {point:?}"));
        let r = Region::open(&p, Options::default()).unwrap();
        let mut v = r.view().unwrap();
        assert_eq!(generation(&mut v), want, "killed at {point:?}");
        // And the region goes on: a later large commit lands whole.
        drop(v);
        write_generation(&r, 1);
        let mut v = r.view().unwrap();
        assert_eq!(generation(&mut v), 1, "after the commit at {point:?}");
    }
}

/// While a large commit is stopped halfway through publishing, or inside
/// its sync (on its own thread), another process opens the region and
/// reads: halfway through publishing the commit is not there; in its sync
/// it is there whole or not at all (published before durable, as every
/// commit); a snapshot taken then keeps what it saw after the commit is
/// continued and done; a read begun after sees all of it.
#[test]
fn another_process_opening_during_a_large_commit_sees_it_only_once_done() {
    use txmap::debug::CrashPoint as C;
    const TEST: &str = "another_process_opening_during_a_large_commit_sees_it_only_once_done";
    if large_commit_child() {
        return;
    }
    for point in [C::CommitPublishing, C::SyncLeader] {
        let (d, p) = large_region(&format!("large-stop-{}", point as u32));
        let env = large_commit_env(&d, &p, point as u32, "stop");
        let mut c = Proc::spawn(TEST, "large", &env, d.join("err"));
        let start = std::time::Instant::now();
        while c.state() != 'T' {
            c.check_running("the large commit");
            assert!(
                start.elapsed() < PROC_LIVENESS,
                "the commit never stopped at {point:?}"
            );
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        let r = Region::open(&p, Options::default()).unwrap();
        let mut before = r.view().unwrap();
        let seen = generation(&mut before);
        if point == C::CommitPublishing {
            assert_eq!(seen, 1, "while stopped at {point:?}");
        }
        let mut held = r.view().unwrap();
        held.begin_read().unwrap();
        c.signal(rustix::process::Signal::CONT);
        c.wait_ok("the large commit, continued");
        assert_eq!(
            std::fs::read_to_string(d.join("ack")).unwrap().trim(),
            "DONE"
        );
        assert_eq!(
            read_generation(&held),
            seen,
            "a snapshot taken while stopped"
        );
        held.commit().unwrap();
        let mut after = r.view().unwrap();
        assert_eq!(generation(&mut after), 2, "after the commit at {point:?}");
    }
}

/// Large transactions in four threads at once, each with its helper
/// backing the version store beside the others' commits (no lock), while
/// checkpoints run: every commit reads back whole, in its own thread and
/// after reopening.
#[test]
fn concurrent_large_transactions_back_versions_beside_each_others_commits() {
    const THREADS: u64 = 4;
    const OWN: u64 = 600;
    const ROUNDS: u64 = 5;
    let d = ext4_dir("prefill-concurrent");
    let p = d.join("r.txm");
    let r = Region::create(&p, THREADS * OWN * PAGE, Options::default()).unwrap();
    let done = std::sync::atomic::AtomicU64::new(0);
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let (r, done) = (&r, &done);
            s.spawn(move || {
                let mut v = r.view().unwrap();
                let pages = t * OWN..(t + 1) * OWN;
                for round in 1..=ROUNDS {
                    v.run(|v| {
                        for page in pages.clone() {
                            v.write(page * PAGE + 8 * (page % 500), &pattern(page, round))?;
                        }
                        Ok(())
                    })
                    .unwrap();
                    v.begin_read().unwrap();
                    for page in pages.clone() {
                        let got = v.read::<u64>(page * PAGE + 8 * (page % 500)).unwrap();
                        assert_eq!(got, pattern(page, round), "page {page}, round {round}");
                    }
                    v.commit().unwrap();
                }
                done.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            });
        }
        while done.load(std::sync::atomic::Ordering::SeqCst) < THREADS {
            r.checkpoint().unwrap();
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    });
    assert!(r.stats().version_pages_backed >= OWN);
    let (_r, v) = reopen(r, &p);
    for page in 0..THREADS * OWN {
        let got = v.read::<u64>(page * PAGE + 8 * (page % 500)).unwrap();
        assert_eq!(got, pattern(page, ROUNDS), "page {page} after reopening");
    }
}
