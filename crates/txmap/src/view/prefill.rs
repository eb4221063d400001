//! A helper thread beside a large write transaction (a bulk load): while
//! the transaction is still storing, it backs and maps the version-store
//! blocks its commit will fill (`Mvcc::back_ahead`) and maps the zero pages
//! the view installed ahead of its stores (`fault.rs`,
//! `install_zeros_ahead`). Both would otherwise be done on the
//! transaction's thread, in its stores and in its commit, as page
//! allocations the kernel zeroes one by one.
//!
//! Started by `View::slice_mut` once a transaction has written
//! [`PREFILL_FROM`] pages; stopped (joined) when the transaction ends and
//! before the view's memory can be released. Everything it does is a
//! hint: a request it has not taken yet, or one that fails, leaves the work
//! to the transaction's thread, as without it.

use std::num::NonZeroU32;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::engine::RegionInner;
use crate::os::lock::{futex_wait_bits, futex_wake_all};
use crate::os::mem::{PAGE, RangeToPopulate};

/// Pages a transaction writes before it gets a helper (1 MiB, as for the
/// commit's helper, `engine::SYNC_BESIDE_FROM`): a thread costs tens of
/// microseconds to start and join.
pub(super) const PREFILL_FROM: usize = 256;

/// Written pages between two requests to back versions.
const VERSIONS_STEP: usize = 128;

/// Versions asked beyond the pages written so far: the commit finds blocks
/// ready for the stores made after the last request.
const VERSIONS_LEAD: usize = 256;

/// What a transaction asks of its helper. Posted from the fault handler
/// too: atomics and a futex wake only.
#[derive(Debug, Default)]
pub(crate) struct PrefillAsks {
    running: AtomicBool,
    stop: AtomicBool,
    /// Alias pages to map writable: first page << 32 | count, 0 for none.
    /// A newer request replaces one not taken yet.
    populate: AtomicU64,
    /// Pages the commit will publish; 0 for no request.
    versions: AtomicU64,
    /// Bumped by every request; the helper sleeps on it.
    posted: AtomicU32,
}

impl PrefillAsks {
    /// Asks the helper to map alias pages `[page, page + n)` writable;
    /// false (nothing asked) if no helper runs. Async-signal-safe.
    pub(super) fn populate(&self, page: usize, n: usize) -> bool {
        if !self.running.load(Ordering::Acquire) || n == 0 {
            return false;
        }
        let (Ok(page), Ok(n)) = (u32::try_from(page), u32::try_from(n)) else {
            return false;
        };
        self.populate
            .store(u64::from(page) << 32 | u64::from(n), Ordering::Release);
        self.wake();
        true
    }

    fn wake(&self) {
        self.posted.fetch_add(1, Ordering::Release);
        futex_wake_all(&self.posted);
    }
}

/// The helper of one transaction.
pub(super) struct Prefill {
    asks: Arc<PrefillAsks>,
    thread: Option<JoinHandle<()>>,
    /// Written pages at which versions are asked for next.
    versions_at: usize,
    /// Written pages up to which versions are backed: 0 for a round, the
    /// size from which a commit goes in place for a view alone here (both
    /// may go straight into the region file, with no versions), else no
    /// bound.
    versions_until: usize,
}

impl Prefill {
    /// Starts the helper of a transaction of the view whose requests are
    /// `asks` and whose alias is `alias`. If the thread cannot start, the
    /// returned helper does nothing (and the transaction works as without).
    pub(super) fn start(
        asks: &Arc<PrefillAsks>,
        region: Arc<RegionInner>,
        alias: RangeToPopulate,
        versions_until: usize,
    ) -> Prefill {
        asks.stop.store(false, Ordering::Relaxed);
        asks.populate.store(0, Ordering::Relaxed);
        asks.versions.store(0, Ordering::Relaxed);
        let a = asks.clone();
        let thread = std::thread::Builder::new()
            .name("txmap-prefill".into())
            .spawn(move || work(&a, &region, alias))
            .ok();
        asks.running.store(thread.is_some(), Ordering::Release);
        Prefill {
            asks: asks.clone(),
            thread,
            versions_at: 0,
            versions_until,
        }
    }

    /// After a store: the transaction has written `written` pages.
    pub(super) fn wrote(&mut self, written: usize) {
        if written >= self.versions_until || written < self.versions_at || self.thread.is_none() {
            return;
        }
        self.versions_at = written + VERSIONS_STEP;
        self.asks
            .versions
            .store((written + VERSIONS_LEAD) as u64, Ordering::Release);
        self.asks.wake();
    }
}

impl Drop for Prefill {
    /// Stops the helper and waits for it: after this, nothing maps pages
    /// of the view's memory any more.
    fn drop(&mut self) {
        self.asks.running.store(false, Ordering::Release);
        self.asks.stop.store(true, Ordering::Release);
        self.asks.wake();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn work(asks: &PrefillAsks, region: &RegionInner, alias: RangeToPopulate) {
    // Version blocks this process has mapped so far (`Mvcc::back_ahead`).
    let mut mapped = 0;
    loop {
        let posted = asks.posted.load(Ordering::Acquire);
        if asks.stop.load(Ordering::Acquire) {
            return;
        }
        let mut idle = true;
        let p = asks.populate.swap(0, Ordering::AcqRel);
        if p != 0 {
            idle = false;
            let (page, n) = ((p >> 32) as usize, (p & 0xffff_ffff) as usize);
            // SAFETY: the view's memory stays mapped until `Prefill::drop`
            // has joined this thread (the view drops its helper first).
            unsafe { alias.populate_write(page * PAGE, n * PAGE) };
        }
        let n = asks.versions.swap(0, Ordering::AcqRel);
        if n != 0 {
            idle = false;
            mapped = region.mvcc.back_ahead(n, mapped);
        }
        if idle {
            // Bounded like every wait; a request bumps `posted` first.
            futex_wait_bits(
                &asks.posted,
                posted,
                Duration::from_secs(1),
                NonZeroU32::MAX,
            );
        }
    }
}
