//! Crash safety with real processes: a child commits under load and is killed
//! with SIGKILL at a random moment; the region is then reopened (by the test or
//! by the next child, which must recover without help) and checked: no
//! acknowledged commit lost, no partial commit visible.
mod common;

use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::time::Duration;

use common::*;
use txmap::{Durability, Options, Region, View};

const PAGE: u64 = 4096;
const ACCOUNTS: u64 = 16;
const TOTAL: i64 = 1_600_000;
const MIRRORS: u64 = 4;

fn account(i: u64) -> u64 {
    i * PAGE + 8 * (i % 5)
}

/// Thread t's counter is kept in MIRRORS pages at once: a partial commit shows
/// as mirrors that disagree.
fn mirror(t: u64, m: u64) -> u64 {
    (ACCOUNTS + t * MIRRORS + m) * PAGE + 24
}

fn opts(durability: Durability, checkpoint_bytes: u64) -> Options {
    Options {
        durability,
        checkpoint_bytes,
        ..Options::default()
    }
}

fn size(threads: u64) -> u64 {
    (ACCOUNTS + threads * MIRRORS + 1) * PAGE
}

/// The child: transfers money and bumps its counter in each transaction,
/// printing "ACK t c" after each commit returns.
fn writer_child() {
    let path = std::env::var("TXMAP_PATH").unwrap();
    let threads: u64 = std::env::var("TXMAP_THREADS").unwrap().parse().unwrap();
    let durability = if std::env::var("TXMAP_ASYNC").is_ok() {
        Durability::Async
    } else {
        Durability::Durable
    };
    let ckpt: u64 = std::env::var("TXMAP_CKPT").unwrap().parse().unwrap();
    let r = Region::open(path.as_ref(), opts(durability, ckpt)).unwrap();
    let hs: Vec<_> = (0..threads)
        .map(|t| {
            let r = r.clone();
            std::thread::spawn(move || {
                let mut v = r.view().unwrap();
                let mut rng = txmap::io::sim::SplitMix(std::process::id() as u64 * 31 + t);
                loop {
                    let (from, to, amount) = (
                        rng.next() % ACCOUNTS,
                        rng.next() % ACCOUNTS,
                        (rng.next() % 100) as i64,
                    );
                    let c = v
                        .run(|v| {
                            let c = v.read::<u64>(mirror(t, 0))? + 1;
                            for m in 0..MIRRORS {
                                v.write(mirror(t, m), &c)?;
                            }
                            let a = v.read::<i64>(account(from))?;
                            v.write(account(from), &(a - amount))?;
                            let b = v.read::<i64>(account(to))?;
                            v.write(account(to), &(b + amount))?;
                            Ok(c)
                        })
                        .unwrap();
                    println!("ACK {t} {c}");
                }
            })
        })
        .collect();
    // The writers run until the test kills this process.
    drop(hs);
    loop {
        std::thread::park();
    }
}

/// Checks the invariants in a fresh view; returns each thread's counter.
fn check(v: &mut View, threads: u64) -> Vec<u64> {
    v.begin_read().unwrap();
    let total: i64 = (0..ACCOUNTS)
        .map(|i| v.read::<i64>(account(i)).unwrap())
        .sum();
    assert_eq!(
        total, TOTAL,
        "money created or destroyed: a partial commit is visible"
    );
    let counters = (0..threads)
        .map(|t| {
            let c = v.read::<u64>(mirror(t, 0)).unwrap();
            for m in 1..MIRRORS {
                assert_eq!(
                    v.read::<u64>(mirror(t, m)).unwrap(),
                    c,
                    "thread {t}: mirrors disagree"
                );
            }
            c
        })
        .collect();
    v.commit().unwrap();
    counters
}

