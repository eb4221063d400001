//! The `txmap` Python package's extension module (`txmap._txmap`): regions,
//! views with the buffer protocol, transactions, and the collections, over
//! the `txmap` crate's public API. The pure-Python part (`python/txmap`)
//! holds the exceptions, the `transactional` decorator and the type hints.
//!
//! The GIL is released while a region opens (recovery), while a commit
//! validates and waits for its log sync, and while a retry backs off.

mod buffer;
mod collections;
mod ops;
mod region;
mod view;
mod viewstate;

use std::path::Path;

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyModule;

/// `txmap._errors`, imported once.
static ERRORS: PyOnceLock<Py<PyModule>> = PyOnceLock::new();

fn errors(py: Python<'_>) -> PyResult<&Bound<'_, PyModule>> {
    Ok(ERRORS
        .get_or_try_init(py, || Ok::<_, PyErr>(py.import("txmap._errors")?.unbind()))?
        .bind(py))
}

/// An exception of `txmap._errors` named `class`, built with `args` and `path`.
pub(crate) fn raise(py: Python<'_>, class: &str, msg: String, path: &Path) -> PyErr {
    let build = || -> PyResult<PyErr> {
        let cls = errors(py)?.getattr(class)?;
        let kw = pyo3::types::PyDict::new(py);
        kw.set_item("path", path.to_string_lossy())?;
        Ok(PyErr::from_value(cls.call((msg.clone(),), Some(&kw))?))
    };
    build().unwrap_or_else(|e| e)
}

/// A txmap error as the Python exception of its kind; the message names
/// `path` (the region) if the library's own message does not.
pub(crate) fn to_py(py: Python<'_>, e: txmap::Error, path: &Path) -> PyErr {
    let shown = path.display().to_string();
    let named = |m: String| {
        if m.contains(&shown) {
            m
        } else {
            format!("{shown}: {m}")
        }
    };
    match e {
        txmap::Error::Io {
            op,
            path: p,
            source,
        } => {
            let code = errno_of(&source);
            let msg = format!("{op} {}: {source}", p.display());
            let build = || -> PyResult<PyErr> {
                let f = errors(py)?.getattr("_file_error")?;
                Ok(PyErr::from_value(f.call1((
                    code,
                    msg.clone(),
                    p.to_string_lossy(),
                ))?))
            };
            build().unwrap_or_else(|e| e)
        }
        txmap::Error::Os { op, source } => {
            let code = errno_of(&source);
            let msg = named(format!("{op}: {source}"));
            let build = || -> PyResult<PyErr> {
                let f = errors(py)?.getattr("_file_error")?;
                Ok(PyErr::from_value(f.call1((
                    code,
                    msg.clone(),
                    path.to_string_lossy(),
                ))?))
            };
            build().unwrap_or_else(|e| e)
        }
        txmap::Error::Corrupt {
            ref path, offset, ..
        } => {
            let p = path.clone();
            let build = || -> PyResult<PyErr> {
                let cls = errors(py)?.getattr("CorruptError")?;
                let kw = pyo3::types::PyDict::new(py);
                kw.set_item("path", p.to_string_lossy())?;
                kw.set_item("offset", offset)?;
                Ok(PyErr::from_value(cls.call((e.to_string(),), Some(&kw))?))
            };
            build().unwrap_or_else(|e| e)
        }
        txmap::Error::Conflict => raise(py, "Conflict", named(e.to_string()), path),
        txmap::Error::SnapshotTooOld { .. } => {
            raise(py, "SnapshotTooOld", named(e.to_string()), path)
        }
        txmap::Error::Aborted => raise(py, "Aborted", named(e.to_string()), path),
        txmap::Error::NotInTransaction { .. }
        | txmap::Error::StoreInReadOnlyTransaction
        | txmap::Error::ForkedChild { .. } => {
            raise(py, "TransactionError", named(e.to_string()), path)
        }
        txmap::Error::Exists { .. } => raise_exists(py, named(e.to_string()), path),
        txmap::Error::Invalid(_)
        | txmap::Error::NotARegion { .. }
        | txmap::Error::TooLarge(_)
        | txmap::Error::Incompatible { .. }
        | txmap::Error::OutOfRange { .. } => raise(py, "InvalidError", named(e.to_string()), path),
        other => raise(py, "Error", named(other.to_string()), path),
    }
}

/// The errno of an I/O error, or the one its kind stands for.
fn errno_of(e: &std::io::Error) -> i32 {
    e.raw_os_error()
        .filter(|&c| c != 0)
        .unwrap_or(match e.kind() {
            std::io::ErrorKind::NotFound => libc::ENOENT,
            std::io::ErrorKind::AlreadyExists => libc::EEXIST,
            std::io::ErrorKind::PermissionDenied => libc::EACCES,
            _ => libc::EIO,
        })
}

fn raise_exists(py: Python<'_>, msg: String, path: &Path) -> PyErr {
    let build = || -> PyResult<PyErr> {
        let f = errors(py)?.getattr("_file_error")?;
        Ok(PyErr::from_value(f.call1((
            libc::EEXIST,
            msg.clone(),
            path.to_string_lossy(),
        ))?))
    };
    build().unwrap_or_else(|e| e)
}

/// A `TransactionError` (wrong state for the call).
pub(crate) fn txn_error(py: Python<'_>, msg: impl Into<String>, path: &Path) -> PyErr {
    let shown = path.display().to_string();
    raise(
        py,
        "TransactionError",
        format!("{shown}: {}", msg.into()),
        path,
    )
}

/// An `InvalidError` (an argument txmap cannot accept; also a ValueError).
pub(crate) fn invalid(py: Python<'_>, msg: impl Into<String>, path: &Path) -> PyErr {
    let shown = path.display().to_string();
    raise(py, "InvalidError", format!("{shown}: {}", msg.into()), path)
}

/// Tests only: makes this process's log syncs `us` microseconds longer.
#[pyfunction]
fn _debug_slow_syncs(us: u64) {
    txmap::debug::slow_syncs(us);
}

#[pymodule]
fn _txmap(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<region::Region>()?;
    m.add_class::<viewstate::View>()?;
    m.add_class::<view::Transaction>()?;
    m.add_class::<collections::Map>()?;
    m.add_class::<collections::MapIter>()?;
    m.add_class::<collections::Array>()?;
    m.add_class::<collections::ArrayIter>()?;
    m.add("PAGE_SIZE", 4096)?;
    // True when views export the buffer protocol themselves (`memoryview(view)`).
    m.add("VIEW_EXPORTS_BUFFER", cfg!(feature = "py311"))?;
    m.add_function(wrap_pyfunction!(_debug_slow_syncs, m)?)?;
    buffer::init(m)?;
    ops::init(m)?;
    Ok(())
}
