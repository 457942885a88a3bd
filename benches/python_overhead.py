"""Per-query cost of gpusort inside datafusion-python's own context (``gpusort.Extension``,
plans crossing DataFusion's FFI) against ``gpusort.SessionContext`` (no FFI), with
datafusion-python alone as the baseline, in one process.

    python3 benches/python_overhead.py [--rows 100000000] [--reps 5] [--dir /tmp/po]
                                       [--baseline-max-rows 1000000] [--json out.json]

For each table size it writes one Parquet file (random ``k``, a payload ``v``), registers
it in the three contexts (and, for the in-memory case, the same data as an Arrow table),
and times each query to a ``pyarrow.Table``: the median of ``--reps`` runs after one
warm-up. The small queries show the fixed cost per query (planning round trips); the
large ones what the FFI adds to a real sort. datafusion-python alone runs only on tables of
at most ``--baseline-max-rows`` rows.
"""

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

import datafusion
import gpusort

QUERIES = {
    "order_by": "SELECT k, v FROM t ORDER BY k, v",
    "top_1000": "SELECT k, v FROM t ORDER BY k DESC, v LIMIT 1000",
    "window": "SELECT v, rank() OVER (PARTITION BY k % 1000 ORDER BY v) AS r FROM t",
}


def table(rows: int, seed: int = 7) -> pa.Table:
    rng = np.random.default_rng(seed)
    return pa.table({"k": rng.integers(0, 1 << 40, rows), "v": rng.standard_normal(rows)})


def contexts(settings, baseline):
    ext = gpusort.Extension(settings)
    config = datafusion.SessionConfig().with_extension(ext)
    found = {
        "gpusort.SessionContext": gpusort.SessionContext(settings),
        "datafusion + Extension": datafusion.SessionContext(config).with_extensions(ext),
    }
    if baseline:
        found["datafusion alone"] = datafusion.SessionContext()
    return found


def run(ctx, query):
    result = ctx.sql(query)
    if isinstance(result, gpusort.DataFrame):
        return result.to_arrow_table().num_rows
    return pa.Table.from_batches(result.collect()).num_rows


def timed(ctx, query, reps):
    rows = run(ctx, query)
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        run(ctx, query)
        times.append(time.perf_counter() - start)
    return rows, statistics.median(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, action="append")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--dir", default="/tmp/gpusort-python-overhead")
    parser.add_argument("--json")
    parser.add_argument("--in-memory-max-rows", type=int, default=100_000_000)
    parser.add_argument("--baseline-max-rows", type=int, default=1_000_000)
    args = parser.parse_args()
    sizes = args.rows or [100_000, 100_000_000]
    work = Path(args.dir)
    work.mkdir(parents=True, exist_ok=True)
    settings = {"gpu_sort.min_rows": 0}
    print(f"gpu: {gpusort.gpu_status()}; datafusion {datafusion.__version__}")
    records = []
    for rows in sizes:
        data = table(rows)
        path = work / f"t{rows}.parquet"
        if not path.exists():
            pq.write_table(data, path, row_group_size=1 << 20)
        sources = {"parquet": lambda c: c.register_parquet("t", str(path))}
        if rows <= args.in_memory_max_rows:
            sources["in_memory"] = lambda c: (
                c.register_arrow("t", data) if isinstance(c, gpusort.SessionContext)
                else c.from_arrow(data, name="t")
            )
        for source, register in sources.items():
            for name, ctx in contexts(settings, rows <= args.baseline_max_rows).items():
                register(ctx)
                for query_name, query in QUERIES.items():
                    out, seconds = timed(ctx, query, args.reps)
                    record = {"rows": rows, "source": source, "context": name,
                              "query": query_name, "out_rows": out, "seconds": seconds}
                    records.append(record)
                    print(f"{rows:>11,} {source:9} {query_name:9} {name:24} {seconds:9.4f} s")
    if args.json:
        Path(args.json).write_text(json.dumps(records, indent=1))


if __name__ == "__main__":
    main()
