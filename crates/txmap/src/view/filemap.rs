//! Plain loads from the region file (issue 20, docs/design/shared-pages.md,
//! step 6).
//!
//! A read fault of a read-only transaction on a page the view holds no
//! valid copy of, whose version at the snapshot the region file holds
//! (`Mvcc::file_holds`), maps the region file at the user address
//! (`MAP_FIXED | MAP_PRIVATE`, `PROT_READ`) for the run of such pages
//! around it in its aligned block, instead of copying the page into the
//! view's memory file. Loads then share the page cache: no copy, and the
//! rest of the run costs only the kernel's fault. The pages are listed
//! (`mem.ufile_list`) so that the process's fence thread makes a page
//! private in place before a checkpoint overwrites it with a newer version
//! (`fence.rs`), exactly as for the accessor reads of `file_access`; the
//! transaction's end maps the memory file back (`PROT_NONE`, one call per
//! run), so outside a read-only transaction the user range is what it was
//! before. A read-write transaction's read fault maps a run of at most
//! `RW_BLOCK` pages inaccessible and makes readable only the faulting page,
//! after recording the read; each other page of the run becomes readable
//! at its own first load, which records it (`on_fault`).
//!
//! Order, as in `file_access`: a run is mapped and its pages flagged
//! `FILE` before the owner checks `file_holds` again (a full fence
//! between); a checkpoint raises the fence generation after the commits it
//! writes were published. So either the check sees the newer commit (the
//! run goes back to the memory file) or the fence thread sees the page
//! mapped. The owner and the fence thread change a page's mapping or
//! content only holding its `BUSY` bit.
//!
//! Called from the SIGSEGV handler: atomics and raw system calls only.

use std::sync::atomic::{Ordering, fence};

use super::{TOUCH_WRITE, ViewInner};
use crate::os::mem::{Access, PAGE, protect_raw};
use crate::viewmem::{page_state, user_file as uf};

/// Pages of the aligned block within which one fault maps a run (4 MiB):
/// a fault costs ~15-20 µs here besides its pages (signal, `mmap`,
/// checks), so a sequential first read of 1,024 pages takes one, not four
/// (0.28 against 0.33 µs per page, beside a 0.22 µs bare fault).
const BLOCK: usize = 1024;
/// The same for a read-write transaction, whose run stays inaccessible
/// but for the pages it loads (each one fault and `mprotect`): a scattered
/// reader scans, maps and maps back less, and leaves fewer pages `SEEN`.
const RW_BLOCK: usize = 64;
/// Runs one transaction maps from the file at most: each may split the
/// user range's mapping in two more (`vm.max_map_count`; a run beside one
/// already mapped extends it and does not count); beyond, pages are
/// copied as before.
const MAX_RUNS: usize = 2048;

/// `MAX_RUNS`, or a test's lower limit (`debug::file_run_limit`).
fn max_runs() -> usize {
    crate::debug::file_runs_or(MAX_RUNS)
}

/// Pages of a region at most, for a fresh view's first read-only
/// transaction to map the file over the whole user range at begin
/// (`map_file_whole`): a fence pass while it runs looks at every page's
/// sequence (~1 ns each, so at most ~0.3 ms).
const WHOLE_MAX: usize = 1 << 18;

/// The commit sequence before a scan for pages that may map the file, and
/// whether the file held every page's version at the snapshot then.
#[derive(Clone, Copy)]
struct FileState {
    seq: u64,
    all: bool,
}

/// What a read fault's attempt to map the file gave.
pub(super) enum FileMap {
    /// The page maps the file and is readable with its snapshot version.
    Mapped,
    /// Nothing changed: copy the page as before.
    No,
    /// The memory file could not be mapped back over a run whose file
    /// pages may be newer than the snapshot: the fault must not return.
    Failed(rustix::io::Errno),
}

impl ViewInner {
    /// `page`'s `ufile` flags.
    pub(super) fn user_file_flags(&self, page: usize) -> u8 {
        let raw = self
            .mem
            .ufile
            .get(page)
            .map_or(0, |f| f.load(Ordering::Acquire));
        self.whole_flags(page, raw)
    }

    /// `page`'s flags given its stored ones, `raw`: a page of the range a
    /// read-only transaction mapped whole at begin maps the file and counts
    /// as listed (the fence looks at every such page) until a store maps
    /// the memory file back over it (`SEEN`).
    pub(super) fn whole_flags(&self, page: usize, raw: u8) -> u8 {
        if raw & uf::SEEN == 0 && page < self.whole.load(Ordering::Relaxed) {
            raw | uf::FILE | uf::LISTED
        } else {
            raw
        }
    }

