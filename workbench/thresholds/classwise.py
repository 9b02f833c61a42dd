"""Class-conditional rules under critical-option constraints: a strict ``(τ, m)`` for the options a
critical option is confused with, a loose one for the rest, certified jointly (issue 28 §1).

One global rule under ``--critical c:β`` must be as strict as the critical option needs everywhere,
although its items are misrouted into a few options only. Here the options are split into two groups:

- the **strict group** ``S``: the options the user names (``confusable``), or else the critical options
  and, for each, the ``n_neighbours`` options its items are most often accepted as, estimated on the
  *learning rows* only: the expected number of critical items among the learning rows predicted ``o``,
  from the calibrated probability of the critical option (``Σ p_c``, label-free, so it uses every
  learning row, not only the few critical ones), plus the labelled misroutes seen there, each item
  weighted by the share of learning rows of a smaller margin (a confident misroute forces a loose rule
  to be strict, an unsure one is rejected anyway);
- the **loose group** ``L``: every other acceptable option.

The learning rows are the calibrator's carve when there is one (``order_rows``: the rows that fitted the
temperature, already apart from the certifying rows — so every certifying row certifies, and the critical
option's few items are not split three ways), otherwise a seeded ``order_fraction`` of the certifying
split held apart (:func:`held_apart_mask`). Below, "held-apart" means the learning rows.

The rule family is ``λ = (s, l)``: margin ``s`` for ``S`` and margin ``l`` for ``L``, each on the
grid's margin axis or "accept nothing from this group" (:func:`margin_path`; a top-label rule's ``tau``
up to its margin changes nothing, since the top probability is at least its margin over the second).
Both risks are additive over the two groups, so at every ``λ`` the certifying items give

- the main risk, errors (or misroute costs) among the items accepted by either group's rule, with
  ``n = acc_S(s) + acc_L(l)`` (the Hoeffding–Bentkus p-value of :mod:`workbench.thresholds.guarantees`);
- each critical option's misroute rate, ``(mis_S(s) + mis_L(l)) / n_c`` over its ``n_c`` items
  (:mod:`workbench.thresholds.risks`).

A ``λ``'s p-value is the larger of them (Learn-then-Test with several risks: a valid p-value of the
union null "some risk exceeds its bound"). Fixed-sequence testing at ``δ`` along an order learned on
the held-apart items then controls ``P(main risk > α or some critical rate > β_c) ≤ δ`` over the
whole family: the group, the paths and the order are functions of the held-apart items alone, so
they are fixed before the certifying items are looked at. The sequence, from held-apart counts, is a
monotone chain through the pairs (:func:`loosening_chain`): from "both groups accept nothing", each step
loosens the group whose next margin adds the least predicted critical misroute rate per accepted item
(held-apart misroutes averaged with the label-free expectation from the calibrated probabilities,
which sees every held-apart item, not only the few critical ones), then the fewest errors per accepted
item. Along it both rules only loosen, so misroutes never decrease: once a critical test fails, every
later pair would fail it too. The tests start at the chain's safest pair — not predicted to fail the
critical test (held-apart misroutes scaled to the certifying rows give a p-value at most δ), and the
smallest larger of two ranks, of the held-apart upper bound of the main risk at level δ and of the
predicted critical rate — and follow the chain until the first non-rejection. Nothing of it depends on α, so certification stays monotone in α
(same argument as :mod:`workbench.thresholds.guarantees`). Among the certified ``λ`` the one with the
most certifying items accepted is chosen.

The result is a :class:`~workbench.thresholds.guarantees.Selection` whose ``x``/``y`` are the loose
rule and whose ``per_class`` holds the strict rule for each option of ``S`` (``None``: never accepted):
the policy's global ``tau``/``margin`` with per-option overrides, which ``workbench_runtime`` applies.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from workbench.thresholds.bounds import (
    ThresholdError,
    binomial_upper_bound,
    hoeffding_bentkus_p_values,
    hoeffding_bentkus_upper_bound,
)
from workbench.thresholds.guarantees import UNCERTIFIED, Selection, certificate
from workbench.thresholds.risks import bounded_loss_p_values, bounded_upper_bound, bounded_upper_bounds
from workbench.thresholds.rules import RuleCoordinates
from workbench.thresholds.surface import Surface, surface_from_coordinates

#: How the output and the policy file state the class-conditional certificate.
CLASS_CONDITIONAL_RULE = (
    "one (tau, margin) for the strict group (the options the critical ones are confused with) and one for "
    "the rest; pairs of the two are tested, from strict to lax along a chain learned on held-apart items, "
    "for the error among all accepted items and each critical option's misroute rate (largest p-value), "
    "fixed-sequence at delta, so every risk is certified jointly"
)

#: Neighbours per critical option in the strict group when the user names none.
N_NEIGHBOURS = 6


def held_apart_mask(n: int, order_fraction: float, seed: int) -> np.ndarray:
    """(n,) bool: the certifying-split rows held apart to learn the test order — the same draw as
    :func:`workbench.thresholds.guarantees.certify_surface` (``default_rng([seed, 1])``)."""
    rng = np.random.default_rng([seed, 1])
    return rng.random(n) < order_fraction


def confusable_options(
    predicted: np.ndarray,
    labels: np.ndarray,
    critical: Sequence[int],
    n_options: int,
    *,
    critical_probs: np.ndarray | None = None,
    n_neighbours: int = N_NEIGHBOURS,
    acceptable: Sequence[int] | None = None,
    confidence: np.ndarray | None = None,
) -> list[int]:
    """The strict group: the critical options and, per critical option ``c``, the ``n_neighbours``
    options ``o ≠ c`` with the largest expected number of ``c`` items among the items predicted ``o``.

    The expectation is the sum of ``c``'s calibrated probability over the items predicted ``o`` (no labels
    needed) plus the labelled ``c`` items predicted ``o``. Call it on held-apart items only: the
    group must not depend on the items that certify. Options with no expected ``c`` item are left out.

    Parameters
    ----------
    predicted, labels : ndarray of shape (n,), int (predicted -1 = failure, ignored)
    critical : option indices
    critical_probs : ndarray of shape (n, len(critical)), optional
        The calibrated probability of each critical option (columns in the order of ``critical``).
    acceptable : options that may be accepted (default all); others never join the group
    confidence : ndarray of shape (n,) in [0, 1], optional
        Each item's weight in the expectation (default 1): with the share of items of a smaller margin, a
        ``c`` item predicted ``o`` counts as much as the share of rules that would still accept it, so options
        that take ``c`` items confidently come first (the ones that force a loose rule to be strict).

    Returns
    -------
    sorted list of option indices
    """
    pred = np.asarray(predicted, dtype=np.int64)
    lab = np.asarray(labels, dtype=np.int64)
    ok = pred >= 0
    allowed = np.zeros(n_options, dtype=bool)
    allowed[list(range(n_options)) if acceptable is None else [int(a) for a in acceptable]] = True
    group = {int(c) for c in critical if allowed[int(c)]}
    w = np.ones(len(pred)) if confidence is None else np.asarray(confidence, dtype=float)
    for r, c in enumerate(int(c) for c in critical):
        hit = ok & (lab == c)
        score = np.bincount(pred[hit], weights=w[hit], minlength=n_options)
        if critical_probs is not None and len(pred):
            pc = np.nan_to_num(np.asarray(critical_probs, dtype=float).reshape(len(pred), -1)[:, r], nan=0.0)
            score += np.bincount(pred[ok], weights=(pc * w)[ok], minlength=n_options)
        score[c] = 0.0
        score[~allowed] = 0.0
        ranked = np.argsort(-score, kind="stable")[:n_neighbours]
        group.update(int(o) for o in ranked if score[o] > 0)
    return sorted(group)


def margin_path(n_y: int) -> np.ndarray:
    """Flat indices into an (n_x, n_y) grid of the points ``(0, j)``, ``j`` from the strictest margin down:
    one group's strict→lax path (the margin orders a top-label rule's items; a ``tau`` at most the margin
    changes nothing, since the top probability is at least its margin over the second)."""
    return np.arange(n_y - 1, -1, -1)


@dataclass(frozen=True)
class OrderRows:
    """Rows that learn the strict group and the test chain, apart from the certifying rows: their rule
    coordinates, labels, bounded losses (``None``: 0/1 errors) and the calibrated probabilities of the critical
    options, shape (n, m) (``None``: only the labelled counts are used)."""

    coordinates: RuleCoordinates
    labels: np.ndarray
    loss: np.ndarray | None = None
    critical_probs: np.ndarray | None = None


@dataclass(frozen=True)
class _Rows:
    """Per-item inputs of one side (order or certifying): coordinates, correctness, labels, bounded loss,
    critical probabilities (n, m)."""

    x: np.ndarray
    y: np.ndarray
    predicted: np.ndarray
    correct: np.ndarray
    labels: np.ndarray
    loss: np.ndarray | None
    probs: np.ndarray | None

    def take(self, mask: np.ndarray) -> _Rows:
        def t(a):
            return None if a is None else a[mask]

        return _Rows(
            self.x[mask], self.y[mask], self.predicted[mask], self.correct[mask], self.labels[mask],
            t(self.loss), t(self.probs),
        )  # fmt: skip

    @property
    def n(self) -> int:
        return len(self.labels)


def _group_surface(rows: _Rows, mask: np.ndarray, x_grid, y_grid, names, loss_scale: float, critical) -> Surface:
    return surface_from_coordinates(
        rows.x[mask],
        rows.y[mask],
        rows.correct[mask],
        x_grid=x_grid,
        y_grid=y_grid,
        x_name=names[0],
        y_name=names[1],
        loss=None if rows.loss is None else rows.loss[mask],
        loss_scale=loss_scale,
        labels=rows.labels[mask],
        critical=critical,
    )


@dataclass(frozen=True)
class PathCounts:
    """Counts along one group's path (shape (P,)) or at every (strict, loose) pair (shape (P_S, P_L)):
    accepted items, wrong ones, their summed bounded loss (``None``: 0/1 errors) and, per critical option,
    its items accepted as another option (leading axis m)."""

    accepted: np.ndarray
    errors: np.ndarray
    loss: np.ndarray | None
    misroutes: np.ndarray


def _on_path(surface: Surface, path: np.ndarray, n_critical: int) -> PathCounts:
    """Counts of a group at "accept nothing" followed by the path's points, shape (1 + len(path),)."""

    def pick(a: np.ndarray) -> np.ndarray:
        return np.concatenate([[0], np.asarray(a).ravel()[path]])

    mis = (
        np.stack([pick(surface.critical_misroutes[s]) for s in range(n_critical)])
        if surface.critical_misroutes is not None
        else np.zeros((n_critical, 1 + len(path)))
    )
    return PathCounts(
        pick(surface.accepted).astype(np.int64),
        pick(surface.errors).astype(np.int64),
        None if surface.loss is None else pick(surface.loss).astype(float),
        mis.astype(np.int64),
    )


