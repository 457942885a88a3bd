"""gpusort from Python: DataFusion sessions whose sorts run on an NVIDIA GPU, and the
Parquet sort pipeline of ``gpusort sort``.

    import gpusort
    ctx = gpusort.SessionContext()
    ctx.register_parquet("t", "data/")
    table = ctx.sql("SELECT * FROM t ORDER BY k").to_arrow_table()   # a pyarrow.Table

    gpusort.sort_parquet("data/", "sorted.parquet", by="ts DESC, id", memory_limit="8G")

In datafusion-python's own context (datafusion 55):

    import datafusion
    ext = gpusort.Extension()
    config = datafusion.SessionConfig().with_extension(ext)   # SET / SHOW gpu_sort.*
    ctx = datafusion.SessionContext(config).with_extensions(ext)

Without a usable GPU the same code sorts on gpusort's CPU backend (``gpu_status()`` says
which and why). Results equal DataFusion's own sort; ties keep their input order.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any, Callable, Iterable, Mapping, Optional, Union

from . import _gpusort
from ._gpusort import GpuSortError, gpu_status

__all__ = [
    "DataFrame",
    "Extension",
    "GpuSortError",
    "SessionContext",
    "gpu_status",
    "sort_parquet",
]

PathLike = Union[str, "os.PathLike[str]"]
Size = Union[int, str]


class DataFrame:
    """A planned query. Nothing runs until its rows are asked for.

    It speaks the Arrow PyCapsule stream protocol (``__arrow_c_stream__``), so
    ``pyarrow.table(df)``, ``pyarrow.RecordBatchReader.from_stream(df)``, polars, and
    datafusion-python's ``SessionContext.from_arrow`` take it without copies. That
    ``from_arrow`` spreads the batches over ``target_partitions`` partitions, read back in
    whatever order they finish: where row order matters, read it with a datafusion-python
    context of one partition (docs/python.md).
    """

    def __init__(self, inner: _gpusort.DataFrame):
        self._inner = inner

    def to_arrow_table(self):
        """Runs the query and returns its result as a ``pyarrow.Table`` (no copy of the
        result). The GIL is released while it runs; Ctrl-C cancels it."""
        import pyarrow as pa

        return pa.table(self._inner.collect())

    def to_batches(self) -> list:
        """Runs the query and returns its result as a list of ``pyarrow.RecordBatch``."""
        return self.to_arrow_table().to_batches()

    def to_pandas(self):
        """Runs the query and returns a ``pandas.DataFrame``."""
        return self.to_arrow_table().to_pandas()

    def count(self) -> int:
        """Runs the query and returns its number of rows."""
        return self._inner.count()

    def explain(self) -> str:
        """The physical plan, then one ``gpusort: ...`` line per sort: which backend
        runs it, or why DataFusion's own sort was kept."""
        return self._inner.explain()

    def __arrow_c_stream__(self, requested_schema: Any = None):
        """Starts the query and streams its batches as the consumer reads them."""
        return self._inner.__arrow_c_stream__(requested_schema)

    def __repr__(self) -> str:
        return "gpusort.DataFrame(...)"


