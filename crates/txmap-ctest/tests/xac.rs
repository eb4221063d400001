//! The LIBXAC-style calls, exercised from C (c/xac.c). Their state is
//! process-wide, so the C functions run in order in a single test.

use std::path::Path;

use txmap_ctest::*;

#[test]
fn libxac_calls() {
    let dir = fresh_dir(Path::new(env!("CARGO_TARGET_TMPDIR")), "ctest-xac");
    let steps: [(&str, CTest); 4] = [
        ("ctest_xac_before_init", ctest_xac_before_init),
        ("ctest_xac_session", ctest_xac_session),
        ("ctest_xac_reopen", ctest_xac_reopen),
        ("ctest_xac_pause", ctest_xac_pause),
    ];
    for (name, f) in steps {
        let line = run(f, &dir);
        assert_eq!(line, 0, "{name} failed at c/xac.c:{line}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
