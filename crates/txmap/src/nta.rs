//! Nested top actions in the log (`View::nested_top`, `view/nta.rs`).
//!
//! A nested top action commits on its own inside an enclosing ("parent")
//! transaction; its commit record carries a built-in no-op operation
//! `NTA_UNDO` naming the parent (a random token), the action's index and
//! its logical undo (a registered operation and arguments). The parent's
//! commit record carries `NTA_DONE` (token, all), and each compensation's
//! record `NTA_DONE` (token, index). An `NTA_UNDO` of the log's epoch
//! without a matching `NTA_DONE` is pending: the parent never committed.
//! Recovery runs the pending undos, newest first, as commits appended to
//! the recovered epoch (logged before their pages reach the file), so a
//! crash during recovery neither loses nor repeats one.

use std::collections::BTreeSet;

use crate::error::{Error, Result};
use crate::io::Storage;
use crate::ops::builtin::{NTA_DONE, NTA_UNDO};
use crate::os::mem::PAGE;
use crate::wal::format::{CommitRecord, HEADER_BYTES, LoggedOp, Range};

/// `NTA_DONE`'s index for "every action of the parent" (it committed).
pub(crate) const ALL: u32 = u32::MAX;

/// `NTA_UNDO`'s arguments.
pub(crate) fn undo_args(token: u64, index: u32, undo: u32, args: &[u8]) -> Vec<u8> {
    let mut a = Vec::with_capacity(16 + args.len());
    a.extend_from_slice(&token.to_le_bytes());
    a.extend_from_slice(&index.to_le_bytes());
    a.extend_from_slice(&undo.to_le_bytes());
    a.extend_from_slice(args);
    a
}

/// `NTA_DONE`'s arguments.
pub(crate) fn done_args(token: u64, index: u32) -> Vec<u8> {
    let mut a = Vec::with_capacity(12);
    a.extend_from_slice(&token.to_le_bytes());
    a.extend_from_slice(&index.to_le_bytes());
    a
}

/// A nested top action whose parent did not commit and that was not
/// compensated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Pending {
    pub token: u64,
    pub index: u32,
    /// The nested action's commit.
    pub seq: u64,
    pub undo: u32,
    pub args: Vec<u8>,
}

fn token_index(a: &[u8]) -> Option<(u64, u32)> {
    Some((
        u64::from_le_bytes(a.get(..8)?.try_into().ok()?),
        u32::from_le_bytes(a.get(8..12)?.try_into().ok()?),
    ))
}

/// The pending actions of `records` (one epoch, in order), oldest first.
pub(crate) fn pending<'a>(
    records: impl IntoIterator<Item = &'a CommitRecord<'a>>,
) -> Result<Vec<Pending>> {
    let mut open = Vec::new();
    for r in records {
        note(&mut open, r)?;
    }
    Ok(open)
}

/// Updates the pending actions `open` with record `r`'s markers.
fn note(open: &mut Vec<Pending>, r: &CommitRecord<'_>) -> Result<()> {
    for o in &r.ops {
        let bad = || {
            Error::Invalid(format!(
                "commit {}: nested top action marker {} with {} argument bytes",
                r.seq,
                o.id,
                o.args.len()
            ))
        };
        match o.id {
            NTA_UNDO => {
                let (token, index) = token_index(o.args).ok_or_else(bad)?;
                let undo = o
                    .args
                    .get(12..16)
                    .map(|b| u32::from_le_bytes(b.try_into().expect("4 bytes")))
                    .ok_or_else(bad)?;
                open.push(Pending {
                    token,
                    index,
                    seq: r.seq,
                    undo,
                    args: o.args[16..].to_vec(),
                });
            }
            NTA_DONE => {
                let (token, index) = token_index(o.args).ok_or_else(bad)?;
                open.retain(|p| p.token != token || (index != ALL && p.index != index));
            }
            _ => {}
        }
    }
    Ok(())
}

/// A process's scan of the log's current epoch for pending actions, kept
/// between checkpoints so each record is read once (`Log::maybe_reset`).
#[derive(Default)]
pub(crate) struct EpochScan {
    salt: u64,
    /// Where the next unread record starts.
    offset: u64,
    open: Vec<Pending>,
}

