//! Helpers shared by the peer tests.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::PathBuf;

use txmap_peers::{Op, Session};

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

/// A key and its new value, or `None` to delete it.
pub type Change = (Vec<u8>, Option<Vec<u8>>);

/// Writes `batch` as one transaction and applies it to `model`, which then
/// holds what the store should.
pub fn apply_batch(
    s: &mut dyn Session,
    model: &mut BTreeMap<Vec<u8>, Vec<u8>>,
    batch: Vec<Change>,
) {
    let ops: Vec<Op> = batch
        .iter()
        .map(|(k, v)| match v {
            Some(v) => Op::Put(k, v),
            None => Op::Delete(k),
        })
        .collect();
    s.write(&ops).unwrap();
    for (k, v) in batch {
        match v {
            Some(v) => model.insert(k, v),
            None => model.remove(&k),
        };
    }
}
