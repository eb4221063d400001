//! Builds c/smoke.c with the system C compiler against the real shared
//! library (target/<profile>/libtxmap.so, built by crate txmap-clib) and
//! include/txmap.h, and runs it (scripts/test-install.sh does the same with
//! the installed library and pkg-config).
//! Skipped, with a note, when the shared library has not been built
//! (`cargo build --release --workspace` builds it; CI does so first).

use std::path::{Path, PathBuf};
use std::process::Command;

use txmap_ctest::fresh_dir;

#[test]
fn c_program_links_against_the_shared_library() {
    // The test runs as target/<profile>/deps/<name>.
    let exe = std::env::current_exe().expect("current_exe");
    let Some(profile_dir) = exe.parent().and_then(Path::parent) else {
        eprintln!(
            "note: cannot locate target/<profile> from {}",
            exe.display()
        );
        return;
    };
    let so = profile_dir.join("libtxmap.so");
    if !so.exists() {
        eprintln!(
            "note: {} not found; skipping the shared-library smoke test \
             (run `cargo build --workspace` with this profile first)",
            so.display()
        );
        return;
    }
    // Building txmap-clib writes deps/libtxmap.so, and target/<profile>/
    // libtxmap.so only when it is built as a root (`-p txmap-clib`,
    // `--workspace`): link whichever is newer.
    let lib_dir = newest_lib_dir(profile_dir);
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let include = manifest.join("../../include");
    let dir = fresh_dir(Path::new(env!("CARGO_TARGET_TMPDIR")), "ctest-smoke");
    let bin = dir.join("smoke");
    // The program asks for the SONAME, libtxmap.so.0, which only an install
    // creates (scripts/install.sh): link it to the built library here.
    let run_dir = dir.join("lib");
    std::fs::create_dir_all(&run_dir).expect("create lib directory");
    std::os::unix::fs::symlink(lib_dir.join("libtxmap.so"), run_dir.join("libtxmap.so.0"))
        .expect("link libtxmap.so.0");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let out = Command::new(&cc)
        .arg(manifest.join("c/smoke.c"))
        .arg("-std=c11")
        .arg("-Wall")
        .arg("-Wextra")
        .arg("-I")
        .arg(&include)
        .arg("-L")
        .arg(&lib_dir)
        .arg("-ltxmap")
        .arg(format!("-Wl,-rpath,{}", run_dir.display()))
        .arg("-o")
        .arg(&bin)
        .output()
        .unwrap_or_else(|e| panic!("run {cc}: {e}"));
    assert!(
        out.status.success(),
        "{cc} c/smoke.c failed ({}; is {} stale? rebuild it):\n{}",
        out.status,
        lib_dir.join("libtxmap.so").display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let data = dir.join("data");
    std::fs::create_dir_all(&data).expect("create data directory");
    let run = Command::new(&bin).arg(&data).output().expect("run smoke");
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success() && stdout.contains("smoke: ok"),
        "smoke program failed ({}):\nstdout: {stdout}\nstderr: {}",
        run.status,
        String::from_utf8_lossy(&run.stderr)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// `target/<profile>` or `target/<profile>/deps`, whichever has the newer
/// libtxmap.so.
fn newest_lib_dir(profile_dir: &Path) -> PathBuf {
    let mtime = |d: &Path| {
        std::fs::metadata(d.join("libtxmap.so"))
            .and_then(|m| m.modified())
            .ok()
    };
    let deps = profile_dir.join("deps");
    match (mtime(profile_dir), mtime(&deps)) {
        (Some(top), Some(d)) if d > top => deps,
        _ => profile_dir.to_path_buf(),
    }
}
