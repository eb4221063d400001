//! The SIGSEGV handler that catches first touches of view pages.
//!
//! Views register their address range in a fixed table of atomics; the handler
//! finds the view by fault address without locks or allocation and calls the
//! view's fault routine (`view::fault`), which uses only atomics, `memcpy` and
//! `mprotect`. Faults outside every registered range go to the handler that was
//! installed before ours, unchanged.

use std::sync::Once;
use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};

/// What the view's fault routine decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FaultOutcome {
    /// The page is now accessible; retry the instruction.
    Handled,
    /// A store to a view outside a transaction.
    WriteOutsideTransaction,
    /// An access past the end of the region.
    BeyondRegion,
    /// A protection change failed (usually `vm.max_map_count`).
    ProtectFailed,
    /// A view inherited through `fork` was touched in the child.
    ForkedChild,
}

/// Signature of the routine a view registers: (context, fault address, is write).
pub type FaultFn = fn(*const (), usize, bool) -> FaultOutcome;

const SLOTS: usize = 1024;

struct Slot {
    base: AtomicUsize,
    len: AtomicUsize,
    ctx: AtomicPtr<()>,
    func: AtomicUsize,
}

#[allow(clippy::declare_interior_mutable_const)]
const EMPTY: Slot = Slot {
    base: AtomicUsize::new(0),
    len: AtomicUsize::new(0),
    ctx: AtomicPtr::new(std::ptr::null_mut()),
    func: AtomicUsize::new(0),
};
static TABLE: [Slot; SLOTS] = [EMPTY; SLOTS];
static HIGH_WATER: AtomicUsize = AtomicUsize::new(0);
static INSTALL: Once = Once::new();
static mut PREVIOUS: std::mem::MaybeUninit<libc::sigaction> = std::mem::MaybeUninit::zeroed();
static INSTALL_ERROR: AtomicUsize = AtomicUsize::new(0);
/// Bumped in every child right after `fork` (by the atfork handler), so a
/// handle can tell, with one load, whether it lives in the process that made it.
static FORKS: AtomicUsize = AtomicUsize::new(0);

/// Sends `sig` to the calling thread, so that it takes effect before the
/// call returns: a SIGSTOP or SIGKILL sent to the whole process with
/// `kill` may be taken by another thread first, and the caller runs on
/// meanwhile (crash points must stop exactly where they are).
pub fn raise_in_this_thread(sig: i32) {
    // SAFETY: pthread_kill on the calling thread's own handle, with a valid
    // signal number; it only queues the signal.
    let _ = unsafe { libc::pthread_kill(libc::pthread_self(), sig) };
}

/// How many forks separate this process from the first one (see `FORKS`).
/// Installs the fork hook on first use.
pub fn forks() -> std::io::Result<usize> {
    install()?;
    Ok(FORKS.load(Ordering::Acquire))
}

/// `forks()` for the fault handler (the hook is installed by then).
pub fn forks_now() -> usize {
    FORKS.load(Ordering::Acquire)
}

/// A registered range; unregisters on drop.
#[derive(Debug)]
pub struct Registration {
    slot: usize,
}

impl Drop for Registration {
    fn drop(&mut self) {
        let s = &TABLE[self.slot];
        s.len.store(0, Ordering::SeqCst);
        s.base.store(0, Ordering::SeqCst);
        s.ctx.store(std::ptr::null_mut(), Ordering::SeqCst);
        s.func.store(0, Ordering::SeqCst);
    }
}

/// Registers `[base, base+len)` so that faults in it call `func(ctx, addr, write)`.
/// `ctx` must stay valid until the registration is dropped.
pub fn register(
    base: usize,
    len: usize,
    ctx: *const (),
    func: FaultFn,
) -> std::io::Result<Registration> {
    install()?;
    for (i, s) in TABLE.iter().enumerate() {
        if s.func
            .compare_exchange(0, usize::MAX, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
        {
            s.ctx.store(ctx as *mut (), Ordering::SeqCst);
            s.base.store(base, Ordering::SeqCst);
            s.len.store(len, Ordering::SeqCst);
            s.func.store(func as usize, Ordering::SeqCst);
            HIGH_WATER.fetch_max(i + 1, Ordering::SeqCst);
            return Ok(Registration { slot: i });
        }
    }
    Err(std::io::Error::other(format!(
        "too many open views in this process (at most {SLOTS})"
    )))
}

/// Updates the length of a registered range (after the view grew).
pub fn set_len(reg: &Registration, len: usize) {
    TABLE[reg.slot].len.store(len, Ordering::SeqCst);
}

fn install() -> std::io::Result<()> {
    INSTALL.call_once(|| {
        // SAFETY: sigaction with a zeroed struct, our handler and an empty mask;
        // the previous action is saved before anything can fault into us.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = handler as *const () as usize;
            sa.sa_flags = libc::SA_SIGINFO | libc::SA_NODEFER | libc::SA_ONSTACK;
            libc::sigemptyset(&mut sa.sa_mask);
            let prev = std::ptr::addr_of_mut!(PREVIOUS).cast::<libc::sigaction>();
            if libc::sigaction(libc::SIGSEGV, &sa, prev) != 0 {
                INSTALL_ERROR.store(1, Ordering::SeqCst);
            }
            // A forked child shares each view's private memory with its
            // parent: close every inherited view so any touch faults.
            if libc::pthread_atfork(None, None, Some(close_views_in_child)) != 0 {
                INSTALL_ERROR.store(1, Ordering::SeqCst);
            }
        }
    });
    if INSTALL_ERROR.load(Ordering::SeqCst) != 0 {
        return Err(std::io::Error::other("cannot install the SIGSEGV handler"));
    }
    Ok(())
}

