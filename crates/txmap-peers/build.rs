//! Builds the C shims of the peers whose headers are installed, and tells
//! the crate which ones it has (`cfg(have_<peer>)`). A missing library is
//! not an error: the peer is then reported as not installed. detect.rs
//! decides which peers are present and what to watch so that installing
//! one later re-runs this script.

mod detect;

use std::path::Path;

fn main() {
    println!("cargo:rerun-if-changed=c");
    println!("cargo:rerun-if-changed=detect.rs");
    let include = Path::new(detect::INCLUDE_DIR);
    for path in detect::watched(include) {
        println!("cargo:rerun-if-changed={}", path.display());
    }
    for peer in detect::PEERS {
        println!("cargo::rustc-check-cfg=cfg(have_{})", peer.name);
    }
    for peer in detect::present(include) {
        let shim = format!("c/{}.c", peer.name);
        if Path::new(&shim).exists() {
            cc::Build::new()
                .file(&shim)
                .opt_level(2)
                .warnings(true)
                .compile(&format!("peer_{}", peer.name));
        }
        for lib in peer.libs {
            println!("cargo:rustc-link-lib={lib}");
        }
        println!("cargo:rustc-cfg=have_{}", peer.name);
    }
}
