//! Fault injection: every I/O call of the commit, checkpoint, grow, create
//! and recovery paths fails once, with EIO and with ENOSPC, chosen by its
//! index among the path's calls (all kinds: len, read, write, set_len,
//! allocate, sync; on either file). Each time: the error is typed and names
//! the operation and the file; a failed write or sync poisons the region
//! (invariant 10) while anything else leaves it committing; after a power
//! loss (unsynced writes dropped) and after a plain reopen, every
//! acknowledged commit is there, no partial one is, and the region commits
//! again.
use std::sync::Arc;

use txmap::io::sim::{Call, CrashMode, Faults, Fired, SimStorage, SplitMix};
use txmap::{Durability, Error, Options, Region, View};

const PAGE: u64 = 4096;
const SIZE: u64 = 8 * PAGE;
/// Linux errno values.
const EIO: i32 = 5;
const ENOSPC: i32 = 28;

struct Dev {
    data: Arc<SimStorage>,
    log: Arc<SimStorage>,
}

impl Dev {
    fn new(faults: &Arc<Faults>, data: Vec<u8>, log: Vec<u8>) -> Dev {
        Dev {
            data: Arc::new(SimStorage::with_faults("data", data, faults.clone()).unwrap()),
            log: Arc::new(SimStorage::with_faults("log", log, faults.clone()).unwrap()),
        }
    }

    fn formatted(faults: &Arc<Faults>) -> Dev {
        let d = Dev::new(faults, Vec::new(), Vec::new());
        Region::format(&*d.data, &*d.log, SIZE).unwrap();
        d
    }

    fn open(&self, o: Options) -> Result<Region, Error> {
        Region::open_with(Box::new(self.data.clone()), Box::new(self.log.clone()), o)
    }

    /// What the disks hold after a power loss now: unsynced writes dropped.
    fn crashed(&self, faults: &Arc<Faults>) -> Dev {
        Dev::new(
            faults,
            self.data.crash_image(CrashMode::DropAll),
            self.log.crash_image(CrashMode::DropAll),
        )
    }
}

fn opts(checkpoint_bytes: u64) -> Options {
    Options {
        durability: Durability::Durable,
        checkpoint_bytes,
        // Small: less shared state to build at each of the many opens.
        max_size: 1 << 20,
        ..Options::default()
    }
}

fn contents(r: &Region) -> Result<Vec<u8>, Error> {
    let mut v = r.view()?;
    v.begin_read()?;
    let bytes = v.slice(0, r.size() as usize)?.to_vec();
    v.commit()?;
    Ok(bytes)
}

