//! Regions, views, transactions: the basic contract.
mod common;

use common::*;
use txmap::{Error, Options, PageAccess, Ptr, Region, TxnOptions};

const PAGE: u64 = 4096;

#[test]
fn committed_writes_survive_reopen_and_aborted_ones_vanish() {
    let d = ext4_dir("reopen");
    let p = d.join("r.txm");
    {
        let r = Region::create(&p, 16 * PAGE, Options::default()).unwrap();
        let mut v = r.view().unwrap();
        v.begin().unwrap();
        v.write(10, &0xdead_beef_u64).unwrap();
        v.write(5 * PAGE + 3, &7u8).unwrap();
        v.commit().unwrap();
        v.begin().unwrap();
        v.write(10, &1u64).unwrap();
        v.abort().unwrap();
        assert_eq!(
            v.read::<u64>(10).unwrap(),
            0xdead_beef,
            "abort discards the stores at once"
        );
        v.write(10, &2u64).unwrap(); // stores after abort are tracked and discarded too
        assert_eq!(v.read::<u64>(10).unwrap(), 2);
        assert!(matches!(v.commit(), Err(Error::Aborted)));
        v.begin_read().unwrap();
        assert_eq!(v.read::<u64>(10).unwrap(), 0xdead_beef);
        v.commit().unwrap();
    }
    let r = Region::open(&p, Options::default()).unwrap();
    let mut v = r.view().unwrap();
    v.begin_read().unwrap();
    assert_eq!(v.read::<u64>(10).unwrap(), 0xdead_beef);
    assert_eq!(v.read::<u8>(5 * PAGE + 3).unwrap(), 7);
    assert_eq!(v.read::<u8>(5 * PAGE + 4).unwrap(), 0);
    v.commit().unwrap();
}

#[test]
fn uncommitted_writes_are_invisible_to_other_views_and_absent_from_the_file() {
    let d = ext4_dir("private");
    let p = d.join("r.txm");
    let r = Region::create(&p, 4 * PAGE, Options::default()).unwrap();
    let mut a = r.view().unwrap();
    let mut b = r.view().unwrap();
    a.begin().unwrap();
    a.slice_mut(PAGE, 8).unwrap().copy_from_slice(b"SECRET!!");
    b.begin_read().unwrap();
    assert_eq!(b.slice(PAGE, 8).unwrap(), &[0u8; 8]);
    b.commit().unwrap();
    r.checkpoint().unwrap();
    let file = std::fs::read(&p).unwrap();
    assert!(
        !file.windows(8).any(|w| w == b"SECRET!!"),
        "uncommitted bytes reached the region file"
    );
    let log = std::fs::read(txmap::log_path(&p)).unwrap();
    assert!(
        !log.windows(8).any(|w| w == b"SECRET!!"),
        "uncommitted bytes reached the log"
    );
    a.commit().unwrap();
    b.begin_read().unwrap();
    assert_eq!(b.slice(PAGE, 8).unwrap(), b"SECRET!!");
    b.commit().unwrap();
}

#[test]
fn raw_loads_and_stores_work_inside_a_transaction() {
    let d = ext4_dir("raw");
    let r = Region::create(&d.join("r.txm"), 64 * PAGE, Options::default()).unwrap();
    let mut v = r.view().unwrap();
    v.begin().unwrap();
    let base = v.base() as *mut u64;
    for i in 0..64 {
        // SAFETY: inside a transaction, within the region.
        unsafe { *base.add(i * 512 + 1) = i as u64 * 3 };
    }
    v.commit().unwrap();
    let faults = v.faults();
    v.begin_read().unwrap();
    let sum: u64 = (0..64).map(|i| unsafe { *base.add(i * 512 + 1) }).sum();
    v.commit().unwrap();
    assert_eq!(sum, 3 * (0..64).sum::<u64>());
    assert_eq!(
        v.faults(),
        faults,
        "pages that did not change stay mapped between transactions"
    );
}

#[test]
fn nested_transactions_fold_into_the_outermost() {
    let d = ext4_dir("nested");
    let r = Region::create(&d.join("r.txm"), PAGE, Options::default()).unwrap();
    let mut v = r.view().unwrap();
    let mut other = r.view().unwrap();
    v.begin().unwrap();
    v.write(0, &1u32).unwrap();
    v.begin().unwrap();
    v.write(4, &2u32).unwrap();
    v.commit().unwrap(); // inner: nothing visible yet
    other.begin_read().unwrap();
    assert_eq!(other.read::<u32>(4).unwrap(), 0);
    other.commit().unwrap();
    v.commit().unwrap();
    other.begin_read().unwrap();
    assert_eq!(
        (other.read::<u32>(0).unwrap(), other.read::<u32>(4).unwrap()),
        (1, 2)
    );
    other.commit().unwrap();
    // an inner abort dooms the whole transaction
    v.begin().unwrap();
    v.write(0, &9u32).unwrap();
    v.begin().unwrap();
    v.abort().unwrap();
    v.commit().unwrap();
    assert!(matches!(v.commit(), Err(Error::Aborted)));
    v.begin_read().unwrap();
    assert_eq!(v.read::<u32>(0).unwrap(), 1);
    v.commit().unwrap();
}

