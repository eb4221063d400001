//! A short run of every fuzz target body (`txmap::fuzz`) on stable: the
//! committed seed corpus (`fuzz/corpus/<target>/`), then deterministic
//! mutations of it. The long coverage-guided runs are `cargo +nightly fuzz`
//! (docs/reliability.md, "Fuzzing"). `write_fuzz_seeds` (ignored) makes the
//! seeds from real regions.

use std::path::{Path, PathBuf};

use txmap::collections::{self, AnyMap, ArrayList, Kind, Map};
use txmap::io::sim::SplitMix;
use txmap::{Options, Region};

fn corpus_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus")
}

fn seeds(target: &str) -> Vec<(String, Vec<u8>)> {
    let dir = corpus_root().join(target);
    let mut out: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| {
            let e = e.unwrap();
            (
                e.file_name().to_string_lossy().into_owned(),
                std::fs::read(e.path()).unwrap(),
            )
        })
        .collect();
    out.sort();
    out
}

const INTERESTING: [u64; 8] = [
    0,
    1,
    4095,
    4096,
    1 << 31,
    u32::MAX as u64,
    u64::MAX,
    1 << 63,
];

/// One to four byte-level changes: bit flips, bytes set, an 8-byte field
/// set to a boundary value, a cut, a copied block. Offsets favour the
/// first pages, where the headers are.
fn mutate(input: &[u8], rng: &mut SplitMix) -> Vec<u8> {
    let mut b = input.to_vec();
    for _ in 0..1 + rng.next() % 4 {
        if b.is_empty() {
            b.push(rng.next() as u8);
            continue;
        }
        let span = match rng.next() % 2 {
            0 => b.len().min(16 << 10),
            _ => b.len(),
        };
        let at = (rng.next() % span as u64) as usize;
        match rng.next() % 6 {
            0 => b[at] ^= 1 << (rng.next() % 8),
            1 => b[at] = rng.next() as u8,
            2 => {
                let at = at / 8 * 8;
                let v = INTERESTING[(rng.next() % 8) as usize].to_le_bytes();
                let n = (b.len() - at).min(8);
                b[at..at + n].copy_from_slice(&v[..n]);
            }
            3 => b.truncate(at),
            4 => {
                let from = (rng.next() % b.len() as u64) as usize;
                let n = (rng.next() % 64) as usize;
                let n = n.min(b.len() - from).min(b.len() - at);
                b.copy_within(from..from + n, at);
            }
            _ => b[at] = [0, 0xff][(rng.next() % 2) as usize],
        }
    }
    b
}

#[test]
fn every_fuzz_target_survives_its_seeds_and_mutations_of_them() {
    const MUTATIONS: usize = 3000;
    for (name, corpus, body) in txmap::fuzz::TARGETS {
        let seeds = seeds(corpus);
        assert!(!seeds.is_empty(), "no seeds for {name}");
        for (file, s) in &seeds {
            let r = std::panic::catch_unwind(|| body(s));
            assert!(r.is_ok(), "{name}: seed {file} panics");
        }
        let mut rng = SplitMix(0x5eed ^ name.len() as u64);
        for i in 0..MUTATIONS {
            let (file, s) = &seeds[i % seeds.len()];
            let m = mutate(s, &mut rng);
            if std::panic::catch_unwind(|| body(&m)).is_err() {
                let out = std::env::temp_dir().join(format!("txmap-fuzz-{name}-{i}"));
                std::fs::write(&out, &m).unwrap();
                panic!(
                    "{name}: mutation {i} of seed {file} panics; input in {}",
                    out.display()
                );
            }
        }
    }
}

/// The bytes without their trailing zeros (parsers read a short file as
/// one ending there; seeds stay small).
fn trim(b: &[u8]) -> &[u8] {
    &b[..b.iter().rposition(|&x| x != 0).map_or(0, |i| i + 1)]
}

fn files(path: &Path) -> (Vec<u8>, Vec<u8>) {
    (
        std::fs::read(path).unwrap(),
        std::fs::read(txmap::log_path(path)).unwrap(),
    )
}

