//! `txmap kv` and `txmap check --structures`, run as the built binary.

#[path = "../../txmap/tests/common/mod.rs"]
mod common;

use std::path::Path;
use std::process::{Command, Output};

use common::*;
use txmap::collections::alloc;
use txmap::{Options, Region};

fn txmap(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_txmap"))
        .args(args)
        .output()
        .expect("run txmap")
}

fn ok(args: &[&str]) -> String {
    let o = txmap(args);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).unwrap()
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn put_get_delete_scan_with_escapes_and_exit_codes() {
    for kind in ["btree", "cobtree", "lhash"] {
        let d = tmpfs_dir(&format!("kv-basic-{kind}"));
        let p = d.join("kv.txm");
        let r = s(&p);
        assert_eq!(
            ok(&["kv", r, "--kind", kind, "put", "b", "2"]),
            "inserted\n"
        );
        assert_eq!(ok(&["kv", r, "put", "a\\tx", "one\\x00"]), "inserted\n");
        assert_eq!(ok(&["kv", r, "put", "c", "3"]), "inserted\n");
        assert_eq!(ok(&["kv", r, "put", "b", "two"]), "replaced\n");
        assert_eq!(ok(&["kv", r, "get", "a\\tx"]), "one\\x00\n");
        assert_eq!(ok(&["kv", r, "scan"]), "a\\tx\tone\\x00\nb\ttwo\nc\t3\n");
        assert_eq!(
            ok(&["kv", r, "scan", "--from", "b", "--to", "c"]),
            "b\ttwo\n"
        );
        assert_eq!(ok(&["kv", r, "scan", "--limit", "1"]), "a\\tx\tone\\x00\n");
        assert_eq!(ok(&["kv", r, "delete", "b"]), "deleted\n");
        let o = txmap(&["kv", r, "get", "b"]);
        assert_eq!(o.status.code(), Some(3));
        assert!(String::from_utf8_lossy(&o.stderr).starts_with("txmap: key \"b\" not found"));
        assert_eq!(txmap(&["kv", r, "delete", "b"]).status.code(), Some(3));
        // A missing structure and a bad escape are usage errors.
        assert_eq!(
            txmap(&["kv", r, "--name", "other", "get", "a"])
                .status
                .code(),
            Some(2)
        );
        assert_eq!(txmap(&["kv", r, "get", "bad\\q"]).status.code(), Some(2));
        let out = ok(&["check", "--structures", r]);
        assert!(
            out.contains(&format!("{kind} \"kv\": sound: 2 entries")),
            "{out}"
        );
    }
}

