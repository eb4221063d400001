//! `txmap.Map` (the named B+-tree, CO B-tree and linear hash as dict-like
//! objects) and `txmap.Array` (the array list as a sequence).

use std::collections::VecDeque;
use std::ops::Bound as Edge;

use pyo3::exceptions::{PyIndexError, PyKeyError, PyTypeError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PySlice, PyTuple};
use txmap::collections::{AnyMap, ArrayList, Kind, Map as _, alloc};

use crate::viewstate::{View, bytes_arg};
use crate::{invalid, to_py, txn_error};

/// Entries fetched per step of an ordered iteration.
const CHUNK: usize = 256;

fn parse_kind(py: Python<'_>, s: &str, path: &std::path::Path) -> PyResult<Kind> {
    match Kind::parse(s) {
        Some(k) if k != Kind::Array => Ok(k),
        _ => Err(invalid(
            py,
            format!("map kind must be \"btree\", \"cobtree\" or \"lhash\", not {s:?}"),
            path,
        )),
    }
}

fn kind_of(m: &AnyMap) -> Kind {
    match m {
        AnyMap::BTree(_) => Kind::BTree,
        AnyMap::CoBTree(_) => Kind::CoBTree,
        AnyMap::LinearHash(_) => Kind::LinearHash,
    }
}

/// Runs `f` on the view: in the current transaction if there is one, else
/// in a transaction of its own (read-only unless `write`), retried on
/// conflict with the GIL released.
fn in_some_txn<R: Send>(
    view: &Bound<'_, View>,
    write: bool,
    f: impl Fn(&mut txmap::View) -> txmap::Result<R> + Send + Sync,
) -> PyResult<R> {
    let py = view.py();
    let me = view.get();
    let mut st = me.lock(py)?;
    let inside = st.depth > 0;
    let v = st.view(py, &me.path)?;
    let r = if inside {
        f(v)
    } else {
        let opts = if write {
            txmap::TxnOptions::default()
        } else {
            txmap::TxnOptions::READ_ONLY
        };
        py.detach(|| v.run_with(opts, |v| f(v)))
    };
    r.map_err(|e| to_py(py, e, &me.path))
}

pub(crate) fn open_map(
    view: &Bound<'_, View>,
    name: &str,
    kind: Option<&str>,
    create: bool,
) -> PyResult<Map> {
    let py = view.py();
    let path = &view.get().path;
    let want = kind.map(|k| parse_kind(py, k, path)).transpose()?;
    let found = in_some_txn(view, create, |v| match AnyMap::open_named(v, name)? {
        Some(m) => Ok(Some(m)),
        None if create => AnyMap::create_named(v, name, want.unwrap_or(Kind::BTree)).map(Some),
        None => Ok(None),
    })?;
    let Some(map) = found else {
        return Err(PyKeyError::new_err(format!(
            "{}: no map named {name:?}",
            path.display()
        )));
    };
    if let Some(k) = want
        && k != kind_of(&map)
    {
        return Err(invalid(
            py,
            format!("{name:?} is a {}, not a {}", kind_of(&map).name(), k.name()),
            path,
        ));
    }
    Ok(Map {
        view: view.clone().unbind(),
        map,
        name: name.to_string(),
    })
}

/// Runs `f` on `view`'s open transaction (`what` names the operation in
/// errors); a write in a read-only transaction is refused.
fn in_transaction<R>(
    view: &Py<View>,
    py: Python<'_>,
    what: &str,
    write: bool,
    f: impl FnOnce(&mut txmap::View) -> txmap::Result<R>,
) -> PyResult<R> {
    let me = view.get();
    let mut st = me.lock(py)?;
    let ro = st.read_only;
    let v = st.in_txn(py, &me.path, what)?;
    if write && ro {
        return Err(txn_error(
            py,
            format!("{what} in a read-only transaction"),
            &me.path,
        ));
    }
    f(v).map_err(|e| to_py(py, e, &me.path))
}

/// A named map in a region: a dict-like object with ``bytes`` keys and
/// values, used inside transactions of its view (each operation is part of
/// the current transaction; outside one it raises ``TransactionError``).
///
/// Trees (``"btree"``, ``"cobtree"``) iterate in key order and answer
/// ``range(lo, hi)``; a linear hash (``"lhash"``) iterates in key order too,
/// but reads the whole table to do it. ``len()`` counts the entries (it
/// reads them all). Iterators belong to the transaction they were made in.
#[pyclass(module = "txmap", frozen)]
pub struct Map {
    view: Py<View>,
    map: AnyMap,
    name: String,
}

