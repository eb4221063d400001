//! `txmap info`, `check` and `recover` on a plain file (issue 19 point 2):
//! an ordinary file mapped with `Region::open_plain`, its header page in
//! PATH-txmap.

mod cmd;
#[path = "../../txmap/tests/common/mod.rs"]
mod common;

use std::path::Path;

use cmd::*;
use common::*;

use txmap::{Options, Region};

const LEN: usize = 5000;

fn initial() -> Vec<u8> {
    (0..LEN).map(|i| (i % 200) as u8 + 1).collect()
}

/// Copies the plain file and the three files beside it (a crash with the
/// region open leaves them so).
fn copy_plain(from: &Path, to: &Path) {
    for side in ["", "-txmap", "-log", "-sums"] {
        let f = |p: &Path| {
            let mut s = p.as_os_str().to_owned();
            s.push(side);
            std::path::PathBuf::from(s)
        };
        std::fs::copy(f(from), f(to)).unwrap();
    }
}

#[test]
fn info_check_and_recover_work_on_a_plain_file() {
    let d = ext4_dir("cli-plain");
    let (a, b) = (d.join("a.dat"), d.join("b.dat"));
    std::fs::write(&a, initial()).unwrap();
    let mut model = initial();
    {
        let r = Region::open_plain(&a, Options::default()).unwrap();
        let mut v = r.view().unwrap();
        for (i, at) in [10u64, 4100, LEN as u64 - 8].into_iter().enumerate() {
            v.begin().unwrap();
            v.write(at, &(i as u64 + 7)).unwrap();
            v.commit().unwrap();
            model[at as usize..at as usize + 8].copy_from_slice(&(i as u64 + 7).to_le_bytes());
        }
        // What a crash with the region open would leave.
        copy_plain(&a, &b);
    }
    assert_eq!(std::fs::read(&a).unwrap(), model);
    assert_eq!(
        std::fs::read(&b).unwrap(),
        initial(),
        "no commit in b's file yet"
    );

    let info = succeeds(&txmap(&["info", s(&b)]));
    assert!(info.contains("8192 bytes (8 KiB, 2 pages)"), "{info}");
    assert!(info.contains("plain file:"), "{info}");
    assert!(
        info.contains("5000 bytes, open, or left open by a crash"),
        "{info}"
    );
    assert!(info.contains("pending: 3 commits"), "{info}");
    let check = succeeds(&txmap(&["check", s(&b)]));
    assert!(check.contains("recovery is pending"), "{check}");

    let out = succeeds(&txmap(&["recover", s(&b)]));
    assert!(out.contains("3 commits replayed"), "{out}");
    assert_eq!(std::fs::read(&b).unwrap(), model, "b after recovery");
    let check = succeeds(&txmap(&["check", s(&b)]));
    assert!(check.contains(": sound"), "{check}");
    let json = succeeds(&txmap(&["info", "--json", s(&b)]));
    for field in [
        "\"plain_len\":5000",
        "\"plain_open\":false",
        "\"needs_recovery\":false",
        "\"size\":8192",
    ] {
        assert!(json.contains(field), "{field} missing from {json}");
    }
    assert!(succeeds(&txmap(&["info", s(&a)])).contains("closed cleanly at 5000 bytes"));

    // Another program changes b while no one has it open.
    let mut changed = model.clone();
    changed.extend_from_slice(b"appended by another program");
    std::fs::write(&b, &changed).unwrap();
    let o = txmap(&["check", s(&b)]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        text(&o).contains("another program changed it"),
        "{}",
        text(&o)
    );
    let err = fails(&txmap(&["recover", s(&b)]), 1);
    assert!(err.contains("--accept-changes"), "{err}");
    assert_eq!(
        std::fs::read(&b).unwrap(),
        changed,
        "a refused recover writes nothing"
    );
    succeeds(&txmap(&["recover", "--accept-changes", s(&b)]));
    assert_eq!(std::fs::read(&b).unwrap(), changed);
    assert!(succeeds(&txmap(&["check", s(&b)])).contains(": sound"));
}
