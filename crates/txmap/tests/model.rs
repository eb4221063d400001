//! Model-based test of transactions: random interleavings of begin, load,
//! store, commit, abort and checkpoint on several views, checked step by step
//! against a reference model of snapshots and of the validation rules
//! (serializable: pages read or changed must be unchanged since the snapshot;
//! snapshot isolation: pages changed; read-only: never aborts).
use std::collections::BTreeSet;
use std::sync::Arc;

use proptest::prelude::*;
use txmap::io::sim::{CrashMode, SimStorage};
use txmap::{Error, Isolation, Options, Region, TxnOptions, View};

const PAGES: usize = 4;
const WORDS_PER_PAGE: usize = 512;
const WORDS: usize = PAGES * WORDS_PER_PAGE;
const VIEWS: usize = 3;

#[derive(Clone, Debug)]
enum Op {
    Begin(usize, u8),
    Load(usize, usize),
    Store(usize, usize, u64),
    Commit(usize),
    Abort(usize),
    Checkpoint,
}

fn op() -> impl Strategy<Value = Op> {
    // Few distinct words and values, so transactions collide and some stores change nothing.
    let word = prop_oneof![
        0..4usize,
        (0..PAGES).prop_map(|p| p * WORDS_PER_PAGE + 1),
        0..WORDS
    ];
    prop_oneof![
        3 => (0..VIEWS, 0..3u8).prop_map(|(v, k)| Op::Begin(v, k)),
        5 => (0..VIEWS, word.clone()).prop_map(|(v, w)| Op::Load(v, w)),
        5 => (0..VIEWS, word, 0..3u64).prop_map(|(v, w, x)| Op::Store(v, w, x)),
        3 => (0..VIEWS).prop_map(Op::Commit),
        1 => (0..VIEWS).prop_map(Op::Abort),
        1 => Just(Op::Checkpoint),
    ]
}

struct Txn {
    opts: TxnOptions,
    snapshot: usize,
    local: Vec<u64>,
    touched: BTreeSet<usize>,
    /// The first reason the transaction was doomed (it is the one reported).
    doomed: Option<&'static str>,
}

struct Model {
    history: Vec<Vec<u64>>,
    last_writer: [usize; PAGES],
    txns: Vec<Option<Txn>>,
}

impl Model {
    fn commit(&mut self, v: usize) -> Result<(), &'static str> {
        let t = self.txns[v].take().expect("in a transaction");
        if let Some(why) = t.doomed {
            return Err(why);
        }
        let base = &self.history[t.snapshot];
        let page = |w: usize| w / WORDS_PER_PAGE;
        let changed: BTreeSet<usize> = (0..WORDS)
            .filter(|&w| t.local[w] != base[w])
            .map(page)
            .collect();
        if changed.is_empty() {
            return Ok(());
        }
        let mut check = changed.clone();
        if t.opts.isolation == Isolation::Serializable {
            check.extend(&t.touched);
        }
        if check.iter().any(|&p| self.last_writer[p] > t.snapshot) {
            return Err("conflict");
        }
        let mut next = self.history.last().unwrap().clone();
        for w in (0..WORDS).filter(|w| changed.contains(&page(*w))) {
            next[w] = t.local[w];
        }
        self.history.push(next);
        let seq = self.history.len() - 1;
        for p in changed {
            self.last_writer[p] = seq;
        }
        Ok(())
    }
}

fn run(ops: Vec<Op>) -> Result<(), TestCaseError> {
    let (data, log) = (
        Arc::new(SimStorage::new("data").unwrap()),
        Arc::new(SimStorage::new("log").unwrap()),
    );
    Region::format(&*data, &*log, (PAGES * 4096) as u64).unwrap();
    let opts = Options {
        checkpoint_bytes: 16 << 10, // checkpoints and log resets happen within a case
        ..Options::default()
    };
    let r = Region::open_with(Box::new(data.clone()), Box::new(log.clone()), opts).unwrap();
    let mut views: Vec<View> = (0..VIEWS).map(|_| r.view().unwrap()).collect();
    let mut m = Model {
        history: vec![vec![0; WORDS]],
        last_writer: [0; PAGES],
        txns: (0..VIEWS).map(|_| None).collect(),
    };
    for (step, op) in ops.into_iter().enumerate() {
        match op {
            Op::Begin(v, kind) if m.txns[v].is_none() => {
                let opts = [
                    TxnOptions::READ_ONLY,
                    TxnOptions::default(),
                    TxnOptions::SNAPSHOT,
                ][kind as usize];
                views[v].begin_with(opts).unwrap();
                let snapshot = m.history.len() - 1;
                m.txns[v] = Some(Txn {
                    opts,
                    snapshot,
                    local: m.history[snapshot].clone(),
                    touched: BTreeSet::new(),
                    doomed: None,
                });
            }
            Op::Load(v, w) => {
                if let Some(t) = m.txns[v].as_mut() {
                    t.touched.insert(w / WORDS_PER_PAGE);
                    let got = views[v].read::<u64>(w as u64 * 8).unwrap();
                    prop_assert_eq!(got, t.local[w], "step {}: view {} word {}", step, v, w);
                }
            }
            Op::Store(v, w, x) => {
                if let Some(t) = m.txns[v].as_mut() {
                    t.touched.insert(w / WORDS_PER_PAGE);
                    if t.opts.read_only {
                        t.doomed.get_or_insert("invalid");
                    }
                    t.local[w] = x;
                    views[v].write(w as u64 * 8, &x).unwrap();
                }
            }
            Op::Commit(v) if m.txns[v].is_some() => {
                let got = match views[v].commit() {
                    Ok(()) => Ok(()),
                    Err(Error::Conflict) => Err("conflict"),
                    Err(Error::Aborted) => Err("aborted"),
                    Err(Error::StoreInReadOnlyTransaction) => Err("invalid"),
                    Err(e) => panic!("step {step}: {e}"),
                };
                let want = m.commit(v);
                prop_assert_eq!(got, want, "step {}: commit of view {}", step, v);
            }
            Op::Abort(v) => {
                if let Some(t) = m.txns[v].as_mut() {
                    views[v].abort().unwrap();
                    t.doomed.get_or_insert("aborted");
                    t.local = m.history[t.snapshot].clone();
                }
            }
            Op::Checkpoint => r.checkpoint().unwrap(),
            _ => {}
        }
    }
    for (v, view) in views.iter_mut().enumerate() {
        if m.txns[v].is_some() {
            view.rollback();
        }
    }
    let last = m.history.last().unwrap();
    let v = &mut views[0];
    v.begin_read().unwrap();
    for (w, want) in last.iter().enumerate() {
        prop_assert_eq!(
            v.read::<u64>(w as u64 * 8).unwrap(),
            *want,
            "final word {}",
            w
        );
    }
    v.commit().unwrap();
    // Power fails now: what was synced must recover to the same state.
    let d = SimStorage::from_bytes("data", data.crash_image(CrashMode::DropAll)).unwrap();
    let l = SimStorage::from_bytes("log", log.crash_image(CrashMode::DropAll)).unwrap();
    let r2 = Region::open_with(Box::new(d), Box::new(l), Options::default()).unwrap();
    let mut v = r2.view().unwrap();
    v.begin_read().unwrap();
    for (w, want) in last.iter().enumerate() {
        prop_assert_eq!(
            v.read::<u64>(w as u64 * 8).unwrap(),
            *want,
            "word {} after recovery",
            w
        );
    }
    v.commit().unwrap();
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]
    #[test]
    fn transactions_match_the_model(ops in proptest::collection::vec(op(), 1..150)) {
        run(ops)?;
    }
}
