"""The monitor's reader over a rotated decision log (issue 25): the glob ``decisions.jsonl*`` gives every
file of the log once, oldest first — the runtime's older ``.2 .1`` layout, then its numbered backups, then
the live file — never the hidden lock file, and DuckDB reads every record once."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

from workbench_runtime.decision_log import DecisionLog, log_files, read_decision_log

from workbench.monitor.logs import MonitorStore, expand_paths


def _record(did: str) -> dict:
    return {"decision_id": did, "time": "2026-12-01T00:00:00.000000+00:00", "question": "q", "action": "review"}


def test_the_monitor_reads_every_rotated_file_once_oldest_first(tmp_path):
    path = tmp_path / "decisions.jsonl"
    for name, ids in (("decisions.jsonl.2", ["old-0", "old-1"]), ("decisions.jsonl.1", ["old-2"])):
        (tmp_path / name).write_text("".join(json.dumps(_record(i)) + "\n" for i in ids))
    decision = SimpleNamespace(action="accept", option="a", would_accept=None, p_top=0.9, margin=0.5)
    with DecisionLog(path, rotate_bytes=700) as log:  # two decisions a file: 15 numbered backups
        for i in range(31):
            assert log.log_decisions(
                {"q": decision},
                decision_id=f"new-{i}",
                policy_hash="sha256:test",
                policy_version="1",
                model="m",
                schema_hash=None,
                probs={"q": [0.9, 0.1]},
            )
    assert (tmp_path / ".decisions.jsonl.lock").exists() and log.n_rotations == 15
    files = expand_paths([str(tmp_path / "decisions.jsonl*")], "--decisions")
    assert [Path(f) for f in files] == log_files(path)  # the runtime's own order
    assert [Path(f).name for f in files[:4]] == [
        "decisions.jsonl.2",
        "decisions.jsonl.1",
        "decisions.jsonl.00000001",
        "decisions.jsonl.00000002",
    ]
    assert Path(files[-1]).name == "decisions.jsonl" and len(files) == 18
    expected = [r["decision_id"] for r in read_decision_log(path)]
    assert expected == [f"old-{i}" for i in range(3)] + [f"new-{i}" for i in range(31)]
    with MonitorStore() as store:
        summary = store.load_decisions(files)
        got = [r[0] for r in store.con.execute("SELECT decision_id FROM decisions ORDER BY rowid").fetchall()]
    assert summary.n_records == 34 and not summary.skipped and got == expected
