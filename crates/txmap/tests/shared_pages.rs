//! Shared committed pages (issue 20, docs/design/shared-pages.md): accessor
//! reads return the region file's pages, shared with the page cache (in
//! read-write transactions too, for pages they do not write), and the
//! checkpoint's fence keeps every byte a reader holds at its snapshot while
//! checkpoints overwrite those pages, in threads and in other processes,
//! stopped or killed.
mod common;

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::*;
use txmap::debug::CrashPoint;
use txmap::{Durability, Options, Region, View};

const PAGE: usize = 4096;
const PAGES: usize = 32;
const WORDS: usize = PAGE / 8;
/// Liveness bound for children (not a speed assertion).
const LIVENESS: Duration = Duration::from_secs(120);

fn opts() -> Options {
    Options {
        durability: Durability::Async,
        ..Options::default()
    }
}

fn env(k: &str) -> String {
    std::env::var(k).unwrap_or_else(|_| panic!("{k} not set"))
}

/// Fills every word of each page in `pages` with `x`, in one transaction.
fn fill(v: &mut View, pages: impl Iterator<Item = usize> + Clone, x: u64) {
    v.run(|v| {
        for p in pages.clone() {
            let b = v.slice_mut((p * PAGE) as u64, PAGE)?;
            for w in b.chunks_exact_mut(8) {
                w.copy_from_slice(&x.to_ne_bytes());
            }
        }
        Ok(())
    })
    .unwrap();
}

/// The value every word of the page at `ptr` holds; panics (naming `what`)
/// if the page is not whole.
fn whole(ptr: *const u8, what: &str) -> u64 {
    let w = |i: usize| {
        // SAFETY: the caller's pointer is a page handed out by `View::slice`
        // in a transaction that is still open.
        unsafe { std::ptr::read_volatile((ptr as *const u64).add(i)) }
    };
    let first = w(0);
    for i in 1..WORDS {
        assert_eq!(w(i), first, "{what}: a torn page (word {i})");
    }
    first
}

/// Pointers to every page, taken by `View::slice` in the open transaction.
fn pointers(v: &View) -> Vec<*const u8> {
    (0..PAGES)
        .map(|p| v.slice((p * PAGE) as u64, PAGE).unwrap().as_ptr())
        .collect()
}

/// How a reader takes its pointers.
#[derive(Clone, Copy, Debug)]
enum How {
    /// `View::slice` (accessor reads).
    Slice,
    /// `View::base` (plain loads, first touches fault).
    Raw,
    /// `View::base` after the advisory call for the whole region.
    Advised,
    /// `View::base` of a fresh view each transaction: a view's first
    /// read-only transaction maps the whole file at `begin_read` when the
    /// file holds every page at its snapshot (no fault), else runs.
    Fresh,
    /// `View::slice` in a serializable read-write transaction of a fresh
    /// view each time (pages no earlier transaction of the view touched
    /// are read shared), which ends by storing a word of page 0 again and
    /// committing (a conflict when a commit since its snapshot changed the
    /// pages it read).
    FreshRw,
    /// As `FreshRw`, reading by plain loads (`View::base`): each first
    /// touch faults and maps that page from the file.
    FreshRawRw,
}

/// Pointers to every page at the view's own address (`View::base`): plain
/// loads, which fault on first touch.
fn raw_pointers(v: &View) -> Vec<*const u8> {
    // SAFETY: every page lies inside the view's mapping of the region.
    (0..PAGES)
        .map(|p| unsafe { v.base().add(p * PAGE) as *const u8 })
        .collect()
}

/// Read-only transactions on `v` that hold raw pointers to every page while
/// `stop` is unset, checking again and again that every page still holds
/// the value it held at the start. Returns the transactions run.
fn hold_and_check(v: &mut View, stop: &dyn Fn() -> bool, who: &str, how: How) -> u64 {
    let mut txns = 0;
    let mut rounds = 0u64;
    while !stop() {
        if let How::Fresh | How::FreshRw | How::FreshRawRw = how {
            *v = v.region().view().unwrap();
        }
        if let How::FreshRw | How::FreshRawRw = how {
            v.begin().unwrap();
        } else {
            v.begin_read().unwrap();
        }
        let ptrs = match how {
            How::Slice | How::FreshRw => pointers(v),
            How::Raw | How::Fresh | How::FreshRawRw => raw_pointers(v),
            How::Advised => {
                v.set_page_access(0, PAGES * PAGE, txmap::PageAccess::Read)
                    .unwrap();
                raw_pointers(v)
            }
        };
        let x = whole(ptrs[0], who);
        for _ in 0..(txns % 5 + 1) * 20 {
            for (p, &ptr) in ptrs.iter().enumerate() {
                assert_eq!(
                    whole(ptr, who),
                    x,
                    "{who}: page {p} changed under its snapshot"
                );
            }
            rounds += 1;
            std::thread::sleep(Duration::from_micros(200));
        }
        if let How::FreshRw | How::FreshRawRw = how {
            v.write(0, &x).unwrap();
            // Its pages still hold the snapshot after its own store.
            for (p, &ptr) in ptrs.iter().enumerate().skip(1) {
                assert_eq!(whole(ptr, who), x, "{who}: page {p} changed after a store");
            }
            match v.commit() {
                Ok(_) | Err(txmap::Error::Conflict) => {}
                Err(e) => panic!("{who}: commit: {e}"),
            }
        } else {
            v.commit().unwrap();
        }
        txns += 1;
    }
    assert!(rounds > 0);
    txns
}

/// Commits `n` times, each writing every page whole, each followed by a
/// checkpoint (which overwrites the pages readers map).
fn write_and_checkpoint(r: &Region, from: u64, n: u64) {
    let mut w = r.view().unwrap();
    for i in from..from + n {
        fill(&mut w, 0..PAGES, i);
        r.checkpoint().unwrap();
    }
}

/// A region of `PAGES` pages in a fresh directory, every page holding 1
/// and checkpointed (readers then map the file's pages).
fn region_with_pages(name: &str) -> (TestDir, std::path::PathBuf, Region) {
    let (d, p, r) = new_region(name, (PAGES * PAGE) as u64, opts());
    write_and_checkpoint(&r, 1, 1);
    (d, p, r)
}

