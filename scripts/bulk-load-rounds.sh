#!/usr/bin/env bash
# The redb workload's bulk load alone (20,000 entries in one durable
# transaction), txmap-bench binaries and LMDB in turn each round; prints
# each round's seconds, the medians and the median per-round ratio to LMDB.
# Usage: scripts/bulk-load-rounds.sh ROUNDS BIN [BIN...]
set -euo pipefail
rounds=$1
shift
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
for r in $(seq 1 "$rounds"); do
    line=""
    for b in "$@" lmdb; do
        rm -rf "$dir/s" && mkdir "$dir/s"
        if [ "$b" = lmdb ]; then bin=$1 store=lmdb; else bin=$b store=txmap-btree; fi
        t=$("$bin" --peer-worker "redb|$store|$dir/s|20000,1,1,1,1,1|$r" | awk 'NR == 1 { print $2 }')
        line="$line $t"
    done
    echo "$line"
done | python3 -c '
import sys, statistics
rows = [[float(x) for x in l.split()] for l in sys.stdin if l.strip()]
cols = list(zip(*rows))
print("medians (s):", " ".join("%.4f" % statistics.median(c) for c in cols), "(last: LMDB)")
print("median per-round ratio to LMDB:", " ".join(
    "%.3f" % statistics.median(r[k] / r[-1] for r in rows) for k in range(len(cols) - 1)))
'
