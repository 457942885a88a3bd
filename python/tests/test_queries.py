"""SQL through gpusort's session equals datafusion-python's own answers, and Arrow data
crosses between the two without copies."""

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import gpusort
from conftest import assert_same

QUERIES = [
    "SELECT * FROM t ORDER BY k, row",
    "SELECT * FROM t ORDER BY k DESC NULLS LAST, f, row",
    "SELECT * FROM t ORDER BY f DESC, s NULLS FIRST, row",
    "SELECT * FROM t ORDER BY s, g DESC, row",
    "SELECT * FROM t ORDER BY k NULLS FIRST, s DESC, f, row LIMIT 777",
    "SELECT g, k, row, ROW_NUMBER() OVER (PARTITION BY g ORDER BY k, row) AS n FROM t ORDER BY g, n",
    "SELECT g, row, SUM(k) OVER (PARTITION BY g ORDER BY f, row) AS running FROM t ORDER BY g, row",
    "SELECT s, COUNT(*) AS c FROM t GROUP BY s ORDER BY c DESC, s",
]


def answer(frame) -> pa.Table:
    return frame.to_arrow_table()


@pytest.mark.parametrize("query", QUERIES)
def test_arrow_table_queries_equal_datafusion_python(ctx, reference, table, query):
    ctx.register_arrow("t", table)
    reference.register_record_batches("t", [table.to_batches()])
    assert_same(answer(ctx.sql(query)), reference.sql(query).to_arrow_table())


@pytest.mark.parametrize("query", QUERIES)
def test_parquet_queries_equal_datafusion_python(ctx, reference, parquet_dir, query):
    ctx.register_parquet("t", parquet_dir)
    reference.register_parquet("t", str(parquet_dir))
    assert_same(answer(ctx.sql(query)), reference.sql(query).to_arrow_table())


def test_sorts_run_on_gpusort_and_explain_says_so(ctx, table):
    ctx.register_arrow("t", table)
    text = ctx.explain("SELECT * FROM t ORDER BY f, row")
    assert "GpuSortExec" in text
    assert "gpusort: replaced" in text
    assert f"(backend {ctx.backend})" in text
    ctx.set("gpu_sort.enabled", False)
    text = ctx.sql("SELECT * FROM t ORDER BY f, row").explain()
    assert "GpuSortExec" not in text
    assert "gpusort: kept" in text


def test_ties_keep_the_input_order(ctx, table):
    ctx.register_arrow("t", table)
    out = ctx.sql("SELECT k, row FROM t ORDER BY k").to_arrow_table().to_pydict()
    last = {}
    for k, row in zip(out["k"], out["row"]):
        assert last.get(k, -1) < row, f"tie of k={k} out of input order"
        last[k] = row


def test_copy_writes_sorted_parquet(ctx, reference, table, tmp_path):
    ctx.register_arrow("t", table)
    target = tmp_path / "out.parquet"
    ctx.sql(f"COPY (SELECT * FROM t ORDER BY s DESC, f, row) TO '{target}'").to_arrow_table()
    reference.register_record_batches("t", [table.to_batches()])
    theirs = reference.sql("SELECT * FROM t ORDER BY s DESC, f, row").to_arrow_table()
    assert_same(pq.read_table(target), theirs)


def test_streaming_result_equals_collected(ctx, table):
    ctx.register_arrow("t", table)
    frame = ctx.sql("SELECT * FROM t ORDER BY f DESC, row")
    streamed = pa.RecordBatchReader.from_stream(frame).read_all()
    assert_same(streamed, frame.to_arrow_table())
    assert frame.count() == table.num_rows


def test_requested_schema_is_honoured(ctx, table):
    ctx.register_arrow("t", table)
    frame = ctx.sql("SELECT s, row FROM t ORDER BY s, row")
    wanted = pa.schema([("s", pa.large_string()), ("row", pa.int64())])
    capsule = frame.__arrow_c_stream__(wanted.__arrow_c_schema__())
    got = pa.RecordBatchReader._import_from_c_capsule(capsule).read_all()
    assert got.schema == wanted
    assert got.num_rows == table.num_rows


