"""gpusort in datafusion-python's own SessionContext (``gpusort.Extension``): plans, results
equal to datafusion-python's without gpusort, settings, and what cannot cross."""

import subprocess
import sys
import textwrap

import numpy as np
import pyarrow as pa
import pyarrow.dataset as pads
import pytest

import gpusort
from conftest import assert_same

datafusion = pytest.importorskip("datafusion")

SETTINGS = {"gpu_sort.min_rows": 0, "gpu_sort.topk": True}


def gpusort_context(settings=SETTINGS, partitions=None):
    ext = gpusort.Extension(settings)
    config = datafusion.SessionConfig().with_extension(ext).with_information_schema(True)
    if partitions:
        config = config.with_target_partitions(partitions)
    return datafusion.SessionContext(config).with_extensions(ext)


def physical_plan(ctx, query):
    rows = ctx.sql(f"EXPLAIN {query}").to_pydict()
    return dict(zip(rows["plan_type"], rows["plan"]))["physical_plan"]


def register_everywhere(contexts, register):
    for c in contexts:
        register(c)


QUERIES = {
    "order_by": "SELECT * FROM t ORDER BY k DESC NULLS FIRST, f, row",
    # An integer key: DataFusion 55's TopK over Parquet drops rows whose float key is NaN
    # (its dynamic filter prunes by statistics that leave NaN out), so the oracle would be
    # wrong there.
    "limit": "SELECT * FROM t ORDER BY k DESC NULLS FIRST, row LIMIT 777",
    "window": (
        "SELECT row, rank() OVER (PARTITION BY g ORDER BY k NULLS LAST, row) AS r, "
        "sum(k) OVER (PARTITION BY g ORDER BY row ROWS BETWEEN 3 PRECEDING AND CURRENT ROW) "
        "AS s, lag(f) OVER (PARTITION BY g ORDER BY row) AS l FROM t ORDER BY row"
    ),
    "no_partition_window": (
        "SELECT row, row_number() OVER (ORDER BY k NULLS FIRST, row) AS n, "
        "count(k) OVER (ORDER BY row ROWS BETWEEN 5 PRECEDING AND 2 FOLLOWING) AS c "
        "FROM t ORDER BY row"
    ),
}


@pytest.fixture
def sources(tmp_path, table, parquet_dir):
    csv_path = tmp_path / "t.csv"
    import pyarrow.csv as pacsv

    pacsv.write_csv(table.drop_columns(["s"]), csv_path)
    return {
        "parquet": lambda c: c.register_parquet("t", str(parquet_dir)),
        "csv": lambda c: c.register_csv("t", str(csv_path)),
        "from_arrow": lambda c: c.from_arrow(table, name="t"),
        "from_pandas": lambda c: c.from_pandas(table.to_pandas(), name="t"),
    }


@pytest.mark.parametrize("source", ["parquet", "csv", "from_arrow", "from_pandas"])
@pytest.mark.parametrize("query", sorted(QUERIES))
def test_results_equal_datafusion_python_without_gpusort(sources, source, query, reference):
    if source == "from_pandas":
        pytest.importorskip("pandas")
    sql = QUERIES[query]
    ctx = gpusort_context()
    register_everywhere([ctx, reference], sources[source])
    plan = physical_plan(ctx, sql)
    assert "GpuSortExec" in plan, plan
    if "window" in query:
        assert "SortedWindowExec" in plan, plan
    # What the host runs: gpusort's part as leaves that run in gpusort's library.
    frame = ctx.sql(sql)
    assert "GpuSortSubplanExec" in frame.execution_plan().display_indent()
    assert_same(frame.to_arrow_table(), reference.sql(sql).to_arrow_table())
    assert gpusort._gpusort.unread_plan_references() == 0


def test_explain_says_why_a_sort_is_kept(table):
    ctx = gpusort_context({"gpu_sort.min_rows": 10_000_000})
    ctx.from_arrow(table, name="t")
    plan = physical_plan(ctx, "SELECT * FROM t ORDER BY f, row")
    assert "GpuSortExec" not in plan, plan
    assert "gpusort: kept" in plan, plan


def test_set_and_show_gpu_sort_settings(table):
    ctx = gpusort_context()
    ctx.from_arrow(table, name="t")
    ctx.sql("SET gpu_sort.enabled = false")
    assert ctx.sql("SHOW gpu_sort.enabled").to_pydict()["value"] == ["false"]
    plan = physical_plan(ctx, "SELECT * FROM t ORDER BY f, row")
    assert "GpuSortExec" not in plan and "SortExec" in plan, plan
    ctx.sql("SET gpu_sort.enabled = true")
    assert "GpuSortExec" in physical_plan(ctx, "SELECT * FROM t ORDER BY f, row")
    names = ctx.sql(
        "SELECT name FROM information_schema.df_settings WHERE name LIKE 'gpu_sort.%'"
    ).to_pydict()["name"]
    assert set(names) == set(gpusort.Extension().settings()), names
    # DataFusion's FFI namespace takes any name: one that is no setting is passed over,
    # and EXPLAIN says so.
    ctx.sql("SET gpu_sort.min_row = 0")
    assert "gpusort: ignored gpu_sort.min_row" in physical_plan(ctx, "SELECT * FROM t ORDER BY f")
    # A value that does not parse fails the queries that sort, until it is set again.
    ctx.sql("SET gpu_sort.backend = 'tpu'")
    with pytest.raises(Exception, match="tpu"):
        ctx.sql("SELECT * FROM t ORDER BY f").collect()
    assert ctx.sql("SELECT count(*) AS n FROM t").to_pydict()["n"] == [table.num_rows]
    ctx.sql("SET gpu_sort.backend = 'auto'")
    assert ctx.sql("SELECT * FROM t ORDER BY f").count() == table.num_rows


