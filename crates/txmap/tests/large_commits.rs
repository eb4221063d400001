//! A large commit whose view is alone with its region goes straight into
//! the region file through the page journal, as a round does: no log
//! record, no versions, no checkpoint after it. Each page is written twice
//! (journal, file) instead of three or four times (log, journal, file).
//! These tests check when it does, that a transaction whose reads went
//! stale still conflicts, and that SIGKILL at each of its steps leaves the
//! commit whole or not at all, registered operations included. Also: a
//! checkpoint and a round in place write pages in file order, so that
//! consecutive pages go into the file with one call.

mod common;

use common::*;
use txmap::collections::{AnyMap, Kind, Map, Structure};
use txmap::{Durability, Error, Options, Region};

const PAGE: u64 = 4096;
/// Half of `CHECKPOINT_BYTES`: a commit of this many pages or more goes in
/// place when alone.
const LARGE: u64 = 4200;
const PAGES: u64 = LARGE + 64;
const CHECKPOINT_BYTES: u64 = 32 << 20;

fn opts() -> Options {
    Options {
        durability: Durability::Durable,
        checkpoint_bytes: CHECKPOINT_BYTES,
        ..Options::default()
    }
}

fn records(p: &std::path::Path) -> u64 {
    txmap::inspect::check(p).unwrap().report.log_records
}

/// Writes generation `g` into the first word of pages `0..LARGE`, in one
/// transaction.
fn fill(r: &Region, g: u64) {
    let mut v = r.view().unwrap();
    v.run(|v| {
        for pg in 0..LARGE {
            v.write(pg * PAGE, &(g << 32 | pg))?;
        }
        Ok(())
    })
    .unwrap();
}

/// The generation every page `0..LARGE` holds (all the same).
fn generation(r: &Region) -> u64 {
    let mut v = r.view().unwrap();
    v.begin_read().unwrap();
    let g = v.read::<u64>(0).unwrap() >> 32;
    for pg in 0..LARGE {
        assert_eq!(v.read::<u64>(pg * PAGE).unwrap(), g << 32 | pg, "page {pg}");
    }
    v.commit().unwrap();
    g
}

#[test]
fn a_large_commit_alone_goes_into_the_file_and_one_beside_another_view_is_logged() {
    let d = ext4_dir("large_in_place");
    let p = d.join("r");
    let r = Region::create(&p, PAGES * PAGE, opts()).unwrap();
    fill(&r, 1);
    assert_eq!(records(&p), 0, "a large commit alone writes no log record");
    // Its pages go into the file on another thread: a checkpoint waits for
    // it (and finds no record to write).
    r.checkpoint().unwrap();
    let bytes = std::fs::read(&p).unwrap();
    let word = |pg: u64| {
        let at = (PAGE + pg * PAGE) as usize;
        u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap())
    };
    assert_eq!(word(LARGE - 1), 1 << 32 | (LARGE - 1), "the file holds it");
    // Another view here: the large commit is logged like any other.
    let other = r.view().unwrap();
    fill(&r, 2);
    assert_eq!(records(&p), 1);
    drop(other);
    // Another handle (as another process would) with no view: the region
    // finds it under its locks, after the request was prepared.
    let r2 = Region::open(&p, opts()).unwrap();
    fill(&r, 4);
    assert_eq!(records(&p), 2);
    drop(r2);
    assert_eq!(generation(&r), 4);
    // Alone again: the logged one goes to the file first, then this one.
    let mut v = r.view().unwrap();
    v.run(|v| v.write(LARGE * PAGE, &77u64)).unwrap();
    drop(v);
    fill(&r, 3);
    assert_eq!(records(&p), 0);
    assert_eq!(generation(&r), 3);
    drop(r);
    let r = Region::open(&p, opts()).unwrap();
    assert_eq!(generation(&r), 3);
    let v = r.view().unwrap();
    assert_eq!(v.read::<u64>(LARGE * PAGE).unwrap(), 77);
}

/// A large transaction's helper backs the version blocks its commit will
/// fill while it stores (`view/prefill.rs`); a commit that goes in place
/// fills none, so beyond the size from which it would, none are backed.
#[test]
fn a_large_commit_alone_backs_no_versions_beyond_the_in_place_size() {
    const MANY: u64 = 3 * LARGE;
    let d = ext4_dir("large_in_place_backed");
    let p = d.join("r");
    let r = Region::create(&p, (MANY + 8) * PAGE, opts()).unwrap();
    let mut v = r.view().unwrap();
    v.run(|v| {
        for pg in 0..MANY {
            v.write(pg * PAGE, &(pg + 1))?;
        }
        Ok(())
    })
    .unwrap();
    let st = r.stats();
    assert_eq!(st.version_pages, 0, "no versions: it went in place");
    assert!(
        st.version_pages_backed < 2 * LARGE,
        "{} version pages backed for a commit of {MANY} pages in place",
        st.version_pages_backed
    );
    assert_eq!(v.read::<u64>((MANY - 1) * PAGE).unwrap(), MANY);
}

