//! The linear hash table: model-based test with aborts, splits across
//! levels and merges back, threads, SIGKILL, splits and merges against
//! stale inserts under snapshot isolation.
mod collections_common;
mod common;

use collections_common as coll;
use common::*;
use txmap::collections::LinearHash;
use txmap::collections::lhash::{HashReport, hash};
use txmap::{Error, Region, TxnOptions, View};

#[test]
fn model_random_operations_with_aborts() {
    coll::model_test(|v| LinearHash::create(v, 1), 64);
}

#[test]
fn values_larger_than_a_page_and_long_keys() {
    coll::large_values(LinearHash::create_default);
}

#[test]
fn buckets_split_in_order_across_levels() {
    let d = coll::bulk_test(|v| LinearHash::create(v, 2), 5000);
    // 5000 entries of up to ~300 bytes need hundreds of buckets: several levels.
    let level: u64 = d[0]
        .split("level ")
        .nth(1)
        .unwrap()
        .split(',')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(level >= 6, "{}", d[0]);
    // Deleting every key merged the buckets back: the last delete empties
    // its bucket, and empty buckets always fit together in half a page
    // (all of them in one call here: fewer than MAX_MERGES buckets).
    let buckets: u64 = d[0].split(' ').next().unwrap().parse().unwrap();
    assert!(buckets < txmap::collections::lhash::MAX_MERGES, "{}", d[0]);
    assert!(
        d[1].starts_with("2 buckets (level 0, split pointer 0), 0 overflow pages"),
        "{}",
        d[1]
    );
}

#[test]
fn threads_insert_and_search_at_once() {
    coll::threads_test(
        "lh-threads",
        LinearHash::create_default,
        4,
        400,
        TxnOptions::default(),
    );
}

#[test]
fn threads_insert_under_snapshot_isolation() {
    coll::threads_test(
        "lh-threads-si",
        LinearHash::create_default,
        4,
        400,
        TxnOptions::SNAPSHOT,
    );
}

#[test]
fn sigkill_writers_then_check() {
    if role().is_some() {
        return coll::crash_child(LinearHash::open);
    }
    coll::crash_test(
        "sigkill_writers_then_check",
        "lh-crash",
        LinearHash::create_default,
        LinearHash::open,
        10,
    );
}

#[test]
fn hash_is_stable() {
    // Part of the on-disk format: FNV-1a then the 64-bit finaliser,
    // values computed independently (Python) and fixed here.
    assert_eq!(hash(b""), 0xefd0_1f60_ba99_2926);
    assert_eq!(hash(b"a"), 0x82a2_a958_a9be_ce5b);
    assert_eq!(hash(b"txmap"), 0x23cc_5aec_94b7_0b77);
}

#[test]
fn deferred_split_runs_in_its_own_transaction() {
    let d = tmpfs_dir("lh-deferred");
    let r = Region::create(&d.join("h.txm"), 1 << 20, coll::opts()).unwrap();
    let mut v = r.view().unwrap();
    let t = v.run(|v| LinearHash::create(v, 1)).unwrap();
    let mut splits = 0;
    for i in 0..400u32 {
        let (_, wants) = v.run(|v| t.put_deferred(v, &coll::key(i), b"v")).unwrap();
        if wants {
            v.run(|v| t.split_step(v)).unwrap();
            splits += 1;
        }
    }
    v.begin_read().unwrap();
    let rep = t.check(&v).unwrap();
    v.commit().unwrap();
    assert_eq!(rep.entries, 400);
    assert_eq!(rep.buckets, 1 + splits);
    assert!(splits >= 8);
}

/// Deletes with the merge committed separately (`delete_deferred`, then
/// `merge_step` in its own transaction when asked): every step checks, and
/// deleting everything returns to `n0` buckets.
#[test]
fn deferred_merge_runs_in_its_own_transaction() {
    let d = tmpfs_dir("lh-deferred-merge");
    let r = Region::create(&d.join("h.txm"), 1 << 20, coll::opts()).unwrap();
    let mut v = r.view().unwrap();
    let t = v.run(|v| LinearHash::create(v, 1)).unwrap();
    for i in 0..400u32 {
        v.run(|v| t.put(v, &coll::key(i), b"v")).unwrap();
    }
    let report = |v: &mut View| {
        v.begin_read().unwrap();
        let rep = t.check(v).unwrap();
        v.commit().unwrap();
        rep
    };
    // ~43 KB of entries do not fit in one page: some insert overflowed and
    // split, so there is something to merge.
    let full = report(&mut v).buckets;
    assert!(full >= 2, "{full} buckets");
    let mut merges = 0;
    for i in (0..400u32).rev() {
        let (had, wants) = v.run(|v| t.delete_deferred(v, &coll::key(i))).unwrap();
        assert!(had);
        let before = report(&mut v);
        assert_eq!(before.entries, i as u64);
        if wants {
            merges += v.run(|v| t.merge_step(v)).unwrap();
            assert_eq!(report(&mut v).entries, i as u64);
        }
    }
    assert_eq!(report(&mut v).buckets, 1);
    assert_eq!(merges, full - 1);
}

