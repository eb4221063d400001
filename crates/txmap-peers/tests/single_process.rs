//! A store that only one process may open (`Peer::processes == false`)
//! refuses a second open of its directory while the first is open: with a
//! clear error, at once (no hang), and leaving the first open store and the
//! data on disk intact.

mod common;

use std::path::PathBuf;
use std::sync::mpsc;
use std::time::Duration;

use txmap_peers::{Config, Durability, Op, Peer, stores};

fn fresh_dir(name: &str) -> PathBuf {
    common::fresh_dir("single", name)
}

fn value(store: &dyn txmap_peers::Store, k: &[u8]) -> Option<Vec<u8>> {
    let mut s = store.session().unwrap();
    let mut got = None;
    s.get(k, &mut |v| got = Some(v.to_vec())).unwrap();
    got
}

/// Opens `c` on another thread and waits at most 20 s for it to return.
fn open_with_timeout(p: &Peer, c: Config) -> Result<(), String> {
    let (tx, rx) = mpsc::channel();
    let open = p.open;
    let id = p.id;
    std::thread::spawn(move || {
        let r = open(&c).map(drop).map_err(|e| e.to_string());
        let _ = tx.send(r);
    });
    rx.recv_timeout(Duration::from_secs(20))
        .unwrap_or_else(|_| panic!("{id}: a second open hung"))
}

/// Single-process peers whose library cannot see a second open of the
/// same directory, each with the reason. None so far: RocksDB (its LOCK
/// file, and a table of files locked by this process), libpmemobj (flock on
/// the pool file) and redb (a lock on its file) all refuse it.
const CANNOT_DETECT: &[(&str, &str)] = &[];

#[test]
fn single_process_stores_refuse_a_second_open() {
    for p in stores() {
        if p.processes || p.available.is_err() {
            continue;
        }
        if let Some((_, why)) = CANNOT_DETECT.iter().find(|(id, _)| *id == p.id) {
            eprintln!("{}: a second open is not detected: {why}", p.id);
            continue;
        }
        let dir = fresh_dir(p.id);
        let first = (p.open)(&Config::new(&dir, Durability::Durable)).unwrap();
        first
            .session()
            .unwrap()
            .write(&[Op::Put(b"k", b"first")])
            .unwrap();

        // Another open of the same directory, as an existing store and as
        // a new one: both must fail while `first` is open.
        for create in [false, true] {
            let c = Config {
                create,
                ..Config::new(&dir, Durability::Durable)
            };
            match open_with_timeout(&p, c) {
                Ok(()) => panic!("{}: a second open (create: {create}) succeeded", p.id),
                Err(e) => {
                    eprintln!("{}: second open (create: {create}) refused: {e}", p.id);
                    assert!(e.starts_with(p.id), "{}: error names the store: {e}", p.id);
                }
            }
        }

        // The first store still works and its data is intact.
        assert_eq!(
            value(&*first, b"k").as_deref(),
            Some(&b"first"[..]),
            "{}",
            p.id
        );
        first
            .session()
            .unwrap()
            .write(&[Op::Put(b"k2", b"after")])
            .unwrap();
        drop(first);

        // Once it is closed, the directory opens again with everything.
        let again = (p.open)(&Config {
            create: false,
            ..Config::new(&dir, Durability::Durable)
        })
        .unwrap_or_else(|e| panic!("{}: reopen after close: {e}", p.id));
        assert_eq!(
            value(&*again, b"k").as_deref(),
            Some(&b"first"[..]),
            "{}",
            p.id
        );
        assert_eq!(
            value(&*again, b"k2").as_deref(),
            Some(&b"after"[..]),
            "{}",
            p.id
        );
        drop(again);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

#[test]
fn describe_names_the_configuration() {
    for p in stores() {
        for d in [Durability::Durable, Durability::Async] {
            let line = (p.describe)(d);
            eprintln!("{} {d:?}: {line}", p.id);
            assert!(!line.is_empty() && !line.contains('\n'), "{}: {line}", p.id);
        }
    }
}

#[test]
fn single_process_stores_refuse_shared() {
    // The peers of this change; others may treat `shared` their own way.
    for p in stores() {
        if p.processes || p.available.is_err() || !["rocksdb", "pmemobj", "redb"].contains(&p.id) {
            continue;
        }
        let dir = fresh_dir(&format!("{}-shared", p.id));
        let c = Config {
            shared: true,
            ..Config::new(&dir, Durability::Durable)
        };
        match (p.open)(&c) {
            Err(txmap_peers::Error::Unsupported { .. }) => {}
            Err(e) => panic!("{}: shared open: unexpected error {e}", p.id),
            Ok(_) => panic!("{}: shared open of a single-process store succeeded", p.id),
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
