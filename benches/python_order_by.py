#!/usr/bin/env python3
"""The Python path against the Rust path: one 100 M-row `ORDER BY` over a Parquet file,
its whole result collected, from the `gpusort` Python package (a `pyarrow.Table`) and from
the `gpusort sql` command (Rust `RecordBatch`es), in the same run.

    python3 benches/python_order_by.py --gpusort PATH [--rows 100000000] [--reps 3]

Needs the package importable (`pip install ./python`, or the built extension on
PYTHONPATH). Both paths read the same file (the Q1 table of sort_parquet.py: k BIGINT
uniform, p1 BIGINT, p2 DOUBLE; one snappy file) with the same session defaults, and run
the query --reps times in one process after planning; the first run is reported apart
(cold: device start, kernels loaded) and the rest as their median.
"""

import argparse
import os
import re
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sort_parquet import generate  # noqa: E402

QUERY = "SELECT * FROM t ORDER BY k"


def rust_times(gpusort, path, reps):
    statements = "; ".join([QUERY] * reps)
    out = subprocess.run(
        [gpusort, "sql", statements, "--table", f"t={path}", "--max-rows", "1"],
        check=True, capture_output=True, text=True,
    ).stdout
    return [float(m[1]) for m in re.findall(r"(\d+) row\(s\) in ([\d.]+) s", out)]


def python_times(path, reps):
    import gpusort

    ctx = gpusort.SessionContext()
    ctx.register_parquet("t", path)
    times = []
    for _ in range(reps):
        frame = ctx.sql(QUERY)
        started = time.perf_counter()
        table = frame.to_arrow_table()
        times.append(time.perf_counter() - started)
        rows = table.num_rows
        del table
    return times, rows, ctx.backend


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpusort", required=True, help="the gpusort binary")
    ap.add_argument("--rows", type=int, default=100_000_000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--dir", default="/tmp/gpusort-python-bench")
    args = ap.parse_args()
    os.makedirs(args.dir, exist_ok=True)
    path = os.path.join(args.dir, f"q1-{args.rows}.parquet")
    if not os.path.exists(path):
        started = time.perf_counter()
        generate(path, args.rows, args.seed)
        print(f"generated {args.rows} rows in {time.perf_counter() - started:.1f} s")
    rust = rust_times(args.gpusort, path, args.reps)
    py, rows, backend = python_times(path, args.reps)
    assert rows == args.rows, f"{rows} rows"
    print(f"\nbackend {backend}; `{QUERY}` over {args.rows} rows, whole result collected\n")
    print("| path | first run (s) | median of the rest (s) | all runs (s) |")
    print("| --- | ---: | ---: | --- |")
    for name, times in [("Rust (`gpusort sql`)", rust), ("Python (`to_arrow_table()`)", py)]:
        rest = statistics.median(times[1:]) if len(times) > 1 else float("nan")
        runs = ", ".join(f"{t:.3f}" for t in times)
        print(f"| {name} | {times[0]:.3f} | {rest:.3f} | {runs} |")
    if len(rust) > 1:
        ratio = statistics.median(py[1:]) / statistics.median(rust[1:])
        print(f"\nPython / Rust (warm medians): {ratio:.3f}")


if __name__ == "__main__":
    main()
