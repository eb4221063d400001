//! xMalloc, xFree and xRoot from C (c/xac_alloc.c): misuse, four forked
//! processes allocating and freeing with a model, and growth inside a
//! transaction. After each C step the region is opened from Rust and its
//! heap checked (`alloc::check`: blocks tile the heap, free blocks are zero
//! and listed once, counters add up) and counted. One test: the LIBXAC
//! state is process-wide, and the children are forked.

use std::ffi::{CString, c_long};
use std::path::Path;

use txmap::collections::alloc;
use txmap::{Durability, Options, Region};
use txmap_ctest::*;

/// Opens region `name` of `dir` in the mode the C steps map it
/// (`XAC_NONDURABLE`): the last handle of an `xShutdown` may still be
/// closing on the background sync thread.
fn open(dir: &Path, name: &str) -> Region {
    let opts = Options {
        durability: Durability::Async,
        ..Options::default()
    };
    Region::open(&dir.join(name), opts).expect("open region")
}

/// The heap report of region `name` in `dir`, and its size.
fn heap(dir: &Path, name: &str) -> (alloc::HeapReport, u64) {
    let region = open(dir, name);
    let mut v = region.view().expect("view");
    v.begin_read().expect("begin");
    let report = alloc::check(&v).unwrap_or_else(|e| panic!("heap of {name} is damaged: {e}"));
    v.commit().expect("commit");
    (report, region.size())
}

fn step(f: CTest, dir: &Path, name: &str) {
    let line = run(f, dir);
    assert_eq!(line, 0, "{name} failed at c/xac_alloc.c:{line}");
}

#[test]
fn xmalloc_and_xfree_from_c() {
    let dir = fresh_dir(Path::new(env!("CARGO_TARGET_TMPDIR")), "ctest-xac-alloc");

    step(ctest_xac_alloc_errors, &dir, "ctest_xac_alloc_errors");
    let (h, _) = heap(&dir, "errors");
    assert_eq!(h.used_blocks, 2, "the root object and one block: {h:?}");

    let txns: c_long = std::env::var("TXMAP_XALLOC_TXNS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(300);
    let (mut live, mut conflicts, mut commits) = (0, 0, 0);
    let c = CString::new(dir.as_os_str().as_encoded_bytes()).expect("no NUL in path");
    // SAFETY: a NUL-terminated path that outlives the call, and three
    // writable longs.
    let line = unsafe {
        ctest_xac_alloc_processes(c.as_ptr(), txns, &mut live, &mut conflicts, &mut commits)
    };
    assert_eq!(
        line, 0,
        "ctest_xac_alloc_processes failed at c/xac_alloc.c:{line}"
    );
    assert_eq!(commits, 4 * txns);
    let (h, size) = heap(&dir, "heap");
    assert_eq!(
        h.used_blocks,
        live as u64 + 1,
        "blocks in use must be the live ones and the root object (no leak): {h:?}"
    );
    assert!(size > 64 * 1024, "the region grew: {size}");

    step(ctest_xac_alloc_grow, &dir, "ctest_xac_alloc_grow");
    let (h, grown) = heap(&dir, "grow");
    assert_eq!(h.used_blocks, 2, "{h:?}");
    assert!(grown >= 4 << 20, "{grown}");
    step(
        ctest_xac_alloc_grow_abort,
        &dir,
        "ctest_xac_alloc_grow_abort",
    );
    let (h2, after) = heap(&dir, "grow");
    assert_eq!(h2.used_blocks, 2, "the aborted block is gone: {h2:?}");
    assert!(
        after > grown,
        "growth stays after an abort: {after} vs {grown}"
    );

    step(ctest_xac_mmap_grow, &dir, "ctest_xac_mmap_grow");
    assert_eq!(open(&dir, "mgrow").size(), 1 << 20);
    step(ctest_xac_mmap_grow_abort, &dir, "ctest_xac_mmap_grow_abort");
    assert_eq!(
        open(&dir, "mgrow").size(),
        2 << 20,
        "growth stays after an abort"
    );

    let _ = std::fs::remove_dir_all(&dir);
}
