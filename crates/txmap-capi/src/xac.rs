//! LIBXAC-style calls: `xInit`, `xMmap`, `xbegin`, `xend`, ...
//!
//! The state is process-wide, as in LIBXAC: one directory, one mapped region
//! (for now) and one view of it, used by whichever thread calls `xbegin`.
//! Several processes may map the same region; `xend` returns `XAC_ABORTED`
//! when another process's commit conflicts.
//!
//! Threads are serialized per process: while one thread's transaction is
//! open, `xbegin` from another thread waits for it to end (`xbegin_try`
//! fails with `EBUSY` instead, `xbegin_timed` gives up after a timeout).
//! Any access to the region's memory, by any thread, belongs to the open
//! transaction (it is one mapping), so other threads leave the region alone
//! until their own `xbegin` returns. A thread that exits with its
//! transaction open has it rolled back by a thread-exit destructor, which
//! wakes the waiters. The SIGSEGV handler finds views through its own
//! lock-free table and never takes the lock waiters wait on.
//!
//! `xMalloc`, `xFree` and `xRoot` allocate in the mapped region from the
//! transactional heap (`collections::alloc`), inside the open transaction.
//!
//! Calls that fail return `-1` (or NULL) and set `errno`; `txmap_errmsg`
//! says more.

use std::cell::Cell;
use std::collections::VecDeque;
use std::ffi::{OsStr, OsString, c_char, c_int, c_void};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::thread::ThreadId;
use std::time::{Duration, Instant};

use crate::{
    Failure, TXMAP_EBUSY, TXMAP_EINVAL, TXMAP_ENOTSUP, guarded, native, path_arg, set_errno,
};
use txmap::collections::alloc;
use txmap::{Durability, Error, Options, Paused, Region, View};

/// `xInit` durability: commits are atomic and isolated and survive a crash
/// of the process, not of the OS (txmap `Durability::Async`).
pub const XAC_NONDURABLE: c_int = 0;
/// `xInit` durability: once `xend` returns `XAC_COMMITTED` the commit
/// survives power loss (txmap `Durability::Durable`).
pub const XAC_DURABLE: c_int = 1;
/// `xend`: the transaction committed (or an inner `xend` returned).
pub const XAC_COMMITTED: c_int = 0;
/// `xend`: the transaction aborted (conflict or `xabort`); nothing of it is
/// visible.
pub const XAC_ABORTED: c_int = 1;
/// `setPageAccess`: the transaction will read the pages.
pub const XAC_READ: c_int = 1;
/// `setPageAccess`: the transaction will write the pages.
pub const XAC_WRITE: c_int = 2;

struct Mapped {
    name: OsString,
    view: View,
    /// The thread whose transaction is open on `view`.
    owner: Option<ThreadId>,
    /// Transactions paused by `xpause`, each with its thread (the newest last).
    paused: Vec<(ThreadId, Paused)>,
    /// Regions mapped after the first, in order: a transaction spans them
    /// all and commits atomically across them (issue 19 point 1).
    more: Vec<(OsString, View)>,
}

impl Mapped {
    /// Every mapped region's view, the first mapped first.
    fn views(&mut self) -> Vec<&mut View> {
        std::iter::once(&mut self.view)
            .chain(self.more.iter_mut().map(|(_, v)| v))
            .collect()
    }

    /// Fails with `ENOTSUP` for `call` while several regions are mapped.
    fn one_region(&self, call: &str) -> Result<(), Failure> {
        if self.more.is_empty() {
            return Ok(());
        }
        Err(Failure::new(
            TXMAP_ENOTSUP,
            libc::ENOTSUP,
            format!(
                "{call} works with one region mapped, not {}",
                self.more.len() + 1
            ),
        ))
    }
}

struct Xac {
    /// The process that called `xInit` (a forked child calls it again).
    pid: u32,
    dir: PathBuf,
    opts: Options,
    mapped: Option<Mapped>,
}

static STATE: Mutex<Option<Xac>> = Mutex::new(None);

/// Notified (with `STATE` held) whenever an open transaction ends or the
/// state goes away, for the threads waiting in `xbegin`.
static ENDED: Condvar = Condvar::new();

fn state() -> MutexGuard<'static, Option<Xac>> {
    STATE.lock().unwrap_or_else(|e| e.into_inner())
}

/// Rolls back, when its thread exits, a transaction the thread left open
/// (so waiters in `xbegin` are not blocked forever). Holds the thread's id,
/// set by its first outermost `xbegin`: `thread::current` may be gone while
/// thread-locals are destroyed.
struct ExitGuard(Cell<Option<ThreadId>>);

