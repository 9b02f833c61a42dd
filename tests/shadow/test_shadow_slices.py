"""`shadow report --slice`: each slice's figures are the shadow report of the session restricted to it.

Two filtered paths, each built independently of the slicing code:

- a dataset column: a replay of two runs over a dataset imported with ``--meta-column channel``,
  against a replay of the same answers over a dataset imported with only the ``email`` rows;
- ``state_length`` on logged traffic: a session imported from a traffic file, against a session
  imported from the rows of that file in one length bucket (lengths counted here from the file).
"""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

import workbench as wb
from tests.conftest import run_cli
from workbench.errors import NotFoundError
from workbench.metrics.slices import MISSING, length_buckets
from workbench.shadow.policies import parse_rule_options
from workbench.shadow.report import shadow_report
from workbench.store.datasets import import_dataset
from workbench.store.db import connect
from workbench.store.import_spec import ImportSpec
from workbench.store.runs import create_run, update_run, write_answers
from workbench.store.shadow import export_session, import_traffic, replay_runs

from .conftest import OPTIONS, SCHEMA

N = 360
CHAMP_RULES = ["intent:tau=0.55,margin=0.1", "urgent:tau_yes=0.7,tau_no=0.3"]
CHALL_RULES = ["intent:tau=0.5", "urgent:tau_yes=0.65,tau_no=0.35"]
KW = {"n_boot": 200, "seed": 3, "n_windows": 3}


def _probs(rng, labels: np.ndarray, k: int, strength: float) -> np.ndarray:
    logits = rng.normal(0, 1.0, size=(len(labels), k))
    wrong = rng.random(len(labels)) < 0.2
    target = np.where(wrong, (labels + 1) % k, labels)
    logits[np.arange(len(labels)), target] += strength * rng.random(len(labels)) * 2
    p = np.exp(logits)
    return p / p.sum(axis=1, keepdims=True)


def _runs(con, dataset: str, ids: list[str], sides: dict, keep: np.ndarray) -> list[str]:
    """The champion and challenger runs over ``dataset``: the answers of the items in ``keep``."""
    out = []
    for name, (model, intent, urgent, latency, cost) in sides.items():
        run_id = create_run(
            con,
            dataset=dataset,
            dataset_version=1,
            schema=SCHEMA,
            provider=f"test:{name}",
            splits=["calibration", "test"],
            name=name,
            model=model,
        )
        kept = [i for i, k in zip(ids, keep) if k]
        n = len(kept)
        rows = pd.DataFrame(
            {
                "run_id": run_id,
                "item_id": kept * 2,
                "question": ["intent"] * n + ["urgent"] * n,
                "probs": [list(map(float, r)) for r in intent[keep]] + [list(map(float, r)) for r in urgent[keep]],
                "model": model,
                "latency_ms": np.concatenate([latency[keep], latency[keep]]),
                "cost_usd": np.concatenate([cost[keep] / 2, cost[keep] / 2]),
            }
        )
        failed = rows["item_id"].isin(["s0005", "s0010"]) & (rows["question"] == "intent")  # failures stay failures
        rows.loc[failed, "probs"] = None
        rows["failure_kind"] = np.where(failed, "timeout", None)
        write_answers(con, rows)
        update_run(con, run_id, status="done", model=model)
        out.append(run_id)
    return out


