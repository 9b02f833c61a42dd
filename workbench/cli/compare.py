"""`workbench compare EXPERIMENT_OR_RUN_IDS...`: provider × schema variant, paired against a baseline."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from workbench.cli.common import AS_JSON, emit_json, err_console, open_store, out_console, print_table, slice_option
from workbench.cli.threshold_options import threshold_options
from workbench.wording import format_p  # one p-value formatter for the CLI and the UI

if TYPE_CHECKING:
    from workbench.thresholds.options import ThresholdOptions


def _fmt(v, pct: bool = False) -> str:
    if v is None or (isinstance(v, float) and v != v):
        return "–"
    return f"{v:.1%}" if pct else (f"{v:.4g}" if isinstance(v, float) else str(v))


def _cost_cell(cost, emulated: bool) -> str:
    """$/1k items; an emulated run's figure is what the real service would bill, marked so."""
    text = _fmt(cost)
    return f"~{text} emulated" if emulated and text != "–" else text


def keep_freed_arrays() -> None:
    """Let this process's large temporary arrays be served from the heap (glibc's ``mallopt``; a no-op
    elsewhere). A comparison allocates a few arrays of one number per item in every bootstrap replicate
    (thousands of replicates) and every batch; above glibc's default threshold each came from a fresh
    ``mmap`` whose pages the kernel faults in and zeroes, then unmaps on free: at 1M items × 77 that
    was a fifth of compare's CPU seconds, as system time. Arrays below 64 MB now reuse freed heap
    memory, and up to 256 MB of it stays with the process between uses. For a command's own process."""
    import ctypes

    try:
        mallopt = ctypes.CDLL("libc.so.6").mallopt
    except (OSError, AttributeError):
        return
    m_trim_threshold, m_mmap_threshold = -1, -3  # glibc's malloc.h
    mallopt(m_mmap_threshold, 64 << 20)
    mallopt(m_trim_threshold, 256 << 20)


def register(app: typer.Typer) -> None:
    @app.command("compare")
    @threshold_options("compare", optional=True)
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
        slices: list[str] = slice_option("compare"),
        as_json: bool = AS_JSON,
        *,
        options: ThresholdOptions | None,
    ) -> None:
        """Metrics, cost, latency, coverage/error at the chosen policy, and paired tests vs a baseline.

        The policy whose coverage/error is shown is chosen with the threshold options given, or
        else with the experiment file's objective (else the defaults of `workbench thresholds`)."""
        from workbench.workflows.compare import compare_runs

        keep_freed_arrays()
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
                options=options,
                slices=slices or None,
                curves=html is not None or png is not None,  # the figure from the items, not the matrices
            )
            if html is not None or png is not None:
                from workbench.workflows.figures import comparison_figure, write_figures

                for path in write_figures([comparison_figure(con, result)], html=html, png=png):
                    err_console.print(f"wrote {path}", highlight=False, soft_wrap=True)
        if as_json:
            emit_json(result.to_dict())
            return
        from rich.table import Table

        df = result.to_frame()
        n_b = (result.rows[0].get("metrics") or {}).get("accuracy", {}).get("n_boot") if result.rows else None
        table = Table(
            title=f"{result.experiment or result.dataset} on {result.split} (baseline {result.baseline})",
            caption=f"coverage / error: the policy chosen on the calibration split at {result.settings_text}",
        )
        for col in (
            "run",
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
            table.add_column(col, no_wrap=col == "run")
        for _, r in df.iterrows():
            d_acc = (
                "baseline"
                if r["is_baseline"]
                else f"{_fmt(r['d_accuracy'], True)} [{_fmt(r['d_accuracy_low'], True)}, {_fmt(r['d_accuracy_high'], True)}]"
                if r["d_accuracy"] is not None
                else "–"
            )
            emulated = bool(r.get("emulated"))
            table.add_row(
                str(r["run_id"]),
                str(r["provider"]) + (" [yellow](emulated)[/]" if emulated else ""),
                str(r["variant"]),
                str(r["question"]),
                str(r["n"]),
                _fmt(r["accuracy"], True),
                d_acc,
                format_p(r["p_bootstrap"], n_b or n_boot or 1000),
                format_p(r["p_mcnemar"]),
                _fmt(r["log_loss"]),
                _fmt(r["ece"]),
                _fmt(r["coverage"], True),
                _fmt(r["error"], True),
                _cost_cell(r["cost_per_1000"], emulated),
                _fmt(r["latency_p95_ms"]),
            )

        print_table(table)
        from workbench.metrics.registry import BY_NAME, PER_ITEM_METRICS

        shown = [m for m in PER_ITEM_METRICS if m in df.columns and df[m].notna().any()]
        if shown:  # the metrics of the confidence ranking (every one the table of metrics computes per item)
            rt = Table(title="ranked by confidence: the top option accepted from the most confident item down")
            for col in ("run", "question", *(f"{BY_NAME[m].title} [95%]" for m in shown), *(f"Δ {m}" for m in shown)):
                rt.add_column(col, no_wrap=col == "run")
            for _, r in df.iterrows():
                rt.add_row(
                    str(r["run_id"]),
                    str(r["question"]),
                    *(f"{_fmt(r[m])} [{_fmt(r[m + '_low'])}, {_fmt(r[m + '_high'])}]" for m in shown),
                    *("baseline" if r["is_baseline"] else _fmt(r["d_" + m]) for m in shown),
                )
            print_table(rt)
        for row in result.rows:  # a certified policy the test split contradicts: the words thresholds prints
            for w in (row.get("policy") or {}).get("warnings") or []:
                out_console.print(f"WARNING {row['run_id']}: {w}", highlight=False, soft_wrap=True, markup=False)
        for column in dict.fromkeys(slices or []):
            st = Table(title=f"by {column}: accuracy and paired Δ vs the baseline on the slice's items")
            for col in ("run", "question", column, "n", "accuracy [95%]", "Δacc vs baseline [95%]", "p McNemar"):
                st.add_column(col, no_wrap=col in ("run", column))
            for row in result.rows:
                for value, fig in row["slices"][column]["slices"].items():
                    acc = (fig.get("metrics") or {}).get("accuracy") or {}
                    d = fig.get("vs_baseline") or {}
                    da = (d.get("metrics") or {}).get("accuracy")
                    st.add_row(
                        str(row["run_id"]),
                        str(row["question"]),
                        value,
                        str(fig["n_labelled"]),
                        f"{_fmt(acc.get('estimate'), True)} [{_fmt(acc.get('low'), True)}, {_fmt(acc.get('high'), True)}]"
                        if acc
                        else "–",
                        "baseline"
                        if row["is_baseline"]
                        else f"{_fmt(da['difference'], True)} [{_fmt(da['low'], True)}, {_fmt(da['high'], True)}]"
                        if da
                        else "–",
                        format_p((d.get("mcnemar") or {}).get("p_exact")),
                    )
            print_table(st)
