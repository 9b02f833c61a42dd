"""`workbench aggregate`: metrics and threshold-surface counts of answer files, on DuckDB or Spark."""

from __future__ import annotations

from pathlib import Path

import typer

from workbench.cli.common import AS_JSON, ENGINE, SPARK_MASTER, emit_json, err_console, out_console, print_table


def register(app: typer.Typer) -> None:
    @app.command("aggregate")
    def aggregate_cmd(
        paths: list[str] = typer.Argument(
            ...,
            help="Answer files in the long layout of `workbench export` (Parquet files, directories, globs, s3:// …).",
        ),
        schema: Path = typer.Option(..., "--schema", help="The decision schema file (option order)."),
        question: list[str] | None = typer.Option(None, "--question", "-q", help="Question(s) (default: all)."),
        split: list[str] | None = typer.Option(None, "--split", help="Keep only these splits (repeatable)."),
        engine: str = ENGINE,
        spark_master: str | None = SPARK_MASTER,
        n_bins: int = typer.Option(15, "--n-bins", help="Uniform top-label reliability bins."),
        grid: int = typer.Option(100, "--grid", help="Points per threshold axis of the surface."),
        max_error: float = typer.Option(
            0.05, "--max-error", help="Summary: the widest grid point whose observed error is at most this."
        ),
        as_json: bool = AS_JSON,
    ) -> None:
        """Accuracy, Brier, log loss, ECE/MCE, confusion counts and the threshold surface, computed where the files are."""
        from workbench.engines.answers import aggregate_answers

        rep = aggregate_answers(
            paths,
            schema,
            questions=question or None,
            splits=split or (),
            engine=engine,
            spark_master=spark_master,
            n_bins=n_bins,
            grid=grid,
        )
        if as_json:
            doc = rep.to_dict()
            for q, agg in rep.questions.items():
                doc["questions"][q]["surface"] = agg.surface_summary(max_error)
            emit_json(doc)
            return
        from rich.table import Table

        t = Table(show_header=True, header_style="bold", title=f"{rep.engine}: {', '.join(rep.paths)}")
        for col in ("question", "answers", "failed", "labelled", "accuracy", "Brier", "log loss", "ECE", "MCE"):
            t.add_column(col, justify="left" if col == "question" else "right")
        for q, a in rep.questions.items():
            t.add_row(
                q,
                str(a.n_rows),
                str(a.n_failed),
                str(a.n_labelled),
                f"{a.accuracy:.4f}",
                f"{a.brier:.4f}",
                f"{a.log_loss:.4f}",
                f"{a.ece:.4f}",
                f"{a.mce:.4f}",
            )
        print_table(t)
        for q, a in rep.questions.items():
            s = a.surface_summary(max_error)
            w = s["widest"]
            if w is None:
                out_console.print(f"{q}: no grid point has an observed error <= {max_error:g}", soft_wrap=True)
            else:
                params = ", ".join(f"{k} {w[k]:.4g}" for k in list(w)[:2])
                out_console.print(
                    f"{q}: widest rule with observed error <= {max_error:g}: {params}: coverage "
                    f"{w['coverage']:.1%}, error {w['error_rate']:.2%} ({w['errors']}/{w['accepted']}; not certified)",
                    soft_wrap=True,
                )
        err_console.print("observed figures on these answers; `workbench thresholds` certifies a rule", highlight=False)
