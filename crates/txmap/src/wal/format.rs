//! Byte layouts of the region header, the log header and log records
//! (specified in docs/FORMAT.md). Encoders and decoders live side by side so
//! that what is checked on read is exactly what was written.

use crate::os::mem::PAGE;

/// Written into every header slot. Version 2 added kind-2 records (commits
/// with registered operations); a build that reads only version 1 refuses
/// the files by their version instead of calling such a record damage.
pub const FORMAT_VERSION: u32 = 2;
/// The oldest version this build reads (version 1 files have no kind-2 records).
pub const MIN_FORMAT_VERSION: u32 = 1;
pub const REGION_MAGIC: &[u8; 8] = b"TXMAPRGN";
pub const LOG_MAGIC: &[u8; 8] = b"TXMAPLOG";
pub const RECORD_MAGIC: u32 = u32::from_le_bytes(*b"TXR1");
/// Both files start with one page holding two header slots.
pub const HEADER_BYTES: u64 = PAGE as u64;
pub const SLOT_OFFSETS: [usize; 2] = [0, 2048];
const SLOT_BODY: usize = 48;
/// Optional tail of a slot (region headers only): bytes 52..56 hold a CRC-32C
/// of bytes 0..52 and 56..64, bytes 56..64 the region's fixed address. Older
/// builds leave all 12 bytes zero and do not read them.
const SLOT_EXT_CRC: usize = 52;
const SLOT_EXT: usize = 56;

pub const RECORD_HEADER: usize = 40;
pub const KIND_COMMIT: u8 = 1;
/// A commit that also holds registered operations (docs/FORMAT.md).
pub const KIND_COMMIT_OPS: u8 = 2;
/// Record flag (byte 9): the payload starts with the commit's time.
pub const FLAG_TIME: u8 = 1;
/// Record flag (byte 9): the payload ends with a group trailer (one record
/// of a commit across several regions, docs/design/multi-region.md).
pub const FLAG_GROUP: u8 = 2;
/// Most writers a group trailer may list.
pub const MAX_GROUP: usize = 64;
/// Largest payload a record may claim; larger claims are corruption.
pub const MAX_PAYLOAD: usize = 1 << 31;

/// The header of a region file: what the data part holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RegionHeader {
    pub region_id: u64,
    pub generation: u64,
    /// Every commit up to and including this sequence number is in the data pages (synced).
    pub checkpoint_seq: u64,
    /// Bytes of data after the header page at the checkpoint.
    pub data_size: u64,
    /// Where every process maps the region's views (`Region::address`);
    /// 0 = none recorded (a region made before addresses were).
    pub address: u64,
}

/// The header of a log file: which records belong to the current epoch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogHeader {
    pub region_id: u64,
    pub generation: u64,
    /// Records of this epoch carry this value; older bytes never match it.
    pub salt: u64,
    /// Sequence number of the first record of this epoch.
    pub start_seq: u64,
}

fn put(buf: &mut [u8], at: usize, v: u64) {
    buf[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

fn get(buf: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(buf[at..at + 8].try_into().expect("8 bytes"))
}

fn get32(buf: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(buf[at..at + 4].try_into().expect("4 bytes"))
}

/// Encodes one header slot: magic, version, page size, four u64 fields, CRC,
/// and the optional tail (`ext`, left all zero when `ext` is 0).
fn encode_slot(magic: &[u8; 8], fields: [u64; 4], ext: u64) -> [u8; 64] {
    let mut s = [0u8; 64];
    s[..8].copy_from_slice(magic);
    s[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
    s[12..16].copy_from_slice(&(PAGE as u32).to_le_bytes());
    for (i, f) in fields.iter().enumerate() {
        put(&mut s, 16 + 8 * i, *f);
    }
    let crc = crc32c::crc32c(&s[..SLOT_BODY]);
    s[SLOT_BODY..SLOT_BODY + 4].copy_from_slice(&crc.to_le_bytes());
    if ext != 0 {
        put(&mut s, SLOT_EXT, ext);
        let crc = ext_crc(&s);
        s[SLOT_EXT_CRC..SLOT_EXT].copy_from_slice(&crc.to_le_bytes());
    }
    s
}

/// The tail's checksum: covers the whole slot but itself.
fn ext_crc(s: &[u8]) -> u32 {
    crc32c::crc32c_append(crc32c::crc32c(&s[..SLOT_EXT_CRC]), &s[SLOT_EXT..64])
}

/// The tail's value: 0 when absent (all zero), `None` when its checksum fails.
fn decode_ext(s: &[u8]) -> Option<u64> {
    if s[SLOT_EXT_CRC..64].iter().all(|&b| b == 0) {
        return Some(0);
    }
    (ext_crc(s) == get32(s, SLOT_EXT_CRC)).then(|| get(s, SLOT_EXT))
}

/// Why a header page could not be used.
#[derive(Debug, PartialEq, Eq)]
pub enum HeaderError {
    /// Neither slot holds this kind of header.
    NotThisKind,
    /// The magic matches but no slot has a valid checksum.
    BadChecksum,
    Version(u32),
    PageSize(u32),
}

impl std::fmt::Display for HeaderError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HeaderError::NotThisKind => write!(f, "not a txmap file (bad magic)"),
            HeaderError::BadChecksum => write!(f, "both header slots fail their checksum"),
            HeaderError::Version(v) => {
                write!(
                    f,
                    "format version {v}, this build reads versions {MIN_FORMAT_VERSION} to {FORMAT_VERSION}"
                )
            }
            HeaderError::PageSize(p) => write!(f, "page size {p}, this build uses {PAGE}"),
        }
    }
}

