"""`--out` paths: never a directory, never an existing file unless `--force` (one rule for every command)."""

from __future__ import annotations

from pathlib import Path

import typer

from workbench.errors import OptionError

#: The `--force` option every command with `--out` takes.
FORCE = typer.Option(False, "--force", help="Overwrite the --out file if it exists.")


def check_out_path(path: Path, *, force: bool, option: str = "--out") -> Path:
    """Refuse a directory, a non-regular file, or an existing file without ``force``; returns ``path``.

    Checked before any work starts, so a refused command writes nothing and costs nothing.
    """
    if path.is_dir():
        raise OptionError(f"{option} {path}: is a directory", hint=f"give a file path, e.g. {path / 'out.json'}")
    if path.exists() or path.is_symlink():
        if not path.is_file():
            raise OptionError(f"{option} {path}: exists and is not a regular file", hint="choose another path")
        if not force:
            raise OptionError(
                f"{option} {path}: file exists", hint="pass --force to overwrite it, or choose another path"
            )
    parent = path.parent
    if parent.exists() and not parent.is_dir():
        raise OptionError(f"{option} {path}: {parent} is not a directory", hint="choose another path")
    return path
