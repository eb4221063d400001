"""A small key-value service's state in a region: sessions and counters
shared by worker processes, each request one transaction.

    python examples/python/kv_service.py [REGION] [--workers N] [--requests R]

Each worker handles "requests": log a user in (a session in the
``sessions`` B+-tree), count a page hit (``hits``, a linear hash), and
record the request in the ``log`` array list, all in one transaction, so
the three always agree. ``transactional`` retries conflicts. At the end
the parent checks that the counters add up to the log's length.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import random
import struct
import tempfile

import txmap

PAGES = [b"/", b"/docs", b"/pricing", b"/blog", b"/login"]


@txmap.transactional
def handle(view: txmap.View, worker: int, user: bytes, page: bytes) -> int:
    sessions = view.map("sessions", "btree")
    hits = view.map("hits", "lhash")
    log = view.array("log", 16)
    sessions[user] = b"worker-%d" % worker
    hits[page] = struct.pack("<Q", struct.unpack("<Q", hits.get(page, bytes(8)))[0] + 1)
    return log.append(struct.pack("<QQ", worker, PAGES.index(page)))


def worker(path: str, w: int, requests: int) -> None:
    region = txmap.Region.open(path)
    view = region.view()
    rng = random.Random(w)
    for _ in range(requests):
        handle(view, w, b"user-%03d" % rng.randrange(50), rng.choice(PAGES))
    view.close()
    region.close()


@txmap.transactional(read_only=True)
def report(view: txmap.View) -> tuple[int, int, int]:
    hits = view.map("hits", create=False)
    total = sum(struct.unpack("<Q", v)[0] for v in hits.values())
    return total, len(view.array("log")), len(view.map("sessions", create=False))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("region", nargs="?", default=os.path.join(tempfile.gettempdir(), "kv-service.txm"))
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--requests", type=int, default=250)
    a = ap.parse_args()
    region = txmap.Region.open(a.region, 4 << 20, create=True)
    view = region.view()
    with view.transaction():  # create the structures once, before the workers race
        view.map("sessions", "btree"), view.map("hits", "lhash"), view.array("log", 16)
    ctx = multiprocessing.get_context("fork")  # children open the region themselves
    ps = [ctx.Process(target=worker, args=(a.region, w, a.requests)) for w in range(a.workers)]
    for p in ps:
        p.start()
    for p in ps:
        p.join()
    total, logged, users = report(view)
    print(f"{logged} requests logged, {total} page hits counted, {users} users with a session")
    assert total == logged, "hits and log are updated in one transaction"
    view.close()
    region.close()


if __name__ == "__main__":
    main()
