//! Every LIBXAC transaction sees one consistent snapshot, even one that
//! will abort, while forked worker processes commit and another process
//! checkpoints (c/xac_stress.c). Its own test binary: the C code forks.
//!
//! `TXMAP_STRESS_TXNS` sets the transactions per worker (default 5,000);
//! run two or three copies at once to load the machine.

use std::ffi::CString;
use std::path::Path;

use txmap_ctest::*;

fn stress(durability: i32, name: &str) {
    let dir = fresh_dir(Path::new(env!("CARGO_TARGET_TMPDIR")), name);
    let txns = std::env::var("TXMAP_STRESS_TXNS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5_000);
    let c = CString::new(dir.as_os_str().as_encoded_bytes()).expect("no NUL in path");
    // SAFETY: a NUL-terminated path that outlives the call.
    let line = unsafe { ctest_xac_snapshot_stress(c.as_ptr(), durability, txns, 4) };
    assert_eq!(line, 0, "failed at c/xac_stress.c:{line}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// One test: the LIBXAC state is process-wide.
#[test]
fn forked_workers_see_consistent_snapshots_while_checkpoints_run() {
    stress(0, "ctest-xac-stress-async");
    stress(1, "ctest-xac-stress-durable");
}