def test_extension_settings_apply_without_session_config(table):
    ext = gpusort.Extension({"gpu_sort.enabled": False})
    ctx = datafusion.SessionContext().with_extensions(ext)
    ctx.from_arrow(table, name="t")
    assert "GpuSortExec" not in physical_plan(ctx, "SELECT * FROM t ORDER BY f, row")
    with pytest.raises(Exception, match="gpu_sort"):
        ctx.sql("SET gpu_sort.enabled = true")
    with pytest.raises(gpusort.GpuSortError, match="SessionConfig"):
        gpusort.Extension({"datafusion.execution.batch_size": 10})
    with pytest.raises(gpusort.GpuSortError, match="no setting"):
        gpusort.Extension({"gpu_sort.nope": 1})


def test_results_stream_back_as_batches(table, reference):
    ctx = gpusort_context(partitions=4)
    sql = "SELECT row, f FROM t ORDER BY f, row"
    for c in (ctx, reference):
        c.from_arrow(table, name="t")
    batches = [b.to_pyarrow() for b in ctx.sql(sql).execute_stream()]
    assert len(batches) > 1
    assert_same(pa.Table.from_batches(batches), reference.sql(sql).to_arrow_table())


def test_explain_analyze_runs_in_gpusort(table):
    ctx = gpusort_context()
    ctx.from_arrow(table, name="t")
    rows = ctx.sql("EXPLAIN ANALYZE SELECT * FROM t ORDER BY f, row").to_pydict()
    text = "\n".join(rows["plan"])
    assert "GpuSortExec" in text and "output_rows" in text, text


def test_python_udfs_and_datasets(table, reference):
    ctx = gpusort_context()
    double = datafusion.udf(
        lambda a: pa.compute.multiply(a, 2), [pa.int64()], pa.int64(), "immutable", name="double"
    )
    for c in (ctx, reference):
        c.from_arrow(table, name="t")
        c.register_udf(double)
    sql = "SELECT double(row) AS d, k FROM t ORDER BY double(k) NULLS FIRST, d"
    assert "GpuSortExec" in physical_plan(ctx, sql)
    assert_same(ctx.sql(sql).to_arrow_table(), reference.sql(sql).to_arrow_table())

    # A pyarrow dataset scans in datafusion-python's own (Python) node, which protobuf
    # cannot write: the query keeps DataFusion's sort and says so.
    ctx.register_dataset("d", pads.dataset(table))
    reference.register_dataset("d", pads.dataset(table))
    sql = "SELECT * FROM d ORDER BY f, row"
    plan = physical_plan(ctx, sql)
    assert "kept DataFusion's sorts" in plan, plan
    assert_same(ctx.sql(sql).to_arrow_table(), reference.sql(sql).to_arrow_table())


def test_copy_is_refused_with_a_message_and_the_session_goes_on(tmp_path, table):
    ctx = gpusort_context()
    ctx.from_arrow(table, name="t")
    with pytest.raises(Exception, match="file_format"):
        ctx.sql(f"COPY (SELECT * FROM t ORDER BY f) TO '{tmp_path / 'o.parquet'}'").collect()
    assert ctx.sql("SELECT count(*) AS n FROM t").to_pydict()["n"] == [table.num_rows]


def test_many_partitions_and_repartitions_in_a_fresh_process(tmp_path, table):
    # Runs in a subprocess: a tokio runtime mix-up between the two libraries would abort
    # the process rather than raise.
    import pyarrow.parquet as pq

    pq.write_table(table, tmp_path / "t.parquet", row_group_size=1000)
    script = textwrap.dedent(
        f"""
        import datafusion, gpusort
        ext = gpusort.Extension({{"gpu_sort.min_rows": 0}})
        config = datafusion.SessionConfig().with_extension(ext).with_target_partitions(8)
        ctx = datafusion.SessionContext(config).with_extensions(ext)
        ctx.register_parquet("t", r"{tmp_path / 't.parquet'}")
        df = ctx.sql("SELECT g, k, row, rank() OVER (PARTITION BY k ORDER BY row) r "
                     "FROM (SELECT * FROM t WHERE row % 3 <> 1) ORDER BY row")
        n = df.count()
        print("rows", n)
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    expected = sum(1 for r in range(table.num_rows) if r % 3 != 1)
    assert f"rows {expected}" in done.stdout, done.stdout
