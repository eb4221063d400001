//! Readers that may not write a region (docs/reliability.md, "Read-only
//! users"): a read-only mount, a 0444 file opened by another user than
//! root, and `Options::read_only`. They open it, recover what its log holds
//! since the checkpoint without writing a byte, read, and fail with
//! `Error::ReadOnly` when they try to write. Writers that open the region
//! meanwhile share the reader's state, and nothing is lost afterwards.
//!
//! Regions here are left as a killed process leaves them: `commit_n` in a
//! child that then SIGKILLs itself, so the commits are only in the log.
mod common;

use std::path::{Path, PathBuf};

use common::*;
use txmap::{Error, Options, Region};

const PAGE: u64 = 4096;
const COMMITS: u64 = 20;

fn env(k: &str) -> String {
    std::env::var(k).unwrap_or_else(|_| panic!("{k} not set"))
}

/// Child roles: `die` commits COMMITS (the i-th writes i + 1 at page i,
/// plus TXMAP_ADD) and kills itself; `reader` checks what a read-only user sees.
fn as_child() -> bool {
    let Some(role) = role() else { return false };
    let path = PathBuf::from(env("TXMAP_PATH"));
    match role.as_str() {
        "die" => {
            let r = Region::open(&path, Options::default()).unwrap();
            // TXMAP_ADD (if set) is added to each value.
            let add: u64 = std::env::var("TXMAP_ADD").map_or(0, |a| a.parse().unwrap());
            let mut v = r.view().unwrap();
            for i in 0..COMMITS {
                v.begin().unwrap();
                v.write(i * PAGE + 8, &(i + 1 + add)).unwrap();
                v.commit().unwrap();
            }
            rustix::process::kill_process(rustix::process::getpid(), rustix::process::Signal::KILL)
                .unwrap();
            unreachable!("killed");
        }
        "reader" => {
            let r = Region::open(&path, Options::default()).unwrap();
            check_reader(&r, COMMITS);
            println!("READER OK");
        }
        other => panic!("unknown role {other}"),
    }
    true
}

/// A region of 64 pages whose COMMITS commits only its log holds.
fn killed_region(test: &str, dir: &Path, file: &str) -> PathBuf {
    let path = dir.join(file);
    drop(Region::create(&path, 64 * PAGE, Options::default()).unwrap());
    let out = child(test, "die", &[("TXMAP_PATH", path.display().to_string())])
        .output()
        .unwrap();
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&out.status),
        Some(9),
        "the committer must die by SIGKILL: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    path
}

/// Page i holds `i + 1` for i < n, and 0 above.
fn check_values(r: &Region, n: u64) {
    check_values_plus(r, n, 0);
}

/// Page i holds `i + 1 + add` for i < n, and 0 above.
fn check_values_plus(r: &Region, n: u64, add: u64) {
    let mut v = r.view().unwrap();
    v.begin_read().unwrap();
    for i in 0..64 {
        let want = if i < n { i + 1 + add } else { 0 };
        assert_eq!(v.read::<u64>(i * PAGE + 8).unwrap(), want, "page {i}");
    }
    v.commit().unwrap();
}

/// What a read-only handle must do: read the n commits, in read-only and
/// in read-write transactions (which commit if they stored nothing), and
/// refuse every write with `Error::ReadOnly`, writing nothing.
fn check_reader(r: &Region, n: u64) {
    assert!(r.is_read_only());
    check_values(r, n);
    let mut v = r.view().unwrap();
    v.begin().unwrap();
    assert_eq!(v.read::<u64>(8).unwrap(), 1);
    v.commit().unwrap();
    v.begin().unwrap();
    v.write(8, &99u64).unwrap();
    let e = v.commit().unwrap_err();
    assert!(matches!(e, Error::ReadOnly { .. }), "{e}");
    // A plain store (caught by page protection) is refused the same way.
    v.begin().unwrap();
    // SAFETY: inside a transaction, within the region.
    unsafe { *(v.base().add(2 * PAGE as usize + 8) as *mut u64) = 77 };
    let e = v.commit().unwrap_err();
    assert!(matches!(e, Error::ReadOnly { .. }), "{e}");
    let e = r.grow(128 * PAGE).unwrap_err();
    assert!(matches!(e, Error::ReadOnly { .. }), "{e}");
    let e = r.checkpoint().unwrap_err();
    assert!(matches!(e, Error::ReadOnly { .. }), "{e}");
    check_values(r, n);
}