impl Drop for ExitGuard {
    fn drop(&mut self) {
        if let Some(id) = self.0.get() {
            // A panic must not escape a thread-local destructor (it aborts).
            let _ = std::panic::catch_unwind(|| roll_back_for_exited(id));
        }
    }
}

thread_local! {
    static EXIT_GUARD: ExitGuard = const { ExitGuard(Cell::new(None)) };
}

/// Rolls back the open transaction if thread `id` (exiting) owns it.
fn roll_back_for_exited(id: ThreadId) {
    let mut g = state();
    if let Some(st) = g.as_mut()
        && st.pid == std::process::id()
        && let Some(m) = st.mapped.as_mut()
        && m.owner == Some(id)
    {
        View::rollback_group(&mut m.views());
        m.owner = None;
        ENDED.notify_all();
    }
    // Its paused transactions can never be resumed: roll them back.
    if let Some(st) = g.as_mut()
        && st.pid == std::process::id()
        && let Some(m) = st.mapped.as_mut()
    {
        m.paused.retain(|(t, _)| *t != id);
    }
}

fn initialized(g: &mut Option<Xac>) -> Result<&mut Xac, Failure> {
    g.as_mut()
        .ok_or_else(|| Failure::invalid("xInit has not been called"))
}

fn mapped(g: &mut Option<Xac>) -> Result<&mut Mapped, Failure> {
    initialized(g)?
        .mapped
        .as_mut()
        .ok_or_else(|| Failure::invalid("no region is mapped (call xMmap first)"))
}

fn busy(msg: impl Into<String>) -> Failure {
    Failure::new(TXMAP_EBUSY, libc::EBUSY, msg)
}

/// Fails unless the calling thread owns the open transaction of `m`.
fn own_transaction(m: &Mapped, call: &str) -> Result<(), Failure> {
    match m.owner {
        None => Err(Failure::invalid(format!("{call} outside a transaction"))),
        Some(o) if o != std::thread::current().id() => Err(Failure::new(
            TXMAP_EBUSY,
            libc::EPERM,
            format!("{call}: the open transaction belongs to another thread"),
        )),
        Some(_) => Ok(()),
    }
}

/// Runs a LIBXAC call that returns an int: `-1` and errno on failure.
fn int_call(name: &str, f: impl FnOnce() -> Result<c_int, Failure>) -> c_int {
    guarded(name, f).unwrap_or_else(|e| {
        set_errno(e.errno);
        -1
    })
}

/// Initializes the LIBXAC calls; once per process (again only after
/// `xShutdown`, or in a child after `fork`, where the parent's state does not
/// carry over; fork only while no other thread is inside one of these calls
/// — waiting in `xbegin` is fine — or the child finds their lock taken).
/// Every process that maps a region calls it; the transactions of
/// different processes run concurrently, isolated from one another (the
/// threads of one process take turns, see `xbegin`). `dir` holds the
/// regions and their logs and is created if absent. `durability`:
/// `XAC_DURABLE` or `XAC_NONDURABLE`. Returns 0, or -1 with errno (`EBUSY`
/// if already initialized, `EINVAL`, or the errno of creating `dir`).
///
/// # Safety
/// `dir` is NULL or a NUL-terminated string.
#[unsafe(no_mangle)]
#[allow(non_snake_case)]
pub unsafe extern "C" fn xInit(dir: *const c_char, durability: c_int) -> c_int {
    int_call("xInit", || {
        // SAFETY: per this function's contract.
        let dir = unsafe { path_arg(dir, "dir") }?;
        let durability = match durability {
            XAC_DURABLE => Durability::Durable,
            XAC_NONDURABLE => Durability::Async,
            d => return Err(Failure::invalid(format!("unknown durability {d}"))),
        };
        let mut g = state();
        if let Some(st) = g.as_ref() {
            if st.pid == std::process::id() {
                return Err(busy("already initialized (call xShutdown first)"));
            }
            // Inherited through fork: the parent's handles are not ours.
            // Dropping them neither rolls back nor checkpoints in a child.
            *g = None;
            queue().clear(); // the parent's waiting threads
        }
        txmap::io::create_dir_durable(dir).map_err(|e| io_error("create directory", dir, e))?;
        let dir = std::path::absolute(dir).map_err(|e| io_error("resolve", dir, e))?;
        *g = Some(Xac {
            pid: std::process::id(),
            dir,
            opts: Options {
                durability,
                ..Options::default()
            },
            mapped: None,
        });
        Ok(0)
    })
}

