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
  python3 benches/sort_parquet.py --gpusort PATH --lineitem DIR --memory-limit 4G \
      --variant "--key-ranges off"    # the default (key ranges) and the merge, one run

- gpusort (cuda / cpu backend): `gpusort sort t.parquet -o out.parquet --by k
  --compression snappy --timings` with `--backend auto` (the default; the run must report
  `backend cuda`) or `--backend cpu`; breakdown from its stage line (plan, read+sort with the
  sort operator's share, write). `gpusort --no-fsync` (cuda): the same without flushing the
  output to disk before renaming it into place; DuckDB's `COPY` does not flush its output
  either, so this row is the like-for-like one.
- DataFusion 55 alone: `gpusort sql "SET gpu_sort.enabled = false; COPY (SELECT * FROM t
  ORDER BY k) TO ..."` (the same binary, gpusort's rule off).
- gpusort (python, in-process) with `--python`: `gpusort.sort_parquet(...,
  fsync=False)` of the `gpusort` package, called in this process as DuckDB is: the
  warm-up opens the device, and the timed calls find it open, as a long-lived process
  (a notebook, a service) does; `--python` takes `key=value` options of `sort_parquet`
  (`--python page_encoding=device`). The CLI's own rows include starting the CUDA driver
  and tearing it down with the process each time.
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
    (one file, or a directory of files of `rows_per_file` rows), the ORDER BY keys, and the
    memory limit of gpusort and DuckDB (DataFusion runs without one)."""

    src: str
    duckdb_src: str
    dst: str
    by: str
    rows_per_file: int | None
    memory_limit: str | None = None
    # The keys in SQL, where column names need quotes (DataFusion folds unquoted ones).
    sql_by: str | None = None

    def output(self, engine):
        """Where `engine` writes its sorted copy."""
        head, tail = os.path.split(self.dst)
        return os.path.join(head, f"{engine}-{tail}")


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


# ClickBench `hits`: its 105 columns in order, with their types (s: string, ts: timestamp
# in seconds, d: date, i64/i32/i16: integers); the strings' typical lengths.
HITS_COLUMNS = (
    "WatchID i64, JavaEnable i16, Title s, GoodEvent i16, EventTime ts, EventDate d, "
    "CounterID i32, ClientIP i32, RegionID i32, UserID i64, CounterClass i16, OS i16, "
    "UserAgent i16, URL s, Referer s, IsRefresh i16, RefererCategoryID i16, "
    "RefererRegionID i32, URLCategoryID i16, URLRegionID i32, ResolutionWidth i16, "
    "ResolutionHeight i16, ResolutionDepth i16, FlashMajor i16, FlashMinor i16, "
    "FlashMinor2 s, NetMajor i16, NetMinor i16, UserAgentMajor i16, UserAgentMinor s, "
    "CookieEnable i16, JavascriptEnable i16, IsMobile i16, MobilePhone i16, "
    "MobilePhoneModel s, Params s, IPNetworkID i32, TraficSourceID i16, SearchEngineID i16, "
    "SearchPhrase s, AdvEngineID i16, IsArtifical i16, WindowClientWidth i16, "
    "WindowClientHeight i16, ClientTimeZone i16, ClientEventTime ts, SilverlightVersion1 i16, "
    "SilverlightVersion2 i16, SilverlightVersion3 i32, SilverlightVersion4 i16, "
    "PageCharset s, CodeVersion i32, IsLink i16, IsDownload i16, IsNotBounce i16, "
    "FUniqID i64, OriginalURL s, HID i32, IsOldCounter i16, IsEvent i16, IsParameter i16, "
    "DontCountHits i16, WithHash i16, HitColor s, LocalEventTime ts, Age i16, Sex i16, "
    "Income i16, Interests i16, Robotness i16, RemoteIP i32, WindowName i32, OpenerName i32, "
    "HistoryLength i16, BrowserLanguage s, BrowserCountry s, SocialNetwork s, "
    "SocialAction s, HTTPError i16, SendTiming i32, DNSTiming i32, ConnectTiming i32, "
    "ResponseStartTiming i32, ResponseEndTiming i32, FetchTiming i32, "
    "SocialSourceNetworkID i16, SocialSourcePage s, ParamPrice i64, ParamOrderID s, "
    "ParamCurrency s, ParamCurrencyID i16, OpenstatServiceName s, OpenstatCampaignID s, "
    "OpenstatAdID s, OpenstatSourceID s, UTMSource s, UTMMedium s, UTMCampaign s, "
    "UTMContent s, UTMTerm s, FromTag s, HasGCLID i16, RefererHash i64, URLHash i64, CLID i32"
)
HITS_STRING_LENGTHS = {"URL": 80, "Referer": 60, "OriginalURL": 60, "Title": 50,
                       "Params": 20, "SearchPhrase": 16, "MobilePhoneModel": 8}


def generate_hits(path, rows, seed):
    """A seeded table of `rows` rows with hits' columns: integers of every width (most of
    them small), timestamps over a month, strings drawn from a vocabulary per column (long
    URLs and titles, short codes, mostly empty campaign fields), written in row groups of
    1 Mi rows (snappy)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(seed)
    columns = [c.split() for c in HITS_COLUMNS.split(", ")]
    types = {"i64": pa.int64(), "i32": pa.int32(), "i16": pa.int16(), "s": pa.string(),
             "ts": pa.timestamp("s"), "d": pa.date32()}
    schema = pa.schema([(name, types[kind]) for name, kind in columns])
    vocab = {}
    for name, kind in columns:
        if kind == "s":
            length = HITS_STRING_LENGTHS.get(name, 6)
            words = rng.integers(0, 36 ** 4, size=(4096, max(1, length // 5)))
            text = ["/".join(np.base_repr(w, 36).lower() for w in row) for row in words]
            if name not in HITS_STRING_LENGTHS:
                text[: 3 * len(text) // 4] = [""] * (3 * len(text) // 4)  # mostly empty
            vocab[name] = pa.array(text, pa.string())
    month = 1372636800  # 2013-07-01, as in hits
    writer = pq.ParquetWriter(path, schema, compression="snappy")
    step = 1 << 20
    for start in range(0, rows, step):
        n = min(step, rows - start)
        arrays = []
        for name, kind in columns:
            if kind == "s":
                pick = np.minimum(rng.zipf(1.3, n) - 1, len(vocab[name]) - 1)
                arrays.append(vocab[name].take(pa.array(pick)))
            elif kind == "ts":
                arrays.append(pa.array(month + rng.integers(0, 31 * 86400, n), pa.timestamp("s")))
            elif kind == "d":
                days = (15887 + rng.integers(0, 31, n)).astype(np.int32)
                arrays.append(pa.array(days).cast(pa.date32()))
            elif name in ("WatchID", "UserID", "FUniqID", "RefererHash", "URLHash"):
                arrays.append(pa.array(rng.integers(-(2**63), 2**63 - 1, n, dtype=np.int64)))
            else:
                bits = {"i64": 40, "i32": 20, "i16": 8}[kind]
                values = rng.integers(0, 2 ** bits, n) >> rng.integers(0, bits, n)
                arrays.append(pa.array(values, types[kind]))
        writer.write_table(pa.Table.from_arrays(arrays, schema=schema), row_group_size=step)
    writer.close()


def same_rows(left, right, by):
    """Whether two Parquet outputs hold the same rows in the same order (a line to print).
    Outputs that differ are told apart further: the sort keys in the same order and the
    same rows is a difference in the order of ties only (DataFusion's own sort keeps the
    order its scan delivered ties in, which need not be the files' order)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    a, b = pq.read_table(left), pq.read_table(right)
    if a.num_rows != b.num_rows:
        return f"{a.num_rows} rows against {b.num_rows}: DIFFERENT"
    # View types cannot be taken from (below); compare as plain strings and binaries.
    plain = pa.schema([pa.field(f.name, {pa.string_view(): pa.string(), pa.binary_view(): pa.binary()}
                                .get(f.type, f.type), f.nullable) for f in a.schema])
    a, b = a.cast(plain), b.cast(plain)
    head = f"{a.num_rows} rows, {a.num_columns} columns"
    if a.equals(b):
        return f"{head}: identical"
    keys = [k.split()[0].strip('"') for k in by.split(",")]
    if not a.select(keys).equals(b.select(keys)):
        return f"{head}: DIFFERENT (the sort keys differ)"
    everything = [(c, "ascending") for c in a.column_names]
    same = a.take(pc.sort_indices(a, everything)).equals(b.take(pc.sort_indices(b, everything)))
    return f"{head}: {'the same rows, ties in another order' if same else 'DIFFERENT'}"


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


def run_gpusort(binary, case, dst, backend, *extra):
    args = [binary, "sort", case.src, "-o", dst, "--by", case.by, "--compression",
            "snappy", "--backend", backend, "--timings", "--overwrite", *extra]
    if case.rows_per_file:
        args += ["--max-rows-per-file", str(case.rows_per_file)]
    if case.memory_limit:
        args += ["--memory-limit", case.memory_limit]
    out = subprocess.run(args, check=True, capture_output=True, text=True).stdout
    summary = out.splitlines()[0]
    rows = int(re.search(r"sorted (\d+) rows", summary).group(1))
    # `auto` sorts inputs of fewer than 100 000 rows on the CPU, by design.
    if backend == "auto" and "backend cuda" not in summary and rows >= 100_000:
        raise RuntimeError(f"gpusort did not sort on the GPU: {summary}")
    stages = re.search(r"stages: (.*)", out).group(1)
    return f"{stages}; {summary.split('; ', 1)[1]}"


def run_python(case, dst, options):
    """`gpusort.sort_parquet` in this process; `options`: space-separated key=value."""
    import gpusort

    kwargs = {}
    for item in options.split():
        key, value = item.split("=", 1)
        kwargs[key] = int(value) if value.isdigit() else value
    summary = gpusort.sort_parquet(
        case.src, dst, by=case.by, compression="snappy", overwrite=True, fsync=False,
        max_rows_per_file=case.rows_per_file or None, memory_limit=case.memory_limit,
        **kwargs)
    line = summary["summary"]
    if "backend cuda" not in line:
        raise RuntimeError(f"gpusort did not sort on the GPU: {line}")
    return line.split("; ", 1)[1] if "; " in line else line


def run_datafusion(binary, case, dst):
    # One file even where the others write a directory: DataFusion spreads a directory
    # output's batches over several files at once, so only a file keeps the sorted order
    # that `--check` compares against.
    sql = (f"SET gpu_sort.enabled = false; COPY (SELECT * FROM t ORDER BY {case.sql_by or case.by}) TO "
           f"'{dst}' STORED AS PARQUET OPTIONS ('format.compression' 'snappy')")
    subprocess.run([binary, "sql", sql, "--table", f"t={case.src}"], check=True,
                   capture_output=True, text=True)
    return ""


def duckdb_runs(case, dst, reps):
    import duckdb

    con = duckdb.connect()
    con.execute(f"SET threads = {os.cpu_count()}")
    if case.memory_limit:
        con.execute(f"SET memory_limit = '{case.memory_limit}B'")
        con.execute(f"SET temp_directory = '{dst}.tmp'")
    src = case.duckdb_src
    # Directory output: files of about --rows-per-file rows (DuckDB's row groups hold
    # 122 880 rows), written in order; one file otherwise.
    options = "FORMAT parquet, COMPRESSION snappy"
    if case.rows_per_file:
        options += f", ROW_GROUPS_PER_FILE {max(1, case.rows_per_file // 122880)}"

    def copy(query, dst):
        con.execute(f"COPY ({query}) TO '{dst}' ({options})")

    def measured(fn, output=None):
        """The median time as text, or why DuckDB failed (under a memory limit it may)."""
        try:
            return f"{timed(fn, reps, output)[0]:.3f} s"
        except duckdb.Error as e:
            return f"failed: {str(e).splitlines()[0][:120]}"

    ordered = f"SELECT * FROM read_parquet('{src}') ORDER BY {case.sql_by or case.by}"
    total = measured(lambda: copy(ordered, dst), dst)

    def read_sort():
        con.execute("DROP TABLE IF EXISTS s")
        con.execute(f"CREATE TEMP TABLE s AS {ordered}")

    read_sorted = measured(read_sort)
    con.execute("DROP TABLE IF EXISTS s")
    plain = f"SELECT * FROM read_parquet('{src}')"
    read_write = measured(lambda: copy(plain, dst + ".plain"), dst + ".plain")
    return total, (f"read+sort into a temp table {read_sorted}; "
                   f"read+write without sort {read_write}; DuckDB {duckdb.__version__}")


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
    ap.add_argument("--hits", type=int, metavar="ROWS",
                    help="sort a generated table shaped like ClickBench hits of ROWS rows")
    ap.add_argument("--memory-limit", help="gpusort's --memory-limit and DuckDB's, e.g. 4G")
    ap.add_argument("--python", action="append", default=[], metavar="OPTIONS",
                    help="also time `gpusort.sort_parquet(..., fsync=False, OPTIONS)` in this "
                         "process (OPTIONS: space-separated key=value, may be empty); "
                         "repeatable")
    ap.add_argument("--variant", action="append", default=[], metavar="ARGS",
                    help="also time `gpusort --no-fsync ARGS` (e.g. \"--key-ranges off\"); "
                         "repeatable")
    ap.add_argument("--check", action="store_true",
                    help="compare gpusort's output with DataFusion's, row for row")
    args = ap.parse_args()
    os.makedirs(args.dir, exist_ok=True)
    if args.hits:
        src = os.path.join(args.dir, "hits.parquet")
        case = Case(src=src, duckdb_src=src, dst=os.path.join(args.dir, "hits_sorted.parquet"),
                    by="EventTime, WatchID", rows_per_file=None,
                    sql_by='"EventTime", "WatchID"')
        start = time.perf_counter()
        generate_hits(src, args.hits, args.seed)
        print(f"generated a hits-shaped table: {args.hits} rows, 105 columns, "
              f"{os.path.getsize(src) / 2**20:.0f} MiB, in {time.perf_counter() - start:.1f} s",
              flush=True)
    elif args.lineitem:
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
    case.memory_limit = args.memory_limit
    skip = set(filter(None, args.skip.split(",")))
    rows = []
    for name, engine, fn in [
        # The default backend, as users run it (its device opens while the job plans and
        # scans); the summary must say it sorted on the GPU.
        ("gpusort (cuda)", "gpusort",
         lambda: run_gpusort(args.gpusort, case, case.output("gpusort"), "auto")),
        # Without the flush to disk before the rename, as DuckDB's COPY leaves its output.
        ("gpusort --no-fsync", "gpusort-nofsync",
         lambda: run_gpusort(args.gpusort, case, case.output("gpusort-nofsync"), "auto",
                             "--no-fsync")),
        ("gpusort (cpu backend)", "gpusort-cpu",
         lambda: run_gpusort(args.gpusort, case, case.output("gpusort-cpu"), "cpu")),
        ("DataFusion 55 alone, no limit", "datafusion",
         lambda: run_datafusion(args.gpusort, case, case.output("datafusion"))),
    ] + [
        # The same job with other options, in the same run (as many as asked for).
        (f"gpusort --no-fsync {extra}", f"gpusort-variant{i}",
         lambda extra=extra, i=i: run_gpusort(args.gpusort, case,
                                              case.output(f"gpusort-variant{i}"), "auto",
                                              "--no-fsync", *extra.split()))
        for i, extra in enumerate(args.variant)
    ] + [
        (f"gpusort (python, in-process) {options}".rstrip(), f"gpusort-python{i}",
         lambda options=options, i=i: run_python(case, case.output(f"gpusort-python{i}"),
                                                 options))
        for i, options in enumerate(args.python)
    ]:
        if name.split(" ")[0].lower() in skip or name in skip:
            continue
        try:
            seconds, note = timed(fn, args.reps, case.output(engine))
        except subprocess.CalledProcessError as e:
            print(f"{name}: failed: {e.stderr.strip()[-300:]}", flush=True)
            continue
        rows.append((name, seconds, note))
        print(f"{name}: {seconds:.3f} s {note}", flush=True)
    if args.check:
        ours = [case.output(e) for e in ("gpusort", "gpusort-cpu") if os.path.exists(case.output(e))]
        for output in ours:
            print(f"{os.path.basename(output)} against DataFusion's "
                  f"{same_rows(output, case.output('datafusion'), case.by)}", flush=True)
    if "duckdb" not in skip:
        total, note = duckdb_runs(case, case.output("duckdb"), args.reps)
        print(f"DuckDB: {total} {note}", flush=True)
        if not total.startswith("failed"):
            rows.append(("DuckDB", float(total.split()[0]), note))
    print()
    print(f"| engine | s (median of {args.reps}) | vs gpusort (cuda) | breakdown |")
    print("| --- | ---: | ---: | --- |")
    base = rows[0][1] if rows else 1.0
    for name, seconds, note in rows:
        print(f"| {name} | {seconds:.3f} | {seconds / base:.2f}x | {note} |")


if __name__ == "__main__":
    main()
