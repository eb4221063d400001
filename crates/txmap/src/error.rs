//! Typed errors. Each says what went wrong and where (path, offset, record).

use std::path::PathBuf;

/// Everything that can go wrong in txmap.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A system call on a file failed.
    #[error("{op} {}: {source}", path.display())]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A file holds bytes that cannot be what txmap wrote. For a damaged
    /// log, `lost` names the commits that recovery would drop: opening
    /// refuses it, and `txmap recover --accept-loss`
    /// ([`crate::Options::accept_loss`]) recovers what can be recovered.
    #[error("{}: corrupt at offset {offset}: {what}{}", path.display(), lost_text(lost))]
    Corrupt {
        path: PathBuf,
        offset: u64,
        what: String,
        lost: Option<Lost>,
    },
    /// The log at `path` holds commit `commit` with operation `id`, which
    /// this process has not registered (`txmap::ops::register`): register
    /// it before opening the region. Nothing was changed.
    #[error(
        "{}: commit {commit} holds operation {id}, which this process has not registered \
         (register it with txmap::ops::register / txmap_op_register before opening the region)",
        path.display()
    )]
    UnknownOperation { id: u32, commit: u64, path: PathBuf },
    /// The transaction conflicted with a concurrent commit; nothing of it is visible. Retry it.
    #[error("transaction aborted: conflict with a concurrent commit")]
    Conflict,
    /// The transaction was aborted by the program (`abort`/`xabort`).
    #[error("transaction aborted by the program")]
    Aborted,
    /// The call is not allowed in the current state or with these arguments
    /// (the failures below have variants of their own).
    #[error("{0}")]
    Invalid(String),
    /// A file that would be created exists already (`what` says more: it
    /// may be another process creating it).
    #[error("{} already exists{what}", path.display())]
    Exists { path: PathBuf, what: &'static str },
    /// The file is not a txmap region (or is not the file to name).
    #[error("{} is not a txmap region: {what}", path.display())]
    NotARegion { path: PathBuf, what: String },
    /// A size or a transaction exceeds a limit (`Options::max_size`, the
    /// read and write sets of one transaction).
    #[error("{0}")]
    TooLarge(String),
    /// `op` needs an open transaction and the view has none.
    #[error("{op} outside a transaction")]
    NotInTransaction { op: &'static str },
    /// A store inside a read-only transaction; the transaction was rolled
    /// back.
    #[error("store inside a read-only transaction; it was rolled back")]
    StoreInReadOnlyTransaction,
    /// A region or view used by a process forked after it was opened: the
    /// child must open the region itself.
    #[error(
        "{} was opened by process {owner}; process {pid} (a fork) must open it itself",
        path.display()
    )]
    ForkedChild { path: PathBuf, owner: i32, pid: i32 },
    /// Other processes have the region open with settings this open does
    /// not match (durability, snapshot limit, fixed address, txmap version),
    /// or a structure in the region has an on-disk format this txmap does
    /// not read.
    #[error("{}: {what}", path.display())]
    Incompatible { path: PathBuf, what: String },
    /// A byte range outside the region.
    #[error("range {off}+{len} is outside the region ({size} bytes)")]
    OutOfRange { off: u64, len: usize, size: usize },
    /// A memory-mapping call failed.
    #[error("{op}: {source}")]
    Os {
        op: &'static str,
        #[source]
        source: std::io::Error,
    },
    /// The snapshot limit (`Options::snapshot_limit`) expired this
    /// transaction's snapshot: it fell `lag` commits behind, or old versions
    /// held too much memory. Nothing of it is visible; run it again.
    #[error(
        "snapshot of commit {snapshot} expired by the region's snapshot limit \
         ({lag} commits behind; see Options::snapshot_limit and `txmap info`); \
         the transaction cannot commit: end it and run it again"
    )]
    SnapshotTooOld { snapshot: u64, lag: u64 },
    /// The shared version store has no room for more page versions (its
    /// blocks, or the memory behind `/dev/shm`, ran out).
    #[error(
        "shared version store {} is full ({versions} page versions held): {reason}; \
         old snapshots hold versions (see `txmap info`), or /dev/shm is full",
        path.display()
    )]
    VersionStoreFull {
        path: PathBuf,
        versions: u64,
        reason: String,
    },
    /// A view could not be mapped at its address (the region's fixed
    /// address, or one the program asked for): something else is mapped
    /// there (`holder`, from `/proc/self/maps`). Nothing was mapped
    /// elsewhere instead.
    #[error(
        "{}: address range {addr:#x}..{:#x} for a view is not free: {holder}",
        path.display(),
        addr + len
    )]
    AddressTaken {
        path: PathBuf,
        addr: usize,
        len: usize,
        holder: String,
    },
    /// The region was opened read-only ([`crate::Options::read_only`], or
    /// its files are not writable by this process): `op` needs to write.
    #[error(
        "{}: {op} needs to write, but the region is open read-only (its files are not \
         writable here, or Options::read_only was set)",
        path.display()
    )]
    ReadOnly { op: &'static str, path: PathBuf },
    /// An ordered commit's number was skipped before it could commit (its
    /// group's next number is past it: `Region::order_skip_to`, or the
    /// view gave it up); nothing of the transaction is visible.
    #[error(
        "ordered commit number {number} of order group {group} was skipped (the group's \
         next number is {next}); nothing of the transaction is visible"
    )]
    OrderSkipped { group: u32, number: u64, next: u64 },
    /// A commit across several regions cannot be decided or made: a
    /// region it wrote is missing, renamed or damaged, a process died inside
    /// it (the region must be reopened to recover), or another region holds
    /// it in doubt. `path` names the region concerned.
    #[error("{}: commit across several regions: {what}", path.display())]
    Group { path: PathBuf, what: String },
    /// An earlier write or sync failed; the data on disk may be behind memory.
    /// Close and reopen the region to recover from the log.
    #[error("region unusable after an earlier I/O failure ({0}); reopen it to recover")]
    Poisoned(String),
    /// A plain file ([`crate::Region::open_plain`]) is not as txmap left it
    /// at its last clean close (`what`: its length or modification time
    /// differs): another program changed it while no one had it open.
    /// Nothing was written. [`crate::Options::accept_outside_changes`]
    /// (`txmap recover --accept-changes`) takes the file as it is.
    #[error(
        "{}: {what}: another program changed it since txmap last closed it; nothing was \
         written (accept its content with Options::accept_outside_changes / \
         txmap recover --accept-changes)",
        path.display()
    )]
    PlainFileChanged { path: PathBuf, what: String },
    /// `op` does not work on this region (`why` says what kind it is).
    #[error("{op} is not supported for {}: {why}", path.display())]
    Unsupported {
        op: &'static str,
        path: PathBuf,
        why: &'static str,
    },
}

