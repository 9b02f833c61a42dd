"""`workbench report`, `workbench calibrate`, `workbench label-issues`."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import typer

from workbench.cli.common import (
    AS_JSON,
    cost_text,
    emit_created,
    emit_json,
    err_console,
    open_store,
    out_console,
    print_table,
    slice_option,
)
from workbench.wording import plural


def _fmt(x: float | None, digits: int = 4) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "—"
    return f"{x:.{digits}f}"


def _ci(low: float, high: float) -> str:
    if not (math.isfinite(low) and math.isfinite(high)):
        return "—"
    return f"[{low:.4f}, {high:.4f}]"


def _print_run_report(rep, compare=None, compare_title: str = "before") -> None:
    """Rich tables on stdout: one per question, metrics with 95% intervals (and a second column set)."""
    from rich.table import Table

    from workbench.metrics.report import METRIC_INFO

    run = rep.run
    emulated = bool(run.get("emulated"))
    out_console.print(
        f"[bold]{run['run_id']}[/] {run.get('name') or ''}  provider={run.get('provider')}"
        + (" [yellow]EMULATED[/]" if emulated else "")
        + f"  model={run.get('model') or '—'}  kind={run.get('kind')}  split={rep.split or 'all'}"
        + f"  cost={cost_text(run.get('cost_usd'), emulated, 4)}"
    )
    if emulated:
        out_console.print(
            "  answered by `workbench emulator`: the cost is the real service's price, nothing was billed"
        )
    other = {q.question: q for q in compare.questions} if compare is not None else {}
    for q in rep.questions:
        c = q.counts
        kinds = ", ".join(f"{k}={v}" for k, v in c.get("failures_by_kind", {}).items()) or "none"
        out_console.print(
            f"\n[bold]{q.question}[/] ({q.qtype}, {len(q.option_ids)} options): attempted {c['n_attempted']}, "
            f"answered {c['n_answered']} (coverage {_fmt(c['coverage'], 3)}), failed {c['n_failed']} ({kinds}), "
            f"labelled {c['n_labelled']}" + (f", excluded {c['n_excluded']}" if c.get("n_excluded") else "")
        )
        if not q.metrics:
            out_console.print("  no answered, labelled items on this split")
            continue
        table = Table(show_header=True, header_style="bold")
        table.add_column("metric")
        table.add_column("estimate", justify="right")
        table.add_column("95% CI", justify="right")
        o = other.get(q.question)
        if o is not None:
            table.add_column(compare_title, justify="right")
            table.add_column(f"{compare_title} 95% CI", justify="right")
        table.add_column("meaning", style="dim")
        for name, iv in q.metrics.items():
            row = [name, _fmt(iv.estimate), _ci(iv.low, iv.high)]
            if o is not None:
                ov = o.metrics.get(name)
                row += [_fmt(ov.estimate), _ci(ov.low, ov.high)] if ov else ["—", "—"]
            row.append(METRIC_INFO.get(name, ""))
            table.add_row(*row)
        if q.decomposition is not None:
            d = q.decomposition
            for part in ("reliability", "resolution", "uncertainty"):
                row = [f"brier_{part}", _fmt(getattr(d, part)), "—"]
                if o is not None:
                    row += [_fmt(getattr(o.decomposition, part)) if o.decomposition else "—", "—"]
                row.append("Brier = reliability − resolution + uncertainty")
                table.add_row(*row)
        print_table(table)
        if q.agreement is not None:
            _print_agreement(q.agreement)


def _ci3(low: float, high: float) -> str:
    return f"[{low:.3f}, {high:.3f}]" if math.isfinite(low) and math.isfinite(high) else "—"


def _print_slices(sr) -> None:
    """One table per question: a row per slice with its counts and headline metrics (95% intervals)."""
    from rich.table import Table

    from workbench.metrics.slices import HEADLINE_METRICS

    for q, per_value in sr.questions.items():
        reps = list(per_value.values())
        names = [m for m in HEADLINE_METRICS if any(m in r.metrics for r in reps)][:4]
        table = Table(show_header=True, header_style="bold", title=f"{q} by {sr.column}", title_justify="left")
        table.add_column(sr.column, no_wrap=True)
        table.add_column("n", justify="right")
        for m in names:
            table.add_column(f"{m} [95% CI]", justify="right", no_wrap=True)
        for value, r in per_value.items():
            row = [value, str(r.counts.get("n_labelled", 0))]
            for m in names:
                iv = r.metrics.get(m)
                row.append(f"{_fmt(iv.estimate, 3)} {_ci3(iv.low, iv.high)}" if iv is not None else "—")
            table.add_row(*row)
        out_console.print()
        print_table(table)


def _print_agreement(ag) -> None:
    """The agreement table of one question: annotators next to the model (the noise floor)."""
    from rich.table import Table

    from workbench.metrics.agreement import AGREEMENT_INFO, MODEL_COLUMN_NOTE

    out_console.print(
        f"  agreement on {ag.n_items:,} items with ≥ 2 votes ({ag.votes_per_item:.2f} votes per item, "
        f"{ag.n_annotators} named annotators)"
    )
    table = Table(show_header=True, header_style="bold")
    table.add_column("agreement", no_wrap=True, min_width=max([9, *(len(n) for n in ag.annotators)]))
    table.add_column("annotators", justify="right")
    table.add_column("model", justify="right")
    table.add_column("meaning", style="dim")
    for name, value in ag.annotators.items():
        table.add_row(name, _fmt(value), _fmt(ag.model.get(name)), AGREEMENT_INFO.get(name, ""))
    print_table(table)
    for note in [MODEL_COLUMN_NOTE, *ag.notes]:
        out_console.print(f"  [dim]{note}[/]", highlight=False)


def register(app: typer.Typer) -> None:
    @app.command("report")
    def report(
        run_id: str = typer.Argument(..., help="Run id or name."),
        question: str | None = typer.Option(None, "--question", "-q", help="Only this question."),
        split: str = typer.Option("test", "--split", help="Split to evaluate ('all' for every split)."),
        n_bins: int = typer.Option(15, "--bins", help="Bins of the binned ECE family."),
        n_boot: int = typer.Option(200, "--boot", help="Bootstrap replicates for the 95% intervals."),
        seed: int = typer.Option(0, "--seed"),
        labels: str = typer.Option(
            "majority",
            "--labels",
            help="Score against each item's majority label, or 'soft': against its annotators' vote distribution.",
        ),
        exclude_label_issues: bool = typer.Option(
            False, "--exclude-label-issues", help="Also report without suspected label errors, side by side."
        ),
        slices: list[str] = slice_option("report"),
        as_json: bool = AS_JSON,
    ) -> None:
        """Every metric per question with 95% bootstrap intervals (before/after for a calibrated view)."""
        from workbench.workflows.evaluation import label_issues_for_runs, report_run

        settings: dict[str, Any] = {"n_bins": n_bins, "n_boot": n_boot, "seed": seed, "labels": labels}
        with open_store(read_only=True) as con:
            rep = report_run(con, run_id, question, split, slices=slices or None, **settings)
            clean = None
            if exclude_label_issues:
                issues = label_issues_for_runs(con, [rep.run["run_id"]], question)
                without: dict[str, Any] = {q: li.item_ids for q, li in issues.items()}
                clean = report_run(con, run_id, question, split, exclude_items=without, with_before=False, **settings)
        if as_json:
            doc = rep.to_dict()
            # one shape whatever the options: the key is always there (null unless asked for)
            doc["excluding_label_issues"] = (
                {
                    q.question: {"counts": q.counts, "metrics": {k: v.to_dict() for k, v in q.metrics.items()}}
                    for q in clean.questions
                }
                if clean is not None
                else None
            )
            emit_json(doc)
            return
        if clean is not None:
            _print_run_report(rep, clean, "w/o label issues")
        else:
            _print_run_report(rep, rep.before, "before calibration")
        if rep.calibrators:
            out_console.print("\ncalibrators: " + ", ".join(f"{q}={c['type']}" for q, c in rep.calibrators.items()))
        for sr in rep.slices.values():
            _print_slices(sr)

    @app.command("calibrate")
    def calibrate(
        run_id: str = typer.Argument(..., help="Run id or name."),
        method: str = typer.Option("temperature", "--method", help="temperature | isotonic | platt (yes/no only)."),
        question: list[str] | None = typer.Option(None, "--question", "-q", help="Only these questions."),
        fit_split: str = typer.Option("calibration", "--fit-split", help="Split the calibrator is fitted on."),
        eval_split: str = typer.Option("test", "--eval-split", help="Split for the before/after figures."),
        name: str | None = typer.Option(None, "--name", help="Name of the calibrated view."),
        as_json: bool = AS_JSON,
    ) -> None:
        """Fit a calibrator per question and store a calibrated view of the run (a new run)."""
        from workbench.metrics.recalibrate import METHODS, CalibrationFitError
        from workbench.workflows.evaluation import calibrate_run

        if method not in METHODS:
            raise CalibrationFitError(f"unknown method {method!r}", hint=f"choose one of {', '.join(METHODS)}")
        with open_store() as con:
            out = calibrate_run(
                con, run_id, method, questions=question or None, fit_split=fit_split, eval_split=eval_split, name=name
            )
        lines = [
            f"stored calibrated view [bold]{out['run_id']}[/] of {out['parent_run_id']} ({method}, fitted on {fit_split})"
        ]
        for q, s in out["questions"].items():
            extra = f" T={s['temperature']:.3f}" if "temperature" in s else ""
            lines.append(
                f"{q}: top-label ECE on {eval_split} {_fmt(s.get('ece_before'))} → "
                f"{_fmt(s.get('ece_after'))}, log loss {_fmt(s.get('log_loss_before'))} → "
                f"{_fmt(s.get('log_loss_after'))} (fit n={s['n_fit']}){extra}"
            )
        lines.append(f"next: workbench report {out['run_id']}")
        emit_created(out, as_json, out["run_id"], *lines)

    @app.command("label-issues")
    def label_issues(
        run_ids: list[str] = typer.Argument(..., help="One run, or several runs on the same dataset (consensus)."),
        question: str | None = typer.Option(None, "--question", "-q"),
        split: str = typer.Option("all", "--split", help="Split to check ('all' for every split)."),
        rank_by: str = typer.Option("self_confidence", "--rank-by", help="self_confidence | normalized_margin."),
        top: int = typer.Option(20, "--top", help="How many suspects to print."),
        csv: Path | None = typer.Option(None, "--csv", help="Write the full queue to this CSV for relabelling."),
        with_metrics: bool = typer.Option(
            True, "--metrics/--no-metrics", help="Show test metrics of the first run with and without the suspects."
        ),
        as_json: bool = AS_JSON,
    ) -> None:
        """Items whose label a confident provider (or a consensus of runs) disputes, ranked."""
        import pandas as pd

        from workbench.workflows.evaluation import label_issues_for_runs, report_run

        splits = None if split == "all" else [split]
        with open_store(read_only=True) as con:
            issues = label_issues_for_runs(con, run_ids, question, splits, rank_by)
            side = {}
            if with_metrics:
                for q, li in issues.items():
                    base = report_run(con, run_ids[0], q, "test", n_boot=200, smooth=False, with_before=False)
                    clean = report_run(
                        con,
                        run_ids[0],
                        q,
                        "test",
                        n_boot=200,
                        smooth=False,
                        with_before=False,
                        exclude_items={q: li.item_ids},
                    )
                    side[q] = (base.questions[0], clean.questions[0])
        if csv is not None:
            frames = [li.to_frame().assign(question=q) for q, li in issues.items()]
            pd.concat(frames, ignore_index=True).to_csv(csv, index=False)
            err_console.print(f"wrote {sum(len(f) for f in frames)} suspects to {csv}")
        if as_json:
            per_question: dict[str, dict] = {}
            doc = {"runs": list(run_ids), "split": split, "questions": per_question}
            for q, li in issues.items():
                per_question[q] = li.to_dict(top=top)
                per_question[q]["metrics_test"] = None  # one shape: null with --no-metrics
                if q in side:
                    b, c = side[q]
                    per_question[q]["metrics_test"] = {
                        "all_items": {k: v.to_dict() for k, v in b.metrics.items()},
                        "n_all": b.counts["n_labelled"],
                        "excluding_suspects": {k: v.to_dict() for k, v in c.metrics.items()},
                        "n_excluding": c.counts["n_labelled"],
                    }
            emit_json(doc)
            return
        from rich.table import Table

        from workbench.metrics.registry import HEADLINE_METRICS

        for q, li in issues.items():
            d = li.to_dict()
            out_console.print(
                f"\n[bold]{q}[/]: {plural(d['n_issues'], 'suspected label error')} among {plural(d['n_items'], 'item')} "
                f"(estimated noise rate {d['estimated_noise_rate']:.3f}; runs: {', '.join(li.run_ids)})"
            )
            t = Table(show_header=True, header_style="bold")
            shown = li.table.head(top)
            for col in ("rank", "item_id", "split", "given", "suggested", "quality", "p_given", "p_suggested"):
                if col == "item_id":  # ids never shrink at narrow widths; the other columns wrap
                    width = max([len(col), *(len(str(i)) for i in shown["item_id"])])
                    t.add_column(col, no_wrap=True, min_width=width)
                else:
                    right = col in ("rank", "quality", "p_given", "p_suggested")
                    t.add_column(col, justify="right" if right else "left", overflow="fold")
            for r in shown.itertuples():
                t.add_row(
                    str(r.rank),
                    str(r.item_id),
                    str(r.split),
                    str(r.given),
                    str(r.suggested),
                    f"{r.quality:.3f}",
                    f"{r.p_given:.3f}",
                    f"{r.p_suggested:.3f}",
                )
            print_table(t)
            if q in side:
                b, c = side[q]
                mt = Table(show_header=True, header_style="bold", title=f"{q} on test: all items vs without suspects")
                for col in (
                    "metric",
                    f"all (n={b.counts['n_labelled']})",
                    "95% CI",
                    f"w/o suspects (n={c.counts['n_labelled']})",
                    "95% CI ",
                ):
                    mt.add_column(col)
                for name in HEADLINE_METRICS:
                    if name in b.metrics and name in c.metrics:
                        bi, ci = b.metrics[name], c.metrics[name]
                        mt.add_row(
                            name, _fmt(bi.estimate), _ci(bi.low, bi.high), _fmt(ci.estimate), _ci(ci.low, ci.high)
                        )
                print_table(mt)
