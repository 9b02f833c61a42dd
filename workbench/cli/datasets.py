"""`workbench datasets import|list|show`."""

from __future__ import annotations

from pathlib import Path

import typer

from workbench.cli.common import AS_JSON, emit_json, err_console, open_store, out_console, print_id, print_table
from workbench.errors import DataImportError
from workbench.wording import plural


def _pairs(values: list[str] | None, option: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for v in values or []:
        key, sep, val = v.partition("=")
        if not sep or not key.strip() or not val.strip():
            raise DataImportError(f"{option} {v!r} is not QUESTION=VALUE", hint=f"e.g. {option} intent=category")
        out[key.strip()] = val.strip()
    return out


def _votes(values: list[str] | None) -> dict[str, dict[str, str]]:
    """``Q=OPT:COL,OPT:COL`` (or ``Q=COL,COL`` when each column is named like its option) → {Q: {OPT: COL}}."""
    out: dict[str, dict[str, str]] = {}
    for question, spec in _pairs(values, "--label-votes").items():
        columns: dict[str, str] = {}
        for part in spec.split(","):
            option, sep, col = part.partition(":")
            option, col = option.strip(), (col.strip() if sep else option.strip())
            if not option or not col:
                raise DataImportError(
                    f"--label-votes {question}={spec!r}: {part!r} is not OPTION:COLUMN or COLUMN",
                    hint=f"e.g. --label-votes {question}=yes:n_yes,no:n_no",
                )
            if option in columns:
                raise DataImportError(
                    f"--label-votes {question}: option {option!r} is given twice (columns {columns[option]!r} and "
                    f"{col!r})",
                    hint="one count column per option",
                )
            columns[option] = col
        out[question] = columns
    return out


def register(app: typer.Typer) -> None:
    ds = typer.Typer(help="Import, list and inspect labelled datasets.", no_args_is_help=True)
    app.add_typer(ds, name="datasets")

    @ds.command("import")
    def import_(
        paths: list[Path] = typer.Argument(..., help="CSV, TSV, Parquet, JSON or JSONL file(s); one transaction."),
        name: str = typer.Option(..., "--name", help="Dataset name."),
        text_column: str | None = typer.Option(None, "--text-column", help="Column holding the text state."),
        state_column: str | None = typer.Option(None, "--state-column", help="Column holding a JSON state."),
        label: list[str] = typer.Option(None, "--label", help="QUESTION=COLUMN (repeatable)."),
        id_column: str | None = typer.Option(None, "--id-column"),
        split_column: str | None = typer.Option(None, "--split-column"),
        split: str | None = typer.Option(None, "--split", help="Put every row in this split."),
        test_fraction: float | None = typer.Option(None, "--test-fraction"),
        calibration_fraction: float | None = typer.Option(None, "--calibration-fraction", help="Carved out of train."),
        seed: int = typer.Option(0, "--seed"),
        group_column: str | None = typer.Option(None, "--group-column", help="Rows sharing a group stay in one split."),
        image_column: str | None = typer.Option(None, "--image-column", help="';'-separated image references."),
        positive: list[str] = typer.Option(None, "--positive", help="QUESTION=VALUE meaning yes (noul)."),
        annotator_column: str | None = typer.Option(
            None,
            "--annotator-column",
            help="Long format: one row per annotator per item (needs --id-column); every vote is kept.",
        ),
        label_votes: list[str] = typer.Option(
            None,
            "--label-votes",
            help="Wide format: QUESTION=OPTION:COUNT_COLUMN,… (or QUESTION=COL,… when columns are named like the"
            " options); each column holds how many annotators chose that option (repeatable).",
        ),
        meta_column: list[str] = typer.Option(
            None,
            "--meta-column",
            help="Keep this column as item metadata, for `report --slice COL` (repeatable; part of the version).",
        ),
        schema: Path | None = typer.Option(
            None,
            "--schema",
            help="Decision schema (YAML/JSON) the labels must fit, stored with the version: each --label QUESTION"
            " must be one of its questions and each label one of its options (yes/no questions also take"
            " true/false/1/0, score questions a level's text); its option order breaks majority-vote ties."
            " Without it, labels are stored as given (trimmed; blank/NaN: unlabelled). Either way the import"
            " streams through DuckDB when the columns allow.",
        ),
        append: bool = typer.Option(False, "--append", help="Add the rows to the latest version."),
        profile: str = typer.Option("default", "--profile", help="Limit profile the --schema must meet."),
        as_json: bool = AS_JSON,
    ) -> None:
        """Import labelled items (one new dataset version, all or nothing)."""
        from workbench.schema import load_schema
        from workbench.store.datasets import dataset_info, import_dataset
        from workbench.store.import_spec import ImportSpec

        spec = ImportSpec(
            name=name,
            text_column=text_column,
            state_column=state_column,
            labels=_pairs(label, "--label"),
            id_column=id_column,
            split_column=split_column,
            split=split,
            test_fraction=test_fraction,
            calibration_fraction=calibration_fraction,
            seed=seed,
            group_column=group_column,
            image_column=image_column,
            positive=_pairs(positive, "--positive"),
            annotator_column=annotator_column,
            label_votes=_votes(label_votes),
            meta_columns=list(meta_column or []),
            append=append,
        )
        sch = load_schema(schema) if schema else None
        if sch is not None:
            from workbench.schema.questions import check_limits

            check_limits(sch, profile, source=str(schema))
        with open_store() as con:
            result = import_dataset(con, paths, spec, sch)
            info = dataset_info(con, name, result.version)
        for notice in result.notices:
            err_console.print(f"[yellow]note:[/] {notice}", markup=True, highlight=False)
        if as_json:
            emit_json({"import": result.to_dict(), "dataset": info})
            return
        verb = "imported" if result.created else "unchanged (same fingerprint as)"
        shared = "" if result.shared_ids is None else f", {result.shared_ids:,} ids shared with the previous version"
        err_console.print(
            f"{verb} [bold]{name}[/] v{result.version}: {plural(result.n_items, 'item')} "
            f"({_split_counts(info['splits'])}), fingerprint {result.fingerprint[:12]}{shared}"
        )
        print_id(name)  # what `run --dataset` takes (its latest version)

    @ds.command("list")
    def list_(as_json: bool = AS_JSON) -> None:
        """Datasets in the store (latest version of each)."""
        from workbench.store.datasets import list_datasets

        with open_store() as con:
            df = list_datasets(con)
        if as_json:
            emit_json(df.to_dict(orient="records"))
            return
        from rich.table import Table

        t = Table()
        # the name is what other commands take: it never shrinks; the question list wraps instead
        t.add_column("name", no_wrap=True, min_width=max([4, *(len(str(n)) for n in df["name"])]))
        for col in ("version", "versions", "items"):
            t.add_column(col, justify="right", no_wrap=True)
        t.add_column("questions", overflow="fold", ratio=1)
        t.add_column("fingerprint", no_wrap=True)
        for r in df.to_dict(orient="records"):
            t.add_row(
                str(r["name"]),
                str(r["version"]),
                str(r["versions"]),
                str(r["n_items"]),
                ", ".join(map(str, r["questions"])),
                str(r["fingerprint"])[:12],
            )
        print_table(t)

    @ds.command("show")
    def show(name: str, version: int | None = typer.Option(None, "--version"), as_json: bool = AS_JSON) -> None:
        """Counts per split and per label, questions, fingerprint and versions."""
        from workbench.store.datasets import dataset_info

        with open_store() as con:
            info = dataset_info(con, name, version)
        if as_json:
            emit_json(info)
            return
        out_console.print(
            f"[bold]{info['name']}[/] v{info['version']}  fingerprint {info['fingerprint'][:16]}  "
            f"items {info['n_items']:,}  splits: {_split_counts(info['splits'])}"
        )
        for q, d in info["labels"].items():
            top = ", ".join(f"{k} {v}" for k, v in list(d["label_counts"].items())[:8])
            votes = ""
            if d.get("items_with_several_votes"):
                who = plural(d["n_annotators"], "annotator") if d["n_annotators"] else "anonymous counts"
                votes = f" ({plural(d['n_votes'], 'vote')}, {d['votes_per_item']:.2f} per item, {who})"
            out_console.print(
                f"  {q}: {plural(d['n_labels'], 'label')}{votes}; {top}{' …' if d['n_labels'] > 8 else ''}"
            )
        out_console.print(f"  versions: {', '.join(str(v['version']) for v in info['versions'])}")


def _split_counts(splits: dict) -> str:
    """``{"train": 800, "test": 200}`` → ``"train 800 · test 200"`` (no Python dict in what people read)."""
    return " · ".join(f"{k} {v:,}" for k, v in splits.items()) or "no split"
