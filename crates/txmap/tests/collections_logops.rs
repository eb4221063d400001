//! The collections' logical log records (built-in operations
//! `BTREE_INSERT`, `BTREE_DELETE`, `BTREE_SPLIT`, `COBTREE_INSERT`): a
//! one-key insert logs the operation, not the node's bytes; a split logs
//! the operation, not the two halves; and recovery after a SIGKILLed writer
//! replays them into the tree a model predicts.
mod collections_common;
mod common;
use collections_common as coll;

use std::collections::BTreeMap;
use std::ops::Bound;

use common::*;
use txmap::collections::{BTree, CoBTree, Map, alloc};
use txmap::{Region, View, ops};

/// The i-th 8-byte key of a random sequence.
fn rkey(seed: u64, i: u64) -> [u8; 8] {
    let mut x = seed ^ i.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    x ^= x >> 31;
    x = x.wrapping_mul(0xBF58_476D_1CE4_E5B9);
    (x ^ (x >> 29)).to_be_bytes()
}

/// Every (key, value) of the tree, in order.
fn contents(t: &impl Map, v: &View) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut out = Vec::new();
    t.scan(v, Bound::Unbounded, Bound::Unbounded, &mut |k, val| {
        out.push((k.to_vec(), val.to_vec()));
        Ok(true)
    })
    .unwrap();
    out
}

/// How many times the log holds operation `id` (txmap info's count).
fn logged_ops(p: &std::path::Path, id: u32) -> u64 {
    txmap::inspect::inspect(p)
        .unwrap()
        .log_operations
        .iter()
        .find(|&&(i, _)| i == id)
        .map_or(0, |&(_, n)| n)
}

/// Fills a new structure with `n` keys of 8 bytes (8-byte values), then
/// inserts a smaller key on its own; returns the bytes that insert logged,
/// with the region (still open) and the structure, read back and checked.
fn insert_before<M: Map + Copy>(
    name: &str,
    create: fn(&mut View) -> txmap::Result<M>,
    n: u64,
) -> (TestDir, Region, M, u64) {
    let d = ext4_dir(name);
    let r = Region::create(&d.join("r.txm"), 1 << 20, coll::opts()).unwrap();
    let mut v = r.view().unwrap();
    let t = v.run(create).unwrap();
    let key = |i: u64| (1000 + i).to_be_bytes();
    v.run(|v| (1..=n).try_for_each(|i| t.put(v, &key(i), &[1; 8]).map(|_| ())))
        .unwrap();
    let before = r.stats().log_bytes;
    // The smallest key: every slot after it shifts.
    v.run(|v| t.put(v, &key(0), &[2; 8]).map(|_| ())).unwrap();
    let logged = r.stats().log_bytes - before;
    v.begin_read().unwrap();
    assert_eq!(t.check(&v).unwrap().entries, n + 1);
    assert_eq!(t.get(&v, &key(0)).unwrap().as_deref(), Some(&[2u8; 8][..]));
    v.commit().unwrap();
    (d, r, t, logged)
}

/// A key inserted on its own into a leaf of 130 entries (130 cells of
/// 8 + 8 + 8 bytes and their 6-byte slots: 3,916 of 4,080 bytes) logs one
/// record with the operation (leaf offset, key, value) and a page check:
/// less than the 780 bytes of slots a byte diff would carry after shifting
/// them.
#[test]
fn a_one_key_insert_logs_the_operation_not_the_leaf_bytes() {
    let (d, r, t, logged) = insert_before("logops-insert", BTree::create, 130);
    assert!(logged < 300, "one insert logged {logged} bytes");
    let mut v = r.view().unwrap();
    assert_eq!(v.run(|v| t.check(v)).unwrap().leaves, 1);
    assert!(logged_ops(&d.join("r.txm"), ops::BTREE_INSERT) >= 1);
}

/// An insert into a full leaf splits it by the operation: the commit logs
/// far less than the right half's 1,600 bytes of cells.
#[test]
fn a_leaf_split_logs_the_operation_not_the_halves() {
    let d = ext4_dir("logops-split");
    let p = d.join("r.txm");
    let r = Region::create(&p, 1 << 20, coll::opts()).unwrap();
    let mut v = r.view().unwrap();
    let t = v.run(BTree::create).unwrap();
    let key = |i: u64| (1000 + 2 * i).to_be_bytes();
    v.run(|v| (0..135).try_for_each(|i| t.put(v, &key(i), &[1; 8]).map(|_| ())))
        .unwrap();
    assert_eq!(v.run(|v| t.check(v)).unwrap().leaves, 1);
    // 135 entries take 4,066 bytes (24-byte cells, 6-byte slots): the
    // 136th does not fit.
    let before = r.stats().log_bytes;
    v.run(|v| t.put(v, &1001u64.to_be_bytes(), &[3; 8]).map(|_| ()))
        .unwrap();
    let logged = r.stats().log_bytes - before;
    assert!(logged < 1024, "the splitting insert logged {logged} bytes");
    v.begin_read().unwrap();
    let rep = t.check(&v).unwrap();
    assert_eq!((rep.entries, rep.leaves, rep.height), (136, 2, 2));
    v.commit().unwrap();
    assert_eq!(logged_ops(&p, ops::BTREE_SPLIT), 1);
}

