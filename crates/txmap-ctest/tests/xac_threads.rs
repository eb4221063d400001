//! Threads with the LIBXAC calls (c/xac_threads.c): a second thread's
//! `xbegin` waits for the process's open transaction to end, `xbegin_try`
//! and `xbegin_timed` do not wait, and a thread that exits with its
//! transaction open does not block the others; waiting threads begin first
//! come, first served; forked processes with threads each lose no
//! increment. Its own test binary: the C code forks. The LIBXAC state is
//! process-wide, so the C functions run in order in a single test.
//!
//! `TXMAP_XAC_THREAD_ROUNDS` sets the transactions per thread of the
//! counter test (default 5,000; a fifth of it in the processes test).

use std::ffi::{CString, c_char, c_int, c_long};
use std::path::Path;

use txmap_ctest::*;

/// Runs a C test that takes a directory and a number of rounds.
fn run_rounds(f: unsafe extern "C" fn(*const c_char, c_long) -> c_int, name: &str, rounds: c_long) {
    let dir = fresh_dir(Path::new(env!("CARGO_TARGET_TMPDIR")), name);
    let c = CString::new(dir.as_os_str().as_encoded_bytes()).expect("no NUL in path");
    // SAFETY: a NUL-terminated path that outlives the call.
    let line = unsafe { f(c.as_ptr(), rounds) };
    assert_eq!(line, 0, "{name} failed at c/xac_threads.c:{line}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn threads_take_turns_with_the_libxac_calls() {
    let rounds = std::env::var("TXMAP_XAC_THREAD_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5_000);
    // Forks: first, while no other thread of this test has run.
    run_rounds(
        ctest_xac_threads_processes,
        "ctest_xac_threads_processes",
        rounds / 5,
    );
    run_rounds(
        ctest_xac_threads_counters,
        "ctest_xac_threads_counters",
        rounds,
    );
    let steps: [(&str, CTest); 3] = [
        ("ctest_xac_threads_try", ctest_xac_threads_try),
        ("ctest_xac_threads_exit", ctest_xac_threads_exit),
        ("ctest_xac_threads_fifo", ctest_xac_threads_fifo),
    ];
    for (name, f) in steps {
        let dir = fresh_dir(Path::new(env!("CARGO_TARGET_TMPDIR")), name);
        let line = run(f, &dir);
        assert_eq!(line, 0, "{name} failed at c/xac_threads.c:{line}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
