//! Reading a log back: the records of the current epoch, in order, and where
//! they end. A damaged record ends the log if it may never have been synced
//! (a crash tears or reorders unsynced writes, so valid records may even
//! follow it). It is corruption, and an error, if a later record proves it
//! was synced: skipping it would silently lose a durable commit.

use super::format::{self, CommitRecord, HEADER_BYTES, LogHeader, RECORD_HEADER, RecordError};

/// The readable content of a log epoch.
#[derive(Debug)]
pub struct Scan<'a> {
    /// Valid records in order, up to the end or to the damage.
    pub records: Vec<CommitRecord<'a>>,
    /// Offset just past the last valid record.
    pub end: u64,
    /// Why scanning stopped at `end`, if not at the end of the file.
    pub stop: Option<&'static str>,
    /// Damage a crash cannot explain, at `end`: the records after it are
    /// lost unless it is repaired.
    pub damage: Option<Corruption>,
}

/// Damage that a crash cannot explain: skipping it would silently lose
/// commits that were durable.
#[derive(Debug, PartialEq, Eq)]
pub struct Corruption {
    pub offset: u64,
    /// The first commit lost.
    pub seq: u64,
    /// The newest commit the log shows was made (a valid record after the
    /// damage); `None` when nothing after it is readable.
    pub last: Option<u64>,
    pub what: String,
}

/// Scans the log bytes `log` (the whole file, header included).
///
/// Writers keep this true (wal/log.rs): records are only written into space
/// whose length was synced first, the file never shrinks, and at least 8
/// bytes follow the last record. So a crash never leaves a file that ends
/// inside a record or right after one: that is truncation, and damage.
pub fn scan<'a>(log: &'a [u8], header: &LogHeader) -> Scan<'a> {
    let mut off = HEADER_BYTES as usize;
    let mut seq = header.start_seq;
    let mut records = Vec::new();
    let damage = |off: usize, seq: u64, what: String| Corruption {
        offset: off as u64,
        seq,
        last: last_seen(log, off + 8, header.salt, seq),
        what,
    };
    let (stop, damage) = loop {
        if off >= log.len() {
            let d = (!records.is_empty()).then(|| {
                damage(
                    off,
                    seq,
                    format!(
                        "the log ends right after record {} (a crash never cuts it there: the log was truncated)",
                        seq - 1
                    ),
                )
            });
            break (None, d);
        }
        match format::decode_record(&log[off..], header.salt) {
            Ok(r) if r.seq == seq => {
                off += r.len;
                seq += 1;
                records.push(r);
            }
            Ok(r) => {
                let what = format!(
                    "record has sequence number {} where {seq} was expected",
                    r.seq
                );
                break (None, Some(damage(off, seq, what)));
            }
            Err(RecordError::Malformed(what)) => {
                break (None, Some(damage(off, seq, what.to_string())));
            }
            Err(RecordError::Short) => {
                let rest = &log[off..];
                let magic = format::RECORD_MAGIC.to_le_bytes();
                let n = rest.len().min(4);
                let ours = rest[..n] == magic[..n]
                    && rest.iter().any(|&b| b != 0)
                    && (rest.len() < 24 || rest[16..24] == header.salt.to_le_bytes());
                if ours {
                    let what = format!(
                        "the log ends {} bytes into the header of record {seq} (truncated: a crash never cuts a record)",
                        rest.len()
                    );
                    break (None, Some(damage(off, seq, what)));
                }
                break (Some("end of file inside a record header"), None);
            }
            Err(RecordError::NotARecord(why @ "length runs past the end of the log")) => {
                // Magic and salt matched: written in this epoch, inside space
                // whose length was synced first.
                let what = format!(
                    "record {seq} claims more bytes than the log has ({why}): the log was truncated or the record damaged"
                );
                break (None, Some(damage(off, seq, what)));
            }
            Err(RecordError::NotARecord(why)) => {
                if let Some(later) = find_proof_of_sync(log, off + 8, header.salt, seq) {
                    let what = format!(
                        "record damaged ({why}) but the record at offset {later} shows it was synced"
                    );
                    break (None, Some(damage(off, seq, what)));
                }
                break (Some(why), None);
            }
        }
    };
    Scan {
        records,
        end: off as u64,
        stop,
        damage,
    }
}