class SessionContext:
    """A DataFusion 55 session with gpusort's rule: ``ORDER BY``, window sorts,
    ``ORDER BY .. LIMIT`` and ``COPY (SELECT .. ORDER BY ..)`` sort on gpusort's operator.

    ``settings`` sets options by name, ``gpu_sort.*`` (``gpu_sort.backend``: ``auto``,
    ``cuda`` or ``cpu``; see the README) as well as DataFusion's own
    (``datafusion.execution.target_partitions``, ...). ``memory_limit`` (bytes or a size
    such as ``"4G"``) bounds the session's memory pool; larger sorts spill to disk.
    """

    def __init__(
        self,
        settings: Optional[Mapping[str, Any]] = None,
        *,
        memory_limit: Optional[Size] = None,
    ):
        strings = {k: _setting_text(v) for k, v in (settings or {}).items()}
        self._inner = _gpusort.SessionContext(strings, memory_limit)

    def sql(self, query: str) -> DataFrame:
        """Plans ``query``; statements such as ``SET``, ``CREATE`` run at once."""
        return DataFrame(self._inner.sql(query))

    def register_parquet(self, name: str, path: PathLike) -> None:
        """Registers Parquet files (a file, a directory or a glob) as table ``name``."""
        self._inner.register_parquet(name, os.fspath(path))

    def register_csv(
        self, name: str, path: PathLike, *, has_header: bool = True, delimiter: str = ","
    ) -> None:
        """Registers CSV files as table ``name``."""
        self._inner.register_csv(name, os.fspath(path), has_header, delimiter)

    def register_arrow(self, name: str, data: Any) -> None:
        """Registers Arrow data as table ``name`` without copying it: a ``pyarrow.Table``,
        ``RecordBatch`` or ``RecordBatchReader``, a datafusion-python or polars
        ``DataFrame``; anything with ``__arrow_c_stream__``. Its row order is the input
        order that ties keep."""
        self._inner.register_arrow(name, _arrow_stream_source(data))

    def from_arrow(self, data: Any) -> DataFrame:
        """Arrow data (as ``register_arrow`` takes it) as a DataFrame."""
        return DataFrame(self._inner.from_arrow(_arrow_stream_source(data)))

    def table(self, name: str) -> DataFrame:
        """The registered table ``name``."""
        return DataFrame(self._inner.table(name))

    def deregister_table(self, name: str) -> bool:
        """Removes table ``name``; returns whether it existed."""
        return self._inner.deregister_table(name)

    def set(self, key: str, value: Any) -> None:
        """Sets one option, as SQL's ``SET key = value`` does."""
        self._inner.set(key, _setting_text(value))

    def settings(self) -> dict:
        """Every option and its value as a string (``None`` where unset)."""
        return self._inner.settings()

    def explain(self, query: str) -> str:
        """The physical plan of ``query`` and gpusort's decision for each sort in it."""
        return self._inner.explain(query)

    @property
    def backend(self) -> str:
        """Where this session's sorts run now: ``cuda`` or ``cpu``."""
        return self._inner.backend

    @property
    def gpu_in_use(self) -> bool:
        """Whether this session's sorts run on a GPU."""
        return self.backend == "cuda"

    def __repr__(self) -> str:
        return repr(self._inner)


class Extension:
    """gpusort in a datafusion-python 55 ``SessionContext``: its ``ORDER BY``, window
    functions and ``ORDER BY .. LIMIT`` then run on gpusort's operators, and results come
    back as datafusion-python DataFrames::

        ext = gpusort.Extension({"gpu_sort.backend": "cpu"})
        config = datafusion.SessionConfig().with_extension(ext)
        ctx = datafusion.SessionContext(config).with_extensions(ext)

    ``with_extensions(ext)`` installs gpusort's codec and its planner around the
    session's own; ``SessionConfig.with_extension(ext)`` adds the ``gpu_sort.*``
    settings to the session, so that ``SET gpu_sort.<name> = ..``, ``SHOW`` and
    ``information_schema.df_settings`` take them (without it, the session sorts with the
    settings given here, and ``SET gpu_sort.*`` is refused). ``settings``: ``gpu_sort.*``
    settings by name (docs/settings.md); DataFusion's own go to ``SessionConfig``.

    Plans cross between datafusion-python's DataFusion and gpusort's as protobuf; what
    protobuf cannot write (in-memory tables, ``information_schema``) crosses by reference
    within the process. A sort over a node only datafusion-python can run (a pyarrow
    dataset, a table defined in Python) stays DataFusion's, and ``EXPLAIN`` says so.
    ``COPY`` and ``DataFrame.write_*`` are refused with DataFusion's FFI message: its
    FFI carries no file formats (DataFusion 55). The session's memory pool does not cross:
    gpusort's operators account their memory in a pool of their own, without a limit
    (docs/python.md).
    """

    #: The ids datafusion-python files gpusort's codecs under.
    codec_id = "gpusort.physical.v1"
    logical_codec_id = "gpusort.logical.v1"

    def __init__(self, settings: Optional[Mapping[str, Any]] = None):
        strings = {k: _setting_text(v) for k, v in (settings or {}).items()}
        self._core = _gpusort.ExtensionCore(strings)

    def settings(self) -> dict:
        """The ``gpu_sort.*`` settings it starts a session with, by full name."""
        return self._core.settings()

    def __datafusion_extension_options__(self):
        return self._core.extension_options()

    def __datafusion_session_components__(self, ctx):
        from datafusion import SessionExtensionComponents

        return SessionExtensionComponents(
            logical_extension_codecs=(_LogicalCodec(self._core),),
            physical_extension_codecs=(_Codec(self._core),),
        )

    def __datafusion_session_planner__(self, ctx, fallback):
        return self._core.planner(ctx, fallback)

    def __repr__(self) -> str:
        return "gpusort.Extension()"


