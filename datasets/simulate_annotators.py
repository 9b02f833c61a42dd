"""Simulated annotators for a bundled dataset: a long-format (one row per annotator per item) or
vote-count file that ``workbench datasets import`` reads with ``--annotator-column`` or ``--label-votes``.

Noise model (documented, seeded): each of ``n_annotators`` annotators labels each item with
probability ``coverage``; a label copies the dataset's gold label, except that with probability
``flip`` it is replaced by an option drawn uniformly from the *other* options. Annotators are
independent given the item, so the expected share of agreeing annotator pairs on an item is
``(1 - flip)**2 + flip**2 / (k - 1)`` for ``k`` options.

Run it (writes a CSV; nothing large is committed)::

    python datasets/simulate_annotators.py datasets/sms_spam/sms_spam.csv --label-column label \\
        --annotators 3 --flip 0.2 --seed 0 --out sms_annotators.csv
    workbench datasets import sms_annotators.csv --name sms_spam_annotated --text-column text \\
        --id-column id --annotator-column annotator --label spam=label --positive spam=spam \\
        --test-fraction 0.3 --calibration-fraction 0.3 --schema experiments/schemas/sms_spam.yaml

``--counts`` writes one row per item with a ``votes_<option>`` column per option instead
(``--label-votes spam=yes:votes_spam,no:votes_ham``-style import; annotators become anonymous).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd


def simulate_annotators(
    frame: pd.DataFrame,
    label_column: str,
    *,
    options: Sequence[str] | None = None,
    n_annotators: int = 3,
    flip: float = 0.2,
    coverage: float = 1.0,
    seed: int = 0,
    annotator_column: str = "annotator",
) -> pd.DataFrame:
    """Long format: the rows of ``frame`` repeated once per annotator who labelled them (item order
    kept, annotators ``ann1``, ``ann2`` …), ``label_column`` holding that annotator's label.

    ``options`` defaults to the sorted distinct gold labels. Every item keeps at least one annotator
    (the first of its drawn annotators, or ``ann1`` when ``coverage`` dropped them all).
    """
    if not 0.0 <= flip <= 1.0 or not 0.0 < coverage <= 1.0 or n_annotators < 1:
        raise ValueError("need 0 <= flip <= 1, 0 < coverage <= 1 and n_annotators >= 1")
    gold = frame[label_column].astype(str).to_numpy()
    opts = np.asarray(sorted(set(gold)) if options is None else list(options), dtype=object)
    index = {o: i for i, o in enumerate(opts)}
    g = np.asarray([index[v] for v in gold], dtype=np.int64)
    n, k, m = len(frame), len(opts), n_annotators
    rng = np.random.default_rng(seed)
    flipped = rng.random((n, m)) < flip
    offset = rng.integers(1, max(k, 2), size=(n, m))  # a uniformly drawn other option
    labels = np.where(flipped, (g[:, None] + offset) % k, g[:, None])
    labelled = rng.random((n, m)) < coverage
    labelled[~labelled.any(axis=1), 0] = True
    rows, cols = np.nonzero(labelled)  # row-major: item order, then annotator order
    out = frame.iloc[rows].reset_index(drop=True)
    out[label_column] = opts[labels[rows, cols]]
    out.insert(0, annotator_column, np.char.add("ann", (cols + 1).astype(str)))
    return out


def vote_counts(
    long: pd.DataFrame,
    id_column: str,
    label_column: str,
    *,
    options: Sequence[str],
    annotator_column: str = "annotator",
    prefix: str = "votes_",
) -> pd.DataFrame:
    """Wide format of :func:`simulate_annotators`' output: one row per item (first row's fields), a
    ``<prefix><option>`` count column per option, the label and annotator columns dropped."""
    counts = pd.crosstab(long[id_column], long[label_column]).reindex(columns=list(options), fill_value=0)
    counts.columns = [f"{prefix}{o}" for o in options]
    first = long.drop_duplicates(id_column).drop(columns=[label_column, annotator_column])
    return first.merge(counts, left_on=id_column, right_index=True, how="left")


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("path", type=Path)
    ap.add_argument("--label-column", required=True)
    ap.add_argument("--id-column", default="id")
    ap.add_argument("--annotators", type=int, default=3)
    ap.add_argument("--flip", type=float, default=0.2)
    ap.add_argument("--coverage", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--counts", action="store_true", help="one row per item with vote-count columns")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    frame = pd.read_csv(args.path, dtype=str, keep_default_na=False)
    long = simulate_annotators(
        frame,
        args.label_column,
        n_annotators=args.annotators,
        flip=args.flip,
        coverage=args.coverage,
        seed=args.seed,
    )
    if args.counts:
        options = sorted(set(frame[args.label_column]))
        long = vote_counts(long, args.id_column, args.label_column, options=options)
    long.to_csv(args.out, index=False)


if __name__ == "__main__":
    main()