/// A read-only view of the whole region by 8 views holds the pages once:
/// the views' accessor reads map the region file's pages (page cache), no
/// view copies them (today's path copied each page into each view).
#[test]
fn a_page_read_by_eight_views_is_one_physical_page() {
    const BIG: usize = 1024; // 4 MiB
    let d = ext4_dir("sp-eight");
    let r = Region::create(&d.join("r.txm"), (BIG * PAGE) as u64, opts()).unwrap();
    let mut w = r.view().unwrap();
    fill(&mut w, 0..BIG, 3);
    drop(w);
    r.checkpoint().unwrap();
    let private = || {
        let s = std::fs::read_to_string("/proc/self/smaps_rollup").unwrap();
        ["Pss_Anon:", "Pss_Shmem:"]
            .iter()
            .map(|k| {
                s.lines()
                    .find(|l| l.starts_with(k))
                    .and_then(|l| l[k.len()..].split_whitespace().next()?.parse::<u64>().ok())
                    .unwrap()
            })
            .sum::<u64>()
    };
    let before = private();
    let mut views: Vec<View> = (0..8).map(|_| r.view().unwrap()).collect();
    for v in &mut views {
        v.begin_read().unwrap();
        for p in 0..BIG {
            assert_eq!(v.read::<u64>((p * PAGE) as u64).unwrap(), 3);
        }
    }
    let added = private().saturating_sub(before);
    // One copy per view would be 8 × 4 MiB = 32 MiB; page tables and the
    // views' own tables are a few hundred KiB.
    assert!(
        added < 4 << 10,
        "8 views that read 4 MiB added {added} KiB of private memory"
    );
    for v in &mut views {
        v.commit().unwrap();
    }
}

/// Reader threads hold raw pointers into pages at their snapshot while a
/// writer commits and checkpoints after every commit: every byte they see is
/// their snapshot's (fails with `debug::set_fence(false)`).
#[test]
fn old_snapshot_reads_stay_while_checkpoints_overwrite_shared_pages() {
    let d = ext4_dir("sp-threads");
    let r = Region::create(&d.join("r.txm"), (PAGES * PAGE) as u64, opts()).unwrap();
    write_and_checkpoint(&r, 1, 1);
    readers_in_threads(&r, &[How::Slice; 3], "reader");
}

/// A reader thread per entry of `hows` (`hold_and_check`, each with a view
/// of its own) while this thread commits and checkpoints 300 times.
fn readers_in_threads(r: &Region, hows: &[How], who: &str) {
    let stop = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = hows
        .iter()
        .enumerate()
        .map(|(k, &how)| {
            let (r, stop) = (r.clone(), stop.clone());
            let who = format!("{who} {k}");
            std::thread::spawn(move || {
                let mut v = r.view().unwrap();
                hold_and_check(&mut v, &|| stop.load(Ordering::Relaxed), &who, how)
            })
        })
        .collect();
    write_and_checkpoint(r, 2, 300);
    stop.store(true, Ordering::Relaxed);
    for h in readers {
        assert!(h.join().unwrap() > 0);
    }
}

/// The same with serializable read-write transactions, each in a fresh
/// view (so its reads are shared, not copied), that end with a store and
/// a commit: every byte their slices show is their snapshot's, before and
/// after their own store (fails with `debug::set_fence(false)`, and when
/// read-write transactions copy instead: see
/// `read_write_transactions_copy_only_what_they_write`).
#[test]
fn read_write_readers_keep_their_snapshot_while_checkpoints_overwrite_shared_pages() {
    let (_d, _p, r) = region_with_pages("sp-threads-rw");
    readers_in_threads(&r, &[How::FreshRw; 3], "read-write reader");
}

/// The same with plain loads (`View::base`) in the read-write
/// transactions: each page a first touch mapped from the file keeps the
/// snapshot's content while checkpoints overwrite the file (fails with
/// `debug::set_fence(false)`).
#[test]
fn plain_load_read_write_readers_keep_their_snapshot_while_checkpoints_overwrite_pages() {
    let (_d, _p, r) = region_with_pages("sp-threads-raw-rw");
    readers_in_threads(&r, &[How::FreshRawRw; 3], "plain-load read-write reader");
}

/// Reader threads holding plain-load pointers (`View::base`) into pages
/// their faults (or, for one, the advisory call; for another, a fresh
/// view's first transaction at `begin_read`) mapped from the region
/// file at their own addresses, while a writer commits and
/// checkpoints after every commit: every byte they see is their snapshot's
/// (fails when the fence skips pages mapped at the user address).
#[test]
fn raw_pointer_readers_keep_their_snapshot_while_checkpoints_overwrite_pages() {
    let d = ext4_dir("sp-threads-raw");
    let r = Region::create(&d.join("r.txm"), (PAGES * PAGE) as u64, opts()).unwrap();
    write_and_checkpoint(&r, 1, 1);
    readers_in_threads(
        &r,
        &[How::Raw, How::Raw, How::Advised, How::Fresh],
        "raw reader",
    );
}

/// Pss of this process's anonymous and shared-memory pages (KiB): the
/// views' private copies, not the page cache.
fn private_kib() -> u64 {
    let s = std::fs::read_to_string("/proc/self/smaps_rollup").unwrap();
    ["Pss_Anon:", "Pss_Shmem:"]
        .iter()
        .map(|k| {
            s.lines()
                .find(|l| l.starts_with(k))
                .and_then(|l| l[k.len()..].split_whitespace().next()?.parse::<u64>().ok())
                .unwrap()
        })
        .sum()
}