/// Runs in the child right after `fork` (single-threaded): makes every
/// registered view inaccessible. Only raw `mprotect` calls.
extern "C" fn close_views_in_child() {
    FORKS.fetch_add(1, Ordering::AcqRel);
    let n = HIGH_WATER.load(Ordering::Acquire);
    for s in &TABLE[..n] {
        let (base, len) = (
            s.base.load(Ordering::Acquire),
            s.len.load(Ordering::Acquire),
        );
        if base != 0 && len != 0 {
            let _ = crate::os::mem::protect_raw(base, len, crate::os::mem::Access::None);
        }
    }
}

fn message(parts: &[&[u8]]) {
    for p in parts {
        // SAFETY: write(2) is async-signal-safe; the buffers are static or on our stack.
        unsafe { libc::write(2, p.as_ptr().cast(), p.len()) };
    }
}

fn hex(mut v: usize, buf: &mut [u8; 18]) -> &[u8] {
    buf[0] = b'0';
    buf[1] = b'x';
    for i in (2..18).rev() {
        buf[i] = b"0123456789abcdef"[v & 15];
        v >>= 4;
    }
    &buf[..]
}

extern "C" fn handler(sig: libc::c_int, info: *mut libc::siginfo_t, uctx: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo for SA_SIGINFO handlers.
    let addr = unsafe { (*info).si_addr() } as usize;
    // SAFETY: likewise a valid ucontext; REG_ERR bit 1 is the x86 page-fault "write" bit.
    let write = unsafe {
        let uc = uctx as *const libc::ucontext_t;
        ((*uc).uc_mcontext.gregs[libc::REG_ERR as usize] & 2) != 0
    };
    let n = HIGH_WATER.load(Ordering::Acquire);
    for s in &TABLE[..n] {
        let base = s.base.load(Ordering::Acquire);
        let len = s.len.load(Ordering::Acquire);
        let f = s.func.load(Ordering::Acquire);
        if base == 0 || f == 0 || f == usize::MAX || addr < base || addr >= base + len {
            continue;
        }
        // SAFETY: `f` was stored from a `FaultFn` in `register`.
        let func: FaultFn = unsafe { std::mem::transmute::<usize, FaultFn>(f) };
        let outcome = func(s.ctx.load(Ordering::Acquire), addr, write);
        let mut buf = [0u8; 18];
        match outcome {
            FaultOutcome::Handled => return,
            FaultOutcome::WriteOutsideTransaction => message(&[
                b"txmap: store to a view outside a transaction at ",
                hex(addr, &mut buf),
                b" (begin a transaction first)\n",
            ]),
            FaultOutcome::BeyondRegion => message(&[
                b"txmap: access past the end of the region at ",
                hex(addr, &mut buf),
                b"\n",
            ]),
            FaultOutcome::ForkedChild => message(&[
                b"txmap: a view inherited through fork was used at ",
                hex(addr, &mut buf),
                b" (open the region again in the child)\n",
            ]),
            FaultOutcome::ProtectFailed => message(&[
                b"txmap: mprotect failed handling a fault at ",
                hex(addr, &mut buf),
                b" (too many protected ranges? see vm.max_map_count)\n",
            ]),
        }
        break;
    }
    forward(sig, info, uctx);
}

/// Hands a fault that is not ours (or that we refuse) to the previous handler.
fn forward(sig: libc::c_int, info: *mut libc::siginfo_t, uctx: *mut libc::c_void) {
    // SAFETY: PREVIOUS was written once by `install` before the handler could run.
    let prev = unsafe {
        std::ptr::addr_of!(PREVIOUS)
            .cast::<libc::sigaction>()
            .read()
    };
    let h = prev.sa_sigaction;
    if h == libc::SIG_DFL || h == libc::SIG_IGN {
        // Restore the default action and return: the instruction faults again
        // and the kernel applies it (a core dump, as without us).
        // SAFETY: sigaction is async-signal-safe.
        unsafe { libc::sigaction(sig, &prev, std::ptr::null_mut()) };
        return;
    }
    if prev.sa_flags & libc::SA_SIGINFO != 0 {
        // SAFETY: the previous handler declared the three-argument form.
        let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
            unsafe { std::mem::transmute(h) };
        f(sig, info, uctx);
    } else {
        // SAFETY: the previous handler declared the one-argument form.
        let f: extern "C" fn(libc::c_int) = unsafe { std::mem::transmute(h) };
        f(sig);
    }
}
