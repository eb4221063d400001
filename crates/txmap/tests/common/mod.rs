//! Test helpers: directories on a pinned file system, child processes.
#![allow(dead_code)]

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use txmap::Region;
use txmap::wal::format::{self, HEADER_BYTES, LogHeader};

const PAGE: u64 = 4096;

const EXT4_MAGIC: i64 = 0xEF53;
const TMPFS_MAGIC: i64 = 0x0102_1994;

/// A directory removed on drop.
pub struct TestDir(pub PathBuf);

impl TestDir {
    pub fn path(&self) -> &Path {
        &self.0
    }
    pub fn join(&self, p: &str) -> PathBuf {
        self.0.join(p)
    }
}

impl Drop for TestDir {
    fn drop(&mut self) {
        remove_shared_state(&self.0);
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Removes the shared state (in /dev/shm) of every region in `dir`: a
/// region whose last user was killed keeps it until the next open.
pub fn remove_shared_state(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let ids: Vec<String> = entries
        .flatten()
        .filter_map(|e| rustix::fs::stat(e.path()).ok())
        .map(|st| format!("-{:x}-{:x}", st.st_dev, st.st_ino))
        .collect();
    let Ok(shm) = std::fs::read_dir("/dev/shm") else {
        return;
    };
    for e in shm.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with("txmap-") && ids.iter().any(|id| name.ends_with(id.as_str())) {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

/// A tmpfs of a few MiB mounted for one test; unmounted on drop (so also
/// when the test fails).
pub struct Tmpfs(PathBuf);

impl Tmpfs {
    pub fn mount(name: &str, bytes: u64) -> Option<Tmpfs> {
        if !rustix::process::geteuid().is_root() {
            eprintln!("{name}: skipped: mounting a small tmpfs needs root");
            return None;
        }
        let d = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("{name}-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        let ok = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={bytes}")])
            .arg("tmpfs")
            .arg(&d)
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            let _ = std::fs::remove_dir(&d);
            eprintln!(
                "{name}: skipped: could not mount a tmpfs at {}",
                d.display()
            );
            return None;
        }
        Some(Tmpfs(d))
    }

    pub fn path(&self) -> &Path {
        &self.0
    }

    /// `mount -o remount,OPT` (`ro`, `rw`).
    pub fn remount(&self, opt: &str) {
        let o = format!("remount,{opt}");
        let ok = std::process::Command::new("mount")
            .args(["-o", &o])
            .arg(&self.0)
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "mount -o {o} {} failed", self.0.display());
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        remove_shared_state(&self.0);
        // A closed region's async flusher thread may hold its files a
        // moment longer; detach the mount at last if it stays busy.
        let umount = |lazy: bool| {
            let mut c = std::process::Command::new("umount");
            if lazy {
                c.arg("-l");
            }
            c.arg(&self.0).stderr(std::process::Stdio::null());
            c.status().is_ok_and(|s| s.success())
        };
        if !(0..50).any(|_| {
            umount(false) || {
                std::thread::sleep(std::time::Duration::from_millis(20));
                false
            }
        }) {
            umount(true);
        }
        let _ = std::fs::remove_dir(&self.0);
    }
}

fn fs_magic(p: &Path) -> i64 {
    rustix::fs::statfs(p).map(|s| s.f_type).unwrap_or(0)
}

fn make(root: &Path, name: &str) -> TestDir {
    let d = root.join(format!(
        "{name}-{}-{:?}",
        std::process::id(),
        std::thread::current().id()
    ));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    TestDir(d)
}

/// A directory on ext4 (the target directory's disk): real fsync, no
/// synchronous userfaultfd. Fails the test if the disk is not ext4.
pub fn ext4_dir(name: &str) -> TestDir {
    let root = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    std::fs::create_dir_all(&root).unwrap();
    assert_eq!(
        fs_magic(&root),
        EXT4_MAGIC,
        "{} must be on ext4 for this test",
        root.display()
    );
    make(&root, name)
}