/// Alone at its commit does not mean nothing changed since its snapshot:
/// another handle committed to a page the transaction read, then closed.
#[test]
fn a_large_commit_alone_whose_read_went_stale_conflicts() {
    let d = ext4_dir("large_in_place_stale");
    let p = d.join("r");
    let r = Region::create(&p, PAGES * PAGE, opts()).unwrap();
    let mut v = r.view().unwrap();
    v.begin().unwrap();
    let seen: u64 = v.read(LARGE * PAGE).unwrap();
    {
        let r2 = Region::open(&p, opts()).unwrap();
        let mut w = r2.view().unwrap();
        w.run(|w| w.write(LARGE * PAGE, &5u64)).unwrap();
    }
    for pg in 0..LARGE {
        v.write(pg * PAGE, &(seen + 1)).unwrap();
    }
    assert!(
        matches!(v.commit(), Err(Error::Conflict)),
        "a read another commit changed must fail the commit"
    );
    drop(v);
    let v = r.view().unwrap();
    assert_eq!(v.read::<u64>(0).unwrap(), 0, "nothing of it landed");
    assert_eq!(v.read::<u64>(LARGE * PAGE).unwrap(), 5);
}

/// Keys of the B+-tree test: `SMALL` small entries, then `BULK` entries of
/// 1,000 bytes (about 5,000 leaves, past `LARGE` pages).
const SMALL: u64 = 100;
const BULK: u64 = 20_000;

fn key(i: u64) -> [u8; 8] {
    i.wrapping_mul(0x9E37_79B9_7F4A_7C15).to_be_bytes()
}

fn value(i: u64, g: u8) -> Vec<u8> {
    let len = if i < SMALL { 16 } else { 1000 };
    (0..len).map(|b| (i as u8) ^ (b as u8) ^ g).collect()
}

/// The child: commits the small entries (generation 1: registered
/// operations in the log), then, armed to die at crash point
/// `TXMAP_POINT` (0: right after the commit returned, its copy into the
/// file made slow), one transaction that changes them (generation 2; its
/// first puts are logged as operations) and adds the bulk.
fn large_btree_child() {
    let p = std::path::PathBuf::from(std::env::var("TXMAP_PATH").unwrap());
    let point: u32 = std::env::var("TXMAP_POINT").unwrap().parse().unwrap();
    let r = Region::open(&p, opts()).unwrap();
    let mut v = r.view().unwrap();
    let m = v
        .run(|v| AnyMap::open_or_create(v, "m", Kind::BTree))
        .unwrap();
    v.run(|v| {
        for i in 0..SMALL {
            m.put(v, &key(i), &value(i, 1))?;
        }
        Ok(())
    })
    .unwrap();
    match txmap::debug::CrashPoint::from_u32(point) {
        Some(point) => txmap::debug::crash_at(point, 1),
        None => txmap::debug::slow_round_copies(10_000_000),
    }
    v.run(|v| {
        for i in (0..SMALL).chain(SMALL..SMALL + BULK) {
            m.put(v, &key(i), &value(i, 2))?;
        }
        Ok(())
    })
    .unwrap();
    if point == 0 {
        rustix::process::kill_process(rustix::process::getpid(), rustix::process::Signal::KILL)
            .unwrap();
    }
    panic!("the large commit did not reach crash point {point}");
}

/// Checks the tree: whole, and at generation `g` (1: only the small
/// entries; 2: them changed and the bulk).
fn check_btree(r: &Region, g: u8) {
    let mut v = r.view().unwrap();
    v.begin_read().unwrap();
    let m = AnyMap::open_named(&v, "m").unwrap().expect("the map");
    let AnyMap::BTree(t) = m else {
        panic!("not a B+-tree")
    };
    let report = Structure::Map(AnyMap::BTree(t)).check(&v).unwrap();
    let want = if g == 1 { SMALL } else { SMALL + BULK };
    assert_eq!(report.entries, want, "entries at generation {g}");
    for i in 0..want {
        let got = m.get(&v, &key(i)).unwrap();
        let gen_of = if i < SMALL { g } else { 2 };
        assert_eq!(got.as_deref(), Some(&value(i, gen_of)[..]), "key {i}");
    }
    v.commit().unwrap();
}

