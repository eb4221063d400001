//! Running the built `txmap` binary, shared by the CLI's test files.
#![allow(dead_code)] // each test file uses a part

use std::path::Path;
use std::process::{Command, Output};

/// Runs `txmap ARGS` and waits for it.
pub fn txmap(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_txmap"))
        .args(args)
        .output()
        .expect("run txmap")
}

pub fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Standard output and error together.
pub fn text(o: &Output) -> String {
    format!("{}{}", stdout(o), stderr(o))
}

/// Asserts a failure with exactly one `txmap: ` line on stderr; returns it.
pub fn fails(o: &Output, code: i32) -> String {
    let err = stderr(o);
    assert_eq!(o.status.code(), Some(code), "stderr: {err}");
    assert_eq!(err.lines().count(), 1, "not one line: {err:?}");
    assert!(err.starts_with("txmap: "), "{err:?}");
    assert!(!err.contains("panicked"), "{err:?}");
    err
}

/// Asserts success; returns standard output.
pub fn succeeds(o: &Output) -> String {
    assert_eq!(o.status.code(), Some(0), "stderr: {}", stderr(o));
    stdout(o)
}

/// Runs `txmap ARGS`, asserts success, returns standard output.
pub fn ok(args: &[&str]) -> String {
    let o = txmap(args);
    assert_eq!(o.status.code(), Some(0), "{args:?}: {}", stderr(&o));
    stdout(&o)
}