impl Error {
    /// True when retrying the same transaction may succeed.
    pub fn is_conflict(&self) -> bool {
        matches!(self, Error::Conflict)
    }

    pub(crate) fn io(op: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Error {
        Error::Io {
            op,
            path: path.into(),
            source,
        }
    }

    pub(crate) fn os(op: &'static str, e: rustix::io::Errno) -> Error {
        Error::Os {
            op,
            source: e.into(),
        }
    }

    pub(crate) fn corrupt(path: impl Into<PathBuf>, offset: u64, what: impl Into<String>) -> Error {
        Error::Corrupt {
            path: path.into(),
            offset,
            what: what.into(),
            lost: None,
        }
    }
}

/// Commits that a damaged log would lose (sequence numbers).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lost {
    /// The first commit lost.
    pub first: u64,
    /// The newest commit the log shows was made; `None` when nothing after
    /// the damage is readable (then at least `first` is lost).
    pub last: Option<u64>,
}

impl std::fmt::Display for Lost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.last {
            Some(l) if l > self.first => {
                write!(f, "commits {}..={l} ({})", self.first, l - self.first + 1)
            }
            Some(_) => write!(f, "commit {}", self.first),
            None => write!(f, "commit {} and any after it", self.first),
        }
    }
}

fn lost_text(lost: &Option<Lost>) -> String {
    match lost {
        None => String::new(),
        Some(l) => format!(
            "; {l} would be lost: refusing to recover (`txmap recover --accept-loss` \
             recovers what can be recovered and drops the rest)"
        ),
    }
}

/// Result with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