def _joint(s: PathCounts, l_: PathCounts) -> PathCounts:
    """Counts at every (strict, loose) pair: the two groups' counts add up."""
    return PathCounts(
        s.accepted[:, None] + l_.accepted[None, :],
        s.errors[:, None] + l_.errors[None, :],
        None if s.loss is None or l_.loss is None else s.loss[:, None] + l_.loss[None, :],
        s.misroutes[:, :, None] + l_.misroutes[:, None, :],
    )


def _predicted_over(
    misroutes: np.ndarray, n_true: np.ndarray, betas: np.ndarray, delta: float, scale: float
) -> np.ndarray:
    """(P_S, P_L) bool from held-apart counts: pairs whose critical test is predicted to fail on the
    certifying rows. The held-apart misroutes ``(m, P_S, P_L)`` of the ``n_true`` items of each critical
    option, scaled to the certifying rows by ``scale`` (their number over the held-apart rows'), give a
    predicted p-value; above ``delta`` is over."""
    mis = np.asarray(misroutes, dtype=float)
    over = np.zeros(mis.shape[1:], dtype=bool)
    for r in range(mis.shape[0]):
        n_r = np.full(mis.shape[1:], max(round(float(n_true[r]) * scale), 1))
        over |= hoeffding_bentkus_p_values(np.round(mis[r] * scale), n_r, float(betas[r])) > delta
    return over


