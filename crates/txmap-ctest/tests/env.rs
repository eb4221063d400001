//! Environments from C (c/env.c): `txmap_env_open` and `txmap_env_region`,
//! with forked children that each map two of three named regions.

use std::path::Path;

use txmap_ctest::*;

#[test]
fn named_regions_of_an_environment_from_c_and_forked_children() {
    let dir = fresh_dir(
        Path::new(env!("CARGO_TARGET_TMPDIR")),
        "ctest_env_transfers",
    );
    let line = run(ctest_env_transfers, &dir);
    assert_eq!(line, 0, "ctest_env_transfers failed at c/env.c:{line}");
    let _ = std::fs::remove_dir_all(&dir);
}
