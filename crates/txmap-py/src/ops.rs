//! Issue 18 in Python: pause and resume, the built-in commutative
//! operations, applying registered operations, and nested top actions
//! whose undo is a built-in operation or one registered by Rust code.
//! Python functions are not registered as operations: recovery must be able
//! to run an operation in any process that opens the region, including
//! ones that never imported the Python code.

use std::sync::Mutex;

use pyo3::prelude::*;

use crate::viewstate::{Backoff, View, bytes_arg, is_retryable};
use crate::{invalid, to_py, txn_error};

/// A transaction taken off its view by ``View.pause``; ``View.resume``
/// continues it. Dropping it (or ``discard``) without resuming rolls the
/// transaction back; nested top actions it committed then stay pending
/// until the next process to open the region first compensates them.
#[pyclass(module = "txmap", frozen)]
pub struct Paused {
    inner: Mutex<Option<txmap::Paused>>,
    /// The view it was paused on (its `id`) and its position there.
    origin: usize,
    depth: u32,
    serial: u64,
    read_only: bool,
    nta: Vec<(u32, u64, bool)>,
}

#[pymethods]
impl Paused {
    /// The commit whose state the paused transaction reads (None once
    /// resumed or discarded).
    #[getter]
    fn snapshot(&self) -> Option<u64> {
        self.lock().as_ref().map(|p| p.snapshot())
    }

    /// Rolls the paused transaction back now (nothing if already resumed).
    fn discard(&self) {
        self.lock().take();
    }

    fn __repr__(&self) -> String {
        match self.snapshot() {
            Some(s) => format!("<txmap.Paused at snapshot {s}>"),
            None => "<txmap.Paused (ended)>".into(),
        }
    }
}

