//! Plain files from C (c/plain.c): `txmap_region_open_plain` and `xMmap` of
//! an existing file that is no txmap region. Its own binary: the
//! LIBXAC-style state is process-wide.

use std::path::Path;

use txmap_ctest::*;

#[test]
fn plain_files_from_c_and_through_xmmap() {
    for (name, f) in [
        ("ctest_plain_native", ctest_plain_native as CTest),
        ("ctest_plain_xac", ctest_plain_xac),
    ] {
        let dir = fresh_dir(Path::new(env!("CARGO_TARGET_TMPDIR")), name);
        let line = run(f, &dir);
        assert_eq!(line, 0, "{name} failed at c/plain.c:{line}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