fn kill_rounds(test: &str, rounds: u64, threads: u64, durability: Durability, ckpt: u64) {
    let d = ext4_dir(test);
    let p = d.join("crash.txm");
    {
        let r = Region::create(&p, size(threads), opts(durability, ckpt)).unwrap();
        let mut v = r.view().unwrap();
        v.run(|v| (0..ACCOUNTS).try_for_each(|i| v.write(account(i), &(TOTAL / ACCOUNTS as i64))))
            .unwrap();
    }
    let mut acked = vec![0u64; threads as usize];
    // Commits per thread that may be durable but unacknowledged: each child can
    // leave one per thread after its last print (threads commit one at a time).
    let mut slack = vec![0u64; threads as usize];
    let mut rng = txmap::io::sim::SplitMix(rounds * 7 + threads);
    for round in 0..rounds {
        let envs = [
            ("TXMAP_PATH", p.display().to_string()),
            ("TXMAP_THREADS", threads.to_string()),
            ("TXMAP_CKPT", ckpt.to_string()),
        ];
        let mut cmd = child(test, "writer", &envs);
        if durability == Durability::Async {
            cmd.env("TXMAP_ASYNC", "1");
        }
        let mut c = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut out = BufReader::new(c.stdout.take().unwrap());
        let wait_for = 1 + rng.next() % 40;
        let mut line = String::new();
        let mut seen = 0;
        slack.iter_mut().for_each(|s| *s += 1);
        // libtest may print "test NAME ... " without a newline first, so the
        // marker is searched anywhere in the line.
        let record = |line: &str, acked: &mut Vec<u64>, slack: &mut Vec<u64>| -> bool {
            let Some(at) = line.find("ACK ") else {
                return false;
            };
            let mut it = line[at + 4..]
                .split_whitespace()
                .map(|x| x.parse::<u64>().unwrap());
            let (t, c) = (it.next().unwrap() as usize, it.next().unwrap());
            assert!(
                c > acked[t],
                "counter went backwards: {c} after {}",
                acked[t]
            );
            acked[t] = c;
            slack[t] = 1;
            true
        };
        while seen < wait_for {
            line.clear();
            if out.read_line(&mut line).unwrap() == 0 {
                let mut err = String::new();
                std::io::Read::read_to_string(&mut c.stderr.take().unwrap(), &mut err).unwrap();
                panic!("child exited early in round {round}: {err}");
            }
            if record(&line, &mut acked, &mut slack) {
                seen += 1;
            }
        }
        std::thread::sleep(Duration::from_micros(rng.next() % 2000));
        c.kill().unwrap(); // SIGKILL
        c.wait().unwrap();
        // Acknowledgements printed before the kill are still in the pipe.
        for l in out.lines() {
            record(&l.unwrap(), &mut acked, &mut slack);
        }
        // Every other round the next child recovers on its own.
        if round % 2 == 1 || round + 1 == rounds {
            let r = Region::open(&p, opts(durability, ckpt)).unwrap();
            let counters = check(&mut r.view().unwrap(), threads);
            for t in 0..threads as usize {
                assert!(
                    counters[t] >= acked[t],
                    "round {round}: thread {t} acknowledged commit {} but the region holds {}",
                    acked[t],
                    counters[t]
                );
                assert!(
                    counters[t] <= acked[t] + slack[t],
                    "round {round}: commit from nowhere: thread {t} holds {} but acknowledged {} with slack {}",
                    counters[t],
                    acked[t],
                    slack[t]
                );
                acked[t] = counters[t];
                slack[t] = 0;
            }
        }
    }
}

#[test]
fn sigkill_single_writer_durable() {
    if role().is_some() {
        return writer_child();
    }
    kill_rounds(
        "sigkill_single_writer_durable",
        100,
        1,
        Durability::Durable,
        64 << 20,
    );
}

#[test]
fn sigkill_four_writer_threads_durable() {
    if role().is_some() {
        return writer_child();
    }
    kill_rounds(
        "sigkill_four_writer_threads_durable",
        80,
        4,
        Durability::Durable,
        64 << 20,
    );
}

#[test]
fn sigkill_during_frequent_checkpoints() {
    if role().is_some() {
        return writer_child();
    }
    kill_rounds(
        "sigkill_during_frequent_checkpoints",
        80,
        2,
        Durability::Durable,
        1,
    );
}

#[test]
fn sigkill_async_commits_survive_a_process_crash() {
    if role().is_some() {
        return writer_child();
    }
    kill_rounds(
        "sigkill_async_commits_survive_a_process_crash",
        60,
        2,
        Durability::Async,
        256 << 10,
    );
}

