//! Directory durability of the LIBXAC calls: the directories `xInit`
//! creates, and the region files `xMmap` creates, are made durable (their
//! parent directory synced) before the call returns. Checked through
//! `txmap::debug`'s record of the directories synced on the calling thread.

use std::ffi::CString;
use std::path::{Path, PathBuf};

use txmap::debug;
use txmap_capi::xac;

/// A fresh directory under the test target directory, removed on drop.
struct TestDir(PathBuf);

impl TestDir {
    fn new(name: &str) -> TestDir {
        let d =
            Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).expect("create test directory");
        TestDir(d)
    }

    fn join(&self, p: &str) -> PathBuf {
        self.0.join(p)
    }
}

impl Drop for TestDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Position of `dir` in the synced directories, if it was synced.
fn synced_at(syncs: &[PathBuf], dir: &Path) -> Option<usize> {
    syncs.iter().position(|d| d == dir)
}

#[test]
fn xinit_makes_the_directories_it_creates_durable() {
    let base = TestDir::new("xinit_dirs");
    let a = base.join("a");
    let b = a.join("b");
    let c = CString::new(b.to_str().unwrap()).unwrap();
    debug::record_dir_syncs();
    // SAFETY: a NUL-terminated string.
    assert_eq!(unsafe { xac::xInit(c.as_ptr(), xac::XAC_DURABLE) }, 0);
    let syncs = debug::dir_syncs();
    assert!(b.is_dir());
    // Each new directory's entry is synced in its parent, outermost first.
    let outer = synced_at(&syncs, &base.0);
    let inner = synced_at(&syncs, &a);
    assert!(
        outer.is_some() && inner.is_some() && outer < inner,
        "xInit created {} and {} but synced {syncs:?}",
        a.display(),
        b.display()
    );

    // A region created there: its files' entries are synced in it.
    debug::record_dir_syncs();
    let name = CString::new("r").unwrap();
    // SAFETY: a NUL-terminated string.
    let p = unsafe { xac::xMmap(name.as_ptr(), 8192) };
    let syncs = debug::dir_syncs();
    assert!(!p.is_null());
    assert!(
        synced_at(&syncs, &b).is_some(),
        "xMmap created a region in {} but synced {syncs:?}",
        b.display()
    );
    assert_eq!(xac::xShutdown(), 0);

    // An existing directory needs nothing.
    debug::record_dir_syncs();
    // SAFETY: as above.
    assert_eq!(unsafe { xac::xInit(c.as_ptr(), xac::XAC_DURABLE) }, 0);
    assert_eq!(debug::dir_syncs(), Vec::<PathBuf>::new());
    assert_eq!(xac::xShutdown(), 0);
}