/// A directory on tmpfs (/dev/shm): fsync is a no-op.
pub fn tmpfs_dir(name: &str) -> TestDir {
    let root = Path::new("/dev/shm");
    assert_eq!(fs_magic(root), TMPFS_MAGIC, "/dev/shm must be tmpfs");
    make(root, name)
}

/// Re-runs this test binary as a child running only test `name` with `role` set.
pub fn child(name: &str, role: &str, envs: &[(&str, String)]) -> std::process::Command {
    let mut c = std::process::Command::new(std::env::current_exe().unwrap());
    c.args([name, "--exact", "--nocapture", "--test-threads=1"]);
    c.env("TXMAP_TEST_ROLE", role);
    for (k, v) in envs {
        c.env(k, v);
    }
    c
}

/// The seed of a test's random choices: `TXMAP_SEED` if set, else one
/// derived from the test's name; printed, so a failure can be replayed.
pub fn seed(test: &str) -> u64 {
    let s = std::env::var("TXMAP_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            test.bytes()
                .fold(7u64, |a, b| a.wrapping_mul(31).wrapping_add(u64::from(b)))
        });
    eprintln!("{test}: TXMAP_SEED={s}");
    s
}

/// The role this process plays, if it is a child started by `child`.
pub fn role() -> Option<String> {
    std::env::var("TXMAP_TEST_ROLE").ok()
}

/// Commits `n` transactions, the i-th writing `i + 1` (a u64) at `i * PAGE + 8`.
pub fn commit_n(r: &Region, n: u64) {
    let mut v = r.view().unwrap();
    for i in 0..n {
        v.begin().unwrap();
        v.write(i * PAGE + 8, &(i + 1)).unwrap();
        v.commit().unwrap();
    }
}

/// Copies a region and its log, as a crash would leave them: taken while the
/// region is open, the log holds every durable commit.
pub fn copy_region(from: &Path, to: &Path) {
    std::fs::copy(txmap::log_path(from), txmap::log_path(to)).unwrap();
    std::fs::copy(from, to).unwrap();
}

/// Offsets of the records of the current epoch of a log file.
pub fn record_offsets(log: &Path) -> Vec<u64> {
    let bytes = std::fs::read(log).unwrap();
    let h = LogHeader::decode(&bytes[..HEADER_BYTES as usize]).unwrap();
    let mut off = HEADER_BYTES as usize;
    let mut out = Vec::new();
    while let Ok(r) = format::decode_record(&bytes[off..], h.salt) {
        out.push(off as u64);
        off += r.len;
    }
    out
}

/// Flips one bit of the byte at `at` in a file.
pub fn flip(path: &Path, at: u64) {
    let mut b = std::fs::read(path).unwrap();
    b[at as usize] ^= 0x40;
    std::fs::write(path, b).unwrap();
}

/// With `TXMAP_KEEP=dir` set, copies the region at `region`, its log and its
/// shared state (as the dead processes left them) into `evidence`, replacing
/// an earlier copy; without it, does nothing. Taken before a recovery that
/// would rewrite them, so a failed check can be studied afterwards.
pub fn take_evidence(region: &Path, evidence: &Path) {
    if std::env::var_os("TXMAP_KEEP").is_none() {
        return;
    }
    let _ = std::fs::remove_dir_all(evidence);
    std::fs::create_dir_all(evidence).unwrap();
    let cp = |from: &Path, name: &str| {
        // Sparse: the shared state is mostly holes.
        let ok = std::process::Command::new("cp")
            .arg("--sparse=always")
            .arg(from)
            .arg(evidence.join(name))
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "copying {} as evidence failed", from.display());
    };
    cp(region, "region");
    cp(&txmap::log_path(region), "log");
    if let Some(shm) = shared_state_of(region) {
        cp(&shm, "shm");
    }
}