/// Keys whose hash has this parity: bucket 0 or 1 of a two-bucket table.
fn keys_with_parity(parity: u64) -> impl Iterator<Item = Vec<u8>> {
    (0u32..)
        .map(coll::key)
        .filter(move |k| hash(k) % 2 == parity)
}

/// `v2` inserted `k` in a transaction begun before a split or merge that
/// routes `k` elsewhere: its commit must conflict; retried, the insert
/// commits, the table checks and holds it. Returns the table's report.
fn stale_insert_conflicts(
    v2: &mut View,
    t: LinearHash,
    k: &[u8],
    opts: TxnOptions,
    what: &str,
) -> HashReport {
    t.put_deferred(v2, k, b"late").unwrap();
    assert!(
        matches!(v2.commit(), Err(Error::Conflict)),
        "{what}, {opts:?}: a stale insert committed"
    );
    v2.run_with(opts, |v| t.put_deferred(v, k, b"retried"))
        .unwrap();
    v2.begin_read().unwrap();
    let rep = t.check(v2).unwrap();
    assert_eq!(t.get(v2, k).unwrap().as_deref(), Some(&b"retried"[..]));
    v2.commit().unwrap();
    rep
}

/// A split that moves no entry still changes the split bucket's page (its
/// depth), so an insert into that bucket from a snapshot taken before the
/// split conflicts with it, under snapshot isolation too. (Found by
/// `txmap-bench --only aborts`: the insert landed in the old bucket.)
#[test]
fn a_split_conflicts_with_a_stale_insert_even_under_snapshot_isolation() {
    let d = tmpfs_dir("lh-si-split");
    let r = Region::create(&d.join("h.txm"), 1 << 20, coll::opts()).unwrap();
    let (mut v1, mut v2) = (r.view().unwrap(), r.view().unwrap());
    let t = v1.run(|v| LinearHash::create(v, 1)).unwrap();
    // Bucket 0 holds only keys that stay in it when it splits.
    v1.run(|v| {
        keys_with_parity(0)
            .take(5)
            .try_for_each(|k| t.put_deferred(v, &k, b"x").map(drop))
    })
    .unwrap();
    for opts in [TxnOptions::SNAPSHOT, TxnOptions::default()] {
        v2.begin_with(opts).unwrap();
        let k = keys_with_parity(1)
            .nth(if opts == TxnOptions::SNAPSHOT { 0 } else { 1 })
            .unwrap();
        v1.run(|v| t.split_step(v)).unwrap(); // moves nothing out of the bucket it splits
        // Stale: into the split bucket.
        stale_insert_conflicts(&mut v2, t, &k, opts, "split");
    }
}

/// A merge frees the last bucket's page and changes its buddy's first page
/// (its depth drops), so an insert routed by a snapshot taken before the
/// merge into either bucket conflicts with it, under snapshot isolation too;
/// retried, it lands in the merged bucket.
#[test]
fn a_merge_conflicts_with_a_stale_insert_even_under_snapshot_isolation() {
    let d = tmpfs_dir("lh-si-merge");
    let r = Region::create(&d.join("h.txm"), 1 << 20, coll::opts()).unwrap();
    let (mut v1, mut v2) = (r.view().unwrap(), r.view().unwrap());
    let t = v1.run(|v| LinearHash::create(v, 1)).unwrap();
    let mut n = 0;
    for opts in [TxnOptions::SNAPSHOT, TxnOptions::default()] {
        for bucket in [0, 1] {
            // Two buckets (level 1), a few keys in each.
            v1.run(|v| t.split_step(v)).unwrap();
            v1.begin_read().unwrap();
            assert_eq!(t.check(&v1).unwrap().buckets, 2);
            v1.commit().unwrap();
            v2.begin_with(opts).unwrap();
            assert_eq!(v1.run(|v| t.merge_step(v)).unwrap(), 1);
            let k = keys_with_parity(bucket).nth(n).unwrap();
            n += 1;
            let rep = stale_insert_conflicts(&mut v2, t, &k, opts, "merge");
            assert_eq!((rep.buckets, rep.entries), (1, n as u64));
        }
    }
}