class _Codec:
    """gpusort's physical codec, as ``SessionExtensionComponents`` takes codecs."""

    __datafusion_codec_id__ = Extension.codec_id

    def __init__(self, core):
        self._core = core

    def __datafusion_physical_extension_codec__(self, session=None):
        if session is None:
            raise TypeError("gpusort's codec is bound to the session it is installed on")
        return self._core.physical_codec(session)


class _LogicalCodec:
    """gpusort's logical codec (tables by reference), as ``SessionExtensionComponents``
    takes codecs."""

    __datafusion_codec_id__ = Extension.logical_codec_id

    def __init__(self, core):
        self._core = core

    def __datafusion_logical_extension_codec__(self, session=None):
        if session is None:
            raise TypeError("gpusort's codec is bound to the session it is installed on")
        return self._core.logical_codec(session)


def _devices_text(devices: Union[str, int, Iterable[int], None]) -> Optional[str]:
    """``devices`` as ``gpu_sort.devices`` reads it: ``all``, a count, or ordinals."""
    if devices is None or isinstance(devices, str):
        return devices
    if isinstance(devices, int):
        return str(devices)
    ordinals = [str(int(d)) for d in devices]
    # One ordinal alone is written "1,": a bare number is a count.
    return ",".join(ordinals) + ("," if len(ordinals) == 1 else "")


def sort_parquet(
    inputs: Union[PathLike, Iterable[PathLike]],
    output: PathLike,
    by: Union[str, Iterable[str]],
    *,
    memory_limit: Optional[Size] = None,
    compression: Optional[str] = None,
    limit: Optional[int] = None,
    max_rows_per_file: Optional[int] = None,
    row_group_rows: Optional[int] = None,
    spill_compression: Optional[str] = None,
    spill_dir: Optional[PathLike] = None,
    max_spill: Optional[Size] = None,
    union_by_name: bool = False,
    overwrite: bool = False,
    fsync: bool = True,
    backend: Optional[str] = None,
    devices: Union[str, int, Iterable[int], None] = None,
    page_encoding: Optional[str] = None,
    key_ranges: Union[str, int, None] = None,
    progress: Union[bool, Callable[[dict], None], None] = None,
) -> dict:
    """Sorts Parquet or CSV files into Parquet, as ``gpusort sort`` does.

    ``inputs``: files, directories or glob patterns, in input order (ties keep it: files
    in the order given, a directory's or a pattern's in sorted path order). A path that
    names a file is read as that file whatever characters it holds; only a path that
    names nothing is a glob pattern. Inputs whose columns differ are refused unless
    ``union_by_name=True`` (columns matched by name, nulls where a file lacks one, types
    widened only where exact). The output may not be among the inputs.
    ``output``: the Parquet file, or a directory of files with ``max_rows_per_file``; it
    appears only when complete (and is replaced only with ``overwrite=True``). ``by``:
    ``"col [ASC|DESC] [NULLS FIRST|LAST], ..."`` or a list of such items.
    ``memory_limit``: the job's budget (bytes or ``"8G"``; default half of the memory the
    process may use); larger inputs spill. ``compression``: ``zstd(1)`` (default),
    ``snappy``, ``lz4``, ``gzip(6)``, ``none``, ... ``progress``: ``True`` draws a
    progress line on stderr, a callable receives the job's counts (a dict) about ten
    times a second; ``None`` draws on a terminal only. ``fsync=False`` skips flushing
    the output to disk before it is renamed into place (still atomic, but a crash soon
    after may lose it; DuckDB's ``COPY`` does not flush either). ``backend``: ``auto``
    (default: the GPU when usable; inputs of fewer than 100 000 rows sort on the CPU
    backend without opening the device), ``cuda`` or ``cpu``. ``devices``: the GPUs to sort
    on: ``"all"`` (default), a count (``2``: the first two) or a list of ordinals
    (``[0, 2]``); each run goes to the least busy of them. ``spill_dir``: where to
    spill (default ``$TMPDIR``); ``max_spill``: the most it may spill (bytes or ``"200G"``;
    default 90 % of the free space there). ``page_encoding``: ``host`` (default) or
    ``device``: the Parquet pages of top-level columns of 4- and 8-byte values, strings
    and binaries (their dictionaries, else ``PLAIN``, or ``DELTA_BINARY_PACKED`` for
    integers; uncompressed or ``snappy``) are built on the GPU, the CPU encoding them where
    no device can. ``key_ranges``: how an
    input larger than the memory pool is sorted: ``on`` (by key range when its decoded
    size passes half the pool; each range sorted in memory and written in turn), ``off``
    (sorted runs spilled and merged), ``auto`` (default: ``on`` where a GPU sorts, ``off``
    on the CPU backend), or a number of ranges.

    Returns the job's summary (rows, bytes in and out, files, stage times, backend,
    algorithm, peak memory, the column chunks whose pages the device built
    (``device_page_chunks``) or was to build but the CPU encoded
    (``device_page_chunks_on_host``), and the ``summary`` line ``gpusort sort`` prints). Ctrl-C
    stops the job, leaving no partial output or spill file, and raises
    ``KeyboardInterrupt``; a failure raises ``GpuSortError``.
    """
    if isinstance(inputs, (str, os.PathLike)):
        inputs = [inputs]
    if not isinstance(by, str):
        by = ", ".join(by)
    callback = _progress_callback(progress)
    try:
        summary = _gpusort.sort_parquet(
            [os.fspath(p) for p in inputs],
            os.fspath(output),
            by,
            memory_limit=memory_limit,
            compression=compression,
            limit=limit,
            max_rows_per_file=max_rows_per_file,
            row_group_rows=row_group_rows,
            spill_compression=spill_compression,
            spill_dir=None if spill_dir is None else os.fspath(spill_dir),
            max_spill=max_spill,
            union_by_name=union_by_name,
            overwrite=overwrite,
            fsync=fsync,
            backend=backend,
            devices=_devices_text(devices),
            page_encoding=page_encoding,
            key_ranges=None if key_ranges is None else str(key_ranges),
            progress=callback,
        )
    finally:
        if isinstance(callback, _ProgressLine):
            callback.close()
    return summary