/// Decodes the newest valid slot of a header page.
fn decode_slots(page: &[u8], magic: &[u8; 8]) -> Result<(u64, [u64; 5]), HeaderError> {
    let mut best: Option<[u64; 5]> = None;
    let mut seen_magic = false;
    let mut err = None;
    for off in SLOT_OFFSETS {
        // A page cut short holds no slot past its end.
        let Some(s) = page.get(off..off + 64) else {
            continue;
        };
        if &s[..8] != magic {
            continue;
        }
        seen_magic = true;
        if crc32c::crc32c(&s[..SLOT_BODY]) != get32(s, SLOT_BODY) {
            continue;
        }
        let Some(ext) = decode_ext(s) else {
            continue;
        };
        let version = get32(s, 8);
        if !(MIN_FORMAT_VERSION..=FORMAT_VERSION).contains(&version) {
            err = Some(HeaderError::Version(version));
            continue;
        }
        let ps = get32(s, 12);
        if ps as usize != PAGE {
            err = Some(HeaderError::PageSize(ps));
            continue;
        }
        let f = [get(s, 16), get(s, 24), get(s, 32), get(s, 40), ext];
        if best.is_none_or(|b| f[1] > b[1]) {
            best = Some(f);
        }
    }
    match (best, err, seen_magic) {
        (Some(f), _, _) => Ok((f[1], f)),
        (None, Some(e), _) => Err(e),
        (None, None, true) => Err(HeaderError::BadChecksum),
        (None, None, false) => Err(HeaderError::NotThisKind),
    }
}

impl RegionHeader {
    /// The slot bytes and the offset to write them at (alternating by generation).
    pub fn encode(&self) -> (u64, [u8; 64]) {
        let s = encode_slot(
            REGION_MAGIC,
            [
                self.region_id,
                self.generation,
                self.checkpoint_seq,
                self.data_size,
            ],
            self.address,
        );
        (SLOT_OFFSETS[(self.generation % 2) as usize] as u64, s)
    }

    pub fn decode(page: &[u8]) -> Result<RegionHeader, HeaderError> {
        let (_, f) = decode_slots(page, REGION_MAGIC)?;
        Ok(RegionHeader {
            region_id: f[0],
            generation: f[1],
            checkpoint_seq: f[2],
            data_size: f[3],
            address: f[4],
        })
    }
}

impl LogHeader {
    pub fn encode(&self) -> (u64, [u8; 64]) {
        let s = encode_slot(
            LOG_MAGIC,
            [self.region_id, self.generation, self.salt, self.start_seq],
            0,
        );
        (SLOT_OFFSETS[(self.generation % 2) as usize] as u64, s)
    }

    pub fn decode(page: &[u8]) -> Result<LogHeader, HeaderError> {
        let (_, f) = decode_slots(page, LOG_MAGIC)?;
        Ok(LogHeader {
            region_id: f[0],
            generation: f[1],
            salt: f[2],
            start_seq: f[3],
        })
    }
}

/// Offsets of header slots that were written but are not valid: not all
/// zero (never written) and failing magic, checksum, version or page size.
pub fn damaged_slots(page: &[u8], magic: &[u8; 8]) -> Vec<usize> {
    SLOT_OFFSETS
        .into_iter()
        .filter(|&off| {
            let s = &page[off..off + 64];
            if s.iter().all(|&b| b == 0) && page[off + 64..off + 2048].iter().all(|&b| b == 0) {
                return false;
            }
            let mut alone = vec![0u8; page.len()];
            alone[off..off + 64].copy_from_slice(s);
            decode_slots(&alone, magic).is_err()
        })
        .collect()
}

/// One changed byte range of the region, as logged.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Range<'a> {
    /// Offset in the region's data (not counting the header page).
    pub offset: u64,
    pub bytes: &'a [u8],
}

/// A registered operation as logged in a commit record: applied after the
/// record's first `at` ranges (and after the operations before it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoggedOp<'a> {
    pub at: u32,
    /// The operation's registered id (`crate::ops`).
    pub id: u32,
    /// Pages the operation wrote when it ran (for page checksums and
    /// `txmap info`; replay finds them again by running it).
    pub pages: Vec<u32>,
    pub args: &'a [u8],
}

