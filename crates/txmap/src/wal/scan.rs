//! Reading a log back: the records of the current epoch, in order, and where
//! they end. A damaged record ends the log if it may never have been synced
//! (a crash tears or reorders unsynced writes, so valid records may even
//! follow it). It is corruption, and an error, if a later record proves it
//! was synced: skipping it would silently lose a durable commit.

use super::format::{self, CommitRecord, HEADER_BYTES, LogHeader, RecordError};

/// The readable content of a log epoch.
#[derive(Debug)]
pub struct Scan<'a> {
    pub records: Vec<CommitRecord<'a>>,
    /// Offset just past the last valid record.
    pub end: u64,
    /// Why scanning stopped at `end`, if not at the end of the file.
    pub stop: Option<&'static str>,
}

/// A damaged record with valid records of the same epoch after it.
#[derive(Debug, PartialEq, Eq)]
pub struct Corruption {
    pub offset: u64,
    pub seq: u64,
    pub what: String,
}

/// Scans the log bytes `log` (the whole file, header included).
pub fn scan<'a>(log: &'a [u8], header: &LogHeader) -> Result<Scan<'a>, Corruption> {
    let mut off = HEADER_BYTES as usize;
    let mut seq = header.start_seq;
    let mut records = Vec::new();
    let stop = loop {
        if off >= log.len() {
            break None;
        }
        match format::decode_record(&log[off..], header.salt) {
            Ok(r) if r.seq == seq => {
                off += r.len;
                seq += 1;
                records.push(r);
            }
            Ok(r) => {
                return Err(Corruption {
                    offset: off as u64,
                    seq,
                    what: format!(
                        "record has sequence number {} where {seq} was expected",
                        r.seq
                    ),
                });
            }
            Err(RecordError::Malformed(what)) => {
                return Err(Corruption {
                    offset: off as u64,
                    seq,
                    what: what.to_string(),
                });
            }
            Err(RecordError::Short) => break Some("end of file inside a record header"),
            Err(RecordError::NotARecord(why)) => {
                if let Some(later) = find_proof_of_sync(log, off + 8, header.salt, seq) {
                    return Err(Corruption {
                        offset: off as u64,
                        seq,
                        what: format!(
                            "record damaged ({why}) but the record at offset {later} shows it was synced"
                        ),
                    });
                }
                break Some(why);
            }
        }
    };
    Ok(Scan {
        records,
        end: off as u64,
        stop,
    })
}

/// The offset of a valid record of this epoch at or after `from` (8-aligned)
/// written after record `seq` was synced.
fn find_proof_of_sync(log: &[u8], from: usize, salt: u64, seq: u64) -> Option<u64> {
    let magic = format::RECORD_MAGIC.to_le_bytes();
    let salt_bytes = salt.to_le_bytes();
    let mut off = from.div_ceil(8) * 8;
    while off + format::RECORD_HEADER <= log.len() {
        if log[off..off + 4] == magic
            && log[off + 16..off + 24] == salt_bytes
            && format::decode_record(&log[off..], salt).is_ok_and(|r| r.synced >= seq)
        {
            return Some(off as u64);
        }
        off += 8;
    }
    None
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
        let s = scan(&buf, &h).unwrap();
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
        let s = scan(&buf, &h).unwrap();
        assert_eq!(s.records.len(), 4);
        assert_eq!(s.end, starts[4] as u64);
    }

    #[test]
    fn damaged_middle_record_is_an_error_naming_offset_and_seq() {
        let (mut buf, h, starts) = log_with(5);
        buf[starts[2] + 40] ^= 1;
        let e = scan(&buf, &h).unwrap_err();
        assert_eq!((e.offset, e.seq), (starts[2] as u64, 12));
        assert!(e.what.contains("shows it was synced"), "{}", e.what);
    }

    #[test]
    fn a_hole_in_an_unsynced_batch_ends_the_log_instead_of_failing() {
        // records 10..14 were written in one batch after 9 was synced
        let (mut buf, h, starts) = log_synced(5, |_| 9);
        buf[starts[2] + 40] ^= 1;
        let s = scan(&buf, &h).unwrap();
        assert_eq!(s.records.len(), 2);
        assert_eq!(s.end, starts[2] as u64);
    }

    #[test]
    fn records_of_an_older_epoch_are_ignored() {
        let (buf, mut h, _) = log_with(3);
        h.salt = 78;
        let s = scan(&buf, &h).unwrap();
        assert!(s.records.is_empty());
    }
}
