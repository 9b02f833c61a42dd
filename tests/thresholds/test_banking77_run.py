"""The guarantee on a real run: BANKING77 answered by the TF-IDF baseline (``baseline:tfidf-logreg``).

The run's calibration and test answers are pooled and re-split 200 times at random into calibration
(3,000) and test (the rest). The certified rule's realised test error exceeds alpha in at most a delta
share of splits (plus Monte-Carlo slack), while the uncertified "target error = alpha" point estimate
exceeds it far more often. Also checks the acceptance command end to end on the same store.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from tests.conftest import copy_store, run_cli
from workbench.store.db import connect
from workbench.store.runs import load_answers
from workbench.thresholds.guarantees import select_guarantee_split, select_target
from workbench.thresholds.rules import RuleCoordinates
from workbench.thresholds.surface import risk_coverage_surface, surface_from_coordinates

pytestmark = pytest.mark.slow
ALPHA, DELTA, N_SPLITS, N_CAL = 0.05, 0.1, 200, 3000


@pytest.fixture(scope="module")
def banking_run(tmp_path_factory, b77_tfidf_master):
    """A private copy of the session's BANKING77 TF-IDF store (import fraction 0.3, seed 0)."""
    db = copy_store(b77_tfidf_master["db"], tmp_path_factory.mktemp("b77") / "wb.duckdb")
    return db, b77_tfidf_master["run_id"]


def test_acceptance_command_on_banking77(banking_run):
    db, run_id = banking_run
    r = run_cli(
        "thresholds",
        run_id,
        "--question",
        "intent",
        "--max-error",
        "0.05",
        "--delta",
        "0.1",
        "--json",
        db=db,
        check=True,
    )
    res = json.loads(r.stdout)["questions"]["intent"]
    assert res["certified"] and res["feasible"]
    assert res["rule"]["tau"] is not None and res["rule"]["margin"] is not None
    assert res["guarantee"]["risk_upper_bound"] <= 0.05 and res["calibration"]["coverage"] > 0.3
    t = res["test"]
    assert t["n_items"] > 3000 and t["error"]["high"] > t["error"]["value"] > t["error"]["low"]
    assert t["coverage"]["value"] > 0.3


def test_guarantee_holds_over_random_splits_of_the_banking77_run(banking_run):
    db, run_id = banking_run
    con = connect(db, read_only=True)
    ans = load_answers(con, run_id, "intent", splits=["calibration", "test"])
    con.close()
    ans = ans.select(ans.labels >= 0)
    full = risk_coverage_surface("choice", ans.probs, ans.labels, grid=60)
    coords = full.extra["coordinates"]
    correct = coords.predicted == ans.labels
    n, k = len(ans.labels), ans.probs.shape[1]
    rng = np.random.default_rng(0)
    over_cert = over_naive = 0
    for _ in range(N_SPLITS):
        cal = np.zeros(n, dtype=bool)
        cal[rng.choice(n, N_CAL, replace=False)] = True
        sub = RuleCoordinates(coords.predicted[cal], coords.x[cal], coords.y[cal], "tau", "margin")
        sel, _ = select_guarantee_split(
            sub, correct[cal], x_grid=full.x_grid, y_grid=full.y_grid, n_classes=k, alpha=ALPHA, delta=DELTA, rng=rng
        )
        cal_s = surface_from_coordinates(sub.x, sub.y, correct[cal], x_grid=full.x_grid, y_grid=full.y_grid)
        t_acc, t_err = full.accepted - cal_s.accepted, full.errors - cal_s.errors
        if sel.feasible:
            i, j = np.searchsorted(full.x_grid, sel.x), np.searchsorted(full.y_grid, sel.y)
            over_cert += t_acc[i, j] > 0 and t_err[i, j] / t_acc[i, j] > ALPHA
        naive = select_target(cal_s, target_error=ALPHA)
        if naive.feasible:
            i, j = np.searchsorted(full.x_grid, naive.x), np.searchsorted(full.y_grid, naive.y)
            over_naive += t_acc[i, j] > 0 and t_err[i, j] / t_acc[i, j] > ALPHA
    slack = 3 * math.sqrt(DELTA * (1 - DELTA) / N_SPLITS)
    assert over_cert / N_SPLITS <= DELTA + slack
    assert over_naive / N_SPLITS > over_cert / N_SPLITS
