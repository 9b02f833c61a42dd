"""Store mechanics: migrations, transactions, locks, answers round trip."""

from __future__ import annotations

import multiprocessing as mp
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
import pytest

from tests.conftest import table_counts
from workbench.errors import StoreError
from workbench.schema import DecisionSchema
from workbench.store.db import SCHEMA_VERSION, connect, migrate, schema_version, transaction
from workbench.store.runs import create_run, load_answers, write_answers


def test_migrations_are_forward_and_idempotent(db_path: Path):
    con = connect(db_path)
    assert schema_version(con) == SCHEMA_VERSION
    counts = table_counts(con)
    assert migrate(con) == SCHEMA_VERSION  # second run applies nothing
    assert table_counts(con) == counts
    con.close()


def _store_of_schema_9(db_path: Path) -> tuple[pd.DataFrame, np.ndarray]:
    """A store as the workbench before migration 10 wrote it: 50 answers of one run in the old table."""
    from workbench.store import db as store_db

    con = duckdb.connect(str(db_path))
    con.execute(
        "CREATE TABLE schema_version (version INTEGER PRIMARY KEY, applied_at TIMESTAMP DEFAULT current_timestamp)"
    )
    for version, sql in enumerate(store_db._MIGRATIONS[:9], start=1):
        con.execute(sql)
        con.execute("INSERT INTO schema_version (version) VALUES (?)", [version])
    rng = np.random.default_rng(3)
    raw = rng.dirichlet(np.ones(7), 50).round(4)
    stored = raw / raw.sum(axis=1, keepdims=True)  # as the import stored them then: full-precision doubles
    rows = pd.DataFrame(
        {
            "run_id": "r",
            "item_id": [f"i{i:02d}" for i in range(50)],
            "question": "q",
            "probs": [list(v) if i % 10 else None for i, v in enumerate(stored)],
            "p_top": stored.max(axis=1),
            "deviation": raw.sum(axis=1) - 1,
            "failure_kind": [None if i % 10 else "server" for i in range(50)],
        }
    )
    con.register("_rows", rows)
    con.execute("INSERT INTO answers BY NAME SELECT * FROM _rows")
    con.close()
    return rows, stored


def test_answers_stored_normalised_before_migration_10_read_the_same_after_it(db_path: Path):
    """A store written before answers were normalised on read (its rows normalised, under the old primary
    key) migrates to the key-less table and the ``answers`` view; every row reads back bit for bit."""
    from workbench.store import db as store_db

    rows, stored = _store_of_schema_9(db_path)
    con = connect(db_path)
    assert schema_version(con) == SCHEMA_VERSION
    kinds = dict(con.execute("SELECT table_name, table_type FROM information_schema.tables").fetchall())
    assert (kinds["answers"], kinds[store_db.ANSWERS_TABLE]) == ("VIEW", "BASE TABLE")
    got = con.execute("SELECT item_id, probs, p_top, deviation, failure_kind FROM answers ORDER BY item_id").df()
    assert got["item_id"].tolist() == rows["item_id"].tolist()
    for i, v in enumerate(got["probs"]):
        if i % 10:
            np.testing.assert_array_equal(np.array(v), stored[i])  # read as stored: no second division
        else:
            assert v is None or v is pd.NA
    np.testing.assert_array_equal(got["p_top"].to_numpy(), rows["p_top"].to_numpy())
    assert con.execute(f"SELECT count(*) FROM {store_db.ANSWERS_TABLE} WHERE normalise_on_read").fetchone() == (0,)
    # the view is the one normalising expression over the table
    differ = con.execute(
        f"SELECT count(*) FROM answers v JOIN (SELECT item_id, {store_db.NORMALISED_PROBS} AS p"
        f" FROM {store_db.ANSWERS_TABLE}) t USING (item_id) WHERE v.probs IS DISTINCT FROM t.p"
    ).fetchone()
    assert differ == (0,)
    con.close()


