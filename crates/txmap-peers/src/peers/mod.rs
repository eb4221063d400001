//! The peer databases. Each module wraps one library; those built from C
//! (everything but redb) compile only when build.rs found the library's
//! header, and otherwise are listed as not installed.

use crate::Peer;

pub mod bdb;
pub mod lmdb;
mod pmemobj;
mod redb;
mod rocksdb;
pub mod sqlite;

/// The peers, in report order.
pub fn stores() -> Vec<Peer> {
    let mut v = Vec::new();
    v.extend(bdb::stores()); // bdb-btree, bdb-hash
    v.push(lmdb::peer());
    v.push(sqlite::peer());
    v.push(rocksdb::peer());
    v.push(pmemobj::peer());
    v.push(self::redb::peer());
    v
}
