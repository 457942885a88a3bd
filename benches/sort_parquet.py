#!/usr/bin/env python3
"""Parquet → sorted Parquet: `gpusort sort` against DuckDB and DataFusion's own sort.

Two cases, each sorted into snappy Parquet by every engine, median of --reps runs after
one warm-up, printed as one Markdown table with the breakdown each engine can report:

- default: generates the Q1 table of the SQL benchmark, t(k BIGINT uniform random,
  p1 BIGINT, p2 DOUBLE), seeded, as one Parquet file (snappy), and sorts it by k into
  one file;
- `--lineitem DIR`: TPC-H lineitem as `gpusort bench tpch` writes it (a directory of
  Parquet files, all 16 columns), sorted by `l_shipdate, l_orderkey` into a directory of
  files of at most --rows-per-file rows.

  python3 benches/sort_parquet.py --gpusort PATH [--rows N] [--reps 3] [--dir /tmp/x]
  python3 benches/sort_parquet.py --gpusort PATH --lineitem /tmp/bd/sf10-16/lineitem

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
import shutil
import subprocess
import time
from dataclasses import dataclass


@dataclass
class Case:
    """What one benchmark sorts: the input (as gpusort and as DuckDB name it), the output
    (one file, or a directory of files of `rows_per_file` rows) and the ORDER BY keys."""

    src: str
    duckdb_src: str
    dst: str
    by: str
    rows_per_file: int | None


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


def remove(path):
    if os.path.isdir(path):
        shutil.rmtree(path)
    elif os.path.exists(path):
        os.remove(path)


def timed(fn, reps, output=None):
    """Median time of `fn` over `reps` runs after a warm-up; `output` (a path) is removed
    before each run, untimed, so that no engine pays for deleting the last one's."""
    if output:
        remove(output)
    fn()  # warm-up
    times, extra = [], []
    for _ in range(reps):
        if output:
            remove(output)
        start = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - start)
        extra.append(out)
    i = times.index(sorted(times)[len(times) // 2])
    return times[i], extra[i]


def run_gpusort(binary, case, backend):
    args = [binary, "sort", case.src, "-o", case.dst, "--by", case.by, "--compression",
            "snappy", "--backend", backend, "--timings", "--overwrite"]
    if case.rows_per_file:
        args += ["--max-rows-per-file", str(case.rows_per_file)]
    out = subprocess.run(args, check=True, capture_output=True, text=True).stdout
    summary = out.splitlines()[0]
    stages = re.search(r"stages: (.*)", out).group(1)
    return f"{stages}; {summary.split('; ', 1)[1]}"


def run_datafusion(binary, case):
    dst = case.dst + "/" if case.rows_per_file else case.dst
    sql = (f"SET gpu_sort.enabled = false; COPY (SELECT * FROM t ORDER BY {case.by}) TO "
           f"'{dst}' STORED AS PARQUET OPTIONS ('format.compression' 'snappy')")
    subprocess.run([binary, "sql", sql, "--table", f"t={case.src}"], check=True,
                   capture_output=True, text=True)
    return ""


def duckdb_runs(case, reps):
    import duckdb

    con = duckdb.connect()
    con.execute(f"SET threads = {os.cpu_count()}")
    src = case.duckdb_src
    # Directory output: files of about --rows-per-file rows (DuckDB's row groups hold
    # 122 880 rows), written in order; one file otherwise.
    options = "FORMAT parquet, COMPRESSION snappy"
    if case.rows_per_file:
        options += f", ROW_GROUPS_PER_FILE {max(1, case.rows_per_file // 122880)}"

    def copy(query, dst):
        con.execute(f"COPY ({query}) TO '{dst}' ({options})")

    ordered = f"SELECT * FROM read_parquet('{src}') ORDER BY {case.by}"
    total, _ = timed(lambda: copy(ordered, case.dst), reps, case.dst)

    def read_sort():
        con.execute("DROP TABLE IF EXISTS s")
        con.execute(f"CREATE TEMP TABLE s AS {ordered}")

    read_sorted, _ = timed(read_sort, reps)
    con.execute("DROP TABLE IF EXISTS s")
    plain = f"SELECT * FROM read_parquet('{src}')"
    read_write, _ = timed(lambda: copy(plain, case.dst + ".plain"), reps, case.dst + ".plain")
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
    ap.add_argument("--lineitem", help="a lineitem directory to sort instead of the Q1 table")
    ap.add_argument("--rows-per-file", type=int, default=10_000_000,
                    help="rows per output file of the lineitem case")
    args = ap.parse_args()
    os.makedirs(args.dir, exist_ok=True)
    if args.lineitem:
        case = Case(src=args.lineitem, duckdb_src=os.path.join(args.lineitem, "*.parquet"),
                    dst=os.path.join(args.dir, "lineitem_sorted"), by="l_shipdate, l_orderkey",
                    rows_per_file=args.rows_per_file)
        size = sum(os.path.getsize(os.path.join(args.lineitem, f))
                   for f in os.listdir(args.lineitem))
        print(f"lineitem: {size / 2**20:.0f} MiB of Parquet", flush=True)
    else:
        src = os.path.join(args.dir, "t.parquet")
        case = Case(src=src, duckdb_src=src, dst=os.path.join(args.dir, "out.parquet"),
                    by="k", rows_per_file=None)
        start = time.perf_counter()
        generate(src, args.rows, args.seed)
        print(f"generated {args.rows} rows, {os.path.getsize(src) / 2**20:.0f} MiB, "
              f"in {time.perf_counter() - start:.1f} s", flush=True)
    skip = set(filter(None, args.skip.split(",")))
    rows = []
    for name, fn in [
        ("gpusort (cuda)", lambda: run_gpusort(args.gpusort, case, "cuda")),
        ("gpusort (cpu backend)", lambda: run_gpusort(args.gpusort, case, "cpu")),
        ("DataFusion 55 alone", lambda: run_datafusion(args.gpusort, case)),
    ]:
        if name.split(" ")[0].lower() in skip or name in skip:
            continue
        seconds, note = timed(fn, args.reps, case.dst)
        rows.append((name, seconds, note))
        print(f"{name}: {seconds:.3f} s {note}", flush=True)
    if "duckdb" not in skip:
        seconds, note = duckdb_runs(case, args.reps)
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
