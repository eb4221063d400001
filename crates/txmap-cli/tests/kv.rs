//! `txmap kv` and `txmap check --structures`, run as the built binary.

mod cmd;
#[path = "../../txmap/tests/common/mod.rs"]
mod common;

use std::path::Path;
use std::process::{Command, Output};

use cmd::*;
use common::*;
use txmap::collections::alloc;
use txmap::{Options, Region};

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

/// Damages the B+-tree `name` the way a buggy program could: points its
/// root at its own header block.
fn damage_tree(p: &Path, name: &str) {
    let r = Region::open(p, Options::default()).unwrap();
    let mut v = r.view().unwrap();
    v.run(|v| {
        let e = alloc::lookup(v, name)?.unwrap();
        v.write(e.at + 8, &e.at)
    })
    .unwrap();
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
    damage_tree(&p, "kv");
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

/// `check --structures --json`: one JSON document (parsed here) with the
/// region report of `check --json` and a `structures` object: verdict,
/// problems, the heap's figures and one entry per catalog structure; a
/// damaged structure makes both verdicts and the exit status say so.
#[test]
fn check_structures_as_json() {
    use serde_json::Value;
    let d = tmpfs_dir("kv-json");
    let p = d.join("kv.txm");
    let parse = |o: &Output| -> Value {
        serde_json::from_slice(&o.stdout)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&o.stdout)))
    };
    // A region without a heap: no structures, sound.
    ok(&["create", s(&p), "--size", "64K"]);
    let j = parse(&txmap(&["check", "--structures", "--json", s(&p)]));
    assert_eq!(j["sound"], true);
    assert_eq!(j["structures"]["heap"], Value::Null);
    assert_eq!(j["structures"]["catalog"], serde_json::json!([]));
    std::fs::remove_file(&p).unwrap();
    std::fs::remove_file(txmap::log_path(&p)).unwrap();
    // Three structures with known contents.
    let entries = [("t", "btree", 300), ("c", "cobtree", 20), ("h", "lhash", 7)];
    for (name, kind, n) in entries {
        let input = d.join(&format!("{name}.txt"));
        std::fs::write(
            &input,
            (0..n).map(|i| format!("k{i}\tv{i}\n")).collect::<String>(),
        )
        .unwrap();
        ok(&[
            "kv",
            s(&p),
            "--name",
            name,
            "--kind",
            kind,
            "load",
            s(&input),
        ]);
    }
    let o = txmap(&["check", "--structures", "--json", s(&p)]);
    assert_eq!(o.status.code(), Some(0));
    let j = parse(&o);
    assert_eq!(j["sound"], true);
    // The region part is what `check --json` prints (less the new field).
    let plain = parse(&txmap(&["check", "--json", s(&p)]));
    assert!(plain.get("structures").is_none());
    let keys = |v: &Value| v.as_object().unwrap().keys().cloned().collect::<Vec<_>>();
    assert_eq!(keys(&j["report"]), keys(&plain["report"]));
    let st = &j["structures"];
    assert_eq!(st["sound"], true);
    assert_eq!(st["problems"], serde_json::json!([]));
    assert_eq!(st["unowned_blocks"], 0);
    let catalog = st["catalog"].as_array().unwrap();
    assert_eq!(catalog.len(), 3);
    let mut blocks = 0;
    for ((name, kind, n), e) in entries.iter().zip(catalog) {
        assert_eq!(e["name"], *name);
        assert_eq!(e["kind"], *kind);
        assert_eq!(e["sound"], true);
        assert_eq!(e["entries"], *n);
        assert!(e["detail"].is_string());
        blocks += e["blocks"].as_u64().unwrap();
    }
    // Every block in use belongs to one of them (no root object here).
    assert_eq!(st["heap"]["used_blocks"], blocks);
    assert_eq!(st["heap"]["sound"], true);
    damage_tree(&p, "t");
    let o = txmap(&["check", "--structures", "--json", s(&p)]);
    assert_eq!(o.status.code(), Some(1));
    let j = parse(&o);
    assert_eq!(j["sound"], false);
    let st = &j["structures"];
    assert_eq!(st["sound"], false);
    let problems = st["problems"].as_array().unwrap();
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(
        problems[0].as_str().unwrap().starts_with("btree \"t\""),
        "{problems:?}"
    );
    assert_eq!(st["catalog"][0]["sound"], false);
    assert!(st["catalog"][0]["problem"].is_string());
    assert_eq!(st["catalog"][1]["sound"], true);
    assert_eq!(st["heap"]["sound"], true);
    // A damaged log (a bit flipped in a record that is not the last): the
    // region is not opened, `structures` is null.
    let (a, b) = (d.join("a.txm"), d.join("b.txm"));
    let region = Region::create(&a, 16 * 4096, Options::default()).unwrap();
    commit_n(&region, 4);
    copy_region(&a, &b);
    let offs = record_offsets(&txmap::log_path(&b));
    flip(&txmap::log_path(&b), offs[1] + 36);
    let o = txmap(&["check", "--structures", "--json", s(&b)]);
    assert_eq!(o.status.code(), Some(1));
    let j = parse(&o);
    assert_eq!(j["sound"], false);
    assert!(!j["problems"].as_array().unwrap().is_empty());
    assert_eq!(j["structures"], Value::Null);
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