/// Rolls back the calling thread's open transaction (if any), unmaps every
/// region and closes it. Only the last process to close a region
/// checkpoints it (so the log is empty); the others return at once and
/// leave the log to it (it keeps every commit). Afterwards `xInit` may be
/// called again. Returns 0, or -1 with errno `EBUSY` if another thread's
/// transaction is open, `EINVAL` if not initialized.
#[unsafe(no_mangle)]
#[allow(non_snake_case)]
pub extern "C" fn xShutdown() -> c_int {
    int_call("xShutdown", || {
        let mut g = state();
        let st = initialized(&mut g)?;
        if let Some(m) = &st.mapped
            && m.owner.is_some_and(|o| o != std::thread::current().id())
        {
            return Err(busy("a transaction of another thread is open"));
        }
        let st = g.take().expect("checked above");
        // Waiters in `xbegin` wake to find the calls shut down.
        ENDED.notify_all();
        drop(g);
        drop(st); // the last process out checkpoints as it closes
        Ok(0)
    })
}

/// Maps the region `name` of the `xInit` directory and returns its address:
/// the region's fixed address, the same in every process and every
/// execution (chosen at random in 17–64 TiB when the region is created and
/// recorded in its file), so raw pointers into the region may be stored in
/// it. It is never mapped elsewhere: if something else is mapped there, this
/// fails with errno `EEXIST` and `txmap_errmsg` names the range and what
/// holds it. It is created zero-filled with `length` rounded up to 4096 bytes if
/// absent, and grown if smaller. An existing file that is not a txmap region
/// (no `name-log`, no region header) is mapped as a plain file, its bytes at
/// the returned address, as LIBXAC's `xMmap` maps a file
/// (`txmap_region_open_plain`): txmap's metadata goes beside it
/// (`name-txmap`, `name-log`, `name-sums`), the file keeps its length (a
/// `length` beyond it grows it to `length` rounded up to 4096), and when
/// no process has it mapped it holds the committed bytes; a plain file
/// another program changed meanwhile fails with errno `ESTALE`. Mapping the
/// same name again returns the same address. Several regions may be mapped
/// (other names, outside a transaction: else `EBUSY`): every transaction
/// (`xbegin` … `xend`) then spans all of them, reads one snapshot of them
/// all, and commits atomically across them (after a crash at any point, all
/// of its changes are there or none); `xpause`, `xorder` and `xorderNext`
/// need one region mapped (`ENOTSUP`), and `xMalloc`, `xFree` and `xRoot`
/// use the first region mapped. On
/// failure returns NULL with errno (`EINVAL`: not initialized, or a bad
/// name: it must be a plain file name not ending in "-log";
/// `EBUSY`: the region must grow while another thread's transaction is open;
/// file errors keep their errno). Inside the calling thread's transaction a
/// larger `length` grows the region at once, at the same address; the growth
/// stays if the transaction aborts (the file is just larger, the new bytes
/// zero). Other processes may map the same region at once; if
/// one is creating it, this waits for it to be in place.
///
/// Inside a transaction the memory may be read and written freely; outside
/// one it is read-only and shows committed data, not necessarily the latest
/// (pages keep their content as of the last transaction), and a store to it
/// crashes the program — except while another thread's transaction is
/// open, when every access belongs to that transaction (see `xbegin`).
///
/// # Safety
/// `name` is NULL or a NUL-terminated string.
#[unsafe(no_mangle)]
#[allow(non_snake_case)]
pub unsafe extern "C" fn xMmap(name: *const c_char, length: usize) -> *mut c_void {
    let r = guarded("xMmap", || {
        // SAFETY: per this function's contract.
        let name = unsafe { path_arg(name, "name") }?.as_os_str();
        let bytes = name.as_bytes();
        if bytes.contains(&b'/') || bytes == b"." || bytes == b".." {
            return Err(Failure::invalid(format!(
                "region name {name:?} must be a plain file name"
            )));
        }
        if bytes.ends_with(b"-log") {
            return Err(Failure::invalid(format!(
                "region name {name:?} must not end in \"-log\" (the suffix of log files)"
            )));
        }
        let size = length
            .checked_next_multiple_of(4096)
            .ok_or_else(|| Failure::invalid(format!("length {length} is too large")))?
            as u64;
        let mut g = state();
        let st = initialized(&mut g)?;
        if let Some(m) = &mut st.mapped {
            let owner = m.owner;
            let known = if m.name == name {
                Some(&mut m.view)
            } else {
                m.more.iter_mut().find(|(n, _)| n == name).map(|(_, v)| v)
            };
            let Some(view) = known else {
                // Another region: the next transactions span it too.
                if owner.is_some() || !m.paused.is_empty() {
                    return Err(busy(format!(
                        "cannot map {name:?} while a transaction is open or paused"
                    )));
                }
                let view = open_view(&st.dir, name, size, &st.opts)?;
                let base = view.base().cast::<c_void>();
                m.more.push((name.to_owned(), view));
                return Ok(base);
            };
            // Compared with what this view maps (another process may have
            // grown the region already): growing maps the new pages here.
            if size > view.len() as u64 {
                if owner.is_some_and(|o| o != std::thread::current().id()) {
                    return Err(busy(format!(
                        "cannot grow {name:?} while another thread's transaction is open"
                    )));
                }
                // Inside the caller's own transaction too: the base stays
                // (the view reserved the maximum size), and growth is not
                // undone if the transaction aborts.
                view.grow(size)?;
            }
            return Ok(view.base().cast::<c_void>());
        }
        let view = open_view(&st.dir, name, size, &st.opts)?;
        let base = view.base().cast::<c_void>();
        st.mapped = Some(Mapped {
            name: name.to_owned(),
            view,
            owner: None,
            paused: Vec::new(),
            more: Vec::new(),
        });
        Ok(base)
    });
    r.unwrap_or_else(|e| {
        set_errno(e.errno);
        std::ptr::null_mut()
    })
}