#[test]
fn load_and_dump_round_trip_in_both_formats() {
    let d = tmpfs_dir("kv-load");
    let input = d.join("in.txt");
    let mut text = String::new();
    let mut want = Vec::new();
    for i in 0..3000u32 {
        let k = format!("k{:05}", (i * 7919) % 3000);
        let v = format!("{}\\t{}", i, "v".repeat((i % 700) as usize));
        text.push_str(&format!("{k}\t{v}\n"));
        want.push((k, v));
    }
    std::fs::write(&input, &text).unwrap();
    want.sort();
    let expect: String = want.iter().map(|(k, v)| format!("{k}\t{v}\n")).collect();
    let a = d.join("a.txm");
    assert_eq!(
        ok(&["kv", s(&a), "load", s(&input), "--batch", "100"]),
        "loaded 3000 entries\n"
    );
    assert_eq!(ok(&["kv", s(&a), "dump"]), expect);
    let bin = d.join("dump.bin");
    assert_eq!(
        ok(&["kv", s(&a), "dump", "--format", "bin", "--out", s(&bin)]),
        "dumped 3000 entries\n"
    );
    let b = d.join("b.txm");
    ok(&[
        "kv",
        s(&b),
        "--kind",
        "lhash",
        "--name",
        "h",
        "load",
        "--format",
        "bin",
        s(&bin),
    ]);
    assert_eq!(ok(&["kv", s(&b), "--name", "h", "dump"]), expect);
    // A truncated binary file is refused with a clear error.
    let bytes = std::fs::read(&bin).unwrap();
    std::fs::write(&bin, &bytes[..bytes.len() - 3]).unwrap();
    let o = txmap(&[
        "kv",
        s(&b),
        "--name",
        "h2",
        "load",
        "--format",
        "bin",
        s(&bin),
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("truncated"));
    let bad = d.join("bad.txt");
    std::fs::write(&bad, "no tab here\n").unwrap();
    let o = txmap(&["kv", s(&b), "load", s(&bad)]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("line 1"));
}

#[test]
fn check_structures_finds_a_damaged_tree() {
    let d = tmpfs_dir("kv-damage");
    let p = d.join("kv.txm");
    std::fs::write(
        d.join("in.txt"),
        (0..500)
            .map(|i| format!("{i:04}\tvalue\n"))
            .collect::<String>(),
    )
    .unwrap();
    ok(&["kv", s(&p), "load", s(&d.join("in.txt"))]);
    let out = ok(&["check", "--structures", s(&p)]);
    assert!(out.contains("btree \"kv\": sound: 500 entries"), "{out}");
    // Damage the tree the way a buggy program could: point its root at its
    // own header block.
    {
        let r = Region::open(&p, Options::default()).unwrap();
        let mut v = r.view().unwrap();
        v.run(|v| {
            let e = alloc::lookup(v, "kv")?.unwrap();
            v.write(e.at + 8, &e.at)
        })
        .unwrap();
    }
    let o = txmap(&["check", "--structures", s(&p)]);
    assert_eq!(o.status.code(), Some(1));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("problem: btree \"kv\""), "{out}");
    // The heap itself is still sound.
    assert!(out.contains("heap: sound"), "{out}");
    // kv operations report the damage as an error, not a panic.
    let o = txmap(&["kv", s(&p), "get", "0001"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(!String::from_utf8_lossy(&o.stderr).contains("panicked"));
}

/// `txmap kv load` killed with SIGKILL at random moments: after recovery,
/// `txmap check --structures` finds every structure sound, and the tree holds
/// exactly the first k batches of the input (each batch is one transaction).
#[test]
fn sigkill_during_load_leaves_whole_batches_and_a_sound_region() {
    let d = ext4_dir("kv-kill-load");
    let input = d.join("in.txt");
    // Large enough that loading it takes far longer than the kill delays
    // (~2.5 s here), so the kills land in the middle of the load.
    let n = 200_000;
    let lines: Vec<String> = (0..n)
        .map(|i| format!("k{i:06}\t{}", "v".repeat(i % 100)))
        .collect();
    std::fs::write(&input, lines.join("\n") + "\n").unwrap();
    let mut rng = txmap::io::sim::SplitMix(7);
    let mut partial = 0;
    for round in 0..6 {
        let p = d.join(&format!("r{round}.txm"));
        let mut c = Command::new(env!("CARGO_BIN_EXE_txmap"))
            .args(["kv", s(&p), "load", s(&input), "--batch", "500"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20 + rng.next() % 200));
        c.kill().unwrap(); // SIGKILL
        c.wait().unwrap();
        if std::fs::metadata(&p).is_err() {
            continue; // killed before it created the region
        }
        let o = txmap(&["check", "--structures", s(&p)]);
        let out = String::from_utf8_lossy(&o.stdout).into_owned();
        assert_eq!(o.status.code(), Some(0), "round {round}: {out}");
        let o = txmap(&["kv", s(&p), "dump"]);
        if o.status.code() == Some(2) {
            // Killed after creating the region, before the structure's commit.
            assert!(
                out.contains("structures: none") || !out.contains("btree"),
                "{out}"
            );
            continue;
        }
        let dump = String::from_utf8(o.stdout).unwrap();
        let got = dump.lines().count();
        assert_eq!(
            got % 500,
            0,
            "round {round}: {got} entries is not whole batches"
        );
        for (a, b) in dump.lines().zip(&lines) {
            assert_eq!(a, b, "round {round}");
        }
        if got > 0 && got < n {
            partial += 1;
        }
    }
    assert!(partial > 0, "no round was killed in the middle of the load");
}
