//! Page-level work shared by the fault handler and the advisory call:
//! installing a page's snapshot version, recording the read and write sets,
//! restoring a page's snapshot version on abort, and changing protection.
//!
//! Called from the SIGSEGV handler, so everything here is async-signal-safe:
//! atomics, `memcpy` between our own mappings, and the raw `mprotect` call.
//! No locks, no allocation, no panics on the handler path.

use std::sync::atomic::Ordering;

use super::filemap::FileMap;
use super::{
    DOOM_READ_ONLY_WRITE, DOOM_TOO_LARGE, TOUCH_BITS, TOUCH_EXPOSED_RW, TOUCH_FILE, TOUCH_READ,
    TOUCH_WRITE, ViewInner,
};
use crate::os::mem::{Access, PAGE, protect_raw};
use crate::os::signal::FaultOutcome;
use crate::viewmem::{page_state, user_file};

/// What a page reads as in the region file before anything is written there.
static ZERO_PAGE: [u8; PAGE] = [0; PAGE];

/// A turn on the MVCC read side: versions found during it stay in memory
/// (a version is freed only after every reader that could see it left).
/// Leaves on drop.
pub(super) struct ReadSide<'a> {
    view: &'a ViewInner,
    /// The epoch read on entering (`Mvcc::enter_epoch`); `None` if the
    /// slot was already inside.
    epoch: Option<u64>,
}

impl ReadSide<'_> {
    /// Address of the content of `page` at snapshot `s`: its version, or
    /// else the region file's image, or a static zero page for a page a
    /// grow added that the file has not been written at since (no fault on
    /// the file's page: a bulk load's fresh pages). Valid until the read
    /// side is left. The caller has checked that `page` is below the
    /// mapped size.
    pub(super) fn source(&self, page: usize, s: u64) -> *const u8 {
        self.source_of(page, s).0
    }

    /// `source`, and whether it is a version in the shared arena (which,
    /// unlike the image's page, no checkpoint overwrites in place).
    pub(super) fn source_of(&self, page: usize, s: u64) -> (*const u8, bool) {
        let region = &self.view.region;
        match region.mvcc.lookup(page, s) {
            Some(v) => (v.data.as_ptr(), true),
            None if region.mvcc.hdr().file.known_zero(page as u64) => (ZERO_PAGE.as_ptr(), false),
            // SAFETY: the page lies below the region size, which the image maps.
            None => (unsafe { region.image_data().add(page * PAGE) }, false),
        }
    }

    /// The epoch read on entering, if this turn entered the read side.
    pub(super) fn epoch(&self) -> Option<u64> {
        self.epoch
    }

    /// `source`, but a page in a hole of the region file is read as the
    /// zeros it holds, without bringing the hole into the page cache.
    pub(super) fn source_or_zeros(
        &self,
        page: usize,
        s: u64,
        holes: &mut crate::io::Holes,
    ) -> *const u8 {
        if self.view.region.mvcc.lookup(page, s).is_none() && self.view.file_hole(page, holes).0 {
            return ZEROS.as_ptr();
        }
        self.source(page, s)
    }
}

/// Pages [`ViewInner::install_zeros_ahead`] installs at most at once.
const ZEROS_AHEAD: usize = 64;

/// The content of a page in a hole of the region file.
static ZEROS: [u8; PAGE] = [0; PAGE];

impl Drop for ReadSide<'_> {
    #[inline]
    fn drop(&mut self) {
        if self.epoch.is_some() {
            self.view.region.mvcc.leave(self.view.slot());
        }
    }
}

