//! Long-running reader: log size and version memory over many commits while
//! one read-only transaction stays open, with copy-on-checkpoint (checkpoints
//! pass the old snapshot) and without it (checkpoints stop at the oldest
//! snapshot, as before; `txmap::debug::set_copy_on_checkpoint(false)`).

use std::time::Instant;

use txmap::{Options, Region};

use crate::report::{Ctx, Res, Table, num};

const PAGE: u64 = 4096;
/// Region pages; each commit writes `WRITES` of them, chosen at random.
const PAGES: u64 = 256;
const WRITES: u64 = 4;
const CHECKPOINT_BYTES: u64 = 256 << 10;
const MARKS: [usize; 4] = [1_000, 5_000, 20_000, 50_000];

pub fn steps(_reps: usize) -> usize {
    3
}

fn human(b: u64) -> String {
    if b >= 10 << 20 {
        format!("{} MiB", b >> 20)
    } else if b >= 10 << 10 {
        format!("{} KiB", b >> 10)
    } else {
        format!("{b} B")
    }
}

pub fn run(ctx: &mut Ctx) -> Res<()> {
    println!("## Long-running reader: log and version memory\n");
    let marks: Vec<usize> = MARKS.iter().map(|&m| ctx.count(m)).collect();
    println!(
        "A region of {PAGES} pages; one view commits transactions that each write a u64 to \
         {WRITES} random pages (durable, `checkpoint_bytes` = {} KiB, so commits trigger \
         checkpoints), while another view holds one read-only transaction open from the start \
         (its snapshot reads the region file). Sampled after {} commits: the log's current epoch, \
         page versions in shared memory (4 KiB each) and pages preserved by copy-on-checkpoint. \
         *before*: checkpoints stop at the oldest live snapshot (the behaviour before \
         copy-on-checkpoint); *after*: they pass it. *no reader*: the same commits without the \
         reader.\n",
        CHECKPOINT_BYTES >> 10,
        marks
            .iter()
            .map(|m| m.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    );
    let mut t = Table::new(&[
        "mode",
        "commits",
        "log (current epoch)",
        "page versions",
        "version memory",
        "pages preserved",
        "commits/s",
    ]);
    for (mode, reader, cow) in [
        ("before", true, false),
        ("after", true, true),
        ("no reader", false, true),
    ] {
        ctx.progress(format!("longreader: {mode}"));
        txmap::debug::set_copy_on_checkpoint(cow);
        let path = ctx
            .dir
            .join(format!("longreader-{}.txm", mode.replace(' ', "-")));
        let o = Options {
            checkpoint_bytes: CHECKPOINT_BYTES,
            ..Options::default()
        };
        let r = Region::create(&path, PAGES * PAGE, o)?;
        let (mut w, mut old) = (r.view()?, r.view()?);
        w.run(|v| {
            for p in 0..PAGES {
                v.write(p * PAGE, &1u64)?;
            }
            Ok(())
        })?;
        r.checkpoint()?;
        if reader {
            old.begin_read()?;
            let _: u64 = old.read(0)?;
        }
        let mut rng = 0x5eed_u64;
        let mut done = 0;
        let started = Instant::now();
        for &m in &marks {
            while done < m {
                done += 1;
                w.run(|v| {
                    for _ in 0..WRITES {
                        rng = rng
                            .wrapping_mul(6364136223846793005)
                            .wrapping_add(1442695040888963407);
                        let p = (rng >> 33) % PAGES;
                        v.write(p * PAGE, &(done as u64))?;
                    }
                    Ok(())
                })?;
            }
            let rate = done as f64 / started.elapsed().as_secs_f64();
            let s = r.stats();
            t.row(vec![
                mode.into(),
                m.to_string(),
                human(s.log_bytes),
                s.version_pages.to_string(),
                human(s.version_pages as u64 * PAGE),
                s.preserved_pages.to_string(),
                num(rate),
            ]);
        }
        if reader {
            // The snapshot is intact after all of it.
            for p in 0..PAGES {
                let x: u64 = old.read(p * PAGE)?;
                if x != 1 {
                    ctx.anomaly(format!("longreader {mode}: page {p} reads {x}, not 1"));
                }
            }
            old.commit()?;
        }
        drop((w, old));
        r.close()?;
        let _ = std::fs::remove_file(txmap::log_path(&path));
        let _ = std::fs::remove_file(&path);
    }
    txmap::debug::set_copy_on_checkpoint(true);
    t.print();
    Ok(())
}
