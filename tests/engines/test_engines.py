"""The engine aggregations (DuckDB default, Spark local mode) against the in-memory numpy metrics.

Real components: a partitioned Parquet dataset in tmp_path (3 hive partitions by split, ~5k rows in
the long layout of ``workbench export``: a 77-option question, a 2-option choice question and a
yes/no question, with failures, unlabelled answers, arg-max ties, scores exactly on bin edges and a
zero probability on the label), a real DuckDB, a real local Spark session (``local[2]``, one per
module) and the real CLI in a subprocess. Figures: the DuckDB path equals ``choice_report`` /
``reliability`` / ``risk_coverage_surface`` on the same arrays to 1e-9, and Spark equals DuckDB to 1e-9.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from tests.close import assert_tree_close
from tests.conftest import run_cli
from workbench.engines.answers import aggregate_answers
from workbench.engines.sessions import DuckDBEngine
from workbench.errors import WorkbenchError
from workbench.metrics import reliability as rel
from workbench.metrics.report import choice_report
from workbench.schema import load_schema, option_ids
from workbench.thresholds.surface import risk_coverage_surface

N_ITEMS = 1800
QUESTIONS = {"intent": 77, "pair": 2, "flag": 2}
SPLITS = ("train", "calibration", "test")


def _schema(tmp: Path) -> Path:
    doc = {
        "name": "engines",
        "questions": {
            "intent": {
                "type": "choice",
                "instructions": "Which intent?",
                "criteria": {f"intent_{j:02d}": f"intent number {j}" for j in range(77)},
            },
            "pair": {"type": "choice", "instructions": "Which side?", "criteria": {"left": "left", "right": "right"}},
            "flag": {"type": "noul", "instructions": "Is it flagged?"},
        },
    }
    path = tmp / "schema.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    return path


def _probs(rng: np.random.Generator, n: int, k: int) -> np.ndarray:
    logits = rng.normal(0.0, 2.0, (n, k))
    p = np.exp(logits - logits.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    m = n // 20
    # arg-max ties (the first option wins) and top scores exactly on a bin edge (0.4 = edges[6]; 0.6 = edges[9])
    p[:m] = 0.0
    p[:m, 0] = p[:m, 1] = 0.5
    if k > 2:
        p[m : 2 * m] = (1.0 - 0.4) / (k - 1)
        p[m : 2 * m, 1] = 0.4
    else:
        p[m : 2 * m] = [0.6, 0.4]
    return p


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """The Parquet dataset (hive partitions split=…), the schema, and the same answers as numpy arrays."""
    tmp = tmp_path_factory.mktemp("engines")
    schema_path = _schema(tmp)
    schema = load_schema(schema_path)
    rng = np.random.default_rng(11)
    split = rng.choice(SPLITS, N_ITEMS)
    arrays: dict[str, dict] = {}
    tables = []
    for q, k in QUESTIONS.items():
        opts = option_ids(schema.questions[q])
        probs = _probs(rng, N_ITEMS, k)
        labels = rng.integers(0, k, N_ITEMS)
        labels[N_ITEMS // 20 : N_ITEMS // 20 + 5] = 0  # label 0 where p_0 is tiny but > 0
        zero = N_ITEMS // 2
        probs[zero, labels[zero]] = 0.0  # p(label) = 0: log loss clipped to eps
        failed = rng.random(N_ITEMS) < 0.04
        nan_rows = np.flatnonzero(~failed)[[3, 7]]
        probs[nan_rows, -1] = np.nan  # stored as a list holding NaN: a failure too
        unlabelled = rng.random(N_ITEMS) < 0.05
        lab = np.where(unlabelled, -1, labels)
        arrays[q] = {"probs": np.where(failed[:, None], np.nan, probs), "labels": lab, "options": opts}
        assert np.isnan(arrays[q]["probs"][nan_rows]).any(axis=1).all()
        tables.append(
            pa.table(
                {
                    "run_id": pa.array(["run-1"] * N_ITEMS),
                    "item_id": pa.array([f"item-{i:05d}" for i in range(N_ITEMS)]),
                    "split": pa.array(split),
                    "question": pa.array([q] * N_ITEMS),
                    "label": pa.array([None if u else opts[j] for u, j in zip(unlabelled, labels)], pa.string()),
                    "probs": pa.array([None if f else list(r) for f, r in zip(failed, probs)], pa.list_(pa.float64())),
                }
            )
        )
    table = pa.concat_tables(tables)
    root = tmp / "answers"
    pq.write_to_dataset(table, root, partition_cols=["split"])
    assert len(list(root.glob("split=*/*.parquet"))) == 3
    return {"root": root, "schema_path": schema_path, "schema": schema, "arrays": arrays, "split": split}


@pytest.fixture(scope="module")
def duck(data):
    return aggregate_answers(data["root"], data["schema"], engine="duckdb")


def test_duckdb_figures_equal_the_numpy_metrics(data, duck):
    for q, arr in data["arrays"].items():
        agg = duck.questions[q]
        probs, labels = arr["probs"], arr["labels"]
        failed = ~np.isfinite(probs).all(axis=1)
        keep = ~failed & (labels >= 0)
        assert agg.n_rows == N_ITEMS and agg.n_failed == int(failed.sum()) > 0
        assert agg.n_labelled == int(keep.sum()) and agg.n_unlabelled == int(((labels < 0) & ~failed).sum()) > 0
        rep = choice_report(probs, labels, arr["options"], n_boot=0, smooth=False)
        assert rep.counts["n_labelled"] == agg.n_labelled and rep.counts["n_failed"] == agg.n_failed
        for name, ours in (("accuracy", agg.accuracy), ("brier", agg.brier), ("log_loss", agg.log_loss)):
            assert ours == pytest.approx(rep.metrics[name].estimate, abs=1e-9), (q, name)
        assert agg.ece == pytest.approx(rep.metrics["ece_uniform"].estimate, abs=1e-9)
        assert agg.mce == pytest.approx(rep.metrics["mce_uniform"].estimate, abs=1e-9)
        p, y = probs[keep], labels[keep]
        conf, correct = rel.top_label(p, y)
        ref = rel.bin_stats(correct, conf, 15)
        np.testing.assert_array_equal(agg.reliability.count, ref.count)
        np.testing.assert_allclose(agg.reliability.sum_score, ref.sum_score, atol=1e-9, rtol=0)
        np.testing.assert_array_equal(agg.reliability.sum_true, ref.sum_true)
        assert agg.ece == pytest.approx(rel.top_label_ece(p, y, 15), abs=1e-9)
        np.testing.assert_array_equal(agg.confusion, rep.confusion.matrix[:, : len(arr["options"])])
        # the surface over labelled answers, failures in the denominator (never accepted)
        lab = labels >= 0
        qtype = "noul" if q == "flag" else "choice"
        surf = risk_coverage_surface(qtype, probs[lab], labels[lab], per_class=False)
        assert agg.surface.n_total == surf.n_total == int(lab.sum())
        np.testing.assert_array_equal(agg.surface.accepted, surf.accepted)
        np.testing.assert_array_equal(agg.surface.errors, surf.errors)
        assert agg.surface.accepted[0, 0] == agg.n_labelled  # grid (0, 0) accepts every answered item


def test_edge_rules_are_exercised(data):
    """The dataset really has ties, scores on bin edges and a zero on the label (else the test proves less)."""
    p = data["arrays"]["intent"]["probs"]
    ok = np.isfinite(p).all(axis=1)
    top = np.sort(p[ok], axis=1)
    assert (top[:, -1] == top[:, -2]).sum() > 10
    assert (p[ok].max(axis=1) == 0.4).sum() > 10 and rel.uniform_bin_index(np.array([0.4]), 15)[0] == 6


def test_split_filter_and_an_open_engine(data):
    eng = DuckDBEngine()
    try:
        agg = aggregate_answers(data["root"], data["schema"], engine=eng, splits=["test"], questions=["pair"])
    finally:
        eng.close()
    arr = data["arrays"]["pair"]
    sel = data["split"] == "test"
    assert list(agg.questions) == ["pair"]
    assert agg.questions["pair"].n_rows == int(sel.sum())
    rep = choice_report(arr["probs"][sel], arr["labels"][sel], arr["options"], n_boot=0, smooth=False)
    assert agg.questions["pair"].accuracy == pytest.approx(rep.metrics["accuracy"].estimate, abs=1e-9)


def test_bad_inputs_name_the_problem(data, tmp_path):
    bad = tmp_path / "bad.parquet"
    pq.write_table(pa.table({"question": ["pair"], "label": ["middle"], "probs": [[0.5, 0.5]]}), bad)
    with pytest.raises(
        WorkbenchError, match=r"'pair': 1 answer\(s\) have a label that is not an option \(e.g. 'middle'\)"
    ):
        aggregate_answers(bad, data["schema"])
    no_probs = tmp_path / "wide.parquet"
    pq.write_table(pa.table({"item_id": ["a"], "pair": [[0.5, 0.5]]}), no_probs)
    with pytest.raises(WorkbenchError, match="no column question, label, probs"):
        aggregate_answers(no_probs, data["schema"])
    with pytest.raises(WorkbenchError, match="no such file"):
        aggregate_answers(tmp_path / "missing", data["schema"])


def test_cli_aggregate_json_and_exit_code(data, duck, tmp_path):
    res = run_cli(
        "aggregate", str(data["root"]), "--schema", str(data["schema_path"]), "--question", "intent", "--json"
    )
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    q = doc["questions"]["intent"]
    assert doc["engine"] == "duckdb" and list(doc["questions"]) == ["intent"]
    assert q["accuracy"] == pytest.approx(duck.questions["intent"].accuracy, abs=1e-12)
    assert q["ece"] == pytest.approx(duck.questions["intent"].ece, abs=1e-12)
    assert q["surface"]["accept_all"]["accepted"] == duck.questions["intent"].n_labelled
    res = run_cli("aggregate", str(tmp_path / "nothing"), "--schema", str(data["schema_path"]))
    assert res.returncode == 2 and "no such file" in res.stderr


# -- Spark, local mode ------------------------------------------------------------------------------
def _spark_skip_reason() -> str | None:
    if shutil.which("java") is None:
        return "no Java runtime on PATH (Debian: apt-get install default-jre-headless; .ci/run does)"
    try:
        import pyspark  # noqa: F401
    except ImportError:
        return "pyspark is not installed (pip install -e '.[test]' brings it)"
    return None


@pytest.fixture(scope="module")
def spark():
    reason = _spark_skip_reason()
    if reason:
        pytest.skip(reason)
    from workbench.engines.sessions import SparkEngine, spark_session

    # C1-only JIT and the serial GC: the JVM starts in about half the time; these jobs are tiny
    fast_start = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
    session = spark_session(
        "local[2]", {"spark.driver.extraJavaOptions": fast_start, "spark.ui.showConsoleProgress": "false"}
    )
    session.sparkContext.setLogLevel("ERROR")
    yield SparkEngine(session=session)
    session.stop()


def test_spark_local_mode_gives_the_duckdb_figures(data, duck, spark):
    agg = aggregate_answers(data["root"], data["schema"], engine=spark)
    assert agg.engine == "spark"
    for q, d in duck.questions.items():
        s = agg.questions[q]
        assert (s.n_rows, s.n_failed, s.n_labelled, s.n_unlabelled) == (
            d.n_rows,
            d.n_failed,
            d.n_labelled,
            d.n_unlabelled,
        )
        for name in ("accuracy", "brier", "log_loss", "ece", "mce"):
            assert getattr(s, name) == pytest.approx(getattr(d, name), abs=1e-9), (q, name)
        np.testing.assert_array_equal(s.reliability.count, d.reliability.count)
        np.testing.assert_allclose(s.reliability.sum_score, d.reliability.sum_score, atol=1e-9, rtol=0)
        np.testing.assert_array_equal(s.confusion, d.confusion)
        np.testing.assert_array_equal(s.surface.accepted, d.surface.accepted)
        np.testing.assert_array_equal(s.surface.errors, d.surface.errors)


# -- monitoring windows -----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def mon(tmp_path_factory):
    """A policy replayed through the runtime with a decision log and outcomes (tests/monitor's scenario)."""
    from tests.monitor.conftest import shift_scenario
    from workbench.policy.runtime import Policy

    s = shift_scenario(tmp_path_factory.mktemp("mon"))
    pol = Policy.load(s["policy"])
    s["kwargs"] = {
        "policy_hash": pol.content_hash,
        "options": {q: list(pol.model.questions[q].options) for q in pol.model.questions},
        "models": list(pol.model.validity.models),
        "schema_hashes": list(pol.model.validity.schema_hashes),
    }
    return s


WINDOW_FIELDS = (
    "window",
    "start",
    "end",
    "first_decision",
    "last_decision",
    "traffic",
    "n_accepted",
    "review_load",
    "n_override_known",
    "n_overrides",
    "n_known",
    "n_errors",
)


@pytest.mark.parametrize("window", ["500", "6h"])
def test_duckdb_monitor_windows_equal_workbench_monitor(mon, window):
    from workbench.engines.monitoring import window_aggregates
    from workbench.monitor.report import MonitorOptions, monitor

    dec, out = [mon["tmp"] / "decisions.jsonl"], [mon["tmp"] / "shifted.jsonl"]
    ref = monitor(mon["policy"], dec, out, MonitorOptions(window=window)).to_dict()["windows"]
    got = window_aggregates(dec, out, window=window, **mon["kwargs"])["intent"]
    assert len(got["windows"]) == len(ref) > 3
    assert sum(w["n_errors"] for w in ref) > 0 and sum(w["n_overrides"] for w in ref) > 0
    for g, r, p, m, o in zip(got["windows"], ref, got["p_bins"], got["m_bins"], got["options"]):
        assert {k: g[k] for k in WINDOW_FIELDS} == {k: r[k] for k in WINDOW_FIELDS}
        assert g["n_model_mismatch"] / g["traffic"] == r["model_mismatch_share"]
        assert p.sum() == r["drift"]["p_top"]["n"] and m.sum() == r["drift"]["margin"]["n"]
        assert o.sum() == r["drift"]["option"]["n"]


def test_spark_monitor_windows_equal_duckdb(mon, spark):
    from workbench.engines.monitoring import window_aggregates

    dec, out = [mon["tmp"] / "decisions.jsonl"], [mon["tmp"] / "shifted.parquet"]
    for window in ("500", "6h"):
        d = window_aggregates(dec, out, window=window, **mon["kwargs"])["intent"]
        s = window_aggregates(dec, out, window=window, engine=spark, **mon["kwargs"])["intent"]
        assert s["windows"] == d["windows"] and len(d["windows"]) > 3
        for key in ("p_bins", "m_bins", "options"):
            np.testing.assert_array_equal(s[key], d[key])


def test_workbench_export_then_aggregate_equals_workbench_report(mon, tmp_path):
    """End to end: a stored run exported by `workbench export`, aggregated by DuckDB = `report_run` on the test split."""
    from workbench.store.db import connect
    from workbench.workflows.evaluation import report_run

    out = tmp_path / "run-sim.parquet"
    run_cli("export", "run-sim", "--format", "parquet", "--out", str(out), db=mon["db"], check=True)
    con = connect(mon["db"], read_only=True)
    try:
        rep = report_run(con, "run-sim", "intent", split="test", n_boot=0, smooth=False, with_before=False)
        from workbench.store.runs import get_run, load_stored_schema

        schema = load_stored_schema(con, get_run(con, "run-sim")["schema_hash"])
    finally:
        con.close()
    q = rep.questions[0]
    agg = aggregate_answers(out, schema, splits=["test"]).questions["intent"]
    assert agg.n_labelled == q.counts["n_labelled"] > 1000 and agg.n_failed == q.counts["n_failed"]
    for name, ours in (("accuracy", agg.accuracy), ("brier", agg.brier), ("log_loss", agg.log_loss)):
        assert ours == pytest.approx(q.metrics[name].estimate, abs=1e-9), name
    assert agg.ece == pytest.approx(q.metrics["ece_uniform"].estimate, abs=1e-9)


# -- the whole `workbench monitor` report on an engine --------------------------------------------------
@pytest.fixture(scope="module")
def mon_logs(mon, tmp_path_factory):
    """The scenario's log as a hive-partitioned Parquet directory (one partition per day), and outcomes with
    repeated reports: within one file (a later row overrides an earlier one) and across files (a later file
    wins). A MAX of the reports would differ from the last one for the rewritten decisions."""
    import duckdb

    from tests.monitor.conftest import write_outcomes

    tmp = tmp_path_factory.mktemp("mon_logs")
    con = duckdb.connect()
    cols = "{" + ", ".join(f"'{n}': '{t}'" for n, t in (*_LOG_COLS, ("probs", "DOUBLE[]"))) + "}"
    con.execute(
        f"COPY (SELECT *, substr(time, 1, 10) AS day FROM read_json('{mon['tmp'] / 'decisions.jsonl'}', "
        f"format = 'newline_delimited', columns = {cols})) TO '{tmp / 'log'}' (FORMAT parquet, PARTITION_BY (day))"
    )
    con.close()
    rows = [json.loads(line) for line in (mon["tmp"] / "shifted.jsonl").read_text().splitlines()]
    opts = mon["kwargs"]["options"]["intent"]
    # first report of 300 decisions: an option on the far side of the alphabet from the later, true report
    early = [
        {**r, "outcome": opts[-1] if (r["outcome"] or "") < opts[len(opts) // 2] else opts[0]}
        for r in rows[:300]
        if r["outcome"] is not None
    ]
    write_outcomes(tmp / "repeated.parquet", early + rows)
    # a later file that says only "overridden" for 50 decisions (their outcome stays the earlier file's)
    late = [{"decision_id": r["decision_id"], "question": "intent", "override": True} for r in rows[1000:1050]]
    write_outcomes(tmp / "late.parquet", late)
    return {"log": tmp / "log", "outcomes": [tmp / "repeated.parquet", tmp / "late.parquet"]}


_LOG_COLS = (
    ("decision_id", "VARCHAR"),
    ("time", "VARCHAR"),
    ("policy_hash", "VARCHAR"),
    ("policy_version", "VARCHAR"),
    ("model", "VARCHAR"),
    ("schema_hash", "VARCHAR"),
    ("question", "VARCHAR"),
    ("action", "VARCHAR"),
    ("option", "VARCHAR"),
    ("p_top", "DOUBLE"),
    ("margin", "DOUBLE"),
)


def _assert_same_report(got: dict, ref: dict) -> None:
    """Equal figures (floats to 1e-9; in practice identical), inputs' counts equal."""
    for key in ("alarm", "first_alarm_at", "reasons", "options", "policy"):
        assert got[key] == ref[key], key
    for key in ("n_records", "n_outcomes", "n_outcomes_unmatched", "n_lines"):
        assert got["inputs"][key] == ref["inputs"][key], key
    assert len(got["windows"]) == len(ref["windows"]) > 3
    assert_tree_close(json.loads(json.dumps(got["windows"])), ref["windows"], abs_tol=1e-9)
    for q, r in ref["questions"].items():
        g = got["questions"][q]
        assert_tree_close(g["overall"], r["overall"], abs_tol=1e-9)
        assert g["recertification"] == r["recertification"]
        seq_g, seq_r = g["sequence"], r["sequence"]
        assert {k: v for k, v in seq_g.items() if k != "curve"} == {k: v for k, v in seq_r.items() if k != "curve"}
        for name, curve in seq_r["curve"].items():
            np.testing.assert_allclose(seq_g["curve"][name], curve, atol=1e-9, rtol=0)


def _monitor_pair(mon, mon_logs, window: str, engine):
    from workbench.engines.monitoring import monitor_on_engine
    from workbench.monitor.report import MonitorOptions, monitor

    opts = MonitorOptions(window=window, recertify_min=500)
    ref = monitor(mon["policy"], [mon["tmp"] / "decisions.jsonl"], mon_logs["outcomes"], opts).to_dict()
    got = monitor_on_engine(mon["policy"], [mon_logs["log"]], mon_logs["outcomes"], opts, engine=engine).to_dict()
    return got, ref


@pytest.mark.parametrize("window", ["500", "6h"])
def test_duckdb_engine_monitor_report_equals_workbench_monitor(mon, mon_logs, window):
    got, ref = _monitor_pair(mon, mon_logs, window, "duckdb")
    _assert_same_report(got, ref)
    q = ref["questions"]["intent"]
    assert ref["alarm"] and q["recertification"]["available"] and q["sequence"]["n_outcomes"] > 1000
    # the repeated reports: the later one counts (not the largest)
    n_err = q["overall"]["n_errors"]
    assert sum(w["n_errors"] for w in ref["windows"]) == n_err == _last_report_errors(mon, mon_logs)
    assert _last_report_errors(mon, mon_logs, "max") != n_err


def _last_report_errors(mon, mon_logs, how: str = "last") -> int:
    """Errors among accepted decisions with a known outcome when the last (or largest) report of each counts."""
    import pandas as pd

    out = pd.concat([pd.read_parquet(p) for p in mon_logs["outcomes"]], ignore_index=True)
    last_o = out.dropna(subset=["outcome"]).groupby("decision_id")["outcome"].agg(how)
    last_v = out.dropna(subset=["override"]).groupby("decision_id")["override"].agg(how)
    dec = pd.read_json(mon["tmp"] / "decisions.jsonl", lines=True).set_index("decision_id")
    acc = dec[dec["action"] == "accept"]
    o, v = last_o.reindex(acc.index), last_v.reindex(acc.index)
    wrong = np.where(o.notna(), o.to_numpy() != acc["option"].to_numpy(), v.fillna(False).astype(bool).to_numpy())
    return int(wrong[(o.notna() | v.notna()).to_numpy()].sum())


def test_spark_monitor_report_equals_workbench_monitor(mon, mon_logs, spark):
    """`workbench monitor`'s whole report from a partitioned Parquet log on Spark (local mode) = the DuckDB path."""
    got, ref = _monitor_pair(mon, mon_logs, "6h", spark)
    _assert_same_report(got, ref)


def test_cli_monitor_engine_flags(mon, mon_logs, tmp_path):
    dec = str(mon["tmp"] / "decisions.jsonl")
    outs = [a for p in mon_logs["outcomes"] for a in ("--outcomes", str(p))]
    base = ["monitor", "--policy", str(mon["policy"]), "--decisions", dec, *outs, "--window", "500", "--json"]
    ref = run_cli(*base)
    got = run_cli(*base, "--engine", "duckdb", "--spark-master", "local[1]")
    assert got.returncode == 2 and "--spark-master needs --engine spark" in got.stderr
    bad = run_cli(*base, "--engine", "flink")
    assert bad.returncode == 2 and "flink" in bad.stderr
    assert ref.returncode == 1  # the alarm
    assert json.loads(ref.stdout)["questions"]["intent"]["overall"]["n_errors"] == _last_report_errors(mon, mon_logs)
