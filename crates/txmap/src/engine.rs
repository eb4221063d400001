//! The commit and checkpoint engine of an open region: the state every
//! handle and view of one process shares (`RegionInner`: files, image of
//! the region file, log, shared state), commits (validate, log, publish,
//! sync), checkpoints, growth, the repair after a dead lock holder, and the
//! last-out close. Below the view (which commits through it) and the
//! handle (`region.rs`, which opens it).

use std::borrow::Cow;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use crate::error::{Error, Result};
use crate::io::Storage;
use crate::mvcc::Mvcc;
use crate::os::lock::lock;
use crate::os::mem::{Access, PAGE, Reservation, round_up};
use crate::wal::format::{HEADER_BYTES, LogHeader, LoggedOp, Range, RegionHeader};
use crate::wal::log::Log;

use crate::options::{Durability, Options};
use crate::recovery::{publish_record, write_region_header};

/// A handle's or a view's strong reference to a region. It is dropped
/// under the region's round lock, which the async flusher holds while it
/// holds a reference of its own: so the last reference is always dropped,
/// and the region closed (last-out checkpoint, file locks released), on the
/// thread that closed the last handle, before that call returns. (Before,
/// `xShutdown` could return while the flusher still held the region, and an
/// immediate reopen in the other durability mode failed.)
#[derive(Clone)]
pub(crate) struct RegionRef(Option<Arc<RegionInner>>);

impl RegionRef {
    pub(crate) fn new(inner: Arc<RegionInner>) -> RegionRef {
        RegionRef(Some(inner))
    }
}

impl std::ops::Deref for RegionRef {
    type Target = Arc<RegionInner>;
    fn deref(&self) -> &Arc<RegionInner> {
        self.0
            .as_ref()
            .expect("a region reference is used only until dropped")
    }
}

impl Drop for RegionRef {
    fn drop(&mut self) {
        if let Some(inner) = self.0.take() {
            // A forked child has no flusher (and may have inherited the
            // lock held by the parent's, forever): it drops as it is.
            if inner.check_owner().is_err() {
                return;
            }
            let round = Arc::clone(&inner.round);
            let held = lock(&round);
            // The last reference (the flusher's is taken only under
            // `round`): its flusher is joined once `round` is free, where
            // it finds the region gone (see `Fence::stop` for why a
            // close returns only after its threads are gone).
            let flusher = if Arc::strong_count(&inner) == 1 {
                lock(&inner.flusher).take()
            } else {
                None
            };
            drop(inner);
            drop(held);
            if let Some(h) = flusher {
                h.thread().unpark();
                let _ = h.join();
            }
        }
    }
}

/// File locks that order opening and closing between processes.
pub(crate) struct OpenLocks {
    /// Shared while the region is open here; exclusive for whoever finds
    /// itself alone (it recovers, or removes the shared state at close).
    pub(crate) users: std::fs::File,
    /// Exclusive around the open and close transitions.
    pub(crate) transition: std::fs::File,
}

pub(crate) struct RegionInner {
    pub path: PathBuf,
    pub data: Box<dyn Storage>,
    /// A read-only shared mapping of the data file (header page included).
    pub image: Reservation,
    /// Bytes of the region mapped in `image` (grows when another process grows the region).
    pub(crate) image_mapped: Mutex<u64>,
    pub log: Log,
    pub mvcc: Mvcc,
    pub opts: Options,
    pub(crate) recovered: u64,
    pub(crate) recovery_loss: Vec<String>,
    pub(crate) opened_alone: bool,
    pub(crate) flusher: Mutex<Option<std::thread::JoinHandle<()>>>,
    /// Held by the flusher while it holds a strong reference, and by a
    /// `RegionRef` while it drops its own (see `RegionRef`).
    pub(crate) round: Arc<Mutex<()>>,
    /// The process that opened the region. A child forked from it shares the
    /// file locks but must open the region itself.
    pub owner: rustix::process::Pid,
    /// `signal::forks()` when opened: differs in a forked child.
    pub fork_generation: usize,
    pub(crate) locks: Option<OpenLocks>,
    /// Memory of closed views, for the next views opened (`View::open`).
    pub(crate) view_pool: Mutex<Vec<crate::viewmem::ViewMemory>>,
    /// The fixed address recorded in the region file (0: none); written
    /// back with every region header.
    pub address: usize,
    /// The page checksum table, when the region keeps one.
    pub sums: Option<crate::sums::PageSums>,
    /// The page journal's path (`journal.rs`); `None` for a region opened
    /// over given storages (`Region::open_with`), whose checkpoints write
    /// pages without one.
    pub(crate) journal: Option<PathBuf>,
    /// Held for writing by a round that writes its pages straight into the
    /// region file (`commit_round_in_place`); views take it for reading
    /// while they claim a slot, so none appears meanwhile.
    pub(crate) round_gate: std::sync::RwLock<()>,
    /// This process's views and its fence thread (issue 20, `view/fence.rs`).
    pub(crate) fence: crate::fencectl::Fence,
    /// `data` again when the region is a plain file (`plainfile.rs`).
    pub(crate) plain: Option<Arc<crate::io::plain::PlainStorage>>,
    /// The copy of a large round from its journal into the region file,
    /// while it is under way (`roundwrite.rs`).
    pub(crate) round_write: crate::roundwrite::RoundWrite,
}

/// `flock(2)` on `f` (a lock file of the region at `path`): false if a
/// non-blocking request would block.
pub(crate) fn flock(
    f: &std::fs::File,
    op: rustix::fs::FlockOperation,
    path: &Path,
) -> Result<bool> {
    match rustix::fs::flock(f, op) {
        Ok(()) => Ok(true),
        Err(rustix::io::Errno::WOULDBLOCK) => Ok(false),
        Err(e) => Err(Error::io("lock", path, e.into())),
    }
}

/// Checks a region size: whole pages, at least one, at most `max`.
pub(crate) fn check_size(size: u64, max: u64) -> Result<()> {
    if size == 0 || !size.is_multiple_of(PAGE as u64) {
        return Err(Error::Invalid(format!(
            "region size {size} must be a positive multiple of the page size {PAGE}"
        )));
    }
    if size > max {
        return Err(Error::TooLarge(format!(
            "region size {size} exceeds the maximum {max}; open with a larger Options::max_size"
        )));
    }
    Ok(())
}

/// `PAGE_CHECK`'s arguments for the commit's versions (`pages`) that
/// `ops` wrote: replay then finds out if an operation gives other bytes.
fn page_check_args(ops: &[crate::wal::format::LoggedOp<'_>], pages: &[(u32, &[u8])]) -> Vec<u8> {
    let written: std::collections::BTreeSet<u32> =
        ops.iter().flat_map(|o| o.pages.iter().copied()).collect();
    crate::ops::builtin::page_check_args(
        pages
            .iter()
            .filter(|(p, _)| written.contains(p))
            .map(|&(p, b)| (p, b)),
    )
}

/// `ops` followed by a `PAGE_CHECK` with `args`, after every range (`at`
/// = `n_ranges`).
fn with_page_check<'b>(
    ops: &[crate::wal::format::LoggedOp<'b>],
    n_ranges: usize,
    args: &'b [u8],
) -> Vec<crate::wal::format::LoggedOp<'b>> {
    let mut out = ops.to_vec();
    out.push(crate::wal::format::LoggedOp {
        at: n_ranges as u32,
        id: crate::ops::builtin::PAGE_CHECK,
        pages: Vec::new(),
        args,
    });
    out
}

/// What commit-time operations did to the newest committed state
/// (`RegionInner::commit_time`).
/// Borrowed when it is the transaction's own run (`Ahead::local`).
#[derive(Default)]
pub(crate) struct Commuted<'a> {
    /// The pages they changed, as they left them.
    pub pages: Vec<(u32, Cow<'a, [u8]>)>,
    /// For each operation, the bytes it wrote (offset, bytes), in order.
    pub writes: Vec<Cow<'a, Writes>>,
}

/// The bytes one commit-time operation wrote: (offset, bytes), in order.
type Writes = [(u64, Vec<u8>)];

/// How many times a commit runs its commit-time operations again before
/// the commit lock when it finds the run ahead stale under the lock (then
/// they run under it).
const AHEAD_RERUNS: u32 = 1;