fn files(path: &Path) -> (Vec<u8>, Vec<u8>) {
    (
        std::fs::read(path).unwrap(),
        std::fs::read(txmap::log_path(path)).unwrap(),
    )
}

/// On a read-only mount, where even root may not write, a region whose
/// commits are only in its log opens, reads them all and refuses writes;
/// its files stay byte for byte as they were; several handles share it.
/// Writable again, it recovers as usual. (Before: `open` failed with EROFS.)
#[test]
fn a_read_only_mount_is_read_and_never_written() {
    if as_child() {
        return;
    }
    let name = "a_read_only_mount_is_read_and_never_written";
    let Some(m) = Tmpfs::mount(name, 16 << 20) else {
        return;
    };
    let path = killed_region(name, m.path(), "r.txm");
    let before = files(&path);
    m.remount("ro");
    {
        let r = Region::open(&path, Options::default()).unwrap();
        assert_eq!(
            r.stats().recovered_commits,
            COMMITS,
            "the log's commits, published"
        );
        check_reader(&r, COMMITS);
        // A second handle joins the first one's shared state.
        let r2 = Region::open(&path, Options::default()).unwrap();
        check_reader(&r2, COMMITS);
    }
    // Closed (the last one out could not checkpoint), and opened again.
    let r = Region::open(&path, Options::default()).unwrap();
    check_reader(&r, COMMITS);
    drop(r);
    assert!(files(&path) == before, "a read-only user changed the files");
    m.remount("rw");
    let r = Region::open(&path, Options::default()).unwrap();
    assert!(!r.is_read_only());
    assert_eq!(r.stats().recovered_commits, COMMITS);
    check_values(&r, COMMITS);
    commit_n(&r, 1);
}

/// A 0444 region opened by a user who may not write it (the test drops to
/// `nobody` with setpriv; run as another user than root, it opens the
/// region itself): it opens read-only. (Before: `open` failed with EACCES.)
#[test]
fn a_0444_region_opens_read_only_for_a_user_who_may_not_write_it() {
    if as_child() {
        return;
    }
    let name = "a_0444_region_opens_read_only_for_a_user_who_may_not_write_it";
    let d = ext4_dir(name);
    // Readable and searchable by everyone, as a shared data directory is.
    std::fs::set_permissions(
        d.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let path = killed_region(name, d.path(), "r.txm");
    for p in [path.clone(), txmap::log_path(&path)] {
        std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o444)).unwrap();
    }
    remove_shared_state(d.path());
    let before = files(&path);
    if rustix::process::geteuid().is_root() {
        let exe = std::env::current_exe().unwrap();
        let out = std::process::Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(exe)
            .args([name, "--exact", "--nocapture", "--test-threads=1"])
            .env("TXMAP_TEST_ROLE", "reader")
            .env("TXMAP_PATH", &path)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout.contains("READER OK"),
            "reader as nobody: {}\n{stdout}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    } else {
        let r = Region::open(&path, Options::default()).unwrap();
        check_reader(&r, COMMITS);
    }
    assert!(files(&path) == before, "a read-only user changed the files");
}

