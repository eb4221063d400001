//! A simulated storage device for crash and error tests.
//!
//! Contents live in a memfd (so a region can map them like a file). Writes and
//! resizes since the last sync are remembered; [`SimStorage::crash_image`]
//! produces what a disk could hold after power loss: every synced byte, and
//! each unsynced write kept, dropped, or torn at 512-byte sectors. A countdown
//! makes the n-th write or sync fail, as a full or failing disk would, and a
//! [`Faults`] plan (shared by several devices) fails one chosen call of any
//! kind with a chosen errno and counts the calls made.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use super::Storage;

const SECTOR: usize = 512;

/// What a simulated crash does to unsynced writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CrashMode {
    /// Every unsynced write is lost.
    DropAll,
    /// Each unsynced write is kept, lost, or torn (some sectors kept), by the seed.
    Random(u64),
}

#[derive(Default)]
struct SimState {
    durable: Vec<u8>,
    pending: Vec<Pending>,
    /// Write or sync calls left before the injected failure, if any.
    countdown: Option<u64>,
    failed: bool,
}

enum Pending {
    Write(u64, Vec<u8>),
    SetLen(u64),
}

/// The kinds of [`Storage`] call a [`Faults`] plan counts and can fail.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Call {
    Len,
    Read,
    Write,
    SetLen,
    Allocate,
    Sync,
}

impl Call {
    /// Every kind, in a fixed order.
    pub const ALL: [Call; 6] = [
        Call::Len,
        Call::Read,
        Call::Write,
        Call::SetLen,
        Call::Allocate,
        Call::Sync,
    ];
}

/// One injected failure that happened.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fired {
    pub call: Call,
    /// The device's path (`sim:NAME`).
    pub path: PathBuf,
    pub errno: i32,
}

#[derive(Default)]
struct FaultState {
    counts: [u64; Call::ALL.len()],
    /// (kind or any, calls of it left before the failing one, errno).
    plan: Option<(Option<Call>, u64, i32)>,
    fired: Option<Fired>,
}

/// Counts the calls made to the devices that share it and fails one chosen
/// call, once: the n-th of one kind or of all kinds together, with a chosen
/// errno. A failed call changes nothing on its device.
#[derive(Default)]
pub struct Faults {
    state: Mutex<FaultState>,
}

impl Faults {
    /// A plan that fails nothing.
    pub fn new() -> Arc<Faults> {
        Arc::new(Faults::default())
    }

    /// Makes the `n`-th call from now (0 = the next) of kind `call` (any kind
    /// if `None`) fail with `errno`; the calls after it succeed again.
    pub fn fail_nth(&self, call: Option<Call>, n: u64, errno: i32) {
        let mut st = self.lock();
        st.plan = Some((call, n, errno));
        st.fired = None;
    }

    /// Cancels a failure not yet injected.
    pub fn disarm(&self) {
        self.lock().plan = None;
    }

    /// The failure injected since the last `fail_nth`, if it happened.
    pub fn fired(&self) -> Option<Fired> {
        self.lock().fired.clone()
    }

    /// Calls of kind `call` made so far (failed ones included).
    pub fn count(&self, call: Call) -> u64 {
        self.lock().counts[call as usize]
    }

    /// Calls of every kind made so far.
    pub fn total(&self) -> u64 {
        self.lock().counts.iter().sum()
    }

    /// Sets every count back to zero.
    pub fn reset_counts(&self) {
        self.lock().counts = Default::default();
    }

