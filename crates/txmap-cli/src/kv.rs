//! `txmap kv`: a key-value store on a region's named map structure, and the
//! structure part of `txmap check --structures`.
//!
//! Text format (load, dump, and keys/values on the command line): one entry
//! per line, `KEY<TAB>VALUE`, bytes escaped as `\\`, `\t`, `\n`, `\r` and
//! `\xHH` (any byte outside printable ASCII). Binary format: the 8 bytes
//! `TXMKV01\n`, then per entry a little-endian u32 key length, u32 value
//! length, the key and the value.

use std::io::{BufRead, BufReader, BufWriter, Read, Write};
use std::ops::Bound;
use std::path::{Path, PathBuf};

use clap::{Subcommand, ValueEnum};
use txmap::collections::{AnyMap, Kind, Map, RegionCheck, check_region};
use txmap::{Durability, Error, Options, Region, View};

use crate::{Fail, js, plural, usage};

pub const BIN_MAGIC: &[u8; 8] = b"TXMKV01\n";

#[derive(Subcommand, Debug)]
pub enum KvOp {
    /// Store VALUE under KEY (creates the region and the structure if absent)
    Put { key: String, value: String },
    /// Print the value under KEY; exit status 3 if there is none
    Get { key: String },
    /// Remove KEY; exit status 3 if it was absent
    Delete { key: String },
    /// Print entries with FROM <= key < TO in key order
    Scan {
        #[arg(long)]
        from: Option<String>,
        #[arg(long)]
        to: Option<String>,
        /// At most this many entries
        #[arg(long)]
        limit: Option<u64>,
    },
    /// Insert every entry of FILE ('-' for standard input), BATCH per transaction
    Load {
        file: PathBuf,
        #[arg(long, value_enum, default_value_t = Format::Text)]
        format: Format,
        #[arg(long, default_value_t = 1000)]
        batch: usize,
    },
    /// Write every entry in key order to OUT (default: standard output)
    Dump {
        #[arg(long)]
        out: Option<PathBuf>,
        #[arg(long, value_enum, default_value_t = Format::Text)]
        format: Format,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Format {
    Text,
    Bin,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum KindArg {
    Btree,
    Cobtree,
    Lhash,
}

impl KindArg {
    fn kind(self) -> Kind {
        match self {
            KindArg::Btree => Kind::BTree,
            KindArg::Cobtree => Kind::CoBTree,
            KindArg::Lhash => Kind::LinearHash,
        }
    }
}

/// Escapes bytes for the text format.
pub fn escape(b: &[u8]) -> String {
    let mut s = String::with_capacity(b.len());
    for &c in b {
        match c {
            b'\\' => s.push_str("\\\\"),
            b'\t' => s.push_str("\\t"),
            b'\n' => s.push_str("\\n"),
            b'\r' => s.push_str("\\r"),
            0x20..=0x7e => s.push(c as char),
            _ => s.push_str(&format!("\\x{c:02x}")),
        }
    }
    s
}

/// Reverses [`escape`] (other characters are taken as their UTF-8 bytes).
pub fn unescape(s: &str) -> Result<Vec<u8>, String> {
    let mut out = Vec::with_capacity(s.len());
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] != b'\\' {
            out.push(b[i]);
            i += 1;
            continue;
        }
        match b.get(i + 1) {
            Some(b'\\') => out.push(b'\\'),
            Some(b't') => out.push(b'\t'),
            Some(b'n') => out.push(b'\n'),
            Some(b'r') => out.push(b'\r'),
            Some(b'x') => {
                let h = s
                    .get(i + 2..i + 4)
                    .and_then(|h| u8::from_str_radix(h, 16).ok())
                    .ok_or_else(|| format!("bad \\x escape at byte {i}"))?;
                out.push(h);
                i += 2;
            }
            _ => return Err(format!("bad escape at byte {i} (use \\\\ for a backslash)")),
        }
        i += 2;
    }
    Ok(out)
}

fn arg(s: &str, what: &str) -> Result<Vec<u8>, Fail> {
    unescape(s).map_err(|e| usage(format!("{what}: {e}")))
}

fn open(path: &Path, create: bool, durability: Durability) -> Result<Region, Fail> {
    let opts = Options {
        durability,
        ..Options::default()
    };
    // Of several puts at once on a new path, one creates the region and
    // the others open it.
    Ok(if create {
        Region::open_or_create(path, 1 << 20, opts)?
    } else {
        Region::open(path, opts)?
    })
}

fn find(v: &mut View, name: &str) -> Result<Option<AnyMap>, Fail> {
    v.begin_read()?;
    let m = AnyMap::open_named(v, name);
    v.commit()?;
    Ok(m?)
}

fn missing(name: &str) -> Fail {
    usage(format!(
        "the region has no structure named {name:?} (put or load creates it)"
    ))
}

/// Runs `txmap kv`; returns the output and the exit status.
pub fn kv(path: &Path, name: &str, kind: KindArg, op: KvOp) -> Result<(String, u8), Fail> {
    let creates = matches!(op, KvOp::Put { .. } | KvOp::Load { .. });
    let durability = if matches!(op, KvOp::Load { .. }) {
        Durability::Async // one sync at the end
    } else {
        Durability::Durable
    };
    let region = open(path, creates, durability)?;
    let mut v = region.view()?;
    let m = if creates {
        v.run(|v| AnyMap::open_or_create(v, name, kind.kind()))?
    } else {
        find(&mut v, name)?.ok_or_else(|| missing(name))?
    };
    let out = match op {
        KvOp::Put { key, value } => {
            let (k, val) = (arg(&key, "key")?, arg(&value, "value")?);
            let had = v.run(|v| m.put(v, &k, &val))?;
            (if had { "replaced\n" } else { "inserted\n" }.to_string(), 0)
        }
        KvOp::Get { key } => {
            let k = arg(&key, "key")?;
            v.begin_read()?;
            let got = m.get(&v, &k);
            v.commit()?;
            match got? {
                Some(val) => (escape(&val) + "\n", 0),
                None => {
                    return Err(Fail {
                        msg: format!("key {key:?} not found"),
                        code: 3,
                    });
                }
            }
        }
        KvOp::Delete { key } => {
            let k = arg(&key, "key")?;
            if !v.run(|v| m.delete(v, &k))? {
                return Err(Fail {
                    msg: format!("key {key:?} not found"),
                    code: 3,
                });
            }
            ("deleted\n".to_string(), 0)
        }
        KvOp::Scan { from, to, limit } => {
            let from = from.map(|s| arg(&s, "--from")).transpose()?;
            let to = to.map(|s| arg(&s, "--to")).transpose()?;
            let lo = from.as_deref().map_or(Bound::Unbounded, Bound::Included);
            let hi = to.as_deref().map_or(Bound::Unbounded, Bound::Excluded);
            let mut out = String::new();
            let mut n = 0;
            let limit = limit.unwrap_or(u64::MAX);
            v.begin_read()?;
            let r = m.scan(&v, lo, hi, &mut |k, val| {
                if n >= limit {
                    return Ok(false);
                }
                n += 1;
                out.push_str(&format!("{}\t{}\n", escape(k), escape(val)));
                Ok(true)
            });
            v.commit()?;
            r?;
            (out, 0)
        }
        KvOp::Load {
            file,
            format,
            batch,
        } => {
            let n = load(&mut v, m, &file, format, batch.max(1))?;
            region.sync()?;
            (format!("loaded {}\n", plural(n, "entry", "entries")), 0)
        }
        KvOp::Dump { out, format } => {
            let n = dump(&mut v, m, out.as_deref(), format)?;
            let msg = format!("dumped {}\n", plural(n, "entry", "entries"));
            // To standard output, the entries are the output.
            (if out.is_some() { msg } else { String::new() }, 0)
        }
    };
    drop(v);
    region.close()?;
    Ok(out)
}

type KvPair = (Vec<u8>, Vec<u8>);

/// Reads entries from a text or binary stream.
struct Reader<R> {
    r: R,
    format: Format,
    line: usize,
    buf: String,
}

impl<R: BufRead> Reader<R> {
    fn next(&mut self) -> Result<Option<KvPair>, Fail> {
        match self.format {
            Format::Text => loop {
                self.buf.clear();
                self.line += 1;
                let n = self
                    .r
                    .read_line(&mut self.buf)
                    .map_err(|e| usage(format!("read line {}: {e}", self.line)))?;
                if n == 0 {
                    return Ok(None);
                }
                let l = self.buf.trim_end_matches(['\n', '\r']);
                if l.is_empty() {
                    continue;
                }
                let (k, val) = l
                    .split_once('\t')
                    .ok_or_else(|| usage(format!("line {}: expected KEY<TAB>VALUE", self.line)))?;
                let bad = |e: String| usage(format!("line {}: {e}", self.line));
                return Ok(Some((
                    unescape(k).map_err(bad)?,
                    unescape(val).map_err(bad)?,
                )));
            },
            Format::Bin => {
                let mut h = [0u8; 8];
                match self.r.read_exact(&mut h[..1]) {
                    Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
                    r => r.map_err(|e| usage(format!("read: {e}")))?,
                }
                self.line += 1;
                let trunc =
                    |e: std::io::Error| usage(format!("entry {}: truncated ({e})", self.line));
                self.r.read_exact(&mut h[1..]).map_err(trunc)?;
                let kl = u32::from_le_bytes(h[..4].try_into().expect("4")) as usize;
                let vl = u32::from_le_bytes(h[4..].try_into().expect("4")) as usize;
                if kl > txmap::collections::btree::MAX_KEY {
                    return Err(usage(format!(
                        "entry {}: key of {kl} bytes is too long",
                        self.line
                    )));
                }
                let mut k = vec![0u8; kl];
                self.r.read_exact(&mut k).map_err(trunc)?;
                let mut val = Vec::new();
                (&mut self.r)
                    .take(vl as u64)
                    .read_to_end(&mut val)
                    .map_err(trunc)?;
                if val.len() != vl {
                    return Err(usage(format!("entry {}: truncated value", self.line)));
                }
                Ok(Some((k, val)))
            }
        }
    }
}

fn load(v: &mut View, m: AnyMap, file: &Path, format: Format, batch: usize) -> Result<u64, Fail> {
    let (input, len): (Box<dyn Read>, u64) = if file == Path::new("-") {
        (Box::new(std::io::stdin()), 0)
    } else {
        let f = std::fs::File::open(file)
            .map_err(|e| usage(format!("open {}: {e}", file.display())))?;
        let len = f.metadata().map(|m| m.len()).unwrap_or(0);
        (Box::new(f), len)
    };
    let bar = indicatif::ProgressBar::new(len);
    if let Ok(style) =
        indicatif::ProgressStyle::with_template("loading {bar:40} {bytes}/{total_bytes} ({eta})")
    {
        bar.set_style(style);
    }
    let mut r = BufReader::new(bar.wrap_read(input));
    if format == Format::Bin {
        let mut magic = [0u8; 8];
        r.read_exact(&mut magic)
            .map_err(|e| usage(format!("read header: {e}")))?;
        if &magic != BIN_MAGIC {
            return Err(usage("not a txmap kv binary dump (bad magic)"));
        }
    }
    let mut rd = Reader {
        r,
        format,
        line: 0,
        buf: String::new(),
    };
    let mut n = 0u64;
    loop {
        let mut chunk = Vec::with_capacity(batch);
        while chunk.len() < batch {
            match rd.next()? {
                Some(e) => chunk.push(e),
                None => break,
            }
        }
        if chunk.is_empty() {
            break;
        }
        v.run(|v| {
            chunk
                .iter()
                .try_for_each(|(k, val)| m.put(v, k, val).map(|_| ()))
        })?;
        n += chunk.len() as u64;
    }
    bar.finish_and_clear();
    Ok(n)
}

fn dump(v: &mut View, m: AnyMap, out: Option<&Path>, format: Format) -> Result<u64, Fail> {
    let sink: Box<dyn Write> = match out {
        Some(p) => Box::new(
            std::fs::File::create(p).map_err(|e| usage(format!("create {}: {e}", p.display())))?,
        ),
        None => Box::new(std::io::stdout().lock()),
    };
    let mut w = BufWriter::new(sink);
    let io = |e: std::io::Error| Error::Invalid(format!("write: {e}"));
    if format == Format::Bin {
        w.write_all(BIN_MAGIC).map_err(io)?;
    }
    let mut n = 0;
    v.begin_read()?;
    let r = m.scan(v, Bound::Unbounded, Bound::Unbounded, &mut |k, val| {
        match format {
            Format::Text => writeln!(w, "{}\t{}", escape(k), escape(val)),
            Format::Bin => w
                .write_all(&(k.len() as u32).to_le_bytes())
                .and_then(|_| w.write_all(&(val.len() as u32).to_le_bytes()))
                .and_then(|_| w.write_all(k))
                .and_then(|_| w.write_all(val)),
        }
        .map_err(io)?;
        n += 1;
        Ok(true)
    });
    v.commit()?;
    r?;
    w.flush().map_err(io)?;
    Ok(n)
}

/// What `check --structures` found: problems (each makes the region
/// unsound), warnings, and the checks themselves.
struct Findings {
    problems: Vec<String>,
    warnings: Vec<String>,
    /// None: the region holds no heap, or its heap could not be read at all
    /// (then `problems` says why).
    check: Option<RegionCheck>,
}

/// Opens the region (replaying its log, like any program) and checks its
/// heap and every structure in its catalog in one snapshot.
fn findings(path: &Path) -> Result<Findings, Fail> {
    let region = Region::open(path, Options::default())?;
    let mut v = region.view()?;
    let checked = check_region(&mut v);
    drop(v);
    region.close()?;
    let mut problems = Vec::new();
    let mut warnings = Vec::new();
    let check = match checked {
        Ok(c) => c,
        Err(e @ Error::Corrupt { .. }) => {
            problems.push(format!("heap: {e}"));
            None
        }
        Err(e) => return Err(e.into()),
    };
    if let Some(c) = &check {
        if let Err(e) = &c.heap {
            problems.push(format!("heap: {e}"));
        }
        for (e, r) in &c.structures {
            if let Err(err) = r {
                problems.push(format!("{} {:?}: {err}", e.kind.name(), e.name));
            }
        }
        if let Some(n) = c.unowned_blocks
            && n > 0
        {
            warnings.push(format!(
                "{} in use belong to no catalog structure (leaked, or used by the program directly)",
                plural(n, "block", "blocks")
            ));
        }
    }
    Ok(Findings {
        problems,
        warnings,
        check,
    })
}

/// `txmap check --structures` as text; true if everything is sound.
pub fn check_structures(path: &Path) -> Result<(String, bool), Fail> {
    let f = findings(path)?;
    let sound = f.problems.is_empty();
    let Some(c) = &f.check else {
        if sound {
            return Ok((
                "structures: none (the region holds no txmap heap)\n".into(),
                true,
            ));
        }
        let out: String = f
            .problems
            .iter()
            .map(|p| format!("problem: {p}\n"))
            .collect();
        return Ok((out, false));
    };
    let mut out = String::new();
    match &c.heap {
        Ok(h) => out.push_str(&format!(
            "heap: sound: {} in use ({} bytes), {} free ({} bytes), top {}\n",
            plural(h.used_blocks, "block", "blocks"),
            h.used_bytes,
            plural(h.free_blocks, "block", "blocks"),
            h.free_bytes,
            h.top
        )),
        Err(e) => out.push_str(&format!("problem: heap: {e}\n")),
    }
    for (e, r) in &c.structures {
        match r {
            Ok(r) => out.push_str(&format!(
                "{} {:?}: sound: {}; {}\n",
                e.kind.name(),
                e.name,
                plural(r.entries, "entry", "entries"),
                r.detail
            )),
            Err(err) => out.push_str(&format!("problem: {} {:?}: {err}\n", e.kind.name(), e.name)),
        }
    }
    for w in &f.warnings {
        out.push_str(&format!("warning: {w}\n"));
    }
    Ok((out, sound))
}

/// `check --structures` as the value of the `"structures"` field of
/// `check --json`; true if sound.
pub fn check_structures_json(path: &Path) -> Result<(String, bool), Fail> {
    let f = findings(path)?;
    let list = |v: &[String]| {
        let items: Vec<String> = v.iter().map(|s| js(s)).collect();
        format!("[{}]", items.join(","))
    };
    let (heap, entries) = match &f.check {
        None => ("null".to_string(), Vec::new()),
        Some(c) => {
            let heap = match &c.heap {
                Ok(h) => format!(
                    "{{\"sound\":true,\"used_blocks\":{},\"used_bytes\":{},\"free_blocks\":{},\"free_bytes\":{},\"top\":{}}}",
                    h.used_blocks, h.used_bytes, h.free_blocks, h.free_bytes, h.top
                ),
                Err(e) => format!("{{\"sound\":false,\"problem\":{}}}", js(&e.to_string())),
            };
            let entries = c
                .structures
                .iter()
                .map(|(e, r)| {
                    let head = format!(
                        "\"name\":{},\"kind\":{},\"at\":{}",
                        js(&e.name),
                        js(e.kind.name()),
                        e.at
                    );
                    match r {
                        Ok(r) => format!(
                            "{{{head},\"sound\":true,\"entries\":{},\"blocks\":{},\"detail\":{}}}",
                            r.entries,
                            r.blocks,
                            js(&r.detail)
                        ),
                        Err(err) => format!(
                            "{{{head},\"sound\":false,\"problem\":{}}}",
                            js(&err.to_string())
                        ),
                    }
                })
                .collect();
            (heap, entries)
        }
    };
    let unowned = f
        .check
        .as_ref()
        .and_then(|c| c.unowned_blocks)
        .map_or_else(|| "null".to_string(), |n| n.to_string());
    let sound = f.problems.is_empty();
    Ok((
        format!(
            "{{\"sound\":{sound},\"problems\":{},\"warnings\":{},\"heap\":{heap},\"catalog\":[{}],\"unowned_blocks\":{unowned}}}",
            list(&f.problems),
            list(&f.warnings),
            entries.join(",")
        ),
        sound,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_round_trip() {
        let all: Vec<u8> = (0..=255).collect();
        assert_eq!(unescape(&escape(&all)).unwrap(), all);
        assert_eq!(escape(b"a\tb\\\n\x01"), "a\\tb\\\\\\n\\x01");
        assert!(unescape("\\q").is_err());
        assert!(unescape("\\x4").is_err());
        assert_eq!(unescape("h\\x41").unwrap(), b"hA");
    }
}