/// Opens (or creates, zero-filled, `size` bytes) region `dir/name`, grows
/// it to `size`, and maps a view of it at its fixed address.
fn open_view(
    dir: &std::path::Path,
    name: &OsStr,
    size: u64,
    opts: &Options,
) -> Result<View, Failure> {
    let path = dir.join(name);
    let exists = path.try_exists().map_err(|e| io_error("stat", &path, e))?;
    let region = if exists {
        // A file that is no txmap region is mapped as a plain file.
        Region::open_or_adopt(&path, opts.clone())?
    } else if size == 0 {
        return Err(Failure::invalid(format!(
            "{} does not exist and length is 0",
            path.display()
        )));
    } else {
        // Another process may be creating it: then this waits for it.
        Region::open_or_create(&path, size, opts.clone())?
    };
    if region.size() < size {
        region.grow(size)?;
    }
    // The same address in every process and execution: pointers stored
    // in the region stay valid.
    Ok(region.view_fixed()?)
}

/// Unmaps the region `name` and closes it (the last process to close it
/// checkpoints it, as `xShutdown`). Returns 0, or -1 with errno `EINVAL`
/// (not mapped) or `EBUSY` (a transaction is open).
///
/// # Safety
/// `name` is NULL or a NUL-terminated string.
#[unsafe(no_mangle)]
#[allow(non_snake_case)]
pub unsafe extern "C" fn xMunmap(name: *const c_char) -> c_int {
    int_call("xMunmap", || {
        // SAFETY: per this function's contract.
        let name: &OsStr = unsafe { path_arg(name, "name") }?.as_os_str();
        let mut g = state();
        let st = initialized(&mut g)?;
        let Some(m) = &mut st.mapped else {
            return Err(Failure::invalid(format!("{name:?} is not mapped")));
        };
        let at = m.more.iter().position(|(n, _)| n == name);
        if m.name != name && at.is_none() {
            return Err(Failure::invalid(format!("{name:?} is not mapped")));
        }
        if m.owner.is_some() {
            return Err(busy(format!(
                "cannot unmap {name:?} while a transaction is open"
            )));
        }
        // The last process out checkpoints as it closes.
        match at {
            Some(i) => drop(m.more.remove(i)),
            None if m.more.is_empty() => drop(st.mapped.take()),
            None => {
                if !m.paused.is_empty() {
                    return Err(busy(format!(
                        "cannot unmap {name:?} while a transaction is paused"
                    )));
                }
                let (n, v) = m.more.remove(0);
                m.name = n;
                drop(std::mem::replace(&mut m.view, v));
            }
        }
        Ok(0)
    })
}

/// Begins a serializable transaction on the mapped region, owned by the
/// calling thread. A nested `xbegin` (same thread) is folded into the
/// outermost transaction. If another thread of this process has a
/// transaction open, waits until it ends (`xend`, or its thread exits: a
/// thread that exits with its transaction open has it rolled back, which
/// ends the wait) and then begins: a process runs one transaction at a
/// time, and its threads take turns, first come first served (a thread
/// that ends its transaction and calls `xbegin` again queues behind those
/// already waiting). While one thread's transaction is open, the other
/// threads (waiting or not) must leave the region's memory alone: their
/// loads see that transaction's uncommitted stores and their stores become
/// part of it (the region is one mapping per process, as in LIBXAC). Not
/// for signal handlers. Returns 0, or -1 with errno `EINVAL` if no region
/// is mapped (also when the region was unmapped or the calls shut down
/// during the wait), `EPERM` in a forked child that has not called
/// `xInit`.
#[unsafe(no_mangle)]
pub extern "C" fn xbegin() -> c_int {
    int_call("xbegin", || begin(Wait::Forever))
}

