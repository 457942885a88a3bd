#!/usr/bin/env python3
"""DuckDB column of the SQL benchmark: the queries of `gpusort bench sql` on the same data.

    gpusort bench sql --rows N --json gpusort.json --write-parquet DIR
    python3 benches/sql_duckdb.py --data DIR --gpusort-json gpusort.json --json merged.json

Loads DIR/<table>.parquet (written by gpusort from the same seed) into DuckDB in-memory
tables (or, with --parquet-tables DIR, queries the files that `gpusort bench sql --parquet
DIR` wrote, in place), then times each query: one warm-up, then the median of --reps runs, each result
fully materialized as an Arrow table, DuckDB using --threads threads (default: cores).
Prints one markdown table with gpusort, DataFusion and DuckDB side by side, and writes the
merged figures as JSON (input of benches/plot_sql.py).
"""

import argparse
import json
import os
import re
import statistics
import sys
import time

QUERIES = {
    "Q1": "SELECT * FROM t ORDER BY k",
    "Q2": "SELECT * FROM g ORDER BY g, v DESC",
    "Q3": "SELECT * FROM s ORDER BY s",
    "Q4": "SELECT g, ts, row_number() OVER (PARTITION BY g ORDER BY ts) AS rn FROM g",
    "Q5": "SELECT * FROM ts ORDER BY ts",
    "Q6": "SELECT * FROM t ORDER BY k LIMIT 100",
    "Q7": "SELECT * FROM u ORDER BY url",
    "Q8": "SELECT * FROM p ORDER BY path",
}


def materialize(con, sql):
    relation = con.sql(sql)
    if hasattr(relation, "to_arrow_table"):
        return relation.to_arrow_table()
    return relation.arrow()


def time_query(con, sql, reps):
    """(rows, the first (cold) run's seconds, the median of `reps` runs after it)."""
    started = time.perf_counter()
    rows = materialize(con, sql).num_rows
    cold = time.perf_counter() - started
    times = []
    for _ in range(reps):
        started = time.perf_counter()
        table = materialize(con, sql)
        times.append(time.perf_counter() - started)
        del table
    return rows, cold, statistics.median(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", help="directory of t/g/ts/s/u/p .parquet, loaded into memory")
    parser.add_argument("--parquet-tables", help="directory of t/g/ts/s/u/p folders of .parquet "
                        "files (gpusort bench sql --parquet DIR), queried in place")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--query", action="append", help="only these queries (Q1 ...)")
    parser.add_argument("--gpusort-json", help="results of gpusort bench sql --json")
    parser.add_argument("--json", help="write the merged results here")
    args = parser.parse_args()

    import duckdb

    con = duckdb.connect()
    con.execute(f"SET threads = {args.threads}")
    con.execute("SET preserve_insertion_order = true")
    if not (args.data or args.parquet_tables):
        sys.exit("--data or --parquet-tables is needed")
    ours = {}
    meta = {}
    if args.gpusort_json:
        with open(args.gpusort_json) as f:
            meta = json.load(f)
        ours = {q["query"]: q for q in meta["queries"]}
    names = args.query or (list(ours) if ours else list(QUERIES))
    # Only the tables the chosen queries read.
    tables = sorted({re.search(r"FROM (\w+)", QUERIES[name]).group(1) for name in names})
    for table in tables:
        if args.parquet_tables:
            files = os.path.join(args.parquet_tables, table, "*.parquet")
            con.execute(f"CREATE VIEW {table} AS SELECT * FROM read_parquet('{files}')")
            continue
        path = os.path.join(args.data, f"{table}.parquet")
        started = time.perf_counter()
        con.execute(f"CREATE TABLE {table} AS SELECT * FROM read_parquet('{path}')")
        print(f"loaded {table} in {time.perf_counter() - started:.1f} s", file=sys.stderr)

    merged = []
    for name in names:
        rows, _, median = time_query(con, QUERIES[name], args.reps)
        print(f"{name}: DuckDB {median:.3f} s ({rows} rows)", file=sys.stderr)
        entry = dict(ours.get(name, {"query": name, "sql": QUERIES[name]}))
        entry["duckdb_s"] = median
        entry["duckdb_rows"] = rows
        merged.append(entry)

    print(
        f"DuckDB {duckdb.__version__}, {args.threads} threads; gpusort device: "
        f"{meta.get('device', '-')}; median of {args.reps} after a warm-up, seconds"
    )
    print("| query | rows | gpusort | DataFusion | DuckDB | vs DataFusion | vs DuckDB |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for e in merged:
        g, d, k = e.get("gpusort_s"), e.get("datafusion_s"), e["duckdb_s"]
        fmt = lambda x: "-" if x is None else f"{x:.3f}"
        ratio = lambda a, b: "-" if a is None or b is None else f"{b / a:.2f}×"
        if "rows" in e and e["rows"] != e["duckdb_rows"]:
            sys.exit(f"{e['query']}: DuckDB returned {e['duckdb_rows']} rows, gpusort {e['rows']}")
        print(
            f"| {e['query']} `{e['sql']}` | {e['duckdb_rows']} | {fmt(g)} | {fmt(d)} | "
            f"{fmt(k)} | {ratio(g, d)} | {ratio(g, k)} |"
        )
    if args.json:
        meta = dict(meta)
        meta["duckdb"] = {"version": duckdb.__version__, "threads": args.threads}
        meta["queries"] = merged
        with open(args.json, "w") as f:
            json.dump(meta, f, indent=2)


if __name__ == "__main__":
    main()