/// Changed bytes from which a commit has a helper thread (`Beside`) extend
/// the log while it reserves versions and encodes the record, and (when
/// durable) sync the record while it publishes the versions under the
/// commit lock (a bulk load's: the copies then cost no time beside the
/// sync). Below it a thread costs more than it saves.
const SYNC_BESIDE_FROM: usize = 1 << 20;

/// What a large commit's helper thread does for the log (`Beside`).
enum LogJob {
    /// Make room for the next record, of this many bytes (the committer
    /// holds the commit lock and waits for it before appending).
    Room(usize),
    /// Make record `seq` durable (`Log::flush`).
    Sync(u64),
}

/// A thread for the log's slow steps of a commit of `SYNC_BESIDE_FROM`
/// changed bytes or more, scoped to the commit: each job asked is answered
/// in turn.
struct Beside {
    jobs: std::sync::mpsc::Sender<LogJob>,
    done: std::sync::mpsc::Receiver<Result<()>>,
}

impl Beside {
    /// The thread, or `None` if it cannot be started (the commit then
    /// does its steps itself).
    fn start<'s>(
        s: &'s std::thread::Scope<'s, '_>,
        log: &'s Log,
        h: &'s crate::wal::shared::LogShared,
    ) -> Option<Beside> {
        let (jobs, todo) = std::sync::mpsc::channel();
        let (answer, done) = std::sync::mpsc::channel();
        std::thread::Builder::new()
            .name("txmap-log".into())
            .stack_size(64 << 10)
            .spawn_scoped(s, move || {
                for job in todo {
                    let r = match job {
                        LogJob::Room(len) => log.make_room_next(h, len),
                        LogJob::Sync(seq) => log.flush(h, seq),
                    };
                    if answer.send(r).is_err() {
                        break;
                    }
                }
            })
            .ok()?;
        Some(Beside { jobs, done })
    }

    /// Hands over `job`; false if the thread is gone.
    fn ask(&self, job: LogJob) -> bool {
        self.jobs.send(job).is_ok()
    }

    /// The answer to the job asked last.
    fn answer(&self) -> Result<()> {
        self.done
            .recv()
            .unwrap_or_else(|_| Err(Error::Invalid("the log's helper thread ended".into())))
    }
}

/// A run of a commit's commit-time operations ahead of the commit lock
/// (`RegionInner::commit_time_ahead`).
pub(crate) struct Ahead<'a> {
    /// The newest commit it read.
    seq: u64,
    /// The region size then.
    size: u64,
    /// Every page it read or wrote.
    touched: Vec<u32>,
    commuted: Commuted<'a>,
    /// The run in the transaction itself (`Ahead::local`): its pages are
    /// what the committing view holds.
    local: bool,
}

impl<'a> Ahead<'a> {
    /// The run of a commit's commit-time operations in its transaction:
    /// on snapshot `seq`'s pages, in a region of `size` bytes.
    pub(crate) fn local(
        seq: u64,
        size: u64,
        touched: Vec<u32>,
        commuted: Commuted<'a>,
    ) -> Ahead<'a> {
        Ahead {
            seq,
            size,
            touched,
            commuted,
            local: true,
        }
    }
}

/// A logged commit, as its view needs it.
pub(crate) struct Committed {
    pub seq: u64,
    /// Every page the commit published holds in the committing view what
    /// it published: its commit-time operations, if any, gave the results
    /// they gave in the transaction (their run there stood, or nothing
    /// was committed since its snapshot), not results on newer pages.
    pub view_current: bool,
}

/// Runs commit-time operations `ops` in order on the pages `source` gives
/// (a page's bytes, `None` if unreadable): what they changed, the bytes
/// each wrote, and every page they read or wrote. A page of `written`
/// (sorted) is a conflict (`RegionInner::commute_pages`).
fn run_commute<'s>(
    ops: &[(usize, u32, &[u8])],
    written: &[u32],
    size: u64,
    source: &'s dyn Fn(u32) -> Option<&'s [u8]>,
) -> Result<(Commuted<'static>, Vec<u32>)> {
    if ops.is_empty() {
        return Ok((Commuted::default(), Vec::new()));
    }
    let out_of_range = |p: u32| Error::OutOfRange {
        off: u64::from(p) * PAGE as u64,
        len: PAGE,
        size: size as usize,
    };
    let peek = |p: u32| -> Result<&[u8]> {
        if written.binary_search(&p).is_ok() {
            return Err(Error::Conflict);
        }
        if u64::from(p + 1) * PAGE as u64 > size {
            return Err(out_of_range(p));
        }
        source(p).ok_or_else(|| out_of_range(p))
    };
    let mut load = |p: u32, buf: &mut [u8]| {
        buf.copy_from_slice(peek(p)?);
        Ok(())
    };
    let mut overlay = crate::ops::Overlay::with_peek(size, &mut load, &peek);
    let mut writes = Vec::with_capacity(ops.len());
    for (_, id, args) in ops {
        writes.push(Cow::Owned(overlay.run_recorded(*id, args)?));
    }
    let touched = overlay.seen_pages();
    Ok((
        Commuted {
            pages: overlay
                .into_pages()
                .into_iter()
                .map(|(p, b)| (p, Cow::Owned(b)))
                .collect(),
            writes,
        },
        touched,
    ))
}

/// Whether commit-time operation `args`, which wrote `writes` and changed
/// `n_pages` pages at commit, is logged as those bytes rather than as the
/// operation: the smaller of the two (bytes on a tie: a record without
/// byte-changing operations needs no page check, and its pages no page
/// journal at checkpoint).
fn log_as_bytes(args: &[u8], writes: &Writes, n_pages: usize) -> bool {
    // Sizes as in docs/FORMAT.md: a range is offset u64 + length u32 +
    // bytes; an operation 16 bytes + its pages + its arguments, and a page
    // check entry per page.
    let as_bytes: usize = writes.iter().map(|(_, b)| 12 + b.len()).sum();
    let as_op = 16 + 4 * n_pages + args.len() + 8 * n_pages;
    as_bytes <= as_op
}

