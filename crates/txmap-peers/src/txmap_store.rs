//! txmap's map structures as benchmark stores: one region file per store,
//! the structure named `bench` in its catalog, one view per session.

use std::ops::Bound;
use std::path::PathBuf;

use txmap::collections::{AnyMap, Kind as TxKind, Map};
use txmap::{Durability as TxDurability, Options, Region, View};

use crate::{Config, Durability, Error, Kind, Op, Peer, Result, Session, Store};

const NAME: &str = "bench";

/// The txmap stores, B+-tree first.
pub fn stores() -> Vec<Peer> {
    vec![
        Peer {
            id: "txmap-btree",
            name: "txmap B+-tree",
            kind: Kind::Ordered,
            processes: true,
            available: Ok(()),
            describe,
            open: |c| open(c, "txmap-btree", TxKind::BTree),
        },
        Peer {
            id: "txmap-cobtree",
            name: "txmap CO B-tree",
            kind: Kind::Ordered,
            processes: true,
            available: Ok(()),
            describe,
            open: |c| open(c, "txmap-cobtree", TxKind::CoBTree),
        },
        Peer {
            id: "txmap-hash",
            name: "txmap linear hash",
            kind: Kind::Hash,
            processes: true,
            available: Ok(()),
            describe,
            open: |c| open(c, "txmap-hash", TxKind::LinearHash),
        },
    ]
}

fn describe(d: Durability) -> String {
    match d {
        Durability::Durable => {
            "Durability::Durable (one group-committed fdatasync of the redo log per commit)".into()
        }
        Durability::Async => "Durability::Async (log written at commit, synced every 50 ms)".into(),
    }
}

struct TxStore {
    id: &'static str,
    dir: PathBuf,
    /// The checkpoint and log bytes at open (`Store::logged_bytes`).
    log0: (u64, u64),
    region: Region,
    map: AnyMap,
}

fn fail(id: &'static str) -> impl Fn(txmap::Error) -> Error {
    move |e| Error::Failed {
        store: id,
        what: e.to_string(),
    }
}

fn open(c: &Config, id: &'static str, kind: TxKind) -> Result<Box<dyn Store>> {
    let opts = Options {
        durability: match c.durability {
            Durability::Durable => TxDurability::Durable,
            Durability::Async => TxDurability::Async,
        },
        priority_after: std::env::var("TXMAP_BENCH_PRIORITY_AFTER")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(Options::default().priority_after),
        // To compare the views' private page cache sizes.
        view_private_pages: std::env::var("TXMAP_BENCH_VIEW_PRIVATE_PAGES")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(Options::default().view_private_pages),
        ..Options::default()
    };
    let path = c.dir.join("data.txm");
    let region = if c.create {
        // Start small: the heap grows the region as it fills.
        Region::create(&path, 1 << 20, opts)
    } else {
        Region::open(&path, opts)
    }
    .map_err(fail(id))?;
    let mut v = region.view().map_err(fail(id))?;
    let map = if c.create {
        v.run(|v| AnyMap::open_or_create(v, NAME, kind))
    } else {
        v.run(|v| AnyMap::open_named(v, NAME)).and_then(|m| {
            m.ok_or_else(|| {
                txmap::Error::Invalid(format!("no structure {NAME:?} in {}", path.display()))
            })
        })
    }
    .map_err(fail(id))?;
    drop(v);
    let st = region.stats();
    Ok(Box::new(TxStore {
        id,
        dir: c.dir.clone(),
        log0: (st.checkpoint_seq, st.log_bytes),
        region,
        map,
    }))
}

impl Store for TxStore {
    fn session(&self) -> Result<Box<dyn Session + '_>> {
        Ok(Box::new(TxSession {
            id: self.id,
            view: self.region.view().map_err(fail(self.id))?,
            map: self.map,
            blind: std::env::var_os("TXMAP_BENCH_NO_BLIND").is_none(),
        }))
    }
    fn disk_bytes(&self) -> Result<u64> {
        crate::store_disk_bytes(self.id, &self.dir)
    }
    fn logged_bytes(&self) -> Option<u64> {
        let st = self.region.stats();
        (st.checkpoint_seq == self.log0.0).then(|| st.log_bytes.saturating_sub(self.log0.1))
    }
    fn backup(&self, dst: &std::path::Path) -> Result<()> {
        self.region
            .backup(&dst.join("data.txm"))
            .map(|_| ())
            .map_err(fail(self.id))
    }
}

struct TxSession {
    id: &'static str,
    view: View,
    map: AnyMap,
    /// Puts are blind (`Map::put_blind`); `TXMAP_BENCH_NO_BLIND` set in
    /// the environment makes them ordinary tracked puts, to compare.
    blind: bool,
}

impl Session for TxSession {
    fn write(&mut self, ops: &[Op<'_>]) -> Result<u32> {
        let (map, blind) = (self.map, self.blind);
        let mut attempts = 0u32;
        self.view
            .run(|v| {
                attempts += 1;
                for op in ops {
                    match *op {
                        // A write batch does not read what it replaces:
                        // a blind put (commit-time where the structure
                        // has one), like the peers' puts.
                        Op::Put(k, val) if blind => map.put_blind(v, k, val)?,
                        Op::Put(k, val) => {
                            map.put(v, k, val)?;
                        }
                        Op::Delete(k) => {
                            map.delete(v, k)?;
                        }
                    }
                }
                Ok(())
            })
            .map_err(fail(self.id))?;
        Ok(attempts - 1)
    }

    fn get(&mut self, key: &[u8], f: &mut dyn FnMut(&[u8])) -> Result<bool> {
        let map = self.map;
        self.view.begin_read().map_err(fail(self.id))?;
        // The value is handed over borrowed from the view, as LMDB does.
        let r = map.get_with(&self.view, key, f);
        self.view.commit().map_err(fail(self.id))?;
        r.map_err(fail(self.id))
    }

    fn update(&mut self, key: &[u8], f: &mut dyn FnMut(&mut Vec<u8>)) -> Result<Option<u32>> {
        let map = self.map;
        let mut attempts = 0u32;
        let found = self
            .view
            .run(|v| {
                attempts += 1;
                let Some(mut val) = map.get(v, key)? else {
                    return Ok(false);
                };
                f(&mut val);
                map.put(v, key, &val)?;
                Ok(true)
            })
            .map_err(fail(self.id))?;
        Ok(found.then_some(attempts - 1))
    }

    fn range(&mut self, start: &[u8], n: usize, f: &mut dyn FnMut(&[u8], &[u8])) -> Result<usize> {
        if matches!(self.map, AnyMap::LinearHash(_)) {
            return Err(Error::Unsupported {
                store: self.id,
                what: "range reads on a hash table".into(),
            });
        }
        let map = self.map;
        let mut seen = 0;
        self.view.begin_read().map_err(fail(self.id))?;
        let r = map.scan(
            &self.view,
            Bound::Included(start),
            Bound::Unbounded,
            &mut |k, val| {
                f(k, val);
                seen += 1;
                Ok(seen < n)
            },
        );
        self.view.commit().map_err(fail(self.id))?;
        r.map_err(fail(self.id))?;
        Ok(seen)
    }
}
