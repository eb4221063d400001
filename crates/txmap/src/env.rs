//! Environments: several named regions in one file and one log (issue 19,
//! point 1), as LMDB keeps named databases in one environment.
//!
//! An environment is a directory holding one region file, `env.txm`, and
//! its log. Each named region is a fixed range of whole pages of that file
//! (an [`EnvRegion`]); page 0 is the catalog of names (docs/FORMAT.md,
//! "Environment catalog"). A transaction of a view of the environment may
//! read and write any of its named regions, and commits across them as one
//! commit: one log record, one sync, recovered all or nothing. Each process
//! opens the names it uses; a view maps the whole file, and a named region
//! is its window of it.
//!
//! Regions in different files (other directories, plain files) commit
//! together through [`crate::View::run_group`] instead, which syncs each
//! region's log.
//!
//! Built on the public [`Region`] and [`View`] API alone.
//!
//! ```
//! # let dir = std::env::temp_dir().join(format!("txmap-doc-env-{}", std::process::id()));
//! use txmap::{Env, Options};
//! let env = Env::open(&dir, Options::default())?;
//! let a = env.region("checking", 4096)?;
//! let b = env.region("savings", 4096)?;
//! let mut v = env.view()?;
//! v.run(|v| {
//!     let x: u64 = a.read(v, 0)?;
//!     a.write(v, 0, &x.wrapping_sub(10))?;
//!     let y: u64 = b.read(v, 0)?;
//!     b.write(v, 0, &y.wrapping_add(10))
//! })?;
//! # drop(v); drop(env); std::fs::remove_dir_all(&dir).unwrap();
//! # Ok::<(), txmap::Error>(())
//! ```

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::options::Options;
use crate::region::Region;
use crate::view::{Pod, View};

const PAGE: u64 = 4096;
/// The catalog page's first bytes.
const MAGIC: [u8; 8] = *b"TXMENV01";
/// Bytes of the catalog's header, and of each entry after it.
const HEAD: u64 = 64;
const ENTRY: u64 = 64;
/// Named regions an environment holds at most (one catalog page).
pub const MAX_REGIONS: usize = ((PAGE - HEAD) / ENTRY) as usize;
/// Longest name, in bytes.
pub const MAX_NAME: usize = (ENTRY - 17) as usize;

/// The file of an environment in its directory.
pub fn env_file(dir: &Path) -> PathBuf {
    dir.join("env.txm")
}

/// An open environment: a handle on its region file (see the module docs).
/// Cheap to clone, as [`Region`] is; threads share it.
#[derive(Clone)]
pub struct Env {
    region: Region,
}

/// A named region of an environment: `len` bytes at byte `offset` of the
/// environment's views. Its accessors check that a range lies inside it
/// and then read or write through the view given, inside its transaction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EnvRegion {
    name: String,
    offset: u64,
    len: u64,
}

impl Env {
    /// Opens the environment in `dir`, creating the directory and its file
    /// if they do not exist. Any number of processes may have it open; the
    /// first to open it recovers it, as [`Region::open`] does.
    pub fn open(dir: &Path, opts: Options) -> Result<Env> {
        let path = env_file(dir);
        let region = if path.exists() {
            Region::open(&path, opts)?
        } else {
            if opts.read_only {
                return Err(Error::NotARegion {
                    path: dir.to_path_buf(),
                    what: "it holds no environment (no env.txm) to open read-only".into(),
                });
            }
            std::fs::create_dir_all(dir).map_err(|e| Error::io("create directory", dir, e))?;
            Region::open_or_create(&path, PAGE, opts)?
        };
        Env::from_region(region)
    }

    /// An environment over an open region: its catalog is written if the
    /// region's first page is all zeros (a new region), else checked.
    pub fn from_region(region: Region) -> Result<Env> {
        let mut v = region.view()?;
        v.begin_read()?;
        let head = v.slice(0, 8).map(|b| b.to_vec());
        v.commit()?;
        match head? {
            h if h == MAGIC => {}
            h if h == [0; 8] && !region.is_read_only() => {
                v.run(|v| {
                    let page: &[u8] = v.slice(0, PAGE as usize)?;
                    if page[..8] == MAGIC {
                        return Ok(());
                    }
                    if page.iter().any(|&b| b != 0) {
                        return Err(not_env(&region, "its first page is in use"));
                    }
                    v.slice_mut(0, 8)?.copy_from_slice(&MAGIC);
                    Ok(())
                })?;
            }
            _ => return Err(not_env(&region, "its first page holds no catalog")),
        }
        drop(v);
        Ok(Env { region })
    }

