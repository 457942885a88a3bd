"""Fixtures: a gpusort session that sorts everything on gpusort's operator, datafusion-python
as the oracle, and seeded tables with ties, nulls, floats and strings."""

import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import gpusort

SEED = int(os.environ.get("GPUSORT_SEED", "42"))


def pytest_report_header(config):
    return f"GPUSORT_SEED={SEED} (set it to replay); gpu: {gpusort.gpu_status()}"


@pytest.fixture
def ctx():
    # min_rows 0: small test tables sort on gpusort's operator too. The backend is auto:
    # the GPU where there is one, the CPU backend elsewhere.
    return gpusort.SessionContext({"gpu_sort.min_rows": 0, "gpu_sort.topk": True})


@pytest.fixture
def reference():
    datafusion = pytest.importorskip("datafusion")
    return datafusion.SessionContext()


def make_table(rows: int, seed: int = SEED) -> pa.Table:
    """Keys with many ties and nulls, every float special value, strings with shared
    prefixes, and a row number to see the input order."""
    rng = np.random.default_rng(seed)
    floats = rng.standard_normal(rows)
    specials = np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0])
    pick = rng.random(rows) < 0.2
    floats[pick] = rng.choice(specials, pick.sum())
    words = np.array(["", "a", "ab", "abc", "prefix-long-common-0", "prefix-long-common-1", "zz"])
    strings = rng.choice(words, rows).astype(object)
    strings[rng.random(rows) < 0.1] = None
    small = rng.integers(0, 10, rows)
    return pa.table(
        {
            "g": pa.array(rng.integers(0, 5, rows), pa.int32()),
            "k": pa.array(small, mask=rng.random(rows) < 0.1),
            "f": pa.array(floats),
            "s": pa.array(strings, pa.string()),
            "row": pa.array(np.arange(rows), pa.int64()),
        }
    )


@pytest.fixture
def table():
    return make_table(20_000)


@pytest.fixture
def parquet_dir(tmp_path, table):
    """The table as three Parquet files of several row groups, in row order by name."""
    directory = tmp_path / "t"
    directory.mkdir()
    third = table.num_rows // 3
    for i, start in enumerate([0, third, 2 * third]):
        end = table.num_rows if i == 2 else start + third
        pq.write_table(table.slice(start, end - start), directory / f"part-{i}.parquet",
                       row_group_size=2_000)
    return directory


def assert_same(ours: pa.Table, theirs: pa.Table):
    """Equal row for row; floats compared by their bits (NaN equals NaN of the same sign,
    -0.0 differs from +0.0), strings whatever their Arrow layout (views or offsets)."""
    assert ours.column_names == theirs.column_names
    assert ours.num_rows == theirs.num_rows
    for name in theirs.column_names:
        a = ours.column(name).combine_chunks()
        b = theirs.column(name).combine_chunks()
        if a.type != b.type:
            a = a.cast(b.type)
        if pa.types.is_floating(b.type):
            assert a.is_null().equals(b.is_null()), f"nulls of {name} differ"
            bits = [np.asarray(x.fill_null(0).to_numpy()).view(np.uint64) for x in (a, b)]
            bad = np.flatnonzero(bits[0] != bits[1])
            assert bad.size == 0, f"{name} differs first at row {bad[0] if bad.size else None}"
        else:
            assert a.equals(b), f"column {name} differs:\n{a.slice(0, 8)}\n{b.slice(0, 8)}"
