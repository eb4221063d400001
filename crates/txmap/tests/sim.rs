//! Power loss and failing disks, simulated: the storage backend drops or tears
//! unsynced writes at a crash, or fails the n-th write or sync. Recovery must
//! always produce the state after a prefix of the commits that includes every
//! acknowledged durable one.
use std::sync::Arc;
use std::time::Duration;

use txmap::io::sim::{CrashMode, SimStorage, SplitMix};
use txmap::{Durability, Error, Options, Region};

const PAGE: u64 = 4096;
const SIZE: u64 = 8 * PAGE;

struct Sim {
    data: Arc<SimStorage>,
    log: Arc<SimStorage>,
    region: Region,
}

fn opts(durability: Durability, checkpoint_bytes: u64) -> Options {
    Options {
        durability,
        checkpoint_bytes,
        async_sync_interval: Duration::from_secs(3600),
        ..Options::default()
    }
}

fn sim(o: Options) -> Sim {
    let data = Arc::new(SimStorage::new("data").unwrap());
    let log = Arc::new(SimStorage::new("log").unwrap());
    Region::format(&*data, &*log, SIZE).unwrap();
    let region = Region::open_with(Box::new(data.clone()), Box::new(log.clone()), o).unwrap();
    Sim { data, log, region }
}

/// Recovers from crash images of both devices and returns the region's bytes.
fn recover(s: &Sim, seed: u64) -> Result<Vec<u8>, Error> {
    let d = SimStorage::from_bytes("data", s.data.crash_image(CrashMode::Random(seed))).unwrap();
    let l =
        SimStorage::from_bytes("log", s.log.crash_image(CrashMode::Random(seed ^ 0xabc))).unwrap();
    let r = Region::open_with(Box::new(d), Box::new(l), Options::default())?;
    let mut v = r.view()?;
    v.begin_read()?;
    let bytes = v.slice(0, r.size() as usize)?.to_vec();
    v.commit()?;
    Ok(bytes)
}

/// Recovers from a crash image (by `seed`) and checks the result is the state
/// after some prefix of `history` that includes at least `at_least` commits.
fn assert_recovers_a_prefix(s: &Sim, seed: u64, history: &[Vec<u8>], at_least: usize, case: &str) {
    let got = recover(s, seed).unwrap_or_else(|e| panic!("{case}: recovery failed: {e}"));
    let k = history.iter().rposition(|h| *h == got);
    assert!(
        k.is_some_and(|k| k >= at_least),
        "{case}: recovered state is not a prefix of at least {at_least} commits (matched {k:?})"
    );
}

/// A random commit: a few byte ranges, some spanning pages. Applies it to the
/// model as well.
fn random_commit(r: &Region, rng: &mut SplitMix, model: &mut [u8]) -> Result<(), Error> {
    let mut v = r.view()?;
    let n = 1 + rng.next() % 4;
    let writes: Vec<(u64, Vec<u8>)> = (0..n)
        .map(|_| {
            let len = 1 + rng.next() % 300;
            let off = rng.next() % (SIZE - len);
            (off, (0..len).map(|_| rng.next() as u8).collect())
        })
        .collect();
    for (off, bytes) in &writes {
        model[*off as usize..*off as usize + bytes.len()].copy_from_slice(bytes);
    }
    v.run(|v| {
        for (off, bytes) in &writes {
            v.slice_mut(*off, bytes.len())?.copy_from_slice(bytes);
        }
        Ok(())
    })
}

#[test]
fn power_loss_recovers_a_prefix_including_every_synced_commit() {
    for seed in 0..150u64 {
        let mut rng = SplitMix(seed);
        let durability = if seed % 2 == 0 {
            Durability::Durable
        } else {
            Durability::Async
        };
        let s = sim(opts(durability, [2048, 16384, 1 << 30][seed as usize % 3]));
        let mut history = vec![vec![0u8; SIZE as usize]];
        let mut synced = 0;
        for _ in 0..1 + rng.next() % 40 {
            let mut next = history.last().unwrap().clone();
            random_commit(&s.region, &mut rng, &mut next).unwrap();
            history.push(next);
            if durability == Durability::Durable {
                synced = history.len() - 1;
            } else if rng.next().is_multiple_of(5) {
                s.region.sync().unwrap();
                synced = history.len() - 1;
            }
        }
        assert_recovers_a_prefix(&s, seed, &history, synced, &format!("seed {seed}"));
    }
}