/// SIGKILL at each step of a large B+-tree commit alone with its region:
/// in the checkpoint of the logged commits before it (not durable yet:
/// absent), with its page journal synced, while its pages are copied into
/// the file, and right after it returned. Reopened, the tree is whole, at
/// one generation or the other, and its registered operations ran once.
#[test]
fn a_large_btree_commit_alone_killed_at_each_step_recovers_whole_or_not_at_all() {
    const TEST: &str =
        "a_large_btree_commit_alone_killed_at_each_step_recovers_whole_or_not_at_all";
    if role().is_some() {
        return large_btree_child();
    }
    use txmap::debug::CrashPoint as C;
    for (point, want) in [
        (Some(C::CheckpointWriting), 1),
        (Some(C::RoundJournaled), 2),
        (Some(C::RoundCopying), 2),
        (None, 2),
    ] {
        let n = point.map_or(0, |c| c as u32);
        let d = ext4_dir(&format!("large_btree_{n}"));
        let p = d.join("r");
        drop(Region::create(&p, 8 * PAGE, opts()).unwrap());
        let envs = [
            ("TXMAP_PATH", p.display().to_string()),
            ("TXMAP_POINT", n.to_string()),
        ];
        let mut c = Proc::spawn(TEST, "large-btree", &envs, d.join("err"));
        c.wait_killed(&format!("the large commit at {point:?}"));
        if want == 2 {
            assert_journal_pending(&p, "a large commit killed once its journal was synced");
        }
        remove_shared_state(d.path());
        let r = Region::open(&p, opts()).unwrap();
        check_btree(&r, want);
        // And it goes on: another large commit, then a reopen.
        drop(r);
        let r = Region::open(&p, opts()).unwrap();
        let mut v = r.view().unwrap();
        let m = AnyMap::open_named(&v, "m").unwrap().unwrap();
        v.run(|v| {
            for i in (0..SMALL).chain(SMALL..SMALL + BULK) {
                m.put(v, &key(i), &value(i, 2))?;
            }
            Ok(())
        })
        .unwrap();
        drop(v);
        drop(r);
        check_btree(&Region::open(&p, opts()).unwrap(), 2);
    }
}

/// The plain file's bytes before any commit, and the word of generation
/// `g` in page `pg`.
fn plain_model(len: u64) -> Vec<u8> {
    (0..len).map(|i| (i % 251) as u8).collect()
}

fn plain_word(g: u64, pg: u64) -> u64 {
    g << 32 | pg
}

/// `model` with generation `g` written.
fn plain_with(mut model: Vec<u8>, g: u64) -> Vec<u8> {
    for pg in 0..LARGE {
        let at = (pg * PAGE + 8) as usize;
        model[at..at + 8].copy_from_slice(&plain_word(g, pg).to_le_bytes());
    }
    model
}

/// Writes generation `g` into the plain file's region in one transaction.
fn plain_fill(r: &Region, g: u64) {
    let mut v = r.view().unwrap();
    v.run(|v| {
        for pg in 0..LARGE {
            v.write(pg * PAGE + 8, &plain_word(g, pg))?;
        }
        Ok(())
    })
    .unwrap();
}

/// The child: a large commit of generation 1 into the plain file
/// `TXMAP_PATH`, killed at crash point `TXMAP_POINT`.
fn plain_child() {
    let p = std::path::PathBuf::from(std::env::var("TXMAP_PATH").unwrap());
    let point: u32 = std::env::var("TXMAP_POINT").unwrap().parse().unwrap();
    let r = Region::open_plain(&p, opts()).unwrap();
    txmap::debug::crash_at(txmap::debug::CrashPoint::from_u32(point).unwrap(), 1);
    plain_fill(&r, 1);
    panic!("the large commit did not reach crash point {point}");
}

/// SIGKILL in a large commit in place into a plain file, with its journal
/// synced and while its pages are written into the file: reopened, the
/// region has it whole, and the file holds it after the close.
#[test]
fn a_large_commit_alone_in_a_plain_file_killed_in_place_is_there_after_recovery() {
    const TEST: &str =
        "a_large_commit_alone_in_a_plain_file_killed_in_place_is_there_after_recovery";
    if role().is_some() {
        return plain_child();
    }
    use txmap::debug::CrashPoint as C;
    let len = PAGES * PAGE + 100;
    // A plain file's pages are written in the commit (no copy off its path).
    for point in [C::RoundJournaled, C::RoundWriting] {
        let d = ext4_dir(&format!("large_plain_kill_{}", point as u32));
        let p = d.join("data.bin");
        std::fs::write(&p, plain_model(len)).unwrap();
        let envs = [
            ("TXMAP_PATH", p.display().to_string()),
            ("TXMAP_POINT", (point as u32).to_string()),
        ];
        let mut c = Proc::spawn(TEST, "plain", &envs, d.join("err"));
        c.wait_killed(&format!("the large commit at {point:?}"));
        remove_shared_state(d.path());
        let r = Region::open_plain(&p, opts()).unwrap();
        let v = r.view().unwrap();
        for pg in [0, LARGE / 2, LARGE - 1] {
            assert_eq!(
                v.read::<u64>(pg * PAGE + 8).unwrap(),
                plain_word(1, pg),
                "{point:?}"
            );
        }
        drop((v, r));
        let want = plain_with(plain_model(len), 1);
        assert!(
            std::fs::read(&p).unwrap() == want,
            "the file after {point:?}"
        );
    }
}