/// 8 threads whose read-only transactions read every page of a 4 MiB
/// region by plain loads (`View::base`) hold it once: their faults map the
/// region file's pages (page cache), no view copies them into its memory
/// file (the copy made 8 × 4 MiB).
#[test]
fn a_page_read_by_plain_loads_in_eight_threads_is_one_physical_page() {
    const BIG: usize = 1024; // 4 MiB
    let d = ext4_dir("sp-eight-raw");
    let r = Region::create(&d.join("r.txm"), (BIG * PAGE) as u64, opts()).unwrap();
    let mut w = r.view().unwrap();
    fill(&mut w, 0..BIG, 3);
    drop(w);
    r.checkpoint().unwrap();
    let before = private_kib();
    let read = Arc::new(std::sync::Barrier::new(9));
    let done = Arc::new(std::sync::Barrier::new(9));
    let threads: Vec<_> = (0..8)
        .map(|_| {
            let (r, read, done) = (r.clone(), read.clone(), done.clone());
            std::thread::spawn(move || {
                let mut v = r.view().unwrap();
                let memfd = v.private_bytes();
                v.begin_read().unwrap();
                for p in 0..BIG {
                    // SAFETY: inside the view's mapping, in a transaction.
                    let x = unsafe { (v.base().add(p * PAGE) as *const u64).read_volatile() };
                    assert_eq!(x, 3, "page {p}");
                }
                let grew = v.private_bytes().saturating_sub(memfd);
                read.wait();
                done.wait();
                v.commit().unwrap();
                grew
            })
        })
        .collect();
    read.wait();
    let added = private_kib().saturating_sub(before);
    done.wait();
    for t in threads {
        let grew = t.join().unwrap();
        assert!(
            grew < (BIG * PAGE / 4) as u64,
            "a view's memory file grew by {grew} bytes reading 4 MiB by plain loads"
        );
    }
    // One copy per view would be 8 × 4 MiB = 32 MiB; page tables and the
    // views' own tables are a few hundred KiB.
    assert!(
        added < 4 << 10,
        "8 views that read 4 MiB by plain loads added {added} KiB of private memory"
    );
}

/// A read-only transaction maps pages from the file at the user address;
/// a read-write transaction on the same view then stores to them by plain
/// stores: it reads its snapshot, its stores land in its own memory (not
/// in the region file, not lost), and it commits them.
#[test]
fn a_read_write_transaction_after_plain_file_reads_writes_its_own_copy() {
    let d = ext4_dir("sp-ro-then-rw");
    let path = d.join("r.txm");
    let r = Region::create(&path, (PAGES * PAGE) as u64, opts()).unwrap();
    write_and_checkpoint(&r, 1, 1);
    for round in 0..3u64 {
        // A fresh view each round (a closed view's memory is reused): its
        // faults map the file again.
        let mut v = r.view().unwrap();
        let ptrs = raw_pointers(&v);
        v.begin_read().unwrap();
        for (p, &ptr) in ptrs.iter().enumerate() {
            assert_eq!(whole(ptr, "read-only"), 1 + round, "page {p}");
        }
        v.commit().unwrap();
        v.begin().unwrap();
        for (p, &ptr) in ptrs.iter().enumerate() {
            assert_eq!(whole(ptr, "read-write"), 1 + round, "page {p}");
            for i in 0..WORDS {
                // SAFETY: inside the view's mapping, in a transaction.
                unsafe { (ptr as *mut u64).add(i).write_volatile(2 + round) };
            }
        }
        v.commit().unwrap();
        // Another view sees the commit; the file still holds the checkpoint.
        let mut o = r.view().unwrap();
        o.begin_read().unwrap();
        for p in 0..PAGES {
            let at = (p * PAGE) as u64;
            assert_eq!(o.read::<u64>(at).unwrap(), 2 + round, "page {p}");
            assert_eq!(o.read::<u64>(at + PAGE as u64 - 8).unwrap(), 2 + round);
        }
        o.commit().unwrap();
        let file = std::fs::read(&path).unwrap();
        // The region's data follows a one-page header (docs/FORMAT.md).
        let word = u64::from_ne_bytes(file[PAGE..PAGE + 8].try_into().unwrap());
        assert_eq!(word, 1 + round, "a store reached the region file");
        r.checkpoint().unwrap();
    }
}

fn reader_child() {
    let how = match std::env::var("TXMAP_RAW").as_deref() {
        Ok("advised") => How::Advised,
        Ok("fresh") => How::Fresh,
        Ok("fresh-rw") => How::FreshRw,
        Ok("fresh-raw-rw") => How::FreshRawRw,
        Ok(_) => How::Raw,
        Err(_) => How::Slice,
    };
    run_reader(opts(), |v, stop| {
        hold_and_check(v, stop, "reader process", how)
    });
}

/// The same with readers in other processes: their fence threads make the
/// pages private before this process's checkpoints overwrite them.
#[test]
fn readers_in_other_processes_keep_their_snapshot_while_checkpoints_overwrite_shared_pages() {
    let test =
        "readers_in_other_processes_keep_their_snapshot_while_checkpoints_overwrite_shared_pages";
    if role().is_some() {
        return reader_child();
    }
    readers_in_processes(test, "sp-procs", &[None, None]);
}

/// The same with plain loads through `View::base` (one reader after the
/// advisory call): the pages the readers' faults mapped from the region
/// file at their own addresses are made
/// private by their fence threads before the checkpoints overwrite them.
#[test]
fn raw_pointer_readers_in_other_processes_keep_their_snapshot_while_checkpoints_overwrite_pages() {
    let test = "raw_pointer_readers_in_other_processes_keep_their_snapshot_while_checkpoints_overwrite_pages";
    if role().is_some() {
        return reader_child();
    }
    readers_in_processes(
        test,
        "sp-procs-raw",
        &[Some("raw"), Some("advised"), Some("fresh")],
    );
}

/// The same with read-write transactions in other processes (`FreshRw`;
/// one reads by plain loads, `FreshRawRw`).
#[test]
fn read_write_readers_in_other_processes_keep_their_snapshot_while_checkpoints_overwrite_pages() {
    let test = "read_write_readers_in_other_processes_keep_their_snapshot_while_checkpoints_overwrite_pages";
    if role().is_some() {
        return reader_child();
    }
    readers_in_processes(
        test,
        "sp-procs-rw",
        &[Some("fresh-rw"), Some("fresh-rw"), Some("fresh-raw-rw")],
    );
}

