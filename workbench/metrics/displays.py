"""Plotly figures shared by the CLI, notebooks and the Streamlit UI (scikit-learn ``Display`` style).

Each display is built by a ``from_*`` class method, keeps the computed data (``curves``,
``result``) and the figure in ``figure_``; ``plot()`` redraws and returns the figure. Nothing is
shown (call ``st.plotly_chart(d.figure_)``, ``d.figure_.show()`` or ``d.figure_.write_html(path)``).

* :class:`ReliabilityDisplay` — reliability diagram with Wilson bars and a count histogram;
* :class:`ConfusionDisplay` — confusion matrix with the review column;
* :class:`RiskCoverageDisplay` — error among accepted vs coverage, one curve per run;
* :class:`ThresholdSurfaceDisplay` — error (or coverage) over the τ × margin grid, with the chosen
  point and the certified region.

The displays take arrays or duck-typed objects (a threshold ``Surface``), never import the
threshold layer: they sit in ``metrics/`` below it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from workbench.metrics import reliability as rel
from workbench.metrics.confusion import ConfusionResult, confusion_result

_COLOURS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf"]


def _binary_problem(
    probs: np.ndarray, labels: np.ndarray, kind: str, option: int | None
) -> tuple[np.ndarray, np.ndarray, str]:
    probs = np.asarray(probs, dtype=float)
    labels = np.asarray(labels)
    keep = np.isfinite(probs).all(axis=1) & (labels >= 0)
    probs, labels = probs[keep], labels[keep]
    if kind == "top-label":
        conf, correct = rel.top_label(probs, labels)
        return correct, conf, "top-label confidence"
    if kind == "option":  # one-vs-rest column (P(yes) for noul is option 0)
        j = int(option or 0)
        return (labels == j).astype(float), probs[:, j], f"P(option {j})"
    raise ValueError(f"kind must be 'top-label' or 'option', got {kind!r}")


def _named_curve(name: str, y: np.ndarray, s: np.ndarray, n_bins: int, strategy: str, smooth: bool) -> tuple:
    """One entry of :attr:`ReliabilityDisplay.curves`: (name, binned curve, smooth curve or None)."""
    curve = rel.reliability_curve(y, s, n_bins, strategy, label=name)
    return name, curve, rel.smooth_reliability_curve(y, s, label=name) if smooth and len(y) else None


@dataclass
class ReliabilityDisplay:
    """Reliability diagram: binned curve with 95% Wilson bars, optional smooth curve, count histogram.

    ``curves`` is a list of (name, ReliabilityCurve, SmoothReliabilityCurve | None); several curves
    (e.g. before/after calibration) share one figure.
    """

    curves: list = field(default_factory=list)
    title: str = "Reliability"
    x_title: str = "predicted probability"
    figure_: Any = None

    @classmethod
    def from_predictions(
        cls,
        labels: np.ndarray,
        probs: np.ndarray,
        *,
        n_bins: int = 15,
        strategy: str = "uniform",
        kind: str = "top-label",
        option: int | None = None,
        smooth: bool = True,
        name: str = "model",
        title: str | None = None,
    ) -> ReliabilityDisplay:
        """``labels`` (n,) option indices (−1 unlabelled), ``probs`` (n, k) (NaN rows = failures, skipped)."""
        y, s, x_title = _binary_problem(probs, labels, kind, option)
        return cls.from_scores(
            y, s, n_bins=n_bins, strategy=strategy, smooth=smooth, name=name, title=title, x_title=x_title
        )

    @classmethod
    def from_scores(
        cls,
        y_true: np.ndarray,
        y_score: np.ndarray,
        *,
        n_bins: int = 15,
        strategy: str = "uniform",
        smooth: bool = True,
        name: str = "model",
        title: str | None = None,
        x_title: str = "top-label confidence",
    ) -> ReliabilityDisplay:
        """From a binary problem: ``y_true`` (n,) 0/1 (e.g. top option correct) and ``y_score`` (n,)
        in [0, 1] (e.g. its probability) — what a streamed run keeps per item instead of the matrix."""
        y, s = np.asarray(y_true, dtype=float), np.asarray(y_score, dtype=float)
        curve = _named_curve(name, y, s, n_bins, strategy, smooth)
        d = cls([curve], title or f"Reliability ({x_title}, {strategy} bins)", x_title)
        d.plot()
        return d

    @classmethod
    def from_answers(
        cls,
        answers: Sequence[tuple[str, Any]],
        question: str,
        *,
        split: str | None = "test",
        n_bins: int = 15,
        strategy: str = "uniform",
        kind: str | None = None,
        option: int | None = None,
        smooth: bool = True,
    ) -> ReliabilityDisplay:
        """Diagram of named :class:`~workbench.answers.RunAnswers` of one question, one curve each
        (yes/no questions default to P(yes); the last entry decides the default ``kind``)."""
        ans = answers[-1][1]
        kind = kind or ("option" if ans.qtype == "noul" else "top-label")
        runs = list(answers)
        curves = []
        x_title = ""
        for name, a in runs:
            y, s, x_title = _binary_problem(a.probs, a.labels, kind, option)
            curves.append(_named_curve(name, y, s, n_bins, strategy, smooth))
        label = "P(yes)" if (ans.qtype == "noul" and kind == "option" and not option) else x_title
        d = cls(curves, f"{question}: reliability of {label} on {split or 'all'} ({strategy} bins)", label)
        d.plot()
        return d

    def plot(self):
        """Draw (or redraw) the figure; returns the plotly ``Figure`` (also kept in ``figure_``)."""
        import plotly.graph_objects as go
        from plotly.subplots import make_subplots

        fig = make_subplots(rows=2, cols=1, shared_xaxes=True, row_heights=[0.75, 0.25], vertical_spacing=0.04)
        fig.add_trace(
            go.Scatter(
                x=[0, 1], y=[0, 1], mode="lines", name="perfect calibration", line=dict(color="grey", dash="dash")
            ),
            row=1,
            col=1,
        )
        for i, (name, curve, sm) in enumerate(self.curves):
            colour = _COLOURS[i % len(_COLOURS)]
            nz = curve.count > 0
            fig.add_trace(
                go.Scatter(
                    x=curve.mean_score[nz],
                    y=curve.frac_true[nz],
                    mode="markers+lines",
                    name=f"{name} (ECE {curve.ece:.3f})",
                    marker=dict(color=colour, size=7),
                    line=dict(color=colour, width=1),
                    error_y=dict(
                        type="data",
                        symmetric=False,
                        array=(curve.high - curve.frac_true)[nz],
                        arrayminus=(curve.frac_true - curve.low)[nz],
                        thickness=1,
                    ),
                    customdata=np.stack([curve.count[nz]], axis=1),
                    hovertemplate="score %{x:.3f}<br>observed %{y:.3f}<br>n=%{customdata[0]}<extra></extra>",
                ),
                row=1,
                col=1,
            )
            if sm is not None:
                fig.add_trace(
                    go.Scatter(
                        x=sm.mesh,
                        y=sm.curve,
                        mode="lines",
                        name=f"{name} smooth (smECE {sm.smece:.3f})",
                        line=dict(color=colour, width=2, dash="dot"),
                    ),
                    row=1,
                    col=1,
                )
            centres = 0.5 * (curve.edges[:-1] + curve.edges[1:])
            fig.add_trace(
                go.Bar(
                    x=centres,
                    y=curve.count,
                    width=np.diff(curve.edges),
                    name=f"{name} items",
                    marker=dict(color=colour),
                    opacity=0.5,
                    showlegend=False,
                ),
                row=2,
                col=1,
            )
        fig.update_xaxes(range=[0, 1], row=1, col=1)
        fig.update_xaxes(range=[0, 1], title_text=self.x_title, row=2, col=1)
        fig.update_yaxes(range=[0, 1], title_text="observed frequency", row=1, col=1)
        fig.update_yaxes(title_text="items", row=2, col=1)
        fig.update_layout(
            title=self.title,
            barmode="overlay",
            template="plotly_white",
            height=560,
            legend=dict(orientation="h", y=-0.15),
        )
        self.figure_ = fig
        return fig


@dataclass
class ConfusionDisplay:
    """Confusion matrix heat map with the review column (rows: gold option; columns: decision or review)."""

    result: ConfusionResult
    normalize: str | None = None
    title: str = "Confusion matrix"
    figure_: Any = None

    @classmethod
    def from_predictions(
        cls,
        labels: np.ndarray,
        probs: np.ndarray,
        option_ids: Sequence[str] | None = None,
        *,
        accept: np.ndarray | None = None,
        normalize: str | None = None,
        title: str | None = None,
    ) -> ConfusionDisplay:
        """``accept`` (n,) bool routes rejected items to ``review``; ``normalize``: None | "true" | "all"."""
        probs = np.asarray(probs, dtype=float)
        finite = np.isfinite(probs).all(axis=1)
        predicted = np.where(finite, np.nan_to_num(probs).argmax(axis=1), -1)
        opts = list(option_ids or [str(j) for j in range(probs.shape[1])])
        return cls.from_decisions(labels, predicted, opts, accept=accept, normalize=normalize, title=title)

    @classmethod
    def from_decisions(
        cls,
        labels: np.ndarray,
        predicted: np.ndarray,
        option_ids: Sequence[str],
        *,
        accept: np.ndarray | None = None,
        normalize: str | None = None,
        title: str | None = None,
    ) -> ConfusionDisplay:
        """From each item's predicted option index (−1 = provider failure, left out, as are
        unlabelled items ``labels == -1``); ``accept`` (n,) bool routes rejected items to ``review``."""
        labels, predicted = np.asarray(labels), np.asarray(predicted)
        keep = (predicted >= 0) & (labels >= 0)
        acc = None if accept is None else np.asarray(accept, bool)[keep]
        return cls.from_result(confusion_result(labels[keep], predicted[keep], list(option_ids), acc), normalize, title)

    @classmethod
    def from_answers(
        cls,
        answers: Any,
        *,
        split: str | None = "test",
        accept: np.ndarray | None = None,
        normalize: str | None = None,
    ) -> ConfusionDisplay:
        """Confusion matrix of one :class:`~workbench.answers.RunAnswers` (``split`` only names it)."""
        return cls.from_predictions(
            answers.labels,
            answers.probs,
            answers.option_ids,
            accept=accept,
            normalize=normalize,
            title=f"{answers.question}: confusion on {split or 'all'}",
        )

    @classmethod
    def from_result(cls, result: ConfusionResult, normalize: str | None = None, title: str | None = None):
        d = cls(result, normalize, title or "Confusion matrix")
        d.plot()
        return d

    def plot(self):
        """Draw (or redraw) the figure; returns the plotly ``Figure`` (also kept in ``figure_``)."""
        import plotly.graph_objects as go

        m = self.result.matrix.astype(float)
        if self.normalize == "true":
            m = m / np.maximum(m.sum(axis=1, keepdims=True), 1)
        elif self.normalize == "all":
            m = m / max(m.sum(), 1)
        elif self.normalize is not None:
            raise ValueError("normalize must be None, 'true' or 'all'")
        cols = [*self.result.option_ids, "review"]
        text = [[(f"{v:.2f}" if self.normalize else f"{int(v)}") for v in row] for row in m]
        fig = go.Figure(
            go.Heatmap(
                z=m,
                x=cols,
                y=self.result.option_ids,
                colorscale="Blues",
                text=text,
                texttemplate="%{text}" if len(cols) <= 20 else None,
                hovertemplate="label %{y}<br>decision %{x}<br>%{z}<extra></extra>",
            )
        )
        many = len(cols) > 30  # banking77: 77 options; every label stays on its axis, in a smaller font
        tick = {"tickfont": {"size": 8}, "dtick": 1} if many else {}
        fig.update_yaxes(autorange="reversed", title_text="gold label", **tick)
        fig.update_xaxes(title_text="decision (last column: routed to review)", **tick)
        fig.update_layout(
            title=f"{self.title} — review rate {self.result.review_rate:.1%}",
            template="plotly_white",
            height=12 * len(cols) + 250 if many else max(400, 18 * len(cols) + 150),
        )
        self.figure_ = fig
        return fig


def _rc_envelope(coverage: np.ndarray, error: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Lowest error at each coverage or more over a set of grid points (the surface's risk–coverage frontier).

    ``coverage``/``error`` any shape (flattened); NaN errors (nothing accepted) are skipped.
    Returns (coverage, error), ascending in coverage.
    """
    cov, err = np.asarray(coverage, float).ravel(), np.asarray(error, float).ravel()
    ok = np.isfinite(cov) & np.isfinite(err) & (cov > 0)
    cov, err = cov[ok], err[ok]
    if cov.size == 0:
        return cov, err
    order = np.lexsort((err, -cov))  # most coverage first, lowest error first among equals
    cov, err = cov[order], np.minimum.accumulate(err[order])
    first = np.r_[True, cov[1:] != cov[:-1]]
    return cov[first][::-1], err[first][::-1]


