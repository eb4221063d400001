//! The peer databases. Each module wraps one library; those built from C
//! (everything but redb) compile only when build.rs found the library's
//! header, and otherwise are listed as not installed.

use crate::Peer;

mod pmemobj;
mod redb;
mod rocksdb;

/// The peers, in report order.
pub fn stores() -> Vec<Peer> {
    vec![rocksdb::peer(), pmemobj::peer(), self::redb::peer()]
}
