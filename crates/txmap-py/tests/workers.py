"""Functions run in other processes by the tests (importable for spawn),
and a command-line entry for the SIGKILL test's writer."""

from __future__ import annotations

import struct
import sys

import txmap


def incr(view: txmap.View, off: int) -> None:
    (n,) = struct.unpack("<Q", view.read(off, 8))
    view.write(off, struct.pack("<Q", n + 1))


def counter_worker(region: txmap.Region, off: int, times: int) -> int:
    """Adds 1 to the u64 at ``off`` ``times`` times, one retried
    transaction each; returns how many attempts conflicted."""
    view = region.view()
    calls = 0

    def step(v: txmap.View) -> None:
        nonlocal calls
        calls += 1
        incr(v, off)

    for _ in range(times):
        view.run(step)
    view.close()
    return calls - times


def counter_worker_by_path(path: str, off: int, times: int) -> int:
    """``counter_worker`` on a region the worker opens itself."""
    region = txmap.Region.open(path)
    try:
        return counter_worker(region, off, times)
    finally:
        region.close()


def numpy_worker(path: str, off: int, n: int, worker: int, rounds: int) -> None:
    """Adds ``worker + 1`` to every element of an n-element int64 array at
    ``off`` (zero copy) and to the element ``n`` (a total), once per round."""
    import numpy as np

    region = txmap.Region.open(path)
    view = region.view()
    for _ in range(rounds):
        def step(v: txmap.View) -> None:
            a = np.frombuffer(v.buffer(), dtype=np.int64, count=n + 1, offset=off)
            a[:n] += worker + 1
            a[n] += 1
            del a
        view.run(step)
    view.close()
    region.close()


def map_writer(path: str, prefix: str, durability: str = "durable") -> None:
    """Writes keys PREFIX-i = i forever, one transaction each, and prints i
    after each commit returned (its acknowledgement)."""
    region = txmap.Region.open(path, durability=durability)
    view = region.view()
    m = view.map("acks")
    i = 0
    while True:
        key, value = f"{prefix}-{i:08d}".encode(), str(i).encode() * 8

        def put(v: txmap.View) -> None:
            m[key] = value

        view.run(put)
        sys.stdout.write(f"{i}\n")
        sys.stdout.flush()
        i += 1


def stale_store(path: str) -> None:
    """Stores through a numpy array after its transaction ended (the test
    expects the process to be stopped with a message, the store not applied)."""
    import numpy as np

    region = txmap.Region.open(path)
    view = region.view()
    with view.transaction():
        off = view.root(64)
        a = np.frombuffer(view.buffer(), dtype=np.int64, count=8, offset=off)
        a[0] = 7
    print("committed", flush=True)
    a[0] = 99  # outside a transaction
    print("store applied", flush=True)


if __name__ == "__main__":
    {"map_writer": map_writer, "stale_store": stale_store}[sys.argv[1]](*sys.argv[2:])
