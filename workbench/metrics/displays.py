"""Plotly figures shared by the CLI, notebooks and the Streamlit UI (scikit-learn ``Display`` style).

Each display is built by a ``from_*`` class method, keeps the computed data (``curves``,
``result``) and the figure in ``figure_``; nothing is shown (call ``st.plotly_chart(d.figure_)``
or ``d.figure_.show()`` yourself).
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
        curve = rel.reliability_curve(y, s, n_bins, strategy, label=name)
        sm = rel.smooth_reliability_curve(y, s, label=name) if smooth and len(y) else None
        d = cls([(name, curve, sm)], title or f"Reliability ({x_title}, {strategy} bins)", x_title)
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
        (yes/no questions default to P(yes); the last entry decides the default ``kind``).
        :func:`workbench.evaluation.reliability_display` loads them from the store."""
        ans = answers[-1][1]
        kind = kind or ("option" if ans.qtype == "noul" else "top-label")
        runs = list(answers)
        curves = []
        x_title = ""
        for name, a in runs:
            y, s, x_title = _binary_problem(a.probs, a.labels, kind, option)
            curves.append(
                (
                    name,
                    rel.reliability_curve(y, s, n_bins, strategy, label=name),
                    rel.smooth_reliability_curve(y, s, label=name) if smooth and len(y) else None,
                )
            )
        label = "P(yes)" if (ans.qtype == "noul" and kind == "option" and not option) else x_title
        d = cls(curves, f"{question}: reliability of {label} on {split or 'all'} ({strategy} bins)", label)
        d.plot()
        return d

    def plot(self):
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
        return self


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
        labels = np.asarray(labels)
        keep = np.isfinite(probs).all(axis=1) & (labels >= 0)
        opts = list(option_ids or [str(j) for j in range(probs.shape[1])])
        acc = None if accept is None else np.asarray(accept, bool)[keep]
        res = confusion_result(labels[keep], probs[keep].argmax(axis=1), opts, acc)
        d = cls(res, normalize, title or "Confusion matrix")
        d.plot()
        return d

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
        fig.update_yaxes(autorange="reversed", title_text="gold label")
        fig.update_xaxes(title_text="decision (last column: routed to review)")
        fig.update_layout(
            title=f"{self.title} — review rate {self.result.review_rate:.1%}",
            template="plotly_white",
            height=max(400, 18 * len(cols) + 150),
        )
        self.figure_ = fig
        return self