/// A plain file (`Region::open_plain`): a large commit alone goes in
/// place there too (its pages written at offset 0 of the file, not after a
/// header), and the file holds it after the close; one with another handle
/// open is logged and lands as well.
#[test]
fn a_large_commit_alone_in_a_plain_file_lands_at_its_offsets() {
    let d = ext4_dir("large_in_place_plain");
    let p = d.join("data.bin");
    let len = PAGES * PAGE + 100;
    let mut model = plain_model(len);
    std::fs::write(&p, &model).unwrap();
    for g in [1u64, 2] {
        let r = Region::open_plain(&p, opts()).unwrap();
        let other = (g == 2).then(|| Region::open_plain(&p, opts()).unwrap());
        plain_fill(&r, g);
        assert_eq!(records(&p), if g == 1 { 0 } else { 1 }, "generation {g}");
        drop((other, r));
        model = plain_with(model, g);
        assert!(
            std::fs::read(&p).unwrap() == model,
            "the file after generation {g}"
        );
    }
}

/// Write system calls this thread makes in `f` (`/proc/thread-self/io`).
fn write_calls_in(f: impl FnOnce()) -> u64 {
    let calls = || -> u64 {
        let io = std::fs::read_to_string("/proc/thread-self/io").unwrap();
        io.lines()
            .find_map(|l| l.strip_prefix("syscw: "))
            .unwrap()
            .parse()
            .unwrap()
    };
    let before = calls();
    f();
    calls() - before
}

/// Pages of the file-order tests, each stored last to first.
const ORDERED: u64 = 256;

/// The region at `p` reopened: page `pg` holds `pg + 1` for every test page.
fn check_ordered(p: &std::path::Path) {
    let r = Region::open(p, opts()).unwrap();
    let v = r.view().unwrap();
    for pg in 0..ORDERED {
        assert_eq!(v.read::<u64>(pg * PAGE).unwrap(), pg + 1);
    }
}

/// A checkpoint writes consecutive pages with one call, whatever order the
/// commits changed them in (the dirty list is in that order): 256 pages
/// stored last to first go into the file in a few calls, not 256.
#[test]
fn a_checkpoint_writes_consecutive_pages_together_whatever_order_they_changed_in() {
    let d = ext4_dir("checkpoint_in_file_order");
    let p = d.join("r");
    let r = Region::create(&p, (ORDERED + 8) * PAGE, opts()).unwrap();
    let mut v = r.view().unwrap();
    v.run(|v| {
        for pg in (0..ORDERED).rev() {
            v.write(pg * PAGE, &(pg + 1))?;
        }
        Ok(())
    })
    .unwrap();
    let calls = write_calls_in(|| r.checkpoint().unwrap());
    assert!(
        calls < 32,
        "{calls} write calls to checkpoint {ORDERED} consecutive pages"
    );
    drop((v, r));
    check_ordered(&p);
}

/// The same for a round written in place (its journal and its pages in
/// file order): 256 pages stored last to first take a few write calls.
#[test]
fn a_round_in_place_writes_consecutive_pages_together_whatever_order_they_were_stored_in() {
    let d = ext4_dir("round_in_file_order");
    let p = d.join("r");
    let r = Region::create(&p, (ORDERED + 8) * PAGE, opts()).unwrap();
    let mut v = r.view().unwrap();
    v.start_rounds().unwrap();
    for pg in (0..ORDERED).rev() {
        v.write(pg * PAGE, &(pg + 1)).unwrap();
    }
    let calls = write_calls_in(|| v.round().unwrap());
    assert_eq!(records(&p), 0, "in place");
    assert!(
        calls < 32,
        "{calls} write calls for a round of {ORDERED} consecutive pages"
    );
    v.stop_rounds();
    drop((v, r));
    check_ordered(&p);
}
