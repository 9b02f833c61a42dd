"""Figures of the workflow results, for the CLI (``--html``/``--png``), notebooks and the UI.

The drawing lives in :mod:`workbench.metrics.displays`; this module sits on the workflow floor
(above ``thresholds`` and ``compare``) and turns their results into displays:

* :func:`certified_region` — the grid points Learn-then-Test certifies on a surface;
* :func:`threshold_figures` — surface heat map and risk–coverage of a ``choose_thresholds`` result;
* :func:`comparison_figure` — risk–coverage overlay of every run of a ``compare_runs`` result;
* :func:`label_plan_figure` — labels → probability of certifying and expected coverage of a label plan;
* :func:`write_figures` — one HTML file (and optionally PNG images) from several figures.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from workbench.errors import OptionError
from workbench.wording import article


def certified_region(
    surface: Any,
    *,
    alpha: float,
    delta: float,
    method: str = "fixed-sequence",
    n_paths: int = 10,
    n_starts: int = 10,
) -> np.ndarray:
    """(A, B) bool mask of the grid points certified at (α, δ) on ``surface``.

    Hoeffding–Bentkus p-values of every grid point (``errors``/``accepted`` counts of the surface),
    tested by fixed-sequence along the data-independent strict→lax paths, or by Holm. It uses all the
    surface's items; ``choose_thresholds`` by default learns its test order on a held-apart share, so
    its certified point may sit just outside this region.
    """
    from workbench.thresholds.guarantees import (
        fixed_sequence_rejections,
        hoeffding_bentkus_p_values,
        holm_rejections,
        strict_to_lax_paths,
    )

    p = hoeffding_bentkus_p_values(surface.errors, surface.accepted, alpha)
    if method == "holm":
        return holm_rejections(p, delta)
    return fixed_sequence_rejections(p, strict_to_lax_paths(p.shape, n_paths, n_starts), delta)


def _rule_point(rule: dict, qtype: str) -> tuple[float, float] | None:
    x, y = (rule.get("tau_yes"), rule.get("tau_no")) if qtype == "noul" else (rule.get("tau"), rule.get("margin"))
    return None if x is None or y is None else (float(x), float(y))


def threshold_figures(result: Any) -> list:
    """Figures of one :class:`~workbench.thresholds.result.ThresholdResult`: the surface it chose on
    (error colour, coverage lines, certified region, chosen point) and its risk–coverage frontier with
    the chosen point. Titles state the question, α, δ and the recalibration."""
    from workbench.metrics.displays import RiskCoverageDisplay, ThresholdSurfaceDisplay

    opts, sel = result.options, result.selection
    d = result.to_dict()
    point = _rule_point(d["rule"], result.qtype) if sel.feasible and sel.x is not None else None
    settings = f"α={opts.alpha:g}, δ={opts.delta:g}, recalibration {opts.calibrate}"
    # the grid points the selection itself certified (its carve and test order): the ★ is one of them; the
    # all-items region of certified_region() could leave it outside (issue 27 §6)
    own = getattr(sel, "region", None)
    region = (
        np.asarray(own, bool)
        if opts.objective == "guarantee" and own is not None and np.shape(own) == result.surface.errors.shape
        else certified_region(
            result.surface,
            alpha=opts.alpha,
            delta=opts.delta,
            method=opts.method,
            n_paths=opts.n_paths,
            n_starts=opts.n_starts,
        )
        if opts.objective == "guarantee"
        else None
    )
    kind = "certified" if sel.certified and sel.feasible else "chosen"
    surface = ThresholdSurfaceDisplay.from_surface(
        result.surface,
        certified=point if kind == "certified" else None,
        chosen=point if kind == "chosen" else None,
        region=region,
        title=f"{result.question}: error over the grid ({settings})",
    )
    cal = d.get("calibration") or {}
    rc_point = (cal["coverage"], cal.get("error_rate") or 0.0) if point and cal.get("coverage") is not None else None
    curve = RiskCoverageDisplay.from_surface(
        result.surface,
        name=f"{result.question} (grid frontier)",
        point=rc_point,
        title=f"{result.question}: risk–coverage on calibration ({settings})",
    )
    return [surface.figure_, curve.figure_]


def comparison_figure(con: Any, comparison: Any, question: str | None = None):
    """Risk–coverage overlay of the runs of a :class:`~workbench.workflows.compare.Comparison` on its split
    (one curve per run, its policy's coverage/error starred); ``question`` defaults to the first.

    A comparison made with ``compare_runs(curves=True)`` carries the curves (computed from a few
    numbers per item): nothing is read. Otherwise each run's answers are loaded (the (n, k) matrix)."""
    from workbench.metrics.displays import RiskCoverageDisplay
    from workbench.store.runs import load_answers

    rows = [r for r in comparison.rows if question is None or r["question"] == question]
    if not rows:
        raise OptionError(f"no compared run has question {question!r}", hint="pick one of the compared questions")
    q = rows[0]["question"]
    parts = []
    curves = getattr(comparison, "curves", None) or {}
    for r in (r for r in rows if r["question"] == q):
        pol = r.get("policy") or {}
        cov, err = (pol.get("coverage") or {}).get("value"), (pol.get("error") or {}).get("value")
        name, point = f"{r['label']} · {r['run_id']}", (cov, err) if cov is not None and err is not None else None
        if (r["run_id"], q) in curves:
            parts.append(RiskCoverageDisplay.from_curve(curves[(r["run_id"], q)], name=name, point=point))
            continue
        ans = load_answers(con, r["run_id"], q, [comparison.split])
        parts.append(RiskCoverageDisplay.from_predictions(ans.labels, ans.probs, name=name, point=point))
    obj = comparison.objective or {}
    settings = ", ".join(
        f"{k} {obj[k]:g}" if isinstance(obj.get(k), float) else f"{k} {obj[k]}"
        for k in ("max_error", "delta", "calibrate")
        if obj.get(k) is not None
    )
    return RiskCoverageDisplay.overlay(
        parts, title=f"{q} on {comparison.split}: risk–coverage (★ policy at {settings})"
    ).figure_


def label_plan_figure(plan: Any):
    """Plotly figure of a :class:`~workbench.thresholds.planning.LabelPlan`: calibration labels (log axis)
    → probability that the guarantee certifies (and reaches the target coverage), and the expected
    certified coverage; the required probability and the recommended size are marked."""
    import plotly.graph_objects as go

    rows = plan.curve
    n = [r["n_labels"] for r in rows]
    s = plan.settings
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=n, y=[r["p_certify"] for r in rows], mode="lines+markers", name="P(certified)"))
    if plan.target_coverage is not None:
        fig.add_trace(
            go.Scatter(
                x=n,
                y=[r["p_target"] for r in rows],
                mode="lines+markers",
                name=f"P(certified, coverage ≥ {plan.target_coverage:g})",
            )
        )
    fig.add_trace(
        go.Scatter(
            x=n,
            y=[r["expected_coverage"] for r in rows],
            mode="lines+markers",
            name="expected certified coverage",
            line={"dash": "dot"},
        )
    )
    fig.add_hline(y=plan.power, line_dash="dash", line_color="grey", annotation_text=f"required {plan.power:g}")
    span = getattr(plan, "labels_range", None) or {}
    if span.get("low") is not None:
        fig.add_vrect(
            x0=span["low"],
            x1=span["high"] if span.get("high") is not None else max(n),
            fillcolor="green",
            opacity=0.08,
            line_width=0,
            annotation_text="N over the pilot's bootstraps (10–90%)",
            annotation_position="bottom left",
        )
    if plan.recommended_labels is not None:
        fig.add_vline(
            x=plan.recommended_labels,
            line_dash="dash",
            line_color="green",
            annotation_text=f"{plan.recommended_labels} labels",
        )
    fig.update_layout(
        title=(
            f"{plan.question}: calibration labels needed (α={s['alpha']:g}, δ={s['delta']:g}, recalibration "
            f"{s['calibrate']}; {plan.n_draws} simulated splits per size from {article(str(plan.pilot['n_items']) + '-item')} pilot)"
        ),
        xaxis={"title": "calibration labels", "type": "log"},
        yaxis={"title": "probability / coverage", "range": [0, 1.02]},
        height=460,
    )
    return fig


