"""`workbench demo`: the offline end-to-end demo (no keys, no network)."""

from __future__ import annotations

from pathlib import Path

import typer

from workbench.cli.common import emit_json, err_console, out_console


def register(app: typer.Typer) -> None:
    @app.command("demo")
    def demo(
        out: Path = typer.Option(Path("demo-output"), "--out", help="Folder for the store, policies and data."),
        fast: bool = typer.Option(False, "--fast", help="Subsample every split (a quick look, ~1 minute)."),
        max_error: float = typer.Option(0.05, "--max-error", help="α: max error among auto-accepted items."),
        delta: float = typer.Option(0.1, "--delta", help="δ: allowed probability that the guarantee fails."),
        calibrate: str = typer.Option(
            "temperature", "--calibrate", help="Recalibration before thresholds: none | temperature | isotonic | platt."
        ),
        as_json: bool = typer.Option(False, "--json", help="Print the result as one JSON document."),
    ) -> None:
        """Offline demo: BANKING77 + HWU64 through 3 providers × 2 schemas, thresholds, policy.json.

        Imports both datasets, runs 3 providers × 2 schema variants (clef-flash EMULATED), recalibrates,
        certifies thresholds, exports policy.json, and prints how to open the UI.
        """
        from workbench.demo import print_summary, run_demo
        from workbench.reporting import RichReporter
        from workbench.thresholds.choose import build_options

        options = build_options(max_error=max_error, delta=delta, calibrate=calibrate)
        result = run_demo(out, fast=fast, options=options, progress=not as_json, reporter=RichReporter(err_console))
        if as_json:
            emit_json(result.to_dict())
            return
        print_summary(result, out_console)  # the summary on stdout, progress on stderr
