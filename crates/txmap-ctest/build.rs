//! Compiles the C test programs in c/ (all but smoke.c, which has its own
//! `main` and is built by tests/smoke.rs) and the C example
//! examples/c/bintree.c into a static library that the
//! Rust tests call. Their txmap_* / x* symbols come from the txmap crate.

use std::path::Path;

fn main() {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let include = manifest.join("../../include");
    let c_dir = manifest.join("c");
    // The C example (examples/c), tested by c/bintree_ex.c.
    let example_dir = manifest.join("../../examples/c");
    println!("cargo:rerun-if-changed={}", c_dir.display());
    println!("cargo:rerun-if-changed={}", example_dir.display());
    println!(
        "cargo:rerun-if-changed={}",
        include.join("txmap.h").display()
    );

    let mut sources: Vec<_> = std::fs::read_dir(&c_dir)
        .expect("read c/")
        .map(|e| e.expect("read c/").path())
        .filter(|p| p.extension().is_some_and(|e| e == "c"))
        .filter(|p| p.file_name().is_some_and(|n| n != "smoke.c"))
        .collect();
    sources.push(example_dir.join("bintree.c"));
    sources.sort();
    for s in &sources {
        println!("cargo:rerun-if-changed={}", s.display());
    }

    cc::Build::new()
        .files(&sources)
        .include(&include)
        .include(&c_dir)
        .include(&example_dir)
        .std("c11")
        .flag("-pthread")
        .warnings(true)
        .extra_warnings(true)
        .compile("txmap_ctest_c");
    println!("cargo:rustc-link-lib=pthread");
}
