//! Runs the C test programs in c/ (compiled by build.rs) from `cargo test`;
//! the tests themselves are in tests/.
//!
//! Each C test function takes a directory and returns 0 on success or the
//! line number of the first failed check (printed to stderr).

use std::ffi::{CString, c_char, c_int};
use std::path::{Path, PathBuf};

// The C tests call txmap's exported C functions: link the C API crate.
use txmap_capi as _;

/// Signature of the C test functions.
pub type CTest = unsafe extern "C" fn(dir: *const c_char) -> c_int;

unsafe extern "C" {
    pub fn ctest_native_basic(dir: *const c_char) -> c_int;
    pub fn ctest_native_abort(dir: *const c_char) -> c_int;
    pub fn ctest_native_close_in_transaction(dir: *const c_char) -> c_int;
    pub fn ctest_native_conflict(dir: *const c_char) -> c_int;
    pub fn ctest_native_threads(dir: *const c_char) -> c_int;
    pub fn ctest_native_read_only(dir: *const c_char) -> c_int;
    pub fn ctest_native_page_access(dir: *const c_char) -> c_int;
    pub fn ctest_native_errors(dir: *const c_char) -> c_int;
    pub fn ctest_native_errmsg_thread_local(dir: *const c_char) -> c_int;
    pub fn ctest_native_snapshot_limit(dir: *const c_char) -> c_int;
    pub fn ctest_native_pause(dir: *const c_char) -> c_int;
    pub fn ctest_native_operations(dir: *const c_char) -> c_int;
    pub fn ctest_native_nested_top(dir: *const c_char) -> c_int;

    pub fn ctest_env_transfers(dir: *const c_char) -> c_int;

    pub fn ctest_plain_native(dir: *const c_char) -> c_int;
    pub fn ctest_plain_xac(dir: *const c_char) -> c_int;

    pub fn ctest_media_backup_restore(dir: *const c_char) -> c_int;
    pub fn ctest_media_compact_and_options(dir: *const c_char) -> c_int;
    pub fn ctest_media_view_private_pages(dir: *const c_char) -> c_int;

    pub fn ctest_coll_btree(dir: *const c_char) -> c_int;
    pub fn ctest_coll_lhash(dir: *const c_char) -> c_int;
    pub fn ctest_coll_cobtree(dir: *const c_char) -> c_int;
    pub fn ctest_coll_heap_and_array(dir: *const c_char) -> c_int;
    pub fn ctest_coll_threads(dir: *const c_char) -> c_int;
    pub fn ctest_coll_processes(dir: *const c_char) -> c_int;

    pub fn ctest_xac_before_init(dir: *const c_char) -> c_int;
    pub fn ctest_xac_session(dir: *const c_char) -> c_int;
    pub fn ctest_xac_reopen(dir: *const c_char) -> c_int;
    pub fn ctest_xac_pause(dir: *const c_char) -> c_int;

    pub fn ctest_xac_processes_counter(dir: *const c_char) -> c_int;
    pub fn ctest_xac_processes_conflict(dir: *const c_char) -> c_int;

    pub fn ctest_native_ordered(dir: *const c_char) -> c_int;
    pub fn ctest_native_priority(dir: *const c_char) -> c_int;
    pub fn ctest_native_rounds(dir: *const c_char) -> c_int;
    pub fn ctest_xac_processes_ordered(dir: *const c_char) -> c_int;
    pub fn ctest_xac_regions(dir: *const c_char) -> c_int;
    pub fn ctest_native_group(dir: *const c_char) -> c_int;

    pub fn ctest_xac_addr_forks(
        dir: *const c_char,
        durability: c_int,
        children: c_int,
        base_out: *mut usize,
    ) -> c_int;
    pub fn ctest_xac_addr_follow(dir: *const c_char, durability: c_int, base: usize) -> c_int;
    pub fn ctest_addr_taken(dir: *const c_char) -> c_int;

    pub fn ctest_xac_alloc_errors(dir: *const c_char) -> c_int;
    pub fn ctest_xac_alloc_processes(
        dir: *const c_char,
        txns: std::ffi::c_long,
        live: *mut std::ffi::c_long,
        conflicts: *mut std::ffi::c_long,
        commits: *mut std::ffi::c_long,
    ) -> c_int;
    pub fn ctest_xac_alloc_grow(dir: *const c_char) -> c_int;
    pub fn ctest_xac_alloc_grow_abort(dir: *const c_char) -> c_int;
    pub fn ctest_xac_mmap_grow(dir: *const c_char) -> c_int;
    pub fn ctest_xac_mmap_grow_abort(dir: *const c_char) -> c_int;

    pub fn ctest_xac_threads_counters(dir: *const c_char, rounds: std::ffi::c_long) -> c_int;
    pub fn ctest_xac_threads_try(dir: *const c_char) -> c_int;
    pub fn ctest_xac_threads_exit(dir: *const c_char) -> c_int;
    pub fn ctest_xac_threads_fifo(dir: *const c_char) -> c_int;
    pub fn ctest_xac_threads_processes(dir: *const c_char, rounds: std::ffi::c_long) -> c_int;

    pub fn ctest_bintree_threads(dir: *const c_char, seed: u64) -> c_int;
    pub fn ctest_bintree_processes(dir: *const c_char, seed: u64, rounds: c_int) -> c_int;
    pub fn ctest_bintree_hold(dir: *const c_char, seed: u64) -> c_int;

    pub fn ctest_xac_snapshot_stress(
        dir: *const c_char,
        durability: c_int,
        txns: std::ffi::c_long,
        workers: c_int,
    ) -> c_int;
}

/// For the C tests: how many threads wait in `xbegin` (so a test can know
/// a thread is queued instead of sleeping and hoping).
#[unsafe(no_mangle)]
pub extern "C" fn ctest_xbegin_waiters() -> c_int {
    txmap_capi::xac::xbegin_waiters() as c_int
}

/// A fresh, empty directory `<base>/<name>-<pid>`.
pub fn fresh_dir(base: &Path, name: &str) -> PathBuf {
    let d = base.join(format!("{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("create test directory");
    d
}

/// Runs C test `f` on `dir` and returns what it returned (0: passed).
pub fn run(f: CTest, dir: &Path) -> c_int {
    let c = CString::new(dir.as_os_str().as_encoded_bytes()).expect("no NUL in path");
    // SAFETY: the C tests take a NUL-terminated path that outlives the call.
    unsafe { f(c.as_ptr()) }
}
