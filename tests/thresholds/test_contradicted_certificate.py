"""Issue 28 §4: when the whole test split's error interval lies above α, every surface warns, in the words
``--slice`` uses for a slice."""

from __future__ import annotations

import numpy as np
import pytest

from tests.thresholds.synth import choice_data
from tests.thresholds.test_batch import _answers
from workbench.thresholds.choose import choose_thresholds
from workbench.thresholds.options import ThresholdOptions


def _shifted(seed: int = 5):
    """Calibration from a calibrated model; test from the same model on shifted traffic (over-confident)."""
    rng = np.random.default_rng(seed)
    cal_p, cal_y = choice_data(rng, 4000, k=5, scale=4.0)
    test_p, test_y = choice_data(rng, 3000, k=5, scale=4.0, temperature=0.3)
    return _answers(cal_p, cal_y), _answers(test_p, test_y)


def test_a_certified_rule_contradicted_by_the_whole_test_split_carries_a_warning():
    cal, test = _shifted()
    res = choose_thresholds(cal, test, ThresholdOptions(calibrate="none"))
    assert res.certified and res.test is not None and res.test["error"]["low"] > 0.05
    (w,) = res.warnings
    assert w.startswith("q, whole test split: error among accepted") and "lies entirely above α = 0.05" in w
    assert res.to_dict()["warnings"] == [w] and f"WARNING {w}" in res.summary()
    # the same words as a slice's warning
    from workbench.thresholds.evaluate import evaluate_rule_by_slice

    by_slice = evaluate_rule_by_slice(res, test, np.array(["all"] * len(test.labels), dtype=object))
    (sw,) = by_slice["warnings"]
    assert sw.split(": ", 1)[1] == w.split(": ", 1)[1].split(", although")[0]


def test_no_warning_when_the_test_split_agrees():
    cal, _ = _shifted()
    rng = np.random.default_rng(9)
    test = _answers(*choice_data(rng, 3000, k=5, scale=4.0))
    res = choose_thresholds(cal, test, ThresholdOptions(calibrate="none"))
    assert res.certified and res.warnings == [] and res.to_dict()["warnings"] == []


# -- every surface: the CLI's thresholds / compare / gate, the API and the UI ---------------------------


@pytest.fixture(scope="module")
def shifted_store(tmp_path_factory):
    """A real store: a synthetic model calibrated on the calibration split, over-confident on a shifted test
    split (a third of the test items confidently wrong), so a certified rule's test error lies above α."""
    import pandas as pd

    from workbench.schema import DecisionSchema
    from workbench.store.datasets import import_dataset
    from workbench.store.db import connect
    from workbench.store.import_spec import ImportSpec
    from workbench.store.runs import create_run, update_run, write_answers

    tmp = tmp_path_factory.mktemp("shifted")
    rng = np.random.default_rng(28)
    n, options = 8000, ["card", "transfer", "other"]
    gold = rng.integers(0, 3, n)
    pd.DataFrame(
        {
            "id": [f"t{i:05d}" for i in range(n)],
            "text": [f"ticket {i}" for i in range(n)],
            "topic": np.take(options, gold),
        }
    ).to_csv(tmp / "tickets.csv", index=False)
    schema = DecisionSchema.from_dict(
        {"questions": {"topic": {"type": "choice", "instructions": "Topic?", "criteria": dict.fromkeys(options)}}}
    )
    db = tmp / "wb.duckdb"
    con = connect(db)
    spec = ImportSpec(
        name="tickets", text_column="text", id_column="id", labels={"topic": "topic"},
        test_fraction=0.4, calibration_fraction=0.4,
    )  # fmt: skip
    info = import_dataset(con, [tmp / "tickets.csv"], spec, schema)
    rows = con.execute("SELECT item_id, split FROM items WHERE split <> 'train' ORDER BY item_id").fetchnumpy()
    truth = gold[np.array([int(i[1:]) for i in rows["item_id"]])]
    # calibrated: the top option is right with probability = its confidence
    conf = rng.uniform(0.85, 1.0, len(truth))
    right = rng.random(len(truth)) < conf
    test = rows["split"] == "test"
    right[test & (rng.random(len(truth)) < 0.33)] = False  # the shift: a third of the test items wrong
    conf[test] = np.maximum(conf[test], 0.97)  # and confidently so
    top = np.where(right, truth, (truth + rng.integers(1, 3, len(truth))) % 3)
    probs = np.full((len(truth), 3), 0.0) + ((1 - conf) / 2)[:, None]
    probs[np.arange(len(truth)), top] = conf
    run_id = create_run(
        con, dataset="tickets", dataset_version=info.version, schema=schema, provider="synthetic:shifted",
        splits=["calibration", "test"], name="shifted-model",
    )  # fmt: skip
    write_answers(
        con, pd.DataFrame({"run_id": run_id, "item_id": rows["item_id"], "question": "topic", "probs": list(probs)})
    )
    update_run(con, run_id, status="done")
    # a second, slightly noisier model: the second stage of a cascade
    noisy = probs * rng.uniform(0.9, 1.1, probs.shape)
    second = create_run(
        con, dataset="tickets", dataset_version=info.version, schema=schema, provider="synthetic:shifted-2",
        splits=["calibration", "test"], name="shifted-model-2",
    )  # fmt: skip
    write_answers(
        con,
        pd.DataFrame(
            {
                "run_id": second,
                "item_id": rows["item_id"],
                "question": "topic",
                "probs": list(noisy / noisy.sum(1, keepdims=True)),
            }
        ),
    )
    update_run(con, second, status="done")
    con.close()
    return {"db": db, "run_id": run_id, "second": second, "tmp": tmp}


