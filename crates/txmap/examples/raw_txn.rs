//! Cost of small transactions through plain loads and stores (as LIBXAC
//! programs make them), at one process: µs per transaction and faults.
//!
//! `cargo run --release -p txmap --example raw_txn [DIR [N]]`

use std::time::Instant;

use txmap::{Durability, Error, Options, Region};

const PAGE: usize = 4096;
const PAGES: usize = 4096;

fn main() -> Result<(), Error> {
    let mut args = std::env::args().skip(1);
    let dir = std::path::PathBuf::from(args.next().unwrap_or_else(|| "target/tmp".into()));
    let n: usize = args.next().map_or(20_000, |s| s.parse().expect("N"));
    std::fs::create_dir_all(&dir).expect("create dir");
    let path = dir.join(format!("raw-txn-{}.txm", std::process::id()));
    let opts = Options {
        durability: Durability::Async,
        ..Options::default()
    };
    let region = Region::create(&path, (PAGES * PAGE) as u64, opts)?;
    let mut v = region.view()?;
    let base = v.base() as *mut u64;
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut rnd = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed as usize
    };
    for (name, reads, writes) in [
        ("1 write", 0, 1),
        ("30 reads, 2 writes", 30, 2),
        ("8 reads", 8, 0),
    ] {
        let f0 = v.faults();
        let t = Instant::now();
        let mut sink = 0u64;
        for _ in 0..n {
            loop {
                v.begin()?;
                // SAFETY: in bounds of the mapped region, inside a transaction.
                unsafe {
                    for _ in 0..reads {
                        sink = sink.wrapping_add(std::ptr::read_volatile(
                            base.add(rnd() % PAGES * PAGE / 8),
                        ));
                    }
                    for _ in 0..writes {
                        let p = base.add(rnd() % PAGES * PAGE / 8 + 1);
                        std::ptr::write_volatile(p, std::ptr::read_volatile(p) + 1);
                    }
                }
                match v.commit() {
                    Err(Error::Conflict) => continue,
                    r => break r?,
                }
            }
        }
        let us = t.elapsed().as_secs_f64() * 1e6 / n as f64;
        println!(
            "{name:>20}: {us:7.2} µs per transaction, {:5.2} faults ({sink})",
            (v.faults() - f0) as f64 / n as f64
        );
    }
    drop(v);
    drop(region);
    let _ = std::fs::remove_file(&path);
    let _ = std::fs::remove_file(txmap::log_path(&path));
    Ok(())
}
