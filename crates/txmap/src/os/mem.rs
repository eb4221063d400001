//! Virtual memory: reservations, file mappings, protection changes.
//!
//! Every `unsafe` call that creates or changes a mapping lives here. Callers
//! hold a [`Reservation`] (an address range owned by us) and only map or
//! protect inside it, which is what makes the `MAP_FIXED` calls sound.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::ptr::NonNull;

use rustix::mm::{Advice, MapFlags, MprotectFlags, ProtFlags};

/// Size of a page in regions, logs and views. Checked against the kernel's at start-up.
pub const PAGE: usize = 4096;

/// Access rights of a range of pages in a view.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    None,
    Read,
    ReadWrite,
}

impl Access {
    fn flags(self) -> MprotectFlags {
        match self {
            Access::None => MprotectFlags::empty(),
            Access::Read => MprotectFlags::READ,
            Access::ReadWrite => MprotectFlags::READ | MprotectFlags::WRITE,
        }
    }
    fn prot(self) -> ProtFlags {
        match self {
            Access::None => ProtFlags::empty(),
            Access::Read => ProtFlags::READ,
            Access::ReadWrite => ProtFlags::READ | ProtFlags::WRITE,
        }
    }
}

/// A reservation's address range, handed to a helper thread that maps its
/// pages ahead of their use ([`Reservation::range_to_populate`]).
#[derive(Clone, Copy, Debug)]
pub struct RangeToPopulate {
    base: usize,
    len: usize,
}

impl RangeToPopulate {
    /// [`Reservation::populate`] (writable), from another thread. Ranges
    /// beyond the reservation are clipped.
    ///
    /// # Safety
    /// The reservation this came from must still be mapped: the address
    /// range could otherwise belong to another mapping by now.
    pub unsafe fn populate_write(&self, offset: usize, len: usize) {
        let len = len.min(self.len.saturating_sub(offset));
        if len == 0 {
            return;
        }
        // SAFETY: inside the reservation (clipped), which the caller keeps
        // mapped; populating does not change contents.
        let _ = unsafe {
            rustix::mm::madvise(
                (self.base + offset) as *mut std::ffi::c_void,
                len,
                Advice::LinuxPopulateWrite,
            )
        };
    }
}

/// An address range owned by this process, reserved `PROT_NONE` and without
/// swap accounting. Unmapped on drop.
#[derive(Debug)]
pub struct Reservation {
    base: NonNull<u8>,
    len: usize,
}

// SAFETY: a reservation is an address range; which thread unmaps it does not matter.
unsafe impl Send for Reservation {}
// SAFETY: shared references only read `base`/`len`.
unsafe impl Sync for Reservation {}

impl Reservation {
    /// Reserves `len` bytes (rounded up to pages) anywhere, or at `at` if given
    /// (failing with `EEXIST` if something is already mapped there).
    pub fn new(len: usize, at: Option<usize>) -> rustix::io::Result<Reservation> {
        let len = round_up(len.max(PAGE));
        let mut flags = MapFlags::PRIVATE | MapFlags::NORESERVE;
        if at.is_some() {
            flags |= MapFlags::FIXED_NOREPLACE;
        }
        let hint = at.unwrap_or(0) as *mut std::ffi::c_void;
        // SAFETY: an anonymous PROT_NONE mapping; with FIXED_NOREPLACE the kernel
        // refuses to replace anything, so no existing memory is affected.
        let p = unsafe { rustix::mm::mmap_anonymous(hint, len, ProtFlags::empty(), flags)? };
        if let Some(addr) = at
            && p as usize != addr
        {
            // Old kernels ignore FIXED_NOREPLACE and treat the address as a hint.
            // SAFETY: `p` is the mapping we just created, of length `len`.
            let _ = unsafe { rustix::mm::munmap(p, len) };
            return Err(rustix::io::Errno::EXIST);
        }
        Ok(Reservation {
            base: NonNull::new(p.cast()).expect("mmap returned null"),
            len,
        })
    }

