//! A tight loop of one-page commits, for profiling (`perf record`).
//! Usage: commit_loop DIR [async|durable] [serializable|snapshot] [count]
use txmap::{Durability, Options, Region, TxnOptions};

fn main() -> Result<(), txmap::Error> {
    let args: Vec<String> = std::env::args().collect();
    let dir = std::path::PathBuf::from(args.get(1).map_or("/tmp", String::as_str));
    let durability = if args.get(2).is_some_and(|a| a == "durable") {
        Durability::Durable
    } else {
        Durability::Async
    };
    let opts = if args.get(3).is_some_and(|a| a == "snapshot") {
        TxnOptions::SNAPSHOT
    } else {
        TxnOptions::default()
    };
    let n: u64 = args.get(4).and_then(|a| a.parse().ok()).unwrap_or(100_000);
    let path = dir.join(format!("commit-loop-{}.txm", std::process::id()));
    let r = Region::create(
        &path,
        1 << 20,
        Options {
            durability,
            ..Options::default()
        },
    )?;
    let mut v = r.view()?;
    let t = std::time::Instant::now();
    for i in 0..n {
        v.run_with(opts, |v| v.write(64, &i))?;
    }
    let per = t.elapsed().as_secs_f64() * 1e6 / n as f64;
    println!(
        "{per:.2} µs per commit ({durability:?}, {:?})",
        opts.isolation
    );
    drop(v);
    drop(r);
    let _ = std::fs::remove_file(&path);
    let _ = std::fs::remove_file(txmap::log_path(&path));
    Ok(())
}