def _is_the_warning(w: str) -> bool:
    return "whole test split: error among accepted" in w and "lies entirely above α = 0.05" in w and "certified" in w


def test_every_surface_warns_in_the_same_words(shifted_store, monkeypatch):
    import json

    import workbench as wb
    from tests.conftest import run_cli

    db, run_id = shifted_store["db"], shifted_store["run_id"]
    doc = json.loads(run_cli("thresholds", run_id, "-q", "topic", "--json", db=db, check=True).stdout)
    q = doc["questions"]["topic"]
    assert q["certified"] and len(q["warnings"]) == 1 and _is_the_warning(q["warnings"][0]), q["warnings"]
    words = q["warnings"][0]
    text = run_cli("thresholds", run_id, "-q", "topic", db=db, check=True).stdout
    assert f"WARNING {words}" in text and "CERTIFIED" in text
    # the API: the same sentence
    con = wb.connect(db, read_only=True)
    try:
        assert wb.choose_thresholds(con, run_id, "topic").warnings == [words]
    finally:
        con.close()
    # compare: the run's policy figures carry it, and the text prints it
    cmp = json.loads(run_cli("compare", run_id, "--n-boot", "50", "--json", db=db, check=True).stdout)
    (row,) = cmp["rows"]
    assert row["policy"]["warnings"] == [words]
    assert f"WARNING {run_id}: {words}" in run_cli("compare", run_id, "--n-boot", "50", db=db, check=True).stdout
    # the gate, judging the exported policy on the test split
    policy = shifted_store["tmp"] / "policy.json"
    run_cli("policy", "export", run_id, "-q", "topic", "--out", str(policy), db=db, check=True)
    req = shifted_store["tmp"] / "req.yaml"
    req.write_text(
        f"split: test\nn_boot: 50\nrequirements:\n  - {{question: topic, metric: coverage_at_policy, min: 0.01, policy: {policy}}}\n",
        encoding="utf-8",
    )
    gate = json.loads(run_cli("gate", run_id, "-r", str(req), "--json", db=db).stdout)
    (gw,) = gate["warnings"]
    assert (
        _is_the_warning(gw)
        and gw.split(": ", 1)[1].split(", although")[0] == words.split(": ", 1)[1].split(", although")[0]
    )
    assert f"WARNING {gw}" in run_cli("gate", run_id, "-r", str(req), db=db).stdout
    # cascade: the recommended configuration carries it too
    stages = ("--stage", run_id, "--stage", shifted_store["second"])
    cas = json.loads(run_cli("cascade", *stages, "--question", "topic", "--json", db=db, check=True).stdout)
    assert cas["certified"]
    (cw,) = cas["warnings"]
    assert _is_the_warning(cw), cw
    assert f"WARNING {cw}" in run_cli("cascade", *stages, "--question", "topic", db=db, check=True).stdout
    # the UI's Thresholds page
    from streamlit.testing.v1 import AppTest

    from tests.ui.store_builder import APP

    monkeypatch.setenv("WORKBENCH_DB", str(db))
    at = AppTest.from_file(str(APP), default_timeout=120).run()
    at.switch_page("workbench/ui/pages/thresholds.py").run()
    assert not at.exception, [e.value for e in at.exception]
    assert words in [w.value for w in at.warning], [w.value for w in at.warning]