/// The shared state a region's processes left, if there is any: the path
/// `txmap::shared_path` gives for the region id in its header.
fn shared_state_of(region: &Path) -> Option<PathBuf> {
    let data = std::fs::read(region).ok()?;
    let rh = format::RegionHeader::decode(data.get(..HEADER_BYTES as usize)?).ok()?;
    let p = txmap::shared_path(region, rh.region_id).ok()?;
    std::fs::metadata(&p)
        .is_ok_and(|m| m.len() > 0)
        .then_some(p)
}

/// With `TXMAP_KEEP=dir` set, copies the test directory `d` (acknowledgement
/// files, children's stderr, evidence) to `dir/<name>` before a failure.
pub fn keep_on_failure(d: &TestDir, name: &str) {
    let Some(keep) = std::env::var_os("TXMAP_KEEP") else {
        return;
    };
    let to = Path::new(&keep).join(format!("{name}-{}", std::process::id()));
    std::fs::create_dir_all(&to).unwrap();
    let _ = std::process::Command::new("cp")
        .args(["-a", "--sparse=always"])
        .arg(format!("{}/.", d.path().display()))
        .arg(&to)
        .status();
    eprintln!("kept the test directory in {}", to.display());
}

/// What a crash left, for a failure message: both headers, the current log
/// epoch as scanning finds it (records, where and why it stops, records of
/// other epochs after its end) and the dead processes' shared header. Read
/// before recovery rewrites them.
pub fn describe_crash_state(region: &Path) -> String {
    use std::fmt::Write as _;
    use std::sync::atomic::Ordering::Acquire;
    let mut s = String::new();
    let data = std::fs::read(region).unwrap_or_default();
    let log = std::fs::read(txmap::log_path(region)).unwrap_or_default();
    let rh = format::RegionHeader::decode(&data[..(HEADER_BYTES as usize).min(data.len())]);
    let _ = write!(s, "region header {rh:?}; ");
    let Ok(lh) = LogHeader::decode(&log[..(HEADER_BYTES as usize).min(log.len())]) else {
        return s + "log header unreadable";
    };
    let _ = write!(s, "log header {lh:?}, {} bytes; ", log.len());
    match txmap::wal::scan::scan(&log, &lh) {
        sc if sc.damage.is_none() => {
            let _ = write!(
                s,
                "scan: {} records, seq {:?}..={:?}, end {}, stop {:?}; ",
                sc.records.len(),
                sc.records.first().map(|r| r.seq),
                sc.records.last().map(|r| r.seq),
                sc.end,
                sc.stop
            );
            // Records of any epoch beyond the end: (offset, salt, seq).
            let mut later = Vec::new();
            let mut off = sc.end as usize;
            while off + format::RECORD_HEADER <= log.len() && later.len() < 4 {
                let salt = u64::from_le_bytes(log[off + 16..off + 24].try_into().unwrap());
                if let Ok(r) = format::decode_record(&log[off..], salt) {
                    later.push((off, salt == lh.salt, r.seq));
                    off += r.len;
                } else {
                    off += 8;
                }
            }
            let _ = write!(
                s,
                "records after the end (offset, this epoch, seq): {later:?}; "
            );
        }
        sc => {
            let _ = write!(s, "scan error {:?}; ", sc.damage);
        }
    }
    let Some(spath) = shared_state_of(region) else {
        return s + "no shared state";
    };
    match txmap::mvcc::Mvcc::attach(&spath) {
        Ok(m) => {
            let h = m.hdr();
            let f = |a: &std::sync::atomic::AtomicU64| a.load(Acquire);
            let _ = write!(
                s,
                "shared: commit {} checkpoint {} region gen {} {}",
                f(&h.commit_seq),
                h.file.checkpoint_seq(),
                h.file.region_generation(),
                h.log.describe()
            );
        }
        Err(_) => s.push_str("no shared state"),
    }
    s
}

/// How long a child may take before the test calls it blocked (only a hang
/// exceeds it; no speed is asserted).
pub const PROC_LIVENESS: std::time::Duration = std::time::Duration::from_secs(60);

