"""Annotator imports (issue 15, item 2): long format (--annotator-column), vote counts (--label-votes),
every vote kept, majority gold, soft scores and agreement through the store, and the refusals."""

from __future__ import annotations

import json
import re
from pathlib import Path

import krippendorff
import numpy as np
import pandas as pd
import pytest
from sklearn.metrics import cohen_kappa_score

import workbench as wb
from tests.conftest import run_cli, table_counts
from workbench.errors import DataImportError
from workbench.schema import load_schema
from workbench.store.datasets import import_dataset, load_labels, load_votes
from workbench.store.db import connect
from workbench.store.import_spec import ImportSpec
from workbench.store.runs import create_run, load_answers, write_answers
from workbench.workflows.evaluation import agreement_for_run, report_run

SCHEMA = """\
name: tickets
questions:
  topic:
    type: choice
    instructions: What is it about?
    criteria: {card: card, transfer: transfer, other: other}
  urgency:
    type: score
    instructions: How urgent is it?
    criteria: [Not urgent, Soon, Today]
"""
# item t1: card ×3; t2: card, transfer, transfer; t3: tie transfer/other (schema order: transfer first);
# t4: one vote. Urgency given as level text by some annotators, as level index by others.
LONG = [
    ("t1", "my card is late", "train", "ann1", "card", "Soon"),
    ("t1", "my card is late", "train", "ann2", "card", "1"),
    ("t1", "my card is late", "train", "ann3", "card", "Today"),
    ("t2", "money did not arrive", "test", "ann1", "card", "Today"),
    ("t2", "money did not arrive", "test", "ann2", "transfer", "2"),
    ("t2", "money did not arrive", "test", "ann3", "transfer", "Today"),
    ("t3", "hello", "test", "ann2", "other", "Not urgent"),
    ("t3", "hello", "test", "ann3", "transfer", "0"),
    ("t4", "where is my refund", "test", "ann1", "transfer", "Soon"),
]


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    schema = tmp_path / "tickets.yaml"
    schema.write_text(SCHEMA)
    long = tmp_path / "long.csv"
    pd.DataFrame(LONG, columns=["id", "text", "split", "who", "topic", "urgency"]).to_csv(long, index=False)
    wide = tmp_path / "wide.csv"
    pd.DataFrame(
        {
            "id": ["t1", "t2", "t3", "t4"],
            "text": ["my card is late", "money did not arrive", "hello", "where is my refund"],
            "split": ["train", "test", "test", "test"],
            "card": [3, 1, 0, 0],
            "n_transfer": [0, 2, 1, 1],
            "n_other": [0, 0, 1, ""],  # blank = no votes
        }
    ).to_csv(wide, index=False)
    return {"schema": schema, "long": long, "wide": wide}


def long_args(path: Path, schema: Path, *extra: str) -> list[str]:
    return [
        "datasets",
        "import",
        str(path),
        "--name",
        "tickets",
        "--text-column",
        "text",
        "--id-column",
        "id",
        "--split-column",
        "split",
        "--annotator-column",
        "who",
        "--label",
        "topic=topic",
        "--label",
        "urgency=urgency",
        "--schema",
        str(schema),
        *extra,
    ]


def votes_by_item(con, question: str, options: list[str]) -> dict[str, list[str]]:
    v = load_votes(con, "tickets", 1, question, options)
    out: dict[str, list[str]] = {}
    for item, ann, opt in zip(v["item_id"], v["annotator"], v["option"]):
        out.setdefault(item, []).append(f"{ann}:{options[opt]}" if ann else options[opt])
    return out


