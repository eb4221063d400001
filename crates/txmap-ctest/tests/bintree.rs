//! The C binary tree example (examples/c/bintree.c) under worker threads,
//! exercised from C (c/bintree_ex.c).

use std::ffi::CString;
use std::path::Path;

use txmap_ctest::*;

/// `TXMAP_SEED` if set, else a fixed one; printed so a failure replays.
fn seed() -> u64 {
    let s = std::env::var("TXMAP_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5eed_b1e7);
    eprintln!("TXMAP_SEED={s}");
    s
}

#[test]
fn threads_on_own_and_shared_keys_keep_only_committed_parents_actions() {
    let dir = fresh_dir(Path::new(env!("CARGO_TARGET_TMPDIR")), "ctest-bintree");
    let c = CString::new(dir.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a NUL-terminated path that outlives the call.
    let line = unsafe { ctest_bintree_threads(c.as_ptr(), seed()) };
    assert_eq!(line, 0, "failed at c/bintree_ex.c:{line}");
    let _ = std::fs::remove_dir_all(&dir);
}