/// The thresholds: a delete asks for a merge only when it leaves its
/// bucket one page under a quarter full and the table has more than `n0`
/// buckets; `merge_step` merges only while the last bucket and its buddy
/// fit in half a page. Entries here take 8 + key (5..195) + 500 bytes, so
/// 4 of them exceed half a page (2040 bytes), 2 exceed a quarter (1020)
/// and 1 does not.
#[test]
fn merges_follow_the_fill_thresholds() {
    let d = tmpfs_dir("lh-merge-fill");
    let r = Region::create(&d.join("h.txm"), 1 << 20, coll::opts()).unwrap();
    let mut v = r.view().unwrap();
    let t = v.run(|v| LinearHash::create(v, 1)).unwrap();
    v.run(|v| t.split_step(v)).unwrap(); // buckets 0 and 1
    let ks: Vec<Vec<u8>> = keys_with_parity(1).take(4).collect();
    let val = vec![7u8; 500];
    for k in &ks {
        assert_eq!(
            v.run(|v| t.put_deferred(v, k, &val)).unwrap(),
            (false, false)
        );
    }
    let state = |v: &mut txmap::View| {
        v.begin_read().unwrap();
        let rep = t.check(v).unwrap();
        v.commit().unwrap();
        (rep.buckets, rep.entries)
    };
    assert_eq!(
        v.run(|v| t.merge_step(v)).unwrap(),
        0,
        "4 entries: over half a page"
    );
    assert_eq!(state(&mut v), (2, 4));
    for k in &ks[..2] {
        // 3, then 2 entries left: over a quarter of a page.
        assert_eq!(v.run(|v| t.delete_deferred(v, k)).unwrap(), (true, false));
    }
    assert_eq!(state(&mut v), (2, 2));
    assert_eq!(
        v.run(|v| t.merge_step(v)).unwrap(),
        1,
        "2 entries fit in half a page"
    );
    assert_eq!(state(&mut v), (1, 2));
    // At n0 buckets a sparse bucket asks for nothing, and nothing merges.
    assert_eq!(
        v.run(|v| t.delete_deferred(v, &ks[2])).unwrap(),
        (true, false)
    );
    assert_eq!(v.run(|v| t.merge_step(v)).unwrap(), 0);
    v.begin_read().unwrap();
    assert_eq!(t.get(&v, &ks[3]).unwrap(), Some(val.clone()));
    assert_eq!(t.check(&v).unwrap().entries, 1);
    v.commit().unwrap();
    // Two buckets again, one entry each side: a delete that leaves one
    // small entry asks for the merge, and `delete` runs it.
    v.run(|v| t.split_step(v)).unwrap();
    let other = keys_with_parity(0).next().unwrap();
    v.run(|v| t.put(v, &other, b"x")).unwrap();
    v.run(|v| t.put(v, &ks[0], b"y")).unwrap();
    assert_eq!(state(&mut v), (2, 3));
    assert_eq!(
        v.run(|v| t.delete_deferred(v, &ks[0])).unwrap(),
        (true, true)
    );
    v.run(|v| t.put(v, &ks[0], b"y")).unwrap();
    assert!(v.run(|v| t.delete(v, &ks[0])).unwrap());
    assert_eq!(state(&mut v), (1, 2));
}

#[test]
fn inserts_and_same_length_updates_in_place_log_small_records_and_read_back() {
    let d = ext4_dir("lh-in-place");
    let r = Region::create(&d.join("r.txm"), 1 << 20, coll::opts()).unwrap();
    let mut v = r.view().unwrap();
    let t = v.run(|v| LinearHash::create(v, 1)).unwrap();
    // 60 entries of 40 bytes: one bucket page about 60 % full, no split.
    let key = |i: u32| format!("k{i:04}").into_bytes();
    let val = [7u8; 27];
    v.run(|v| {
        for i in 1..=60u32 {
            t.put(v, &key(i), &val)?;
        }
        Ok(())
    })
    .unwrap();
    assert_eq!(v.run(|v| t.check(v)).unwrap().buckets, 1);
    let logged = |v: &mut View, k: &[u8], val: &[u8], had: bool| {
        let before = r.stats().log_bytes;
        assert_eq!(v.run(|v| t.put(v, k, val)).unwrap(), had);
        r.stats().log_bytes - before
    };
    // Only the new cell (or value) and the count differ from the snapshot.
    let n = logged(&mut v, &key(0), b"new value", false);
    assert!(n < 256, "a new key logged {n} bytes");
    let n = logged(&mut v, &key(30), &[9u8; 27], true);
    assert!(n < 256, "a same-length update logged {n} bytes");
    // A longer value takes the rewriting path and is still right.
    logged(&mut v, &key(31), &[5u8; 100], true);
    v.begin_read().unwrap();
    let rep = t.check(&v).unwrap();
    assert_eq!((rep.entries, rep.buckets), (61, 1));
    for i in 1..=60u32 {
        let want: &[u8] = match i {
            30 => &[9u8; 27],
            31 => &[5u8; 100],
            _ => &val,
        };
        assert_eq!(
            t.get(&v, &key(i)).unwrap().as_deref(),
            Some(want),
            "key {i}"
        );
    }
    assert_eq!(
        t.get(&v, &key(0)).unwrap().as_deref(),
        Some(&b"new value"[..])
    );
    v.commit().unwrap();
}