def test_long_format_keeps_every_vote_with_its_annotator(db_path: Path, files):
    proc = run_cli(*long_args(files["long"], files["schema"], "--json"), db=db_path, check=True)
    doc = json.loads(proc.stdout)
    assert doc["import"]["n_items"] == 4 and doc["dataset"]["splits"] == {"test": 3, "train": 1}
    topic = doc["dataset"]["labels"]["topic"]
    assert topic["n_votes"] == 9 and topic["n_annotators"] == 3 and topic["items_with_several_votes"] == 3
    # items per majority label (t3's tie goes to transfer, first in schema order); votes per option
    assert topic["label_counts"] == {"transfer": 3, "card": 1}
    assert topic["vote_counts"] == {"card": 4, "transfer": 4, "other": 1}
    with connect(db_path, read_only=True) as con:
        assert votes_by_item(con, "topic", ["card", "transfer", "other"]) == {
            "t1": ["ann1:card", "ann2:card", "ann3:card"],
            "t2": ["ann1:card", "ann2:transfer", "ann3:transfer"],
            "t3": ["ann2:other", "ann3:transfer"],
            "t4": ["ann1:transfer"],
        }
        # the baseline trainer's majority labels break t3's tie as the metrics do (schema order, not "other")
        majority = load_labels(con, "tickets", question="topic")
        assert dict(zip(majority["item_id"], majority["option_id"])) == {
            "t1": "card",
            "t2": "transfer",
            "t3": "transfer",
            "t4": "transfer",
        }
        # score levels given as text or index are one level
        assert votes_by_item(con, "urgency", ["0", "1", "2"])["t1"] == ["ann1:1", "ann2:1", "ann3:2"]
    # the same file again: same fingerprint, no new version; one vote changed: a new version
    again = json.loads(run_cli(*long_args(files["long"], files["schema"], "--json"), db=db_path, check=True).stdout)
    assert again["import"]["created"] is False and again["import"]["fingerprint"] == doc["import"]["fingerprint"]
    changed = files["long"].with_name("changed.csv")
    frame = pd.read_csv(files["long"], dtype=str)
    frame.loc[7, "topic"] = "other"
    frame.to_csv(changed, index=False)
    third = json.loads(run_cli(*long_args(changed, files["schema"], "--json"), db=db_path, check=True).stdout)
    assert third["import"]["version"] == 2 and third["import"]["fingerprint"] != doc["import"]["fingerprint"]


def test_vote_counts_import_the_same_votes_anonymously(db_path: Path, files):
    schema = load_schema(files["schema"])
    with connect(db_path) as con:
        info = wb.import_dataset(
            con,
            files["wide"],
            name="tickets",
            text_column="text",
            id_column="id",
            split_column="split",
            label_votes={"topic": {"card": "card", "transfer": "n_transfer", "other": "n_other"}},
            schema=schema,
        )
        assert info.n_items == 4 and info.questions == ["topic"]
        assert votes_by_item(con, "topic", ["card", "transfer", "other"]) == {
            "t1": ["card", "card", "card"],
            "t2": ["card", "transfer", "transfer"],
            "t3": ["transfer", "other"],
            "t4": ["transfer"],
        }
        assert con.execute("SELECT DISTINCT annotator FROM labels").fetchall() == [("",)]
    # the CLI spelling: OPTION:COLUMN, or a bare COLUMN named like its option
    other = db_path.with_name("cli.duckdb")
    proc = run_cli(
        "datasets",
        "import",
        str(files["wide"]),
        "--name",
        "tickets",
        "--text-column",
        "text",
        "--id-column",
        "id",
        "--split-column",
        "split",
        "--label-votes",
        "topic=card,transfer:n_transfer,other:n_other",
        "--schema",
        str(files["schema"]),
        "--json",
        db=other,
        check=True,
    )
    labels = json.loads(proc.stdout)["dataset"]["labels"]["topic"]
    assert labels["n_votes"] == 9 and labels["anonymous_votes"] == 9 and labels["n_annotators"] == 0


def _answer_run(con, probs: dict[str, dict[str, list[float]]]) -> str:
    schema = load_schema_text()
    run_id = create_run(
        con, dataset="tickets", dataset_version=1, schema=schema, provider="replay:test", splits=["test"], status="done"
    )
    rows = [
        {"run_id": run_id, "item_id": item, "question": q, "probs": p}
        for q, per_item in probs.items()
        for item, p in per_item.items()
    ]
    write_answers(con, pd.DataFrame(rows))
    return run_id


def load_schema_text():
    import yaml

    from workbench.schema import DecisionSchema

    return DecisionSchema.from_dict(yaml.safe_load(SCHEMA), source="test")


