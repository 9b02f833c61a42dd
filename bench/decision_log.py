"""What the decision log adds to one ``Policy.decide`` call (target: ≤ 50 µs at p50).

    python bench/decision_log.py            # 3,000 decisions of a 77-option question (BANKING77-sized)
    python bench/decision_log.py --n 20000 --json
    python bench/decision_log.py --rotate-bytes 4096   # a rotation every ~4 decisions (~750 files at the end)
    python bench/decision_log.py --code /work/base     # time another checkout's runtime (before/after)

A policy with one 77-option choice question (temperature calibrator, top-margin rule) decides the
same System One responses twice per round, interleaved so that both sides see the same machine
load: once without a log, once with ``log=DecisionLog(path)`` (a real file in a temporary
directory, default rotation). The added cost per decision is the paired difference of the two
timings of the same response; the script prints its p50/p90/p99 and the plain decide time.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]

TARGET_US = 50.0


def make_policy(k: int = 77):
    """A hashed policy document for one choice question with ``k`` options."""
    from workbench_runtime import Policy
    from workbench_runtime.model import content_hash
    from workbench_runtime.questions import DecisionSchema

    options = [f"intent_{j:02d}" for j in range(k)]
    schema = DecisionSchema.from_dict(
        {
            "questions": {
                "intent": {"type": "choice", "instructions": "Which intent?", "criteria": {o: None for o in options}}
            }
        }
    )
    doc = {
        "format": "workbench.policy",
        "format_version": 1,
        "policy_version": "1.0.0",
        "created_at": "2026-12-01T00:00:00+00:00",
        "workbench_version": "bench",
        "source": {"provider": "bench", "model": "bench-model"},
        "decision_schema": {"hash": schema.hash, "questions": schema.to_wire()},
        "dataset": {"name": "bench"},
        "questions": {
            "intent": {
                "type": "choice",
                "options": options,
                "calibrator": {"type": "temperature", "params": {"temperature": 1.3}},
                "rule": {"kind": "top_margin", "tau": 0.5, "margin": 0.2},
                "objective": {"kind": "guarantee", "certified": True, "alpha": 0.05, "delta": 0.1},
            }
        },
        "validity": {"schema_hashes": [schema.hash], "models": ["bench-model"]},
    }
    doc["content_hash"] = content_hash(doc)
    return Policy.from_dict(doc), options


def make_responses(options: list[str], n: int, seed: int = 0) -> list[dict]:
    rng = np.random.default_rng(seed)
    z = rng.normal(0, 2.5, size=(n, len(options)))
    p = np.exp(z - z.max(axis=1, keepdims=True))
    p = np.round(p / p.sum(axis=1, keepdims=True), 4)
    # the rounding residue (at most ~0.004) goes to each row's largest probability (>= 1/k), never
    # below zero: on column 0 it made 5.5% of the rows negative, answers the policy refuses as invalid
    top = p.argmax(axis=1)
    p[np.arange(n), top] += 1.0 - p.sum(axis=1)
    assert (p >= 0).all()
    out = []
    for row in p:
        probs = dict(zip(options, row.tolist()))
        out.append(
            {
                "model": "bench-model",
                "answers": {"intent": {"type": "choice", "choice": options[int(row.argmax())], "probabilities": probs}},
            }
        )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=3000)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--rotate-bytes", type=int, default=None, help="rotate at this size (default: the log's 64 MiB)")
    ap.add_argument(
        "--code", type=Path, default=ROOT, help="checkout whose workbench_runtime is timed (default: this one)"
    )
    args = ap.parse_args()
    sys.path[:0] = [str(args.code), str(args.code / "runtime")]
    from workbench_runtime import DecisionLog

    policy, options = make_policy()
    responses = make_responses(options, args.n)
    clock = time.perf_counter_ns
    with tempfile.TemporaryDirectory() as tmp:
        kw = {} if args.rotate_bytes is None else {"rotate_bytes": args.rotate_bytes}
        log = DecisionLog(Path(tmp) / "decisions.jsonl", **kw)
        for r in responses[:200]:  # warm-up: imports, caches, the file
            policy.decide(r)
            policy.decide(r, decision_id="warm", log=log)
        plain, logged = [], []
        for i, r in enumerate(responses):
            t0 = clock()
            policy.decide(r)
            t1 = clock()
            policy.decide(r, decision_id=f"d{i}", log=log)
            t2 = clock()
            plain.append((t1 - t0) / 1e3)
            logged.append((t2 - t1) / 1e3)
        log.close()
        files = list(Path(tmp).glob("decisions.jsonl*"))
        size = sum(f.stat().st_size for f in files)
    # every timed response is a clean answer (a refused one would time the refusal path, not a decision)
    refused = sum(
        1
        for d in policy.decide_many(responses)
        if not d["intent"].reason.startswith(("accepted", "below_tau", "below_margin", "abstain"))
    )
    added = np.asarray(logged) - np.asarray(plain)
    out = {
        "n": args.n,
        "options": len(options),
        "decide_p50_us": statistics.median(plain),
        "decide_with_log_p50_us": statistics.median(logged),
        "added_p50_us": float(np.percentile(added, 50)),
        "added_p90_us": float(np.percentile(added, 90)),
        "added_p99_us": float(np.percentile(added, 99)),
        "bytes_per_decision": size / (args.n + 200),
        "log_errors": log.n_errors,
        "log_files": len(files),
        "refused_responses": refused,
        "code": str(args.code),
        "target_p50_us": TARGET_US,
    }
    out["meets_target"] = out["added_p50_us"] <= TARGET_US
    if args.json:
        print(json.dumps(out, indent=2))
        return
    print(f"decide() alone            p50 {out['decide_p50_us']:8.1f} µs")
    print(f"decide(..., log=...)      p50 {out['decide_with_log_p50_us']:8.1f} µs")
    print(
        f"added by the log          p50 {out['added_p50_us']:8.1f} µs   p90 {out['added_p90_us']:.1f}   "
        f"p99 {out['added_p99_us']:.1f}   (target p50 ≤ {TARGET_US:.0f} µs: {'met' if out['meets_target'] else 'MISSED'})"
    )
    print(
        f"{out['bytes_per_decision']:.0f} bytes per decision line, {out['log_errors']} logging errors, "
        f"{out['log_files']} log file(s), {refused} refused response(s); code: {args.code}"
    )


if __name__ == "__main__":
    main()
