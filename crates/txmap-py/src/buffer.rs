//! The buffer protocol of views.
//!
//! pyo3 offers `__getbuffer__` under the stable ABI only from Python 3.11,
//! but CPython takes buffer slots in `PyType_FromSpec` since 3.9. So the
//! abi3 (3.9+) build makes a small exporter type here by hand, `_Buffer`,
//! whose instances hold a view and export its memory: `View.buffer()`
//! returns a memoryview of one. Built with the `py311` feature, the view
//! itself exports too (`memoryview(view)`, `numpy.frombuffer(view)`).
//! Both paths share `fill` and `release`.

use std::ffi::{c_char, c_int, c_void};
use std::sync::atomic::{AtomicPtr, Ordering};

use pyo3::exceptions::{PyBufferError, PyRuntimeError};
use pyo3::ffi;
use pyo3::prelude::*;

use crate::viewstate::View;

/// CPython's `Py_buffer` (its layout has not changed since 3.3).
#[repr(C)]
pub(crate) struct RawBuffer {
    buf: *mut c_void,
    obj: *mut ffi::PyObject,
    len: ffi::Py_ssize_t,
    itemsize: ffi::Py_ssize_t,
    readonly: c_int,
    ndim: c_int,
    format: *mut c_char,
    shape: *mut ffi::Py_ssize_t,
    strides: *mut ffi::Py_ssize_t,
    suboffsets: *mut ffi::Py_ssize_t,
    internal: *mut c_void,
}

// Request flags (Include/pybuffer.h).
const PYBUF_WRITABLE: c_int = 0x0001;
const PYBUF_FORMAT: c_int = 0x0004;
const PYBUF_ND: c_int = 0x0008;
const PYBUF_STRIDES: c_int = 0x0010 | PYBUF_ND;

/// Fills `raw` with the memory of `view` (the whole region, bytes),
/// `owner` being the object the buffer keeps alive.
///
/// # Safety
/// `raw` is a `Py_buffer` to fill; `owner` a live object that keeps `view` alive.
pub(crate) unsafe fn fill(
    view: &Bound<'_, View>,
    owner: *mut ffi::PyObject,
    raw: *mut RawBuffer,
    flags: c_int,
) -> PyResult<()> {
    let me = view.get();
    let (base, len, read_only) = me.export_range(view.py())?;
    if read_only && flags & PYBUF_WRITABLE != 0 {
        return Err(PyBufferError::new_err(format!(
            "{}: writable buffer asked inside a read-only transaction",
            me.path.display()
        )));
    }
    let len = len as ffi::Py_ssize_t;
    // shape[0] and strides[0], freed in `release`.
    let dims = Box::into_raw(Box::new([len, 1]));
    // SAFETY: `raw` is the caller's buffer to fill; `dims` lives until
    // release; the memory at `base` stays mapped while the view is open, and
    // `View::close` refuses while exports are alive (`obj` keeps it alive).
    unsafe {
        ffi::Py_INCREF(owner);
        (*raw).buf = base as *mut c_void;
        (*raw).obj = owner;
        (*raw).len = len;
        (*raw).itemsize = 1;
        (*raw).readonly = c_int::from(read_only);
        (*raw).ndim = 1;
        (*raw).format = if flags & PYBUF_FORMAT != 0 {
            c"B".as_ptr() as *mut c_char
        } else {
            std::ptr::null_mut()
        };
        (*raw).shape = if flags & PYBUF_ND != 0 {
            dims as *mut ffi::Py_ssize_t
        } else {
            std::ptr::null_mut()
        };
        (*raw).strides = if flags & PYBUF_STRIDES == PYBUF_STRIDES {
            (dims as *mut ffi::Py_ssize_t).add(1)
        } else {
            std::ptr::null_mut()
        };
        (*raw).suboffsets = std::ptr::null_mut();
        (*raw).internal = dims as *mut c_void;
    }
    me.exported(1);
    Ok(())
}

/// Releases what `fill` made.
///
/// # Safety
/// `raw` was filled by `fill` for `view` and is released once.
pub(crate) unsafe fn release(view: &View, raw: *mut RawBuffer) {
    // SAFETY: `internal` is the box made in `fill`.
    unsafe { drop(Box::from_raw((*raw).internal as *mut [ffi::Py_ssize_t; 2])) };
    view.exported(-1);
}

/// An exporter instance: a Python object header and a strong reference to a View.
#[repr(C)]
struct Exporter {
    ob_base: ffi::PyObject,
    view: *mut ffi::PyObject,
}

static EXPORTER: AtomicPtr<ffi::PyTypeObject> = AtomicPtr::new(std::ptr::null_mut());