impl Map {
    fn with<R>(
        &self,
        py: Python<'_>,
        what: &str,
        write: bool,
        f: impl FnOnce(&mut txmap::View, &AnyMap) -> txmap::Result<R>,
    ) -> PyResult<R> {
        in_transaction(&self.view, py, what, write, |v| f(v, &self.map))
    }

    fn iter(
        slf: &Bound<'_, Self>,
        mode: Mode,
        lo: Option<Vec<u8>>,
        hi: Option<Vec<u8>>,
    ) -> PyResult<MapIter> {
        let py = slf.py();
        let me = slf.get();
        let view = me.view.get();
        let (depth, serial) = view.position(py)?;
        if depth == 0 {
            return Err(txn_error(py, "iteration outside a transaction", &view.path));
        }
        Ok(MapIter {
            map: slf.clone().unbind(),
            serial,
            next_lo: lo.map(Edge::Included),
            hi,
            buf: VecDeque::new(),
            done: false,
            mode,
        })
    }

    fn missing(py: Python<'_>, key: &[u8]) -> PyErr {
        PyKeyError::new_err(PyBytes::new(py, key).unbind())
    }
}

#[derive(Clone, Copy)]
enum Mode {
    Keys,
    Values,
    Items,
}

#[pymethods]
impl Map {
    /// The map's name in the region's catalog.
    #[getter]
    fn name(&self) -> &str {
        &self.name
    }

