//! The same address in every process (c/xac_addr.c): forked children right
//! after a large commit, in async and durable mode, and new processes (this
//! binary run again) map a region at its fixed address and follow a raw
//! pointer stored in it; a taken address is an error naming it. Its own
//! test binary: the C code forks.

use std::ffi::CString;
use std::path::Path;

use txmap_ctest::*;

const ROLE: &str = "TXMAP_ADDR_FOLLOW";

fn c_path(dir: &Path) -> CString {
    CString::new(dir.as_os_str().as_encoded_bytes()).expect("no NUL in path")
}

/// One test: the LIBXAC state is process-wide, and the C code forks.
#[test]
fn every_process_maps_a_region_at_its_address() {
    if let Ok(v) = std::env::var(ROLE) {
        // A new process: "dir durability base".
        let mut it = v.split(' ');
        let (dir, durability, base) = (
            it.next().unwrap(),
            it.next().unwrap().parse().unwrap(),
            it.next().unwrap().parse().unwrap(),
        );
        let c = c_path(Path::new(dir));
        // SAFETY: a NUL-terminated path that outlives the call.
        let line = unsafe { ctest_xac_addr_follow(c.as_ptr(), durability, base) };
        assert_eq!(line, 0, "failed at c/xac_addr.c:{line}");
        return;
    }
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
    for (durability, name) in [(0, "ctest-addr-async"), (1, "ctest-addr-durable")] {
        let dir = fresh_dir(tmp, name);
        let c = c_path(&dir);
        let mut base = 0usize;
        // SAFETY: a NUL-terminated path and a writable out-parameter.
        let line = unsafe { ctest_xac_addr_forks(c.as_ptr(), durability, 20, &mut base) };
        assert_eq!(line, 0, "failed at c/xac_addr.c:{line}");
        for _ in 0..2 {
            let out = std::process::Command::new(std::env::current_exe().unwrap())
                .args([
                    "every_process_maps_a_region_at_its_address",
                    "--exact",
                    "--nocapture",
                ])
                .env(ROLE, format!("{} {durability} {base}", dir.display()))
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
    let dir = fresh_dir(tmp, "ctest-addr-taken");
    assert_eq!(run(ctest_addr_taken, &dir), 0);
    let _ = std::fs::remove_dir_all(&dir);
}
