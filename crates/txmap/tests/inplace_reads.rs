//! Reads in place (docs/design/shared-pages.md, "Fifth session"): accessor
//! reads (of read-write transactions too) read a page the view holds no copy of
//! where its snapshot version lies (the version chains in shared memory, or
//! the region file), on the read side, without copying it into the view.
//! Readers of old snapshots, in threads and in other processes, must see
//! exactly their snapshot while commits add versions and checkpoints
//! overwrite the file and prune and reuse versions.
mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::*;
use txmap::{Durability, Options, Region, View};

const PAGE: usize = 4096;
const PAGES: usize = 16;
const WORDS: usize = PAGE / 8;

fn opts() -> Options {
    Options {
        durability: Durability::Async,
        ..Options::default()
    }
}

/// Commit `i` writes `i` into every word of the pages of its parity
/// (`(p + i) % 2 == 0`), so a snapshot whose last commit is `c` reads `c`
/// in those pages and `c - 1` in the others; and into the clock page
/// (`PAGES`), which so reads `c`.
fn commit(w: &mut View, i: u64) {
    w.run(|v| {
        let clock = std::iter::once(PAGES);
        for p in (0..PAGES)
            .filter(|p| (*p as u64 + i).is_multiple_of(2))
            .chain(clock)
        {
            let b = v.slice_mut((p * PAGE) as u64, PAGE)?;
            for x in b.chunks_exact_mut(8) {
                x.copy_from_slice(&i.to_ne_bytes());
            }
        }
        Ok(())
    })
    .unwrap();
}

/// Commits `from..to`, with a checkpoint after every even one (the file is
/// overwritten, versions are pruned and their blocks reused; between
/// checkpoints half of the pages are only in the chains).
fn write(r: &Region, from: u64, to: u64) {
    write_every(r, from, to, 2);
}

/// `write`, with a checkpoint after every `k`-th commit.
fn write_every(r: &Region, from: u64, to: u64, k: u64) {
    let mut w = r.view().unwrap();
    (from..to).for_each(|i| {
        commit(&mut w, i);
        if i % k == 0 {
            r.checkpoint().unwrap();
        }
    });
}

/// A region whose pages read as commits 1 and 2 left them.
fn region(name: &str) -> (TestDir, std::path::PathBuf, Region) {
    let (d, p, r) = new_region(name, ((PAGES + 1) * PAGE) as u64, opts());
    write(&r, 1, 3);
    (d, p, r)
}

/// The value every word of a whole page read holds; panics if torn.
fn whole(page: &[u64; WORDS], who: &str, p: usize) -> u64 {
    for (i, &w) in page.iter().enumerate() {
        assert_eq!(w, page[0], "{who}: page {p} torn at word {i}");
    }
    page[0]
}

/// Read-only transactions on a fresh view until `stop`: each reads every
/// page whole (one `View::read` of the page) again and again, with commits
/// and checkpoints going on, and checks the pages are one snapshot's and
/// never change under it. The view must not copy any page: the reads are
/// served in place. Returns the transactions run.
fn read_and_check(v: &mut View, stop: &dyn Fn() -> bool, who: &str) -> u64 {
    check_reads(v, stop, who, false)
}

/// `read_and_check` with serializable read-write transactions, each in a
/// fresh view (a page an earlier transaction of the view read is kept in
/// its cache instead); they store nothing.
fn read_and_check_rw(v: &mut View, stop: &dyn Fn() -> bool, who: &str) -> u64 {
    check_reads(v, stop, who, true)
}

