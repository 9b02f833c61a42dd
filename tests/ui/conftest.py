"""Fixtures for the UI tests: one prepared store per session, and its path exported to the app."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from store_builder import build_store  # tests/ui is on sys.path (rootdir conftest)


@pytest.fixture(scope="session")
def prepared_store(tmp_path_factory) -> tuple[Path, dict]:
    path = tmp_path_factory.mktemp("ui-store") / "wb.duckdb"
    meta = build_store(path)
    return path, meta


@pytest.fixture
def ui_store(prepared_store, tmp_path, monkeypatch) -> tuple[Path, dict]:
    """A private copy of the prepared store, selected through ``$WORKBENCH_DB``."""
    src, meta = prepared_store
    dst = tmp_path / "wb.duckdb"
    shutil.copyfile(src, dst)
    shutil.copyfile(src.parent / "policy.json", dst.parent / "policy.json")
    monkeypatch.setenv("WORKBENCH_DB", str(dst))
    return dst, meta
