"""The risk–coverage surface of a rule family over a 2-D threshold grid, in one pass.

Every rule reduces to "accept when ``x >= x_grid[i]`` and ``y >= y_grid[j]``" on two per-item
coordinates (:func:`workbench.thresholds.rules.rule_coordinates`). Each item therefore falls in one
cell ``(i*, j*)`` = (largest ``i`` with ``x_grid[i] <= x``, largest ``j`` with ``y_grid[j] <= y``),
and is accepted at grid point ``(i, j)`` exactly when ``i <= i*`` and ``j <= j*``. Counting items per
cell with one ``np.bincount`` and taking a reverse cumulative sum along both axes gives the number of
accepted items, of wrong accepted items and of any weighted sum (costs) at **every** grid point:
``O(n log G + G)`` instead of ``O(n · G)`` for a scan per grid point. A class axis in the bin index
gives the same figures per predicted class.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from workbench.thresholds.rules import RuleCoordinates, rule_coordinates


@dataclass
class Surface:
    """Counts at every grid point ``(i, j)``: accept when ``x >= x_grid[i]`` and ``y >= y_grid[j]``.

    Attributes
    ----------
    x_grid : ndarray of shape (A,), ascending
    y_grid : ndarray of shape (B,), ascending
    accepted : ndarray of shape (A, B), int64
        Number of auto-accepted items.
    errors : ndarray of shape (A, B), int64
        Number of auto-accepted items whose accepted option is not the label.
    n_total : int
        Items the coverage is relative to (answered + failed; failures are never accepted).
    class_accepted, class_errors : ndarray of shape (K, A, B) or None
        The same counts split by the accepted (predicted) option.
    weighted : ndarray of shape (A, B) or None
        Sum of per-item weights over accepted items (e.g. the cost of a wrong accept).
    loss, class_loss : ndarray of shape (A, B) and (K, A, B), or None
        Sum of per-item bounded losses in [0, 1] over accepted items (the misroute cost divided by
        ``loss_scale``, the largest cost), overall and by accepted option; ``None`` = 0/1 errors.
    loss_scale : float
        What a loss of 1 costs (the largest entry of the cost matrix); 1 without costs.
    critical, critical_misroutes, critical_n : tuple, ndarray (m, A, B), ndarray (m,)
        Critical options (indices), the number of items of each true critical option that are
        auto-accepted as another option at every grid point, and how many items of it there are
        (accepted or not, failures included).
    x_name, y_name : str
        Rule parameters the axes map to.
    """

    x_grid: np.ndarray
    y_grid: np.ndarray
    accepted: np.ndarray
    errors: np.ndarray
    n_total: int
    class_accepted: np.ndarray | None = None
    class_errors: np.ndarray | None = None
    weighted: np.ndarray | None = None
    x_name: str = "tau"
    y_name: str = "margin"
    extra: dict = field(default_factory=dict)
    loss: np.ndarray | None = None
    class_loss: np.ndarray | None = None
    loss_scale: float = 1.0
    critical: tuple[int, ...] = ()
    critical_misroutes: np.ndarray | None = None
    critical_n: np.ndarray | None = None

    @property
    def coverage(self) -> np.ndarray:
        """Auto-accept rate over ``n_total``, shape (A, B)."""
        return self.accepted / max(self.n_total, 1)

    @property
    def review_rate(self) -> np.ndarray:
        """Share of items routed to the fallback (failures included), shape (A, B)."""
        return 1.0 - self.coverage

    @property
    def error_rate(self) -> np.ndarray:
        """Error among accepted items, NaN where nothing is accepted, shape (A, B)."""
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(self.accepted > 0, self.errors / np.maximum(self.accepted, 1), np.nan)

    def counts(self, cls: int | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """``(accepted, errors, loss)`` at every grid point, or (``cls``) those of the items accepted as
        that option; ``loss`` is ``None`` for 0/1 errors."""
        if cls is None:
            return self.accepted, self.errors, self.loss
        assert self.class_accepted is not None and self.class_errors is not None
        loss = None if self.class_loss is None else self.class_loss[cls]
        return self.class_accepted[cls], self.class_errors[cls], loss

    def params(self, i: int, j: int) -> dict[str, float]:
        """Rule parameters of grid point ``(i, j)``."""
        if self.y_name == "tau_no":
            return {"tau_yes": float(self.x_grid[i]), "tau_no": float(-self.y_grid[j])}
        return {self.x_name: float(self.x_grid[i]), self.y_name: float(self.y_grid[j])}

    def point(self, i: int, j: int) -> dict:
        """Figures of one grid point as a JSON-ready dict."""
        acc = int(self.accepted[i, j])
        return {
            **self.params(i, j),
            "accepted": acc,
            "errors": int(self.errors[i, j]),
            "coverage": acc / max(self.n_total, 1),
            "error_rate": (int(self.errors[i, j]) / acc) if acc else None,
            "review_rate": 1.0 - acc / max(self.n_total, 1),
        }

    def to_table(self) -> dict[str, np.ndarray]:
        """Flat per-grid-point table (the per-λ table the guarantee layer and the UI share)."""
        ii, jj = np.meshgrid(np.arange(len(self.x_grid)), np.arange(len(self.y_grid)), indexing="ij")
        return {
            self.x_name: self.x_grid[ii].ravel(),
            self.y_name: (-self.y_grid[jj] if self.y_name == "tau_no" else self.y_grid[jj]).ravel(),
            "accepted": self.accepted.ravel(),
            "errors": self.errors.ravel(),
            "coverage": self.coverage.ravel(),
            "error_rate": self.error_rate.ravel(),
        }


def reverse_cumsum_2d(counts: np.ndarray) -> np.ndarray:
    """``out[..., i, j] = counts[..., i:, j:].sum()`` over the last two axes."""
    out = np.flip(counts, axis=(-2, -1))
    out = np.cumsum(np.cumsum(out, axis=-2), axis=-1)
    return np.flip(out, axis=(-2, -1))


#: Cells of the lookup table :func:`bin_index` guesses from (over the grid's range).
_GUESS_CELLS = 1 << 16
#: Below this many values :func:`bin_index` calls ``np.searchsorted`` directly.
_SEARCH_MAX = 50_000


def bin_index(values: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """Largest ``i`` with ``grid[i] <= value``; -1 when below ``grid[0]`` (or NaN / -inf).

    ``np.searchsorted(grid, value, "right") - 1``, exactly, in a few passes instead of a binary search
    per value (which costs ~0.2 µs a value in random order: seconds at millions of items): a guess
    from a table over the grid's range (:data:`_GUESS_CELLS` equal cells), then moved up or down one
    grid point at a time while ``grid[i] <= value < grid[i + 1]`` does not hold. Each move goes
    towards the answer, so the loop ends there, after as many passes as a table cell holds grid
    points (one or two on the default grids).
    """
    v = np.asarray(values, dtype=float)
    g = np.asarray(grid, dtype=float)
    n = len(g)
    nan = np.isnan(v)
    if v.size < _SEARCH_MAX or n < 2 or not np.isfinite(g[[0, -1]]).all() or not g[-1] > g[0]:
        return np.searchsorted(g, np.where(nan, -np.inf, v), side="right") - 1
    scale = _GUESS_CELLS / (g[-1] - g[0])
    # per table cell: the guess (the grid cell of the table cell's left end) and the grid points either side;
    # one more cell for values at or past the last grid point (often many: over-confident answers)
    guess = np.searchsorted(g, g[0] + np.arange(_GUESS_CELLS + 1) / scale, side="right") - 1
    ext = np.concatenate([[-np.inf], g, [np.nan]])  # ext[c + 1] = grid[c], -inf for c = -1; NaN past the end
    below, above = ext[guess + 1], ext[guess + 2]
    t = (np.where(nan, g[0], v) if nan.any() else v) - g[0]
    t *= scale
    np.clip(t, 0, _GUESS_CELLS, out=t)
    k = t.astype(np.intp)
    del t
    # one step up (value at or past the next grid point) or down (value below the guess's grid point);
    # NaN compares false both ways (and is set to -1 below)
    step = (v >= above[k]).view(np.int8) - (v < below[k]).view(np.int8)
    cell = guess[k]
    cell += step
    cell[nan] = -1
    rows = np.flatnonzero(step)
    while len(rows):  # the few that moved may have to move again
        c, x = cell[rows], v[rows]
        again = (x >= ext[c + 2]).view(np.int8) - (x < ext[c + 1]).view(np.int8)
        cell[rows] += again
        rows = rows[again != 0]
    return cell.reshape(v.shape)


def surface_from_coordinates(
    x: np.ndarray,
    y: np.ndarray,
    correct: np.ndarray,
    *,
    x_grid: np.ndarray,
    y_grid: np.ndarray,
    predicted: np.ndarray | None = None,
    n_classes: int | None = None,
    weights: np.ndarray | None = None,
    n_total: int | None = None,
    x_name: str = "tau",
    y_name: str = "margin",
    loss: np.ndarray | None = None,
    loss_scale: float = 1.0,
    labels: np.ndarray | None = None,
    critical: Sequence[int] = (),
) -> Surface:
    """Counts of accepted and wrong accepted items at every grid point.

    Parameters
    ----------
    x, y : ndarray of shape (n_items,)
        Acceptance coordinates (``-inf``/NaN = never accepted, ``+inf`` = always passes that axis).
    correct : ndarray of shape (n_items,), bool
        Whether the option the rule would accept is the label.
    x_grid, y_grid : ndarray of shape (A,) and (B,)
        Non-decreasing thresholds.
    predicted : ndarray of shape (n_items,), int, optional
        Option the rule would accept; with ``n_classes`` adds per-class counts.
    weights : ndarray of shape (n_items,), optional
        Summed over accepted items into ``Surface.weighted``.
    n_total : int, optional
        Denominator of coverage (default ``n_items``).
    loss : ndarray of shape (n_items,) in [0, 1], optional
        Bounded loss of accepting each item (misroute cost / ``loss_scale``); summed over accepted
        items into ``Surface.loss`` (and ``class_loss`` by accepted option, with ``predicted``).
    labels : ndarray of shape (n_items,), int, optional
        True options; with ``critical`` counts, per critical option, its items accepted as another
        option (``Surface.critical_misroutes``) and its items in all (``Surface.critical_n``).

    Returns
    -------
    surface : Surface
    """
    x_grid = np.asarray(x_grid, dtype=float)
    y_grid = np.asarray(y_grid, dtype=float)
    if np.any(np.diff(x_grid) < 0) or np.any(np.diff(y_grid) < 0):
        raise ValueError("x_grid and y_grid must be non-decreasing")
    A, B = len(x_grid), len(y_grid)
    ix = bin_index(np.asarray(x, dtype=float), x_grid)
    iy = bin_index(np.asarray(y, dtype=float), y_grid)
    keep = (ix >= 0) & (iy >= 0)
    cell = ix[keep] * B + iy[keep]
    wrong = ~np.asarray(correct, dtype=bool)[keep]
    size = A * B
    acc = reverse_cumsum_2d(np.bincount(cell, minlength=size).reshape(A, B))
    err = reverse_cumsum_2d(np.bincount(cell[wrong], minlength=size).reshape(A, B))
    cls_acc = cls_err = cls_cell = None
    if predicted is not None and n_classes:
        cls_cell = np.asarray(predicted)[keep].astype(np.int64) * size + cell
        cls_acc = reverse_cumsum_2d(np.bincount(cls_cell, minlength=n_classes * size).reshape(n_classes, A, B))
        cls_err = reverse_cumsum_2d(np.bincount(cls_cell[wrong], minlength=n_classes * size).reshape(n_classes, A, B))
    wsum = None
    if weights is not None:
        w = np.asarray(weights, dtype=float)[keep]
        wsum = reverse_cumsum_2d(np.bincount(cell, weights=w, minlength=size).reshape(A, B))
    surf = Surface(
        x_grid, y_grid, acc, err, int(len(x) if n_total is None else n_total), cls_acc, cls_err, wsum, x_name, y_name
    )
    surf.loss_scale = float(loss_scale)
    if loss is not None:
        lw = np.asarray(loss, dtype=float)[keep]
        surf.loss = reverse_cumsum_2d(np.bincount(cell, weights=lw, minlength=size).reshape(A, B))
        if cls_cell is not None and n_classes:
            surf.class_loss = reverse_cumsum_2d(
                np.bincount(cls_cell, weights=lw, minlength=n_classes * size).reshape(n_classes, A, B)
            )
    if critical:
        if labels is None:
            raise ValueError("critical options need labels")
        lab = np.asarray(labels).astype(np.int64)
        crit = np.asarray(critical, dtype=np.int64)
        slot = np.full(max(int(lab.max(initial=0)), int(crit.max())) + 1, -1, dtype=np.int64)
        slot[crit] = np.arange(len(crit))
        s_all = np.where(lab >= 0, slot[np.maximum(lab, 0)], -1)
        surf.critical = tuple(int(c) for c in crit)
        surf.critical_n = np.bincount(s_all[s_all >= 0], minlength=len(crit))
        s_acc = s_all[keep]
        hit = (s_acc >= 0) & wrong
        surf.critical_misroutes = reverse_cumsum_2d(
            np.bincount(s_acc[hit] * size + cell[hit], minlength=len(crit) * size).reshape(len(crit), A, B)
        )
    return surf


def surface_from_cell_counts(
    cell_accepted: np.ndarray,
    cell_errors: np.ndarray,
    *,
    x_grid: np.ndarray,
    y_grid: np.ndarray,
    n_total: int,
    x_name: str = "tau",
    y_name: str = "margin",
) -> Surface:
    """The surface from per-cell counts computed elsewhere (e.g. a GROUP BY in DuckDB or Spark).

    ``cell_accepted[i, j]`` / ``cell_errors[i, j]`` count the items (and the wrong ones) whose cell is
    ``(i, j)`` (see the module doc); the reverse cumulative sums are those of
    :func:`surface_from_coordinates`, so the same items give the same surface.
    """
    x_grid = np.asarray(x_grid, dtype=float)
    y_grid = np.asarray(y_grid, dtype=float)
    shape = (len(x_grid), len(y_grid))
    acc = np.asarray(cell_accepted, dtype=np.int64).reshape(shape)
    err = np.asarray(cell_errors, dtype=np.int64).reshape(shape)
    return Surface(
        x_grid, y_grid, reverse_cumsum_2d(acc), reverse_cumsum_2d(err), int(n_total), x_name=x_name, y_name=y_name
    )


def _mixed_axis(lo: float, hi: float, n: int, decades: float = 3.0) -> np.ndarray:
    """``n`` thresholds from ``lo`` to just below ``hi``: linear up to 90% of the range, then
    geometrically closer to ``hi`` (down to ``10**-decades`` of the range from it).

    Over-confident models put most answers above 0.99, where a linear grid has one or two points;
    the geometric tail keeps the grid useful there. The grid never depends on the data.
    """
    n_tail = n // 2
    span = hi - lo
    head = np.linspace(lo, lo + 0.9 * span, n - n_tail, endpoint=False)
    tail = hi - 0.1 * span * 10.0 ** (-decades * np.linspace(0.0, 1.0, n_tail))
    # rounded so policy files read 0.36 rather than 0.36000000000000004 (still strictly ascending)
    return np.round(np.concatenate([head, tail]), 12)


def default_grids(qtype: str, n: int = 100) -> tuple[np.ndarray, np.ndarray]:
    """Threshold grids in rule-coordinate units (``n`` points per axis, ascending).

    choice/score: ``tau`` and ``margin`` over [0, 1). noul: ``tau_yes`` over [0.5, 1) and ``tau_no``
    over (0, 0.5] (stored as ``-tau_no``, ascending). Each axis is linear for the first 90% of the
    range and geometric towards the strict end (see :func:`_mixed_axis`).
    """
    if n < 2:
        raise ValueError("grid needs at least 2 points per axis")
    if qtype == "noul":
        yes = _mixed_axis(0.5, 1.0, n)
        return yes, np.sort(-(1.0 - yes))  # tau_no mirrors tau_yes: 1 - tau_yes
    g = _mixed_axis(0.0, 1.0, n)
    return g, g.copy()


def risk_coverage_surface(
    qtype: str,
    probs: np.ndarray | None,
    labels: np.ndarray,
    *,
    coordinates: RuleCoordinates | None = None,
    n_options: int | None = None,
    grid: int = 100,
    x_grid: np.ndarray | None = None,
    y_grid: np.ndarray | None = None,
    abstain_options=(),
    level: str = "top",
    per_class: bool = True,
    weights: np.ndarray | None = None,
    cost_matrix: np.ndarray | None = None,
    critical: Sequence[int] = (),
) -> Surface:
    """Risk–coverage surface of one question from probabilities and labels.

    Parameters
    ----------
    qtype : {"choice", "noul", "score"}
    probs : ndarray of shape (n_items, n_options)
        (Calibrated) probabilities; NaN rows are provider failures and are never accepted.
    labels : ndarray of shape (n_items,), int
        Gold option index (items with -1 must be removed beforehand).
    grid : int, default=100
        Points per axis when ``x_grid``/``y_grid`` are not given.
    cost_matrix : ndarray of shape (n_options, n_options), optional
        Misroute costs ``[true, accepted]`` (0 on the diagonal): the surface then also sums the
        bounded loss ``cost / max cost`` of accepted items (``Surface.loss``, ``loss_scale``).
    critical : sequence of int
        Critical options whose misroutes (accepted as another option) are counted per grid point.
    coordinates, n_options : RuleCoordinates and int, optional
        The rule coordinates of the rows (:func:`rule_coordinates`) and the number of options,
        instead of ``probs`` (``None``): a caller that streams a run computes them batch by batch.

    Returns
    -------
    surface : Surface
        With ``extra["coordinates"]`` holding the :class:`RuleCoordinates` used, ``extra["correct"]``,
        and, with ``cost_matrix`` or ``critical``, ``extra["loss"]`` and ``extra["labels"]``.
    """
    labels = np.asarray(labels).astype(int)
    if coordinates is None:
        probs = np.atleast_2d(np.asarray(probs, dtype=float))
        n_options = probs.shape[1]
        coords: RuleCoordinates = rule_coordinates(qtype, probs, abstain_options=abstain_options, level=level)
    else:
        coords = coordinates
    assert n_options is not None  # given with ``coordinates``
    if coords.x.shape[0] != labels.shape[0]:
        raise ValueError(f"{coords.x.shape[0]} probability rows but {labels.shape[0]} labels")
    gx, gy = default_grids(qtype, grid)
    gx = gx if x_grid is None else np.asarray(x_grid, dtype=float)
    gy = gy if y_grid is None else np.asarray(y_grid, dtype=float)
    correct = coords.predicted == labels
    loss, scale = None, 1.0
    if cost_matrix is not None:
        cm = np.asarray(cost_matrix, dtype=float)
        scale = float(cm.max())
        off = cm[~np.eye(cm.shape[0], dtype=bool)]
        if not np.all(off == scale):  # otherwise every misroute costs the same: a 0/1 loss, scaled by ``scale``
            loss = np.where(
                correct, 0.0, cm[np.clip(labels, 0, cm.shape[0] - 1), np.maximum(coords.predicted, 0)] / scale
            )
    surf = surface_from_rules(
        coords, correct, n_classes=n_options if per_class else None, x_grid=gx, y_grid=gy, weights=weights,
        n_total=labels.shape[0], loss=loss, loss_scale=scale, labels=labels, critical=critical,
    )  # fmt: skip
    surf.extra["coordinates"] = coords
    surf.extra["correct"] = correct
    if loss is not None or critical:
        surf.extra["loss"] = loss
        surf.extra["labels"] = labels
    return surf


def surface_from_rules(
    coords: RuleCoordinates, correct: np.ndarray, rows: np.ndarray | None = None, *, n_classes: int | None, **options
) -> Surface:
    """:func:`surface_from_coordinates` of the items ``rows`` (a mask; None: every item) of ``coords`` (their
    axes and the axes' names) and ``correct``; with ``n_classes``, per-class counts by the option the rule would
    accept (a failed row's -1 counts as option 0). ``options``: the other keywords of
    :func:`surface_from_coordinates` (grids, weights, loss, labels, critical), already of ``rows`` only."""
    at = slice(None) if rows is None else rows
    predicted = None if n_classes is None else np.maximum(coords.predicted[at], 0)
    return surface_from_coordinates(
        coords.x[at], coords.y[at], correct[at], predicted=predicted, n_classes=n_classes,
        x_name=coords.x_name, y_name=coords.y_name, **options,
    )  # fmt: skip


def naive_surface(
    x: np.ndarray,
    y: np.ndarray,
    correct: np.ndarray,
    x_grid: np.ndarray,
    y_grid: np.ndarray,
    points: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Reference scan: one boolean mask per grid point (``O(n · G)``); for tests and the benchmark.

    ``points`` (shape (P, 2) of grid indices) restricts the scan to a subset; the returned arrays
    then have shape (P,), otherwise (A, B).
    """
    wrong = ~np.asarray(correct, dtype=bool)
    if points is None:
        points = np.argwhere(np.ones((len(x_grid), len(y_grid)), dtype=bool))
        shape: tuple[int, ...] = (len(x_grid), len(y_grid))
    else:
        shape = (len(points),)
    acc = np.empty(len(points), dtype=np.int64)
    err = np.empty(len(points), dtype=np.int64)
    for p, (i, j) in enumerate(points):
        mask = (x >= x_grid[i]) & (y >= y_grid[j])
        acc[p] = mask.sum()
        err[p] = (mask & wrong).sum()
    return acc.reshape(shape), err.reshape(shape)
