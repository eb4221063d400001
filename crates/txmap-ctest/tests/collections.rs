//! The collections' C API (txmap_alloc, txmap_map_*, txmap_array_*),
//! exercised from C (c/collections.c).

use std::path::Path;

use txmap_ctest::*;

fn check(name: &str, f: CTest) {
    let dir = fresh_dir(
        Path::new(env!("CARGO_TARGET_TMPDIR")),
        &format!("ctest-coll-{name}"),
    );
    let line = run(f, &dir);
    assert_eq!(line, 0, "{name} failed at c/collections.c:{line}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn btree_put_get_delete_scan_abort() {
    check("btree", ctest_coll_btree);
}

#[test]
fn linear_hash_put_get_delete_scan_abort() {
    check("lhash", ctest_coll_lhash);
}

#[test]
fn heap_root_and_array() {
    check("heap", ctest_coll_heap_and_array);
}

#[test]
fn threads_insert_into_one_tree() {
    check("threads", ctest_coll_threads);
}

#[test]
fn cobtree_put_get_delete_scan_abort() {
    check("cobtree", ctest_coll_cobtree);
}
