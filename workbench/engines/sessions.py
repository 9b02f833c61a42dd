"""Engine sessions: run one SQL text on DuckDB or on Spark, through a tiny dialect layer.

An :class:`Engine` reads Parquet into a named view, registers small lookup tables, runs a query and
returns plain tuples. The dialect methods return SQL fragments for the handful of list functions
whose names differ (``list_max`` vs ``array_max``, 1-based ``l[i]`` vs ``element_at``, …); everything
else (CASE, GROUPING SETS, ``ln``, ``floor``, ``greatest``) is the same text in both.

Numbers cross the boundary as SQL literals written with ``repr`` and cast from text
(``CAST('0.36' AS DOUBLE)``), which both engines parse to the same correctly rounded double, so a
threshold grid means the same thing on both sides.
"""

from __future__ import annotations

import glob
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from workbench.errors import OptionError, WorkbenchError
from workbench.store.db import no_progress_bar

ENGINES = ("duckdb", "spark")


def _lit(x: float) -> str:
    return f"CAST('{float(x)!r}' AS DOUBLE)"


def is_remote(path: str) -> bool:
    """True for a URL (``s3://…``, ``https://…``), False for a local path."""
    return "://" in path


def _q(s: str) -> str:
    return str(s).replace("'", "''")


#: The list functions whose SQL differs between the engines: a template per engine name, its arguments
#: written ``{a}`` (a list), ``{i}``, ``{pos}``, ``{v}``, ``{b}`` (see the :class:`Engine` methods).
DIALECT: dict[str, dict[str, str]] = {
    "list_max": {"duckdb": "list_max({a})", "spark": "array_max({a})"},
    "list_len": {"duckdb": "len({a})", "spark": "size({a})"},
    "list_at0": {"duckdb": "list_extract({a}, ({i}) + 1)", "spark": "try_element_at({a}, CAST(({i}) + 1 AS INT))"},
    "list_second": {
        "duckdb": "list_max(list_concat({a}[1:({pos}) - 1], {a}[({pos}) + 1:]))",
        "spark": "array_max(concat(slice({a}, 1, ({pos}) - 1), slice({a}, ({pos}) + 1, size({a}))))",
    },
    "list_sumsq": {
        "duckdb": "list_sum(list_transform({a}, v -> v * v))",
        "spark": "aggregate({a}, CAST(0 AS DOUBLE), (acc, v) -> acc + v * v)",
    },
    "list_position": {"duckdb": "list_position({a}, {v})", "spark": "array_position({a}, {v})"},
    "int_div": {"duckdb": "(({a}) // ({b}))", "spark": "(({a}) div ({b}))"},
}


