//! The array list's commutative append (`ArrayList::append`, built-in
//! operation `ARRAY_APPEND`): run again at commit on the newest array, so
//! concurrent appenders do not conflict, every element lands exactly once,
//! and what a transaction reads of the array is still validated.
mod common;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use common::*;
use txmap::collections::{ArrayList, alloc};
use txmap::{Error, Options, Region, View};

/// An element: (writer, sequence number), 16 bytes.
fn el(w: u64, i: u64) -> [u8; 16] {
    let mut b = [0u8; 16];
    b[..8].copy_from_slice(&w.to_le_bytes());
    b[8..].copy_from_slice(&i.to_le_bytes());
    b
}

fn setup(d: &TestDir, reserve: u64, opts: Options) -> (Region, ArrayList) {
    let r = Region::create(&d.join("a.txm"), 4 << 20, opts).unwrap();
    let mut v = r.view().unwrap();
    let a = v
        .run(|v| {
            let a = ArrayList::create(v, 16)?;
            alloc::register(v, "list", alloc::Kind::Array, a.at)?;
            a.reserve(v, reserve)?;
            Ok(a)
        })
        .unwrap();
    drop(v);
    (r, a)
}

/// The committed elements, after checking the array's structure.
fn elements(r: &Region, a: ArrayList) -> Vec<(u64, u64)> {
    let mut v = r.view().unwrap();
    v.begin_read().unwrap();
    let rep = a.check(&v).unwrap();
    let out = (0..rep.len)
        .map(|i| {
            let b = a.get(&v, i).unwrap();
            (
                u64::from_le_bytes(b[..8].try_into().unwrap()),
                u64::from_le_bytes(b[8..].try_into().unwrap()),
            )
        })
        .collect();
    v.commit().unwrap();
    out
}

/// Every writer's elements appear once each, in its order.
fn assert_each_once(got: &[(u64, u64)], writers: u64, per: u64) {
    let set: BTreeSet<_> = got.iter().copied().collect();
    assert_eq!(set.len(), got.len(), "an element appears twice");
    let want: BTreeSet<_> = (0..writers)
        .flat_map(|w| (0..per).map(move |i| (w, i)))
        .collect();
    assert_eq!(set, want, "the elements appended, each once");
    for w in 0..writers {
        let mine: Vec<u64> = got.iter().filter(|e| e.0 == w).map(|e| e.1).collect();
        assert!(mine.is_sorted(), "writer {w}'s appends keep their order");
    }
}

