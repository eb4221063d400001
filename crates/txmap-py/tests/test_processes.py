"""Several processes on one region: multiprocessing (fork and spawn),
forked children and their parent's handles, SIGKILL during durable commits."""

from __future__ import annotations

import multiprocessing
import os
import random
import signal
import struct
import subprocess
import sys
import time

import numpy as np
import pytest

import txmap
import workers

HERE = os.path.dirname(__file__)


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_processes_increment_one_counter_exactly(path, method):
    procs, times = 3, 60
    with txmap.Region.create(path, 1 << 20) as region:
        ctx = multiprocessing.get_context(method)
        with ctx.Pool(procs) as pool:
            if method == "fork":
                # A forked child opens the region itself (by path).
                args = [(path, 0, times)] * procs
                conflicts = pool.starmap(workers.counter_worker_by_path, args)
            else:
                # Region objects pickle as their path: the worker opens its own.
                conflicts = pool.starmap(workers.counter_worker, [(region, 0, times)] * procs)
        assert all(c >= 0 for c in conflicts)
        v = region.view()
        with v.transaction(read_only=True):
            assert struct.unpack("<Q", v.read(0, 8))[0] == procs * times
        v.close()


def _use_parents_view(view, q):
    try:
        view.begin()
        q.put("no error")
    except txmap.TransactionError as e:
        q.put(str(e))


def test_forked_child_cannot_use_parents_handles(region, view):
    ctx = multiprocessing.get_context("fork")
    q = ctx.Queue()
    p = ctx.Process(target=_use_parents_view, args=(view, q))
    p.start()
    msg = q.get(timeout=60)
    p.join(60)
    assert "must open it itself" in msg and region.path in msg


def test_numpy_workers_update_shared_state(path):
    n, procs, rounds = 4096, 3, 20
    with txmap.Region.create(path, 1 << 20) as region:
        v = region.view()
        with v.transaction():
            off = v.root(8 * (n + 1))
        ctx = multiprocessing.get_context("spawn")
        ps = [ctx.Process(target=workers.numpy_worker, args=(path, off, n, w, rounds)) for w in range(procs)]
        for p in ps:
            p.start()
        for p in ps:
            p.join(120)
            assert p.exitcode == 0
        with v.transaction(read_only=True):
            a = np.frombuffer(v.buffer(), dtype=np.int64, count=n + 1, offset=off)
            per_elem = rounds * sum(w + 1 for w in range(procs))
            assert (a[:n] == per_elem).all() and a[n] == procs * rounds
            del a
        v.close()


def _acks(stdout_lines):
    return [int(x) for x in stdout_lines if x.strip()]


@pytest.mark.parametrize("durability", ["durable", "async"])
def test_sigkill_during_durable_commits_loses_nothing_acknowledged(path, durability):
    """(Async commits survive a process crash too: they are written to the OS.)"""
    seed = int(os.environ.get("TXMAP_SEED", random.randrange(1 << 30)))
    print(f"TXMAP_SEED={seed}")
    rng = random.Random(seed)
    txmap.Region.create(path, 4 << 20, durability=durability).close()
    for round_ in range(3):
        prefixes = [f"r{round_}w{w}" for w in range(2)]
        ps = [
            subprocess.Popen(
                [sys.executable, os.path.join(HERE, "workers.py"), "map_writer", path, pfx, durability],
                stdout=subprocess.PIPE,
                text=True,
            )
            for pfx in prefixes
        ]
        # Let each acknowledge some commits, then kill it at a random moment.
        last_ack = {}
        for pfx, p in zip(prefixes, ps):
            last_ack[pfx] = -1
            for _ in range(rng.randrange(5, 60)):
                line = p.stdout.readline()
                if not line:
                    break
                last_ack[pfx] = int(line)
        time.sleep(rng.random() * 0.05)
        for p in ps:
            p.send_signal(signal.SIGKILL)
        for pfx, p in zip(prefixes, ps):
            p.wait()
            assert p.returncode == -signal.SIGKILL
            # Whatever it printed before it died was acknowledged too.
            last_ack[pfx] = max([last_ack[pfx], *_acks(p.stdout.read().splitlines())])
            p.stdout.close()
        with txmap.Region.open(path, durability=durability) as r:
            v = r.view()
            with v.transaction(read_only=True):
                m = v.map("acks", create=False)
                for pfx in prefixes:
                    keys = [k for k in m.range(pfx.encode() + b"-", pfx.encode() + b".")]
                    present = [int(k.split(b"-")[1]) for k, _ in keys]
                    # Present keys are a prefix 0..n-1 of the sequence, values intact.
                    assert present == list(range(len(present))), (seed, pfx)
                    for k, val in keys:
                        i = int(k.split(b"-")[1])
                        assert val == str(i).encode() * 8
                    # Every acknowledged commit is there (and at most one more).
                    assert last_ack[pfx] <= len(present) - 1 <= last_ack[pfx] + 1, (
                        seed,
                        pfx,
                        last_ack[pfx],
                        len(present),
                    )
            v.close()


def _open_or_create_and_put(path, w, barrier):
    barrier.wait()
    r = txmap.Region.open(path, 1 << 20, create=True)
    v = r.view()
    v.run(lambda v: v.map("who").__setitem__(b"w%d" % w, b"here"))
    v.close()
    r.close()


def test_processes_racing_to_create_one_region_all_get_it(path):
    ctx = multiprocessing.get_context("spawn")
    n = 4
    barrier = ctx.Barrier(n)
    ps = [ctx.Process(target=_open_or_create_and_put, args=(path, w, barrier)) for w in range(n)]
    for p in ps:
        p.start()
    for p in ps:
        p.join(120)
        assert p.exitcode == 0
    with txmap.Region.open(path) as r:
        v = r.view()
        with v.transaction(read_only=True):
            assert sorted(v.map("who", create=False)) == [b"w%d" % w for w in range(n)]
        v.close()
