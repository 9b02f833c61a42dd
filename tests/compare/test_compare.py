"""Experiments as files and `compare`: a real (small) BANKING77 run of 2 providers x 2 schema variants.

The zero-shot model reads option descriptions, so the descriptive and terse variants must give it
different answers; the TF-IDF baseline is trained on labels and must not care. Every figure of the
comparison is recomputed here from the stored answers with scikit-learn / scipy.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy.stats import binomtest
from sklearn.metrics import accuracy_score
from sklearn.metrics import log_loss as sk_log_loss

from tests.conftest import ROOT, dataset_path, run_cli
from workbench.metrics.bootstrap import paired_bootstrap
from workbench.metrics.scores import accuracy
from workbench.store.datasets import import_dataset
from workbench.store.db import connect
from workbench.store.import_spec import ImportSpec
from workbench.store.runs import load_answers
from workbench.workflows.compare import compare_runs
from workbench.workflows.experiments import ExperimentError, load_experiment, run_experiment_file

SCHEMAS = ROOT / "experiments" / "schemas"
N_BOOT = 300


@pytest.fixture(scope="module")
def experiment_store(tmp_path_factory):
    """A BANKING77 subset (1,000 train → 200 calibration, 240 test) and the four runs of the experiment."""
    tmp = tmp_path_factory.mktemp("compare")
    train = pd.read_csv(dataset_path("banking77", "train.csv")).sample(1000, random_state=0)
    test = pd.read_csv(dataset_path("banking77", "test.csv")).sample(240, random_state=0)
    train.to_csv(tmp / "train.csv", index=False)
    test.to_csv(tmp / "test.csv", index=False)
    exp = tmp / "b77.yaml"
    exp.write_text(f"""
name: b77-ab
dataset: b77
splits: [calibration, test]
providers: [local:minilm-zeroshot, baseline:tfidf-logreg]
variants:
  descriptive: {SCHEMAS / "banking77.yaml"}
  terse: {{schema: {SCHEMAS / "banking77-terse.yaml"}}}
