//! `txmap.View` (one mapping of a region, with the buffer protocol) and
//! `txmap.Transaction` (its context manager): the Python methods. The state
//! and its helpers are in `viewstate.rs`.

use std::sync::Mutex;
use std::sync::atomic::Ordering;

use pyo3::exceptions::PyBufferError;
#[cfg(feature = "py311")]
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyTuple};
use txmap::collections::alloc;
use txmap::{PageAccess, TxnOptions};

use crate::region::{Region, positive};
use crate::viewstate::{Backoff, View, bytes_arg, is_retryable, range, txn_options};
use crate::{invalid, to_py, txn_error};

#[pymethods]
impl View {
    /// A transaction as a context manager: ``with view.transaction():``
    /// begins on entry and commits on exit (the GIL is released while the
    /// commit waits for its log sync). An exception in the block aborts it
    /// and propagates. A conflict raises ``Conflict`` at exit: nothing of the
    /// transaction is visible then. Nested transactions fold into the
    /// outermost. ``read_only=True``: never conflicts, and buffers taken in
    /// it are read-only. ``isolation="snapshot"`` allows write skew.
    #[pyo3(signature = (*, read_only = false, isolation = "serializable"))]
    fn transaction(
        slf: &Bound<'_, Self>,
        read_only: bool,
        isolation: &str,
    ) -> PyResult<Transaction> {
        let opts = txn_options(slf.py(), read_only, isolation, &slf.get().path)?;
        Ok(Transaction {
            view: slf.clone().unbind(),
            opts,
            serial: Mutex::new(None),
        })
    }

    /// Begins a transaction (nested calls fold into the outermost).
    #[pyo3(signature = (*, read_only = false, isolation = "serializable"))]
    fn begin(&self, py: Python<'_>, read_only: bool, isolation: &str) -> PyResult<()> {
        let opts = txn_options(py, read_only, isolation, &self.path)?;
        self.begin_with(py, opts).map(|_| ())
    }

    /// Commits (the outermost level with the GIL released). Raises
    /// ``Conflict`` if a concurrent commit invalidated what the transaction
    /// read; the transaction is over either way.
    fn commit(&self, py: Python<'_>) -> PyResult<()> {
        self.commit_level(py)
    }

    /// Ends the transaction now, discarding its stores, whatever its depth.
    /// Outside a transaction it does nothing.
    fn abort(&self, py: Python<'_>) -> PyResult<()> {
        self.rollback_all(py)
    }

    /// Runs ``fn(view)`` in a transaction and commits, retrying on
    /// ``Conflict`` with randomised exponential backoff (the GIL released
    /// while waiting), at most ``attempts`` times if given. Returns what
    /// ``fn`` returned. Another exception aborts and propagates. Inside a
    /// transaction, ``fn`` simply runs in it (no retry: the outer one retries).
    #[pyo3(signature = (fn_, *, read_only = false, isolation = "serializable", attempts = None))]
    fn run(
        slf: &Bound<'_, Self>,
        fn_: &Bound<'_, PyAny>,
        read_only: bool,
        isolation: &str,
        attempts: Option<u64>,
    ) -> PyResult<Py<PyAny>> {
        let py = slf.py();
        let me = slf.get();
        let opts = txn_options(py, read_only, isolation, &me.path)?;
        if attempts == Some(0) {
            return Err(invalid(py, "attempts must be at least 1", &me.path));
        }
        if me.position(py)?.0 > 0 {
            return Ok(fn_.call1((slf,))?.unbind());
        }
        let mut backoff = Backoff::new(me.id as u64);
        let mut tried = 0u64;
        loop {
            tried += 1;
            let serial = me.begin_with(py, opts)?;
            let r = fn_.call1((slf,));
            let current = me.position(py)? == (1, serial);
            let r = match r {
                Ok(x) if current => me.commit_level(py).map(|_| x.unbind()),
                Ok(_) => Err(txn_error(
                    py,
                    "the function given to run() ended its transaction itself",
                    &me.path,
                )),
                Err(e) => {
                    if me.position(py)?.1 == serial {
                        me.rollback_all(py)?;
                    }
                    Err(e)
                }
            };
            match r {
                Err(e) if is_retryable(py, &e)? && attempts.is_none_or(|a| tried < a) => {
                    backoff.wait(py)
                }
                other => return other,
            }
        }
    }

