//! The state behind `txmap.View`: the Rust view, the transaction nesting
//! the bindings keep beside it, and the helpers every Python class that
//! works in a view's transactions shares (below `view.rs`, which holds the
//! Python methods, and the modules it calls: `buffer`, `collections`, `ops`).

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, TryLockError};

use pyo3::prelude::*;
use pyo3::types::PyBytes;
use txmap::{Isolation, TxnOptions};

use crate::{invalid, to_py, txn_error};

/// The Rust view and the transaction state the bindings keep beside it.
pub(crate) struct State {
    pub(crate) view: Option<txmap::View>,
    /// Nesting depth of the current transaction (0: none).
    pub(crate) depth: u32,
    /// Counts outermost transactions, so a context manager or an iterator
    /// can tell whether the transaction it belongs to is still the current one.
    pub(crate) serial: u64,
    /// The highest serial handed out (a resumed transaction takes its old
    /// one back; new ones always take a fresh one).
    pub(crate) high: u64,
    pub(crate) read_only: bool,
    /// (depth, serial, read-only) of each enclosing transaction paused by an
    /// open nested top action (`nta_begin`), innermost last.
    pub(crate) nta: Vec<(u32, u64, bool)>,
}

/// One mapping of a region, for one thread at a time (open one per thread).
///
/// Inside a transaction, loads see one consistent snapshot and stores stay
/// private until commit. The view exposes the buffer protocol inside a
/// transaction: ``memoryview(view)`` and ``numpy.frombuffer(view, ...)`` are
/// the region's bytes themselves (no copy); the first touch of each page is
/// caught by page protection and tracked.
///
/// A memoryview or array taken from a view keeps pointing at the view's
/// mapping, whose address never changes, and may be used again in any
/// later transaction of the same view. Outside a transaction, reading
/// through it reads committed data (not a consistent snapshot), and storing
/// through it stops the process with the message ``txmap: store to a view
/// outside a transaction``: the store is never applied. Taking a buffer
/// outside a transaction raises ``BufferError``, and so does closing a view
/// while buffers of it are alive.
#[pyclass(module = "txmap", frozen)]
pub struct View {
    /// The `txmap.Region` it maps (typed in `view.rs`, above `region.rs`).
    pub(crate) region: Py<PyAny>,
    pub(crate) path: PathBuf,
    pub(crate) state: Mutex<State>,
    pub(crate) exports: AtomicUsize,
    /// Tells this view apart from others (paused transactions, back-off
    /// seeds) without asking txmap for its address: a view whose address
    /// was asked for maps the whole region file in its first read-only
    /// transaction, which only plain loads (`address`, buffers) need.
    pub(crate) id: usize,
}

/// A locked view state.
pub(crate) type Locked<'a> = MutexGuard<'a, State>;

impl State {
    /// The open view, or an error if it was closed.
    pub(crate) fn view(
        &mut self,
        py: Python<'_>,
        path: &std::path::Path,
    ) -> PyResult<&mut txmap::View> {
        self.view
            .as_mut()
            .ok_or_else(|| txn_error(py, "the view is closed", path))
    }

    /// The open view inside a transaction (`what` names the call).
    pub(crate) fn in_txn(
        &mut self,
        py: Python<'_>,
        path: &std::path::Path,
        what: &str,
    ) -> PyResult<&mut txmap::View> {
        if self.view.is_some() && self.depth == 0 {
            return Err(txn_error(
                py,
                format!("{what} outside a transaction (use `with view.transaction():`)"),
                path,
            ));
        }
        self.view(py, path)
    }

    /// Catches up with the Rust view after a call that may have ended the
    /// transaction (an outermost commit, a rollback).
    fn resync(&mut self) {
        if let Some(v) = &self.view
            && !v.in_transaction()
        {
            self.depth = 0;
        }
    }
}

pub(crate) fn txn_options(
    py: Python<'_>,
    read_only: bool,
    isolation: &str,
    path: &std::path::Path,
) -> PyResult<TxnOptions> {
    let isolation = match isolation {
        "serializable" => Isolation::Serializable,
        "snapshot" => Isolation::Snapshot,
        _ => {
            return Err(invalid(
                py,
                format!("isolation must be \"serializable\" or \"snapshot\", not {isolation:?}"),
                path,
            ));
        }
    };
    Ok(TxnOptions {
        read_only,
        isolation,
    })
}

/// A region offset and length argument.
pub(crate) fn range(
    py: Python<'_>,
    off: i128,
    len: i128,
    path: &std::path::Path,
) -> PyResult<(u64, usize)> {
    if off < 0 || len < 0 || off > u64::MAX as i128 || len > isize::MAX as i128 {
        return Err(invalid(
            py,
            format!("offset and length must be non-negative (got {off}, {len})"),
            path,
        ));
    }
    Ok((off as u64, len as usize))
}

/// Bytes of a `bytes`, `bytearray` or other contiguous buffer argument.
pub(crate) fn bytes_arg(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<Vec<u8>> {
    if let Ok(b) = obj.cast::<PyBytes>() {
        return Ok(b.as_bytes().to_vec());
    }
    if let Ok(b) = obj.cast::<pyo3::types::PyByteArray>() {
        return Ok(b.to_vec());
    }
    Err(pyo3::exceptions::PyTypeError::new_err(format!(
        "{what} must be bytes or bytearray, not {}",
        obj.get_type().name()?
    )))
}

/// The SIGSEGV handler txmap installed (recorded when the first view opened).
static HANDLER: AtomicUsize = AtomicUsize::new(0);

/// The SIGSEGV handler installed now.
fn sigsegv_handler() -> usize {
    // SAFETY: sigaction with a NULL new action only reads the current one
    // into a zeroed struct.
    unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        if libc::sigaction(libc::SIGSEGV, std::ptr::null(), &mut old) != 0 {
            return 0;
        }
        old.sa_sigaction
    }
}

