"""Slices (issue 16, item 3): item metadata kept at import (--meta-column), built-in state_length
buckets, `report --slice` and `thresholds --slice`.

Acceptance: `report --slice channel` on a dataset imported with a metadata column gives per-slice
figures equal (to 1e-12) to the report of the run's answers filtered to that slice, the filter built
from the CSV (not from the store), and accuracies equal to scikit-learn's on the slice's rows.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from sklearn.metrics import accuracy_score

import workbench as wb
from tests.conftest import ROOT, dataset_path, run_cli, table_counts
from workbench.errors import DataImportError, NotFoundError
from workbench.metrics.report import question_report
from workbench.metrics.slices import MISSING, length_buckets, slice_groups
from workbench.store.datasets import dataset_info, import_dataset, load_item_meta
from workbench.store.db import connect
from workbench.store.import_spec import ImportSpec
from workbench.store.runs import load_answers
from workbench.thresholds.bounds import clopper_pearson, wilson
from workbench.workflows.evaluation import with_votes

SCHEMA = str(ROOT / "experiments" / "schemas" / "sms_spam.yaml")
N_BOOT = 50


@pytest.fixture(scope="module")
def sms(tmp_path_factory) -> dict:
    """1,500 SMS Spam rows with a seeded `channel` column (every 17th row blank), imported with
    --meta-column channel through the CLI, answered by the tf-idf baseline (~8 s)."""
    tmp = tmp_path_factory.mktemp("slices")
    frame = pd.read_csv(dataset_path("sms_spam", "sms_spam.csv"), dtype=str, keep_default_na=False).head(1500)
    rng = np.random.default_rng(0)
    frame["channel"] = rng.choice(["web", "app", "sms"], len(frame))
    frame.loc[::17, "channel"] = ""
    path = tmp / "sms.csv"
    frame.to_csv(path, index=False)
    db = tmp / "wb.duckdb"
    run_cli(
        "datasets", "import", str(path), "--name", "sms", "--text-column", "text", "--id-column", "id",
        "--label", "spam=label", "--positive", "spam=spam", "--meta-column", "channel",
        "--test-fraction", "0.3", "--calibration-fraction", "0.3", "--seed", "0", "--schema", SCHEMA,
        db=db, check=True,
    )  # fmt: skip
    run_id = run_cli(
        "run", "--dataset", "sms", "--schema", SCHEMA, "--provider", "baseline:tfidf-logreg", db=db, check=True
    ).stdout.strip()
    return {"db": db, "run_id": run_id, "frame": frame, "csv": path}


def test_report_slice_matches_the_filtered_run(sms):
    proc = run_cli(
        "report", sms["run_id"], "--slice", "channel", "--slice", "state_length", "--boot", str(N_BOOT), "--json",
        db=sms["db"], check=True,
    )  # fmt: skip
    doc = json.loads(proc.stdout)
    channel = doc["slices"]["channel"]
    assert channel["values"] == ["app", "sms", "web", MISSING]
    by_id = dict(zip(sms["frame"]["id"], sms["frame"]["channel"].replace("", MISSING), strict=True))
    gold = dict(zip(sms["frame"]["id"], (sms["frame"]["label"] == "spam").map({True: 0, False: 1}), strict=True))
    con = connect(sms["db"], read_only=True)
    try:
        answers = with_votes(con, load_answers(con, sms["run_id"], "spam", ["test"]), ["test"])
    finally:
        con.close()
    slice_of = np.asarray([by_id[i] for i in answers.item_ids], dtype=object)  # from the CSV, not the store
    total = 0
    for value in channel["values"]:
        mask = slice_of == value
        filtered = question_report(answers.select(mask), n_boot=N_BOOT, seed=0, n_bins=15, level=0.95, smooth=True)
        got = channel["questions"]["spam"][value]
        assert got["counts"]["n_labelled"] == filtered.counts["n_labelled"] == int(mask.sum())
        assert set(got["metrics"]) == set(filtered.metrics)
        for name, iv in filtered.metrics.items():
            for part in ("estimate", "low", "high"):
                assert got["metrics"][name][part] == pytest.approx(getattr(iv, part), abs=1e-12, nan_ok=True), name
        # accuracy on the slice's rows, from scikit-learn on the CSV labels
        y_true = [gold[i] for i in answers.item_ids[mask]]
        y_pred = answers.probs[mask].argmax(axis=1)
        assert got["metrics"]["accuracy"]["estimate"] == pytest.approx(accuracy_score(y_true, y_pred), abs=1e-12)
        total += got["counts"]["n_labelled"]
    assert total == doc["questions"]["spam"]["counts"]["n_labelled"]  # the slices partition the split
    # state_length: four quartile buckets over the version; their sizes add up to the test split
    lengths = doc["slices"]["state_length"]
    assert len(lengths["values"]) == 4
    assert sum(r["counts"]["n_labelled"] for r in lengths["questions"]["spam"].values()) == total

    table = run_cli("report", sms["run_id"], "--slice", "channel", "--boot", "20", db=sms["db"], check=True).stdout
    assert "spam by channel" in table and MISSING in table


def test_api_report_slices_and_unknown_column(sms):
    con = wb.connect(sms["db"], read_only=True)
    try:
        rep = wb.report(con, sms["run_id"], "spam", n_boot=N_BOOT, slice=["channel"])
        frame = rep.slices["channel"].to_frame()
        acc = frame[frame["metric"] == "accuracy"].set_index("slice")["n"]
        assert acc.sum() == rep.questions[0].counts["n_labelled"]
        with pytest.raises(NotFoundError, match="no metadata column 'language'"):
            wb.report(con, sms["run_id"], "spam", n_boot=N_BOOT, slices="language")
    finally:
        con.close()
    bad = run_cli("report", sms["run_id"], "--slice", "language", db=sms["db"])
    assert bad.returncode == 2 and "--meta-column" in bad.stderr


def test_thresholds_slice_partition_and_intervals(sms):
    proc = run_cli(
        "thresholds", sms["run_id"], "-q", "spam", "--max-error", "0.1", "--calibrate", "none",
        "--slice", "channel", "--json", db=sms["db"], check=True,
    )  # fmt: skip
    q = json.loads(proc.stdout)["questions"]["spam"]
    sl = q["slices"]["channel"]
    rows = sl["slices"]
    assert [r["slice"] for r in rows] == ["app", "sms", "web", MISSING]
    # the slices partition the test split: counts add up to the whole-split figures
    for key in ("n_items", "n_accepted", "n_errors"):
        assert sum(r[key] for r in rows) == q["test"][key]
    for r in rows:
        assert (r["coverage"]["low"], r["coverage"]["high"]) == pytest.approx(wilson(r["n_accepted"], r["n_items"]))
        assert (r["error"]["low"], r["error"]["high"]) == pytest.approx(clopper_pearson(r["n_errors"], r["n_accepted"]))
        assert r["error_above_alpha"] is (r["error"]["low"] > 0.1)


def test_thresholds_warns_when_a_slice_error_interval_lies_above_alpha(tmp_path):
    """A `bad` slice whose confident answers are wrong half of the time: its error interval lies above α."""
    rng = np.random.default_rng(3)
    n = 1200
    bad = np.arange(n) % 5 == 0  # a fifth of each split
    labels = rng.integers(0, 2, n)
    correct = np.where(bad, rng.random(n) < 0.5, rng.random(n) < 0.99)
    top = np.where(correct, labels, 1 - labels)
    p_top = rng.uniform(0.9, 0.99, n)
    p_yes = np.where(top == 0, p_top, 1 - p_top)
    rows = pd.DataFrame(
        {
            "id": [f"i{j:05d}" for j in range(n)],
            "text": [f"message {j}" for j in range(n)],
            "label": np.where(labels == 0, "yes", "no"),
            "split": np.where(np.arange(n) % 2 == 0, "calibration", "test"),
            "segment": np.where(bad, "bad", "good"),
            "p_yes": p_yes,
        }
    )
    path = tmp_path / "d.csv"
    rows.to_csv(path, index=False)
    db = tmp_path / "wb.duckdb"
    con = connect(db)
    try:
        schema = wb.load_schema(SCHEMA)
        import_dataset(
            con,
            [path],
            ImportSpec(
                name="seg", text_column="text", id_column="id", labels={"spam": "label"}, split_column="split",
                meta_columns=["segment"],
            ),
            schema,
        )  # fmt: skip
        run_id = _write_run(con, "seg", schema, rows)
    finally:
        con.close()
    proc = run_cli(
        "thresholds", run_id, "-q", "spam", "--max-error", "0.2", "--calibrate", "none", "--slice", "segment",
        "--json", db=db, check=True,
    )  # fmt: skip
    sl = json.loads(proc.stdout)["questions"]["spam"]["slices"]["segment"]
    flags = {r["slice"]: r["error_above_alpha"] for r in sl["slices"]}
    assert flags == {"bad": True, "good": False}
    assert len(sl["warnings"]) == 1 and "slice 'bad'" in sl["warnings"][0]
    assert "slice 'bad'" in proc.stderr and "above α = 0.2" in proc.stderr


def _write_run(con, dataset: str, schema, rows: pd.DataFrame) -> str:
    from workbench.schema.answers import entropy, top_two
    from workbench.store.runs import create_run, write_answers

    run_id = create_run(
        con, dataset=dataset, dataset_version=1, schema=schema, provider="test:fixed", splits=["calibration", "test"],
        status="done",
    )  # fmt: skip
    probs = np.stack([rows["p_yes"].to_numpy(), 1 - rows["p_yes"].to_numpy()], axis=1)
    _, p1, p2 = top_two(probs)
    write_answers(
        con,
        pd.DataFrame(
            {
                "run_id": run_id,
                "item_id": rows["id"],
                "question": "spam",
                "probs": [list(map(float, p)) for p in probs],
                "p_top": p1,
                "margin": p1 - p2,
                "entropy": entropy(probs),
                "failure_kind": None,
                "latency_ms": 1.0,
                "cost_usd": 0.0,
            }
        ),
    )
    return run_id


# -- import: metadata is part of the version -------------------------------------------------------
def _csv(tmp_path, rows, name="m.csv"):
    path = tmp_path / name
    pd.DataFrame(rows, columns=["id", "text", "label", "lang", "ann"]).to_csv(path, index=False)
    return path


ROWS = [
    ("a", "hello there", "ham", "en", "x"),
    ("b", "WIN a prize now", "spam", "en", "x"),
    ("c", "hola amigo", "ham", "es", "x"),
    ("d", "bonjour", "ham", "", "x"),
]


def _spec(**kw) -> ImportSpec:
    base = dict(name="m", text_column="text", id_column="id", labels={"spam": "label"}, split="test")
    return ImportSpec(**{**base, **kw})  # type: ignore[arg-type]


def test_meta_is_versioned_and_read_back(tmp_path):
    con = connect(tmp_path / "wb.duckdb")
    schema = wb.load_schema(SCHEMA)
    first = import_dataset(con, [_csv(tmp_path, ROWS)], _spec(meta_columns=["lang"], positive={"spam": "spam"}), schema)
    assert dataset_info(con, "m")["meta_columns"] == ["lang"]
    meta = load_item_meta(con, "m", first.version, "lang")
    assert meta["item_id"].tolist() == ["a", "b", "c", "d"]
    assert meta["value"].tolist()[:3] == ["en", "en", "es"] and pd.isna(meta["value"].iloc[3])
    same = import_dataset(con, [_csv(tmp_path, ROWS)], _spec(meta_columns=["lang"], positive={"spam": "spam"}), schema)
    assert not same.created and same.version == 1  # same content, same fingerprint
    changed = [*ROWS[:2], ("c", "hola amigo", "ham", "pt", "x"), ROWS[3]]
    again = import_dataset(
        con, [_csv(tmp_path, changed)], _spec(meta_columns=["lang"], positive={"spam": "spam"}), schema
    )
    assert again.created and again.version == 2 and again.fingerprint != first.fingerprint
    assert load_item_meta(con, "m", 2, "lang")["value"].tolist()[2] == "pt"
    # without --meta-column the content is the items and labels alone: a third version, no metadata
    plain = import_dataset(con, [_csv(tmp_path, ROWS)], _spec(positive={"spam": "spam"}), schema)
    assert plain.version == 3
    assert con.execute("SELECT count(*) FROM items WHERE version = 3 AND meta IS NOT NULL").fetchone() == (0,)
    # --append keeps the old items' metadata
    more = _csv(tmp_path, [("e", "hi", "ham", "de", "x")], "more.csv")
    app = import_dataset(con, [more], _spec(meta_columns=["lang"], append=True, positive={"spam": "spam"}), schema)
    assert app.version == 4
    assert load_item_meta(con, "m", 4, "lang").set_index("item_id")["value"].to_dict()["e"] == "de"
    # state_length: characters of the text
    lengths = load_item_meta(con, "m", 1, "state_length")
    assert lengths["value"].tolist() == [len(r[1]) for r in ROWS]
    con.close()


def test_meta_refusals_write_nothing(tmp_path):
    con = connect(tmp_path / "wb.duckdb")
    before = table_counts(con)
    path = _csv(tmp_path, ROWS)
    with pytest.raises(DataImportError, match="no column 'channel'"):
        import_dataset(con, [path], _spec(meta_columns=["channel"]))
    with pytest.raises(DataImportError, match="built-in slice"):
        import_dataset(con, [path], _spec(meta_columns=["state_length"]))
    with pytest.raises(DataImportError, match="given twice"):
        import_dataset(con, [path], _spec(meta_columns=["lang", "lang"]))
    assert table_counts(con) == before
    con.close()


def test_meta_in_the_long_annotator_format(tmp_path):
    con = connect(tmp_path / "wb.duckdb")
    long = [("a", "hi", "ham", "en", "x"), ("a", "hi", "spam", "en", "y"), ("b", "yo", "ham", "es", "x")]
    info = import_dataset(
        con, [_csv(tmp_path, long)], _spec(meta_columns=["lang"], annotator_column="ann", positive={"spam": "spam"})
    )
    assert load_item_meta(con, "m", info.version, "lang")["value"].tolist() == ["en", "es"]
    assert con.execute("SELECT count(*) FROM labels").fetchone() == (3,)
    disagree = [("a", "hi", "ham", "en", "x"), ("a", "hi", "spam", "fr", "y")]
    with pytest.raises(DataImportError, match=r"item 'a'.*disagree on meta \(column 'lang'\)"):
        import_dataset(
            con,
            [_csv(tmp_path, disagree, "d.csv")],
            _spec(name="m2", meta_columns=["lang"], annotator_column="ann", positive={"spam": "spam"}),
        )
    con.close()


# -- the pure helpers ----------------------------------------------------------------------------
def test_length_buckets_are_the_quartiles():
    x = np.arange(1, 101)
    labels, order = length_buckets(x)
    assert order == ["≤ 25 chars", "26–50 chars", "51–75 chars", "≥ 76 chars"]
    assert [int((labels == o).sum()) for o in order] == [25, 25, 25, 25]
    # against pandas' quartile cut (right-closed bins on the same edges)
    cut = pd.cut(x, [0, 25, 50, 75, 100], labels=False)
    assert np.array_equal(cut, np.asarray([order.index(v) for v in labels]))
    same, one = length_buckets(np.full(10, 7))
    assert one == ["all lengths"] and set(same) == {"all lengths"}


def test_slice_groups_order_and_missing():
    groups = slice_groups(np.array(["b", None, "a", "b", np.nan], dtype=object), order=["b"])
    assert [g for g, _ in groups] == ["b", "a", MISSING]
    assert [int(m.sum()) for _, m in groups] == [2, 1, 2]


def test_compare_slice_pairs_within_each_slice(sms):
    """compare --slice: per slice, the paired accuracy difference of a calibrated view (isotonic moves
    some arg-maxes) vs the run equals the difference of scikit-learn accuracies on the slice's items."""
    view = json.loads(
        run_cli("calibrate", sms["run_id"], "--method", "isotonic", "--json", db=sms["db"], check=True).stdout
    )["run_id"]
    doc = json.loads(
        run_cli(
            "compare", sms["run_id"], view, "--baseline", sms["run_id"], "--slice", "channel", "--n-boot", "50",
            "--no-policy", "--json", db=sms["db"], check=True,
        ).stdout
    )  # fmt: skip
    rows = {r["run_id"]: r for r in doc["rows"]}
    con = connect(sms["db"], read_only=True)
    try:
        a, b = (load_answers(con, r, "spam", ["test"]) for r in (sms["run_id"], view))
    finally:
        con.close()
    by_id = dict(zip(sms["frame"]["id"], sms["frame"]["channel"].replace("", MISSING), strict=True))
    sl = np.asarray([by_id[i] for i in a.item_ids], dtype=object)
    assert np.array_equal(a.item_ids, b.item_ids)
    figures = rows[view]["slices"]["channel"]["slices"]
    assert list(figures) == ["app", "sms", "web", MISSING]
    for value, f in figures.items():
        m = sl == value
        acc_a = accuracy_score(a.labels[m], a.probs[m].argmax(axis=1))
        acc_b = accuracy_score(b.labels[m], b.probs[m].argmax(axis=1))
        assert f["n_labelled"] == f["vs_baseline"]["n_pairs"] == int(m.sum())
        assert f["metrics"]["accuracy"]["estimate"] == pytest.approx(acc_b, abs=1e-12)
        assert f["vs_baseline"]["metrics"]["accuracy"]["difference"] == pytest.approx(acc_b - acc_a, abs=1e-12)
    assert "vs_baseline" not in rows[sms["run_id"]]["slices"]["channel"]["slices"]["app"]
