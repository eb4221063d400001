//! Round durability (issue 19, point 6): one round that writes every page
//! of a region, made durable by `View::round`, beside `dd` writing as many
//! bytes to a file on the same file system with `conv=fdatasync`.

use std::time::Instant;

use txmap::{Options, Region};

use crate::report::{Ctx, Res, Summary, Table, num};

const PAGE: u64 = 4096;
/// Bytes per round: 1 GiB, or `TXMAP_ROUND_MIB` MiB.
fn bytes() -> u64 {
    std::env::var("TXMAP_ROUND_MIB")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .filter(|&m| m > 0)
        .unwrap_or(1024)
        << 20
}

pub fn steps(reps: usize) -> usize {
    3 * reps
}

/// Seconds for `dd` to write the round's bytes into `path` and sync it.
fn dd(path: &std::path::Path) -> Res<f64> {
    let bytes = bytes();
    let start = Instant::now();
    let out = std::process::Command::new("dd")
        .arg("if=/dev/zero")
        .arg(format!("of={}", path.display()))
        .args(["bs=1M", &format!("count={}", bytes >> 20), "conv=fdatasync"])
        .output()?;
    let secs = start.elapsed().as_secs_f64();
    if !out.status.success() {
        return Err(format!("dd failed: {}", String::from_utf8_lossy(&out.stderr)).into());
    }
    let _ = std::fs::remove_file(path);
    Ok(secs)
}

/// (seconds storing, seconds in `round`, seconds of a second round right
/// after it: stores and `round`) for one round over a fresh region: stores
/// through `slice_mut`, or with `raw` plain stores through `View::base()`
/// (first stores caught by page faults).
fn round(path: &std::path::Path, rep: u64, raw: bool) -> Res<(f64, f64, f64)> {
    let bytes = bytes();
    let r = Region::create(path, bytes, Options::default())?;
    let mut flat = crate::sys::Flat::view(r.view()?);
    let v = flat.view_mut().ok_or("a view")?;
    v.start_rounds()?;
    let start = Instant::now();
    let fill = (rep as u8).wrapping_add(1);
    if raw {
        let word = u64::from_le_bytes([fill; 8]);
        for i in 0..bytes / PAGE {
            flat.store(i * PAGE, i);
            for w in 1..PAGE / 8 {
                flat.store(i * PAGE + 8 * w, word);
            }
        }
    } else {
        let all = v.slice_mut(0, bytes as usize)?;
        for (i, page) in all.chunks_mut(PAGE as usize).enumerate() {
            page.fill(fill);
            page[..8].copy_from_slice(&(i as u64).to_le_bytes());
        }
    }
    let stored = start.elapsed().as_secs_f64();
    let v = flat.view_mut().ok_or("a view")?;
    let start = Instant::now();
    v.round()?;
    let rounded = start.elapsed().as_secs_f64();
    // The next round over every page at once (the first one's copy into
    // the region file and its checkpoint come first).
    let start = Instant::now();
    let all = v.slice_mut(0, bytes as usize)?;
    for page in all.chunks_mut(PAGE as usize) {
        page[8..16].copy_from_slice(&u64::from(fill).to_le_bytes());
    }
    v.round()?;
    let next = start.elapsed().as_secs_f64();
    v.stop_rounds();
    drop(flat);
    drop(r);
    for suffix in ["", "-log", "-sums", "-journal"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    }
    Ok((stored, rounded, next))
}

pub fn run(ctx: &mut Ctx) -> Res<()> {
    let bytes = bytes();
    println!(
        "## Rounds: one round of {} MiB beside dd (issue 19)\n",
        bytes >> 20
    );
    println!(
        "A fresh region of {} MiB (durable); one view, alone with the region, enters round \
         mode, stores into every page (through `slice_mut`; then again over another fresh \
         region with plain stores through `View::base()`), then `round()` makes the round \
         durable (its pages go through the page journal, synced, then into the region file, \
         whose sync waits for the next checkpoint; no log record). Beside it, `dd if=/dev/zero bs=1M count={} conv=fdatasync` \
         to a file in the same directory. Bandwidth = bytes / (store + round) time. The next round \
         right after the first stores into every page again and ends: its time includes the \
         first round's copy into the region file and the checkpoint that syncs it. Median \
         (min–max) of {} runs, alternating. `TXMAP_ROUND_MIB` sets the size.\n",
        bytes >> 20,
        bytes >> 20,
        ctx.reps
    );
    let (mut st, mut rd, mut tot, mut dds) = (vec![], vec![], vec![], vec![]);
    let (mut raw_st, mut raw_rd, mut raw_tot) = (vec![], vec![], vec![]);
    let mut next = vec![];
    for rep in 0..ctx.reps {
        ctx.progress(format!("rounds: run {}", rep + 1));
        let (s, r, n) = round(&ctx.dir.join(format!("round-{rep}.txm")), rep as u64, false)?;
        next.push(n);
        st.push(s);
        rd.push(r);
        tot.push(s + r);
        ctx.progress(format!("rounds: run {} (plain stores)", rep + 1));
        let (s, r, _) = round(&ctx.dir.join(format!("raw-{rep}.txm")), rep as u64, true)?;
        raw_st.push(s);
        raw_rd.push(r);
        raw_tot.push(s + r);
        ctx.progress(format!("rounds: dd {}", rep + 1));
        dds.push(dd(&ctx.dir.join(format!("dd-{rep}")))?);
    }
    let mib = (bytes >> 20) as f64;
    let bw = |s: &[f64]| Summary::of(&s.iter().map(|x| mib / x).collect::<Vec<_>>());
    let mut t = Table::new(&["what", "time (s)", "MiB/s"]);
    t.row(vec![
        "round: stores".into(),
        Summary::of(&st).cell(),
        bw(&st).cell(),
    ]);
    t.row(vec![
        "round: `round()`".into(),
        Summary::of(&rd).cell(),
        bw(&rd).cell(),
    ]);
    t.row(vec![
        "round: total".into(),
        Summary::of(&tot).cell(),
        bw(&tot).cell(),
    ]);
    t.row(vec![
        "next round right after: stores + `round()`".into(),
        Summary::of(&next).cell(),
        bw(&next).cell(),
    ]);
    for (what, xs) in [
        ("plain stores: stores", &raw_st),
        ("plain stores: `round()`", &raw_rd),
        ("plain stores: total", &raw_tot),
    ] {
        t.row(vec![what.into(), Summary::of(xs).cell(), bw(xs).cell()]);
    }
    t.row(vec![
        "dd conv=fdatasync".into(),
        Summary::of(&dds).cell(),
        bw(&dds).cell(),
    ]);
    t.print();
    let ratio = Summary::of(&tot).median.recip() / Summary::of(&dds).median.recip();
    ctx.target(
        "rounds: a round reaches ≥ 50 % of dd's sequential write bandwidth",
        format!(
            "{} MiB round: {} MiB/s against dd {} MiB/s ({:.0} %)",
            bytes >> 20,
            num(mib / Summary::of(&tot).median),
            num(mib / Summary::of(&dds).median),
            ratio * 100.0
        ),
        Some(ratio >= 0.5),
    );
    Ok(())
}
