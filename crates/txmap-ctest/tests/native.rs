//! The native C API (txmap_*), exercised from C (c/native.c).

use std::path::Path;

use txmap_ctest::*;

fn check(name: &str, f: CTest) {
    let dir = fresh_dir(
        Path::new(env!("CARGO_TARGET_TMPDIR")),
        &format!("ctest-{name}"),
    );
    let line = run(f, &dir);
    assert_eq!(line, 0, "{name} failed at c/native.c:{line}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn create_write_commit_reopen_grow() {
    check("basic", ctest_native_basic);
}

#[test]
fn abort_rollback_and_nesting() {
    check("abort", ctest_native_abort);
}

#[test]
fn closing_a_view_rolls_back() {
    check("close", ctest_native_close_in_transaction);
}

#[test]
fn conflicts_between_two_views() {
    check("conflict", ctest_native_conflict);
}

#[test]
fn threads_retry_conflicts_and_lose_no_update() {
    check("threads", ctest_native_threads);
}

#[test]
fn read_only_and_snapshot_flags() {
    check("read-only", ctest_native_read_only);
}

#[test]
fn set_page_access() {
    check("page-access", ctest_native_page_access);
}

#[test]
fn errors_have_codes_and_messages() {
    check("errors", ctest_native_errors);
}

#[test]
fn error_messages_are_per_thread() {
    check("errmsg", ctest_native_errmsg_thread_local);
}

#[test]
fn a_snapshot_limit_expires_an_old_reader() {
    check("limit", ctest_native_snapshot_limit);
}

#[test]
fn pause_and_resume() {
    check("pause", ctest_native_pause);
}

#[test]
fn registered_operations() {
    check("operations", ctest_native_operations);
}

#[test]
fn nested_top_actions() {
    check("nested-top", ctest_native_nested_top);
}