/// One reader process per entry of `how` (`reader_child`, reading as its
/// `TXMAP_RAW` says: `None` by slices, `raw` by plain loads, `advised`
/// after the advisory call, `fresh` in a fresh view each transaction,
/// `fresh-rw` in read-write ones, `fresh-raw-rw` by plain loads in those) holds its snapshots while this process
/// commits and checkpoints 300 times.
fn readers_in_processes(test: &str, name: &str, how: &[Option<&str>]) {
    let (d, p, r) = region_with_pages(name);
    let stop = d.join("stop");
    let mut readers = spawn_readers(test, &d, (&p, &stop), &r, how.len(), |k| {
        how[k]
            .map(|h| vec![("TXMAP_RAW", h.into())])
            .unwrap_or_default()
    });
    write_and_checkpoint(&r, 2, 300);
    stop_readers(&stop, &mut readers);
}

fn stopped_child() {
    let r = Region::open(Path::new(&env("TXMAP_PATH")), opts()).unwrap();
    let mut v = r.view().unwrap();
    // The view's first transaction: its plain loads read the file mapped
    // whole at `begin_read`, its slices the view's file mapping.
    v.begin_read().unwrap();
    let mut ptrs = pointers(&v);
    ptrs.extend(raw_pointers(&v));
    let x = whole(ptrs[0], "stopped reader");
    for (p, &ptr) in ptrs.iter().enumerate() {
        assert_eq!(whole(ptr, "stopped reader"), x, "page {p} of two reads");
    }
    std::fs::write(env("TXMAP_READY"), x.to_string()).unwrap();
    let go = env("TXMAP_GO");
    while !Path::new(&go).exists() {
        std::thread::sleep(Duration::from_millis(1));
    }
    for (p, &ptr) in ptrs.iter().enumerate() {
        assert_eq!(
            whole(ptr, "stopped reader"),
            x,
            "page {p} changed under its snapshot"
        );
    }
    v.commit().unwrap();
    std::fs::write(env("TXMAP_RESULT"), format!("OK {x}")).unwrap();
}

/// A reader process stopped (SIGSTOP) while it holds file pages cannot
/// answer the fence: checkpoints then write nothing past its snapshot (the
/// log keeps the rest), only the first of them waits for it, and when it
/// continues it still reads its snapshot.
/// A reader killed while holding them is reaped, and checkpoints go on to
/// the newest commit.
#[test]
fn a_stopped_reader_process_makes_checkpoints_stop_at_its_snapshot() {
    let test = "a_stopped_reader_process_makes_checkpoints_stop_at_its_snapshot";
    if role().is_some() {
        return stopped_child();
    }
    let (d, p, r) = region_with_pages("sp-stopped");
    let spawn = |k: u32| {
        let (ready, go, result) = (
            d.join(&format!("ready-{k}")),
            d.join(&format!("go-{k}")),
            d.join(&format!("result-{k}")),
        );
        let envs = [
            ("TXMAP_PATH", p.display().to_string()),
            ("TXMAP_READY", ready.display().to_string()),
            ("TXMAP_GO", go.display().to_string()),
            ("TXMAP_RESULT", result.display().to_string()),
        ];
        let mut proc = Proc::spawn(test, "reader", &envs, d.join(&format!("err-{k}")));
        let start = Instant::now();
        while !ready.exists() {
            proc.check_running("the reader");
            assert!(start.elapsed() < LIVENESS);
            std::thread::sleep(Duration::from_millis(1));
        }
        (proc, go, result)
    };
    let (mut stopped, go, result) = spawn(0);
    let snap = r.stats().oldest_snapshot.expect("the reader's snapshot");
    stopped.signal(rustix::process::Signal::STOP);
    let start = Instant::now();
    while stopped.state() != 'T' {
        assert!(start.elapsed() < LIVENESS);
        std::thread::sleep(Duration::from_millis(1));
    }
    // Only the first checkpoint waits for it (up to its bound, 2 s): 70
    // that each waited would outlast the liveness bound.
    let start = Instant::now();
    write_and_checkpoint(&r, 2, 70);
    assert!(
        start.elapsed() < LIVENESS,
        "every checkpoint waited for the stopped reader"
    );
    let s = r.stats();
    assert!(
        s.checkpoint_seq <= snap && s.commit_seq > snap,
        "a checkpoint passed the stopped reader's snapshot {snap}: {s:?}"
    );
    stopped.signal(rustix::process::Signal::CONT);
    std::fs::write(&go, "").unwrap();
    stopped.wait_ok("the stopped reader");
    assert_eq!(std::fs::read_to_string(&result).unwrap(), "OK 1");

    // Killed while holding them: reaped by the next checkpoint.
    let (mut killed, _, _) = spawn(1);
    fill(&mut r.view().unwrap(), 0..PAGES, 9);
    killed.signal(rustix::process::Signal::KILL);
    let _ = killed.try_wait();
    killed.kill();
    r.checkpoint().unwrap();
    let s = r.stats();
    assert_eq!(s.checkpoint_seq, s.commit_seq, "{s:?}");
}

/// A reader that asked for its view's address holds its first
/// `begin_read` inside the whole-file mapping (`FileRunPause::WholeMapped`:
/// mapped, its slot reading the file, not yet checked), says so, and waits
/// there to be killed.
fn whole_mapping_child() {
    let r = Region::open(Path::new(&env("TXMAP_PATH")), opts()).unwrap();
    let mut v = r.view().unwrap();
    let _ = v.base();
    let ready = env("TXMAP_READY");
    std::thread::spawn(move || {
        while !txmap::debug::file_run_paused() {
            std::thread::sleep(Duration::from_millis(1));
        }
        std::fs::write(ready, "").unwrap();
    });
    txmap::debug::pause_file_run(txmap::debug::FileRunPause::WholeMapped);
    v.begin_read().unwrap();
    // Not reached before the parent kills this process (the hook waits
    // about a minute).
    std::thread::sleep(Duration::from_secs(600));
}

