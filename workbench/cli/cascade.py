"""`workbench cascade --stage RUN_A --stage RUN_B …`: certified per-stage bands of a model cascade."""

from __future__ import annotations

from pathlib import Path

import typer

from workbench.cli.common import AS_JSON, emit_json, open_store, print_table


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
        as_json: bool = AS_JSON,
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

        from workbench.wording import run_ref

        head = "certified" if result.certified else "NOT certified"
        table = Table(
            title=f"{question}: {doc['chosen']['structure']} recommended, {head} (α {max_error:g}, δ {delta:g}); "
            "configurations of one certified family (▶ the cheapest) and each stage under its own certificate; test figures"
        )
        for col in (
            "",
            "configuration",
            "certified",
            "coverage",
            "error [95%]",
            "escalated",
            "cost / 1,000",
            "p95 latency ms",
        ):
            table.add_column(col)
        for c in doc["configurations"]:
            t = c["test"] or {}
            e = t.get("error") or {}
            table.add_row(
                "▶" if c["chosen"] else "",
                c["structure"],
                "yes" if c["certified"] else "no",
                _pct((t.get("coverage") or {}).get("value")),
                f"{_pct(e.get('value'))} [{_pct(e.get('low'))}, {_pct(e.get('high'))}]",
                ", ".join(_pct(x) for x in t.get("escalated_at_stage") or []) or "–",
                "–" if t.get("cost_per_1000") is None else f"${t['cost_per_1000']:.4f}",
                "–" if t.get("latency_ms_p95") is None else f"{t['latency_ms_p95']:.1f}",
            )
        for s in doc["singles"]:
            o = s["own_certificate"]
            e = o.get("error") or {}
            table.add_row(
                "",
                f"{run_ref(s['run_id'])} alone, own certificate (workbench thresholds; not in the family)",
                "yes" if o["certified"] else "no",
                _pct((o.get("coverage") or {}).get("value")),
                f"{_pct(e.get('value'))} [{_pct(e.get('low'))}, {_pct(e.get('high'))}]",
                "–",
                "–" if o.get("cost_per_1000") is None else f"${o['cost_per_1000']:.4f}",
                "–",
            )
        print_table(table)
        for w in doc["warnings"]:  # the test split contradicts the certificate: the words thresholds prints
            print(f"WARNING {w}")
        for note in doc["notes"]:
            print(note)
