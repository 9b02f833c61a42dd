"""The front door: ``import workbench as wb`` — help lists the workflow, the docstring examples run,
one set of threshold defaults, and every surface reports the same figures for the same run.

Real components only: a real DuckDB file in a temp dir, the bundled SMS Spam Collection, the offline
``baseline:tfidf-logreg`` provider, the real CLI in a subprocess.
"""

from __future__ import annotations

import doctest
import json
import subprocess
import sys
from dataclasses import fields
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import workbench as wb
from tests.conftest import run_cli

ROOT = Path(__file__).resolve().parents[1]

#: The workflow in the order ``help(workbench)`` lists it.
WORKFLOW = [
    "connect",
    "import_dataset",
    "run",
    "load_answers",
    "report",
    "calibrate",
    "ThresholdOptions",
    "choose_thresholds",
    "plan_labels",
    "build_policy",
    "Policy",
    "compare",
    "replay_shadow",
    "shadow_report",
]
#: Names whose docstring examples build on each other, run in this order with shared globals.
DOCTESTED = [
    "ThresholdOptions",
    "bundled_dataset",
    "connect",
    "import_dataset",
    "run",
    "export_run",
    "import_answers",
    "load_answers",
    "report",
    "agreement",
    "calibrate",
    "choose_thresholds",
    "plan_labels",
    "build_policy",
    "compare",
    "replay_shadow",
    "shadow_report",
]