/// An append-only file of acknowledgements; one `write` per line, so a
/// SIGKILL leaves whole lines.
pub struct Acks(File);

impl Acks {
    pub fn open(p: &str) -> Acks {
        Acks(File::options().create(true).append(true).open(p).unwrap())
    }
    pub fn line(&mut self, s: &str) {
        self.0.write_all(format!("{s}\n").as_bytes()).unwrap();
    }
}

/// Lines in `dir/acks{w}` (0 if absent) for each worker `w` below `workers`.
pub fn acked(dir: &Path, workers: u64) -> Vec<u64> {
    (0..workers)
        .map(|w| {
            std::fs::read_to_string(dir.join(format!("acks{w}")))
                .unwrap_or_default()
                .lines()
                .count() as u64
        })
        .collect()
}

/// Starts a child of `test` in role "worker" for each `w` of `workers`,
/// with `TXMAP_DIR` (`d`) and `TXMAP_WORKER` (`w`) set and its stderr in
/// `d/err{w}`.
pub fn spawn_workers(test: &str, d: &TestDir, workers: impl IntoIterator<Item = u64>) -> Vec<Proc> {
    workers
        .into_iter()
        .map(|w| {
            let env = [
                ("TXMAP_DIR", d.path().display().to_string()),
                ("TXMAP_WORKER", w.to_string()),
            ];
            Proc::spawn(test, "worker", &env, d.join(&format!("err{w}")))
        })
        .collect()
}

/// Kills every child with SIGKILL, after checking that none exited early.
pub fn kill_workers(procs: Vec<Proc>) {
    for mut p in procs {
        p.check_running("a worker");
        p.kill();
    }
}

/// In an acknowledging child: its acknowledgements (`TXMAP_ACKS`) and the
/// region `TXMAP_REGION` opened with no automatic checkpoint, so that after
/// a SIGKILL recovery replays the log.
pub fn child_region() -> (Acks, Region) {
    let p = PathBuf::from(std::env::var("TXMAP_REGION").unwrap());
    let acks = Acks::open(&std::env::var("TXMAP_ACKS").unwrap());
    let opts = txmap::Options {
        checkpoint_bytes: u64::MAX / 2,
        ..txmap::Options::default()
    };
    (acks, Region::open(&p, opts).unwrap())
}

