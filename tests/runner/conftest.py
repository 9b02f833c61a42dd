"""Fixtures for runner tests: a real DuckDB file holding a BANKING77 subset, and its schema."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from workbench.schema import DecisionSchema
from workbench.store.datasets import import_dataset
from workbench.store.db import connect
from workbench.store.import_spec import ImportSpec

ROOT = Path(__file__).resolve().parents[2]
BANKING_DIR = next(
    p
    for p in (ROOT / "datasets" / "banking77", ROOT.parent / "shared" / "datasets" / "banking77")
    if (p / "test.csv").exists()
)


def banking_categories() -> list[str]:
    return json.loads((BANKING_DIR / "categories.json").read_text())


def banking_schema(
    *, descriptive: bool = False, instructions: str = "Which intent does the customer message express?"
) -> DecisionSchema:
    """One `choice` question `intent` with the 77 BANKING77 options (descriptions optional)."""
    cats = banking_categories()
    criteria = {c: (f"The customer asks about {c.replace('_', ' ')}." if descriptive else None) for c in cats}
    return DecisionSchema.from_dict(
        {
            "name": "banking77-test",
            "questions": {"intent": {"type": "choice", "instructions": instructions, "criteria": criteria}},
        }
    )


def write_banking_subset(directory: Path, *, test_every: int = 10, train_every: int = 5) -> list[Path]:
    """Every k-th row of train.csv and test.csv (all 77 intents stay present)."""
    directory.mkdir(parents=True, exist_ok=True)
    out = []
    for split, every in (("train", train_every), ("test", test_every)):
        df = pd.read_csv(BANKING_DIR / f"{split}.csv").iloc[::every]
        p = directory / f"{split}.csv"
        df.to_csv(p, index=False)
        out.append(p)
    return out


def import_banking(con, directory: Path, *, name: str = "banking77", **subset) -> str:
    paths = write_banking_subset(directory, **subset)
    import_dataset(
        con, paths, ImportSpec(name=name, text_column="text", labels={"intent": "category"}), schema=banking_schema()
    )
    return name


@pytest.fixture
def banking_db(tmp_path: Path):
    """(db path, dataset name) with 308 test and 2,001 train items of BANKING77 imported."""
    db = tmp_path / "wb.duckdb"
    con = connect(db)
    name = import_banking(con, tmp_path / "data")
    con.close()
    return db, name


SIZES = {"subset": {"test_every": 10, "train_every": 5}, "full": {"test_every": 1, "train_every": 1}}


@pytest.fixture
def sized_db(request, tmp_path: Path):
    """Like ``banking_db`` at size ``request.param``: "subset" (308 test items) or "full" (3,080)."""
    subset = SIZES[request.param]
    db = tmp_path / "wb.duckdb"
    con = connect(db)
    name = import_banking(con, tmp_path / "data", **subset)
    con.close()
    return db, name, subset


def import_banking_items(con, directory: Path, n: int, *, name: str = "stress") -> str:
    """The first ``n`` BANKING77 test messages as the ``test`` split of dataset ``name``, each made
    distinct (a ``(#i)`` suffix) so that every item is a request of its own, never a cache hit."""
    directory.mkdir(parents=True, exist_ok=True)
    df = pd.read_csv(BANKING_DIR / "test.csv").iloc[:n].reset_index(drop=True)
    df["text"] = [f"{t} (#{i})" for i, t in enumerate(df["text"])]
    p = directory / "test.csv"
    df.to_csv(p, index=False)
    import_dataset(
        con,
        [p],
        ImportSpec(name=name, text_column="text", labels={"intent": "category"}, split="test"),
        schema=banking_schema(),
    )
    return name
