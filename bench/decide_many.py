"""``Policy.decide_many`` beside its two numpy floors (issue 29 §3: within 2× of the hand-written dict → numpy path).

    python bench/decide_many.py                        # 20,000 responses of a 77-option question (BANKING77-sized)
    python bench/decide_many.py --old /work/base       # ... and the same with an older checkout, side by side
    python bench/decide_many.py --n 50000 --json

The policy and responses are ``bench/decision_log.py``'s (one 77-option choice question, temperature
calibrator, top-margin rule; System One response dicts, 4-decimal probabilities, none refused). Each
code version runs in a child process of its own and reports, in CPU seconds (best of ``--repeat``):

- ``decide_many``: ``policy.decide_many(responses)`` — every check kept (response and answer
  validation, refusal reasons, calibration, rule, one ``QuestionDecision`` per question and response);
- ``dict_numpy`` (the floor): a hand-written path that reads each response's probabilities in
  option order (``[r["answers"]["intent"]["probabilities"][o] for o in options]``), builds the
  matrix and applies the temperature calibrator and the top-margin rule in numpy — no checks, no
  reasons, no decision objects;
- ``numpy_matrix``: the numpy calibrator and rule alone, on the matrix already built.

It checks that the floor accepts exactly the responses ``decide_many`` accepts, and prints
decisions per second, the ratios to both floors, the loop of single ``decide`` calls (on a tenth of
the responses) and the child's peak RSS.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGET_RATIO = 2.0


def _floor_rule(m, temperature: float, tau: float, margin: float):
    """The temperature calibrator and top-margin rule, hand-written in numpy (accepted mask, top option)."""
    import numpy as np

    z = np.log(np.clip(m, 1e-12, 1.0)) / temperature
    z -= z.max(axis=1, keepdims=True)
    e = np.exp(z)
    cal = e / e.sum(axis=1, keepdims=True)
    top = cal.argmax(axis=1)
    two = np.partition(cal, -2, axis=1)
    p1, p2 = two[:, -1], two[:, -2]
    return (p1 >= tau) & (p1 - p2 >= margin), top


def _best(fn, repeat: int) -> tuple[float, object]:
    best, out = float("inf"), None
    for _ in range(repeat):
        t0 = time.process_time()
        out = fn()
        best = min(best, time.process_time() - t0)
    return best, out


def worker(n: int, repeat: int) -> dict:
    """Runs in the child (``sys.path`` names the checkout under test): the timings as a dict."""
    import numpy as np

    sys.path.insert(0, str(ROOT / "bench"))
    from decision_log import make_policy, make_responses

    policy, options = make_policy()
    responses = make_responses(options, n)
    # the bench policy's parameters (bench/decision_log.py): temperature 1.3, tau 0.5, margin 0.2
    temperature, tau, margin = 1.3, 0.5, 0.2

    def dict_numpy():
        m = np.array([[r["answers"]["intent"]["probabilities"][o] for o in options] for r in responses])
        return _floor_rule(m, temperature, tau, margin)

    matrix = np.array([[r["answers"]["intent"]["probabilities"][o] for o in options] for r in responses])
    policy.decide_many(responses[:200])  # warm-up: imports, caches
    t_many, decided = _best(lambda: policy.decide_many(responses), repeat)
    t_floor, (floor_acc, floor_top) = _best(dict_numpy, repeat)
    t_matrix, _ = _best(lambda: _floor_rule(matrix, temperature, tau, margin), repeat)
    few = responses[: max(1, n // 10)]
    t_single, singles = _best(lambda: [policy.decide(r) for r in few], 1)
    acc = np.array([d["intent"].accepted for d in decided])
    opt = [d["intent"].option for d in decided]
    refused = sum(
        1 for d in decided if not d["intent"].reason.startswith(("accepted", "below_tau", "below_margin", "abstain"))
    )
    return {
        "n": n,
        "options": len(options),
        "cpu_s": {"decide_many": t_many, "dict_numpy": t_floor, "numpy_matrix": t_matrix},
        "decide_loop_cpu_s": t_single,
        "decide_loop_n": len(few),
        "same_as_floor": bool(
            (acc == floor_acc).all() and all(o == options[t] for o, t, a in zip(opt, floor_top, acc) if a)
        ),
        "same_as_decide_loop": singles == decided[: len(few)],
        "refused_responses": refused,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def run_child(code: Path, n: int, repeat: int) -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(code), str(code / "runtime")])}
    cmd = [sys.executable, __file__, "--worker", "--n", str(n), "--repeat", str(repeat)]
    out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout
    res = json.loads(out)
    res["code"] = str(code)
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=20000)
    ap.add_argument("--repeat", type=int, default=3, help="timings are the best of this many runs")
    ap.add_argument("--old", type=Path, default=None, help="an older checkout, run side by side")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        print(json.dumps(worker(args.n, args.repeat)))
        return
    runs = {"new": run_child(ROOT, args.n, args.repeat)}
    if args.old is not None:
        runs["old"] = run_child(args.old, args.n, args.repeat)
    for r in runs.values():
        c = r["cpu_s"]
        r["decisions_per_s"] = {k: r["n"] / v for k, v in c.items()}
        r["decide_loop_per_s"] = r["decide_loop_n"] / r["decide_loop_cpu_s"]
        r["ratio_to_dict_numpy"] = c["decide_many"] / c["dict_numpy"]
        r["ratio_to_numpy_matrix"] = c["decide_many"] / c["numpy_matrix"]
        r["meets_target"] = r["ratio_to_dict_numpy"] <= TARGET_RATIO
    if args.json:
        print(json.dumps(runs, indent=2))
        return
    print(f"{args.n} responses × {runs['new']['options']} options; CPU seconds, best of {args.repeat}")
    hdr = f"{'code':<5} {'decide_many/s':>14} {'dict→numpy/s':>13} {'numpy rule/s':>13} {'÷dict→numpy':>12} {'÷numpy rule':>12} {'decide()/s':>11} {'peak RSS':>9}  checks"
    print(hdr)
    for name, r in runs.items():
        d = r["decisions_per_s"]
        checks = (
            f"floor agrees: {r['same_as_floor']}, decide loop agrees: {r['same_as_decide_loop']}, "
            f"refused: {r['refused_responses']}"
        )
        print(
            f"{name:<5} {d['decide_many']:>14,.0f} {d['dict_numpy']:>13,.0f} {d['numpy_matrix']:>13,.0f} "
            f"{r['ratio_to_dict_numpy']:>11.2f}× {r['ratio_to_numpy_matrix']:>11.1f}× {r['decide_loop_per_s']:>11,.0f} "
            f"{r['peak_rss_mb']:>6.0f} MB  {checks}"
        )
    new = runs["new"]
    print(
        f"target: decide_many within {TARGET_RATIO:.0f}× the dict→numpy floor: "
        f"{'met' if new['meets_target'] else 'MISSED'} ({new['ratio_to_dict_numpy']:.2f}×)"
    )
    if "old" in runs:
        print(
            f"decide_many speed-up over old: {runs['old']['cpu_s']['decide_many'] / new['cpu_s']['decide_many']:.1f}×"
        )


if __name__ == "__main__":
    main()
