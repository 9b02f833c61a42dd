"""`workbench policy export|schema|validate|apply|diff`."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from workbench.cli.common import emit_json, err_console, open_store, out_console
from workbench.cli.thresholds import (
    ABSTAIN,
    API_COST,
    CAL_FRACTION,
    CALIBRATE,
    CLASS_ERROR_COST,
    COST_MATRIX,
    DELTA,
    ERROR_COST,
    FALLBACK,
    GRID,
    LEVEL,
    MAX_ERROR,
    METHOD,
    OBJECTIVE,
    ORDER_FRACTION,
    PATHS,
    PER_CLASS,
    REVIEW_COST,
    SEED,
    STARTS,
    TARGET_COVERAGE,
    TARGET_ERROR,
    OptionError,
    build_options,
    certified_word,
)
from workbench.errors import PolicyError


def _read_responses(path: Path) -> tuple[list, bool]:
    """One System One response (JSON object), a JSON list, or JSONL; returns (responses, was_batch)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise OptionError(f"--answers {path}: file does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise OptionError(f"--answers {path}: cannot read ({exc})") from None
    try:
        doc = json.loads(text)
        if isinstance(doc, list):
            return doc, True
        return [doc], False
    except json.JSONDecodeError:
        pass
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError as exc:
            raise OptionError(
                f"--answers {path}: line {n} is not JSON ({exc.msg})",
                hint="give one response object, a JSON list, or JSON Lines",
            ) from None
    return out, True


def register(app: typer.Typer) -> None:
    pol = typer.Typer(help="Export, validate, apply and diff threshold policy files.", no_args_is_help=True)
    app.add_typer(pol, name="policy")

    @pol.command("export")
    def export(
        run_id: str = typer.Argument(..., help="Run id (or name)."),
        question: list[str] = typer.Option(..., "--question", "-q", help="Question id (repeatable)."),
        out: Path = typer.Option(..., "--out", "-o", help="Policy file to write."),
        fmt: str = typer.Option(
            "workbench",
            "--format",
            help="workbench | jev-eval (writes both files: the policy and jev-eval's thresholds.json v1).",
        ),
        jev_out: Path | None = typer.Option(
            None, "--jev-out", help="Where to write thresholds.json (default: next to --out)."
        ),
        policy_version: str = typer.Option("1.0.0", "--policy-version", help="Semantic version of this policy."),
        max_state_tokens: int | None = typer.Option(
            None, "--max-state-tokens", help="Validity: larger states route to the fallback."
        ),
        any_model: bool = typer.Option(False, "--any-model", help="Do not bind the policy to the run's model."),
        created_by: str | None = typer.Option(None, "--created-by"),
        objective: str = OBJECTIVE,
        max_error: float = MAX_ERROR,
        delta: float = DELTA,
        method: str = METHOD,
        calibrate: str = CALIBRATE,
        per_class: bool = PER_CLASS,
        review_cost: float = REVIEW_COST,
        error_cost: float = ERROR_COST,
        class_error_cost: list[str] | None = CLASS_ERROR_COST,
        cost_matrix: Path | None = COST_MATRIX,
        api_cost: float | None = API_COST,
        target_coverage: float | None = TARGET_COVERAGE,
        target_error: float | None = TARGET_ERROR,
        grid: int = GRID,
        paths: int = PATHS,
        starts: int = STARTS,
        abstain_option: list[str] | None = ABSTAIN,
        level: str = LEVEL,
        fallback: str = FALLBACK,
        calibrator_fraction: float = CAL_FRACTION,
        seed: int = SEED,
        order_fraction: float = ORDER_FRACTION,
        as_json: bool = typer.Option(False, "--json"),
    ) -> None:
        """Choose thresholds for a run's questions and write a versioned, hashed policy file."""
        from workbench.policy.build import build_policy
        from workbench.policy.io import write_jev_thresholds, write_policy
        from workbench.policy.model import semver_tuple

        if fmt not in ("workbench", "jev-eval"):
            raise OptionError(f"--format {fmt!r} is not workbench or jev-eval")
        try:
            semver_tuple(policy_version)
        except ValueError:
            raise OptionError(
                f"--policy-version {policy_version!r} is not a semantic version",
                hint="use MAJOR.MINOR.PATCH, e.g. 1.2.0",
            ) from None
        opts = build_options(
            objective=objective,
            max_error=max_error,
            delta=delta,
            method=method,
            calibrate=calibrate,
            per_class=per_class,
            review_cost=review_cost,
            error_cost=error_cost,
            class_error_cost=class_error_cost,
            cost_matrix=cost_matrix,
            api_cost=api_cost,
            target_coverage=target_coverage,
            target_error=target_error,
            grid=grid,
            paths=paths,
            starts=starts,
            abstain_option=abstain_option,
            level=level,
            fallback=fallback,
            calibrator_fraction=calibrator_fraction,
            seed=seed,
            order_fraction=order_fraction,
        )
        with open_store(read_only=True) as con:
            try:
                model, results = build_policy(
                    con,
                    run_id,
                    question,
                    opts,
                    policy_version=policy_version,
                    max_state_tokens=max_state_tokens,
                    created_by=created_by,
                    bind_model=not any_model,
                )
            except ValueError as exc:  # pydantic: e.g. a bad --policy-version
                raise PolicyError(f"cannot build the policy: {str(exc).splitlines()[0]}") from None
            model = write_policy(model, out)
            jev_warnings: list[str] = []
            if fmt == "jev-eval":
                from workbench.policy.build import jev_gate_metrics_on_run

                target = jev_out or out.with_name("thresholds.json")
                jev_warnings = write_jev_thresholds(
                    model, target, jev_gate_metrics_on_run(con, model.source.run_id or run_id)
                )
        doc = {
            "path": str(out),
            "content_hash": model.content_hash,
            "policy_version": model.policy_version,
            "run_id": model.source.run_id,
            "settings": opts.settings(),
            "certified": all(r.certified for r in results.values()),
            "questions": {
                q: {
                    "rule": qp.rule.model_dump(),
                    "certified": results[q].certified,
                    "feasible": qp.objective.feasible,
                    "test_error": qp.expected_test.error.value if qp.expected_test else None,
                    "test_coverage": qp.expected_test.coverage.value if qp.expected_test else None,
                    "calibration_size_needed": results[q].needed,
                }
                for q, qp in model.questions.items()
            },
        }
        if fmt == "jev-eval":
            warnings = jev_warnings
            doc["jev_eval"] = {
                "path": str(target),
                "warnings": warnings,
                "cannot_carry": "margins, two-sided yes/no thresholds, per-class thresholds, "
                "guarantees and calibrators (see the file's 'workbench' key)",
            }
            for w in warnings:
                err_console.print(f"[yellow]warning:[/yellow] {w}")
        if as_json:
            emit_json(doc)
        else:
            from workbench.thresholds.choose import needed_sentence

            out_console.print(
                f"wrote {out} ({str(model.content_hash)[:19]}…, version {model.policy_version}) from run "
                f"{model.source.run_id or run_id}; {opts.describe()}",
                highlight=False,
            )
            for q, d in doc["questions"].items():
                res = results[q]
                state = certified_word({"certified": res.certified, "objective": res.options.objective})
                out_console.print(f"  {q}: {state}; rule {json.dumps(d['rule'])}", highlight=False, soft_wrap=True)
                if res.needed:
                    out_console.print(f"  {q}: {needed_sentence(res.needed)}", highlight=False, soft_wrap=True)
            if "jev_eval" in doc:
                out_console.print(f"wrote {doc['jev_eval']['path']} (jev-eval thresholds.json v1)")

    @pol.command("schema")
    def schema() -> None:
        """Print the JSON Schema of policy files (as shipped in the package)."""
        from workbench.policy.io import shipped_schema

        emit_json(shipped_schema())

    @pol.command("validate")
    def validate(
        file: Path = typer.Argument(..., help="Policy file."), as_json: bool = typer.Option(False, "--json")
    ) -> None:
        """Check JSON Schema, format version and content hash (exit 2 if anything is wrong)."""
        from workbench.policy.io import validate_file

        report = validate_file(file)
        if as_json:
            emit_json(report)
        else:
            out_console.print(
                f"{file}: valid policy {report['policy_version']} ({report['content_hash'][:19]}…), "
                f"questions {', '.join(report['questions'])}"
            )

    @pol.command("apply")
    def apply(
        file: Path = typer.Argument(..., help="Policy file."),
        answers: Path = typer.Option(
            ..., "--answers", help="A System One response, a JSON list of them, or JSON Lines."
        ),
        schema_hash: str | None = typer.Option(
            None, "--schema-hash", help="Hash of the schema the requests were sent with."
        ),
        as_json: bool = typer.Option(False, "--json"),
    ) -> None:
        """The action per question (accept with option, or the fallback) with the reason."""
        from workbench.policy.runtime import Policy

        policy = Policy.load(file)
        responses, batch = _read_responses(answers)
        decisions = policy.decide_many(responses, schema_hash=schema_hash)
        rows = [{q: d.to_dict() for q, d in dec.items()} for dec in decisions]
        counts: dict[str, dict[str, int]] = {}
        for dec in decisions:
            for q, d in dec.items():
                counts.setdefault(q, {}).setdefault(d.action, 0)
                counts[q][d.action] += 1
        doc = {
            "policy": policy.content_hash,
            "policy_version": policy.version,
            "decisions": rows if batch else rows[0],
            "counts": counts,
        }
        if as_json:
            emit_json(doc)
        else:
            for i, dec in enumerate(decisions):
                for q, d in dec.items():
                    what = f"accept {d.option}" if d.accepted else d.action
                    out_console.print(f"{i}\t{q}\t{what}\t{d.reason}")

    @pol.command("diff")
    def diff(
        a: Path = typer.Argument(...),
        b: Path = typer.Argument(...),
        run: str | None = typer.Option(None, "--run", help="Also apply both to this run's test items."),
        split: list[str] = typer.Option(["test"], "--split", help="Splits of --run to use."),
        as_json: bool = typer.Option(False, "--json"),
    ) -> None:
        """What changed between two policies, and how coverage/error move on a run."""
        from workbench.policy.io import diff_policies
        from workbench.policy.runtime import Policy

        pa, pb = Policy.load(a), Policy.load(b)
        doc = diff_policies(pa.model, pb.model)
        if run:
            from workbench.policy.build import diff_on_run

            with open_store(read_only=True) as con:
                doc["on_run"] = diff_on_run(con, pa.model, pb.model, run, splits=split)
        if as_json:
            emit_json(doc)
            return
        if doc["identical"]:
            out_console.print("identical policies")
            return
        out_console.print(f"{a} ({doc['version']['a']}) -> {b} ({doc['version']['b']})")

        def rank(path: str) -> int:  # behaviour first: rules, calibrators, validity; then figures
            for i, key in enumerate((".rule.", ".calibrator.type", "validity", "decision_schema", "source")):
                if key in path:
                    return i
            return 9

        noise = (".low", ".high", ".k", ".n", ".confidence")
        for c in sorted(doc["changes"], key=lambda c: rank(c["path"])):
            if ".expected_test." in c["path"] and c["path"].endswith(noise):
                continue  # the JSON output has every interval bound; the text shows values
            out_console.print(f"  {c['path']}: {json.dumps(c['a'])} -> {json.dumps(c['b'])}")
        for q, m in (doc.get("on_run") or {}).get("questions", {}).items():
            if "coverage_change" in m:
                ec = m["error_change"]
                out_console.print(
                    f"  on {run}: {q}: coverage {m['coverage_change']:+.4f}, error "
                    f"{'n/a' if ec is None else f'{ec:+.4f}'}"
                )