def test_majority_soft_scores_and_agreement_through_the_store(db_path: Path, files):
    run_cli(*long_args(files["long"], files["schema"]), db=db_path, check=True)
    topic_p = {"t2": [0.2, 0.7, 0.1], "t3": [0.1, 0.3, 0.6], "t4": [0.3, 0.6, 0.1]}
    urgency_p = {"t2": [0.1, 0.2, 0.7], "t3": [0.6, 0.3, 0.1], "t4": [0.2, 0.5, 0.3]}
    with connect(db_path) as con:
        run_id = _answer_run(con, {"topic": topic_p, "urgency": urgency_p})
        ans = load_answers(con, run_id, "topic", ["test"])
        # majority gold: t2 transfer; t3 tie transfer/other -> transfer (schema order); t4 transfer
        assert list(ans.labels) == [1, 1, 1]
        soft = report_run(con, run_id, "topic", "test", n_boot=0, labels="soft").questions[0]
        hard = report_run(con, run_id, "topic", "test", n_boot=0).questions[0]
        agreement = agreement_for_run(con, run_id, split="test")
    # soft log loss by hand: t2 votes (1/3 card, 2/3 transfer), t3 (1/2 transfer, 1/2 other), t4 transfer
    expected = np.mean(
        [
            -(np.log(0.2) + 2 * np.log(0.7)) / 3,
            -(np.log(0.3) + np.log(0.6)) / 2,
            -np.log(0.6),
        ]
    )
    assert soft.metrics["soft_log_loss"].estimate == pytest.approx(expected, rel=1e-12)
    assert soft.counts["n_votes"] == 6 and soft.params["labels"] == "soft"
    assert hard.metrics["log_loss"].estimate == pytest.approx(-np.mean(np.log([0.7, 0.3, 0.6])))
    assert soft.metrics["soft_accuracy"].estimate == pytest.approx(np.mean([2 / 3, 1 / 2, 1.0]))
    # agreement on the test items with >= 2 votes (t2, t3), references on the raw ratings
    top = agreement["topic"]
    assert top is not None and top.n_items == 2 and top.n_annotators == 3
    # coders × items (t2, t3); card 0, transfer 1, other 2
    reliability = np.array([[0, np.nan], [1, 2], [1, 1]], dtype=float)
    assert top.annotators["krippendorff_alpha_nominal"] == pytest.approx(
        krippendorff.alpha(reliability_data=reliability, level_of_measurement="nominal")
    )
    model = np.array([[1, 2]], dtype=float)  # the run's top options on t2, t3
    assert top.model["krippendorff_alpha_nominal"] == pytest.approx(
        krippendorff.alpha(reliability_data=np.vstack([reliability, model]), level_of_measurement="nominal")
    )
    urg = agreement["urgency"]
    assert urg is not None
    # urgency on t2 (2, 2, 2) and t3 (-, 0, 0): interval alpha with the level index
    rel_u = np.array([[2, np.nan], [2, 0], [2, 0]], dtype=float)
    for level in ("nominal", "ordinal", "interval"):
        assert urg.annotators[f"krippendorff_alpha_{level}"] == pytest.approx(
            krippendorff.alpha(reliability_data=rel_u, level_of_measurement=level, value_domain=[0, 1, 2])
        )
    assert urg.annotators["quadratic_weighted_kappa"] == pytest.approx(
        np.mean(
            [
                cohen_kappa_score([2, 0], [2, 0], weights="quadratic"),  # ann2 vs ann3 share t2, t3
            ]
        )
    )


def test_report_cli_prints_agreement_and_soft_scores(db_path: Path, files):
    run_cli(*long_args(files["long"], files["schema"]), db=db_path, check=True)
    with connect(db_path) as con:
        run_id = _answer_run(con, {"topic": {"t2": [0.2, 0.7, 0.1], "t3": [0.1, 0.3, 0.6], "t4": [0.3, 0.6, 0.1]}})
    doc = json.loads(
        run_cli("report", run_id, "--labels", "soft", "--boot", "0", "--json", db=db_path, check=True).stdout
    )
    q = doc["questions"]["topic"]
    assert set(q["metrics"]) >= {"soft_log_loss", "soft_brier", "soft_ece_uniform"}
    assert q["agreement"]["n_items"] == 2 and q["agreement"]["model"]["pairwise_agreement"] is not None
    text = run_cli("report", run_id, "--boot", "0", db=db_path, check=True).stdout
    assert "krippendorff_alpha_nominal" in text and "annotators" in text and "accuracy" in text
    bad = run_cli("report", run_id, "--labels", "fuzzy", db=db_path)
    assert bad.returncode == 2 and "--labels" in bad.stderr


# -- refusals: one line naming the item/field, exit 2, nothing written --------------------------------
def _refused(db_path: Path, args: list[str], *needles: str) -> None:
    proc = run_cli(*args, db=db_path)
    assert proc.returncode == 2, proc.stderr
    for needle in needles:
        assert needle in proc.stderr, proc.stderr
    if db_path.exists():  # refused before the store was opened: nothing to check
        with connect(db_path, read_only=True) as con:
            counts = table_counts(con)
        assert counts.get("labels", 0) == 0 and counts.get("items", 0) == 0


