//! Commit-time blind puts (`Map::put_blind`; built-in operations
//! `BTREE_PUT`, `LHASH_PUT`, `COBTREE_PUT`): concurrent blind puts of
//! different keys into one leaf (bucket, segment) all commit at the first
//! attempt, from threads and from processes; a transaction that read the
//! key before putting it still conflicts; and recovery after a SIGKILLed
//! writer replays the operations into the tree a model predicts.
mod collections_common;
mod common;
use collections_common as coll;

use std::collections::BTreeMap;
use std::ops::Bound;
use std::path::Path;
use std::sync::Barrier;
use std::time::{Duration, Instant};

use common::*;
use txmap::collections::{AnyMap, Kind, Map, alloc, lhash};
use txmap::{Error, Region, View, ops};

const KINDS: [(Kind, &str, u32); 3] = [
    (Kind::BTree, "btree", ops::BTREE_PUT),
    (Kind::LinearHash, "lhash", ops::LHASH_PUT),
    (Kind::CoBTree, "cobtree", ops::COBTREE_PUT),
];

/// Key `i` of a group that shares one leaf (B+-tree), one segment (CO
/// B-tree, consecutive 8-byte keys) or one bucket (linear hash: the same
/// hash modulo 1024, so the same bucket while the table has at most 1,024).
fn group_key(kind: Kind, i: u64) -> Vec<u8> {
    if kind != Kind::LinearHash {
        return (1_000_000 + i).to_be_bytes().to_vec();
    }
    let mut found = 0;
    for x in 0u64.. {
        let k = x.to_be_bytes();
        if lhash::hash(&k) % 1024 == 7 {
            if found == i {
                return k.to_vec();
            }
            found += 1;
        }
    }
    unreachable!()
}

/// Every (key, value) of the map, sorted.
fn contents(m: &AnyMap, v: &View) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let mut out = BTreeMap::new();
    m.scan(v, Bound::Unbounded, Bound::Unbounded, &mut |k, val| {
        out.insert(k.to_vec(), val.to_vec());
        Ok(true)
    })
    .unwrap();
    out
}

/// How many times the log holds operation `id`.
fn logged_ops(p: &Path, id: u32) -> u64 {
    txmap::inspect::inspect(p)
        .unwrap()
        .log_operations
        .iter()
        .find(|&&(i, _)| i == id)
        .map_or(0, |&(_, n)| n)
}

/// Gives this thread's arena a free block of a record's size class, so
/// the CO B-tree's blind put can allocate at commit (an arena without
/// room takes the ordinary path, which allocates a chunk).
fn warm_arena(v: &mut View) {
    v.run(|v| {
        let b = alloc::alloc(v, 28)?;
        alloc::free(v, b)
    })
    .unwrap();
}

/// Creates map `name` of `kind` holding `pre` keys of the group.
fn create(r: &Region, kind: Kind, name: &str, pre: u64) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let mut v = r.view().unwrap();
    let m = v.run(|v| AnyMap::open_or_create(v, name, kind)).unwrap();
    let mut model = BTreeMap::new();
    for i in 0..pre {
        let k = group_key(kind, i);
        v.run(|v| m.put(v, &k, &i.to_le_bytes())).unwrap();
        model.insert(k, i.to_le_bytes().to_vec());
    }
    model
}

/// Checks the map equals `model` and its structure and heap are sound.
fn check(r: &Region, name: &str, model: &BTreeMap<Vec<u8>, Vec<u8>>) {
    let mut v = r.view().unwrap();
    v.begin_read().unwrap();
    let m = AnyMap::open_named(&v, name).unwrap().unwrap();
    assert_eq!(&contents(&m, &v), model, "{name} differs from the model");
    assert_eq!(m.check(&v).unwrap().entries, model.len() as u64);
    v.commit().unwrap();
    let c = txmap::collections::check_region(&mut v).unwrap().unwrap();
    assert!(c.heap.is_ok(), "{name}: {:?}", c.heap.err());
    assert_eq!(c.unowned_blocks, Some(0), "{name}: leaked blocks");
}

const THREADS: u64 = 6;
const ROUNDS: u64 = 5;