class Engine:
    """Common interface; see :class:`DuckDBEngine` and :class:`SparkEngine`."""

    name = "engine"

    # -- dialect ------------------------------------------------------------------------------
    def list_max(self, a: str) -> str:
        return DIALECT["list_max"][self.name].format(a=a)

    def list_len(self, a: str) -> str:
        return DIALECT["list_len"][self.name].format(a=a)

    def list_at0(self, a: str, i: str) -> str:
        """Element ``i`` (0-based, an integer expression) of list ``a``; NULL when out of range."""
        return DIALECT["list_at0"][self.name].format(a=a, i=i)

    def list_second(self, a: str, pos: str) -> str:
        """Largest element once the one at 1-based ``pos`` (the first maximum) is left out; NULL for one element.

        Two slices and a max: no per-row sort (``list_sort`` made the query 5x slower at 2M x 77).
        """
        return DIALECT["list_second"][self.name].format(a=a, pos=pos)

    def list_sumsq(self, a: str) -> str:
        return DIALECT["list_sumsq"][self.name].format(a=a)

    def count_le(self, values: Sequence[float] | np.ndarray, x: str) -> str:
        """How many of the ascending ``values`` are <= ``x`` (``np.searchsorted(values, x, 'right')``).

        A balanced tree of CASE comparisons (a binary search written out: ~log2(len(values)) comparisons
        per row, the same text in both dialects); NaN compares false everywhere and counts 0, like
        ``-inf``. ``x`` should be a column name (it is repeated in the text).
        """
        from workbench.store.aggregates import count_le

        return count_le(values, x)

    def int_div(self, a: str, b: str) -> str:
        """Integer division of non-negative integers (``a // b``)."""
        return DIALECT["int_div"][self.name].format(a=a, b=b)

    def list_position(self, a: str, v: str) -> str:
        """1-based position of the first element equal to ``v`` (first maximum = numpy's argmax + 1)."""
        return DIALECT["list_position"][self.name].format(a=a, v=v)

    # -- data -----------------------------------------------------------------------------------
    def read_parquet(self, view: str, paths: Sequence[str]) -> list[str]:
        """Create view ``view`` over the Parquet files/directories ``paths``; return its column names."""
        raise NotImplementedError

    def register_rows(self, view: str, columns: Sequence[tuple[str, str]], rows: Sequence[tuple]) -> None:
        """A small lookup table ``view`` with ``columns`` = [(name, 'string'|'int'|'double')]."""
        raise NotImplementedError

    def query(self, sql: str) -> list[tuple]:
        raise NotImplementedError

    def close(self) -> None:
        pass

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class DuckDBEngine(Engine):
    """DuckDB in-process, disk-spilling (``memory_limit``, a temporary ``temp_directory``)."""

    name = "duckdb"

    def __init__(self, memory_limit: str = "1GB", threads: int | None = None, con: Any = None):
        import duckdb

        self._tmp = tempfile.TemporaryDirectory(prefix="workbench-engine-")
        self._own = con is None
        self.con = con if con is not None else duckdb.connect()
        self.con.execute(f"SET memory_limit = '{memory_limit}'")
        self.con.execute(f"SET temp_directory = '{_q(str(Path(self._tmp.name) / 'spill'))}'")
        self.con.execute("SET preserve_insertion_order = false")
        no_progress_bar(self.con)  # stdout carries results only
        if threads:
            self.con.execute(f"SET threads = {int(threads)}")

    def read_parquet(self, view: str, paths: Sequence[str]) -> list[str]:
        files: list[str] = []
        for p in paths:
            s = str(p)
            if is_remote(s) or any(c in s for c in "*?["):
                files.append(s)
            elif Path(s).is_dir():
                files.append(str(Path(s) / "**" / "*.parquet"))
            elif Path(s).is_file():
                files.append(s)
            else:
                raise OptionError(f"{s}: no such file or directory", hint="give Parquet files, a directory or a glob")
        listing = "[" + ", ".join(f"'{_q(f)}'" for f in files) + "]"
        try:
            self.con.execute(
                f"CREATE OR REPLACE TEMP VIEW {view} AS SELECT * FROM "
                f"read_parquet({listing}, hive_partitioning = true, union_by_name = true)"
            )
            return [r[0] for r in self.con.execute(f"DESCRIBE {view}").fetchall()]
        except Exception as exc:  # duckdb's first line names the file and the problem
            raise OptionError(
                f"{', '.join(files)}: cannot read as Parquet ({str(exc).splitlines()[0]})",
                hint="give answer files in the layout of `workbench export --format parquet`",
            ) from None

    def register_rows(self, view: str, columns: Sequence[tuple[str, str]], rows: Sequence[tuple]) -> None:
        import pyarrow as pa

        types = {"string": pa.string(), "int": pa.int64(), "double": pa.float64()}
        cols: list[list] = [list(c) for c in zip(*rows)] if rows else [[] for _ in columns]
        table = pa.table({n: pa.array(c, type=types[t]) for (n, t), c in zip(columns, cols)})
        self.con.register(view, table)

    def query(self, sql: str) -> list[tuple]:
        return [tuple(r) for r in self.con.execute(sql).fetchall()]

    def close(self) -> None:
        if self._own:
            self.con.close()
        self._tmp.cleanup()


#: Spark settings for a local session (tests, a laptop): a small driver, few shuffle partitions, no UI.
LOCAL_SPARK_CONF = {
    "spark.driver.memory": "1g",
    "spark.sql.shuffle.partitions": "4",
    "spark.ui.enabled": "false",
    "spark.sql.session.timeZone": "UTC",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.driver.host": "127.0.0.1",
}