    /// ``"btree"``, ``"cobtree"`` or ``"lhash"``.
    #[getter]
    fn kind(&self) -> &'static str {
        kind_of(&self.map).name()
    }

    fn __getitem__<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let k = bytes_arg(key, "key")?;
        // Copied once, from the region straight into the `bytes`.
        let mut out = None;
        self.with(py, "map lookup", false, |v, m| {
            m.get_with(v, &k, &mut |b| out = Some(PyBytes::new(py, b)))
        })?;
        out.ok_or_else(|| Self::missing(py, &k))
    }

    /// The value under ``key``, or ``default``.
    #[pyo3(signature = (key, default = None))]
    fn get<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
        default: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Option<Bound<'py, PyAny>>> {
        let k = bytes_arg(key, "key")?;
        let mut out = None;
        self.with(py, "map lookup", false, |v, m| {
            m.get_with(v, &k, &mut |b| out = Some(PyBytes::new(py, b).into_any()))
        })?;
        Ok(out.or(default))
    }

    fn __setitem__(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        value: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let k = bytes_arg(key, "key")?;
        let val = bytes_arg(value, "value")?;
        self.with(py, "map store", true, |v, m| m.put(v, &k, &val))
            .map(|_| ())
    }

    fn __delitem__(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<()> {
        let k = bytes_arg(key, "key")?;
        if self.with(py, "map delete", true, |v, m| m.delete(v, &k))? {
            Ok(())
        } else {
            Err(Self::missing(py, &k))
        }
    }

    /// Removes ``key`` and returns its value; ``default`` (or KeyError) if absent.
    #[pyo3(signature = (key, *default))]
    fn pop<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
        default: &Bound<'py, PyTuple>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let k = bytes_arg(key, "key")?;
        let old = self.with(py, "map pop", true, |v, m| {
            let old = m.get(v, &k)?;
            if old.is_some() {
                m.delete(v, &k)?;
            }
            Ok(old)
        })?;
        match old {
            Some(val) => Ok(PyBytes::new(py, &val).into_any()),
            None if !default.is_empty() => default.get_item(0),
            None => Err(Self::missing(py, &k)),
        }
    }

    /// The value under ``key``; stores ``default`` there first if absent.
    fn setdefault<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
        default: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let k = bytes_arg(key, "key")?;
        let d = bytes_arg(default, "value")?;
        let val = self.with(py, "map setdefault", true, |v, m| match m.get(v, &k)? {
            Some(x) => Ok(x),
            None => m.put(v, &k, &d).map(|_| d.clone()),
        })?;
        Ok(PyBytes::new(py, &val))
    }

    /// Stores every (key, value) of a mapping or an iterable of pairs.
    fn update(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<()> {
        let pairs = if other.hasattr("items")? {
            other.call_method0("items")?
        } else {
            other.clone()
        };
        for p in pairs.try_iter()? {
            let p = p?;
            let (k, v): (Bound<'_, PyAny>, Bound<'_, PyAny>) = p.extract().map_err(|_| {
                PyTypeError::new_err(
                    "update() takes a mapping or an iterable of (key, value) pairs",
                )
            })?;
            self.__setitem__(py, &k, &v)?;
        }
        Ok(())
    }

    /// Removes every entry.
    fn clear(&self, py: Python<'_>) -> PyResult<()> {
        self.with(py, "map clear", true, |v, m| {
            let mut keys = Vec::new();
            m.scan(v, Edge::Unbounded, Edge::Unbounded, &mut |k, _| {
                keys.push(k.to_vec());
                Ok(true)
            })?;
            for k in keys {
                m.delete(v, &k)?;
            }
            Ok(())
        })
    }

    fn __contains__(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<bool> {
        let Ok(k) = bytes_arg(key, "key") else {
            return Ok(false);
        };
        self.with(py, "map lookup", false, |v, m| {
            m.get_with(v, &k, &mut |_| {})
        })
    }

    /// Entries in the map (reads them all).
    fn __len__(&self, py: Python<'_>) -> PyResult<usize> {
        self.with(py, "len", false, |v, m| {
            let mut n = 0;
            m.scan(v, Edge::Unbounded, Edge::Unbounded, &mut |_, _| {
                n += 1;
                Ok(true)
            })?;
            Ok(n)
        })
    }

    fn __iter__(slf: &Bound<'_, Self>) -> PyResult<MapIter> {
        Map::iter(slf, Mode::Keys, None, None)
    }

    /// The keys, in order.
    fn keys(slf: &Bound<'_, Self>) -> PyResult<MapIter> {
        Map::iter(slf, Mode::Keys, None, None)
    }

    /// The values, in key order.
    fn values(slf: &Bound<'_, Self>) -> PyResult<MapIter> {
        Map::iter(slf, Mode::Values, None, None)
    }

    /// (key, value) pairs, in key order.
    fn items(slf: &Bound<'_, Self>) -> PyResult<MapIter> {
        Map::iter(slf, Mode::Items, None, None)
    }

    /// (key, value) pairs with ``lo <= key < hi`` in key order (None: unbounded).
    #[pyo3(signature = (lo = None, hi = None))]
    fn range(
        slf: &Bound<'_, Self>,
        lo: Option<&Bound<'_, PyAny>>,
        hi: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<MapIter> {
        let lo = lo.map(|b| bytes_arg(b, "lo")).transpose()?;
        let hi = hi.map(|b| bytes_arg(b, "hi")).transpose()?;
        Map::iter(slf, Mode::Items, lo, hi)
    }

    fn __repr__(&self) -> String {
        format!("<txmap.Map {:?} ({})>", self.name, self.kind())
    }
}

/// An iterator over a map, fetching entries in steps inside the
/// transaction it was made in.
#[pyclass(module = "txmap")]
pub struct MapIter {
    map: Py<Map>,
    serial: u64,
    next_lo: Option<Edge<Vec<u8>>>,
    hi: Option<Vec<u8>>,
    buf: VecDeque<(Vec<u8>, Vec<u8>)>,
    done: bool,
    mode: Mode,
}

impl MapIter {
    fn fill(&mut self, py: Python<'_>) -> PyResult<()> {
        let map = self.map.get();
        let view = map.view.get();
        let mut st = view.lock(py)?;
        if st.depth == 0 || st.serial != self.serial {
            return Err(txn_error(
                py,
                "a map iterator was used after the transaction it was made in ended",
                &view.path,
            ));
        }
        let v = st.view(py, &view.path)?;
        // A hash table reads everything to order it: one step.
        let limit = match map.map {
            AnyMap::LinearHash(_) => usize::MAX,
            _ => CHUNK,
        };
        let lo = match &self.next_lo {
            None => Edge::Unbounded,
            Some(Edge::Included(k)) => Edge::Included(k.as_slice()),
            Some(Edge::Excluded(k)) => Edge::Excluded(k.as_slice()),
            Some(Edge::Unbounded) => Edge::Unbounded,
        };
        let hi = match &self.hi {
            None => Edge::Unbounded,
            Some(k) => Edge::Excluded(k.as_slice()),
        };
        let mut got = Vec::new();
        map.map
            .scan(v, lo, hi, &mut |k, val| {
                got.push((k.to_vec(), val.to_vec()));
                Ok(got.len() < limit)
            })
            .map_err(|e| to_py(py, e, &view.path))?;
        if got.len() < limit {
            self.done = true;
        }
        if let Some((k, _)) = got.last() {
            self.next_lo = Some(Edge::Excluded(k.clone()));
        }
        self.buf.extend(got);
        Ok(())
    }
}

#[pymethods]
impl MapIter {
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__<'py>(&mut self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        if self.buf.is_empty() && !self.done {
            self.fill(py)?;
        }
        let Some((k, v)) = self.buf.pop_front() else {
            return Ok(None);
        };
        Ok(Some(match self.mode {
            Mode::Keys => PyBytes::new(py, &k).into_any(),
            Mode::Values => PyBytes::new(py, &v).into_any(),
            Mode::Items => (PyBytes::new(py, &k), PyBytes::new(py, &v))
                .into_pyobject(py)?
                .into_any(),
        }))
    }
}

