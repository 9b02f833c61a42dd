"""Which store a tab reads, its connections and tokens, and the records every other loader starts from.

Reads go through :mod:`workbench.store.snapshot` (the live file read-only for one read when no
writer holds it, else a read-only copy taken when the store changed), so the UI never holds a lock
on the store a run is writing, and never copies a large store that nobody is writing.
"""

from __future__ import annotations

import importlib
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import duckdb
import streamlit as st

from workbench.store import snapshot as _snap
from workbench.store.snapshot import store_token

#: Session-state keys shared across pages (one choice per browser tab).
KEY_DB = "db_path"
KEY_RUN = "run_id"
KEY_QUESTION = "question"
KEY_DATASET = "dataset"


def _db_from_argv(argv: list[str]) -> str | None:
    """``streamlit run streamlit_app.py -- --db PATH`` puts ``--db PATH`` into ``sys.argv``."""
    for i, arg in enumerate(argv):
        if arg == "--db" and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith("--db="):
            return arg.split("=", 1)[1]
    return None


def default_db() -> str:
    """Store path from ``-- --db PATH``, else ``$WORKBENCH_DB``, else ``./workbench.duckdb``."""
    from workbench.store.db import default_db_path

    return str(Path(_db_from_argv(sys.argv[1:]) or default_db_path()).expanduser().resolve())


def db_path() -> str:
    """The store this tab reads (set once per session, changeable in the sidebar)."""
    if KEY_DB not in st.session_state or not st.session_state[KEY_DB]:
        st.session_state[KEY_DB] = default_db()
    return str(st.session_state[KEY_DB])


@contextmanager
def read_connection(path: str | None = None) -> Iterator[duckdb.DuckDBPyConnection]:
    """:func:`workbench.store.snapshot.read_connection` of ``path`` (default: this tab's store)."""
    with _snap.read_connection(path or db_path()) as con:
        yield con


_preloading: set[str] = set()
_preload_lock = threading.Lock()


def preload(*modules: str) -> None:
    """Import ``modules`` in a background thread, once per server process: a page calls it first thing
    for the modules its figures import on first use and that take a second to load (the Thresholds page:
    ``scipy.stats``, for the exact binomial bounds), so they load while its first DuckDB query runs (the
    query releases the GIL) instead of after it. Only the page that needs them pays the CPU."""
    with _preload_lock:
        todo = [m for m in modules if m not in _preloading and m not in sys.modules]
        _preloading.update(todo)
    if not todo:
        return

    def load() -> None:
        for name in todo:
            try:
                importlib.import_module(name)
            except ImportError:  # the figure that needs it reports the missing module itself
                pass

    threading.Thread(target=load, name="workbench-preload", daemon=True).start()


def current() -> tuple[str, tuple]:
    """(store path, token) for this rerun."""
    path = db_path()
    return path, store_token(path)


def current_table(loader, empty: str) -> tuple[str, tuple, Any]:
    """(store path, token, ``loader(path, token)``) of the open store, a library error shown and the page
    stopped (:func:`~workbench.ui.state.errors.stop_on_error`); an empty table is said with ``empty``."""
    from workbench.ui.state.errors import stop_on_error

    path, token = current()
    with stop_on_error():
        table = loader(path, token)
    if table.empty:
        st.info(empty)
    return path, token, table


def store_ready() -> bool:
    """Show a friendly message (and return False) when the store does not exist yet."""
    path = db_path()
    if not Path(path).exists():
        st.info(
            f"No store at `{path}`. Run `workbench demo` (offline) and open the UI with "
            "`workbench ui --db PATH`, or change the store path in the sidebar."
        )
        return False
    return True


@st.cache_data(show_spinner=False, max_entries=64)
def run_record(path: str, token: tuple, run_id: str) -> dict:
    from workbench.store.runs import get_run, load_stored_schema

    with read_connection(path) as con:
        run = get_run(con, run_id)
        schema = load_stored_schema(con, run["schema_hash"])
    run["questions"] = schema.question_ids
    run["question_types"] = {q: schema.questions[q].type for q in schema.question_ids}
    run["schema_wire"] = schema.to_file_dict()
    return run


def option_names(path: str, token: tuple, run_id: str, question: str) -> list[str]:
    """The question's option ids, in schema order (from the run's stored schema)."""
    from workbench.schema import option_ids
    from workbench.store.runs import get_run, load_stored_schema

    with read_connection(path) as con:
        return option_ids(load_stored_schema(con, get_run(con, run_id)["schema_hash"]).questions[question])
