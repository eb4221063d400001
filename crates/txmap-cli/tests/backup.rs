//! `txmap backup` under 4 processes of durable transfers: the copy holds
//! the commit the command reports (a counter every commit increments) and
//! the transfers' invariant; a backup killed at random leaves the source
//! intact and never a region at the destination that is not a whole copy.

mod cmd;
#[path = "../../txmap/tests/common/mod.rs"]
mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use cmd::*;
use common::*;
use txmap::{Options, Region};

const PAGE: u64 = 4096;
const ACCOUNTS: u64 = 16;
const START: u64 = 1000;
/// Accounts spread over the region so that the copy takes a while.
const PAGES: u64 = 8192;

fn account(i: u64) -> u64 {
    (1 + i * (PAGES - 1) / ACCOUNTS) * PAGE
}

/// (commit counter at offset 0, sum of the accounts) as `v` sees them.
fn state(v: &mut txmap::View) -> (u64, u64) {
    v.begin_read().unwrap();
    let n = v.read::<u64>(0).unwrap();
    let sum = (0..ACCOUNTS)
        .map(|i| v.read::<u64>(account(i)).unwrap())
        .sum();
    v.commit().unwrap();
    (n, sum)
}

/// Child: durable transfers until `TXMAP_STOP` exists; every commit also
/// increments the counter at offset 0, so the counter equals the commit
/// number.
#[test]
fn transfer_child() {
    if role().as_deref() != Some("transfer") {
        return;
    }
    let path = PathBuf::from(std::env::var("TXMAP_SRC").unwrap());
    let stop = PathBuf::from(std::env::var("TXMAP_STOP").unwrap());
    let r = Region::open(&path, Options::default()).unwrap();
    let mut v = r.view().unwrap();
    let mut x = u64::from(std::process::id());
    while !stop.exists() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let (a, b, amt) = (x % ACCOUNTS, (x >> 8) % ACCOUNTS, (x >> 16) % 50);
        v.run(|v| {
            let n = v.read::<u64>(0)?;
            v.write(0, &(n + 1))?;
            let fa = v.read::<u64>(account(a))?;
            let amt = amt.min(fa);
            v.write(account(a), &(fa - amt))?;
            let fb = v.read::<u64>(account(b))?;
            v.write(account(b), &(fb + amt))?;
            Ok(())
        })
        .unwrap();
    }
}

struct Writers {
    procs: Vec<Proc>,
    stop: PathBuf,
}

impl Writers {
    fn start(d: &TestDir, src: &Path) -> Writers {
        let stop = d.join("stop");
        let procs = (0..4)
            .map(|i| {
                Proc::spawn(
                    "transfer_child",
                    "transfer",
                    &[
                        ("TXMAP_SRC", src.display().to_string()),
                        ("TXMAP_STOP", stop.display().to_string()),
                    ],
                    d.join(&format!("writer{i}.err")),
                )
            })
            .collect();
        Writers { procs, stop }
    }

    fn finish(mut self) {
        std::fs::write(&self.stop, b"").unwrap();
        for (i, p) in self.procs.iter_mut().enumerate() {
            p.wait_ok(&format!("writer {i}"));
        }
    }
}

/// Makes the source: counter 1 (the init commit is commit 1), accounts at START.
fn make_source(src: &Path) {
    let r = Region::create(src, PAGES * PAGE, Options::default()).unwrap();
    let mut v = r.view().unwrap();
    v.begin().unwrap();
    v.write(0, &1u64).unwrap();
    for i in 0..ACCOUNTS {
        v.write(account(i), &START).unwrap();
    }
    v.commit().unwrap();
    assert_eq!(r.stats().commit_seq, 1);
}

