//! Every `unsafe` operation of the benchmark program: raw mappings, a trivial
//! SIGSEGV handler for the signal+protect floor, userfaultfd and PAGEMAP_SCAN
//! ioctls, `uname`, and the plain loads and stores of the STAMP-style
//! workloads ([`Flat`]). Everything outside this module is safe code.

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

pub const PAGE: usize = 4096;

/// Protection of raw benchmark mappings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Prot {
    None,
    Read,
    ReadWrite,
}

impl Prot {
    fn bits(self) -> libc::c_int {
        match self {
            Prot::None => libc::PROT_NONE,
            Prot::Read => libc::PROT_READ,
            Prot::ReadWrite => libc::PROT_READ | libc::PROT_WRITE,
        }
    }
}

/// A mapping owned by the benchmark (never one of txmap's). Unmapped on drop.
pub struct Mapping {
    ptr: *mut u8,
    len: usize,
}

impl Mapping {
    /// A private anonymous mapping of `len` bytes.
    pub fn anon(len: usize, prot: Prot) -> io::Result<Mapping> {
        // SAFETY: a fresh anonymous mapping at an address the kernel picks;
        // no existing memory is affected.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                prot.bits(),
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        Self::checked(p, len)
    }

    /// A read-write shared mapping of the first `len` bytes of `fd`.
    pub fn shared(fd: BorrowedFd<'_>, len: usize) -> io::Result<Mapping> {
        // SAFETY: a fresh shared file mapping at an address the kernel picks;
        // the descriptor is valid for the duration of the call.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        Self::checked(p, len)
    }