@dataclass
class RiskCoverageDisplay:
    """Risk–coverage curves (error among accepted vs share auto-accepted) of one or several runs.

    ``curves`` is a list of ``(name, coverage (m,), risk (m,))`` with coverage ascending in [0, 1];
    ``points`` a list of ``(name, coverage, error)`` operating points (e.g. each run's certified
    policy) drawn as ★ markers in their curve's colour when the names match; a 4th element names
    another plotly marker symbol (e.g. ``"x"`` for an exploration point, as the threshold surface draws it). Build one per run with
    :meth:`from_predictions` or :meth:`from_surface` and overlay them with :meth:`overlay`.

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> probs = rng.dirichlet([1, 1, 1], size=200); labels = probs.argmax(axis=1)
    >>> d = RiskCoverageDisplay.from_predictions(labels, probs, name="sharp")
    >>> fig = d.plot()  # a plotly Figure; d.figure_ is the same object
    >>> [t.name for t in fig.data]
    ['sharp (AURC 0.000)']
    """

    curves: list = field(default_factory=list)
    points: list = field(default_factory=list)
    title: str = "Risk–coverage"
    figure_: Any = None

    @classmethod
    def from_predictions(
        cls,
        labels: np.ndarray,
        probs: np.ndarray,
        *,
        name: str = "model",
        point: tuple[float, float] | None = None,
        title: str | None = None,
    ) -> RiskCoverageDisplay:
        """Curve of the top probability: ``labels`` (n,) option indices (−1 unlabelled, dropped),
        ``probs`` (n, k) (NaN rows = failures, never accepted). ``point`` = (coverage, error) to mark."""
        from workbench.metrics.selective import risk_coverage_curve

        return cls.from_curve(risk_coverage_curve(probs, labels), name=name, point=point, title=title)

    @classmethod
    def from_curve(
        cls,
        curve: Any,
        *,
        name: str = "model",
        point: tuple[float, float] | None = None,
        title: str | None = None,
    ) -> RiskCoverageDisplay:
        """The display of a computed :class:`~workbench.metrics.selective.RiskCoverageCurve` (e.g. from
        :func:`~workbench.metrics.selective.risk_coverage_from_top`, without the matrix)."""
        label = f"{name} (AURC {curve.aurc:.3f})" if np.isfinite(curve.aurc) else name
        d = cls([(label, curve.coverage, curve.risk)], [(label, *point)] if point else [], title or "Risk–coverage")
        d.plot()
        return d

    @classmethod
    def from_surface(
        cls, surface: Any, *, name: str = "model", point: tuple[float, float] | None = None, title: str | None = None
    ) -> RiskCoverageDisplay:
        """Frontier of a threshold surface (any object with ``coverage`` and ``error_rate`` arrays of
        shape (A, B), e.g. :class:`workbench.thresholds.surface.Surface`): for each coverage, the lowest
        error of a grid rule accepting at least that share (chosen in-sample: exploration, not a bound)."""
        cov, err = _rc_envelope(surface.coverage, surface.error_rate)
        d = cls([(name, cov, err)], [(name, *point)] if point else [], title or "Risk–coverage (threshold grid)")
        d.plot()
        return d

    @classmethod
    def overlay(cls, displays: Sequence[RiskCoverageDisplay], title: str | None = None) -> RiskCoverageDisplay:
        """One figure with the curves and points of several displays (e.g. one per run)."""
        d = cls(
            [c for x in displays for c in x.curves],
            [p for x in displays for p in x.points],
            title or "Risk–coverage",
        )
        d.plot()
        return d

    def plot(self):
        """Draw (or redraw) the figure; returns the plotly ``Figure``."""
        import plotly.graph_objects as go

        fig = go.Figure()
        colour_of = {}
        for i, (name, cov, risk) in enumerate(self.curves):
            colour = colour_of.setdefault(name, _COLOURS[i % len(_COLOURS)])
            fig.add_trace(
                go.Scatter(
                    x=cov,
                    y=risk,
                    mode="lines",
                    name=name,
                    line=dict(color=colour, width=2),
                    hovertemplate="coverage %{x:.3f}<br>error among accepted %{y:.3f}<extra>" + name + "</extra>",
                )
            )
        for k, (name, cov, err, *symbol) in enumerate(self.points):
            fig.add_trace(
                go.Scatter(
                    x=[cov],
                    y=[err],
                    mode="markers",
                    name=f"{name}: operating point",
                    marker=dict(
                        symbol=symbol[0] if symbol else "star",
                        size=14,
                        color=colour_of.get(name, _COLOURS[k % len(_COLOURS)]),
                    ),
                    line=dict(color="black"),
                    showlegend=False,
                    hovertemplate=f"{name}<br>coverage %{{x:.3f}}<br>error %{{y:.3f}}<extra></extra>",
                )
            )
        fig.update_xaxes(range=[0, 1.02], title_text="coverage (share auto-accepted)")
        fig.update_yaxes(rangemode="tozero", title_text="error among accepted")
        fig.update_layout(
            title=dict(text=self.title, x=0.0, xanchor="left"),
            template="plotly_white",
            height=440 + 22 * max(0, len(self.curves) - 2),  # the legend below grows with the runs overlaid
            margin=dict(t=60, l=60, r=20, b=60),
            legend=dict(orientation="h", y=-0.2, x=0),
        )
        self.figure_ = fig
        return fig


