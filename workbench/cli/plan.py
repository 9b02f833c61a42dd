"""`workbench plan-labels RUN -q Q`: how many calibration labels certify at α, simulated from a pilot."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from workbench.cli.common import AS_JSON, emit_json, open_store, out_console
from workbench.cli.threshold_options import threshold_options
from workbench.wording import plural

if TYPE_CHECKING:
    from workbench.thresholds.options import ThresholdOptions


def _line(text: str) -> None:
    out_console.print(text, highlight=False, soft_wrap=True)


def _pct(v) -> str:
    return "–" if v is None else f"{100 * v:.1f}%"


def print_plan(doc: dict) -> None:
    """The plan as text: verdict, the spread of N, warnings, pilot, messages, then the curve as a table."""
    from workbench.thresholds.planning import range_text

    s, pilot = doc["settings"], doc["pilot"]
    rec = doc["recommended_labels"]
    what = f"certify at α = {s['alpha']:g}, δ = {s['delta']:g}"
    if doc["target_coverage"] is not None:
        what += f" with certified coverage ≥ {doc['target_coverage']:g}"
    status = doc["status"].replace("_", " ").upper()
    if rec is not None:
        _line(
            f"[bold]{doc['question']}[/bold]: {rec} calibration labels to {what} with probability ≥ {doc['power']:g} — {status}"
        )
    else:
        _line(
            f"[bold]{doc['question']}[/bold]: no simulated size reaches probability {doc['power']:g} to {what} — {status}"
        )
    _line(f"  labels needed: {range_text(doc['labels_range'])}")
    for w in doc["warnings"]:
        _line(f"  [bold]warning[/bold]: {w}")
    best = pilot.get("best_rule_at_alpha")
    best_txt = (
        f"; its best rule at α accepts {best['accepted']} with {plural(best['errors'], 'error')} ({_pct(best['coverage'])} coverage)"
        if best
        else "; no rule reaches α on it"
    )
    _line(
        f"  pilot: {pilot['n_items']} labelled items on split {pilot.get('split')} ({pilot['n_errors_top']} top-option errors"
        f", {pilot['n_unlabelled']} unlabelled answers){best_txt}"
    )
    _line(f"  method: {doc['method']}")
    for m in doc["messages"]:
        _line(f"  note: {m}")
    _line(
        "  labels  certifying  P(certified)"
        + ("  P(target)" if doc["target_coverage"] is not None else "")
        + "  expected coverage  replicates enough"
    )
    for r in doc["curve"]:
        mark = " ←" if r["n_labels"] == rec else ""
        target = f"  {r['p_target']:9.2f}" if doc["target_coverage"] is not None else ""
        _line(
            f"  {r['n_labels']:6d}  {r['n_certifying']:10.0f}  {r['p_certify']:12.2f}{target}  {_pct(r['expected_coverage']):>17}"
            f"  {_pct(r.get('share_sufficient')):>18}{mark}"
        )


def register(app: typer.Typer) -> None:
    @app.command("plan-labels")
    @threshold_options("plan-labels")
    def plan_labels(
        run_id: str = typer.Argument(..., help="Run id (or name) whose labelled items are the pilot."),
        question: str = typer.Option(..., "--question", "-q", help="Question id."),
        target_coverage: float | None = typer.Option(
            None, "--target-coverage", help="Also require the certified coverage to reach this."
        ),
        power: float = typer.Option(0.8, "--power", help="Required probability of certifying."),
        confidence: float = typer.Option(
            0.9, "--confidence", help="Recommend the N this share of the pilot's bootstrap replicates needs."
        ),
        pilot_split: str = typer.Option(
            "calibration", "--pilot-split", help="Split whose labelled items are the pilot."
        ),
        pilot_size: int | None = typer.Option(
            None, "--pilot-size", help="Use a seeded random subset of this many pilot items."
        ),
        unlabelled_split: list[str] | None = typer.Option(
            None, "--unlabelled-split", help="Split whose unlabelled answers widen the population (repeatable)."
        ),
        draws: int = typer.Option(200, "--draws", help="Simulated calibration splits per size."),
        max_labels: int = typer.Option(20000, "--max-labels", help="Largest calibration split simulated."),
        errors: str = typer.Option("logistic", "--errors", help="Error model: logistic | observed."),
        html: Path | None = typer.Option(None, "--html", help="Write the curve as a plotly chart (HTML)."),
        as_json: bool = AS_JSON,
        *,
        options: ThresholdOptions,
    ) -> None:
        """How many calibration labels certify at --max-error with probability ≥ --power (simulated from a pilot)."""
        from workbench.cli.common import err_console
        from workbench.reporting import RichReporter
        from workbench.store.runs import get_run
        from workbench.workflows.thresholds import plan_labels_for_run

        with open_store(read_only=True) as con:
            resolved = get_run(con, run_id)["run_id"]
            plan = plan_labels_for_run(
                con,
                resolved,
                question,
                options,
                pilot_split=pilot_split,
                pilot_size=pilot_size,
                unlabelled_splits=list(unlabelled_split or []),
                target_coverage=target_coverage,
                power=power,
                confidence=confidence,
                n_draws=draws,
                max_labels=max_labels,
                errors=errors,
                seed=options.seed,
                reporter=RichReporter(err_console, progress=not as_json),
            )
        if html is not None:
            from workbench.workflows.figures import label_plan_figure, write_figures

            for path in write_figures([label_plan_figure(plan)], html=html):
                err_console.print(f"wrote {path}", highlight=False, soft_wrap=True)
        doc = {"run_id": resolved, **plan.to_dict()}
        if as_json:
            emit_json(doc)
        else:
            print_plan(doc)