/// A commit record's ranges and operations after its commit-time
/// operations ran (`commute`, indices into `ops`; `c`, what they did):
/// each is replaced by the bytes it wrote (`c.writes`) at its place in the
/// sequence when that is smaller ([`log_as_bytes`]), else kept with the
/// pages they changed. Replaying either gives what the operation gave
/// under the commit lock; a record of plain adds is byte diffs only
/// (idempotent: no page check, and its checkpoint needs no page journal).
pub(crate) fn commit_record<'b>(
    ranges: &[Range<'b>],
    ops: &[LoggedOp<'b>],
    commute: &[(usize, u32, &[u8])],
    c: &'b Commuted,
) -> (Vec<Range<'b>>, Vec<LoggedOp<'b>>) {
    if commute.is_empty() {
        return (ranges.to_vec(), ops.to_vec());
    }
    let changed: Vec<u32> = c.pages.iter().map(|&(p, _)| p).collect();
    // Each commit-time operation's index in `ops`: the bytes it wrote if
    // they are logged in its place, `None` if it stays an operation.
    let timed: std::collections::BTreeMap<usize, Option<&'b Writes>> = commute
        .iter()
        .zip(&c.writes)
        .map(|(&(i, _, args), w)| (i, log_as_bytes(args, w, changed.len()).then_some(&w[..])))
        .collect();
    let mut out_ranges = Vec::with_capacity(ranges.len() + timed.len());
    let mut out_ops = Vec::with_capacity(ops.len());
    let mut next = ops.iter().enumerate().peekable();
    for i in 0..=ranges.len() {
        while let Some((k, o)) = next.next_if(|(_, o)| o.at as usize == i) {
            match timed.get(&k) {
                Some(Some(w)) => out_ranges.extend(w.iter().map(|(offset, bytes)| Range {
                    offset: *offset,
                    bytes,
                })),
                // A kept commit-time operation names what it changed here
                // (for recovery and the page check).
                Some(None) => out_ops.push(LoggedOp {
                    at: out_ranges.len() as u32,
                    pages: changed.clone(),
                    ..o.clone()
                }),
                None => out_ops.push(LoggedOp {
                    at: out_ranges.len() as u32,
                    ..o.clone()
                }),
            }
        }
        if let Some(r) = ranges.get(i) {
            out_ranges.push(r.clone());
        }
    }
    (out_ranges, out_ops)
}

/// A transaction's changes, ready to commit.
pub(crate) struct CommitRequest<'a> {
    pub snapshot: u64,
    /// Pages whose reads must not have changed since the snapshot (serializable).
    pub read_pages: &'a [u32],
    /// Pages commit-time operations read that must be validated like
    /// reads (the operation stays where it ran in the record).
    pub op_reads: Vec<u32>,
    /// Serializable without a read set: tells which pages the transaction
    /// may have read; it conflicts if a commit after the snapshot changed
    /// one of them (or the change journal no longer reaches back).
    pub untracked_reads: Option<Box<dyn Fn(u32) -> bool + 'a>>,
    /// Pages written, each with its new content.
    pub pages: Vec<(u32, &'a [u8])>,
    pub ranges: Vec<Range<'a>>,
    /// Registered operations, interleaved with `ranges` (`crate::ops`).
    pub ops: Vec<crate::wal::format::LoggedOp<'a>>,
    /// Commit-time operations (index in `ops`, id, arguments) none of whose
    /// pages the transaction wrote, in order: applied under the commit
    /// lock to the newest committed versions of the pages they touch, which
    /// are then published; the log holds the bytes they wrote or the
    /// operations (`commit_record`).
    pub commute: Vec<(usize, u32, &'a [u8])>,
    /// The commit-time operations' run in the transaction, at its
    /// snapshot (`OpLog::local_run`): taken like a run ahead of the lock.
    pub local: Option<Ahead<'a>>,
    /// The committing view's snapshot slot.
    pub slot: usize,
}

impl CommitRequest<'_> {
    /// The pages the transaction wrote, sorted (what a commit-time
    /// operation may not touch: `RegionInner::commute_pages`).
    fn written_sorted(&self) -> Vec<u32> {
        let mut w: Vec<u32> = self.pages.iter().map(|&(p, _)| p).collect();
        w.sort_unstable();
        w
    }
}

impl RegionInner {
    /// Memory that closed views left for reuse.
    pub(crate) fn view_pool(&self) -> MutexGuard<'_, Vec<crate::viewmem::ViewMemory>> {
        lock(&self.view_pool)
    }

    /// Where region byte `off` lies in the data file's descriptor: after
    /// the region header (a plain file has none: `Storage::fd_shift`).
    pub(crate) fn fd_offset(&self, off: u64) -> u64 {
        HEADER_BYTES + off - self.data.fd_shift()
    }

    /// Fails in a process forked after the region was opened.
    #[inline]
    pub fn check_owner(&self) -> Result<()> {
        if crate::os::signal::forks_now() == self.fork_generation {
            return Ok(());
        }
        Err(Error::ForkedChild {
            path: self.path.clone(),
            owner: self.owner.as_raw_nonzero().get(),
            pid: rustix::process::getpid().as_raw_nonzero().get(),
        })
    }

    /// This process's id: the opener's, read from the handle unless this is
    /// a forked child (one `getpid` less per commit lock taken).
    pub(crate) fn pid(&self) -> u32 {
        if crate::os::signal::forks_now() == self.fork_generation {
            self.owner.as_raw_nonzero().get() as u32
        } else {
            std::process::id()
        }
    }

    #[inline]
    pub fn size(&self) -> u64 {
        self.mvcc.hdr().file.data_size()
    }

    fn shared_lock_err(&self, e: std::io::Error) -> Error {
        Error::io("lock shared state", self.mvcc.path(), e)
    }

    /// Where the region's data starts in this process's image of the file
    /// (past the header page); mapped up to the size `map_image` was given.
    pub fn image_data(&self) -> *const u8 {
        self.image.base().wrapping_add(HEADER_BYTES as usize)
    }

    /// Maps the region file in this process's image up to `size` bytes (other
    /// processes may have grown it).
    pub fn map_image(&self, size: u64) -> Result<()> {
        let mut mapped = lock(&self.image_mapped);
        if *mapped >= size {
            return Ok(());
        }
        let from = if *mapped == 0 {
            0
        } else {
            round_up((HEADER_BYTES + *mapped) as usize)
        };
        let to = round_up((HEADER_BYTES + size) as usize);
        // A plain file has no header page: the image's stays unmapped.
        let shift = self.data.fd_shift() as usize;
        let from = from.max(shift);
        self.image
            .map_shared(
                from,
                to - from,
                self.data.fd(),
                (from - shift) as u64,
                Access::Read,
            )
            .map_err(|e| Error::os("map region file", e))?;
        // Installs read single pages at random (read-ahead: view.rs sync_size).
        self.image.advise_random(from, to - from);
        *mapped = size;
        Ok(())
    }

    /// Takes the shared commit lock, first finishing what a holder that
    /// died left half done.
    pub fn lock_commit(&self) -> Result<crate::mvcc::Locked<'_>> {
        let l = self.mvcc.lock().map_err(|e| self.shared_lock_err(e))?;
        if l.owner_died
            && let Err(e) = self.repair(&l)
        {
            // The lock is consistent again, so no later holder would
            // repair: nobody may commit on the half-done state.
            crate::wal::log::poison(&self.mvcc.hdr().log, &e);
            return Err(e);
        }
        self.check_pending_groups()?;
        Ok(l)
    }

    /// Under the commit lock: a commit across several regions whose
    /// committer died after releasing the locks, before its group was
    /// durable in every log, may be in some logs and not in others; only
    /// recovery may decide it (and snapshots would stay below it forever).
    fn check_pending_groups(&self) -> Result<()> {
        let log = &self.mvcc.hdr().log;
        let Some((seq, pid)) = log.oldest_pending() else {
            return Ok(());
        };
        if pid == self.pid() || crate::os::shm::process_alive(pid) {
            return Ok(());
        }
        let e = crate::grouplog::group_err(
            &self.path,
            format!(
                "process {pid} died before commit {seq} across several regions was durable in \
                 every region; close the region in every process and open it again to recover"
            ),
        );
        crate::wal::log::poison(log, &e);
        Err(e)
    }

    /// Returns once commit `seq` is visible to snapshots (no commit across
    /// several regions before it is still waiting for its sync): a commit
    /// is acknowledged only then, so its committer's next transaction sees
    /// it, and nothing is acknowledged that follows a group that may yet be
    /// dropped. Every few milliseconds, checks under the commit lock that
    /// the oldest pending group's committer lives.
    pub(crate) fn wait_visible(&self, seq: u64) -> Result<()> {
        let log = &self.mvcc.hdr().log;
        loop {
            let seen = log.release_gen();
            if log.visible_cap() >= seq {
                return Ok(());
            }
            crate::wal::log::check_poison(log)?;
            let before = std::time::Instant::now();
            let wait = std::time::Duration::from_millis(5);
            log.wait_release(seen, wait);
            if before.elapsed() >= wait {
                drop(self.lock_commit()?);
            }
        }
    }

    /// After a conflict while a commit across several regions waits for
    /// its sync (the transaction's snapshot was below it): waits until the
    /// commits so far are visible, so the retry's snapshot sees them
    /// instead of conflicting again and again meanwhile. Caller holds no
    /// commit lock.
    pub(crate) fn wait_after_conflict(&self, e: &Error) {
        if matches!(e, Error::Conflict) {
            let _ = self.wait_visible(self.mvcc.commit_seq());
        }
    }

    /// A commutative operation applies to the newest committed page, so it
    /// must not touch a page that a commit across several regions not yet
    /// durable everywhere wrote: its record would then depend on a group
    /// that recovery may drop (its page check would fail). A conflict: the
    /// retry comes after the group's sync.
    pub(crate) fn check_commuted(&self, pages: &[(u32, Cow<'_, [u8]>)]) -> Result<()> {
        let visible = self.mvcc.visible_seq();
        if pages
            .iter()
            .any(|(p, _)| self.mvcc.page_seq(*p as usize) > visible)
        {
            return Err(Error::Conflict);
        }
        Ok(())
    }

    /// Repairs after a process died holding the commit lock:
    /// - a log reset whose new header reached the file but not shared memory
    ///   (or not all of it: the generation is published last) is completed;
    /// - records written before the death (the shared log end covers them)
    ///   but not yet published are published from the log (redo), so
    ///   sequence numbers never repeat and nothing another process may have
    ///   synced is lost; a record past the log end is ignored (its committer
    ///   was never told it committed) and overwritten by the next commit;
    /// - a page listed twice in the dirty list is listed once.
    fn repair(&self, l: &crate::mvcc::Locked<'_>) -> Result<()> {
        let h = self.mvcc.hdr();
        self.check_group_repair()?;
        h.log.end_interrupted_visibility_change();
        let storage = self.log.storage();
        let mut page = vec![0u8; HEADER_BYTES as usize];
        storage
            .read_at(&mut page, 0)
            .map_err(|e| Error::io("read header of", storage.path(), e))?;
        let disk = LogHeader::decode(&page)
            .map_err(|e| Error::corrupt(storage.path(), 0, e.to_string()))?;
        if disk.generation > h.log.generation() {
            crate::wal::log::publish_epoch(&h.log, &disk);
        }
        let (from, to, salt) = h.log.unpublished();
        if to > from {
            let mut bytes = vec![0u8; (to - from) as usize];
            storage
                .read_at(&mut bytes, from)
                .map_err(|e| Error::io("read", storage.path(), e))?;
            let mut at = 0;
            while at < bytes.len() {
                let r = crate::wal::format::decode_record(&bytes[at..], salt).map_err(|e| {
                    Error::corrupt(
                        storage.path(),
                        from + at as u64,
                        format!("unpublished record left by a dead process: {e:?}"),
                    )
                })?;
                at += r.len;
                if r.seq <= self.mvcc.commit_seq() {
                    continue;
                }
                publish_record(&self.mvcc, &*self.data, l, &r)?;
            }
            h.log.mark_published();
        }
        h.log.raise_written(self.mvcc.commit_seq());
        self.mvcc.dedupe_dirty(l);
        self.mvcc.order_repair(l);
        Ok(())
    }

    /// The version store could not take more versions: expire the oldest
    /// snapshot holding old ones, so memory comes back when it ends.
    pub(crate) fn version_store_full(&self, e: std::io::Error) -> Error {
        self.mvcc
            .expire_oldest(Log::synced_seq(&self.mvcc.hdr().log));
        Error::VersionStoreFull {
            path: self.mvcc.path().to_path_buf(),
            versions: self.mvcc.version_pages() as u64,
            reason: e.to_string(),
        }
    }

    /// Fails if this handle may not write the region's files.
    pub(crate) fn check_writable(&self, op: &'static str) -> Result<()> {
        if self.opts.read_only {
            return Err(Error::ReadOnly {
                op,
                path: self.path.clone(),
            });
        }
        Ok(())
    }

    pub fn grow(&self, size: u64) -> Result<()> {
        self.check_owner()?;
        self.check_writable("growing the region")?;
        let size = round_up(size as usize) as u64;
        let h = self.mvcc.hdr();
        let g = h.file.lock_grow().map_err(|e| self.shared_lock_err(e))?;
        let old = self.size();
        if size <= old {
            return Ok(());
        }
        check_size(size, self.opts.max_size)?;
        crate::wal::log::check_poison(&h.log)?;
        let before = self
            .data
            .len()
            .map_err(|e| Error::io("stat", &self.path, e))?;
        self.data
            .set_len(HEADER_BYTES + size)
            .map_err(|e| Error::io("allocate disk space to grow", &self.path, e))?;
        self.mvcc
            .back_tables(size / PAGE as u64)
            .map_err(|e| Error::io("grow shared state", self.mvcc.path(), e))?;
        let fresh_from =
            (old / PAGE as u64).max(before.saturating_sub(HEADER_BYTES).div_ceil(PAGE as u64));
        h.file.grown(&g, size, fresh_from);
        self.map_image(size)
    }

    /// Validates and commits; returns the commit's sequence number (and
    /// whether the committing view holds what it published) once it is
    /// as durable as the region's mode promises.
    pub fn commit(&self, mut req: CommitRequest<'_>) -> Result<Committed> {
        self.check_owner()?;
        self.check_writable("commit")?;
        self.settle_round()?;
        let h = self.mvcc.hdr();
        crate::wal::log::check_poison(&h.log)?;
        // The record's payload, less its fixed fields and operations (a
        // transaction's operations are few and small).
        let most = crate::wal::format::MAX_PAYLOAD - (1 << 20);
        let payload: usize = req.ranges.iter().map(|r| 12 + r.bytes.len()).sum();
        if payload > most {
            return Err(Error::TooLarge(format!(
                "a commit of {payload} bytes of changes: one log record holds at most {most} \
                 (a round alone with its region has no such limit)"
            )));
        }
        let order = self.order_turn(req.slot)?;
        let pass = self.mvcc.priority_enter(req.slot);
        // The transaction's own run stands if no page it touched changed
        // since its snapshot; else the operations run again on the newest
        // pages, still before the lock.
        let ahead = match req.local.take() {
            Some(a) if self.ahead_fresh(&a) => Some(a),
            _ => self.commit_time_ahead(&req),
        };
        let durable = self.opts.durability == Durability::Durable;
        // Whether the helper syncs the record (asked after the append).
        let synced_beside = std::cell::Cell::new(false);
        // Whether the commit-time operations' results are those of their
        // run in the transaction (`Committed::view_current`).
        let as_run_here = std::cell::Cell::new(false);
        // `helper`: a large commit's thread for the log (`Beside`).
        let locked = |helper: Option<&Beside>| -> Result<u64> {
            let mut ahead = ahead;
            let mut reruns = 0;
            let (l, fresh) = loop {
                if ahead.is_some() {
                    crate::debug::hit_before_commit_lock();
                }
                let l = self.lock_commit()?;
                if order.is_some() && !self.mvcc.order_is_next(&l, req.slot) {
                    return Err(self.order_skipped(req.slot));
                }
                self.validate(&req)?;
                // The run ahead counts only if fresh under the lock. A run
                // a commit made stale runs again before the lock, not under
                // it while others wait.
                let had = ahead.is_some();
                let fresh = ahead.take().filter(|a| self.ahead_fresh(a));
                if fresh.is_some() || !had || reruns == AHEAD_RERUNS {
                    break (l, fresh);
                }
                drop(l);
                reruns += 1;
                crate::debug::note_ahead_rerun();
                ahead = self.commit_time_ahead(&req);
            };
            // Their run here stood, or they ran again on the pages they
            // ran on here: nothing committed since the snapshot, and
            // operations are deterministic (replay relies on it too).
            as_run_here.set(
                fresh.as_ref().is_some_and(|a| a.local) || self.mvcc.commit_seq() == req.snapshot,
            );
            let commuted = self.commit_time(&req, fresh)?;
            let (ranges, rec_ops) = commit_record(&req.ranges, &req.ops, &req.commute, &commuted);
            let with_commuted;
            let pages: &[(u32, &[u8])] = if commuted.pages.is_empty() {
                &req.pages
            } else {
                let mut all = req.pages.clone();
                all.extend(commuted.pages.iter().map(|(p, b)| (*p, &b[..])));
                with_commuted = all;
                &with_commuted
            };
            let changes_bytes = crate::ops::changes_bytes(&rec_ops);
            let (check, checked);
            let ops = if changes_bytes {
                check = page_check_args(&rec_ops, pages);
                checked = with_page_check(&rec_ops, ranges.len(), &check);
                &checked[..]
            } else {
                &rec_ops[..]
            };
            // Room for the versions first: once the record is written, the
            // commit must be published. A large record's room in the log
            // (an extension and its sync) is made meanwhile.
            let reserve = || {
                self.mvcc
                    .reserve_unmapped(&l, pages.len())
                    .map_err(|e| self.version_store_full(e))
            };
            // Nothing is committed while the lock is held: the next number.
            let seq = self.mvcc.commit_seq() + 1;
            let encode = || {
                Log::encode(
                    &h.log,
                    l.guard(),
                    (seq, self.size()),
                    ranges.iter().cloned(),
                    ops,
                    None,
                )
            };
            let (fresh, rec) = if let Some(helper) = helper {
                // The helper makes the record's room in the log while the
                // versions are reserved and the record encoded here; the
                // fresh blocks are mapped while it syncs.
                let len = crate::wal::format::record_len(ranges.iter().cloned(), ops);
                let asked = helper.ask(LogJob::Room(len));
                let reserved = reserve();
                let rec = reserved.is_ok().then(encode);
                // Not asked (the thread ended): `append` makes the room.
                let room = if asked { helper.answer() } else { Ok(()) };
                let run = reserved?;
                room?;
                (Some(run), rec)
            } else {
                self.mvcc.map_reserved(reserve()?);
                (None, None)
            };
            if order.is_some() {
                self.mvcc.order_committing(&l, req.slot, seq);
            }
            crate::debug::hit(crate::debug::CrashPoint::CommitLocked);
            if changes_bytes {
                h.file.note_ops(seq);
            }
            let rec = rec.unwrap_or_else(encode);
            let logged = self.log.append_encoded(&h.log, l.guard(), rec);
            if let Err(e) = logged {
                self.mvcc.order_committing(&l, req.slot, 0);
                return Err(e);
            }
            crate::debug::hit(crate::debug::CrashPoint::CommitLogged);
            if let Some(helper) = helper.filter(|_| durable) {
                synced_beside.set(helper.ask(LogJob::Sync(seq)));
            }
            if let Some(run) = fresh {
                self.mvcc.map_reserved(run);
            }
            let published = self.mvcc.publish(&l, seq, pages, Log::synced_seq(&h.log));
            assert!(
                published.is_ok(),
                "publishing a logged commit failed after space was reserved: {published:?}"
            );
            h.log.mark_published();
            if order.is_some() {
                self.mvcc.order_done(&l, req.slot, true);
            }
            Ok(seq)
        };
        // Published: nothing can invalidate it any more, so a priority it
        // held stops making others wait now, not after its sync.
        let released = |locked: Result<u64>| {
            drop(pass);
            let seq = locked.inspect_err(|e| self.wait_after_conflict(e))?;
            self.mvcc.priority_release(req.slot);
            Ok(seq)
        };
        let seq = if payload >= SYNC_BESIDE_FROM {
            // Started before the lock, so that it runs by the time it is
            // asked; the sync runs while the versions are published, and
            // the commit returns once both are done, as below.
            std::thread::scope(|s| -> Result<u64> {
                let helper = Beside::start(s, &self.log, &h.log);
                let seq = released(locked(helper.as_ref()))?;
                if synced_beside.get() {
                    helper.as_ref().map_or(Ok(()), Beside::answer)?;
                } else if durable {
                    self.log.flush(&h.log, seq)?;
                }
                Ok(seq)
            })?
        } else {
            let seq = released(locked(None))?;
            if durable {
                self.log.flush(&h.log, seq)?;
            }
            seq
        };
        self.wait_visible(seq)?;
        if Log::epoch_bytes(&h.log) > self.opts.checkpoint_bytes {
            // This commit is already as durable as promised: a failing
            // checkpoint poisons the log, and the next call reports it.
            // The transaction reads nothing more: its snapshot (older than
            // its commit) must not hold the checkpoint back, or a log that
            // only commits checkpoint is never reset.
            self.mvcc.end(req.slot);
            let _ = self.checkpoint_unless_busy();
        }
        Ok(Committed {
            seq,
            view_current: req.commute.is_empty() || as_run_here.get(),
        })
    }

    /// A round (`view/rounds.rs`, `round`), or a large commit
    /// (`View::large_enough_for_place`): written straight into the region
    /// file when its view is alone with the region
    /// (`commit_round_in_place`); `None` when it must be committed as usual
    /// (`commit`, with diffs).
    pub(crate) fn commit_in_place(
        &self,
        req: &CommitRequest<'_>,
        round: bool,
    ) -> Result<Option<u64>> {
        self.check_owner()?;
        self.check_writable("commit")?;
        self.settle_round()?;
        crate::wal::log::check_poison(&self.mvcc.hdr().log)?;
        self.commit_round_in_place(req, round)
    }

    /// Waits for the copy of a round into the region file under way, if
    /// any (`roundwrite.rs`); its failure poisons the log. Before anything
    /// that syncs the file, overwrites the journal, or takes the
    /// transition lock.
    pub(crate) fn settle_round(&self) -> Result<()> {
        let r = self.round_write.join();
        if let Err(e) = &r {
            crate::wal::log::poison(&self.mvcc.hdr().log, e);
        }
        r
    }

    /// The copy of the journal of `pages` into the region file, on
    /// descriptors of its own (`roundwrite.rs`); `None` when it cannot run
    /// off the round's path (a plain file, a small round).
    fn off_path_copy(
        &self,
        journal: &Path,
        pages: &[(u32, &[u8])],
    ) -> Result<Option<crate::roundwrite::Copy>> {
        let Some(locks) = &self.locks else {
            return Ok(None);
        };
        if pages.len() < crate::roundwrite::OFF_PATH_PAGES
            || self.plain.is_some()
            || self.data.fd_shift() != 0
        {
            return Ok(None);
        }
        use std::os::fd::AsFd;
        let dup = crate::roundwrite::dup;
        let j = crate::io::FileStorage::open_read_only(journal)
            .map_err(|e| Error::io("open", journal, e))?;
        Ok(Some(crate::roundwrite::Copy {
            region: self.path.clone(),
            journal: dup(j.fd(), journal)?,
            images_at: HEADER_BYTES + crate::journal::list_bytes(pages.len()),
            data: dup(self.data.fd(), &self.path)?,
            sums: match &self.sums {
                Some(s) => Some(dup(s.fd(), &self.path)?),
                None => None,
            },
            transition: dup(locks.transition.as_fd(), &self.path)?,
            pages: pages.iter().map(|&(p, _)| p).collect(),
        }))
    }

    /// A round whose view is alone with the region (no other process has
    /// it open, no other view or paused transaction here): its pages go
    /// straight into the region file, through the page journal, with no
    /// log record and no versions, so a round is neither bounded by a
    /// record's size nor by the version store, and writes each page twice
    /// (journal, file) instead of three times (log, versions, checkpoint).
    /// `None` (commit it as usual) when it is not alone, or when the log
    /// must keep its epoch (pending nested top actions, an archive), or
    /// the commit has commit-time operations (their result is decided
    /// under the commit lock). Registered operations that ran in the
    /// transaction are in its pages (whose images the journal holds, so
    /// nothing replays them). A commit that is not a round (`round`
    /// false) goes in place only if nothing committed since its snapshot,
    /// so whatever it read is still current: no validation is needed.
    fn commit_round_in_place(&self, req: &CommitRequest<'_>, round: bool) -> Result<Option<u64>> {
        use rustix::fs::FlockOperation as F;
        let (Some(locks), Some(journal)) = (&self.locks, self.journal.as_deref()) else {
            return Ok(None);
        };
        if self.opts.log_archive.is_some() || !req.commute.is_empty() {
            return Ok(None);
        }
        // Nobody opens or closes meanwhile; converting our shared hold to
        // an exclusive one tells whether another process has it open (a
        // failed conversion drops the shared hold: it is taken again).
        flock(&locks.transition, F::LockExclusive, &self.path)?;
        let alone = flock(&locks.users, F::NonBlockingLockExclusive, &self.path);
        let mut copy = None;
        let r = match alone {
            Ok(true) => self.round_alone(req, round, journal, &mut copy),
            Ok(false) => Ok(None),
            Err(e) => Err(e),
        };
        let back = flock(&locks.users, F::LockShared, &self.path);
        match copy {
            // The copy's thread keeps the transition lock until the file
            // holds the round: no process opens the region meanwhile.
            Some(c) => {
                let started = self.round_write.start(c);
                if let Err(e) = &started {
                    crate::wal::log::poison(&self.mvcc.hdr().log, e);
                }
                back?;
                started?;
            }
            None => {
                let _ = rustix::fs::flock(&locks.transition, F::Unlock);
                back?;
            }
        }
        r
    }

    /// `commit_round_in_place` once no other process has the region open.
    /// A large round's pages go into the file off the round's path: `copy`
    /// is then what the caller starts once it let go of the users lock.
    fn round_alone(
        &self,
        req: &CommitRequest<'_>,
        round: bool,
        journal: &Path,
        copy: &mut Option<crate::roundwrite::Copy>,
    ) -> Result<Option<u64>> {
        let _gate = self.round_gate.write().unwrap_or_else(|e| e.into_inner());
        self.mvcc.reap_dead_slots();
        if self.mvcc.own_slots() != 1 {
            return Ok(None);
        }
        // Every commit so far goes to the file first.
        self.checkpoint()?;
        let h = self.mvcc.hdr();
        let g = h
            .file
            .lock_checkpoint()
            .map_err(|e| self.shared_lock_err(e))?;
        let l = self.lock_commit()?;
        let c = self.mvcc.commit_seq();
        if h.file.checkpoint_seq() != c
            || (!round && c != req.snapshot)
            || !self.log.pending_nta(&h.log, l.guard())?.is_empty()
        {
            return Ok(None);
        }
        if req
            .pages
            .iter()
            .any(|(p, _)| self.mvcc.page_seq(*p as usize) > req.snapshot)
        {
            return Err(Error::Conflict);
        }
        let seq = c + 1;
        // In file order: consecutive pages go into the file in one write
        // (the write set is in the order the transaction first stored).
        let mut pages = req.pages.clone();
        pages.sort_unstable_by_key(|&(p, _)| p);
        let r = (|| {
            self.journal_pages(journal, c, seq, &pages)?;
            crate::debug::hit(crate::debug::CrashPoint::RoundJournaled);
            // Its descriptors not duplicated (no descriptor left, say):
            // written here, as a small round is.
            match self.off_path_copy(journal, &pages).ok().flatten() {
                // Durable now: the pages go into the file on another
                // thread, and every reader of the file waits for it.
                Some(c) => {
                    if let Some(&(last, _)) = pages.last() {
                        h.file.writing_below(u64::from(last) + 1);
                    }
                    self.round_write.begin();
                    *copy = Some(c);
                }
                None => {
                    self.write_pages(&pages, "write a round into")?;
                    crate::debug::hit(crate::debug::CrashPoint::RoundWriting);
                }
            }
            // Durable in the journal: the file's sync and header wait for
            // the next checkpoint (`catch_up_header`), so a round costs one
            // sync, and the kernel writes the pages back meanwhile.
            h.file.journaled(&g, seq);
            Ok(())
        })();
        if let Err(e) = r {
            crate::wal::log::poison(&h.log, &e);
            return Err(e);
        }
        let pages: Vec<u32> = pages.iter().map(|&(p, _)| p).collect();
        self.mvcc.publish_in_file(&l, seq, &pages);
        // The log has no record of it: a new epoch starts after it.
        h.log.raise_written(seq);
        self.log.sync_all(&h.log)?;
        let reset = self.log.maybe_reset(&h.log, l.guard(), seq, seq)?;
        assert!(reset, "a round written in place starts a new log epoch");
        Ok(Some(seq))
    }

    /// Writes and syncs the page journal of `pages`: the state at commit
    /// `as_of` over the checkpoint `from` on disk (caller holds the
    /// checkpoint lock).
    fn journal_pages(
        &self,
        path: &Path,
        from: u64,
        as_of: u64,
        pages: &[(u32, &[u8])],
    ) -> Result<()> {
        let h = self.mvcc.hdr();
        let head = crate::journal::Head {
            region_id: h.region_id.load(Ordering::Acquire),
            generation: h.file.region_generation(),
            from,
            as_of,
            data_size: self.size(),
        };
        crate::journal::write(path, &head, pages)
    }

    /// Writes `pages` into the region file, each run of consecutive pages
    /// in one vectored write, and records their checksums (nothing synced).
    fn write_pages(&self, pages: &[(u32, &[u8])], op: &'static str) -> Result<()> {
        if let Some(end) = pages.iter().map(|&(p, _)| u64::from(p) + 1).max() {
            self.mvcc.hdr().file.writing_below(end);
        }
        let crcs = || -> Vec<(u64, u32)> {
            pages
                .iter()
                .map(|&(page, bytes)| (u64::from(page), crate::sums::page_crc(bytes)))
                .collect()
        };
        // The checksums are taken on another thread while the pages are written.
        let side = || self.sums.as_ref().map(|_| crcs());
        let taken = crate::io::beside(pages.len(), side, || self.write_runs(pages, op))?;
        if let Some(s) = &self.sums {
            let mut crcs = taken.flatten().unwrap_or_else(crcs);
            s.record(&mut crcs)?;
        }
        Ok(())
    }

    /// Writes `pages` into the region file, each run of consecutive pages
    /// in one vectored write (nothing synced).
    fn write_runs(&self, pages: &[(u32, &[u8])], op: &'static str) -> Result<()> {
        let mut start = 0;
        while start < pages.len() {
            let first = pages[start].0;
            let mut end = start + 1;
            while end < pages.len()
                && u64::from(pages[end].0) == u64::from(first) + (end - start) as u64
            {
                end += 1;
            }
            let run: Vec<&[u8]> = pages[start..end].iter().map(|&(_, b)| b).collect();
            self.data
                .write_all_vectored_at(&run, HEADER_BYTES + u64::from(first) * PAGE as u64)
                .map_err(|e| Error::io(op, &self.path, e))?;
            start = end;
        }
        Ok(())
    }

    /// Syncs the region file, writes a region header at checkpoint `seq`,
    /// records it in shared memory, and empties `journal` (its pages are
    /// under that header now). Caller holds the checkpoint lock `g`.
    fn write_checkpoint_header(
        &self,
        g: &crate::os::lock::Guard<'_>,
        seq: u64,
        journal: Option<&Path>,
    ) -> Result<()> {
        let h = self.mvcc.hdr();
        let next = RegionHeader {
            region_id: h.region_id.load(Ordering::Acquire),
            generation: h.file.region_generation() + 1,
            checkpoint_seq: seq,
            data_size: self.size(),
            address: self.address as u64,
        };
        write_region_header(&*self.data, self.sums.as_ref(), &next)?;
        h.file.checkpointed(g, next.generation, seq);
        match journal {
            Some(j) => crate::journal::clear(j),
            None => Ok(()),
        }
    }

    /// Writes the region header of a round put in the file through the
    /// page journal (`FileShared::journaled`), after syncing the file:
    /// before anything else may overwrite that journal. Caller holds the
    /// checkpoint lock.
    fn catch_up_header(&self, g: &crate::os::lock::Guard<'_>) -> Result<()> {
        let h = self.mvcc.hdr();
        let seq = h.file.behind();
        if seq == 0 {
            return Ok(());
        }
        let r = self.write_checkpoint_header(g, seq, self.journal.as_deref());
        if let Err(e) = &r {
            crate::wal::log::poison(&h.log, e);
        }
        r
    }

    /// The repair after a holder of the commit lock died: a commit across
    /// several regions it left in flight may be in some of their logs and not
    /// in others, and only recovery, which reads all of them, may decide it.
    fn check_group_repair(&self) -> Result<()> {
        let id = self.mvcc.hdr().log.group_in_flight();
        if id == 0 {
            return Ok(());
        }
        Err(crate::grouplog::group_err(
            &self.path,
            format!(
                "a process died inside commit {id:016x} across several regions; close the region \
                 in every process and open it again to recover"
            ),
        ))
    }

    /// The last close, after a checkpoint: once every commit is in the file,
    /// it is cut back to its length and the record says it was closed cleanly,
    /// with the length and modification time it has now.
    fn close_plain_clean(&self, p: &crate::io::plain::PlainStorage) -> Result<()> {
        use crate::io::plain::{PlainRecord, logical_len, stamp};
        let r = self;
        if r.mvcc.hdr().file.checkpoint_seq() != r.mvcc.commit_seq() {
            return Ok(()); // commits only in the log: the next open recovers
        }
        let rec = p.record()?;
        let len = logical_len(r.size(), rec.len);
        let d = p.data();
        let e = |op, x| Error::io(op, d.path(), x);
        if d.len().map_err(|x| e("stat", x))? != len {
            let partial = len == 0 || !len.is_multiple_of(PAGE as u64);
            if let Some(s) = r.sums.as_ref().filter(|_| partial) {
                // The last page's checksum covers bytes past the length: it goes
                // before the cut, so a crash between them leaves no mismatch.
                s.forget(len / PAGE as u64)?;
                s.sync()?;
            }
            d.set_len(len).map_err(|x| e("cut to its length", x))?;
            d.sync().map_err(|x| e("sync", x))?;
        }
        let now = stamp(d.fd()).map_err(|x| e("stat", x))?;
        p.write_record(&PlainRecord::closed(rec.generation + 1, now))
    }

    /// Runs the undo of every pending nested top action whose parent no
    /// slot names any more (its process died, or its own compensation
    /// failed), newest first, each as a commit of its own with its
    /// `NTA_DONE` marker: applied under the commit lock to the newest
    /// committed state, as commutative operations are. An undo this process
    /// has not registered, or one that fails, stays pending (the next first
    /// opener runs it).
    fn compensate_orphans(&self) -> Result<()> {
        let h = self.mvcc.hdr();
        let l = self.lock_commit()?;
        let pending = self.log.pending_nta(&h.log, l.guard())?;
        if pending.is_empty() {
            return Ok(());
        }
        let live = self.mvcc.nta_tokens();
        let orphans = pending
            .iter()
            .rev()
            .filter(|p| !live.contains(&p.token) && crate::ops::is_registered(p.undo));
        for p in orphans {
            let Ok(pages) = self
                .commute_pages(&[(0, p.undo, &p.args)], &[])
                .and_then(|c| self.check_commuted(&c.pages).map(|_| c.pages))
            else {
                continue;
            };
            let done = crate::nta::done_args(p.token, p.index);
            let ops = [
                crate::wal::format::LoggedOp {
                    at: 0,
                    id: p.undo,
                    pages: pages.iter().map(|(page, _)| *page).collect(),
                    args: &p.args,
                },
                crate::wal::format::LoggedOp {
                    at: 0,
                    id: crate::ops::builtin::NTA_DONE,
                    pages: Vec::new(),
                    args: &done,
                },
            ];
            let images: Vec<(u32, &[u8])> = pages.iter().map(|(pg, b)| (*pg, &b[..])).collect();
            self.mvcc
                .reserve(&l, images.len())
                .map_err(|e| self.version_store_full(e))?;
            let seq = self.mvcc.commit_seq() + 1;
            if crate::ops::changes_bytes(&ops) {
                h.file.note_ops(seq);
            }
            self.log.append(
                &h.log,
                l.guard(),
                seq,
                self.size(),
                std::iter::empty(),
                &ops,
            )?;
            let published = self.mvcc.publish(&l, seq, &images, Log::synced_seq(&h.log));
            assert!(
                published.is_ok(),
                "publishing a logged compensation failed after space was reserved: {published:?}"
            );
            h.log.mark_published();
        }
        Ok(())
    }

    /// Invariant 5: `Err(Conflict)` if a commit after the transaction's
    /// snapshot changed a page it read or wrote. Caller holds the commit lock.
    pub(crate) fn validate(&self, req: &CommitRequest<'_>) -> Result<()> {
        let changed = |p: &u32| self.mvcc.page_seq(*p as usize) > req.snapshot;
        if req.read_pages.iter().any(changed)
            || req.op_reads.iter().any(changed)
            || req.pages.iter().any(|(p, _)| changed(p))
        {
            return Err(Error::Conflict);
        }
        if let Some(maybe_read) = &req.untracked_reads {
            let mut hit = false;
            let now = self.mvcc.commit_seq();
            let complete = self
                .mvcc
                .changed_pages(req.snapshot, now, |p| hit |= maybe_read(p));
            if hit || !complete {
                return Err(Error::Conflict);
            }
        }
        Ok(())
    }

    /// Runs `req`'s commit-time operations ([`RegionInner::commute_pages`],
    /// checked by `check_commuted`); `commit_record` makes the record.
    /// `fresh` is a run ahead of the lock that the caller found fresh under
    /// it (`ahead_fresh`: no page it touched changed since, the region
    /// kept its size): its result is taken; without one they run here.
    pub(crate) fn commit_time<'a>(
        &self,
        req: &CommitRequest<'_>,
        fresh: Option<Ahead<'a>>,
    ) -> Result<Commuted<'a>> {
        if req.commute.is_empty() {
            return Ok(Commuted::default());
        }
        debug_assert!(
            fresh.as_ref().is_none_or(|a| self.ahead_fresh(a)),
            "a run ahead taken under the lock is fresh"
        );
        let commuted = match fresh {
            Some(a) => a.commuted,
            None => {
                crate::debug::note_locked_run();
                self.commute_pages(&req.commute, &req.written_sorted())?
            }
        };
        self.check_commuted(&commuted.pages)?;
        Ok(commuted)
    }

    /// Whether a run of commit-time operations ahead of the lock (`a`) is
    /// their result on the newest pages: no commit after the one it read
    /// wrote a page it touched, and the region kept its size. Final only
    /// under the commit lock.
    fn ahead_fresh(&self, a: &Ahead) -> bool {
        a.size == self.size()
            && a.touched
                .iter()
                .all(|&p| self.mvcc.page_seq(p as usize) <= a.seq)
    }

    /// The pages commit-time operations change, from each page's newest
    /// committed version, and the bytes each wrote. Called under the commit
    /// lock (so no pruning or commit changes the versions meanwhile).
    /// A commit-time operation that touches a page the transaction wrote
    /// (`written`, sorted) is a conflict: it ran on its snapshot's pages
    /// here, its stores to that page were diffed without it, and both
    /// results cannot be published (the retry runs it on the newer pages).
    pub(crate) fn commute_pages(
        &self,
        ops: &[(usize, u32, &[u8])],
        written: &[u32],
    ) -> Result<Commuted<'static>> {
        let now = self.mvcc.commit_seq();
        let source = |p: u32| match self.mvcc.lookup(p as usize, now) {
            Some(v) => Some(&v.data[..]),
            // SAFETY: below the region size (`run_commute` checks it first),
            // which the image maps; under the commit lock no commit or
            // checkpoint changes a page that has no version.
            None => Some(unsafe {
                std::slice::from_raw_parts(self.image_data().add(p as usize * PAGE), PAGE)
            }),
        };
        run_commute(ops, written, self.size(), &source).map(|(c, _)| c)
    }

    /// [`RegionInner::commute_pages`] before the commit lock is taken, on
    /// the read side of the committing slot, at the newest commit then
    /// (`Ahead::seq`). Under the lock `commit` hands the result to
    /// [`RegionInner::commit_time`] if no page the operations read or wrote
    /// changed since (`ahead_fresh`), which runs them again otherwise
    /// (after one more run ahead, `AHEAD_RERUNS`): the descent and the page copies leave the
    /// lock's hold time in the common case. `None` if there is nothing to
    /// run or the run failed (the locked run decides).
    pub(crate) fn commit_time_ahead(&self, req: &CommitRequest<'_>) -> Option<Ahead<'static>> {
        if req.commute.is_empty() {
            return None;
        }
        let written = req.written_sorted();
        let side = self.read_side(req.slot);
        let seq = self.mvcc.commit_seq();
        let size = self.size();
        // On the read side a version stays linked and an image page without
        // one does not change (`readside.rs`); a page a later commit wrote
        // may be read torn, which the check under the lock discards.
        let source = |p: u32| match side.version(p as usize, seq) {
            Some(v) => Some(&v.data[..]),
            None => side.image(p as usize, 1),
        };
        let (commuted, touched) = run_commute(&req.commute, &written, size, &source).ok()?;
        Some(Ahead {
            seq,
            size,
            touched,
            commuted,
            local: false,
        })
    }

    pub fn checkpoint(&self) -> Result<()> {
        self.check_owner()?;
        self.check_writable("checkpoint")?;
        let g = self
            .mvcc
            .hdr()
            .file
            .lock_checkpoint()
            .map_err(|e| self.shared_lock_err(e))?;
        self.checkpoint_locked(g)
    }

    /// A checkpoint unless one is under way: the automatic checkpoint of a
    /// commit must not wait for another process's (it may be stopped, and
    /// its checkpoint empties the log all the same).
    pub(crate) fn checkpoint_unless_busy(&self) -> Result<()> {
        let g = self
            .mvcc
            .hdr()
            .file
            .try_lock_checkpoint()
            .map_err(|e| self.shared_lock_err(e))?;
        match g {
            Some(g) => self.checkpoint_locked(g),
            None => Ok(()),
        }
    }

    fn checkpoint_locked(&self, g: crate::os::lock::Guard<'_>) -> Result<()> {
        let h = self.mvcc.hdr();
        if g.owner_died {
            // The region header may be newer on disk than in shared memory.
            let mut page = vec![0u8; HEADER_BYTES as usize];
            self.data
                .read_at(&mut page, 0)
                .map_err(|e| Error::io("read header of", &self.path, e))?;
            let disk = RegionHeader::decode(&page)
                .map_err(|e| Error::corrupt(&self.path, 0, e.to_string()))?;
            h.file.adopt_disk(disk.generation, disk.checkpoint_seq);
        }
        self.settle_round()?;
        crate::wal::log::check_poison(&h.log)?;
        self.catch_up_header(&g)?;
        // A process that died in a transaction pins nothing from now on,
        // and the nested top actions of its parents are undone.
        self.mvcc.reap_dead_slots();
        self.compensate_orphans()?;
        self.log.sync_all(&h.log)?;
        // Every synced commit goes to the file, however old the live
        // snapshots: what they read there is preserved first. The bound is
        // chosen under the same hold of the commit lock as the pages: every
        // pruning so far (all under that lock) used a bound at or below it,
        // so each page's newest version at or below it is still linked. A
        // bound read earlier could fall below a later pruning's, whose
        // version it needs would be gone, and the header would claim it.
        let ckpt = h.file.checkpoint_seq();
        let pin = self.mvcc.pin_for_checkpoint();
        crate::debug::checkpoint_pause();
        let (mut t, mut pages, preserve, oldest) = {
            let l = self.lock_commit()?;
            let (t, oldest) = self.mvcc.horizon(Log::synced_seq(&h.log));
            let (pages, preserve) = if t > ckpt {
                pin.pages(&l, t, ckpt, oldest, true)
            } else {
                (Vec::new(), Vec::new())
            };
            (t, pages, preserve, oldest)
        };
        if t > ckpt {
            // Pages older snapshots read from the file are preserved first;
            // then views reading them straight from the file are fenced.
            let preserved = match oldest {
                Some(o) if !preserve.is_empty() => {
                    crate::debug::copy_on_checkpoint() && self.copy_on_checkpoint(&preserve, o)?
                }
                _ => true,
            };
            if oldest.is_some() && !(preserved && self.fence(t)) {
                // No room for the copies (or a reader is stuck): write only
                // what every live snapshot is past; the log keeps the rest.
                // The oldest snapshot is read again under the lock: one
                // still live below `t` has had its versions kept by every
                // pruning, so the versions can be looked up again at it.
                // If none is (the snapshot ended), the pages found at `t`
                // are written as they are: pruning since may have unlinked
                // some (the pin keeps their memory), and looking again at
                // `t` would skip those pages under a header claiming them.
                crate::debug::checkpoint_pause();
                let l = self.lock_commit()?;
                let (_, now) = self.mvcc.horizon(t);
                if let Some(o) = now.filter(|&o| o < t) {
                    t = o;
                    pages = if t > ckpt {
                        pin.pages(&l, t, ckpt, None, false).0
                    } else {
                        Vec::new()
                    };
                }
            }
            let r = (|| {
                if t <= ckpt {
                    return Ok(());
                }
                // Replaying registered operations onto pages that hold
                // their effect would apply them twice: such pages are
                // journaled before any is written (`journal.rs`).
                let journal = self.journal.as_deref().filter(|_| h.file.ops_after(ckpt));
                // In file order (the dirty list is in the order pages were
                // first changed): consecutive pages go in one write.
                let mut images: Vec<(u32, &[u8])> =
                    pages.iter().map(|(p, v)| (*p, &v.data[..])).collect();
                images.sort_unstable_by_key(|&(p, _)| p);
                if let Some(path) = journal {
                    self.journal_pages(path, ckpt, t, &images)?;
                    crate::debug::hit(crate::debug::CrashPoint::CheckpointJournaled);
                }
                self.write_pages(&images, "checkpoint")?;
                crate::debug::hit(crate::debug::CrashPoint::CheckpointWriting);
                self.write_checkpoint_header(&g, t, journal)
            })();
            if let Err(e) = r {
                crate::wal::log::poison(&h.log, &e);
                return Err(e);
            }
        }
        drop(pin);
        let l = self.lock_commit()?;
        let ckpt = h.file.checkpoint_seq();
        self.log
            .maybe_reset(&h.log, l.guard(), self.mvcc.commit_seq(), ckpt)?;
        self.mvcc.trim(&l, ckpt);
        drop(l);
        drop(g);
        Ok(())
    }
}

