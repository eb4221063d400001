//! Bounded memory (issue 20, points 2 and 3): a view's private memory is
//! its transaction's pages plus `Options::view_private_pages`, pages past
//! that go back to the system and are read again correctly, closed views
//! kept for reuse hold at most that, and a region several times larger
//! than a memory cgroup's limit is loaded, read, written and checkpointed
//! in durable mode inside it without being killed.
mod common;

use std::path::{Path, PathBuf};
use std::time::Instant;

use common::*;
use txmap::{Durability, Options, Region, View};

const PAGE: usize = 4096;

/// The value every word of page `p` holds after round `round`.
fn value(p: usize, round: u64) -> u64 {
    (p as u64 + 1) * 1_000_003 + round
}

/// Fills every word of pages `pages` with `value(p, round)`, one transaction.
fn fill(v: &mut View, pages: std::ops::Range<usize>, round: u64) {
    v.run(|v| {
        for p in pages.clone() {
            let x = value(p, round);
            for w in v.slice_mut((p * PAGE) as u64, PAGE)?.chunks_exact_mut(8) {
                w.copy_from_slice(&x.to_ne_bytes());
            }
        }
        Ok(())
    })
    .unwrap();
}

/// A plain load of word `w` of page `p` through the view's own address.
fn load(v: &View, p: usize, w: usize) -> u64 {
    assert!((p + 1) * PAGE <= v.len());
    // SAFETY: inside the view's mapping; first touches fault into txmap's handler.
    unsafe { std::ptr::read_volatile(v.base().add(p * PAGE + w * 8) as *const u64) }
}

/// A plain store of `x` to word `w` of page `p` (inside a transaction).
fn store(v: &View, p: usize, w: usize, x: u64) {
    assert!((p + 1) * PAGE <= v.len());
    // SAFETY: as in `load`; the caller is inside a read-write transaction.
    unsafe { std::ptr::write_volatile(v.base().add(p * PAGE + w * 8) as *mut u64, x) }
}

fn pages_of(bytes: u64) -> u64 {
    bytes / PAGE as u64
}

#[test]
fn a_view_holds_at_most_its_transactions_pages_and_its_private_cache() {
    const N: usize = 1024;
    const CACHE: usize = 64;
    let d = tmpfs_dir("mem-bound");
    let opts = Options {
        durability: Durability::Async,
        view_private_pages: CACHE,
        ..Options::default()
    };
    let r = Region::create(&d.join("r.txm"), (N * PAGE) as u64, opts).unwrap();
    let mut w = r.view().unwrap();
    for k in 0..N / 128 {
        fill(&mut w, k * 128..(k + 1) * 128, 0);
    }
    drop(w);
    // Half the pages newer than the region file (versions in the chains),
    // half only in the file.
    r.checkpoint().unwrap();
    let mut w = r.view().unwrap();
    for k in 0..N / 256 {
        fill(&mut w, k * 256..k * 256 + 128, 1);
    }
    let expect = |p: usize| value(p, u64::from(p % 256 < 128));
    let mut v = r.view().unwrap();
    let bound = |what: &str, v: &View, max: usize| {
        let held = pages_of(v.private_bytes());
        assert!(
            held <= max as u64,
            "{what}: the view holds {held} private pages, more than {max}"
        );
    };

    // Read-write transactions reading 256 pages each through the accessors
    // (copies) and writing one: after each, at most the cache is held.
    for k in 0..N / 256 {
        v.run(|v| {
            for p in k * 256..(k + 1) * 256 {
                assert_eq!(v.read::<u64>((p * PAGE + 8) as u64)?, expect(p), "page {p}");
            }
            v.write((k * 256 * PAGE) as u64, &expect(k * 256))
        })
        .unwrap();
        bound("after a read-write transaction", &v, CACHE);
    }

    // Plain loads outside a transaction, every page, twice: the view trims
    // as it goes (at most twice the cache between trims), and every page
    // given back reads its committed content again.
    for round in 0..2 {
        for p in 0..N {
            assert_eq!(load(&v, p, 5), expect(p), "round {round}, page {p}");
        }
        bound("plain loads outside a transaction", &v, 2 * CACHE);
    }

    // One read-only transaction loading every page: all of them are its
    // own until it ends, then the cache is all that stays.
    v.begin_read().unwrap();
    for p in (0..N).rev() {
        assert_eq!(load(&v, p, 7), expect(p), "page {p}");
    }
    v.commit().unwrap();
    bound("after a read-only transaction of plain loads", &v, CACHE);

    // Plain stores to 200 pages (a write set larger than the cache), with
    // reads of others in between: committed whole, then trimmed.
    v.run(|v| {
        for p in 0..200 {
            store(v, p * 5 % N, 3, 42);
            assert_eq!(
                v.read::<u64>((((p * 7 + 1) % N) * PAGE) as u64)?,
                expect((p * 7 + 1) % N)
            );
        }
        Ok(())
    })
    .unwrap();
    bound("after a transaction of 200 plain stores", &v, CACHE);
    let mut o = r.view().unwrap();
    o.begin_read().unwrap();
    for p in 0..N {
        let want = if (0..200).any(|k| k * 5 % N == p) {
            42
        } else {
            expect(p)
        };
        assert_eq!(
            o.read::<u64>((p * PAGE + 24) as u64).unwrap(),
            want,
            "page {p}"
        );
        assert_eq!(
            load(&v, p, 3),
            want,
            "page {p}, plain load in the writer's view"
        );
    }
    o.commit().unwrap();
    bound("plain loads after the stores", &v, 2 * CACHE);

    // Closed views' memory kept for reuse holds at most the cache each.
    drop(v);
    drop(o);
    let pooled = pages_of(r.pooled_view_bytes());
    assert!(
        pooled <= 3 * CACHE as u64,
        "three closed views keep {pooled} private pages, more than {}",
        3 * CACHE
    );
}