def loosening_chain(rate: np.ndarray, errors: np.ndarray, accepted: np.ndarray) -> np.ndarray:
    """A monotone walk through the (P_S, P_L) family, as flat indices: from (0, 0) (both groups accept
    nothing) each step loosens one group by one point of its path — the one whose step adds the least
    critical misroute ``rate`` per accepted item, then the fewest ``errors`` per accepted item (all
    held-apart figures) — until both groups are at their laxest. Along it both rules only loosen, so
    every count (accepted, errors, misroutes) is non-decreasing."""
    n_s, n_l = accepted.shape
    i = j = 0
    out = [0]
    for _ in range(n_s + n_l - 2):
        best = None
        for a, b in ((i + 1, j), (i, j + 1)):
            if a >= n_s or b >= n_l:
                continue
            gain = max(float(accepted[a, b] - accepted[i, j]), 0.5)
            key = ((rate[a, b] - rate[i, j]) / gain, (errors[a, b] - errors[i, j]) / gain, a, b)
            best = key if best is None or key < best else best
        assert best is not None
        i, j = best[2], best[3]
        out.append(i * n_l + j)
    return np.asarray(out, dtype=np.int64)


def _min_rank(v: np.ndarray) -> np.ndarray:
    """Rank of each value among all (0 = smallest; ties share the smallest rank)."""
    srt = np.sort(v, kind="stable")
    return np.searchsorted(srt, v, side="left")


