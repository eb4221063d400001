//! Plain files (issue 19 point 2): an ordinary file mapped at offset 0,
//! txmap's metadata beside it; the file holds exactly the committed bytes
//! and its own length whenever nobody has it open, also after SIGKILL and
//! recovery.
mod common;

use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::time::Duration;

use common::*;
use txmap::{Error, Options, Region};

const PAGE: u64 = 4096;

/// Bytes of a file before txmap sees it.
fn initial(len: u64) -> Vec<u8> {
    (0..len).map(|i| (i * 7 % 251) as u8).collect()
}

fn read_all(r: &Region) -> Vec<u8> {
    let mut v = r.view().unwrap();
    v.begin_read().unwrap();
    let b = v.slice(0, r.size() as usize).unwrap().to_vec();
    v.commit().unwrap();
    b
}

fn put(v: &mut txmap::View, off: u64, bytes: &[u8]) -> txmap::Result<()> {
    v.slice_mut(off, bytes.len())?.copy_from_slice(bytes);
    Ok(())
}

#[test]
fn a_plain_file_holds_its_committed_bytes_at_offset_0_after_close() {
    let d = ext4_dir("plain_round_trip");
    let p = d.join("data.bin");
    let mut model = initial(3 * PAGE);
    std::fs::write(&p, &model).unwrap();
    {
        let r = Region::open_plain(&p, Options::default()).unwrap();
        assert!(r.is_plain());
        assert_eq!(r.size(), 3 * PAGE);
        assert_eq!(read_all(&r), model, "the file's bytes at offset 0");
        let mut v = r.view().unwrap();
        v.run(|v| {
            put(v, 0, b"first")?;
            put(v, PAGE + 100, b"second")?;
            put(v, 3 * PAGE - 4, b"last")
        })
        .unwrap();
    }
    model[..5].copy_from_slice(b"first");
    model[PAGE as usize + 100..PAGE as usize + 106].copy_from_slice(b"second");
    model[3 * PAGE as usize - 4..].copy_from_slice(b"last");
    assert_eq!(std::fs::read(&p).unwrap(), model, "the file after a close");
    for side in ["-txmap", "-log"] {
        assert!(d.join(&format!("data.bin{side}")).exists(), "{side}");
    }
    // Region::open knows it as a plain file now.
    let r = Region::open(&p, Options::default()).unwrap();
    assert!(r.is_plain());
    assert_eq!(read_all(&r), model);
}

#[test]
fn a_length_that_is_not_a_page_multiple_is_kept() {
    let d = ext4_dir("plain_odd_length");
    for len in [1u64, 5000, 4095, 0] {
        let p = d.join(&format!("f{len}"));
        let mut model = initial(len);
        std::fs::write(&p, &model).unwrap();
        for round in 0..2u8 {
            let r = Region::open_plain(&p, Options::default()).unwrap();
            assert_eq!(r.size(), len.div_ceil(PAGE).max(1) * PAGE, "len {len}");
            let mut v = r.view().unwrap();
            v.run(|v| {
                if len > 0 {
                    put(v, len - 1, &[round + 1])?;
                }
                // Past the length, in the last page: not part of the file.
                put(v, r.size() - 1, &[0xEE])
            })
            .unwrap();
            r.checkpoint().unwrap();
            drop(v);
            drop(r);
            if len > 0 {
                model[len as usize - 1] = round + 1;
            }
            assert_eq!(std::fs::read(&p).unwrap(), model, "len {len} round {round}");
        }
    }
    // Read-only, an empty file's page would lie past its end.
    let ro = Options {
        read_only: true,
        ..Options::default()
    };
    assert!(matches!(
        Region::open(&d.join("f0"), ro.clone()),
        Err(Error::Unsupported { .. })
    ));
    let r = Region::open(&d.join("f5000"), ro).unwrap();
    assert_eq!(
        &read_all(&r)[..5000],
        &std::fs::read(d.join("f5000")).unwrap()[..]
    );
}

