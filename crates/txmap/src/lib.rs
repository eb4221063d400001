//! # txmap: ACID transactions over memory-mapped files
//!
//! Map a region, begin a transaction, read and write it with plain loads and
//! stores, commit. txmap catches the first touch of each page, keeps
//! uncommitted stores private, validates against concurrent transactions
//! (serializable by default, snapshot isolation on request), logs byte-range
//! redo records with group commit, and recovers after any crash.
//!
//! Linux x86-64 only: page tracking relies on `mprotect`, SIGSEGV and the x86
//! page-fault error code.
//!
//! Layers (see docs/ARCHITECTURE.md): [`os`] (mappings, signals) → [`io`]
//! (storage backends) → [`wal`] (log format, writer, scanner) → [`mvcc`]
//! (versions, snapshots, validation) → [`View`] (tracking, transactions) →
//! [`Region`] (files, recovery, checkpoints). The C API is the `txmap-capi`
//! crate, built on this crate's public API.
//! [`collections`] (a transactional heap, B+-tree, cache-oblivious B-tree,
//! linear hash table, array list) is built on the public API alone, and so
//! is [`env`] ([`Env`]: named regions of one file and one log).
//!
//! ```
//! # let dir = std::env::temp_dir().join(format!("txmap-doc-lib-{}", std::process::id()));
//! # std::fs::create_dir_all(&dir).unwrap();
//! use txmap::{Region, Options};
//! let region = Region::create(&dir.join("counter.txm"), 4096, Options::default())?;
//! let mut view = region.view()?;
//! view.begin()?;
//! // SAFETY: inside a transaction, the view's memory may be used with plain loads and stores.
//! unsafe { *(view.base() as *mut u64) += 1 };
//! view.commit()?;
//! # drop(view); drop(region); std::fs::remove_dir_all(&dir).unwrap();
//! # Ok::<(), txmap::Error>(())
//! ```

#![cfg(all(target_os = "linux", target_arch = "x86_64"))]
#![deny(unsafe_op_in_unsafe_fn)]
#![deny(clippy::undocumented_unsafe_blocks)]

pub mod archive;
pub mod backup;
pub mod collections;
pub mod compact;
mod engine;
pub mod env;
mod error;
mod fencectl;
mod filestate;
mod group;
mod grouplog;
mod headers;
pub mod inspect;
pub mod io;
mod journal;
mod nta;
mod opmem;
pub mod ops;
mod options;
mod ordered;
mod plaincheck;
mod plainfile;
mod rand;
mod readside;
mod recovery;
mod region;
mod roundwrite;
pub mod sums;
mod view;
mod viewmem;

// Internals, public only with the `testing` feature (tests, fuzzing,
// benchmarks): the layers below the API and the test hooks.
#[cfg(feature = "testing")]
pub mod debug;
#[cfg(not(feature = "testing"))]
#[allow(dead_code)]
mod debug;
#[cfg(feature = "testing")]
pub mod fuzz;
#[cfg(feature = "testing")]
pub mod mvcc;
#[cfg(not(feature = "testing"))]
#[allow(dead_code)]
mod mvcc;
#[cfg(feature = "testing")]
pub mod os;
#[cfg(not(feature = "testing"))]
#[allow(dead_code)]
mod os;
#[cfg(feature = "testing")]
pub mod wal;
#[cfg(not(feature = "testing"))]
#[allow(dead_code)]
mod wal;

pub use backup::{BackupOptions, BackupReport};
pub use env::{Env, EnvRegion};
pub use error::{Error, Lost, Result};
pub use options::{Durability, Options, SnapshotLimit};
pub use ordered::OrderStatus;
pub use region::{
    Region, SharedStateSweep, Stats, log_path, remove_stale_shared_state, shared_path,
};
pub use view::{
    Isolation, MAX_READ_PAGES, MAX_WRITE_PAGES, PageAccess, Paused, Pod, Ptr, TxnOptions, View,
};
