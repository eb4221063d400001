//! The STAMP-style part runs end to end at tiny sizes: its tables have a row
//! per workload, every run passed its audit, and the targets are judged (a
//! smoke test of the harness, not a measurement: no timings are checked).

use std::process::Command;

#[test]
fn stamp_part_prints_both_workloads_and_finds_no_anomaly() {
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("stamp-{}", std::process::id()));
    let run = Command::new(env!("CARGO_BIN_EXE_txmap-bench"))
        .args(["stamp", "--quick", "--reps", "1", "--dir"])
        .arg(&dir)
        .env("TXMAP_BENCH_STAMP_TINY", "1")
        .output()
        .expect("run txmap-bench");
    let out = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success(),
        "txmap-bench failed: {}\n{out}",
        String::from_utf8_lossy(&run.stderr)
    );
    for heading in [
        "### 8a. One process: transactional against sequential",
        "### 8b. Two processes",
    ] {
        assert!(out.contains(heading), "no {heading:?}:\n{out}");
    }
    let rows = |prefix: &str| out.lines().filter(|l| l.starts_with(prefix)).count();
    // One row in 8a, two (async, durable) in 8b, one target each.
    assert_eq!(rows("| reservations (vacation-style) "), 3, "{out}");
    assert_eq!(rows("| clustering (kmeans-style) "), 3, "{out}");
    assert_eq!(
        rows("| reservations (vacation-style): transactional"),
        1,
        "{out}"
    );
    assert_eq!(
        rows("| clustering (kmeans-style): transactional"),
        1,
        "{out}"
    );
    assert!(
        out.contains("None: every fault count, read-back value and commit result was as expected."),
        "the run found anomalies:\n{out}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
