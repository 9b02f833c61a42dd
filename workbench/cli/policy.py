"""`workbench policy export|schema|validate|apply|diff|keygen|sign|verify|enable|disable|mode`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from workbench.cli.common import emit_json, emit_result, err_console, open_store, out_console
from workbench.cli.outputs import FORCE, check_out_path
from workbench.cli.threshold_options import threshold_options
from workbench.cli.thresholds import certified_word
from workbench.errors import OptionError, PolicyError
from workbench.wording import plural

if TYPE_CHECKING:
    from workbench.thresholds.options import ThresholdOptions


def _read_json_records(path: Path, flag: str) -> tuple[list, bool]:
    """One JSON object, a JSON list, or JSON Lines; returns (records, was_batch).

    Parsed strictly: an object that names a key twice is kept but marked, so the runtime refuses that
    record alone (:func:`workbench_runtime.jsonio.loads_marked`); NaN and malformed text are errors.
    """
    from workbench_runtime.jsonio import StrictJSONError, loads_marked

    try:
        if not Path(path).is_file():
            raise OptionError(f"{flag} {path}: file does not exist or is not a regular file")
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise OptionError(f"{flag} {path}: cannot read ({type(exc).__name__})") from None
    try:
        doc = loads_marked(text)
        return (doc, True) if isinstance(doc, list) else ([doc], False)
    except StrictJSONError:
        pass
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            out.append(loads_marked(line))
        except StrictJSONError as exc:
            raise OptionError(
                f"{flag} {path}: line {n} is not JSON ({exc})",
                hint="give one JSON object, a JSON list, or JSON Lines",
            ) from None
    return out, True


def _read_responses(path: Path) -> tuple[list, bool]:
    """One System One response (JSON object), a JSON list, or JSONL; returns (responses, was_batch)."""
    return _read_json_records(path, "--answers")


def _write_rollout(file: Path, out: Path | None, change, key: Path | None, as_json: bool) -> None:
    """Write a rollout change (re-signed with ``key``, else without the now stale signature) and report it."""
    from workbench.policy.io import write_policy

    target = out or file
    signed_before = change.model.signature is not None or _was_signed(file)
    written = change.model
    if change.changed:
        written = write_policy(change.model, target, key=key)
        if key is None and signed_before:
            err_console.print(
                f"[yellow]warning:[/yellow] {file} was signed; the signature no longer matches the changed policy "
                f"and was removed — re-sign it: workbench policy sign {target} --key KEYFILE"
            )
    doc = {
        "path": str(target),
        "changed": change.changed,
        "content_hash": written.content_hash,
        "policy_version": written.policy_version,
        "question": change.question,
        "enabled_options": {"before": change.enabled_before, "after": change.enabled_after},
        "mode": {"before": change.mode_before, "after": change.mode_after},
        "signature": None
        if written.signature is None
        else {"alg": written.signature.alg, "key_id": written.signature.key_id},
    }
    if as_json:
        emit_json(doc)
        return
    if not change.changed:
        out_console.print(f"{file}: no change (version {written.policy_version})")
        return
    what = (
        f"mode {change.mode_before} -> {change.mode_after}"
        if change.mode_before != change.mode_after
        else f"{change.question}: enabled options "
        f"{'all' if change.enabled_before is None else ', '.join(change.enabled_before) or 'none'} -> "
        f"{'all' if change.enabled_after is None else ', '.join(change.enabled_after) or 'none'}"
    )
    signed = f", signed by {written.signature.key_id}" if written.signature else ""
    out_console.print(
        f"wrote {target} ({written.content_hash[:19]}…, version {written.policy_version}{signed}): {what}"
    )


def _was_signed(path: Path) -> bool:
    from workbench.policy.io import read_document

    return read_document(path).get("signature") is not None


def _load_for_rewrite(file: Path, key: Path | None):
    """The verified policy model; with ``key``, a signed file must verify with it (no laundering through a re-sign)."""
    from workbench.policy.io import read_document
    from workbench.policy.runtime import Policy

    doc = read_document(file)
    verify = key if key is not None and doc.get("signature") is not None else None
    return Policy.from_dict(doc, source=str(file), verify_key=verify).model


def _check_other_out(file: Path, out: Path | None, force: bool) -> None:
    """Rewriting FILE in place is the default; an explicit --out elsewhere follows the --out rule."""
    if out is not None and out.resolve() != file.resolve():
        check_out_path(out, force=force)


def _check_policy(file: Path, key: Path | None, as_json: bool, verify: bool) -> None:
    """`policy validate` (``verify``: `policy verify`): the report of :func:`validate_file`, or one line."""
    from workbench.policy.io import validate_file

    report = validate_file(file, verify_key=key)
    sig = report.get("signature") or {}
    if verify:
        text = f"{file}: signature by {sig['alg']} key {sig['key_id']} verified ({report['content_hash'][:19]}…)"
    else:
        text = (
            f"{file}: valid policy {report['policy_version']} ({report['content_hash'][:19]}…), "
            f"questions {', '.join(report['questions'])}"
            + (f"; signature by {sig['key_id']} verified" if key is not None else "")
            + (f"; mode {report['mode']}" if report["mode"] != "live" else "")
        )
    emit_result(report, as_json, text)


# Options of the commands that rewrite a policy file (enable, disable, mode).
RESIGN_KEY = typer.Option(None, "--key", help="Re-sign with this secret key file.")
REWRITE_OUT = typer.Option(None, "--out", "-o", help="Write here (default: in place).")


def _rewrite(file: Path, out: Path | None, key: Path | None, force: bool, as_json: bool, change) -> None:
    """Apply ``change`` (verified model -> rollout change) to a policy file, write it and report it."""
    _check_other_out(file, out, force)
    _write_rollout(file, out, change(_load_for_rewrite(file, key)), key, as_json)


def register(app: typer.Typer) -> None:
    pol = typer.Typer(help="Export, validate, apply and diff threshold policy files.", no_args_is_help=True)
    app.add_typer(pol, name="policy")

    @pol.command("export")
    @threshold_options("policy export")
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
        force: bool = FORCE,
        as_json: bool = typer.Option(False, "--json"),
        *,
        options: ThresholdOptions,
    ) -> None:
        """Choose thresholds for a run's questions and write a versioned, hashed policy file."""
        from workbench.policy.build import build_policy
        from workbench.policy.io import write_jev_thresholds, write_policy
        from workbench.policy.model import semver_tuple

        if fmt not in ("workbench", "jev-eval"):
            raise OptionError(f"--format {fmt!r} is not workbench or jev-eval")
        check_out_path(out, force=force)
        if fmt == "jev-eval":
            check_out_path(jev_out or out.with_name("thresholds.json"), force=force, option="--jev-out")
        try:
            semver_tuple(policy_version)
        except ValueError:
            raise OptionError(
                f"--policy-version {policy_version!r} is not a semantic version",
                hint="use MAJOR.MINOR.PATCH, e.g. 1.2.0",
            ) from None
        with open_store(read_only=True) as con:
            try:
                model, results = build_policy(
                    con,
                    run_id,
                    question,
                    options,
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
        doc: dict[str, Any] = {
            "path": str(out),
            "content_hash": model.content_hash,
            "policy_version": model.policy_version,
            "run_id": model.source.run_id,
            "settings": options.settings(),
            "certified": all(r.certified for r in results.values()),
            "questions": {
                q: {
                    "rule": qp.rule.model_dump(),
                    "certified": results[q].certified,
                    "feasible": qp.objective.feasible,
                    "test_error": qp.expected_test.error.value if qp.expected_test else None,
                    "test_coverage": qp.expected_test.coverage.value if qp.expected_test else None,
                    "calibration_size_needed": results[q].needed,
                    "costs": qp.objective.costs,
                    "constraints": (
                        None if qp.objective.constraints is None else [c.model_dump() for c in qp.objective.constraints]
                    ),
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
                err_console.print(f"[yellow]warning:[/yellow] {w}", soft_wrap=True)
        if as_json:
            emit_json(doc)
        else:
            from workbench.thresholds.options import needed_sentence

            out_console.print(
                f"wrote {out} ({model.content_hash}, version {model.policy_version}) from run "
                f"{model.source.run_id or run_id}; {options.describe()}",
                highlight=False,
                soft_wrap=True,
            )
            for q, d in doc["questions"].items():
                res = results[q]
                state = certified_word({"certified": res.certified, "objective": res.options.objective})
                out_console.print(f"  {q}: {state}; rule {json.dumps(d['rule'])}", highlight=False, soft_wrap=True)
                if res.needed:
                    out_console.print(f"  {q}: {needed_sentence(res.needed)}", highlight=False, soft_wrap=True)
                for c in d.get("constraints") or []:
                    out_console.print(
                        f"  {q}: constraint true {c['option']} accepted as another option <= {c['beta']}"
                        f" ({'certified jointly' if c.get('certified') else 'not certified'})",
                        highlight=False,
                        soft_wrap=True,
                    )
            if "jev_eval" in doc:
                out_console.print(f"wrote {doc['jev_eval']['path']} (jev-eval thresholds.json v1)")

    @pol.command("schema")
    def schema() -> None:
        """Print the JSON Schema of policy files (as shipped in the package)."""
        from workbench.policy.io import shipped_schema

        emit_json(shipped_schema())

    @pol.command("validate")
    def validate(
        file: Path = typer.Argument(..., help="Policy file."),
        key: Path | None = typer.Option(
            None, "--key", help="Also require a valid signature by this key file (public or secret key)."
        ),
        as_json: bool = typer.Option(False, "--json"),
    ) -> None:
        """Check JSON Schema, format version, content hash, options and (with --key) the signature; exit 2 if anything is wrong."""
        _check_policy(file, key, as_json, verify=False)

    @pol.command("apply")
    def apply(
        file: Path = typer.Argument(..., help="Policy file."),
        answers: Path = typer.Option(
            ..., "--answers", help="A System One response, a JSON list of them, or JSON Lines."
        ),
        schema_hash: str | None = typer.Option(
            None, "--schema-hash", help="Hash of the schema the requests were sent with."
        ),
        request: Path | None = typer.Option(
            None,
            "--request",
            help="The request(s) sent: one (for every response) or one per response (JSON list or JSON Lines); "
            "a question whose definition differs from the policy's goes to its fallback.",
        ),
        verify_key: Path | None = typer.Option(
            None, "--verify-key", help="Refuse the policy unless it is signed by this key file."
        ),
        as_json: bool = typer.Option(False, "--json"),
    ) -> None:
        """The action per question (accept with option, or the fallback) with the reason."""
        from workbench.policy.runtime import Policy

        policy = Policy.load(file, verify_key=verify_key)
        responses, batch = _read_responses(answers)
        requests = None
        if request is not None:
            requests, many = _read_json_records(request, "--request")
            if not many:
                requests = requests * len(responses)
            elif len(requests) != len(responses):
                raise OptionError(
                    f"--request {request}: {len(requests)} requests for {len(responses)} responses",
                    hint="give one request for all responses, or one per response in the same order",
                )
        decisions = policy.decide_many(responses, schema_hash=schema_hash, requests=requests)
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

        rollout = doc.get("rollout") or {}
        if rollout.get("mode"):
            out_console.print(f"  mode: {rollout['mode']['a']} -> {rollout['mode']['b']}")
        for q, r in (rollout.get("questions") or {}).items():
            moved = [f"+{o}" for o in r["enabled"]] + [f"-{o}" for o in r["disabled"]]
            out_console.print(
                f"  {q}: auto-accept enabled for {'all options' if r['b'] is None else plural(len(r['b']), 'option')} ({' '.join(moved)})"
            )
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

    @pol.command("keygen")
    def keygen(
        out: Path = typer.Option(..., "--out", "-o", help="Secret key file to create (Ed25519 also writes OUT.pub)."),
        key_type: str = typer.Option("ed25519", "--type", help="ed25519 (public-key) | hmac-sha256 (shared secret)."),
        force: bool = typer.Option(False, "--force", help="Replace existing key files."),
        as_json: bool = typer.Option(False, "--json"),
    ) -> None:
        """Make a key for signing policies; the secret file is created with mode 0600 and never printed."""
        from workbench_runtime.signing import ALGORITHMS, generate_key, write_secret_file

        alg = {"hmac": "hmac-sha256"}.get(key_type, key_type)
        if alg not in ALGORITHMS:
            raise OptionError(f"--type {key_type!r} is not one of {', '.join(ALGORITHMS)}")
        pub_path = out.with_name(out.name + ".pub") if alg == "ed25519" else None
        for p in (out, pub_path):
            if p is not None and p.exists():
                if not force:
                    raise OptionError(f"--out {p}: exists", hint="choose another path or pass --force")
                p.unlink()
        secret, public, key_id = generate_key(alg)
        try:
            write_secret_file(out, secret)
            if pub_path is not None and public is not None:
                write_secret_file(pub_path, public, mode=0o644)
        except OSError as exc:
            raise OptionError(f"--out {out}: cannot create key file ({type(exc).__name__})") from None
        doc = {
            "key_id": key_id,
            "type": alg,
            "secret_key": str(out),
            "public_key": None if pub_path is None else str(pub_path),
        }
        if as_json:
            emit_json(doc)
        else:
            out_console.print(f"{key_id}\t{alg}\tsecret key {out}" + (f", public key {pub_path}" if pub_path else ""))

    @pol.command("sign")
    def sign(
        file: Path = typer.Argument(..., help="Policy file (validated before it is signed)."),
        key: Path = typer.Option(..., "--key", help="Secret key file (Ed25519 private key or HMAC secret)."),
        out: Path | None = typer.Option(None, "--out", "-o", help="Write the signed policy here (default: in place)."),
        force: bool = FORCE,
        as_json: bool = typer.Option(False, "--json"),
    ) -> None:
        """Sign a policy over its canonical content (every field, option order included)."""
        from workbench.policy.io import sign_file

        _check_other_out(file, out, force)

        written = sign_file(file, key, out=out)
        assert written.signature is not None
        doc: dict[str, Any] = {
            "path": str(out or file),
            "content_hash": written.content_hash,
            "policy_version": written.policy_version,
            "signature": {"alg": written.signature.alg, "key_id": written.signature.key_id},
        }
        if as_json:
            emit_json(doc)
        else:
            out_console.print(
                f"signed {doc['path']} ({(written.content_hash or '')[:19]}…) with {written.signature.alg} key {written.signature.key_id}"
            )

    @pol.command("verify")
    def verify(
        file: Path = typer.Argument(..., help="Policy file."),
        key: Path = typer.Option(..., "--key", help="Key file: Ed25519 public (or private) key, or the HMAC secret."),
        as_json: bool = typer.Option(False, "--json"),
    ) -> None:
        """Check the signature (and everything `validate` checks); exit 2 if unsigned, wrongly signed or changed."""
        _check_policy(file, key, as_json, verify=True)

    def _rollout_command(enable: bool):
        def command(
            file: Path = typer.Argument(..., help="Policy file."),
            option: list[str] | None = typer.Option(None, "--option", help="Option id (repeatable)."),
            all_options: bool = typer.Option(False, "--all", help="Every option of the question."),
            question: str | None = typer.Option(None, "--question", "-q", help="Question (needed when ambiguous)."),
            key: Path | None = RESIGN_KEY,
            out: Path | None = REWRITE_OUT,
            force: bool = FORCE,
            as_json: bool = typer.Option(False, "--json"),
        ) -> None:
            from workbench.policy.rollout import set_enabled

            _rewrite(
                file,
                out,
                key,
                force,
                as_json,
                lambda model: set_enabled(
                    model, option or [], enable=enable, question=question, all_options=all_options
                ),
            )

        command.__doc__ = (
            "Enable auto-accept for options (gradual rollout); bumps the minor version."
            if enable
            else "Disable auto-accept for options (they go to the fallback); bumps the minor version."
        )
        return command

    pol.command("enable")(_rollout_command(True))
    pol.command("disable")(_rollout_command(False))

    @pol.command("mode")
    def mode(
        file: Path = typer.Argument(..., help="Policy file."),
        new_mode: str = typer.Argument(
            ..., metavar="live|shadow", help="shadow: everything to the fallback, would-be decisions recorded."
        ),
        key: Path | None = RESIGN_KEY,
        out: Path | None = REWRITE_OUT,
        force: bool = FORCE,
        as_json: bool = typer.Option(False, "--json"),
    ) -> None:
        """Switch a policy between live and shadow mode; bumps the minor version."""
        from workbench.policy.rollout import set_mode

        _rewrite(file, out, key, force, as_json, lambda model: set_mode(model, new_mode))
