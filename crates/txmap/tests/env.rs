//! Environments (issue 19 point 1, `txmap::Env`): named regions of one
//! file and one log, committed across as one commit.
//!
//! The workload: regions `a`, `b` and `c` hold `ACCOUNTS` i64 balances each
//! (one per page) and, on page `ACCOUNTS`, the region's net inflow and a
//! counter per worker. Worker `w` maps two of them (`PAIRS[w % 3]`: each
//! process maps its own subset) and moves amounts between them, adding the
//! amount to one region's net and taking it from the other's, and bumps its
//! counter in both. Checked inside every transaction, the ones that will
//! abort included: each mapped region's balances sum to `START * ACCOUNTS`
//! plus its net. After SIGKILL and recovery also: the nets sum to zero, and
//! each worker's two counters agree and cover its acknowledged transfers.

mod common;

use std::path::Path;
use std::time::Duration;

use common::*;
use txmap::{Durability, Env, EnvRegion, Error, Options, Region, View};

const PAGE: u64 = 4096;
const ACCOUNTS: u64 = 8;
const START: i64 = 1000;
const META: u64 = ACCOUNTS * PAGE;
const SIZE: u64 = (ACCOUNTS + 1) * PAGE;
/// Each region's index + 1, written once.
const MARK: u64 = SIZE - 8;
const NAMES: [&str; 3] = ["a", "b", "c"];
const PAIRS: [(usize, usize); 3] = [(0, 1), (1, 2), (2, 0)];

fn opts() -> Options {
    Options {
        durability: Durability::Durable,
        ..Options::default()
    }
}

/// Creates the three regions with their starting balances.
fn create(dir: &Path) {
    let env = Env::open(dir, opts()).unwrap();
    let regions: Vec<EnvRegion> = NAMES.iter().map(|n| env.region(n, SIZE).unwrap()).collect();
    let mut v = env.view().unwrap();
    v.run(|v| {
        for (k, r) in regions.iter().enumerate() {
            for i in 0..ACCOUNTS {
                r.write(v, i * PAGE, &START)?;
            }
            r.write(v, MARK, &(k as u64 + 1))?;
        }
        Ok(())
    })
    .unwrap();
    drop(v);
    env.close().unwrap();
}

/// Region `r`'s net inflow, after checking its balances against it (and
/// that it is the region of its name, not another's memory).
fn checked_net(v: &View, r: &EnvRegion) -> i64 {
    let k = NAMES.iter().position(|n| *n == r.name()).unwrap() as u64;
    assert_eq!(
        r.read::<u64>(v, MARK).unwrap(),
        k + 1,
        "region {} is another's",
        r.name()
    );
    let net: i64 = r.read(v, META).unwrap();
    let sum: i64 = (0..ACCOUNTS)
        .map(|i| r.read::<i64>(v, i * PAGE).unwrap())
        .sum();
    assert_eq!(
        sum,
        START * ACCOUNTS as i64 + net,
        "region {}: balances torn",
        r.name()
    );
    net
}

/// One transfer by worker `w` from `from` to `to` (a transaction is open).
fn transfer(v: &mut View, from: &EnvRegion, to: &EnvRegion, w: u64, x: u64) -> txmap::Result<()> {
    checked_net(v, from);
    checked_net(v, to);
    let (i, j) = (x % ACCOUNTS, (x >> 8) % ACCOUNTS);
    let amount = (x >> 16) as i64 % 50 + 1;
    for (r, acct, by) in [(from, i, -amount), (to, j, amount)] {
        let b: i64 = r.read(v, acct * PAGE)?;
        r.write(v, acct * PAGE, &(b + by))?;
        let net: i64 = r.read(v, META)?;
        r.write(v, META, &(net + by))?;
        let c: u64 = r.read(v, META + 8 + 8 * w)?;
        r.write(v, META + 8 + 8 * w, &(c + 1))?;
    }
    Ok(())
}

