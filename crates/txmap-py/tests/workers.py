"""Functions run in other processes by the tests (importable for spawn),
and a command-line entry for the SIGKILL test's writer."""

from __future__ import annotations

import struct
import sys

import txmap


def incr(view: txmap.View, off: int) -> None:
    (n,) = struct.unpack("<Q", view.read(off, 8))
    view.write(off, struct.pack("<Q", n + 1))


def counter_worker(region: txmap.Region, off: int, times: int, by_add: bool = False) -> int:
    """Adds 1 to the u64 at ``off`` ``times`` times, one retried
    transaction each (by a read and a write, or by ``View.add_u64`` if
    ``by_add``); returns how many attempts conflicted."""
    view = region.view()
    calls = 0

    def step(v: txmap.View) -> None:
        nonlocal calls
        calls += 1
        if by_add:
            v.add_u64(off, 1)
        else:
            incr(v, off)

    for _ in range(times):
        view.run(step)
    view.close()
    return calls - times


def counter_worker_by_path(path: str, off: int, times: int, by_add: bool = False) -> int:
    """``counter_worker`` on a region the worker opens itself."""
    region = txmap.Region.open(path)
    try:
        return counter_worker(region, off, times, by_add)
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


def nta_holder(path: str) -> None:
    """A parent transaction that sets a flag (u64 at 8) and adds 5 to the
    u64 at 0 in a nested top action (undo: subtract 5), prints ``held`` and
    waits, never committing (the test SIGKILLs it)."""
    import time

    region = txmap.Region.open(path)
    view = region.view()
    view.begin()
    view.write(8, struct.pack("<Q", 1))
    view.nested_top(
        lambda v: v.write(0, struct.pack("<Q", struct.unpack("<Q", v.read(0, 8))[0] + 5)),
        txmap.ADD_U64,
        struct.pack("<QQ", 0, (1 << 64) - 5),
    )
    print("held", flush=True)
    while True:
        time.sleep(1)


if __name__ == "__main__":
    {"map_writer": map_writer, "stale_store": stale_store, "nta_holder": nta_holder}[sys.argv[1]](
        *sys.argv[2:]
    )
