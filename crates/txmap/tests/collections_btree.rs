//! The B+-tree: a model-based test (random operations, some transactions
//! aborted, checked against a BTreeMap), threads inserting and searching at
//! once, and writers killed with SIGKILL.
mod collections_common;
mod common;
use collections_common as coll;

use common::*;
use txmap::TxnOptions;
use txmap::collections::BTree;

#[test]
fn model_random_operations_with_aborts() {
    coll::model_test(BTree::create, 64);
}

#[test]
fn values_larger_than_a_page_and_long_keys() {
    coll::large_values(BTree::create);
}

#[test]
fn threads_insert_and_search_at_once() {
    coll::threads_test("bt-threads", BTree::create, 4, 400, TxnOptions::default());
}

#[test]
fn threads_insert_under_snapshot_isolation() {
    coll::threads_test("bt-threads-si", BTree::create, 4, 400, TxnOptions::SNAPSHOT);
}

#[test]
fn sigkill_writers_then_check() {
    if role().is_some() {
        return coll::crash_child(BTree::open);
    }
    coll::crash_test(
        "sigkill_writers_then_check",
        "bt-crash",
        BTree::create,
        BTree::open,
        12,
    );
}

#[test]
fn deep_tree_grows_and_shrinks_back() {
    let d = coll::bulk_test(BTree::create, 6000);
    assert!(
        d[0].starts_with("height 3") || d[0].starts_with("height 4"),
        "{}",
        d[0]
    );
    assert!(d[1].starts_with("height 1, 1 leaves"), "{}", d[1]);
}

/// An empty B+-tree in a fresh 1 MiB region in directory `name`, with a
/// view.
fn new_tree(name: &str) -> (TestDir, txmap::Region, txmap::View, BTree) {
    let d = ext4_dir(name);
    let r = txmap::Region::create(&d.join("r.txm"), 1 << 20, coll::opts()).unwrap();
    let mut v = r.view().unwrap();
    let t = v.run(BTree::create).unwrap();
    (d, r, v, t)
}

/// A key inserted into a leaf with room goes in place: the commit logs a
/// small record, not a repacked 4 KiB node. Entries are checked afterwards
/// (order, non-overlapping cells) and read back.
#[test]
fn an_insert_into_a_leaf_with_room_logs_a_small_record() {
    let (_d, r, mut v, t) = new_tree("bt-in-place");
    // 80 entries of 43 bytes (cell and slot) fill most of one leaf (no
    // split yet).
    let key = |i: u32| format!("k{i:04}").into_bytes();
    let val = [7u8; 24];
    v.run(|v| {
        for i in 1..=80u32 {
            t.put(v, &key(i), &val)?;
        }
        Ok(())
    })
    .unwrap();
    assert_eq!(v.run(|v| t.check(v)).unwrap().leaves, 1);
    // The smallest key: repacking would move every cell (~3 KiB of diff).
    let before = r.stats().log_bytes;
    v.run(|v| t.put(v, &key(0), b"new value").map(|_| ()))
        .unwrap();
    let logged = r.stats().log_bytes - before;
    assert!(logged < 512, "one insert logged {logged} bytes");
    v.begin_read().unwrap();
    let rep = t.check(&v).unwrap();
    assert_eq!(rep.entries, 81);
    for i in 1..=80u32 {
        assert_eq!(t.get(&v, &key(i)).unwrap().as_deref(), Some(&val[..]));
    }
    assert_eq!(
        t.get(&v, &key(0)).unwrap().as_deref(),
        Some(&b"new value"[..])
    );
    v.commit().unwrap();
}

/// A tree of the first node format (2-byte slots, magic `TXMBTRE1`) is
/// refused by name when opened, not searched with the wrong slot width;
/// a header with no tree magic stays corrupt.
#[test]
fn a_tree_of_the_first_node_format_is_refused_as_incompatible() {
    let (_d, _r, mut v, t) = new_tree("bt-format1");
    v.run(|v| t.put(v, b"key", b"value").map(|_| ())).unwrap();
    v.run(|v| v.write(t.at, &u64::from_le_bytes(*b"TXMBTRE1")))
        .unwrap();
    v.begin_read().unwrap();
    match BTree::open(&v, t.at) {
        Err(txmap::Error::Incompatible { what, .. }) => {
            assert!(what.contains("TXMBTRE1"), "{what}");
            assert!(what.contains(&format!("offset {}", t.at)), "{what}");
        }
        other => panic!("opened a first-format tree: {:?}", other.map(|t| t.at)),
    }
    // A handle made before (or by hand) is refused the same way.
    assert!(matches!(
        t.get(&v, b"key"),
        Err(txmap::Error::Incompatible { .. })
    ));
    v.commit().unwrap();
    v.run(|v| v.write(t.at, &0u64)).unwrap();
    v.begin_read().unwrap();
    assert!(matches!(
        BTree::open(&v, t.at),
        Err(txmap::Error::Corrupt { .. })
    ));
    v.commit().unwrap();
}