/// The offset of a valid record of this epoch at or after `from` (8-aligned)
/// written after record `seq` was synced.
fn find_proof_of_sync(log: &[u8], from: usize, salt: u64, seq: u64) -> Option<u64> {
    records_after(log, from, salt)
        .find(|(_, r)| r.synced >= seq)
        .map(|(off, _)| off)
}

/// The highest sequence number `>= seq` of a valid record of this epoch at
/// or after `from`.
fn last_seen(log: &[u8], from: usize, salt: u64, seq: u64) -> Option<u64> {
    records_after(log, from, salt)
        .map(|(_, r)| r.seq)
        .filter(|&s| s >= seq)
        .max()
}

/// Valid records of the epoch `salt` at 8-aligned offsets from `from`.
fn records_after(
    log: &[u8],
    from: usize,
    salt: u64,
) -> impl Iterator<Item = (u64, CommitRecord<'_>)> {
    let magic = format::RECORD_MAGIC.to_le_bytes();
    let salt_bytes = salt.to_le_bytes();
    (from.div_ceil(8)..)
        .map(|i| i * 8)
        .take_while(move |off| off + RECORD_HEADER <= log.len())
        .filter(move |&off| log[off..off + 4] == magic && log[off + 16..off + 24] == salt_bytes)
        .filter_map(move |off| {
            format::decode_record(&log[off..], salt)
                .ok()
                .map(|r| (off as u64, r))
        })
}

/// A log read for recovery: the header its records are read with, the
/// records, and what is damaged.
#[derive(Debug)]
pub struct Reading<'a> {
    /// The newest valid header slot; or, when the records show that a
    /// damaged slot held a newer epoch, a header rebuilt from them.
    pub header: LogHeader,
    /// Whether `header` was rebuilt from the records.
    pub rebuilt: bool,
    pub scan: Scan<'a>,
    /// Damage that loses commits if recovery goes on as if nothing were
    /// wrong: header damage first, then damage in the records.
    pub damage: Vec<Corruption>,
    /// Damaged header slots that lose nothing (a torn header write), as
    /// (slot offset, why it is harmless).
    pub harmless: Vec<usize>,
}

