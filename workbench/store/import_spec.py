"""What a dataset import is asked for and what it returns: :class:`ImportSpec`, :class:`DatasetInfo`.

Also the split roles and their file-name aliases, the annotator and vote limits, the keys an import
records in ``datasets.params``, and the check of a dataset's name. Every import module builds on this one.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workbench.errors import DataImportError

SPLITS = ("train", "calibration", "test")
#: Other spellings accepted in a split column or a file name.
SPLIT_ALIASES = {
    "train": "train",
    "training": "train",
    "calibration": "calibration",
    "calib": "calibration",
    "cal": "calibration",
    "validation": "calibration",
    "valid": "calibration",
    "val": "calibration",
    "dev": "calibration",
    "test": "test",
    "testing": "test",
    "eval": "test",
}


@dataclass
class ImportSpec:
    """What to read from the files (the CLI options of ``workbench datasets import``)."""

    name: str
    text_column: str | None = None
    state_column: str | None = None  # a JSON state instead of text
    labels: dict[str, str] = field(default_factory=dict)  # question -> column
    id_column: str | None = None
    split_column: str | None = None
    split: str | None = None  # every row of the file(s) gets this split
    test_fraction: float | None = None
    calibration_fraction: float | None = None
    seed: int = 0
    group_column: str | None = None
    image_column: str | None = None
    positive: dict[str, str] = field(default_factory=dict)  # noul question -> value meaning "yes"
    #: long format: one row per (item, annotator); the item's fields must agree across its rows
    annotator_column: str | None = None
    #: wide format: question -> {option: column holding that option's vote count} (anonymous votes)
    label_votes: dict[str, dict[str, str]] = field(default_factory=dict)
    #: item metadata kept for slices (``--meta-column``): each column's text per item, in ``items.meta``
    meta_columns: list[str] = field(default_factory=list)
    append: bool = False


#: The columns of a dataset's label rows, as the import hands them to the store's ``labels`` table.
LABEL_COLUMNS = ("item_id", "question", "option_id", "annotator")
#: Dataset names: printable, no surrounding whitespace, at most this long.
MAX_NAME_LENGTH = 128
#: The annotator of a label imported with --label (one label per item, annotator not known).
SINGLE_ANNOTATOR = "import"
#: The annotator of a vote imported from a --label-votes count column (who voted is not known).
ANONYMOUS_ANNOTATOR = ""
#: Largest vote count one --label-votes cell may hold (a sanity check against a wrong column).
MAX_VOTES_PER_CELL = 10_000
#: Slice names computed by the workbench (``report --slice state_length``); no metadata column may take them.
BUILTIN_SLICES = ("state_length",)


def validate_dataset_name(name: str | None) -> str:
    """A dataset name is 1–128 printable characters without surrounding whitespace; returns it."""
    if not name or not name.strip():
        raise DataImportError("`name` is empty", hint="name the dataset, e.g. `name` banking77")
    if name != name.strip():
        raise DataImportError(f"`name` {name!r} has surrounding whitespace", hint=f"use `name` {name.strip()!r}")
    if len(name) > MAX_NAME_LENGTH:
        raise DataImportError(
            f"`name` is {len(name):,} characters long (limit {MAX_NAME_LENGTH})", hint="use a short name"
        )
    bad = next((c for c in name if unicodedata.category(c)[0] in ("C", "Z") and c != " "), None)
    if bad is not None:
        raise DataImportError(
            f"`name` {name[:40]!r} contains U+{ord(bad):04X} ({unicodedata.name(bad, 'a control character')})",
            hint="use letters, digits, spaces and punctuation",
        )
    return name


# -- import ---------------------------------------------------------------------------------------
@dataclass
class DatasetInfo:
    name: str
    version: int
    fingerprint: str
    created: bool  # False when the content equalled the latest version (nothing written)
    n_items: int
    questions: list[str]
    #: ids also present in the previous version (None for a first import)
    shared_ids: int | None = None
    #: question -> rows whose label was empty/NaN (imported as unlabelled)
    unlabelled: dict[str, int] = field(default_factory=dict)
    #: ids changed by normalisation (surrounding whitespace, Unicode NFC)
    ids_normalised: int = 0
    #: one line per thing the user should know (normalised ids, unlabelled rows)
    notices: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {
            k: (list(v) if isinstance(v, list) else dict(v) if isinstance(v, dict) else v)
            for k, v in self.__dict__.items()
        }


#: Key of ``datasets.params`` recording, per question, the splits in which some item has two or more
#: votes (label rows), sorted; ``[]``: every item has at most one. A version's labels never change
#: (only an import writes them), so this is computed once there; versions imported before it was
#: recorded have no such key and readers count the votes instead (:func:`has_repeated_votes`).
REPEATED_VOTES = "repeated_votes"


#: Key of ``datasets.params`` listing the questions whose ``gold_labels`` rows the import wrote: those
#: whose items have one vote each (:data:`REPEATED_VOTES` ``[]``), so that vote is the gold label under any
#: option order. Versions imported before the table existed have no such key (readers join items with
#: labels instead).
GOLD_LABELS = "gold_labels"


def import_params(spec: ImportSpec, files: Sequence[Path]) -> dict[str, Any]:
    """The ``params`` recorded with a dataset version: every option of the spec and the files' paths (a dict of JSON values)."""

    return {
        "seed": spec.seed,
        "test_fraction": spec.test_fraction,
        "calibration_fraction": spec.calibration_fraction,
        "files": [str(p) for p in files],
        "text_column": spec.text_column,
        "state_column": spec.state_column,
        "labels": spec.labels,
        "group_column": spec.group_column,
        "split_column": spec.split_column,
        "split": spec.split,
        "annotator_column": spec.annotator_column,
        "label_votes": spec.label_votes,
        "meta_columns": list(spec.meta_columns),
    }