/// Writes the seed corpus from real regions: empty, with commits in the
/// log, after a checkpoint with more commits, and one with each collection
/// kind. Run by hand: `cargo test --release -p txmap --test fuzz_smoke --
/// --ignored write_fuzz_seeds`.
#[test]
#[ignore]
fn write_fuzz_seeds() {
    let dir = std::env::temp_dir().join(format!("txmap-fuzz-seeds-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut pairs: Vec<(&str, Vec<u8>, Vec<u8>)> = Vec::new();

    let p = dir.join("empty.txm");
    Region::create(&p, 16 << 10, Options::default())
        .unwrap()
        .close()
        .unwrap();
    let (r, l) = files(&p);
    pairs.push(("empty", r, l));

    // Commits still in the log: the files copied while the region is open.
    let p = dir.join("logged.txm");
    let region = Region::create(&p, 16 << 10, Options::default()).unwrap();
    let mut v = region.view().unwrap();
    for i in 0..6u64 {
        v.run(|v| v.write(i * 700, &(i * 0x0101_0101)).map(|_| ()))
            .unwrap();
    }
    let (r, l) = files(&p);
    pairs.push(("logged", r, l));
    // A checkpoint, then more commits in the new log epoch, one growing.
    region.checkpoint().unwrap();
    v.run(|v| v.write(8, &7u64)).unwrap();
    region.grow(24 << 10).unwrap();
    v.run(|v| v.write(20 << 10, &9u64)).unwrap();
    let (r, l) = files(&p);
    pairs.push(("checkpointed", r, l));
    drop(v);
    region.close().unwrap();

    let mut datas: Vec<(&str, Vec<u8>)> = Vec::new();
    for (name, kind) in [
        ("btree", Some(Kind::BTree)),
        ("cobtree", Some(Kind::CoBTree)),
        ("lhash", Some(Kind::LinearHash)),
        ("array", None),
    ] {
        let p = dir.join(format!("{name}.txm"));
        let region = Region::create(&p, 1 << 20, Options::default()).unwrap();
        let mut v = region.view().unwrap();
        match kind {
            Some(kind) => {
                let m = v.run(|v| AnyMap::create_named(v, name, kind)).unwrap();
                for i in 0..40u32 {
                    let val = vec![i as u8; if i % 10 == 0 { 300 } else { 5 }];
                    v.run(|v| m.put(v, format!("key-{i}").as_bytes(), &val))
                        .unwrap();
                }
                v.run(|v| m.delete(v, b"key-3")).unwrap();
            }
            None => {
                let a = v
                    .run(|v| {
                        collections::alloc::init(v)?;
                        let a = ArrayList::create(v, 8)?;
                        collections::alloc::register(v, name, Kind::Array, a.at)?;
                        Ok(a)
                    })
                    .unwrap();
                for i in 0..50u64 {
                    v.run(|v| a.push_pod(v, &i).map(|_| ())).unwrap();
                }
            }
        }
        drop(v);
        region.close().unwrap();
        let (r, l) = files(&p);
        datas.push((name, trim(&r[4096..]).to_vec()));
        pairs.push((name, r, l));
    }

    write_journal_seeds();
    let root = corpus_root();
    let put = |target: &str, name: &str, bytes: &[u8]| {
        let d = root.join(target);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join(name), bytes).unwrap();
    };
    for (name, r, l) in &pairs {
        let (r, l) = (trim(r), trim(l));
        put("region_header", name, &r[..r.len().min(4096)]);
        put("log_header", name, &l[..l.len().min(4096)]);
        put("log_scan", name, l);
        put("files", name, &txmap::fuzz::join_files(r, l));
        // Each record of the log, with the salt byte set to "the record's own".
        let h = txmap::wal::format::LogHeader::decode(&l[..4096.min(l.len())]);
        if let (Ok(h), true) = (h, l.len() > 4096) {
            let mut padded = l.to_vec();
            padded.resize(l.len() + 4096, 0);
            let s = txmap::wal::scan::scan(&padded, &h);
            let mut off = 4096;
            for (i, rec) in s.records.iter().enumerate() {
                let mut input = vec![1u8];
                input.extend_from_slice(&h.salt.to_le_bytes());
                input.extend_from_slice(&padded[off..off + rec.len]);
                put("log_record", &format!("{name}-{i}"), &input);
                off += rec.len;
            }
        }
    }
    for (name, d) in &datas {
        put("data", name, d);
    }
    // A plain file's record page (its side file's second page).
    let p = dir.join("plain.bin");
    std::fs::write(&p, [7u8; 5000]).unwrap();
    drop(Region::open_plain(&p, Options::default()).unwrap());
    let side = std::fs::read(txmap::io::plain::meta_path(&p)).unwrap();
    put("region_header", "plain_record", trim(&side[4096..]));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Writes the page journal's seed (`fuzz/corpus/journal/`). Run by hand:
/// `cargo test --release -p txmap --test fuzz_smoke -- --ignored
/// write_journal_seeds`.
#[test]
#[ignore]
fn write_journal_seeds() {
    let d = corpus_root().join("journal");
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(d.join("two-pages"), txmap::fuzz::journal_seed()).unwrap();
}
