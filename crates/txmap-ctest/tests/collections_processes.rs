//! The collections' C API across processes (c/coll_procs.c): forked
//! children race to create the same named structures in a fresh region and
//! insert into all of them at once. Its own test binary: the C code forks,
//! which a process running other tests' threads must not do.

use std::path::Path;

use txmap_ctest::*;

#[test]
fn processes_create_and_fill_the_same_structures() {
    let dir = fresh_dir(Path::new(env!("CARGO_TARGET_TMPDIR")), "ctest-coll-procs");
    let line = run(ctest_coll_processes, &dir);
    assert_eq!(line, 0, "failed at c/coll_procs.c:{line}");
    let _ = std::fs::remove_dir_all(&dir);
}