def spark_session(master: str = "local[2]", conf: dict[str, str] | None = None) -> Any:
    """A ``SparkSession`` on ``master`` (``local[2]``, ``spark://host:7077``, ``yarn``, ``k8s://…``).

    ``conf`` adds or overrides settings (e.g. ``{"spark.executor.memory": "8g"}``); for a local master
    the :data:`LOCAL_SPARK_CONF` defaults apply first. Needs ``pyspark`` and a Java runtime.
    """
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        raise WorkbenchError(
            "`engine` spark needs pyspark",
            hint="in the checkout: pip install -c constraints.txt -e '.[spark]' (and a Java 17 runtime)",
        ) from None
    builder = SparkSession.builder.master(master).appName("workbench")
    settings = dict(LOCAL_SPARK_CONF) if master.startswith("local") else {"spark.sql.session.timeZone": "UTC"}
    settings.update(conf or {})
    for k, v in settings.items():
        builder = builder.config(k, v)
    try:
        return builder.getOrCreate()
    except Exception as exc:  # no java, a master that cannot be reached …
        raise WorkbenchError(
            f"cannot start Spark on {master} ({str(exc).splitlines()[0] if str(exc) else type(exc).__name__})",
            hint="install a Java 17 runtime (Debian: default-jre-headless) and check `spark_master`",
        ) from None


class SparkEngine(Engine):
    """Spark SQL through ``pyspark`` (local mode or a cluster); see :func:`spark_session`."""

    name = "spark"

    def __init__(self, master: str = "local[2]", session: Any = None, stop: bool = False):
        self.spark = session if session is not None else spark_session(master)
        self._stop = stop

    def read_parquet(self, view: str, paths: Sequence[str]) -> list[str]:
        names: list[str] = []
        for p in paths:
            s = str(p)
            if is_remote(s):
                names.append(s)
                continue
            hits = sorted(glob.glob(s)) if any(c in s for c in "*?[") else ([s] if Path(s).exists() else [])
            if not hits:
                raise OptionError(f"{s}: no such file or directory", hint="give Parquet files, a directory or a glob")
            names += hits
        try:
            df = self.spark.read.parquet(*names)
        except Exception as exc:
            raise OptionError(
                f"{', '.join(names)}: Spark cannot read them as Parquet ({str(exc).splitlines()[0]})",
                hint="give answer files in the layout of `workbench export --format parquet`",
            ) from None
        df.createOrReplaceTempView(view)
        return list(df.columns)

    def register_rows(self, view: str, columns: Sequence[tuple[str, str]], rows: Sequence[tuple]) -> None:
        # an inline VALUES table: createDataFrame from Python rows would start Python workers (~20 s here)
        types = {"string": "STRING", "int": "BIGINT", "double": "DOUBLE"}

        def lit(v: Any, t: str) -> str:
            if v is None:
                return f"CAST(NULL AS {types[t]})"
            return f"'{_q(v)}'" if t == "string" else (_lit(v) if t == "double" else str(int(v)))

        names = ", ".join(n for n, _ in columns)
        if not rows:
            nulls = ", ".join(f"{lit(None, t)} AS {n}" for n, t in columns)
            self.spark.sql(f"CREATE OR REPLACE TEMP VIEW {view} AS SELECT {nulls} WHERE false")
            return
        values = ", ".join("(" + ", ".join(lit(v, t) for v, (_, t) in zip(r, columns)) + ")" for r in rows)
        casts = ", ".join(f"CAST({n} AS {types[t]}) AS {n}" for n, t in columns)
        self.spark.sql(f"CREATE OR REPLACE TEMP VIEW {view} AS SELECT {casts} FROM VALUES {values} AS t({names})")

    def query(self, sql: str) -> list[tuple]:
        return [tuple(r) for r in self.spark.sql(sql).collect()]

    def close(self) -> None:
        if self._stop:
            self.spark.stop()


def open_engine(engine: str = "duckdb", *, spark_master: str | None = None) -> Engine:
    """An :class:`Engine` by name: ``"duckdb"`` (default) or ``"spark"`` (on ``spark_master``, default ``local[2]``)."""
    if engine == "duckdb":
        if spark_master:
            raise OptionError("`spark_master` needs `engine` spark", parameter="spark_master")
        return DuckDBEngine()
    if engine == "spark":
        return SparkEngine(spark_master or "local[2]", stop=True)
    raise OptionError(f"engine {engine!r} is not one of {', '.join(ENGINES)}", parameter="engine")
