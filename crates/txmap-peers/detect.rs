//! Which peer databases are installed, judged by their headers. Shared by
//! build.rs (which builds and links the peers found) and tests/detect.rs.
//!
//! Cargo re-runs build.rs only when a path it was told to watch changes its
//! mtime (or goes missing). A header installed by `apt-get install` keeps the
//! mtime of its package, older than the last build, so watching the missing
//! header alone never notices the install. Creating a file does update the
//! mtime of the directory it is created in, so for a missing header
//! [`watched`] names the deepest directory on its way that exists.

use std::path::{Path, PathBuf};

/// Where build.rs looks for the headers.
pub const INCLUDE_DIR: &str = "/usr/include";

/// A peer database built from C.
pub struct Peer {
    /// Its name in `cfg(have_<name>)` and in c/<name>.c (the shim, if any).
    pub name: &'static str,
    /// The header that must exist, relative to the include directory.
    pub header: &'static str,
    /// The libraries to link.
    pub libs: &'static [&'static str],
}

/// Every peer built from C.
pub const PEERS: &[Peer] = &[
    Peer {
        name: "bdb",
        header: "db.h",
        libs: &["db-5.3"],
    },
    Peer {
        name: "lmdb",
        header: "lmdb.h",
        libs: &["lmdb"],
    },
    Peer {
        name: "sqlite",
        header: "sqlite3.h",
        libs: &["sqlite3"],
    },
    Peer {
        name: "rocksdb",
        header: "rocksdb/c.h",
        libs: &["rocksdb"],
    },
    Peer {
        name: "pmemobj",
        header: "libpmemobj.h",
        libs: &["pmemobj"],
    },
];

/// The peers whose header is in `include`.
pub fn present(include: &Path) -> Vec<&'static Peer> {
    PEERS
        .iter()
        .filter(|p| include.join(p.header).is_file())
        .collect()
}

/// The paths whose change must re-run detection in `include`: the header of
/// each present peer (it may be removed or upgraded) and, for each missing
/// one, the deepest existing directory between `include` and its header
/// (`include` itself if that is missing: a missing path always re-runs).
/// Never a directory above `include`: cargo scans a watched directory
/// recursively.
pub fn watched(include: &Path) -> Vec<PathBuf> {
    let mut paths: Vec<PathBuf> = Vec::new();
    for peer in PEERS {
        let header = include.join(peer.header);
        let path = if header.is_file() {
            header
        } else {
            header
                .ancestors()
                .skip(1)
                .take_while(|d| d.starts_with(include))
                .find(|d| d.is_dir())
                .unwrap_or(include)
                .to_path_buf()
        };
        if !paths.contains(&path) {
            paths.push(path);
        }
    }
    paths
}