/// Pauses the calling thread's open transaction (TxOS+ `xpause`): the
/// region is then outside any transaction for this process, so this thread
/// may run other transactions (`xbegin` … `xend`, each its own) or other
/// work, and other threads may take their turn; the paused transaction's
/// stores stay invisible to all of them. `xresume` continues it with its
/// snapshot, reads and writes as they were, and its `xend` validates it as
/// if it had never been paused. A thread may pause several (they resume
/// newest first). Paused transactions of a thread that exits are rolled
/// back, as are those left at `xMunmap`/`xShutdown`. Returns 0, or -1 with
/// errno `EINVAL` outside a transaction, `EPERM` if it belongs to another
/// thread.
#[unsafe(no_mangle)]
pub extern "C" fn xpause() -> c_int {
    int_call("xpause", || {
        let mut g = state();
        let m = in_transaction(&mut g, "xpause")?;
        m.one_region("xpause")?;
        let p = m.view.pause()?;
        m.paused.push((std::thread::current().id(), p));
        m.owner = None;
        ENDED.notify_all();
        Ok(0)
    })
}

/// Resumes the calling thread's most recently paused transaction (TxOS+
/// `xresume`), waiting for its turn as `xbegin` does. Returns 0, or -1
/// with errno `EINVAL` if the thread has no paused transaction or has a
/// transaction open (end or pause it first; the paused one is then rolled
/// back), or as `xbegin`.
#[unsafe(no_mangle)]
pub extern "C" fn xresume() -> c_int {
    int_call("xresume", || {
        let me = std::thread::current().id();
        begin_then(Wait::Forever, |m| {
            let i = m
                .paused
                .iter()
                .rposition(|(t, _)| *t == me)
                .ok_or_else(|| Failure::invalid("this thread has no paused transaction"))?;
            let (_, p) = m.paused.remove(i);
            m.view.resume(p)?;
            Ok(())
        })
    })
}

/// `xbegin` that does not wait: -1 with errno `EBUSY` at once if another
/// thread's transaction is open or other threads wait in `xbegin` for
/// their turn; otherwise as `xbegin`.
#[unsafe(no_mangle)]
pub extern "C" fn xbegin_try() -> c_int {
    int_call("xbegin_try", || begin(Wait::No))
}

/// `xbegin` that waits at most `timeout_ms` milliseconds for its turn: -1
/// with errno `ETIMEDOUT` if another thread's transaction is still open
/// then, or other threads still wait ahead of it (0 waits not at all, as
/// `xbegin_try`, but fails with `ETIMEDOUT`); otherwise as `xbegin`.
#[unsafe(no_mangle)]
pub extern "C" fn xbegin_timed(timeout_ms: u64) -> c_int {
    int_call("xbegin_timed", || {
        let deadline = Instant::now().checked_add(Duration::from_millis(timeout_ms));
        begin(deadline.map_or(Wait::Forever, Wait::Until))
    })
}

/// How `begin` treats another thread's open transaction.
#[derive(Clone, Copy)]
enum Wait {
    No,
    Forever,
    Until(Instant),
}

/// Threads waiting in `xbegin`, first come first: the front one begins
/// when no transaction is open, so a thread that ends its transaction and
/// begins again at once cannot starve the others. Locked only while `STATE`
/// is held.
static QUEUE: Mutex<VecDeque<ThreadId>> = Mutex::new(VecDeque::new());

fn queue() -> MutexGuard<'static, VecDeque<ThreadId>> {
    QUEUE.lock().unwrap_or_else(|e| e.into_inner())
}

/// How many threads of this process wait in `xbegin` (for tests).
#[doc(hidden)]
pub fn xbegin_waiters() -> usize {
    let _g = state();
    queue().len()
}

/// Begins (or nests) the calling thread's transaction, waiting per `wait`.
fn begin(wait: Wait) -> Result<c_int, Failure> {
    begin_then(wait, |m| {
        if m.more.is_empty() {
            Ok(m.view.begin()?)
        } else {
            Ok(View::begin_group(&mut m.views())?)
        }
    })
}