    /// Takes `page`'s `BUSY` bit, waiting while the other side holds it
    /// (for a system call or two); returns its flags.
    pub(super) fn user_file_lock(&self, page: usize) -> u8 {
        let Some(f) = self.mem.ufile.get(page) else {
            return 0;
        };
        loop {
            let cur = f.load(Ordering::Acquire);
            if cur & uf::BUSY == 0
                && f.compare_exchange_weak(cur, cur | uf::BUSY, Ordering::SeqCst, Ordering::Relaxed)
                    .is_ok()
            {
                return cur;
            }
            rustix::thread::sched_yield();
        }
    }

    /// Releases `page`'s `BUSY` bit, leaving `flags`.
    pub(super) fn user_file_unlock(&self, page: usize, flags: u8) {
        if let Some(f) = self.mem.ufile.get(page) {
            f.store(flags & !uf::BUSY, Ordering::SeqCst);
        }
    }

    /// Whether this transaction reads from the region file: pages of the
    /// view's file mapping handed out (`file_n`), user pages listed
    /// (`ufile_n`) or the whole range mapped at begin (`whole`).
    #[inline]
    pub(super) fn reads_file(&self) -> bool {
        self.file_n.load(Ordering::Relaxed) != 0
            || self.mem.ufile_n.load(Ordering::Relaxed) != 0
            || self.whole.load(Ordering::Relaxed) != 0
    }

    /// Before the first page of a transaction is listed for the fence (by
    /// `file_access` or here): the slot reads from the file at `s` from now
    /// on. Fences before this were for commits this transaction's checks see.
    pub(super) fn start_file_reads(&self, s: u64) {
        if !self.reads_file() {
            let mvcc = &self.region.mvcc;
            mvcc.set_file_reads(self.slot(), Some(s));
            mvcc.fence_ack(self.slot(), mvcc.fence_word().load(Ordering::SeqCst));
        }
    }

