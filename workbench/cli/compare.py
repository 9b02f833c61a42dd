"""`workbench compare EXPERIMENT_OR_RUN_IDS...`: provider × schema variant, paired against a baseline."""

from __future__ import annotations

from pathlib import Path

import typer

from workbench.cli.common import emit_json, open_store, out_console


def _fmt(v, pct: bool = False) -> str:
    if v is None or (isinstance(v, float) and v != v):
        return "–"
    return f"{v:.1%}" if pct else (f"{v:.4g}" if isinstance(v, float) else str(v))


def _cost_cell(cost, emulated: bool) -> str:
    """$/1k items; an emulated run's figure is what the real service would bill, marked so."""
    text = _fmt(cost)
    return f"~{text} emulated" if emulated and text != "–" else text


def register(app: typer.Typer) -> None:
    @app.command("compare")
    def compare(
        names: list[str] = typer.Argument(..., help="Run ids, experiment names or experiment files."),
        baseline: str | None = typer.Option(
            None, "--baseline", help="Run id or PROVIDER@VARIANT (default: the experiment's)."
        ),
        question: list[str] = typer.Option(None, "--question", help="Only these questions (repeatable)."),
        split: str | None = typer.Option(None, "--split", help="Comparison split (default test)."),
        n_boot: int | None = typer.Option(None, "--n-boot", help="Bootstrap replicates (default 1000)."),
        seed: int | None = typer.Option(None, "--seed"),
        no_policy: bool = typer.Option(False, "--no-policy", help="Skip choosing a policy per run."),
        html: Path | None = typer.Option(None, "--html", help="Write the risk–coverage overlay of the runs (HTML)."),
        png: Path | None = typer.Option(None, "--png", help="Write the overlay as PNG (needs the kaleido extra)."),
        as_json: bool = typer.Option(False, "--json"),
    ) -> None:
        """Metrics, cost, latency, coverage/error at the chosen policy, and paired tests vs a baseline."""
        from workbench.compare import compare_runs

        with open_store(read_only=True) as con:
            result = compare_runs(
                con,
                list(names),
                baseline=baseline,
                questions=question or None,
                split=split,
                n_boot=n_boot,
                seed=seed,
                policy=not no_policy,
            )
            if html is not None or png is not None:
                from workbench.figures import comparison_figure, write_figures

                write_figures([comparison_figure(con, result)], html=html, png=png)
        if as_json:
            emit_json(result.to_dict())
            return
        from rich.table import Table

        df = result.to_frame()
        table = Table(
            title=f"{result.experiment or result.dataset} on {result.split} "
            f"(baseline {result.baseline}, objective {result.objective['kind']})"
        )
        for col in (
            "provider",
            "variant",
            "question",
            "n",
            "accuracy",
            "Δacc vs baseline [95%]",
            "p boot",
            "p McNemar",
            "log loss",
            "ECE",
            "coverage",
            "error",
            "$/1k",
            "p95 ms",
        ):
            table.add_column(col)
        for _, r in df.iterrows():
            delta = (
                "baseline"
                if r["is_baseline"]
                else f"{_fmt(r['d_accuracy'], True)} [{_fmt(r['d_accuracy_low'], True)}, {_fmt(r['d_accuracy_high'], True)}]"
                if r["d_accuracy"] is not None
                else "–"
            )
            emulated = bool(r.get("emulated"))
            table.add_row(
                str(r["provider"]) + (" [yellow](emulated)[/]" if emulated else ""),
                str(r["variant"]),
                str(r["question"]),
                str(r["n"]),
                _fmt(r["accuracy"], True),
                delta,
                _fmt(r["p_bootstrap"]),
                _fmt(r["p_mcnemar"]),
                _fmt(r["log_loss"]),
                _fmt(r["ece"]),
                _fmt(r["coverage"], True),
                _fmt(r["error"], True),
                _cost_cell(r["cost_per_1000"], emulated),
                _fmt(r["latency_p95_ms"]),
            )
        from rich.console import Console

        console = out_console if out_console.is_terminal else Console(width=220)  # files/pipes: no wrapping
        console.print(table)
