//! `txmap.Region`: an open region file.

use std::path::PathBuf;
use std::sync::Mutex;

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};
use txmap::{Durability, Options};

use crate::{invalid, to_py, txn_error};

/// An open region: a file of ``size`` bytes (and its log, ``PATH-log``)
/// that views map and transactions change.
///
/// Open a region once per process (a forked child must open it again: the
/// parent's handles fail there). ``Region`` objects pickle as their path and
/// options, so a ``multiprocessing`` worker started with *spawn* opens its
/// own. Use as a context manager to close it.
#[pyclass(module = "txmap", frozen)]
pub struct Region {
    inner: Mutex<Option<txmap::Region>>,
    pub(crate) path: PathBuf,
    durability: Durability,
    max_size: Option<u64>,
    view_private_pages: Option<u64>,
}

fn parse_durability(py: Python<'_>, s: &str, path: &std::path::Path) -> PyResult<Durability> {
    match s {
        "durable" => Ok(Durability::Durable),
        "async" => Ok(Durability::Async),
        _ => Err(invalid(
            py,
            format!("durability must be \"durable\" or \"async\", not {s:?}"),
            path,
        )),
    }
}

fn durability_name(d: Durability) -> &'static str {
    match d {
        Durability::Durable => "durable",
        Durability::Async => "async",
    }
}

/// A size argument: a positive int.
pub(crate) fn positive(
    py: Python<'_>,
    what: &str,
    n: i128,
    path: &std::path::Path,
) -> PyResult<u64> {
    if n <= 0 || n > i64::MAX as i128 {
        return Err(invalid(
            py,
            format!("{what} must be positive, not {n}"),
            path,
        ));
    }
    Ok(n as u64)
}

fn options(
    py: Python<'_>,
    durability: &str,
    max_size: Option<i128>,
    view_private_pages: Option<i128>,
    path: &std::path::Path,
) -> PyResult<Options> {
    let mut o = Options {
        durability: parse_durability(py, durability, path)?,
        ..Options::default()
    };
    if let Some(m) = max_size {
        o.max_size = positive(py, "max_size", m, path)?;
    }
    if let Some(n) = view_private_pages {
        if !(0..=i128::from(u32::MAX)).contains(&n) {
            return Err(invalid(
                py,
                format!(
                    "view_private_pages must be between 0 and {}, not {n}",
                    u32::MAX
                ),
                path,
            ));
        }
        o.view_private_pages = n as usize;
    }
    Ok(o)
}

impl Region {
    /// The region handle, or an error if it was closed.
    pub(crate) fn handle(&self, py: Python<'_>) -> PyResult<txmap::Region> {
        self.inner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
            .ok_or_else(|| txn_error(py, "the region is closed", &self.path))
    }

    fn wrap(
        r: txmap::Region,
        path: PathBuf,
        o: &Options,
        max_size: Option<i128>,
        view_private_pages: Option<i128>,
    ) -> Region {
        Region {
            inner: Mutex::new(Some(r)),
            path,
            durability: o.durability,
            max_size: max_size.map(|m| m as u64),
            view_private_pages: view_private_pages.map(|n| n as u64),
        }
    }
}

#[pymethods]
impl Region {
    /// Creates a region file of ``size`` bytes (zeroed) at ``path`` and opens
    /// it. Fails with ``RegionExistsError`` if the file exists.
    ///
    /// ``durability``: ``"durable"`` (a commit returns once its log record is
    /// on disk) or ``"async"`` (once written to the OS; synced every 50 ms).
    /// ``max_size``: the largest the region may grow to (address space only;
    /// 64 GiB by default). ``view_private_pages``: pages of private memory
    /// each view keeps for later transactions beyond its open
    /// transaction's (4,096 = 16 MiB by default; see ``View.private_bytes``).
    #[staticmethod]
    #[pyo3(signature = (path, size, *, durability = "durable", max_size = None, view_private_pages = None))]
    fn create(
        py: Python<'_>,
        path: PathBuf,
        size: i128,
        durability: &str,
        max_size: Option<i128>,
        view_private_pages: Option<i128>,
    ) -> PyResult<Region> {
        let size = positive(py, "size", size, &path)?;
        let o = options(py, durability, max_size, view_private_pages, &path)?;
        let r = py
            .detach(|| txmap::Region::create(&path, size, o.clone()))
            .map_err(|e| to_py(py, e, &path))?;
        Ok(Region::wrap(r, path, &o, max_size, view_private_pages))
    }

