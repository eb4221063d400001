//! Test helpers: directories on a pinned file system, child processes.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use txmap::Region;
use txmap::wal::format::{self, HEADER_BYTES, LogHeader};

const PAGE: u64 = 4096;

const EXT4_MAGIC: i64 = 0xEF53;
const TMPFS_MAGIC: i64 = 0x0102_1994;

/// A directory removed on drop.
pub struct TestDir(pub PathBuf);

impl TestDir {
    pub fn path(&self) -> &Path {
        &self.0
    }
    pub fn join(&self, p: &str) -> PathBuf {
        self.0.join(p)
    }
}

impl Drop for TestDir {
    fn drop(&mut self) {
        remove_shared_state(&self.0);
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Removes the shared state (in /dev/shm) of every region in `dir`: a
/// region whose last user was killed keeps it until the next open.
pub fn remove_shared_state(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let ids: Vec<String> = entries
        .flatten()
        .filter_map(|e| rustix::fs::stat(e.path()).ok())
        .map(|st| format!("-{:x}-{:x}", st.st_dev, st.st_ino))
        .collect();
    let Ok(shm) = std::fs::read_dir("/dev/shm") else {
        return;
    };
    for e in shm.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with("txmap-") && ids.iter().any(|id| name.ends_with(id.as_str())) {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

fn fs_magic(p: &Path) -> i64 {
    rustix::fs::statfs(p).map(|s| s.f_type).unwrap_or(0)
}

fn make(root: &Path, name: &str) -> TestDir {
    let d = root.join(format!(
        "{name}-{}-{:?}",
        std::process::id(),
        std::thread::current().id()
    ));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    TestDir(d)
}

/// A directory on ext4 (the target directory's disk): real fsync, no
/// synchronous userfaultfd. Fails the test if the disk is not ext4.
pub fn ext4_dir(name: &str) -> TestDir {
    let root = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    std::fs::create_dir_all(&root).unwrap();
    assert_eq!(
        fs_magic(&root),
        EXT4_MAGIC,
        "{} must be on ext4 for this test",
        root.display()
    );
    make(&root, name)
}

/// A directory on tmpfs (/dev/shm): fsync is a no-op.
pub fn tmpfs_dir(name: &str) -> TestDir {
    let root = Path::new("/dev/shm");
    assert_eq!(fs_magic(root), TMPFS_MAGIC, "/dev/shm must be tmpfs");
    make(root, name)
}

/// Re-runs this test binary as a child running only test `name` with `role` set.
pub fn child(name: &str, role: &str, envs: &[(&str, String)]) -> std::process::Command {
    let mut c = std::process::Command::new(std::env::current_exe().unwrap());
    c.args([name, "--exact", "--nocapture", "--test-threads=1"]);
    c.env("TXMAP_TEST_ROLE", role);
    for (k, v) in envs {
        c.env(k, v);
    }
    c
}

/// The seed of a test's random choices: `TXMAP_SEED` if set, else one
/// derived from the test's name; printed, so a failure can be replayed.
pub fn seed(test: &str) -> u64 {
    let s = std::env::var("TXMAP_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| test.bytes().fold(7u64, |a, b| a * 31 + u64::from(b)));
    eprintln!("{test}: TXMAP_SEED={s}");
    s
}

/// The role this process plays, if it is a child started by `child`.
pub fn role() -> Option<String> {
    std::env::var("TXMAP_TEST_ROLE").ok()
}

/// Commits `n` transactions, the i-th writing `i + 1` (a u64) at `i * PAGE + 8`.
pub fn commit_n(r: &Region, n: u64) {
    let mut v = r.view().unwrap();
    for i in 0..n {
        v.begin().unwrap();
        v.write(i * PAGE + 8, &(i + 1)).unwrap();
        v.commit().unwrap();
    }
}

/// Copies a region and its log, as a crash would leave them: taken while the
/// region is open, the log holds every durable commit.
pub fn copy_region(from: &Path, to: &Path) {
    std::fs::copy(txmap::log_path(from), txmap::log_path(to)).unwrap();
    std::fs::copy(from, to).unwrap();
}

/// Offsets of the records of the current epoch of a log file.
pub fn record_offsets(log: &Path) -> Vec<u64> {
    let bytes = std::fs::read(log).unwrap();
    let h = LogHeader::decode(&bytes[..HEADER_BYTES as usize]).unwrap();
    let mut off = HEADER_BYTES as usize;
    let mut out = Vec::new();
    while let Ok(r) = format::decode_record(&bytes[off..], h.salt) {
        out.push(off as u64);
        off += r.len;
    }
    out
}

/// Flips one bit of the byte at `at` in a file.
pub fn flip(path: &Path, at: u64) {
    let mut b = std::fs::read(path).unwrap();
    b[at as usize] ^= 0x40;
    std::fs::write(path, b).unwrap();
}
