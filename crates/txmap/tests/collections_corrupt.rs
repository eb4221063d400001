//! Damaged structures give errors, never panics or hangs: random bytes of
//! the heap are overwritten (inside a transaction that is rolled back), then
//! every operation and `check` run on the damaged bytes.
mod common;

use std::ops::Bound;

use common::*;
use txmap::collections::{AnyMap, ArrayList, Kind, Map, alloc, check_region};
use txmap::io::sim::SplitMix;
use txmap::{Options, Region, View};

/// Returns whether the checks found the damage.
fn damage_and_use(v: &mut View, m: AnyMap, a: ArrayList, rng: &mut SplitMix, top: u64) -> bool {
    v.begin().unwrap();
    let flips = 1 + rng.next() % 24;
    for _ in 0..flips {
        let at = rng.next() % top;
        let b = v.read::<u8>(at).unwrap();
        let x = match rng.next() % 4 {
            0 => 0,
            1 => 0xff,
            _ => b ^ (1 << (rng.next() % 8)),
        };
        v.write(at, &x).unwrap();
    }
    for i in 0..20u64 {
        let k = format!("key{:04}", rng.next() % 400);
        // Results may be errors; they must not be panics.
        let _ = m.get(v, k.as_bytes());
        let _ = m.put(v, k.as_bytes(), &vec![i as u8; (rng.next() % 900) as usize]);
        let _ = m.delete(v, format!("key{:04}", rng.next() % 400).as_bytes());
        let _ = a.push(v, &[1u8; 24]);
        let _ = a.pop(v);
        let _ = a.get(v, rng.next() % 100).map(|x| x.len());
        let _ = alloc::alloc(v, rng.next() % 10_000).and_then(|o| alloc::free(v, o));
    }
    let _ = m.scan(v, Bound::Unbounded, Bound::Unbounded, &mut |_, _| Ok(true));
    let found = m.check(v).is_err() | a.check(v).is_err() | alloc::check(v).is_err();
    let _ = alloc::catalog(v);
    v.rollback();
    found
}

#[test]
fn damaged_bytes_give_errors_not_panics() {
    for kind in [Kind::BTree, Kind::CoBTree, Kind::LinearHash] {
        let d = tmpfs_dir(&format!("coll-corrupt-{}", kind.name()));
        let r = Region::create(&d.join("c.txm"), 1 << 20, Options::default()).unwrap();
        let mut v = r.view().unwrap();
        let (m, a) = v
            .run(|v| {
                let m = AnyMap::create_named(v, "m", kind)?;
                let a = ArrayList::create(v, 24)?;
                alloc::register(v, "a", Kind::Array, a.at)?;
                for i in 0..300u32 {
                    let val = vec![i as u8; (i as usize * 53) % 1500];
                    m.put(v, format!("key{i:04}").as_bytes(), &val)?;
                    a.push(v, &[i as u8; 24])?;
                }
                Ok((m, a))
            })
            .unwrap();
        let c = check_region(&mut v).unwrap().unwrap();
        assert!(c.heap.is_ok() && c.structures.iter().all(|(_, r)| r.is_ok()));
        assert_eq!(c.unowned_blocks, Some(0));
        let top = c.heap.unwrap().top;
        let mut rng = SplitMix(kind as u64);
        let found = (0..300)
            .filter(|_| damage_and_use(&mut v, m, a, &mut rng, top))
            .count();
        // Much damage lands in value bytes or unused node space, which no
        // check can see; the rest (headers, keys, links, free blocks, which
        // must be zero) must be found often.
        assert!(
            found > 30,
            "{}: checks found only {found} of 300 damages",
            kind.name()
        );
        // Nothing of the damage was committed.
        let c = check_region(&mut v).unwrap().unwrap();
        assert!(c.heap.is_ok() && c.structures.iter().all(|(_, r)| r.is_ok()));
    }
}