impl ViewInner {
    /// Enters the MVCC read side until the returned token drops. Entered
    /// only for as long as a copy or diff takes, so a long transaction
    /// never holds back the freeing of versions.
    #[inline]
    pub(super) fn read_side(&self) -> ReadSide<'_> {
        // A round's copy into the file under way: the file is behind
        // (async-signal-safe wait).
        self.region.round_write.wait_readable();
        ReadSide {
            epoch: self.region.mvcc.enter_epoch(self.slot()),
            view: self,
        }
    }

    /// Copies the content of `page` at `snapshot` over its private copy.
    fn copy_snapshot(&self, page: usize, snapshot: u64) {
        let side = self.read_side();
        let src = side.source(page, snapshot);
        crate::debug::install_delay();
        let dst = self.mem.alias.base() as usize + page * PAGE;
        // SAFETY: both are whole pages in live mappings; the alias is private to
        // this view and the source is an immutable version or the file image.
        unsafe { std::ptr::copy_nonoverlapping(src, dst as *mut u8, PAGE) };
    }

    /// Makes the private copy of `page` the version visible at `snapshot`.
    pub(super) fn install(&self, page: usize, snapshot: u64) {
        self.copy_snapshot(page, snapshot);
        self.mark_installed(page);
    }

    /// Installs every page of `[first, end)` that is not valid, as `install`
    /// would one at a time, but in runs: the run's private pages are
    /// allocated in one call and pages whose snapshot version is the region
    /// file's are read into them with one `pread` per run, instead of a
    /// page fault on the image and one on the memory file per page. Only
    /// for pages the caller is about to touch (an accessor's range, a
    /// round's write fault). Async-signal-safe: system calls and atomics
    /// only (no allocation, no lock). A failed read leaves the rest to
    /// `install`.
    pub(super) fn install_range(&self, first: usize, end: usize, snapshot: u64) {
        // Pages per turn on the read side (a checkpoint waits for it).
        const TURN: usize = 256;
        let not_valid = |p: usize| {
            self.mem
                .valid
                .get(p)
                .is_some_and(|v| v.load(Ordering::Acquire) == page_state::NONE)
        };
        let mut holes = crate::io::Holes::default();
        let mut p = first;
        while p < end {
            if !not_valid(p) {
                p += 1;
                continue;
            }
            let mut q = p + 1;
            while q < end && q - p < TURN && not_valid(q) {
                q += 1;
            }
            let side = self.read_side();
            let mut k = p;
            while k < q {
                if self.region.mvcc.lookup(k, snapshot).is_some() {
                    self.install_from(&side, k, snapshot);
                    k += 1;
                    continue;
                }
                let mut e = k + 1;
                while e < q && self.region.mvcc.lookup(e, snapshot).is_none() {
                    e += 1;
                }
                let (hole, n) = self.file_hole(k, &mut holes);
                let e = e.min(k + n.max(1));
                if hole {
                    // Zeros: a fresh private page holds them already.
                    if self.mem.punch(k * PAGE, (e - k) * PAGE) {
                        self.mem.alias.populate(k * PAGE, (e - k) * PAGE, true);
                        (k..e).for_each(|page| self.mark_installed(page));
                    } else {
                        (k..e).for_each(|page| self.install_from(&side, page, snapshot));
                    }
                    k = e;
                    continue;
                }
                self.mem.alias.populate(k * PAGE, (e - k) * PAGE, true);
                crate::debug::install_delay();
                let read = self.read_file_pages(k, e);
                for page in k..e {
                    if page < k + read {
                        self.mark_installed(page);
                    } else {
                        self.install_from(&side, page, snapshot);
                    }
                }
                k = e;
            }
            drop(side);
            p = q;
        }
    }

    /// A store into a page that reads as zeros at `snapshot` (no version,
    /// and past the last page ever written into the region file, a page a
    /// grow added, or in a hole of the file: pages a heap hands out in
    /// order): installs it and the
    /// following pages alike that are not valid, up to [`ZEROS_AHEAD`],
    /// with one `MADV_POPULATE_WRITE` over their private pages emptied
    /// first, instead of a fault on the memory file and a copy of zeros
    /// for each. False (nothing installed) for a page that is not such,
    /// or no run of two, or when the transaction has pages exposed
    /// (`islands`: commit would count the extra valid pages as read).
    /// Async-signal-safe: system calls and atomics only.
    pub(super) fn install_zeros_ahead(&self, page: usize, snapshot: u64) -> bool {
        if self.exposed() {
            return false;
        }
        let side = self.read_side();
        let mut holes = crate::io::Holes::default();
        // One chain walk per page: no version at the snapshot, and known
        // zero or in a hole of the file.
        let mut zero = |p: usize| {
            let (src, version) = side.source_of(p, snapshot);
            std::ptr::eq(src, ZERO_PAGE.as_ptr()) || (!version && self.file_hole(p, &mut holes).0)
        };
        let not_valid = |p: usize| {
            self.mem
                .valid
                .get(p)
                .is_some_and(|v| v.load(Ordering::Acquire) == page_state::NONE)
        };
        let limit = (self.mem.mapped.load(Ordering::Relaxed) / PAGE).min(page + ZEROS_AHEAD);
        if page >= limit || !zero(page) {
            return false;
        }
        let mut q = page + 1;
        while q < limit && not_valid(q) && zero(q) {
            q += 1;
        }
        if q - page < 2 || !self.mem.punch(page * PAGE, (q - page) * PAGE) {
            return false;
        }
        // The page stored to now is mapped here; the rest by a large
        // transaction's helper, if it runs (`prefill.rs`).
        let rest = if self.prefill.populate(page + 1, q - page - 1) {
            1
        } else {
            q - page
        };
        self.mem.alias.populate(page * PAGE, rest * PAGE, true);
        (page..q).for_each(|p| self.mark_installed(p));
        true
    }

    /// Whether `page` lies in a hole of the region file (its content is
    /// zeros), and how many pages from it on are alike.
    pub(super) fn file_hole(&self, page: usize, holes: &mut crate::io::Holes) -> (bool, usize) {
        let at = self.region.fd_offset((page * PAGE) as u64);
        let (hole, len) = holes.at(self.region.data.fd(), at);
        (
            hole,
            len.div_ceil(PAGE as u64).min(usize::MAX as u64) as usize,
        )
    }

    /// Reads the region file's pages `[first, end)` into their private
    /// copies; returns how many whole pages were read from `first` on.
    fn read_file_pages(&self, first: usize, end: usize) -> usize {
        let data = &self.region.data;
        let at = self.region.fd_offset((first * PAGE) as u64);
        let len = (end - first) * PAGE;
        // SAFETY: whole pages of the alias, private to this view; no slice
        // into them is alive (the accessor hands one out after this).
        let buf =
            unsafe { std::slice::from_raw_parts_mut(self.mem.alias.base().add(first * PAGE), len) };
        let mut done = 0;
        while done < len {
            match rustix::io::pread(data.fd(), &mut buf[done..], at + done as u64) {
                Ok(0) | Err(_) => break,
                Ok(n) => done += n,
            }
        }
        done / PAGE
    }

    /// `install` of one page on a read side already entered.
    fn install_from(&self, side: &ReadSide<'_>, page: usize, snapshot: u64) {
        let src = side.source(page, snapshot);
        crate::debug::install_delay();
        let dst = self.mem.alias.base() as usize + page * PAGE;
        // SAFETY: as in `copy_snapshot`.
        unsafe { std::ptr::copy_nonoverlapping(src, dst as *mut u8, PAGE) };
        self.mark_installed(page);
    }

    /// Notes that `page`'s private copy holds its snapshot version. In a
    /// read-write transaction whose plain load mapped the page from the
    /// file (`map_file_fault`), the user address goes back to the copy
    /// first (inaccessible until the next touch): every write path (a
    /// store, an accessor, a commutative operation, a nested top action)
    /// installs before it writes the copy, so the user's loads never see
    /// the file's page beside the view's own bytes.
    fn mark_installed(&self, page: usize) {
        if !self.read_only.load(Ordering::Relaxed) {
            let flags = self.user_file_flags(page);
            if flags & user_file::FILE != 0
                && self
                    .map_back(page, page + 1, flags & user_file::LISTED | user_file::SEEN)
                    .is_err()
            {
                // Inaccessible and flagged `FILE`: a load faults and maps
                // the memory file back before it reads.
                self.leave_stuck(page, page + 1);
                self.file_ok.store(false, Ordering::Relaxed);
            }
        }
        self.installed.fetch_add(1, Ordering::Relaxed);
        self.mem.note_resident(page);
        if let Some(v) = self.mem.valid.get(page) {
            v.store(page_state::PRIVATE, Ordering::Release);
        }
    }

    /// Bounds the view's private memory (`Options::view_private_pages`,
    /// docs/design/shared-pages.md "Bounded memory"). Inside a transaction
    /// (`in_txn`), once the resident pages reach `trim_at`, gives back the
    /// pages this transaction has not touched: their content is also in the
    /// version chains or the region file, so the next touch installs them
    /// again, and nothing can point into them (accessor slices borrow the
    /// view within one transaction; raw loads fault again). Not while an
    /// untracked transaction has pages exposed (a plain load of a valid
    /// page takes no fault, so commit counts every valid page as read) or
    /// commutative operations left results in untouched pages. At the end
    /// of a transaction, trims to the bound, pages the transaction touched
    /// last. Async-signal-safe.
    /// `keep` (a page being installed outside a transaction) stays.
    /// Inlined down to the check that nothing is due (most calls find so).
    #[inline]
    pub(super) fn trim_private(&self, in_txn: bool, keep: Option<usize>) {
        let n = self.mem.resident_n.load(Ordering::Relaxed);
        let due = if in_txn {
            n >= self.trim_at.load(Ordering::Relaxed)
        } else {
            n > self.region.opts.view_private_pages
        };
        if due {
            self.trim_private_now(in_txn, keep);
        }
    }

    /// `trim_private` once enough pages are resident (at `trim_at` in a
    /// transaction, above the cache outside one).
    fn trim_private_now(&self, in_txn: bool, keep: Option<usize>) {
        let cache = self.region.opts.view_private_pages;
        let exposed = self.exposed();
        let left = if in_txn {
            let active = self.active.load(Ordering::Relaxed);
            if (active && exposed && self.untracked_reads.load(Ordering::Relaxed))
                || self.commuted.load(Ordering::Relaxed)
            {
                return;
            }
            // Outside a transaction no page is the transaction's.
            self.mem.trim(cache, exposed, |p| {
                Some(p) == keep || (active && self.touch_bits(p) != 0)
            })
        } else {
            // A round's copy into the file under way: a page given back
            // would wait for it at its next touch (trimmed later).
            if self.region.round_write.busy() {
                return;
            }
            // Pages of the transaction that just ended are the likeliest
            // to be touched again: they go last.
            self.mem
                .trim(cache - cache / 4, exposed, |p| self.touch_bits(p) != 0);
            self.mem.trim(cache, exposed, |_| false)
        };
        // Amortised: the next in-transaction trim waits until as many pages
        // again became resident.
        self.trim_at
            .store((2 * left).max(2 * cache).max(64), Ordering::Relaxed);
    }

    /// Discards this transaction's stores to `page`: it reads its snapshot again.
    pub(super) fn restore(&self, page: usize) {
        self.copy_snapshot(page, self.snapshot.load(Ordering::Relaxed));
    }

    /// Makes `page` part of the current transaction with the given access;
    /// does not change protection. Returns the protection the page needs.
    /// The caller has checked that `page` is below the mapped size.
    pub(super) fn touch(&self, page: usize, write: bool) -> Access {
        let serial = self.serial.load(Ordering::Relaxed);
        let Some(t) = self.mem.touched.get(page) else {
            debug_assert!(false, "page {page} beyond the view's tables");
            return Access::None;
        };
        let bits = bits_of(t.load(Ordering::Relaxed), serial);
        if self
            .mem
            .valid
            .get(page)
            .is_some_and(|v| v.load(Ordering::Acquire) == page_state::NONE)
        {
            let snapshot = self.snapshot.load(Ordering::Relaxed);
            if !(write && self.install_zeros_ahead(page, snapshot)) {
                self.install(page, snapshot);
            }
        }
        if bits == 0 {
            // First access in this transaction, load or store: a store grants
            // loads of the whole page too, so either way the page is read.
            self.record_read(page);
        }
        if write {
            if bits & TOUCH_WRITE == 0 {
                if self.read_only.load(Ordering::Relaxed) {
                    self.doom(DOOM_READ_ONLY_WRITE);
                }
                let n = self.write_n.load(Ordering::Relaxed);
                if n < self.mem.write_set.capacity() {
                    // No copy of the page is kept: commit diffs it against
                    // its snapshot version, and abort copies that back.
                    // SAFETY: n < capacity of the reserved array.
                    unsafe { *self.mem.write_set.as_ptr().add(n) = page as u32 };
                    self.write_n.store(n + 1, Ordering::Relaxed);
                } else {
                    self.doom(DOOM_TOO_LARGE);
                }
            }
            t.store(
                serial << TOUCH_BITS | bits | TOUCH_WRITE | TOUCH_READ,
                Ordering::Relaxed,
            );
            Access::ReadWrite
        } else {
            if bits == 0 {
                t.store(serial << TOUCH_BITS | TOUCH_READ, Ordering::Relaxed);
            }
            if bits & TOUCH_WRITE != 0 {
                Access::ReadWrite
            } else {
                Access::Read
            }
        }
    }

    /// A read-only transaction's read of `[off, off+len)` within one page
    /// the view holds a copy of: marks the page read, as `touch` would (a
    /// read-only transaction keeps no read set, and a held page needs no
    /// install, so nothing is left to trim), and returns its alias address.
    /// `None` sends the caller down the general path.
    #[inline]
    pub(super) fn held_read(&self, off: usize, len: usize) -> Option<*mut u8> {
        let page = off / PAGE;
        if len == 0
            || (off + len - 1) / PAGE != page
            || !self.read_only.load(Ordering::Relaxed)
            || !self.holds(page)
        {
            return None;
        }
        let t = self.mem.touched.get(page)?;
        let serial = self.serial.load(Ordering::Relaxed);
        if bits_of(t.load(Ordering::Relaxed), serial) == 0 {
            t.store(serial << TOUCH_BITS | TOUCH_READ, Ordering::Relaxed);
        }
        // SAFETY: off + len is within the mapped size (checked by the
        // caller), which the alias maps.
        Some(unsafe { self.mem.alias.base().add(off) })
    }

    /// This transaction's touch bits of `page` (0 if untouched).
    pub(super) fn touch_bits(&self, page: usize) -> u32 {
        self.mem.touched.get(page).map_or(0, |t| {
            bits_of(
                t.load(Ordering::Relaxed),
                self.serial.load(Ordering::Relaxed),
            )
        })
    }

    /// Notes that `page` is writable at the user address in this
    /// transaction, so that its end protects it again.
    pub(super) fn mark_exposed_rw(&self, page: usize) {
        if let Some(t) = self.mem.touched.get(page) {
            t.fetch_or(TOUCH_EXPOSED_RW, Ordering::Relaxed);
        }
    }

    /// Accessor path: tracks `[off, off+len)` in software (install, read
    /// and write sets) exactly as first touches would, and returns its address in
    /// the always-writable alias. Takes no fault and changes no protection.
    /// The caller has checked the range and that a transaction is active.
    pub(super) fn access(&self, off: usize, len: usize, write: bool) -> *mut u8 {
        if len > 0 {
            let need = if write { TOUCH_WRITE } else { TOUCH_READ };
            let (first, last) = (off / PAGE, (off + len - 1) / PAGE);
            if last > first {
                self.install_range(first, last + 1, self.snapshot.load(Ordering::Relaxed));
            }
            for page in first..=last {
                // A page read shared in this transaction is marked read
                // but not installed (`note_shared_read`).
                if self.touch_bits(page) & need == 0 || !self.holds(page) {
                    self.touch(page, write);
                }
            }
            self.trim_private(true, None);
        }
        // SAFETY: off + len is within the mapped size, which the alias maps.
        unsafe { self.mem.alias.base().add(off) }
    }

    /// The address of `[off, off+len)` in the view's mapping of the region
    /// file, shared with the page cache (no copy), if the file holds each
    /// page's version at the snapshot; `None` sends the caller to `access`
    /// (a copy in the alias). A page read either way in a transaction is
    /// read the same way again, until a store puts it in the alias (and
    /// dooms a read-only transaction). In a read-write transaction the
    /// page also joins the read set, and pages the view holds (its copy
    /// may carry this transaction's own results) or shares no more
    /// (`shares_read`) go to the alias.
    pub(super) fn file_access(&self, off: usize, len: usize) -> Option<*mut u8> {
        let read_only = self.read_only.load(Ordering::Relaxed);
        if len == 0
            || !self.file_ok.load(Ordering::Relaxed)
            || self.region.round_write.busy()
            || !self.region.fence.running()
        {
            return None;
        }
        let mvcc = &self.region.mvcc;
        let s = self.snapshot.load(Ordering::Relaxed);
        let serial = self.serial.load(Ordering::Relaxed);
        for page in off / PAGE..=(off + len - 1) / PAGE {
            let t = self.mem.touched.get(page)?;
            let bits = bits_of(t.load(Ordering::Relaxed), serial);
            if !read_only && self.holds(page) {
                return None;
            }
            if bits & TOUCH_FILE != 0 && bits & TOUCH_WRITE == 0 {
                continue;
            }
            // A page the file does not hold at the snapshot (written since
            // the last checkpoint) goes to the alias without being listed:
            // no fence to pay, and no fence pass over it later. (Only a
            // checkpoint turns this true; the check after listing decides.)
            if bits != 0 || !self.shares_read(page) || !mvcc.file_holds(page, s) {
                return None;
            }
            let n = self.file_n.load(Ordering::Relaxed);
            if n >= self.mem.file_set.capacity() {
                return None;
            }
            self.start_file_reads(s);
            // Listed before the check (see fence.rs).
            // SAFETY: n < capacity of the reserved array.
            unsafe { *self.mem.file_set.as_ptr().add(n) = page as u32 };
            // Release, not SeqCst: the fence below orders it before the
            // check (one locked instruction per page, not two).
            self.file_n.store(n + 1, Ordering::Release);
            std::sync::atomic::fence(Ordering::SeqCst);
            if !mvcc.file_holds(page, s) {
                return None;
            }
            if !read_only {
                self.record_read(page);
            }
            t.store(serial << TOUCH_BITS | TOUCH_FILE, Ordering::Relaxed);
        }
        // SAFETY: off + len is within the mapped size, which the file mapping maps.
        Some(unsafe { self.mem.file.base().add(off) })
    }

    /// Whether this transaction may read `page` from a shared copy (the
    /// region file's page cache, a version in shared memory) instead of
    /// copying it into the view. Always in a read-only transaction. In a
    /// read-write one, unless an earlier transaction of the view touched
    /// the page: such a page (a tree's root and upper nodes, read by every
    /// transaction) is read cheapest at the view's own copy, which stays
    /// valid across transactions within the view's bounded cache
    /// (`view_private_pages`); a page read for the first time is shared.
    pub(super) fn shares_read(&self, page: usize) -> bool {
        if self.read_only.load(Ordering::Relaxed) {
            return true;
        }
        self.mem.touched.get(page).is_some_and(|t| {
            let raw = t.load(Ordering::Relaxed);
            raw == 0 || bits_of(raw, self.serial.load(Ordering::Relaxed)) != 0
        })
    }

    /// A read-write transaction's read of `page` from a shared copy: the
    /// page joins the read set and is marked read, as `touch` would do
    /// (commit validates it; a later store installs it from the snapshot).
    pub(super) fn note_shared_read(&self, page: usize) {
        if self.read_only.load(Ordering::Relaxed) {
            return;
        }
        let Some(t) = self.mem.touched.get(page) else {
            return;
        };
        let serial = self.serial.load(Ordering::Relaxed);
        if bits_of(t.load(Ordering::Relaxed), serial) == 0 {
            self.record_read(page);
            t.store(serial << TOUCH_BITS | TOUCH_READ, Ordering::Relaxed);
        }
    }

    /// Adds `page` to the read set of a serializable transaction.
    fn record_read(&self, page: usize) {
        if !self.track_reads.load(Ordering::Relaxed) {
            return;
        }
        let n = self.read_n.load(Ordering::Relaxed);
        if n < self.mem.read_set.capacity() {
            // SAFETY: n < capacity of the reserved array.
            unsafe { *self.mem.read_set.as_ptr().add(n) = page as u32 };
            self.read_n.store(n + 1, Ordering::Relaxed);
        } else {
            self.doom(DOOM_TOO_LARGE);
        }
    }

    /// Calls `f(page)` for each page written in this transaction.
    pub(super) fn for_each_written(&self, mut f: impl FnMut(usize)) {
        for slot in 0..self.write_n.load(Ordering::Relaxed) {
            // SAFETY: entries below write_n were written by `touch`.
            let page = unsafe { *self.mem.write_set.as_ptr().add(slot) } as usize;
            f(page);
        }
    }

    pub(super) fn doom(&self, why: u8) {
        let _ = self
            .doomed
            .compare_exchange(0, why, Ordering::Relaxed, Ordering::Relaxed);
    }

    /// The fault routine registered with the signal module.
    pub(super) fn on_fault(&self, addr: usize, write: bool) -> FaultOutcome {
        let off = addr - self.mem.user.base() as usize;
        if off >= self.mem.mapped.load(Ordering::Acquire) {
            return FaultOutcome::BeyondRegion;
        }
        if crate::os::signal::forks_now() != self.region.fork_generation {
            return FaultOutcome::ForkedChild;
        }
        let page = off / PAGE;
        let page_addr = self.mem.user.base() as usize + page * PAGE;
        self.faults.fetch_add(1, Ordering::Relaxed);
        self.islands.fetch_add(1, Ordering::Relaxed);
        let active = self.active.load(Ordering::Acquire);
        if active && write && self.round_window.load(Ordering::Relaxed) > 0 {
            return self.round_fault(page);
        }
        let flags = self.user_file_flags(page);
        if flags & user_file::FILE != 0 {
            if active && !write && flags & user_file::LISTED != 0 {
                // A page of a run this transaction mapped from the file: in
                // a read-write transaction, inaccessible until its first
                // load, which joins the read set here; or made inaccessible
                // by a trim. The fence keeps its content the snapshot's.
                self.note_shared_read(page);
                return match protect_raw(page_addr, PAGE, Access::Read) {
                    Ok(()) => FaultOutcome::Handled,
                    Err(_) => FaultOutcome::ProtectFailed,
                };
            }
            // A store, or a page left from a failed end: the memory file first.
            if self
                .map_back(page, page + 1, flags & user_file::LISTED | user_file::SEEN)
                .is_err()
            {
                return FaultOutcome::ProtectFailed;
            }
        }
        if active && !write {
            match self.map_file_fault(page) {
                FileMap::Mapped => return FaultOutcome::Handled,
                FileMap::Failed(_) => return FaultOutcome::ProtectFailed,
                FileMap::No => {}
            }
        }
        let access = if active {
            let a = self.touch(page, write);
            if a == Access::ReadWrite {
                self.mark_exposed_rw(page);
            }
            a
        } else {
            if write {
                return FaultOutcome::WriteOutsideTransaction;
            }
            // Outside a transaction the view shows the latest committed data.
            self.install(page, self.region.mvcc.visible_seq());
            Access::Read
        };
        // Before the page becomes accessible (kept: it is touched, or `keep`).
        self.trim_private(true, Some(page));
        match protect_raw(page_addr, PAGE, access) {
            Ok(()) => FaultOutcome::Handled,
            Err(_) => FaultOutcome::ProtectFailed,
        }
    }
}

