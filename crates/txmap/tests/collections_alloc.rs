//! The transactional heap: aborted allocations vanish, frees are durable and
//! zero the block, a free conflicts with a concurrent reader, the region
//! grows for the heap, arenas keep threads from conflicting, freed blocks
//! are reused (the space bound).
mod common;

use common::*;
use txmap::collections::alloc::{self, HEAP_START};
use txmap::{Error, Options, Region};

fn region(d: &TestDir) -> Region {
    Region::create(&d.join("a.txm"), 64 << 10, Options::default()).unwrap()
}

#[test]
fn aborted_allocations_vanish_and_committed_ones_stay() {
    let d = tmpfs_dir("alloc-abort");
    let r = region(&d);
    let mut v = r.view().unwrap();
    alloc::set_thread_arena(0);
    v.run(alloc::init).unwrap();
    v.begin_read().unwrap();
    let empty = alloc::check(&v).unwrap();
    v.commit().unwrap();
    assert_eq!(empty.used_blocks, 0);
    v.begin().unwrap();
    let a = alloc::alloc(&mut v, 100).unwrap();
    v.write(a, &7u64).unwrap();
    v.abort().unwrap();
    assert!(matches!(v.commit(), Err(Error::Aborted)));
    v.begin_read().unwrap();
    assert_eq!(
        alloc::check(&v).unwrap(),
        empty,
        "aborted allocation left a trace"
    );
    v.commit().unwrap();
    let b = v.run(|v| alloc::alloc(v, 100)).unwrap();
    assert_eq!(b, a, "the same block is handed out again");
    assert!(b >= HEAP_START + 16);
    v.begin_read().unwrap();
    let rep = alloc::check(&v).unwrap();
    assert_eq!((rep.used_blocks, rep.used_bytes), (1, 128));
    assert!(alloc::usable_size(&v, b).unwrap() >= 100);
    v.commit().unwrap();
}

#[test]
fn free_zeroes_is_durable_and_rejects_double_free() {
    let d = ext4_dir("alloc-free");
    let p = d.join("a.txm");
    let a = {
        let r = Region::create(&p, 64 << 10, Options::default()).unwrap();
        let mut v = r.view().unwrap();
        let a = v
            .run(|v| {
                let a = alloc::alloc(v, 5000)?;
                v.slice_mut(a, 5000)?.fill(0xAB);
                Ok(a)
            })
            .unwrap();
        v.run(|v| alloc::free(v, a)).unwrap();
        a
    };
    let r = Region::open(&p, Options::default()).unwrap();
    let mut v = r.view().unwrap();
    v.begin_read().unwrap();
    assert!(
        v.slice(a, 5000).unwrap().iter().all(|&b| b == 0),
        "freed block is zero"
    );
    let rep = alloc::check(&v).unwrap();
    assert_eq!(rep.used_blocks, 0);
    v.commit().unwrap();
    v.begin().unwrap();
    assert!(matches!(alloc::free(&mut v, a), Err(Error::Invalid(_))));
    assert!(matches!(alloc::free(&mut v, 12345), Err(Error::Invalid(_))));
    assert!(matches!(
        alloc::alloc(&mut v, u64::MAX),
        Err(Error::Invalid(_))
    ));
    v.rollback();
}

#[test]
fn a_free_conflicts_with_a_concurrent_reader_of_the_block() {
    let d = tmpfs_dir("alloc-conflict");
    let r = region(&d);
    let (mut v1, mut v2) = (r.view().unwrap(), r.view().unwrap());
    let a = v1
        .run(|v| {
            let a = alloc::alloc(v, 64)?;
            v.write(a, &42u64)?;
            Ok(a)
        })
        .unwrap();
    // v2 reads the block and writes elsewhere; v1 frees it and commits first.
    v2.begin().unwrap();
    assert_eq!(v2.read::<u64>(a).unwrap(), 42);
    let other = v2.len() as u64 - 8;
    v2.write(other, &1u64).unwrap();
    v1.run(|v| alloc::free(v, a)).unwrap();
    assert_eq!(
        v2.read::<u64>(a).unwrap(),
        42,
        "snapshot still sees the block"
    );
    assert!(matches!(v2.commit(), Err(Error::Conflict)));
    v2.begin_read().unwrap();
    assert_eq!(v2.read::<u64>(a).unwrap(), 0, "a stale pointer reads zeros");
    v2.commit().unwrap();
}