impl Paused {
    fn lock(&self) -> std::sync::MutexGuard<'_, Option<txmap::Paused>> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

pub(crate) fn pause(v: &View, py: Python<'_>) -> PyResult<Paused> {
    let mut st = v.lock(py)?;
    let (depth, serial, read_only) = (st.depth, st.serial, st.read_only);
    let view = st.in_txn(py, &v.path, "pause")?;
    let p = view.pause().map_err(|e| to_py(py, e, &v.path))?;
    let nta = std::mem::take(&mut st.nta);
    st.depth = 0;
    Ok(Paused {
        inner: Mutex::new(Some(p)),
        origin: v.id,
        depth,
        serial,
        read_only,
        nta,
    })
}

pub(crate) fn resume(v: &View, py: Python<'_>, p: &Paused) -> PyResult<()> {
    let mut st = v.lock(py)?;
    let path = &v.path;
    if st.depth > 0 {
        return Err(txn_error(
            py,
            "resume inside a transaction: end or pause it first",
            path,
        ));
    }
    let Some(inner) = p.lock().take() else {
        return Err(txn_error(
            py,
            "this paused transaction was already resumed or discarded",
            path,
        ));
    };
    st.view(py, path)?
        .resume(inner)
        .map_err(|e| to_py(py, e, path))?;
    st.depth = p.depth;
    st.read_only = p.read_only;
    st.nta = p.nta.clone();
    // Context managers and iterators of the transaction work again on the
    // view it came from; on another view it is a new position.
    st.serial = if p.origin == v.id {
        p.serial
    } else {
        st.high += 1;
        st.high
    };
    Ok(())
}

/// The 16 argument bytes of a built-in word operation.
fn word_args(off: u64, x: u64) -> [u8; 16] {
    let mut a = [0u8; 16];
    a[..8].copy_from_slice(&off.to_le_bytes());
    a[8..].copy_from_slice(&x.to_le_bytes());
    a
}

/// Runs built-in commutative operation `id` on the word at `offset` with
/// `x`: an unsigned operand (any u64, or a negative i64 for a wrapping
/// subtraction when `unsigned`) or a signed one.
pub(crate) fn commute_int(
    v: &View,
    py: Python<'_>,
    id: u32,
    offset: i128,
    x: i128,
    unsigned: bool,
) -> PyResult<()> {
    let path = &v.path;
    let (lo, hi) = if unsigned && id != txmap::ops::ADD_U64 {
        (0, u64::MAX as i128)
    } else if unsigned {
        (i64::MIN as i128, u64::MAX as i128)
    } else {
        (i64::MIN as i128, i64::MAX as i128)
    };
    if !(lo..=hi).contains(&x) {
        return Err(invalid(
            py,
            format!("operand {x} out of range [{lo}, {hi}]"),
            path,
        ));
    }
    if !(0..=u64::MAX as i128).contains(&offset) {
        return Err(invalid(py, format!("offset {offset} out of range"), path));
    }
    let operand = if x < 0 { x as i64 as u64 } else { x as u64 };
    let mut st = v.lock(py)?;
    let view = st.in_txn(py, path, "a commutative update")?;
    view.commute(id, &word_args(offset as u64, operand))
        .map_err(|e| to_py(py, e, path))
}

pub(crate) fn apply(v: &View, py: Python<'_>, op: u32, args: &Bound<'_, PyAny>) -> PyResult<()> {
    let args = bytes_arg(args, "args")?;
    let mut st = v.lock(py)?;
    let view = st.in_txn(py, &v.path, "apply")?;
    view.apply(op, &args).map_err(|e| to_py(py, e, &v.path))
}

pub(crate) fn nta_begin(
    v: &View,
    py: Python<'_>,
    undo: u32,
    undo_args: &Bound<'_, PyAny>,
) -> PyResult<()> {
    let args = bytes_arg(undo_args, "undo_args")?;
    let mut st = v.lock(py)?;
    let (depth, serial, read_only) = (st.depth, st.serial, st.read_only);
    let view = st.in_txn(py, &v.path, "nta_begin")?;
    view.nta_begin(undo, &args)
        .map_err(|e| to_py(py, e, &v.path))?;
    st.nta.push((depth, serial, read_only));
    st.depth = 1;
    st.high += 1;
    st.serial = st.high;
    st.read_only = false;
    Ok(())
}

/// Ends the nested top action begun last: commits it (`commit`, with the
/// GIL released while it syncs) or rolls it back; the enclosing
/// transaction is resumed either way.
pub(crate) fn nta_finish(v: &View, py: Python<'_>, commit: bool) -> PyResult<()> {
    let mut st = v.lock(py)?;
    let path = &v.path;
    if st.nta.is_empty() {
        return Err(txn_error(py, "no nested top action is open", path));
    }
    if st.depth != 1 {
        return Err(txn_error(
            py,
            "ending a nested top action inside nested transactions: commit them first",
            path,
        ));
    }
    let view = st.view(py, path)?;
    let r = if commit {
        py.detach(|| view.nta_end())
    } else {
        view.nta_abort()
    };
    let (depth, serial, read_only) = st.nta.pop().expect("checked above");
    st.depth = depth;
    st.serial = serial;
    st.read_only = read_only;
    if st.view.as_ref().is_some_and(|v| !v.in_transaction()) {
        // Resuming the parent failed: it was rolled back.
        st.depth = 0;
        st.nta.clear();
    }
    r.map_err(|e| to_py(py, e, path))
}

pub(crate) fn nested_top(
    slf: &Bound<'_, View>,
    fn_: &Bound<'_, PyAny>,
    undo: u32,
    undo_args: &Bound<'_, PyAny>,
) -> PyResult<Py<PyAny>> {
    let py = slf.py();
    let me = slf.get();
    let mut backoff = Backoff::new(me.id as u64 ^ 0x5eed);
    loop {
        nta_begin(me, py, undo, undo_args)?;
        let level = me.lock(py)?.nta.len();
        let r = fn_.call1((slf,));
        let open = {
            let st = me.lock(py)?;
            st.nta.len() == level && st.depth == 1
        };
        let r = match r {
            Ok(x) if open => nta_finish(me, py, true).map(|_| x.unbind()),
            Ok(_) => Err(txn_error(
                py,
                "the function given to nested_top() ended its action itself",
                &me.path,
            )),
            Err(e) => {
                if open {
                    nta_finish(me, py, false)?;
                }
                return Err(e);
            }
        };
        match r {
            Err(e) if is_retryable(py, &e)? => backoff.wait(py),
            other => return other,
        }
    }
}

/// Whether an operation is registered under ``op`` in this process (the
/// built-in ones always are).
#[pyfunction]
pub(crate) fn is_registered(op: u32) -> bool {
    txmap::ops::is_registered(op)
}

/// Adds the module's operation ids and functions.
pub(crate) fn init(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Paused>()?;
    for (name, id) in [
        ("ADD_U64", txmap::ops::ADD_U64),
        ("ADD_I64", txmap::ops::ADD_I64),
        ("MIN_U64", txmap::ops::MIN_U64),
        ("MAX_U64", txmap::ops::MAX_U64),
        ("MIN_I64", txmap::ops::MIN_I64),
        ("MAX_I64", txmap::ops::MAX_I64),
        ("FIRST_USER_OP", txmap::ops::FIRST_USER_OP),
    ] {
        m.add(name, id)?;
    }
    m.add_function(wrap_pyfunction!(is_registered, m)?)?;
    Ok(())
}
