//! The accessors (`read`, `slice`, `write`, `slice_mut`, ...) track pages in
//! software, without faults, while raw loads and stores through `base()` keep
//! being tracked by page protection. Both must give the same transactions.
mod common;

use common::*;
use txmap::{Error, Options, Region, View};

const PAGE: u64 = 4096;

fn raw(v: &View, off: u64) -> *mut u64 {
    // SAFETY (of the callers' dereferences): inside a transaction, in the region.
    unsafe { v.base().add(off as usize) as *mut u64 }
}

#[test]
fn accessors_take_no_faults_and_raw_accesses_still_do() {
    let d = ext4_dir("acc-faults");
    let r = Region::create(&d.join("r.txm"), 16 * PAGE, Options::default()).unwrap();
    let mut v = r.view().unwrap();
    let f = v.faults();
    for round in 0..3u64 {
        v.begin().unwrap();
        for p in 0..8 {
            let x: u64 = v.read(p * PAGE).unwrap();
            assert_eq!(x, round * p);
            v.write(p * PAGE, &((round + 1) * p)).unwrap();
        }
        v.commit().unwrap();
    }
    assert_eq!(v.faults(), f, "accessor reads and writes do not fault");
    v.begin().unwrap();
    // SAFETY: inside a transaction, in the region.
    let x = unsafe { raw(&v, 2 * PAGE).read_volatile() };
    assert_eq!(x, 6, "a raw load sees what the accessors committed");
    assert_eq!(v.faults(), f + 1, "a raw load of an untouched page faults");
    // SAFETY: as above.
    unsafe { raw(&v, 9 * PAGE).write_volatile(1) };
    v.commit().unwrap();
    assert_eq!(v.faults(), f + 2);
}

#[test]
fn raw_and_accessor_stores_to_one_page_commit_and_abort_together() {
    let d = ext4_dir("acc-mixed");
    let r = Region::create(&d.join("r.txm"), 4 * PAGE, Options::default()).unwrap();
    let mut v = r.view().unwrap();
    v.begin().unwrap();
    v.write(0, &1u64).unwrap();
    // SAFETY: inside a transaction, in the region.
    unsafe {
        assert_eq!(
            raw(&v, 0).read_volatile(),
            1,
            "raw load sees the accessor store"
        );
        raw(&v, 8).write_volatile(2);
    }
    assert_eq!(v.read::<u64>(8).unwrap(), 2, "accessor sees the raw store");
    v.commit().unwrap();

    v.begin().unwrap();
    // SAFETY: as above.
    unsafe { raw(&v, 8).write_volatile(20) };
    v.write(0, &10u64).unwrap();
    v.write(PAGE, &11u64).unwrap();
    v.abort().unwrap();
    assert_eq!(
        v.read::<u64>(0).unwrap(),
        1,
        "abort restores accessor stores"
    );
    // SAFETY: as above.
    assert_eq!(unsafe { raw(&v, 8).read_volatile() }, 2, "and raw ones");
    assert_eq!(v.read::<u64>(PAGE).unwrap(), 0);
    assert!(matches!(v.commit(), Err(Error::Aborted)));

    let mut w = r.view().unwrap();
    w.begin_read().unwrap();
    assert_eq!(
        (w.read::<u64>(0).unwrap(), w.read::<u64>(8).unwrap()),
        (1, 2)
    );
    w.commit().unwrap();
    drop((v, w, r));
    let r = Region::open(&d.join("r.txm"), Options::default()).unwrap();
    let mut v = r.view().unwrap();
    v.begin_read().unwrap();
    assert_eq!(
        (v.read::<u64>(0).unwrap(), v.read::<u64>(8).unwrap()),
        (1, 2)
    );
    v.commit().unwrap();
}

/// Write skew with raw loads, in views that so far used only the accessors
/// (nothing is accessible at their user address, so `begin` protects
/// nothing): the raw loads must still be in the read set. Later rounds repeat
/// it on pages that other commits changed in between (invalidated one by one).
#[test]
fn raw_loads_are_validated_in_views_that_used_accessors_before() {
    let d = ext4_dir("acc-skew");
    let r = Region::create(&d.join("r.txm"), 2 * PAGE, Options::default()).unwrap();
    let (mut a, mut b) = (r.view().unwrap(), r.view().unwrap());
    for round in 0..4 {
        a.run(|v| {
            v.write(0, &50i64)?;
            v.write(PAGE, &50i64)
        })
        .unwrap();
        b.run(|v| v.read::<i64>(0)).unwrap();
        a.begin().unwrap();
        b.begin().unwrap();
        for v in [&a, &b] {
            // SAFETY: inside a transaction, in the region.
            let sum = unsafe { raw(v, 0).read_volatile() + raw(v, PAGE).read_volatile() };
            assert_eq!(sum, 100, "round {round}");
        }
        // SAFETY: as above.
        unsafe {
            raw(&a, 0).write_volatile((-10i64) as u64);
            raw(&b, PAGE).write_volatile((-10i64) as u64);
        }
        a.commit().unwrap();
        assert!(
            matches!(b.commit(), Err(Error::Conflict)),
            "round {round}: b read x by a raw load, and a changed x"
        );
    }
}

