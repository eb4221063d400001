//! Builds the C shims of the peers whose headers are installed, and tells
//! the crate which ones it has (`cfg(have_<peer>)`). A missing library is
//! not an error: the peer is then reported as not installed.

use std::path::Path;

/// (peer, header that must exist, libraries to link)
const PEERS: &[(&str, &str, &[&str])] = &[
    ("bdb", "/usr/include/db.h", &["db-5.3"]),
    ("lmdb", "/usr/include/lmdb.h", &["lmdb"]),
    ("sqlite", "/usr/include/sqlite3.h", &["sqlite3"]),
    ("rocksdb", "/usr/include/rocksdb/c.h", &["rocksdb"]),
    ("pmemobj", "/usr/include/libpmemobj.h", &["pmemobj"]),
];

fn main() {
    println!("cargo:rerun-if-changed=c");
    for (peer, header, libs) in PEERS {
        println!("cargo::rustc-check-cfg=cfg(have_{peer})");
        println!("cargo:rerun-if-changed={header}");
        if !Path::new(header).exists() {
            continue;
        }
        let shim = format!("c/{peer}.c");
        if Path::new(&shim).exists() {
            cc::Build::new()
                .file(&shim)
                .opt_level(2)
                .warnings(true)
                .compile(&format!("peer_{peer}"));
        }
        for lib in *libs {
            println!("cargo:rustc-link-lib={lib}");
        }
        println!("cargo:rustc-cfg=have_{peer}");
    }
}