/// Six threads, five rounds: in each round every thread opens a
/// transaction, blindly puts its own key of the group, waits until all
/// have, then commits. Every commit succeeds at once (none of them read
/// another's key), and the map holds every key.
#[test]
fn concurrent_blind_puts_into_one_leaf_commit_without_retries_threads() {
    let d = ext4_dir("blind-threads");
    let p = d.join("r.txm");
    let r = Region::create(&p, 1 << 20, coll::opts()).unwrap();
    for (kind, name, _) in KINDS {
        let mut model = create(&r, kind, name, 4);
        let barrier = Barrier::new(THREADS as usize);
        let conflicts: u64 = std::thread::scope(|s| {
            let hs: Vec<_> = (0..THREADS)
                .map(|t| {
                    let (r, barrier) = (&r, &barrier);
                    s.spawn(move || {
                        let mut v = r.view().unwrap();
                        warm_arena(&mut v);
                        v.begin_read().unwrap();
                        let m = AnyMap::open_named(&v, name).unwrap().unwrap();
                        v.commit().unwrap();
                        let mut conflicts = 0;
                        for round in 0..ROUNDS {
                            let i = 100 + round * THREADS + t;
                            let k = group_key(kind, i);
                            v.begin().unwrap();
                            m.put_blind(&mut v, &k, &i.to_le_bytes()).unwrap();
                            barrier.wait();
                            match v.commit() {
                                Ok(()) => {}
                                Err(Error::Conflict) => {
                                    conflicts += 1;
                                    v.run(|v| m.put_blind(v, &k, &i.to_le_bytes())).unwrap();
                                }
                                Err(e) => panic!("{name}: {e}"),
                            }
                            barrier.wait();
                        }
                        conflicts
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).sum()
        });
        assert_eq!(conflicts, 0, "{name}: blind puts of other keys conflicted");
        for t in 0..THREADS {
            for round in 0..ROUNDS {
                let i = 100 + round * THREADS + t;
                model.insert(group_key(kind, i), i.to_le_bytes().to_vec());
            }
        }
        check(&r, name, &model);
    }
    drop(r);
    let c = txmap::inspect::check(&p).unwrap();
    assert!(c.problems.is_empty(), "{:?}", c.problems);
}

const PROCS: u64 = 4;

/// Waits until `n` files `prefix-*` exist in `dir`.
fn wait_files(dir: &Path, prefix: &str, n: u64) {
    let start = Instant::now();
    loop {
        let have = std::fs::read_dir(dir)
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .unwrap()
                    .file_name()
                    .to_string_lossy()
                    .starts_with(prefix)
            })
            .count() as u64;
        if have >= n {
            return;
        }
        assert!(start.elapsed() < PROC_LIVENESS, "waited for {prefix} files");
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Four processes, one transaction each per structure: each blindly puts
/// its own key of the group, marks itself ready, waits until all are,
/// then commits. Every commit succeeds at the first attempt (a child
/// fails otherwise), and the maps hold every key.
#[test]
fn concurrent_blind_puts_into_one_leaf_commit_without_retries_processes() {
    if role().as_deref() == Some("putter") {
        let p = std::env::var("TXMAP_PATH").unwrap();
        let dir = Path::new(&p).parent().unwrap().to_path_buf();
        let me: u64 = std::env::var("TXMAP_CHILD").unwrap().parse().unwrap();
        let r = Region::open(p.as_ref(), coll::opts()).unwrap();
        let mut v = r.view().unwrap();
        warm_arena(&mut v);
        for (kind, name, _) in KINDS {
            v.begin_read().unwrap();
            let m = AnyMap::open_named(&v, name).unwrap().unwrap();
            v.commit().unwrap();
            let i = 200 + me;
            v.begin().unwrap();
            m.put_blind(&mut v, &group_key(kind, i), &i.to_le_bytes())
                .unwrap();
            std::fs::write(dir.join(format!("ready-{name}-{me}")), b"").unwrap();
            wait_files(&dir, &format!("ready-{name}-"), PROCS);
            match v.commit() {
                Ok(()) => {}
                Err(e) => panic!("{name}: the blind put of process {me} failed: {e}"),
            }
        }
        return;
    }
    let d = ext4_dir("blind-procs");
    let p = d.join("r.txm");
    let mut models = Vec::new();
    // Held open, so the children's closes do not empty the log.
    let r = Region::create(&p, 1 << 20, coll::opts()).unwrap();
    for (kind, name, _) in KINDS {
        models.push(create(&r, kind, name, 4));
    }
    let mut kids: Vec<Proc> = (0..PROCS)
        .map(|c| {
            Proc::spawn(
                "concurrent_blind_puts_into_one_leaf_commit_without_retries_processes",
                "putter",
                &[
                    ("TXMAP_PATH", p.display().to_string()),
                    ("TXMAP_CHILD", c.to_string()),
                ],
                d.join(&format!("putter-{c}.err")),
            )
        })
        .collect();
    for k in &mut kids {
        k.wait_ok("a blind putter");
    }
    for ((kind, name, _), model) in KINDS.into_iter().zip(&mut models) {
        for c in 0..PROCS {
            let i = 200 + c;
            model.insert(group_key(kind, i), i.to_le_bytes().to_vec());
        }
        check(&r, name, model);
    }
}

/// A transaction that reads a key and then puts it blindly is not blind:
/// when another transaction commits that key in between, it conflicts
/// (serializable), for every structure. And a blind put followed by an
/// ordinary put into the same leaf (the operation then stays in order and
/// what it read is validated) conflicts with a commit to that leaf in
/// between, and otherwise commits both.
#[test]
fn a_read_then_blind_put_still_conflicts() {
    let d = ext4_dir("blind-read");
    let p = d.join("r.txm");
    let r = Region::create(&p, 1 << 20, coll::opts()).unwrap();
    for (kind, name, _) in KINDS {
        let mut model = create(&r, kind, name, 4);
        let (mut a, mut b) = (r.view().unwrap(), r.view().unwrap());
        warm_arena(&mut a);
        let k = group_key(kind, 1);
        a.begin().unwrap();
        let m = AnyMap::open_named(&a, name).unwrap().unwrap();
        let old = m.get(&a, &k).unwrap().unwrap();
        let mut bumped = old.clone();
        bumped[0] = bumped[0].wrapping_add(1);
        m.put_blind(&mut a, &k, &bumped).unwrap();
        b.run(|v| m.put(v, &k, b"by other")).unwrap();
        assert!(
            matches!(a.commit(), Err(Error::Conflict)),
            "{name}: a read-then-put committed over another's put of the key"
        );
        model.insert(k.clone(), b"by other".to_vec());
        check(&r, name, &model);

        // Blind put, then an ordinary put of a new key into the same leaf.
        let (k1, k2) = (group_key(kind, 50), group_key(kind, 51));
        a.begin().unwrap();
        m.put_blind(&mut a, &k1, b"blind").unwrap();
        m.put(&mut a, &k2, b"plain").unwrap();
        b.run(|v| m.put(v, &group_key(kind, 52), b"between"))
            .unwrap();
        model.insert(group_key(kind, 52), b"between".to_vec());
        assert!(
            matches!(a.commit(), Err(Error::Conflict)),
            "{name}: a blind put mixed with a put into its leaf ignored a commit there"
        );
        a.run(|v| {
            m.put_blind(v, &k1, b"blind")?;
            m.put(v, &k2, b"plain").map(|_| ())
        })
        .unwrap();
        model.insert(k1, b"blind".to_vec());
        model.insert(k2, b"plain".to_vec());
        check(&r, name, &model);
    }
    drop(r);
    let c = txmap::inspect::check(&p).unwrap();
    assert!(c.problems.is_empty(), "{:?}", c.problems);
}

/// Pages `a` installs while `read` runs.
fn installs_during(a: &mut View, read: impl FnOnce(&mut View)) -> u64 {
    let before = a.installed_pages();
    read(a);
    a.installed_pages() - before
}

/// A view's commit of blind puts with nothing committed since its
/// snapshot publishes what the puts did in the view, which keeps those
/// pages: reading the keys back installs no page. With another view's
/// commit into the same leaf (bucket, segment) in between, the puts ran
/// again on the newer pages at commit, and the view reads those afresh:
/// it sees the other view's key too. Also with an ordinary put beside
/// the blind puts.
#[test]
fn blind_puts_keep_their_pages_in_the_view_unless_a_commit_came_between() {
    let d = ext4_dir("blind-keep");
    let r = Region::create(&d.join("r.txm"), 1 << 20, coll::opts()).unwrap();
    for (kind, name, _) in KINDS {
        let mut model = create(&r, kind, name, 4);
        let (mut a, mut b) = (r.view().unwrap(), r.view().unwrap());
        warm_arena(&mut a);
        let m = a.run(|v| AnyMap::open_or_create(v, name, kind)).unwrap();
        // Read-write: a read-only one may read pages in place, uninstalled.
        let read_back = |a: &mut View, model: &BTreeMap<Vec<u8>, Vec<u8>>| {
            a.begin().unwrap();
            for (k, val) in model {
                assert_eq!(m.get(a, k).unwrap().as_ref(), Some(val), "{name}: {k:?}");
            }
            a.commit().unwrap();
        };
        read_back(&mut a, &model);
        for round in 0..3u64 {
            let ks: Vec<Vec<u8>> = (0..5)
                .map(|i| group_key(kind, 10 + round * 5 + i))
                .collect();
            // In the last round an ordinary put too: the blind puts into
            // its leaf then stay where they ran in the record.
            let plain = (round == 2).then(|| group_key(kind, 40));
            a.run(|v| {
                ks.iter().try_for_each(|k| m.put_blind(v, k, b"own"))?;
                plain
                    .iter()
                    .try_for_each(|k| m.put(v, k, b"plain").map(|_| ()))
            })
            .unwrap();
            model.extend(ks.into_iter().map(|k| (k, b"own".to_vec())));
            model.extend(plain.map(|k| (k, b"plain".to_vec())));
            assert_eq!(
                installs_during(&mut a, |a| read_back(a, &model)),
                0,
                "{name}: the view read its own blind puts' pages afresh"
            );
        }

        let (mine, theirs) = (group_key(kind, 60), group_key(kind, 61));
        a.begin().unwrap();
        m.put_blind(&mut a, &mine, b"mine").unwrap();
        b.run(|v| m.put(v, &theirs, b"theirs")).unwrap();
        a.commit().unwrap();
        model.insert(mine, b"mine".to_vec());
        model.insert(theirs, b"theirs".to_vec());
        read_back(&mut a, &model);
        check(&r, name, &model);
    }
}

/// The same when some blind puts stay where they ran (an ordinary put
/// into their leaf followed) and others go to another leaf: the commit
/// runs the latter again, on the same pages (nothing committed since the
/// snapshot), and the view keeps both leaves.
#[test]
fn blind_puts_beside_ordinary_puts_keep_their_leaves_in_the_view() {
    let d = ext4_dir("blind-keep-mixed");
    let r = Region::create(&d.join("r.txm"), 1 << 20, coll::opts()).unwrap();
    let mut a = r.view().unwrap();
    let m = a
        .run(|v| AnyMap::open_or_create(v, "t", Kind::BTree))
        .unwrap();
    let key = |i: u64| (i * 1000).to_be_bytes();
    let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    a.run(|v| (0..400).try_for_each(|i| m.put(v, &key(i), &[7; 100]).map(|_| ())))
        .unwrap();
    model.extend((0..400).map(|i| (key(i).to_vec(), vec![7; 100])));
    let read_back = |a: &mut View, model: &BTreeMap<Vec<u8>, Vec<u8>>| {
        a.begin().unwrap();
        assert_eq!(&contents(&m, a), model);
        a.commit().unwrap();
    };
    read_back(&mut a, &model);
    // Beside the first leaf's first key, and after the last leaf's last.
    let first = key(0);
    let (first2, last2) = (1u64.to_be_bytes(), 399_001u64.to_be_bytes());
    a.run(|v| {
        m.put_blind(v, &first2, b"blind")?;
        m.put(v, &first, b"plain")?;
        m.put_blind(v, &last2, b"blind")
    })
    .unwrap();
    model.insert(first2.to_vec(), b"blind".to_vec());
    model.insert(first.to_vec(), b"plain".to_vec());
    model.insert(last2.to_vec(), b"blind".to_vec());
    assert_eq!(
        installs_during(&mut a, |a| read_back(a, &model)),
        0,
        "the view read its own commit's leaves afresh"
    );
    check(&r, "t", &model);
}

const WRITER_SEED: u64 = 0x0B11_D5EE_D000;
const WRITERS: u64 = 2;

/// Writer `w`'s i-th key.
fn wkey(w: u64, i: u64) -> [u8; 8] {
    let mut x = WRITER_SEED ^ w << 40 ^ i.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    x ^= x >> 31;
    x = x.wrapping_mul(0xBF58_476D_1CE4_E5B9);
    (x ^ (x >> 29)).to_be_bytes()
}

/// Writer `w`'s model after `n` steps: step i puts key i (value i) blindly
/// into every map, and every fifth step deletes the key of step i - 3.
fn writer_model(w: u64, n: u64, model: &mut BTreeMap<Vec<u8>, Vec<u8>>) {
    for i in 0..n {
        model.insert(wkey(w, i).to_vec(), i.to_le_bytes().to_vec());
        if i % 5 == 4 {
            model.remove(&wkey(w, i - 3)[..]);
        }
    }
}

/// Two writer threads in a child put blindly into a B+-tree, a linear hash
/// and a CO B-tree (each step one durable transaction) until the child is
/// killed with SIGKILL. The log then holds the three commit-time
/// operations, `txmap check` replays them cleanly, and each reopened map is
/// the model after each writer's acknowledged steps (or one more).
#[test]
fn sigkill_blind_writers_then_recovery_replays_the_operations() {
    if role().as_deref() == Some("writer") {
        let p = std::env::var("TXMAP_PATH").unwrap();
        let acks = std::env::var("TXMAP_ACKS").unwrap();
        let r = Region::open(p.as_ref(), coll::opts()).unwrap();
        std::thread::scope(|s| {
            for w in 0..WRITERS {
                let (r, acks) = (&r, &acks);
                s.spawn(move || {
                    let mut v = r.view().unwrap();
                    let mut acks = Acks::open(&format!("{acks}-{w}"));
                    v.begin_read().unwrap();
                    let maps: Vec<AnyMap> = KINDS
                        .iter()
                        .map(|(_, name, _)| AnyMap::open_named(&v, name).unwrap().unwrap())
                        .collect();
                    v.commit().unwrap();
                    for i in 0.. {
                        v.run(|v| {
                            for m in &maps {
                                m.put_blind(v, &wkey(w, i), &i.to_le_bytes())?;
                                if i % 5 == 4 {
                                    assert!(m.delete(v, &wkey(w, i - 3))?);
                                }
                            }
                            Ok(())
                        })
                        .unwrap();
                        acks.line(&i.to_string());
                    }
                });
            }
        });
        unreachable!();
    }
    let d = ext4_dir("blind-crash");
    let p = d.join("r.txm");
    {
        let r = Region::create(&p, 1 << 20, coll::opts()).unwrap();
        for (kind, name, _) in KINDS {
            create(&r, kind, name, 0);
        }
    }
    let acks = d.join("acks");
    let mut c = Proc::spawn(
        "sigkill_blind_writers_then_recovery_replays_the_operations",
        "writer",
        &[
            ("TXMAP_PATH", p.display().to_string()),
            ("TXMAP_ACKS", acks.display().to_string()),
        ],
        d.join("writer.err"),
    );
    wait_for_acks(&mut c, &d.join("acks-0"), 600);
    wait_for_acks(&mut c, &d.join("acks-1"), 600);
    c.kill(); // SIGKILL
    let acked: Vec<u64> = (0..WRITERS)
        .map(|w| {
            std::fs::read_to_string(d.join(&format!("acks-{w}")))
                .unwrap()
                .lines()
                .count() as u64
        })
        .collect();
    for (_, name, op) in KINDS {
        assert!(logged_ops(&p, op) > 0, "{name}: no blind put in the log");
    }
    // `txmap check` replays the log in memory; the page checks hold.
    let c = txmap::inspect::check(&p).unwrap();
    assert!(c.problems.is_empty(), "{:?}", c.problems);
    let r = Region::open(&p, coll::opts()).unwrap();
    let mut v = r.view().unwrap();
    let check = txmap::collections::check_region(&mut v).unwrap().unwrap();
    assert!(check.heap.is_ok(), "{:?}", check.heap.err());
    v.begin_read().unwrap();
    for (_, name, _) in KINDS {
        let m = AnyMap::open_named(&v, name).unwrap().unwrap();
        m.check(&v).unwrap();
        let got = contents(&m, &v);
        // Each writer's last step may have committed without its ack.
        let ok = (0..=1).any(|x| {
            (0..=1).any(|y| {
                let mut model = BTreeMap::new();
                writer_model(0, acked[0] + x, &mut model);
                writer_model(1, acked[1] + y, &mut model);
                got == model
            })
        });
        assert!(
            ok,
            "{name}: after {acked:?} acknowledged steps the map holds {} entries",
            got.len()
        );
    }
    v.commit().unwrap();
}
