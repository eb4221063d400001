//! The region-file write of a large round written in place, taken off
//! `View::round`'s path (`RegionInner::commit_round_in_place`): once the
//! round's page journal is synced the round is durable, so its pages are
//! copied from the journal into the region file by a thread of its own
//! while the program goes on.
//!
//! Until that copy is done the region file is behind what shared memory
//! says it holds, so every reader of the file waits for it:
//! - in this process, every turn on the MVCC read side (`wait_readable`:
//!   view installs, the snapshot copies of an abort, diffs, backups) and
//!   the views' direct reads of the file; commits, checkpoints (which sync
//!   the file and empty the journal) and the close join the thread first
//!   (`RegionInner::settle_round`);
//! - other processes: the thread holds the region's transition lock until
//!   the copy and the page checksums are written, so none opens meanwhile.
//!
//! A crash at any point leaves the synced journal, which continues the
//! region header on disk: recovery writes its pages again.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::error::{Error, Result};
use crate::os::mem::PAGE;
use crate::wal::format::HEADER_BYTES;

/// Rounds of at least this many changed pages are written into the file
/// off `round`'s path; smaller ones inline (a thread is not worth it).
pub(crate) const OFF_PATH_PAGES: usize = 4096;
/// Pages copied per read and write.
const BATCH: usize = 1024;

/// What the copy needs, owned by its thread (duplicated descriptors: the
/// region may be closed only after the copy is joined).
pub(crate) struct Copy {
    pub region: std::path::PathBuf,
    pub journal: File,
    /// Where the first image lies in the journal.
    pub images_at: u64,
    pub data: File,
    pub sums: Option<File>,
    /// The transition lock (same open file description as the region's).
    pub transition: File,
    /// The round's pages, in journal order.
    pub pages: Vec<u32>,
}

/// A process's round copy in flight, if any.
#[derive(Default)]
pub(crate) struct RoundWrite {
    /// The id of the process whose thread copies, while a copy runs, else
    /// 0 (readers wait on it as a futex word; a forked child's copy of it
    /// names its parent, whose thread it does not have, and never waits).
    busy: Arc<AtomicU32>,
    thread: Mutex<Option<std::thread::JoinHandle<Result<()>>>>,
}

impl RoundWrite {
    /// Marks a copy under way: every reader waits from now on.
    pub(crate) fn begin(&self) {
        self.busy.store(own_pid(), Ordering::Release);
    }

    /// Whether a copy is under way.
    pub(crate) fn busy(&self) -> bool {
        self.busy.load(Ordering::Acquire) != 0
    }

    /// Waits until no copy is under way. Async-signal-safe (an atomic and
    /// `futex`), so the fault handler may call it. Inlined down to one
    /// load: every read on the MVCC read side passes here.
    #[inline]
    pub(crate) fn wait_readable(&self) {
        if self.busy.load(Ordering::Acquire) != 0 {
            self.wait_copied();
        }
    }

    #[cold]
    fn wait_copied(&self) {
        loop {
            let b = self.busy.load(Ordering::Acquire);
            if b == 0 || b != own_pid() {
                return;
            }
            crate::os::lock::futex_wait_bits(
                &self.busy,
                b,
                Duration::from_secs(1),
                std::num::NonZeroU32::MAX,
            );
        }
    }

    /// Runs `copy` on a thread of its own (inline if none can be started);
    /// `begin` was called. The thread releases the transition lock when
    /// the copy succeeded.
    pub(crate) fn start(&self, copy: Copy) -> Result<()> {
        let done = Done(Arc::clone(&self.busy));
        let job = move || {
            let r = copy.run();
            if r.is_ok() {
                let _ = rustix::fs::flock(&copy.transition, rustix::fs::FlockOperation::Unlock);
            }
            drop(done);
            r
        };
        let mut slot = crate::os::lock::lock(&self.thread);
        debug_assert!(slot.is_none(), "one round copy at a time");
        let job = Arc::new(Mutex::new(Some(job)));
        let run = Arc::clone(&job);
        let spawned = std::thread::Builder::new()
            .name("txmap-round".into())
            .spawn(move || match crate::os::lock::lock(&run).take() {
                Some(job) => job(),
                None => Ok(()),
            });
        match spawned {
            Ok(h) => {
                *slot = Some(h);
                Ok(())
            }
            Err(_) => match crate::os::lock::lock(&job).take() {
                Some(job) => job(),
                None => Ok(()),
            },
        }
    }

