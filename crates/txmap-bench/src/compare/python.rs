//! The Python package beside py-lmdb and sqlite3 from the same Python
//! (`crates/txmap-py/bench/bench.py`), when the venv the tests build
//! (`target/pyenv`, by `scripts/python-env.sh`) exists; skipped otherwise.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The report section: the script's table, or why it was skipped.
pub(super) fn section(quick: bool) -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let head = "## Python: txmap beside py-lmdb and sqlite3\n\n\
        Durable one-key commits and random reads from one Python process \
        (`crates/txmap-py/bench/bench.py`; docs/benchmarks.md, \"Python\").\n\n";
    let python = root.join("target/pyenv/bin/python");
    if !python.exists() {
        return format!(
            "{head}Skipped: no `target/pyenv` (`bash scripts/python-env.sh` makes it).\n\n"
        );
    }
    let mut cmd = Command::new(&python);
    cmd.arg(root.join("crates/txmap-py/bench/bench.py"));
    if quick {
        cmd.arg("--quick");
    }
    let child = cmd
        .current_dir(&root)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let mut child = match child {
        Ok(c) => c,
        Err(e) => return format!("{head}Skipped: cannot run {}: {e}\n\n", python.display()),
    };
    let limit = Duration::from_secs(if quick { 90 } else { 900 });
    let start = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if start.elapsed() < limit => std::thread::sleep(Duration::from_millis(100)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return format!("{head}Stopped after {} s.\n\n", limit.as_secs());
            }
        }
    }
    match child.wait_with_output() {
        Ok(o) if o.status.success() => format!(
            "{head}```text\n{}```\n\n",
            String::from_utf8_lossy(&o.stdout)
        ),
        Ok(o) => format!(
            "{head}Skipped: the script failed ({}):\n\n```text\n{}```\n\n",
            o.status,
            String::from_utf8_lossy(&o.stderr)
        ),
        Err(e) => format!("{head}Skipped: {e}\n\n"),
    }
}