    /// Bytes ``[offset, offset+length)`` of the transaction's snapshot (a copy).
    fn read<'py>(
        &self,
        py: Python<'py>,
        offset: i128,
        length: i128,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let (off, len) = range(py, offset, length, &self.path)?;
        let mut st = self.lock(py)?;
        let v = st.in_txn(py, &self.path, "read")?;
        let b = v.slice(off, len).map_err(|e| to_py(py, e, &self.path))?;
        Ok(PyBytes::new(py, b))
    }

    /// Writes ``data`` at ``offset`` (private until commit).
    fn write(&self, py: Python<'_>, offset: i128, data: &Bound<'_, PyAny>) -> PyResult<()> {
        let data = bytes_arg(data, "data")?;
        let (off, _) = range(py, offset, data.len() as i128, &self.path)?;
        let mut st = self.lock(py)?;
        let ro = st.read_only;
        let v = st.in_txn(py, &self.path, "write")?;
        if ro {
            return Err(txn_error(
                py,
                "write in a read-only transaction",
                &self.path,
            ));
        }
        v.slice_mut(off, data.len())
            .map_err(|e| to_py(py, e, &self.path))?
            .copy_from_slice(&data);
        Ok(())
    }

    /// Declares that the transaction will read (or write) ``[offset,
    /// offset+length)``: its pages are brought in at once instead of one
    /// page fault each. Do this before a large numpy operation, or before
    /// handing the memory to a system call (which page protection cannot
    /// follow).
    #[pyo3(signature = (offset, length, *, write = false))]
    fn set_page_access(
        &self,
        py: Python<'_>,
        offset: i128,
        length: i128,
        write: bool,
    ) -> PyResult<()> {
        let (off, len) = range(py, offset, length, &self.path)?;
        let mut st = self.lock(py)?;
        let ro = st.read_only;
        let v = st.in_txn(py, &self.path, "set_page_access")?;
        if ro && write {
            return Err(txn_error(
                py,
                "write access in a read-only transaction",
                &self.path,
            ));
        }
        let a = if write {
            PageAccess::Write
        } else {
            PageAccess::Read
        };
        v.set_page_access(off, len, a)
            .map_err(|e| to_py(py, e, &self.path))
    }

    /// Allocates ``size`` zeroed bytes from the region's transactional heap
    /// (inside a transaction: an abort frees it again); returns the offset.
    fn alloc(&self, py: Python<'_>, size: i128) -> PyResult<u64> {
        let size = positive(py, "size", size, &self.path)?;
        let mut st = self.lock(py)?;
        let v = st.in_txn(py, &self.path, "alloc")?;
        alloc::alloc(v, size).map_err(|e| to_py(py, e, &self.path))
    }

    /// Frees a block ``alloc`` returned.
    fn free(&self, py: Python<'_>, offset: i128) -> PyResult<()> {
        let (off, _) = range(py, offset, 0, &self.path)?;
        let mut st = self.lock(py)?;
        let v = st.in_txn(py, &self.path, "free")?;
        alloc::free(v, off).map_err(|e| to_py(py, e, &self.path))
    }

    /// The region's root object: ``size`` zeroed bytes allocated from the
    /// heap on first use; later calls return the same offset.
    fn root(&self, py: Python<'_>, size: i128) -> PyResult<u64> {
        let size = positive(py, "size", size, &self.path)?;
        let mut st = self.lock(py)?;
        let v = st.in_txn(py, &self.path, "root")?;
        alloc::root(v, size).map_err(|e| to_py(py, e, &self.path))
    }

    /// The named map structure ``name`` (see ``txmap.Map``). ``kind``:
    /// ``"btree"``, ``"cobtree"`` or ``"lhash"``; None takes whatever kind
    /// exists (a B+-tree if it is created). With ``create=False`` a missing
    /// name raises ``KeyError``. Outside a transaction it runs one of its own.
    #[pyo3(signature = (name, kind = None, *, create = true))]
    fn map(
        slf: &Bound<'_, Self>,
        name: &str,
        kind: Option<&str>,
        create: bool,
    ) -> PyResult<crate::collections::Map> {
        crate::collections::open_map(slf, name, kind, create)
    }

    /// The named array list ``name`` of ``itemsize``-byte elements (see
    /// ``txmap.Array``). ``itemsize`` is needed only to create it.
    #[pyo3(signature = (name, itemsize = None, *, create = true))]
    fn array(
        slf: &Bound<'_, Self>,
        name: &str,
        itemsize: Option<i128>,
        create: bool,
    ) -> PyResult<crate::collections::Array> {
        crate::collections::open_array(slf, name, itemsize, create)
    }

    /// The named structures in the region, as (name, kind) pairs.
    fn names<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let mut st = self.lock(py)?;
        let v = st.in_txn(py, &self.path, "names")?;
        let out = PyList::empty(py);
        if !alloc::is_formatted(v).map_err(|e| to_py(py, e, &self.path))? {
            return Ok(out);
        }
        for e in alloc::catalog(v).map_err(|e| to_py(py, e, &self.path))? {
            out.append((e.name, e.kind.name()))?;
        }
        Ok(out)
    }

    /// Grows the region to at least ``size`` bytes and maps the new part here.
    fn grow(&self, py: Python<'_>, size: i128) -> PyResult<()> {
        let size = positive(py, "size", size, &self.path)?;
        let mut st = self.lock(py)?;
        let v = st.view(py, &self.path)?;
        py.detach(|| v.grow(size))
            .map_err(|e| to_py(py, e, &self.path))
    }

    /// Pauses the open transaction (whatever its nesting depth) and returns
    /// it as a ``Paused``: the view is then outside any transaction, free for
    /// other transactions (each its own) or committed reads, and the paused
    /// transaction's stores are invisible to them. ``resume`` continues it
    /// with its snapshot, reads and writes intact; its commit validates it
    /// as if it had never been paused. A ``Paused`` dropped (or
    /// ``discard``-ed) without resuming is rolled back.
    fn pause(&self, py: Python<'_>) -> PyResult<crate::ops::Paused> {
        crate::ops::pause(self, py)
    }

    /// Continues a transaction ``pause`` returned (from this view or another
    /// view of the same region in this process), outside a transaction.
    fn resume(&self, py: Python<'_>, paused: &crate::ops::Paused) -> PyResult<()> {
        crate::ops::resume(self, py, paused)
    }

    /// Adds ``delta`` (wrapping; a negative one subtracts) to the unsigned
    /// 64-bit little-endian word at ``offset`` (8-byte aligned) without
    /// reading it: applied again at commit, under the commit lock, to the
    /// newest committed value, so transactions that only add to a counter
    /// never conflict on it. Reading the word in the same transaction makes
    /// its page validated as usual.
    fn add_u64(&self, py: Python<'_>, offset: i128, delta: i128) -> PyResult<()> {
        crate::ops::commute_int(self, py, txmap::ops::ADD_U64, offset, delta, true)
    }

    /// ``add_u64`` for a signed 64-bit word.
    fn add_i64(&self, py: Python<'_>, offset: i128, delta: i128) -> PyResult<()> {
        crate::ops::commute_int(self, py, txmap::ops::ADD_I64, offset, delta, false)
    }

    /// Lowers the unsigned 64-bit word at ``offset`` to ``value`` if that is
    /// smaller, commutatively (see ``add_u64``).
    fn min_u64(&self, py: Python<'_>, offset: i128, value: i128) -> PyResult<()> {
        crate::ops::commute_int(self, py, txmap::ops::MIN_U64, offset, value, true)
    }

    /// Raises the unsigned 64-bit word at ``offset`` to ``value`` if that is
    /// larger, commutatively (see ``add_u64``).
    fn max_u64(&self, py: Python<'_>, offset: i128, value: i128) -> PyResult<()> {
        crate::ops::commute_int(self, py, txmap::ops::MAX_U64, offset, value, true)
    }

    /// ``min_u64`` for a signed 64-bit word.
    fn min_i64(&self, py: Python<'_>, offset: i128, value: i128) -> PyResult<()> {
        crate::ops::commute_int(self, py, txmap::ops::MIN_I64, offset, value, false)
    }

    /// ``max_u64`` for a signed 64-bit word.
    fn max_i64(&self, py: Python<'_>, offset: i128, value: i128) -> PyResult<()> {
        crate::ops::commute_int(self, py, txmap::ops::MAX_I64, offset, value, false)
    }

    /// Runs the operation registered under ``op`` with argument bytes
    /// ``args`` in the transaction at once, and logs it as one operation
    /// record (recovery runs it again). ``op``: a built-in one
    /// (``txmap.ADD_U64`` …, arguments ``struct.pack("<QQ", offset,
    /// operand)``) or one registered by Rust code in this process
    /// (``txmap.is_registered``); Python functions cannot be registered.
    /// Needs a serializable transaction.
    fn apply(&self, py: Python<'_>, op: u32, args: &Bound<'_, PyAny>) -> PyResult<()> {
        crate::ops::apply(self, py, op, args)
    }

    /// Runs ``fn(view)`` as a nested top action of the open transaction: a
    /// transaction of its own on this view that commits at once, visible to
    /// everyone (retried, calling ``fn`` again, on ``Conflict``), while the
    /// enclosing one is paused. Its commit names its logical undo: the
    /// operation ``undo`` (a built-in one such as ``txmap.ADD_U64``, or one
    /// registered in Rust) with argument bytes ``undo_args``. If the
    /// enclosing transaction then aborts or fails to commit, the undo runs
    /// as a compensating commit; if the process dies first, the next
    /// process to open the region first runs it. Returns what ``fn``
    /// returned; an exception in ``fn`` rolls the action back and
    /// propagates.
    fn nested_top(
        slf: &Bound<'_, Self>,
        fn_: &Bound<'_, PyAny>,
        undo: u32,
        undo_args: &Bound<'_, PyAny>,
    ) -> PyResult<Py<PyAny>> {
        crate::ops::nested_top(slf, fn_, undo, undo_args)
    }

    /// Begins a nested top action (the bracketing form of ``nested_top``):
    /// pauses the open transaction and begins one of the action's own.
    fn nta_begin(&self, py: Python<'_>, undo: u32, undo_args: &Bound<'_, PyAny>) -> PyResult<()> {
        crate::ops::nta_begin(self, py, undo, undo_args)
    }

    /// Commits the nested top action begun last (its undo in its record)
    /// and resumes the enclosing transaction. On ``Conflict`` the action
    /// left no trace and the enclosing transaction is resumed all the same.
    fn nta_end(&self, py: Python<'_>) -> PyResult<()> {
        crate::ops::nta_finish(self, py, true)
    }

    /// Rolls back the nested top action begun last and resumes the
    /// enclosing transaction.
    fn nta_abort(&self, py: Python<'_>) -> PyResult<()> {
        crate::ops::nta_finish(self, py, false)
    }

    /// Bytes of the region mapped in this view.
    fn __len__(&self, py: Python<'_>) -> PyResult<usize> {
        let mut st = self.lock(py)?;
        Ok(st.view(py, &self.path)?.len())
    }

    /// Bytes of the region mapped in this view.
    #[getter]
    fn size(&self, py: Python<'_>) -> PyResult<usize> {
        self.__len__(py)
    }

    /// Bytes of private memory the view holds now: the pages its open
    /// transaction touched plus at most the region's ``view_private_pages``
    /// kept for later transactions.
    #[getter]
    fn private_bytes(&self, py: Python<'_>) -> PyResult<u64> {
        let mut st = self.lock(py)?;
        Ok(st.view(py, &self.path)?.private_bytes())
    }

    /// Address of byte 0 of the region in this view (never changes).
    #[getter]
    fn address(&self, py: Python<'_>) -> PyResult<usize> {
        let mut st = self.lock(py)?;
        Ok(st.view(py, &self.path)?.base() as usize)
    }

    /// True inside a transaction.
    #[getter]
    fn in_transaction(&self, py: Python<'_>) -> PyResult<bool> {
        Ok(self.position(py)?.0 > 0)
    }

    /// Page faults this view has handled (first touches of pages).
    #[getter]
    fn faults(&self, py: Python<'_>) -> PyResult<u64> {
        let mut st = self.lock(py)?;
        Ok(st.view(py, &self.path)?.faults())
    }

    /// Buffers (memoryviews, arrays) of this view alive now.
    #[getter]
    fn exports(&self) -> usize {
        self.exports.load(Ordering::Acquire)
    }

    /// The region this view maps.
    #[getter]
    fn region(&self, py: Python<'_>) -> PyResult<Py<Region>> {
        Ok(self.region.bind(py).cast::<Region>()?.clone().unbind())
    }

    /// Closes the view (ending any transaction, discarding it). Raises
    /// ``BufferError`` while memoryviews or arrays of it are alive: their
    /// memory would go away. Closing twice does nothing.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let n = self.exports.load(Ordering::Acquire);
        if n > 0 {
            return Err(PyBufferError::new_err(format!(
                "{}: cannot close a view while {n} buffer(s) of it (memoryviews, numpy arrays) \
                 are alive: release them first (del, or memoryview.release())",
                self.path.display()
            )));
        }
        let mut st = self.lock(py)?;
        st.depth = 0;
        let v = st.view.take();
        drop(st);
        drop(v);
        Ok(())
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, py: Python<'_>, _exc: &Bound<'_, PyTuple>) -> PyResult<bool> {
        self.close(py)?;
        Ok(false)
    }

    fn __reduce__(&self) -> PyResult<()> {
        Err(pyo3::exceptions::PyTypeError::new_err(
            "a txmap.View cannot be pickled: pass the Region and open a view in the other process",
        ))
    }

    fn __repr__(&self) -> String {
        format!("<txmap.View of {:?}>", self.path.display().to_string())
    }

    /// A writable (read-only in a read-only transaction) memoryview of the
    /// whole region in this view: no copy, ``numpy.frombuffer(view.buffer(),
    /// dtype, count, offset)`` updates the region in place. Only inside a
    /// transaction; see the class docstring for its use outside one.
    fn buffer<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        crate::buffer::memoryview(slf)
    }

    /// The buffer protocol on the view itself (``memoryview(view)``):
    /// in builds for Python 3.11+ (the `py311` feature).
    #[cfg(feature = "py311")]
    unsafe fn __getbuffer__(
        slf: Bound<'_, Self>,
        view: *mut ffi::Py_buffer,
        flags: std::ffi::c_int,
    ) -> PyResult<()> {
        let owner = slf.as_ptr();
        // SAFETY: `view` is the caller's buffer; `slf` is the owner.
        unsafe { crate::buffer::fill(&slf, owner, view.cast(), flags) }
    }

    #[cfg(feature = "py311")]
    unsafe fn __releasebuffer__(&self, view: *mut ffi::Py_buffer) {
        // SAFETY: filled by __getbuffer__ above.
        unsafe { crate::buffer::release(self, view.cast()) }
    }
}