/// A delete takes the entry's slot out in place: the commit logs a small
/// record, not a repacked node. The freed cells are holes that in-place
/// inserts do not use, and the first insert that finds no room in the gap
/// repacks the leaf and gets them back (the leaf does not split).
#[test]
fn a_delete_logs_a_small_record_and_a_repack_reclaims_its_hole() {
    let (_d, r, mut v, t) = new_tree("bt-delete-in-place");
    // 80 cells of 8 + 5 + 24 bytes and 80 slots: 3,456 of 4,080 bytes.
    let key = |i: u32| format!("k{i:04}").into_bytes();
    let val = |i: u32| [i as u8; 24];
    v.run(|v| {
        for i in 0..80u32 {
            t.put(v, &key(i), &val(i))?;
        }
        Ok(())
    })
    .unwrap();
    // A middle key: repacking would move the 40 cells after it (~1.5 KiB).
    let before = r.stats().log_bytes;
    assert!(v.run(|v| t.delete(v, &key(40))).unwrap());
    let logged = r.stats().log_bytes - before;
    assert!(logged < 512, "one delete logged {logged} bytes");
    // 19 more holes, then 30 inserts: the gap between the 60 slots and the
    // lowest cell (984 bytes) takes 25 of them in place (39 bytes each); the
    // 26th repacks. 90 entries (3,526 bytes) fit in one leaf only if the 20
    // holes (740 bytes) came back.
    v.run(|v| {
        for i in 41..60u32 {
            assert!(t.delete(v, &key(i))?);
        }
        for i in 100..130u32 {
            t.put(v, &key(i), &val(i))?;
        }
        Ok(())
    })
    .unwrap();
    v.begin_read().unwrap();
    let rep = t.check(&v).unwrap();
    assert_eq!((rep.entries, rep.leaves), (90, 1));
    for i in (0..40).chain(60..80).chain(100..130) {
        assert_eq!(
            t.get(&v, &key(i)).unwrap(),
            Some(val(i).to_vec()),
            "key {i}"
        );
    }
    for i in 40..60 {
        assert_eq!(t.get(&v, &key(i)).unwrap(), None, "deleted key {i}");
    }
    v.commit().unwrap();
}

#[test]
fn get_with_hands_over_inline_block_and_absent_values_like_get() {
    use txmap::collections::{AnyMap, Kind, Map};
    let d = ext4_dir("get-with");
    let r = txmap::Region::create(&d.join("r.txm"), 4 << 20, coll::opts()).unwrap();
    let mut v = r.view().unwrap();
    for kind in [Kind::BTree, Kind::LinearHash, Kind::CoBTree] {
        let m = v
            .run(|v| AnyMap::create_named(v, &format!("{kind:?}"), kind))
            .unwrap();
        let big = coll::value(9, 9000); // beyond every inline limit: a block
        v.run(|v| {
            m.put(v, b"small", b"inline value")?;
            m.put(v, b"big", &big)
        })
        .unwrap();
        v.begin_read().unwrap();
        for key in [&b"small"[..], b"big", b"absent"] {
            let mut got = None;
            let found = m
                .get_with(&v, key, &mut |b| got = Some(b.to_vec()))
                .unwrap();
            assert_eq!(found, got.is_some(), "{kind:?} {key:?}");
            assert_eq!(got, m.get(&v, key).unwrap(), "{kind:?} {key:?}");
        }
        let mut got = Vec::new();
        assert!(m.get_with(&v, b"big", &mut |b| got = b.to_vec()).unwrap());
        assert_eq!(got, big, "{kind:?}: the block value's bytes");
        v.commit().unwrap();
    }
}

/// Scans by a fresh view of pages committed since the last checkpoint read
/// the leaves in place (a read-only transaction copies no leaf into the
/// view) and hand out what the model holds, from every kind of bound and
/// stopping anywhere: leaves of many small entries, of values near the
/// inline limit, and of values in blocks (which the view reads as it
/// reads any range of several pages: copied).
#[test]
fn scans_read_in_place_match_the_model() {
    scans_in_place("scan-in-place", |i| if i % 4 == 0 { 500 } else { 8 }, true);
    scans_in_place(
        "scan-in-place-blocks",
        |i| match i % 10 {
            0 => 5000,
            1..=3 => 500,
            _ => 8,
        },
        false,
    );
}

fn scans_in_place(name: &str, len: fn(u32) -> usize, copies_none: bool) {
    use std::collections::BTreeMap;
    use std::ops::Bound;
    let d = ext4_dir(name);
    let r = txmap::Region::create(&d.join("r.txm"), 64 << 20, coll::opts()).unwrap();
    let mut w = r.view().unwrap();
    let t = w.run(BTree::create).unwrap();
    let entries: Vec<(Vec<u8>, Vec<u8>)> = (0..3000u32)
        .map(|i| (coll::key(i), coll::value(u64::from(i), len(i))))
        .collect();
    w.run(|v| {
        for (k, val) in &entries {
            t.put(v, k, val)?;
        }
        Ok(())
    })
    .unwrap();
    let model: BTreeMap<_, _> = entries.into_iter().collect();
    let keys: Vec<&Vec<u8>> = model.keys().collect();

    let mut rd = r.view().unwrap();
    rd.begin_read().unwrap();
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let mut pick = |n: usize| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (x % n as u64) as usize
    };
    for n in 0..200 {
        let (a, b) = (pick(keys.len()), pick(keys.len()));
        let (a, b) = (&keys[a.min(b)][..], &keys[a.max(b)][..]);
        let lo = [Bound::Included(a), Bound::Excluded(a), Bound::Unbounded][n % 3];
        let hi = [Bound::Excluded(b), Bound::Included(b), Bound::Unbounded][(n / 3) % 3];
        let limit = [1, 7, 17, 40, usize::MAX][n % 5];
        let mut got = Vec::new();
        t.scan(&rd, lo, hi, |k, val| {
            got.push((k.to_vec(), val.to_vec()));
            Ok(got.len() < limit)
        })
        .unwrap();
        let want: Vec<_> = model
            .range::<[u8], _>((lo, hi))
            .take(limit)
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let what = format!("{name}, scan {n}: {lo:?}..{hi:?}, at most {limit}");
        assert_eq!(got.len(), want.len(), "{what}");
        assert!(got == want, "{what}: other entries");
    }
    if copies_none {
        assert_eq!(
            rd.private_bytes(),
            0,
            "{name}: scans copied pages into the view"
        );
    }
    rd.commit().unwrap();
}
