//! The array list: model-based test against a Vec, with aborts.
mod common;

use common::*;
use proptest::prelude::*;
use txmap::collections::{ArrayList, alloc};
use txmap::{Error, Options, Region};

#[derive(Clone, Debug)]
enum Op {
    Push(u64),
    /// The commutative append: alone, the same as push.
    Append(u64),
    Pop,
    Set(u64, u64),
    Get(u64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..10u64).prop_flat_map(|n| Just(Op::Push(n))),
        3 => (0..10u64).prop_flat_map(|n| Just(Op::Append(n))),
        2 => Just(Op::Pop),
        2 => (any::<u64>(), any::<u64>()).prop_map(|(i, x)| Op::Set(i, x)),
        2 => any::<u64>().prop_map(Op::Get),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, failure_persistence: None, ..ProptestConfig::default() })]
    #[test]
    fn model_random_operations_with_aborts(
        elem in prop_oneof![Just(8u64), Just(24u64), Just(1000u64), Just(5000u64)],
        txns in prop::collection::vec((prop::collection::vec(op(), 1..80), any::<bool>()), 1..12),
    ) {
        let d = tmpfs_dir("array-model");
        let r = Region::create(&d.join("a.txm"), 1 << 20, Options::default()).unwrap();
        let mut v = r.view().unwrap();
        let a = v.run(|v| ArrayList::create(v, elem)).unwrap();
        let mut model: Vec<Vec<u8>> = Vec::new();
        let el = |x: u64| -> Vec<u8> { (0..elem).map(|i| (x.wrapping_add(i * 31) % 251) as u8).collect() };
        for (ops, commit) in &txns {
            let mut local = model.clone();
            v.begin().unwrap();
            for op in ops {
                match *op {
                    Op::Push(n) => for j in 0..n * 7 {
                        let e = el(j ^ local.len() as u64);
                        prop_assert_eq!(a.push(&mut v, &e).unwrap(), local.len() as u64);
                        local.push(e);
                    },
                    Op::Append(n) => for j in 0..n * 7 {
                        let e = el(j ^ local.len() as u64 ^ 0x55);
                        prop_assert_eq!(a.append(&mut v, &e).unwrap(), local.len() as u64);
                        local.push(e);
                    },
                    Op::Pop => prop_assert_eq!(a.pop(&mut v).unwrap(), local.pop()),
                    Op::Set(i, x) => {
                        if local.is_empty() {
                            prop_assert!(matches!(a.set(&mut v, i, &el(x)), Err(Error::Invalid(_))));
                        } else {
                            let i = i % local.len() as u64;
                            a.set(&mut v, i, &el(x)).unwrap();
                            local[i as usize] = el(x);
                        }
                    }
                    Op::Get(i) => {
                        let i = i % (local.len() as u64 + 1);
                        match local.get(i as usize) {
                            Some(e) => prop_assert_eq!(a.get(&v, i).unwrap(), &e[..]),
                            None => prop_assert!(a.get(&v, i).is_err()),
                        }
                    }
                }
            }
            if *commit {
                v.commit().unwrap();
                model = local;
            } else {
                v.abort().unwrap();
                prop_assert!(v.commit().is_err());
            }
            v.begin_read().unwrap();
            let rep = a.check(&v).unwrap();
            prop_assert_eq!(rep.len, model.len() as u64);
            for (i, e) in model.iter().enumerate() {
                prop_assert_eq!(a.get(&v, i as u64).unwrap(), &e[..]);
            }
            let heap = alloc::check(&v).unwrap();
            prop_assert_eq!(heap.used_blocks, 1 + rep.segments);
            v.commit().unwrap();
        }
    }
}

#[test]
fn pod_elements_and_wrong_sizes() {
    let d = tmpfs_dir("array-pod");
    let r = Region::create(&d.join("a.txm"), 1 << 20, Options::default()).unwrap();
    let mut v = r.view().unwrap();
    let a = v.run(|v| ArrayList::create(v, 8)).unwrap();
    v.run(|v| {
        for i in 0..10_000u64 {
            a.push_pod(v, &(i * i))?;
        }
        Ok(())
    })
    .unwrap();
    v.begin().unwrap();
    assert_eq!(a.get_pod::<u64>(&v, 9999).unwrap(), 9999 * 9999);
    assert!(matches!(a.get_pod::<u32>(&v, 1), Err(Error::Invalid(_))));
    assert!(matches!(a.push(&mut v, &[1, 2, 3]), Err(Error::Invalid(_))));
    assert!(matches!(
        ArrayList::create(&mut v, 0),
        Err(Error::Invalid(_))
    ));
    let rep = a.check(&v).unwrap();
    assert_eq!(rep.len, 10_000);
    assert!(rep.capacity >= 10_000 && rep.capacity < 20_000 + 510);
    v.commit().unwrap();
}