/// Reads the log `log` of a region whose checkpoint is `checkpoint_seq`.
/// `decoded` is the newest valid header slot (`None`: both damaged) and
/// `damaged` the offsets of written slots that are not valid.
///
/// A torn header write damages only the slot being written, and no record
/// of its epoch is written before that slot is synced. So if the records at
/// the start of the log belong to an epoch newer than the valid slot's
/// (another salt, a sequence number not below its start), the damaged slot
/// was the live one: reading with the other slot would drop every commit
/// since the checkpoint.
pub fn read<'a>(
    log: &'a [u8],
    decoded: Option<LogHeader>,
    damaged: &[usize],
    region_id: u64,
    checkpoint_seq: u64,
) -> Reading<'a> {
    let first = log
        .get(HEADER_BYTES as usize..)
        .and_then(format::decode_record_any);
    let newer = match (damaged.is_empty(), decoded, first) {
        (false, Some(h), Some((salt, r))) if salt != h.salt && r.seq >= h.start_seq => {
            Some((salt, r.seq))
        }
        (false, None, Some((salt, r))) => Some((salt, r.seq)),
        _ => None,
    };
    let mut damage = Vec::new();
    let (header, rebuilt) = match (newer, decoded) {
        (Some((salt, start_seq)), _) => {
            // A generation above the valid slot's whose successor goes into
            // the damaged slot, so the next epoch overwrites it and leaves
            // the valid one alone.
            let d = (damaged[0] / format::SLOT_OFFSETS[1]) as u64;
            let base = decoded.map_or(0, |h| h.generation) + 1;
            let generation = if (base + 1) % 2 == d { base } else { base + 1 };
            let h = LogHeader {
                region_id,
                generation,
                salt,
                start_seq,
            };
            (h, true)
        }
        (None, Some(h)) => (h, false),
        (None, None) => {
            damage.push(Corruption {
                offset: damaged.first().copied().unwrap_or(0) as u64,
                seq: checkpoint_seq + 1,
                last: None,
                what: "both log header slots are damaged and no record at the start of the log                        shows their epoch: any commit after the checkpoint is lost"
                    .to_string(),
            });
            let h = LogHeader {
                region_id,
                generation: 2,
                salt: 0,
                start_seq: checkpoint_seq + 1,
            };
            (h, false)
        }
    };
    let scan = scan(log, &header);
    let mut harmless = Vec::new();
    if rebuilt {
        let after: Vec<u64> = scan
            .records
            .iter()
            .map(|r| r.seq)
            .filter(|&s| s > checkpoint_seq)
            .collect();
        match (after.first(), after.last()) {
            (Some(&a), Some(&b)) => damage.push(Corruption {
                offset: damaged[0] as u64,
                seq: a,
                last: Some(b),
                what: format!(
                    "the live log header slot is damaged{}: its records from offset {HEADER_BYTES}                      (commits {a}..={b}, after the checkpoint) would be ignored;                      the header can be rebuilt from them",
                    match decoded {
                        Some(h) => format!(
                            " and the other slot (generation {}) is an older epoch",
                            h.generation
                        ),
                        None => " and so is the other one".to_string(),
                    }
                ),
            }),
            _ if decoded.is_none() => damage.push(Corruption {
                offset: damaged[0] as u64,
                seq: checkpoint_seq + 1,
                last: None,
                what: "both log header slots are damaged (the records at the start of the log                        are all in the checkpoint)"
                    .to_string(),
            }),
            _ => harmless.extend_from_slice(damaged),
        }
    } else if decoded.is_some() {
        harmless.extend_from_slice(damaged);
    }
    if header.start_seq > checkpoint_seq.saturating_add(1) {
        damage.push(Corruption {
            offset: 0,
            seq: checkpoint_seq + 1,
            last: Some(header.start_seq - 1),
            what: format!(
                "log starts at commit {} but the region's checkpoint is commit {checkpoint_seq}: commits are missing",
                header.start_seq
            ),
        });
    }
    // Damage whose every later record is in the checkpoint loses nothing.
    if let Some(d) = scan
        .damage
        .as_ref()
        .filter(|d| d.last.is_none_or(|l| l > checkpoint_seq))
    {
        damage.push(Corruption {
            offset: d.offset,
            seq: d.seq.max(checkpoint_seq + 1),
            last: d.last,
            what: format!("record {}: {}", d.seq, d.what),
        });
    }
    Reading {
        header,
        rebuilt,
        scan,
        damage,
        harmless,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wal::format::Range;

    /// `n` records starting at seq 10; record i claims records before `synced(i)` synced.
    fn log_with(n: u64) -> (Vec<u8>, LogHeader, Vec<usize>) {
        log_synced(n, |i| 9 + i)
    }

    fn log_synced(n: u64, synced: impl Fn(u64) -> u64) -> (Vec<u8>, LogHeader, Vec<usize>) {
        let h = LogHeader {
            region_id: 1,
            generation: 1,
            salt: 77,
            start_seq: 10,
        };
        let mut buf = vec![0u8; HEADER_BYTES as usize];
        let mut starts = Vec::new();
        for i in 0..n {
            starts.push(buf.len());
            let b = [i as u8; 100];
            format::encode_commit(
                &mut buf,
                77,
                10 + i,
                synced(i),
                8192,
                [Range {
                    offset: i * 10,
                    bytes: &b,
                }]
                .into_iter(),
            );
        }
        buf.extend_from_slice(&[0u8; 4096]);
        (buf, h, starts)
    }

    #[test]
    fn clean_log_yields_all_records_in_order() {
        let (buf, h, _) = log_with(5);
        let s = scan(&buf, &h);
        assert_eq!(s.damage, None);
        assert_eq!(
            s.records.iter().map(|r| r.seq).collect::<Vec<_>>(),
            vec![10, 11, 12, 13, 14]
        );
        assert_eq!(s.stop, Some("bad magic"));
    }

    #[test]
    fn torn_last_record_ends_the_log() {
        let (mut buf, h, starts) = log_with(5);
        buf[starts[4] + 40] ^= 1;
        let s = scan(&buf, &h);
        assert_eq!(s.damage, None);
        assert_eq!(s.records.len(), 4);
        assert_eq!(s.end, starts[4] as u64);
    }

    #[test]
    fn damaged_middle_record_is_an_error_naming_offset_and_seq() {
        let (mut buf, h, starts) = log_with(5);
        buf[starts[2] + 40] ^= 1;
        let s = scan(&buf, &h);
        let e = s.damage.unwrap();
        assert_eq!(s.records.len(), 2);
        assert_eq!((e.offset, e.seq, e.last), (starts[2] as u64, 12, Some(14)));
        assert!(e.what.contains("shows it was synced"), "{}", e.what);
    }

    #[test]
    fn a_hole_in_an_unsynced_batch_ends_the_log_instead_of_failing() {
        // records 10..14 were written in one batch after 9 was synced
        let (mut buf, h, starts) = log_synced(5, |_| 9);
        buf[starts[2] + 40] ^= 1;
        let s = scan(&buf, &h);
        assert_eq!(s.damage, None);
        assert_eq!(s.records.len(), 2);
        assert_eq!(s.end, starts[2] as u64);
    }

    #[test]
    fn records_of_an_older_epoch_are_ignored() {
        let (buf, mut h, _) = log_with(3);
        h.salt = 78;
        let s = scan(&buf, &h);
        assert_eq!(s.damage, None);
        assert!(s.records.is_empty());
    }

    #[test]
    fn a_log_cut_inside_or_right_after_a_record_is_damage() {
        let (buf, h, starts) = log_with(5);
        for cut in [starts[3] + 3, starts[3] + 30, starts[3] + 50, starts[3]] {
            let s = scan(&buf[..cut], &h);
            let d = s.damage.unwrap_or_else(|| panic!("cut at {cut} not seen"));
            assert_eq!((d.offset, d.seq), (starts[3] as u64, 13), "{}", d.what);
            assert_eq!(s.records.len(), 3);
        }
        // cut inside the zeros after the last record: nothing lost
        let end = starts[4] + (starts[4] - starts[3]);
        let s = scan(&buf[..end + 20], &h);
        assert_eq!((s.damage, s.records.len()), (None, 5));
    }

    fn with_slot(h: &LogHeader, buf: &mut [u8]) {
        let (off, slot) = h.encode();
        buf[off as usize..off as usize + 64].copy_from_slice(&slot);
    }

    #[test]
    fn a_damaged_live_header_slot_is_told_from_a_torn_one() {
        let (mut buf, h, _) = log_with(5);
        // the live epoch (salt 77, generation 1) and an older one in the other slot
        let old = LogHeader {
            generation: 0,
            salt: 5,
            start_seq: 3,
            ..h
        };
        with_slot(&old, &mut buf);
        with_slot(&h, &mut buf);
        let live = format::SLOT_OFFSETS[1];
        buf[live + 10] ^= 0xff;
        let page = &buf[..HEADER_BYTES as usize];
        let damaged = format::damaged_slots(page, format::LOG_MAGIC);
        assert_eq!(damaged, vec![live]);
        let valid = LogHeader::decode(page).unwrap();
        assert_eq!(valid, old);
        // records 10..=14 after checkpoint 11: 12..=14 would be lost
        let r = read(&buf, Some(valid), &damaged, 1, 11);
        assert!(r.rebuilt);
        assert_eq!((r.header.salt, r.header.start_seq), (77, 10));
        assert_eq!(
            r.header.generation % 2,
            0,
            "next epoch goes to the damaged slot"
        );
        assert_eq!(r.damage.len(), 1);
        assert_eq!((r.damage[0].seq, r.damage[0].last), (12, Some(14)));
        assert_eq!(r.scan.records.len(), 5);
        // every record in the checkpoint: nothing lost, only a warning
        let r = read(&buf, Some(valid), &damaged, 1, 14);
        assert!(r.damage.is_empty());
        assert_eq!(r.harmless, vec![live]);
        // a torn write of a new slot: the records are of the valid slot's epoch
        let r = read(&buf, Some(h), &damaged, 1, 11);
        assert!(!r.rebuilt && r.damage.is_empty());
        assert_eq!(r.scan.records.len(), 5);
    }
}
