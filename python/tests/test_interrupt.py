"""Ctrl-C stops work cleanly: the job or query is cancelled before KeyboardInterrupt
reaches Python, nothing partial is left behind, and the session keeps working. While work
runs, the GIL is free for other Python threads."""

import os
import signal
import threading
import time

import pyarrow as pa
import pytest

import gpusort


def test_sigint_during_sort_parquet_leaves_nothing(parquet_dir, tmp_path):
    out = tmp_path / "out"
    out_dir_before = set(tmp_path.iterdir())

    def interrupt(counts):
        os.kill(os.getpid(), signal.SIGINT)

    with pytest.raises(KeyboardInterrupt):
        gpusort.sort_parquet(parquet_dir, out / "o.parquet", by="k", progress=interrupt)
    assert set(tmp_path.iterdir()) == out_dir_before
    assert not out.exists()
    # The next job runs normally.
    summary = gpusort.sort_parquet(parquet_dir, tmp_path / "after.parquet", by="k")
    assert summary["rows"] > 0


def test_sigint_cancels_a_running_query(ctx):
    # A top-k over two billion generated rows runs for far longer than the interrupt takes.
    ctx.set("gpu_sort.topk", False)
    query = "SELECT value FROM generate_series(1, 2000000000) ORDER BY value DESC LIMIT 3"
    timer = threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT))
    started = time.monotonic()
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            ctx.sql(query).to_arrow_table()
    finally:
        timer.cancel()
    assert time.monotonic() - started < 30
    small = ctx.sql("SELECT value FROM generate_series(1, 5) ORDER BY value DESC").to_arrow_table()
    assert small.column(0).to_pylist() == [5, 4, 3, 2, 1]


def test_sigint_stops_a_stream_before_its_first_batch(ctx):
    # The sort's first batch comes only once 200 million rows are sorted: seconds later
    # than the interrupt (and within memory should it not come).
    query = "SELECT value FROM generate_series(1, 200000000) ORDER BY value DESC"
    reader = pa.RecordBatchReader.from_stream(ctx.sql(query))
    timer = threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT))
    started = time.monotonic()
    timer.start()
    try:
        # An Arrow C stream carries a message only: the consumer raises its own error.
        with pytest.raises(Exception, match=r"stopped by a signal \(KeyboardInterrupt\)"):
            reader.read_next_batch()
    finally:
        timer.cancel()
    assert time.monotonic() - started < 30
    small = ctx.sql("SELECT value FROM generate_series(1, 3) ORDER BY value").to_arrow_table()
    assert small.column(0).to_pylist() == [1, 2, 3]


def test_gil_is_released_while_a_query_runs(ctx, table):
    ctx.register_arrow("t", pa.concat_tables([table] * 20))
    done = threading.Event()
    ticks = 0

    def query():
        ctx.sql("SELECT * FROM t ORDER BY s, f, row").to_arrow_table()
        done.set()

    worker = threading.Thread(target=query)
    worker.start()
    while not done.is_set():
        ticks += 1
        time.sleep(0.001)
    worker.join()
    assert ticks > 5, "the main thread was starved while the query ran"
