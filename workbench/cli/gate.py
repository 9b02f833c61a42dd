"""`workbench gate`: judge a run against a requirements file (exit 0 pass, 1 fail, 2 cannot evaluate)."""

from __future__ import annotations

import math
from pathlib import Path

import typer

from workbench.cli.common import AS_JSON, emit_json, err_console, open_store, out_console, write_text_file


def register(app: typer.Typer) -> None:
    @app.command("gate")
    def gate(
        run_id: str = typer.Argument(..., help="Run id (or name) to judge."),
        requirements: Path = typer.Option(..., "--requirements", "-r", help="YAML requirements file."),
        junit: Path | None = typer.Option(None, "--junit", help="Write JUnit XML (one test case per requirement)."),
        markdown: Path | None = typer.Option(None, "--markdown", help="Write a Markdown table (for a PR comment)."),
        baseline: str | None = typer.Option(
            None, "--baseline", help="Also compare item-paired against this run (paired bootstrap)."
        ),
        max_drop: float | None = typer.Option(
            None, "--max-drop", help="With --baseline: fail when the drop exceeds this significantly (default 0)."
        ),
        as_json: bool = AS_JSON,
    ) -> None:
        """Check a run's metrics against requirements; exit 0 if all hold, 1 if one fails, 2 on a bad gate."""
        from workbench.errors import RequirementsError
        from workbench.store.db import no_progress_bar
        from workbench.workflows.gate import evaluate_gate, junit_xml, load_requirements, markdown_table

        if max_drop is not None and baseline is None:
            raise RequirementsError("--max-drop needs --baseline RUN_ID")
        if max_drop is not None and not (math.isfinite(max_drop) and max_drop >= 0):
            raise RequirementsError(
                f"--max-drop {max_drop} is not a non-negative number", hint="give the tolerated drop, e.g. 0.01"
            )
        reqs = load_requirements(requirements)
        with open_store(read_only=True) as con:
            no_progress_bar(con)  # stdout carries results only
            result = evaluate_gate(
                con, run_id, reqs, base_dir=requirements.resolve().parent, baseline=baseline, max_drop=max_drop
            )
        for path, render in ((junit, junit_xml), (markdown, markdown_table)):
            if path is not None:
                write_text_file(path, render(result))
        if as_json:
            emit_json(result.to_dict())
        else:
            for r in result.results:
                mark = "[green]PASS[/]" if r.passed else "[red]FAIL[/]"
                out_console.print(f"{mark} {r.requirement.label()}: {r.message}", highlight=False, soft_wrap=True)
            for w in result.warnings:  # a certified policy the judged split contradicts
                out_console.print(f"WARNING {w}", highlight=False, soft_wrap=True, markup=False)
            out_console.print(
                f"gate {'passed' if result.passed else 'FAILED'}: {len(result.results) - result.n_failed} of "
                f"{len(result.results)} requirements hold on run {result.run_id} ({result.split})"
            )
        if not result.passed:
            err_console.print(f"{result.n_failed} requirement(s) failed")
            raise typer.Exit(1)