/// Waits per `wait` for the calling thread's turn, then runs `start` (which
/// opens a transaction on the view) and makes the thread its owner.
fn begin_then(
    wait: Wait,
    start: impl FnOnce(&mut Mapped) -> Result<(), Failure>,
) -> Result<c_int, Failure> {
    let me = std::thread::current().id();
    let mut g = state();
    let mut queued = false;
    let turn = loop {
        match my_turn(&mut g, me) {
            Ok(true) => break Ok(()),
            Ok(false) => {}
            Err(e) => break Err(e),
        }
        let left = match wait {
            Wait::No => {
                break Err(busy(
                    "a transaction of another thread is open, or threads wait for their turn",
                ));
            }
            Wait::Forever => None,
            Wait::Until(deadline) => {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    break Err(Failure::new(
                        TXMAP_EBUSY,
                        libc::ETIMEDOUT,
                        "timed out: a transaction of another thread is still open, or \
                         threads wait ahead of this one",
                    ));
                }
                Some(left)
            }
        };
        if !queued {
            queue().push_back(me);
            queued = true;
        }
        g = match left {
            None => ENDED.wait(g).unwrap_or_else(|e| e.into_inner()),
            Some(left) => {
                ENDED
                    .wait_timeout(g, left)
                    .unwrap_or_else(|e| e.into_inner())
                    .0
            }
        };
    };
    if queued {
        queue().retain(|t| *t != me);
    }
    let begun = turn.and_then(|()| {
        let m = mapped(&mut g)?;
        start(&mut *m)?;
        Ok(m)
    });
    match begun {
        Ok(m) => {
            if m.owner.is_none() {
                m.owner = Some(me);
                // Registers the thread-exit rollback (once per thread).
                let _ = EXIT_GUARD.try_with(|e| e.0.set(Some(me)));
            }
            Ok(0)
        }
        Err(e) => {
            if queued {
                // It may have been the next in line: let the others look.
                ENDED.notify_all();
            }
            Err(e)
        }
    }
}

/// Whether thread `me` may begin (or nest) its transaction now: no other
/// thread's transaction is open and no thread waits before it.
fn my_turn(g: &mut Option<Xac>, me: ThreadId) -> Result<bool, Failure> {
    let st = initialized(g)?;
    if st.pid != std::process::id() {
        // The owner may be a thread of the parent: never wait for it.
        return Err(Failure::new(
            crate::TXMAP_EFORK,
            libc::EPERM,
            "xInit was called by the parent process; call xInit in this child",
        ));
    }
    let m = mapped(g)?;
    Ok(match m.owner {
        Some(o) => o == me,
        None => queue().front().is_none_or(|t| *t == me),
    })
}

/// Ends a transaction. The outermost `xend` returns `XAC_COMMITTED` once the
/// commit is as durable as `xInit` asked, or `XAC_ABORTED` after a conflict
/// with a concurrent commit, after `xabort`, or when the region's snapshot
/// limit expired the transaction's snapshot (nothing of the transaction is
/// visible; the caller may retry). An inner `xend` returns `XAC_COMMITTED`.
/// -1 with errno on error: `EINVAL` outside a transaction, `EPERM` if the
/// transaction belongs to another thread, `EIO` etc. if the log could not be
/// written (the transaction is over; it may be visible but not durable, and
/// the region must be unmapped and mapped again to recover).
#[unsafe(no_mangle)]
pub extern "C" fn xend() -> c_int {
    int_call("xend", || {
        let mut g = state();
        let m = mapped(&mut g)?;
        own_transaction(m, "xend")?;
        let r = if m.more.is_empty() {
            m.view.commit()
        } else {
            View::commit_group(&mut m.views())
        };
        if !m.view.in_transaction() {
            m.owner = None;
            ENDED.notify_all();
        }
        match r {
            Ok(()) => Ok(XAC_COMMITTED),
            Err(Error::Conflict | Error::Aborted | Error::SnapshotTooOld { .. }) => Ok(XAC_ABORTED),
            Err(e) => Err(e.into()),
        }
    })
}

/// Dooms the whole open transaction (whatever the nesting depth): its writes
/// are discarded at once, and the outermost `xend` returns `XAC_ABORTED`.
/// The transaction stays open until then and its reads see its snapshot
/// (without the discarded writes). Returns 0, or -1 with errno `EINVAL` outside a transaction,
/// `EPERM` if it belongs to another thread.
#[unsafe(no_mangle)]
pub extern "C" fn xabort() -> c_int {
    int_call("xabort", || {
        let mut g = state();
        let m = mapped(&mut g)?;
        own_transaction(m, "xabort")?;
        for v in m.views() {
            v.abort()?;
        }
        Ok(0)
    })
}

/// Advisory: the open transaction will read (`XAC_READ`) or write
/// (`XAC_WRITE`) the `length` bytes at `addr` in the mapped region; the pages
/// are brought in and tracked in one call instead of one page fault each.
/// Returns 0, or -1 with errno `EINVAL` (outside a transaction, a bad access
/// or a range outside the region) or `EPERM` (another thread's transaction).
#[unsafe(no_mangle)]
#[allow(non_snake_case)]
pub extern "C" fn setPageAccess(addr: *mut c_void, length: usize, access: c_int) -> c_int {
    int_call("setPageAccess", || {
        let mut g = state();
        let m = mapped(&mut g)?;
        own_transaction(m, "setPageAccess")?;
        let a = addr as usize;
        let mut views = m.views();
        let i = views
            .iter()
            .position(|v| a >= v.base() as usize && a - (v.base() as usize) < v.len())
            .unwrap_or(0);
        native::set_page_access(views.swap_remove(i), addr, length, access)?;
        Ok(0)
    })
}