    /// Reserves `len` bytes anywhere, at an address congruent to `phase`
    /// modulo 2 MiB. A file mapped at offset `o` of the reservation from
    /// file offset `o + phase` then has its pages at addresses congruent to
    /// their file offsets, as the kernel places file mappings itself: the
    /// page cache's large folios are then mapped many pages per fault
    /// (a region file's data starts after its 4 KiB header; at a 2 MiB
    /// aligned address, a first read of 1,024 cached pages took ~40
    /// faults instead of ~8).
    pub fn new_phased(len: usize, phase: usize) -> rustix::io::Result<Reservation> {
        const ALIGN: usize = 2 << 20;
        let len = round_up(len.max(PAGE));
        let outer = Reservation::new(len + ALIGN, None)?;
        let (start, outer_len) = (outer.base() as usize, outer.len);
        let base = start + (phase.wrapping_sub(start) % ALIGN) / PAGE * PAGE;
        let (head, tail) = (base - start, start + outer_len - (base + len));
        // Hand the outer range over without unmapping it, then give back
        // the slack on both sides.
        std::mem::forget(outer);
        // SAFETY: `[start, base)` and `[base + len, start + outer_len)` lie
        // in the reservation just made and no longer owned by anything.
        unsafe {
            if head > 0 {
                let _ = rustix::mm::munmap(start as *mut std::ffi::c_void, head);
            }
            if tail > 0 {
                let _ = rustix::mm::munmap((base + len) as *mut std::ffi::c_void, tail);
            }
        }
        Ok(Reservation {
            base: NonNull::new(base as *mut u8).expect("a reservation is never at 0"),
            len,
        })
    }

