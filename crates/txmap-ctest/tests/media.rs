//! Backup, restore, compact and region options from C (c/media.c).

use std::path::Path;

use txmap_ctest::*;

fn check(name: &str, f: CTest) {
    let dir = fresh_dir(
        Path::new(env!("CARGO_TARGET_TMPDIR")),
        &format!("ctest-media-{name}"),
    );
    let line = run(f, &dir);
    assert_eq!(line, 0, "{name} failed at c/media.c:{line}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn backup_then_restore_to_the_last_and_a_chosen_commit() {
    check("restore", ctest_media_backup_restore);
}

#[test]
fn compact_and_region_options() {
    check("compact", ctest_media_compact_and_options);
}

#[test]
fn views_keep_at_most_their_private_pages_option() {
    check("private", ctest_media_view_private_pages);
}