    /// A fresh view's first read-only transaction at `s`, at its begin or
    /// at the first `View::base` call in it (only views asked for their
    /// address read by plain loads, see `View::base`): when
    /// the region file holds every page's version at `s` (nothing committed
    /// after it, a checkpoint reached it), maps the file over the whole user
    /// range (one `mmap`), so the transaction's loads take only the
    /// kernel's faults, which map the page cache's large folios many pages
    /// at a time: no signal, no run to scan or list. The fence then looks
    /// at every page below `whole` (none is listed), and the transaction's
    /// end maps the memory file back over the range (`end_whole`). Pages
    /// are not marked `SEEN`: a later transaction maps the runs it reads.
    ///
    /// Order as in `map_file_run`: mapped, the slot's file reads set, then
    /// `whole` raised, a full fence and the check; a checkpoint raises the
    /// fence generation after publishing the commits it writes. So either
    /// the check sees a commit after `s` (the range goes back at once) or
    /// the fence thread sees `whole`.
    pub(super) fn map_file_whole(&self, s: u64) {
        // Only over a range nothing of this transaction maps yet (called at
        // `begin_read`, or at the first `View::base` call in it).
        if !self.file_ok.load(Ordering::Relaxed)
            || !self.region.fence.running()
            || !self.read_only.load(Ordering::Relaxed)
            || !self.active.load(Ordering::Relaxed)
            || self.mem.ufile_n.load(Ordering::Relaxed) != 0
        {
            return;
        }
        let pages = self.mem.mapped.load(Ordering::Acquire) / PAGE;
        if pages == 0 || pages > WHOLE_MAX {
            return;
        }
        let at = self.file_state(s);
        if !at.all {
            return;
        }
        crate::debug::file_run_point(crate::debug::FileRunPause::WholeScanned);
        if self.map_file_over(0, pages, Access::Read).is_err() {
            return;
        }
        self.start_file_reads(s);
        self.mem.user.advise_random(0, pages * PAGE);
        self.whole.store(pages, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        crate::debug::file_run_point(crate::debug::FileRunPause::WholeMapped);
        if self.region.mvcc.commit_seq() != at.seq && !self.end_file_reads() {
            // A commit raced, and the memory file could not be mapped back.
            self.file_ok.store(false, Ordering::Relaxed);
        }
    }

    /// Maps the memory file back over the whole range `[0, n)` a read-only
    /// transaction mapped from the file at begin, where no fence pass can
    /// run. False if it could not: the range is made inaccessible and its
    /// pages flagged `FILE` (not `LISTED`), as `end_user_file` does.
    fn end_whole(&self, n: usize) -> bool {
        let r = self.map_memfd_over(0, n);
        self.whole.store(0, Ordering::Relaxed);
        let dirty = self.whole_dirty.swap(false, Ordering::Relaxed);
        match r {
            Ok(()) => {
                if dirty {
                    self.set_flags(0, n, 0, Ordering::SeqCst);
                }
                true
            }
            Err(_) => {
                self.leave_stuck(0, n);
                false
            }
        }
    }

    /// Maps the region file over the user pages `[a, e)`, private, with
    /// `access` (`Read`, or `None` for a read-write transaction's run).
    fn map_file_over(&self, a: usize, e: usize, access: Access) -> rustix::io::Result<()> {
        let from = self.region.fd_offset((a * PAGE) as u64);
        self.mem.user.map_file(
            a * PAGE,
            (e - a) * PAGE,
            (self.region.data.fd(), from),
            access,
            rustix::mm::MapFlags::PRIVATE,
        )
    }

    /// Maps the memory file back over the user pages `[a, e)`,
    /// inaccessible.
    fn map_memfd_over(&self, a: usize, e: usize) -> rustix::io::Result<()> {
        let (off, len) = (a * PAGE, (e - a) * PAGE);
        (self.mem.user).map_shared(off, len, self.mem.memfd_fd(), off as u64, Access::None)
    }

    /// Stores `flags` as the `ufile` flags of pages `[a, e)`.
    fn set_flags(&self, a: usize, e: usize, flags: u8, order: Ordering) {
        for q in a..e {
            if let Some(f) = self.mem.ufile.get(q) {
                f.store(flags, order);
            }
        }
    }

    /// User pages `[a, e)` still map the file because the memory file
    /// could not be mapped back: inaccessible, and flagged `FILE` (not
    /// `LISTED`), so no fault makes them readable before it is.
    pub(super) fn leave_stuck(&self, a: usize, e: usize) {
        let _ = self
            .mem
            .user
            .protect(a * PAGE, (e - a) * PAGE, Access::None);
        self.set_flags(a, e, uf::FILE | uf::SEEN, Ordering::SeqCst);
    }

    /// A read fault on `page` (no valid copy in the view, the region file
    /// holds its snapshot version): maps the run of such pages around it,
    /// within its aligned block, from the file. In a read-only transaction
    /// the run is readable at once. In a read-write one it is mapped
    /// inaccessible and only `page` becomes readable, after joining the read
    /// set: each neighbour's first load faults and joins it too (`on_fault`),
    /// for an `mprotect` instead of an `mmap` or a copy. Its pages are those
    /// no earlier transaction of the view touched (`shares_read`, the rule
    /// its accessor reads follow). A store maps the memory file back over a
    /// page and installs it (`on_fault`, `mark_installed`).
    pub(super) fn map_file_fault(&self, page: usize) -> FileMap {
        if !self.file_ok.load(Ordering::Relaxed)
            || !self.region.fence.running()
            || self.ufile_runs.load(Ordering::Relaxed) >= max_runs()
        {
            return FileMap::No;
        }
        let rw = !self.read_only.load(Ordering::Relaxed);
        let s = self.snapshot.load(Ordering::Relaxed);
        let pages = self.mem.mapped.load(Ordering::Acquire) / PAGE;
        let block = if rw { RW_BLOCK } else { BLOCK };
        let start = page / block * block;
        let end = (start + block).min(pages);
        let at = self.file_state(s);
        let candidate = |q: usize| self.file_candidate(q, s, at) && (!rw || self.shares_read(q));
        if page >= end || !candidate(page) {
            return FileMap::No;
        }
        let mut a = page;
        while a > start && candidate(a - 1) {
            a -= 1;
        }
        let mut e = page + 1;
        while e < end && candidate(e) {
            e += 1;
        }
        crate::debug::file_run_point(crate::debug::FileRunPause::AfterScan);
        if !rw {
            return self.map_file_run(a, e, s, at, Access::Read);
        }
        // Read before it can be loaded.
        self.note_shared_read(page);
        match self.map_file_run(a, e, s, at, Access::None) {
            FileMap::Mapped => {
                let addr = self.mem.user.base() as usize + page * PAGE;
                match protect_raw(addr, PAGE, Access::Read) {
                    Ok(()) => FileMap::Mapped,
                    // Mapped and listed, still inaccessible: the copy path
                    // maps the memory file back (`mark_installed`).
                    Err(_) => FileMap::No,
                }
            }
            r => r,
        }
    }

    /// Before a scan for pages that may map the file: the commit sequence,
    /// and whether the file holds every page's version at `s` (nothing
    /// committed after `s`, and a checkpoint reached it), which spares the
    /// scan each page's sequence.
    fn file_state(&self, s: u64) -> FileState {
        let mvcc = &self.region.mvcc;
        let seq = mvcc.commit_seq();
        FileState {
            seq,
            all: seq == s && mvcc.checkpointed_to(s),
        }
    }

    /// Whether a read of `page` at snapshot `s` may map the file: the
    /// view holds no valid copy (nor mapped it already, nor in an earlier
    /// transaction: see `SEEN`), the transaction did not store to it, and
    /// the file holds its version.
    fn file_candidate(&self, q: usize, s: u64, at: FileState) -> bool {
        self.user_file_flags(q) & (uf::FILE | uf::SEEN) == 0
            && self
                .mem
                .valid
                .get(q)
                .is_some_and(|v| v.load(Ordering::Acquire) == page_state::NONE)
            && self.touch_bits(q) & TOUCH_WRITE == 0
            && (at.all || self.region.mvcc.file_holds(q, s))
    }

    /// The advisory call's read of `[first, end)` in a read-only
    /// transaction: maps every run of pages that may map the file (the
    /// caller then populates them). `Err` as `FileMap::Failed`.
    pub(super) fn map_file_range(&self, first: usize, end: usize) -> rustix::io::Result<()> {
        if !self.file_ok.load(Ordering::Relaxed) || !self.region.fence.running() {
            return Ok(());
        }
        let s = self.snapshot.load(Ordering::Relaxed);
        let at = self.file_state(s);
        let mut p = first;
        while p < end && self.ufile_runs.load(Ordering::Relaxed) < max_runs() {
            if !self.file_candidate(p, s, at) {
                p += 1;
                continue;
            }
            let mut e = p + 1;
            while e < end && self.file_candidate(e, s, at) {
                e += 1;
            }
            if let FileMap::Failed(e) = self.map_file_run(p, e, s, at, Access::Read) {
                return Err(e);
            }
            p = e;
        }
        Ok(())
    }

    /// Maps the region file over the user pages `[a, e)`, lists them for
    /// the fence, then checks that the file still holds each at `s`.
    ///
    /// No page of the run is listed before the file is mapped over it, so
    /// no fence pass looks at one meanwhile, and their flags are set
    /// without taking `BUSY` (one plain store per page, not two locked
    /// instructions: a run is up to 1,024 pages). The run is listed at
    /// once by raising `ufile_n` after the entries. A checkpoint that
    /// overwrote a page before it was listed published the newer commit
    /// first, so the check after the fence sees it and maps the run back;
    /// no load reads the run before this returns (the faulting thread is
    /// the view's only user and it is here). `at`: the state before the
    /// scan that chose the run; if no commit was published since, no page
    /// of it can have changed, and none is checked again.
    fn map_file_run(&self, a: usize, e: usize, s: u64, at: FileState, access: Access) -> FileMap {
        self.start_file_reads(s);
        if self.map_file_over(a, e, access).is_err() {
            // Copied as before; not listed (the file is not mapped there).
            self.set_flags(a, e, uf::SEEN, Ordering::Release);
            return FileMap::No;
        }
        crate::debug::file_run_point(crate::debug::FileRunPause::AfterMap);
        let n = self.mem.ufile_n.load(Ordering::Relaxed);
        let mut listed = n;
        for q in a..e {
            if let Some(f) = self.mem.ufile.get(q) {
                f.store(uf::LISTED | uf::SEEN | uf::FILE, Ordering::Relaxed);
            }
            // Always there: one entry per page and transaction.
            if let Some(x) = self.mem.ufile_list.get(listed) {
                x.store(q as u32, Ordering::Relaxed);
                listed += 1;
            }
        }
        // After the entries and flags: a fence pass that sees the new
        // count sees them.
        self.mem.ufile_n.store(listed, Ordering::Release);
        // Beside a run this transaction mapped, the kernel extends that
        // mapping (same file, next offsets): no new one to count.
        let mapped =
            |q: usize| self.user_file_flags(q) & (uf::FILE | uf::LISTED) == uf::FILE | uf::LISTED;
        if !(a > 0 && mapped(a - 1) || mapped(e)) {
            self.ufile_runs.fetch_add(1, Ordering::Relaxed);
        }
        // See `ViewMemory::file`'s mapping in `sync_size`: no read-ahead
        // window per fault.
        self.mem.user.advise_random(a * PAGE, (e - a) * PAGE);
        // Listed before the check (see the module's comment).
        fence(Ordering::SeqCst);
        let mvcc = &self.region.mvcc;
        if mvcc.commit_seq() == at.seq || (a..e).all(|q| mvcc.file_holds(q, s)) {
            return FileMap::Mapped;
        }
        // A checkpoint of a newer commit raced: back to the memory file.
        match self.map_back(a, e, uf::LISTED | uf::SEEN) {
            Ok(()) => FileMap::No,
            Err(e) => FileMap::Failed(e),
        }
    }

    /// Maps the memory file back over the user pages `[a, e)`,
    /// inaccessible (the next touch faults and installs as before), and
    /// leaves `flags` on them. Fails if the mapping failed (they keep
    /// mapping the file, flagged `FILE`).
    pub(super) fn map_back(&self, a: usize, e: usize, flags: u8) -> rustix::io::Result<()> {
        if a < self.whole.load(Ordering::Relaxed) {
            self.whole_dirty.store(true, Ordering::Relaxed);
        }
        let mut was = uf::FILE;
        for q in a..e {
            was |= self.user_file_lock(q);
        }
        let r = self.map_memfd_over(a, e);
        let left = if r.is_ok() {
            flags
        } else {
            (was | uf::FILE) & !uf::PRIV
        };
        for q in a..e {
            self.user_file_unlock(q, left);
        }
        r
    }

    /// `map_back` with `SEEN` left, where no fence pass can run (the
    /// transaction's end, below): no `BUSY` bit to take. On failure the
    /// flags are unchanged (the caller sets them).
    fn map_back_alone(&self, a: usize, e: usize) -> rustix::io::Result<()> {
        self.map_memfd_over(a, e)?;
        self.set_flags(a, e, uf::SEEN, Ordering::Relaxed);
        Ok(())
    }

    /// At the end of a transaction that mapped pages from the file (the
    /// fence no longer covers them: the caller cleared the slot's file
    /// reads and waited for a fence pass under way): maps the memory file
    /// back over every such page, one call per run. False if a run could
    /// not be mapped back: it is made inaccessible and stays flagged
    /// `FILE` (not `LISTED`), so no fault makes it readable again before
    /// the memory file is mapped back over it.
    pub(super) fn end_user_file(&self) -> bool {
        let n = self.mem.ufile_n.load(Ordering::Relaxed);
        let whole = self.whole.load(Ordering::Relaxed);
        let mut ok = whole == 0 || self.end_whole(whole);
        // No fence pass runs any more (see above): the pages' flags need
        // no `BUSY` bit.
        let mut flush = |run: Option<(usize, usize)>| {
            if let Some((a, e)) = run
                && self.map_back_alone(a, e).is_err()
            {
                ok = false;
                self.leave_stuck(a, e);
            }
        };
        let mut run: Option<(usize, usize)> = None;
        for i in 0..n {
            let Some(p) = self.mem.ufile_list.get(i) else {
                break;
            };
            let p = p.load(Ordering::Relaxed) as usize;
            if self.user_file_flags(p) & uf::FILE == 0 {
                if let Some(f) = self.mem.ufile.get(p) {
                    f.store(uf::SEEN, Ordering::SeqCst);
                }
                continue;
            }
            run = match run {
                Some((a, e)) if e == p => Some((a, p + 1)),
                r => {
                    flush(r);
                    Some((p, p + 1))
                }
            };
        }
        flush(run);
        self.mem.ufile_n.store(0, Ordering::Relaxed);
        self.ufile_runs.store(0, Ordering::Relaxed);
        if !ok {
            self.mem
                .ufile_stuck
                .store(true, std::sync::atomic::Ordering::Relaxed);
        }
        ok
    }
}
