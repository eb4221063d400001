//! A view's memory (address space, private memory file, page tables),
//! which a region keeps after a view closes for the next view opened.
//! Below the engine, which only holds it in its pool, and the view.

use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, AtomicU64, AtomicUsize, Ordering};

use crate::error::{Error, Result};
use crate::os::mem::{Access, PAGE, Reservation, ReservedArray};

/// Most pages one transaction may write (the write set is reserved address
/// space): 16 GiB. A commit's log record holds at most 2 GiB of changes
/// (`Error::TooLarge` beyond); a round, or a commit of half of
/// `checkpoint_bytes` or more, alone with its region has no such bound
/// (`view/rounds.rs`, `View::large_enough_for_place`).
pub const MAX_WRITE_PAGES: usize = 1 << 22;
/// Most pages one serializable transaction may read.
pub const MAX_READ_PAGES: usize = 1 << 22;

/// A view's memory: its address space, private pages and page tables. When
/// a view closes, its region keeps this (see [`ViewMemory::recycle`]) and
/// the next view opened takes it over: the private pages stay allocated
/// and mapped, so the new view's first touches cost what a long-lived
/// view's do, without allocating and zeroing a page each.
pub(crate) struct ViewMemory {
    pub(crate) user: Reservation,
    pub(crate) alias: Reservation,
    pub(crate) memfd: OwnedFd,
    /// A private read-only mapping of the region file (issue 20): accessor
    /// reads of a read-only transaction return pages here, shared with the
    /// page cache, when the file holds their version at the snapshot. The
    /// fence makes a page private in place (its content never changes
    /// under a reader) before a checkpoint overwrites it.
    pub(crate) file: Reservation,
    /// Pages of `file` handed out in the current transaction (`file_n` of them).
    pub(crate) file_set: ReservedArray<u32>,
    pub(crate) mapped: AtomicUsize,
    /// Per page, its [`page_state`].
    pub(crate) valid: ReservedArray<AtomicU8>,
    pub(crate) touched: ReservedArray<AtomicU32>,
    /// The version cache's entries (`view/inplace.rs`, `VersionCache`).
    pub(crate) versions: VersionEntries,
    pub(crate) read_set: ReservedArray<u32>,
    pub(crate) write_set: ReservedArray<u32>,
    /// Per page, 1 while the memfd holds a page for it (allocated by an
    /// install); a page valid in any state but `SHARED` is resident.
    pub(crate) resident: ReservedArray<AtomicU8>,
    /// The resident pages, oldest first (`resident_n` of them): what
    /// [`ViewMemory::trim`] gives back, without scanning the region.
    pub(crate) resident_list: ReservedArray<AtomicU32>,
    pub(crate) resident_n: AtomicUsize,
    /// Per page, its [`user_file`] flags: whether the user address maps the
    /// region file instead of the memfd (plain loads of a read-only
    /// transaction, `view/fault.rs` `map_file_run`).
    pub(crate) ufile: ReservedArray<AtomicU8>,
    /// Pages listed in the current transaction as mapped from the file at
    /// the user address, in the order they were mapped (`ufile_n` of them):
    /// what the fence scans and the transaction's end maps back.
    pub(crate) ufile_list: ReservedArray<AtomicU32>,
    pub(crate) ufile_n: AtomicUsize,
    /// The memory file could not be mapped back over file pages at a
    /// transaction's end: the memory is not pooled.
    pub(crate) ufile_stuck: AtomicBool,
}

/// The entries of a view's version cache (`view/inplace.rs`): one word per
/// page read in place (8 bytes, committed on first use), and which
/// generation of them is valid. The generation stays with the words, so
/// that memory pooled for the next view needs no zeroing: that view's
/// first entry starts a newer generation.
pub(crate) struct VersionEntries {
    pub(crate) words: ReservedArray<AtomicU64>,
    /// The generation of the valid words (1 up to the cache's maximum).
    pub(crate) generation: AtomicU32,
    /// One past the highest page a word was written for since the words
    /// were last zeroed: what a wrap of the generation zeroes.
    pub(crate) high: AtomicUsize,
}

impl VersionEntries {
    /// Room for the entries of `pages` pages, none valid.
    pub(crate) fn new(pages: usize) -> rustix::io::Result<VersionEntries> {
        Ok(VersionEntries {
            words: ReservedArray::new(pages)?,
            generation: AtomicU32::new(1),
            high: AtomicUsize::new(0),
        })
    }
}

