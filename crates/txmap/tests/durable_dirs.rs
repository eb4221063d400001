//! Directory durability: a directory or file txmap creates is made durable
//! (its parent directory synced) before the call that created it returns,
//! so a power loss after durable commits cannot take the directory, the
//! region or the commits with it. Checked through `txmap::debug`'s record
//! of the directories synced on the calling thread.

mod common;

use txmap::{Options, Region, debug};

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
