"""Finite-batch view (issue 15, item 5): the tails cross-checked against exact sums and simulation,
and the figures in ``workbench thresholds`` (text and --json) and in the exported policy."""

from __future__ import annotations

import json
import math
from fractions import Fraction

import numpy as np
import pytest

from tests.conftest import copy_store, run_cli
from workbench.errors import OptionError
from workbench.thresholds.batch import batch_view


def _binom_sf_exact(c: int, n: int, p: Fraction) -> Fraction:
    """P(Binomial(n, p) > c), summed exactly in rationals."""
    return sum((math.comb(n, k) * p**k * (1 - p) ** (n - k) for k in range(c + 1, n + 1)), Fraction(0))


@pytest.mark.parametrize("n, alpha", [(200, "0.05"), (1000, "0.1"), (37, "0.2")])
def test_guaranteed_figures_match_exact_binomial_sums(n, alpha):
    a = Fraction(alpha)
    view = batch_view(alpha=float(a), delta=0.1, n_batch=n, accepted=500, errors=20, confidence=0.95)
    limit = math.floor(float(a) * n + 1e-9)
    assert view["max_errors_at_alpha"] == limit == int(a * n)  # E/N > α  <=>  E > ⌊αN⌋
    g = view["guaranteed"]
    tail = _binom_sf_exact(limit, n, a)
    assert g["binomial_tail_at_alpha"] == pytest.approx(float(tail), rel=1e-9)
    assert g["p_exceed_at_most"] == pytest.approx(min(1.0, 0.1 + float(tail)), rel=1e-9)
    c = g["tolerance_errors"]  # the smallest count whose exceedance is at most ε = 0.05
    assert _binom_sf_exact(c, n, a) <= Fraction(5, 100) < _binom_sf_exact(c - 1, n, a)
    assert g["tolerance_probability"] == pytest.approx(0.85)


def test_estimated_exceedance_matches_beta_binomial_sum_and_simulation():
    from scipy.special import betaln, gammaln

    n, accepted, errors, alpha = 400, 1200, 45, 0.05
    est = batch_view(alpha=alpha, delta=None, n_batch=n, accepted=accepted, errors=errors)["estimated"]
    a, b = errors + 0.5, accepted - errors + 0.5
    k = np.arange(21, n + 1)  # E > ⌊0.05 · 400⌋ = 20
    log_pmf = gammaln(n + 1) - gammaln(k + 1) - gammaln(n - k + 1) + betaln(k + a, n - k + b) - betaln(a, b)
    assert est["p_exceed"] == pytest.approx(float(np.exp(log_pmf).sum()), rel=1e-9)
    rng = np.random.default_rng(0)
    draws = rng.binomial(n, rng.beta(a, b, size=400_000))
    share = float((draws > 20).mean())
    assert abs(share - est["p_exceed"]) < 4 * math.sqrt(share * (1 - share) / 400_000)
    assert est["error_rate"] == pytest.approx(a / (a + b)) and est["expected_errors"] == pytest.approx(n * a / (a + b))


def test_uncertified_rules_get_no_guaranteed_figure_and_bad_batch_is_refused():
    view = batch_view(alpha=0.05, delta=None, n_batch=100, accepted=50, errors=1)
    assert view["guaranteed"] is None and view["statement"].startswith("next 100 accepted items: estimated")
    with pytest.raises(OptionError) as err:
        batch_view(alpha=0.05, delta=0.1, n_batch=0, accepted=50, errors=1)
    assert err.value.parameter == "batch"


def test_thresholds_and_policy_export_report_the_next_batch(tmp_path, b77_tfidf_master):
    db = copy_store(b77_tfidf_master["db"], tmp_path / "wb.duckdb")
    run_id = b77_tfidf_master["run_id"]
    doc = json.loads(
        run_cli("thresholds", run_id, "-q", "intent", "--batch", "500", "--json", db=db, check=True).stdout
    )
    q = doc["questions"]["intent"]
    b = q["batch"]
    assert q["certified"] and b["n"] == 500 and b["max_errors_at_alpha"] == 25
    expected = batch_view(
        alpha=0.05, delta=0.1, n_batch=500, accepted=q["calibration"]["n_accepted"], errors=q["calibration"]["n_errors"]
    )
    assert b == json.loads(json.dumps(expected))
    assert 0.1 < b["guaranteed"]["p_exceed_at_most"] < 1 and 0 < b["estimated"]["p_exceed"] < 1
    text = run_cli("thresholds", run_id, "-q", "intent", "--batch", "500", db=db, check=True).stdout
    assert "next 500 accepted items: P(error > 0.05) <=" in text and "not guaranteed" in text
    out = tmp_path / "policy.json"
    run_cli("policy", "export", run_id, "-q", "intent", "--batch", "500", "--out", str(out), db=db, check=True)
    policy = json.loads(out.read_text(encoding="utf-8"))
    assert policy["questions"]["intent"]["objective"]["details"]["batch"]["n"] == 500
    bad = run_cli("thresholds", run_id, "-q", "intent", "--batch", "0", db=db)
    assert bad.returncode == 2 and bad.stderr.startswith("error: --batch must be at least 1"), bad.stderr