/// A key inserted at the front of a CO B-tree segment of 150 slots logs
/// the slot operation and its record block, not the 2,400 bytes of slots
/// that shift.
#[test]
fn a_cobtree_insert_logs_the_slot_operation_not_the_segment() {
    let (d, r, t, logged) = insert_before("logops-cobtree", CoBTree::create, 150);
    assert!(logged < 1024, "one insert logged {logged} bytes");
    let mut v = r.view().unwrap();
    assert_eq!(v.run(|v| t.check(v)).unwrap().segments, 1);
    assert!(logged_ops(&d.join("r.txm"), ops::COBTREE_INSERT) >= 1);
}

const WRITER_SEED: u64 = 0x005E_ED0F_1065;

/// The writer's i-th step: insert key i, and every third step also delete
/// the key inserted two steps before.
fn step(model: &mut BTreeMap<Vec<u8>, Vec<u8>>, i: u64) {
    model.insert(rkey(WRITER_SEED, i).to_vec(), i.to_le_bytes().to_vec());
    if i % 3 == 2 {
        model.remove(&rkey(WRITER_SEED, i - 2)[..]);
    }
}

/// A writer inserts and deletes in a B+-tree and a CO B-tree, one durable
/// transaction per step, and is killed with SIGKILL; the log then holds inserts, deletes and splits as
/// operations, and each reopened tree is the model after the acknowledged
/// steps (or one more, committed but not yet acknowledged).
#[test]
fn sigkill_writer_then_recovery_replays_the_logical_records() {
    if role().as_deref() == Some("writer") {
        let p = std::env::var("TXMAP_PATH").unwrap();
        let r = Region::open(p.as_ref(), coll::opts()).unwrap();
        let mut v = r.view().unwrap();
        let mut acks = Acks::open(&std::env::var("TXMAP_ACKS").unwrap());
        v.begin_read().unwrap();
        let root = alloc::root_offset(&v).unwrap().unwrap();
        let t = BTree::open(&v, v.read(root).unwrap()).unwrap();
        let co = CoBTree::open(&v, v.read(root + 8).unwrap()).unwrap();
        v.commit().unwrap();
        for i in 0.. {
            v.run(|v| {
                let k = rkey(WRITER_SEED, i);
                t.put(v, &k, &i.to_le_bytes())?;
                co.put(v, &k, &i.to_le_bytes())?;
                if i % 3 == 2 {
                    assert!(t.delete(v, &rkey(WRITER_SEED, i - 2))?);
                    assert!(co.delete(v, &rkey(WRITER_SEED, i - 2))?);
                }
                Ok(())
            })
            .unwrap();
            acks.line(&i.to_string());
        }
        unreachable!();
    }
    let d = ext4_dir("logops-crash");
    let p = d.join("r.txm");
    {
        let r = Region::create(&p, 1 << 20, coll::opts()).unwrap();
        let mut v = r.view().unwrap();
        v.run(|v| {
            let root = alloc::root(v, 16)?;
            let t = BTree::create(v)?;
            let co = CoBTree::create(v)?;
            v.write(root, &t.at)?;
            v.write(root + 8, &co.at)
        })
        .unwrap();
    }
    let acks = d.join("acks");
    let envs = [
        ("TXMAP_PATH", p.display().to_string()),
        ("TXMAP_ACKS", acks.display().to_string()),
    ];
    let mut c = Proc::spawn(
        "sigkill_writer_then_recovery_replays_the_logical_records",
        "writer",
        &envs,
        d.join("writer.err"),
    );
    wait_for_acks(&mut c, &acks, 1500);
    c.kill(); // SIGKILL
    let acked = std::fs::read_to_string(&acks).unwrap().lines().count() as u64;
    // What recovery has to replay: the operations, not their pages' bytes.
    for id in [
        ops::BTREE_INSERT,
        ops::BTREE_DELETE,
        ops::BTREE_SPLIT,
        ops::COBTREE_INSERT,
        ops::COBTREE_REMOVE,
    ] {
        assert!(logged_ops(&p, id) > 0, "no operation {id} in the log");
    }
    // `txmap check` replays them in memory and finds the page checks hold.
    let c = txmap::inspect::check(&p).unwrap();
    assert!(c.problems.is_empty(), "{:?}", c.problems);
    let r = Region::open(&p, coll::opts()).unwrap();
    let mut v = r.view().unwrap();
    v.begin_read().unwrap();
    let root = alloc::root_offset(&v).unwrap().unwrap();
    let t = BTree::open(&v, v.read(root).unwrap()).unwrap();
    let co = CoBTree::open(&v, v.read(root + 8).unwrap()).unwrap();
    t.check(&v).unwrap();
    co.check(&v).unwrap();
    let got = contents(&t, &v);
    assert_eq!(contents(&co, &v), got, "the two trees differ");
    v.commit().unwrap();
    let mut model = BTreeMap::new();
    (0..acked).for_each(|i| step(&mut model, i));
    let after_acked: Vec<_> = model.clone().into_iter().collect();
    step(&mut model, acked);
    let one_more: Vec<_> = model.into_iter().collect();
    assert!(
        got == after_acked || got == one_more,
        "after {acked} acknowledged steps the tree holds {} entries (model: {})",
        got.len(),
        after_acked.len()
    );
}