/// A 0444 region read by a user who may not write it (`nobody` through
/// setpriv when the test runs as root): `kv get` and `kv scan` work, and
/// `kv put` fails saying the region is read-only, changing nothing.
/// (Before: every `kv` command failed with "Permission denied".)
#[test]
fn kv_reads_a_region_its_user_may_not_write() {
    let d = ext4_dir("kv-read-only");
    std::fs::set_permissions(
        d.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let p = d.join("kv.txm");
    let r = s(&p);
    ok(&["kv", r, "put", "a", "1"]);
    ok(&["kv", r, "put", "b", "2"]);
    for f in [p.clone(), txmap::log_path(&p)] {
        std::fs::set_permissions(&f, std::os::unix::fs::PermissionsExt::from_mode(0o444)).unwrap();
    }
    let before = std::fs::read(&p).unwrap();
    let as_reader = |args: &[&str]| {
        let mut c = if rustix::process::geteuid().is_root() {
            let mut c = Command::new("setpriv");
            c.args(["--reuid=65534", "--regid=65534", "--clear-groups"]);
            c.arg(env!("CARGO_BIN_EXE_txmap"));
            c
        } else {
            Command::new(env!("CARGO_BIN_EXE_txmap"))
        };
        c.args(args).output().expect("run txmap")
    };
    let o = as_reader(&["kv", r, "get", "b"]);
    assert_eq!(
        (o.status.code(), String::from_utf8_lossy(&o.stdout).as_ref()),
        (Some(0), "2\n"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let o = as_reader(&["kv", r, "scan"]);
    assert_eq!(String::from_utf8_lossy(&o.stdout), "a\t1\nb\t2\n");
    let o = as_reader(&["kv", r, "put", "c", "3"]);
    assert_ne!(o.status.code(), Some(0));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("open read-only"), "{err}");
    assert!(std::fs::read(&p).unwrap() == before);
}

#[test]
fn puts_racing_to_create_a_region_all_land() {
    // Several `kv put`s on a path nobody created: one creates the region,
    // the others wait for it and open it; none fails because another one
    // was creating it.
    for round in 0..5 {
        let d = tmpfs_dir(&format!("kv-create-race-{round}"));
        let p = d.join("kv.txm");
        let children: Vec<_> = (0..4)
            .map(|k| {
                Command::new(env!("CARGO_BIN_EXE_txmap"))
                    .args(["kv", s(&p), "put", &format!("k{k}"), &format!("v{k}")])
                    .output_spawn()
            })
            .collect();
        for (k, c) in children.into_iter().enumerate() {
            let o = c.wait_with_output().unwrap();
            assert!(
                o.status.success(),
                "round {round}, put {k}: {}",
                String::from_utf8_lossy(&o.stderr)
            );
        }
        assert_eq!(
            ok(&["kv", s(&p), "scan"]),
            "k0\tv0\nk1\tv1\nk2\tv2\nk3\tv3\n",
            "round {round}"
        );
    }
}

#[test]
fn a_put_through_a_dangling_symlink_fails_and_creates_nothing() {
    let d = tmpfs_dir("kv-dangling");
    let p = d.join("kv.txm");
    std::os::unix::fs::symlink(d.join("gone.txm"), &p).unwrap();
    let o = txmap(&["kv", s(&p), "put", "a", "1"]);
    assert_ne!(o.status.code(), Some(0));
    assert!(
        stderr(&o).contains("kv.txm"),
        "names the path: {}",
        stderr(&o)
    );
    assert!(!d.join("gone.txm").exists(), "the target was not created");
    assert!(std::fs::symlink_metadata(&p).unwrap().is_symlink());
}

trait OutputSpawn {
    fn output_spawn(&mut self) -> std::process::Child;
}

impl OutputSpawn for Command {
    fn output_spawn(&mut self) -> std::process::Child {
        self.stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    }
}