@pytest.mark.parametrize("through", ["connect", "read_connection"])
def test_a_read_only_open_of_an_older_store_upgrades_it_first(db_path: Path, through: str):
    """Read-only commands and the UI read today's tables (``answer_rows``), so a store of an older
    schema is migrated once by a short read-write open before the read-only one."""
    from workbench.store import db as store_db
    from workbench.store.snapshot import read_connection

    rows, stored = _store_of_schema_9(db_path)
    query = f"SELECT count(*), count(probs) FROM {store_db.ANSWERS_TABLE}"
    if through == "connect":
        con = connect(db_path, read_only=True)
        assert schema_version(con) == SCHEMA_VERSION
        assert con.execute(query).fetchone() == (50, 45)
        con.close()
    else:
        with read_connection(str(db_path)) as con:
            assert schema_version(con) == SCHEMA_VERSION
            assert con.execute(query).fetchone() == (50, 45)
    con = connect(db_path, read_only=True)  # already upgraded: a plain read-only open
    got = con.execute("SELECT probs FROM answers ORDER BY item_id").fetchall()
    np.testing.assert_array_equal(np.array(got[1][0]), stored[1])
    con.close()


def test_newer_database_is_refused(db_path: Path):
    con = connect(db_path)
    con.execute("INSERT INTO schema_version (version) VALUES (?)", [SCHEMA_VERSION + 5])
    con.close()
    with pytest.raises(StoreError, match="newer"):
        connect(db_path)


def test_transaction_rolls_back_everything(db_path: Path):
    con = connect(db_path)
    before = table_counts(con)
    with pytest.raises(RuntimeError):
        with transaction(con):
            con.execute("INSERT INTO schemas (schema_hash, body) VALUES ('h', '{}')")
            raise RuntimeError("boom")
    assert table_counts(con) == before


def _hold_lock(path: str, ready, done) -> None:
    con = duckdb.connect(path)
    ready.set()
    done.wait(20)
    con.close()


def test_lock_held_by_another_process_is_reported(db_path: Path):
    connect(db_path).close()
    ctx = mp.get_context("spawn")
    ready, done = ctx.Event(), ctx.Event()
    proc = ctx.Process(target=_hold_lock, args=(str(db_path), ready, done))
    proc.start()
    try:
        assert ready.wait(30)
        with pytest.raises(StoreError, match=r"is being written by another process \(PID \d+\)"):
            connect(db_path)
    finally:
        done.set()
        proc.join(30)


def test_answers_round_trip_with_failures_and_majority_labels(db_path: Path):
    con = connect(db_path)
    schema = DecisionSchema.from_dict(
        {
            "questions": {
                "intent": {"type": "choice", "instructions": "which?", "criteria": {"b": None, "a": None, "c": None}}
            }
        }
    )
    con.execute(
        "INSERT INTO datasets (name, version, fingerprint, questions, n_items) VALUES ('d', 1, 'f', ['intent'], 3)"
    )
    con.execute(
        "INSERT INTO items (dataset, version, item_id, state_text, split) VALUES "
        "('d',1,'x1','s1','test'),('d',1,'x2','s2','test'),('d',1,'x3','s3','calibration')"
    )
    # x1: two annotators say a, one says c -> a; x2: tie b/c -> b (schema order); x3 unlabelled
    con.execute(
        "INSERT INTO labels (dataset, version, item_id, question, option_id, annotator) VALUES "
        "('d',1,'x1','intent','a','u1'),('d',1,'x1','intent','a','u2'),('d',1,'x1','intent','c','u3'),"
        "('d',1,'x2','intent','c','u1'),('d',1,'x2','intent','b','u2')"
    )
    run = create_run(con, dataset="d", dataset_version=1, schema=schema, provider="test:p", splits=["test"])
    write_answers(
        con,
        pd.DataFrame(
            {
                "run_id": [run] * 3,
                "item_id": ["x1", "x2", "x3"],
                "question": ["intent"] * 3,
                "probs": [[0.2, 0.7, 0.1], None, [0.5, 0.25, 0.25]],
                "failure_kind": [None, "rate_limit", None],
                "failure_message": [None, "429", None],
            }
        ),
    )
    ans = load_answers(con, run, "intent")
    assert list(ans.item_ids) == ["x1", "x2", "x3"]
    assert ans.option_ids == ["b", "a", "c"]
    assert list(ans.labels) == [1, 0, -1]
    assert list(ans.failed) == [False, True, False]
    assert np.isnan(ans.probs[1]).all() and np.allclose(ans.probs[0], [0.2, 0.7, 0.1])
    assert ans.failure_kind[1] == "rate_limit"
    assert len(load_answers(con, run, "intent", splits=["calibration"]).item_ids) == 1
    lab = ans.labelled()
    assert list(lab.item_ids) == ["x1"]


