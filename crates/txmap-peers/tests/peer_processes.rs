//! The multi-process and many-thread peers (Berkeley DB, LMDB, SQLite):
//! two real processes (this test binary re-executed in a child role) write
//! disjoint keys into one store at once, with `Config::shared`; and 64
//! threads commit overlapping transactions (deadlocks and busy waits are
//! retried inside `write`).

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use txmap_peers::{Config, Durability, Op, Peer, stores};

/// Set in a child: the peer id it writes to.
const ROLE: &str = "PEERS_TEST_CHILD";
/// The child's number (its keys' prefix) and the store directory.
const CHILD_NO: &str = "PEERS_TEST_CHILD_NO";
const CHILD_DIR: &str = "PEERS_TEST_DIR";
/// Keys each child writes, in transactions of `PER_TXN`.
const KEYS: u64 = 300;
const PER_TXN: u64 = 3;

fn fresh_dir(name: &str) -> PathBuf {
    common::fresh_dir("peerproc", name)
}

fn peer(id: &str) -> Option<Peer> {
    let p = stores().into_iter().find(|p| p.id == id).unwrap();
    match p.available {
        Ok(()) => Some(p),
        Err(cmd) => {
            eprintln!("skipping {} (not installed: {cmd})", p.name);
            None
        }
    }
}

fn key(child: u64, i: u64) -> Vec<u8> {
    format!("child{child}-key{i:06}").into_bytes()
}

fn shared(dir: &Path, create: bool) -> Config {
    Config {
        create,
        shared: true,
        ..Config::new(dir, Durability::Durable)
    }
}

/// The child's part: join the store and write its keys, once the parent
/// says go (so both children write at the same time).
fn child(id: &str) {
    let no: u64 = std::env::var(CHILD_NO).unwrap().parse().unwrap();
    let dir = PathBuf::from(std::env::var(CHILD_DIR).unwrap());
    let p = peer(id).unwrap();
    let store = (p.open)(&shared(&dir, false)).unwrap();
    let mut s = store.session().unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !dir.join("go").exists() {
        assert!(Instant::now() < deadline, "no go from the parent");
        std::thread::sleep(Duration::from_millis(1));
    }
    for t in 0..KEYS / PER_TXN {
        let keys: Vec<Vec<u8>> = (0..PER_TXN).map(|j| key(no, t * PER_TXN + j)).collect();
        let ops: Vec<Op> = keys.iter().map(|k| Op::Put(k, k)).collect();
        s.write(&ops).unwrap();
    }
}

fn check_all(p: &Peer, s: &mut dyn txmap_peers::Session) {
    for no in 0..2 {
        for i in 0..KEYS {
            let k = key(no, i);
            let mut got = None;
            let found = s.get(&k, &mut |v| got = Some(v.to_vec())).unwrap();
            assert!(found, "{}: child {no}'s key {i} missing", p.id);
            assert_eq!(got.unwrap(), k, "{}: child {no}'s key {i}", p.id);
        }
    }
    let mut n = 0;
    s.range(b"child", usize::MAX, &mut |k, v| {
        if k.starts_with(b"child") {
            assert_eq!(k, v);
            n += 1;
        }
    })
    .unwrap();
    assert_eq!(n, 2 * KEYS, "{}: range over both children's keys", p.id);
}