baseline: {{provider: local:minilm-zeroshot, variant: terse}}
objective: {{kind: coverage, target_coverage: 0.5}}
compare: {{split: test, n_boot: {N_BOOT}, seed: 3}}
""")
    db = tmp / "wb.duckdb"
    con = connect(db)
    import_dataset(
        con,
        [tmp / "train.csv", tmp / "test.csv"],
        ImportSpec(name="b77", text_column="text", labels={"intent": "category"}, calibration_fraction=0.2, seed=0),
    )
    result = run_experiment_file(con, exp, progress=False)
    yield con, exp, db, result
    con.close()


def test_shipped_experiment_files_are_valid_cross_products():
    for name in ("banking77", "hwu64"):
        exp = load_experiment(ROOT / "experiments" / f"{name}.yaml")
        assert len(exp.providers) >= 2 and len(exp.variants) >= 2
        assert len(exp.pairs) == len(exp.providers) * len(exp.variants)
        assert exp.baseline is not None and (exp.baseline.variant, exp.baseline.provider) in exp.pairs
        for v in exp.variants.values():
            assert Path(v.schema_file).exists()


def test_bad_experiment_file_names_the_field(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\ndataset: d\nproviders: [local:minilm-zeroshot]\nvariants: {a: nope.yaml}\n")
    with pytest.raises(ExperimentError, match="variant 'a'.*does not exist"):
        load_experiment(bad)
    bad.write_text(
        "name: x\ndataset: d\nproviders: [p]\nvariants: {a: "
        + str(SCHEMAS / "banking77.yaml")
        + "}\nbaseline: {provider: q, variant: a}\n"
    )
    with pytest.raises(ExperimentError, match="baseline provider 'q'"):
        load_experiment(bad)


@pytest.mark.slow  # the fixture runs the zero-shot model on 2 x 440 items (~40 s)
def test_experiment_runs_the_cross_product_with_tags(experiment_store):
    con, _, _, result = experiment_store
    assert result["experiment"] == "b77-ab"
    pairs = {(r["variant"], r["provider"]) for r in result["runs"]}
    assert pairs == {
        (v, p) for v in ("descriptive", "terse") for p in ("local:minilm-zeroshot", "baseline:tfidf-logreg")
    }
    tags = con.execute("SELECT run_id, experiment, variant, provider, status FROM runs").fetchall()
    assert {(t[1], t[2], t[3]) for t in tags} == {("b77-ab", v, p) for v, p in pairs}
    assert all(t[4] == "done" for t in tags)


def _aligned(con, run_a: str, run_b: str):
    a = load_answers(con, run_a, "intent", ["test"]).labelled()
    b = load_answers(con, run_b, "intent", ["test"]).labelled()
    common, ia, ib = np.intersect1d(a.item_ids.astype(str), b.item_ids.astype(str), return_indices=True)
    return a.probs[ia], b.probs[ib], a.labels[ia]


@pytest.mark.slow  # the fixture runs the zero-shot model on 2 x 440 items (~40 s)
def test_descriptive_options_change_the_zero_shot_model_with_a_paired_test(experiment_store):
    con, exp, _, _ = experiment_store
    cmp = compare_runs(con, [str(exp)])
    assert cmp.baseline == "local:minilm-zeroshot@terse" and cmp.split == "test"
    rows = {r["label"]: r for r in cmp.rows}
    base, desc = rows["local:minilm-zeroshot@terse"], rows["local:minilm-zeroshot@descriptive"]
    assert base["is_baseline"] and base["n_labelled"] == 240
    paired = desc["vs_baseline"]
    pa, pb, y = _aligned(con, base["run_id"], desc["run_id"])
    assert paired["n_pairs"] == len(y) == 240
    # the variant changes the zero-shot model's answers
    assert not np.allclose(pa, pb)
    # headline numbers equal scikit-learn's on the same stored answers
    acc = paired["metrics"]["accuracy"]
    assert acc["a"] == pytest.approx(accuracy_score(y, pa.argmax(1)), abs=1e-12)
    assert acc["b"] == pytest.approx(accuracy_score(y, pb.argmax(1)), abs=1e-12)
    assert desc["metrics"]["log_loss"]["estimate"] == pytest.approx(
        sk_log_loss(y, pb, labels=np.arange(pb.shape[1])), abs=1e-9
    )
    # the interval and p-value are the metrics library's paired bootstrap (same seed, same items)
    ref = paired_bootstrap(
        lambda w: {"accuracy": accuracy(pa, y, w)},
        lambda w: {"accuracy": accuracy(pb, y, w)},
        len(y),
        n_boot=N_BOOT,
        seed=3,
    )["accuracy"]
    assert (acc["difference"], acc["low"], acc["high"], acc["p_value"]) == pytest.approx(
        (ref.difference, ref.low, ref.high, ref.p_value), abs=1e-12
    )
    # McNemar: exact binomial test on the discordant items
    ca, cb = pa.argmax(1) == y, pb.argmax(1) == y
    b01, b10 = int(np.sum(~ca & cb)), int(np.sum(ca & ~cb))
    mc = paired["mcnemar"]
    assert (mc["a_wrong_b_right"], mc["a_right_b_wrong"]) == (b01, b10) and b01 + b10 > 0
    assert mc["p_exact"] == pytest.approx(binomtest(min(b01, b10), b01 + b10, 0.5).pvalue, abs=1e-12)
    # coverage and error at the policy chosen on calibration, judged on test
    pol = desc["policy"]
    assert pol["objective"] == "coverage" and pol["coverage"]["n"] == 240
    assert 0 < pol["coverage"]["value"] <= 1 and "d_coverage" in cmp.to_frame().columns
    # cost per 1,000 items: the stored per-answer costs of the test items (local models bill $0)
    n, total = con.execute(
        "SELECT count(DISTINCT a.item_id), sum(a.cost_usd) FROM answers a JOIN items i"
        " ON i.item_id = a.item_id AND i.dataset = 'b77' WHERE a.run_id = ? AND i.split = 'test'",
        [desc["run_id"]],
    ).fetchone()
    assert desc["cost"]["cost_per_1000_items"] == pytest.approx(total / n * 1000)
    assert desc["cost"]["latency_p95_ms"] >= desc["cost"]["latency_p50_ms"] > 0


@pytest.mark.slow  # the fixture runs the zero-shot model on 2 x 440 items (~40 s)
def test_label_trained_baseline_ignores_option_descriptions(experiment_store):
    con, exp, _, _ = experiment_store
    cmp = compare_runs(con, [str(exp)], baseline="baseline:tfidf-logreg@terse", n_boot=50, policy=False)
    row = next(r for r in cmp.rows if r["label"] == "baseline:tfidf-logreg@descriptive")
    assert row["vs_baseline"]["metrics"]["accuracy"]["difference"] == 0.0
    assert row["vs_baseline"]["mcnemar"]["a_wrong_b_right"] == row["vs_baseline"]["mcnemar"]["a_right_b_wrong"] == 0


@pytest.mark.slow  # the fixture runs the zero-shot model on 2 x 440 items (~40 s)
def test_compare_cli_json(experiment_store):
    con, exp, db, _ = experiment_store
    con.close()  # the CLI opens the store read-only in another process
    proc = run_cli("compare", str(exp), "--json", "--n-boot", "50", "--no-policy", db=db, check=True)
    doc = json.loads(proc.stdout)
    assert doc["baseline"] == "local:minilm-zeroshot@terse" and len(doc["rows"]) == 4
    proc = run_cli("compare", "b77-ab", "nope", db=db)
    assert proc.returncode == 2 and "neither a run id" in proc.stderr


def test_experiment_with_an_emulated_hosted_model_reports_its_cost(tmp_path):
    """`cloudflare:clef-flash` over real loopback HTTP (the emulator): priced, so cost per 1,000 is known."""
    from workbench.emulator import run_emulator

    rows = pd.read_csv(dataset_path("banking77", "test.csv")).sample(120, random_state=1)
    rows.to_csv(tmp_path / "test.csv", index=False)
    exp = tmp_path / "hosted.yaml"
    exp.write_text(f"""
