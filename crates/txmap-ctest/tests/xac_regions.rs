//! Several regions in one transaction from C (c/xac_regions.c): the
//! LIBXAC-style calls with two regions mapped, across forked processes
//! killed with SIGKILL, and the native group calls. Its own test binary:
//! the C code forks, which a process running other tests' threads must not
//! do; the LIBXAC state is process-wide, so the steps run in order.

use std::path::Path;

use txmap_ctest::*;

#[test]
fn transfers_between_two_regions_from_c() {
    let dir = fresh_dir(Path::new(env!("CARGO_TARGET_TMPDIR")), "ctest-xac-regions");
    let steps: [(&str, CTest); 2] = [
        ("ctest_native_group", ctest_native_group),
        ("ctest_xac_regions", ctest_xac_regions),
    ];
    for (name, f) in steps {
        let line = run(f, &dir);
        assert_eq!(line, 0, "{name} failed at c/xac_regions.c:{line}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
