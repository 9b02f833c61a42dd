"""Class-conditional rules under a critical-option constraint (workbench.thresholds.classwise, issue 28 §1).

Validity is checked on synthetic data whose true risks are known (a population of 400,000 items drawn
from the same generator judges every chosen rule); the CLI, the policy file and the runtime on a real
BANKING77 run answered by the TF-IDF baseline.
"""

from __future__ import annotations

import json
from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest

from tests.conftest import copy_store, run_cli
from tests.thresholds.synth import sample_labels, softmax
from workbench.errors import OptionError
from workbench.thresholds.classwise import OrderRows, confusable_options, held_apart_mask, select_class_conditional
from workbench.thresholds.guarantees import certify_surface
from workbench.thresholds.options import ThresholdOptions
from workbench.thresholds.rules import ChoiceRule, ClassThreshold, rule_coordinates
from workbench.thresholds.surface import risk_coverage_surface

ALPHA, BETA, DELTA = 0.1, 0.1, 0.1
K, CRIT, NEIGHBOUR = 20, 0, 1
PRIORS = np.array([0.03, 0.25, *[0.72 / 18] * 18])


def _draw(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Probabilities and labels: the critical option 0 (3% of items) is often confused with option 1,
    confidently (hate vs offensive); the other options are confused at random."""
    labels = sample_labels(rng, np.tile(PRIORS, (n, 1)))
    z = rng.normal(size=(n, K)) * 1.2
    z[np.arange(n), labels] += 3.5
    crit = labels == CRIT
    z[crit, NEIGHBOUR] += rng.normal(3.5, 1.5, size=int(crit.sum()))
    return softmax(z), labels


@pytest.fixture(scope="module")
def population():
    """400,000 items of the generator as (predicted, top probability, margin, labels): the true risks."""
    probs, labels = _draw(np.random.default_rng(2028), 400_000)
    top = np.sort(probs, axis=1)
    return probs.argmax(axis=1), top[:, -1], top[:, -1] - top[:, -2], labels


def _true_risks(sel, population) -> tuple[float, float, float]:
    """(error among accepted, critical misroute rate, coverage) of a selection's rule on the population."""
    pred, p1, margin, labels = population
    inf = float("inf")
    tau, m = np.full(K, inf), np.full(K, inf)
    if sel.feasible:
        tau[:], m[:] = sel.x, sel.y
        for k, v in (sel.per_class or {}).items():
            tau[k], m[k] = v if v is not None else (inf, inf)
    acc = (p1 >= tau[pred]) & (margin >= m[pred])
    err = float((acc & (pred != labels)).sum() / max(acc.sum(), 1))
    crit = labels == CRIT
    mis = float((acc & crit & (pred != CRIT)).sum() / crit.sum())
    return err, mis, float(acc.mean())


def _rule(sel) -> ChoiceRule:
    inf = float("inf")
    per = {k: ClassThreshold(*(v if v is not None else (inf, inf))) for k, v in (sel.per_class or {}).items()}
    return ChoiceRule(sel.x, sel.y, per_class=per)


def _order_rows(probs: np.ndarray, labels: np.ndarray) -> OrderRows:
    """Rows apart from the certifying ones, as the calibrator's carve is (prepare_question)."""
    return OrderRows(rule_coordinates("choice", probs), labels, None, probs[:, [CRIT]])


@pytest.mark.parametrize("learn_on", ["held-apart", "carve"])
def test_both_risks_hold_by_simulation_and_it_covers_more_than_one_global_rule(population, learn_on):
    """Over 150 calibration draws of 4,000 items: P(true error > α or true critical misroute rate > β) ≤ δ
    (within a 2.5-SE binomial tolerance), while the class-conditional rule covers over 3× what the one global
    constrained rule covers on the same draws. A naive pick (the largest calibration coverage whose calibration
    error and misroute rate are within α and β) violates far more often: the check can fail.

    ``held-apart``: the group and the chain are learned on 30% of the draw's rows, the other 70% certify.
    ``carve``: they are learned on a separate draw of 1,700 rows (the calibrator's carve) and all 4,000 certify."""
    rng = np.random.default_rng(7)
    n_draws, viol, viol_naive, certified = 150, 0, 0, 0
    cov_cc, cov_global = [], []
    for _ in range(n_draws):
        probs, labels = _draw(rng, 4000)
        surf = risk_coverage_surface("choice", probs, labels, grid=60, critical=[CRIT])
        order = _order_rows(*_draw(rng, 1700)) if learn_on == "carve" else None
        sel = select_class_conditional(
            surf,
            alpha=ALPHA,
            delta=DELTA,
            constraints=[(CRIT, BETA)],
            critical_probs=probs[:, [CRIT]],
            order_rows=order,
        )
        assert sel.calibration["n_items"] == (
            4000 if order is not None else int((~held_apart_mask(4000, 0.3, 0)).sum())
        )
        err, mis, cov = _true_risks(sel, population)
        certified += sel.certified
        viol += sel.certified and (err > ALPHA or mis > BETA)
        cov_cc.append(cov)
        glob = certify_surface(surf, alpha=ALPHA, delta=DELTA, constraints=[(CRIT, BETA)])
        cov_global.append(_true_risks(glob, population)[2])
        # naive: the best calibration coverage within alpha and beta on calibration, no certificate
        ok = (surf.errors <= ALPHA * surf.accepted) & (surf.critical_misroutes[0] <= BETA * surf.critical_n[0])
        i, j = np.unravel_index(np.argmax(np.where(ok, surf.accepted, -1)), ok.shape)
        naive = SimpleNamespace(feasible=True, x=float(surf.x_grid[i]), y=float(surf.y_grid[j]), per_class=None)
        e_n, m_n, _ = _true_risks(naive, population)
        viol_naive += e_n > ALPHA or m_n > BETA
    tolerance = 2.5 * np.sqrt(DELTA * (1 - DELTA) / n_draws)
    assert viol / n_draws <= DELTA + tolerance, viol
    assert viol_naive / n_draws > DELTA + tolerance, viol_naive  # an invalid procedure is caught
    assert certified >= 0.8 * n_draws
    assert np.mean(cov_cc) > 3 * np.mean(cov_global), (np.mean(cov_cc), np.mean(cov_global))


def test_certification_is_monotone_in_alpha():
    """Certified at α ⇒ certified at every larger α, and the certified set only grows (the order does not
    depend on α)."""
    probs, labels = _draw(np.random.default_rng(13), 5000)
    surf = risk_coverage_surface("choice", probs, labels, grid=40, critical=[CRIT])
    counts = [
        select_class_conditional(
            surf, alpha=a, delta=DELTA, constraints=[(CRIT, BETA)], critical_probs=probs[:, [CRIT]]
        )
        for a in np.linspace(0.02, 0.3, 15)
    ]
    n_points = [s.guarantee["n_certified_points"] for s in counts]
    assert n_points == sorted(n_points) and n_points[-1] > 0
    first = next(i for i, s in enumerate(counts) if s.certified)
    assert all(s.certified for s in counts[first:])


def test_the_strict_group_depends_on_held_apart_items_only():
    """Relabelling every certifying item changes nothing of the learned group (it is chosen on the
    held-apart rows); the neighbour the critical option is confused with is in it."""
    probs, labels = _draw(np.random.default_rng(3), 3000)
    hold = held_apart_mask(len(labels), 0.3, 0)
    surf = risk_coverage_surface("choice", probs, labels, grid=30, critical=[CRIT])
    sel = select_class_conditional(
        surf, alpha=ALPHA, delta=DELTA, constraints=[(CRIT, BETA)], critical_probs=probs[:, [CRIT]]
    )
    strict = sel.guarantee["class_conditional"]["strict"]
    assert CRIT in strict and NEIGHBOUR in strict
    shuffled = labels.copy()
    shuffled[~hold] = np.random.default_rng(4).permutation(labels[~hold])
    surf2 = risk_coverage_surface("choice", probs, shuffled, grid=30, critical=[CRIT])
    sel2 = select_class_conditional(
        surf2, alpha=ALPHA, delta=DELTA, constraints=[(CRIT, BETA)], critical_probs=probs[:, [CRIT]]
    )
    assert sel2.guarantee["class_conditional"]["strict"] == strict
    pred = probs.argmax(axis=1)
    assert confusable_options(
        pred[hold], labels[hold], [CRIT], K, critical_probs=probs[hold][:, [CRIT]], n_neighbours=1
    ) == [0, 1]


def test_with_order_rows_every_row_certifies_and_the_group_depends_on_the_order_rows_only():
    """Given order rows (the calibrator's carve), the group and the chain are learned on them: relabelling every
    certifying row changes nothing of the group, and every row of the surface certifies."""
    rng = np.random.default_rng(11)
    probs, labels = _draw(rng, 3000)
    order = _order_rows(*_draw(rng, 1300))
    kw = {"alpha": ALPHA, "delta": DELTA, "constraints": [(CRIT, BETA)], "order_rows": order}
    sel = select_class_conditional(
        risk_coverage_surface("choice", probs, labels, grid=30, critical=[CRIT]), critical_probs=probs[:, [CRIT]], **kw
    )
    cc = sel.guarantee["class_conditional"]
    assert cc["group_from"] == "learned on the 1300 items that fitted the calibrator"
    assert sel.guarantee["n_order"] == 1300 and sel.calibration["n_items"] == 3000
    assert CRIT in cc["strict"] and NEIGHBOUR in cc["strict"]
    shuffled = np.random.default_rng(4).permutation(labels)
    sel2 = select_class_conditional(
        risk_coverage_surface("choice", probs, shuffled, grid=30, critical=[CRIT]),
        critical_probs=probs[:, [CRIT]],
        **kw,
    )
    assert sel2.guarantee["class_conditional"]["strict"] == cc["strict"]
    (c,) = sel.guarantee["constraints"]
    assert c["n_true"] == int((labels == CRIT).sum())


def test_choose_learns_on_the_calibrators_carve():
    """choose_thresholds hands the calibrator's carve to the class-conditional rule: the certifying rows are all
    the others (none held apart), and without a calibrator the rows are held apart as before."""
    from tests.thresholds.test_choose import _answers
    from workbench.thresholds.choose import choose_thresholds

    probs, labels = _draw(np.random.default_rng(21), 5000)
    ans = _answers(probs, labels, qtype="choice")
    opts = ThresholdOptions(alpha=ALPHA, constraints={"0": BETA}, class_conditional=True)
    res = choose_thresholds(ans, None, opts)
    g = res.selection.guarantee
    n_fit = int(g.get("n_order", 0))
    assert res.certified and n_fit == int((np.random.default_rng(0).random(5000) < 0.3).sum())
    assert g["n_calibration"] == 5000 - n_fit and "fitted the calibrator" in g["class_conditional"]["group_from"]
    raw = choose_thresholds(ans, None, replace(opts, calibrate="none")).selection.guarantee
    assert raw["n_calibration"] == int((~held_apart_mask(5000, 0.3, 0)).sum())
    assert raw["class_conditional"]["group_from"].endswith("held-apart calibration items")


def test_named_group_and_the_rule_it_stands_for():
    """A named strict group is used as given; the selection is the loose rule with per-option overrides for
    the strict group, and its calibration figures are those of that rule on the certifying rows."""
    probs, labels = _draw(np.random.default_rng(5), 4000)
    surf = risk_coverage_surface("choice", probs, labels, grid=50, critical=[CRIT])
    sel = select_class_conditional(
        surf,
        alpha=ALPHA,
        delta=DELTA,
        constraints=[(CRIT, BETA)],
        confusable=[CRIT, NEIGHBOUR],
        critical_probs=probs[:, [CRIT]],
    )
    assert sel.certified and sel.guarantee["class_conditional"]["group_from"] == "named"
    assert set(sel.per_class) == {CRIT, NEIGHBOUR}
    rule = _rule(sel)
    cert = ~held_apart_mask(len(labels), 0.3, 0)
    d = rule.decide(probs[cert])
    assert sel.calibration["n_accepted"] == int(d.accepted.sum())
    assert sel.calibration["n_errors"] == int((d.accepted & (d.option != labels[cert])).sum())
    (c,) = sel.guarantee["constraints"]
    crit = labels[cert] == CRIT
    assert c["n_true"] == int(crit.sum()) and c["misrouted"] == int((d.accepted & crit & (d.option != CRIT)).sum())
    assert c["p_value"] <= DELTA and sel.guarantee["p_value"] <= DELTA


def test_options_check_class_conditional():
    o = ThresholdOptions(constraints={"a": 0.1}, class_conditional=True, confusable=["a", "b"])
    assert "class-conditional (strict: a, b)" in o.describe() and o.settings()["class_conditional"] is True
    for bad, field in (
        ({"class_conditional": True}, "class_conditional"),
        ({"constraints": {"a": 0.1}, "class_conditional": True, "method": "holm"}, "class_conditional"),
        ({"constraints": {"a": 0.1}, "class_conditional": True, "order_fraction": 0.0}, "class_conditional"),
        ({"constraints": {"a": 0.1}, "confusable": ["a"]}, "confusable"),
        ({"constraints": {"a": 0.1}, "per_class": True}, "constraints"),
    ):
        with pytest.raises(OptionError) as e:
            ThresholdOptions(**bad)
        assert e.value.parameter == field
    with pytest.raises(OptionError, match="class_conditional"):
        replace(o, constraints=None)


@pytest.fixture(scope="module")
def b77(b77_tfidf_master, tmp_path_factory):
    return copy_store(b77_tfidf_master["db"], tmp_path_factory.mktemp("cw") / "wb.duckdb"), b77_tfidf_master["run_id"]


def test_cli_policy_and_runtime_take_the_same_class_conditional_rule(b77, tmp_path):
    """`workbench thresholds --class-conditional` certifies a strict rule for the confusable options and a loose
    one elsewhere; `policy export` writes it as the global rule with per-option overrides, the runtime loads
    it and, deciding the stored test answers, reproduces the test figures `thresholds` printed."""
    db, run_id = b77
    crit = "unable_to_verify_identity"
    args = ("-q", "intent", "--max-error", "0.1", "--critical", f"{crit}:0.25", "--class-conditional")
    res = json.loads(run_cli("thresholds", run_id, *args, "--json", db=db, check=True).stdout)["questions"]["intent"]
    g = res["guarantee"]
    cc = g["class_conditional"]
    assert crit in cc["strict"] and cc["group_from"].startswith("learned on")
    rule = res["rule"]
    assert res["certified"]
    assert set(rule["per_class"]) == set(cc["strict"])
    assert rule["margin"] == cc["loose_rule"]["margin"]
    assert all(v["margin"] == cc["strict_rule"]["margin"] for v in rule["per_class"].values())
    (c,) = g["constraints"]
    assert c["option"] == crit and c["p_value"] <= 0.1 and g["p_value"] <= 0.1
    assert c["misrouted"] / c["n_true"] <= c["risk_upper_bound"] <= 0.25
    (tc,) = res["test_risks"]["constraints"]  # the test figures of the same rule
    assert tc["option"] == crit and tc["n_true"] > 0
    import workbench as wb

    con = wb.connect(db, read_only=True)  # the API: the same rule from ThresholdOptions
    api = wb.choose_thresholds(
        con, run_id, "intent", wb.ThresholdOptions(alpha=0.1, constraints={crit: 0.25}, class_conditional=True)
    )
    con.close()
    assert api.rule_dict() == rule and api.certified
    text = run_cli("thresholds", run_id, *args, db=db, check=True).stdout
    assert "class-conditional: strict group" in text and "class-conditional (strict: learned)" in text

    out = tmp_path / "policy.json"
    run_cli("policy", "export", run_id, *args, "--out", str(out), db=db, check=True)
    from workbench_runtime import Policy

    from workbench.store.db import connect
    from workbench.store.runs import load_answers

    pol = Policy.load(out)
    q = pol.model.questions["intent"]
    assert q.rule.model_dump()["per_class"] == {k: v for k, v in rule["per_class"].items()}
    assert q.objective.details["class_conditional"]["strict"] == cc["strict"]
    assert q.objective.constraints is not None and q.objective.constraints[0].option == crit
    con = connect(db, read_only=True)
    test = load_answers(con, run_id, "intent", splits=["test"])
    con.close()
    test = test.select(test.labels >= 0)
    decisions = pol.questions["intent"].decide_probs(np.asarray(test.probs, dtype=float))
    accepted = np.array([d.accepted for d in decisions])
    wrong = np.array(
        [d.accepted and d.option != test.option_ids[y] for d, y in zip(decisions, test.labels, strict=True)]
    )
    assert int(accepted.sum()) == q.expected_test.n_accepted == res["test"]["n_accepted"]
    assert int(wrong.sum()) == q.expected_test.n_errors


def test_cli_refuses_class_conditional_without_a_critical_option(b77):
    db, run_id = b77
    r = run_cli("thresholds", run_id, "-q", "intent", "--class-conditional", db=db)
    assert r.returncode == 2 and "--class-conditional needs a critical option" in r.stderr
    r = run_cli(
        "thresholds", run_id, "-q", "intent", "--critical", "card_arrival:0.1", "--class-conditional",
        "--confusable", "nope", db=db,
    )  # fmt: skip
    assert r.returncode == 2 and "confusable option 'nope' is not an option" in r.stderr