#[test]
fn unsynced_writes_dropped_entirely_still_leave_every_durable_commit() {
    let mut rng = SplitMix(7);
    let s = sim(opts(Durability::Durable, 4096));
    let mut model = vec![0u8; SIZE as usize];
    for _ in 0..60 {
        random_commit(&s.region, &mut rng, &mut model).unwrap();
    }
    let d = SimStorage::from_bytes("data", s.data.crash_image(CrashMode::DropAll)).unwrap();
    let l = SimStorage::from_bytes("log", s.log.crash_image(CrashMode::DropAll)).unwrap();
    let r = Region::open_with(Box::new(d), Box::new(l), Options::default()).unwrap();
    let mut v = r.view().unwrap();
    v.begin_read().unwrap();
    assert_eq!(v.slice(0, SIZE as usize).unwrap(), &model[..]);
    v.commit().unwrap();
}

#[test]
fn a_failing_disk_gives_clear_errors_and_loses_no_acknowledged_commit() {
    for n in 0..120u64 {
        let mut rng = SplitMix(n * 13 + 1);
        let s = sim(opts(Durability::Durable, 8192));
        let failing = if n % 2 == 0 { &s.log } else { &s.data };
        failing.fail_after(n / 2);
        let mut history = vec![vec![0u8; SIZE as usize]];
        let mut err = None;
        for _ in 0..80 {
            let mut next = history.last().unwrap().clone();
            match random_commit(&s.region, &mut rng, &mut next) {
                Ok(()) => history.push(next),
                Err(e) => {
                    history.push(next); // the failed commit may still have reached the disk
                    err = Some(e);
                    break;
                }
            }
        }
        let acked = history.len() - 2;
        let Some(e) = err else {
            continue; // the countdown outlasted the workload
        };
        let msg = e.to_string();
        assert!(
            matches!(e, Error::Io { .. } | Error::Poisoned(_)),
            "n={n}: {e:?}"
        );
        assert!(
            msg.contains("sim:"),
            "n={n}: error does not name the file: {msg}"
        );
        // Once the disk failed, later commits refuse to run rather than pretend.
        let again = random_commit(&s.region, &mut rng, &mut vec![0u8; SIZE as usize]);
        assert!(
            again.is_err(),
            "n={n}: commit after a failed sync succeeded"
        );
        let why = s.region.stats().poisoned;
        assert!(
            why.as_deref().is_some_and(|m| m.contains("sim:")),
            "n={n}: stats do not say why commits fail: {why:?}"
        );
        assert_recovers_a_prefix(&s, n, &history, acked, &format!("n={n}"));
    }
}

#[test]
fn recovery_interrupted_at_any_write_recovers_to_the_same_state() {
    let mut rng = SplitMix(99);
    let s = sim(opts(Durability::Durable, 1 << 30));
    let mut model = vec![0u8; SIZE as usize];
    for _ in 0..25 {
        random_commit(&s.region, &mut rng, &mut model).unwrap();
    }
    // The images a power loss would leave: every commit is in the log only.
    let data_img = s.data.crash_image(CrashMode::DropAll);
    let log_img = s.log.crash_image(CrashMode::DropAll);
    for k in 0..40u64 {
        let d = SimStorage::from_bytes("data", data_img.clone()).unwrap();
        let l = SimStorage::from_bytes("log", log_img.clone()).unwrap();
        let failing = if k % 2 == 0 { &d } else { &l };
        failing.fail_after(k / 2);
        let (d, l) = (Arc::new(d), Arc::new(l));
        let first = Region::open_with(Box::new(d.clone()), Box::new(l.clone()), Options::default());
        drop(first);
        // Power fails during (or after) that recovery; recover again.
        let d2 = SimStorage::from_bytes("data", d.crash_image(CrashMode::Random(k))).unwrap();
        let l2 = SimStorage::from_bytes("log", l.crash_image(CrashMode::Random(k + 1))).unwrap();
        let r = Region::open_with(Box::new(d2), Box::new(l2), Options::default())
            .unwrap_or_else(|e| panic!("k={k}: second recovery failed: {e}"));
        let mut v = r.view().unwrap();
        v.begin_read().unwrap();
        assert_eq!(v.slice(0, SIZE as usize).unwrap(), &model[..], "k={k}");
        v.commit().unwrap();
    }
}