    /// A mapping of the first `len` bytes of `fd` with `prot`: `MAP_PRIVATE`
    /// (stores copy the page) or `MAP_SHARED`.
    pub fn file(fd: BorrowedFd<'_>, len: usize, prot: Prot, private: bool) -> io::Result<Mapping> {
        let kind = if private {
            libc::MAP_PRIVATE
        } else {
            libc::MAP_SHARED
        };
        // SAFETY: a fresh file mapping at an address the kernel picks; the
        // descriptor is valid for the duration of the call.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                prot.bits(),
                kind,
                fd.as_raw_fd(),
                0,
            )
        };
        Self::checked(p, len)
    }

    /// Replaces `[off, off+len)` of this mapping (`MAP_FIXED`) by a private
    /// anonymous mapping (`fd` None) or by `[fd_off, fd_off+len)` of `fd`.
    pub fn overlay(
        &self,
        off: usize,
        len: usize,
        fd: Option<(BorrowedFd<'_>, u64)>,
        prot: Prot,
        private: bool,
    ) -> io::Result<()> {
        assert!(off.checked_add(len).is_some_and(|e| e <= self.len));
        let kind = if private {
            libc::MAP_PRIVATE
        } else {
            libc::MAP_SHARED
        };
        let (raw, fd_off, anon) = match fd {
            Some((f, o)) => (f.as_raw_fd(), o as libc::off_t, 0),
            None => (-1, 0, libc::MAP_ANONYMOUS),
        };
        // SAFETY: MAP_FIXED only over pages of our own mapping, which no
        // reference points into (accesses are volatile byte operations).
        let p = unsafe {
            libc::mmap(
                self.ptr.add(off).cast(),
                len,
                prot.bits(),
                kind | anon | libc::MAP_FIXED,
                raw,
                fd_off,
            )
        };
        if p == libc::MAP_FAILED {
            Err(io::Error::last_os_error())
        } else {
            Ok(())
        }
    }

    /// `madvise(advice)` on `[off, off+len)` of this mapping.
    pub fn advise(&self, off: usize, len: usize, advice: libc::c_int) -> io::Result<()> {
        assert!(off.checked_add(len).is_some_and(|e| e <= self.len));
        // SAFETY: the range lies in our own mapping; the advice values used
        // (DONTNEED, POPULATE_READ/WRITE) only drop or fill page-table
        // entries (POPULATE_WRITE of a private mapping copies, as a store would).
        let r = unsafe { libc::madvise(self.ptr.add(off).cast(), len, advice) };
        if r == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }

    /// Copies `src` to offset `off` (the pages must be writable).
    pub fn copy_in(&self, off: usize, src: &[u8]) {
        assert!(off.checked_add(src.len()).is_some_and(|e| e <= self.len));
        // SAFETY: in bounds of our mapping, which no Rust reference aliases.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), self.ptr.add(off), src.len()) }
    }

    /// Writes `src` at offset `off` through `/proc/self/mem` (`mem`), which
    /// writes through any protection and copies a private file page on
    /// write, as a debugger's breakpoint does.
    pub fn poke(&self, mem: &File, off: usize, src: &[u8]) -> io::Result<()> {
        use std::os::unix::fs::FileExt;
        assert!(off.checked_add(src.len()).is_some_and(|e| e <= self.len));
        mem.write_all_at(src, (self.addr() + off) as u64)
    }

    /// Copies `out.len()` bytes at offset `off` out of the mapping.
    pub fn copy_out(&self, off: usize, out: &mut [u8]) {
        assert!(off.checked_add(out.len()).is_some_and(|e| e <= self.len));
        // SAFETY: in bounds of our mapping; the bytes are only read.
        unsafe { std::ptr::copy_nonoverlapping(self.ptr.add(off), out.as_mut_ptr(), out.len()) }
    }

    fn checked(p: *mut libc::c_void, len: usize) -> io::Result<Mapping> {
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Mapping { ptr: p.cast(), len })
    }

    pub fn addr(&self) -> usize {
        self.ptr as usize
    }

    pub fn len(&self) -> usize {
        self.len
    }

    /// Changes the protection of `[off, off+len)` of this mapping.
    pub fn protect(&self, off: usize, len: usize, prot: Prot) -> io::Result<()> {
        assert!(off.checked_add(len).is_some_and(|e| e <= self.len));
        // SAFETY: the range lies inside our own mapping; nothing else holds
        // references into it (accesses go through volatile byte operations).
        let r = unsafe { libc::mprotect(self.ptr.add(off).cast(), len, prot.bits()) };
        if r == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }

    /// Stores one byte. A protected page faults into whichever handler is
    /// installed (the floor handler below, or a write-protect fault the
    /// kernel resolves for userfaultfd).
    #[inline]
    pub fn write_byte(&self, off: usize, v: u8) {
        assert!(off < self.len);
        // SAFETY: in bounds of our mapping; callers only touch protected pages
        // while a handler that unprotects them is installed (or when the kernel
        // resolves the fault itself), so the store completes.
        unsafe { std::ptr::write_volatile(self.ptr.add(off), v) }
    }

    /// Loads one byte (same conditions as [`Mapping::write_byte`]).
    #[inline]
    pub fn read_byte(&self, off: usize) -> u8 {
        assert!(off < self.len);
        // SAFETY: as for `write_byte`.
        unsafe { std::ptr::read_volatile(self.ptr.add(off)) }
    }
}

// SAFETY: a Mapping is an address range the benchmark owns; every access
// goes through copies or volatile byte operations (no Rust references into
// it), so using it from several threads is no data race in Rust's sense.
unsafe impl Send for Mapping {}
// SAFETY: as above.
unsafe impl Sync for Mapping {}

/// A forked child process that maps the first `len` bytes of a file
/// `MAP_PRIVATE`, reads every page once, tells the parent so, and waits to
/// be killed (on drop): a reader process for memory measurements.
pub struct ReaderProcess {
    pid: libc::pid_t,
}