/// Checkpoints racing with commits must write, for every page, the newest
/// version at or below the sequence number they record: the region file
/// and the log taken at any quiet moment recover to exactly what the live
/// region shows. Writers store a counter at a random byte of a few shared
/// pages, so a page the checkpoint wrote stale keeps bytes no later record
/// covers. (A checkpoint that read its bound before a commit's pruning
/// unlinked the version it needed once recorded the bound without the page.)
#[test]
fn checkpoints_racing_commits_leave_file_and_log_that_recover_to_the_live_content() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    const PAGES: u64 = 4;
    let mut rng = txmap::io::sim::SplitMix(seed(
        "checkpoints_racing_commits_leave_file_and_log_that_recover_to_the_live_content",
    ));
    let d = tmpfs_dir("ckpt-race");
    let path = d.join("r.txm");
    let r = Region::create(&path, PAGES * PAGE, opts(Durability::Durable, 64 << 20)).unwrap();
    // Commits go on while a checkpoint waits for the commit lock.
    txmap::debug::slow_checkpoints(300);
    for round in 0..12 {
        // The second half: without copy-on-checkpoint, a short reader makes
        // checkpoints fall back to the oldest snapshot, and often ends
        // before the fallback looks again.
        let fallback = round >= 6;
        txmap::debug::set_copy_on_checkpoint(!fallback);
        let stop = Arc::new(AtomicBool::new(false));
        let reader = fallback.then(|| {
            let (r, stop) = (r.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut v = r.view().unwrap();
                while !stop.load(Ordering::Relaxed) {
                    v.begin_read().unwrap();
                    v.read::<u8>(0).unwrap();
                    std::thread::sleep(std::time::Duration::from_micros(200));
                    v.commit().unwrap();
                }
            })
        });
        let writers: Vec<_> = (0..2u64)
            .map(|t| {
                let r = r.clone();
                let seed = rng.next() ^ t;
                std::thread::spawn(move || {
                    let mut rng = txmap::io::sim::SplitMix(seed);
                    let mut v = r.view().unwrap();
                    for i in 0..1500u64 {
                        let at = rng.next() % (PAGES * PAGE);
                        v.run(|v| v.write(at, &(i as u8 | 1))).unwrap();
                    }
                })
            })
            .collect();
        let ckpt = {
            let (r, stop) = (r.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    r.checkpoint().unwrap();
                }
            })
        };
        for w in writers {
            w.join().unwrap();
        }
        stop.store(true, Ordering::Relaxed);
        ckpt.join().unwrap();
        if let Some(reader) = reader {
            reader.join().unwrap();
        }
        let copy = d.join(&format!("copy-{round}.txm"));
        copy_region(&path, &copy);
        let live = {
            let mut v = r.view().unwrap();
            v.begin_read().unwrap();
            let b = v.slice(0, (PAGES * PAGE) as usize).unwrap().to_vec();
            v.commit().unwrap();
            b
        };
        let c = Region::open(&copy, Options::default()).unwrap();
        let mut v = c.view().unwrap();
        v.begin_read().unwrap();
        let got = v.slice(0, (PAGES * PAGE) as usize).unwrap();
        let bad: Vec<u64> = (0..PAGES)
            .filter(|&p| {
                let s = (p * PAGE) as usize..((p + 1) * PAGE) as usize;
                got[s.clone()] != live[s]
            })
            .collect();
        assert!(
            bad.is_empty(),
            "round {round} (fallback: {fallback}): pages {bad:?} recover to other content"
        );
        v.commit().unwrap();
    }
    txmap::debug::set_copy_on_checkpoint(true);
}

/// The scenario of the test below, in a child process (it sets
/// process-wide debug knobs). Page 0 gets a byte per commit; a reader at
/// commit 1 makes the checkpoint at 2 fall back to the oldest snapshot
/// (copy-on-checkpoint off); while it pauses before looking again, the
/// reader ends and commits 3 and 4 prune version 2 away. The checkpoint must
/// still write version 2 (or record less): the file and log taken after it
/// must recover every byte.
fn fallback_child() {
    let d = std::path::PathBuf::from(std::env::var("TXMAP_DIR").unwrap());
    let path = d.join("f.txm");
    let r = Region::create(&path, PAGE, opts(Durability::Durable, 64 << 20)).unwrap();
    let mut v = r.view().unwrap();
    let put = |v: &mut View, at: u64| v.run(|v| v.write(at, &0xa5u8)).unwrap();
    put(&mut v, 100); // commit 1
    r.checkpoint().unwrap(); // the file has 1, page 0 has no versions
    let mut reader = r.view().unwrap();
    reader.begin_read().unwrap();
    assert_eq!(reader.read::<u8>(100).unwrap(), 0xa5);
    put(&mut v, 200); // commit 2: the reader at 1 needs the file's page 0
    txmap::debug::set_copy_on_checkpoint(false);
    txmap::debug::slow_checkpoints(400_000); // before each look under the lock
    let ckpt = {
        let r = r.clone();
        std::thread::spawn(move || r.checkpoint().unwrap())
    };
    // Inside the second pause: after the first look (at 0.4 s), before the
    // second (at 0.8 s).
    std::thread::sleep(Duration::from_millis(600));
    reader.commit().unwrap();
    put(&mut v, 300); // commit 3
    put(&mut v, 400); // commit 4: synced to 3, so version 2 is unlinked
    ckpt.join().unwrap();
    txmap::debug::slow_checkpoints(0);
    let copy = d.join("copy.txm");
    copy_region(&path, &copy);
    let c = Region::open(&copy, Options::default()).unwrap();
    let mut v = c.view().unwrap();
    v.begin_read().unwrap();
    for at in [100, 200, 300, 400] {
        assert_eq!(
            v.read::<u8>(at).unwrap(),
            0xa5,
            "byte {at} lost: the checkpoint recorded a commit it did not write"
        );
    }
    v.commit().unwrap();
}