#[test]
fn growing_a_plain_region_makes_the_file_the_grown_size() {
    let d = ext4_dir("plain_grow");
    let p = d.join("g.bin");
    let mut model = initial(5000);
    std::fs::write(&p, &model).unwrap();
    {
        let r = Region::open_plain(&p, Options::default()).unwrap();
        r.grow(20000).unwrap();
        assert_eq!(r.size(), 5 * PAGE);
        let mut v = r.view().unwrap();
        v.run(|v| put(v, 20000, b"grown")).unwrap();
    }
    model.resize(5 * PAGE as usize, 0);
    model[20000..20005].copy_from_slice(b"grown");
    assert_eq!(std::fs::read(&p).unwrap(), model);
}

#[test]
fn a_file_changed_while_closed_is_refused_unless_accepted() {
    let d = ext4_dir("plain_changed");
    let p = d.join("c.bin");
    std::fs::write(&p, initial(6000)).unwrap();
    drop(Region::open_plain(&p, Options::default()).unwrap());
    // Reopening an untouched file works.
    drop(Region::open_plain(&p, Options::default()).unwrap());
    let mut changed = initial(6000);
    changed.extend_from_slice(&[9; 5000]);
    std::fs::write(&p, &changed).unwrap();
    match Region::open_plain(&p, Options::default()) {
        Err(Error::PlainFileChanged { path, what }) => {
            assert_eq!(path, p);
            assert!(what.contains("11000"), "{what}");
        }
        Err(e) => panic!("wrong error: {e}"),
        Ok(_) => panic!("a changed file opened"),
    }
    assert_eq!(std::fs::read(&p).unwrap(), changed, "nothing was written");
    let accept = Options {
        accept_outside_changes: true,
        ..Options::default()
    };
    {
        let r = Region::open_plain(&p, accept).unwrap();
        assert_eq!(r.size(), 3 * PAGE);
        assert_eq!(&read_all(&r)[..11000], &changed[..]);
    }
    assert_eq!(std::fs::read(&p).unwrap(), changed);
    // Same length, other bytes: the modification time tells.
    std::thread::sleep(Duration::from_millis(20));
    std::fs::write(&p, vec![1u8; 11000]).unwrap();
    assert!(matches!(
        Region::open_plain(&p, Options::default()),
        Err(Error::PlainFileChanged { .. })
    ));
}

#[test]
fn backup_and_compact_refuse_plain_files_and_regions_are_not_adopted() {
    let d = ext4_dir("plain_refusals");
    let p = d.join("b.bin");
    std::fs::write(&p, initial(100)).unwrap();
    {
        let r = Region::open_plain(&p, Options::default()).unwrap();
        let Err(e) = r.backup(&d.join("copy")) else {
            panic!("backup of a plain file")
        };
        assert!(matches!(e, Error::Unsupported { op: "backup", .. }), "{e}");
        assert!(!d.join("copy").exists());
    }
    let Err(e) = txmap::compact::compact(&p) else {
        panic!("compact of a plain file")
    };
    assert!(matches!(e, Error::Unsupported { op: "compact", .. }), "{e}");
    assert_eq!(std::fs::read(&p).unwrap(), initial(100));
    let rp = d.join("region.txm");
    drop(Region::create(&rp, PAGE, Options::default()).unwrap());
    let before = std::fs::read(&rp).unwrap();
    let e = Region::open_plain(&rp, Options::default())
        .err()
        .expect("refused");
    assert!(
        matches!(e, Error::Invalid(ref m) if m.contains("txmap region")),
        "{e}"
    );
    assert_eq!(std::fs::read(&rp).unwrap(), before);
    assert!(!d.join("region.txm-txmap").exists());
    // A file of another program named like the log is left alone.
    let q = d.join("q.bin");
    std::fs::write(&q, b"data").unwrap();
    std::fs::write(d.join("q.bin-log"), b"someone's notes").unwrap();
    assert!(matches!(
        Region::open_plain(&q, Options::default()),
        Err(Error::Exists { .. })
    ));
    assert_eq!(
        std::fs::read(d.join("q.bin-log")).unwrap(),
        b"someone's notes"
    );
}

// --- SIGKILL at random points -------------------------------------------

/// A length with a partial last page.
const CRASH_LEN: u64 = 3 * PAGE + 1234;
const WRITES: u64 = 4;