def test_help_lists_the_workflow_in_order():
    out = subprocess.run(
        [sys.executable, "-c", "import workbench as wb; help(wb)"],
        capture_output=True,
        text=True,
        check=True,
        env={"PAGER": "cat", "PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)},
    ).stdout
    positions = [out.find(f"wb.{name}") for name in WORKFLOW]
    assert all(p >= 0 for p in positions), dict(zip(WORKFLOW, positions))
    assert positions == sorted(positions)
    for name in [*WORKFLOW, "ReliabilityDisplay", "ConfusionDisplay", "WorkbenchError", "__version__"]:
        assert getattr(wb, name) is not None and name in wb.__all__


def test_no_submodule_shadows_a_front_door_name():
    """Importing ``workbench.X`` sets attribute ``X`` on the package: no module may be named like a
    ``wb.*`` function (``workbench/compare.py`` would turn ``wb.compare`` into a module)."""
    import pkgutil

    submodules = {m.name for m in pkgutil.iter_modules(wb.__path__)}
    assert not submodules & set(wb.__all__), submodules & set(wb.__all__)
    import workbench.workflows.compare  # noqa: F401

    assert callable(wb.compare) and wb.compare.__module__ == "workbench.api"


def test_import_workbench_stays_light():
    code = "import sys, workbench; print(sorted(m for m in ('duckdb', 'pandas', 'pyarrow', 'scipy', 'plotly') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_docstring_examples_run_in_order(tmp_path):
    finder, runner = doctest.DocTestFinder(recurse=False), doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    globs = {"tmp": tmp_path, "wb": wb}
    n_examples = {}
    for name in DOCTESTED:
        tests = finder.find(getattr(wb, name), name=f"wb.{name}", globs=globs)
        n_examples[name] = sum(len(t.examples) for t in tests)
        for t in tests:
            t.globs = globs  # one namespace: each example continues from the previous one
            runner.run(t, clear_globs=False)
    assert all(n > 0 for n in n_examples.values()), [k for k, n in n_examples.items() if n == 0]
    assert runner.failures == 0 and runner.tries == sum(n_examples.values())


# -- one options type, one set of defaults -----------------------------------------------------------
def test_cli_option_defaults_are_threshold_options_defaults():
    import workbench.thresholds
    from workbench.cli.threshold_options import FLAGS, build_options
    from workbench.thresholds.options import ThresholdOptions

    assert workbench.thresholds.ThresholdOptions is ThresholdOptions is wb.ThresholdOptions  # one type, three doors
    defaults = ThresholdOptions()
    for flag in FLAGS:  # a flag that stands for a field alone has the field's default
        if len([f for f in FLAGS if f.field == flag.field]) == 1 and flag.annotation in (str, int, float, bool):
            assert flag.default == getattr(defaults, flag.field), flag.flag
    assert build_options() == defaults
    assert build_options(**{f.name: f.default for f in FLAGS}) == defaults
    assert {f.name for f in fields(ThresholdOptions)} >= {f.field for f in FLAGS}
    assert (defaults.alpha, defaults.delta, defaults.calibrate, defaults.method, defaults.grid) == (
        0.05,
        0.1,
        "temperature",
        "fixed-sequence",
        100,
    )


def test_library_errors_name_parameters_and_the_cli_shows_flags(tmp_path):
    with pytest.raises(wb.WorkbenchError) as err:
        wb.ThresholdOptions(alpha=2.0)
    assert err.value.parameter == "alpha" and str(err.value).startswith("alpha must be in (0, 1)")
    with pytest.raises(wb.WorkbenchError) as err:
        wb.ThresholdOptions(n_paths=0)
    assert err.value.parameter == "n_paths"
    r = run_cli("thresholds", "any-run", "-q", "x", "--max-error", "2", db=tmp_path / "none.duckdb")
    assert r.returncode == 2 and r.stderr.startswith("error: --max-error must be in (0, 1), got 2.0"), r.stderr
    r = run_cli("thresholds", "any-run", "-q", "x", "--paths", "0", db=tmp_path / "none.duckdb")
    assert r.returncode == 2 and "--paths must be at least 1" in r.stderr, r.stderr


def test_calibration_size_needed_is_the_smallest_certifiable_n():
    from workbench.thresholds.guarantees import hoeffding_bentkus_p_values, min_items_to_certify
    from workbench.thresholds.options import ThresholdOptions, calibration_size_needed

    for alpha, level in [(0.01, 0.1), (0.05, 0.1), (0.1, 0.05), (0.02, 0.001)]:
        n = min_items_to_certify(alpha, level)
        p = hoeffding_bentkus_p_values(np.zeros(2), np.array([n - 1, n]), alpha)
        assert p[1] <= level < p[0]
        # at zero errors both terms of the p-value are (1 - alpha)^n: the closed form agrees
        assert n == int(np.ceil(np.log(level) / np.log1p(-alpha) - 1e-12))
    need = calibration_size_needed(ThresholdOptions(alpha=0.01, calibrate="none"))
    assert need["n_certifying"] == 230 and need["n_calibration"] == int(np.ceil(230 / 0.7))
    need = calibration_size_needed(ThresholdOptions(alpha=0.01))  # temperature: 30 % fit the calibrator too
    assert need["n_calibration"] == int(np.ceil(230 / (0.7 * 0.7)))


# -- a small store: SMS spam with a 40-item calibration split ---------------------------------------
@pytest.fixture(scope="module")
def spam_store(tmp_path_factory):
    """SMS spam: 600 train, 40 calibration, 300 test items; one tfidf run (offline)."""
    tmp = tmp_path_factory.mktemp("spam")
    df = pd.read_csv(ROOT / "datasets" / "sms_spam" / "sms_spam.csv", dtype=str, keep_default_na=False)
    df = df.iloc[:940].copy()
    df["split"] = ["train"] * 600 + ["calibration"] * 40 + ["test"] * 300
    df.to_csv(tmp / "spam.csv", index=False)
    db = tmp / "wb.duckdb"
    con = wb.connect(db)
    wb.import_dataset(
        con,
        tmp / "spam.csv",
        name="spam40",
        text_column="text",
        id_column="id",
        split_column="split",
        labels={"spam": "label"},
        positive={"spam": "spam"},
    )
    schema = wb.load_schema(wb.bundled_schema_file("sms_spam"))
    run_id = wb.run(con, "spam40", schema, "baseline:tfidf-logreg", name="tfidf spam40")
    other = wb.calibrate(con, run_id, "platt")["run_id"]
    # the whole collection (1,170 calibration items): enough to certify at the defaults
    wb.import_dataset(con, **wb.bundled_dataset("sms_spam"))
    full = wb.run(con, "sms_spam", schema, "baseline:tfidf-logreg", name="tfidf sms_spam")
    full_other = wb.calibrate(con, full, "platt")["run_id"]
    con.close()
    return {"db": db, "run_id": run_id, "other": other, "tmp": tmp, "full": full, "full_other": full_other}


def test_forty_items_at_one_percent_certify_nothing_and_say_how_many_are_needed(spam_store):
    db, run_id = spam_store["db"], spam_store["run_id"]
    r = run_cli("thresholds", run_id, "-q", "spam", "--max-error", "0.01", "--json", db=db)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    q = doc["questions"]["spam"]
    assert q["certified"] is False and doc["certified"] is False
    assert (
        q["settings"]["alpha"] == 0.01 and q["settings"]["delta"] == 0.1 and q["settings"]["calibrate"] == "temperature"
    )
    need = q["calibration_size_needed"]
    assert need["n_calibration_now"] == 40 and need["n_certifying"] == 230 and need["n_calibration"] == 470
    assert q["rule"]["tau_yes"] is None and q["rule"]["tau_no"] is None  # accepts nothing
    text = run_cli("thresholds", run_id, "-q", "spam", "--max-error", "0.01", db=db)
    assert text.returncode == 0 and "CERTIFIED" in text.stdout and "NOTHING CERTIFIED" in text.stdout
    assert "calibration split of at least 470 items (this one has 40" in text.stdout
    assert "α = 0.01, δ = 0.1, recalibration temperature" in text.stdout
    out, out_json = spam_store["tmp"] / "p.json", spam_store["tmp"] / "p2.json"
    exp = run_cli("policy", "export", run_id, "-q", "spam", "--max-error", "0.01", "--out", str(out), db=db)
    assert exp.returncode == 0 and "NOTHING CERTIFIED" in exp.stdout and "at least 470 items" in exp.stdout
    assert f"from run {run_id}" in exp.stdout and "α = 0.01, δ = 0.1" in exp.stdout
    doc = json.loads(
        run_cli(
            "policy", "export", run_id, "-q", "spam", "--max-error", "0.01", "--out", str(out_json), "--json", db=db
        ).stdout
    )
    assert doc["certified"] is False and doc["questions"]["spam"]["calibration_size_needed"]["n_calibration"] == 470


def test_every_surface_gives_the_same_coverage_and_error_with_defaults(spam_store):
    """Demo-style policy, `workbench thresholds --json`, `workbench compare --json`, the API and the
    library call of the UI's Thresholds page: the same run and question, the same figures."""
    db, run_id, other = spam_store["db"], spam_store["full"], spam_store["full_other"]
    cli = json.loads(run_cli("thresholds", run_id, "-q", "spam", "--json", db=db, check=True).stdout)
    cli_q = cli["questions"]["spam"]
    figures = {"cli": (cli_q["test"]["coverage"]["value"], cli_q["test"]["error"]["value"])}
    assert cli_q["settings"] == wb.ThresholdOptions().settings()

    cmp = json.loads(run_cli("compare", run_id, other, "--n-boot", "50", "--json", db=db, check=True).stdout)
    row = next(r for r in cmp["rows"] if r["run_id"] == run_id)
    figures["compare"] = (row["policy"]["coverage"]["value"], row["policy"]["error"]["value"])
    assert cmp["settings"] == wb.ThresholdOptions().settings()

    con = wb.connect(db, read_only=True)
    try:
        api = wb.choose_thresholds(con, run_id, "spam")
        figures["api"] = (api.test["coverage"]["value"], api.test["error"]["value"])
        policy = wb.build_policy(con, run_id, "spam")  # what the demo does per run
        t = policy.model.questions["spam"].expected_test
        figures["demo"] = (t.coverage.value, t.error.value)
    finally:
        con.close()

    from workbench.ui import state

    ui = state.certified_thresholds(str(db), state.store_token(str(db)), run_id, "spam", state.threshold_settings())
    figures["ui"] = (ui["test"]["coverage"]["value"], ui["test"]["error"]["value"])
    assert len(set(figures.values())) == 1, figures
    assert api.certified and 0 < figures["cli"][0] <= 1


def test_compare_text_prints_p_values_and_the_settings(spam_store):
    db, a, b = spam_store["db"], spam_store["full"], spam_store["full_other"]
    r = run_cli("compare", a, b, "--n-boot", "200", db=db, check=True)
    assert "α = 0.05, δ = 0.1, recalibration temperature" in r.stdout
    doc = json.loads(run_cli("compare", a, b, "--n-boot", "200", "--json", db=db, check=True).stdout)
    p = next(r for r in doc["rows"] if r["run_id"] == b)["vs_baseline"]["metrics"]["accuracy"]["p_value"]
    from workbench.cli.compare import format_p

    row = next(ln for ln in r.stdout.splitlines() if b in ln)
    assert format_p(p, 200) in row and "p boot" in r.stdout


def test_format_p():
    from workbench.cli.compare import format_p

    assert format_p(0.0, 1000) == "< 0.001"
    assert format_p(0.0, 200) == "< 0.005"
    assert format_p(3.2e-7) == "3.2e-07"
    assert format_p(0.0) == "< 1e-16"
    assert format_p(0.0312) == "0.031" and format_p(0.5) == "0.50" and format_p(None) == "–"