impl ReaderProcess {
    pub fn spawn(fd: BorrowedFd<'_>, len: usize) -> io::Result<ReaderProcess> {
        let mut pipe = [0 as libc::c_int; 2];
        // SAFETY: pipe2 fills the two-element array.
        if unsafe { libc::pipe2(pipe.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: the child runs only raw system calls and loads (no
        // allocation or locks, which another thread may have held at fork)
        // and ends in _exit or by SIGKILL.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            // SAFETY: as above; the mapping is the child's own.
            unsafe {
                let p = libc::mmap(
                    std::ptr::null_mut(),
                    len,
                    libc::PROT_READ,
                    libc::MAP_PRIVATE,
                    fd.as_raw_fd(),
                    0,
                );
                if p == libc::MAP_FAILED {
                    libc::_exit(1);
                }
                let mut x = 0u8;
                let mut off = 0;
                while off < len {
                    x ^= std::ptr::read_volatile(p.cast::<u8>().add(off));
                    off += PAGE;
                }
                libc::write(pipe[1], (&raw const x).cast(), 1);
                loop {
                    libc::pause();
                }
            }
        }
        // SAFETY: closing our copy of the write end, reading one byte into a
        // local, closing the read end: descriptors we own.
        let got = unsafe {
            libc::close(pipe[1]);
            let mut b = 0u8;
            let n = libc::read(pipe[0], (&raw mut b).cast(), 1);
            libc::close(pipe[0]);
            n
        };
        if pid < 0 {
            return Err(io::Error::last_os_error());
        }
        let r = ReaderProcess { pid };
        if got != 1 {
            return Err(io::Error::other("reader process failed to map and read"));
        }
        Ok(r)
    }

    pub fn pid(&self) -> libc::pid_t {
        self.pid
    }
}

impl Drop for ReaderProcess {
    fn drop(&mut self) {
        // SAFETY: our own child; reaped here.
        unsafe {
            libc::kill(self.pid, libc::SIGKILL);
            libc::waitpid(self.pid, std::ptr::null_mut(), 0);
        }
    }
}

/// What a [`Flat`] memory is: ordinary memory or a txmap view.
enum Backing {
    /// Kept only to be unmapped with the `Flat`.
    #[allow(dead_code)]
    Heap(Mapping),
    View(txmap::View),
}

/// Memory addressed by byte offsets from its base with plain loads and stores
/// of `u64` words, as a LIBXAC program uses its mapping: either an anonymous
/// mapping (the sequential version) or a txmap view's user address range,
/// where the first touch of a page in a transaction faults into txmap's
/// handler. It owns what it points into, so the base stays mapped.
pub struct Flat {
    base: *mut u8,
    len: usize,
    backing: Backing,
}

impl Flat {
    /// `len` bytes of zeroed ordinary memory.
    pub fn heap(len: usize) -> io::Result<Flat> {
        let m = Mapping::anon(len, Prot::ReadWrite)?;
        Ok(Flat {
            base: m.ptr,
            len,
            backing: Backing::Heap(m),
        })
    }

    /// The region as mapped in `view` (its size when this is called).
    pub fn view(view: txmap::View) -> Flat {
        Flat {
            base: view.base(),
            len: view.len(),
            backing: Backing::View(view),
        }
    }

    /// The view, for `begin`/`commit` (None for heap memory).
    pub fn view_mut(&mut self) -> Option<&mut txmap::View> {
        match &mut self.backing {
            Backing::View(v) => Some(v),
            Backing::Heap(_) => None,
        }
    }

    /// Loads the word at byte offset `off` (8-aligned, in bounds).
    #[inline]
    pub fn load(&self, off: u64) -> u64 {
        let o = off as usize;
        assert!(
            o.is_multiple_of(8) && o + 8 <= self.len,
            "word {off} outside the memory"
        );
        // SAFETY: aligned and in bounds of memory we own (the base of a view
        // stays mapped while the view lives). A view page not yet touched in
        // this transaction faults into txmap's handler, which installs it and
        // lets the load re-execute.
        unsafe { self.base.add(o).cast::<u64>().read() }
    }

    /// Stores `x` at byte offset `off` (8-aligned, in bounds). On a view,
    /// only inside a transaction (outside, txmap's handler kills the process).
    #[inline]
    pub fn store(&self, off: u64, x: u64) {
        let o = off as usize;
        assert!(
            o.is_multiple_of(8) && o + 8 <= self.len,
            "word {off} outside the memory"
        );
        // SAFETY: as for `load`; no Rust reference into this memory exists
        // (every access goes through these two calls).
        unsafe { self.base.add(o).cast::<u64>().write(x) }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: we created this mapping and no references into it outlive us.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

// ---------------------------------------------------------------------------
// The floor: a trivial SIGSEGV handler that unprotects the faulting page.

static FLOOR_BASE: AtomicUsize = AtomicUsize::new(0);
static FLOOR_LEN: AtomicUsize = AtomicUsize::new(0);

extern "C" fn floor_handler(sig: libc::c_int, info: *mut libc::siginfo_t, uctx: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo to an SA_SIGINFO handler.
    let addr = unsafe { (*info).si_addr() } as usize;
    // SAFETY: likewise a valid ucontext; bit 1 of the x86 page-fault error
    // code (REG_ERR) says "write".
    let write = unsafe {
        let uc = uctx as *const libc::ucontext_t;
        ((*uc).uc_mcontext.gregs[libc::REG_ERR as usize] & 2) != 0
    };
    let base = FLOOR_BASE.load(Ordering::Acquire);
    let len = FLOOR_LEN.load(Ordering::Acquire);
    if base != 0 && addr >= base && addr < base + len {
        let page = addr & !(PAGE - 1);
        let prot = if write { Prot::ReadWrite } else { Prot::Read };
        // SAFETY: mprotect is async-signal-safe; the page lies in the
        // benchmark's own registered mapping.
        if unsafe { libc::mprotect(page as *mut libc::c_void, PAGE, prot.bits()) } == 0 {
            return;
        }
    }
    // Not ours: restore the default action; the access faults again and the
    // process dies as it would have without us.
    // SAFETY: sigaction is async-signal-safe; a zeroed sigaction is SIG_DFL.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = libc::SIG_DFL;
        libc::sigaction(sig, &sa, std::ptr::null_mut());
    }
}

/// Installs the floor handler for `m` while alive; restores the previous
/// SIGSEGV action (txmap's, if a view was opened before) on drop. Only use it
/// while no txmap view is being touched.
pub struct FloorHandler {
    old: libc::sigaction,
}

impl FloorHandler {
    pub fn install(m: &Mapping) -> io::Result<FloorHandler> {
        FLOOR_BASE.store(m.addr(), Ordering::Release);
        FLOOR_LEN.store(m.len(), Ordering::Release);
        // SAFETY: sigaction with a zeroed struct, our handler, an empty mask and
        // the same flags txmap uses; the old action is saved for restoring.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = floor_handler as *const () as usize;
            sa.sa_flags = libc::SA_SIGINFO | libc::SA_NODEFER | libc::SA_ONSTACK;
            libc::sigemptyset(&mut sa.sa_mask);
            let mut old: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(libc::SIGSEGV, &sa, &mut old) != 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(FloorHandler { old })
        }
    }

    /// Points the handler at another mapping.
    pub fn retarget(&self, m: &Mapping) {
        FLOOR_BASE.store(m.addr(), Ordering::Release);
        FLOOR_LEN.store(m.len(), Ordering::Release);
    }
}

impl Drop for FloorHandler {
    fn drop(&mut self) {
        // SAFETY: restores the action saved by `install`.
        unsafe { libc::sigaction(libc::SIGSEGV, &self.old, std::ptr::null_mut()) };
        FLOOR_LEN.store(0, Ordering::Release);
        FLOOR_BASE.store(0, Ordering::Release);
    }
}

// ---------------------------------------------------------------------------
// userfaultfd (include/uapi/linux/userfaultfd.h; numbers checked against
// linux-raw-sys 0.12.1, which is generated from the kernel UAPI headers).

pub const UFFD_USER_MODE_ONLY: libc::c_int = 1;
pub const UFFD_API: u64 = 0xAA;
/// _IOWR(0xAA, 0x3F, struct uffdio_api): 24-byte argument.
const UFFDIO_API: libc::c_ulong = 0xc018_aa3f;
/// _IOWR(0xAA, 0x00, struct uffdio_register): 32-byte argument.
const UFFDIO_REGISTER: libc::c_ulong = 0xc020_aa00;
/// _IOWR(0xAA, 0x06, struct uffdio_writeprotect): 24-byte argument.
const UFFDIO_WRITEPROTECT: libc::c_ulong = 0xc018_aa06;
pub const UFFD_FEATURE_WP_UNPOPULATED: u64 = 1 << 13;
pub const UFFD_FEATURE_WP_ASYNC: u64 = 1 << 15;
const UFFDIO_REGISTER_MODE_WP: u64 = 2;
const UFFDIO_WRITEPROTECT_MODE_WP: u64 = 1;

#[repr(C)]
#[derive(Default)]
struct UffdioApi {
    api: u64,
    features: u64,
    ioctls: u64,
}

#[repr(C)]
#[derive(Default, Clone, Copy)]
struct UffdioRange {
    start: u64,
    len: u64,
}

#[repr(C)]
#[derive(Default)]
struct UffdioRegister {
    range: UffdioRange,
    mode: u64,
    ioctls: u64,
}

#[repr(C)]
#[derive(Default)]
struct UffdioWriteprotect {
    range: UffdioRange,
    mode: u64,
}

const _: () = assert!(std::mem::size_of::<UffdioApi>() == 24);
const _: () = assert!(std::mem::size_of::<UffdioRegister>() == 32);
const _: () = assert!(std::mem::size_of::<UffdioWriteprotect>() == 24);

/// # Safety
/// `arg` must be the `#[repr(C)]` structure that `req` encodes, and every
/// pointer inside it must be valid for what the kernel does with it.
unsafe fn ioctl<T>(fd: &OwnedFd, req: libc::c_ulong, arg: &mut T) -> io::Result<libc::c_int> {
    // SAFETY: per the contract above; `arg` is exclusively borrowed for the call.
    let r = unsafe { libc::ioctl(fd.as_raw_fd(), req, arg as *mut T) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// A userfaultfd with the API handshake done.
pub struct Uffd {
    fd: OwnedFd,
    pub features: u64,
}

impl Uffd {
    /// `userfaultfd(O_CLOEXEC | O_NONBLOCK | UFFD_USER_MODE_ONLY)` and
    /// UFFDIO_API asking for `features` (0 = report everything supported).
    pub fn new(features: u64) -> io::Result<Uffd> {
        let flags = libc::O_CLOEXEC | libc::O_NONBLOCK | UFFD_USER_MODE_ONLY;
        // SAFETY: a plain system call with integer arguments.
        let r = unsafe { libc::syscall(libc::SYS_userfaultfd, flags) };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: the kernel returned a fresh descriptor that we now own.
        let fd = unsafe { OwnedFd::from_raw_fd(r as libc::c_int) };
        let mut api = UffdioApi {
            api: UFFD_API,
            features,
            ioctls: 0,
        };
        // SAFETY: UFFDIO_API takes a uffdio_api (24 bytes, no pointers).
        unsafe { ioctl(&fd, UFFDIO_API, &mut api) }?;
        Ok(Uffd {
            fd,
            features: api.features,
        })
    }

    /// Registers all of `m` for write-protect tracking.
    pub fn register_wp(&self, m: &Mapping) -> io::Result<()> {
        let mut reg = UffdioRegister {
            range: UffdioRange {
                start: m.addr() as u64,
                len: m.len() as u64,
            },
            mode: UFFDIO_REGISTER_MODE_WP,
            ioctls: 0,
        };
        // SAFETY: UFFDIO_REGISTER takes a uffdio_register (32 bytes, no pointers);
        // the range is our own mapping.
        unsafe { ioctl(&self.fd, UFFDIO_REGISTER, &mut reg) }.map(drop)
    }

    /// Write-protects (or unprotects) all of `m`.
    pub fn writeprotect(&self, m: &Mapping, wp: bool) -> io::Result<()> {
        let mut w = UffdioWriteprotect {
            range: UffdioRange {
                start: m.addr() as u64,
                len: m.len() as u64,
            },
            mode: if wp { UFFDIO_WRITEPROTECT_MODE_WP } else { 0 },
        };
        // SAFETY: UFFDIO_WRITEPROTECT takes a uffdio_writeprotect (24 bytes, no
        // pointers); the range is our own registered mapping.
        unsafe { ioctl(&self.fd, UFFDIO_WRITEPROTECT, &mut w) }.map(drop)
    }
}

// ---------------------------------------------------------------------------
// userfaultfd minor faults on shared memory, resolved from a SIGBUS handler
// (UFFD_FEATURE_SIGBUS: the faulting thread gets SIGBUS instead of waiting
// for a handler thread) with UFFDIO_CONTINUE, which maps the page already in
// the memfd's page cache.

pub const UFFD_FEATURE_SIGBUS: u64 = 1 << 7;
pub const UFFD_FEATURE_MINOR_SHMEM: u64 = 1 << 10;
const UFFDIO_REGISTER_MODE_MINOR: u64 = 4;
/// _IOWR(0xAA, 0x07, struct uffdio_continue): 32-byte argument.
const UFFDIO_CONTINUE: libc::c_ulong = 0xc020_aa07;

#[repr(C)]
struct UffdioContinue {
    range: UffdioRange,
    mode: u64,
    mapped: i64,
}

const _: () = assert!(std::mem::size_of::<UffdioContinue>() == 32);

impl Uffd {
    /// Registers all of `m` for minor faults.
    pub fn register_minor(&self, m: &Mapping) -> io::Result<()> {
        let mut reg = UffdioRegister {
            range: UffdioRange {
                start: m.addr() as u64,
                len: m.len() as u64,
            },
            mode: UFFDIO_REGISTER_MODE_MINOR,
            ioctls: 0,
        };
        // SAFETY: UFFDIO_REGISTER takes a uffdio_register (32 bytes, no pointers).
        unsafe { ioctl(&self.fd, UFFDIO_REGISTER, &mut reg) }.map(drop)
    }
}

static MINOR_FD: AtomicUsize = AtomicUsize::new(usize::MAX);
static MINOR_BASE: AtomicUsize = AtomicUsize::new(0);
static MINOR_LEN: AtomicUsize = AtomicUsize::new(0);

extern "C" fn minor_handler(sig: libc::c_int, info: *mut libc::siginfo_t, _: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo to an SA_SIGINFO handler.
    let addr = unsafe { (*info).si_addr() } as usize;
    let base = MINOR_BASE.load(Ordering::Acquire);
    let len = MINOR_LEN.load(Ordering::Acquire);
    let fd = MINOR_FD.load(Ordering::Acquire);
    if fd != usize::MAX && base != 0 && addr >= base && addr < base + len {
        let mut c = UffdioContinue {
            range: UffdioRange {
                start: (addr & !(PAGE - 1)) as u64,
                len: PAGE as u64,
            },
            mode: 0,
            mapped: 0,
        };
        // SAFETY: ioctl is a plain system call (async-signal-safe); the
        // argument is a uffdio_continue on our stack for a registered page.
        let r = unsafe { libc::ioctl(fd as libc::c_int, UFFDIO_CONTINUE, &mut c) };
        if r == 0 {
            return;
        }
    }
    // SAFETY: sigaction is async-signal-safe; a zeroed sigaction is SIG_DFL.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = libc::SIG_DFL;
        libc::sigaction(sig, &sa, std::ptr::null_mut());
    }
}

/// While alive, resolves minor faults on `m` (registered with `uffd`) from
/// a SIGBUS handler with UFFDIO_CONTINUE; restores the old action on drop.
pub struct MinorHandler<'a> {
    old: libc::sigaction,
    _uffd: &'a Uffd,
}

impl<'a> MinorHandler<'a> {
    pub fn install(uffd: &'a Uffd, m: &Mapping) -> io::Result<MinorHandler<'a>> {
        MINOR_FD.store(uffd.fd.as_raw_fd() as usize, Ordering::Release);
        MINOR_BASE.store(m.addr(), Ordering::Release);
        MINOR_LEN.store(m.len(), Ordering::Release);
        // SAFETY: as in FloorHandler::install, for SIGBUS.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = minor_handler as *const () as usize;
            sa.sa_flags = libc::SA_SIGINFO | libc::SA_NODEFER | libc::SA_ONSTACK;
            libc::sigemptyset(&mut sa.sa_mask);
            let mut old: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(libc::SIGBUS, &sa, &mut old) != 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(MinorHandler { old, _uffd: uffd })
        }
    }
}

impl Drop for MinorHandler<'_> {
    fn drop(&mut self) {
        // SAFETY: restores the action saved by `install`.
        unsafe { libc::sigaction(libc::SIGBUS, &self.old, std::ptr::null_mut()) };
        MINOR_LEN.store(0, Ordering::Release);
        MINOR_BASE.store(0, Ordering::Release);
        MINOR_FD.store(usize::MAX, Ordering::Release);
    }
}

// ---------------------------------------------------------------------------
// PAGEMAP_SCAN (include/uapi/linux/fs.h): reads the written set of an
// async-write-protected range and re-protects it in one call.

/// _IOWR('f', 16, struct pm_scan_arg): 96-byte argument.
const PAGEMAP_SCAN: libc::c_ulong = 0xc060_6610;
const PM_SCAN_WP_MATCHING: u64 = 1;
const PM_SCAN_CHECK_WPASYNC: u64 = 2;
const PAGE_IS_WRITTEN: u64 = 2;

#[repr(C)]
struct PmScanArg {
    size: u64,
    flags: u64,
    start: u64,
    end: u64,
    walk_end: u64,
    vec: u64,
    vec_len: u64,
    max_pages: u64,
    category_inverted: u64,
    category_mask: u64,
    category_anyof_mask: u64,
    return_mask: u64,
}

const _: () = assert!(std::mem::size_of::<PmScanArg>() == 96);

/// One run of pages in a PAGEMAP_SCAN answer.
#[repr(C)]
#[derive(Default, Clone, Copy)]
pub struct PageRegion {
    pub start: u64,
    pub end: u64,
    pub categories: u64,
}

pub struct Pagemap {
    fd: OwnedFd,
}

impl Pagemap {
    pub fn open() -> io::Result<Pagemap> {
        Ok(Pagemap {
            fd: File::open("/proc/self/pagemap")?.into(),
        })
    }

