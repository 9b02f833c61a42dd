"""Datasets and runs of the store, and the widgets a page picks a run and a question with."""

from __future__ import annotations

from typing import Any

import pandas as pd
import streamlit as st

from workbench.store import snapshot as _snap
from workbench.ui.state.cache import kept_store
from workbench.ui.state.store import KEY_QUESTION, KEY_RUN, read_connection


@st.cache_data(show_spinner=False, max_entries=64)
def datasets_frame(path: str, token: tuple) -> pd.DataFrame:
    from workbench.store.datasets import list_datasets

    with read_connection(path) as con:
        return list_datasets(con)


@st.cache_data(show_spinner=False, max_entries=64)
def dataset_info(path: str, token: tuple, name: str, version: int | None = None) -> dict:
    from workbench.store.datasets import dataset_info as _info

    with read_connection(path) as con:
        return _info(con, name, version)


@st.cache_data(show_spinner=False, max_entries=64)
def sample_items(path: str, token: tuple, name: str, version: int, split: str | None, n: int) -> pd.DataFrame:
    from workbench.store.calls import majority_labels
    from workbench.store.datasets import load_items

    with read_connection(path) as con:
        items = load_items(con, name, version, splits=[split] if split else None, limit=n)
        labels = majority_labels(con, name, version, [split] if split else ["train", "calibration", "test"])
    out = items[["item_id", "split", "state"]].copy()
    out["state"] = out["state"].astype(str)
    labels = labels.loc[labels["item_id"].isin(out["item_id"])]
    if labels.empty:
        return out
    wide = labels.pivot_table(index="item_id", columns="question", values="option_id", aggfunc="first")
    return out.join(wide, on="item_id")


@st.cache_data(show_spinner=False, max_entries=64)
def runs_frame(path: str, token: tuple) -> pd.DataFrame:
    """:func:`workbench.store.runs.list_runs` (its counts and latency median read every answer: seconds on
    tens of millions, so a large store keeps the frame between servers, see :func:`kept_store`)."""
    from workbench.store.runs import list_runs

    def compute() -> pd.DataFrame:
        with read_connection(path) as con:
            return list_runs(con)

    return kept_store(path, token, ("runs_frame",), compute)


@st.cache_data(show_spinner=False, max_entries=64)
def run_choices(path: str, token: tuple) -> pd.DataFrame:
    """The store's runs for a run picker (:func:`workbench.store.aggregates.run_choices`: the ``runs`` table
    only, no answer counts): what the Calibration and Thresholds pages need to name and pick a run."""
    from workbench.store.aggregates import run_choices as _choices

    with read_connection(path) as con:
        return _choices(con)


@st.cache_data(show_spinner=False, max_entries=32)
def failures_by_kind(path: str, token: tuple, run_id: str) -> pd.DataFrame:
    """Failure counts per (question, kind) of one run (:func:`workbench.store.runs.failure_counts`)."""
    from workbench.store.runs import failure_counts

    with read_connection(path) as con:
        return failure_counts(con, run_id)


def is_emulated(runs: pd.DataFrame) -> pd.Series:
    """True for runs answered by ``workbench emulator``: the store's ``emulated`` column
    (:func:`workbench.store.runs.list_runs`, recorded by the runner from the emulator's header)."""
    if "emulated" not in runs:  # a frame built without list_runs: nothing is known to be emulated
        return pd.Series(False, index=runs.index)
    return runs["emulated"].fillna(False).astype(bool)


@st.cache_data(show_spinner=False, max_entries=64)
def dataset_schema_file(path: str, token: tuple, name: str) -> str | None:
    """The schema stored with dataset ``name`` (``--schema`` at import), written to a temp JSON file."""
    import json

    from workbench.store.runs import load_stored_schema

    info = dataset_info(path, token, name)
    if not info.get("schema_hash"):
        return None
    with read_connection(path) as con:
        schema = load_stored_schema(con, info["schema_hash"])
    out = _snap.SNAPSHOT_DIR / f"schema-{info['schema_hash'][:16]}.json"
    _snap.SNAPSHOT_DIR.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(schema.to_file_dict(), ensure_ascii=False, indent=1), encoding="utf-8")
    return str(out)


def planned_answers(path: str, token: tuple, run: dict) -> int | None:
    """Item × question answers a run will have when done (its splits, ``--limit``, its questions)."""
    try:
        info = dataset_info(path, token, run["dataset"], int(run["dataset_version"]))
    except Exception:  # noqa: BLE001 - progress is best effort
        return None
    n_items = sum(int(info["splits"].get(s, 0)) for s in run.get("splits") or [])
    limit = ((run.get("params") or {}).get("options") or {}).get("limit")
    if limit:
        n_items = min(n_items, int(limit))
    return n_items * max(len(run.get("questions") or []), 1)


def run_label(runs: pd.DataFrame, run_id: str) -> str:
    """``name · provider · run id`` for select boxes."""
    row = runs.loc[runs["run_id"] == run_id]
    if row.empty:
        return run_id
    r = row.iloc[0]
    mark = " · EMULATED" if bool(is_emulated(row).iloc[0]) and "EMULATED" not in str(r["name"]) else ""
    if isinstance(r["name"], str) and r["name"]:
        return f"{r['name']}{mark} · {run_id}"
    return f"{r['provider']}{mark} · {r['dataset']} · {run_id}"


def pick_run(runs: pd.DataFrame, *, container: Any = None) -> str | None:
    """A run select box bound to session state (:data:`KEY_RUN`, shared across pages)."""
    box = container or st
    if runs.empty:
        box.info("No runs in this store yet. `workbench demo` creates some offline.")
        return None
    ids = runs["run_id"].tolist()
    if KEY_RUN in st.session_state and st.session_state[KEY_RUN] not in ids:
        del st.session_state[KEY_RUN]
    return box.selectbox("Run", ids, key=KEY_RUN, format_func=lambda r: run_label(runs, r))


def pick_question(run: dict, *, container: Any = None) -> str:
    """A question select box bound to session state (:data:`KEY_QUESTION`, shared across pages)."""
    box = container or st
    qs = run["questions"]
    if KEY_QUESTION in st.session_state and st.session_state[KEY_QUESTION] not in qs:
        del st.session_state[KEY_QUESTION]
    return box.selectbox("Question", qs, key=KEY_QUESTION, format_func=lambda q: f"{q} ({run['question_types'][q]})")


@st.cache_data(show_spinner=False, max_entries=64)
def slice_columns(path: str, token: tuple, run_id: str) -> list[str]:
    """Columns a run can be sliced by: ``state_length`` and the metadata kept at import (``--meta-column``)."""
    from workbench.store.datasets import meta_columns
    from workbench.store.import_spec import BUILTIN_SLICES
    from workbench.store.runs import get_run

    with read_connection(path) as con:
        run = get_run(con, run_id)
        return [*BUILTIN_SLICES, *meta_columns(con, run["dataset"], int(run["dataset_version"]))]