def png_available() -> bool:
    """Whether static images can be written (the optional ``kaleido`` package and a Chromium it finds)."""
    import importlib.util

    return importlib.util.find_spec("kaleido") is not None


def write_figures(figures: Sequence[Any], *, html: Path | None = None, png: Path | None = None) -> list[Path]:
    """Write ``figures`` (plotly ``Figure`` objects) to one self-contained HTML file and/or one PNG file.

    Both hold every figure, top to bottom: the PNG is exactly the file asked for (several figures are
    stacked in one image, 1,100 px wide), never ``STEM-1.png``, ``STEM-2.png`` next to it. Returns the
    paths written. Raises :class:`OptionError` when PNG output is asked without ``kaleido``.
    """
    written: list[Path] = []
    if png is not None and not png_available():
        raise OptionError(
            "`png` needs the optional kaleido package", hint="pip install 'decision-workbench[png]', or use `html`"
        )
    if html is not None:
        html = Path(html)
        html.parent.mkdir(parents=True, exist_ok=True)
        parts = [
            fig.to_html(full_html=False, include_plotlyjs=(i == 0), default_width="100%")
            for i, fig in enumerate(figures)
        ]
        html.write_text(
            "<!doctype html><html><head><meta charset='utf-8'><title>Decision Workbench figures</title></head>"
            "<body style='max-width:1100px;margin:auto;font-family:sans-serif'>" + "\n".join(parts) + "</body></html>",
            encoding="utf-8",
        )
        written.append(html)
    if png is not None and figures:
        png = Path(png)
        png.parent.mkdir(parents=True, exist_ok=True)
        _write_stacked_png(figures, png, width=1100)
        written.append(png)
    return written


def _write_stacked_png(figures: Sequence[Any], path: Path, *, width: int) -> None:
    """One PNG of ``figures`` rendered ``width`` px wide and stacked top to bottom, written whole or not at all."""
    import io
    import os
    import tempfile

    from PIL import Image  # Pillow comes with streamlit, a dependency

    images: list[Image.Image] = [
        Image.open(io.BytesIO(fig.to_image(format="png", width=width, height=int(fig.layout.height or 460), scale=1)))
        for fig in figures
    ]
    sheet: Image.Image
    if len(images) == 1:
        sheet = images[0]
    else:
        sheet = Image.new("RGB", (max(im.width for im in images), sum(im.height for im in images)), "white")
        top = 0
        for im in images:
            sheet.paste(im.convert("RGB"), (0, top))
            top += im.height
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            sheet.save(fh, format="PNG")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
