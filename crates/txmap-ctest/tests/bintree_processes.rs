//! The C binary tree example (examples/c/bintree.c) across forked
//! processes killed with SIGKILL (c/bintree_ex.c). Its own test binary, and
//! one test: the C code forks, which a process running other tests'
//! threads must not do.

use std::ffi::CString;
use std::path::Path;

use txmap_ctest::*;

#[test]
fn processes_killed_at_random_points_and_between_nested_actions_and_commit() {
    let seed = std::env::var("TXMAP_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5eed_b1e7u64);
    eprintln!("TXMAP_SEED={seed}");
    let dir = fresh_dir(
        Path::new(env!("CARGO_TARGET_TMPDIR")),
        "ctest-bintree-procs",
    );
    let c = CString::new(dir.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a NUL-terminated path that outlives the calls.
    let line = unsafe { ctest_bintree_processes(c.as_ptr(), seed, 8) };
    assert_eq!(line, 0, "random kills failed at c/bintree_ex.c:{line}");
    // SAFETY: as above.
    let line = unsafe { ctest_bintree_hold(c.as_ptr(), seed) };
    assert_eq!(line, 0, "the held parent failed at c/bintree_ex.c:{line}");
    let _ = std::fs::remove_dir_all(&dir);
}