    /// Opens the region at ``path``, recovering it from its log if a process
    /// died with it open. With ``create=True`` a missing region is created
    /// with ``size`` bytes (processes racing to create it all end with the
    /// same one). A ``size`` larger than the region's grows it. The other
    /// arguments are ``create``'s.
    #[staticmethod]
    #[pyo3(signature = (path, size = None, *, durability = "durable", max_size = None, create = false, view_private_pages = None))]
    fn open(
        py: Python<'_>,
        path: PathBuf,
        size: Option<i128>,
        durability: &str,
        max_size: Option<i128>,
        create: bool,
        view_private_pages: Option<i128>,
    ) -> PyResult<Region> {
        let size = size.map(|s| positive(py, "size", s, &path)).transpose()?;
        let o = options(py, durability, max_size, view_private_pages, &path)?;
        if create && size.is_none() {
            return Err(invalid(py, "create=True needs a size", &path));
        }
        let r = py
            .detach(|| match size {
                // Processes racing to create it all end with the same one.
                Some(s) if create => txmap::Region::open_or_create(&path, s, o.clone()),
                _ => txmap::Region::open(&path, o.clone()),
            })
            .map_err(|e| to_py(py, e, &path))?;
        if let Some(s) = size
            && s > r.size()
        {
            py.detach(|| r.grow(s)).map_err(|e| to_py(py, e, &path))?;
        }
        Ok(Region::wrap(r, path, &o, max_size, view_private_pages))
    }

    /// Opens the environment in directory ``dir``: named regions of one
    /// file (``dir/env.txm``) and one log, so that a transaction across
    /// several is one commit and one sync. The directory and file are
    /// created if absent. Returns the environment's region; ``named`` finds
    /// or creates its named regions. The other arguments are ``create``'s.
    #[staticmethod]
    #[pyo3(signature = (dir, *, durability = "durable", max_size = None, view_private_pages = None))]
    fn open_env(
        py: Python<'_>,
        dir: PathBuf,
        durability: &str,
        max_size: Option<i128>,
        view_private_pages: Option<i128>,
    ) -> PyResult<Region> {
        let o = options(py, durability, max_size, view_private_pages, &dir)?;
        let env = py
            .detach(|| txmap::Env::open(&dir, o.clone()))
            .map_err(|e| to_py(py, e, &dir))?;
        let path = env.path().to_path_buf();
        Ok(Region::wrap(
            env.into_region(),
            path,
            &o,
            max_size,
            view_private_pages,
        ))
    }

    /// The named region ``name`` of this environment (a region from
    /// ``open_env``) as ``(offset, length)`` in its views, created with
    /// ``size`` bytes (rounded up to whole pages, zeroed) if there is none
    /// of that name; ``size`` 0 only finds. A named region keeps the size
    /// it was created with (a larger ``size`` raises ``InvalidError``).
    #[pyo3(signature = (name, size = 0))]
    fn named(&self, py: Python<'_>, name: &str, size: i128) -> PyResult<(u64, u64)> {
        let size = u64::try_from(size)
            .map_err(|_| invalid(py, format!("size {size} is out of range"), &self.path))?;
        let r = self.handle(py)?;
        let e = py
            .detach(|| txmap::Env::from_region(r)?.region(name, size))
            .map_err(|e| to_py(py, e, &self.path))?;
        Ok((e.offset(), e.len()))
    }

    /// Opens a view: one mapping of the region, for one thread at a time.
    fn view(slf: &Bound<'_, Self>) -> PyResult<crate::viewstate::View> {
        let py = slf.py();
        let me = slf.get();
        let r = me.handle(py)?;
        let v = r.view().map_err(|e| to_py(py, e, &me.path))?;
        Ok(crate::viewstate::View::new(
            slf.clone().into_any().unbind(),
            v,
            me.path.clone(),
        ))
    }