def test_load_labels_majority_with_ties(db_path: Path):
    from workbench.store.datasets import load_labels

    con = connect(db_path)
    con.execute("INSERT INTO datasets (name, version, fingerprint, questions, n_items) VALUES ('d', 1, 'f', ['q'], 2)")
    con.execute(
        "INSERT INTO items (dataset, version, item_id, state_text, split) VALUES "
        "('d',1,'x1','s1','test'),('d',1,'x2','s2','train')"
    )
    con.execute(
        "INSERT INTO labels VALUES ('d',1,'x1','q','b','u1'),('d',1,'x1','q','b','u2'),('d',1,'x1','q','a','u3'),"
        "('d',1,'x2','q','c','u1'),('d',1,'x2','q','a','u2')"
    )
    df = load_labels(con, "d")
    assert df[["item_id", "option_id", "split"]].values.tolist() == [["x1", "b", "test"], ["x2", "a", "train"]]
    assert load_labels(con, "d", splits=["train"])["item_id"].tolist() == ["x2"]


def test_duckdb_settings_are_put_back_even_when_the_block_fails(tmp_path):
    from workbench.store.db import _size_bytes, duckdb_settings

    con = connect(tmp_path / "s.duckdb")
    before = con.execute(
        "SELECT current_setting('memory_limit'), current_setting('preserve_insertion_order')"
    ).fetchone()
    with duckdb_settings(con, {"memory_limit": "300MB", "preserve_insertion_order": False}):
        inside = con.execute(
            "SELECT current_setting('memory_limit'), current_setting('preserve_insertion_order')"
        ).fetchone()
    assert inside[1] is False and inside[0] != before[0]
    with pytest.raises(ZeroDivisionError), duckdb_settings(con, {"memory_limit": "200MB"}, release=True):
        1 / 0  # noqa: B018
    after = con.execute(
        "SELECT current_setting('memory_limit'), current_setting('preserve_insertion_order')"
    ).fetchone()
    # DuckDB prints the limit rounded down to 0.1 MiB, so a put-back limit can read 0.1 MiB lower (once: it is then exact)
    assert after[1] == before[1] and abs(_size_bytes(after[0]) - _size_bytes(before[0])) < 2**20 / 5


def test_the_numpy_normalisation_gives_the_views_doubles(db_path: Path):
    """``normalise_rows`` (the streamed reader's) and the ``answers`` view divide the same way, bit for bit."""
    import pyarrow as pa

    from workbench.store.db import ANSWERS_TABLE, normalise_rows

    rng = np.random.default_rng(5)
    raw = rng.dirichlet(np.ones(9), 300).round(4)
    dev = raw.sum(axis=1) - 1
    flag = np.abs(dev) > 1e-12
    con = connect(db_path)
    rows = pa.table(
        {
            "run_id": ["r"] * 300,
            "item_id": [f"i{i:03d}" for i in range(300)],
            "question": ["q"] * 300,
            "probs": pa.array([list(v) for v in raw], type=pa.list_(pa.float64())),
            "deviation": dev,
            "normalise_on_read": pa.array([bool(f) if i % 7 else None for i, f in enumerate(flag)]),
        }
    )
    con.register("_rows", rows)
    con.execute(f"INSERT INTO {ANSWERS_TABLE} BY NAME SELECT * FROM _rows")
    view = np.vstack(con.execute("SELECT probs FROM answers ORDER BY item_id").fetch_arrow_table()["probs"].to_pylist())
    mine = normalise_rows(raw.copy(), rows["normalise_on_read"], rows["deviation"])
    np.testing.assert_array_equal(mine, view)
    assert not np.array_equal(view, raw)  # something was divided
    con.close()