fn two_processes(id: &str) {
    let test = format!("two_processes_write_one_{}", id.replace('-', "_"));
    if let Ok(role) = std::env::var(ROLE) {
        if role == id {
            child(id);
        }
        return;
    }
    let Some(p) = peer(id) else { return };
    assert!(p.processes);
    let dir = fresh_dir(id);
    // The parent creates the store and keeps it open while the children
    // write, then reads their keys through its own open handle.
    let store = (p.open)(&shared(&dir, true)).unwrap();
    let mut s = store.session().unwrap();
    s.write(&[Op::Put(b"parent", b"here")]).unwrap();
    let children: Vec<_> = (0..2u64)
        .map(|no| {
            Command::new(std::env::current_exe().unwrap())
                .args([&test, "--exact", "--nocapture", "--test-threads=1"])
                .env(ROLE, id)
                .env(CHILD_NO, no.to_string())
                .env(CHILD_DIR, &dir)
                .spawn()
                .unwrap()
        })
        .collect();
    std::fs::write(dir.join("go"), b"").unwrap();
    for mut c in children {
        let st = c.wait().unwrap();
        assert!(st.success(), "{id}: child failed: {st}");
    }
    check_all(&p, &mut *s);
    drop(s);
    drop(store);
    // And after a reopen.
    let store = (p.open)(&shared(&dir, false)).unwrap();
    let mut s = store.session().unwrap();
    check_all(&p, &mut *s);
    assert!(s.get(b"parent", &mut |v| assert_eq!(v, b"here")).unwrap());
    drop(s);
    drop(store);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn two_processes_write_one_bdb_btree() {
    two_processes("bdb-btree");
}

#[test]
fn two_processes_write_one_lmdb() {
    two_processes("lmdb");
}

#[test]
fn two_processes_write_one_sqlite() {
    two_processes("sqlite");
}

/// 64 threads, each committing transactions that write its own key and
/// two of 16 shared keys in random order (so Berkeley DB deadlocks and
/// SQLite waits), durably; afterwards every thread's keys are there.
#[test]
fn sixty_four_threads_commit() {
    if std::env::var(ROLE).is_ok() {
        return;
    }
    const THREADS: u64 = 64;
    const TXNS: u64 = 20;
    for id in ["bdb-btree", "bdb-hash", "lmdb", "sqlite"] {
        let Some(p) = peer(id) else { continue };
        let dir = fresh_dir(&format!("{id}-64"));
        let store = (p.open)(&Config::new(&dir, Durability::Durable)).unwrap();
        let started = Instant::now();
        let retries: u32 = std::thread::scope(|sc| {
            let hs: Vec<_> = (0..THREADS)
                .map(|t| {
                    let store = &store;
                    sc.spawn(move || {
                        let mut s = store.session().unwrap();
                        let mut x = 0x9e3779b97f4a7c15u64 ^ (t + 1);
                        let mut retries = 0;
                        for i in 0..TXNS {
                            x ^= x << 13;
                            x ^= x >> 7;
                            x ^= x << 17;
                            let own = format!("t{t:02}-{i:03}").into_bytes();
                            let a = format!("shared{:02}", x % 16).into_bytes();
                            let b = format!("shared{:02}", (x >> 8) % 16).into_bytes();
                            retries += s
                                .write(&[Op::Put(&a, &own), Op::Put(&own, &own), Op::Put(&b, &own)])
                                .unwrap();
                        }
                        retries
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).sum()
        });
        eprintln!(
            "{id}: {} commits on {THREADS} threads in {:?}, {retries} retries",
            THREADS * TXNS,
            started.elapsed()
        );
        let mut s = store.session().unwrap();
        for t in 0..THREADS {
            for i in 0..TXNS {
                let own = format!("t{t:02}-{i:03}").into_bytes();
                assert!(
                    s.get(&own, &mut |v| assert_eq!(v, own)).unwrap(),
                    "{id}: t{t} txn {i} lost"
                );
            }
        }
        drop(s);
        drop(store);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

/// Each peer's description is one line, for the report.
#[test]
fn descriptions_are_one_line() {
    for p in stores() {
        for d in [Durability::Durable, Durability::Async] {
            let s = (p.describe)(d);
            assert!(!s.is_empty() && !s.contains('\n'), "{}: {s:?}", p.id);
        }
    }
}

/// Not a check: single-thread commit rates at both durabilities, to see
/// that Durable commits sync (run with `--ignored --nocapture`;
/// `PEERS_ONLY=<id>` for one peer, e.g. under `strace -f -c`).
#[test]
#[ignore]
fn commit_rates() {
    const N: u64 = 200;
    let only = std::env::var("PEERS_ONLY").ok();
    for id in ["bdb-btree", "bdb-hash", "lmdb", "sqlite"] {
        if only.as_deref().is_some_and(|o| o != id) {
            continue;
        }
        let Some(p) = peer(id) else { continue };
        for d in [Durability::Durable, Durability::Async] {
            let dir = fresh_dir(&format!("{id}-rate"));
            let store = (p.open)(&Config::new(&dir, d)).unwrap();
            let mut s = store.session().unwrap();
            let started = Instant::now();
            for i in 0..N {
                let k = key(0, i);
                s.write(&[Op::Put(&k, &[7; 100])]).unwrap();
            }
            let t = started.elapsed();
            eprintln!(
                "{id} {d:?}: {N} commits in {t:?} ({:.0}/s); {}",
                N as f64 / t.as_secs_f64(),
                (p.describe)(d)
            );
            let mut files = Vec::new();
            for e in std::fs::read_dir(&dir).unwrap() {
                let e = e.unwrap();
                files.push(format!(
                    "{} {}",
                    e.file_name().to_string_lossy(),
                    e.metadata().unwrap().len()
                ));
            }
            files.sort();
            eprintln!(
                "  disk_bytes {}; files: {}",
                store.disk_bytes().unwrap(),
                files.join(", ")
            );
            drop(s);
            drop(store);
            std::fs::remove_dir_all(&dir).unwrap();
        }
    }
}

/// Async commits survive a process crash: a child commits keys with
/// `Durability::Async`, appending each acknowledged one to a file, and is
/// killed with SIGKILL mid-stream; the reopened store has every
/// acknowledged key (recovery: Berkeley DB's DB_RECOVER, with and without
/// DB_REGISTER; LMDB's robust mutex and stale-reader check; SQLite's WAL).
#[test]
fn async_commits_survive_sigkill() {
    use std::io::Write;
    const CRASH: &str = "PEERS_TEST_CRASH";
    if let Ok(id) = std::env::var(CRASH) {
        let dir = PathBuf::from(std::env::var(CHILD_DIR).unwrap());
        let shared = std::env::var(CHILD_NO).unwrap() == "shared";
        let p = peer(&id).unwrap();
        let store = (p.open)(&Config {
            shared,
            ..Config::new(&dir, Durability::Async)
        })
        .unwrap();
        let mut s = store.session().unwrap();
        let mut acks = std::fs::File::options()
            .create(true)
            .append(true)
            .open(dir.join("acks"))
            .unwrap();
        for i in 0.. {
            let k = key(0, i);
            s.write(&[Op::Put(&k, &[i as u8; 500])]).unwrap();
            acks.write_all(format!("{i}\n").as_bytes()).unwrap();
        }
        unreachable!();
    }
    if std::env::var(ROLE).is_ok() {
        return;
    }
    for (id, shared) in [
        ("bdb-btree", false),
        ("bdb-btree", true),
        ("bdb-hash", false),
        ("lmdb", false),
        ("sqlite", false),
    ] {
        let Some(p) = peer(id) else { continue };
        let dir = fresh_dir(&format!("{id}-{shared}-crash"));
        let mut c = Command::new(std::env::current_exe().unwrap())
            .args([
                "async_commits_survive_sigkill",
                "--exact",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CRASH, id)
            .env(CHILD_NO, if shared { "shared" } else { "one" })
            .env(CHILD_DIR, &dir)
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(60);
        let acked = |d: &Path| {
            std::fs::read_to_string(d.join("acks"))
                .map(|s| s.lines().count())
                .unwrap_or(0)
        };
        while acked(&dir) < 300 {
            assert!(Instant::now() < deadline, "{id}: child too slow");
            assert!(c.try_wait().unwrap().is_none(), "{id}: child exited");
            std::thread::sleep(Duration::from_millis(2));
        }
        c.kill().unwrap();
        c.wait().unwrap();
        let n = acked(&dir) as u64;
        let store = (p.open)(&Config {
            create: false,
            shared,
            ..Config::new(&dir, Durability::Async)
        })
        .unwrap();
        let mut s = store.session().unwrap();
        for i in 0..n {
            let found = s
                .get(&key(0, i), &mut |v| assert_eq!(v, &[i as u8; 500][..]))
                .unwrap();
            assert!(
                found,
                "{id} (shared {shared}): acknowledged key {i} of {n} lost"
            );
        }
        eprintln!("{id} (shared {shared}): all {n} acknowledged commits recovered");
        drop(s);
        drop(store);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

/// A peer whose library is missing says so, with the install command, and
/// its `open` fails with `Error::NotInstalled` (not a panic or link error).
#[test]
fn missing_peers_say_not_installed() {
    for p in stores() {
        if !["bdb-btree", "bdb-hash", "lmdb", "sqlite"].contains(&p.id) {
            continue;
        }
        if let Err(cmd) = p.available {
            assert!(cmd.starts_with("sudo apt-get install "), "{}", p.id);
            let dir = fresh_dir(&format!("{}-missing", p.id));
            match (p.open)(&Config::new(&dir, Durability::Durable)) {
                Err(txmap_peers::Error::NotInstalled { install, .. }) => assert_eq!(install, cmd),
                Err(e) => panic!("{}: {e}", p.id),
                Ok(_) => panic!("{}: opened without its library", p.id),
            }
            std::fs::remove_dir_all(&dir).unwrap();
        }
    }
}
