"""Make the workbench-exported policy the runtime distribution's tests load in a clean venv.

``runtime/tests/data/`` holds a policy exported by the workbench from the synthetic store of
:mod:`tests.policy.conftest`, responses for it, and the decisions the workbench takes on them. The
runtime's own tests (which cannot import the workbench) check that they load the file and take the
same decisions; ``tests/policy/test_runtime_distribution.py`` checks that today's workbench still
exports an equivalent file. Regenerate after changing the policy format or the builder::

    python -m tests.policy.runtime_fixture [OUT_DIR]   # default: runtime/tests/data

``.ci/run`` also exports a fresh set into a temporary directory and points the runtime's tests at it
(``WORKBENCH_RUNTIME_FIXTURES``), so the clean-venv run checks today's export, not only the committed one.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import numpy as np

from tests.conftest import ROOT, run_cli
from tests.policy.conftest import MODEL, OPTIONS, build_store

DATA = ROOT / "runtime" / "tests" / "data"
POLICY_NAME = "workbench-policy.json"
RESPONSES_NAME = "workbench-responses.jsonl"
DECISIONS_NAME = "workbench-decisions.jsonl"
N_RESPONSES = 60


def _responses(meta: dict) -> list[dict]:
    """The first test items' answers as System One responses, plus one failure and one refusal."""
    test = np.flatnonzero((meta["split"] == "test") & ~meta["failed"])[:N_RESPONSES]
    out: list[dict] = []
    for i in test:
        p = meta["probs"]["intent"][i]
        out.append(
            {
                "model": MODEL,
                "answers": {
                    "intent": {
                        "type": "choice",
                        "choice": OPTIONS[int(np.argmax(p))],
                        "probabilities": {o: float(v) for o, v in zip(OPTIONS, p)},
                    },
                    "urgent": {"type": "noul", "noul": float(meta["probs"]["urgent"][i, 0])},
                },
            }
        )
    out.append({"error": {"kind": "rate_limited", "message": "HTTP 429"}})
    out.append({"model": MODEL, "answers": {"intent": {"type": "refusal"}, "urgent": {"type": "noul", "noul": 0.99}}})
    return out


def export(out_dir: Path) -> Path:
    """Build the synthetic store in a temporary directory and export the fixture files into ``out_dir``."""
    from workbench.policy import Policy

    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "wb.duckdb"
        meta = build_store(db, Path(tmp), n=3000, seed=11)
        policy_path = out_dir / POLICY_NAME
        run_cli(
            "policy",
            "export",
            meta["run_id"],
            "--question",
            "intent",
            "--question",
            "urgent",
            "--out",
            str(policy_path),
            "--force",
            "--max-error",
            "0.1",
            "--delta",
            "0.1",
            "--calibrate",
            "temperature",
            "--created-by",
            "tests/policy/runtime_fixture.py",
            db=db,
            check=True,
        )
    responses = _responses(meta)
    decisions = Policy.load(policy_path).decide_many(responses)
    (out_dir / RESPONSES_NAME).write_text("".join(json.dumps(r) + "\n" for r in responses), encoding="utf-8")
    (out_dir / DECISIONS_NAME).write_text(
        "".join(json.dumps({q: d.to_dict() for q, d in dec.items()}, sort_keys=True) + "\n" for dec in decisions),
        encoding="utf-8",
    )
    return policy_path


if __name__ == "__main__":
    import sys

    print(f"wrote {export(Path(sys.argv[1]) if len(sys.argv) > 1 else DATA)}")