def _setting_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _arrow_stream_source(data: Any) -> Any:
    """``data`` as an object with ``__arrow_c_stream__`` (a pyarrow ``RecordBatch`` of an
    older pyarrow has only ``__arrow_c_array__``)."""
    if hasattr(data, "__arrow_c_stream__"):
        return data
    if hasattr(data, "__arrow_c_array__"):
        import pyarrow as pa

        return pa.table(data)
    return data


def _progress_callback(progress):
    if callable(progress):
        return progress
    if progress is None:
        progress = sys.stderr.isatty()
    return _ProgressLine(sys.stderr) if progress else None


class _ProgressLine:
    """One line, redrawn in place: each stage's rows, bytes, and their rates since the
    stage passed its first row (as ``gpusort sort``'s bars show them)."""

    def __init__(self, stream):
        self._stream = stream
        self._began = {}
        self._drawn = False

    def __call__(self, counts: dict) -> None:
        now = time.monotonic()
        total = counts["total_rows"]
        parts = []
        for stage in ("read", "sorted", "written"):
            rows = counts[f"{stage}_rows"]
            nbytes = counts[f"{stage}_bytes"]
            if rows > 0:
                self._began.setdefault(stage, now)
            seconds = max(now - self._began.get(stage, now), 1e-3)
            of = f"/{total:,}" if total is not None else ""
            parts.append(
                f"{stage} {rows:,}{of} rows ({rows / seconds:,.0f}/s, "
                f"{_human(nbytes)}, {_human(nbytes / seconds)}/s)"
            )
        self._stream.write("\r" + " | ".join(parts) + "\x1b[K")
        self._stream.flush()
        self._drawn = True

    def close(self) -> None:
        if self._drawn:
            self._stream.write("\r\x1b[K")
            self._stream.flush()


def _human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{n:.0f} B"
        n /= 1024
    return f"{n:.1f} TiB"
