"""Threshold surfaces, certified regions and certified results (what ``workbench thresholds`` and
``workbench plan-labels`` compute), and the one set of threshold defaults every page starts from.

The Thresholds page keeps at most three small arrays per item (:func:`rule_points`), never the
n × k matrix."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pandas as pd
import streamlit as st

from workbench.thresholds.options import ThresholdOptions
from workbench.ui.state.arrays import labelled_items
from workbench.ui.state.cache import kept, reads_in_batches
from workbench.ui.state.store import read_connection


@dataclass(frozen=True)
class RulePoints:
    """What the Thresholds page needs per item to judge any (τ, m) rule: the labelled items' rule
    coordinates (:func:`workbench.thresholds.rules.rule_coordinates`: predicted option, x, y) and
    labels — about 20 bytes per item instead of 8 k."""

    qtype: str
    option_ids: tuple[str, ...]
    coords: Any
    labels: Any


@st.cache_resource(show_spinner=False, max_entries=2)
def grid_points(path: str, token: tuple, run_id: str, question: str) -> dict | None:
    """{split: :class:`workbench.engines.store_aggregates.GridPoints`} of the calibration and test splits
    of a run as answered, from one DuckDB query over the store; None when the run does not qualify
    (a calibrated view, a score question). Kept between sessions (about 20 bytes per item)."""
    from workbench.engines import store_aggregates as sa
    from workbench.store.sources import StoreSource

    def compute():
        with read_connection(path) as con:
            return sa.grid_points(StoreSource(con, run_id), question, ("calibration", "test"), grid=GRID_POINTS)

    return kept(path, token, run_id, question, ("grid_points", GRID_POINTS), compute)


@st.cache_resource(show_spinner=False, max_entries=8)
def rule_points(path: str, token: tuple, run_id: str, question: str, split: str, recalibrate: str | None) -> RulePoints:
    """:class:`RulePoints` of one split (optionally recalibrated with a calibrator fitted on the calibration split,
    :func:`~workbench.ui.state.arrays.split_calibrator`).

    Of a large run as answered, the points come from :func:`grid_points` (one DuckDB query over the
    probabilities' stored summaries: the exact coordinates, for any rule).

    ``st.cache_resource``: one shared read-only copy, not a pickled copy per session and per rerun.
    Of a large run, kept between sessions (:func:`kept`): about 20 bytes per item, read back instead
    of streaming the split again.
    """
    if reads_in_batches(path, token, run_id, question, split):
        from_query = None if recalibrate else grid_points(path, token, run_id, question)
        if from_query is not None and split in from_query:
            g = from_query[split]
            points = RulePoints(g.qtype, g.option_ids, g.coords, g.labels)
        else:
            points = kept(
                path,
                token,
                run_id,
                question,
                ("rule_points", split, recalibrate),
                lambda: _rule_points(path, token, run_id, question, split, recalibrate),
            )
    else:
        points = _rule_points(path, token, run_id, question, split, recalibrate)
    for a in (points.coords.predicted, points.coords.x, points.coords.y, points.labels):
        a.setflags(write=False)
    return points


def _rule_points(
    path: str, token: tuple, run_id: str, question: str, split: str, recalibrate: str | None
) -> RulePoints:
    """Each labelled item's rule coordinates, read in batches (:func:`labelled_items`) for every size of run."""
    from workbench.thresholds.rules import RuleCoordinates

    items = labelled_items(path, token, run_id, question, split, recalibrate)
    c = items.coords
    small = np.int16 if len(items.option_ids) < 2**15 else np.int32
    coords = RuleCoordinates(c.predicted.astype(small), c.x, c.y, c.x_name, c.y_name)
    return RulePoints(items.qtype, tuple(items.option_ids), coords, items.labels.astype(small))


#: Points per axis of the threshold grid the sliders move over: the CLI's default ``--grid``
#: (:class:`workbench.thresholds.options.ThresholdOptions`), so a certified (τ, m) is a slider position.
GRID_POINTS: int = int(ThresholdOptions().grid)


@st.cache_data(show_spinner=False, max_entries=32)
def threshold_surface(
    path: str,
    token: tuple,
    run_id: str,
    question: str,
    split: str = "calibration",
    recalibrate: str | None = None,
    error_cost: float | None = None,
):
    """Risk–coverage surface of one split (``workbench.thresholds.surface``), cached per run.

    With ``error_cost`` the surface also carries the wrong-accept cost per grid point (for the
    cost objective). Per-item coordinates are dropped so the cached value stays small. Of a large
    run, kept between sessions (:func:`kept`).
    """
    if reads_in_batches(path, token, run_id, question, split):
        return kept(
            path,
            token,
            run_id,
            question,
            ("threshold_surface", split, recalibrate, error_cost, GRID_POINTS),
            lambda: _threshold_surface(path, token, run_id, question, split, recalibrate, error_cost),
        )
    return _threshold_surface(path, token, run_id, question, split, recalibrate, error_cost)


def _threshold_surface(
    path: str, token: tuple, run_id: str, question: str, split: str, recalibrate: str | None, error_cost: float | None
):
    from workbench.thresholds.guarantees import error_cost_weights
    from workbench.thresholds.surface import risk_coverage_surface

    points = rule_points(path, token, run_id, question, split, recalibrate)
    labels = np.asarray(points.labels, dtype=np.int64)
    coords = points.coords
    weights = None
    if error_cost is not None:
        predicted = np.asarray(coords.predicted, dtype=np.int64)
        weights = error_cost_weights(labels, predicted, len(points.option_ids), error_cost)
    surf = risk_coverage_surface(
        points.qtype,
        None,
        labels,
        coordinates=replace(coords, predicted=np.asarray(coords.predicted, dtype=np.int64)),
        n_options=len(points.option_ids),
        grid=GRID_POINTS,
        weights=weights,
    )
    surf.extra.pop("coordinates", None)
    return surf


def threshold_defaults():
    """The one set of threshold defaults (:class:`workbench.thresholds.options.ThresholdOptions`):
    every page starts its α, δ, method and recalibration widgets here, never from literals."""
    return ThresholdOptions()


def settings_caption(alpha: float, delta: float, calibrate: str | None, method: str | None = None) -> str:
    """One line stating the options behind a threshold figure (α, δ, recalibration[, method])."""
    d = threshold_defaults()
    cal = calibrate or "none"
    parts = [f"α = {alpha:g}", f"δ = {delta:g}", f"recalibration {cal}"] + ([f"{method}"] if method else [])
    same = alpha == d.alpha and delta == d.delta and cal == d.calibrate and (method in (None, d.method))
    return (
        "Threshold options: "
        + ", ".join(parts)
        + (" (the defaults)" if same else f" (defaults: α = {d.alpha:g}, δ = {d.delta:g}, recalibration {d.calibrate})")
    )


@st.cache_data(show_spinner=False, max_entries=32)
def certified_region(
    path: str,
    token: tuple,
    run_id: str,
    question: str,
    recalibrate: str | None,
    alpha: float,
    delta: float,
    method: str,
) -> np.ndarray:
    """(A, B) bool mask of the exploration surface's grid points certified at (α, δ):
    :func:`workbench.workflows.figures.certified_region` (the region ``workbench thresholds --html`` draws)."""
    from workbench.workflows.figures import certified_region as _region

    def region() -> np.ndarray:
        surf = threshold_surface(path, token, run_id, question, "calibration", recalibrate)
        d = threshold_defaults()
        return _region(surf, alpha=alpha, delta=delta, method=method, n_paths=d.n_paths, n_starts=d.n_starts)

    if reads_in_batches(path, token, run_id, question, "calibration"):
        description = ("certified_region", recalibrate, alpha, delta, method, GRID_POINTS)
        return kept(path, token, run_id, question, description, region)
    return region()


def threshold_settings(**settings) -> tuple:
    """Hashable cache key of threshold settings: sorted ``(name, value)`` pairs whose names are
    :class:`ThresholdOptions` fields (``alpha``, ``delta``, ``method``, ``calibrate``, ``per_class`` …),
    turned into options by ``ThresholdOptions(**dict(settings))``."""
    return tuple(sorted(settings.items()))


#: ThresholdOptions fields the UI has no control for, with the reason (every other field has one:
#: tests/test_options_declared_once.py checks the pages against the dataclass).
THRESHOLD_FIELDS_NOT_IN_UI: dict[str, str] = {
    "grid": "the sliders move on the certified grid, so the UI keeps its 100 points (GRID_POINTS)",
    **{
        f: "advanced Learn-then-Test tuning: kept at the defaults every surface shares (the CLI and API set it)"
        for f in ("n_paths", "n_starts", "calibrator_fraction", "order_fraction", "seed", "confidence")
    },
    "abstain_options": "per-option routing is edited in the policy file (policy enable/disable), not on the page",
    "level": "score questions are certified at their top level; the expected level is a CLI/API choice",
    "fallback": "the policy's fallback is edited in the policy file; the page shows review",
    "batch": "the finite-batch view is printed by workbench thresholds; the page shows calibration and test",
    "costs": "a misroute cost matrix is a file (workbench thresholds --costs): no page control yet",
    "constraints": "critical options (workbench thresholds --critical): no page control yet",
    **{
        f: "class-conditional rules come with critical options (--class-conditional): no page control yet"
        for f in ("class_conditional", "confusable")
    },
}


@st.cache_data(show_spinner="Certifying thresholds…", max_entries=64)
def certified_thresholds(path: str, token: tuple, run_id: str, question: str, settings: tuple) -> dict:
    """``choose_thresholds(...).to_dict()`` — exactly what ``workbench thresholds ... --json`` reports
    for the question (same option builder, same calibration/test loads, same library call).

    ``settings`` comes from :func:`threshold_settings`. Only the small result dict is cached (not
    the surface), so a cache hit on every slider move stays cheap.
    """
    from workbench.workflows.thresholds import thresholds_for_run

    def certify() -> dict:
        with read_connection(path) as con:
            return thresholds_for_run(con, run_id, question, ThresholdOptions(**dict(settings))).to_dict()

    def from_points() -> dict:
        from workbench.engines.store_aggregates import certified_from_points

        opts = ThresholdOptions(**dict(settings))
        pts = grid_points(path, token, run_id, question) if opts.grid == GRID_POINTS else None
        res = None
        if pts is not None and "calibration" in pts and len(pts["calibration"].labels):
            # the page's own calibration surface (drawn from the same points): reused when it fits the options
            drawn = threshold_surface(path, token, run_id, question, "calibration")
            res = certified_from_points(question, pts["calibration"], pts.get("test"), opts, surface=drawn)
        return res.to_dict() if res is not None else certify()

    if reads_in_batches(path, token, run_id, question, "calibration"):  # kept between sessions
        return kept(path, token, run_id, question, ("certified_thresholds", settings), from_points)
    return certify()


@st.cache_data(show_spinner="Certifying the frontier…", max_entries=32)
def certified_frontier(
    path: str, token: tuple, run_id: str, question: str, settings: tuple, alphas: tuple[float, ...]
) -> pd.DataFrame:
    """Certified calibration coverage for each α (others as ``settings``), from
    :func:`workbench.workflows.thresholds.frontier_for_run`: each point is the selection
    ``choose_thresholds`` makes at that α (0 where nothing is certified). Of a large run, kept between
    sessions (:func:`kept`; :func:`kept_frontier` looks it up without computing)."""
    from workbench.workflows.thresholds import frontier_for_run

    def frontier() -> pd.DataFrame:
        opts = ThresholdOptions(**dict(settings))
        with read_connection(path) as con:
            sels = frontier_for_run(con, run_id, question, opts, [float(a) for a in alphas])
        coverage = [s.calibration["coverage"] if s.feasible else 0.0 for s in sels]
        return pd.DataFrame({"alpha": list(alphas), "certified coverage": coverage})

    if reads_in_batches(path, token, run_id, question, "calibration"):
        return kept(path, token, run_id, question, ("certified_frontier", settings, alphas), frontier)
    return frontier()


def frontier(
    path: str,
    token: tuple,
    run_id: str,
    question: str,
    settings: tuple,
    alphas: tuple[float, ...],
    *,
    compute: bool,
) -> pd.DataFrame | None:
    """:func:`certified_frontier`; of a run the library reads in batches (one more pass over it), only when
    ``compute`` or when a session already kept it, else None (the page offers it on request)."""
    if not compute and reads_in_batches(path, token, run_id, question, "calibration"):
        return kept_frontier(path, token, run_id, question, settings, alphas)
    return certified_frontier(path, token, run_id, question, settings, alphas)


def opening_probabilities(path: str, token: tuple, run_id: str, question: str, default: str) -> tuple[str, str | None]:
    """(the probabilities the Thresholds page opens on, a note on reading them or None): ``default`` (the
    options' ``calibrate``), except for a run the library reads in batches, which opens on its answers as given
    (their surface, certificate and test figures come from one query over the store; a recalibration streams it)."""
    if not reads_in_batches(path, token, run_id, question, "calibration"):
        return default, None
    return "as answered", (
        "A large run: its answers as given are read by one query over the store (each item's cell on the "
        "threshold grid); choose a recalibration above to stream the run for it."
    )


def kept_frontier(
    path: str, token: tuple, run_id: str, question: str, settings: tuple, alphas: tuple[float, ...]
) -> pd.DataFrame | None:
    """The :func:`certified_frontier` of a large run if a session already computed it, else None."""
    return kept(path, token, run_id, question, ("certified_frontier", settings, alphas))


@st.cache_data(show_spinner="Simulating calibration splits…", max_entries=16)
def label_plan(
    path: str,
    token: tuple,
    run_id: str,
    question: str,
    settings: tuple,
    pilot_size: int | None,
    target_coverage: float | None,
    power: float,
) -> dict:
    """``workbench plan-labels`` for the question: :func:`workbench.workflows.plan_labels_for_run` with
    the options of ``settings`` and the page's ``pilot_size``, ``target_coverage`` (None: all, none) and
    ``power``; the plan's ``to_dict()`` plus its figure (``"figure"``)."""
    from workbench.workflows.figures import label_plan_figure
    from workbench.workflows.thresholds import plan_labels_for_run

    with read_connection(path) as con:
        plan = plan_labels_for_run(
            con,
            run_id,
            question,
            ThresholdOptions(**dict(settings)),
            pilot_size=pilot_size,
            target_coverage=target_coverage,
            power=power,
        )
    return {**plan.to_dict(), "figure": label_plan_figure(plan)}


@st.cache_data(show_spinner="Judging the rule per slice…", max_entries=32)
def certified_threshold_slices(
    path: str, token: tuple, run_id: str, question: str, settings: tuple, column: str
) -> dict:
    """``workbench thresholds --slice COLUMN --json``'s slice section for the question: test coverage and
    error of the certified rule per slice, with intervals and warnings."""
    from workbench.workflows.thresholds import threshold_slices_for_run, thresholds_for_run

    opts = ThresholdOptions(**dict(settings))
    with read_connection(path) as con:
        res = thresholds_for_run(con, run_id, question, opts)
        return threshold_slices_for_run(con, run_id, res, column)