unsafe extern "C" fn exporter_getbuffer(
    obj: *mut ffi::PyObject,
    raw: *mut RawBuffer,
    flags: c_int,
) -> c_int {
    // SAFETY: buffer slots are called with the GIL held (also during
    // interpreter finalization, where `Python::attach` would refuse).
    let py = unsafe { Python::assume_attached() };
    {
        // SAFETY: `obj` is an Exporter; `view` a strong reference to a View,
        // or NULL if Python code made the exporter itself.
        if unsafe { (*(obj as *mut Exporter)).view.is_null() } {
            PyBufferError::new_err("a txmap._Buffer made outside View.buffer()").restore(py);
            return -1;
        }
        let r = unsafe {
            let v = Bound::from_borrowed_ptr(py, (*(obj as *mut Exporter)).view);
            fill(v.cast_unchecked::<View>(), obj, raw, flags)
        };
        match r {
            Ok(()) => 0,
            Err(e) => {
                // SAFETY: nothing was filled; the protocol wants obj NULL on failure.
                unsafe { (*raw).obj = std::ptr::null_mut() };
                e.restore(py);
                -1
            }
        }
    }
}

unsafe extern "C" fn exporter_releasebuffer(obj: *mut ffi::PyObject, raw: *mut RawBuffer) {
    // SAFETY: as in getbuffer; `raw` was filled there.
    unsafe {
        let py = Python::assume_attached();
        let v = Bound::from_borrowed_ptr(py, (*(obj as *mut Exporter)).view);
        release(v.cast_unchecked::<View>().get(), raw);
    }
}

unsafe extern "C" fn exporter_dealloc(obj: *mut ffi::PyObject) {
    // SAFETY: `obj` is an Exporter being destroyed (no buffer of it is
    // alive: each holds a reference); its type is a heap type it references.
    unsafe {
        let tp = ffi::Py_TYPE(obj);
        ffi::Py_XDECREF((*(obj as *mut Exporter)).view);
        let free = ffi::PyType_GetSlot(tp, ffi::Py_tp_free);
        if !free.is_null() {
            let free: unsafe extern "C" fn(*mut c_void) = std::mem::transmute(free);
            free(obj as *mut c_void);
        }
        ffi::Py_DECREF(tp as *mut ffi::PyObject);
    }
}

/// Makes the exporter type (once, at module init) and adds it to `m` as `_Buffer`.
pub(crate) fn init(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    let mut slots = [
        ffi::PyType_Slot {
            slot: ffi::Py_bf_getbuffer,
            pfunc: exporter_getbuffer as *mut c_void,
        },
        ffi::PyType_Slot {
            slot: ffi::Py_bf_releasebuffer,
            pfunc: exporter_releasebuffer as *mut c_void,
        },
        ffi::PyType_Slot {
            slot: ffi::Py_tp_dealloc,
            pfunc: exporter_dealloc as *mut c_void,
        },
        ffi::PyType_Slot {
            slot: 0,
            pfunc: std::ptr::null_mut(),
        },
    ];
    let mut spec = ffi::PyType_Spec {
        name: c"txmap._txmap._Buffer".as_ptr(),
        basicsize: std::mem::size_of::<Exporter>() as c_int,
        itemsize: 0,
        flags: ffi::Py_TPFLAGS_DEFAULT as _,
        slots: slots.as_mut_ptr(),
    };
    // SAFETY: a valid spec; the type object is returned as a new reference
    // (kept forever in EXPORTER and the module).
    let tp = unsafe { ffi::PyType_FromSpec(&mut spec) };
    if tp.is_null() {
        return Err(PyErr::fetch(py));
    }
    EXPORTER.store(tp as *mut ffi::PyTypeObject, Ordering::Release);
    // SAFETY: `tp` is a new reference; the module takes one more.
    let t = unsafe { Bound::from_borrowed_ptr(py, tp) };
    m.add("_Buffer", t)
}

/// A memoryview of `view`'s memory (through a new exporter instance).
pub(crate) fn memoryview<'py>(view: &Bound<'py, View>) -> PyResult<Bound<'py, PyAny>> {
    let py = view.py();
    let tp = EXPORTER.load(Ordering::Acquire);
    if tp.is_null() {
        return Err(PyRuntimeError::new_err("txmap._txmap is not initialised"));
    }
    // SAFETY: allocates an Exporter of the heap type (zeroed, type
    // referenced); `view` is set to a strong reference before anything else
    // sees the object; PyMemoryView_FromObject takes its own reference.
    unsafe {
        let obj = ffi::PyType_GenericAlloc(tp, 0);
        if obj.is_null() {
            return Err(PyErr::fetch(py));
        }
        (*(obj as *mut Exporter)).view = view.clone().into_any().into_ptr();
        let mv = ffi::PyMemoryView_FromObject(obj);
        ffi::Py_DECREF(obj);
        Bound::from_owned_ptr_or_err(py, mv)
    }
}
