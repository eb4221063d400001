//! A view's memory (address space, private memory file, page tables),
//! which a region keeps after a view closes for the next view opened.
//! Below the engine, which only holds it in its pool, and the view.

use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU8, AtomicU32, AtomicUsize, Ordering};

use crate::error::{Error, Result};
use crate::os::mem::{Access, PAGE, Reservation, ReservedArray};

/// Most pages one transaction may write (the write set is reserved address
/// space): 16 GiB. A commit's log record holds at most 2 GiB of changes
/// (`Error::TooLarge` beyond); a round alone with its region has no such
/// bound (`view/rounds.rs`).
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
    pub(crate) read_set: ReservedArray<u32>,
    pub(crate) write_set: ReservedArray<u32>,
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

/// Most closed views' memory a region keeps for reuse.
pub(crate) const POOLED_VIEWS: usize = 4;
/// A closed view's memory is kept only if its private pages take at most this.
const POOLED_BYTES: u64 = 64 << 20;

impl ViewMemory {
    /// `path` names the region in the error when `at` is taken.
    pub(crate) fn new(max: usize, at: Option<usize>, path: &std::path::Path) -> Result<ViewMemory> {
        let pages = max / PAGE;
        let os = |op| move |e| Error::os(op, e);
        Ok(ViewMemory {
            user: Reservation::new(max, at).map_err(|e| match at {
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
            file: Reservation::new(max, None).map_err(os("reserve file mapping"))?,
            file_set: ReservedArray::new(MAX_READ_PAGES).map_err(os("reserve file read set"))?,
            mapped: AtomicUsize::new(0),
            valid: ReservedArray::new(pages).map_err(os("reserve page table"))?,
            touched: ReservedArray::new(pages).map_err(os("reserve page table"))?,
            read_set: ReservedArray::new(MAX_READ_PAGES).map_err(os("reserve read set"))?,
            write_set: ReservedArray::new(MAX_WRITE_PAGES).map_err(os("reserve write set"))?,
        })
    }

    /// Makes the memory of a closed view fit for the next one: no page valid
    /// or touched, nothing accessible at the user address. Returns `None`
    /// (the memory is freed) if that fails or the memory is too large to keep.
    pub(crate) fn recycle(mut self, exposed: bool) -> Option<ViewMemory> {
        let used = rustix::fs::fstat(&self.memfd).ok()?.st_blocks as u64 * 512;
        if used > POOLED_BYTES {
            return None;
        }
        if exposed {
            self.user
                .protect(0, self.mapped.load(Ordering::Relaxed), Access::None)
                .ok()?;
        }
        self.valid.clear().ok()?;
        self.touched.clear().ok()?;
        Some(self)
    }
}