pub(crate) fn open_array(
    view: &Bound<'_, View>,
    name: &str,
    itemsize: Option<i128>,
    create: bool,
) -> PyResult<Array> {
    let py = view.py();
    let path = &view.get().path;
    let itemsize = itemsize
        .map(|n| crate::region::positive(py, "itemsize", n, path))
        .transpose()?;
    if create && itemsize.is_none() {
        // Creating needs a size; opening an existing one does not.
        let exists = in_some_txn(view, false, |v| alloc::lookup(v, name))?;
        if exists.is_none() {
            return Err(invalid(
                py,
                format!("creating array {name:?} needs an itemsize"),
                path,
            ));
        }
    }
    let found = in_some_txn(view, create, |v| match alloc::lookup(v, name)? {
        Some(e) if e.kind == Kind::Array => ArrayList::open(v, e.at).map(|a| Some(Ok(a))),
        Some(e) => Ok(Some(Err(e.kind))),
        None => match itemsize {
            Some(size) if create => {
                alloc::init(v)?;
                let a = ArrayList::create(v, size)?;
                alloc::register(v, name, Kind::Array, a.at)?;
                Ok(Some(Ok(a)))
            }
            _ => Ok(None),
        },
    })?;
    let arr = match found {
        None => {
            return Err(PyKeyError::new_err(format!(
                "{}: no array named {name:?}",
                path.display()
            )));
        }
        Some(Err(kind)) => {
            return Err(invalid(
                py,
                format!("{name:?} is a {}, not an array", kind.name()),
                path,
            ));
        }
        Some(Ok(a)) => a,
    };
    let have = in_some_txn(view, false, |v| arr.elem_size(v))?;
    if let Some(want) = itemsize
        && want != have
    {
        return Err(invalid(
            py,
            format!("array {name:?} has {have}-byte items, not {want}"),
            path,
        ));
    }
    Ok(Array {
        view: view.clone().unbind(),
        arr,
        name: name.to_string(),
        itemsize: have,
    })
}

/// A named array list in a region: a sequence of ``itemsize``-byte
/// ``bytes`` items (indexing, slices, ``append``, ``extend``, ``pop``),
/// used inside transactions of its view. ``offset(i)`` is where item ``i``
/// lives in the region, for zero-copy access through the view's buffer.
#[pyclass(module = "txmap", frozen)]
pub struct Array {
    view: Py<View>,
    arr: ArrayList,
    name: String,
    itemsize: u64,
}

impl Array {
    fn with<R>(
        &self,
        py: Python<'_>,
        what: &str,
        write: bool,
        f: impl FnOnce(&mut txmap::View, &ArrayList) -> txmap::Result<R>,
    ) -> PyResult<R> {
        in_transaction(&self.view, py, what, write, |v| f(v, &self.arr))
    }

    /// A Python index (negative from the end) as an item number.
    fn index(&self, py: Python<'_>, i: i128) -> PyResult<u64> {
        let len = self.__len__(py)? as i128;
        let j = if i < 0 { i + len } else { i };
        if j < 0 || j >= len {
            return Err(PyIndexError::new_err(format!(
                "array index {i} out of range (length {len})"
            )));
        }
        Ok(j as u64)
    }

    fn item(&self, py: Python<'_>, data: &Bound<'_, PyAny>) -> PyResult<Vec<u8>> {
        let b = bytes_arg(data, "item")?;
        if b.len() as u64 != self.itemsize {
            return Err(invalid(
                py,
                format!(
                    "array {:?} has {}-byte items, not {}",
                    self.name,
                    self.itemsize,
                    b.len()
                ),
                &self.view.get().path,
            ));
        }
        Ok(b)
    }
}

#[pymethods]
impl Array {
    #[getter]
    fn name(&self) -> &str {
        &self.name
    }

    /// Bytes per item.
    #[getter]
    fn itemsize(&self) -> u64 {
        self.itemsize
    }

    fn __len__(&self, py: Python<'_>) -> PyResult<usize> {
        self.with(py, "len", false, |v, a| a.len(v))
            .map(|n| n as usize)
    }

