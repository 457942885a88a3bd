#!/usr/bin/env python3
"""DuckDB column of `gpusort bench tpch`: DataFusion's sort_tpch queries on the same files.

    gpusort bench tpch --sf 10 --data DIR --json gpusort.json
    python3 benches/sort_tpch_duckdb.py --lineitem DIR/sf10-16/lineitem \
        --gpusort-json gpusort.json --json merged.json

DuckDB reads the Parquet files themselves (a view over read_parquet, as a user queries
them), with --threads threads (default: cores). Each query: a first (cold) run, then the
median of --reps runs, each result fully materialized as an Arrow table. Prints one
markdown table with gpusort, DataFusion and DuckDB side by side (warm medians, cold runs
apart) and writes the merged figures as JSON (input of benches/plot_sql.py).
"""

import argparse
import json
import os
import statistics
import sys

from sql_duckdb import time_query  # same folder: the same timing as the SQL benchmark

KEYS3 = "l_linenumber, l_suppkey, l_orderkey"
KEYS4 = "l_orderkey, l_suppkey, l_linenumber, l_comment"
WIDE = (
    "l_partkey, l_quantity, l_extendedprice, l_discount, l_tax, l_returnflag, "
    "l_linestatus, l_shipdate, l_commitdate, l_receiptdate, l_shipinstruct, l_shipmode"
)
QUERIES = {
    "Q1": "SELECT l_linenumber, l_partkey FROM lineitem ORDER BY l_linenumber",
    "Q2": "SELECT l_orderkey, l_partkey FROM lineitem ORDER BY l_orderkey",
    "Q3": "SELECT l_comment, l_partkey FROM lineitem ORDER BY l_comment",
    "Q4": "SELECT l_orderkey, l_linenumber, l_partkey FROM lineitem "
    "ORDER BY l_orderkey, l_linenumber",
    "Q5": f"SELECT {KEYS3} FROM lineitem ORDER BY {KEYS3}",
    "Q6": f"SELECT {KEYS3}, l_partkey FROM lineitem ORDER BY {KEYS3}",
    "Q7": f"SELECT {KEYS3}, {WIDE} FROM lineitem ORDER BY {KEYS3}",
    "Q8": f"SELECT {KEYS4} FROM lineitem ORDER BY {KEYS4}",
    "Q9": f"SELECT {KEYS4}, l_partkey FROM lineitem ORDER BY {KEYS4}",
    "Q10": f"SELECT {KEYS4}, {WIDE} FROM lineitem ORDER BY {KEYS4}",
    "Q11": "SELECT l_shipmode, l_comment, l_partkey FROM lineitem ORDER BY l_shipmode",
}
# `gpusort bench tpch --suite windows`: the same SQL, word for word.
SHIP3 = "l_shipdate, l_orderkey, l_linenumber"
WINDOW_QUERIES = {
    "W0": f"SELECT l_orderkey, l_linenumber, l_shipdate, l_extendedprice FROM lineitem ORDER BY {SHIP3}",
    "W1": "SELECT l_suppkey, l_orderkey, l_linenumber, l_extendedprice, rank() OVER "
    "(PARTITION BY l_suppkey ORDER BY l_extendedprice DESC) AS w FROM lineitem",
    "W2": "SELECT * FROM (SELECT l_partkey, l_orderkey, l_linenumber, l_extendedprice, "
    "row_number() OVER (PARTITION BY l_partkey ORDER BY l_extendedprice DESC, "
    "l_orderkey, l_linenumber) AS w FROM lineitem) WHERE w <= 3",
    "W3": "SELECT l_orderkey, l_linenumber, l_shipdate, sum(l_extendedprice) OVER "
    f"(ORDER BY {SHIP3} ROWS BETWEEN 6 PRECEDING AND CURRENT ROW) AS w FROM lineitem",
    "W4": "SELECT l_orderkey, l_linenumber, lag(l_extendedprice) OVER (PARTITION BY "
    "l_orderkey ORDER BY l_linenumber) AS w FROM lineitem",
    "W5": "SELECT l_orderkey, l_extendedprice FROM lineitem "
    "ORDER BY l_extendedprice DESC, l_orderkey LIMIT 100",
    "W6": "SELECT l_comment, l_orderkey, l_linenumber FROM lineitem "
    "ORDER BY l_comment, l_orderkey, l_linenumber LIMIT 1000000",
    "W7": "SELECT l_orderkey, l_linenumber, l_shipdate, sum(l_extendedprice) OVER "
    f"(ORDER BY {SHIP3} ROWS UNBOUNDED PRECEDING) AS w FROM lineitem",
    "W8": "SELECT l_orderkey, l_linenumber, l_shipdate, row_number() OVER "
    f"(ORDER BY {SHIP3}) AS w FROM lineitem",
    "W9": "SELECT l_suppkey, l_orderkey, l_linenumber, l_shipdate, l_extendedprice "
    "FROM lineitem ORDER BY l_suppkey, l_shipdate, l_orderkey, l_linenumber",
    "W10": "SELECT l_suppkey, l_orderkey, l_linenumber, "
    "sum(l_quantity) OVER w AS s, avg(l_extendedprice) OVER w AS a, "
    "min(l_discount) OVER w AS mn, max(l_extendedprice) OVER w AS mx, "
    "count(*) OVER w AS c FROM lineitem WINDOW w AS (PARTITION BY l_suppkey "
    f"ORDER BY {SHIP3} ROWS BETWEEN 10 PRECEDING AND CURRENT ROW)",
    "W11": "SELECT l_orderkey, l_linenumber, l_shipdate, sum(l_quantity) OVER "
    "(PARTITION BY l_shipmode ORDER BY l_shipdate) AS w FROM lineitem",
    "W12": "SELECT l_suppkey, l_orderkey, l_linenumber, l_shipdate, sum(l_extendedprice) OVER "
    "(PARTITION BY l_suppkey ORDER BY l_shipdate RANGE BETWEEN INTERVAL '30 days' PRECEDING "
    "AND CURRENT ROW) AS w FROM lineitem",
    "W13": "SELECT l_orderkey, l_linenumber, l_shipdate, avg(l_quantity) OVER "
    "(ORDER BY l_shipdate RANGE BETWEEN INTERVAL '7 days' PRECEDING AND CURRENT ROW) AS w "
    "FROM lineitem",
    "W14": "SELECT l_suppkey, l_orderkey, l_linenumber, l_shipdate, l_quantity, "
    "l_extendedprice, l_discount FROM lineitem "
    "ORDER BY l_suppkey, l_shipdate, l_orderkey, l_linenumber",
}
QUERIES.update(WINDOW_QUERIES)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lineitem", required=True, help="directory of lineitem .parquet files")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--query", action="append", help="only these queries (Q1 ...)")
    parser.add_argument("--gpusort-json", help="results of gpusort bench tpch --json")
    parser.add_argument("--json", help="write the merged results here")
    args = parser.parse_args()

    import duckdb

    con = duckdb.connect()
    con.execute(f"SET threads = {args.threads}")
    con.execute("SET preserve_insertion_order = true")
    files = os.path.join(args.lineitem, "*.parquet")
    con.execute(f"CREATE VIEW lineitem AS SELECT * FROM read_parquet('{files}')")

    ours, meta = {}, {}
    if args.gpusort_json:
        with open(args.gpusort_json) as f:
            meta = json.load(f)
        ours = {q["query"]: q for q in meta["queries"]}

    names = args.query or (list(ours) if ours else list(QUERIES))
    merged = []
    for name in names:
        rows, cold, median = time_query(con, QUERIES[name], args.reps)
        print(f"{name}: DuckDB cold {cold:.3f} s, warm {median:.3f} s ({rows} rows)",
              file=sys.stderr, flush=True)
        entry = dict(ours.get(name, {"query": name, "sql": QUERIES[name]}))
        entry.update(duckdb_s=median, duckdb_cold_s=cold, duckdb_rows=rows)
        merged.append(entry)

    print(
        f"DuckDB {duckdb.__version__}, {args.threads} threads; gpusort device: "
        f"{meta.get('device', '-')}; warm: median of {args.reps} after the cold first run; s"
    )
    print("| query | rows | gpusort | DataFusion | DuckDB | vs DataFusion | vs DuckDB "
          "| cold: gpusort | DataFusion | DuckDB |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    fmt = lambda x: "-" if x is None else f"{x:.3f}"
    ratio = lambda a, b: "-" if a is None or b is None else f"{b / a:.2f}×"
    speedups = []
    for e in merged:
        g, d, k = e.get("gpusort_s"), e.get("datafusion_s"), e["duckdb_s"]
        if "rows" in e and e["rows"] != e["duckdb_rows"]:
            sys.exit(f"{e['query']}: DuckDB returned {e['duckdb_rows']} rows, gpusort {e['rows']}")
        if g:
            speedups.append(k / g)
        print(
            f"| {e['query']} | {e['duckdb_rows']} | {fmt(g)} | {fmt(d)} | {fmt(k)} | "
            f"{ratio(g, d)} | {ratio(g, k)} | {fmt(e.get('gpusort_cold_s'))} | "
            f"{fmt(e.get('datafusion_cold_s'))} | {fmt(e['duckdb_cold_s'])} |"
        )
    if speedups:
        print(f"geometric mean of gpusort vs DuckDB: {statistics.geometric_mean(speedups):.2f}×")
    if args.json:
        meta = dict(meta)
        meta["duckdb"] = {"version": duckdb.__version__, "threads": args.threads}
        meta["queries"] = merged
        with open(args.json, "w") as f:
            json.dump(meta, f, indent=2)


if __name__ == "__main__":
    main()