    /// The region file's path.
    #[getter]
    fn path(&self) -> String {
        self.path.to_string_lossy().into_owned()
    }

    /// Bytes in the region.
    #[getter]
    fn size(&self, py: Python<'_>) -> PyResult<u64> {
        Ok(self.handle(py)?.size())
    }

    /// ``"durable"`` or ``"async"``.
    #[getter]
    fn durability(&self) -> &'static str {
        durability_name(self.durability)
    }

    /// True once ``close`` was called.
    #[getter]
    fn closed(&self) -> bool {
        self.inner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_none()
    }

    /// Grows the region to at least ``size`` bytes (new bytes are zero).
    /// Views see the new size at their next transaction.
    fn grow(&self, py: Python<'_>, size: i128) -> PyResult<()> {
        let size = positive(py, "size", size, &self.path)?;
        let r = self.handle(py)?;
        py.detach(|| r.grow(size))
            .map_err(|e| to_py(py, e, &self.path))
    }

    /// Makes every commit so far durable (for ``durability="async"``).
    fn sync(&self, py: Python<'_>) -> PyResult<()> {
        let r = self.handle(py)?;
        py.detach(|| r.sync()).map_err(|e| to_py(py, e, &self.path))
    }

    /// Copies committed data into the region file and empties the log.
    fn checkpoint(&self, py: Python<'_>) -> PyResult<()> {
        let r = self.handle(py)?;
        py.detach(|| r.checkpoint())
            .map_err(|e| to_py(py, e, &self.path))
    }

    /// Figures about the region: size, commits, log bytes, snapshots.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let s = self.handle(py)?.stats();
        let d = PyDict::new(py);
        d.set_item("size", s.size)?;
        d.set_item("commit_seq", s.commit_seq)?;
        d.set_item("checkpoint_seq", s.checkpoint_seq)?;
        d.set_item("log_bytes", s.log_bytes)?;
        d.set_item("log_syncs", s.log_syncs)?;
        d.set_item("version_pages", s.version_pages)?;
        d.set_item("live_snapshots", s.live_snapshots)?;
        d.set_item("recovered_commits", s.recovered_commits)?;
        Ok(d)
    }

    /// Closes this handle (views already open keep the region open until
    /// they close). The last handle of the last process checkpoints.
    /// Closing twice does nothing.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let r = self.inner.lock().unwrap_or_else(|e| e.into_inner()).take();
        match r {
            Some(r) => py
                .detach(|| r.close())
                .map_err(|e| to_py(py, e, &self.path)),
            None => Ok(()),
        }
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, py: Python<'_>, _exc: &Bound<'_, PyTuple>) -> PyResult<bool> {
        self.close(py)?;
        Ok(false)
    }

    /// Pickles as ``Region.open(path, durability=..., max_size=...)``: the
    /// receiving process opens the region itself.
    fn __reduce__<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyTuple>> {
        let py = slf.py();
        let me = slf.get();
        let open = slf.get_type().getattr("_reopen")?;
        let args = (
            me.path.to_string_lossy().into_owned(),
            durability_name(me.durability),
            me.max_size,
            me.view_private_pages,
        );
        (open, args).into_pyobject(py)
    }

    /// Used by unpickling (see ``__reduce__``).
    #[staticmethod]
    fn _reopen(
        py: Python<'_>,
        path: PathBuf,
        durability: &str,
        max_size: Option<i128>,
        view_private_pages: Option<i128>,
    ) -> PyResult<Region> {
        Region::open(
            py,
            path,
            None,
            durability,
            max_size,
            false,
            view_private_pages,
        )
    }

    fn __repr__(&self) -> String {
        format!(
            "<txmap.Region {:?} durability={}{}>",
            self.path.display().to_string(),
            durability_name(self.durability),
            if self.closed() { " closed" } else { "" }
        )
    }
}