/// A checkpoint that falls back to the oldest snapshot looks at the
/// versions again under the lock; if that snapshot ended meanwhile, it must
/// not look again at its first bound (pruning since may have unlinked what
/// it needs there), but write what it found the first time.
#[test]
fn a_checkpoint_whose_fallback_snapshot_ended_still_writes_every_page() {
    if role().as_deref() == Some("fallback") {
        fallback_child();
        return;
    }
    if role().is_some() {
        return;
    }
    let d = tmpfs_dir("ckpt-fallback");
    let out = child(
        "a_checkpoint_whose_fallback_snapshot_ended_still_writes_every_page",
        "fallback",
        &[("TXMAP_DIR", d.path().display().to_string())],
    )
    .output()
    .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A process killed while creating a region (log made, data file not yet
/// renamed into place) does not block the path: the next create cleans up
/// after it and makes the region; its temporary file goes too. A log that
/// holds more than a new region's header is never removed that way.
#[test]
fn a_create_killed_before_the_region_is_in_place_does_not_block_the_path() {
    let test = "a_create_killed_before_the_region_is_in_place_does_not_block_the_path";
    if role().is_some() {
        let p = std::path::PathBuf::from(std::env::var("TXMAP_CREATE_PATH").unwrap());
        txmap::debug::crash_at(txmap::debug::CrashPoint::Creating, 1);
        let _ = Region::create(&p, 4 * PAGE, Options::default());
        unreachable!("the crash point did not kill the creator");
    }
    let d = ext4_dir("create-killed");
    let p = d.join("r.txm");
    let status = child(
        test,
        "creator",
        &[("TXMAP_CREATE_PATH", p.display().to_string())],
    )
    .status()
    .unwrap();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(status.signal(), Some(libc::SIGKILL), "{status:?}");
    assert!(!p.exists() && txmap::log_path(&p).exists());
    let leftovers = || {
        std::fs::read_dir(d.path())
            .unwrap()
            .filter(|e| {
                let n = e.as_ref().unwrap().file_name();
                n.to_string_lossy().contains(".creating-")
            })
            .count()
    };
    assert_eq!(leftovers(), 1, "the killed creator left no temporary file");
    let r = Region::create(&p, 4 * PAGE, Options::default())
        .expect("a dead creator's leftovers blocked the create");
    let mut v = r.view().unwrap();
    v.run(|v| v.write(0, &9u64)).unwrap();
    drop(v);
    drop(r);
    assert_eq!(leftovers(), 0, "the dead creator's temporary file stayed");

    // A region removed by hand with its log left behind: the log has
    // commits' room in it, so create refuses and says what to do.
    std::fs::remove_file(&p).unwrap();
    let e = Region::create(&p, 4 * PAGE, Options::default()).err();
    let e = e.expect("a region was created over a log with commits in it");
    assert!(e.to_string().contains("remove its log too"), "{e}");
    assert!(txmap::log_path(&p).exists());
}

/// Holds the lock every process with `region` open holds (shared), as an
/// opener killed while opening does for a moment after its open lock is
/// released: the kernel closes a dead process's files one at a time.
fn hold_users_lock(region: &std::path::Path) -> std::fs::File {
    let f = std::fs::File::open(region).unwrap();
    rustix::fs::flock(&f, rustix::fs::FlockOperation::LockShared).unwrap();
    f
}

/// An opener that finds the region held open by someone whose shared state
/// is missing, empty or unfinished (its first opener was killed while
/// opening) waits for that holder to go, then opens and recovers, and never
/// leaves a file of its own in /dev/shm.
#[test]
fn an_opener_waits_out_a_first_opener_killed_while_opening() {
    let d = ext4_dir("open-race");
    let p = d.join("r.txm");
    let shm = {
        let r = Region::create(&p, 4 * PAGE, Options::default()).unwrap();
        r.view().unwrap().run(|v| v.write(0, &77u64)).unwrap();
        r.stats().shared_path
    };
    assert!(!shm.exists(), "the last one out removes its shared state");
    let zero_page = vec![0u8; PAGE as usize];
    for (what, content) in [
        ("missing", None),
        ("empty", Some(&[][..])),
        ("not marked ready", Some(&zero_page[..])),
    ] {
        if let Some(c) = content {
            std::fs::write(&shm, c).unwrap();
        }
        let held = hold_users_lock(&p);
        let release = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            drop(held);
        });
        let r = Region::open(&p, Options::default())
            .unwrap_or_else(|e| panic!("shared state {what}: {e}"));
        release.join().unwrap();
        let mut v = r.view().unwrap();
        v.begin_read().unwrap();
        assert_eq!(v.read::<u64>(0).unwrap(), 77, "shared state {what}");
        v.commit().unwrap();
        drop((v, r));
        assert!(!shm.exists(), "shared state {what}: left in /dev/shm");
    }
    // Held for good (removed while in use): a clear error after a while,
    // and still no file made by the opener.
    let _held = hold_users_lock(&p);
    let e = Region::open(&p, Options::default()).err().expect("opened");
    let msg = e.to_string();
    assert!(
        msg.contains(&shm.display().to_string()) && msg.contains("missing"),
        "{msg}"
    );
    assert!(!shm.exists(), "the opener created {}", shm.display());
}