/// Starts `n` children of `test` in `role`, child `k` with `TXMAP_ACKS`
/// (its acknowledgement file in `dir`, returned beside it) and `envs(k)`.
pub fn spawn_ackers(
    test: &str,
    role: &str,
    dir: &TestDir,
    n: u64,
    envs: impl Fn(u64) -> Vec<(&'static str, String)>,
) -> Vec<(Proc, PathBuf)> {
    (0..n)
        .map(|k| {
            let acks = dir.join(&format!("acks-{k}"));
            let mut e = envs(k);
            e.push(("TXMAP_ACKS", acks.display().to_string()));
            let c = Proc::spawn(test, role, &e, dir.join(&format!("err-{k}")));
            (c, acks)
        })
        .collect()
}

/// Lines in each acknowledgement file.
pub fn ack_counts(kids: &[(Proc, PathBuf)]) -> Vec<u64> {
    kids.iter()
        .map(|(_, a)| std::fs::read_to_string(a).unwrap().lines().count() as u64)
        .collect()
}

/// Waits until child `c` (which must keep running) has written `n` lines
/// of acknowledgements to `acks`.
pub fn wait_for_acks(c: &mut Proc, acks: &Path, n: usize) {
    loop {
        c.check_running("the acknowledging child");
        let got = std::fs::read_to_string(acks)
            .unwrap_or_default()
            .lines()
            .count();
        if got >= n {
            return;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// A child process with its stderr in a file.
pub struct Proc {
    child: Child,
    err: PathBuf,
}

impl Proc {
    pub fn spawn(test: &str, role: &str, envs: &[(&str, String)], err: PathBuf) -> Proc {
        let child = child(test, role, envs)
            .stdout(Stdio::null())
            .stderr(File::create(&err).unwrap())
            .spawn()
            .unwrap();
        Proc { child, err }
    }
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.err).unwrap_or_default()
    }
    /// How the child ended, if it has.
    pub fn try_wait(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().unwrap()
    }
    /// Sends the child `sig`.
    pub fn signal(&self, sig: rustix::process::Signal) {
        let pid = rustix::process::Pid::from_raw(self.child.id() as i32).unwrap();
        rustix::process::kill_process(pid, sig).unwrap();
    }
    /// The state letter of /proc/PID/stat (`T`: stopped, `?`: gone).
    pub fn state(&self) -> char {
        let s =
            std::fs::read_to_string(format!("/proc/{}/stat", self.child.id())).unwrap_or_default();
        s.rsplit_once(") ")
            .and_then(|(_, rest)| rest.chars().next())
            .unwrap_or('?')
    }
    /// Panics (with its stderr) if the child exited.
    pub fn check_running(&mut self, what: &str) {
        if let Some(s) = self.child.try_wait().unwrap() {
            panic!("{what} exited early ({s}): {}", self.stderr());
        }
    }
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        self.child.wait().unwrap();
    }
    /// Waits for a clean exit, at most [`PROC_LIVENESS`] (a hang otherwise).
    pub fn wait_ok(&mut self, what: &str) {
        let start = Instant::now();
        loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                assert!(s.success(), "{what} failed ({s}): {}", self.stderr());
                return;
            }
            if start.elapsed() > PROC_LIVENESS {
                self.kill();
                panic!("{what} did not finish within {PROC_LIVENESS:?}: blocked");
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }
    /// Waits for the child to kill itself with SIGKILL (at a crash point),
    /// at most [`PROC_LIVENESS`].
    pub fn wait_killed(&mut self, what: &str) {
        use std::os::unix::process::ExitStatusExt;
        let start = Instant::now();
        loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                assert_eq!(s.signal(), Some(9), "{what} ({s}): {}", self.stderr());
                return;
            }
            if start.elapsed() > PROC_LIVENESS {
                self.kill();
                panic!("{what} did not die within {PROC_LIVENESS:?}: blocked");
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Pages the commit model of the archive and restore tests writes over.
pub const MODEL_PAGES: u64 = 16;

/// Commit `c` of the model: writes `c` at the start of page `c %
/// MODEL_PAGES` and fills the next 2 KiB with its low byte (so log epochs
/// fill up).
pub fn model_commit(v: &mut txmap::View, c: u64) {
    v.begin().unwrap();
    let at = (c % MODEL_PAGES) * PAGE;
    v.write(at, &c).unwrap();
    v.slice_mut(at + 8, 2048).unwrap().fill(c as u8);
    v.commit().unwrap();
}

/// Checks `region` opens without recovery at commit `k` holding the
/// model's state: page `p` holds the newest `c <= k` with `c % MODEL_PAGES
/// == p` (0 if none), and its fill byte.
pub fn check_model_state(region: &Path, k: u64) {
    let r = Region::open(region, txmap::Options::default()).unwrap();
    assert_eq!(
        r.stats().recovered_commits,
        0,
        "{} opens without recovery",
        region.display()
    );
    assert_eq!(r.stats().commit_seq, k, "{}", region.display());
    let v = r.view().unwrap();
    for p in 0..MODEL_PAGES {
        let want = (1..=k).filter(|c| c % MODEL_PAGES == p).max().unwrap_or(0);
        assert_eq!(v.read::<u64>(p * PAGE).unwrap(), want, "page {p} at {k}");
        let fill = v.slice(p * PAGE + 8, 2048).unwrap();
        assert!(fill.iter().all(|&b| b == want as u8), "page {p} at {k}");
    }
}

/// The archived log segments in `archive`: (first commit, last commit,
/// path), in commit order.
pub fn archive_segments(archive: &Path) -> Vec<(u64, u64, PathBuf)> {
    let mut v: Vec<_> = std::fs::read_dir(archive)
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let (_, f, l) = txmap::archive::parse_segment_name(e.file_name().to_str()?)?;
            Some((f, l, e.path()))
        })
        .collect();
    v.sort();
    v
}

/// `txmap check` of the region at `p` warns that its page journal holds a
/// checkpoint or round the next writable opener must finish (`what` names
/// the case in the failure).
pub fn assert_journal_pending(p: &Path, what: &str) {
    let report = txmap::inspect::check(p).unwrap();
    assert!(
        report
            .warnings
            .iter()
            .any(|w| w.contains("the page journal holds")),
        "{what}: {:?}",
        report.warnings
    );
}

/// Starts `n` children of `test` in role "reader" that read region `path`
/// until the file `stop` exists, then write "OK ..." to their result file
/// (told by `TXMAP_PATH`, `TXMAP_STOP`, `TXMAP_RESULT`, plus `extra(k)`),
/// and waits until `r` shows `n` live snapshots.
pub fn spawn_readers(
    test: &str,
    d: &TestDir,
    (path, stop): (&Path, &Path),
    r: &Region,
    n: usize,
    extra: impl Fn(usize) -> Vec<(&'static str, String)>,
) -> Vec<(Proc, PathBuf)> {
    let mut readers: Vec<(Proc, PathBuf)> = (0..n)
        .map(|k| {
            let result = d.join(&format!("result-{k}"));
            let mut envs = vec![
                ("TXMAP_PATH", path.display().to_string()),
                ("TXMAP_STOP", stop.display().to_string()),
                ("TXMAP_RESULT", result.display().to_string()),
            ];
            envs.extend(extra(k));
            let proc = Proc::spawn(test, "reader", &envs, d.join(&format!("err-{k}")));
            (proc, result)
        })
        .collect();
    let start = Instant::now();
    while r.stats().live_snapshots < n {
        for (proc, _) in &mut readers {
            proc.check_running("a reader");
        }
        assert!(start.elapsed() < PROC_LIVENESS, "readers never began");
        std::thread::sleep(Duration::from_millis(1));
    }
    readers
}

/// Creates `stop` and checks that every reader of [`spawn_readers`]
/// exits cleanly and reports "OK".
pub fn stop_readers(stop: &Path, readers: &mut [(Proc, PathBuf)]) {
    std::fs::write(stop, "").unwrap();
    for (proc, result) in readers {
        proc.wait_ok("a reader process");
        let out = std::fs::read_to_string(result).unwrap();
        assert!(out.starts_with("OK "), "{out}");
    }
}

/// A new region of `bytes` named `r.txm` in a fresh ext4 directory `name`.
pub fn new_region(name: &str, bytes: u64, opts: txmap::Options) -> (TestDir, PathBuf, Region) {
    let d = ext4_dir(name);
    let p = d.join("r.txm");
    let r = Region::create(&p, bytes, opts).unwrap();
    (d, p, r)
}

/// The body of a [`spawn_readers`] child: opens the region with `opts`,
/// runs `check(view, stopped)` until the stop file exists and reports
/// "OK <what check returned>".
pub fn run_reader(
    opts: txmap::Options,
    check: impl FnOnce(&mut txmap::View, &dyn Fn() -> bool) -> u64,
) {
    let var = |k: &str| std::env::var(k).unwrap_or_else(|_| panic!("{k} not set"));
    let r = Region::open(Path::new(&var("TXMAP_PATH")), opts).unwrap();
    let mut v = r.view().unwrap();
    let stop = var("TXMAP_STOP");
    let n = check(&mut v, &|| Path::new(&stop).exists());
    std::fs::write(var("TXMAP_RESULT"), format!("OK {n}")).unwrap();
}
