"""`workbench schema validate|hash`."""

from __future__ import annotations

from pathlib import Path

import typer

from workbench.cli.common import AS_JSON, emit_json, err_console, out_console
from workbench.wording import plural


def register(app: typer.Typer) -> None:
    sc = typer.Typer(help="Check decision schema files.", no_args_is_help=True)
    app.add_typer(sc, name="schema")

    @sc.command("validate")
    def validate(
        file: Path,
        profile: str = typer.Option(
            "default",
            "--profile",
            help="cloudflare-clef, typesafe-jev, perplexity, laya, subq, openai, self-hosted or default (strictest).",
        ),
        as_json: bool = AS_JSON,
    ) -> None:
        """Validate FILE against a provider family's limits; exit 1 on violations."""
        from workbench.schema import load_schema, option_ids, validate_limits

        schema = load_schema(file)
        violations = validate_limits(schema, profile)
        doc = {
            "file": str(file),
            "profile": profile,
            "valid": not violations,
            "schema_hash": schema.hash,
            "questions": {q: {"type": v.type, "n_options": len(option_ids(v))} for q, v in schema.questions.items()},
            "violations": [
                {"question": v.question_id, "field": v.field, "message": v.message, "limit": v.limit}
                for v in violations
            ],
        }
        if as_json:
            emit_json(doc)
        else:
            for v in violations:
                err_console.print(f"{file}: {v}")
            if not violations:
                out_console.print(
                    f"{file}: valid under {profile} ({plural(len(schema.questions), 'question')}, hash {schema.hash[:12]})"
                )
        if violations:
            raise typer.Exit(1)

    @sc.command("hash")
    def hash_(file: Path) -> None:
        """Print the schema hash (sha256 of the canonical form)."""
        from workbench.schema import load_schema

        print(load_schema(file).hash)