    /// Waits for the copy under way, if any, and returns its outcome (to
    /// one caller: another that waited meanwhile gets `Ok`, and finds the
    /// log poisoned after a failure).
    pub(crate) fn join(&self) -> Result<()> {
        // Held while joining: nobody returns before the copy is done.
        let mut slot = crate::os::lock::lock(&self.thread);
        let Some(h) = slot.take() else {
            return Ok(());
        };
        h.join()
            .unwrap_or_else(|_| Err(Error::Invalid("the round copy thread panicked".into())))
    }
}

/// Lets readers go on when dropped, also if the copy panicked: after a
/// failure they are never stuck; the error poisons the log at the next
/// join, and the synced journal still has the round for the next recovery.
struct Done(Arc<AtomicU32>);

impl Drop for Done {
    fn drop(&mut self) {
        self.0.store(0, Ordering::Release);
        crate::os::lock::futex_wake_all(&self.0);
    }
}

impl Copy {
    /// Copies the images from the journal into the region file, each run
    /// of consecutive pages with one write per batch, then records their
    /// checksums (nothing synced: the next checkpoint syncs the file).
    fn run(&self) -> Result<()> {
        crate::debug::round_copy_pause();
        let journal_err = |e| {
            Error::io(
                "read page journal",
                crate::journal::journal_path(&self.region),
                e,
            )
        };
        let data_err = |e| Error::io("write a round into", &self.region, e);
        let mut crcs = Vec::with_capacity(if self.sums.is_some() {
            self.pages.len()
        } else {
            0
        });
        let mut buf = vec![0u8; BATCH.min(self.pages.len()) * PAGE];
        let mut i = 0;
        while i < self.pages.len() {
            let first = self.pages[i];
            let mut n = 1;
            while i + n < self.pages.len()
                && n < BATCH
                && u64::from(self.pages[i + n]) == u64::from(first) + n as u64
            {
                n += 1;
            }
            let b = &mut buf[..n * PAGE];
            self.journal
                .read_exact_at(b, self.images_at + (i * PAGE) as u64)
                .map_err(journal_err)?;
            self.data
                .write_all_at(b, HEADER_BYTES + u64::from(first) * PAGE as u64)
                .map_err(data_err)?;
            if self.sums.is_some() {
                for (k, page) in b.chunks_exact(PAGE).enumerate() {
                    crcs.push((u64::from(first) + k as u64, crate::sums::page_crc(page)));
                }
            }
            if i == 0 {
                crate::debug::hit(crate::debug::CrashPoint::RoundCopying);
            }
            i += n;
        }
        if let Some(s) = &self.sums {
            let path = crate::sums::sums_path(&self.region);
            crate::sums::write_entries(&mut crcs, |buf, at| {
                s.write_all_at(buf, at)
                    .map_err(|e| Error::io("write page checksums to", &path, e))
            })?;
        }
        Ok(())
    }
}

/// This process's id (never 0). Async-signal-safe.
fn own_pid() -> u32 {
    rustix::process::getpid().as_raw_nonzero().get() as u32
}

/// A duplicate of `fd` that the copy's thread owns.
pub(crate) fn dup(fd: std::os::fd::BorrowedFd<'_>, path: &std::path::Path) -> Result<File> {
    rustix::io::fcntl_dupfd_cloexec(fd, 0)
        .map(File::from)
        .map_err(|e| Error::io("duplicate the descriptor of", path, e.into()))
}