name: hosted
dataset: tiny
splits: [test]
providers: ["cloudflare:clef-flash", "rules:{ROOT / "experiments" / "rules" / "banking77.yaml"}"]
variants:
  descriptive: {SCHEMAS / "banking77.yaml"}
  terse: {SCHEMAS / "banking77-terse.yaml"}
baseline: {{provider: "cloudflare:clef-flash", variant: terse}}
""")
    con = connect(tmp_path / "wb.duckdb")
    import_dataset(
        con,
        [tmp_path / "test.csv"],
        ImportSpec(name="tiny", text_column="text", split="test", labels={"intent": "category"}),
    )
    with run_emulator(port=0) as emu:
        env = {
            "CLOUDFLARE_CLEF_BASE_URL": emu.cloudflare_base_url,
            "CLOUDFLARE_API_TOKEN": "dummy-token",
            "CLOUDFLARE_ACCOUNT_ID": "0" * 32,
        }
        result = run_experiment_file(con, exp, env=env, progress=False)
        assert emu.request_count() == 240  # 120 items x 2 variants, one request each
        run_experiment_file(con, exp, env=env, progress=False)
        assert emu.request_count() == 240  # the rerun is answered from the cache
    assert len(result["runs"]) == 4
    cmp = compare_runs(con, [str(exp)], n_boot=50, policy=False)
    frame = cmp.to_frame().set_index(["provider", "variant"])
    hosted = frame.loc[("cloudflare:clef-flash", "descriptive")]
    n, cost = con.execute(
        "SELECT count(DISTINCT a.item_id), sum(a.cost_usd) FROM answers a JOIN runs r USING (run_id)"
        " WHERE r.run_id = ?",
        [hosted["run_id"]],
    ).fetchone()
    assert hosted["cost_per_1000"] == pytest.approx(cost / n * 1000) and hosted["cost_per_1000"] > 0
    assert frame.loc[("cloudflare:clef-flash", "terse"), "is_baseline"]
    assert hosted["d_accuracy"] is not None and hosted["n"] == 120
    # answered by the emulator: marked emulated (its cost is a price, not a bill); the rules runs are not
    hosted_rows = frame.index.get_level_values("provider") == "cloudflare:clef-flash"
    assert frame.loc[hosted_rows, "emulated"].all() and not frame.loc[~hosted_rows, "emulated"].any()
    con.close()


def test_compare_plain_run_ids_with_a_yes_no_question(tmp_path):
    """Runs outside an experiment, a noul question: ROC-AUC of P(yes) equals scikit-learn's."""
    from sklearn.metrics import roc_auc_score

    from tests.shadow.conftest import SCHEMA, _probs, _write_run

    rng = np.random.default_rng(3)
    n = 300
    y_intent, y_urgent = rng.integers(0, 3, n), (rng.random(n) < 0.4)
    ids = [f"t{i:04d}" for i in range(n)]
    pd.DataFrame(
        {
            "id": ids,
            "text": ids,
            "intent": np.asarray(["refund", "delivery", "account"])[y_intent],
            "urgent": np.where(y_urgent, "yes", "no"),
            "split": np.where(np.arange(n) < 150, "calibration", "test"),
        }
    ).to_csv(tmp_path / "t.csv", index=False)
    con = connect(tmp_path / "wb.duckdb")
    import_dataset(
        con,
        [tmp_path / "t.csv"],
        ImportSpec(
            name="tickets",
            id_column="id",
            text_column="text",
            split_column="split",
            labels={"intent": "intent", "urgent": "urgent"},
            positive={"urgent": "yes"},
        ),
        SCHEMA,
    )
    yu = np.where(y_urgent, 0, 1)
    a = _write_run(
        con,
        "a",
        "m-a",
        _probs(rng, y_intent, 3, 2.0, 1.0),
        _probs(rng, yu, 2, 1.0, 1.0),
        ids,
        np.full(n, 10.0),
        np.full(n, 1e-5),
    )
    b = _write_run(
        con,
        "b",
        "m-b",
        _probs(rng, y_intent, 3, 2.0, 1.0),
        _probs(rng, yu, 2, 3.0, 1.0),
        ids,
        np.full(n, 10.0),
        np.full(n, 1e-5),
    )
    cmp = compare_runs(con, [a, b], questions=["urgent"], n_boot=100)
    assert cmp.baseline == f"test:a@{a}"  # no experiment: the first run is the baseline
    row = next(r for r in cmp.rows if r["run_id"] == b)
    test = load_answers(con, b, "urgent", ["test"]).labelled()
    assert row["point_metrics"]["roc_auc"] == pytest.approx(
        roc_auc_score(test.labels == 0, test.probs[:, 0]), abs=1e-12
    )
    assert row["vs_baseline"]["n_pairs"] == 150 and row["policy"]["objective"] == "guarantee"
    assert row["cost"]["cost_per_1000_items"] == pytest.approx(1e-5 * 1000)  # both questions' shares: one item
    con.close()