#[test]
fn heap_grows_the_region_and_arenas_do_not_conflict() {
    let d = tmpfs_dir("alloc-grow");
    let r = region(&d);
    let (mut v1, mut v2) = (r.view().unwrap(), r.view().unwrap());
    v1.run(alloc::init).unwrap();
    // Both arenas take their first chunk first (that touches the shared top).
    for (i, v) in [&mut v1, &mut v2].into_iter().enumerate() {
        alloc::set_thread_arena(i as u64);
        v.run(|v| alloc::alloc(v, 8)).unwrap();
    }
    alloc::set_thread_arena(0);
    v1.begin().unwrap();
    let a = alloc::alloc(&mut v1, 100).unwrap();
    alloc::set_thread_arena(1);
    v2.begin().unwrap();
    let b = alloc::alloc(&mut v2, 100).unwrap();
    assert_ne!(a, b);
    v1.commit().unwrap();
    v2.commit().expect("different arenas: no conflict");
    // A large block makes the region grow.
    let before = r.size();
    let big = v1.run(|v| alloc::alloc(v, 8 << 20)).unwrap();
    assert!(r.size() >= big + (8 << 20) && r.size() > before);
    v1.begin_read().unwrap();
    let rep = alloc::check(&v1).unwrap();
    assert_eq!(rep.used_blocks, 5);
    v1.commit().unwrap();
}

#[test]
fn root_object_is_allocated_once_and_survives_reopen() {
    let d = ext4_dir("alloc-root");
    let p = d.join("a.txm");
    let root = {
        let r = Region::create(&p, 64 << 10, Options::default()).unwrap();
        let mut v = r.view().unwrap();
        v.run(|v| {
            let root = alloc::root(v, 24)?;
            v.write(root, &99u64)?;
            Ok(root)
        })
        .unwrap()
    };
    let r = Region::open(&p, Options::default()).unwrap();
    let mut v = r.view().unwrap();
    let again = v.run(|v| alloc::root(v, 16)).unwrap();
    assert_eq!(again, root);
    v.begin().unwrap();
    assert_eq!(v.read::<u64>(root).unwrap(), 99);
    assert!(matches!(alloc::root(&mut v, 4096), Err(Error::Invalid(_))));
    v.rollback();
}

#[test]
fn a_region_with_foreign_data_is_refused() {
    let d = tmpfs_dir("alloc-foreign");
    let r = region(&d);
    let mut v = r.view().unwrap();
    v.run(|v| v.write(100, &1u64)).unwrap();
    v.begin().unwrap();
    assert!(matches!(alloc::init(&mut v), Err(Error::Invalid(_))));
    assert!(matches!(alloc::alloc(&mut v, 8), Err(Error::Invalid(_))));
    v.rollback();
}

/// The space bound of docs/COLLECTIONS.md: an arena takes a new block of a
/// class only when its own free list of that class is empty, so repeating
/// an allocation pattern reuses the blocks of the first round and the heap
/// top stops moving — for one thread, and for a producer thread and a
/// consumer thread (which frees what the other allocated) pinned to one arena.
#[test]
fn freed_blocks_are_reused_and_the_heap_stops_growing() {
    let d = tmpfs_dir("alloc-reuse");
    let r = region(&d);
    let top = |r: &Region| {
        let mut v = r.view().unwrap();
        v.begin_read().unwrap();
        let h = alloc::check(&v).unwrap();
        v.commit().unwrap();
        assert_eq!(h.used_blocks, 0);
        h.top
    };
    // Three sizes in turn, 40 blocks at a time, all freed each round.
    let sizes = [100u64, 3000, 20_000];
    let mut v = r.view().unwrap();
    alloc::set_thread_arena(3);
    let mut tops = Vec::new();
    for round in 0..12 {
        let size = sizes[round % 3];
        let blocks: Vec<u64> = v
            .run(|v| (0..40).map(|_| alloc::alloc(v, size)).collect())
            .unwrap();
        v.run(|v| blocks.iter().try_for_each(|&b| alloc::free(v, b)))
            .unwrap();
        tops.push(top(&r));
    }
    assert!(tops[3..].iter().all(|&t| t == tops[2]), "{tops:?}");
    // Producer and consumer on one arena: the consumer's frees feed the
    // producer's next allocations.
    let (tx, rx) = std::sync::mpsc::channel::<Vec<u64>>();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let consumer = {
        let r = r.clone();
        std::thread::spawn(move || {
            alloc::set_thread_arena(5);
            let mut v = r.view().unwrap();
            for blocks in rx {
                v.run(|v| blocks.iter().try_for_each(|&b| alloc::free(v, b)))
                    .unwrap();
                done_tx.send(()).unwrap();
            }
        })
    };
    alloc::set_thread_arena(5);
    let mut tops = Vec::new();
    for _ in 0..8 {
        let blocks: Vec<u64> = v
            .run(|v| (0..40).map(|_| alloc::alloc(v, 500)).collect())
            .unwrap();
        tx.send(blocks).unwrap();
        done_rx.recv().unwrap();
        tops.push(top(&r));
    }
    drop(tx);
    consumer.join().unwrap();
    assert!(tops[1..].iter().all(|&t| t == tops[0]), "{tops:?}");
}