def test_dataframes_cross_both_ways(ctx, reference, table):
    # datafusion-python's DataFrame registered in gpusort's session ...
    reference.register_record_batches("src", [table.to_batches()])
    ctx.register_arrow("t", reference.sql("SELECT * FROM src WHERE k > 3"))
    ours = ctx.sql("SELECT * FROM t ORDER BY f, row")
    # ... and gpusort's sorted DataFrame read by datafusion-python, in one partition (its
    # from_arrow spreads the batches over target_partitions, read back in any order).
    datafusion = pytest.importorskip("datafusion")
    one = datafusion.SessionContext(datafusion.SessionConfig().with_target_partitions(1))
    back = one.from_arrow(ours).to_arrow_table()
    theirs = reference.sql("SELECT * FROM src WHERE k > 3 ORDER BY f, row").to_arrow_table()
    assert_same(back, theirs)


def test_settings_round_trip(ctx):
    ctx.set("gpu_sort.min_rows", 1234)
    assert ctx.settings()["gpu_sort.min_rows"] == "1234"
    ctx.sql("SET gpu_sort.algorithm = 'onesweep'")
    assert ctx.settings()["gpu_sort.algorithm"] == "onesweep"
    assert ctx.backend in ("cuda", "cpu")
    assert ctx.gpu_in_use == (ctx.backend == "cuda")


def test_settings_are_shown_as_datafusion_shows_its_own(ctx):
    ctx.sql("SET gpu_sort.device_memory_limit = '50%'")
    shown = ctx.sql("SHOW gpu_sort.device_memory_limit").to_arrow_table().to_pylist()
    assert shown == [{"name": "gpu_sort.device_memory_limit", "value": "50%"}]
    listed = {
        row["name"]: row["value"] for row in ctx.sql("SHOW ALL").to_arrow_table().to_pylist()
    }
    ours = {k: v for k, v in ctx.settings().items() if k.startswith("gpu_sort.")}
    assert len(ours) >= 16
    assert {k: listed.get(k) for k in ours} == ours


def test_gpu_status_says_why_not():
    status = gpusort.gpu_status()
    assert set(status) == {"gpu", "backend", "devices", "reason"}
    assert status["gpu"] == (status["reason"] is None)
    # The usable GPUs: at least one where there is a GPU, none where there is not.
    assert (len(status["devices"]) > 0) == status["gpu"], status


def test_memory_limited_session_spills_and_agrees(reference, table):
    big = pa.concat_tables([table] * 10)
    ctx = gpusort.SessionContext({"gpu_sort.min_rows": 0}, memory_limit="8M")
    ctx.register_arrow("t", big)
    reference.register_record_batches("t", [big.to_batches()])
    query = "SELECT * FROM t ORDER BY s, f DESC, row"
    assert_same(ctx.sql(query).to_arrow_table(), reference.sql(query).to_arrow_table())


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda c: c.sql("SELECT * FROM missing ORDER BY 1"), "missing"),
        (lambda c: c.sql("SELEC 1"), "SELEC"),
        (lambda c: c.set("gpu_sort.backend", "tpu"), "tpu"),
        (lambda c: c.set("gpu_sort.no_such_option", "1"), "no_such_option"),
        (lambda c: c.register_parquet("p", "/nonexistent/dir/x.parquet"), "nonexistent"),
    ],
)
def test_errors_are_python_exceptions_with_the_message(ctx, call, message):
    with pytest.raises(gpusort.GpuSortError, match=message):
        call(ctx)


def test_bad_arguments_raise_not_crash(ctx):
    with pytest.raises(TypeError, match="__arrow_c_stream__"):
        ctx.register_arrow("t", 42)
    with pytest.raises(ValueError, match="one byte"):
        ctx.register_csv("c", "x.csv", delimiter=";;")
    with pytest.raises(ValueError):
        gpusort.SessionContext(memory_limit="lots")