    /// Reports the pages of `m` written since they were write-protected and
    /// write-protects them again. Returns how many pages were reported.
    pub fn written_and_reprotect(&self, m: &Mapping, out: &mut [PageRegion]) -> io::Result<usize> {
        let mut arg = PmScanArg {
            size: std::mem::size_of::<PmScanArg>() as u64,
            flags: PM_SCAN_WP_MATCHING | PM_SCAN_CHECK_WPASYNC,
            start: m.addr() as u64,
            end: (m.addr() + m.len()) as u64,
            walk_end: 0,
            vec: out.as_mut_ptr() as u64,
            vec_len: out.len() as u64,
            max_pages: 0,
            category_inverted: 0,
            category_mask: PAGE_IS_WRITTEN,
            category_anyof_mask: 0,
            return_mask: PAGE_IS_WRITTEN,
        };
        // SAFETY: PAGEMAP_SCAN takes a pm_scan_arg (96 bytes); its `vec` points at
        // `out`, exclusively borrowed, which the kernel fills with at most
        // `vec_len` PageRegion entries (same layout as struct page_region).
        let n = unsafe { ioctl(&self.fd, PAGEMAP_SCAN, &mut arg) }? as usize;
        Ok(out[..n.min(out.len())]
            .iter()
            .map(|r| ((r.end - r.start) / PAGE as u64) as usize)
            .sum())
    }
}

// ---------------------------------------------------------------------------

/// `uname -srvm`.
pub fn uname() -> String {
    // SAFETY: utsname is plain bytes; uname fills it.
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: `u` is a valid, exclusively borrowed utsname.
    if unsafe { libc::uname(&mut u) } != 0 {
        return "unknown".into();
    }
    let s = |f: &[libc::c_char]| {
        let b: Vec<u8> = f
            .iter()
            .take_while(|&&c| c != 0)
            .map(|&c| c as u8)
            .collect();
        String::from_utf8_lossy(&b).into_owned()
    };
    format!(
        "{} {} {} {}",
        s(&u.sysname),
        s(&u.release),
        s(&u.version),
        s(&u.machine)
    )
}

// ---------------------------------------------------------------------------
// Counting fdatasync calls (to see how many commits share one sync).

static FDATASYNC_CALLS: AtomicU64 = AtomicU64::new(0);

/// `fdatasync` calls made by this process so far (txmap's log syncs included).
pub fn fdatasync_calls() -> u64 {
    FDATASYNC_CALLS.load(Ordering::Relaxed)
}

/// Interposes libc's `fdatasync` for this executable: the standard library's
/// `File::sync_data` (which txmap's log uses) links to this definition. It
/// counts the call and makes the same system call.
// SAFETY: the symbol has exactly libc's signature and semantics (returns -1
// and sets errno on failure, as `libc::syscall` does), so every caller that
// binds to it instead of libc's gets the behaviour it expects.
#[unsafe(no_mangle)]
pub extern "C" fn fdatasync(fd: libc::c_int) -> libc::c_int {
    FDATASYNC_CALLS.fetch_add(1, Ordering::Relaxed);
    // SAFETY: a plain system call with an integer argument.
    unsafe { libc::syscall(libc::SYS_fdatasync, fd) as libc::c_int }
}