@pytest.fixture(scope="module")
def sliced(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("shadow_slices")
    rng = np.random.default_rng(11)
    intent = rng.integers(0, 3, N)
    urgent = rng.random(N) < 0.3
    ids = [f"s{i:04d}" for i in range(N)]
    channel = np.asarray(["email", "chat", "phone"], dtype=object)[rng.integers(0, 3, N)]
    channel[rng.random(N) < 0.08] = ""  # blank = missing
    frame = pd.DataFrame(
        {
            "id": ids,
            "text": ["ticket " + "x" * int(rng.integers(0, 120)) + f" {i}" for i in range(N)],
            "intent": np.asarray(OPTIONS)[intent],
            "urgent": np.where(urgent, "yes", "no"),
            "channel": channel,
            "split": np.where(np.arange(N) % 3 == 0, "calibration", "test"),
        }
    )
    email = (channel == "email").astype(bool)
    frame.to_csv(tmp / "all.csv", index=False)
    frame[email].to_csv(tmp / "email.csv", index=False)
    db = tmp / "wb.duckdb"
    con = connect(db)
    for name, path, meta in (("tix", "all.csv", ["channel"]), ("tix_email", "email.csv", [])):
        import_dataset(
            con,
            [tmp / path],
            ImportSpec(
                name=name,
                id_column="id",
                text_column="text",
                split_column="split",
                labels={"intent": "intent", "urgent": "urgent"},
                positive={"urgent": "yes"},
                meta_columns=meta,
            ),
            SCHEMA,
        )
    y_urgent = np.where(urgent, 0, 1)
    sides = {
        "champion": ("clef", _probs(rng, intent, 3, 2.0), _probs(rng, y_urgent, 2, 2.0), rng.gamma(4, 50, N), 2e-5),
        "challenger": ("flash", _probs(rng, intent, 3, 2.4), _probs(rng, y_urgent, 2, 2.2), rng.gamma(4, 12, N), 8e-6),
    }
    sides = {k: (m, a, b, lat, np.full(N, c)) for k, (m, a, b, lat, c) in sides.items()}
    full = _runs(con, "tix", ids, sides, np.ones(N, bool))
    only = _runs(con, "tix_email", ids, sides, email)
    replay_runs(con, shadow="full", champion_run=full[0], challenger_run=full[1], splits=["test"])
    replay_runs(con, shadow="email", champion_run=only[0], challenger_run=only[1], splits=["test"])
    # logged traffic: the replayed session written as a traffic file and imported back
    export_session(con, "full", tmp / "traffic.jsonl")
    import_traffic(con, tmp / "traffic.jsonl", shadow="logged", schema=SCHEMA)
    con.close()
    return {"db": db, "tmp": tmp, "n_email_test": int((email & (frame["split"] == "test")).sum())}


def _close(a, b, path="") -> None:
    """Equal figures: floats to 1e-12, everything else exactly."""
    if isinstance(a, dict):
        assert set(a) == set(b), path
        for k in a:
            _close(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, list):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b)):
            _close(x, y, f"{path}[{i}]")
    elif isinstance(a, float) and isinstance(b, float):
        assert (math.isnan(a) and math.isnan(b)) or abs(a - b) <= 1e-12, (path, a, b)
    else:
        assert a == b, path


def _figures(d: dict) -> dict:
    """The figures of a report; a drift window's ``first_seq`` is the session's own request number (the
    filtered session renumbers its requests), so it is compared as the item it points at instead."""
    out = json.loads(json.dumps({k: d[k] for k in ("verdict", "reasons", "gates", "questions")}))
    for q in out["questions"]:
        for w in q["drift"]["windows"]:
            w.pop("first_seq")
    return out


def _window_items(con, shadow: str, report) -> list[str]:
    seq = [w["first_seq"] for w in report.questions[0]["drift"]["windows"]]
    found = dict(con.execute("SELECT seq, item_id FROM shadow_requests WHERE shadow = ?", [shadow]).fetchall())
    return [found[s] for s in seq]


def _report(con, shadow: str, **kw):
    return shadow_report(
        con,
        shadow,
        champion_policy=parse_rule_options(CHAMP_RULES),
        challenger_policy=parse_rule_options(CHALL_RULES),
        **KW,
        **kw,
    )


