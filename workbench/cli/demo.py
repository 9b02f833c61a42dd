"""`workbench demo`: the offline end-to-end demo (no keys, no network)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from workbench.cli.common import AS_JSON, emit_json, err_console, out_console
from workbench.cli.threshold_options import threshold_options

if TYPE_CHECKING:
    from workbench.thresholds.options import ThresholdOptions


def register(app: typer.Typer) -> None:
    @app.command("demo")
    @threshold_options("demo")
    def demo(
        out: Path = typer.Option(Path("demo-output"), "--out", help="Folder for the store, policies and data."),
        fast: bool = typer.Option(False, "--fast", help="Subsample every split (a quick look, ~1 minute)."),
        as_json: bool = AS_JSON,
        *,
        options: ThresholdOptions,
    ) -> None:
        """Offline demo: BANKING77 + HWU64 through 3 providers × 2 schemas, thresholds, policy.json.

        Imports both datasets, runs 3 providers × 2 schema variants (clef-flash EMULATED), recalibrates,
        certifies thresholds, exports policy.json, and prints how to open the UI.
        """
        from workbench.demo import print_summary, run_demo
        from workbench.reporting import RichReporter

        result = run_demo(out, fast=fast, options=options, progress=not as_json, reporter=RichReporter(err_console))
        if as_json:
            emit_json(result.to_dict())
            return
        print_summary(result, out_console)  # the summary on stdout, progress on stderr