/// Reopens the environment (recovering it) and checks every invariant.
fn check(dir: &Path, acked: &[u64]) {
    let env = Env::open(dir, opts()).unwrap();
    let regions: Vec<EnvRegion> = NAMES.iter().map(|n| env.region(n, 0).unwrap()).collect();
    let mut v = env.view().unwrap();
    v.begin_read().unwrap();
    let nets: i64 = regions.iter().map(|r| checked_net(&v, r)).sum();
    assert_eq!(nets, 0, "a transfer is in one region only");
    for (w, &n) in acked.iter().enumerate() {
        let (p, q) = PAIRS[w % 3];
        let off = META + 8 + 8 * w as u64;
        let (cp, cq): (u64, u64) = (
            regions[p].read(&v, off).unwrap(),
            regions[q].read(&v, off).unwrap(),
        );
        assert_eq!(cp, cq, "worker {w}: a transfer is in one region only");
        assert!(
            cp >= n,
            "worker {w}: {n} transfers acknowledged, {cp} recovered"
        );
    }
    v.commit().unwrap();
}

/// Child: transfers between its pair of regions until killed, one ack line
/// each; worker `CHECKPOINTER` checkpoints instead, every millisecond.
fn worker() {
    let dir = std::path::PathBuf::from(std::env::var("TXMAP_DIR").unwrap());
    let w: u64 = std::env::var("TXMAP_WORKER").unwrap().parse().unwrap();
    let env = Env::open(&dir, opts()).unwrap();
    if w == CHECKPOINTER {
        loop {
            env.as_region().checkpoint().unwrap();
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    // Only the two names this worker uses.
    let (p, q) = PAIRS[w as usize % 3];
    let (rp, rq) = (
        env.region(NAMES[p], 0).unwrap(),
        env.region(NAMES[q], 0).unwrap(),
    );
    let mut v = env.view().unwrap();
    let mut acks = Acks::open(dir.join(format!("acks{w}")).to_str().unwrap());
    let mut x = seed("worker") ^ (w + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    loop {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let (xx, back) = (x >> 20, x >> 63 == 1);
        let (from, to) = if back { (&rq, &rp) } else { (&rp, &rq) };
        v.run(|v| transfer(v, from, to, w, xx)).unwrap();
        acks.line("t");
    }
}

const WORKERS: u64 = 3;
const CHECKPOINTER: u64 = 99;

#[test]
fn sigkill_at_random_points_keeps_transfers_between_named_regions_atomic() {
    let test = "sigkill_at_random_points_keeps_transfers_between_named_regions_atomic";
    if role().is_some() {
        return worker();
    }
    let d = ext4_dir("env-sigkill");
    create(d.path());
    let mut rng = seed(test);
    for round in 0..10u64 {
        let procs = spawn_workers(test, &d, (0..WORKERS).chain([CHECKPOINTER]));
        rng = rng.wrapping_mul(6364136223846793005).wrapping_add(1);
        std::thread::sleep(Duration::from_millis(40 + (rng >> 33) % 160));
        kill_workers(procs);
        let acked = acked(d.path(), WORKERS);
        check(d.path(), &acked);
        eprintln!("round {round}: acknowledged {acked:?}");
    }
    let total: u64 = acked(d.path(), WORKERS).iter().sum();
    assert!(total > 0, "no transfer was acknowledged in any round");
}

#[test]
fn transfers_in_threads_keep_every_region_balanced_in_every_transaction() {
    let d = ext4_dir("env-threads");
    create(d.path());
    let env = Env::open(d.path(), opts()).unwrap();
    let regions: Vec<EnvRegion> = NAMES.iter().map(|n| env.region(n, 0).unwrap()).collect();
    std::thread::scope(|s| {
        for w in 0..4u64 {
            // Each thread its own handle (a clone) and its own view.
            let (env, regions) = (env.clone(), &regions);
            s.spawn(move || {
                let (p, q) = PAIRS[w as usize % 3];
                let mut v = env.view().unwrap();
                let mut x = seed("threads") ^ (w + 1);
                let mut attempts = 0u64;
                for _ in 0..300 {
                    x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
                    let xx = x >> 20;
                    v.run(|v| {
                        attempts += 1;
                        transfer(v, &regions[p], &regions[q], w, xx)
                    })
                    .unwrap();
                }
                eprintln!("worker {w}: 300 transfers in {attempts} attempts");
            });
        }
    });
    drop(env);
    check(d.path(), &[300, 300, 300, 300]);
}

#[test]
fn named_regions_keep_their_place_and_size_across_reopening() {
    let d = ext4_dir("env-catalog");
    {
        let env = Env::open(d.path(), opts()).unwrap();
        assert!(env.regions().unwrap().is_empty());
        let a = env.region("a", 5000).unwrap();
        assert_eq!(
            (a.offset(), a.len()),
            (PAGE, 2 * PAGE),
            "page 0 is the catalog"
        );
        let b = env.region("b", 1).unwrap();
        assert_eq!((b.offset(), b.len()), (3 * PAGE, PAGE));
        // Found again, with any size up to its own.
        assert_eq!(env.region("a", 0).unwrap(), a);
        assert_eq!(env.region("a", 2 * PAGE).unwrap(), a);
        assert!(matches!(
            env.region("a", 2 * PAGE + 1),
            Err(Error::Invalid(_))
        ));
        assert!(matches!(env.region("nope", 0), Err(Error::Invalid(_))));
        assert!(matches!(env.region("", 1), Err(Error::Invalid(_))));
        assert!(matches!(
            env.region("big", u64::MAX),
            Err(Error::TooLarge(_))
        ));
        // Beyond the address space reserved for the file (64 GiB): an
        // error, and no name.
        assert!(env.region("big", 1 << 40).is_err());
        assert!(env.find("big").unwrap().is_none());
        let long = "x".repeat(txmap::env::MAX_NAME + 1);
        assert!(matches!(env.region(&long, 1), Err(Error::Invalid(_))));
        let longest = "y".repeat(txmap::env::MAX_NAME);
        assert_eq!(env.region(&longest, 1).unwrap().name(), longest);
        let mut v = env.view().unwrap();
        v.run(|v| b.write(v, PAGE - 8, &42u64)).unwrap();
        drop(v);
        env.close().unwrap();
    }
    let env = Env::open(d.path(), opts()).unwrap();
    let names: Vec<String> = env
        .regions()
        .unwrap()
        .iter()
        .map(|r| r.name().to_owned())
        .collect();
    assert_eq!(names, ["a", "b", &"y".repeat(txmap::env::MAX_NAME)]);
    let b = env.region("b", 0).unwrap();
    assert_eq!(b.offset(), 3 * PAGE);
    let mut v = env.view().unwrap();
    v.begin_read().unwrap();
    assert_eq!(b.read::<u64>(&v, PAGE - 8).unwrap(), 42);
    // The range checks are the named region's, not the file's.
    assert!(matches!(
        b.read::<u64>(&v, PAGE - 4),
        Err(Error::OutOfRange { .. })
    ));
    assert!(matches!(
        b.slice(&v, u64::MAX, 2),
        Err(Error::OutOfRange { .. })
    ));
    v.commit().unwrap();
    disjoint(&env);
    drop(v);
    env.close().unwrap();
    // A read-only handle finds the names and reads them, and creates none.
    let ro = Options {
        read_only: true,
        ..opts()
    };
    let env = Env::open(d.path(), ro).unwrap();
    let b = env.region("b", 0).unwrap();
    let mut v = env.view().unwrap();
    v.begin_read().unwrap();
    // `disjoint` filled b, the second region, with 2s.
    assert_eq!(
        b.read::<u64>(&v, PAGE - 8).unwrap(),
        u64::from_ne_bytes([2; 8])
    );
    v.commit().unwrap();
    assert!(env.region("new", 1).is_err());
}

#[test]
fn an_environment_holds_at_most_max_regions() {
    let d = ext4_dir("env-full");
    let env = Env::open(d.path(), opts()).unwrap();
    for i in 0..txmap::env::MAX_REGIONS {
        env.region(&format!("r{i}"), 1).unwrap();
    }
    assert!(matches!(env.region("one-more", 1), Err(Error::TooLarge(_))));
    // Every existing one is still found.
    assert_eq!(env.region("r62", 0).unwrap().offset(), 63 * PAGE);
}

#[test]
fn a_view_opened_before_a_region_was_created_sees_it_and_plain_stores_reach_it() {
    let d = ext4_dir("env-late");
    let env = Env::open(d.path(), opts()).unwrap();
    let mut v = env.view().unwrap();
    let late = env.region("late", 3 * PAGE).unwrap();
    v.begin().unwrap();
    let p = late.base(&v).unwrap();
    // SAFETY: inside the view's transaction; the named region's 3 pages
    // lie in the view's mapping (`base` checked it).
    unsafe { *(p.add(2 * PAGE as usize) as *mut u64) = 7 };
    v.commit().unwrap();
    drop(v);
    let mut w = env.view().unwrap();
    w.begin_read().unwrap();
    assert_eq!(late.read::<u64>(&w, 2 * PAGE).unwrap(), 7);
    w.commit().unwrap();
}

/// Names the creators race to create; name `i` has `i + 1` pages.
const RACED: usize = 12;

fn raced(i: usize) -> String {
    format!("n{i:02}")
}

/// Child: waits for the go file, creates the names in its own order and
/// prints every name's offset.
fn creator() {
    let dir = std::path::PathBuf::from(std::env::var("TXMAP_DIR").unwrap());
    let k: usize = std::env::var("TXMAP_WORKER").unwrap().parse().unwrap();
    let env = Env::open(&dir, opts()).unwrap();
    Acks::open(dir.join(format!("ready{k}")).to_str().unwrap()).line("ready");
    while !dir.join("go").exists() {
        std::hint::spin_loop();
    }
    let mut order: Vec<usize> = (0..RACED).collect();
    order.rotate_left(k * 3 % RACED);
    for i in order {
        env.region(&raced(i), (i as u64 + 1) * PAGE).unwrap();
    }
    let out: Vec<String> = (0..RACED)
        .map(|i| env.region(&raced(i), 0).unwrap().offset().to_string())
        .collect();
    println!("OFFSETS {}", out.join(","));
}

#[test]
fn processes_creating_the_same_names_at_once_agree_on_them() {
    let test = "processes_creating_the_same_names_at_once_agree_on_them";
    if role().is_some() {
        return creator();
    }
    let d = ext4_dir("env-create-race");
    for round in 0..3 {
        let dir = d.join(&format!("race{round}"));
        drop(Env::open(&dir, opts()).unwrap());
        let procs: Vec<std::process::Child> = (0..4)
            .map(|k| {
                child(
                    test,
                    "creator",
                    &[
                        ("TXMAP_DIR", dir.display().to_string()),
                        ("TXMAP_WORKER", k.to_string()),
                    ],
                )
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
            })
            .collect();
        // All four at the start line, then go at once.
        while (0..4).any(|k| !dir.join(format!("ready{k}")).exists()) {
            std::thread::sleep(Duration::from_millis(1));
        }
        std::fs::write(dir.join("go"), b"").unwrap();
        let outs: Vec<String> = procs
            .into_iter()
            .map(|p| {
                let o = p.wait_with_output().unwrap();
                assert!(
                    o.status.success(),
                    "a creator failed: {}",
                    String::from_utf8_lossy(&o.stderr)
                );
                let s = String::from_utf8_lossy(&o.stdout).into_owned();
                // The harness prints the test's name before it on the line.
                let at = s.find("OFFSETS").expect("the creator printed its offsets");
                s[at..].lines().next().unwrap_or_default().to_owned()
            })
            .collect();
        assert!(
            outs.iter().all(|o| *o == outs[0]),
            "creators disagree: {outs:?}"
        );
        let env = Env::open(&dir, opts()).unwrap();
        let regions = env.regions().unwrap();
        assert_eq!(regions.len(), RACED, "each name once: {regions:?}");
        for r in &regions {
            let i: u64 = r.name()[1..].parse().unwrap();
            assert_eq!(
                r.len(),
                (i + 1) * PAGE,
                "{r:?} has the size its creator asked"
            );
        }
        disjoint(&env);
    }
}

/// Fills every named region with its own byte and reads all of them back:
/// no two overlap, and none overlaps the catalog.
fn disjoint(env: &Env) {
    let regions = env.regions().unwrap();
    let mut v = env.view().unwrap();
    v.run(|v| {
        for (k, r) in regions.iter().enumerate() {
            r.slice_mut(v, 0, r.len() as usize)?.fill(k as u8 + 1);
        }
        Ok(())
    })
    .unwrap();
    v.begin_read().unwrap();
    for (k, r) in regions.iter().enumerate() {
        let b = r.slice(&v, 0, r.len() as usize).unwrap();
        assert!(
            b.iter().all(|&x| x == k as u8 + 1),
            "region {} overlaps another",
            r.name()
        );
    }
    v.commit().unwrap();
    assert_eq!(env.regions().unwrap(), regions, "the catalog survived");
}

#[test]
fn a_region_file_that_is_no_environment_is_refused_and_a_damaged_catalog_is_reported() {
    let d = ext4_dir("env-not");
    let path = d.join("plain.txm");
    let r = Region::create(&path, 2 * PAGE, opts()).unwrap();
    let mut v = r.view().unwrap();
    v.run(|v| v.write(16, &1u64)).unwrap();
    drop(v);
    assert!(matches!(
        Env::from_region(r.clone()),
        Err(Error::NotARegion { .. })
    ));
    // Read-only opening of a directory with no environment.
    let ro = Options {
        read_only: true,
        ..opts()
    };
    assert!(matches!(
        Env::open(&d.join("none"), ro),
        Err(Error::NotARegion { .. })
    ));

    // A catalog with too many entries, then one whose region lies past the file.
    let env_dir = d.join("env");
    let env = Env::open(&env_dir, opts()).unwrap();
    env.region("a", PAGE).unwrap();
    let mut v = env.view().unwrap();
    v.run(|v| v.write(8, &1000u32)).unwrap();
    assert!(matches!(env.regions(), Err(Error::Corrupt { .. })));
    assert!(matches!(env.region("a", 0), Err(Error::Corrupt { .. })));
    v.run(|v| {
        v.write(8, &1u32)?;
        v.write(64 + 8, &1000u64)
    })
    .unwrap();
    assert!(matches!(env.regions(), Err(Error::Corrupt { .. })));
    assert!(matches!(env.region("a", 0), Err(Error::Corrupt { .. })));
    v.run(|v| v.write(64 + 8, &1u64)).unwrap();
    assert_eq!(env.regions().unwrap().len(), 1);
}

#[test]
fn a_named_region_the_file_system_has_no_room_for_fails_cleanly() {
    let name = "env-full-fs";
    let Some(fs) = Tmpfs::mount(name, 8 << 20) else {
        return;
    };
    let dir = fs.path().join("env");
    let env = Env::open(&dir, opts()).unwrap();
    let a = env.region("a", 4096).unwrap();
    let mut v = env.view().unwrap();
    v.run(|v| a.write(v, 0, &7u64)).unwrap();
    // More than the 8 MiB file system holds: the growth fails, nothing is
    // named, and what was there stays usable.
    let e = env.region("huge", 64 << 20).unwrap_err();
    assert!(
        matches!(&e, Error::Io { source, .. } if source.raw_os_error() == Some(libc::ENOSPC)),
        "{e}"
    );
    assert_eq!(env.regions().unwrap(), std::slice::from_ref(&a));
    let b = env.region("b", 4096).unwrap();
    assert_eq!(
        b.offset(),
        2 * PAGE,
        "the failed growth left no name behind"
    );
    v.run(|v| {
        let x: u64 = a.read(v, 0)?;
        b.write(v, 0, &(x + 1))
    })
    .unwrap();
    drop(v);
    env.close().unwrap();
    let env = Env::open(&dir, opts()).unwrap();
    let mut v = env.view().unwrap();
    v.begin_read().unwrap();
    assert_eq!(env.region("b", 0).unwrap().read::<u64>(&v, 0).unwrap(), 8);
    v.commit().unwrap();
}