impl ViewInner {
    /// A write fault in a round's transaction (`view/rounds.rs`): when it
    /// continues the run the last one made writable (sequential stores),
    /// the next run is twice as long (at most `ROUND_WINDOW` pages); else
    /// one page. The run is installed at once (`install_range`), joins the
    /// write set and becomes writable with one `mprotect`. Pages of it the
    /// round does not change are dropped at commit (only changed pages are
    /// written or validated), so a round stays its stores.
    fn round_fault(&self, page: usize) -> FaultOutcome {
        let next = self.round_next.load(Ordering::Relaxed);
        let window = match self.round_window.load(Ordering::Relaxed) {
            w if page == next => (2 * w).min(ROUND_WINDOW),
            _ => 1,
        };
        let pages = self.mem.mapped.load(Ordering::Acquire) / PAGE;
        let end = (page + window).min(pages);
        self.install_range(page, end, self.snapshot.load(Ordering::Relaxed));
        self.islands
            .fetch_add((end - page) as u64, Ordering::Relaxed);
        for p in page..end {
            self.touch(p, true);
            self.mark_exposed_rw(p);
        }
        self.round_window.store(window, Ordering::Relaxed);
        self.round_next.store(end, Ordering::Relaxed);
        self.trim_private(true, Some(page));
        let addr = self.mem.user.base() as usize + page * PAGE;
        match protect_raw(addr, (end - page) * PAGE, Access::ReadWrite) {
            Ok(()) => FaultOutcome::Handled,
            Err(_) => FaultOutcome::ProtectFailed,
        }
    }
}

/// Most pages one write fault of a round makes writable (1 MiB).
const ROUND_WINDOW: usize = 256;

/// The touch bits of a `touched` entry if it belongs to transaction `serial`.
fn bits_of(entry: u32, serial: u32) -> u32 {
    if entry >> TOUCH_BITS == serial {
        entry & ((1 << TOUCH_BITS) - 1)
    } else {
        0
    }
}

/// The `FaultFn` registered for every view.
pub(super) fn handle(ctx: *const (), addr: usize, write: bool) -> FaultOutcome {
    // SAFETY: `ctx` is the boxed ViewInner registered in `View::open`; the
    // registration is dropped before the box.
    let view = unsafe { &*(ctx as *const ViewInner) };
    view.on_fault(addr, write)
}
