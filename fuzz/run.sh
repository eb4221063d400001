#!/bin/sh
# Runs each fuzz target in turn for SECONDS (default 60), from the committed
# seeds (fuzz/corpus/<corpus>, read only) plus a working corpus under
# fuzz/target/work/ that libFuzzer grows. Usage: fuzz/run.sh [SECONDS] [TARGET...]
set -e
cd "$(dirname "$0")/.."
secs=${1:-60}
[ $# -gt 0 ] && shift
targets=${*:-"region_header log_header log_record log_scan recover inspect collections collection_ops journal"}
for t in $targets; do
    case $t in
        recover|inspect) corpus=files ;;
        collections|collection_ops) corpus=data ;;
        *) corpus=$t ;;
    esac
    mkdir -p fuzz/target/work/$t
    echo "== $t ($secs s)"
    cargo +nightly fuzz run -s none -O "$t" "fuzz/target/work/$t" "fuzz/corpus/$corpus" -- \
        -max_total_time="$secs" -timeout=10 -rss_limit_mb=4096 -print_final_stats=1 2>&1 |
        grep -E '^(#[0-9]+.*DONE|stat::number_of_executed_units|stat::average_exec_per_sec|stat::new_units_added|stat::peak_rss_mb|==[0-9]+==|.*panicked|.*deadly signal|.*Test unit written|SUMMARY)' || true
    # The scratch files a fuzzer process leaves (it exits without dropping them).
    rm -rf /dev/shm/txmap-fuzz-* 2>/dev/null || true
done