    fn __getitem__<'py>(
        &self,
        py: Python<'py>,
        index: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        if let Ok(s) = index.cast::<PySlice>() {
            let len = self.__len__(py)?;
            let ix = s.indices(len as isize)?;
            let out = PyList::empty(py);
            let mut i = ix.start;
            for _ in 0..ix.slicelength {
                let b = self.with(py, "array read", false, |v, a| {
                    a.get(v, i as u64).map(<[u8]>::to_vec)
                })?;
                out.append(PyBytes::new(py, &b))?;
                i += ix.step;
            }
            return Ok(out.into_any());
        }
        let i: i128 = index
            .extract()
            .map_err(|_| PyTypeError::new_err("array indices must be integers or slices"))?;
        let j = self.index(py, i)?;
        let b = self.with(py, "array read", false, |v, a| {
            a.get(v, j).map(<[u8]>::to_vec)
        })?;
        Ok(PyBytes::new(py, &b).into_any())
    }

    fn __setitem__(&self, py: Python<'_>, index: i128, value: &Bound<'_, PyAny>) -> PyResult<()> {
        let b = self.item(py, value)?;
        let j = self.index(py, index)?;
        self.with(py, "array store", true, |v, a| a.set(v, j, &b))
    }

    /// Appends an item; returns its index.
    fn append(&self, py: Python<'_>, value: &Bound<'_, PyAny>) -> PyResult<u64> {
        let b = self.item(py, value)?;
        self.with(py, "array append", true, |v, a| a.push(v, &b))
    }

    /// Appends an item by the commutative append: transactions appending
    /// to one array at once do not conflict. The item lands, at commit,
    /// at the array's length then; the index returned is where this
    /// transaction sees it, provisional (the final index is at least this
    /// one, known after the commit). Reading the array in the same
    /// transaction is validated as usual. ``reserve`` first, or an append
    /// that needs a new segment grows the array as ``append`` does.
    fn append_commutative(&self, py: Python<'_>, value: &Bound<'_, PyAny>) -> PyResult<u64> {
        let b = self.item(py, value)?;
        self.with(py, "array append", true, |v, a| a.append(v, &b))
    }

    /// Allocates room for ``capacity`` items, so appends up to it never
    /// grow the array.
    fn reserve(&self, py: Python<'_>, capacity: u64) -> PyResult<()> {
        self.with(py, "array reserve", true, |v, a| a.reserve(v, capacity))
    }

    /// Appends every item of an iterable.
    fn extend(&self, py: Python<'_>, values: &Bound<'_, PyAny>) -> PyResult<()> {
        for x in values.try_iter()? {
            self.append(py, &x?)?;
        }
        Ok(())
    }

    /// Removes and returns the last item (IndexError if empty).
    fn pop<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyBytes>> {
        match self.with(py, "array pop", true, |v, a| a.pop(v))? {
            Some(b) => Ok(PyBytes::new(py, &b)),
            None => Err(PyIndexError::new_err("pop from an empty array")),
        }
    }

    /// Offset of item ``i`` in the region (items of one segment are
    /// contiguous; segments double in size).
    fn offset(&self, py: Python<'_>, i: i128) -> PyResult<u64> {
        let j = self.index(py, i)?;
        self.with(py, "array offset", false, |v, a| a.offset(v, j))
    }

    fn __iter__(slf: &Bound<'_, Self>) -> PyResult<ArrayIter> {
        let py = slf.py();
        let (depth, serial) = slf.get().view.get().position(py)?;
        if depth == 0 {
            return Err(txn_error(
                py,
                "iteration outside a transaction",
                &slf.get().view.get().path,
            ));
        }
        Ok(ArrayIter {
            arr: slf.clone().unbind(),
            serial,
            next: 0,
        })
    }

    fn __repr__(&self) -> String {
        format!(
            "<txmap.Array {:?} ({}-byte items)>",
            self.name, self.itemsize
        )
    }
}

/// An iterator over an array's items, inside the transaction it was made in.
#[pyclass(module = "txmap")]
pub struct ArrayIter {
    arr: Py<Array>,
    serial: u64,
    next: u64,
}

#[pymethods]
impl ArrayIter {
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__<'py>(&mut self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyBytes>>> {
        let arr = self.arr.get();
        let view = arr.view.get();
        if view.position(py)?.1 != self.serial || view.position(py)?.0 == 0 {
            return Err(txn_error(
                py,
                "an array iterator was used after the transaction it was made in ended",
                &view.path,
            ));
        }
        let i = self.next;
        let b = arr.with(py, "array read", false, |v, a| {
            if i >= a.len(v)? {
                return Ok(None);
            }
            a.get(v, i).map(|b| Some(b.to_vec()))
        })?;
        self.next += 1;
        Ok(b.map(|b| PyBytes::new(py, &b)))
    }
}