/// The calling thread's open transaction on the mapped region, for `call`.
fn in_transaction<'a>(g: &'a mut Option<Xac>, call: &str) -> Result<&'a mut Mapped, Failure> {
    let m = mapped(g).map_err(|e| Failure::invalid(format!("{call}: {}", e.msg)))?;
    own_transaction(m, call)?;
    Ok(m)
}

/// The heap arena the LIBXAC calls of this process allocate from and free
/// to: one per view slot, and a slot is held by one live view in all
/// processes (lowest free first), so up to `ARENAS` processes each get an
/// arena of their own and their allocating transactions touch no common
/// heap page (the heap's per-thread choice is offset by the process id, so
/// processes meet in one arena whenever their ids agree modulo `ARENAS`).
fn arena(m: &Mapped) -> u64 {
    m.view.slot() as u64
}

/// Region offset of `ptr`, which must point into the mapped region.
fn offset_of(m: &Mapped, ptr: *mut c_void, call: &str) -> Result<u64, Failure> {
    let base = m.view.base() as usize;
    let p = ptr as usize;
    if p < base || p - base >= m.view.len() {
        return Err(Failure::invalid(format!(
            "{call}: {ptr:p} is not in the mapped region ({:p}, {} bytes)",
            m.view.base(),
            m.view.len()
        )));
    }
    Ok((p - base) as u64)
}

