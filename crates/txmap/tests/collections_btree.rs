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