#[test]
fn checkpoints_racing_commits_write_only_committed_versions() {
    let o = Options {
        durability: Durability::Async,
        async_sync_interval: Duration::from_millis(1),
        checkpoint_bytes: u64::MAX,
        ..Options::default()
    };
    let s = sim(o);
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let ckpt = {
        let (r, stop) = (s.region.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                r.checkpoint().unwrap();
            }
        })
    };
    // Every commit writes one counter into all 8 pages (each page filled
    // with it), so any page holding bytes of two commits is detected.
    let mut v = s.region.view().unwrap();
    for i in 1..=3000u64 {
        v.run(|v| {
            for p in 0..8 {
                v.slice_mut(p * PAGE, PAGE as usize)?.fill(i as u8);
                v.write(p * PAGE, &i)?;
            }
            Ok(())
        })
        .unwrap();
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    ckpt.join().unwrap();
    s.region.sync().unwrap();
    let got = recover(&s, 1).unwrap();
    let n = u64::from_le_bytes(got[..8].try_into().unwrap());
    assert_eq!(n, 3000, "every synced commit recovers");
    for p in 0..8usize {
        let page = &got[p * PAGE as usize..(p + 1) * PAGE as usize];
        assert_eq!(
            u64::from_le_bytes(page[..8].try_into().unwrap()),
            n,
            "page {p}"
        );
        assert!(
            page[8..].iter().all(|&b| b == n as u8),
            "page {p} mixes versions"
        );
    }
}

/// Old snapshots held across checkpoints that pass them (copy-on-checkpoint):
/// each reader sees exactly the state it began at, on every page (most
/// touched for the first time after several checkpoints), and power loss at
/// any moment still recovers a prefix including every durable commit.
#[test]
fn copy_on_checkpoint_keeps_old_snapshots_and_recovers_a_prefix() {
    let mut preserved = 0;
    for seed in 0..60u64 {
        let mut rng = SplitMix(seed ^ 0xc0c0);
        let s = sim(opts(Durability::Durable, [1024, 4096][seed as usize % 2]));
        let mut history = vec![vec![0u8; SIZE as usize]];
        let mut readers: Vec<(txmap::View, usize)> = Vec::new();
        for _ in 0..1 + rng.next() % 60 {
            let mut next = history.last().unwrap().clone();
            random_commit(&s.region, &mut rng, &mut next).unwrap();
            history.push(next);
            match rng.next() % 10 {
                0 | 1 if readers.len() < 3 => {
                    let mut v = s.region.view().unwrap();
                    v.begin_read().unwrap();
                    // Touch one page now, the rest later.
                    let _ = v.read::<u8>(rng.next() % SIZE).unwrap();
                    readers.push((v, history.len() - 1));
                }
                2 if !readers.is_empty() => {
                    let (mut v, at) = readers.remove(rng.next() as usize % readers.len());
                    assert!(
                        v.slice(0, SIZE as usize).unwrap() == &history[at][..],
                        "seed {seed}: snapshot {at} changed under its reader"
                    );
                    v.commit().unwrap();
                }
                _ => {}
            }
        }
        for (v, at) in &readers {
            assert!(
                v.slice(0, SIZE as usize).unwrap() == &history[*at][..],
                "seed {seed}: snapshot {at} changed under its reader"
            );
        }
        let st = s.region.stats();
        assert!(
            st.version_pages <= (SIZE / PAGE) as usize * (3 + readers.len()) + 8,
            "seed {seed}: {st:?}"
        );
        preserved += st.preserved_pages;
        let n = history.len() - 1;
        assert_recovers_a_prefix(&s, seed, &history, n, &format!("seed {seed}"));
    }
    assert!(
        preserved > 100,
        "copy-on-checkpoint hardly ran: {preserved} pages"
    );
}