fn check_reads(v: &mut View, stop: &dyn Fn() -> bool, who: &str, rw: bool) -> u64 {
    // Widen the window between finding a version and reading it.
    txmap::debug::slow_installs(2_000);
    // A pooled view may come with pages of an earlier view.
    let mut held = v.private_bytes();
    let mut txns = 0;
    while !stop() || txns == 0 {
        if rw {
            *v = v.region().view().unwrap();
            held = v.private_bytes();
            v.begin().unwrap();
        } else {
            v.begin_read().unwrap();
        }
        let read = |p: usize| whole(&v.read::<[u64; WORDS]>((p * PAGE) as u64).unwrap(), who, p);
        let first: Vec<u64> = (0..PAGES).map(read).collect();
        let last = *first.iter().max().unwrap();
        for (p, &x) in first.iter().enumerate() {
            let want = if (p as u64 + last).is_multiple_of(2) {
                last
            } else {
                last - 1
            };
            assert_eq!(
                x, want,
                "{who}: page {p} is not of the snapshot of commit {last}"
            );
        }
        for round in 0..(txns % 4 + 1) * 10 {
            for (p, &x) in first.iter().enumerate() {
                assert_eq!(
                    read(p),
                    x,
                    "{who}: page {p} changed under its snapshot (round {round})"
                );
            }
            std::thread::sleep(Duration::from_micros(300));
        }
        let now = v.private_bytes();
        assert!(
            now <= held,
            "{who}: the reads copied pages into the view instead of reading them in place ({held} -> {now} bytes)"
        );
        match v.commit() {
            // A read-write one conflicts when a commit since its snapshot
            // changed what it read.
            Ok(_) => {}
            Err(txmap::Error::Conflict) if rw => {}
            Err(e) => panic!("{who}: commit: {e}"),
        }
        txns += 1;
    }
    let now = v.private_bytes();
    assert!(
        now <= held,
        "{who}: the reads copied pages into the view instead of reading them in place ({held} -> {now} bytes)"
    );
    txmap::debug::slow_installs(0);
    txns
}

/// Runs `check` in 2 reader threads, each with a fresh view, while `write`
/// runs, and until it returned.
fn with_reader_threads(
    r: &Region,
    check: fn(&mut View, &dyn Fn() -> bool, &str) -> u64,
    write: impl FnOnce(),
) {
    let stop = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = (0..2)
        .map(|k| {
            let (r, stop) = (r.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut v = r.view().unwrap();
                check(
                    &mut v,
                    &|| stop.load(Ordering::Relaxed),
                    &format!("reader {k}"),
                )
            })
        })
        .collect();
    write();
    stop.store(true, Ordering::Relaxed);
    for h in readers {
        assert!(h.join().unwrap() > 0);
    }
}

/// Runs `check` in 2 reader processes (this test binary run again, as
/// `role()` tells it) while `write` runs, and until it returned; in such a
/// reader process runs `check` alone. The process twin of
/// `with_reader_threads`.
fn with_reader_processes(
    test: &str,
    name: &str,
    check: fn(&mut View, &dyn Fn() -> bool, &str) -> u64,
    write: impl FnOnce(&Region),
) {
    if role().is_some() {
        return run_reader(opts(), |v, stop| check(v, stop, "reader process"));
    }
    let (d, p, r) = region(name);
    let stop = d.join("stop");
    let mut readers = spawn_readers(test, &d, (&p, &stop), &r, 2, |_| vec![]);
    write(&r);
    stop_readers(&stop, &mut readers);
}

/// Read-only transactions until `stop`, each at the snapshot of the commit
/// the clock page names (read with `View::slice`, which copies the page
/// into the view: never from the view's cache of versions read in place):
/// every page read in place, on first reading and again after commits and
/// checkpoints went on, must be that snapshot's. A version cached for an
/// older snapshot, or a block freed and reused under the cache, reads
/// otherwise. Returns the transactions run.
fn read_against_clock(v: &mut View, stop: &dyn Fn() -> bool, who: &str) -> u64 {
    txmap::debug::slow_installs(2_000);
    let mut txns = 0;
    while !stop() || txns == 0 {
        v.begin_read().unwrap();
        let clock = v.slice((PAGES * PAGE) as u64, PAGE).unwrap();
        let clock = whole(&clock_words(clock), who, PAGES);
        for round in 0..txns % 3 + 1 {
            for p in 0..PAGES {
                let want = if (p as u64 + clock).is_multiple_of(2) {
                    clock
                } else {
                    clock - 1
                };
                let got = whole(&v.read::<[u64; WORDS]>((p * PAGE) as u64).unwrap(), who, p);
                assert_eq!(
                    got, want,
                    "{who}: page {p} read in place is not of the snapshot of commit {clock} (round {round})"
                );
            }
            if round > 0 {
                std::thread::sleep(Duration::from_micros(200));
            }
        }
        v.commit().unwrap();
        txns += 1;
    }
    txmap::debug::slow_installs(0);
    txns
}

/// The words of a page.
fn clock_words(b: &[u8]) -> [u64; WORDS] {
    std::array::from_fn(|i| u64::from_ne_bytes(b[i * 8..i * 8 + 8].try_into().unwrap()))
}

