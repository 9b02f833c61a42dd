"""Robustness of a schema: a probed run against its unprobed base run, item by item.

For each probe run (see :mod:`workbench.probes`; its answers are stored in the original option order)
against the base run of the same schema and dataset, on the items both answered:

``flip_rate``
    Share of items whose top option differs, with a Wilson 95 % interval.
``accuracy_change``
    Paired: mean over labelled items of ``correct_probe - correct_base``, with a paired percentile
    bootstrap interval (items resampled, both runs together) and McNemar's exact p-value (binomial
    test on the discordant pairs).
``position_bias`` (``option_order`` probes only)
    For the option listed first (and last) to each item under the probe's seeded permutation:
    ``share_probe`` = how often it wins in the probed run, ``share_random`` = how often that same
    option wins in the base run, where it sits at an unrelated position (its rate under random
    order), ``bias = share_probe - share_random`` with a paired bootstrap interval, and ``uniform`` =
    1/k for reference. A position-blind model has ``bias`` 0 item by item.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from workbench.errors import WorkbenchError
from workbench.metrics.bootstrap import mcnemar
from workbench.wording import plural


class RobustnessError(WorkbenchError):
    """Runs that cannot be compared for robustness (other dataset, other schema, no common items)."""


def _paired_bootstrap(diff: np.ndarray, n_boot: int, seed: int, confidence: float) -> list[float | None]:
    """Percentile bootstrap interval of ``mean(diff)`` (items resampled), vectorised in chunks."""
    n = diff.size
    if n == 0 or n_boot <= 0:
        return [None, None]
    rng = np.random.default_rng(seed)
    means = np.empty(n_boot)
    chunk = max(1, 2_000_000 // n)
    for start in range(0, n_boot, chunk):
        stop = min(n_boot, start + chunk)
        idx = rng.integers(0, n, size=(stop - start, n))
        means[start:stop] = diff[idx].mean(axis=1)
    a = (1.0 - confidence) / 2.0
    lo, hi = np.quantile(means, [a, 1.0 - a])
    return [float(lo), float(hi)]


def _wilson(k: int, n: int) -> list[float | None]:
    from workbench.metrics.reliability import wilson_interval

    if n == 0:
        return [None, None]
    lo, hi = wilson_interval(np.array([k]), np.array([n]))
    # the closed form leaves ~1e-19 at k = 0 (and 1 - 1e-16 at k = n): the exact ends are 0 and 1
    return [0.0 if k == 0 else float(lo[0]), 1.0 if k == n else float(hi[0])]


def compare_probe(
    base_probs: np.ndarray,
    probe_probs: np.ndarray,
    labels: np.ndarray,
    *,
    first: np.ndarray | None = None,
    last: np.ndarray | None = None,
    n_boot: int = 1000,
    seed: int = 0,
    confidence: float = 0.95,
) -> dict[str, Any]:
    """The robustness figures from aligned arrays (pure maths; :func:`robustness` loads them).

    Parameters
    ----------
    base_probs, probe_probs : ndarray (n, k)
        Answers of the same n items in the ORIGINAL option order, no failed rows.
    labels : ndarray (n,)
        Gold option index, -1 when unlabelled (left out of the accuracy figures only).
    first, last : ndarray (n,) of int, optional
        Original index of the option the probe listed first / last to each item (``option_order``).
    """
    n, k = base_probs.shape
    top_b = base_probs.argmax(axis=1)
    top_p = probe_probs.argmax(axis=1)
    flips = int((top_b != top_p).sum())
    out: dict[str, Any] = {
        "n": int(n),
        "flips": flips,
        "flip_rate": flips / n if n else None,
        "flip_rate_ci": _wilson(flips, n),
    }
    lab = labels >= 0
    cb = (top_b[lab] == labels[lab]).astype(float)
    cp = (top_p[lab] == labels[lab]).astype(float)
    n_lab = int(lab.sum())
    out["n_labelled"] = n_lab
    out["accuracy_base"] = float(cb.mean()) if n_lab else None
    out["accuracy_probe"] = float(cp.mean()) if n_lab else None
    out["accuracy_change"] = float((cp - cb).mean()) if n_lab else None
    out["accuracy_change_ci"] = _paired_bootstrap(cp - cb, n_boot, seed, confidence)
    gained, lost = int(((cp == 1) & (cb == 0)).sum()), int(((cp == 0) & (cb == 1)).sum())
    out["gained"], out["lost"] = gained, lost
    out["mcnemar_p"] = mcnemar(cb == 1, cp == 1).p_exact if n_lab else None  # exact binomial, two-sided
    out["position_bias"] = None
    if first is not None and last is not None and n:
        bias: dict[str, Any] = {"uniform": 1.0 / k}
        for name, pos in (("first", first), ("last", last)):
            a = (top_p == pos).astype(float)
            b = (top_b == pos).astype(float)
            bias[name] = {
                "share_probe": float(a.mean()),
                "share_probe_ci": _wilson(int(a.sum()), n),
                "share_random": float(b.mean()),
                "bias": float((a - b).mean()),
                "bias_ci": _paired_bootstrap(a - b, n_boot, seed + 1, confidence),
            }
        out["position_bias"] = bias
    return out


def robustness(
    con: Any,
    base_run: str,
    probe_runs: Sequence[str],
    *,
    question: str | None = None,
    splits: Sequence[str] | None = None,
    n_boot: int = 1000,
    seed: int = 0,
    confidence: float = 0.95,
) -> dict[str, Any]:
    """Flip rate, paired accuracy change and (``option_order``) position bias of each probe run.

    Parameters
    ----------
    con : duckdb.DuckDBPyConnection
        The store.
    base_run : str
        The unprobed run (id or unique prefix).
    probe_runs : sequence of str
        Runs of the same dataset and schema, usually made by an experiment's ``probes:``; a run
        without ``params['probe']`` is compared as is (flip rate and accuracy only).
    question : str, optional
        Required when the schema has several questions.
    splits : sequence of str, optional
        Only items of these splits (default: every split both runs answered).

    Returns
    -------
    dict
        ``{"base_run", "question", "options", "splits", "n_boot", "confidence", "probes": [{"run_id",
        "probe", "seed", "variant", "n", "flip_rate", "flip_rate_ci", "accuracy_change",
        "accuracy_change_ci", "mcnemar_p", "position_bias", …}]}`` (JSON-ready).
    """
    from workbench.probes import Probe, option_permutation
    from workbench.store.runs import get_run, load_answers, load_stored_schema

    if not probe_runs:
        raise RobustnessError("no probe run given", hint="pass the base run then one or more probed runs")
    if not (0 < confidence < 1):
        raise RobustnessError(f"confidence={confidence} must be in (0, 1)", hint="e.g. 0.95")
    base = get_run(con, base_run)
    schema = load_stored_schema(con, base["schema_hash"])
    if question is None:
        if len(schema.questions) != 1:
            raise RobustnessError(
                f"{base['run_id']} has {plural(len(schema.questions), 'question')}",
                hint=f"pass `question`, one of: {', '.join(schema.question_ids)}",
            )
        question = schema.question_ids[0]
    b = load_answers(con, base["run_id"], question, splits)
    b = b.select(~b.failed)
    rows = []
    for ref in probe_runs:
        run = get_run(con, ref)
        if run["dataset"] != base["dataset"] or run["schema_hash"] != base["schema_hash"]:
            raise RobustnessError(
                f"{run['run_id']} is not a probe of {base['run_id']}: "
                f"{run['dataset']}/{run['schema_hash'][:8]} vs {base['dataset']}/{base['schema_hash'][:8]}",
                hint="compare runs of the same dataset and schema (an experiment's '+probe' variants)",
            )
        p = load_answers(con, run["run_id"], question, splits)
        p = p.select(~p.failed)
        common, ib, ip = np.intersect1d(b.item_ids.astype(str), p.item_ids.astype(str), return_indices=True)
        if common.size == 0:
            raise RobustnessError(
                f"runs {base['run_id']} and {run['run_id']} answered no item in common",
                hint="run both on the same splits (and `limit`)",
            )
        spec = (run["params"] or {}).get("probe")
        probe = Probe(spec["name"], int(spec.get("seed", 0))) if spec else None
        first = last = None
        if probe is not None and probe.name == "option_order" and b.qtype == "choice":
            k = len(b.option_ids)
            perms = np.stack([option_permutation(probe, question, k, str(i)) for i in common])
            first, last = perms[:, 0], perms[:, -1]
        figures = compare_probe(
            b.probs[ib],
            p.probs[ip],
            b.labels[ib],
            first=first,
            last=last,
            n_boot=n_boot,
            seed=seed,
            confidence=confidence,
        )
        rows.append(
            {
                "run_id": run["run_id"],
                "probe": probe.name if probe else None,
                "seed": probe.seed if probe else None,
                "variant": run.get("variant"),
                "provider": run["provider"],
                **figures,
            }
        )
    return {
        "base_run": base["run_id"],
        "question": question,
        "options": len(b.option_ids),
        "splits": list(splits) if splits else None,
        "n_boot": n_boot,
        "confidence": confidence,
        "probes": rows,
    }