fn wait_for_commits(v: &mut txmap::View, n: u64, writers: &mut Writers) {
    let t = Instant::now();
    while state(v).0 < n {
        for (i, p) in writers.procs.iter_mut().enumerate() {
            p.check_running(&format!("writer {i}"));
        }
        assert!(t.elapsed() < PROC_LIVENESS, "writers made no progress");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The commit number in `txmap backup`'s report.
fn reported_commit(out: &str) -> u64 {
    let at = out.find("at commit ").expect(out) + "at commit ".len();
    out[at..]
        .split(|c: char| !c.is_ascii_digit())
        .next()
        .unwrap()
        .parse()
        .expect(out)
}

fn check_copy(dst: &Path, commit: u64) {
    ok(&["check", s(dst)]);
    let b = Region::open(dst, Options::default()).unwrap();
    assert_eq!(
        b.stats().recovered_commits,
        0,
        "the copy opens without recovery"
    );
    assert_eq!(b.stats().commit_seq, commit);
    let mut v = b.view().unwrap();
    assert_eq!(
        state(&mut v),
        (commit, ACCOUNTS * START),
        "counter = reported commit, and the sum is constant"
    );
}

fn paths(name: &str) -> (TestDir, PathBuf, PathBuf) {
    let d = ext4_dir(name);
    let (src, dst) = (d.join("src.txm"), d.join("dst.txm"));
    make_source(&src);
    (d, src, dst)
}

/// Starts the 4 writers and waits for `commits`; returns them and a view
/// of the source.
fn running(d: &TestDir, src: &Path, commits: u64) -> (Writers, Region, txmap::View) {
    let mut writers = Writers::start(d, src);
    let watch = Region::open(src, Options::default()).unwrap();
    let mut v = watch.view().unwrap();
    wait_for_commits(&mut v, commits, &mut writers);
    (writers, watch, v)
}

fn backup_cmd(src: &Path, dst: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_txmap"));
    c.args(["backup", src.to_str().unwrap(), dst.to_str().unwrap()]);
    c
}

#[test]
fn a_backup_under_four_processes_of_durable_transfers_holds_the_reported_commit() {
    let (d, src, dst) = paths("cli-backup-4procs");
    let (mut writers, watch, mut v) = running(&d, &src, 200);
    let o = backup_cmd(&src, &dst).output().unwrap();
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        o.status.success(),
        "{out}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let commit = reported_commit(&out);
    // Writers went on during and after the backup.
    let later = state(&mut v).0;
    wait_for_commits(&mut v, later + 50, &mut writers);
    writers.finish();
    assert!(commit >= 200, "{out}");
    let (n, sum) = state(&mut v);
    assert!(n > commit);
    assert_eq!(sum, ACCOUNTS * START);
    drop(v);
    drop(watch);
    check_copy(&dst, commit);
}

#[test]
fn a_backup_killed_at_random_leaves_the_source_intact_and_no_half_copy() {
    let (d, src, dst) = paths("cli-backup-killed");
    let (writers, watch, mut v) = running(&d, &src, 50);
    let mut x = seed("a_backup_killed_at_random_leaves_the_source_intact_and_no_half_copy");
    let (mut killed, mut finished) = (0, 0);
    // One whole backup first: the kills then fall anywhere within as long.
    let t = Instant::now();
    let o = backup_cmd(&src, &dst).output().unwrap();
    assert!(o.status.success());
    let whole = t.elapsed().as_micros() as u64 + 1;
    for p in [
        dst.clone(),
        txmap::log_path(&dst),
        txmap::sums::sums_path(&dst),
    ] {
        std::fs::remove_file(p).unwrap();
    }
    for _ in 0..10 {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let delay = Duration::from_micros((x >> 33) % whole);
        let mut c = backup_cmd(&src, &dst)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(delay);
        let _ = c.kill();
        let status = c.wait().unwrap();
        if status.success() {
            finished += 1;
            let mut out = String::new();
            use std::io::Read;
            c.stdout.take().unwrap().read_to_string(&mut out).unwrap();
            check_copy(&dst, reported_commit(&out));
        } else {
            killed += 1;
            if dst.exists() {
                // Killed after the copy was placed, before it printed.
                let b = Region::open(&dst, Options::default()).unwrap();
                let c = b.stats().commit_seq;
                drop(b);
                check_copy(&dst, c);
            }
        }
        for p in [
            dst.clone(),
            txmap::log_path(&dst),
            txmap::sums::sums_path(&dst),
        ] {
            let _ = std::fs::remove_file(p);
        }
    }
    eprintln!("{killed} killed, {finished} finished");
    let (_, sum) = state(&mut v);
    assert_eq!(sum, ACCOUNTS * START);
    writers.finish();
    drop(v);
    drop(watch);
    ok(&["check", s(&src)]);
}
