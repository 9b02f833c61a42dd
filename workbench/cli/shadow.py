"""`workbench shadow import|ingest|serve|collect|replay|report|list`: the challenger beside the champion."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from workbench.cli.common import (
    AS_JSON,
    HOST,
    emit_created,
    emit_json,
    err_console,
    open_store,
    out_console,
    print_id,
    slice_option,
)
from workbench.cli.outputs import FORCE, check_out_path
from workbench.cli.threshold_options import threshold_options
from workbench.errors import WorkbenchError
from workbench.wording import plural

if TYPE_CHECKING:
    from workbench.thresholds.options import ThresholdOptions


def _schema_from(schema: Path | None, policy: Path | None):
    from workbench.schema import load_schema

    if schema is not None:
        return load_schema(schema)
    if policy is not None:
        from workbench.shadow.policies import load_side_policy

        return load_side_policy(policy).schema
    return None


def _public(spec: str) -> str:
    """A spec or URL without credentials (user-info, secret-looking query values), for the store."""
    from workbench.providers.registry import public_spec

    if spec.startswith(("http://", "https://")):
        return public_spec("url:" + spec)[len("url:") :]
    return public_spec(spec)


def _headers(values: list[str] | None) -> dict[str, str]:
    """``NAME=ENVVAR`` pairs: the header value is read from the environment, never from argv."""
    out: dict[str, str] = {}
    for v in values or []:
        name, sep, env = v.partition("=")
        if not sep or not name.strip() or not env.strip():
            raise WorkbenchError(
                f"--challenger-header {v!r} is not NAME=ENVVAR",
                hint="e.g. --challenger-header Authorization=CHALLENGER_AUTH",
            )
        if env.strip() not in os.environ:
            raise WorkbenchError(
                f"environment variable {env.strip()} is not set", hint="export it before starting the mirror"
            )
        out[name.strip()] = os.environ[env.strip()]
    return out


# Options shared by `shadow serve` and `shadow collect`.
JOURNAL = typer.Option(None, "--journal", help="Append-only log (default shadow-NAME.jsonl).")
CHALLENGER_TIMEOUT = typer.Option(5.0, "--challenger-timeout", help="Seconds.")
MAX_IN_FLIGHT = typer.Option(256, "--max-challenger-in-flight", help="Challenger calls beyond this are shed (logged).")
CHALLENGER_HEADER = typer.Option(
    None, "--challenger-header", help="NAME=ENVVAR header for the challenger (repeatable)."
)
INGEST = typer.Option(True, "--ingest/--no-ingest", help="Load the journal into the store on exit.")
MAX_JOURNAL_BODY = typer.Option("1MiB", "--max-journal-body", help="Bodies above this are journaled as sha256 + size.")


def _journal_settings(
    name: str,
    journal: Path | None,
    timeouts: tuple[float, float],
    max_in_flight: int,
    challenger_header: list[str] | None,
    max_journal_body: str,
) -> dict:
    """The settings the mirror and the collector share (journal path, timeouts, challenger headers)."""
    from workbench.shadow.mirror import parse_size

    return dict(
        journal=journal or Path(f"shadow-{name}.jsonl"),
        name=name,
        champion_timeout=timeouts[0],
        challenger_timeout=timeouts[1],
        max_challenger_in_flight=max_in_flight,
        challenger_headers=_headers(challenger_header),
        max_journal_body=parse_size(max_journal_body, option="--max-journal-body"),
    )


def _ingest_after(path: Path, name: str, champion: str | None, challenger: str) -> None:
    """Load a stopped mirror's or collector's journal into the store (``--ingest``)."""
    from workbench.store.shadow import ingest_journal, repeated_items_note

    if not path.exists():
        return
    with open_store() as con:
        s = ingest_journal(
            con, path, shadow=name, champion=_public(champion) if champion else None, challenger=_public(challenger)
        )
    err_console.print(f"ingested {s['n_requests']} requests into session {name}")
    if note := repeated_items_note(s):
        err_console.print(note, markup=False)


def register(app: typer.Typer) -> None:
    sh = typer.Typer(
        help="Shadow mode: compare a challenger with the champion on the same traffic.", no_args_is_help=True
    )
    app.add_typer(sh, name="shadow")

    @sh.command("import")
    def import_(
        path: Path = typer.Argument(..., help="Traffic log (JSONL/Parquet/CSV), an outcome file, or a mirror journal."),
        name: str = typer.Option(..., "--name", help="Shadow session name."),
        schema: Path | None = typer.Option(None, "--schema", help="Decision schema (option order)."),
        policy: Path | None = typer.Option(None, "--policy", help="Take the schema from this policy file."),
        champion: str | None = typer.Option(None, "--champion", help="Label of the champion (e.g. its model)."),
        challenger: str | None = typer.Option(None, "--challenger", help="Label of the challenger."),
        replace: bool = typer.Option(False, "--replace", help="Overwrite an existing session."),
        as_json: bool = AS_JSON,
    ) -> None:
        """Import production logs (or later outcomes, joined by item id) into a shadow session."""
        from workbench.store.shadow import import_traffic, repeated_items_note

        with open_store() as con:
            summary = import_traffic(
                con,
                path,
                shadow=name,
                schema=_schema_from(schema, policy),
                champion=champion,
                challenger=challenger,
                replace=replace,
            )
        line = (
            f"shadow [bold]{name}[/]: {summary['kind']} imported, "
            f"{summary['n_requests']} requests, {summary['n_outcomes']} outcomes"
        )
        emit_created(summary, as_json, name, line, notes=(repeated_items_note(summary),))

    @sh.command("serve")
    def serve_(
        champion: str = typer.Option(..., "--champion", help="Champion System One endpoint URL."),
        challenger: str = typer.Option(
            ..., "--challenger", help="Challenger System One endpoint URL (?model=NAME rewrites the body's model)."
        ),
        port: int = typer.Option(8790, "--port"),
        host: str = HOST,
        name: str = typer.Option("mirror", "--name", help="Shadow session name."),
        journal: Path | None = JOURNAL,
        champion_timeout: float = typer.Option(30.0, "--champion-timeout", help="Seconds."),
        challenger_timeout: float = CHALLENGER_TIMEOUT,
        max_in_flight: int = MAX_IN_FLIGHT,
        challenger_header: list[str] = CHALLENGER_HEADER,
        sample_rate: float = typer.Option(1.0, "--sample-rate", help="Share of requests mirrored to the challenger."),
        ingest: bool = INGEST,
        max_body: str = typer.Option("8MiB", "--max-body", help="Largest request body; larger ones get 413."),
        max_buffered: str = typer.Option(
            "128MiB", "--max-buffered", help="Request bodies held in memory at once; beyond it 503 + Retry-After."
        ),
        header_timeout: float = typer.Option(
            10.0, "--header-timeout", help="Seconds for a request head once it started (slowloris)."
        ),
        body_timeout: float = typer.Option(
            30.0, "--body-timeout", help="Seconds for a body once its head is in (408)."
        ),
        idle_timeout: float = typer.Option(
            75.0, "--idle-timeout", help="Seconds a connection may wait between requests."
        ),
        max_connections: int = typer.Option(1024, "--max-connections", help="Open connections; more are closed."),
        max_journal_body: str = MAX_JOURNAL_BODY,
    ) -> None:
        """Live mirror: answer with the champion (unchanged), shadow the challenger, log both durably.

        Sizes take a unit (8MiB, 512KiB, or bytes). The limits are answered by the mirror itself:
        see `workbench.shadow.mirror` for what each one does.
        """
        from workbench.shadow.mirror import MirrorConfig, parse_size, serve

        shared = _journal_settings(
            name, journal, (champion_timeout, challenger_timeout), max_in_flight, challenger_header, max_journal_body
        )
        path = shared["journal"]
        sizes = {"max_body_bytes": (max_body, "--max-body"), "max_buffered_bytes": (max_buffered, "--max-buffered")}
        shared.update({key: parse_size(text, option=flag) for key, (text, flag) in sizes.items()})
        waits: dict[str, Any] = {
            "header_timeout": header_timeout,
            "body_timeout": body_timeout,
            "idle_timeout": idle_timeout,
        }
        shared["max_connections"] = max_connections
        config = MirrorConfig(champion=champion, challenger=challenger, sample_rate=sample_rate, **waits, **shared)
        config.validate()
        err_console.print(f"shadow mirror [bold]{name}[/] on http://{host}:{port}{config.path} (journal {path})")

        def _after(app_) -> None:
            err_console.print(f"stopped after {app_.stats['requests']} requests")
            if ingest:
                _ingest_after(path, name, champion, config.challenger)

        serve(config, host=host, port=port, on_closed=_after)

    @sh.command("collect")
    def collect_(
        challenger: str = typer.Option(
            ...,
            "--challenger",
            help="Challenger System One URL (?model=NAME rewrites the body's model) or provider spec.",
        ),
        spool: Path = typer.Option(
            ..., "--spool", help="Directory nginx's proxy_store writes champion answers to ($request_id files)."
        ),
        name: str = typer.Option("nginx", "--name", help="Shadow session name."),
        port: int = typer.Option(8791, "--port"),
        host: str = HOST,
        journal: Path | None = JOURNAL,
        champion: str | None = typer.Option(None, "--champion", help="Label of the champion for the store."),
        champion_timeout: float = typer.Option(
            30.0, "--champion-timeout", help="Seconds to wait for the champion's stored answer."
        ),
        challenger_timeout: float = CHALLENGER_TIMEOUT,
        max_in_flight: int = MAX_IN_FLIGHT,
        challenger_header: list[str] = CHALLENGER_HEADER,
        max_body_bytes: int = typer.Option(
            8 * 1024 * 1024,
            "--max-body-bytes",
            help="Larger mirrored requests get 413; larger stored champion answers are journaled as too_large.",
        ),
        syslog_port: int | None = typer.Option(
            None,
            "--syslog-port",
            help="UDP port for nginx's JSON access log (access_log syslog:...): champion statuses and latencies.",
        ),
        ingest: bool = INGEST,
        max_journal_body: str = MAX_JOURNAL_BODY,
        max_held: str = typer.Option(
            "256MiB",
            "--max-held",
            help="Mirrored request bodies held at once (each until its pair is journaled); beyond, requests are "
            "dropped unread and counted (dropped_held_bytes).",
        ),
    ) -> None:
        """Collector behind nginx's `mirror`: call the challenger, pair it with the champion's stored answer.

        See docs/shadow-nginx.md for the nginx configuration (mirror + proxy_store + $request_id)."""
        from workbench.shadow.collector import CollectorConfig, collect
        from workbench.shadow.mirror import parse_size

        shared = _journal_settings(
            name, journal, (champion_timeout, challenger_timeout), max_in_flight, challenger_header, max_journal_body
        )
        path = shared["journal"]
        shared["max_held_bytes"] = parse_size(max_held, option="--max-held")
        shared.update(spool=spool, syslog_port=syslog_port, max_body_bytes=max_body_bytes)
        config = CollectorConfig(challenger=challenger, **shared)

        def _ready(bound: int) -> None:
            err_console.print(
                f"shadow collector [bold]{name}[/] on http://{host}:{bound} (spool {spool}, journal {path})"
            )

        def _after(c) -> None:
            err_console.print(
                f"stopped after {c.stats['requests']} mirrored requests "
                f"({c.stats['champion_not_stored']} champion answers not stored, "
                f"{c.stats['dropped_held_bytes']} dropped over --max-held)"
            )
            if ingest:
                _ingest_after(path, name, champion, config.challenger)

        try:
            collect(config, host=host, port=port, on_closed=_after, ready=_ready)
        except OSError as exc:
            raise WorkbenchError(
                f"shadow collect: cannot listen on {host}:{port}: {exc.strerror}", hint="pick another --port"
            ) from None

    @sh.command("ingest")
    def ingest_(
        journal: Path = typer.Argument(..., help="Mirror journal (JSON lines)."),
        name: str = typer.Option(..., "--name"),
        schema: Path | None = typer.Option(None, "--schema"),
        as_json: bool = AS_JSON,
    ) -> None:
        """Load (again) a mirror journal into the store; safe to repeat while the mirror runs."""
        from workbench.store.shadow import ingest_journal, repeated_items_note

        with open_store() as con:
            s = ingest_journal(con, journal, shadow=name, schema=_schema_from(schema, None))
        line = f"{s['n_requests']} requests ({s['n_challenger_lost']} challenger lost) in {name}"
        emit_created(s, as_json, name, line, notes=(repeated_items_note(s),))

    @sh.command("replay")
    def replay_(
        champion_run: str = typer.Option(..., "--champion-run", help="Run answered by the champion."),
        challenger_run: str = typer.Option(..., "--challenger-run", help="Run answered by the challenger."),
        name: str = typer.Option(..., "--name", help="Shadow session name."),
        split: list[str] = typer.Option(
            None,
            "--split",
            help="Splits to replay (repeatable; default: test — each side's policy is fitted on the calibration "
            "split, so replaying it would judge the policies on their own fitting data).",
        ),
        replace: bool = typer.Option(False, "--replace"),
        as_json: bool = AS_JSON,
    ) -> None:
        """Replay a dataset's test split (or --split) through champion and challenger (two stored runs) as a
        shadow session."""
        from workbench.store.shadow import replay_runs

        with open_store() as con:
            sides = {"champion_run": champion_run, "challenger_run": challenger_run}
            s = replay_runs(con, shadow=name, splits=split or ["test"], replace=replace, **sides)
        emit_created(
            s, as_json, name, f"shadow [bold]{name}[/]: {s['n_requests']} items replayed, {s['n_outcomes']} outcomes"
        )

    @sh.command("export")
    def export_(
        name: str = typer.Argument(..., help="Shadow session."),
        out: Path = typer.Option(..., "--out", "-o", help="Traffic file: .jsonl, .parquet or .csv."),
        force: bool = FORCE,
        as_json: bool = AS_JSON,
    ) -> None:
        """Write a session as a traffic file (the format `shadow import` reads)."""
        from workbench.store.shadow import export_session

        check_out_path(out, force=force)
        with open_store(read_only=True) as con:
            n = export_session(con, name, out)
        if as_json:
            emit_json({"shadow": name, "out": str(out), "n_requests": n})
        else:
            err_console.print(f"{n} requests of {name} written to {out}")

    @sh.command("list")
    def list_(as_json: bool = AS_JSON) -> None:
        """Shadow sessions in the store."""
        from workbench.store.shadow import list_sessions

        with open_store(read_only=True) as con:
            df = list_sessions(con)
        if as_json:
            emit_json(df.to_dict(orient="records"))
        else:
            out_console.print(df.to_string(index=False) if not df.empty else "no shadow sessions")

    @sh.command("report")
    @threshold_options("shadow report")
    def report_(
        name: str = typer.Argument(..., help="Shadow session."),
        champion_policy: Path | None = typer.Option(
            None, "--champion-policy", help="Policy file of the champion (else its logged actions)."
        ),
        challenger_policy: Path | None = typer.Option(
            None, "--challenger-policy", help="Policy file the challenger would ship with."
        ),
        champion_rule: list[str] = typer.Option(
            None, "--champion-rule", help="QUESTION:tau=0.9,margin=0.1 (or tau_yes/tau_no); repeatable."
        ),
        challenger_rule: list[str] = typer.Option(None, "--challenger-rule", help="As --champion-rule."),
        question: list[str] = typer.Option(None, "--question", help="Only these questions."),
        max_error_increase: float = typer.Option(
            0.0, "--max-error-increase", help="Largest acceptable rise of error among auto-accepted."
        ),
        min_coverage_gain: float = typer.Option(
            0.0, "--min-coverage-gain", help="Smallest auto-accept rate gain worth a rollout."
        ),
        max_p95_latency_ms: float | None = typer.Option(None, "--max-p95-latency-ms"),
        max_cost_increase: float | None = typer.Option(None, "--max-cost-increase", help="USD per 1,000 requests."),
        max_failure_rate: float = typer.Option(
            0.01,
            "--max-failure-rate",
            help="Largest share of requests the challenger failed while the champion answered the same request.",
        ),
        min_outcomes: int = typer.Option(100, "--min-outcomes", help="Known outcomes needed to judge error."),
        max_drift_psi: float = typer.Option(0.25, "--max-drift-psi"),
        windows: int = typer.Option(5, "--windows", help="Drift windows (equal counts in arrival order)."),
        period: str | None = typer.Option(
            None, "--period", help="Drift windows by calendar period instead, e.g. 1h, 1D, 15min."
        ),
        n_boot: int = typer.Option(1000, "--n-boot"),
        seed: int = typer.Option(0, "--seed"),
        slices: list[str] = slice_option("report", " (metadata: replayed sessions; state_length: any session)"),
        as_json: bool = AS_JSON,
        *,
        options: ThresholdOptions,
    ) -> None:
        """Agreement, flips, directional disagreements, review load, error, cost, latency, drift, verdict.

        A side given no policy file or rule routes with the policy certified on its run (replayed
        sessions) at --max-error / --delta / --calibrate: the defaults of `workbench thresholds`."""
        from workbench.shadow.policies import load_side_policy, parse_rule_options
        from workbench.shadow.report import Criteria, shadow_report

        criteria = Criteria(
            max_error_increase=max_error_increase,
            min_coverage_gain=min_coverage_gain,
            max_p95_latency_ms=max_p95_latency_ms,
            max_cost_increase_per_1000=max_cost_increase,
            max_failure_rate=max_failure_rate,
            min_outcomes=min_outcomes,
            max_drift_psi=max_drift_psi,
        )
        champ = load_side_policy(champion_policy) if champion_policy else parse_rule_options(champion_rule)
        chall = load_side_policy(challenger_policy) if challenger_policy else parse_rule_options(challenger_rule)
        with open_store(read_only=True) as con:
            report = shadow_report(
                con,
                name,
                champion_policy=champ,
                challenger_policy=chall,
                criteria=criteria,
                questions=question or None,
                n_windows=windows,
                n_boot=n_boot,
                seed=seed,
                period=period,
                options=options,
                slices=slices or None,
            )
        if as_json:
            emit_json(report.to_dict())
            return
        out_console.print(report.to_text(), markup=False, highlight=False, soft_wrap=True)

    @sh.command("rerun")
    def rerun_(
        name: str = typer.Argument(..., help="Shadow session whose logged states the challenger answers."),
        challenger: str = typer.Option(..., "--challenger", help="Provider spec of the new challenger."),
        out_name: str | None = typer.Option(None, "--name", help="New session name (default SESSION+MODEL)."),
        concurrency: int = typer.Option(8, "--concurrency"),
        replace: bool = typer.Option(False, "--replace", help="Overwrite an existing session of that name."),
        as_json: bool = AS_JSON,
    ) -> None:
        """Run a new challenger over a session's logged states, in one step: a new session pairs the
        logged champion with the new run (then `workbench shadow report NEW`)."""
        from workbench.reporting import RichReporter
        from workbench.shadow.rerun import rerun_session

        with open_store() as con:
            s = rerun_session(
                con,
                name,
                challenger,
                name=out_name,
                concurrency=concurrency,
                progress=not as_json,
                reporter=RichReporter(err_console),
                replace=replace,
            )
        if as_json:
            emit_json(s)
            return
        print_id(s["shadow"])
        err_console.print(
            f"shadow [bold]{s['shadow']}[/]: {s['n_requests']} requests answered by {challenger} "
            f"({s['run_id']}), {plural(s['n_outcomes'], 'outcome')}; next: workbench shadow report {s['shadow']}"
        )
