"""A ticket shop's stock in a region, sold by worker processes: issue 18's
commutative counters and nested top actions from Python.

    python examples/python/ticket_shop.py [REGION] [--workers N] [--orders R]

Each order is one transaction. It first takes a ticket from the shared
stock as a *nested top action*: that commits at once (other workers see the
smaller stock at once, and the stock's page does not stay in the order's
read and write sets until it commits), and names its undo, the built-in
``txmap.ADD_U64`` putting the ticket back. Then the payment runs; one in
five is declined (the order raises, so its transaction aborts and the undo
returns the ticket). A paid order counts the sale with ``add_u64``, which
never conflicts, and records the order in a map. At the end the parent
checks that tickets left plus tickets sold is the stock it started with,
and that every sale has its order.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import random
import struct
import tempfile

import txmap

STOCK = 100_000
# The shop's words, at the region's root object: tickets left, tickets sold.
LEFT, SOLD = 0, 8


class Declined(Exception):
    pass


def word(view: txmap.View, off: int) -> int:
    return struct.unpack("<Q", view.read(off, 8))[0]


def take_ticket(view: txmap.View, root: int) -> None:
    """The nested action: one ticket less in stock, committed at once."""
    left = word(view, root + LEFT)
    if left == 0:
        raise RuntimeError("sold out")
    view.write(root + LEFT, struct.pack("<Q", left - 1))


def order(view: txmap.View, root: int, worker: bytes, n: int, paid: bool) -> None:
    # Its undo: add 1 back (ADD_U64's arguments: the word's offset, the operand).
    undo = struct.pack("<QQ", root + LEFT, 1)
    view.nested_top(lambda v: take_ticket(v, root), txmap.ADD_U64, undo)
    if not paid:
        raise Declined()
    view.add_u64(root + SOLD, 1)
    view.map("orders")[b"%s-%06d" % (worker, n)] = b"paid"


def worker(path: str, root: int, w: int, orders: int, seed: int) -> None:
    region = txmap.Region.open(path)
    view = region.view()
    rng = random.Random(seed)
    for n in range(orders):
        paid = rng.random() >= 0.2
        try:
            view.run(lambda v: order(v, root, b"%d-%02d" % (seed, w), n, paid))
        except Declined:
            pass
    view.close()
    region.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("region", nargs="?", default=os.path.join(tempfile.gettempdir(), "ticket-shop.txm"))
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--orders", type=int, default=200)
    a = ap.parse_args()
    region = txmap.Region.open(a.region, 4 << 20, create=True)
    view = region.view()
    with view.transaction():  # the stock and the orders' map, once
        root = view.root(16)
        if word(view, root + LEFT) + word(view, root + SOLD) == 0:
            view.write(root + LEFT, struct.pack("<Q", STOCK))
        view.map("orders")
    with view.transaction(read_only=True):
        sold_before = word(view, root + SOLD)
    run = random.randrange(1 << 30)
    ctx = multiprocessing.get_context("fork")  # children open the region themselves
    ps = [ctx.Process(target=worker, args=(a.region, root, w, a.orders, run + w)) for w in range(a.workers)]
    for p in ps:
        p.start()
    for p in ps:
        p.join()
        assert p.exitcode == 0, "a worker failed"
    with view.transaction(read_only=True):
        left, sold = word(view, root + LEFT), word(view, root + SOLD)
        orders = len(view.map("orders", create=False))
    print(f"{sold} tickets sold ({sold - sold_before} in this run), {left} left, {orders} orders")
    assert left + sold == STOCK, "declined orders gave their tickets back"
    assert orders == sold, "every sale has its order"
    print("stock and sales agree")
    view.close()
    region.close()


if __name__ == "__main__":
    main()
