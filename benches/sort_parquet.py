#!/usr/bin/env python3
"""Parquet → sorted Parquet: `gpusort sort` against DuckDB and DataFusion's own sort.

Generates the Q1 table of the SQL benchmark, t(k BIGINT uniform random, p1 BIGINT,
p2 DOUBLE), seeded, as one Parquet file (snappy), then sorts it by k into a new Parquet
file (snappy) with each engine, median of --reps runs after one warm-up, and prints one
Markdown table with the breakdown each engine can report.

  python3 benches/sort_parquet.py --gpusort PATH [--rows N] [--reps 3] [--dir /tmp/x]

- gpusort (cuda / cpu backend): `gpusort sort t.parquet -o out.parquet --by k
  --compression snappy --timings`; breakdown from its stage line (plan, read+sort with the
  sort operator's share, write).
- DataFusion 55 alone: `gpusort sql "SET gpu_sort.enabled = false; COPY (SELECT * FROM t
  ORDER BY k) TO ..."` (the same binary, gpusort's rule off).
- DuckDB (the `duckdb` Python package, all cores): `COPY (SELECT * FROM
  read_parquet(...) ORDER BY k) TO ... (FORMAT parquet, COMPRESSION snappy)`; breakdown:
  the same query into a temporary table (read + sort) and `COPY` of a table read
  (read + write) measured separately.
"""

import argparse
import os
import re
import statistics
import subprocess
import time


def generate(path, rows, seed):
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(seed)
    writer = None
    step = 8 << 20
    for start in range(0, rows, step):
        n = min(step, rows - start)
        table = pa.table(
            {
                "k": rng.integers(-(2**63), 2**63 - 1, n, dtype=np.int64),
                "p1": rng.integers(0, 2**40, n, dtype=np.int64),
                "p2": rng.random(n),
            }
        )
        if writer is None:
            writer = pq.ParquetWriter(path, table.schema, compression="snappy")
        writer.write_table(table, row_group_size=1 << 20)
    writer.close()


def timed(fn, reps):
    fn()  # warm-up
    times, extra = [], []
    for _ in range(reps):
        start = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - start)
        extra.append(out)
    i = times.index(sorted(times)[len(times) // 2])
    return times[i], extra[i]


def run_gpusort(binary, src, dst, backend):
    out = subprocess.run(
        [binary, "sort", src, "-o", dst, "--by", "k", "--compression", "snappy",
         "--backend", backend, "--timings", "--overwrite"],
        check=True, capture_output=True, text=True,
    ).stdout
    summary = out.splitlines()[0]
    stages = re.search(r"stages: (.*)", out).group(1)
    return f"{stages}; {summary.split('; ', 1)[1]}"


def run_datafusion(binary, src, dst):
    sql = (f"SET gpu_sort.enabled = false; COPY (SELECT * FROM t ORDER BY k) TO '{dst}' "
           "STORED AS PARQUET OPTIONS ('format.compression' 'snappy')")
    subprocess.run([binary, "sql", sql, "--table", f"t={src}"], check=True,
                   capture_output=True, text=True)
    return ""


def duckdb_runs(src, dst, reps):
    import duckdb

    con = duckdb.connect()
    con.execute(f"SET threads = {os.cpu_count()}")
    copy = (f"COPY (SELECT * FROM read_parquet('{src}') ORDER BY k) TO '{dst}' "
            "(FORMAT parquet, COMPRESSION snappy)")
    total, _ = timed(lambda: con.execute(copy), reps)

    def read_sort():
        con.execute("DROP TABLE IF EXISTS s")
        con.execute(f"CREATE TEMP TABLE s AS SELECT * FROM read_parquet('{src}') ORDER BY k")

    read_sorted, _ = timed(read_sort, reps)
    copy_plain = (f"COPY (SELECT * FROM read_parquet('{src}')) TO '{dst}.plain' "
                  "(FORMAT parquet, COMPRESSION snappy)")
    read_write, _ = timed(lambda: con.execute(copy_plain), reps)
    return total, (f"read+sort into a temp table {read_sorted:.3f} s; "
                   f"read+write without sort {read_write:.3f} s; DuckDB {duckdb.__version__}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpusort", required=True, help="the gpusort binary")
    ap.add_argument("--rows", type=int, default=100_000_000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--dir", default="/tmp/gpusort-parquet-bench")
    ap.add_argument("--skip", default="", help="comma list of engines to skip")
    args = ap.parse_args()
    os.makedirs(args.dir, exist_ok=True)
    src = os.path.join(args.dir, "t.parquet")
    dst = os.path.join(args.dir, "out.parquet")
    start = time.perf_counter()
    generate(src, args.rows, args.seed)
    print(f"generated {args.rows} rows, {os.path.getsize(src) / 2**20:.0f} MiB, "
          f"in {time.perf_counter() - start:.1f} s", flush=True)
    skip = set(filter(None, args.skip.split(",")))
    rows = []
    for name, fn in [
        ("gpusort (cuda)", lambda: run_gpusort(args.gpusort, src, dst, "cuda")),
        ("gpusort (cpu backend)", lambda: run_gpusort(args.gpusort, src, dst, "cpu")),
        ("DataFusion 55 alone", lambda: run_datafusion(args.gpusort, src, dst)),
    ]:
        if name.split(" ")[0].lower() in skip or name in skip:
            continue
        seconds, note = timed(fn, args.reps)
        rows.append((name, seconds, note))
        print(f"{name}: {seconds:.3f} s {note}", flush=True)
    if "duckdb" not in skip:
        seconds, note = duckdb_runs(src, dst, args.reps)
        rows.append(("DuckDB", seconds, note))
        print(f"DuckDB: {seconds:.3f} s {note}", flush=True)
    print()
    print(f"| engine | s (median of {args.reps}) | vs gpusort (cuda) | breakdown |")
    print("| --- | ---: | ---: | --- |")
    base = rows[0][1] if rows else 1.0
    for name, seconds, note in rows:
        print(f"| {name} | {seconds:.3f} | {seconds / base:.2f}x | {note} |")


if __name__ == "__main__":
    main()
