//! Round durability: a view in round mode stores without transactions;
//! `round` makes every store since the last round durable at once. A
//! process SIGKILLed at a random point (mostly in the middle of a round)
//! leaves the region exactly at its last completed round.

mod common;

use std::time::Duration;

use common::*;
use txmap::{Durability, Options, Region};

const PAGE: u64 = 4096;
const PAGES: u64 = 64;

/// The child: in round r, stores r into the first u64 of every page (one
/// page at a time, with pauses, so a kill lands mid-round), then ends the
/// round and acknowledges "ROUND r" (one `write` per line).
fn rounder() {
    let p = std::path::PathBuf::from(std::env::var("TXMAP_PATH").unwrap());
    let mut acks = Acks::open(&std::env::var("TXMAP_ACKS").unwrap());
    let r = Region::open(&p, Options::default()).unwrap();
    let mut v = r.view().unwrap();
    v.start_rounds().unwrap();
    let first = v.read::<u64>(0).unwrap() + 1;
    for round in first.. {
        for pg in 0..PAGES {
            v.write(pg * PAGE, &round).unwrap();
            if pg % 16 == 0 {
                std::thread::sleep(Duration::from_micros(200));
            }
        }
        v.round().unwrap();
        acks.line(&format!("ROUND {round}"));
    }
}

/// Every page holds the same round number; returns it.
fn check(p: &std::path::Path) -> u64 {
    let r = Region::open(p, Options::default()).unwrap();
    let mut v = r.view().unwrap();
    v.begin_read().unwrap();
    let vals: Vec<u64> = (0..PAGES).map(|pg| v.read(pg * PAGE).unwrap()).collect();
    v.commit().unwrap();
    assert!(
        vals.iter().all(|&x| x == vals[0]),
        "the region is not at one round: {vals:?}"
    );
    vals[0]
}

#[test]
fn sigkill_in_the_middle_of_a_round_leaves_the_last_completed_round() {
    if role().is_some() {
        return rounder();
    }
    let test = "sigkill_in_the_middle_of_a_round_leaves_the_last_completed_round";
    let mut rng = txmap::io::sim::SplitMix(seed(test));
    let d = ext4_dir("rounds_kill");
    let p = d.join("r");
    let o = Options {
        durability: Durability::Durable,
        ..Options::default()
    };
    drop(Region::create(&p, PAGES * PAGE, o).unwrap());
    let mut acked = 0;
    for _ in 0..8 {
        let out = d.join("acks");
        let _ = std::fs::remove_file(&out);
        let envs = [
            ("TXMAP_PATH", p.display().to_string()),
            ("TXMAP_ACKS", out.display().to_string()),
        ];
        let mut c = child(test, "rounder", &envs)
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(20 + rng.next() % 80));
        c.kill().unwrap();
        c.wait().unwrap();
        let printed = std::fs::read_to_string(&out)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.strip_prefix("ROUND ").map(|n| n.parse::<u64>().unwrap()))
            .max();
        if let Some(n) = printed {
            acked = acked.max(n);
        }
        let at = check(&p);
        assert!(
            at >= acked,
            "round {acked} was completed, the region is at {at}"
        );
        // At most the round under way when the kill came is there beyond it.
        assert!(
            at <= acked + 1,
            "the region is at round {at}, beyond {acked} + 1"
        );
        eprintln!("killed at round {at} (acknowledged {acked})");
        acked = at;
    }
}

#[test]
fn stores_between_rounds_need_no_transaction_and_a_failed_round_goes_on() {
    let d = tmpfs_dir("rounds_basic");
    let p = d.join("r");
    let r = Region::create(&p, PAGES * PAGE, Options::default()).unwrap();
    let mut v = r.view().unwrap();
    assert!(matches!(
        v.round(),
        Err(txmap::Error::NotInTransaction { .. })
    ));
    v.start_rounds().unwrap();
    v.write(0, &7u64).unwrap();
    // Not visible to others before the round ends.
    let mut o = r.view().unwrap();
    o.begin_read().unwrap();
    assert_eq!(o.read::<u64>(0).unwrap(), 0);
    o.commit().unwrap();
    v.round().unwrap();
    o.begin_read().unwrap();
    assert_eq!(o.read::<u64>(0).unwrap(), 7);
    o.commit().unwrap();
    // A round that conflicts loses its stores; the next round opens anyway.
    v.write(PAGE, &1u64).unwrap();
    o.run(|o| o.write(PAGE, &2u64)).unwrap();
    assert!(matches!(v.round(), Err(txmap::Error::Conflict)));
    assert!(v.in_transaction());
    assert_eq!(v.read::<u64>(PAGE).unwrap(), 2);
    v.write(2 * PAGE, &3u64).unwrap();
    v.round().unwrap();
    v.stop_rounds();
    drop((v, o, r));
    let r = Region::open(&p, Options::default()).unwrap();
    let mut v = r.view().unwrap();
    v.begin_read().unwrap();
    assert_eq!(
        [0, 1, 2].map(|pg| v.read::<u64>(pg * PAGE).unwrap()),
        [7, 2, 3]
    );
    v.commit().unwrap();
}
