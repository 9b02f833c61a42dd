"""Critical-class constraints on a real run: HWU64 (``scenario`` and ``intent``) answered by the TF-IDF baseline.

The pooled guarantee hides a class: at α = 0.1 the certified rule auto-accepts about 13% of the true
``calendar`` scenario items (30% of the ``calendar_query`` intent items) as another option, because
the class is 5% (2%) of traffic. Declaring it critical (at most β of its true items auto-accepted as
another option) certifies the constraint jointly with the error rate.

Acceptance (issue 15): the run's calibration and test answers are pooled and re-split 200 times at
random, half calibration and half test (half, so the test split holds ~78 ``calendar`` items and its
rate is a usable stand-in for the true one); the constraint's violation rate — the share of resplits
whose *test-split* rate of critical items auto-accepted as another option exceeds β — is at most δ.
The answers are computed once; each resplit only re-draws indices and runs the certification on
per-item coordinates (:func:`select_guarantee_split`, what ``workbench thresholds`` runs with
``--calibrate none``), so 2 × 200 resplits, with and without the constraint, take seconds.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.conftest import run_cli
from workbench.thresholds.guarantees import select_guarantee_split
from workbench.thresholds.rules import RuleCoordinates, rule_coordinates
from workbench.thresholds.surface import default_grids

pytestmark = pytest.mark.slow
ALPHA, DELTA, N_SPLITS = 0.1, 0.1, 200


@pytest.fixture(scope="module")
def hwu64_run(tmp_path_factory):
    """The bundled HWU64 (calibration fraction 0.2, seed 0) answered by ``baseline:tfidf-logreg``."""
    import workbench as wb

    db = tmp_path_factory.mktemp("hwu64") / "wb.duckdb"
    con = wb.connect(str(db))
    wb.import_dataset(con, **wb.bundled_dataset("hwu64"))
    run_id = wb.run(con, "hwu64", wb.load_schema(wb.bundled_schema_file("hwu64")), "baseline:tfidf-logreg")
    con.close()
    return db, run_id


@pytest.mark.parametrize(
    "question,critical,beta,min_certified,min_coverage",
    [("scenario", "calendar", 0.1, 0.9, 0.6), ("intent", "calendar_query", 0.15, 0.45, 0.15)],
)
def test_critical_constraint_holds_over_200_resplits(hwu64_run, question, critical, beta, min_certified, min_coverage):
    from workbench.store.db import connect
    from workbench.store.runs import load_answers

    db, run_id = hwu64_run
    con = connect(db, read_only=True)
    pool = load_answers(con, run_id, question, splits=["calibration", "test"])
    con.close()
    pool = pool.select(pool.labels >= 0)
    labels, k = pool.labels, pool.probs.shape[1]
    c = pool.option_ids.index(critical)
    co = rule_coordinates("choice", pool.probs)
    correct = co.predicted == labels
    is_c, misroutable = labels == c, (labels == c) & (co.predicted != c)
    x_grid, y_grid = default_grids("choice", 100)
    n = len(labels)

    rows = []  # per resplit, without / with the constraint: (certified, test misroute rate, test error, coverage)
    for seed in range(N_SPLITS):
        cal = np.zeros(n, dtype=bool)
        cal[np.random.default_rng(seed).permutation(n)[: n // 2]] = True
        sub = RuleCoordinates(co.predicted[cal], co.x[cal], co.y[cal], co.x_name, co.y_name)
        row = []
        for constraints in ((), ((c, beta),)):
            sel, _ = select_guarantee_split(
                sub,
                correct[cal],
                x_grid=x_grid,
                y_grid=y_grid,
                n_classes=k,
                alpha=ALPHA,
                delta=DELTA,
                rng=np.random.default_rng([seed, 1]),  # as certify_surface draws the order items
                labels=labels[cal],
                constraints=constraints,
            )
            acc = ~cal & (co.x >= sel.x) & (co.y >= sel.y) if sel.feasible else np.zeros(n, dtype=bool)
            rate = (acc & misroutable).sum() / (is_c & ~cal).sum()
            err = (acc & ~correct).sum() / max(acc.sum(), 1)
            row.append((sel.feasible, rate, err, acc.sum() / (~cal).sum()))
        rows.append(row)
    r = np.array(rows, dtype=float)  # (splits, 2, 4)
    base, con_ = r[:, 0], r[:, 1]
    violation = float((con_[:, 1] > beta).mean())
    joint_violation = float(((con_[:, 1] > beta) | (con_[:, 2] > ALPHA)).mean())
    print(
        f"\nHWU64 {question}, critical {critical} β = {beta}, α = {ALPHA}, δ = {DELTA}, {N_SPLITS} resplits: "
        f"constraint violation rate {violation:.3f} (joint with the error: {joint_violation:.3f}); "
        f"misrouted share of true {critical} on test: {base[:, 1].mean():.3f} without the constraint "
        f"(> β in {(base[:, 1] > beta).mean():.0%} of resplits), {con_[:, 1].mean():.3f} with it; "
        f"coverage {base[:, 3].mean():.3f} -> {con_[:, 3].mean():.3f}; certified in {con_[:, 0].mean():.0%}"
    )
    assert violation <= DELTA and joint_violation <= DELTA  # the acceptance
    # the problem: certified on the error rate alone, the critical class is misrouted well above β ...
    assert base[:, 1].mean() > 1.2 * beta and (base[:, 1] > beta).mean() > 0.7
    assert (base[:, 2] > ALPHA).mean() <= DELTA  # ... while the pooled guarantee itself holds
    # ... and the constraint brings it down, with rules certified (not by refusing everything): 95% of the
    # scenario resplits at 73% mean test coverage; the intent one (59 items in all, ~9 held apart to
    # order the tests) certifies in 53% at 22% (a 64-option rule must get strict for it)
    assert con_[:, 1].mean() < beta / 2
    assert con_[:, 0].mean() > min_certified and con_[:, 3].mean() > min_coverage


def test_thresholds_and_policy_export_state_and_record_the_constraint(hwu64_run, tmp_path):
    db, run_id = hwu64_run
    args = ("-q", "scenario", "--max-error", "0.1", "--calibrate", "none", "--critical", "calendar:0.1", "--cost")
    args += ("calendar:*=2",)
    r = run_cli("thresholds", run_id, *args, "--json", db=db, check=True)
    doc = json.loads(r.stdout)
    assert doc["settings"]["constraints"] == {"calendar": 0.1} and doc["settings"]["costs"] == {"calendar": {"*": 2.0}}
    res = doc["questions"]["scenario"]
    g = res["guarantee"]
    assert res["certified"] and g["risk"] == "expected misroute cost among auto-accepted items"
    assert g["loss_scale"] == 2.0 and g["costs"] == {"calendar": {"*": 2.0}} and "not split" in g["joint"]
    (cst,) = g["constraints"]
    assert cst["option"] == "calendar" and cst["beta"] == 0.1
    assert cst["misrouted"] / cst["n_true"] <= cst["risk_upper_bound"] <= 0.1 and cst["p_value"] <= 0.1
    # the test figures come from the rule's own confusion matrix on the test split
    conf = np.array(res["test"]["confusion"]["matrix"])
    ci = res["test"]["confusion"]["labels"].index("calendar")
    (tc,) = res["test_risks"]["constraints"]
    assert tc["n_true"] == conf[ci].sum() and tc["reviewed"] == conf[ci, -1]
    assert tc["misrouted"] == conf[ci, :-1].sum() - conf[ci, ci]
    matrix = np.ones((conf.shape[0], conf.shape[0])) - np.eye(conf.shape[0])
    matrix[ci, np.arange(conf.shape[0]) != ci] = 2.0
    accepted = conf[:, :-1]
    assert res["test_risks"]["cost"]["expected_cost_among_accepted"] == pytest.approx(
        (accepted * matrix).sum() / accepted.sum()
    )

    text = run_cli("thresholds", run_id, *args, db=db, check=True).stdout
    assert "constraint: P(share of true calendar accepted as another option > 0.1)" in text
    assert "jointly: one p-value per grid point" in text and "test: true calendar:" in text

    out = tmp_path / "policy.json"
    run_cli("policy", "export", run_id, *args, "--out", str(out), db=db, check=True)
    from workbench_runtime import Policy

    pol = Policy.load(out)  # the runtime loads it (hash, schema) with nothing new
    obj = pol.model.questions["scenario"].objective
    assert obj.constraints is not None and obj.constraints[0].option == "calendar" and obj.constraints[0].certified
    assert obj.joint is not None and "not split" in obj.joint and obj.costs == {"calendar": {"*": 2.0}}
    assert obj.risk == "expected misroute cost among auto-accepted items"
    rule = pol.model.questions["scenario"].rule
    assert (rule.tau, rule.margin) == (res["rule"]["tau"], res["rule"]["margin"])  # the same rule as `thresholds`


def test_bad_constraint_flags_exit_2_naming_the_flag(hwu64_run):
    db, run_id = hwu64_run
    r = run_cli("thresholds", run_id, "-q", "scenario", "--critical", "calendar:2", db=db)
    assert r.returncode == 2 and "--critical calendar: beta must be in (0, 1)" in r.stderr
    r = run_cli("thresholds", run_id, "-q", "scenario", "--critical", "hate:0.1", db=db)
    assert r.returncode == 2 and "critical option 'hate' is not an option" in r.stderr
