//! Directory durability: a directory or file txmap creates is made durable
//! (its parent directory synced) before the call that created it returns,
//! so a power loss after durable commits cannot take the directory, the
//! region or the commits with it. Checked through `txmap::debug`'s record
//! of the directories synced on the calling thread.

mod common;

use std::ffi::CString;
use std::path::PathBuf;

use txmap::capi::xac;
use txmap::{Options, Region, debug};

/// Position of `dir` in the synced directories, if it was synced.
fn synced_at(syncs: &[PathBuf], dir: &std::path::Path) -> Option<usize> {
    syncs.iter().position(|d| d == dir)
}

#[test]
fn xinit_makes_the_directories_it_creates_durable() {
    let base = common::ext4_dir("xinit_dirs");
    let a = base.join("a");
    let b = a.join("b");
    let c = CString::new(b.to_str().unwrap()).unwrap();
    debug::record_dir_syncs();
    // SAFETY: a NUL-terminated string.
    assert_eq!(unsafe { xac::xInit(c.as_ptr(), xac::XAC_DURABLE) }, 0);
    let syncs = debug::dir_syncs();
    assert!(b.is_dir());
    // Each new directory's entry is synced in its parent, outermost first.
    let outer = synced_at(&syncs, base.path());
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

#[test]
fn region_create_syncs_the_directory_after_its_files_are_in_place() {
    let base = common::ext4_dir("create_dirs");
    let path = base.join("r.txm");
    debug::record_dir_syncs();
    let r = Region::create(&path, 1 << 16, Options::default()).unwrap();
    let syncs = debug::dir_syncs();
    assert_eq!(syncs, [base.path()], "create synced {syncs:?}");
    assert!(path.exists() && txmap::log_path(&path).exists());
    r.close().unwrap();
}

#[test]
fn a_missing_directory_of_a_new_region_is_an_error() {
    let base = common::ext4_dir("create_missing_dir");
    let path = base.join("no/such/r.txm");
    let Err(e) = Region::create(&path, 1 << 16, Options::default()) else {
        panic!("created a region in a missing directory");
    };
    assert!(e.to_string().contains("r.txm-log"), "{e}");
    assert!(!base.join("no").exists());
}
