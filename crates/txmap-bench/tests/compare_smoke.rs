//! The comparison runs end to end on a small selection and writes its report
//! and plots (a smoke test of the harness, not a measurement: no timings are
//! checked). Stores that are not installed are skipped by the program itself.

use std::process::Command;

/// Runs `txmap-bench compare --quick ARGS --out DIR` (the time cap 2 s) and
/// returns DIR and the report it wrote; fails the test if the program did.
fn compare(name: &str, args: &[&str]) -> (std::path::PathBuf, String) {
    let out = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    let run = Command::new(env!("CARGO_BIN_EXE_txmap-bench"))
        .args(["compare", "--quick"])
        .args(args)
        .arg("--out")
        .arg(&out)
        .env("TXMAP_BENCH_CAP", "2")
        .output()
        .expect("run txmap-bench");
    assert!(
        run.status.success(),
        "txmap-bench failed: {}\n{}",
        String::from_utf8_lossy(&run.stderr),
        String::from_utf8_lossy(&run.stdout)
    );
    let report = std::fs::read_to_string(out.join("README.md")).expect("report written");
    (out, report)
}

#[test]
fn compare_writes_a_report_with_plots_and_no_problems() {
    let (out, report) = compare(
        "compare",
        &[
            "--reps",
            "1",
            "--stores",
            "txmap-btree,txmap-hash,lmdb",
            "--workloads",
            "inserts,redb,abc",
        ],
    );
    for section in [
        "## Durable random inserts",
        "## The redb workload",
        "## Concurrency tests A, B, C",
        "## Against the targets",
    ] {
        assert!(report.contains(section), "report lacks {section:?}");
    }
    assert!(
        report.contains("None: every store completed every run, and every read found its value."),
        "the run found problems:\n{report}"
    );
    // The issue-20 redb targets come from the paired runs, all of them
    // complete (where LMDB is installed, as `.ci/run` installs it).
    let lmdb = !report
        .lines()
        .any(|l| l.contains("LMDB") && l.contains("skipped, not installed"));
    for row in lmdb
        .then_some([
            "| redb workload: bulk load ≤ 1.0× LMDB's time (issue 20)",
            "| redb workload: random reads, 1 thread ≤ 1.0× LMDB's time (issue 20)",
            "| redb workload: random reads, 2 threads ≤ 1.25× LMDB's time (issue 20)",
            "| redb workload: range reads ≤ 1.5× LMDB's time (issue 20)",
        ])
        .into_iter()
        .flatten()
    {
        let line = report
            .lines()
            .find(|l| l.starts_with(row))
            .unwrap_or_else(|| panic!("no target row {row:?}:\n{report}"));
        assert!(
            line.contains("median of 20 paired runs"),
            "not from 20 paired runs: {line}"
        );
    }
    for plot in [
        "inserts.svg",
        "inserts-kth.svg",
        "redb.svg",
        "abc-durable.svg",
    ] {
        let svg = std::fs::read_to_string(out.join(plot)).unwrap_or_else(|e| panic!("{plot}: {e}"));
        assert!(
            svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"),
            "{plot} is not an SVG document"
        );
        assert!(svg.contains("txmap B+-tree"), "{plot} has no txmap series");
    }
    std::fs::remove_dir_all(&out).unwrap();
}

/// A store whose redb workload outlasts `--redb-deadline` is stopped, and
/// the report says where instead of waiting (PMDK's full-size bulk load ran
/// over 25 minutes once).
#[test]
fn compare_stops_a_redb_workload_at_its_deadline_and_says_where() {
    let (out, report) = compare(
        "compare-deadline",
        &[
            "--reps",
            "2",
            "--stores",
            "txmap-btree",
            "--workloads",
            "redb",
            "--redb-deadline",
            "0",
        ],
    );
    // A 20,000-entry bulk load cannot end before a deadline of 0 s; the
    // second run is skipped for the reason of the first.
    let cell = "n/a: stopped in its bulk load at 0 s (run 1)";
    assert_eq!(
        report.matches(cell).count(),
        8,
        "every step names the stop:\n{report}"
    );
    assert!(
        report.contains("- redb workload, txmap B+-tree: stopped in its bulk load at 0 s (run 1)"),
        "the stop is listed:\n{report}"
    );
    std::fs::remove_dir_all(&out).unwrap();
}
