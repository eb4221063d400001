#!/usr/bin/env bash
# One `compare` run of the redb workload, txmap's B+-tree beside LMDB,
# printed as one line of txmap ÷ LMDB per row (from the report's medians).
# Usage: scripts/redb-ratios.sh BIN [LABEL]   (BIN: a txmap-bench binary)
# Run it several times, alternating builds, to compare them.
# FULL=1: the full-size workload (500,000 entries, one run, ~10 s) instead
# of the quick one (20,000 entries, ~1 s). Columns: bulk load, individual
# (single) and batch writes, reads with 1 and 2 threads, range reads, removals.
set -euo pipefail
bin=$1
label=${2:-$bin}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
size=(--quick)
[ -n "${FULL:-}" ] && size=(--reps 1)
out=$("$bin" compare "${size[@]}" --workloads redb --stores txmap-btree,lmdb \
    --dir "$dir" --out "$dir/report" 2>/dev/null)
echo "$out" | python3 -c '
import sys
label, rows = sys.argv[1], [l for l in sys.stdin if l.startswith("| ")]
tx = [l for l in rows if l.startswith("| txmap B+-tree")]
lm = [l for l in rows if l.startswith("| LMDB")]
cell = lambda l, c: float(l.split("|")[c].split()[0])
cols = [("bulk", 0, 2), ("single", 0, 4), ("batch", 0, 6), ("reads1", 0, 8), ("reads2", 1, 2), ("range", 1, 4), ("remove", 1, 6)]
print(label, " ".join(
    "%s %.2f" % (n, cell(tx[t], c) / cell(lm[t], c)) for n, t, c in cols))
' "$label"