impl View {
    /// (address, length, read-only) of the memory to export now: only
    /// inside a transaction.
    pub(crate) fn export_range(&self, py: Python<'_>) -> PyResult<(usize, usize, bool)> {
        let mut st = self.lock(py)?;
        let (depth, read_only) = (st.depth, st.read_only);
        let view = st.view(py, &self.path)?;
        let (base, len) = (view.base() as usize, view.len());
        if depth == 0 {
            return Err(PyBufferError::new_err(format!(
                "{}: a view's memory is exported only inside a transaction \
                 (use `with view.transaction():`)",
                self.path.display()
            )));
        }
        Ok((base, len, read_only))
    }

    /// Counts buffers made (+1) and released (-1).
    pub(crate) fn exported(&self, n: isize) {
        if n > 0 {
            self.exports.fetch_add(1, Ordering::AcqRel);
        } else {
            self.exports.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// ``view.transaction()``: begins on ``__enter__``, commits on ``__exit__``
/// (or aborts when the block raised). Single use.
#[pyclass(module = "txmap", frozen)]
pub struct Transaction {
    view: Py<View>,
    opts: TxnOptions,
    /// (depth, serial) at entry.
    serial: Mutex<Option<(u32, u64)>>,
}

#[pymethods]
impl Transaction {
    fn __enter__(&self, py: Python<'_>) -> PyResult<Py<View>> {
        let mut s = self.serial.lock().unwrap_or_else(|e| e.into_inner());
        let v = self.view.get();
        if s.is_some() {
            return Err(txn_error(
                py,
                "a Transaction is used once (call view.transaction() again)",
                &v.path,
            ));
        }
        let serial = v.begin_with(py, self.opts)?;
        *s = Some((v.position(py)?.0, serial));
        Ok(self.view.clone_ref(py))
    }

    #[pyo3(signature = (exc_type, _exc = None, _tb = None))]
    fn __exit__(
        &self,
        py: Python<'_>,
        exc_type: Option<&Bound<'_, PyAny>>,
        _exc: Option<&Bound<'_, PyAny>>,
        _tb: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        let v = self.view.get();
        let Some((depth, serial)) = *self.serial.lock().unwrap_or_else(|e| e.into_inner()) else {
            return Ok(false);
        };
        // Ended inside the block (view.abort()): nothing left to do.
        if v.position(py)? != (depth, serial) {
            return Ok(false);
        }
        let failed = exc_type.is_some_and(|t| !t.is_none());
        match (failed, depth) {
            (false, _) => v.commit_level(py)?,
            (true, 1) => v.rollback_all(py)?,
            (true, _) => v.abort_level(py)?,
        }
        Ok(false)
    }
}
