//! Every installed store behaves as a key-value map: random puts, deletes,
//! gets and range reads checked against a `BTreeMap`, across a reopen, and
//! with several threads writing disjoint keys at once.

mod common;

use common::{Rng, apply_batch};
use std::collections::BTreeMap;
use std::path::PathBuf;

use txmap_peers::{Config, Durability, Error, Kind, Op, Peer, stores};

fn fresh_dir(name: &str) -> PathBuf {
    common::fresh_dir("peers", name)
}

fn installed() -> Vec<Peer> {
    let all = stores();
    for p in &all {
        if let Err(cmd) = p.available {
            eprintln!("skipping {} (not installed: {cmd})", p.name);
        }
    }
    all.into_iter().filter(|p| p.available.is_ok()).collect()
}

fn key(i: u64) -> Vec<u8> {
    format!("key{i:08}").into_bytes()
}

fn check_against_model(p: &Peer, durability: Durability) {
    let dir = fresh_dir(&format!("{}-{durability:?}", p.id));
    let mut model = BTreeMap::<Vec<u8>, Vec<u8>>::new();
    let mut rng = Rng(0x9e3779b97f4a7c15);
    {
        let store = (p.open)(&Config::new(&dir, durability)).unwrap();
        let mut s = store.session().unwrap();
        for round in 0..300u64 {
            let n = 1 + rng.next() % 8;
            let mut owned = Vec::new();
            for _ in 0..n {
                let k = key(rng.next() % 400);
                let v = if rng.next().is_multiple_of(4) {
                    None
                } else {
                    // Values of 0..3000 bytes: some span pages.
                    let len = (rng.next() % 3000) as usize;
                    Some(vec![(round % 251) as u8; len])
                };
                owned.push((k, v));
            }
            apply_batch(&mut *s, &mut model, owned);
        }
        check_contents(p, &mut *s, &model);
    }
    // Reopen: everything committed is still there.
    let store = (p.open)(&Config {
        create: false,
        ..Config::new(&dir, durability)
    })
    .unwrap();
    let mut s = store.session().unwrap();
    check_contents(p, &mut *s, &model);
    assert!(store.disk_bytes().unwrap() > 0, "{}: disk_bytes", p.id);
    drop(s);
    drop(store);
    std::fs::remove_dir_all(&dir).unwrap();
}

fn check_contents(p: &Peer, s: &mut dyn txmap_peers::Session, model: &BTreeMap<Vec<u8>, Vec<u8>>) {
    for i in 0..400 {
        let k = key(i);
        let mut got = None;
        let found = s.get(&k, &mut |v| got = Some(v.to_vec())).unwrap();
        assert_eq!(
            found,
            got.is_some(),
            "{}: get's result and callback disagree",
            p.id
        );
        assert_eq!(
            got.as_ref(),
            model.get(&k),
            "{}: value of {:?}",
            p.id,
            String::from_utf8_lossy(&k)
        );
    }
    let mut seen = Vec::new();
    match s.range(&key(100), 50, &mut |k, v| {
        seen.push((k.to_vec(), v.to_vec()))
    }) {
        Ok(n) => {
            assert_eq!(
                p.kind,
                Kind::Ordered,
                "{}: a hash store returned a range",
                p.id
            );
            let want: Vec<_> = model
                .range(key(100)..)
                .take(50)
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            assert_eq!(n, want.len(), "{}: range count", p.id);
            assert_eq!(seen, want, "{}: range contents", p.id);
        }
        Err(Error::Unsupported { .. }) => {
            assert_eq!(p.kind, Kind::Hash, "{}: range unsupported", p.id)
        }
        Err(e) => panic!("{e}"),
    }
}

#[test]
fn every_store_matches_a_model_durable() {
    for p in installed() {
        check_against_model(&p, Durability::Durable);
    }
}

#[test]
fn every_store_matches_a_model_async() {
    for p in installed() {
        check_against_model(&p, Durability::Async);
    }
}

#[test]
fn every_store_takes_writers_on_four_threads() {
    for p in installed() {
        let dir = fresh_dir(&format!("{}-threads", p.id));
        let store = (p.open)(&Config::new(&dir, Durability::Async)).unwrap();
        std::thread::scope(|sc| {
            for t in 0..4u64 {
                let store = &store;
                sc.spawn(move || {
                    let mut s = store.session().unwrap();
                    for i in 0..100 {
                        let k = key(t * 1000 + i);
                        s.write(&[Op::Put(&k, &k)]).unwrap();
                    }
                });
            }
        });
        let mut s = store.session().unwrap();
        for t in 0..4u64 {
            for i in 0..100 {
                let k = key(t * 1000 + i);
                let mut got = None;
                assert!(
                    s.get(&k, &mut |v| got = Some(v.to_vec())).unwrap(),
                    "{}: lost {t}/{i}",
                    p.id
                );
                assert_eq!(got.unwrap(), k);
            }
        }
        drop(s);
        drop(store);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