def test_rows_of_one_item_must_agree(db_path: Path, files, tmp_path: Path):
    frame = pd.read_csv(files["long"], dtype=str)
    frame.loc[4, "text"] = "money did not arrive!"
    bad = tmp_path / "bad_text.csv"
    frame.to_csv(bad, index=False)
    _refused(db_path, long_args(bad, files["schema"]), "item 't2'", "text", "column 'text'")
    frame = pd.read_csv(files["long"], dtype=str)
    frame.loc[6, "split"] = "train"
    frame.to_csv(bad, index=False)
    with connect(db_path) as con:
        with pytest.raises(DataImportError, match="item 't3': its annotators' rows disagree on split"):
            import_dataset(con, [bad], _spec(labels={"topic": "topic"}), load_schema(files["schema"]))


def _spec(**kw) -> ImportSpec:
    base = dict(name="tickets", text_column="text", id_column="id", split_column="split", annotator_column="who")
    base.update(kw)
    return ImportSpec(**base)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("edit", "spec", "needle"),
    [
        (
            lambda f: pd.concat([f, f.iloc[[1]]]),
            {"labels": {"topic": "topic"}},
            "more than one row from annotator 'ann2'",
        ),
        (lambda f: f.assign(who=f["who"].where(f.index != 2, "  ")), {"labels": {"topic": "topic"}}, "empty annotator"),
        (lambda f: f, {"labels": {"topic": "topic"}, "id_column": None}, "`annotator_column` needs `id_column`"),
        (
            lambda f: f,
            {"labels": {"topic": "topic"}, "label_votes": {"urgency": {"0": "urgency"}}},
            "do not mix",
        ),
    ],
)
def test_long_format_refusals(db_path: Path, files, tmp_path: Path, edit, spec, needle):
    bad = tmp_path / "bad.csv"
    edit(pd.read_csv(files["long"], dtype=str)).to_csv(bad, index=False)
    with connect(db_path) as con:
        with pytest.raises(DataImportError, match=re.escape(needle)):
            import_dataset(con, [bad], _spec(**spec), load_schema(files["schema"]))
        assert table_counts(con).get("labels", 0) == 0


@pytest.mark.parametrize(
    ("cell", "votes", "needle"),
    [
        (
            "1.5",
            {"card": "card"},
            "line 3: vote count '1.5' in column 'card' (option 'card' of question 'topic', item 't2')",
        ),
        ("-1", {"card": "card"}, "not a whole number"),
        ("3", {"maybe": "card"}, "'maybe' (column 'card') is not an option"),
        ("3", {"card": "nope"}, "no column 'nope'"),
    ],
)
def test_vote_count_refusals(db_path: Path, files, tmp_path: Path, cell: str, votes: dict, needle: str):
    frame = pd.read_csv(files["wide"], dtype=str)
    frame.loc[1, "card"] = cell
    bad = tmp_path / "bad_votes.csv"
    frame.to_csv(bad, index=False)
    spec = _spec(annotator_column=None, label_votes={"topic": votes})
    with connect(db_path) as con:
        with pytest.raises(DataImportError, match=re.escape(needle)):
            import_dataset(con, [bad], spec, load_schema(files["schema"]))
        assert table_counts(con).get("labels", 0) == 0


def test_vote_count_cli_refuses_an_option_twice(db_path: Path, files):
    args = ["datasets", "import", str(files["wide"]), "--name", "tickets", "--text-column", "text", "--id-column", "id"]
    args += ["--split-column", "split", "--label-votes", "topic=card,card:n_transfer", "--schema", str(files["schema"])]
    _refused(db_path, args, "option 'card' is given twice")


def test_selected_answers_keep_their_votes_aligned(db_path: Path, files):
    """RunAnswers.select() carries the per-vote rows along, so agreement on a selection is the selection's."""
    from workbench.workflows.evaluation import agreement_for_answers, with_votes

    run_cli(*long_args(files["long"], files["schema"]), db=db_path, check=True)
    with connect(db_path) as con:
        run_id = _answer_run(con, {"topic": {"t2": [0.2, 0.7, 0.1], "t3": [0.1, 0.3, 0.6], "t4": [0.3, 0.6, 0.1]}})
        ans = with_votes(con, load_answers(con, run_id, "topic", ["test"]), ["test"])
        assert ans.votes is not None and ans.votes.tolist() == [[1, 2, 0], [0, 1, 1], [0, 1, 0]]
        only_t3 = ans.select(np.array([False, True, False]))
        assert only_t3.votes is not None and only_t3.votes.tolist() == [[0, 1, 1]]
        ag = agreement_for_answers(only_t3)
    assert ag is not None and ag.n_items == 1 and ag.n_votes == 2
    assert ag.annotators["pairwise_agreement"] == 0.0  # ann2 said other, ann3 transfer
    assert [r["annotator"] for r in ag.per_annotator] == ["ann2", "ann3"]
