# %% [markdown]
# # 03: gpusort from Python
#
# A notebook-style script (cells marked `# %%`, run it whole or cell by cell in an editor
# that knows them): a gpusort session over Parquet files, its decisions, a window query,
# Arrow data crossing to and from datafusion-python, gpusort inside datafusion-python's own
# context, and a Parquet sort job with progress.
#
#     pip install ./python datafusion==55.0.0
#     python3 examples/03_python_sort.py [DIR]

# %%
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

import gpusort

print("GPU:", gpusort.gpu_status())
work = Path(sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="gpusort-03-"))
work.mkdir(parents=True, exist_ok=True)

# %% [markdown]
# ## Some sensor readings, as four Parquet files

# %%
rng = np.random.default_rng(3)
rows = 2_000_000
readings = pa.table(
    {
        "sensor": pa.array(rng.integers(0, 1000, rows), pa.int32()),
        "ts": pa.array(np.arange(rows) + rng.integers(-50, 50, rows), pa.int64()),
        "value": pa.array(rng.standard_normal(rows)),
        "site": pa.array(rng.choice(["north", "south", "east", "west"], rows)),
    }
)
(work / "readings").mkdir(exist_ok=True)
for i in range(4):
    part = readings.slice(i * rows // 4, rows // 4)
    pq.write_table(part, work / "readings" / f"part-{i}.parquet", row_group_size=100_000)

# %% [markdown]
# ## SQL: ORDER BY, a window, and what gpusort decided

# %%
ctx = gpusort.SessionContext()
ctx.register_parquet("readings", work / "readings")
print(ctx.explain("SELECT * FROM readings ORDER BY ts DESC, sensor"))

started = time.perf_counter()
latest = ctx.sql(
    """SELECT sensor, ts, value,
              ROW_NUMBER() OVER (PARTITION BY sensor ORDER BY ts DESC) AS recency
       FROM readings ORDER BY sensor, recency"""
).to_arrow_table()
print(f"{latest.num_rows:,} rows in {time.perf_counter() - started:.2f} s on {ctx.backend}")
print(latest.slice(0, 5))

# %% [markdown]
# ## Arrow both ways: pyarrow in, datafusion-python in and out

# %%
ctx.register_arrow("sites", pa.table({"site": ["north", "south"], "region": ["N", "S"]}))
joined = ctx.sql(
    "SELECT r.*, s.region FROM readings r JOIN sites s USING (site) ORDER BY value DESC LIMIT 3"
)
print(pa.table(joined))  # streamed through __arrow_c_stream__

try:
    import datafusion

    # One partition: datafusion-python's from_arrow spreads the batches over
    # target_partitions partitions, which would lose their order.
    theirs = datafusion.SessionContext(datafusion.SessionConfig().with_target_partitions(1))
    theirs.from_arrow(ctx.sql("SELECT * FROM readings ORDER BY ts LIMIT 1000")).show(num=3)
except ImportError:
    print("datafusion-python is not installed: skipping the interchange cell")

# %% [markdown]
# ## gpusort inside datafusion-python's own context

# %%
try:
    import datafusion

    ext = gpusort.Extension()
    config = datafusion.SessionConfig().with_extension(ext)
    theirs = datafusion.SessionContext(config).with_extensions(ext)
    theirs.register_parquet("readings", str(work / "readings"))
    query = "SELECT sensor, ts, value, rank() OVER (PARTITION BY sensor ORDER BY value DESC) AS r FROM readings"
    plan = theirs.sql(f"EXPLAIN {query}").to_pydict()["plan"][-1]
    print("\n".join(l for l in plan.splitlines() if "Gpu" in l or "SortedWindow" in l or "gpusort:" in l))
    theirs.sql(f"{query} ORDER BY r, sensor LIMIT 3").show()
except ImportError:
    print("datafusion-python is not installed: skipping the datafusion-python cell")

# %% [markdown]
# ## Sorting the files into one Parquet file, with progress

# %%
summary = gpusort.sort_parquet(
    work / "readings", work / "by_sensor.parquet", by=["sensor", "ts DESC"],
    compression="snappy", overwrite=True, progress=True,
)
print(summary["summary"])
meta = pq.ParquetFile(work / "by_sensor.parquet").metadata
print("declared order:", meta.row_group(0).sorting_columns)