/// A delete from a one-page bucket moves the later cells down over the
/// key's, in place: first, middle, last and block-valued keys go, the block
/// goes back to the heap, the rest read back, and the table checks clean.
#[test]
fn deletes_from_a_one_page_bucket_close_the_gap_and_free_value_blocks() {
    use txmap::collections::alloc;
    let d = ext4_dir("lh-delete-in-place");
    let r = Region::create(&d.join("r.txm"), 1 << 20, coll::opts()).unwrap();
    let mut v = r.view().unwrap();
    let t = v.run(|v| LinearHash::create(v, 1)).unwrap();
    let key = |i: u32| format!("k{i:04}").into_bytes();
    let val = |i: u32| vec![i as u8; 20 + i as usize % 7];
    let big = vec![0xb1u8; 2000]; // longer than INLINE_MAX: its own block
    v.run(|v| {
        for i in 0..50u32 {
            t.put(v, &key(i), &val(i))?;
        }
        t.put(v, b"big", &big)?;
        t.put(v, &key(50), &val(50))
    })
    .unwrap();
    let blocks = |v: &mut View| v.run(|v| Ok(alloc::check(v)?.used_blocks)).unwrap();
    let before = blocks(&mut v);
    assert_eq!(v.run(|v| t.check(v)).unwrap().buckets, 1);
    v.run(|v| {
        for k in [key(0), key(25), b"big".to_vec(), key(50)] {
            assert!(t.delete(v, &k)?, "{k:?} was there");
        }
        assert!(!t.delete(v, &key(25))?, "deleted twice");
        Ok(())
    })
    .unwrap();
    assert_eq!(blocks(&mut v), before - 1, "the value's block is freed");
    v.begin_read().unwrap();
    let rep = t.check(&v).unwrap();
    assert_eq!((rep.entries, rep.buckets), (48, 1));
    for i in 0..=50u32 {
        let want = (![0, 25, 50].contains(&i)).then(|| val(i));
        assert_eq!(t.get(&v, &key(i)).unwrap(), want, "key {i}");
    }
    assert_eq!(t.get(&v, b"big").unwrap(), None);
    v.commit().unwrap();
}

/// With cells of one length (fixed-size keys and values), a delete moves
/// the bucket's last cell into the hole: the commit logs about one cell,
/// not the shifted rest of the page.
#[test]
fn a_delete_among_equal_cells_logs_about_one_cell() {
    let d = ext4_dir("lh-delete-swap");
    let r = Region::create(&d.join("r.txm"), 1 << 20, coll::opts()).unwrap();
    let mut v = r.view().unwrap();
    let t = v.run(|v| LinearHash::create(v, 1)).unwrap();
    let key = |i: u32| format!("k{i:04}").into_bytes();
    let val = |i: u32| [i as u8; 27];
    v.run(|v| {
        for i in 0..60u32 {
            t.put(v, &key(i), &val(i))?;
        }
        Ok(())
    })
    .unwrap();
    // The first cell: shifting the 59 after it would change ~2.3 KiB.
    let before = r.stats().log_bytes;
    assert!(v.run(|v| t.delete(v, &key(0))).unwrap());
    let logged = r.stats().log_bytes - before;
    assert!(logged < 256, "one delete logged {logged} bytes");
    v.begin_read().unwrap();
    assert_eq!(t.check(&v).unwrap().entries, 59);
    assert_eq!(t.get(&v, &key(0)).unwrap(), None);
    for i in 1..60u32 {
        assert_eq!(
            t.get(&v, &key(i)).unwrap(),
            Some(val(i).to_vec()),
            "key {i}"
        );
    }
    v.commit().unwrap();
}
