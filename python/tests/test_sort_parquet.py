"""gpusort.sort_parquet: the `gpusort sort` pipeline from Python; its output, its summary
and its errors."""

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import gpusort
from conftest import assert_same


def expected(reference, parquet_dir, order_by):
    reference.register_parquet("t", str(parquet_dir))
    return reference.sql(f"SELECT * FROM t ORDER BY {order_by}").to_arrow_table()


def test_output_equals_datafusion_and_declares_its_order(reference, parquet_dir, tmp_path):
    out = tmp_path / "sorted.parquet"
    summary = gpusort.sort_parquet(parquet_dir, out, by="s DESC NULLS LAST, f", row_group_rows=3000)
    # Ties of (s, f) keep the input order, which `row` numbers; DataFusion promises no
    # order for ties, so its answer is asked for with `row` as the last key.
    theirs = expected(reference, parquet_dir, "s DESC NULLS LAST, f, row")
    assert_same(pq.read_table(out), theirs)
    assert summary["rows"] == theirs.num_rows
    assert summary["files"] == [str(out)]
    assert summary["output_bytes"] == out.stat().st_size
    assert summary["backend"] in ("cuda", "cpu")
    assert summary["summary"].startswith(f"sorted {theirs.num_rows} rows")
    assert set(summary["stages"]) == {"plan", "read_and_sort", "sort", "write"}
    meta = pq.ParquetFile(out).metadata
    assert meta.num_row_groups == -(-theirs.num_rows // 3000)
    sorting = meta.row_group(0).sorting_columns
    assert [(c.column_index, c.descending, c.nulls_first) for c in sorting] == [
        (3, True, False),
        (2, False, False),
    ]


def test_directory_output_limit_and_key_list(reference, parquet_dir, tmp_path):
    out = tmp_path / "parts"
    summary = gpusort.sort_parquet(
        [str(p) for p in sorted(parquet_dir.iterdir())],
        out,
        by=["k DESC", "row"],
        limit=5000,
        max_rows_per_file=2000,
        compression="snappy",
        memory_limit="64M",
    )
    files = sorted(out.iterdir())
    assert [str(f) for f in files] == summary["files"]
    assert [pq.ParquetFile(f).metadata.num_rows for f in files] == [2000, 2000, 1000]
    theirs = expected(reference, parquet_dir, "k DESC, row").slice(0, 5000)
    assert_same(pa.concat_tables(pq.read_table(f) for f in files), theirs)


def test_progress_callback_sees_the_job(parquet_dir, tmp_path):
    seen = []
    summary = gpusort.sort_parquet(parquet_dir, tmp_path / "o.parquet", by="f", progress=seen.append)
    assert seen, "the callback is called at least once"
    keys = {"total_rows", "read_rows", "sorted_rows", "written_rows", "input_bytes",
            "read_bytes", "sorted_bytes", "written_bytes"}
    assert all(set(s) == keys for s in seen)
    assert all(s["written_rows"] <= summary["rows"] for s in seen)


@pytest.mark.parametrize(
    "change, message",
    [
        (dict(by="nope"), "nope"),
        (dict(by="k SIDEWAYS"), "SIDEWAYS"),
        (dict(compression="bzip9"), "bzip9"),
        (dict(inputs="/nonexistent/in.parquet"), "nonexistent"),
    ],
)
def test_errors_raise_with_the_pipeline_message(parquet_dir, tmp_path, change, message):
    args = dict(inputs=parquet_dir, output=tmp_path / "o.parquet", by="k")
    args.update(change)
    with pytest.raises(gpusort.GpuSortError, match=message):
        gpusort.sort_parquet(**args)
    assert not (tmp_path / "o.parquet").exists()


def test_existing_output_is_kept_unless_overwrite(parquet_dir, tmp_path):
    out = tmp_path / "o.parquet"
    out.write_bytes(b"precious")
    with pytest.raises(gpusort.GpuSortError, match="exists"):
        gpusort.sort_parquet(parquet_dir, out, by="k")
    assert out.read_bytes() == b"precious"
    gpusort.sort_parquet(parquet_dir, out, by="k", overwrite=True)
    assert pq.ParquetFile(out).metadata.num_rows > 0


def test_an_output_not_flushed_to_disk_is_the_same_file(parquet_dir, tmp_path):
    synced, unsynced = tmp_path / "a.parquet", tmp_path / "b.parquet"
    gpusort.sort_parquet(parquet_dir, synced, by="k")
    summary = gpusort.sort_parquet(parquet_dir, unsynced, by="k", fsync=False)
    assert summary["rows"] == pq.ParquetFile(synced).metadata.num_rows
    assert unsynced.read_bytes() == synced.read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.parquet", "b.parquet", "t"]


def test_bad_argument_values_raise_value_errors(parquet_dir, tmp_path):
    with pytest.raises(ValueError, match="backend"):
        gpusort.sort_parquet(parquet_dir, tmp_path / "o.parquet", by="k", backend="abacus")
    with pytest.raises(ValueError, match="unit"):
        gpusort.sort_parquet(parquet_dir, tmp_path / "o.parquet", by="k", memory_limit="big")
    with pytest.raises(ValueError, match="page_encoding"):
        gpusort.sort_parquet(parquet_dir, tmp_path / "o.parquet", by="k", page_encoding="fpga")
    with pytest.raises(ValueError, match="key_ranges"):
        gpusort.sort_parquet(parquet_dir, tmp_path / "o.parquet", by="k", key_ranges="many")
    for devices in ["gpus", 0, [40]]:
        with pytest.raises(ValueError, match="devices"):
            gpusort.sort_parquet(parquet_dir, tmp_path / "o.parquet", by="k", devices=devices)


@pytest.mark.parametrize("devices", ["all", 1, [0], [0, 1]])
def test_a_device_set_sorts_like_any_other(reference, parquet_dir, tmp_path, devices):
    # Without a GPU every set sorts on the CPU backend; on a GPU host, on those devices.
    out = tmp_path / "o.parquet"
    gpusort.sort_parquet(parquet_dir, out, by="f DESC, k", devices=devices)
    assert_same(pq.read_table(out), expected(reference, parquet_dir, "f DESC, k, row"))


def test_key_ranges_sort_like_one_sort(reference, parquet_dir, tmp_path):
    out = tmp_path / "ranged.parquet"
    summary = gpusort.sort_parquet(parquet_dir, out, by="f DESC, k", key_ranges=5)
    assert "key ranges" in summary["algorithm"], summary["algorithm"]
    theirs = expected(reference, parquet_dir, "f DESC, k, row")
    assert_same(pq.read_table(out), theirs)


def test_pages_asked_of_the_device_make_the_same_file_content(parquet_dir, tmp_path):
    host, device = tmp_path / "h.parquet", tmp_path / "d.parquet"
    gpusort.sort_parquet(parquet_dir, host, by="k", compression="snappy")
    summary = gpusort.sort_parquet(
        parquet_dir, device, by="k", compression="snappy", page_encoding="device"
    )
    assert_same(pq.read_table(device), pq.read_table(host))
    # Column chunks, each counted once: on the device, or on the host where it could not.
    meta = pq.ParquetFile(device).metadata
    chunks = summary["device_page_chunks"] + summary["device_page_chunks_on_host"]
    assert 0 <= chunks <= meta.num_row_groups * meta.num_columns


def test_progress_line_is_drawn_on_stderr_and_cleared(parquet_dir, tmp_path, capsys):
    gpusort.sort_parquet(parquet_dir, tmp_path / "o.parquet", by="k", progress=True)
    err = capsys.readouterr().err
    assert "read " in err and "rows/s" not in err and "/s, " in err
    assert err.endswith("\r\x1b[K"), "the line is cleared at the end"


def test_columns_that_differ_are_refused_or_merged_by_name(tmp_path):
    a, b = tmp_path / "a.parquet", tmp_path / "b.parquet"
    pq.write_table(pa.table({"k": [3, 1], "x": [30, 10]}), a)
    pq.write_table(pa.table({"y": ["why"], "k": [2]}), b)
    out = tmp_path / "out.parquet"
    with pytest.raises(gpusort.GpuSortError, match="union_by_name=True"):
        gpusort.sort_parquet([a, b], out, by="k")
    assert not out.exists()
    gpusort.sort_parquet([a, b], out, by="k", union_by_name=True)
    got = pq.read_table(out)
    assert got.column_names == ["k", "x", "y"]
    assert got.column("k").to_pylist() == [1, 2, 3]
    assert got.column("x").to_pylist() == [10, None, 30]
    assert got.column("y").to_pylist() == [None, "why", None]


def test_the_output_is_never_an_input_and_spills_go_where_asked(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    pq.write_table(pa.table({"k": list(range(200_000, 0, -1))}), data / "a.parquet")
    out = data / "sorted.parquet"
    spill = tmp_path / "spill"
    spill.mkdir()
    gpusort.sort_parquet(data, out, by="k", spill_dir=spill, max_spill="1G")
    with pytest.raises(gpusort.GpuSortError, match="would also be read as an input"):
        gpusort.sort_parquet(data, out, by="k", overwrite=True)
    assert pq.read_table(out).num_rows == 200_000
    assert list(spill.iterdir()) == []
    with pytest.raises(gpusort.GpuSortError, match="--spill-dir"):
        gpusort.sort_parquet(data / "a.parquet", tmp_path / "o.parquet", by="k",
                             spill_dir=tmp_path / "nowhere")
