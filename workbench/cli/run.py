"""`workbench run`, `workbench runs list`, `workbench export`."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import typer

from workbench.cli.common import AS_JSON, cost_text, emit_json, err_console, open_store, print_id, print_table
from workbench.cli.outputs import FORCE, check_out_path
from workbench.errors import WorkbenchError


def parse_rate(value: str | None) -> float | None:
    """``"20"``, ``"20/s"`` or ``"1200/min"`` -> requests per second."""
    if value is None:
        return None
    text = value.strip().lower().replace(" ", "")
    num, _, unit = text.partition("/")
    scale = {"": 1.0, "s": 1.0, "sec": 1.0, "min": 1 / 60, "m": 1 / 60, "h": 1 / 3600}.get(unit)
    try:
        rate = float(num) * scale if scale is not None else None
    except ValueError:
        rate = None
    if rate is None or rate <= 0:
        raise WorkbenchError(f"--rate {value!r} is not a positive rate", hint="e.g. --rate 20/s or --rate 600/min")
    return rate


def _print_summary(summary: dict) -> None:
    s = summary
    sess = s.get("this_session", {})
    cost = cost_text(s.get("cost_usd"), bool(s.get("emulated")))
    p50, p95 = s.get("latency_p50_ms"), s.get("latency_p95_ms")
    lat = "-" if p50 is None else f"{p50:.0f}/{p95:.0f} ms"
    fails = ", ".join(f"{k} {v}" for k, v in (s.get("failed_by_kind") or {}).items()) or "none"
    emulated = " [yellow]EMULATED[/] ·" if s.get("emulated") else ""
    err_console.print(
        f"[bold]{s['run_id']}[/] {s['provider']} ·{emulated} {s['status']} · answered {s.get('answered', 0)} · "
        f"failed {s.get('failed', 0)} ({fails}) · tokens {s.get('input_tokens') or 0:,} · cost {cost} · "
        f"latency p50/p95 {lat} · requests {sess.get('requests_sent', 0)} (cache hits {sess.get('cache_hits', 0)}, "
        f"retries {sess.get('retries', 0)})"
    )
    _print_first_failures(s)
    if s.get("billed_unanswered_calls"):
        lost_cost = s.get("billed_unanswered_cost_usd")
        err_console.print(
            f"[yellow]billed but unanswered:[/] {s['billed_unanswered_calls']} call(s) in flight when an earlier "
            f"session was killed (sent again; cost {cost_text(lost_cost, bool(s.get('emulated')))}), "
            f"included in the billed cost {cost_text(s.get('cost_billed_usd'), bool(s.get('emulated')))}"
        )
    if s.get("missing"):
        err_console.print(
            f"[red]incomplete:[/] {s['missing']:,} of {s.get('planned', 0):,} item × question(s) have neither an "
            f"answer nor a failure in the store — ask them with `workbench run --resume {s['run_id']}`"
        )
    if s.get("stop_reason"):
        err_console.print(
            f"[yellow]stopped:[/] {s['stop_reason']} — continue with `workbench run --resume {s['run_id']}`"
        )


def _print_first_failures(summary: dict) -> None:
    """The first message of each failure kind, whole and on one line each (credentials were scrubbed by the
    runner). ``not_asked`` is left out when the run stopped: the stop line says why."""
    from rich.markup import escape

    first = summary.get("first_failures") or {}
    kinds = [k for k in (summary.get("failed_by_kind") or {}) if k in first]
    kinds += [k for k in first if k not in kinds]
    if summary.get("stop_reason"):
        kinds = [k for k in kinds if k != "not_asked"]
    if not kinds:
        return
    err_console.print("first failure of each kind:", soft_wrap=True)
    for kind in kinds:
        message = first[kind]
        if message.startswith(f"{kind}: "):  # a ProviderError's text starts with its kind
            message = message[len(kind) + 2 :]
        err_console.print(f"  [red]{escape(kind)}[/]: {escape(message)}", soft_wrap=True, highlight=False)


def _emit_runs(summaries: list[dict], as_json: bool, *, experiment: dict | None = None) -> None:
    """What ``workbench run`` prints, the same whatever the options (a new run, --resume, an experiment file).

    stdout: the run ids, one per line, or with ``--json`` one document
    ``{"run_ids": [...], "runs": [summary, ...], "experiment": {name, dataset, source} | null}``;
    the human summary of each run goes to stderr.
    """
    for s in summaries:
        if s.get("provider"):
            _print_summary(s)
    run_ids = [s["run_id"] for s in summaries]
    if as_json:
        emit_json({"run_ids": run_ids, "runs": summaries, "experiment": experiment})
    else:
        for run_id in run_ids:
            print_id(run_id)
    from workbench.runner.outcome import exit_code

    code = exit_code(summaries)  # a script can tell "all answered" from "stopped on a 401"
    if code:
        raise typer.Exit(code)


#: ``workbench run --help`` epilog: the codes of :mod:`workbench.runner.outcome` (a test keeps them equal;
#: importing the runner here would load it for every command).
EXIT_CODES_HELP = (
    "Exit codes: 0 every item answered; 2 bad input; 3 finished with some failures; "
    "4 stopped on an authentication/quota failure, items not asked (--resume after fixing); "
    "5 every item failed; 6 --max-cost reached, items not asked; 7 items without an answer or a failure "
    "in the store (--resume asks them); 130 interrupted."
)


def _number(value: Any, digits: int) -> str:
    """``value`` with ``digits`` decimals, or ``-`` when missing (None or NaN)."""
    return "-" if value is None or value != value else f"{value:.{digits}f}"


def _run(
    experiment,
    dataset,
    schema,
    provider,
    split,
    limit,
    concurrency,
    rate,
    max_cost,
    run_name,
    timeout,
    questions_per_request,
    resume,
    experiment_name,
    variant,
    progress,
    as_json,
) -> None:
    from workbench.reporting import RichReporter
    from workbench.runner import resume_run, run_experiment

    if experiment is not None:
        try:
            from workbench.workflows.experiments import run_experiment_file
        except ModuleNotFoundError as exc:
            if exc.name and exc.name.startswith("workbench.workflows.experiments"):
                raise WorkbenchError(
                    f"{experiment}: experiment files are not supported in this build",
                    hint="use --dataset/--schema/--provider",
                ) from None
            raise
        with open_store() as con:
            result = run_experiment_file(
                con,
                experiment,
                concurrency=concurrency,
                limit=limit,
                rate=parse_rate(rate),
                max_cost=max_cost,
                timeout=timeout,
                progress=progress,
                reporter=RichReporter(err_console),
            )
        summaries = []
        for r in result["runs"]:
            s = dict(r.get("summary") or {})
            s.update(run_id=r["run_id"], provider=r["provider"], status=r["status"], variant=r["variant"])
            summaries.append(s)
        info = {k: result[k] for k in ("experiment", "dataset", "source")}
        _emit_runs(summaries, as_json, experiment=info)
        return
    with open_store() as con:
        if resume:
            summaries = [
                resume_run(
                    con,
                    resume,
                    env=os.environ,
                    progress=progress,
                    reporter=RichReporter(err_console),
                    concurrency=concurrency,
                    rate=parse_rate(rate),
                    max_cost=max_cost,
                    timeout=timeout,
                )
            ]
        else:
            missing = [o for o, v in (("--dataset", dataset), ("--schema", schema), ("--provider", provider)) if not v]
            if missing:
                raise WorkbenchError(
                    f"missing {', '.join(missing)}",
                    hint="workbench run --dataset NAME --schema FILE --provider SPEC, or workbench run --resume RUN_ID",
                )
            from workbench.schema import load_schema
            from workbench.store.runs import get_run

            sch = load_schema(schema)
            run_ids = run_experiment(
                con,
                dataset=dataset,
                schema=sch,
                provider_specs=list(provider),
                splits=list(split) if split else None,
                limit=limit,
                concurrency=concurrency or 8,
                rate=parse_rate(rate),
                max_cost=max_cost,
                run_name=run_name,
                experiment=experiment_name,
                variant=variant,
                env=os.environ,
                timeout=timeout or 5.0,
                questions_per_request=questions_per_request,
                progress=progress,
                reporter=RichReporter(err_console),
            )
            summaries = [get_run(con, r)["summary"] for r in run_ids]
    _emit_runs(summaries, as_json)


def register(app: typer.Typer) -> None:
    @app.command("run", epilog=EXIT_CODES_HELP)
    def run(
        experiment: Path | None = typer.Argument(
            None, help="Experiment YAML (dataset × schema variants × providers); or use the options below."
        ),
        dataset: str | None = typer.Option(None, "--dataset", help="Dataset name (latest version)."),
        schema: Path | None = typer.Option(None, "--schema", help="Decision schema file (YAML/JSON)."),
        provider: list[str] = typer.Option(
            None,
            "--provider",
            help="Provider spec, e.g. cloudflare:clef, local:minilm-zeroshot, "
            "baseline:tfidf-logreg, rules:PATH, replay:PATH (repeatable).",
        ),
        split: list[str] = typer.Option(None, "--split", help="Split(s) to run (default: all but train)."),
        limit: int | None = typer.Option(None, "--limit", help="First N items by id."),
        concurrency: int | None = typer.Option(
            None, "--concurrency", help="Requests in flight per provider (default 8)."
        ),
        rate: str | None = typer.Option(None, "--rate", help="Rate limit, e.g. 20/s or 600/min."),
        max_cost: float | None = typer.Option(None, "--max-cost", help="Stop before spending more (USD)."),
        run_name: str | None = typer.Option(None, "--run-name"),
        timeout: float | None = typer.Option(None, "--timeout", help="Per-call timeout in seconds (default 5)."),
        questions_per_request: int | None = typer.Option(
            None,
            "--questions-per-request",
            help="Split the schema into requests of at most N questions (1: a changed question re-asks only itself).",
        ),
        resume: str | None = typer.Option(None, "--resume", help="Continue an interrupted, stopped or incomplete run."),
        experiment_name: str | None = typer.Option(None, "--experiment", hidden=True),
        variant: str | None = typer.Option(None, "--variant", hidden=True),
        no_progress: bool = typer.Option(False, "--no-progress", help="No progress bar."),
        as_json: bool = AS_JSON,
    ) -> None:
        """Run a schema over a dataset through one or more providers (cached, resumable)."""
        flags = dict(locals())  # the parameters above, by name
        progress = not flags.pop("no_progress")
        from workbench.runner import RunInterrupted

        try:
            _run(**flags, progress=progress)
        except RunInterrupted as exc:
            err_console.print(f"[yellow]{exc}[/]")
            raise typer.Exit(130) from None

    runs = typer.Typer(help="List experiment runs; import answers computed elsewhere.", no_args_is_help=True)
    app.add_typer(runs, name="runs")

    @runs.command("import")
    def runs_import(
        answers: str = typer.Argument(
            ..., help="Parquet or JSONL answers: a file, a directory of part files, or a quoted glob."
        ),
        dataset: str = typer.Option(..., "--dataset", help="Dataset the answers are for."),
        version: int | None = typer.Option(None, "--version", help="Dataset version (default: the latest)."),
        schema: Path = typer.Option(..., "--schema", help="Decision schema file (option order of the vectors)."),
        name: str = typer.Option(..., "--name", help="Name of the new run."),
        model: str | None = typer.Option(None, "--model", help="Model that produced the answers."),
        provider_label: str | None = typer.Option(
            None, "--provider-label", help="Provider shown for the run (default: imported)."
        ),
        as_json: bool = AS_JSON,
    ) -> None:
        """Create a run from answers computed elsewhere (wide: a list<double> column per question; or the
        long layout `workbench export` writes). Checked like provider answers; all or nothing."""
        from workbench.api import import_answers
        from workbench.schema import load_schema
        from workbench.store.runs import get_run

        sch = load_schema(schema)
        with open_store() as con:
            run_id = import_answers(
                con,
                answers,
                dataset=dataset,
                version=version,
                schema=sch,
                name=name,
                model=model,
                provider_label=provider_label,
            )
            summary = get_run(con, run_id)["summary"]
        imp = summary.get("imported", {})
        err_console.print(
            f"[bold]{run_id}[/] {summary['provider']} · imported {imp.get('rows', 0):,} {imp.get('layout')} rows"
            f" ({imp.get('format')}) · answered {summary.get('answered', 0):,} · failed {summary.get('failed', 0):,}"
            f" · {imp.get('seconds', 0):.1f} s"
        )
        if as_json:
            emit_json(summary)
        else:
            print_id(run_id)

    @runs.command("list")
    def runs_list(as_json: bool = AS_JSON) -> None:
        """Runs with provider, status, answers, failures, cost and latency."""
        from workbench.store.runs import list_runs

        with open_store(read_only=True) as con:
            df = list_runs(con)
        if as_json:
            emit_json({"runs": df.to_dict(orient="records")})
            return
        from rich import box
        from rich.table import Table

        rows: list[dict[Any, Any]] = df.to_dict(orient="records")
        any_emulated = any(bool(r["emulated"]) for r in rows)
        names = [r["name"] if isinstance(r["name"], str) else "" for r in rows]  # pandas gives NaN for NULL
        table = Table(
            box=box.SIMPLE_HEAD,
            pad_edge=False,
            padding=(0, 1, 0, 0),
            caption=(
                "* emulated: answered by `workbench emulator`; the real price, nothing billed. " if any_emulated else ""
            )
            + "n answers, p50 median latency in ms",
        )
        # the id never shrinks (it is what the next command takes); the other columns wrap instead
        table.add_column("run", no_wrap=True, min_width=max([3, *(len(r["run_id"]) for r in rows)]))
        if any(names):
            table.add_column("name", overflow="fold", ratio=1)
        table.add_column("provider", overflow="fold", ratio=2)
        table.add_column("dataset", overflow="fold")
        table.add_column("status", no_wrap=True)
        for col in ("n", "fail", "cost $", "p50"):  # answers, failures, USD, median latency (ms)
            table.add_column(col, justify="right", no_wrap=True)
        for r, name in zip(rows, names):
            emulated = bool(r["emulated"])
            cost = _number(r["cost_usd"], 4)
            if emulated and cost != "-":
                cost = f"~{cost}*"
            cells = [str(r["run_id"]), *([name] if any(names) else [])]
            cells += [
                str(r["provider"]) + (" [yellow](emulated)[/]" if emulated else ""),
                f"{r['dataset']} v{r['dataset_version']}",
                str(r["status"]),
                str(r["n_answers"]),
                str(r["n_failed"]),
                cost,
                _number(r["latency_p50_ms"], 0),
            ]
            table.add_row(*cells)
        print_table(table)

    @app.command("export")
    def export(
        run_id: str = typer.Argument(..., help="Run id (or run name)."),
        fmt: str = typer.Option("parquet", "--format", help="parquet, csv or jsonl."),
        out: Path = typer.Option(..., "--out", help="Output file."),
        force: bool = FORCE,
        as_json: bool = AS_JSON,
    ) -> None:
        """One row per item × question: ids, split, label, options, probabilities, cost, latency, failure."""
        from workbench.store.export import export_run

        check_out_path(out, force=force)
        side = out.with_name(out.name + ".options.json") if fmt in ("csv", "jsonl") else None
        if side is not None:
            check_out_path(side, force=force)
        with open_store(read_only=True) as con:
            n = export_run(con, run_id, fmt, out)
        if as_json:
            emit_json(
                {"run_id": run_id, "format": fmt, "out": str(out), "rows": n, "option_ids_file": side and str(side)}
            )
        else:
            err_console.print(f"wrote {n:,} rows to {out}" + (f" (option ids in {side})" if side else ""))
