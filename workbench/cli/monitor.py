"""`workbench monitor`: a live policy's decision logs and outcomes → figures per window and an alarm."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from workbench.cli.common import (
    AS_JSON,
    ENGINE,
    SPARK_MASTER,
    emit_json,
    err_console,
    out_console,
    print_table,
    write_text_file,
)
from workbench.wording import plural


def register(app: typer.Typer) -> None:
    @app.command("monitor")
    def monitor_cmd(
        policy: Path = typer.Option(..., "--policy", help="The policy file the decisions were made with."),
        decisions: list[str] = typer.Option(
            ...,
            "--decisions",
            help="Decision log file(s), JSON Lines (repeatable; globs allowed); with --engine spark also Parquet "
            "files or directories, s3a:// …",
        ),
        outcomes: list[str] | None = typer.Option(
            None, "--outcomes", help="Outcome file(s): JSONL, CSV or Parquet (repeatable)."
        ),
        window: str = typer.Option("1D", "--window", help="A period (1D, 6h, 15min, 1W) or a count of decisions."),
        alpha: float | None = typer.Option(None, "--alpha", help="Promised error rate (default: the policy's α)."),
        delta: float | None = typer.Option(
            None, "--delta", help="False-alarm probability of the alarm (default: the policy's δ)."
        ),
        drift_alarm: float | None = typer.Option(
            None, "--drift-alarm", help="Also raise the alarm when a window's PSI exceeds this (e.g. 0.25)."
        ),
        recertify_min: int = typer.Option(
            1000, "--recertify-min", help="Fresh outcomes needed before a recertification hint is computed."
        ),
        engine: str = ENGINE,
        spark_master: str | None = SPARK_MASTER,
        max_invalid_outcomes: float = typer.Option(
            0.01,
            "--max-invalid-outcomes",
            help="Largest share of outcome lines that may be invalid (skipped and reported); above it: exit 2.",
        ),
        markdown: Path | None = typer.Option(None, "--markdown", help="Write a Markdown summary to this file."),
        as_json: bool = AS_JSON,
    ) -> None:
        """Per-window traffic, coverage, overrides, error and drift, and an anytime-valid error alarm (exit 1)."""
        from workbench.errors import OptionError
        from workbench.monitor.report import MonitorOptions, inputs_line, monitor
        from workbench.monitor.report import markdown as to_markdown

        for name, v in (("--alpha", alpha), ("--delta", delta)):
            if v is not None and not 0.0 < v < 1.0:
                raise OptionError(f"{name} {v} must be between 0 and 1")
        if not 0.0 <= max_invalid_outcomes <= 1.0:
            raise OptionError(f"--max-invalid-outcomes {max_invalid_outcomes} must be between 0 and 1")
        opts = MonitorOptions(
            window=window, alpha=alpha, delta=delta, drift_alarm_psi=drift_alarm, recertify_min=recertify_min
        )
        opts.max_invalid_outcomes = max_invalid_outcomes
        if engine == "duckdb" and spark_master is None:
            rep = monitor(policy, decisions, outcomes or [], opts)
        else:
            from workbench.engines.monitoring import monitor_on_engine

            rep = monitor_on_engine(policy, decisions, outcomes or [], opts, engine=engine, spark_master=spark_master)
        for w in rep.warnings:
            err_console.print(f"[yellow]warning:[/yellow] {w}", highlight=False, soft_wrap=True)
        if markdown is not None:
            write_text_file(markdown, to_markdown(rep))
        if as_json:
            emit_json(rep.to_dict())
        else:
            from rich.table import Table

            t = Table(show_header=True, header_style="bold")
            for col in (
                "question",
                "window",
                "traffic",
                "coverage",
                "review",
                "override",
                "error [95% CI]",
                "PSI p_top",
            ):
                t.add_column(col, justify="left" if col in ("question", "window") else "right")
            for win in rep.windows:
                err = (
                    "—"
                    if win["error"] is None
                    else f"{win['error']:.3f} [{win['error_low']:.3f}, {win['error_high']:.3f}] n={win['n_known']}"
                )
                psi = win["drift"]["p_top"]["psi"]
                t.add_row(
                    win["question"],
                    str(win["window"]),
                    str(win["traffic"]),
                    "—" if win["coverage"] is None else f"{win['coverage']:.3f}",
                    str(win["review_load"]),
                    "—" if win["override_rate"] is None else f"{win['override_rate']:.3f}",
                    err,
                    "—" if psi is None else f"{psi:.3f}",
                )
            print_table(t)
            out_console.print(inputs_line(rep), highlight=False, soft_wrap=True)
            for q, info in rep.questions.items():
                sh = info["shadow"]
                if sh["n_would_accept"]:
                    err = (
                        "—"
                        if sh["error"] is None
                        else f"{sh['error']:.3f} [{sh['error_low']:.3f}, {sh['error_high']:.3f}]"
                    )
                    out_console.print(
                        f"{q} (shadow: held back by the rollout): would-accept coverage "
                        f"{sh['would_accept_coverage']:.3f} ({plural(sh['n_would_accept'], 'decision')}), error {err} "
                        f"n={sh['n_known']}",
                        highlight=False,
                        soft_wrap=True,
                    )
            for q, info in rep.questions.items():
                rc = info["recertification"]
                hint = (
                    f"recertified today: {json.dumps(rc['rule'])} ({'certified' if rc['certified'] else 'NOT certified'})"
                    if rc["available"]
                    else rc["message"]
                )
                out_console.print(f"{q}: {hint}", highlight=False, soft_wrap=True)
            if rep.alarm:
                for r in rep.reasons:
                    out_console.print(f"[red]ALARM[/red] {r}", highlight=False, soft_wrap=True)
            else:
                out_console.print("no alarm", highlight=False)
        if rep.alarm:
            raise typer.Exit(1)
