//! Peer detection (detect.rs, run by build.rs) against a fake include
//! directory: it finds exactly the headers present, and after a header is
//! installed with an old mtime (as Debian's packages do) the paths it has
//! cargo watch have changed by cargo's rule, so build.rs runs again and the
//! new peer is built. Cargo's rule is reproduced here: a watched path is
//! stale if it is missing or if it, or anything under it when it is a
//! directory, has an mtime newer than the last run of the build script.

// build.rs uses the rest (the include directory, the libraries).
#[allow(dead_code)]
#[path = "../detect.rs"]
mod detect;

use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// An empty directory under the test target directory, removed on drop.
struct FakeInclude(PathBuf);

impl FakeInclude {
    fn new(name: &str) -> FakeInclude {
        let d = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("detect-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).expect("create fake include directory");
        FakeInclude(d)
    }

    /// Installs `header` (and its directories) as a package would, with an
    /// mtime of `mtime`.
    fn install(&self, header: &str, mtime: SystemTime) {
        let path = self.0.join(header);
        std::fs::create_dir_all(path.parent().unwrap()).expect("create header directory");
        let f = File::create(&path).expect("create header");
        f.set_modified(mtime).expect("set header mtime");
    }
}

impl Drop for FakeInclude {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `secs` after the epoch: fixed instants, long before the test runs.
fn at(secs: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(secs)
}

/// 2000, 2005 and 2010.
const OLD: u64 = 946_684_800;
const PACKAGE: u64 = 1_104_537_600;
const LAST_BUILD: u64 = 1_262_304_000;

/// Sets the mtime of `dir` and of every directory under it to `mtime`.
fn age_dirs(dir: &Path, mtime: SystemTime) {
    for e in std::fs::read_dir(dir).expect("read directory") {
        let p = e.expect("read directory").path();
        if p.is_dir() {
            age_dirs(&p, mtime);
        }
    }
    File::open(dir)
        .and_then(|f| f.set_modified(mtime))
        .expect("set directory mtime");
}

/// The newest mtime of `path` and, for a directory, of everything under it
/// (cargo's scan of a watched directory).
fn newest_mtime(path: &Path) -> SystemTime {
    let mut t = std::fs::metadata(path)
        .and_then(|m| m.modified())
        .expect("mtime");
    if path.is_dir() {
        for e in std::fs::read_dir(path).expect("read directory") {
            t = t.max(newest_mtime(&e.expect("read directory").path()));
        }
    }
    t
}

/// Whether cargo would run the build script again, given the paths it
/// watched and the time of its last run.
fn cargo_reruns(watched: &[PathBuf], last_run: SystemTime) -> bool {
    watched
        .iter()
        .any(|p| !p.exists() || newest_mtime(p) > last_run)
}

fn names(include: &Path) -> Vec<&'static str> {
    detect::present(include).iter().map(|p| p.name).collect()
}

#[test]
fn detection_finds_exactly_the_peers_whose_header_is_present() {
    let inc = FakeInclude::new("present");
    assert_eq!(names(&inc.0), Vec::<&str>::new());
    inc.install("db.h", at(PACKAGE));
    inc.install("rocksdb/c.h", at(PACKAGE));
    assert_eq!(names(&inc.0), ["bdb", "rocksdb"]);
    // A directory named like a header is not one.
    std::fs::create_dir_all(inc.0.join("lmdb.h")).unwrap();
    assert_eq!(names(&inc.0), ["bdb", "rocksdb"]);
}

#[test]
fn installing_a_peer_with_an_old_mtime_reruns_detection() {
    for peer in detect::PEERS {
        let inc = FakeInclude::new(peer.name);
        // rocksdb's directory may exist before its header does.
        for pre_existing_dirs in [false, true] {
            let _ = std::fs::remove_dir_all(&inc.0);
            std::fs::create_dir_all(&inc.0).unwrap();
            if pre_existing_dirs {
                std::fs::create_dir_all(inc.0.join(peer.header).parent().unwrap()).unwrap();
            }
            // The others are installed: this is the last one missing.
            for other in detect::PEERS.iter().filter(|o| o.name != peer.name) {
                inc.install(other.header, at(PACKAGE));
            }
            age_dirs(&inc.0, at(OLD));
            let watched = detect::watched(&inc.0);
            inc.install(peer.header, at(PACKAGE));
            assert!(
                cargo_reruns(&watched, at(LAST_BUILD)),
                "{}: {} installed (mtime older than the last build) but no watched \
                 path changed: {watched:?}",
                peer.name,
                peer.header
            );
            assert!(names(&inc.0).contains(&peer.name));
        }
    }
}

/// While peers are missing, builds that change nothing under the include
/// directory do not re-run build.rs (nor rebuild the crate).
#[test]
fn an_unchanged_include_directory_does_not_rerun_detection() {
    let inc = FakeInclude::new("unchanged");
    for installed in [&[][..], &["db.h"], &["rocksdb/c.h", "lmdb.h"]] {
        let _ = std::fs::remove_dir_all(&inc.0);
        std::fs::create_dir_all(inc.0.join("rocksdb")).unwrap();
        for h in installed {
            inc.install(h, at(PACKAGE));
        }
        age_dirs(&inc.0, at(OLD));
        let watched = detect::watched(&inc.0);
        assert!(
            !cargo_reruns(&watched, at(LAST_BUILD)),
            "with {installed:?} installed, nothing changed, yet cargo would re-run: {watched:?}"
        );
    }
}

#[test]
fn removing_a_peer_reruns_detection() {
    let inc = FakeInclude::new("remove");
    for peer in detect::PEERS {
        inc.install(peer.header, at(PACKAGE));
    }
    age_dirs(&inc.0, at(OLD));
    let watched = detect::watched(&inc.0);
    assert!(!cargo_reruns(&watched, at(LAST_BUILD)));
    std::fs::remove_file(inc.0.join("sqlite3.h")).unwrap();
    assert!(cargo_reruns(&watched, at(LAST_BUILD)));
}

#[test]
fn watched_paths_stay_inside_the_include_directory() {
    // A missing include directory is watched itself (always re-run), never
    // its parent, which cargo would scan recursively.
    let inc = FakeInclude::new("missing");
    let gone = inc.0.join("include");
    let watched = detect::watched(&gone);
    assert_eq!(watched, [gone]);
    let inc2 = FakeInclude::new("inside");
    for p in detect::watched(&inc2.0) {
        assert!(p.starts_with(&inc2.0), "{} is outside", p.display());
    }
}