/// A view's state of one page (its `valid` entry). A page is *valid* in
/// any state but `NONE`: its content at the user address (once accessible)
/// is the committed version at the view's last snapshot.
pub(crate) mod page_state {
    /// Nothing assumed: the next touch installs the page.
    pub const NONE: u8 = 0;
    /// A private copy of the version, in the view's memory file.
    pub const PRIVATE: u8 = 1;
    /// The region file's own page, shared with every view that reads it
    /// (issue 20, docs/design/shared-pages.md: allowed while
    /// `Mvcc::file_holds` says the file holds the snapshot's version; not
    /// installed yet).
    #[expect(dead_code, reason = "installed by the next step of issue 20")]
    pub const SHARED: u8 = 2;
}

/// Flags of a page's `ufile` entry. The view's owner thread (fault handler,
/// transaction end) and the process's fence thread change a listed page's
/// mapping or content only while holding `BUSY` (a spin bit: each holds it
/// for one system call or two and waits for nothing while holding it).
pub(crate) mod user_file {
    /// In `ufile_list` (this transaction).
    pub const LISTED: u8 = 1;
    /// The user address maps the region file's page (`MAP_PRIVATE`).
    pub const FILE: u8 = 2;
    /// Held by the owner or the fence thread.
    pub const BUSY: u8 = 4;
    /// The fence made the page private (its content stays the snapshot's).
    pub const PRIV: u8 = 8;
    /// Mapped from the file by an earlier transaction of this view: a page
    /// read again is copied and stays valid across transactions, as before.
    pub const SEEN: u8 = 16;
}

/// Most closed views' memory a region keeps for reuse.
pub(crate) const POOLED_VIEWS: usize = 4;
/// A closed view's memory keeps at most this many bytes of private pages
/// (and at most `Options::view_private_pages`) while it waits in the pool.
const POOLED_BYTES: usize = 64 << 20;

impl ViewMemory {
    /// `path` names the region in the error when `at` is taken.
    /// `phase`: the region file's offset of the region's first byte; the
    /// mappings of the file are placed congruent to it
    /// ([`Reservation::new_phased`]), unless the caller chose the address.
    pub(crate) fn new(
        max: usize,
        at: Option<usize>,
        phase: usize,
        path: &std::path::Path,
    ) -> Result<ViewMemory> {
        let pages = max / PAGE;
        let os = |op| move |e| Error::os(op, e);
        let user = match at {
            Some(_) => Reservation::new(max, at),
            None => Reservation::new_phased(max, phase),
        };
        Ok(ViewMemory {
            user: user.map_err(|e| match at {
                Some(addr) if e == rustix::io::Errno::EXIST => Error::AddressTaken {
                    path: path.to_path_buf(),
                    addr,
                    len: max,
                    holder: crate::os::mem::describe_mappings(addr, max),
                },
                _ => Error::os("reserve view address space", e),
            })?,
            alias: Reservation::new(max, None).map_err(os("reserve alias"))?,
            memfd: crate::os::mem::memfd("txmap-view").map_err(os("memfd_create"))?,
            file: Reservation::new_phased(max, phase).map_err(os("reserve file mapping"))?,
            file_set: ReservedArray::new(MAX_READ_PAGES).map_err(os("reserve file read set"))?,
            mapped: AtomicUsize::new(0),
            valid: ReservedArray::new(pages).map_err(os("reserve page table"))?,
            touched: ReservedArray::new(pages).map_err(os("reserve page table"))?,
            versions: VersionEntries::new(pages).map_err(os("reserve page table"))?,
            read_set: ReservedArray::new(MAX_READ_PAGES).map_err(os("reserve read set"))?,
            write_set: ReservedArray::new(MAX_WRITE_PAGES).map_err(os("reserve write set"))?,
            resident: ReservedArray::new(pages).map_err(os("reserve page table"))?,
            resident_list: ReservedArray::new(pages).map_err(os("reserve page table"))?,
            resident_n: AtomicUsize::new(0),
            ufile: ReservedArray::new(pages).map_err(os("reserve page table"))?,
            ufile_list: ReservedArray::new(pages).map_err(os("reserve page table"))?,
            ufile_n: AtomicUsize::new(0),
            ufile_stuck: AtomicBool::new(false),
        })
    }

