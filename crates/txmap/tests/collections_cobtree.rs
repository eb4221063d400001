//! The cache-oblivious B-tree (PMA + van Emde Boas index): model-based test
//! with aborts, growth and shrinking of the array, threads, SIGKILL.
mod collections_common;
mod common;

use collections_common as coll;
use common::*;
use txmap::TxnOptions;
use txmap::collections::CoBTree;

#[test]
fn model_random_operations_with_aborts() {
    coll::model_test(CoBTree::create, 64);
}

#[test]
fn values_larger_than_a_page_and_long_keys() {
    coll::large_values(CoBTree::create);
}

#[test]
fn array_doubles_and_halves_with_rebalances() {
    let d = coll::bulk_test(CoBTree::create, 6000);
    let segs = |s: &str| -> u64 { s.split(' ').next().unwrap().parse().unwrap() };
    // 6000 entries need more than 6000 / 255 = 23.5 segments: at least 32.
    assert!(segs(&d[0]) >= 32, "{}", d[0]);
    assert_eq!(segs(&d[1]), 1, "{}", d[1]);
}

#[test]
fn threads_insert_and_search_at_once() {
    coll::threads_test("co-threads", CoBTree::create, 4, 400, TxnOptions::default());
}

#[test]
fn threads_insert_under_snapshot_isolation() {
    coll::threads_test(
        "co-threads-si",
        CoBTree::create,
        4,
        400,
        TxnOptions::SNAPSHOT,
    );
}

#[test]
fn sigkill_writers_then_check() {
    if role().is_some() {
        return coll::crash_child(CoBTree::open);
    }
    coll::crash_test(
        "sigkill_writers_then_check",
        "co-crash",
        CoBTree::create,
        CoBTree::open,
        10,
    );
}

#[test]
fn rebalances_can_run_in_their_own_transactions() {
    use txmap::Region;
    use txmap::collections::cobtree::TryPut;
    let d = tmpfs_dir("co-apart");
    let r = Region::create(&d.join("c.txm"), 1 << 20, coll::opts()).unwrap();
    let mut v = r.view().unwrap();
    let t = v.run(CoBTree::create).unwrap();
    let mut rebalances = 0;
    for i in 0..3000u32 {
        let k = coll::key((i * 7919) % 3000);
        loop {
            match v.run(|v| t.try_put(v, &k, b"v")).unwrap() {
                TryPut::NeedsSplit => {
                    v.run(|v| t.rebalance_for(v, &k)).unwrap();
                    rebalances += 1;
                }
                got => {
                    assert_eq!(got, TryPut::Inserted);
                    break;
                }
            }
        }
    }
    v.begin_read().unwrap();
    let rep = t.check(&v).unwrap();
    v.commit().unwrap();
    assert_eq!(rep.entries, 3000);
    assert!(
        rebalances >= 4 && rep.segments >= 16,
        "{rebalances} {rep:?}"
    );
}