/// The next view's `id`.
static NEXT_ID: AtomicUsize = AtomicUsize::new(1);

impl View {
    pub(crate) fn new(region: Py<PyAny>, v: txmap::View, path: PathBuf) -> View {
        // Opening the view installed txmap's handler (once per process).
        let _ = HANDLER.compare_exchange(0, sigsegv_handler(), Ordering::AcqRel, Ordering::Acquire);
        View {
            region,
            path,
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            state: Mutex::new(State {
                view: Some(v),
                depth: 0,
                serial: 0,
                high: 0,
                read_only: false,
                nta: Vec::new(),
            }),
            exports: AtomicUsize::new(0),
        }
    }

    /// Locks the state; another thread inside a call on this view is an error.
    pub(crate) fn lock(&self, py: Python<'_>) -> PyResult<Locked<'_>> {
        match self.state.try_lock() {
            Ok(g) => Ok(g),
            Err(TryLockError::Poisoned(p)) => Ok(p.into_inner()),
            Err(TryLockError::WouldBlock) => Err(txn_error(
                py,
                "the view is in use by another thread at this moment: open one view per thread",
                &self.path,
            )),
        }
    }

    pub(crate) fn begin_with(&self, py: Python<'_>, opts: TxnOptions) -> PyResult<u64> {
        let mut st = self.lock(py)?;
        // Something that took SIGSEGV over after txmap (`faulthandler.enable()`
        // after the first view opened, `signal.signal`) would turn the first
        // touch of a page into a crash: refuse to begin instead.
        if st.depth == 0 && sigsegv_handler() != HANDLER.load(Ordering::Acquire) {
            return Err(crate::raise(
                py,
                "Error",
                format!(
                    "{}: the SIGSEGV handler txmap installed was replaced after the first view \
                     opened (faulthandler.enable() or signal.signal(SIGSEGV, ...) after that?); \
                     page tracking would crash: enable faulthandler before opening views",
                    self.path.display()
                ),
                &self.path,
            ));
        }
        let path = &self.path;
        let v = st.view(py, path)?;
        v.begin_with(opts).map_err(|e| to_py(py, e, path))?;
        if st.depth == 0 {
            st.high += 1;
            st.serial = st.high;
            st.read_only = opts.read_only;
        }
        st.depth += 1;
        Ok(st.serial)
    }

    /// Commits one level; the outermost with the GIL released.
    pub(crate) fn commit_level(&self, py: Python<'_>) -> PyResult<()> {
        let mut st = self.lock(py)?;
        let path = &self.path;
        let depth = st.depth;
        if depth == 1 && !st.nta.is_empty() {
            return Err(txn_error(
                py,
                "commit inside a nested top action: end it with nta_end() (or nta_abort())",
                path,
            ));
        }
        let v = st.in_txn(py, path, "commit")?;
        let r = if depth > 1 {
            v.commit()
        } else {
            py.detach(|| v.commit())
        };
        if depth > 1 && r.is_ok() {
            st.depth -= 1;
        }
        st.resync();
        r.map_err(|e| to_py(py, e, path))
    }

    /// Ends the transaction now, whatever its depth, discarding its stores.
    pub(crate) fn rollback_all(&self, py: Python<'_>) -> PyResult<()> {
        let mut st = self.lock(py)?;
        let open = std::mem::take(&mut st.nta);
        if let Some(v) = st.view.as_mut() {
            // Open nested top actions first (each resumes its parent).
            for _ in &open {
                let _ = v.nta_abort();
            }
            v.rollback();
        }
        st.depth = 0;
        Ok(())
    }

    /// Leaves one nested level after an exception: the whole transaction is
    /// doomed (its stores discarded at once; the outermost commit raises Aborted).
    pub(crate) fn abort_level(&self, py: Python<'_>) -> PyResult<()> {
        let mut st = self.lock(py)?;
        let path = &self.path;
        let v = st.in_txn(py, path, "abort")?;
        v.abort().map_err(|e| to_py(py, e, path))?;
        v.commit().map_err(|e| to_py(py, e, path))?;
        st.depth -= 1;
        st.resync();
        Ok(())
    }

    /// (depth, serial) now.
    pub(crate) fn position(&self, py: Python<'_>) -> PyResult<(u32, u64)> {
        let st = self.lock(py)?;
        Ok((st.depth, st.serial))
    }
}

/// Randomised exponential backoff between retries (2 µs doubling to 10 ms),
/// slept with the GIL released.
pub(crate) struct Backoff {
    state: u64,
    limit_us: u64,
}

impl Backoff {
    pub(crate) fn new(seed: u64) -> Backoff {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        Backoff {
            state: seed ^ t ^ (std::process::id() as u64) << 32 | 1,
            limit_us: 2,
        }
    }

    pub(crate) fn wait(&mut self, py: Python<'_>) {
        // xorshift64
        self.state ^= self.state << 13;
        self.state ^= self.state >> 7;
        self.state ^= self.state << 17;
        let us = self.state % self.limit_us;
        self.limit_us = (self.limit_us * 2).min(10_000);
        py.detach(|| {
            if us < 2 {
                std::thread::yield_now();
            } else {
                std::thread::sleep(std::time::Duration::from_micros(us));
            }
        });
    }
}

pub(crate) fn is_retryable(py: Python<'_>, e: &PyErr) -> PyResult<bool> {
    let conflict = crate::errors(py)?.getattr("Conflict")?;
    e.get_type(py).is_subclass(&conflict)
}