@dataclass
class ThresholdSurfaceDisplay:
    """Heat map of error among accepted (or coverage) over the threshold grid, with coverage contours,
    the chosen point, the certified point and the certified grid points (dots).

    ``x_grid`` (A,) and ``y_grid`` (B,) are the axes in rule parameters (τ and m, or τ yes and τ no);
    ``coverage`` and ``error`` are (A, B); ``region`` (A, B) bool marks certified grid points;
    ``chosen``/``certified`` are (x, y) points in the same units as the axes.

    Examples
    --------
    >>> import numpy as np
    >>> from types import SimpleNamespace
    >>> g = np.linspace(0, 1, 5)
    >>> cov = np.clip(1 - g[:, None] - g[None, :] / 2, 0, 1); err = 0.2 * cov
    >>> s = SimpleNamespace(x_grid=g, y_grid=g, coverage=cov, error_rate=err, x_name="tau", y_name="margin")
    >>> d = ThresholdSurfaceDisplay.from_surface(s, chosen=(0.5, 0.25), region=err <= 0.05)
    >>> [t.type for t in d.plot().data][:2]
    ['heatmap', 'contour']
    """

    x_grid: np.ndarray
    y_grid: np.ndarray
    coverage: np.ndarray
    error: np.ndarray
    x_title: str = "τ (lowest top probability)"
    y_title: str = "m (lowest margin)"
    colour_by: str = "error"
    chosen: tuple[float, float] | None = None
    certified: tuple[float, float] | None = None
    region: np.ndarray | None = None
    title: str = "Threshold surface"
    figure_: Any = None

    @classmethod
    def from_surface(
        cls,
        surface: Any,
        *,
        chosen: tuple[float, float] | None = None,
        certified: tuple[float, float] | None = None,
        region: np.ndarray | None = None,
        colour_by: str = "error",
        title: str | None = None,
    ) -> ThresholdSurfaceDisplay:
        """From a :class:`workbench.thresholds.surface.Surface` (or any object with ``x_grid``,
        ``y_grid``, ``coverage``, ``error_rate``, ``y_name``). A yes/no surface stores ``-τ no`` on its
        y axis; the display shows τ no itself. ``colour_by``: ``"error"`` or ``"coverage"``."""
        if colour_by not in ("error", "coverage"):
            raise ValueError("colour_by must be 'error' or 'coverage'")
        noul = getattr(surface, "y_name", "") == "tau_no"
        y = -np.asarray(surface.y_grid, float) if noul else np.asarray(surface.y_grid, float)
        d = cls(
            np.asarray(surface.x_grid, float),
            y,
            np.asarray(surface.coverage, float),
            np.asarray(surface.error_rate, float),
            "τ yes (accept yes when P(yes) ≥)" if noul else "τ (lowest top probability)",
            "τ no (accept no when P(yes) ≤)" if noul else "m (lowest margin top − second)",
            colour_by,
            chosen,
            certified,
            region,
            title or ("Error among accepted" if colour_by == "error" else "Coverage") + " over the threshold grid",
        )
        d.plot()
        return d

    def plot(self):
        """Draw (or redraw) the figure; returns the plotly ``Figure``."""
        import plotly.graph_objects as go

        z = self.error if self.colour_by == "error" else self.coverage
        finite = np.isfinite(z)
        fig = go.Figure()
        fig.add_trace(
            go.Heatmap(
                x=self.x_grid,
                y=self.y_grid,
                z=z.T,
                colorscale="RdYlGn_r" if self.colour_by == "error" else "Blues",
                zmin=0,
                zmax=float(np.nanmax(z)) if finite.any() and np.nanmax(z) > 0 else 1,
                colorbar=dict(title=dict(text=self.colour_by, side="right"), thickness=14),
                name=self.colour_by,
                hovertemplate="x %{x:.3f}<br>y %{y:.3f}<br>" + self.colour_by + " %{z:.3f}<extra></extra>",
            )
        )
        other = self.coverage if self.colour_by == "error" else np.nan_to_num(self.error)
        fig.add_trace(
            go.Contour(
                x=self.x_grid,
                y=self.y_grid,
                z=other.T,
                showscale=False,
                contours_coloring="lines",
                line_width=1,
                colorscale=[[0, "black"], [1, "black"]],
                contours=dict(showlabels=True, labelfont=dict(size=10)),
                name="coverage" if self.colour_by == "error" else "error",
                hoverinfo="skip",
                showlegend=True,
            )
        )
        if self.region is not None and np.asarray(self.region).any():
            # certified grid points as dots: Learn-then-Test certifies along test paths, so the set can be
            # a few rows of the grid rather than one blob (an outline would draw stripes)
            ii, jj = np.nonzero(np.asarray(self.region, bool))
            stride = max(1, len(ii) // 4000)  # keep the figure light on fine grids
            fig.add_trace(
                go.Scatter(
                    x=self.x_grid[ii[::stride]],
                    y=self.y_grid[jj[::stride]],
                    mode="markers",
                    marker=dict(size=6, color="#1f3fbf", opacity=0.8, line=dict(color="white", width=0.5)),
                    name="certified region",
                    hoverinfo="skip",
                )
            )
        for pt, name, symbol, colour in (
            (self.chosen, "chosen", "x", "#8e24aa"),  # not the blue of the certified dots
            (self.certified, "certified", "star", "#111111"),
        ):
            if pt is not None and pt[0] is not None and pt[1] is not None:
                fig.add_trace(
                    go.Scatter(
                        x=[pt[0]],
                        y=[pt[1]],
                        mode="markers",
                        name=name,
                        marker=dict(symbol=symbol, size=14, color=colour, line=dict(color="white", width=1)),
                    )
                )
        fig.update_xaxes(title_text=self.x_title)
        fig.update_yaxes(title_text=self.y_title)
        fig.update_layout(
            title=dict(text=self.title, x=0.0, xanchor="left"),
            template="plotly_white",
            height=460,
            margin=dict(t=60, l=60, r=20, b=60),
            legend=dict(orientation="h", y=-0.2, x=0),
        )
        self.figure_ = fig
        return fig