    /// The memory file, to map it.
    pub(crate) fn memfd_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        use std::os::fd::AsFd;
        self.memfd.as_fd()
    }

    /// Bytes the memfd holds (0 if it cannot be asked).
    pub(crate) fn private_bytes(&self) -> u64 {
        rustix::fs::fstat(&self.memfd).map_or(0, |st| st.st_blocks as u64 * 512)
    }

    /// Notes that the memfd holds a page for `page` (an install wrote it).
    /// Async-signal-safe; called by the view's own thread only.
    pub(crate) fn note_resident(&self, page: usize) {
        let Some(r) = self.resident.get(page) else {
            return;
        };
        if r.load(Ordering::Relaxed) != 0 {
            return;
        }
        let n = self.resident_n.load(Ordering::Relaxed);
        // Always there: one entry per page at most.
        if let Some(e) = self.resident_list.get(n) {
            r.store(1, Ordering::Relaxed);
            e.store(page as u32, Ordering::Relaxed);
            self.resident_n.store(n + 1, Ordering::Relaxed);
        }
    }

    /// Gives resident pages back to the system, oldest first, until at
    /// most `target` remain, skipping pages for which `keep` is true: each
    /// becomes invalid (state none), inaccessible at the user address if
    /// `exposed` (so the next touch installs it again), and its memfd page
    /// is punched out. Allocation-free and async-signal-safe (raw system
    /// calls), so the fault handler may call it. Returns the pages left.
    pub(crate) fn trim(&self, target: usize, exposed: bool, keep: impl Fn(usize) -> bool) -> usize {
        let n = self.resident_n.load(Ordering::Relaxed);
        if n <= target {
            return n;
        }
        let mut left = n;
        let mut w = 0;
        let mut run: Option<(usize, usize)> = None;
        // Entries below resident_n (within the capacity: one per page) were
        // written by `note_resident` or by this loop (w <= i).
        for i in 0..n {
            let Some(p) = self.resident_list.get(i).map(|e| e.load(Ordering::Relaxed)) else {
                break;
            };
            let p = p as usize;
            if left > target && !keep(p) {
                left -= 1;
                run = match run {
                    Some((start, end)) if end == p => Some((start, p + 1)),
                    r => {
                        w = self.evict_run(r, w, exposed);
                        Some((p, p + 1))
                    }
                };
            } else if let Some(e) = self.resident_list.get(w) {
                e.store(p as u32, Ordering::Relaxed);
                w += 1;
            }
        }
        w = self.evict_run(run, w, exposed);
        self.resident_n.store(w, Ordering::Relaxed);
        w
    }

    /// Evicts pages `[start, end)` (see `trim`); if they cannot be made
    /// inaccessible they stay resident and valid, written back to the list
    /// at `w` (their entries were read from positions at or after `w`, so
    /// they fit). Returns the list's next free position.
    fn evict_run(&self, run: Option<(usize, usize)>, mut w: usize, exposed: bool) -> usize {
        let Some((start, end)) = run else {
            return w;
        };
        let (off, len) = (start * PAGE, (end - start) * PAGE);
        if exposed && self.user.protect(off, len, Access::None).is_err() {
            for p in start..end {
                if let Some(e) = self.resident_list.get(w) {
                    e.store(p as u32, Ordering::Relaxed);
                }
                w += 1;
            }
            return w;
        }
        for p in start..end {
            if let Some(v) = self.valid.get(p) {
                v.store(page_state::NONE, Ordering::Release);
            }
            if let Some(r) = self.resident.get(p) {
                r.store(0, Ordering::Relaxed);
            }
        }
        // A page that cannot be punched stays allocated but invalid: its
        // next install overwrites it (only its memory is not given back).
        let _ = self.punch(off, len);
        w
    }

    /// Gives the memfd's pages of `[off, off+len)` back: they read as zeros
    /// afterwards. False if the call failed (they keep their content).
    /// Async-signal-safe.
    pub(crate) fn punch(&self, off: usize, len: usize) -> bool {
        rustix::fs::fallocate(
            &self.memfd,
            rustix::fs::FallocateFlags::PUNCH_HOLE | rustix::fs::FallocateFlags::KEEP_SIZE,
            off as u64,
            len as u64,
        )
        .is_ok()
    }

    /// Makes the memory of a closed view fit for the next one: no page valid
    /// or touched, nothing accessible at the user address. Returns `None`
    /// (the memory is freed) if that fails or the memory is too large to keep.
    /// At most `keep` private pages (and `POOLED_BYTES`) stay allocated.
    pub(crate) fn recycle(mut self, exposed: bool, keep: usize) -> Option<ViewMemory> {
        // The file still mapped at the user address (a failed map back).
        if self.ufile_n.load(Ordering::Relaxed) != 0 || self.ufile_stuck.load(Ordering::Relaxed) {
            return None;
        }
        if exposed {
            self.user
                .protect(0, self.mapped.load(Ordering::Relaxed), Access::None)
                .ok()?;
        }
        self.trim(keep.min(POOLED_BYTES / PAGE), false, |_| false);
        self.valid.clear().ok()?;
        self.touched.clear().ok()?;
        self.ufile.clear().ok()?;
        Some(self)
    }
}
