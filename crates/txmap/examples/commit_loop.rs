//! A tight loop of one-page commits, for profiling (`perf record`).
//! Usage: commit_loop DIR [async|durable] [serializable|snapshot] [count] [threads]
//! (`SLOW_SYNC_US=1000` makes each log sync 1 ms longer, as on a slower device.)
use txmap::{Durability, Options, Region, TxnOptions};

fn main() -> Result<(), txmap::Error> {
    let args: Vec<String> = std::env::args().collect();
    let arg = |i: usize| args.get(i).map(String::as_str);
    let dir = std::path::PathBuf::from(arg(1).unwrap_or("/tmp"));
    let durability = if arg(2) == Some("durable") {
        Durability::Durable
    } else {
        Durability::Async
    };
    let opts = if arg(3) == Some("snapshot") {
        TxnOptions::SNAPSHOT
    } else {
        TxnOptions::default()
    };
    let n: u64 = arg(4).and_then(|a| a.parse().ok()).unwrap_or(100_000);
    let threads: u64 = arg(5).and_then(|a| a.parse().ok()).unwrap_or(1);
    if let Some(us) = std::env::var("SLOW_SYNC_US")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        txmap::debug::slow_syncs(us);
    }
    let path = dir.join(format!("commit-loop-{}.txm", std::process::id()));
    let r = Region::create(
        &path,
        1 << 20,
        Options {
            durability,
            ..Options::default()
        },
    )?;
    let t = std::time::Instant::now();
    let hs: Vec<_> = (0..threads)
        .map(|k| {
            let r = r.clone();
            std::thread::spawn(move || -> Result<(), txmap::Error> {
                let mut v = r.view()?;
                for i in 0..n {
                    v.run_with(opts, |v| v.write(64 + k * 4096, &i))?;
                }
                Ok(())
            })
        })
        .collect();
    for h in hs {
        h.join().expect("thread panicked")?;
    }
    let per = t.elapsed().as_secs_f64() * 1e6 / (n * threads) as f64;
    let st = r.stats();
    let per_sync = st.commit_seq as f64 / st.log_syncs.max(1) as f64;
    println!(
        "{per:.2} µs per commit ({durability:?}, {:?}, {threads} threads, {per_sync:.2} commits per sync)",
        opts.isolation
    );
    drop(r);
    let _ = std::fs::remove_file(&path);
    let _ = std::fs::remove_file(txmap::log_path(&path));
    Ok(())
}