impl RegionInner {
    /// The fence (issue 20, `view/fence.rs`): views in every process that
    /// read pages straight from the region file at snapshots below `t` make
    /// private those a commit after their snapshot wrote, before the
    /// checkpoint overwrites them. Every such page is written by this
    /// checkpoint, but not every one is preserved (a chain may keep an
    /// older version for an older snapshot), so this runs whenever
    /// snapshots live. False if a view's process did not answer in time.
    fn fence(&self, t: u64) -> bool {
        let fenced = !crate::debug::fence_enabled() || self.mvcc.fence(t, Duration::from_secs(2));
        crate::debug::hit(crate::debug::CrashPoint::CheckpointFenced);
        fenced
    }

    /// Copy-on-checkpoint: keeps the region-file content of `pages` as their
    /// oldest version in shared memory, labelled with the oldest live
    /// snapshot `oldest` (every snapshot that reads these pages from the file
    /// is at or above it), then waits until no reader can still be copying
    /// them from the file. Caller holds the checkpoint lock, so the file does
    /// not change meanwhile. False if the store has no room or a reader does
    /// not move on; the copies made are harmless then (they equal the file).
    fn copy_on_checkpoint(&self, pages: &[u32], oldest: u64) -> Result<bool> {
        // In batches, so the buffer stays small and the lock is held briefly.
        const BATCH: usize = 256;
        let mut images = vec![0u8; pages.len().min(BATCH) * PAGE];
        for batch in pages.chunks(BATCH) {
            for (k, &p) in batch.iter().enumerate() {
                self.data
                    .read_at(
                        &mut images[k * PAGE..(k + 1) * PAGE],
                        HEADER_BYTES + u64::from(p) * PAGE as u64,
                    )
                    .map_err(|e| Error::io("read for checkpoint", &self.path, e))?;
            }
            let l = self.lock_commit()?;
            if self.mvcc.reserve(&l, batch.len()).is_err() {
                return Ok(false);
            }
            for (k, &p) in batch.iter().enumerate() {
                let image = &images[k * PAGE..(k + 1) * PAGE];
                if self.mvcc.preserve(&l, p, oldest, image).is_err() {
                    return Ok(false);
                }
            }
        }
        let settled = self.mvcc.wait_for_readers(Duration::from_secs(2));
        crate::debug::hit(crate::debug::CrashPoint::CheckpointPreserved);
        Ok(settled)
    }
}