def test_dataset_column_slice_equals_the_replay_of_the_filtered_dataset(sliced):
    with connect(sliced["db"]) as con:
        rep = _report(con, "full", slices=["channel", "state_length"])
        filtered = _report(con, "email")
        starts = (
            _window_items(con, "full", rep.slices["channel"].reports["email"]),
            _window_items(con, "email", filtered),
        )
    assert starts[0] == starts[1] and len(starts[0]) == 3
    sl = rep.slices["channel"]
    assert sl.source == "dataset tix v1"
    assert sl.values[:3] == ["chat", "email", "phone"] and sl.values[-1] == MISSING
    # the slices partition the session's requests
    assert sum(r.questions[0]["n_requests"] for r in sl.reports.values()) == rep.questions[0]["n_requests"]
    email = sl.reports["email"]
    assert email.questions[0]["n_requests"] == sliced["n_email_test"] == filtered.questions[0]["n_requests"]
    assert email.questions[0]["error"] is not None and email.questions[0]["review_load"] is not None
    _close(_figures(email.to_dict()), _figures(filtered.to_dict()))
    # state_length on a replay: the dataset's buckets, as `workbench report --slice state_length` makes them
    assert rep.slices["state_length"].source == "dataset tix v1" and 2 <= len(rep.slices["state_length"].values) <= 4
    # the JSON and the table carry every slice
    doc = rep.to_dict()["slices"]
    assert set(doc) == {"channel", "state_length"} and set(doc["channel"]["reports"]) == set(sl.values)
    frame = sl.to_frame()
    assert len(frame) == 2 * len(sl.values) and set(frame["verdict"]) <= {"PROMOTE", "HOLD", "REJECT"}
    row = frame[(frame["slice"] == "email") & (frame["question"] == "intent")].iloc[0]
    assert row["agreement"] == filtered.questions[0]["agreement"]["rate"]
    assert row["agreement_low"] == filtered.questions[0]["agreement"]["low"]
    assert "by channel" in rep.to_text()


def test_state_length_slice_on_logged_traffic_equals_the_filtered_import(sliced, tmp_path):
    rows = [json.loads(line) for line in (sliced["tmp"] / "traffic.jsonl").read_text().splitlines()]
    lengths = np.asarray([len(r["state"]) for r in rows], dtype=float)
    labels, order = length_buckets(lengths)
    assert len(order) == 4
    bucket = order[-1]  # the longest states
    keep = [r for r, lab in zip(rows, labels) if lab == bucket]
    (tmp_path / "long.jsonl").write_text("".join(json.dumps(r) + "\n" for r in keep))
    with connect(sliced["db"]) as con:
        import_traffic(con, tmp_path / "long.jsonl", shadow="logged-long", schema=SCHEMA, replace=True)
        rep = _report(con, "logged", slices="state_length")
        filtered = _report(con, "logged-long")
        starts = (
            _window_items(con, "logged", rep.slices["state_length"].reports[order[-1]]),
            _window_items(con, "logged-long", filtered),
        )
        # the API takes the same argument
        api = wb.shadow_report(
            con, "logged", champion_policy=CHAMP_RULES[0], challenger_policy=CHALL_RULES[0], slices=["state_length"]
        )
    assert starts[0] == starts[1]
    sl = rep.slices["state_length"]
    assert sl.source == "session requests" and sl.values == order
    assert sl.reports[bucket].questions[0]["n_requests"] == len(keep)
    _close(_figures(sl.reports[bucket].to_dict()), _figures(filtered.to_dict()))
    assert api.slices["state_length"].values == order


def test_cli_slice_json_and_unknown_columns(sliced):
    args = ["shadow", "report", "full", "--champion-rule", CHAMP_RULES[0], "--challenger-rule", CHALL_RULES[0]]
    args += ["--n-boot", "100", "--min-outcomes", "20"]
    proc = run_cli(*args, "--slice", "channel", "--json", db=sliced["db"], check=True)
    doc = json.loads(proc.stdout)
    assert doc["slices"]["channel"]["values"][:3] == ["chat", "email", "phone"]
    n = sum(r["questions"][0]["n_requests"] for r in doc["slices"]["channel"]["reports"].values())
    assert n == doc["questions"][0]["n_requests"]
    table = run_cli(*args, "--slice", "channel", db=sliced["db"], check=True)
    assert "by channel (dataset tix v1)" in table.stdout and "email" in table.stdout
    bad = run_cli(*args, "--slice", "language", db=sliced["db"])
    assert bad.returncode == 2 and "'language'" in bad.stderr
    assert "channel" in bad.stderr and "state_length" in bad.stderr
    logged = run_cli("shadow", "report", "logged", "--slice", "channel", "--n-boot", "50", db=sliced["db"])
    assert logged.returncode == 2 and "'channel'" in logged.stderr and "state_length" in logged.stderr
    with connect(sliced["db"]) as con, pytest.raises(NotFoundError, match="'language'"):
        _report(con, "email", slices=["language"])