/// Where commit `c` writes its `k`-th value (anywhere in the file, the
/// partial last page included).
fn spot(c: u64, k: u64) -> u64 {
    txmap::io::sim::SplitMix(c * 1000 + k).next() % (CRASH_LEN - 8)
}

/// The file after commits `1..=c`, starting from `initial`.
fn model(c: u64) -> Vec<u8> {
    let mut m = initial(CRASH_LEN);
    for i in 1..=c {
        for k in 0..WRITES {
            let at = spot(i, k) as usize;
            m[at..at + 8].copy_from_slice(&i.to_le_bytes());
        }
        m[..8].copy_from_slice(&i.to_le_bytes());
    }
    m
}

/// The child: commits 1, 2, … (continuing from the counter at offset 0),
/// printing "ACK c" after each; small checkpoints so kills land inside them.
fn plain_writer() {
    let path = std::env::var("TXMAP_PATH").unwrap();
    let opts = Options {
        checkpoint_bytes: 8 << 10,
        ..Options::default()
    };
    let r = Region::open_plain(path.as_ref(), opts).unwrap();
    let mut v = r.view().unwrap();
    loop {
        let c = v
            .run(|v| {
                let c = v.read::<u64>(0)? + 1;
                for k in 0..WRITES {
                    v.write(spot(c, k), &c)?;
                }
                v.write(0, &c)?;
                Ok(c)
            })
            .unwrap();
        println!("ACK {c}");
    }
}

#[test]
fn sigkill_of_a_plain_file_writer_leaves_a_committed_state() {
    if role().is_some() {
        return plain_writer();
    }
    let test = "sigkill_of_a_plain_file_writer_leaves_a_committed_state";
    let d = ext4_dir("plain_sigkill");
    let p = d.join("k.bin");
    // The counter at offset 0 starts at 0.
    let mut first = initial(CRASH_LEN);
    first[..8].fill(0);
    std::fs::write(&p, &first).unwrap();
    let model = |c| {
        let mut m = model(c);
        if c == 0 {
            m[..8].fill(0);
        }
        m
    };
    let mut rng = txmap::io::sim::SplitMix(seed(test));
    let mut acked = 0u64;
    for round in 0..12 {
        let mut c = child(test, "writer", &[("TXMAP_PATH", p.display().to_string())])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut out = BufReader::new(c.stdout.take().unwrap());
        let want = acked + 1 + rng.next() % 60;
        let mut line = String::new();
        let ack = |l: &str| {
            l.find("ACK ")
                .map(|at| l[at + 4..].trim().parse::<u64>().unwrap())
        };
        while acked < want {
            line.clear();
            if out.read_line(&mut line).unwrap() == 0 {
                let mut err = String::new();
                std::io::Read::read_to_string(&mut c.stderr.take().unwrap(), &mut err).unwrap();
                panic!("child exited early in round {round}: {err}");
            }
            if let Some(n) = ack(&line) {
                acked = n;
            }
        }
        std::thread::sleep(Duration::from_micros(rng.next() % 3000));
        c.kill().unwrap(); // SIGKILL
        c.wait().unwrap();
        for l in out.lines() {
            if let Some(n) = ack(&l.unwrap()) {
                acked = n;
            }
        }
        // Every other round the next child recovers by itself.
        if round % 2 == 1 {
            continue;
        }
        let r = Region::open(&p, Options::default()).unwrap();
        let now = u64::from_le_bytes(read_all(&r)[..8].try_into().unwrap());
        // One commit may be durable but not yet acknowledged.
        assert!(
            now == acked || now == acked + 1,
            "round {round}: acknowledged {acked}, the file holds commit {now}"
        );
        assert_eq!(
            &read_all(&r)[..CRASH_LEN as usize],
            &model(now)[..],
            "in the region"
        );
        drop(r);
        let bytes = std::fs::read(&p).unwrap();
        assert_eq!(
            bytes.len() as u64,
            CRASH_LEN,
            "round {round}: the file's length"
        );
        assert!(
            bytes == model(now),
            "round {round}: the file is not commit {now}'s state"
        );
        acked = now;
    }
}