#[test]
fn a_read_only_transaction_that_stores_is_rolled_back_with_an_error() {
    let d = ext4_dir("rostore");
    let r = Region::create(&d.join("r.txm"), PAGE, Options::default()).unwrap();
    let mut v = r.view().unwrap();
    v.begin_read().unwrap();
    // SAFETY: inside a transaction.
    unsafe { *v.base() = 5 };
    let e = v.commit().unwrap_err();
    assert!(e.to_string().contains("read-only"), "{e}");
    v.begin_read().unwrap();
    assert_eq!(v.read::<u8>(0).unwrap(), 0);
    v.commit().unwrap();
}

#[test]
fn region_grows_without_remapping_by_hand() {
    let d = ext4_dir("grow");
    let p = d.join("r.txm");
    {
        let r = Region::create(&p, PAGE, Options::default()).unwrap();
        let mut v = r.view().unwrap();
        let base = v.base();
        v.begin().unwrap();
        assert!(
            v.write(PAGE * 9, &1u8).is_err(),
            "write past the end is refused"
        );
        v.grow(PAGE * 10).unwrap();
        v.write(PAGE * 9, &42u8).unwrap();
        v.commit().unwrap();
        assert_eq!(v.base(), base, "growth keeps the view's address");
        assert_eq!(r.size(), 10 * PAGE);
    }
    let r = Region::open(&p, Options::default()).unwrap();
    assert_eq!(r.size(), 10 * PAGE);
    let mut v = r.view().unwrap();
    v.begin_read().unwrap();
    assert_eq!(v.read::<u8>(PAGE * 9).unwrap(), 42);
    v.commit().unwrap();
}

#[test]
fn typed_offset_pointers_work_in_any_view() {
    let d = ext4_dir("ptr");
    let r = Region::create(&d.join("r.txm"), 2 * PAGE, Options::default()).unwrap();
    let mut a = r.view().unwrap();
    let mut b = r.view().unwrap();
    assert_ne!(a.base(), b.base());
    let head: Ptr<Ptr<u64>> = Ptr::new(0);
    a.run(|v| {
        let target = Ptr::<u64>::new(PAGE + 8);
        v.set(head, &target)?;
        v.set(target, &77)
    })
    .unwrap();
    b.begin_read().unwrap();
    let target = b.get(head).unwrap();
    assert_eq!(b.get(target).unwrap(), 77);
    b.commit().unwrap();
}

#[test]
fn advisory_access_tracks_a_range_without_faults() {
    let d = ext4_dir("advise");
    let r = Region::create(&d.join("r.txm"), 32 * PAGE, Options::default()).unwrap();
    let mut v = r.view().unwrap();
    v.begin().unwrap();
    v.set_page_access(0, 32 * PAGE as usize, PageAccess::Write)
        .unwrap();
    let f = v.faults();
    for i in 0..32 {
        v.write(i * PAGE, &(i as u32)).unwrap();
    }
    assert_eq!(v.faults(), f, "declared pages do not fault");
    v.commit().unwrap();
    let mut w = r.view().unwrap();
    w.begin_read().unwrap();
    w.set_page_access(0, 32 * PAGE as usize, PageAccess::Read)
        .unwrap();
    let f = w.faults();
    let sum: u32 = (0..32).map(|i| w.read::<u32>(i * PAGE).unwrap()).sum();
    assert_eq!((sum, w.faults()), ((0..32).sum(), f));
    w.commit().unwrap();
}

