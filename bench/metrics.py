"""Full choice report: the workbench's metrics library against scikit-learn + netcal, same numbers.

    python bench/metrics.py                 # 1,000,000 items × 77 options (run rarely: 2 shared cores)
    python bench/metrics.py --n 100000      # development size
    python bench/metrics.py --json

Workload (both sides): top-label ECE with 15 equal-width and 15 equal-mass bins, class-wise ECE,
multiclass Brier score and its decomposition, log loss, confusion matrix, top-label reliability
curve, and 200 bootstrap replicates of accuracy and top-label ECE.

- *workbench*: one call to ``choice_report`` (which computes more: macro-F1, top-k, MCE, debiased
  ECE, smooth ECE, class-wise curves, per-class intervals, and bootstraps every headline metric).
- *baseline*: scikit-learn (``log_loss``, ``brier_score_loss``, ``confusion_matrix``,
  ``calibration_curve``, ``accuracy_score``) and netcal (``ECE`` top-label and per class); the
  Brier decomposition from per-class ``calibration_curve`` + ``np.histogram`` counts. Its bootstrap
  is the favourable version for the baseline: each replicate resamples the precomputed
  (confidence, correct) pairs and calls ``accuracy_score`` and netcal's ``ECE`` on them rather
  than re-slicing the (n, 77) matrix.

Each side runs in its own process (same seeded data); peak memory is that process's max RSS above
its RSS once the data is loaded (no tracemalloc: its hooks would slow the Python-level code).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
import warnings

import numpy as np


def make_data(n: int, k: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Softmax of N(0, 2²) logits shown at temperature 0.7 (over-confident), labels drawn from the truth."""
    rng = np.random.default_rng(seed)
    probs = np.empty((n, k))
    labels = np.empty(n, dtype=np.int64)
    for start in range(0, n, 100_000):  # chunks keep the temporary arrays small
        z = rng.normal(0.0, 2.0, size=(min(100_000, n - start), k))
        true = np.exp(z - z.max(axis=1, keepdims=True))
        true /= true.sum(axis=1, keepdims=True)
        u = rng.random(len(z))[:, None]
        labels[start : start + len(z)] = np.minimum((true.cumsum(axis=1) < u).sum(axis=1), k - 1)
        shown = np.exp((z - z.max(axis=1, keepdims=True)) / 0.7)
        probs[start : start + len(z)] = shown / shown.sum(axis=1, keepdims=True)
    return probs, labels


def workbench_side(probs: np.ndarray, labels: np.ndarray, n_boot: int) -> dict:
    from workbench.metrics.report import choice_report

    rep = choice_report(probs, labels, n_bins=15, n_boot=n_boot, seed=0)
    m = rep.metrics
    return {
        "ece_uniform": m["ece_uniform"].estimate,
        "ece_quantile": m["ece_quantile"].estimate,
        "classwise_ece": m["classwise_ece"].estimate,
        "brier": m["brier"].estimate,
        "brier_reliability": rep.decomposition.reliability,
        "brier_resolution": rep.decomposition.resolution,
        "log_loss": m["log_loss"].estimate,
        "accuracy": m["accuracy"].estimate,
        "accuracy_ci": [m["accuracy"].low, m["accuracy"].high],
        "ece_ci": [m["ece_uniform"].low, m["ece_uniform"].high],
        "confusion_trace": int(np.trace(rep.confusion.matrix[:, :-1])),
    }


def baseline_side(probs: np.ndarray, labels: np.ndarray, n_boot: int) -> dict:
    import sklearn.metrics as skm
    from sklearn.calibration import calibration_curve

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from netcal.metrics import ECE

        n, k = probs.shape
        ece_u = float(ECE(bins=15, equal_intervals=True).measure(probs, labels))
        ece_q = float(ECE(bins=15, equal_intervals=False).measure(probs, labels))
        classwise = float(np.mean([ECE(bins=15).measure(probs[:, j], (labels == j).astype(int)) for j in range(k)]))
        brier = skm.brier_score_loss(labels, probs, labels=np.arange(k))
        brier_recal = 0.0
        edges = np.linspace(0, 1, 16)
        for j in range(k):
            y = labels == j
            prob_true, _ = calibration_curve(y, probs[:, j], n_bins=15)
            counts = np.histogram(probs[:, j], bins=edges)[0]
            counts = counts[counts > 0]
            brier_recal += np.sum(counts * prob_true * (1 - prob_true)) / n
        freq = np.bincount(labels, minlength=k) / n
        unc = float(np.sum(freq * (1 - freq)))
        ll = skm.log_loss(labels, probs, labels=np.arange(k))
        pred = probs.argmax(axis=1)
        cm = skm.confusion_matrix(labels, pred, labels=np.arange(k))
        conf = probs.max(axis=1)
        correct = (pred == labels).astype(int)
        calibration_curve(correct, conf, n_bins=15)
        acc = skm.accuracy_score(labels, pred)
        rng = np.random.default_rng(0)
        acc_reps, ece_reps = [], []
        for _ in range(n_boot):
            idx = rng.integers(0, n, n)
            acc_reps.append(skm.accuracy_score(correct[idx], np.ones(n, dtype=int)))
            ece_reps.append(float(ECE(bins=15).measure(conf[idx], correct[idx])))
    return {
        "ece_uniform": ece_u,
        "ece_quantile": ece_q,
        "classwise_ece": classwise,
        "brier": brier,
        "brier_reliability": brier - brier_recal,
        "brier_resolution": unc - brier_recal,
        "log_loss": ll,
        "accuracy": acc,
        "accuracy_ci": np.quantile(acc_reps, [0.025, 0.975]).tolist(),
        "ece_ci": np.quantile(ece_reps, [0.025, 0.975]).tolist(),
        "confusion_trace": int(np.trace(cm)),
    }


