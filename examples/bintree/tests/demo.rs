//! The demo program (src/main.rs) runs, and again on the same region: each
//! run inserts seven keys once and its aborted removals are compensated.

use std::process::Command;

#[test]
fn the_demo_runs_twice_on_one_region() {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("bintree-demo-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("demo.txm");
    for run in 1..=2 {
        let out = Command::new(env!("CARGO_BIN_EXE_txmap-example-bintree"))
            .arg(&path)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let want = [10, 20, 30, 50, 70, 80, 90]
            .map(|k| format!("{k}: {run}"))
            .join(", ");
        assert!(
            stdout.contains(&format!("{{{want}}}")),
            "run {run}: {stdout}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