impl EpochScan {
    /// Whether the records of epoch `salt` up to `end` (all written) leave
    /// a nested top action pending: then the log must not be reset, or its
    /// compensation would be lost.
    pub(crate) fn any_pending(&mut self, log: &dyn Storage, salt: u64, end: u64) -> Result<bool> {
        if salt != self.salt || self.offset > end || self.offset < HEADER_BYTES {
            *self = EpochScan {
                salt,
                offset: HEADER_BYTES,
                open: Vec::new(),
            };
        }
        if end > self.offset {
            let mut buf = vec![0u8; (end - self.offset) as usize];
            log.read_at(&mut buf, self.offset)
                .map_err(|e| Error::io("read", log.path(), e))?;
            let mut at = 0;
            while at < buf.len() {
                let r = crate::wal::format::decode_record(&buf[at..], salt).map_err(|e| {
                    Error::corrupt(
                        log.path(),
                        self.offset + at as u64,
                        format!("a written record does not read back: {e:?}"),
                    )
                })?;
                note(&mut self.open, &r)?;
                at += r.len;
            }
            self.offset = end;
        }
        Ok(!self.open.is_empty())
    }

    /// The pending actions found so far, oldest first.
    pub(crate) fn open(&self) -> &[Pending] {
        &self.open
    }
}

/// Fails with `Error::UnknownOperation` if a pending action's undo is not
/// registered in this process (checked before recovery writes anything).
pub(crate) fn check_registered(pending: &[Pending], log: &std::path::Path) -> Result<()> {
    match pending.iter().find(|p| !crate::ops::is_registered(p.undo)) {
        Some(p) => Err(Error::UnknownOperation {
            id: p.undo,
            commit: p.seq,
            path: log.to_path_buf(),
        }),
        None => Ok(()),
    }
}

/// What recovery's compensations appended.
pub(crate) struct Compensated {
    /// The last record's commit and the log's end after them.
    pub last: u64,
    pub log_end: u64,
    pub count: u64,
    /// Pages they wrote.
    pub pages: BTreeSet<u64>,
}

/// Runs `pending` (newest first) as compensating commits after `last`, the
/// epoch's last record (which the region file holds now): each undo runs on
/// the file's pages, its commit (the bytes it changed and `NTA_DONE`) is
/// appended to the log at `log_end` and synced, then its pages are written
/// into the file. The log is synced first, so every earlier record is too.
pub(crate) fn compensate(
    data: &dyn Storage,
    log: &dyn Storage,
    salt: u64,
    pending: &[Pending],
    last: u64,
    log_end: u64,
    size: u64,
) -> Result<Compensated> {
    let mut c = Compensated {
        last,
        log_end,
        count: 0,
        pages: BTreeSet::new(),
    };
    if pending.is_empty() {
        return Ok(c);
    }
    log.sync().map_err(|e| Error::io("sync", log.path(), e))?;
    for p in pending.iter().rev() {
        let mut load = crate::ops::file_pages(data)?;
        let mut ov = crate::ops::Overlay::new(size, &mut load);
        ov.run(p.undo, &p.args).map_err(|e| {
            Error::Invalid(format!(
                "compensating the nested top action of commit {} (undo operation {}) failed: {e}",
                p.seq, p.undo
            ))
        })?;
        let pages = ov.into_pages();
        // Logged as the bytes it changed (and the marker), not as the
        // operation: replaying a byte diff again after a crash in recovery
        // gives the same bytes, running the undo again would not.
        let mut ranges = Vec::new();
        for (page, new) in &pages {
            let mut old = vec![0u8; PAGE];
            (crate::ops::file_pages(data)?)(*page, &mut old)?;
            let first = old.iter().zip(new).position(|(a, b)| a != b);
            let last = old.iter().zip(new).rposition(|(a, b)| a != b);
            if let (Some(f), Some(l)) = (first, last) {
                ranges.push(Range {
                    offset: u64::from(*page) * PAGE as u64 + f as u64,
                    bytes: &new[f..=l],
                });
            }
        }
        let done = done_args(p.token, p.index);
        let ops = [LoggedOp {
            at: 0,
            id: NTA_DONE,
            pages: Vec::new(),
            args: &done,
        }];
        let seq = c.last + 1;
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        let mut buf = Vec::new();
        crate::wal::format::encode_commit_ops(
            &mut buf,
            salt,
            seq,
            seq - 1,
            size,
            ranges.iter().cloned(),
            &ops,
            Some(now),
        );
        log.write_at(&buf, c.log_end)
            .map_err(|e| Error::io("append a compensation to", log.path(), e))?;
        log.sync().map_err(|e| Error::io("sync", log.path(), e))?;
        for (page, bytes) in &pages {
            data.write_at(bytes, HEADER_BYTES + u64::from(*page) * PAGE as u64)
                .map_err(|e| Error::io("compensate into", data.path(), e))?;
            c.pages.insert(u64::from(*page));
        }
        c.last = seq;
        c.log_end += buf.len() as u64;
        c.count += 1;
        crate::debug::hit(crate::debug::CrashPoint::Compensating);
    }
    Ok(c)
}
