"""`workbench cascade --stage RUN_A --stage RUN_B …`: certified per-stage bands of a model cascade."""

from __future__ import annotations

from pathlib import Path

import typer

from workbench.cli.common import emit_json, open_store, print_table


def _pct(v) -> str:
    return "–" if v is None else f"{v:.1%}"


def register(app: typer.Typer) -> None:
    @app.command("cascade")
    def cascade_cmd(
        stage: list[str] = typer.Option(..., "--stage", help="Stage run (id or name), cheapest first; repeat."),
        question: str = typer.Option(..., "--question", help="Question every stage answered."),
        max_error: float = typer.Option(0.05, "--max-error", help="α: largest error among auto-accepted items."),
        delta: float = typer.Option(0.1, "--delta", help="δ: allowed probability that the error exceeds α."),
        cost_per_call: list[str] = typer.Option(
            None, "--cost-per-call", help="RUN=USD price per call (repeatable; default: the run's recorded cost)."
        ),
        review_cost: float = typer.Option(0.05, "--review-cost", help="USD per item sent to human review."),
        latency_weight: float = typer.Option(0.0, "--latency-weight", help="USD per second of an item's latency."),
        method: str = typer.Option("fixed-sequence", "--method", help="fixed-sequence or holm."),
        policy_out: Path | None = typer.Option(None, "--policy-out", help="Write the cascade policy (format 2)."),
        as_json: bool = typer.Option(False, "--json"),
    ) -> None:
        """Accept at a stage, escalate to the next, review after the last: cheapest certified joint bands."""
        import workbench as wb
        from workbench.thresholds.cascade import parse_price_flags

        prices = parse_price_flags(cost_per_call)
        with open_store(read_only=True) as con:
            result = wb.cascade(
                con,
                stage,
                question,
                alpha=max_error,
                delta=delta,
                prices=prices,
                review_cost=review_cost,
                latency_weight=latency_weight,
                method=method,
                out=policy_out,
            )
        doc = result.to_dict()
        if policy_out is not None:
            doc["policy"] = str(policy_out)
        if as_json:
            emit_json(doc)
            return
        from rich.table import Table

        head = "certified" if result.certified else "NOT certified"
        table = Table(title=f"cascade of {question}: {head} (α {max_error:g}, δ {delta:g}); test figures")
        for col in ("", "coverage", "error [95%]", "escalated", "cost / 1,000", "p95 latency ms"):
            table.add_column(col)
        t = doc["test"] or {}
        if t:
            e = t["error"]
            table.add_row(
                "cascade",
                _pct(t["coverage"]["value"]),
                f"{_pct(e['value'])} [{_pct(e['low'])}, {_pct(e['high'])}]",
                ", ".join(_pct(x) for x in t["escalated_at_stage"]),
                f"${t['cost_per_1000']:.4f}",
                f"{t['latency_ms_p95']:.1f}",
            )
        for s in doc["singles"]:
            e = s["error"] or {}
            table.add_row(
                s["run_id"],
                _pct((s["coverage"] or {}).get("value")),
                f"{_pct(e.get('value'))} [{_pct(e.get('low'))}, {_pct(e.get('high'))}]",
                "–",
                f"${s['cost_per_1000']:.4f}",
                "–" if s["latency_ms_p95"] is None else f"{s['latency_ms_p95']:.1f}",
            )
        print_table(table)
