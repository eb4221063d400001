//! A full file system: txmap fails with a typed error, never SIGBUS, and
//! keeps every commit. Runs on a small tmpfs mounted for the test (root
//! only; skipped with a message otherwise), where reading a never-written
//! page of a shared file mapping needs an allocation: on a full tmpfs a
//! failed one kills the reader with SIGBUS. The work that could take the
//! signal runs in a child process, so a SIGBUS shows up as a signal exit.

mod common;

use std::io::Write;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};

use common::{Tmpfs, child, role};
use txmap::{Error, Options, Region};

const PAGE: u64 = 4096;
const MIB: u64 = 1 << 20;

fn is_enospc(e: &Error) -> bool {
    matches!(e, Error::Io { source, .. } if source.raw_os_error() == Some(libc::ENOSPC))
}

/// Writes a file in `dir` until the file system is full.
fn fill(dir: &Path) {
    let mut f = std::fs::File::create(dir.join("fill")).unwrap();
    let buf = vec![0u8; 64 << 10];
    for chunk in [&buf[..], &buf[..512]] {
        loop {
            match f.write(chunk) {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => break,
                Err(e) => panic!("fill: {e}"),
            }
        }
    }
}

fn unfill(dir: &Path) {
    std::fs::remove_file(dir.join("fill")).unwrap();
}

/// Commits `value` at byte 8 of page `page`.
fn put(r: &Region, page: u64, value: u64) -> txmap::Result<()> {
    let mut v = r.view()?;
    v.begin()?;
    v.write(page * PAGE + 8, &value)?;
    v.commit()
}

fn get(r: &Region, page: u64) -> u64 {
    let mut v = r.view().unwrap();
    v.begin_read().unwrap();
    let x = v.read(page * PAGE + 8).unwrap();
    v.commit().unwrap();
    x
}

/// Runs `role` in a child on the region at `path` and returns its stdout;
/// fails the test if the child died of a signal or failed.
fn run_child(test: &str, role: &str, path: &Path) -> String {
    let out = child(
        test,
        role,
        &[("TXMAP_FULL_REGION", path.display().to_string())],
    )
    .output()
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "child {role} ended with {:?} (signal {:?}; 7 is SIGBUS)\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status,
        out.status.signal()
    );
    stdout
}

fn child_region() -> PathBuf {
    PathBuf::from(std::env::var("TXMAP_FULL_REGION").unwrap())
}

/// Child: commits to pages of the region nobody wrote before; each commit
/// succeeds or fails with ENOSPC. Prints what happened.
fn commit_untouched_pages() {
    let r = Region::open(&child_region(), Options::default()).unwrap();
    let size = r.size() / PAGE;
    for page in [size - 1, size / 2, 3] {
        match put(&r, page, 7) {
            Ok(()) => println!("page {page}: committed"),
            Err(e) if is_enospc(&e) => println!("page {page}: ENOSPC: {e}"),
            Err(e) => panic!("page {page}: unexpected error {e}"),
        }
    }
}

/// Child: opens the region (a typed ENOSPC error is an answer too), reads
/// every page and commits one.
fn open_and_read_all() {
    let r = match Region::open(&child_region(), Options::default()) {
        Ok(r) => r,
        Err(e) if is_enospc(&e) => {
            println!("open: ENOSPC: {e}");
            return;
        }
        Err(e) => panic!("open: unexpected error {e}"),
    };
    let mut v = r.view().unwrap();
    v.begin_read().unwrap();
    let mut sum = 0u64;
    for page in 0..r.size() / PAGE {
        sum = sum.wrapping_add(v.read::<u64>(page * PAGE + 8).unwrap());
    }
    v.commit().unwrap();
    println!("open: read every page (sum {sum})");
    drop(v);
    match put(&r, 5, 9) {
        Ok(()) => println!("commit: committed"),
        Err(e) if is_enospc(&e) => println!("commit: ENOSPC: {e}"),
        Err(e) => panic!("commit: unexpected error {e}"),
    }
}

/// Runs this process's role if it is a child; true if it was.
fn as_child() -> bool {
    let Some(role) = role() else { return false };
    match role.as_str() {
        "commit" => commit_untouched_pages(),
        "open" => open_and_read_all(),
        r => panic!("unknown role {r}"),
    }
    true
}

