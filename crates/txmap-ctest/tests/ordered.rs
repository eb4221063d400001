//! Ordered commits from C (c/ordered.c): the native calls in one process,
//! priority's flag and counts, then xorder/xorderNext in forked worker processes (the LIBXAC state is
//! process-wide, so they run in order in a single test).

use std::path::Path;

use txmap_ctest::*;

#[test]
fn ordered_commits_from_c() {
    let dir = fresh_dir(Path::new(env!("CARGO_TARGET_TMPDIR")), "ctest-ordered");
    let steps: [(&str, CTest); 3] = [
        ("ctest_native_ordered", ctest_native_ordered),
        ("ctest_native_priority", ctest_native_priority),
        ("ctest_xac_processes_ordered", ctest_xac_processes_ordered),
    ];
    for (name, f) in steps {
        let line = run(f, &dir);
        assert_eq!(line, 0, "{name} failed at c/ordered.c:{line}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
