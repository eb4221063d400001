//! Helpers shared by the peer tests.
#![allow(dead_code)]

use std::path::PathBuf;

/// A fresh directory on the workspace's file system (ext4 here, not tmpfs:
/// the stores sync files), named after the test file's `prefix`.
pub fn fresh_dir(prefix: &str, name: &str) -> PathBuf {
    let d = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("{prefix}-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// xorshift: deterministic keys without a dependency.
pub struct Rng(pub u64);
impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}