#[test]
fn an_old_snapshot_keeps_its_bytes_while_checkpoints_rewrite_the_file() {
    let d = ext4_dir("plain_snapshot");
    let p = d.join("s.bin");
    let len = 3 * PAGE + 100;
    let before = initial(len);
    std::fs::write(&p, &before).unwrap();
    let r = Region::open_plain(&p, Options::default()).unwrap();
    let mut old = r.view().unwrap();
    old.begin_read().unwrap();
    // Read through the view's mapping of the file (issue 20's shared pages).
    assert_eq!(old.slice(0, len as usize).unwrap(), &before[..]);
    let mut w = r.view().unwrap();
    let after: Vec<u8> = before.iter().map(|b| b ^ 0x5A).collect();
    w.run(|v| put(v, 0, &after)).unwrap();
    // A checkpoint whose fence gets no answer in time (a loaded machine)
    // writes only what every snapshot is past, and the next one tries
    // again: checkpoint until the file holds the commit.
    let mut written = false;
    for _ in 0..20 {
        r.checkpoint().unwrap();
        if std::fs::read(&p).unwrap()[..len as usize] == after[..] {
            written = true;
            break;
        }
    }
    assert!(written, "no checkpoint wrote the file");
    assert_eq!(
        old.slice(0, len as usize).unwrap(),
        &before[..],
        "the old snapshot still sees its bytes"
    );
    old.commit().unwrap();
    old.begin_read().unwrap();
    assert_eq!(old.slice(0, len as usize).unwrap(), &after[..]);
    old.commit().unwrap();
    drop((old, w, r));
    assert_eq!(std::fs::read(&p).unwrap(), after);
}

#[test]
fn another_process_joins_a_plain_file_and_commits() {
    if role().is_some() {
        let p = std::env::var("TXMAP_PATH").unwrap();
        let r = Region::open(p.as_ref(), Options::default()).unwrap();
        assert!(r.is_plain() && !r.stats().opened_alone);
        r.view().unwrap().run(|v| put(v, 4000, b"child")).unwrap();
        return;
    }
    let d = ext4_dir("plain_join");
    let p = d.join("j.bin");
    let mut model = initial(4500);
    std::fs::write(&p, &model).unwrap();
    let r = Region::open_plain(&p, Options::default()).unwrap();
    let st = child(
        "another_process_joins_a_plain_file_and_commits",
        "joiner",
        &[("TXMAP_PATH", p.display().to_string())],
    )
    .status()
    .unwrap();
    assert!(st.success());
    model[4000..4005].copy_from_slice(b"child");
    assert_eq!(&read_all(&r)[..4500], &model[..]);
    drop(r);
    assert_eq!(std::fs::read(&p).unwrap(), model);
}

/// Plain loads of a read-only transaction over a plain file whose length
/// is not a page multiple (or 0): the page past the file's end reads as
/// zeros beyond the length, in a view's first transaction (the whole file
/// mapped at once) and in later ones (runs mapped as loads fault).
#[test]
fn plain_loads_read_past_the_length_of_a_short_plain_file_as_zeros() {
    let d = ext4_dir("plain_short_loads");
    for len in [0u64, 1, 5000] {
        let p = d.join(&format!("f{len}"));
        let model = initial(len);
        std::fs::write(&p, &model).unwrap();
        let r = Region::open_plain(&p, Options::default()).unwrap();
        for fresh in [true, false] {
            let mut v = r.view().unwrap();
            if !fresh {
                v.run(|_| Ok(())).unwrap();
            }
            let base = v.base();
            v.begin_read().unwrap();
            // SAFETY: inside the view's mapping of the region, in a transaction.
            let got: Vec<u8> = (0..r.size() as usize)
                .map(|i| unsafe { base.add(i).read_volatile() })
                .collect();
            // The first transaction mapped the whole file; a later one faulted.
            assert_eq!(v.faults() == 0, fresh, "len {len}, fresh {fresh}");
            v.commit().unwrap();
            assert_eq!(&got[..len as usize], &model[..], "len {len}, fresh {fresh}");
            assert!(
                got[len as usize..].iter().all(|&b| b == 0),
                "len {len}, fresh {fresh}: past the length"
            );
        }
    }
}