/// Appends a commit record to `out`: header, payload, zero padding to 8 bytes.
pub fn encode_commit<'a>(
    out: &mut Vec<u8>,
    salt: u64,
    seq: u64,
    synced: u64,
    data_size: u64,
    ranges: impl Iterator<Item = Range<'a>> + Clone,
) {
    encode_commit_ops(out, salt, seq, synced, data_size, ranges, &[], None);
}

/// `encode_commit` with registered operations: kind 2 when there are any.
#[allow(clippy::too_many_arguments)] // the record's fields, in their order
pub fn encode_commit_ops<'a>(
    out: &mut Vec<u8>,
    salt: u64,
    seq: u64,
    synced: u64,
    data_size: u64,
    ranges: impl Iterator<Item = Range<'a>> + Clone,
    ops: &[LoggedOp<'_>],
    time: Option<u64>,
) {
    encode_record(out, salt, seq, synced, data_size, ranges, ops, time, None);
}

/// One writer of a commit across several regions, as its group trailer
/// lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupMember {
    pub region_id: u64,
    /// The sequence number of the group's record in that region's log.
    pub seq: u64,
    /// The salt of that log's epoch when the record was written.
    pub salt: u64,
    /// The region file's name in the directory (no `/`).
    pub name: String,
}

/// The trailer of a group record: the group's random id and its writers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupTrailer {
    pub id: u64,
    pub members: Vec<GroupMember>,
}

impl GroupTrailer {
    fn encoded_len(&self) -> usize {
        12 + self
            .members
            .iter()
            .map(|m| 26 + m.name.len())
            .sum::<usize>()
    }

    fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.id.to_le_bytes());
        out.extend_from_slice(&(self.members.len() as u32).to_le_bytes());
        for m in &self.members {
            for v in [m.region_id, m.seq, m.salt] {
                out.extend_from_slice(&v.to_le_bytes());
            }
            out.extend_from_slice(&(m.name.len() as u16).to_le_bytes());
            out.extend_from_slice(m.name.as_bytes());
        }
    }

    /// Decodes a trailer that fills `p` exactly.
    fn decode(p: &[u8]) -> Result<GroupTrailer, RecordError> {
        let short = RecordError::Malformed("group trailer past payload end");
        if p.len() < 12 {
            return Err(short);
        }
        let id = get(p, 0);
        let n = get32(p, 8) as usize;
        if !(2..=MAX_GROUP).contains(&n) || id == 0 {
            return Err(RecordError::Malformed(
                "group trailer with a bad id or count",
            ));
        }
        let mut at = 12;
        let mut members = Vec::with_capacity(n);
        for _ in 0..n {
            if at + 26 > p.len() {
                return Err(short);
            }
            let (region_id, seq, salt) = (get(p, at), get(p, at + 8), get(p, at + 16));
            let len = u16::from_le_bytes([p[at + 24], p[at + 25]]) as usize;
            at += 26;
            if at + len > p.len() {
                return Err(short);
            }
            let name = std::str::from_utf8(&p[at..at + len])
                .ok()
                .filter(|s| !s.is_empty() && !s.contains('/') && *s != "." && *s != "..")
                .ok_or(RecordError::Malformed("group member with a bad file name"))?;
            members.push(GroupMember {
                region_id,
                seq,
                salt,
                name: name.to_string(),
            });
            at += len;
        }
        if at != p.len() {
            return Err(RecordError::Malformed("trailing bytes in payload"));
        }
        Ok(GroupTrailer { id, members })
    }
}

/// Encodes a record, with a group trailer when `group` is given.
#[allow(clippy::too_many_arguments)] // the record's fields, in their order
pub fn encode_record<'a>(
    out: &mut Vec<u8>,
    salt: u64,
    seq: u64,
    synced: u64,
    data_size: u64,
    ranges: impl Iterator<Item = Range<'a>> + Clone,
    ops: &[LoggedOp<'_>],
    time: Option<u64>,
    group: Option<&GroupTrailer>,
) {
    let mut own = Vec::new();
    let pieces = encode_pieces(
        &mut own, salt, seq, synced, data_size, ranges, ops, time, group,
    );
    out.reserve(pieces.iter().map(|p| p.bytes(&own).len()).sum());
    for p in &pieces {
        out.extend_from_slice(p.bytes(&own));
    }
}

/// A piece of an encoded record (`encode_pieces`): bytes of the encoder's
/// own buffer, or a range's bytes, borrowed.
#[derive(Clone, Copy, Debug)]
pub enum Piece<'a> {
    /// `own[start..end]`.
    Own(usize, usize),
    /// A range's new bytes.
    Data(&'a [u8]),
}

