"""What the decision log adds to one ``Policy.decide`` call (target: ≤ 50 µs at p50).

    python bench/decision_log.py            # 3,000 decisions of a 77-option question (BANKING77-sized)
    python bench/decision_log.py --n 20000 --json
    python bench/decision_log.py --rotate-bytes 4096   # a rotation every ~4 decisions (~750 files at the end)
    python bench/decision_log.py --code /work/base     # time another checkout's runtime (before/after)
    python bench/decision_log.py --old /work/base      # ... and its DecisionLog interleaved with this one's

A policy with one 77-option choice question (temperature calibrator, top-margin rule) decides the
same System One responses twice per round, interleaved so that both sides see the same machine
load: once without a log, once with ``log=DecisionLog(path)`` (a real file in a temporary
directory, default rotation). The added cost per decision is the paired difference of the two
timings of the same response; the script prints its p50/p90/p99 and the plain decide time.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import resource
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
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


def _old_log_class(checkout: Path):
    """``DecisionLog`` of another checkout, loaded from its file beside this one's (standard library + jsonio)."""
    spec = importlib.util.spec_from_file_location(
        "old_decision_log", checkout / "runtime" / "workbench_runtime" / "decision_log.py"
    )
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.DecisionLog


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=3000)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--rotate-bytes", type=int, default=None, help="rotate at this size (default: the log's 64 MiB)")
    ap.add_argument(
        "--code", type=Path, default=ROOT, help="checkout whose workbench_runtime is timed (default: this one)"
    )
    ap.add_argument(
        "--old",
        type=Path,
        default=None,
        help="also time this checkout's DecisionLog, interleaved with --code's (same policy code, same load)",
    )
    args = ap.parse_args()
    sys.path[:0] = [str(args.code), str(args.code / "runtime")]
    from workbench_runtime import DecisionLog

    policy, options = make_policy()
    responses = make_responses(options, args.n)
    clock = time.perf_counter_ns
    cpu0 = time.process_time()
    arms = {"log": DecisionLog} | ({} if args.old is None else {"old_log": _old_log_class(args.old)})
    with tempfile.TemporaryDirectory() as tmp:
        kw = {} if args.rotate_bytes is None else {"rotate_bytes": args.rotate_bytes}
        logs = {name: cls(Path(tmp) / name / "decisions.jsonl", **kw) for name, cls in arms.items()}
        for r in responses[:200]:  # warm-up: imports, caches, the files
            policy.decide(r)
            for log in logs.values():
                policy.decide(r, decision_id="warm", log=log)
        plain: list[float] = []
        logged: dict[str, list[float]] = {name: [] for name in logs}
        order = list(logs)
        for i, r in enumerate(responses):
            t0 = clock()
            policy.decide(r)
            plain.append((clock() - t0) / 1e3)
            for name in order if i % 2 == 0 else order[::-1]:  # neither log always runs first
                t1 = clock()
                policy.decide(r, decision_id=f"d{i}", log=logs[name])
                logged[name].append((clock() - t1) / 1e3)
        for log in logs.values():
            log.close()
        files = {name: list((Path(tmp) / name).glob("decisions.jsonl*")) for name in logs}
        size = {name: sum(f.stat().st_size for f in fs) for name, fs in files.items()}
        # the bytes each log writes for the same decisions at the same (fixed) time
        written = set()
        for name, cls in arms.items():
            with cls(Path(tmp) / "same" / name, clock=lambda: datetime(2026, 12, 7, tzinfo=UTC)) as log:
                for i, r in enumerate(responses[:500]):
                    policy.decide(r, decision_id=f"d{i}", log=log)
            written.add((Path(tmp) / "same" / name).read_bytes())
        same_bytes = len(written) == 1
    cpu = time.process_time() - cpu0
    # every timed response is a clean answer (a refused one would time the refusal path, not a decision)
    refused = sum(
        1
        for d in policy.decide_many(responses)
        if not d["intent"].reason.startswith(("accepted", "below_tau", "below_margin", "abstain"))
    )
    added = np.asarray(logged["log"]) - np.asarray(plain)
    out = {
        "n": args.n,
        "options": len(options),
        "decide_p50_us": statistics.median(plain),
        "decide_with_log_p50_us": statistics.median(logged["log"]),
        "added_p50_us": float(np.percentile(added, 50)),
        "added_p90_us": float(np.percentile(added, 90)),
        "added_p99_us": float(np.percentile(added, 99)),
        "bytes_per_decision": size["log"] / (args.n + 200),
        "log_errors": sum(log.n_errors for log in logs.values()),
        "log_files": len(files["log"]),
        "refused_responses": refused,
        "code": str(args.code),
        "cpu_s": cpu,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "target_p50_us": TARGET_US,
    }
    out["meets_target"] = out["added_p50_us"] <= TARGET_US
    if args.old is not None:
        old_added = np.asarray(logged["old_log"]) - np.asarray(plain)
        out |= {
            "old": str(args.old),
            "old_added_p50_us": float(np.percentile(old_added, 50)),
            "old_added_p90_us": float(np.percentile(old_added, 90)),
            "old_meets_target": float(np.percentile(old_added, 50)) <= TARGET_US,
            "same_bytes_as_old": same_bytes,
        }
    if args.json:
        print(json.dumps(out, indent=2))
        return
    print(f"decide() alone            p50 {out['decide_p50_us']:8.1f} µs")
    print(f"decide(..., log=...)      p50 {out['decide_with_log_p50_us']:8.1f} µs")
    print(
        f"added by the log          p50 {out['added_p50_us']:8.1f} µs   p90 {out['added_p90_us']:.1f}   "
        f"p99 {out['added_p99_us']:.1f}   (target p50 ≤ {TARGET_US:.0f} µs: {'met' if out['meets_target'] else 'MISSED'})"
    )
    if args.old is not None:
        print(
            f"added by the old log      p50 {out['old_added_p50_us']:8.1f} µs   p90 {out['old_added_p90_us']:.1f}   "
            f"(interleaved, {args.old}; {'met' if out['old_meets_target'] else 'MISSED'}); "
            f"ratio new/old p50 {out['added_p50_us'] / out['old_added_p50_us']:.2f}; "
            f"same bytes for the same decisions: {same_bytes}"
        )
    print(
        f"{out['bytes_per_decision']:.0f} bytes per decision line, {out['log_errors']} logging errors, "
        f"{out['log_files']} log file(s), {refused} refused response(s); code: {args.code}; "
        f"{cpu:.1f} CPU s, peak RSS {out['peak_rss_mb']:.0f} MB"
    )


if __name__ == "__main__":
    main()
