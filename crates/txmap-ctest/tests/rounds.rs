//! Round durability from C (c/rounds.c).

use std::path::Path;

use txmap_ctest::*;

#[test]
fn rounds_from_c() {
    let dir = fresh_dir(Path::new(env!("CARGO_TARGET_TMPDIR")), "ctest-rounds");
    let line = run(ctest_native_rounds, &dir);
    assert_eq!(line, 0, "ctest_native_rounds failed at c/rounds.c:{line}");
    let _ = std::fs::remove_dir_all(&dir);
}