    /// The named region `name`, created with `size` bytes (rounded up to
    /// whole pages) if the environment has none of that name. An existing
    /// one keeps the size it was created with: asking for more is an
    /// error, and `size` 0 asks only for an existing one.
    ///
    /// Creating one is a transaction of its own (on the catalog page) that
    /// grows the file by the new pages, which read as zeros.
    pub fn region(&self, name: &str, size: u64) -> Result<EnvRegion> {
        check_name(name)?;
        let path = self.path();
        let mut v = self.region.view()?;
        // Every decision is taken from the transaction's snapshot of the
        // catalog: a concurrent creator's commit makes this one conflict
        // and run again on the new catalog.
        v.run(|v| {
            let catalog = read_catalog(v)?;
            // The file's size, not the view's: the view took its size just
            // before its snapshot, so a creator that grew the file and
            // committed in between is in the snapshot but past `v.len()`.
            // Each creator grows before it commits, so the size read now
            // covers every range of the catalog this snapshot holds.
            check_inside(&catalog, self.region.size(), path)?;
            if let Some(r) = catalog.iter().find(|e| e.name == name) {
                if size > r.len {
                    return Err(Error::Invalid(format!(
                        "{}: region \"{name}\" has {} bytes; asked for {size} (a named region \
                         keeps the size it was created with)",
                        path.display(),
                        r.len
                    )));
                }
                return Ok(r.clone());
            }
            if size == 0 {
                return Err(Error::Invalid(format!(
                    "{}: no region named \"{name}\"",
                    path.display()
                )));
            }
            if catalog.len() >= MAX_REGIONS {
                return Err(Error::TooLarge(format!(
                    "{}: an environment holds at most {MAX_REGIONS} named regions",
                    path.display()
                )));
            }
            let first = catalog.last().map_or(1, |e| (e.offset + e.len) / PAGE);
            let pages = size.div_ceil(PAGE);
            let end = first
                .checked_add(pages)
                .filter(|&e| e <= u64::MAX / PAGE)
                .ok_or_else(|| {
                    Error::TooLarge(format!(
                        "{}: region \"{name}\" of {size} bytes",
                        path.display()
                    ))
                })?;
            // The pages exist before the catalog names them; if this
            // transaction aborts, the grown pages stay unused.
            if (v.len() as u64) < end * PAGE {
                v.grow(end * PAGE)?;
            }
            let at = HEAD + catalog.len() as u64 * ENTRY;
            v.write(at, &first)?;
            v.write(at + 8, &pages)?;
            v.write(at + 16, &(name.len() as u8))?;
            v.slice_mut(at + 17, name.len())?
                .copy_from_slice(name.as_bytes());
            v.write(8, &(catalog.len() as u32 + 1))?;
            Ok(EnvRegion {
                name: name.to_owned(),
                offset: first * PAGE,
                len: pages * PAGE,
            })
        })
    }

    /// The named region `name`, if there is one.
    pub fn find(&self, name: &str) -> Result<Option<EnvRegion>> {
        Ok(self.regions()?.into_iter().find(|r| r.name == name))
    }

    /// Every named region, in the order they were created.
    pub fn regions(&self) -> Result<Vec<EnvRegion>> {
        let mut v = self.region.view()?;
        v.begin_read()?;
        let r = read_catalog(&v);
        v.commit()?;
        let r = r?;
        check_inside(&r, self.region.size(), self.path())?;
        Ok(r)
    }

    /// Opens a view of the whole environment for the calling thread.
    pub fn view(&self) -> Result<View> {
        self.region.view()
    }

    /// The environment's region (statistics, checkpoints, backups).
    pub fn as_region(&self) -> &Region {
        &self.region
    }

    /// The environment's region handle, for APIs that take one (the C
    /// API's environments are region handles).
    pub fn into_region(self) -> Region {
        self.region
    }

    /// The environment's region file.
    pub fn path(&self) -> &Path {
        self.region.path()
    }

    /// Closes the handle, as [`Region::close`].
    pub fn close(self) -> Result<()> {
        self.region.close()
    }
}

impl EnvRegion {
    /// Its name.
    pub fn name(&self) -> &str {
        &self.name
    }
    /// Its first byte in the environment's views.
    pub fn offset(&self) -> u64 {
        self.offset
    }
    /// Its length in bytes (whole pages).
    pub fn len(&self) -> u64 {
        self.len
    }
    /// Whether it has no bytes (never: a named region has at least a page).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The view's offset of `[off, off+len)` of this region, if the range
    /// lies inside it.
    pub fn at(&self, off: u64, len: usize) -> Result<u64> {
        match off.checked_add(len as u64) {
            Some(end) if end <= self.len => Ok(self.offset + off),
            _ => Err(Error::OutOfRange {
                off,
                len,
                size: self.len as usize,
            }),
        }
    }