impl<'a> Piece<'a> {
    /// The piece's bytes, given the encoder's own buffer.
    pub fn bytes<'b>(&self, own: &'b [u8]) -> &'b [u8]
    where
        'a: 'b,
    {
        match *self {
            Piece::Own(s, e) => &own[s..e],
            Piece::Data(d) => d,
        }
    }
}

/// A record's payload length: its fields after the header.
fn payload_len<'a>(
    ranges: impl Iterator<Item = Range<'a>>,
    ops: &[LoggedOp<'_>],
    time: bool,
    group: Option<&GroupTrailer>,
) -> usize {
    let ops_bytes: usize = if ops.is_empty() {
        0
    } else {
        4 + ops
            .iter()
            .map(|o| 16 + 4 * o.pages.len() + o.args.len())
            .sum::<usize>()
    };
    12 + if time { 8 } else { 0 }
        + group.map_or(0, GroupTrailer::encoded_len)
        + ops_bytes
        + ranges.map(|r| 12 + r.bytes.len()).sum::<usize>()
}

/// The bytes `encode_pieces` writes for a record with a time and no
/// group trailer (a commit in one region), padding included.
pub fn record_len<'a>(ranges: impl Iterator<Item = Range<'a>>, ops: &[LoggedOp<'_>]) -> usize {
    padded(RECORD_HEADER + payload_len(ranges, ops, true, None))
}

/// Encodes a record as pieces that, written one after the other, are the
/// bytes `encode_record` appends: the ranges' bytes are not copied (a bulk
/// load's record is megabytes, written with one vectored write). `own`
/// must be empty; it receives every byte that is not a range's.
#[allow(clippy::too_many_arguments)] // the record's fields, in their order
pub fn encode_pieces<'a>(
    own: &mut Vec<u8>,
    salt: u64,
    seq: u64,
    synced: u64,
    data_size: u64,
    ranges: impl Iterator<Item = Range<'a>> + Clone,
    ops: &[LoggedOp<'_>],
    time: Option<u64>,
    group: Option<&GroupTrailer>,
) -> Vec<Piece<'a>> {
    assert!(own.is_empty(), "pieces index an empty buffer");
    let n = ranges.clone().count();
    let payload = payload_len(ranges.clone(), ops, time.is_some(), group);
    assert!(payload <= MAX_PAYLOAD, "commit record too large");
    own.extend_from_slice(&RECORD_MAGIC.to_le_bytes());
    own.extend_from_slice(&[0; 4]); // crc, filled below
    own.push(if ops.is_empty() {
        KIND_COMMIT
    } else {
        KIND_COMMIT_OPS
    });
    own.push(
        if time.is_some() { FLAG_TIME } else { 0 } | if group.is_some() { FLAG_GROUP } else { 0 },
    );
    own.extend_from_slice(&[0; 2]);
    own.extend_from_slice(&(payload as u32).to_le_bytes());
    own.extend_from_slice(&salt.to_le_bytes());
    own.extend_from_slice(&seq.to_le_bytes());
    own.extend_from_slice(&synced.to_le_bytes());
    if let Some(t) = time {
        own.extend_from_slice(&t.to_le_bytes());
    }
    own.extend_from_slice(&data_size.to_le_bytes());
    own.extend_from_slice(&(n as u32).to_le_bytes());
    if !ops.is_empty() {
        own.extend_from_slice(&(ops.len() as u32).to_le_bytes());
    }
    let mut pieces = Vec::with_capacity(2 * n + 2);
    let mut from = 0;
    for r in ranges {
        own.extend_from_slice(&r.offset.to_le_bytes());
        own.extend_from_slice(&(r.bytes.len() as u32).to_le_bytes());
        pieces.push(Piece::Own(from, own.len()));
        pieces.push(Piece::Data(r.bytes));
        from = own.len();
    }
    for o in ops {
        for v in [o.at, o.id, o.pages.len() as u32, o.args.len() as u32] {
            own.extend_from_slice(&v.to_le_bytes());
        }
        for p in &o.pages {
            own.extend_from_slice(&p.to_le_bytes());
        }
        own.extend_from_slice(o.args);
    }
    if let Some(g) = group {
        g.encode(own);
    }
    let body = own.len();
    own.resize(
        body + padded(RECORD_HEADER + payload) - (RECORD_HEADER + payload),
        0,
    );
    pieces.push(Piece::Own(from, body));
    // The CRC covers everything after itself up to the padding.
    let mut crc = 0;
    let mut skip = 8;
    for p in &pieces {
        let b = p.bytes(own);
        let k = skip.min(b.len());
        skip -= k;
        crc = crc32c::crc32c_append(crc, &b[k..]);
    }
    own[4..8].copy_from_slice(&crc.to_le_bytes());
    pieces.push(Piece::Own(body, own.len()));
    pieces
}

pub fn padded(n: usize) -> usize {
    n.div_ceil(8) * 8
}

