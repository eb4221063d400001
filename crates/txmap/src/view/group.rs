//! One transaction over several views, each of a different region of one
//! directory (issue 19 point 1, docs/design/multi-region.md): begun with
//! snapshots that agree on every commit across them (`group::snapshots`,
//! without the commit locks unless commits keep coming), committed
//! atomically by `crate::group::commit`.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::{Backoff, TxnOptions, View};
use crate::engine::RegionInner;
use crate::error::{Error, Result};

/// Depth of the views' transactions: all the same, or an error.
fn common_depth(views: &[&mut View]) -> Result<u32> {
    let d = views.first().map_or(0, |v| v.depth);
    if views.iter().any(|v| v.depth != d) {
        return Err(Error::Invalid(
            "the views of one transaction over several regions are at different nesting depths"
                .into(),
        ));
    }
    Ok(d)
}

fn regions(views: &[&mut View]) -> Vec<Arc<RegionInner>> {
    views.iter().map(|v| Arc::clone(&v.inner.region)).collect()
}

impl View {
    /// Begins one serializable transaction over several views, each of a
    /// different region of one directory: it reads one snapshot of all of
    /// them (a commit across them is in all or none), and
    /// [`View::commit_group`] commits it atomically. A nested call (all
    /// views already in the transaction) is folded into it.
    pub fn begin_group(views: &mut [&mut View]) -> Result<()> {
        Self::begin_group_with(views, TxnOptions::default())
    }

    /// [`View::begin_group`] with options (isolation, read-only).
    pub fn begin_group_with(views: &mut [&mut View], opts: TxnOptions) -> Result<()> {
        if common_depth(views)? > 0 {
            for v in views.iter_mut() {
                v.begin_with(opts)?;
            }
            return Ok(());
        }
        let owned = regions(views);
        let refs: Vec<&RegionInner> = owned.iter().map(|r| &**r).collect();
        crate::group::lock_order(&refs)?;
        let mut prepared = Vec::with_capacity(views.len());
        for i in 0..views.len() {
            match views[i].begin_prepare(opts) {
                Ok(o) => prepared.push(o),
                Err(e) => {
                    for v in views[..i].iter_mut() {
                        v.end_priority();
                    }
                    return Err(e);
                }
            }
        }
        // Snapshots that see each commit across these regions in every
        // region or in none (`group::snapshots`).
        let slots: Vec<usize> = views.iter().map(|v| v.inner.slot()).collect();
        let snaps = match crate::group::snapshots(&refs, &slots) {
            Ok(s) => s,
            Err(e) => {
                for (v, (r, &slot)) in views.iter_mut().zip(refs.iter().zip(&slots)) {
                    r.mvcc.end(slot);
                    v.end_priority();
                }
                return Err(e);
            }
        };
        for i in 0..views.len() {
            if let Err(e) = views[i].begin_at(prepared[i], snaps[i]) {
                for v in views[..i].iter_mut() {
                    v.rollback();
                }
                for (r, &slot) in refs[i + 1..].iter().zip(&slots[i + 1..]) {
                    r.mvcc.end(slot);
                }
                return Err(e);
            }
        }
        Ok(())
    }

    /// Commits a transaction begun by [`View::begin_group`]: validates
    /// every view's reads and writes under all the regions' commit locks and
    /// writes one record per region written, so after a crash at any point
    /// either all of it is there or none. Inner (nested) commits return
    /// `Ok` at once. `Err(Error::Conflict)`: nothing of it is visible (retry).
    /// Ordered-commit numbers and priority are not taken by such a commit.
    pub fn commit_group(views: &mut [&mut View]) -> Result<()> {
        match common_depth(views)? {
            0 => return Err(Error::NotInTransaction { op: "commit" }),
            1 => {}
            _ => {
                for v in views.iter_mut() {
                    v.depth -= 1;
                }
                return Ok(());
            }
        }
        for v in views.iter_mut() {
            v.inner.region.check_owner()?;
            v.nta_before_commit();
        }
        let r = Self::commit_parts(views);
        let mut out = Ok(());
        for v in views.iter_mut() {
            let mine = match &r {
                Ok(()) => Ok(()),
                Err(Error::Conflict) => Err(Error::Conflict),
                Err(_) => Err(Error::Aborted),
            };
            out = out.and(v.end_outermost(mine));
        }
        r.and(out)
    }

    fn commit_parts(views: &mut [&mut View]) -> Result<()> {
        let mut parts = Vec::with_capacity(views.len());
        for v in views.iter() {
            if let Some(req) = v.prepare_commit(true)? {
                parts.push((v, req));
            }
        }
        if parts.is_empty() {
            return Ok(());
        }
        let (who, reqs): (Vec<&&mut View>, Vec<_>) = parts.into_iter().unzip();
        let commit_time: Vec<bool> = reqs.iter().map(|r| !r.commute.is_empty()).collect();
        let engine: Vec<crate::group::Part<'_>> = who
            .iter()
            .zip(reqs)
            .map(|(v, req)| crate::group::Part {
                region: &v.inner.region,
                req,
            })
            .collect();
        let seqs = crate::group::commit(engine)?;
        for ((v, seq), ct) in who.iter().zip(seqs).zip(commit_time) {
            if seq > 0 {
                v.inner
                    .last_commit
                    .store(super::own_pages(seq, ct), Ordering::Relaxed);
            }
        }
        Ok(())
    }

    /// Ends the transaction over several views now, discarding its stores.
    pub fn rollback_group(views: &mut [&mut View]) {
        for v in views.iter_mut() {
            v.rollback();
        }
    }

    /// Runs `f` in one serializable transaction over `views` (regions of
    /// one directory), retrying on conflict with randomised backoff, and
    /// commits it atomically across them. Errors other than conflicts are
    /// returned (the transaction rolled back).
    pub fn run_group<T>(
        views: &mut [&mut View],
        mut f: impl FnMut(&mut [&mut View]) -> Result<T>,
    ) -> Result<T> {
        let seed = views.first().map_or(0, |v| v.inner.slot() as u64);
        let mut backoff = Backoff::new(seed);
        loop {
            Self::begin_group(views)?;
            let r = match f(views) {
                Ok(x) => Self::commit_group(views).map(|_| x),
                Err(e) => {
                    Self::rollback_group(views);
                    Err(e)
                }
            };
            match r {
                Err(Error::Conflict) if views.iter().all(|v| v.depth == 0) => backoff.wait(),
                other => return other,
            }
        }
    }
}