    /// Reads a plain value at `off` of this region (see [`View::read`]).
    pub fn read<T: Pod>(&self, v: &View, off: u64) -> Result<T> {
        v.read(self.at(off, std::mem::size_of::<T>())?)
    }
    /// Writes a plain value at `off` of this region (see [`View::write`]).
    pub fn write<T: Pod>(&self, v: &mut View, off: u64, value: &T) -> Result<()> {
        v.write(self.at(off, std::mem::size_of::<T>())?, value)
    }
    /// `len` bytes at `off` of this region (see [`View::slice`]).
    pub fn slice<'a>(&self, v: &'a View, off: u64, len: usize) -> Result<&'a [u8]> {
        v.slice(self.at(off, len)?, len)
    }
    /// `len` writable bytes at `off` of this region (see [`View::slice_mut`]).
    pub fn slice_mut<'a>(&self, v: &'a mut View, off: u64, len: usize) -> Result<&'a mut [u8]> {
        v.slice_mut(self.at(off, len)?, len)
    }
    /// Its first byte in `v`'s mapping, for plain loads and stores inside
    /// `v`'s transactions (as [`View::base`]). `v` must be a view of this
    /// region's environment; the view's size must include the region (a
    /// view opened before the region was created sees it from its next
    /// transaction on).
    pub fn base(&self, v: &View) -> Result<*mut u8> {
        if self.offset + self.len > v.len() as u64 {
            return Err(Error::OutOfRange {
                off: self.offset,
                len: self.len as usize,
                size: v.len(),
            });
        }
        // In bounds of the view's mapping (checked above).
        Ok(v.base().wrapping_add(self.offset as usize))
    }
}

fn not_env(region: &Region, why: &str) -> Error {
    Error::NotARegion {
        path: region.path().to_path_buf(),
        what: format!("not a txmap environment: {why}"),
    }
}

fn check_name(name: &str) -> Result<()> {
    if name.is_empty() || name.len() > MAX_NAME || name.contains('\0') {
        return Err(Error::Invalid(format!(
            "a region name has 1 to {MAX_NAME} bytes and no NUL: {name:?}"
        )));
    }
    Ok(())
}

/// A damaged catalog must not hand out ranges outside the file's `size`
/// bytes.
fn check_inside(catalog: &[EnvRegion], size: u64, path: &Path) -> Result<()> {
    for e in catalog {
        if e.offset.checked_add(e.len).is_none_or(|end| end > size) {
            return Err(Error::Corrupt {
                path: path.to_path_buf(),
                offset: 0,
                what: format!(
                    "environment catalog: region \"{}\" at {}+{} lies outside the file's {} bytes",
                    e.name, e.offset, e.len, size
                ),
                lost: None,
            });
        }
    }
    Ok(())
}

/// The catalog's entries, checked against its own bounds (`check_inside`
/// checks them against the file).
fn read_catalog(v: &View) -> Result<Vec<EnvRegion>> {
    let page = v.slice(0, PAGE as usize)?;
    let bad = |offset: u64, what: String| Error::Corrupt {
        path: v.region().path().to_path_buf(),
        offset,
        what: format!("environment catalog: {what}"),
        lost: None,
    };
    if page[..8] != MAGIC {
        return Err(bad(0, "no catalog magic".into()));
    }
    let count = u32::from_le_bytes(page[8..12].try_into().unwrap_or_default()) as usize;
    if count > MAX_REGIONS {
        return Err(bad(8, format!("{count} entries (at most {MAX_REGIONS})")));
    }
    let mut out = Vec::with_capacity(count);
    let mut end = 1u64;
    for i in 0..count {
        let at = (HEAD + i as u64 * ENTRY) as usize;
        let e = &page[at..at + ENTRY as usize];
        let first = u64::from_le_bytes(e[..8].try_into().unwrap_or_default());
        let pages = u64::from_le_bytes(e[8..16].try_into().unwrap_or_default());
        let n = e[16] as usize;
        let name = (1..=MAX_NAME)
            .contains(&n)
            .then(|| std::str::from_utf8(&e[17..17 + n]).ok())
            .flatten()
            .ok_or_else(|| bad(at as u64 + 16, format!("entry {i}: bad name")))?;
        // Regions lie one after another from page 1, in catalog order.
        if first != end
            || pages == 0
            || first.checked_add(pages).is_none_or(|x| x > u64::MAX / PAGE)
        {
            return Err(bad(
                at as u64,
                format!(
                    "entry {i} (\"{name}\"): pages {first}+{pages}, expected to start at {end}"
                ),
            ));
        }
        end = first + pages;
        out.push(EnvRegion {
            name: name.to_owned(),
            offset: first * PAGE,
            len: pages * PAGE,
        });
    }
    Ok(out)
}