#[test]
fn a_store_outside_a_transaction_fails_loudly() {
    if role().as_deref() == Some("store-outside") {
        // The parent's directory: the parent removes it and its shared state.
        let d = std::path::PathBuf::from(std::env::var("TXMAP_TEST_DIR").unwrap());
        let r = Region::create(&d.join("r.txm"), PAGE, Options::default()).unwrap();
        let mut v = r.view().unwrap();
        // A page written through the accessors in a committed transaction
        // must not stay writable either.
        v.run(|v| v.write(0, &5u8)).unwrap();
        // SAFETY: deliberately wrong: a store outside a transaction.
        unsafe { std::ptr::write_volatile(v.base(), 1) };
        unreachable!("the store must not succeed");
    }
    let d = ext4_dir("outside");
    let out = child(
        "a_store_outside_a_transaction_fails_loudly",
        "store-outside",
        &[("TXMAP_TEST_DIR", d.path().display().to_string())],
    )
    .output()
    .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(out.status.signal(), Some(libc::SIGSEGV), "{stderr}");
    assert!(
        stderr.contains("store to a view outside a transaction"),
        "{stderr}"
    );
}

#[test]
fn faults_that_are_not_ours_reach_the_previous_handler() {
    if role().as_deref() == Some("foreign") {
        // The parent's directory: the parent removes it and its shared state.
        let d = std::path::PathBuf::from(std::env::var("TXMAP_TEST_DIR").unwrap());
        let r = Region::create(&d.join("r.txm"), PAGE, Options::default()).unwrap();
        let _v = r.view().unwrap(); // installs our handler
        let p = std::ptr::null_mut::<u64>().wrapping_add(16);
        // SAFETY: deliberately wrong: a wild store that is not ours.
        unsafe { std::ptr::write_volatile(p, 1) };
        unreachable!();
    }
    let d = ext4_dir("foreign");
    let out = child(
        "faults_that_are_not_ours_reach_the_previous_handler",
        "foreign",
        &[("TXMAP_TEST_DIR", d.path().display().to_string())],
    )
    .output()
    .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(out.status.signal(), Some(libc::SIGSEGV), "{stderr}");
    assert!(!stderr.contains("txmap:"), "{stderr}");
}

#[test]
fn read_only_transactions_on_current_pages_do_not_fault() {
    let d = ext4_dir("rofast");
    let r = Region::create(&d.join("r.txm"), 8 * PAGE, Options::default()).unwrap();
    let mut v = r.view().unwrap();
    v.run_with(TxnOptions::READ_ONLY, |v| v.read::<u64>(0))
        .unwrap();
    let f = v.faults();
    for _ in 0..100 {
        v.run_with(TxnOptions::READ_ONLY, |v| v.read::<u64>(0))
            .unwrap();
    }
    assert_eq!(v.faults(), f);
}

#[test]
fn a_forked_child_cannot_use_its_parents_handles() {
    let d = ext4_dir("fork");
    let p = d.join("r.txm");
    let r = Region::create(&p, PAGE, Options::default()).unwrap();
    let mut v = r.view().unwrap();
    v.run(|v| v.write(0, &1u64)).unwrap();
    // Fork in the middle of a transaction: the child must not disturb it.
    v.begin().unwrap();
    v.write(0, &2u64).unwrap();
    // SAFETY: the child only makes calls that fail cleanly, then _exits.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        let ok = matches!(v.commit(), Err(Error::ForkedChild { .. }))
            && r.view().is_err()
            && r.checkpoint().is_err();
        drop(v); // must not roll back the parent's transaction
        // SAFETY: leave without running destructors (they belong to the parent).
        unsafe { libc::_exit(if ok { 0 } else { 1 }) };
    }
    let mut status = 0;
    // SAFETY: waiting for our own child.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "child could use the parent's handles"
    );
    assert_eq!(
        v.read::<u64>(0).unwrap(),
        2,
        "the child changed the parent's transaction"
    );
    // Dropping the inherited view must not release the parent's slot: its
    // snapshot stays registered (else pruning takes versions it reads).
    let live = r.stats().snapshots;
    assert_eq!(
        live.iter().map(|s| s.pid).collect::<Vec<_>>(),
        vec![std::process::id()],
        "the child unregistered the parent's snapshot"
    );
    v.commit().unwrap();
    v.begin_read().unwrap();
    assert_eq!(v.read::<u64>(0).unwrap(), 2);
    v.commit().unwrap();
}