    /// Counts a call of kind `call` to the device at `path`; fails it if
    /// the plan says so.
    fn call(&self, call: Call, path: &Path) -> std::io::Result<()> {
        let mut st = self.lock();
        st.counts[call as usize] += 1;
        let Some((kind, n, errno)) = st.plan else {
            return Ok(());
        };
        if kind.is_some_and(|k| k != call) {
            return Ok(());
        }
        if n > 0 {
            st.plan = Some((kind, n - 1, errno));
            return Ok(());
        }
        st.plan = None;
        st.fired = Some(Fired {
            call,
            path: path.to_path_buf(),
            errno,
        });
        Err(std::io::Error::from_raw_os_error(errno))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, FaultState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// An in-memory storage device that forgets unsynced writes on a simulated crash.
pub struct SimStorage {
    live: OwnedFd,
    path: PathBuf,
    state: Mutex<SimState>,
    faults: Arc<Faults>,
}

impl SimStorage {
    /// An empty device; `name` appears in error messages.
    pub fn new(name: &str) -> std::io::Result<SimStorage> {
        Self::from_bytes(name, Vec::new())
    }

    /// A device holding `bytes`, all durable.
    pub fn from_bytes(name: &str, bytes: Vec<u8>) -> std::io::Result<SimStorage> {
        Self::with_faults(name, bytes, Faults::new())
    }

    /// A device holding `bytes`, all durable, whose calls `faults` counts
    /// and may fail (share one plan between devices to count calls across
    /// them).
    pub fn with_faults(
        name: &str,
        bytes: Vec<u8>,
        faults: Arc<Faults>,
    ) -> std::io::Result<SimStorage> {
        let live = crate::os::mem::memfd(name)?;
        let f = std::fs::File::from(live.try_clone()?);
        std::os::unix::fs::FileExt::write_all_at(&f, &bytes, 0)?;
        Ok(SimStorage {
            live,
            path: PathBuf::from(format!("sim:{name}")),
            state: Mutex::new(SimState {
                durable: bytes,
                ..SimState::default()
            }),
            faults,
        })
    }

    /// The plan that counts and fails this device's calls.
    pub fn faults(&self) -> &Arc<Faults> {
        &self.faults
    }

    /// Makes the `n`-th write or sync from now (0 = the next) fail, and all after it.
    pub fn fail_after(&self, n: u64) {
        self.lock().countdown = Some(n);
    }

    /// Number of writes and resizes not yet synced.
    pub fn unsynced(&self) -> usize {
        self.lock().pending.len()
    }

    /// The bytes a disk could hold if power failed now.
    pub fn crash_image(&self, mode: CrashMode) -> Vec<u8> {
        let st = self.lock();
        let mut img = st.durable.clone();
        let mut rng = match mode {
            CrashMode::DropAll => None,
            CrashMode::Random(seed) => Some(SplitMix(seed)),
        };
        for p in &st.pending {
            let Some(r) = rng.as_mut() else { break };
            match p {
                Pending::SetLen(len) => {
                    if r.next() % 2 == 0 {
                        img.resize(*len as usize, 0);
                    }
                }
                Pending::Write(off, data) => {
                    let choice = r.next() % 3;
                    if choice == 0 {
                        continue; // lost
                    }
                    let off = *off as usize;
                    let end = off + data.len();
                    if img.len() < end {
                        img.resize(end, 0);
                    }
                    if choice == 1 {
                        img[off..end].copy_from_slice(data);
                    } else {
                        // torn: each sector independently kept or lost
                        let mut s = 0;
                        while s < data.len() {
                            let e = (s + SECTOR - (off + s) % SECTOR).min(data.len());
                            if r.next() % 2 == 0 {
                                img[off + s..off + e].copy_from_slice(&data[s..e]);
                            }
                            s = e;
                        }
                    }
                }
            }
        }
        img
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, SimState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn tick(st: &mut SimState) -> std::io::Result<()> {
        if st.failed {
            return Err(std::io::Error::from_raw_os_error(libc::EIO));
        }
        if let Some(n) = st.countdown.as_mut() {
            if *n == 0 {
                st.failed = true;
                return Err(std::io::Error::from_raw_os_error(libc::ENOSPC));
            }
            *n -= 1;
        }
        Ok(())
    }

    fn file(&self) -> std::mem::ManuallyDrop<std::fs::File> {
        use std::os::fd::{AsRawFd, FromRawFd};
        // SAFETY: the File borrows our descriptor and is never dropped (ManuallyDrop).
        std::mem::ManuallyDrop::new(unsafe { std::fs::File::from_raw_fd(self.live.as_raw_fd()) })
    }
}

impl Storage for SimStorage {
    fn len(&self) -> std::io::Result<u64> {
        self.faults.call(Call::Len, &self.path)?;
        Ok(self.file().metadata()?.len())
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        self.faults.call(Call::Read, &self.path)?;
        std::os::unix::fs::FileExt::read_exact_at(&*self.file(), buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> std::io::Result<()> {
        let mut st = self.lock();
        self.faults.call(Call::Write, &self.path)?;
        Self::tick(&mut st)?;
        std::os::unix::fs::FileExt::write_all_at(&*self.file(), buf, offset)?;
        st.pending.push(Pending::Write(offset, buf.to_vec()));
        Ok(())
    }
    fn set_len(&self, len: u64) -> std::io::Result<()> {
        let mut st = self.lock();
        self.faults.call(Call::SetLen, &self.path)?;
        Self::tick(&mut st)?;
        self.file().set_len(len)?;
        st.pending.push(Pending::SetLen(len));
        Ok(())
    }
    fn allocate(&self) -> std::io::Result<()> {
        // The memfd has no holes that matter; only the call can fail.
        self.faults.call(Call::Allocate, &self.path)
    }
    fn sync(&self) -> std::io::Result<()> {
        let mut st = self.lock();
        if let Err(e) = self.faults.call(Call::Sync, &self.path) {
            // As Linux does after a failed fsync: the unsynced writes are
            // marked clean, so no later sync writes them. Reads still show
            // them; a crash loses them.
            st.pending.clear();
            return Err(e);
        }
        Self::tick(&mut st)?;
        let pending = std::mem::take(&mut st.pending);
        for p in pending {
            match p {
                Pending::SetLen(len) => st.durable.resize(len as usize, 0),
                Pending::Write(off, data) => {
                    let (off, end) = (off as usize, off as usize + data.len());
                    if st.durable.len() < end {
                        st.durable.resize(end, 0);
                    }
                    st.durable[off..end].copy_from_slice(&data);
                }
            }
        }
        Ok(())
    }
    fn fd(&self) -> BorrowedFd<'_> {
        self.live.as_fd()
    }
    fn path(&self) -> &Path {
        &self.path
    }
}

/// The crate's generator (`crate::rand`), here for the tests that use it
/// with the simulator.
pub use crate::rand::SplitMix;
