"""The datasets shipped in the checkout (``datasets/``) and how to import each of them.

:func:`bundled_dataset` returns the keyword arguments of :func:`workbench.import_dataset` for a
bundled dataset, so the demo, the notebooks and the docstring examples import them the same way.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from workbench.errors import NotFoundError

#: name → (files under datasets/<name>/, import settings, schema file under experiments/schemas/)
_BUNDLED: dict[str, tuple[tuple[str, ...], dict[str, Any], str]] = {
    "banking77": (
        ("train.csv", "test.csv"),
        {"text_column": "text", "labels": {"intent": "category"}, "calibration_fraction": 0.2, "seed": 0},
        "banking77.yaml",
    ),
    "hwu64": (
        ("hwu64_kfold1.csv",),
        {
            "text_column": "text",
            "id_column": "id",
            "split_column": "split",
            "labels": {"scenario": "scenario", "intent": "label"},
            "calibration_fraction": 0.2,
            "seed": 0,
        },
        "hwu64.yaml",
    ),
    "sms_spam": (
        ("sms_spam.csv",),
        {
            "text_column": "text",
            "id_column": "id",
            "labels": {"spam": "label"},
            "positive": {"spam": "spam"},
            "test_fraction": 0.3,
            "calibration_fraction": 0.3,
            "seed": 0,
        },
        "sms_spam.yaml",
    ),
}

BUNDLED = tuple(_BUNDLED)


def repo_root() -> Path:
    """The checkout the package is installed from (editable install: the parent of ``workbench/``)."""
    return Path(__file__).resolve().parents[1]


def bundled_dir(name: str) -> Path:
    """``datasets/<name>`` of the checkout (``WORKBENCH_DATASETS`` overrides the parent folder)."""
    base = Path(os.environ.get("WORKBENCH_DATASETS", repo_root() / "datasets"))
    path = base / name
    if not path.is_dir():
        raise NotFoundError(
            f"bundled dataset {name!r} not found in {base}",
            hint="run from a checkout (datasets/ ships with it) or set WORKBENCH_DATASETS",
        )
    return path


def bundled_files(name: str) -> list[Path]:
    """The data files of bundled dataset ``name``."""
    if name not in _BUNDLED:
        raise NotFoundError(f"no bundled dataset {name!r}", hint=f"choose from {', '.join(BUNDLED)}")
    d = bundled_dir(name)
    return [d / f for f in _BUNDLED[name][0]]


def bundled_schema_file(name: str) -> Path:
    """``experiments/schemas/<name>.yaml``: the decision schema shipped with bundled dataset ``name``."""
    if name not in _BUNDLED:
        raise NotFoundError(f"no bundled dataset {name!r}", hint=f"choose from {', '.join(BUNDLED)}")
    return repo_root() / "experiments" / "schemas" / _BUNDLED[name][2]


def bundled_dataset(name: str) -> dict[str, Any]:
    """Keyword arguments of :func:`workbench.import_dataset` for bundled dataset ``name``.

    ``paths`` are the files, ``name`` the dataset name, the rest the import settings (text and label
    columns, a seeded calibration split carved out of train, the ``yes`` value of yes/no labels).

    Examples
    --------
    >>> import workbench as wb
    >>> spec = wb.bundled_dataset("sms_spam")
    >>> spec["labels"], spec["positive"]
    ({'spam': 'label'}, {'spam': 'spam'})
    >>> [p.name for p in spec["paths"]]
    ['sms_spam.csv']
    """
    files = bundled_files(name)
    settings = _BUNDLED[name][1]
    return {"paths": files, "name": name, **{k: (dict(v) if isinstance(v, dict) else v) for k, v in settings.items()}}