#[test]
fn a_store_through_an_inherited_view_in_a_forked_child_fails_loudly() {
    let d = ext4_dir("forkstore");
    let r = Region::create(&d.join("r.txm"), PAGE, Options::default()).unwrap();
    let mut v = r.view().unwrap();
    v.begin().unwrap();
    v.write(0, &2u64).unwrap(); // the page is writable in the parent now
    let mut fds = [0; 2];
    // SAFETY: a pipe for the child's stderr.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    let (rd, wr) = (fds[0], fds[1]);
    // SAFETY: the child stores once (which must kill it) and never returns.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        // SAFETY: redirect stderr to the pipe, then the deliberate store.
        unsafe {
            libc::dup2(wr, 2);
            std::ptr::write_volatile(v.base() as *mut u64, 99);
            libc::_exit(0);
        }
    }
    // SAFETY: our own descriptors and child.
    let (status, text) = unsafe {
        libc::close(wr);
        let mut status = 0;
        libc::waitpid(pid, &mut status, 0);
        let mut buf = [0u8; 512];
        let n = libc::read(rd, buf.as_mut_ptr().cast(), buf.len());
        (
            status,
            String::from_utf8_lossy(&buf[..n.max(0) as usize]).into_owned(),
        )
    };
    assert!(
        libc::WIFSIGNALED(status) && libc::WTERMSIG(status) == libc::SIGSEGV,
        "{text}"
    );
    assert!(text.contains("inherited through fork"), "{text}");
    assert_eq!(
        v.read::<u64>(0).unwrap(),
        2,
        "the child's store reached the parent"
    );
    v.commit().unwrap();
}

#[test]
fn a_view_at_a_fixed_address_keeps_that_address() {
    let d = ext4_dir("fixed");
    let r = Region::create(&d.join("r.txm"), 4 * PAGE, Options::default()).unwrap();
    // An address range known to be free once the probe is dropped; other
    // tests' threads reserve address space too, so it may be taken again
    // before we map it: then try another.
    let (free, mut v) = (0..20)
        .find_map(|_| {
            let probe = r.view().unwrap();
            let free = probe.base() as usize;
            drop(probe);
            r.view_at(free).ok().map(|v| (free, v))
        })
        .expect("a free address range");
    assert_eq!(v.base() as usize, free);
    v.run(|v| v.write(PAGE, &5u32)).unwrap();
    let e = r.view_at(free).err().expect("the address is taken");
    assert!(e.to_string().contains("not free"), "{e}");
    v.begin_read().unwrap();
    assert_eq!(v.read::<u32>(PAGE).unwrap(), 5);
    v.commit().unwrap();
}

#[test]
fn a_view_opened_after_another_closed_takes_its_memory_but_none_of_its_state() {
    let d = ext4_dir("pool");
    let r = Region::create(&d.join("r.txm"), 8 * PAGE, Options::default()).unwrap();
    let mut w = r.view().unwrap();
    let mut a = r.view().unwrap();
    let a_base = a.base();
    // Pages 0..4 become valid and readable at A's user address; page 5
    // holds a store that was rolled back.
    a.begin().unwrap();
    for p in 0..4 {
        // SAFETY: inside a transaction, within the region.
        unsafe { a_base.add((p * PAGE) as usize).write_volatile(1) };
    }
    a.commit().unwrap();
    a.begin().unwrap();
    // SAFETY: as above; rolled back.
    unsafe { a_base.add((5 * PAGE) as usize).write_volatile(9) };
    a.rollback();
    drop(a);
    w.run(|w| {
        for p in 0..4 {
            w.write(p * PAGE, &2u8)?;
        }
        Ok(())
    })
    .unwrap();

    let mut b = r.view().unwrap();
    assert_eq!(
        b.base(),
        a_base,
        "the new view reuses the closed one's memory"
    );
    assert_eq!(b.faults(), 0);
    b.begin().unwrap();
    for p in 0..4 {
        // SAFETY: inside a transaction, within the region.
        let x = unsafe { a_base.add((p * PAGE) as usize).read_volatile() };
        assert_eq!(x, 2, "page {p} shows the latest commit, not A's copy");
    }
    // SAFETY: as above.
    let x = unsafe { a_base.add((5 * PAGE) as usize).read_volatile() };
    assert_eq!(x, 0, "A's rolled-back store is gone");
    assert_eq!(b.faults(), 5, "every first touch was caught again");
    // The reads were tracked: a commit to a page B read makes B conflict.
    w.run(|w| w.write(0, &3u8)).unwrap();
    b.write(7 * PAGE, &1u8).unwrap();
    assert!(matches!(b.commit(), Err(Error::Conflict)));
    drop(b);

    // A closed view's address is free for a view at that address.
    let mut c = r.view_at(a_base as usize).unwrap();
    assert_eq!(c.base(), a_base);
    c.begin_read().unwrap();
    assert_eq!(c.read::<u8>(0).unwrap(), 3);
    c.commit().unwrap();
}