def _predicted_rate(
    misroutes: np.ndarray, n_true: np.ndarray, betas: np.ndarray, soft: tuple[np.ndarray, np.ndarray] | None
) -> np.ndarray:
    """(P_S, P_L): the largest held-apart critical misroute rate over its bound, ``rate / beta`` (averaged with
    the label-free ``soft`` estimate when given)."""
    mis = np.asarray(misroutes, dtype=float)
    n = np.asarray(n_true, dtype=float)[:, None, None]
    if soft is not None:
        mis = (mis + soft[0]) / 2
        n = (n + soft[1][:, None, None]) / 2
    return (mis / np.maximum(n, 1e-12) / np.asarray(betas)[:, None, None]).max(axis=0)


def select_class_conditional(
    surface: Surface,
    *,
    alpha: float,
    delta: float,
    constraints: Sequence[tuple[int, float]],
    classes: Sequence[int] | None = None,
    confusable: Sequence[int] | None = None,
    critical_probs: np.ndarray | None = None,
    order_fraction: float = 0.3,
    seed: int = 0,
    order_rows: OrderRows | None = None,
):
    """Certify a strict rule for the confusable options and a loose one for the rest (module docstring).

    Parameters
    ----------
    surface : Surface
        From :func:`~workbench.thresholds.surface.risk_coverage_surface` on the certifying rows with the
        critical options (per-item coordinates, labels and, with costs, losses in ``extra``).
    alpha, delta : the main risk's bound (in cost units with costs) and the family-wise level
    constraints : (critical option index, beta) pairs, at least one
    classes : options that may be accepted (default all)
    confusable : the strict group (option indices); ``None`` = learned on the learning rows
    critical_probs : ndarray of shape (n, m), optional
        The calibrated probability of each critical option (in the order of ``constraints``) on the same
        rows, for the label-free estimates; without it only the labelled learning rows count.
    order_fraction, seed : without ``order_rows``, the held-apart rows (:func:`held_apart_mask`), in (0, 1)
    order_rows : OrderRows, optional
        Rows apart from ``surface``'s (the calibrator's carve, :func:`workbench.thresholds.choose.carve_order_rows`)
        that learn the group and the chain; every row of ``surface`` then certifies.

    Returns
    -------
    Selection
    """
    if not constraints:
        raise ThresholdError("class-conditional rules need at least one critical option (constraints)")
    if order_rows is None and not (0 < order_fraction < 1):
        raise ThresholdError(
            "class-conditional rules learn their group and test order on held-apart items: order_fraction "
            f"must be in (0, 1), got {order_fraction}",
            parameter="order_fraction",
        )
    coords, correct = surface.extra.get("coordinates"), surface.extra.get("correct")
    labels = surface.extra.get("labels")
    if coords is None or correct is None or labels is None:
        raise ThresholdError(
            "class-conditional rules need per-item coordinates and labels (a surface from risk_coverage_surface "
            "built with the critical options)"
        )
    labels = np.asarray(labels, dtype=np.int64)
    n = len(labels)
    k = surface.class_accepted.shape[0] if surface.class_accepted is not None else int(coords.predicted.max()) + 1
    classes = list(range(k)) if classes is None else [int(c) for c in classes]
    critical = [int(c) for c, _ in constraints]
    betas = np.array([float(b) for _, b in constraints])

    def probs_of(cp, m: int) -> np.ndarray | None:
        return None if cp is None else np.nan_to_num(np.asarray(cp, dtype=float).reshape(m, -1), nan=0.0)

    rows = _Rows(
        np.asarray(coords.x),
        np.asarray(coords.y),
        np.asarray(coords.predicted, dtype=np.int64),
        np.asarray(correct, dtype=bool),
        labels,
        surface.extra.get("loss"),
        probs_of(critical_probs, n),
    )
    if order_rows is None:
        hold = held_apart_mask(n, order_fraction, seed)
        learn, certify = rows.take(hold), rows.take(~hold)
        learned_on = f"{learn.n} held-apart calibration items"
    else:
        oc = order_rows.coordinates
        o_lab = np.asarray(order_rows.labels, dtype=np.int64)
        o_pred = np.asarray(oc.predicted, dtype=np.int64)
        learn = _Rows(
            np.asarray(oc.x),
            np.asarray(oc.y),
            o_pred,
            o_pred == o_lab,
            o_lab,
            None if order_rows.loss is None else np.asarray(order_rows.loss, dtype=float),
            probs_of(order_rows.critical_probs, len(o_lab)),
        )
        certify = rows
        learned_on = f"the {learn.n} items that fitted the calibrator"
    if confusable is None:
        strict = confusable_options(
            learn.predicted,
            learn.labels,
            critical,
            k,
            critical_probs=learn.probs,
            acceptable=classes,
            confidence=_min_rank(learn.y) / max(learn.n, 1),
        )
        group_from = f"learned on {learned_on}"
    else:
        strict = sorted({int(o) for o in confusable})
        group_from = "named"
    strict_arr = np.asarray(strict, dtype=np.int64)
    gx, gy = surface.x_grid, surface.y_grid
    names = (coords.x_name, coords.y_name)

    def counts(side: _Rows) -> tuple[Surface, Surface, np.ndarray]:
        g = np.isin(side.predicted, strict_arr)
        s_, l_ = (_group_surface(side, m, gx, gy, names, surface.loss_scale, critical) for m in (g, ~g))
        return s_, l_, np.array([int(np.count_nonzero(side.labels == c)) for c in critical])

    o_s, o_l, o_nc = counts(learn)

    def soft_misroutes() -> tuple[np.ndarray, np.ndarray] | None:
        """Label-free estimate on the learning rows, per critical option: the expected number of its items
        accepted as another option at every (strict, loose) pair (Σ of its calibrated probability over
        them), and of its items in all."""
        if learn.probs is None:
            return None
        s_h = np.isin(learn.predicted, strict_arr)
        out, tot = [], []
        for r, c in enumerate(critical):
            w = np.where(learn.predicted != c, learn.probs[:, r], 0.0)
            sides = []
            for g, path in ((s_h, paths[0]), (~s_h, paths[1])):
                sf = surface_from_coordinates(
                    learn.x[g], learn.y[g], learn.correct[g], x_grid=gx, y_grid=gy, weights=w[g]
                )
                assert sf.weighted is not None
                sides.append(np.concatenate([[0.0], sf.weighted.ravel()[path]]))
            out.append(sides[0][:, None] + sides[1][None, :])
            tot.append(learn.probs[:, r].sum())
        return np.stack(out), np.array(tot)

    # each group's strict→lax path: the margin axis (tau at its laxest grid value; a top probability is at least
    # its margin, so a tau up to the margin changes nothing), strictest first
    paths = [margin_path(len(gy))] * 2
    order_counts = _joint(_on_path(o_s, paths[0], len(critical)), _on_path(o_l, paths[1], len(critical)))
    c_s, c_l, n_c = counts(certify)
    n_cert = certify.n
    cert = _joint(_on_path(c_s, paths[0], len(critical)), _on_path(c_l, paths[1], len(critical)))

    # the test order from the held-apart rows (module docstring)
    acc_o = np.asarray(order_counts.accepted)
    if order_counts.loss is None:
        ub = hoeffding_bentkus_upper_bound(order_counts.errors, acc_o, delta)
    else:
        ub = bounded_upper_bounds(order_counts.loss, acc_o, delta)
    soft = soft_misroutes()
    over = _predicted_over(order_counts.misroutes, o_nc, betas, delta, n_cert / max(learn.n, 1))
    rate = _predicted_rate(order_counts.misroutes, o_nc, betas, soft)
    both = np.maximum(_min_rank(np.asarray(ub).ravel()), _min_rank(rate.ravel()))  # safe for both risks
    chain = loosening_chain(rate, np.asarray(order_counts.errors, dtype=float), acc_o)
    # the tests start at the chain's safest point (not predicted over, smallest larger rank) and follow it
    start = int(np.lexsort((both[chain], over.ravel()[chain]))[0])
    seq = chain[start:]

    acc, err = np.asarray(cert.accepted), np.asarray(cert.errors)
    a_main = alpha / surface.loss_scale
    if cert.loss is None:
        p = hoeffding_bentkus_p_values(err, acc, a_main)
    else:
        p = bounded_loss_p_values(cert.loss, acc, a_main)
    mis = np.asarray(cert.misroutes)
    p_crit = np.stack(
        [
            hoeffding_bentkus_p_values(mis[r], np.full(mis[r].shape, n_c[r]), float(betas[r]))
            for r in range(len(critical))
        ]
    )
    p = np.maximum(p, p_crit.max(axis=0))
    ok_seq = np.cumprod(p.ravel()[seq] <= delta).astype(bool)
    ok = np.zeros(p.size, dtype=bool)
    ok[seq[ok_seq]] = True
    ok = ok.reshape(p.shape) & (acc > 0)

    def point(path: np.ndarray, idx: int) -> tuple[float, float] | None:
        if idx == 0:
            return None
        i, j = np.unravel_index(int(path[idx - 1]), (len(gx), len(gy)))
        return float(gx[i]), float(gy[j])

    base = {
        "alpha": alpha,
        "delta": delta,
        "method": "fixed-sequence",
        "per_class": False,
        "n_calibration": n_cert,
        "n_order": learn.n,
        "order": (
            f"a chain of (strict, loose) pairs learned on {learned_on}, each "
            "step loosening the group that adds the least predicted critical misroute rate per accepted item, "
            "the same for every α (split fixed-sequence)"
        ),
        "joint": CLASS_CONDITIONAL_RULE,
        "delta_split": "none (max p-value over the risks)",
    }
    if surface.loss is not None or surface.loss_scale != 1.0:
        base["risk"] = "expected misroute cost among auto-accepted items"
        base["loss_scale"] = float(surface.loss_scale)
    group = {
        "strict": strict,
        "group_from": group_from,
        "path_points": [len(paths[0]) + 1, len(paths[1]) + 1],
        "n_rules": int(p.size),
    }

    def summary(accepted: int, errors: int) -> dict:  # as guarantees' calibration summary, over the certifying rows
        return {
            "n_items": n_cert,
            "n_accepted": accepted,
            "n_errors": errors,
            "coverage": accepted / max(n_cert, 1),
            "error_rate": errors / accepted if accepted else None,
            "review_rate": 1.0 - accepted / max(n_cert, 1),
        }

    if not ok.any():
        return Selection(
            "guarantee",
            False,
            None,
            None,
            {},
            None,
            summary(0, 0),
            guarantee={
                **base,
                "class_conditional": {**group, "strict_rule": None, "loose_rule": None},
                **UNCERTIFIED,
                "constraints": [{"option": c, "beta": float(b)} for c, b in zip(critical, betas, strict=True)],
            },
            feasible=False,
            notes=["no class-conditional rule is certified at this alpha/delta: everything goes to review"],
        )
    cand = ok & (acc == acc[ok].max())
    e = np.where(cand, err, np.iinfo(np.int64).max)
    si, li = (int(v) for v in np.argwhere(cand & (e == e.min()))[0])  # strictest strict rule among ties
    a_, e_ = int(acc[si, li]), int(err[si, li])
    if cert.loss is not None:
        bound = bounded_upper_bound(float(np.asarray(cert.loss)[si, li]), a_, delta) * surface.loss_scale
    else:
        bound = binomial_upper_bound(e_, a_, delta) * surface.loss_scale
    strict_pt, loose_pt = point(paths[0], si), point(paths[1], li)
    inf = float("inf")
    x, y = loose_pt if loose_pt is not None else (inf, inf)

    def as_params(pt: tuple[float, float] | None) -> dict | None:
        if pt is None:
            return None
        return coords.thresholds_to_params(*pt)

    def side(g: PathCounts, idx: int) -> dict:
        return {"accepted": int(g.accepted[idx]), "errors": int(g.errors[idx])}

    cs, cl = _on_path(c_s, paths[0], len(critical)), _on_path(c_l, paths[1], len(critical))
    extra: dict = {}
    if cert.loss is not None:
        extra["calibration_cost"] = float(np.asarray(cert.loss)[si, li]) * surface.loss_scale / max(a_, 1)
    elif surface.loss_scale != 1.0:
        extra["calibration_cost"] = e_ * surface.loss_scale / max(a_, 1)
    cons = []
    for r, c in enumerate(critical):
        m_r, nr = int(mis[r, si, li]), int(n_c[r])
        cons.append(
            {
                "option": c,
                "beta": float(betas[r]),
                "n_true": nr,
                "misrouted": m_r,
                "rate": m_r / nr if nr else None,
                "p_value": float(p_crit[r, si, li]),
                "risk_upper_bound": min(binomial_upper_bound(m_r, nr, delta), float(betas[r])),
            }
        )
    return Selection(
        "guarantee",
        True,
        x,
        y,
        as_params(loose_pt) or {names[0]: inf, names[1]: inf},
        dict.fromkeys(strict, strict_pt),
        summary(a_, e_),
        guarantee={
            **base,
            "class_conditional": {
                **group,
                "strict_rule": as_params(strict_pt),
                "loose_rule": as_params(loose_pt),
                "strict_calibration": side(cs, si),
                "loose_calibration": side(cl, li),
            },
            **certificate(ok, p, (si, li), a_, n_cert, bound, level=delta, alpha=alpha),
            "constraints": cons,
            **extra,
        },
    )