/// Where memory cgroups can be made here: v2 with the memory controller
/// (`memory.max`), else v1 (`memory.limit_in_bytes`).
fn cgroup_root() -> Result<(PathBuf, &'static str), String> {
    let v2 = Path::new("/sys/fs/cgroup");
    let controllers = std::fs::read_to_string(v2.join("cgroup.controllers")).unwrap_or_default();
    if controllers.split_whitespace().any(|c| c == "memory") {
        return Ok((v2.to_path_buf(), "memory.max"));
    }
    let v1 = Path::new("/sys/fs/cgroup/memory");
    if v1.join("memory.limit_in_bytes").exists() {
        return Ok((v1.to_path_buf(), "memory.limit_in_bytes"));
    }
    Err("no memory cgroup controller (neither v2 memory.max nor v1 memory.limit_in_bytes)".into())
}

/// A memory cgroup of its own, removed on drop.
struct Cgroup(PathBuf);

impl Cgroup {
    fn new(limit: u64) -> Result<Cgroup, String> {
        let (root, file) = cgroup_root()?;
        let dir = root.join(format!("txmap-test-{}", std::process::id()));
        std::fs::create_dir(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        let cg = Cgroup(dir);
        std::fs::write(cg.0.join(file), limit.to_string())
            .map_err(|e| format!("cannot set {file} in {}: {e}", cg.0.display()))?;
        Ok(cg)
    }

    /// Times the group was out of memory and killed something.
    fn oom_kills(&self) -> u64 {
        let text = std::fs::read_to_string(self.0.join("memory.events"))
            .or_else(|_| std::fs::read_to_string(self.0.join("memory.oom_control")))
            .unwrap_or_default();
        text.lines()
            .find_map(|l| l.strip_prefix("oom_kill "))
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or(0)
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir(&self.0);
    }
}

const BIG_PAGES: usize = 64 * 1024; // 256 MiB
const LIMIT: u64 = 64 << 20;

fn big_opts() -> Options {
    Options {
        durability: Durability::Durable,
        checkpoint_bytes: 16 << 20,
        view_private_pages: 1024,
        ..Options::default()
    }
}

/// The child: joins the cgroup, then loads, reads, writes, checkpoints and
/// reads everything again; prints its throughput.
fn larger_than_ram_child() {
    let cg = std::env::var("TXMAP_CGROUP").unwrap();
    std::fs::write(
        Path::new(&cg).join("cgroup.procs"),
        std::process::id().to_string(),
    )
    .unwrap();
    let path = PathBuf::from(std::env::var("TXMAP_PATH").unwrap());
    let r = Region::create(&path, (BIG_PAGES * PAGE) as u64, big_opts()).unwrap();
    let mut v = r.view().unwrap();
    let t = Instant::now();
    for k in 0..BIG_PAGES / 256 {
        fill(&mut v, k * 256..(k + 1) * 256, 0);
    }
    let load_s = t.elapsed().as_secs_f64();
    eprintln!("load {load_s:.2} s");
    r.checkpoint().unwrap();
    let mut state = seed("larger_than_ram");
    // xorshift64: enough for page numbers.
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut written = std::collections::HashMap::new();
    let expect = |p: usize, w: &std::collections::HashMap<usize, u64>| {
        w.get(&p).copied().unwrap_or(value(p, 0))
    };
    // Random reads (read-only transactions of 100), then random durable
    // writes (transactions of 16 pages), twice over.
    let (mut reads, mut writes) = (0u64, 0u64);
    let t = Instant::now();
    for round in 1..=2u64 {
        let tr = Instant::now();
        for _ in 0..200 {
            v.begin_read().unwrap();
            for _ in 0..100 {
                let p = (next() % BIG_PAGES as u64) as usize;
                let got = v.read::<u64>((p * PAGE + 8 * (p % 512)) as u64).unwrap();
                assert_eq!(got, expect(p, &written), "page {p}");
                reads += 1;
            }
            v.commit().unwrap();
        }
        eprintln!("round {round}: reads {:.2} s", tr.elapsed().as_secs_f64());
        let tw = Instant::now();
        for _ in 0..200 {
            let ps: Vec<usize> = (0..16)
                .map(|_| (next() % BIG_PAGES as u64) as usize)
                .collect();
            v.run(|v| {
                for &p in &ps {
                    let x = value(p, round);
                    for w in v.slice_mut((p * PAGE) as u64, PAGE)?.chunks_exact_mut(8) {
                        w.copy_from_slice(&x.to_ne_bytes());
                    }
                }
                Ok(())
            })
            .unwrap();
            for &p in &ps {
                written.insert(p, value(p, round));
            }
            writes += 1;
        }
        eprintln!("round {round}: writes {:.2} s", tw.elapsed().as_secs_f64());
        let tc = Instant::now();
        r.checkpoint().unwrap();
        eprintln!(
            "round {round}: checkpoint {:.2} s",
            tc.elapsed().as_secs_f64()
        );
    }
    let mixed_s = t.elapsed().as_secs_f64();
    // Everything again, in read-only transactions of 4,096 pages.
    let t = Instant::now();
    for k in 0..BIG_PAGES / 4096 {
        v.begin_read().unwrap();
        for p in k * 4096..(k + 1) * 4096 {
            let got = v.read::<u64>((p * PAGE + 8 * (p % 512)) as u64).unwrap();
            assert_eq!(got, expect(p, &written), "page {p}");
        }
        v.commit().unwrap();
    }
    let scan_s = t.elapsed().as_secs_f64();
    let mib = (BIG_PAGES * PAGE) as f64 / (1 << 20) as f64;
    println!(
        "RESULT region {mib} MiB, limit {} MiB, view_private_pages {}: load {:.1} MiB/s; \
         {reads} random reads and {writes} durable 16-page commits in {mixed_s:.2} s; \
         full read {:.1} MiB/s; view private memory {} KiB",
        LIMIT >> 20,
        big_opts().view_private_pages,
        mib / load_s,
        mib / scan_s,
        v.private_bytes() >> 10,
    );
}

#[test]
fn a_region_four_times_the_memory_limit_is_loaded_read_written_and_checkpointed() {
    let test = "a_region_four_times_the_memory_limit_is_loaded_read_written_and_checkpointed";
    if role().is_some() {
        return larger_than_ram_child();
    }
    let cg = match Cgroup::new(LIMIT) {
        Ok(cg) => cg,
        Err(why) => {
            eprintln!("{test}: SKIPPED: {why}");
            return;
        }
    };
    let d = ext4_dir("mem-cgroup");
    let out = child(
        test,
        "worker",
        &[
            ("TXMAP_CGROUP", cg.0.display().to_string()),
            ("TXMAP_PATH", d.join("big.txm").display().to_string()),
        ],
    )
    .output()
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    // The harness prints the test's name on the same line first.
    let result = stdout
        .lines()
        .find_map(|l| l.find("RESULT").map(|i| &l[i..]))
        .unwrap_or("");
    eprintln!("{test}: {result}");
    assert_eq!(cg.oom_kills(), 0, "the cgroup killed for memory\n{stderr}");
    assert!(
        out.status.success(),
        "the child failed: {:?}\n{stdout}\n{stderr}",
        out.status
    );
    assert!(!result.is_empty(), "the child did not finish\n{stdout}");
}

/// A read-only transaction's read of a leaf the view already holds (the
/// fast path, `held_read`) marks the leaf as this transaction's: a scan
/// that borrows the leaf while its values (blocks, installed in the view)
/// push the view over its private cache must not have the leaf trimmed
/// from under it. Without the mark, the trim gives the leaf's memory back
/// and the scan reads zeros where its keys were.
#[test]
fn a_held_leaf_read_by_a_read_only_scan_is_not_trimmed_under_it() {
    use std::ops::Bound;
    use txmap::collections::BTree;
    const KEYS: u64 = 200;
    const VALUE: usize = 10_000; // a block of three or four pages each
    let d = tmpfs_dir("mem-held-leaf");
    let opts = Options {
        durability: Durability::Async,
        view_private_pages: 16,
        ..Options::default()
    };
    let r = Region::create(&d.join("r.txm"), 8 << 20, opts).unwrap();
    let mut w = r.view().unwrap();
    let val = |k: u64| vec![(k % 251) as u8 + 1; VALUE];
    let t = w
        .run(|v| {
            let t = BTree::create(v)?;
            for k in 0..KEYS {
                t.put(v, &k.to_be_bytes(), &val(k))?;
            }
            Ok(t)
        })
        .unwrap();
    let mut rv = r.view().unwrap();
    // A read-write transaction installs the first leaf in the reader's
    // view; its end keeps it (one of the few pages it touched).
    rv.run(|v| t.get(v, &0u64.to_be_bytes())).unwrap();
    rv.begin_read().unwrap();
    let mut next = 0u64;
    t.scan(&rv, Bound::Unbounded, Bound::Unbounded, |k, v| {
        assert_eq!(k, next.to_be_bytes(), "key {next}");
        assert!(v == val(next), "value of key {next}");
        next += 1;
        Ok(true)
    })
    .unwrap();
    rv.commit().unwrap();
    assert_eq!(next, KEYS);
}