def _current_rss_mb() -> float:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * resource.getpagesize() / 2**20


def run_side(side: str, n: int, k: int, n_boot: int) -> dict:
    """Generate the data, then time one side; memory = max RSS of this process above the RSS with the data loaded."""
    probs, labels = make_data(n, k)
    before = _current_rss_mb()
    fn = workbench_side if side == "workbench" else baseline_side
    t0, c0 = time.perf_counter(), time.process_time()
    out = fn(probs, labels, n_boot)
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    max_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {
        "seconds": seconds,
        "cpu_seconds": cpu,
        "rss_with_data_mb": before,
        "max_rss_mb": max_rss,
        "peak_extra_mb": max(max_rss - before, 0.0),
        "input_mb": probs.nbytes / 2**20,
        "result": out,
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--k", type=int, default=77)
    ap.add_argument("--boot", type=int, default=200)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--side", choices=["workbench", "baseline"], help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.side:  # child process: one side, fresh memory accounting
        json.dump(run_side(args.side, args.n, args.k, args.boot), sys.stdout, default=float)
        return
    sides = {}
    for side in ("workbench", "baseline"):  # each side in its own process so peak memory is its own
        proc = subprocess.run(
            [
                sys.executable,
                __file__,
                "--side",
                side,
                "--n",
                str(args.n),
                "--k",
                str(args.k),
                "--boot",
                str(args.boot),
            ],
            capture_output=True,
            text=True,
            check=True,
        )
        sides[side] = json.loads(proc.stdout)
    ours, theirs = sides["workbench"]["result"], sides["baseline"]["result"]
    t_ours, t_base = sides["workbench"]["seconds"], sides["baseline"]["seconds"]
    diffs = {k: abs(ours[k] - theirs[k]) for k in ours if not isinstance(ours[k], list)}
    c_ours, c_base = sides["workbench"]["cpu_seconds"], sides["baseline"]["cpu_seconds"]
    result = {
        "n": args.n,
        "k": args.k,
        "n_boot": args.boot,
        "workbench_s": round(t_ours, 2),
        "baseline_s": round(t_base, 2),
        "speedup": round(t_base / t_ours, 2),
        "workbench_cpu_s": round(c_ours, 2),
        "baseline_cpu_s": round(c_base, 2),
        "speedup_cpu": round(c_base / c_ours, 2),
        "load_average": os.getloadavg(),
        "workbench_peak_extra_mb": round(sides["workbench"]["peak_extra_mb"], 1),
        "baseline_peak_extra_mb": round(sides["baseline"]["peak_extra_mb"], 1),
        "workbench_max_rss_mb": round(sides["workbench"]["max_rss_mb"], 1),
        "baseline_max_rss_mb": round(sides["baseline"]["max_rss_mb"], 1),
        "input_mb": round(sides["workbench"]["input_mb"], 1),
        "max_abs_difference": max(diffs.values()),
        "differences": diffs,
        "workbench": ours,
        "baseline": theirs,
    }
    if args.json:
        json.dump(result, sys.stdout, indent=2, default=float)
        print()
        return
    print(
        f"{args.n:,} items × {args.k} options, {args.boot} bootstrap replicates (input matrix {result['input_mb']} MB)"
    )
    print(f"  machine load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores (wall times include waiting)")
    print(
        f"  workbench choice_report : {t_ours:8.2f} s wall {c_ours:8.2f} s CPU   peak +{result['workbench_peak_extra_mb']:7.1f} MB"
        f" above the loaded data (max RSS {result['workbench_max_rss_mb']} MB)"
    )
    print(
        f"  scikit-learn + netcal   : {t_base:8.2f} s wall {c_base:8.2f} s CPU   peak +{result['baseline_peak_extra_mb']:7.1f} MB"
        f" above the loaded data (max RSS {result['baseline_max_rss_mb']} MB)"
    )
    print(f"  speed-up                : {t_base / t_ours:8.2f} × wall   {c_base / c_ours:8.2f} × CPU")
    print(f"  largest difference between the two sides' point estimates: {result['max_abs_difference']:.2e}")
    for k in ("accuracy_ci", "ece_ci"):
        print(f"  {k}: workbench {np.round(ours[k], 5)}  baseline {np.round(theirs[k], 5)}")


if __name__ == "__main__":
    main()
