"""``datasets import`` records, per question, the splits in which some item has two or more votes
(``datasets.params["repeated_votes"]``); readers answer from it (``has_repeated_votes``) and the UI's
one-query figures skip the majority vote when no item has two votes. A version imported before the
record existed has no such key: readers count the votes instead, with the same answers."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import workbench.store.datasets as ds
import workbench.store.import_streamed as streamed
from tests.metrics.conftest import build_store, calibrated_sample
from workbench.engines import store_aggregates as sa
from workbench.schema import DecisionSchema
from workbench.store import aggregates as ag
from workbench.store.db import connect
from workbench.store.import_spec import GOLD_LABELS, REPEATED_VOTES, ImportSpec
from workbench.store.sources import StoreSource

SCHEMA = DecisionSchema.from_dict(
    {
        "name": "votes",
        "questions": {
            "topic": {"type": "choice", "instructions": "Which?", "criteria": {"a": "A", "b": "B", "c": "C"}},
            "tone": {"type": "choice", "instructions": "Tone?", "criteria": {"calm": "calm", "angry": "angry"}},
        },
    },
    source="test",
)
# topic: x2 (test) has two votes, x4 (calibration) three; tone: one vote per item
LONG = [
    ("x1", "train", "ann1", "a", "calm"),
    ("x2", "test", "ann1", "a", "calm"),
    ("x2", "test", "ann2", "b", ""),
    ("x3", "test", "ann1", "c", "angry"),
    ("x4", "calibration", "ann1", "b", "calm"),
    ("x4", "calibration", "ann2", "b", ""),
    ("x4", "calibration", "ann3", "a", ""),
]


def _record(con, name: str = "votes", version: int = 1) -> dict | None:
    params = json.loads(
        con.execute("SELECT params FROM datasets WHERE name = ? AND version = ?", [name, version]).fetchone()[0]
    )
    return params.get(REPEATED_VOTES)


def _drop_record(con, name: str = "votes") -> None:
    """The version as an import before the record existed wrote it."""
    con.execute(
        "UPDATE datasets SET params = json_merge_patch(params, '{\"repeated_votes\": null}') WHERE name = ?", [name]
    )


def test_long_format_import_records_the_splits_with_repeated_votes(tmp_path: Path):
    src = tmp_path / "long.csv"
    pd.DataFrame(LONG, columns=["id", "split", "who", "topic", "tone"]).assign(text="t").to_csv(src, index=False)
    spec = ImportSpec(
        name="votes",
        text_column="text",
        id_column="id",
        split_column="split",
        annotator_column="who",
        labels={"topic": "topic", "tone": "tone"},
    )
    con = connect(tmp_path / "wb.duckdb")
    ds.import_dataset(con, [src], spec, SCHEMA)
    assert _record(con) == {"topic": ["calibration", "test"], "tone": []}
    cases = {
        ("topic", None): True,
        ("topic", ("test",)): True,
        ("topic", ("train",)): False,
        ("topic", ("calibration", "train")): True,
        ("tone", None): False,
        ("tone", ("test",)): False,
    }
    for (question, splits), want in cases.items():
        assert ds.has_repeated_votes(con, "votes", 1, question, list(splits) if splits else None) is want
    _drop_record(con)
    assert ds.recorded_repeated_votes(con, "votes", 1, "topic") is None
    for (question, splits), want in cases.items():  # the fallback counts the same
        assert ds.has_repeated_votes(con, "votes", 1, question, list(splits) if splits else None) is want
    con.close()


def test_vote_counts_plain_labels_the_fast_path_and_append_record_what_they_store(tmp_path: Path, monkeypatch):
    con = connect(tmp_path / "wb.duckdb")
    wide = tmp_path / "wide.csv"
    pd.DataFrame(
        {"id": ["w1", "w2", "w3"], "text": "t", "split": ["test", "train", "train"], "a": [2, 1, 0], "b": [0, 1, 1]}
    ).to_csv(wide, index=False)
    spec = ImportSpec(
        name="wide",
        text_column="text",
        id_column="id",
        split_column="split",
        label_votes={"topic": {"a": "a", "b": "b"}},
    )
    ds.import_dataset(con, [wide], spec, SCHEMA)
    assert _record(con, "wide") == {"topic": ["test", "train"]}  # w1: two votes for a; w2: a and b; w3: one

    plain = tmp_path / "plain.csv"
    pd.DataFrame({"id": ["p1", "p2"], "text": "t", "split": "test", "topic": ["a", "b"]}).to_csv(plain, index=False)
    spec = ImportSpec(name="plain", text_column="text", id_column="id", split_column="split", labels={"topic": "topic"})
    ds.import_dataset(con, [plain], spec, SCHEMA)
    assert _record(con, "plain") == {"topic": []}
    more = tmp_path / "more.csv"
    pd.DataFrame({"id": ["p3"], "text": "t", "split": "train", "topic": ["c"]}).to_csv(more, index=False)
    ds.import_dataset(con, [more], ImportSpec(**{**spec.__dict__, "append": True}), SCHEMA)
    assert _record(con, "plain", 2) == {"topic": []}  # the old labels are copied: still one vote per item

    monkeypatch.setattr(streamed, "FAST_PATH_MIN_ROWS", 0)  # DuckDB's own import of plain Parquet files
    fast = tmp_path / "fast.parquet"
    pq.write_table(
        pa.table({"id": ["f1", "f2"], "text": ["t", "t"], "split": ["test", "train"], "t": ["a", "c"]}), fast
    )
    spec = ImportSpec(name="fast", text_column="text", id_column="id", split_column="split", labels={"topic": "t"})
    ds.import_dataset(con, [fast], spec, SCHEMA)
    assert _record(con, "fast") == {"topic": []}
    assert con.execute("SELECT count(*) FROM labels WHERE dataset = 'fast'").fetchone()[0] == 2
    # the questions of one vote per item have their gold_labels rows (with the item's split); others none
    gold = {
        (name, v): sorted(map(tuple, con.execute(
            "SELECT question, item_id, split, gold FROM gold_labels WHERE dataset = ? AND version = ?", [name, v]
        ).fetchall()))
        for name, v in [("wide", 1), ("plain", 1), ("plain", 2), ("fast", 1)]
    }  # fmt: skip
    assert gold[("wide", 1)] == [] and not ds.recorded_gold_labels(con, "wide", 1, "topic")
    assert gold[("plain", 1)] == [("topic", "p1", "test", "a"), ("topic", "p2", "test", "b")]
    assert gold[("plain", 2)] == [*gold[("plain", 1)], ("topic", "p3", "train", "c")]
    assert gold[("fast", 1)] == [("topic", "f1", "test", "a"), ("topic", "f2", "train", "c")]
    assert all(ds.recorded_gold_labels(con, n, v, "topic") for n, v in [("plain", 1), ("plain", 2), ("fast", 1)])
    con.close()


@pytest.fixture
def single_vote_store(tmp_path_factory):
    """A run over 600 items, one vote each, with failures and unlabelled items."""
    probs, labels = calibrated_sample(600, 6, seed=8, temperature=0.6)
    labels = labels.copy()
    labels[::29] = -1
    con, run_id, *_ = build_store(
        tmp_path_factory.mktemp("votes") / "wb.duckdb",
        {"intent": ("choice", [f"o{j}" for j in range(6)], probs, labels)},
        600,
        fail_every=17,
    )
    yield con, run_id
    con.close()


def _set_record(con, record: dict | None) -> None:
    con.execute("UPDATE datasets SET params = ? WHERE name = 'toy'", [json.dumps({REPEATED_VOTES: record})])


def _figures(con, run_id) -> tuple:
    rep = sa.point_report(StoreSource(con, run_id), "intent", "test")
    pts = sa.grid_points(StoreSource(con, run_id), "intent", ("calibration", "test"))
    assert rep is not None and pts is not None
    metrics = {k: v.estimate for k, v in rep.metrics.items()}
    arrays = {s: (p.coords.predicted, p.coords.x, p.coords.y, p.labels) for s, p in pts.items()}
    return rep.counts, metrics, rep.confusion.matrix, arrays


def test_one_vote_per_item_skips_the_majority_vote_with_the_same_figures(single_vote_store):
    con, run_id = single_vote_store
    run = {"dataset": "toy", "dataset_version": 1}
    assert "arg_max" in ag._rows_sql(con, run, "intent")  # no record (an older store): the majority vote
    counted = _figures(con, run_id)
    _set_record(con, {"intent": []})
    assert "arg_max" not in ag._rows_sql(con, run, "intent")
    recorded = _figures(con, run_id)
    assert recorded[0] == counted[0] and recorded[0]["n_failed"] > 0 and recorded[0]["n_unlabelled"] > 0
    assert recorded[1] == pytest.approx(counted[1], rel=1e-12, abs=0)
    assert np.array_equal(recorded[2], counted[2])
    for split in ("calibration", "test"):
        for mine, theirs in zip(recorded[3][split], counted[3][split]):
            assert np.array_equal(mine, theirs)


def test_repeated_votes_take_the_majority_vote(single_vote_store):
    from workbench.store.runs import load_answers

    con, run_id = single_vote_store
    # i00004 (calibration): o5 twice against its own vote; i00007 (test): a tie, the option listed first wins
    first = dict(con.execute("SELECT item_id, option_id FROM labels WHERE item_id IN ('i00004', 'i00007')").fetchall())
    for item, option in [("i00004", "o5"), ("i00004", "o5"), ("i00007", "o0" if first["i00007"] != "o0" else "o1")]:
        con.execute(
            "INSERT INTO labels (dataset, version, item_id, question, option_id) VALUES ('toy', 1, ?, 'intent', ?)",
            [item, option],
        )
    _set_record(con, {"intent": ["calibration", "test"]})
    assert "arg_max" in ag._rows_sql(con, {"dataset": "toy", "dataset_version": 1}, "intent")
    pts = sa.grid_points(StoreSource(con, run_id), "intent", ("calibration", "test"))
    assert pts is not None
    for split in ("calibration", "test"):
        ans = load_answers(con, run_id, "intent", [split])
        assert np.array_equal(pts[split].labels, ans.labels[ans.labels >= 0])
    ans = load_answers(con, run_id, "intent", ["calibration", "test"])
    gold = dict(zip(ans.item_ids, ans.labels))
    assert gold["i00004"] == 5 and gold["i00007"] == min(int(first["i00007"][1:]), 0 if first["i00007"] != "o0" else 1)


def test_the_imports_gold_labels_give_the_figures_of_items_joined_with_labels(single_vote_store):
    """The threshold grid read from ``gold_labels`` (one table) equals the one joined from items and labels;
    the table is read only when the import recorded it."""
    con, run_id = single_vote_store
    run = {"dataset": "toy", "dataset_version": 1}
    _set_record(con, {"intent": []})
    joined = _figures(con, run_id)
    assert "gold_labels" not in ag._rows_sql(con, run, "intent", labelled=True)
    con.execute("BEGIN")
    streamed.write_gold_labels(con, "toy", 1, ["intent"])
    con.execute("COMMIT")
    con.execute(
        "UPDATE datasets SET params = ? WHERE name = 'toy'",
        [json.dumps({REPEATED_VOTES: {"intent": []}, GOLD_LABELS: ["intent"]})],
    )
    assert "gold_labels" in ag._rows_sql(con, run, "intent", labelled=True)
    assert "gold_labels" not in ag._rows_sql(con, run, "intent")  # the report counts unlabelled items too
    read = _figures(con, run_id)
    for split in ("calibration", "test"):
        for mine, theirs in zip(read[3][split], joined[3][split], strict=True):
            assert np.array_equal(mine, theirs)
    assert len(read[3]["test"][3]) > 0


def test_one_vote_reads_give_the_streamed_and_in_memory_figures_of_the_grouped_votes(single_vote_store):
    """With the one-vote record the keys read and ``load_answers`` read the label rows directly (and join
    the items with them before the answers): the same labels, splits and failures as with the votes
    grouped, and the streamed report equals the in-memory one."""
    from workbench.store.runs import load_answer_keys, load_answers
    from workbench.workflows.evaluation import report_run

    con, run_id = single_vote_store

    def reads():
        full = load_answers(con, run_id, "intent", ["calibration", "test"])
        keys = load_answer_keys(con, run_id, "intent", ["calibration", "test"])
        return full, keys

    _set_record(con, None)
    grouped_full, grouped_keys = reads()
    _set_record(con, {"intent": []})
    full, keys = reads()
    for a in (full, keys, grouped_keys):
        assert np.array_equal(a.item_ids, grouped_full.item_ids) and np.array_equal(a.labels, grouped_full.labels)
        assert np.array_equal(a.splits, grouped_full.splits) and np.array_equal(a.failed, grouped_full.failed)
    assert np.array_equal(full.probs, grouped_full.probs, equal_nan=True)
    assert (full.labels < 0).any() and full.failed.any()
    streamed = report_run(con, run_id, "intent", "test", n_boot=0, stream=True).questions[0]
    in_memory = report_run(con, run_id, "intent", "test", n_boot=0, stream=False).questions[0]
    assert streamed.counts == in_memory.counts
    for name, iv in in_memory.metrics.items():
        assert streamed.metrics[name].estimate == pytest.approx(iv.estimate, rel=1e-9, abs=1e-12), name