/// A last user killed with SIGKILL leaves its shared state in /dev/shm;
/// `remove_stale_shared_state` removes it, never one whose region is open,
/// and the region then opens as after any crash.
#[test]
fn stale_shared_state_of_a_killed_last_user_is_removed_and_live_state_kept() {
    let test = "stale_shared_state_of_a_killed_last_user_is_removed_and_live_state_kept";
    if role().is_some() {
        let p = std::path::PathBuf::from(std::env::var("TXMAP_REGION").unwrap());
        let r = Region::open(&p, Options::default()).unwrap();
        let mut v = r.view().unwrap();
        v.run(|v| v.write(0, &77u64)).unwrap();
        println!("committed");
        // SAFETY: the test kills this process now, holding the region.
        let _ =
            rustix::process::kill_process(rustix::process::getpid(), rustix::process::Signal::KILL);
        unreachable!();
    }
    let d = ext4_dir("stale-shm");
    let dead = d.join("dead.txm");
    let live = d.join("live.txm");
    let id = |r: &Region| r.stats().shared_path;
    let dead_shm = {
        let r = Region::create(&dead, 4 * PAGE, Options::default()).unwrap();
        id(&r)
    };
    let status = child(
        test,
        "user",
        &[("TXMAP_REGION", dead.display().to_string())],
    )
    .stdout(Stdio::piped())
    .output()
    .unwrap();
    assert!(String::from_utf8_lossy(&status.stdout).contains("committed"));
    assert!(
        dead_shm.exists(),
        "the killed user's shared state is gone already"
    );
    let keep = Region::create(&live, 4 * PAGE, Options::default()).unwrap();
    let live_shm = id(&keep);
    let sweep = txmap::remove_stale_shared_state().unwrap();
    // Removed by this sweep, or by another process's sweep first (the
    // suite runs as several copies at once under load): gone either way.
    assert!(!dead_shm.exists(), "{sweep:?}");
    assert!(
        live_shm.exists() && sweep.kept.contains(&live_shm),
        "{sweep:?}"
    );
    // Both regions still work: the dead one recovers its commit.
    let r = Region::open(&dead, Options::default()).unwrap();
    let mut v = r.view().unwrap();
    v.begin_read().unwrap();
    assert_eq!(v.read::<u64>(0).unwrap(), 77);
    v.commit().unwrap();
    let mut w = keep.view().unwrap();
    w.run(|v| v.write(0, &1u64)).unwrap();
}
