"""`workbench robustness RUN_BASE RUN_PROBE...`: flip rate, paired accuracy change and position bias."""

from __future__ import annotations

import typer

from workbench.cli.common import AS_JSON, emit_json, open_store, print_table
from workbench.wording import run_ref


def _pct(v) -> str:
    return "–" if v is None else f"{v:.1%}"


def _ci(v, ci) -> str:
    if v is None:
        return "–"
    lo, hi = ci or (None, None)
    return f"{_pct(v)} [{_pct(lo)}, {_pct(hi)}]"


def register(app: typer.Typer) -> None:
    @app.command("robustness")
    def robustness_cmd(
        base: str = typer.Argument(..., help="The unprobed run (id or unique prefix)."),
        probes: list[str] = typer.Argument(..., help="Probed runs of the same dataset and schema."),
        question: str | None = typer.Option(None, "--question", help="Question (required with several)."),
        split: list[str] = typer.Option(None, "--split", help="Only items of these splits (repeatable)."),
        n_boot: int = typer.Option(1000, "--n-boot", help="Bootstrap replicates of the paired intervals."),
        seed: int = typer.Option(0, "--seed", help="Seed of the bootstrap."),
        as_json: bool = AS_JSON,
    ) -> None:
        """Per probe vs the base run: flip rate (Wilson), Δaccuracy (paired bootstrap, McNemar), position bias."""
        from workbench.workflows.robustness import robustness

        with open_store(read_only=True) as con:
            result = robustness(con, base, probes, question=question, splits=split or None, n_boot=n_boot, seed=seed)
        if as_json:
            emit_json(result)
            return
        from rich.table import Table

        table = Table(
            title=f"robustness of {result['question']} vs base {run_ref(result['base_run'])}",
            caption="bias: how much more often the option listed first/last wins than that same option in the base run",
        )
        for col in ("run", "probe", "n", "flip rate [95%]", "Δaccuracy [95%]", "p McNemar", "first bias", "last bias"):
            table.add_column(col, no_wrap=col == "run")
        for r in result["probes"]:
            pb = r["position_bias"] or {}
            table.add_row(
                r["run_id"],
                str(r["probe"] or r["variant"] or "–"),
                str(r["n"]),
                _ci(r["flip_rate"], r["flip_rate_ci"]),
                _ci(r["accuracy_change"], r["accuracy_change_ci"]),
                "–" if r["mcnemar_p"] is None else f"{r['mcnemar_p']:.3g}",
                _ci(pb["first"]["bias"], pb["first"]["bias_ci"]) if pb else "–",
                _ci(pb["last"]["bias"], pb["last"]["bias_ci"]) if pb else "–",
            )
        print_table(table)
