//! xMalloc, xFree and xRoot from C (c/xac_alloc.c): misuse, four forked
//! processes allocating and freeing with a model, and growth inside a
//! transaction. After each C step the region is opened from Rust and its
//! heap checked (`alloc::check`: blocks tile the heap, free blocks are zero
//! and listed once, counters add up) and counted. One test: the LIBXAC
//! state is process-wide, and the children are forked.

use std::ffi::{CString, c_long};
use std::path::Path;

use txmap::collections::{alloc, check_region};
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

/// The heap report of region `name` in `dir` from the check `txmap check
/// --structures` runs, the blocks in use that no structure or the root
/// object owns (the program's), and the region's size.
fn heap(dir: &Path, name: &str) -> (alloc::HeapReport, u64, u64) {
    let region = open(dir, name);
    let mut v = region.view().expect("view");
    let c = check_region(&mut v)
        .expect("check")
        .unwrap_or_else(|| panic!("{name} has no heap"));
    let report = c
        .heap
        .unwrap_or_else(|e| panic!("heap of {name} is damaged: {e}"));
    let unowned = c.unowned_blocks.expect("every block accounted for");
    (report, unowned, region.size())
}

fn step(f: CTest, dir: &Path, name: &str) {
    let line = run(f, dir);
    assert_eq!(line, 0, "{name} failed at c/xac_alloc.c:{line}");
}

#[test]
fn xmalloc_and_xfree_from_c() {
    let dir = fresh_dir(Path::new(env!("CARGO_TARGET_TMPDIR")), "ctest-xac-alloc");

    step(ctest_xac_alloc_errors, &dir, "ctest_xac_alloc_errors");
    let (h, unowned, _) = heap(&dir, "errors");
    assert_eq!(h.used_blocks, 2, "the root object and one block: {h:?}");
    assert_eq!(unowned, 1);

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
    let (h, unowned, size) = heap(&dir, "heap");
    assert_eq!(
        (h.used_blocks, unowned),
        (live as u64 + 1, live as u64),
        "blocks in use must be the live ones and the root object (no leak): {h:?}"
    );
    assert!(size > 64 * 1024, "the region grew: {size}");

    step(ctest_xac_alloc_grow, &dir, "ctest_xac_alloc_grow");
    let (h, _, grown) = heap(&dir, "grow");
    assert_eq!(h.used_blocks, 2, "{h:?}");
    assert!(grown >= 4 << 20, "{grown}");
    step(
        ctest_xac_alloc_grow_abort,
        &dir,
        "ctest_xac_alloc_grow_abort",
    );
    let (h2, _, after) = heap(&dir, "grow");
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