/// The accessors keep every transaction on one snapshot, and the view picks
/// up other views' commits at its next begin without faults of its own.
#[test]
fn accessor_reads_see_one_snapshot_and_later_commits() {
    let d = ext4_dir("acc-snap");
    let r = Region::create(&d.join("r.txm"), 4 * PAGE, Options::default()).unwrap();
    let (mut a, mut b) = (r.view().unwrap(), r.view().unwrap());
    a.run(|v| v.write(PAGE, &1u64)).unwrap();
    b.begin_read().unwrap();
    assert_eq!(b.read::<u64>(PAGE).unwrap(), 1);
    a.run(|v| v.write(PAGE, &2u64)).unwrap();
    assert_eq!(b.read::<u64>(PAGE).unwrap(), 1, "same snapshot");
    b.commit().unwrap();
    let f = b.faults();
    b.begin_read().unwrap();
    assert_eq!(
        b.read::<u64>(PAGE).unwrap(),
        2,
        "the next transaction sees the commit"
    );
    b.commit().unwrap();
    assert_eq!(b.faults(), f);
}

/// A page a raw load mapped in an earlier transaction (still current, so
/// still readable at the user address) must be caught again by the next
/// serializable transaction's first raw load: `begin` re-protects the view
/// when anything is accessible there.
#[test]
fn raw_loads_of_pages_mapped_by_earlier_transactions_are_validated() {
    let d = ext4_dir("acc-mapped");
    let r = Region::create(&d.join("r.txm"), 8 * PAGE, Options::default()).unwrap();
    let (mut b, mut c) = (r.view().unwrap(), r.view().unwrap());
    for z in 1..4u64 {
        let zoff = z * PAGE;
        // Maps page z readable in b's view (a read of current data).
        b.begin().unwrap();
        // SAFETY: inside a transaction, in the region.
        let before = unsafe { raw(&b, zoff).read_volatile() };
        b.commit().unwrap();
        b.begin().unwrap();
        // SAFETY: as above.
        let seen = unsafe { raw(&b, zoff).read_volatile() };
        assert_eq!(seen, before);
        // SAFETY: as above; page 0 is b's own.
        unsafe { raw(&b, 0).write_volatile(seen + 1) };
        c.run(|v| v.write(zoff, &(before + 10))).unwrap();
        assert!(
            matches!(b.commit(), Err(Error::Conflict)),
            "page {z}: b read it by a raw load and c changed it"
        );
    }
}

/// A range accessor installs the pages of its range in runs (one read of
/// the region file per run, holes as zeros): each page must still be its
/// version at the transaction's snapshot, wherever that lives: the file
/// (written by a checkpoint), a hole never written, a version newer than
/// the file, an older version a checkpoint preserved for this snapshot, or
/// the view's own copy.
#[test]
fn a_range_accessor_installs_every_page_at_its_snapshot_from_file_holes_and_versions() {
    const N: u64 = 48;
    let d = ext4_dir("acc-range");
    let r = Region::create(&d.join("r.txm"), N * PAGE, Options::default()).unwrap();
    let mut w = r.view().unwrap();
    let word = |p: u64| match p {
        0..16 => 100 + p,
        16..24 => 200 + p,
        _ => 0,
    };
    // Pages 0..16 in the file, 16..24 committed after that checkpoint
    // (versions), the rest never written.
    for (from, to, ckpt) in [(0, 16, true), (16, 24, false)] {
        w.begin().unwrap();
        for p in from..to {
            w.write(p * PAGE + 8, &word(p)).unwrap();
        }
        w.commit().unwrap();
        if ckpt {
            r.checkpoint().unwrap();
        }
    }
    let mut v = r.view().unwrap();
    v.begin().unwrap();
    assert_eq!(
        v.read::<u64>(5 * PAGE + 8).unwrap(),
        105,
        "held before the range"
    );
    // Later commits, checkpointed, that this snapshot must not see: a page
    // of the file, a version and a hole.
    w.begin().unwrap();
    for p in [3, 20, 30] {
        w.write(p * PAGE + 8, &999u64).unwrap();
    }
    w.commit().unwrap();
    r.checkpoint().unwrap();
    let check = |bytes: &[u8], what: &str| {
        for (p, page) in bytes.chunks(PAGE as usize).enumerate() {
            let mut want = vec![0u8; PAGE as usize];
            want[8..16].copy_from_slice(&word(p as u64).to_le_bytes());
            assert!(
                page == &want[..],
                "{what}: page {p} is not its snapshot version"
            );
        }
    };
    check(v.slice(0, (N * PAGE) as usize).unwrap(), "read");
    let all = v.slice_mut(0, (N * PAGE) as usize).unwrap();
    check(all, "write");
    all[40 * PAGE as usize] = 7;
    assert!(
        matches!(v.commit(), Err(Error::Conflict)),
        "3, 20 and 30 changed"
    );
    // A fresh snapshot reads the later commits the same way.
    v.begin().unwrap();
    let all = v.slice_mut(0, (N * PAGE) as usize).unwrap();
    for p in 0..N {
        let at = (p * PAGE + 8) as usize;
        let x = u64::from_le_bytes(all[at..at + 8].try_into().unwrap());
        let want = if [3, 20, 30].contains(&p) {
            999
        } else {
            word(p)
        };
        assert_eq!(x, want, "page {p}");
    }
    v.commit().unwrap();
}
