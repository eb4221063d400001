"""txmap from Python beside py-lmdb and sqlite3, in one Python process:
durable one-key commits per second, and random reads per second.

    target/pyenv/bin/python crates/txmap-py/bench/bench.py [--quick] [--dir DIR] [--json]

Each store holds KEYS 16-byte keys with 100-byte values. Commits: one
put of a random key per transaction, each durable on return (txmap
durability="durable", a B+-tree map; LMDB sync=True; SQLite WAL with
synchronous=FULL). Reads: random gets of present keys, 1000 per read
transaction. Every figure is the best of ROUNDS runs; in each round the
stores run in turn.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import sqlite3
import sys
import tempfile
import time

import txmap

try:
    import lmdb
except ImportError:  # reported as skipped
    lmdb = None

VALUE = b"v" * 100


def keys(n: int, seed: int) -> list[bytes]:
    rng = random.Random(seed)
    return [rng.randbytes(16) for _ in range(n)]


def timed(fn, budget: float) -> float:
    """Operations per second of fn(), which returns how many it did, over ~budget s."""
    done, start = 0, time.perf_counter()
    while True:
        done += fn()
        el = time.perf_counter() - start
        if el >= budget:
            return done / el


class Txmap:
    name = "txmap"

    def __init__(self, d: str, n: int):
        self.region = txmap.Region.create(os.path.join(d, "t.txm"), 64 << 20)
        self.view = self.region.view()
        self.m = self.view.map("kv")

    def load(self, ks):
        for i in range(0, len(ks), 1000):
            with self.view.transaction():
                for k in ks[i : i + 1000]:
                    self.m[k] = VALUE

    def commit_one(self, k):
        with self.view.transaction():
            self.m[k] = VALUE

    def read_batch(self, ks):
        m = self.m
        with self.view.transaction(read_only=True):
            for k in ks:
                m[k]

    def close(self):
        self.view.close()
        self.region.close()


class Lmdb:
    name = "py-lmdb"

    def __init__(self, d: str, n: int):
        self.env = lmdb.open(os.path.join(d, "l"), map_size=1 << 30, sync=True, metasync=True)

    def load(self, ks):
        for i in range(0, len(ks), 1000):
            with self.env.begin(write=True) as t:
                for k in ks[i : i + 1000]:
                    t.put(k, VALUE)

    def commit_one(self, k):
        with self.env.begin(write=True) as t:
            t.put(k, VALUE)

    def read_batch(self, ks):
        with self.env.begin() as t:
            for k in ks:
                t.get(k)

    def close(self):
        self.env.close()


class Sqlite:
    name = "sqlite3"

    def __init__(self, d: str, n: int):
        self.db = sqlite3.connect(os.path.join(d, "s.db"), isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=FULL")
        self.db.execute("CREATE TABLE kv (k BLOB PRIMARY KEY, v BLOB) WITHOUT ROWID")

    def load(self, ks):
        for i in range(0, len(ks), 1000):
            self.db.execute("BEGIN")
            self.db.executemany("INSERT OR REPLACE INTO kv VALUES (?, ?)", [(k, VALUE) for k in ks[i : i + 1000]])
            self.db.execute("COMMIT")

    def commit_one(self, k):
        self.db.execute("BEGIN")
        self.db.execute("INSERT OR REPLACE INTO kv VALUES (?, ?)", (k, VALUE))
        self.db.execute("COMMIT")

    def read_batch(self, ks):
        q = self.db.execute
        self.db.execute("BEGIN")
        for k in ks:
            q("SELECT v FROM kv WHERE k = ?", (k,)).fetchone()
        self.db.execute("COMMIT")

    def close(self):
        self.db.close()


def run_all(classes, d: str, n: int, budget: float, rounds: int) -> dict:
    """Loads every store, then measures in rounds, the stores in turn within
    each round (so that changing background load hits them alike)."""
    ks = keys(n, 1)
    stores = []
    for cls in classes:
        store = cls(tempfile.mkdtemp(dir=d), n)
        store.load(ks)
        stores.append(store)
    rng = random.Random(2)
    new_rng = random.Random(3)
    fresh = iter(lambda: new_rng.randbytes(16), None)
    got = {s.name: {"commits_per_s": [], "reads_per_s": []} for s in stores}
    for _ in range(rounds):
        for store in stores:

            def commits():
                for _ in range(20):
                    store.commit_one(next(fresh))
                return 20

            def reads():
                store.read_batch([ks[rng.randrange(n)] for _ in range(1000)])
                return 1000

            got[store.name]["commits_per_s"].append(timed(commits, budget))
            got[store.name]["reads_per_s"].append(timed(reads, budget))
    for store in stores:
        store.close()
    return {name: {k: max(v) for k, v in r.items()} for name, r in got.items()}


def machine() -> str:
    cpu = "?"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return f"{cpu}, {os.cpu_count()} CPUs, Linux {platform.release()}, Python {platform.python_version()}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="short runs (about 15 s in all)")
    ap.add_argument("--dir", default=None, help="where the stores go (default: a temporary directory)")
    ap.add_argument("--keys", type=int, default=None)
    ap.add_argument("--json", action="store_true", help="print JSON instead of a table")
    a = ap.parse_args()
    n = a.keys or (20_000 if a.quick else 100_000)
    budget, rounds = (0.7, 1) if a.quick else (2.0, 5)
    base = a.dir or tempfile.mkdtemp(prefix="txmap-pybench-")
    os.makedirs(base, exist_ok=True)
    results, skipped = {}, []
    classes = [Txmap, Sqlite]
    if lmdb is None:
        skipped.append("py-lmdb (pip install lmdb)")
    else:
        classes.insert(1, Lmdb)
    results = run_all(classes, base, n, budget, rounds)
    if a.dir is None:
        shutil.rmtree(base, ignore_errors=True)
    if a.json:
        print(json.dumps({"machine": machine(), "keys": n, "results": results, "skipped": skipped}))
        return
    print(f"machine: {machine()}")
    print(f"{n} keys of 16 bytes, 100-byte values; best of {rounds} x {budget:.1f} s")
    print(f"{'store':<10} {'durable commits/s':>18} {'random reads/s':>15}")
    for name, r in results.items():
        print(f"{name:<10} {r['commits_per_s']:>18,.0f} {r['reads_per_s']:>15,.0f}")
    if "py-lmdb" in results:
        t, l = results["txmap"], results["py-lmdb"]
        print(
            f"txmap / py-lmdb: commits {t['commits_per_s'] / l['commits_per_s']:.2f}x, "
            f"reads {t['reads_per_s'] / l['reads_per_s']:.2f}x"
        )
    for s in skipped:
        print(f"skipped: {s}")


if __name__ == "__main__":
    sys.exit(main())