/// A decoded commit record, borrowing the log bytes.
#[derive(Debug)]
pub struct CommitRecord<'a> {
    pub seq: u64,
    /// Every record up to this sequence number was synced before this one was
    /// written: a damaged record at or below it is corruption, not a torn tail.
    pub synced: u64,
    /// When it was appended: nanoseconds since the Unix epoch (the system's
    /// wall clock, which may step back). `None` in records of older builds.
    pub time: Option<u64>,
    pub data_size: u64,
    pub ranges: Vec<Range<'a>>,
    /// Registered operations, in order (kind 2 records only).
    pub ops: Vec<LoggedOp<'a>>,
    /// Bytes the record occupies in the log, with padding.
    pub len: usize,
    /// One record of a commit across several regions (flag bit 1).
    pub group: Option<GroupTrailer>,
}

/// Why bytes at an offset are not a record of this epoch.
#[derive(Debug, PartialEq, Eq)]
pub enum RecordError {
    /// Too few bytes left for a record (end of log).
    Short,
    /// Not a record of this epoch (zeros, stale bytes, or damage).
    NotARecord(&'static str),
    /// A checksummed record whose content is impossible.
    Malformed(&'static str),
}

/// Decodes the record at the start of `buf` if it belongs to the epoch `salt`.
pub fn decode_record(buf: &[u8], salt: u64) -> Result<CommitRecord<'_>, RecordError> {
    if buf.len() < RECORD_HEADER {
        return Err(RecordError::Short);
    }
    if get32(buf, 0) != RECORD_MAGIC {
        return Err(RecordError::NotARecord("bad magic"));
    }
    if get(buf, 16) != salt {
        return Err(RecordError::NotARecord("salt of another epoch"));
    }
    let payload = get32(buf, 12) as usize;
    if RECORD_HEADER + payload > buf.len() {
        return Err(RecordError::NotARecord(
            "length runs past the end of the log",
        ));
    }
    if crc32c::crc32c(&buf[8..RECORD_HEADER + payload]) != get32(buf, 4) {
        return Err(RecordError::NotARecord("checksum mismatch"));
    }
    let with_ops = match buf[8] {
        KIND_COMMIT => false,
        KIND_COMMIT_OPS => true,
        _ => return Err(RecordError::Malformed("unknown record kind")),
    };
    let seq = get(buf, 24);
    let synced = get(buf, 32);
    if synced >= seq {
        return Err(RecordError::Malformed(
            "claims to have been synced before it was written",
        ));
    }
    let (timed, grouped) = match (buf[9], buf[10], buf[11]) {
        (f, 0, 0) if f & !(FLAG_TIME | FLAG_GROUP) == 0 => {
            (f & FLAG_TIME != 0, f & FLAG_GROUP != 0)
        }
        _ => return Err(RecordError::Malformed("unknown record flags")),
    };
    let mut p = &buf[RECORD_HEADER..RECORD_HEADER + payload];
    let time = if timed {
        if p.len() < 8 {
            return Err(RecordError::Malformed("commit payload too short"));
        }
        let t = get(p, 0);
        p = &p[8..];
        Some(t)
    } else {
        None
    };
    if p.len() < 12 {
        return Err(RecordError::Malformed("commit payload too short"));
    }
    let data_size = get(p, 0);
    if data_size == 0 || !data_size.is_multiple_of(PAGE as u64) {
        return Err(RecordError::Malformed(
            "region size is not a whole number of pages",
        ));
    }
    let n = get32(p, 8) as usize;
    let mut ranges = Vec::with_capacity(n.min(p.len() / 12));
    let mut at = 12;
    let n_ops = if with_ops {
        if p.len() < 16 {
            return Err(RecordError::Malformed("commit payload too short"));
        }
        at += 4;
        match get32(p, 12) as usize {
            0 => {
                return Err(RecordError::Malformed(
                    "operation record without operations",
                ));
            }
            n => n,
        }
    } else {
        0
    };
    for _ in 0..n {
        if at + 12 > p.len() {
            return Err(RecordError::Malformed("range header past payload end"));
        }
        let offset = get(p, at);
        let len = get32(p, at + 8) as usize;
        at += 12;
        if at + len > p.len() {
            return Err(RecordError::Malformed("range bytes past payload end"));
        }
        if offset.checked_add(len as u64).is_none_or(|e| e > data_size) {
            return Err(RecordError::Malformed("range beyond the region size"));
        }
        ranges.push(Range {
            offset,
            bytes: &p[at..at + len],
        });
        at += len;
    }
    let mut ops = Vec::with_capacity(n_ops.min(p.len() / 16));
    for _ in 0..n_ops {
        if at + 16 > p.len() {
            return Err(RecordError::Malformed("operation header past payload end"));
        }
        let (op_at, id) = (get32(p, at), get32(p, at + 4));
        let (np, na) = (get32(p, at + 8) as usize, get32(p, at + 12) as usize);
        at += 16;
        if op_at as usize > n || ops.last().is_some_and(|o: &LoggedOp<'_>| o.at > op_at) {
            return Err(RecordError::Malformed("operation out of order"));
        }
        if np
            .checked_mul(4)
            .and_then(|b| b.checked_add(na))
            .is_none_or(|b| at + b > p.len())
        {
            return Err(RecordError::Malformed("operation bytes past payload end"));
        }
        let pages: Vec<u32> = (0..np).map(|i| get32(p, at + 4 * i)).collect();
        if pages
            .iter()
            .any(|&pg| (u64::from(pg) + 1) * PAGE as u64 > data_size)
        {
            return Err(RecordError::Malformed(
                "operation page beyond the region size",
            ));
        }
        at += 4 * np;
        ops.push(LoggedOp {
            at: op_at,
            id,
            pages,
            args: &p[at..at + na],
        });
        at += na;
    }
    let group = if grouped {
        Some(GroupTrailer::decode(&p[at..])?)
    } else {
        None
    };
    if !grouped && at != p.len() {
        return Err(RecordError::Malformed("trailing bytes in payload"));
    }
    let len = padded(RECORD_HEADER + payload).min(buf.len());
    Ok(CommitRecord {
        seq,
        synced,
        time,
        data_size,
        ranges,
        ops,
        len,
        group,
    })
}

/// Decodes the record at the start of `buf` whatever its epoch: its salt
/// and the record, if magic and checksum match and it is well-formed.
pub fn decode_record_any(buf: &[u8]) -> Option<(u64, CommitRecord<'_>)> {
    if buf.len() < RECORD_HEADER || get32(buf, 0) != RECORD_MAGIC {
        return None;
    }
    let salt = get(buf, 16);
    decode_record(buf, salt).ok().map(|r| (salt, r))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_len_is_the_length_of_the_encoded_record() {
        let data: Vec<u8> = (0..5000u32).map(|i| (i * 7) as u8).collect();
        let args = [1u8, 2, 3, 4, 5];
        for n in [0usize, 1, 3, 17] {
            let ranges: Vec<Range> = (0..n)
                .map(|k| Range {
                    offset: 4096 * k as u64 + 3,
                    bytes: &data[..(k * 293 + 1) % data.len()],
                })
                .collect();
            let op = LoggedOp {
                at: 1,
                id: 9,
                pages: vec![2, 5, 6],
                args: &args[..n % 6],
            };
            for ops in [Vec::new(), vec![op.clone()], vec![op.clone(), op.clone()]] {
                let mut out = Vec::new();
                encode_record(
                    &mut out,
                    1,
                    2,
                    1,
                    8192,
                    ranges.iter().cloned(),
                    &ops,
                    Some(77),
                    None,
                );
                assert_eq!(
                    record_len(ranges.iter().cloned(), &ops),
                    out.len(),
                    "{n} ranges, {} ops",
                    ops.len()
                );
            }
        }
    }

    #[test]
    fn record_roundtrip_and_every_flipped_bit_is_caught() {
        let mut out = Vec::new();
        let data = [7u8; 10];
        let ranges = [
            Range {
                offset: 4096,
                bytes: &data,
            },
            Range {
                offset: 9000,
                bytes: &data[..3],
            },
        ];
        encode_commit(&mut out, 99, 5, 3, 16384, ranges.iter().cloned());
        assert_eq!(out.len() % 8, 0);
        let r = decode_record(&out, 99).unwrap();
        assert_eq!(
            (r.seq, r.synced, r.data_size, r.len),
            (5, 3, 16384, out.len())
        );
        assert_eq!(r.ranges, ranges.to_vec());
        assert_eq!(
            decode_record(&out, 98).unwrap_err(),
            RecordError::NotARecord("salt of another epoch")
        );
        // every single-bit flip in header or payload is rejected
        let body = RECORD_HEADER + 12 + 2 * 12 + 13;
        for bit in 0..body * 8 {
            let mut bad = out.clone();
            bad[bit / 8] ^= 1 << (bit % 8);
            assert!(
                decode_record(&bad, 99).is_err(),
                "flip of bit {bit} accepted"
            );
        }
    }

    #[test]
    fn a_timed_record_carries_its_time_and_unknown_flags_are_damage() {
        let data = [7u8; 10];
        let ranges = [Range {
            offset: 4096,
            bytes: &data,
        }];
        let t = 1_795_000_000_123_456_789;
        let mut out = Vec::new();
        encode_commit_ops(
            &mut out,
            9,
            5,
            3,
            16384,
            ranges.iter().cloned(),
            &[],
            Some(t),
        );
        let r = decode_record(&out, 9).unwrap();
        assert_eq!((r.time, r.data_size, r.len), (Some(t), 16384, out.len()));
        assert_eq!(r.ranges, ranges.to_vec());
        let mut plain = Vec::new();
        encode_commit(&mut plain, 9, 5, 3, 16384, ranges.iter().cloned());
        assert_eq!(decode_record(&plain, 9).unwrap().time, None);
        assert_eq!(plain.len() + 8, out.len());
        // Flags other than the time's and the group's, with a valid
        // checksum, are damage.
        for (at, v) in [(9, 4u8), (9, 0x83), (10, 1), (11, 0x80)] {
            let mut bad = out.clone();
            bad[at] = v;
            let end = RECORD_HEADER + get32(&bad, 12) as usize;
            let crc = crc32c::crc32c(&bad[8..end]);
            bad[4..8].copy_from_slice(&crc.to_le_bytes());
            assert_eq!(
                decode_record(&bad, 9).unwrap_err(),
                RecordError::Malformed("unknown record flags"),
                "byte {at} = {v}"
            );
        }
    }

    #[test]
    fn a_group_record_carries_its_trailer_and_a_bad_one_is_damage() {
        let data = [7u8; 10];
        let ranges = [Range {
            offset: 4096,
            bytes: &data,
        }];
        let member = |id, name: &str| GroupMember {
            region_id: id,
            seq: id + 100,
            salt: id * 7,
            name: name.to_string(),
        };
        let g = GroupTrailer {
            id: 0xfeed,
            members: vec![member(1, "a"), member(2, "bb")],
        };
        let mut out = Vec::new();
        let r = ranges.iter().cloned();
        encode_record(&mut out, 9, 5, 3, 16384, r, &[], Some(11), Some(&g));
        let d = decode_record(&out, 9).unwrap();
        assert_eq!(
            (d.time, d.len, d.ranges.clone()),
            (Some(11), out.len(), ranges.to_vec())
        );
        assert_eq!(d.group, Some(g.clone()));
        // Group flag without a trailer, one member, a name with '/': damage.
        let mut plain = Vec::new();
        encode_commit_ops(
            &mut plain,
            9,
            5,
            3,
            16384,
            ranges.iter().cloned(),
            &[],
            Some(11),
        );
        plain[9] |= FLAG_GROUP;
        let end = RECORD_HEADER + get32(&plain, 12) as usize;
        let crc = crc32c::crc32c(&plain[8..end]);
        plain[4..8].copy_from_slice(&crc.to_le_bytes());
        assert!(matches!(
            decode_record(&plain, 9),
            Err(RecordError::Malformed(_))
        ));
        for bad in [
            GroupTrailer {
                id: 1,
                members: vec![member(1, "a")],
            },
            GroupTrailer {
                id: 1,
                members: vec![member(1, "a"), member(2, "x/y")],
            },
            GroupTrailer {
                id: 0,
                members: vec![member(1, "a"), member(2, "b")],
            },
        ] {
            let mut out = Vec::new();
            let r = ranges.iter().cloned();
            encode_record(&mut out, 9, 5, 3, 16384, r, &[], None, Some(&bad));
            assert!(
                matches!(decode_record(&out, 9), Err(RecordError::Malformed(_))),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn version_1_headers_are_read_and_newer_ones_refused() {
        let h = LogHeader {
            region_id: 3,
            generation: 2,
            salt: 4,
            start_seq: 5,
        };
        let with_version = |v: u32| {
            let (at, mut slot) = h.encode();
            slot[8..12].copy_from_slice(&v.to_le_bytes());
            let crc = crc32c::crc32c(&slot[..SLOT_BODY]);
            slot[SLOT_BODY..SLOT_BODY + 4].copy_from_slice(&crc.to_le_bytes());
            let mut page = vec![0u8; 4096];
            page[at as usize..at as usize + 64].copy_from_slice(&slot);
            LogHeader::decode(&page)
        };
        assert_eq!(with_version(1), Ok(h));
        assert_eq!(with_version(FORMAT_VERSION), Ok(h));
        assert_eq!(
            with_version(FORMAT_VERSION + 1),
            Err(HeaderError::Version(FORMAT_VERSION + 1))
        );
    }

    #[test]
    fn operation_records_roundtrip_and_bad_ones_are_malformed() {
        let data = [7u8; 10];
        let ranges = [Range {
            offset: 4096,
            bytes: &data,
        }];
        let ops = [
            LoggedOp {
                at: 0,
                id: 200,
                pages: vec![1, 3],
                args: b"abc",
            },
            LoggedOp {
                at: 1,
                id: 7,
                pages: vec![],
                args: b"",
            },
        ];
        let mut out = Vec::new();
        encode_commit_ops(&mut out, 9, 5, 3, 16384, ranges.iter().cloned(), &ops, None);
        assert_eq!(out[8], KIND_COMMIT_OPS);
        let r = decode_record(&out, 9).unwrap();
        assert_eq!((r.ranges, r.ops), (ranges.to_vec(), ops.to_vec()));
        let malformed = |ranges: &[Range<'_>], ops: &[LoggedOp<'_>]| {
            let mut out = Vec::new();
            encode_commit_ops(&mut out, 9, 5, 3, 16384, ranges.iter().cloned(), ops, None);
            match decode_record(&out, 9) {
                Err(RecordError::Malformed(m)) => m,
                r => panic!("accepted: {r:?}"),
            }
        };
        let mut late = ops.to_vec();
        late[0].at = 2; // after the only range and the next operation
        assert_eq!(malformed(&ranges, &late), "operation out of order");
        let mut far = ops.to_vec();
        far[0].pages = vec![4]; // a 16 KiB region has pages 0-3
        assert_eq!(
            malformed(&ranges, &far),
            "operation page beyond the region size"
        );
        // Kind 2 without operations is not what an encoder writes.
        let mut plain = Vec::new();
        encode_commit(&mut plain, 9, 5, 3, 16384, ranges.iter().cloned());
        let mut forged = plain[..RECORD_HEADER + 12].to_vec();
        forged.extend_from_slice(&0u32.to_le_bytes());
        forged.extend_from_slice(&plain[RECORD_HEADER + 12..RECORD_HEADER + 12 + 22]);
        forged[8] = KIND_COMMIT_OPS;
        let payload = (forged.len() - RECORD_HEADER) as u32;
        forged[12..16].copy_from_slice(&payload.to_le_bytes());
        let crc = crc32c::crc32c(&forged[8..]);
        forged[4..8].copy_from_slice(&crc.to_le_bytes());
        forged.resize(padded(forged.len()) + 8, 0);
        assert_eq!(
            decode_record(&forged, 9).unwrap_err(),
            RecordError::Malformed("operation record without operations")
        );
    }

    #[test]
    fn header_slots_pick_newest_valid_and_survive_a_torn_slot() {
        let mut page = vec![0u8; PAGE];
        for g in 1..=3 {
            let h = LogHeader {
                region_id: 1,
                generation: g,
                salt: 10 + g,
                start_seq: g,
            };
            let (off, s) = h.encode();
            page[off as usize..off as usize + 64].copy_from_slice(&s);
        }
        assert_eq!(LogHeader::decode(&page).unwrap().generation, 3);
        // damage the newest slot: the previous generation is used
        let newest = SLOT_OFFSETS[1];
        page[newest + 20] ^= 0xff;
        assert_eq!(LogHeader::decode(&page).unwrap().generation, 2);
        assert_eq!(
            RegionHeader::decode(&page).unwrap_err(),
            HeaderError::NotThisKind
        );
        page[SLOT_OFFSETS[0] + 20] ^= 0xff;
        assert_eq!(
            LogHeader::decode(&page).unwrap_err(),
            HeaderError::BadChecksum
        );
    }

    #[test]
    fn a_short_header_page_is_refused_or_read_without_panicking() {
        // Found while making the fuzz seeds: a page cut inside slot 1.
        let h = LogHeader {
            region_id: 1,
            generation: 2,
            salt: 2,
            start_seq: 1,
        };
        let (off, s) = h.encode();
        let mut page = vec![0u8; SLOT_OFFSETS[1] + 52];
        page[off as usize..off as usize + 64].copy_from_slice(&s);
        page[SLOT_OFFSETS[1]..SLOT_OFFSETS[1] + 8].copy_from_slice(LOG_MAGIC);
        assert_eq!(LogHeader::decode(&page), Ok(h));
        assert_eq!(
            LogHeader::decode(&page[..40]),
            Err(HeaderError::NotThisKind)
        );
        assert_eq!(LogHeader::decode(&[]), Err(HeaderError::NotThisKind));
    }

    #[test]
    fn region_address_is_optional_and_checked() {
        let h = RegionHeader {
            region_id: 7,
            generation: 4,
            checkpoint_seq: 3,
            data_size: PAGE as u64,
            address: 0x1234_5678_9000,
        };
        let (off, s) = h.encode();
        let off = off as usize;
        let mut page = vec![0u8; PAGE];
        page[off..off + 64].copy_from_slice(&s);
        assert_eq!(RegionHeader::decode(&page).unwrap(), h);
        // A slot written before addresses were (tail all zero) reads as none;
        // with no address, the slot is byte for byte the old format.
        let old = RegionHeader { address: 0, ..h };
        let (_, s0) = old.encode();
        assert!(s0[SLOT_EXT_CRC..].iter().all(|&b| b == 0));
        page[off..off + 64].copy_from_slice(&s0);
        assert_eq!(RegionHeader::decode(&page).unwrap(), old);
        // A damaged address invalidates its slot: the other one is used.
        let prev = RegionHeader { generation: 3, ..h };
        let (poff, ps) = prev.encode();
        page[poff as usize..poff as usize + 64].copy_from_slice(&ps);
        page[off..off + 64].copy_from_slice(&s);
        page[off + SLOT_EXT + 2] ^= 1;
        assert_eq!(RegionHeader::decode(&page).unwrap(), prev);
    }
}
