"""bench/scale_data.py builds what bench/scale.py measures: N items, one 77-option question, an imported
run with the documented accuracy, overconfidence and failure rate (checked at 5,000 items)."""

from __future__ import annotations

import sys

import numpy as np

from tests.conftest import ROOT
from workbench.store.db import connect
from workbench.store.runs import get_run, load_answers


def test_scale_store_has_the_documented_shape(tmp_path):
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        from scale_data import FAILURE_RATE, make_scale_store
    finally:
        sys.path.remove(str(ROOT / "bench"))
    dataset, run_id = make_scale_store(tmp_path / "wb.duckdb", 5000, verbose=False)
    con = connect(tmp_path / "wb.duckdb", read_only=True)
    ra = load_answers(con, run_id, "intent")
    run = get_run(con, run_id)
    con.close()
    assert dataset == "scale-5000" and run["status"] == "done" and run["splits"] == ["calibration", "test"]
    assert ra.probs.shape == (5000, 77) and len(ra.option_ids) == 77
    n_failed = int(ra.failed.sum())
    # Binomial(5000, 0.005): mean 25, sd 5; 4 sd either side
    assert abs(n_failed - 5000 * FAILURE_RATE) < 20
    ok = ~ra.failed
    acc = float((ra.probs[ok].argmax(axis=1) == ra.labels[ok]).mean())
    conf = float(ra.probs[ok].max(axis=1).mean())
    assert 0.76 < acc < 0.82  # SIGNAL = 3.3 gives ~0.79 (sd of the estimate ~0.006)
    assert conf - acc > 0.02  # overconfident: temperature scaling has something to fix
    np.testing.assert_allclose(ra.probs[ok].sum(axis=1), 1.0, atol=1e-12)  # 4-decimal values re-normalised