#[test]
fn threads_appending_concurrently_all_commit_without_retries() {
    let d = ext4_dir("append-threads");
    let (threads, per) = (6u64, 150u64);
    let (r, a) = setup(&d, threads * per, Options::default());
    let attempts = Arc::new(AtomicU64::new(0));
    let workers: Vec<_> = (0..threads)
        .map(|t| {
            let (r, attempts) = (r.clone(), attempts.clone());
            std::thread::spawn(move || {
                let mut v = r.view().unwrap();
                for i in 0..per {
                    v.run(|v| {
                        attempts.fetch_add(1, Ordering::Relaxed);
                        a.append(v, &el(t, i)).map(|_| ())
                    })
                    .unwrap();
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    assert_eq!(
        attempts.load(Ordering::Relaxed),
        threads * per,
        "no append was retried"
    );
    assert_each_once(&elements(&r, a), threads, per);
}

#[test]
fn appends_that_outgrow_the_array_grow_it_and_lose_nothing() {
    // No capacity reserved: the appends that need a new segment allocate it
    // as ordinary validated writes (and may be retried), the others commute.
    let d = ext4_dir("append-grow");
    let (threads, per) = (3u64, 300u64);
    let (r, a) = setup(&d, 0, Options::default());
    let workers: Vec<_> = (0..threads)
        .map(|t| {
            let r = r.clone();
            std::thread::spawn(move || {
                let mut v = r.view().unwrap();
                for i in 0..per {
                    v.run(|v| a.append(v, &el(t, i)).map(|_| ())).unwrap();
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    assert_each_once(&elements(&r, a), threads, per);
}

#[test]
fn the_appender_sees_its_element_and_it_lands_after_earlier_commits() {
    let d = ext4_dir("append-index");
    let (r, a) = setup(&d, 100, Options::default());
    let (mut x, mut y) = (r.view().unwrap(), r.view().unwrap());
    x.run(|v| a.append(v, &el(9, 0)).map(|_| ())).unwrap();
    x.begin().unwrap();
    y.begin().unwrap();
    let i = a.append(&mut x, &el(0, 0)).unwrap();
    assert_eq!(i, 1, "the provisional index: the length x's snapshot shows");
    assert_eq!(a.append(&mut y, &el(1, 0)).unwrap(), 1, "the same for y");
    assert_eq!(a.append(&mut y, &el(1, 1)).unwrap(), 2);
    y.commit().unwrap();
    x.commit().unwrap();
    // x committed last: its element went to the end of the newest array.
    assert_eq!(
        elements(&r, a),
        vec![(9, 0), (1, 0), (1, 1), (0, 0)],
        "appends land in commit order"
    );
    // Alone, the transaction reads its own element at its index.
    x.begin().unwrap();
    let i = a.append(&mut x, &el(0, 1)).unwrap();
    assert_eq!(a.len(&x).unwrap(), 5);
    assert_eq!(a.get(&x, i).unwrap(), &el(0, 1)[..]);
    x.commit().unwrap();
    assert_eq!(elements(&r, a).len(), 5);
}

#[test]
fn a_transaction_that_reads_the_length_and_appends_validates_its_read() {
    let d = ext4_dir("append-read");
    let (r, a) = setup(&d, 100, Options::default());
    let (mut x, mut y) = (r.view().unwrap(), r.view().unwrap());
    x.begin().unwrap();
    y.begin().unwrap();
    let n = a.len(&x).unwrap();
    a.append(&mut x, &el(0, n)).unwrap();
    a.append(&mut y, &el(1, 0)).unwrap();
    y.commit().unwrap();
    assert!(
        matches!(x.commit(), Err(Error::Conflict)),
        "the length x read changed"
    );
    // Reading the element back reads the array's pages too.
    x.begin().unwrap();
    y.begin().unwrap();
    let i = a.append(&mut x, &el(0, 1)).unwrap();
    assert_eq!(a.get(&x, i).unwrap(), &el(0, 1)[..]);
    a.append(&mut y, &el(1, 1)).unwrap();
    y.commit().unwrap();
    assert!(matches!(x.commit(), Err(Error::Conflict)));
    // A store to the element after the append makes it a validated write.
    x.begin().unwrap();
    y.begin().unwrap();
    let i = a.append(&mut x, &el(0, 2)).unwrap();
    a.set(&mut x, i, &el(0, 3)).unwrap();
    a.append(&mut y, &el(1, 2)).unwrap();
    y.commit().unwrap();
    assert!(matches!(x.commit(), Err(Error::Conflict)));
    assert_eq!(elements(&r, a), vec![(1, 0), (1, 1), (1, 2)]);
    // Without a concurrent append, the same transaction commits as it read.
    x.run(|v| {
        let i = a.append(v, &el(0, 2))?;
        a.set(v, i, &el(0, 3))
    })
    .unwrap();
    assert_eq!(elements(&r, a), vec![(1, 0), (1, 1), (1, 2), (0, 3)]);
}

#[test]
fn a_failed_append_is_not_logged_and_an_abort_drops_it() {
    let d = ext4_dir("append-abort");
    let (r, a) = setup(&d, 100, Options::default());
    let mut x = r.view().unwrap();
    for (i, commit) in [(0, false), (1, true)] {
        x.begin().unwrap();
        let wrong = a.append(&mut x, &[1, 2, 3]);
        assert!(matches!(wrong, Err(Error::Invalid(_))), "{wrong:?}");
        a.append(&mut x, &el(0, i)).unwrap();
        if commit {
            x.commit().unwrap();
        } else {
            x.abort().unwrap();
            assert!(matches!(x.commit(), Err(Error::Aborted)));
        }
    }
    assert_eq!(elements(&r, a), vec![(0, 1)]);
}

/// Child: appends (writer, i) per transaction, acknowledging each, until
/// killed.
fn appender_child() {
    let w: u64 = std::env::var("TXMAP_WRITER").unwrap().parse().unwrap();
    let (mut acks, r) = child_region();
    let mut v = r.view().unwrap();
    let a = list(&v);
    for i in 0.. {
        v.run(|v| a.append(v, &el(w, i)).map(|_| ())).unwrap();
        acks.line(&i.to_string());
    }
}

fn list(v: &View) -> ArrayList {
    let e = alloc::lookup(v, "list").unwrap().unwrap();
    ArrayList::open(v, e.at).unwrap()
}

#[test]
fn processes_appending_lose_nothing_after_sigkill() {
    if role().as_deref() == Some("appender") {
        return appender_child();
    }
    let d = ext4_dir("append-procs");
    let (r, a) = setup(&d, 1 << 16, Options::default());
    r.close().unwrap();
    let p = d.join("a.txm");
    let mut kids = spawn_ackers(
        "processes_appending_lose_nothing_after_sigkill",
        "appender",
        &d,
        2,
        |k| {
            vec![
                ("TXMAP_REGION", p.display().to_string()),
                ("TXMAP_WRITER", k.to_string()),
            ]
        },
    );
    for (c, acks) in &mut kids {
        wait_for_acks(c, acks, 150);
    }
    for (c, _) in &mut kids {
        c.signal(rustix::process::Signal::KILL);
        c.kill();
    }
    let acked = ack_counts(&kids);
    let r = Region::open(&p, Options::default()).unwrap();
    assert!(r.stats().recovered_commits > 0, "recovery replayed the log");
    let got = elements(&r, a);
    let set: BTreeSet<_> = got.iter().copied().collect();
    assert_eq!(set.len(), got.len(), "an element appears twice");
    for (w, &n) in acked.iter().enumerate() {
        let mine: Vec<u64> = got
            .iter()
            .filter(|e| e.0 == w as u64)
            .map(|e| e.1)
            .collect();
        // Every acknowledged append, in order; perhaps one more that
        // committed before its acknowledgement.
        assert!(
            mine.len() as u64 == n || mine.len() as u64 == n + 1,
            "writer {w}: {} elements after {n} acknowledged appends",
            mine.len()
        );
        assert!(mine.iter().copied().eq(0..mine.len() as u64), "writer {w}");
    }
}

#[test]
fn a_page_the_append_wrote_only_at_commit_is_read_afresh_by_the_appender() {
    // Another append commits first, so this transaction's append lands one
    // element further at commit than where it ran here: the page it wrote
    // there held other content in this view (read while empty), which must
    // not stay valid as if this transaction had written it.
    let d = ext4_dir("append-own-page");
    let r = Region::create(&d.join("a.txm"), 4 << 20, Options::default()).unwrap();
    let mut v = r.view().unwrap();
    let mut other = r.view().unwrap();
    let a = v
        .run(|v| {
            let a = ArrayList::create(v, 8192)?;
            a.reserve(v, 4)?;
            Ok(a)
        })
        .unwrap();
    // A page in the middle of element 1, none of element 0's (found by
    // pushing two elements and popping them again).
    let mid1 = v
        .run(|v| {
            a.push(v, &[0u8; 8192])?;
            a.push(v, &[0u8; 8192])?;
            let at = a.offset(v, 1)? + 4096;
            a.pop(v)?;
            a.pop(v)?;
            Ok(at)
        })
        .unwrap();
    let (x, y) = ([7u8; 8192], [9u8; 8192]);
    v.begin().unwrap();
    assert_eq!(v.read::<u64>(mid1).unwrap(), 0, "element 1 is empty yet");
    assert_eq!(a.append(&mut v, &x).unwrap(), 0, "element 0 here");
    other.run(|o| a.append(o, &y).map(|_| ())).unwrap();
    v.commit().unwrap();
    v.begin_read().unwrap();
    assert_eq!(a.len(&v).unwrap(), 2);
    assert!(a.get(&v, 0).unwrap() == &y[..], "element 0 is the other's");
    assert!(
        a.get(&v, 1).unwrap() == &x[..],
        "the appender reads the element its commit wrote, not the page it held"
    );
    v.commit().unwrap();
}

/// A transaction that appends across several pages and then stores into
/// an element it appended commits alone, without conflicting with itself.
/// The store makes the appends that wrote that page stay where they ran
/// (published from this transaction, the array's length with them); every
/// other append touched the length's page too, so it must stay with them
/// rather than run again at commit on a page this commit publishes (it
/// conflicted: found by the array model test in CI).
#[test]
fn a_store_into_an_element_appended_in_the_same_transaction_commits_alone() {
    let d = tmpfs_dir("append-then-store");
    // Room reserved: no append falls back to an ordinary push (which
    // writes the length's page itself).
    let (r, a) = setup(&d, 2000, Options::default());
    let mut v = r.view().unwrap();
    v.run(|v| {
        for i in 0..10 {
            a.push(v, &el(0, i))?;
        }
        Ok(())
    })
    .unwrap();
    // 1,000 appends of 16 bytes span several pages of elements.
    v.begin().unwrap();
    for i in 10..1010 {
        assert_eq!(a.append(&mut v, &el(0, i)).unwrap(), i);
    }
    a.set(&mut v, 500, &el(1, 500)).unwrap();
    v.commit()
        .expect("a lone transaction conflicted with itself");
    drop(v);
    let want: Vec<(u64, u64)> = (0..1010).map(|i| (u64::from(i == 500), i)).collect();
    assert_eq!(elements(&r, a), want);
    drop(r);
    let r = Region::open(&d.join("a.txm"), Options::default()).unwrap();
    assert_eq!(elements(&r, a), want, "after reopening (replay)");
}