/// SIGKILL of a reader process in the middle of its view's whole-file
/// mapping at `begin_read`: its slot (reading the file at its snapshot) is
/// reaped, and the next checkpoint writes the newest commit.
#[test]
fn sigkill_of_a_reader_mapping_the_whole_file_lets_checkpoints_reach_the_newest_commit() {
    let test =
        "sigkill_of_a_reader_mapping_the_whole_file_lets_checkpoints_reach_the_newest_commit";
    if role().is_some() {
        return whole_mapping_child();
    }
    let (d, p, r) = region_with_pages("sp-kill-whole");
    let ready = d.join("ready");
    let envs = [
        ("TXMAP_PATH", p.display().to_string()),
        ("TXMAP_READY", ready.display().to_string()),
    ];
    let mut child = Proc::spawn(test, "reader", &envs, d.join("err"));
    let start = Instant::now();
    while !ready.exists() {
        child.check_running("the reader");
        assert!(
            start.elapsed() < LIVENESS,
            "the reader never reached the mapping"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    let snap = r.stats().oldest_snapshot.expect("the reader's snapshot");
    fill(&mut r.view().unwrap(), 0..PAGES, 9);
    child.signal(rustix::process::Signal::KILL);
    let _ = child.try_wait();
    child.kill();
    r.checkpoint().unwrap();
    let s = r.stats();
    assert!(s.commit_seq > snap, "{s:?}");
    assert_eq!(s.checkpoint_seq, s.commit_seq, "{s:?}");
    // A fresh view here maps the whole file and reads the newest.
    let mut v = r.view().unwrap();
    let ptrs = raw_pointers(&v);
    v.begin_read().unwrap();
    for (p, &ptr) in ptrs.iter().enumerate() {
        assert_eq!(whole(ptr, "after the kill"), 9, "page {p}");
    }
    assert_eq!(
        v.faults(),
        0,
        "the fresh view mapped runs, not the whole file"
    );
    v.commit().unwrap();
}

fn checkpointer_child() {
    let r = Region::open(Path::new(&env("TXMAP_PATH")), opts()).unwrap();
    txmap::debug::crash_at(
        CrashPoint::CheckpointFenced,
        env("TXMAP_NTH").parse().unwrap(),
    );
    let mut w = r.view().unwrap();
    let mut acks = Acks::open(&env("TXMAP_ACKS"));
    for i in 100.. {
        fill(&mut w, 0..PAGES, i);
        acks.line(&i.to_string());
        r.checkpoint().unwrap();
    }
}

/// SIGKILL of a checkpointer after the fence, before it overwrites the
/// pages: this process's reader keeps its snapshot through it and through
/// the checkpoints after it; every commit the dead process acknowledged is
/// there, and after all close, the region reopens with it.
#[test]
fn sigkill_of_a_checkpointer_after_the_fence_keeps_readers_and_commits() {
    let test = "sigkill_of_a_checkpointer_after_the_fence_keeps_readers_and_commits";
    if role().is_some() {
        return checkpointer_child();
    }
    let (d, p, r) = region_with_pages("sp-kill");
    for nth in [1u64, 3] {
        let mut v = r.view().unwrap();
        v.begin_read().unwrap();
        let ptrs = pointers(&v);
        let x = whole(ptrs[0], "reader");
        let acks = d.join(&format!("acks-{nth}"));
        let envs = [
            ("TXMAP_PATH", p.display().to_string()),
            ("TXMAP_NTH", nth.to_string()),
            ("TXMAP_ACKS", acks.display().to_string()),
        ];
        let mut child = Proc::spawn(test, "checkpointer", &envs, d.join(&format!("err-{nth}")));
        let start = Instant::now();
        let status = loop {
            if let Some(s) = child.try_wait() {
                break s;
            }
            assert!(start.elapsed() < LIVENESS, "the checkpointer never died");
            std::thread::sleep(Duration::from_millis(1));
        };
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(status.signal(), Some(9), "{}", child.stderr());
        for (k, &ptr) in ptrs.iter().enumerate() {
            assert_eq!(
                whole(ptr, "reader"),
                x,
                "page {k} changed under its snapshot"
            );
        }
        let last: u64 = std::fs::read_to_string(&acks)
            .unwrap()
            .lines()
            .last()
            .expect("the checkpointer committed")
            .parse()
            .unwrap();
        // More checkpoints over the same pages, here, while the reader holds them.
        write_and_checkpoint(&r, last + 1000, 3);
        for (k, &ptr) in ptrs.iter().enumerate() {
            assert_eq!(
                whole(ptr, "reader"),
                x,
                "page {k} changed under its snapshot"
            );
        }
        v.commit().unwrap();
        v.begin_read().unwrap();
        assert_eq!(whole(pointers(&v)[PAGES - 1], "after"), last + 1002);
        v.commit().unwrap();
    }
    let want = {
        let mut v = r.view().unwrap();
        v.begin_read().unwrap();
        let x = whole(pointers(&v)[0], "before close");
        v.commit().unwrap();
        x
    };
    drop(r);
    let r = Region::open(&p, opts()).unwrap();
    let mut v = r.view().unwrap();
    v.begin_read().unwrap();
    for (k, &ptr) in pointers(&v).iter().enumerate() {
        assert_eq!(whole(ptr, "reopened"), want, "page {k}");
    }
    v.commit().unwrap();
}

/// How a reader of `many_snapshots_shared_pages` reads.
#[derive(Clone, Copy, PartialEq)]
enum Kind {
    /// Read-only transactions, `View::slice`.
    Slice,
    /// Read-only transactions, plain loads (`View::base`).
    Loads,
    /// Serializable read-write transactions, plain loads, and now and then
    /// plain stores filling a page it holds; commits or conflicts.
    ReadWrite,
}

/// A model with many snapshots alive: 33 views of three kinds (`Kind`),
/// in transactions of different ages, hold pointers to pages they read at
/// random times (early, or late after many checkpoints), while commits
/// write random pages and checkpoints run; every page a view holds is,
/// whole, the model's version at the view's snapshot, or what the view
/// itself stored there (fails with the fence off). A read-write view's
/// commit that succeeds is a commit of the model.
#[test]
fn many_snapshots_shared_pages() {
    let test = "many_snapshots_shared_pages";
    let mut rng = txmap::io::sim::SplitMix(seed(test));
    let d = ext4_dir("sp-model");
    let r = Region::create(&d.join("r.txm"), (PAGES * PAGE) as u64, opts()).unwrap();
    let mut w = r.view().unwrap();
    // history[p]: (commit, value) of every version of page p.
    let mut history: Vec<Vec<(u64, u64)>> = vec![vec![(0, 0)]; PAGES];
    let mut commits = 0u64;
    let value_at = |h: &Vec<(u64, u64)>, s: u64| h.iter().rev().find(|&&(c, _)| c <= s).unwrap().1;
    struct Reader {
        view: View,
        kind: Kind,
        snapshot: Option<u64>,
        held: Vec<(usize, *const u8)>,
        /// Pages this transaction filled, and with what.
        own: Vec<(usize, u64)>,
    }
    let kinds = [Kind::Slice, Kind::Loads, Kind::ReadWrite];
    let mut readers: Vec<Reader> = (0..33)
        .map(|k| Reader {
            view: r.view().unwrap(),
            kind: kinds[k % kinds.len()],
            snapshot: None,
            held: Vec::new(),
            own: Vec::new(),
        })
        .collect();
    let (mut checked, mut rw_commits, mut rw_stores, mut conflicts) = (0u64, 0u64, 0u64, 0u64);
    for step in 0..4000 {
        match rng.next() % 10 {
            0..=3 => {
                let pages: Vec<usize> = (0..PAGES)
                    .filter(|_| rng.next().is_multiple_of(4))
                    .collect();
                if !pages.is_empty() {
                    commits += 1;
                    let x = commits * 1000 + rng.next() % 1000;
                    fill(&mut w, pages.iter().copied(), x);
                    for &p in &pages {
                        history[p].push((commits, x));
                    }
                }
            }
            4 => r.checkpoint().unwrap(),
            _ => {
                let k = (rng.next() % readers.len() as u64) as usize;
                let rd = &mut readers[k];
                let p = (rng.next() % PAGES as u64) as usize;
                match rd.snapshot {
                    None => {
                        if rd.kind == Kind::ReadWrite {
                            rd.view.begin().unwrap();
                        } else {
                            rd.view.begin_read().unwrap();
                        }
                        rd.snapshot = Some(commits);
                    }
                    Some(_) if rng.next().is_multiple_of(8) => {
                        rd.held.clear();
                        match rd.view.commit() {
                            Ok(()) if !rd.own.is_empty() => {
                                commits += 1;
                                rw_commits += 1;
                                for &(q, x) in &rd.own {
                                    history[q].push((commits, x));
                                }
                            }
                            Ok(()) => {}
                            Err(txmap::Error::Conflict) => conflicts += 1,
                            Err(e) => panic!("step {step}: view {k}: commit: {e}"),
                        }
                        rd.own.clear();
                        rd.snapshot = None;
                    }
                    Some(_) if rd.kind == Kind::ReadWrite && rng.next().is_multiple_of(6) => {
                        // A value no commit of the model writes.
                        let x = u64::MAX - step;
                        // SAFETY: page p lies inside the view's mapping,
                        // in its open read-write transaction.
                        let base = unsafe { rd.view.base().add(p * PAGE) } as *mut u64;
                        for i in 0..WORDS {
                            // SAFETY: as above, an aligned word of page p.
                            unsafe { base.add(i).write_volatile(x) };
                        }
                        rw_stores += 1;
                        rd.own.retain(|&(q, _)| q != p);
                        rd.own.push((p, x));
                        rd.held.push((p, base as *const u8));
                    }
                    Some(_) => {
                        let ptr = match rd.kind {
                            Kind::Slice => rd.view.slice((p * PAGE) as u64, PAGE).unwrap().as_ptr(),
                            // SAFETY: page p lies inside the view's mapping.
                            Kind::Loads | Kind::ReadWrite => unsafe {
                                rd.view.base().add(p * PAGE)
                            },
                        };
                        rd.held.push((p, ptr));
                    }
                }
            }
        }
        for (k, rd) in readers.iter().enumerate() {
            let Some(s) = rd.snapshot else { continue };
            for &(p, ptr) in &rd.held {
                let want = match rd.own.iter().find(|&&(q, _)| q == p) {
                    Some(&(_, x)) => x,
                    None => value_at(&history[p], s),
                };
                let got = whole(ptr, "model");
                assert_eq!(
                    got, want,
                    "step {step}: view {k} at snapshot {s}, page {p} (commits {commits})"
                );
                checked += 1;
            }
        }
    }
    assert!(checked > 10_000, "{checked} pages checked");
    // Long read-write transactions beside frequent commits mostly
    // conflict; what they read is checked either way.
    assert!(
        rw_stores > 0 && rw_commits + conflicts > 0,
        "{rw_stores} read-write stores, {rw_commits} commits, {conflicts} conflicts"
    );
    assert!(
        r.stats().log_bytes < 1 << 20,
        "checkpoints kept the log short"
    );
    for rd in &mut readers {
        if rd.snapshot.is_some() {
            rd.held.clear();
            // Read-write ones may conflict; nothing is checked after.
            let _ = rd.view.commit();
        }
    }
}

#[test]
fn a_paused_reader_of_file_pages_resumes_at_its_snapshot_and_owes_no_fence() {
    let d = ext4_dir("shared-pause");
    let p = d.join("r.txm");
    let r = Region::create(&p, (PAGES * PAGE) as u64, opts()).unwrap();
    let mut w = r.view().unwrap();
    fill(&mut w, 0..PAGES, 1);
    r.checkpoint().unwrap();
    let mut v = r.view().unwrap();
    v.begin_read().unwrap();
    for (i, ptr) in pointers(&v).into_iter().enumerate() {
        assert_eq!(whole(ptr, &format!("page {i} before the pause")), 1);
    }
    let paused = v.pause().unwrap();
    // Newer commits reach the file while the reader is paused.
    for x in 2..5 {
        fill(&mut w, 0..PAGES, x);
        r.checkpoint().unwrap();
    }
    // The paused slot holds no file pages any more, so the fence did not
    // wait for it and fall back to its snapshot: the checkpoints reached
    // the newest commit.
    let st = r.stats();
    assert_eq!(st.checkpoint_seq, st.commit_seq, "{st:?}");
    // The view serves other transactions at the newest commit meanwhile.
    assert_eq!(v.run(|v| v.read::<u64>(0)).unwrap(), 4);
    v.resume(paused).unwrap();
    for (i, ptr) in pointers(&v).into_iter().enumerate() {
        assert_eq!(whole(ptr, &format!("page {i} after resume")), 1, "page {i}");
    }
    v.commit().unwrap();
}

/// A view's pages sit at addresses congruent to their offsets in the file
/// modulo 2 MiB, as the kernel places file mappings itself, so that plain
/// loads map the page cache's large folios many pages per fault: a region
/// file's data starts after its 4 KiB header, a plain file's at offset 0.
#[test]
fn a_views_pages_sit_at_addresses_congruent_to_their_file_offsets() {
    const TWO_MIB: usize = 2 << 20;
    let (d, _p, r) = region_with_pages("congruent");
    for _ in 0..3 {
        let v = r.view().unwrap();
        assert_eq!(v.base() as usize % TWO_MIB, PAGE, "a region's view");
    }
    let plain = d.join("plain.bin");
    std::fs::write(&plain, vec![7u8; 8 * PAGE]).unwrap();
    let r = Region::open_or_adopt(&plain, opts()).unwrap();
    let v = r.view().unwrap();
    assert_eq!(v.base() as usize % TWO_MIB, 0, "a plain file's view");
}

/// A fresh view's serializable read-write transaction that reads every
/// page of a region (half of them checkpointed into the file, half
/// rewritten since, in shared memory) and writes one copies only the page
/// it writes: its reads are shared. A later transaction of the view that
/// reads them again keeps copies (the view's bounded cache).
#[test]
fn read_write_transactions_copy_only_what_they_write() {
    const BIG: usize = 256;
    let (_d, _p, r) = new_region("sp-rw-copy", (BIG * PAGE) as u64, opts());
    let mut w = r.view().unwrap();
    fill(&mut w, 0..BIG, 3);
    r.checkpoint().unwrap();
    fill(&mut w, (1..BIG).step_by(2), 4);
    drop(w);
    // The writer's pooled memory goes to a view of its own.
    let _pooled = r.view().unwrap();
    let mut v = r.view().unwrap();
    let want = |p: usize| if p % 2 == 1 { 4 } else { 3 };
    let (installed, private) = (v.installed_pages(), v.private_bytes());
    v.begin().unwrap();
    for p in 0..BIG {
        assert_eq!(
            v.read::<u64>((p * PAGE) as u64).unwrap(),
            want(p),
            "page {p}"
        );
    }
    // `slice` of a checkpointed page is the file's page too.
    assert_eq!(v.slice((2 * PAGE) as u64, 8).unwrap(), 3u64.to_ne_bytes());
    v.write(PAGE as u64, &5u64).unwrap();
    assert_eq!(v.read::<u64>(PAGE as u64).unwrap(), 5);
    assert_eq!(
        v.installed_pages() - installed,
        1,
        "a transaction that read {BIG} pages and wrote one copied more than the one"
    );
    assert!(
        v.private_bytes() - private <= 2 * PAGE as u64,
        "private memory grew by {} bytes",
        v.private_bytes() - private
    );
    v.commit().unwrap();
    v.begin().unwrap();
    for p in 2..BIG {
        assert_eq!(
            v.read::<u64>((p * PAGE) as u64).unwrap(),
            want(p),
            "page {p}"
        );
    }
    v.commit().unwrap();
    assert_eq!(
        v.installed_pages() - installed,
        BIG as u64 - 1,
        "pages read again by a later transaction are kept in the view"
    );
}

/// A fresh view's serializable read-write transaction that reads every
/// page of a checkpointed region by plain loads (`View::base`) and writes
/// two (one by a plain store after its load, one through the accessor)
/// copies only those two: each first touch maps the file's page. The view
/// reads its own stores, and a later transaction reads the committed
/// values (fails when a read fault of a read-write transaction copies).
#[test]
fn plain_loads_of_read_write_transactions_copy_only_what_they_write() {
    const BIG: usize = 256;
    let (_d, _p, r) = new_region("sp-rw-plain", (BIG * PAGE) as u64, opts());
    let mut w = r.view().unwrap();
    fill(&mut w, 0..BIG, 3);
    r.checkpoint().unwrap();
    drop(w);
    let _pooled = r.view().unwrap();
    let mut v = r.view().unwrap();
    let (installed, private) = (v.installed_pages(), v.private_bytes());
    let word = |v: &View, p: usize| -> *mut u64 {
        // SAFETY: page p lies inside the view's mapping of the region.
        unsafe { v.base().add(p * PAGE).cast::<u64>() }
    };
    v.begin().unwrap();
    for p in 0..BIG {
        // SAFETY: an aligned word of the region, in a transaction.
        assert_eq!(unsafe { word(&v, p).read_volatile() }, 3, "page {p}");
    }
    // SAFETY: as above; the store faults and installs the page.
    unsafe { word(&v, 5).write_volatile(7) };
    v.write((9 * PAGE) as u64, &8u64).unwrap();
    // SAFETY: as above.
    unsafe {
        assert_eq!(word(&v, 5).read_volatile(), 7);
        assert_eq!(word(&v, 9).read_volatile(), 8);
        assert_eq!(word(&v, 6).read_volatile(), 3);
    }
    assert_eq!(
        v.installed_pages() - installed,
        2,
        "a transaction that read {BIG} pages by plain loads and wrote two copied more"
    );
    assert!(
        v.private_bytes() - private <= 3 * PAGE as u64,
        "private memory grew by {} bytes",
        v.private_bytes() - private
    );
    v.commit().unwrap();
    v.begin_read().unwrap();
    for p in 0..BIG {
        let want = match p {
            5 => 7,
            9 => 8,
            _ => 3,
        };
        // SAFETY: as above.
        assert_eq!(unsafe { word(&v, p).read_volatile() }, want, "page {p}");
    }
    v.commit().unwrap();
}

/// Write skew between two fresh views whose serializable transactions
/// read two checkpointed pages by plain loads and each write one of them:
/// the second commit conflicts. Each round's pages lie in a block of their
/// own, so each round's first load maps a new run of the file: the page it
/// faults on is readable at once, the other one at its own first load
/// (read first in odd rounds). Fails when either read joins neither the
/// read set nor the touched pages.
#[test]
fn plain_load_reads_of_read_write_transactions_are_validated() {
    const ROUNDS: usize = 8;
    // The aligned block a read fault maps a run within (`view/filemap.rs`).
    const BLOCK: usize = 1024;
    let (_d, _p, r) = new_region("sp-rw-plain-skew", (ROUNDS * BLOCK * PAGE) as u64, opts());
    let mut w = r.view().unwrap();
    fill(
        &mut w,
        (0..ROUNDS).flat_map(|k| [k * BLOCK, k * BLOCK + 1]),
        1,
    );
    r.checkpoint().unwrap();
    drop(w);
    // SAFETY: an aligned word inside the view's mapping, in a transaction.
    write_skew_conflicts(&r, ROUNDS, BLOCK, |v, off| unsafe {
        v.base().add(off as usize).cast::<u64>().read_volatile()
    });
}

/// `rounds` rounds of write skew between two fresh views of `r`: in round
/// `k` each serializable transaction reads pages `stride * k` and the one
/// after it with `read` (a word at an offset; in odd rounds the second
/// page first) and writes one of them; the second commit must conflict.
fn write_skew_conflicts(
    r: &Region,
    rounds: usize,
    stride: usize,
    read: impl Fn(&View, u64) -> u64,
) {
    let (mut a, mut b) = (r.view().unwrap(), r.view().unwrap());
    for k in 0..rounds {
        let (x, y) = ((stride * k * PAGE) as u64, ((stride * k + 1) * PAGE) as u64);
        a.begin().unwrap();
        b.begin().unwrap();
        // The order matters: the first load of a run maps it.
        let (first, second) = if k % 2 == 0 { (x, y) } else { (y, x) };
        let both = |v: &View| {
            let one = read(v, first);
            one + read(v, second)
        };
        let (sa, sb) = (both(&a), both(&b));
        assert_eq!(sa, sb);
        a.write(x, &(sa + 10)).unwrap();
        b.write(y, &(sb + 10)).unwrap();
        a.commit().unwrap();
        assert!(
            matches!(b.commit(), Err(txmap::Error::Conflict)),
            "round {k}: write skew committed"
        );
    }
}

/// Write skew between two fresh views whose serializable transactions
/// read two pages shared (from the file, or in place from shared memory)
/// and each write one of them: the second commit conflicts, whether its
/// view tracks reads (after a conflict) or validates touched pages
/// (fails when a shared read joins neither the read set nor the touched
/// pages).
#[test]
fn shared_reads_of_read_write_transactions_are_validated() {
    const ROUNDS: usize = 8;
    let (_d, _p, r) = new_region("sp-rw-skew", (2 * ROUNDS * PAGE) as u64, opts());
    let mut w = r.view().unwrap();
    fill(&mut w, 0..2 * ROUNDS, 1);
    r.checkpoint().unwrap();
    // The second half's rounds read versions in shared memory.
    fill(&mut w, ROUNDS..2 * ROUNDS, 2);
    drop(w);
    // Pages no earlier transaction of either view touched: shared.
    write_skew_conflicts(&r, ROUNDS, 2, |v, off| v.read::<u64>(off).unwrap());
}

/// A read-write transaction that read a page shared and then changed it
/// by a commutative operation (which updates the view's copy, not the
/// write set) reads its own result through every accessor (fails when the
/// file's page is handed out for a page the view holds).
#[test]
fn a_read_write_transaction_reads_its_commutative_results_after_shared_reads() {
    let (_d, _p, r) = region_with_pages("sp-rw-commute");
    let mut v = r.view().unwrap();
    let word = |b: &[u8]| u64::from_ne_bytes(b[..8].try_into().unwrap());
    v.begin().unwrap();
    assert_eq!(word(v.slice(0, 8).unwrap()), 1);
    assert_eq!(v.read::<u64>(0).unwrap(), 1);
    v.add_u64(0, 5).unwrap();
    assert_eq!(v.read::<u64>(0).unwrap(), 6);
    assert_eq!(word(v.slice(0, 8).unwrap()), 6);
    // A page the operation changes before any read of it.
    v.add_u64(PAGE as u64, 7).unwrap();
    assert_eq!(word(v.slice(PAGE as u64, 8).unwrap()), 8);
    assert_eq!(v.read::<u64>(PAGE as u64).unwrap(), 8);
    v.commit().unwrap();
    v.begin_read().unwrap();
    assert_eq!(v.read::<u64>(0).unwrap(), 6);
    assert_eq!(v.read::<u64>(PAGE as u64).unwrap(), 8);
    v.commit().unwrap();
}

/// A read-write transaction that read a page shared (in place, from its
/// version in shared memory) and then takes a slice of it gets the
/// snapshot's bytes, not what the view's memory held from an earlier
/// view (fails when the accessors take a page marked read for installed).
#[test]
fn a_page_read_in_place_then_sliced_in_a_read_write_transaction_is_the_snapshots() {
    let (_d, _p, r) = region_with_pages("sp-rw-slice");
    let word = |b: &[u8]| u64::from_ne_bytes(b[..8].try_into().unwrap());
    for round in 0..4u64 {
        // A view that copied the page (it wrote it) goes to the pool with
        // that copy in its memory.
        let mut a = r.view().unwrap();
        a.run(|v| v.write(PAGE as u64, &(10 + round))).unwrap();
        let mut w = r.view().unwrap();
        drop(a);
        // A newer version, in shared memory only (no checkpoint).
        w.run(|v| v.write(PAGE as u64, &(20 + round))).unwrap();
        let mut b = r.view().unwrap();
        b.begin().unwrap();
        assert_eq!(b.read::<u64>(PAGE as u64).unwrap(), 20 + round);
        assert_eq!(word(b.slice(PAGE as u64, 8).unwrap()), 20 + round);
        assert_eq!(
            word(b.slice(PAGE as u64 - 8, 16).unwrap()[8..].as_ref()),
            20 + round
        );
        b.commit().unwrap();
    }
}
