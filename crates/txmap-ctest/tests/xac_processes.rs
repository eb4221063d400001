//! The LIBXAC-style calls across processes (c/xac_procs.c): forked children
//! each call xInit and xMmap on one region. The state is process-wide, so
//! the C functions run in order in a single test.

use std::path::Path;

use txmap_ctest::*;

#[test]
fn libxac_calls_between_processes() {
    let dir = fresh_dir(Path::new(env!("CARGO_TARGET_TMPDIR")), "ctest-xac-procs");
    let steps: [(&str, CTest); 2] = [
        ("ctest_xac_processes_counter", ctest_xac_processes_counter),
        ("ctest_xac_processes_conflict", ctest_xac_processes_conflict),
    ];
    for (name, f) in steps {
        let line = run(f, &dir);
        assert_eq!(line, 0, "{name} failed at c/xac_procs.c:{line}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