    pub fn base(&self) -> *mut u8 {
        self.base.as_ptr()
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn check(&self, offset: usize, len: usize) {
        assert!(
            offset.is_multiple_of(PAGE) && offset.checked_add(len).is_some_and(|e| e <= self.len),
            "range {offset}+{len} outside reservation of {}",
            self.len
        );
    }

    /// Maps `len` bytes of `fd` from `file_offset` at `offset` inside the reservation, shared.
    pub fn map_shared(
        &self,
        offset: usize,
        len: usize,
        fd: BorrowedFd<'_>,
        file_offset: u64,
        access: Access,
    ) -> rustix::io::Result<()> {
        self.map_file(offset, len, (fd, file_offset), access, MapFlags::SHARED)
    }

    /// Maps `len` bytes of `fd` from `file_offset` at `offset` inside the
    /// reservation, shared (`MapFlags::SHARED`) or private (`PRIVATE`:
    /// copy-on-write, stores and `/proc/self/mem` writes never reach the
    /// file, whose changes show through pages not yet copied).
    pub fn map_file(
        &self,
        offset: usize,
        len: usize,
        (fd, file_offset): (BorrowedFd<'_>, u64),
        access: Access,
        kind: MapFlags,
    ) -> rustix::io::Result<()> {
        self.check(offset, len);
        if len == 0 {
            return Ok(());
        }
        // SAFETY: the target range lies inside our own reservation (checked above),
        // so MAP_FIXED only replaces memory this object owns.
        unsafe {
            rustix::mm::mmap(
                self.base().add(offset).cast(),
                len,
                access.prot(),
                kind | MapFlags::FIXED,
                fd,
                file_offset,
            )?;
        }
        Ok(())
    }

    /// Maps anonymous zero-filled read-write memory at `offset` (for arrays that grow in place).
    pub fn map_anonymous_rw(&self, offset: usize, len: usize) -> rustix::io::Result<()> {
        self.check(offset, len);
        if len == 0 {
            return Ok(());
        }
        // SAFETY: inside our own reservation (checked above).
        unsafe {
            rustix::mm::mmap_anonymous(
                self.base().add(offset).cast(),
                len,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::PRIVATE | MapFlags::FIXED | MapFlags::NORESERVE,
            )?;
        }
        Ok(())
    }

    /// Changes the protection of whole pages inside the reservation.
    pub fn protect(&self, offset: usize, len: usize, access: Access) -> rustix::io::Result<()> {
        self.check(offset, len);
        if len == 0 {
            return Ok(());
        }
        protect_raw(self.base() as usize + offset, len, access)
    }

    /// Asks the kernel to allocate and map pages now (`MADV_POPULATE_*`), so
    /// that later accesses take no page fault. Only a hint: errors (old
    /// kernels, protection that forbids the access) are ignored.
    pub fn populate(&self, offset: usize, len: usize, write: bool) {
        self.check(offset, len);
        if len == 0 {
            return;
        }
        let advice = if write {
            Advice::LinuxPopulateWrite
        } else {
            Advice::LinuxPopulateRead
        };
        // SAFETY: inside our own reservation; populating does not change contents.
        let _ = unsafe { rustix::mm::madvise(self.base().add(offset).cast(), len, advice) };
    }

    /// This reservation's address range, for a helper thread to populate
    /// while the owner keeps the reservation alive ([`RangeToPopulate`]).
    pub fn range_to_populate(&self) -> RangeToPopulate {
        RangeToPopulate {
            base: self.base() as usize,
            len: self.len,
        }
    }

    /// Advises the kernel that a file mapping is read at random
    /// (`MADV_RANDOM`): a fault on a page not in the page cache reads that
    /// page, not the device's whole read-ahead window around it. Only a
    /// hint: errors are ignored.
    pub fn advise_random(&self, offset: usize, len: usize) {
        self.check(offset, len);
        if len == 0 {
            return;
        }
        // SAFETY: inside our own reservation; advice does not change contents.
        let _ = unsafe { rustix::mm::madvise(self.base().add(offset).cast(), len, Advice::Random) };
    }

    /// Gives pages back to the kernel; anonymous memory reads as zeros afterwards.
    pub fn discard(&self, offset: usize, len: usize) -> rustix::io::Result<()> {
        self.check(offset, len);
        if len == 0 {
            return Ok(());
        }
        // SAFETY: inside our own reservation; callers only discard memory no
        // reference points into (arrays of atomics that read as zero = empty).
        unsafe { rustix::mm::madvise(self.base().add(offset).cast(), len, Advice::LinuxDontNeed) }
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        // SAFETY: we own the whole range; nothing borrowed from it outlives self.
        let _ = unsafe { rustix::mm::munmap(self.base().cast(), self.len) };
    }
}

/// A read-only shared mapping of a whole file, viewed as bytes (recovery
/// scans logs this way instead of reading them into memory).
pub struct FileImage {
    mem: Reservation,
    len: usize,
}

impl FileImage {
    /// Maps the first `len` bytes of `fd` read-only.
    pub fn map(fd: BorrowedFd<'_>, len: usize) -> rustix::io::Result<FileImage> {
        let mem = Reservation::new(len, None)?;
        mem.map_shared(0, round_up(len.max(1)), fd, 0, Access::Read)?;
        Ok(FileImage { mem, len })
    }

    /// The bytes. Callers must keep the file from shrinking while they look
    /// (the region's lock does), or reads past the new end fault.
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: `len` bytes are mapped readable for the life of `self`, and
        // nothing in this process writes the file through a mapping.
        unsafe { std::slice::from_raw_parts(self.mem.base(), self.len) }
    }
}

/// `mprotect` on an absolute address range. A raw system call, so it may be
/// used from the fault handler.
pub fn protect_raw(addr: usize, len: usize, access: Access) -> rustix::io::Result<()> {
    debug_assert!(addr.is_multiple_of(PAGE) && len.is_multiple_of(PAGE));
    // SAFETY: callers pass ranges inside reservations they own (views only
    // protect their own pages); changing protection does not move memory.
    unsafe { rustix::mm::mprotect(addr as *mut _, len, access.flags()) }
}

/// A fixed-capacity array of zero-initialised `T` in reserved memory: pages
/// are committed by the kernel on first touch, and the array never moves, so
/// the fault handler may index it without locks.
pub struct ReservedArray<T> {
    mem: Reservation,
    capacity: usize,
    _t: std::marker::PhantomData<T>,
}

impl<T: ZeroIsValid> ReservedArray<T> {
    pub fn new(capacity: usize) -> rustix::io::Result<Self> {
        let bytes = round_up(capacity.max(1) * std::mem::size_of::<T>());
        let mem = Reservation::new(bytes, None)?;
        mem.map_anonymous_rw(0, bytes)?;
        Ok(ReservedArray {
            mem,
            capacity,
            _t: std::marker::PhantomData,
        })
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    pub fn get(&self, i: usize) -> Option<&T> {
        // SAFETY: in bounds; the memory is mapped read-write for the whole
        // capacity, zero-filled, and `T: ZeroIsValid` makes zero a valid `T`.
        (i < self.capacity).then(|| unsafe { &*(self.mem.base() as *const T).add(i) })
    }

    /// Resets every element to zero. Memory is returned to the kernel,
    /// unless only a few pages of the array are resident: those are zeroed
    /// in place and kept, so the next user of a small array (a pooled
    /// view's page tables) takes no page fault to get them back; the rest
    /// is still given back (a page not resident may be in swap, not zero).
    pub fn clear(&mut self) -> rustix::io::Result<()> {
        let pages = self.mem.len() / PAGE;
        let mut resident = vec![0u8; pages];
        // SAFETY: the range is our own mapping; the vector has one byte per page.
        let r = unsafe {
            libc::mincore(
                self.mem.base().cast(),
                self.mem.len(),
                resident.as_mut_ptr().cast(),
            )
        };
        if r == 0 {
            let held: Vec<usize> = resident
                .iter()
                .enumerate()
                .filter(|(_, r)| **r & 1 != 0)
                .map(|(p, _)| p)
                .take(CLEAR_IN_PLACE + 1)
                .collect();
            if held.len() <= CLEAR_IN_PLACE {
                let mut from = 0;
                for p in held {
                    // SAFETY: a whole page of the array's mapping, exclusively
                    // borrowed; zero is a valid `T`.
                    unsafe { std::ptr::write_bytes(self.mem.base().add(p * PAGE), 0, PAGE) };
                    self.mem.discard(from * PAGE, (p - from) * PAGE)?;
                    from = p + 1;
                }
                return self.mem.discard(from * PAGE, (pages - from) * PAGE);
            }
        }
        self.mem.discard(0, self.mem.len())
    }

    /// Base address, for raw element access from the fault handler.
    pub fn as_ptr(&self) -> *mut T {
        self.mem.base().cast()
    }
}

/// Resident pages of a [`ReservedArray`] that `clear` zeroes in place (more:
/// it gives the whole array back).
const CLEAR_IN_PLACE: usize = 16;

/// Marker for types whose all-zero bit pattern is a valid value (atomics, integers).
///
/// # Safety
/// Implementors must be valid when zero-initialised and have no drop glue.
pub unsafe trait ZeroIsValid {}
// SAFETY: atomics and integers are valid at zero and have no drop glue.
unsafe impl ZeroIsValid for std::sync::atomic::AtomicU8 {}
// SAFETY: as above.
unsafe impl ZeroIsValid for std::sync::atomic::AtomicU32 {}
// SAFETY: as above.
unsafe impl ZeroIsValid for std::sync::atomic::AtomicU64 {}
// SAFETY: as above.
unsafe impl ZeroIsValid for u8 {}
// SAFETY: as above.
unsafe impl ZeroIsValid for u32 {}
// SAFETY: as above.
unsafe impl ZeroIsValid for u64 {}

/// An anonymous in-memory file (the backing of a view's private pages).
pub fn memfd(name: &str) -> rustix::io::Result<OwnedFd> {
    rustix::fs::memfd_create(name, rustix::fs::MemfdFlags::CLOEXEC)
}

/// Sets the length of a file descriptor.
pub fn set_len(fd: impl AsFd, len: u64) -> rustix::io::Result<()> {
    rustix::fs::ftruncate(fd, len)
}

/// Rounds up to a whole number of pages.
pub fn round_up(n: usize) -> usize {
    n.div_ceil(PAGE) * PAGE
}

/// Checks that the kernel's page size is the one the formats assume.
pub fn check_page_size() -> bool {
    rustix::param::page_size() == PAGE
}

/// Fixed region addresses are chosen in `[FIXED_LOW, FIXED_HIGH)`: above
/// the shadow memory of AddressSanitizer (which ends just past 16 TiB) and
/// far below where Linux puts programs, the heap, `mmap` and stacks on
/// x86-64 (from about 85 TiB up to 128 TiB), so nothing else lands there
/// by chance.
pub const FIXED_LOW: usize = 17 << 40;
/// See [`FIXED_LOW`].
pub const FIXED_HIGH: usize = 64 << 40;
/// End of the x86-64 user address space (4-level page tables).
pub const USER_TOP: usize = 0x7fff_ffff_f000;

/// A fixed address for a region whose views reserve `max` bytes, picked by
/// `seed` among the slots of `[FIXED_LOW, FIXED_HIGH)` aligned to `max`
/// rounded up to a power of two (at least 1 GiB), so that two regions of
/// the same maximum size either coincide or do not overlap. `None` when
/// `max` does not fit there.
pub fn fixed_address(seed: u64, max: u64) -> Option<usize> {
    let align = usize::try_from(max)
        .ok()?
        .max(1 << 30)
        .checked_next_power_of_two()?;
    let slots = (FIXED_HIGH - FIXED_LOW) / align;
    (slots > 0).then(|| FIXED_LOW + (seed % slots as u64) as usize * align)
}

/// What `/proc/self/maps` says is mapped in `[addr, addr + len)`, one
/// mapping per line (at most 4, then how many more); for error messages.
pub fn describe_mappings(addr: usize, len: usize) -> String {
    let Ok(maps) = std::fs::read_to_string("/proc/self/maps") else {
        return "(cannot read /proc/self/maps)".into();
    };
    let end = addr.saturating_add(len);
    let hits: Vec<&str> = maps
        .lines()
        .filter(|l| {
            let range = l.split_whitespace().next().unwrap_or("");
            let mut it = range.split('-').map(|x| usize::from_str_radix(x, 16));
            matches!((it.next(), it.next()), (Some(Ok(s)), Some(Ok(e))) if s < end && e > addr)
        })
        .collect();
    if hits.is_empty() {
        return "nothing mapped there now (it was taken while we tried)".into();
    }
    let view = hits.iter().any(|l| l.contains("memfd:txmap-view"));
    let mut s = hits
        .iter()
        .take(4)
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect::<Vec<_>>()
        .join("; ");
    if hits.len() > 4 {
        s.push_str(&format!("; and {} more", hits.len() - 4));
    }
    if view {
        s.push_str(
            " (a txmap view: one of this process at that address, or one inherited \
             through fork that was not closed)",
        );
    }
    s
}

/// Asks the processor to start loading the cache line at `p` into its
/// caches: a hint, which never faults, whatever the address (Linux x86-64;
/// nothing elsewhere).
#[inline]
pub fn prefetch(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: SSE is part of x86-64; a prefetch reads nothing the program
    // sees and never faults, whatever the address.
    unsafe {
        core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(p.cast())
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    #[test]
    fn a_phased_reservation_is_congruent_to_its_phase_and_owns_its_range() {
        for phase in [0, PAGE, 5 * PAGE, (2 << 20) - PAGE] {
            let r = Reservation::new_phased(3 * PAGE + 1, phase).unwrap();
            assert_eq!(r.base() as usize % (2 << 20), phase, "phase {phase}");
            assert_eq!(r.len(), 4 * PAGE);
            // The range is ours: a fixed mapping inside it works, and the
            // slack given back around it is free again.
            r.map_anonymous_rw(0, r.len()).unwrap();
            // SAFETY: just mapped read-write, 4 pages.
            unsafe { r.base().add(4 * PAGE - 1).write(7) };
            let after = r.base() as usize + r.len();
            let again = Reservation::new(PAGE, Some(after));
            assert!(
                again.is_ok(),
                "the slack after phase {phase} stayed reserved"
            );
        }
    }

    #[test]
    fn clearing_an_array_zeroes_it_whether_it_keeps_its_pages_or_not() {
        let per_page = PAGE / 4;
        for pages in [1, CLEAR_IN_PLACE, CLEAR_IN_PLACE + 1, 3 * CLEAR_IN_PLACE] {
            let mut a = ReservedArray::<AtomicU32>::new(64 * per_page).unwrap();
            for p in 0..pages {
                a.get(p * per_page + 3).unwrap().store(9, Ordering::Relaxed);
            }
            a.clear().unwrap();
            for i in 0..64 * per_page {
                assert_eq!(
                    a.get(i).unwrap().load(Ordering::Relaxed),
                    0,
                    "entry {i} after {pages} pages"
                );
            }
        }
    }
}