/// Reader threads read in place, again and again, pages whose versions
/// their views cache, while a writer commits (several commits between
/// prunings, so the versions' epoch may stay while the snapshot moves) and
/// checkpoints now and then (which prunes and reuses versions): fails when
/// the cache serves a version of another snapshot or a freed block.
#[test]
fn cached_versions_are_the_snapshots_while_commits_prune_and_reuse_them() {
    let (_d, _p, r) = region("inplace-cache-threads");
    with_reader_threads(&r, read_against_clock, || write_every(&r, 3, 803, 5));
}

/// The same with readers in other processes.
#[test]
fn cached_versions_in_other_processes_are_the_snapshots() {
    with_reader_processes(
        "cached_versions_in_other_processes_are_the_snapshots",
        "inplace-cache-procs",
        read_against_clock,
        |r| write_every(r, 3, 803, 5),
    );
}

/// Reader threads with fresh views read old snapshots in place while a
/// writer commits and checkpoints (fails when the read in place looks up
/// a newer snapshot's version, or reads outside the read side).
#[test]
fn readers_in_place_keep_their_snapshot_while_versions_are_pruned_and_reused() {
    let (_d, _p, r) = region("inplace-threads");
    with_reader_threads(&r, read_and_check, || write(&r, 3, 403));
    assert!(
        r.stats().checkpoint_seq > 400,
        "the checkpoints did not run"
    );
}

/// The same with serializable read-write transactions: what they only
/// read is read in place too, at their snapshot.
#[test]
fn read_write_readers_in_place_keep_their_snapshot_while_versions_are_pruned_and_reused() {
    let (_d, _p, r) = region("inplace-threads-rw");
    with_reader_threads(&r, read_and_check_rw, || write(&r, 3, 403));
}

/// The same with readers in other processes, which read this process's
/// versions in the shared version store.
#[test]
fn readers_in_place_in_other_processes_keep_their_snapshot() {
    with_reader_processes(
        "readers_in_place_in_other_processes_keep_their_snapshot",
        "inplace-procs",
        read_and_check,
        |r| write(r, 3, 403),
    );
}

/// The same with read-write transactions in other processes.
#[test]
fn read_write_readers_in_place_in_other_processes_keep_their_snapshot() {
    with_reader_processes(
        "read_write_readers_in_place_in_other_processes_keep_their_snapshot",
        "inplace-procs-rw",
        read_and_check_rw,
        |r| write(r, 3, 403),
    );
}

/// A page read in place hundreds of times at one snapshot (a tree's
/// header or root) is installed in the view after `PROMOTE_AFTER` (255)
/// reads and read there from then on; a page read a few times stays
/// shared. The installed copy is the snapshot's, and a later snapshot
/// that a commit changed the page for reads the new content.
#[test]
fn a_page_read_in_place_often_is_installed_as_its_snapshot() {
    let (_d, _p, r) = region("inplace-promote");
    // Commit 3 writes the odd pages, and no checkpoint follows: page 1 is
    // read from its version in shared memory, not from the file.
    write_every(&r, 3, 4, 1000);
    // The writers' memory, pooled, goes to a view of its own: the
    // reader's memory is fresh, so its private bytes count its installs.
    let _pooled = r.view().unwrap();
    let mut rv = r.view().unwrap();
    let read = |rv: &mut View, p: usize| {
        rv.begin_read().unwrap();
        let x = rv.read::<u64>((p * PAGE) as u64).unwrap();
        rv.commit().unwrap();
        x
    };
    let before = rv.private_bytes();
    for _ in 0..200 {
        assert_eq!(read(&mut rv, 1), 3);
    }
    assert_eq!(read(&mut rv, 3), 3);
    assert_eq!(rv.private_bytes(), before, "read 200 times: still shared");
    for _ in 0..100 {
        assert_eq!(read(&mut rv, 1), 3);
    }
    assert_eq!(
        rv.private_bytes(),
        before + PAGE as u64,
        "read 300 times: page 1 installed, page 3 not"
    );
    // An old snapshot keeps reading 3 while commit 5 rewrites page 1.
    let mut old = r.view().unwrap();
    old.begin_read().unwrap();
    write_every(&r, 4, 6, 1000);
    assert_eq!(read(&mut rv, 1), 5, "the installed copy was refreshed");
    assert_eq!(old.read::<u64>(PAGE as u64).unwrap(), 3);
    old.commit().unwrap();
}