impl Drop for RegionInner {
    fn drop(&mut self) {
        let owner = self.check_owner().is_ok();
        // Before anything the fence thread reads goes away.
        self.fence.stop(owner, self.mvcc.fence_word());
        // Still here when the last reference was not a handle's or a
        // view's: woken, it ends by itself.
        if let Some(t) = lock(&self.flusher).take() {
            if owner {
                t.thread().unpark();
            } else {
                // Another process's thread: neither joined nor detached.
                std::mem::forget(t);
            }
        }
        if !owner {
            return; // a forked child: the parent's state is not ours to touch
        }
        // Its thread holds the transition lock until the file has the round.
        let _ = self.settle_round();
        // Only the last process out checkpoints (below): the others leave
        // the log to it, so closing in a busy region costs no checkpoint.
        let Some(l) = &self.locks else {
            let _ = self.checkpoint(); // a region opened over test storage
            return;
        };
        use rustix::fs::FlockOperation as F;
        if rustix::fs::flock(&l.transition, F::LockExclusive).is_err() {
            return;
        }
        let _ = rustix::fs::flock(&l.users, F::Unlock);
        if rustix::fs::flock(&l.users, F::NonBlockingLockExclusive).is_ok() {
            // The last one out: a clean close leaves an empty log (if the
            // checkpoint fails, the log still has everything and the next
            // opener recovers), and the shared state goes.
            if self.checkpoint().is_ok()
                && let Some(p) = &self.plain
            {
                let _ = self.close_plain_clean(p);
            }
            let _ = std::fs::remove_file(self.mvcc.path());
            let _ = rustix::fs::flock(&l.users, F::Unlock);
        }
        let _ = rustix::fs::flock(&l.transition, F::Unlock);
    }
}