/// A read-only handle opened first keeps the log's commits in shared
/// memory; a writer that opens the region meanwhile commits after them and
/// checkpoints them into the file; the reader sees each commit in its next
/// transaction and keeps its snapshot in an open one. The log's last
/// record is torn (a crash during its write): the reader drops it, as
/// recovery does, and the writer's commits go where it was. After
/// everyone closes, or the writer is killed, nothing is lost.
#[test]
fn writers_share_the_state_of_a_read_only_first_opener() {
    if as_child() {
        return;
    }
    let name = "writers_share_the_state_of_a_read_only_first_opener";
    let d = ext4_dir(name);
    let path = killed_region(name, d.path(), "a.txm");
    // Tear the last record: zeros over its second half (never synced, as
    // no later record says otherwise).
    let log = txmap::log_path(&path);
    let offs = record_offsets(&log);
    let mut bytes = std::fs::read(&log).unwrap();
    let last = *offs.last().unwrap() as usize;
    let end = last + 64;
    bytes[last + 32..end].fill(0);
    std::fs::write(&log, &bytes).unwrap();
    let kept = COMMITS - 1;

    let ro = Options {
        read_only: true,
        ..Options::default()
    };
    let reader = Region::open(&path, ro.clone()).unwrap();
    check_reader(&reader, kept);
    let mut old = reader.view().unwrap();
    old.begin_read().unwrap();

    let writer = Region::open(&path, Options::default()).unwrap();
    assert!(!writer.is_read_only());
    check_values(&writer, kept);
    // Page i gets i + 1 for i up to 30: 11 new commits after the 19 kept.
    let mut w = writer.view().unwrap();
    for i in kept..30 {
        w.begin().unwrap();
        w.write(i * PAGE + 8, &(i + 1)).unwrap();
        w.commit().unwrap();
    }
    check_values(&reader, 30);
    // The open snapshot still sees the 19.
    assert_eq!(old.read::<u64>(18 * PAGE + 8).unwrap(), 19);
    assert_eq!(old.read::<u64>(19 * PAGE + 8).unwrap(), 0);
    writer.checkpoint().unwrap();
    assert_eq!(old.read::<u64>(25 * PAGE + 8).unwrap(), 0);
    old.commit().unwrap();
    check_values(&reader, 30);
    for i in 30..35 {
        w.begin().unwrap();
        w.write(i * PAGE + 8, &(i + 1)).unwrap();
        w.commit().unwrap();
    }
    drop(w);
    drop(writer);
    check_values(&reader, 35);
    drop(reader);
    let r = Region::open(&path, Options::default()).unwrap();
    check_values(&r, 35);
    drop(r);

    // Again without a checkpoint, and the writer killed: recovery replays
    // the epoch the reader went on with.
    let path = killed_region(name, d.path(), "b.txm");
    let reader = Region::open(&path, ro.clone()).unwrap();
    check_values(&reader, COMMITS);
    let more = child(
        name,
        "die",
        &[
            ("TXMAP_PATH", path.display().to_string()),
            ("TXMAP_ADD", "100".into()),
        ],
    )
    .output()
    .unwrap();
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&more.status),
        Some(9)
    );
    // The dead writer rewrote pages 0..20, adding 100: 40 commits.
    check_values_plus(&reader, COMMITS, 100);
    drop(reader);
    let r = Region::open(&path, Options::default()).unwrap();
    assert_eq!(r.stats().recovered_commits, 2 * COMMITS);
    check_values_plus(&r, COMMITS, 100);
}

/// A read-only open writes nothing even when asked to move the region's
/// fixed address, and a region created read-only is refused.
#[test]
fn read_only_refuses_what_needs_a_write() {
    let d = ext4_dir("read_only_refuses_what_needs_a_write");
    let path = d.join("r.txm");
    let ro = Options {
        read_only: true,
        ..Options::default()
    };
    assert!(Region::create(&path, 16 * PAGE, ro.clone()).is_err());
    drop(Region::create(&path, 16 * PAGE, Options::default()).unwrap());
    let before = files(&path);
    let Err(e) = Region::open(
        &path,
        Options {
            address: Some(0x1800_0000_0000),
            ..ro
        },
    ) else {
        panic!("a read-only open moved the address")
    };
    assert!(matches!(e, Error::ReadOnly { .. }), "{e}");
    assert!(files(&path) == before);
}
