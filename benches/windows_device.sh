#!/usr/bin/env bash
# The window and LIMIT benchmark on the GPU host, from the repo root (see
# ../shared/device/README.md for packing `bin gpusort` into .device/):
#
#   bash benches/windows_device.sh windows   # --suite windows: gpusort, DataFusion, DuckDB
#   bash benches/windows_device.sh limits    # --suite limits: gpusort against DataFusion's TopK
#
# TPC-H lineitem at scale factor $SF (default 10) is generated into /tmp/gpusort-bench as 16
# Parquet files. gpusort and DataFusion run in one process (`gpusort bench tpch`, first run
# cold, then the median of 3; DataFusion once after its cold run, as it takes tens of
# seconds on some windows); DuckDB reads the same files (benches/sort_tpch_duckdb.py, with
# the wheels under /tmp/site when carried as .whl/). Results land in $OUT.
set -uo pipefail
suite=${1:-windows}
sf=${SF:-10}
data=/tmp/gpusort-bench
out=${OUT:-/tmp}
gpusort() { bash .device/run.sh bin gpusort "$@"; }
case "$suite" in
  windows)
    gpusort bench tpch --sf "$sf" --data "$data" --suite windows --reps 3 --baseline-reps 1 \
      --json "$out/windows.json" > "$out/windows.log" 2>&1
    tail -40 "$out/windows.log"
    if [ -d .whl ]; then
      python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
    fi
    python3 benches/sort_tpch_duckdb.py --lineitem "$data/sf$sf-16/lineitem" --reps 3 \
      --gpusort-json "$out/windows.json" --json "$out/windows-merged.json" \
      > "$out/duckdb.log" 2>&1
    tail -30 "$out/duckdb.log"
    ;;
  limits)
    gpusort bench tpch --sf "$sf" --data "$data" --suite limits --reps 3 --baseline-reps 3 \
      --set gpu_sort.topk=true --json "$out/limits.json" > "$out/limits.log" 2>&1
    tail -30 "$out/limits.log"
    ;;
  *) echo "unknown suite $suite (windows or limits)"; exit 2 ;;
esac