#[test]
fn close_checkpoints_and_reports_success() {
    let d = ext4_dir("close");
    let p = d.join("r.txm");
    let r = Region::create(&p, 2 * PAGE, Options::default()).unwrap();
    r.view().unwrap().run(|v| v.write(PAGE, &9u64)).unwrap();
    assert!(r.stats().log_bytes > 0);
    r.close().unwrap();
    let r = Region::open(&p, Options::default()).unwrap();
    let s = r.stats();
    assert_eq!(
        (s.recovered_commits, s.log_bytes, s.checkpoint_seq),
        (0, 0, 1),
        "a closed region needs no recovery"
    );
    let mut v = r.view().unwrap();
    v.begin_read().unwrap();
    assert_eq!(v.read::<u64>(PAGE).unwrap(), 9);
    v.commit().unwrap();
}

#[test]
fn a_view_keeps_working_after_a_transaction_that_wrote_many_pages() {
    let d = ext4_dir("bigtxn");
    let pages = 5000;
    let r = Region::create(&d.join("r.txm"), pages * PAGE, Options::default()).unwrap();
    let mut v = r.view().unwrap();
    v.run(|v| (0..pages).try_for_each(|p| v.write(p * PAGE, &(p + 1))))
        .unwrap();
    // The twins of that transaction were given back; aborting needs new ones,
    // beyond the 64 prepared at open too.
    v.begin().unwrap();
    for p in 0..100 {
        v.write(p * PAGE, &0u64).unwrap();
    }
    v.abort().unwrap();
    for p in 0..100 {
        assert_eq!(
            v.read::<u64>(p * PAGE).unwrap(),
            p + 1,
            "page {p} restored from its twin"
        );
    }
    assert!(matches!(v.commit(), Err(Error::Aborted)));
}

#[test]
fn checkpoints_triggered_by_commits_reset_the_log() {
    let d = ext4_dir("auto-checkpoint");
    let opts = Options {
        checkpoint_bytes: 1, // a checkpoint after every commit
        ..Options::default()
    };
    let r = Region::create(&d.join("r.txm"), PAGE, opts).unwrap();
    let mut v = r.view().unwrap();
    for i in 1..=20u64 {
        v.run(|v| v.write(0, &i)).unwrap();
        let st = r.stats();
        // The committer's own snapshot must not hold its checkpoint back.
        assert_eq!(st.checkpoint_seq, i, "{st:?}");
        assert_eq!(st.log_bytes, 0, "the log was not reset: {st:?}");
    }
}

/// Two opens of one region share its state as two processes do. When one
/// grows the region and a checkpoint moves the new pages to the file, a view
/// of the other must read them from the file (its image of the file must
/// follow the growth; it once did not, and the fault handler crashed).
#[test]
fn pages_grown_by_another_opener_read_back_after_a_checkpoint() {
    let d = ext4_dir("grown-by-other");
    let path = d.join("r.txm");
    let a = Region::create(&path, 4096, Options::default()).unwrap();
    let b = Region::open(&path, Options::default()).unwrap();
    assert!(
        !b.stats().opened_alone,
        "the second open must join the first"
    );
    let mut vb = b.view().unwrap();
    vb.grow(64 * 4096).unwrap();
    vb.run(|v| {
        for p in 1..64u64 {
            v.write(p * 4096, &(p * 7))?;
        }
        Ok(())
    })
    .unwrap();
    drop(vb);
    b.checkpoint().unwrap();
    assert_eq!(
        b.stats().version_pages,
        0,
        "the checkpoint must leave the pages in the file only"
    );
    let mut va = a.view().unwrap();
    va.begin_read().unwrap();
    for p in 1..64u64 {
        assert_eq!(va.read::<u64>(p * 4096).unwrap(), p * 7, "page {p}");
    }
    va.commit().unwrap();
}

/// Closing a region that another opener keeps open does not checkpoint
/// (xShutdown in a busy region returns at once); the last one out does, and
/// leaves an empty log.
#[test]
fn only_the_last_opener_to_close_checkpoints() {
    let d = ext4_dir("lastout");
    let p = d.join("r.txm");
    let first = Region::create(&p, 4 * PAGE, Options::default()).unwrap();
    let second = Region::open(&p, Options::default()).unwrap();
    let mut v = second.view().unwrap();
    v.run(|v| v.write(0, &5u64)).unwrap();
    drop(v);
    drop(second);
    let s = first.stats();
    assert_eq!(s.commit_seq, 1);
    assert!(
        s.checkpoint_seq < 1 && s.log_bytes > 0,
        "an opener that was not the last checkpointed as it closed: {s:?}"
    );
    drop(first);
    // The commit is in the region file itself, not only in the log.
    let bytes = std::fs::read(&p).unwrap();
    let at = txmap::wal::format::HEADER_BYTES as usize;
    assert_eq!(
        u64::from_ne_bytes(bytes[at..at + 8].try_into().unwrap()),
        5,
        "the last one out did not checkpoint"
    );
}