/// Commit number `i`: three byte ranges below `size`, some across pages;
/// applied to `model` too (grown with zeros to `size`).
fn commit(r: &Region, i: u64, size: u64, model: &mut Vec<u8>) -> Result<(), Error> {
    let mut rng = SplitMix(i);
    let writes: Vec<(u64, Vec<u8>)> = (0..3)
        .map(|_| {
            let len = 1 + rng.next() % 600;
            let off = rng.next() % (size - len);
            (off, (0..len).map(|_| rng.next() as u8 | 1).collect())
        })
        .collect();
    model.resize(size as usize, 0);
    for (off, b) in &writes {
        model[*off as usize..*off as usize + b.len()].copy_from_slice(b);
    }
    r.view()?.run(|v| {
        for (off, b) in &writes {
            v.slice_mut(*off, b.len())?.copy_from_slice(b);
        }
        Ok(())
    })
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Path {
    /// Three durable commits; the first extends the log's preallocation
    /// (64 writes of zeros).
    Commit,
    /// Two durable commits past `checkpoint_bytes`, so each runs a
    /// checkpoint (whose failure it does not report: it is durable).
    CommitCheckpointing,
    /// A checkpoint of six commits, then a log reset.
    Checkpoint,
    /// The same with a reader whose snapshot is older: copy-on-checkpoint
    /// reads the pages it needs first.
    CheckpointUnderReader,
    /// Growing the region, then a commit to the new pages.
    Grow,
    /// Formatting new storages and opening them.
    Create,
    /// Opening after a power loss with 20 commits (one grew the region) in
    /// the log only: replay, header, new log epoch.
    Recovery,
}

/// A path's starting point.
struct Case {
    dev: Dev,
    region: Option<Region>,
    reader: Option<(View, Vec<u8>)>,
    /// The state every acknowledged commit so far makes.
    model: Vec<u8>,
}

fn setup(path: Path, faults: &Arc<Faults>) -> Case {
    let mut model = vec![0u8; SIZE as usize];
    let ckpt = if path == Path::CommitCheckpointing {
        1
    } else {
        u64::MAX
    };
    match path {
        Path::Create => Case {
            dev: Dev::new(faults, Vec::new(), Vec::new()),
            region: None,
            reader: None,
            model,
        },
        Path::Recovery => {
            let dev = Dev::formatted(faults);
            let r = dev.open(opts(u64::MAX)).unwrap();
            for i in 0..20 {
                if i == 10 {
                    r.grow(2 * SIZE).unwrap();
                }
                commit(&r, 100 + i, r.size(), &mut model).unwrap();
            }
            let dev = dev.crashed(faults);
            drop(r);
            Case {
                dev,
                region: None,
                reader: None,
                model,
            }
        }
        _ => {
            let dev = Dev::formatted(faults);
            let r = dev.open(opts(ckpt)).unwrap();
            let mut reader = None;
            if matches!(path, Path::Checkpoint | Path::CheckpointUnderReader) {
                for i in 0..6 {
                    if i == 3 && path == Path::CheckpointUnderReader {
                        let mut v = r.view().unwrap();
                        v.begin_read().unwrap();
                        reader = Some((v, model.clone()));
                    }
                    commit(&r, 200 + i, SIZE, &mut model).unwrap();
                }
            }
            Case {
                dev,
                region: Some(r),
                reader,
                model,
            }
        }
    }
}

/// What a path did: the states a crash may recover (the last acknowledged
/// one, and the one with the failing operation done), and its result.
struct Outcome {
    result: Result<(), Error>,
    before: Vec<u8>,
    after: Vec<u8>,
    /// `before` at the old size: a growth no commit recorded yet is lost
    /// at a crash or close (growth is not part of a transaction).
    ungrown: Option<Vec<u8>>,
}

fn act(path: Path, c: &mut Case) -> Outcome {
    let before = c.model.clone();
    let done = |result, before: Vec<u8>, after| Outcome {
        result,
        before,
        after,
        ungrown: None,
    };
    match path {
        Path::Commit | Path::CommitCheckpointing => {
            let r = c.region.as_ref().unwrap();
            let n = if path == Path::Commit { 3 } else { 2 };
            for i in 0..n {
                let before = c.model.clone();
                if let Err(e) = commit(r, 300 + i, SIZE, &mut c.model) {
                    return done(Err(e), before, c.model.clone());
                }
            }
            done(Ok(()), c.model.clone(), c.model.clone())
        }
        Path::Checkpoint | Path::CheckpointUnderReader => {
            let r = c.region.as_ref().unwrap().checkpoint();
            done(r, before.clone(), before)
        }
        Path::Grow => {
            let r = c.region.as_ref().unwrap();
            if let Err(e) = r.grow(2 * SIZE) {
                return done(Err(e), before.clone(), before);
            }
            let grown = {
                let mut g = before.clone();
                g.resize(2 * SIZE as usize, 0);
                g
            };
            let r = commit(r, 400, 2 * SIZE, &mut c.model);
            Outcome {
                ungrown: Some(before),
                ..done(r, grown, c.model.clone())
            }
        }
        Path::Create => {
            let after = c.model.clone();
            if let Err(e) = Region::format(&*c.dev.data, &*c.dev.log, SIZE) {
                // No region was made (an empty `before` says so), or an
                // empty one was.
                return done(Err(e), Vec::new(), after);
            }
            match c.dev.open(opts(u64::MAX)) {
                Ok(r) => {
                    c.region = Some(r);
                    done(Ok(()), after.clone(), after)
                }
                Err(e) => done(Err(e), after.clone(), after),
            }
        }
        Path::Recovery => match c.dev.open(opts(u64::MAX)) {
            Ok(r) => {
                c.region = Some(r);
                done(Ok(()), before.clone(), before)
            }
            Err(e) => done(Err(e), before.clone(), before),
        },
    }
}

/// Runs `path` with call `k` (of all its I/O calls, any kind) failing with
/// `errno`, and checks everything. Returns what failed.
fn inject(path: Path, k: u64, errno: i32) -> Fired {
    let case = format!("{path:?}, call {k}, errno {errno}");
    let faults = Faults::new();
    let mut c = setup(path, &faults);
    faults.reset_counts();
    faults.fail_nth(None, k, errno);
    let out = act(path, &mut c);
    let fired = faults
        .fired()
        .unwrap_or_else(|| panic!("{case}: the path made fewer calls than counted"));
    let case = format!("{case} ({:?} on {})", fired.call, fired.path.display());
    let errno_text = std::io::Error::from_raw_os_error(errno).to_string();

    // 1. A typed error naming the operation, the file and the cause.
    if let Err(e) = &out.result {
        assert!(
            matches!(e, Error::Io { .. } | Error::Poisoned(_)),
            "{case}: {e:?}"
        );
        let msg = e.to_string();
        assert!(
            msg.contains(&*fired.path.to_string_lossy()) && msg.contains(&errno_text),
            "{case}: the error does not name the file and the cause: {msg}"
        );
    }

    // 2. Poisoning: after a failed write or sync the region commits no more;
    // after any other failure it goes on committing.
    let maybe = |got: &Vec<u8>| *got == out.before || (out.result.is_err() && *got == out.after);
    let mut states = vec![out.before.clone()];
    if out.result.is_err() {
        states.push(out.after.clone());
    }
    states.extend(out.ungrown.clone());
    let mut shown = None;
    if let Some(r) = &c.region {
        let poisoned = r.stats().poisoned;
        if matches!(fired.call, Call::Write | Call::Sync) {
            assert!(
                poisoned.is_some(),
                "{case}: a failed {:?} left the region committing",
                fired.call
            );
        }
        let live = contents(r).unwrap_or_else(|e| panic!("{case}: reading: {e}"));
        assert!(maybe(&live), "{case}: views show a state never committed");
        let mut next = live.clone();
        let again = commit(r, 500, r.size(), &mut next);
        match &poisoned {
            Some(why) => {
                assert!(
                    matches!(again, Err(Error::Poisoned(_))),
                    "{case}: a poisoned region ({why}) answered a commit with {again:?}"
                );
                assert!(
                    why.contains(&errno_text),
                    "{case}: stats do not say why: {why}"
                );
                shown = Some(live);
            }
            None => {
                again.unwrap_or_else(|e| panic!("{case}: commit after the failure: {e}"));
                // Acknowledged: nothing else may come back now.
                states = vec![next.clone()];
                shown = Some(next);
            }
        }
        if let Some((v, snap)) = &c.reader {
            assert!(
                v.slice(0, SIZE as usize).unwrap() == &snap[..],
                "{case}: the old reader's snapshot changed"
            );
        }
    }

    // 3. Power loss now: every acknowledged commit, nothing partial.
    let crashed = c.dev.crashed(&Faults::new());
    check_reopen(&crashed, &case, "after a power loss", &out, &states);

    // 4. The program closes and reopens on the same disks: it finds what
    // its views showed.
    drop(c.reader.take());
    drop(c.region.take());
    faults.disarm();
    let got = check_reopen(&c.dev, &case, "reopened", &out, &states);
    if let (Some(shown), Some(got)) = (shown, got) {
        assert!(
            got == shown || out.ungrown.as_ref() == Some(&got),
            "{case}: reopened state differs from what views showed"
        );
    }
    fired
}

/// Opens `dev` with working storage; checks its state is allowed and that
/// it commits again. A create that failed before its region was whole may
/// leave storages that do not open (with a typed error).
fn check_reopen(
    dev: &Dev,
    case: &str,
    when: &str,
    out: &Outcome,
    states: &[Vec<u8>],
) -> Option<Vec<u8>> {
    let r = match dev.open(opts(u64::MAX)) {
        Ok(r) => r,
        Err(e) if out.before.is_empty() => {
            // A create that failed: what it left is refused, not misread.
            assert!(
                matches!(e, Error::Io { .. } | Error::Corrupt { .. }),
                "{case}: {when}: {e:?}"
            );
            return None;
        }
        Err(e) => panic!("{case}: {when}: the region does not open: {e}"),
    };
    let got = contents(&r).unwrap_or_else(|e| panic!("{case}: {when}: reading: {e}"));
    assert!(
        states.contains(&got) || (out.before.is_empty() && got == out.after),
        "{case}: {when}: the state is not the last acknowledged one \
         (or that with the failed operation done whole)"
    );
    let mut m = got.clone();
    commit(&r, 600, r.size(), &mut m)
        .unwrap_or_else(|e| panic!("{case}: {when}: cannot commit again: {e}"));
    assert_eq!(
        contents(&r).unwrap(),
        m,
        "{case}: {when}: commit after reopen"
    );
    Some(got)
}

/// Counts the calls a path makes without failures.
fn count(path: Path) -> (u64, Vec<(Call, u64)>) {
    let faults = Faults::new();
    let mut c = setup(path, &faults);
    faults.reset_counts();
    let out = act(path, &mut c);
    out.result.unwrap();
    let kinds = Call::ALL
        .iter()
        .map(|&k| (k, faults.count(k)))
        .filter(|&(_, n)| n > 0)
        .collect();
    (faults.total(), kinds)
}

/// Fails each call of `path` in turn, with EIO and with ENOSPC, and prints
/// how many injections it made.
fn every_call_fails_once(path: Path) {
    let (n, kinds) = count(path);
    assert!(n > 0, "{path:?} made no I/O calls");
    let mut kinds_failed = std::collections::BTreeSet::new();
    for k in 0..n {
        for errno in [EIO, ENOSPC] {
            let f = inject(path, k, errno);
            kinds_failed.insert(format!("{:?}", f.call));
        }
    }
    println!(
        "{path:?}: {n} calls {kinds:?}, {} injections, failed kinds {kinds_failed:?}",
        2 * n
    );
}

// One test per path, so the harness runs them side by side.
#[test]
fn each_io_call_of_durable_commits_fails_once() {
    every_call_fails_once(Path::Commit);
}

#[test]
fn each_io_call_of_a_commit_that_checkpoints_fails_once() {
    every_call_fails_once(Path::CommitCheckpointing);
}

#[test]
fn each_io_call_of_a_checkpoint_fails_once() {
    every_call_fails_once(Path::Checkpoint);
}

#[test]
fn each_io_call_of_a_checkpoint_under_an_old_reader_fails_once() {
    every_call_fails_once(Path::CheckpointUnderReader);
}

#[test]
fn each_io_call_of_grow_and_a_commit_to_grown_pages_fails_once() {
    every_call_fails_once(Path::Grow);
}

#[test]
fn each_io_call_of_create_fails_once() {
    every_call_fails_once(Path::Create);
}

#[test]
fn each_io_call_of_recovery_fails_once() {
    every_call_fails_once(Path::Recovery);
}

#[test]
fn faults_fail_the_chosen_call_of_a_kind_once() {
    let faults = Faults::new();
    let s = SimStorage::with_faults("dev", vec![0; 8], faults.clone()).unwrap();
    use txmap::io::Storage;
    faults.fail_nth(Some(Call::Read), 1, ENOSPC);
    let mut b = [0u8; 4];
    s.write_at(&[1], 0).unwrap();
    s.read_at(&mut b, 0).unwrap();
    let e = s.read_at(&mut b, 0).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(ENOSPC));
    s.read_at(&mut b, 0).unwrap();
    assert_eq!(faults.count(Call::Read), 3);
    assert_eq!(faults.count(Call::Write), 1);
    // A failed sync loses the unsynced writes for good, as on Linux.
    faults.fail_nth(Some(Call::Sync), 0, EIO);
    s.write_at(&[2], 1).unwrap();
    assert!(s.sync().is_err());
    s.sync().unwrap();
    assert_eq!(s.crash_image(CrashMode::DropAll), vec![0; 8]);
}