/// The error for system call `op` on `path` that failed with `source`.
fn io_error(op: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Error {
    Error::Io {
        op,
        path: path.into(),
        source,
    }
}

fn no_memory(msg: String) -> Failure {
    Failure::new(TXMAP_EINVAL, libc::ENOMEM, msg)
}

/// Allocates `size` zeroed bytes in the mapped region, inside the calling
/// thread's transaction, and returns a pointer to them (16-byte aligned;
/// blocks of 4080 bytes or more start 16 bytes into a page). The
/// allocation is part of the transaction: if it aborts (conflict, `xabort`)
/// the block is free again and nothing of it remains. The first call in a
/// region formats the transactional heap in its first 40 KiB (which must
/// still be zero: keep the program's own data in heap blocks, found again
/// through `xRoot`). Each process allocates from an arena of its own, so
/// allocating transactions of different processes do not conflict over the
/// heap's bookkeeping. When the heap is full the region grows (doubling),
/// inside the transaction, at the same address; growth is not undone if the
/// transaction aborts (the file is just larger, the new bytes zero).
///
/// Returns NULL with errno `EINVAL` outside a transaction (or if no region
/// is mapped, or the region's first 40 KiB hold other data), `EPERM` if the
/// transaction belongs to another thread, `ENOMEM` if `size` cannot fit in
/// the region's maximum size, or the errno of a failed growth; the
/// transaction stays open, and may have changed the heap if the error came
/// from damaged heap bytes (abort it then).
#[unsafe(no_mangle)]
#[allow(non_snake_case)]
pub extern "C" fn xMalloc(size: usize) -> *mut c_void {
    heap_call("xMalloc", size, alloc::alloc_in)
}

/// Runs heap call `call` (`xMalloc`, `xRoot`) for `size` bytes in the
/// calling thread's transaction; a pointer to the offset it returns, or
/// NULL and errno.
fn heap_call(
    call: &str,
    size: usize,
    f: impl FnOnce(&mut View, u64, u64) -> Result<u64, Error>,
) -> *mut c_void {
    let r = guarded(call, || {
        let mut g = state();
        let m = in_transaction(&mut g, call)?;
        let max = m.view.region().max_size();
        let size = size as u64;
        if size > alloc::MAX_ALLOC || size >= max.saturating_sub(alloc::HEAP_START) {
            return Err(no_memory(format!(
                "{size} bytes do not fit in the region's maximum size of {max} bytes"
            )));
        }
        let a = arena(m);
        let off = f(&mut m.view, size, a)?;
        // SAFETY: `off` lies inside the view's mapped range (the heap
        // checked it against the view's length), so the pointer stays in
        // the view's reservation.
        Ok(unsafe { m.view.base().add(off as usize) }.cast::<c_void>())
    });
    r.unwrap_or_else(|e| {
        set_errno(e.errno);
        std::ptr::null_mut()
    })
}

/// Frees a block `xMalloc` returned, inside the calling thread's
/// transaction: its bytes are zeroed and it goes on this process's free
/// list. Undone if the transaction aborts. `xFree(NULL)` does nothing and
/// returns 0 (also outside a transaction). Returns 0, or -1 with errno
/// `EINVAL` outside a transaction or when `ptr` is not a live allocation
/// (outside the region, not the start of a block, already freed, or the
/// root object) — the heap is left as it was — and `EPERM` if the
/// transaction belongs to another thread. The heap recognises its blocks by
/// their headers, aligned to their size: a pointer into the middle of a
/// block whose bytes there mimic such a header cannot be told apart.
#[unsafe(no_mangle)]
#[allow(non_snake_case)]
pub extern "C" fn xFree(ptr: *mut c_void) -> c_int {
    if ptr.is_null() {
        return 0;
    }
    int_call("xFree", || {
        let mut g = state();
        let m = in_transaction(&mut g, "xFree")?;
        let off = offset_of(m, ptr, "xFree")?;
        if alloc::root_offset(&m.view).ok().flatten() == Some(off) {
            return Err(Failure::invalid(format!(
                "xFree: {ptr:p} is the root object (xRoot), which is never freed"
            )));
        }
        let a = arena(m);
        alloc::free_in(&mut m.view, off, a).map_err(|e| {
            let mut f = Failure::from(e);
            f.msg = format!("{ptr:p}: {}", f.msg);
            f
        })?;
        Ok(0)
    })
}

/// The region's root object, where a program keeps what it needs to find
/// its data again (pointers into the region stay valid as long as the
/// region is mapped at the same address; offsets from the base always do):
/// `size` zeroed bytes allocated in the calling thread's transaction on
/// first use (formatting the heap, as `xMalloc` does); later calls, in any
/// process, return the same object and fail if `size` is larger than the
/// first. Returns NULL with errno `EINVAL` (outside a transaction, or
/// `size` larger than the first), `EPERM` (another thread's transaction)
/// or `ENOMEM` (as `xMalloc`).
#[unsafe(no_mangle)]
#[allow(non_snake_case)]
pub extern "C" fn xRoot(size: usize) -> *mut c_void {
    heap_call("xRoot", size, alloc::root_in)
}

/// Fails if a transaction is open and belongs to another thread.
fn not_another_threads(m: &Mapped, call: &str) -> Result<(), Failure> {
    match m.owner {
        Some(_) => own_transaction(m, call),
        None => Ok(()),
    }
}

/// Ordered commits (TxOS+): the process's next commit is number `number`
/// of order group `group` (0..64). Its `xend` waits until every lower
/// number of the group committed (in any process) or was skipped; on a
/// conflict `xend` returns `XAC_ABORTED` and the number stays held: run
/// the transaction again. A number whose process dies, or that
/// `xMunmap`/`xShutdown` leave held, is skipped when its turn comes. Since
/// a process runs one transaction at a time, its numbers must be taken in
/// increasing order (a thread waiting in `xend` for its turn keeps the
/// process's other threads waiting in `xbegin`): run the parallel workers
/// as processes. Returns 0, or -1 with errno `ECANCELED` if the number's
/// turn has passed, `EINVAL` if the process holds a number, the group does
/// not exist or no region is mapped, `EPERM` if another thread's
/// transaction is open. `xend` fails with `ECANCELED` when the number was
/// skipped (`txmap_order_skip_to`) before it could commit.
#[unsafe(no_mangle)]
pub extern "C" fn xorder(group: u32, number: u64) -> c_int {
    int_call("xorder", || {
        let mut g = state();
        let m = mapped(&mut g)?;
        not_another_threads(m, "xorder")?;
        m.one_region("xorder")?;
        m.view.order(group, number)?;
        Ok(0)
    })
}

/// `xorder` with the next number nobody has taken in `group`, which it
/// stores in `*number`: taking and claiming are one step, so a number
/// handed out is held until it commits or is skipped, even if the process
/// dies. Returns 0, or -1 with errno as `xorder` (`EINVAL` also for a NULL
/// `number`).
///
/// # Safety
/// `number` is NULL or writable.
#[unsafe(no_mangle)]
#[allow(non_snake_case)]
pub unsafe extern "C" fn xorderNext(group: u32, number: *mut u64) -> c_int {
    int_call("xorderNext", || {
        if number.is_null() {
            return Err(Failure::null("number"));
        }
        let mut g = state();
        let m = mapped(&mut g)?;
        not_another_threads(m, "xorderNext")?;
        m.one_region("xorderNext")?;
        let n = m.view.order_next(group)?;
        // SAFETY: checked non-NULL; writable per the contract.
        unsafe { number.write(n) };
        Ok(0)
    })
}