/// The log's preallocation writes its zeros in pieces of at most 64 KiB:
/// one 4 MiB write makes the page cache keep the log in large folios, and
/// then every small append and sync pays for a whole folio (on ext4 with
/// kernel 6.18, 88 against 65 µs per `fdatasync`; docs/bench/ANALYSIS.md).
/// And the new length is synced before the record goes in: a crash then
/// never cuts a record, so a log that ends inside one was truncated
/// (docs/FORMAT.md, "Reading the log").
#[test]
fn log_preallocation_writes_zeros_in_small_pieces_and_syncs_them_first() {
    let s = sim(opts(Durability::Async, 64 << 20));
    let mut v = s.region.view().unwrap();
    v.run(|v| v.write(0, &1u64)).unwrap();
    // Only the record is unsynced: the zeros were synced before it.
    assert_eq!(s.log.unsynced(), 1, "the extended length was not synced");
    drop(v);
    // A 2 MiB record extends the log by at least 2 MiB of zeros: the 32nd
    // write or sync fails, so at least 32 pieces, not one large write.
    let s = sim(opts(Durability::Async, 64 << 20));
    let mut v = s.region.view().unwrap();
    s.log.fail_after(31);
    let r = v.run(|v| {
        v.slice_mut(0, 2 << 20)?.fill(7);
        Ok(())
    });
    assert!(
        r.is_err(),
        "fewer than 32 writes: the zeros went in large pieces"
    );
    drop(v);
}

/// A record of several 64 KiB pieces (a bulk load's) extends the log by
/// `set_len` under itself instead of writing zeros there first, and power
/// loss after each such commit still recovers a prefix holding every
/// synced commit.
#[test]
fn large_records_extend_the_log_under_themselves_and_survive_power_loss() {
    large_records_survive_power_loss(96 * PAGE, 12);
}

/// Records of over 1 MiB: the log is extended on a thread of its own while
/// the versions are reserved, and the record synced on another while they
/// are published; the commit returns only once both are done.
#[test]
fn records_synced_beside_their_publication_survive_power_loss() {
    large_records_survive_power_loss(300 * PAGE, 4);
}

/// Commits of most of a `big`-byte region, power lost after each.
fn large_records_survive_power_loss(big: u64, seeds: u64) {
    use txmap::io::sim::Call;
    for seed in 0..seeds {
        let mut rng = SplitMix(seed);
        let data = Arc::new(SimStorage::new("data").unwrap());
        let log = Arc::new(SimStorage::new("log").unwrap());
        Region::format(&*data, &*log, big).unwrap();
        let region = Region::open_with(
            Box::new(data.clone()),
            Box::new(log.clone()),
            opts(Durability::Durable, 1 << 30),
        )
        .unwrap();
        let s = Sim { data, log, region };
        let mut history = vec![vec![0u8; big as usize]];
        for k in 0..3 {
            let mut next = history.last().unwrap().clone();
            // Most of the region in one commit: random bytes, so the
            // record is as large as the pages.
            let len = (big - 4 * PAGE) as usize;
            let off = (rng.next() % (4 * PAGE)) as usize;
            let bytes: Vec<u8> = (0..len).map(|_| rng.next() as u8 | 1).collect();
            next[off..off + len].copy_from_slice(&bytes);
            let faults = s.log.faults().clone();
            faults.reset_counts();
            let mut v = s.region.view().unwrap();
            v.run(|v| {
                v.slice_mut(off as u64, len)?.copy_from_slice(&bytes);
                Ok(())
            })
            .unwrap();
            drop(v);
            // The first record outgrows the empty log's first extension:
            // the log is extended under it by one resize.
            if k == 0 {
                assert_eq!(faults.count(Call::SetLen), 1, "seed {seed}");
            }
            history.push(next);
            let synced = history.len() - 1;
            assert_recovers_a_prefix(&s, seed * 10 + k, &history, synced, "large record");
        }
    }
}