/// After space came back: the region opens and holds what was committed.
fn check_kept(path: &Path, committed: &[(u64, u64)]) {
    let r = Region::open(path, Options::default()).unwrap();
    for &(page, value) in committed {
        let got = get(&r, page);
        // A commit the child reported may have landed too (value 7 or 9).
        assert!(
            got == value || got == 7 || got == 9,
            "page {page}: {got}, committed {value}"
        );
    }
    put(&r, 1, 1234).unwrap();
    assert_eq!(get(&r, 1), 1234);
    r.close().unwrap();
}

/// An 8 MiB tmpfs and the path of a region in it.
fn mount(name: &str) -> Option<(Tmpfs, PathBuf)> {
    let fs = Tmpfs::mount(name, 8 * MIB)?;
    let path = fs.path().join("x.txm");
    Some((fs, path))
}

/// A 1 MiB region at `path` with 42 committed in page 0.
fn create(path: &Path) -> Region {
    let r = Region::create(path, MIB, Options::default()).unwrap();
    put(&r, 0, 42).unwrap();
    r
}

#[test]
fn commit_to_unwritten_pages_of_a_full_tmpfs() {
    if as_child() {
        return;
    }
    let name = "commit_to_unwritten_pages_of_a_full_tmpfs";
    let Some((fs, path)) = mount(name) else {
        return;
    };
    // Creating on a full file system fails and leaves nothing behind.
    fill(fs.path());
    let Err(e) = Region::create(&path, MIB, Options::default()) else {
        panic!("create on a full file system succeeded");
    };
    assert!(is_enospc(&e), "create on a full file system: {e}");
    let left: Vec<_> = std::fs::read_dir(fs.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left, ["fill"], "create left files behind");
    unfill(fs.path());
    let r = create(&path);
    r.close().unwrap();
    fill(fs.path());
    let out = run_child(name, "commit", &path);
    eprintln!("{out}");
    unfill(fs.path());
    check_kept(&path, &[(0, 42)]);
}

#[test]
fn grow_then_commit_on_a_full_tmpfs() {
    if as_child() {
        return;
    }
    let name = "grow_then_commit_on_a_full_tmpfs";
    let Some((fs, path)) = mount(name) else {
        return;
    };
    let r = create(&path);
    // Grown while there is room: the new pages are never written before
    // the file system fills up.
    r.grow(2 * MIB).unwrap();
    r.close().unwrap();
    fill(fs.path());
    let out = run_child(name, "commit", &path);
    eprintln!("{out}");
    // Growing on the full file system fails with ENOSPC and keeps the size.
    let r = Region::open(&path, Options::default()).unwrap();
    let e = r.grow(4 * MIB).unwrap_err();
    assert!(is_enospc(&e), "grow on a full file system: {e}");
    assert!(e.to_string().contains("x.txm"), "{e}");
    assert_eq!(r.size(), 2 * MIB);
    drop(r);
    unfill(fs.path());
    check_kept(&path, &[(0, 42)]);
}

#[test]
fn reopen_while_full() {
    if as_child() {
        return;
    }
    let name = "reopen_while_full";
    let Some((fs, path)) = mount(name) else {
        return;
    };
    let r = create(&path);
    for page in 1..4 {
        put(&r, page, 100 + page).unwrap();
    }
    r.close().unwrap();
    fill(fs.path());
    let out = run_child(name, "open", &path);
    assert!(out.contains("open: read every page"), "{out}");
    unfill(fs.path());
    check_kept(&path, &[(0, 42), (2, 102), (3, 103)]);
}

#[test]
fn reopen_a_sparse_region_while_full() {
    if as_child() {
        return;
    }
    let name = "reopen_a_sparse_region_while_full";
    let Some((fs, path)) = mount(name) else {
        return;
    };
    let r = create(&path);
    r.close().unwrap();
    // Holes where nothing was written, as a sparse copy (or an older
    // txmap) leaves them.
    let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    let header = txmap::wal::format::HEADER_BYTES;
    rustix::fs::fallocate(
        &f,
        rustix::fs::FallocateFlags::PUNCH_HOLE | rustix::fs::FallocateFlags::KEEP_SIZE,
        header + PAGE,
        MIB - PAGE,
    )
    .unwrap();
    drop(f);
    fill(fs.path());
    let out = run_child(name, "open", &path);
    assert!(out.contains("open: ENOSPC"), "{out}");
    assert!(out.contains("holes in"), "{out}");
    unfill(fs.path());
    check_kept(&path, &[(0, 42)]);
}
