//! Threads with the LIBXAC calls (c/xac_threads.c): a second thread's
//! `xbegin` waits for the process's open transaction to end, `xbegin_try`
//! and `xbegin_timed` do not wait, and a thread that exits with its
//! transaction open does not block the others; waiting threads begin first
//! come, first served. The LIBXAC state is
//! process-wide, so the C functions run in order in a single test.
//!
//! `TXMAP_XAC_THREAD_ROUNDS` sets the transactions per thread of the
//! counter test (default 5,000).

use std::ffi::CString;
use std::path::Path;

use txmap_ctest::*;

#[test]
fn threads_take_turns_with_the_libxac_calls() {
    let base = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let rounds = std::env::var("TXMAP_XAC_THREAD_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5_000);
    let dir = fresh_dir(base, "ctest-xac-threads-counters");
    let c = CString::new(dir.as_os_str().as_encoded_bytes()).expect("no NUL in path");
    // SAFETY: a NUL-terminated path that outlives the call.
    let line = unsafe { ctest_xac_threads_counters(c.as_ptr(), rounds) };
    assert_eq!(
        line, 0,
        "ctest_xac_threads_counters failed at c/xac_threads.c:{line}"
    );
    let _ = std::fs::remove_dir_all(&dir);

    let steps: [(&str, CTest); 3] = [
        ("ctest_xac_threads_try", ctest_xac_threads_try),
        ("ctest_xac_threads_exit", ctest_xac_threads_exit),
        ("ctest_xac_threads_fifo", ctest_xac_threads_fifo),
    ];
    for (name, f) in steps {
        let dir = fresh_dir(base, name);
        let line = run(f, &dir);
        assert_eq!(line, 0, "{name} failed at c/xac_threads.c:{line}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
