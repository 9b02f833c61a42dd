"""Policy export → validate → apply → diff, from the CLI and the Python runtime, on a real store."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import run_cli
from tests.policy.conftest import MODEL, OPTIONS, SCHEMA
from workbench.errors import PolicyError
from workbench.policy import FORMAT_VERSION, Policy


def _response(meta: dict, i: int) -> dict:
    p_int = meta["probs"]["intent"][i]
    return {
        "model": MODEL,
        "answers": {
            "intent": {
                "type": "choice",
                "choice": OPTIONS[int(np.argmax(p_int))],
                "probabilities": {o: float(v) for o, v in zip(OPTIONS, p_int)},
            },
            "urgent": {"type": "noul", "noul": float(meta["probs"]["urgent"][i, 0])},
        },
        "usage": {"input_tokens": 12, "output_tokens": 0},
    }


@pytest.fixture(scope="module")
def exported(sim_store) -> dict:
    db, tmp = sim_store["db"], sim_store["tmp"]
    a, b = tmp / "a.json", tmp / "b.json"
    ra = run_cli(
        "policy",
        "export",
        "run-sim",
        "--question",
        "intent",
        "--question",
        "urgent",
        "--out",
        str(a),
        "--max-error",
        "0.05",
        "--delta",
        "0.1",
        "--calibrate",
        "none",
        "--json",
        db=db,
        check=True,
    )
    rb = run_cli(
        "policy",
        "export",
        "run-sim",
        "-q",
        "intent",
        "-q",
        "urgent",
        "--out",
        str(b),
        "--max-error",
        "0.1",
        "--policy-version",
        "1.1.0",
        "--json",
        db=db,
        check=True,
    )
    return {"a": a, "b": b, "export_a": json.loads(ra.stdout), "export_b": json.loads(rb.stdout)}


def test_thresholds_cli_reports_rule_bound_and_test_intervals(sim_store):
    r = run_cli(
        "thresholds",
        "run-sim",
        "--question",
        "intent",
        "--max-error",
        "0.05",
        "--delta",
        "0.1",
        "--json",
        db=sim_store["db"],
        check=True,
    )
    res = json.loads(r.stdout)["questions"]["intent"]
    assert res["certified"] and res["rule"]["tau"] is not None and res["rule"]["margin"] is not None
    g = res["guarantee"]
    assert (g["alpha"], g["delta"], g["method"]) == (0.05, 0.1, "fixed-sequence")
    assert g["n_calibration"] > 0 and g["risk_upper_bound"] <= 0.05 and 0 < g["expected_coverage"] < 1
    assert res["calibration"]["coverage"] == pytest.approx(g["expected_coverage"])
    t = res["test"]
    assert t["error"]["low"] <= t["error"]["value"] <= t["error"]["high"]
    assert t["coverage"]["low"] <= t["coverage"]["value"] <= t["coverage"]["high"]
    assert t["n_items"] == int((sim_store["split"] == "test").sum())
    # the confusion matrix has a review column and accounts for every test item
    m = np.array(t["confusion"]["matrix"])
    assert t["confusion"]["columns"][-1] == "review" and m.shape == (5, 6) and m.sum() == t["n_items"]
    assert m[:, -1].sum() == t["n_review"]
    # uncertified objectives say so
    r = run_cli(
        "thresholds",
        "run-sim",
        "-q",
        "urgent",
        "--objective",
        "error",
        "--target-error",
        "0.05",
        "--json",
        db=sim_store["db"],
        check=True,
    )
    res = json.loads(r.stdout)["questions"]["urgent"]
    assert not res["certified"] and any("NOT certified" in n for n in res["notes"])
    r = run_cli(
        "thresholds",
        "run-sim",
        "-q",
        "intent",
        "--objective",
        "cost",
        "--review-cost",
        "1",
        "--error-cost",
        "20",
        "--json",
        db=sim_store["db"],
        check=True,
    )
    res = json.loads(r.stdout)["questions"]["intent"]
    assert res["cost"]["expected_cost_per_item"] <= res["cost"]["cost_if_everything_reviewed"]


def test_export_validate_and_schema(exported, sim_store):
    a = exported["a"]
    doc = json.loads(a.read_text())
    assert doc["format"] == "workbench.policy" and doc["format_version"] == 1
    assert doc["content_hash"].startswith("sha256:") and doc["policy_version"] == "1.0.0"
    assert doc["decision_schema"]["hash"] == SCHEMA.hash and doc["validity"]["schema_hashes"] == [SCHEMA.hash]
    assert doc["source"]["model"] == MODEL and doc["dataset"]["fingerprint"] == sim_store["fingerprint"]
    assert doc["dataset"]["split_seed"] == 7
    q = doc["questions"]["intent"]
    assert q["objective"]["certified"] and q["objective"]["alpha"] == 0.05 and q["calibrator"]["type"] == "identity"
    assert doc["questions"]["urgent"]["rule"]["kind"] == "noul_two_sided"
    r = run_cli("policy", "validate", str(a), "--json", db=sim_store["db"], check=True)
    assert json.loads(r.stdout)["valid"] is True
    # the shipped JSON Schema is what the CLI prints, matches the model, and accepts the file
    import jsonschema

    from workbench.policy.model import SCHEMA_FILE, json_schema

    printed = json.loads(run_cli("policy", "schema", check=True).stdout)
    assert printed == json.loads(SCHEMA_FILE.read_text())
    assert printed == json.loads(json.dumps(json_schema())), (
        "policy.schema.json is stale: run `python -m workbench.policy.model`"
    )
    jsonschema.validate(doc, printed)


def test_runtime_reproduces_the_expected_test_figures(exported, sim_store):
    """Deciding every stored test answer through Policy.decide gives exactly the exported test metrics."""
    policy = Policy.load(exported["a"])
    test_idx = np.flatnonzero(sim_store["split"] == "test")
    responses = [
        {"error": {"kind": "transient", "message": "HTTP 503"}} if sim_store["failed"][i] else _response(sim_store, i)
        for i in test_idx
    ]
    decisions = policy.decide_many(responses)
    for q in ("intent", "urgent"):
        labels = sim_store["labels"][q][test_idx]
        opts = OPTIONS if q == "intent" else ["yes", "no"]
        accepted = np.array([d[q].accepted for d in decisions])
        wrong = np.array([d[q].accepted and d[q].option != opts[labels[k]] for k, d in enumerate(decisions)])
        expected = policy.model.questions[q].expected_test
        assert accepted.sum() == expected.n_accepted and wrong.sum() == expected.n_errors
        # provider failures were routed to review, never accepted
        failed = sim_store["failed"][test_idx]
        assert all(decisions[k][q].action == "review" for k in np.flatnonzero(failed))
        assert all("provider failure" in decisions[k][q].reason for k in np.flatnonzero(failed))


def test_apply_cli_single_and_batch(exported, sim_store, tmp_path: Path):
    i = int(np.argmax(sim_store["probs"]["intent"].max(axis=1)))  # a very confident item
    one = tmp_path / "one.json"
    one.write_text(json.dumps(_response(sim_store, i)))
    r = run_cli("policy", "apply", str(exported["a"]), "--answers", str(one), "--json", check=True)
    out = json.loads(r.stdout)
    d = out["decisions"]["intent"]
    assert d["action"] == "accept" and d["option"] == OPTIONS[int(np.argmax(sim_store["probs"]["intent"][i]))]
    # python runtime agrees
    py = Policy.load(exported["a"]).decide(_response(sim_store, i))
    assert py["intent"].to_dict() == d
    batch = tmp_path / "batch.jsonl"
    lines = [
        _response(sim_store, i),
        {"error": {"kind": "rate_limit", "message": "429"}},
        {"model": MODEL, "answers": {"urgent": {"type": "noul", "noul": 0.999}}},
    ]
    batch.write_text("\n".join(json.dumps(x) for x in lines))
    out = json.loads(
        run_cli("policy", "apply", str(exported["a"]), "--answers", str(batch), "--json", check=True).stdout
    )
    assert len(out["decisions"]) == 3
    assert (
        out["decisions"][1]["intent"]["action"] == "review"
        and "provider failure" in out["decisions"][1]["intent"]["reason"]
    )
    assert out["decisions"][2]["intent"]["action"] == "review" and "missing" in out["decisions"][2]["intent"]["reason"]
    assert out["counts"]["intent"]["review"] >= 2


def test_every_invalid_path_routes_to_review(exported, sim_store):
    policy = Policy.load(exported["a"])
    i = int(np.argmax(sim_store["probs"]["intent"].max(axis=1)))
    good = _response(sim_store, i)
    assert policy.decide(good)["intent"].accepted
    cases = {
        "provider failure": {"error": "boom"},
        "schema hash mismatch": (good, {"schema_hash": "0" * 64}),
        "model mismatch": {**good, "model": "other-model"},
        "missing answer": {**good, "answers": {}},
        "invalid answer": {**good, "answers": {"intent": {"type": "choice", "probabilities": {"refund": 0.5}}}},
        "refused": {**good, "answers": {"intent": {"type": "refusal"}}},
        "no 'answers'": {"model": MODEL},
        "not an object": ["x"],
    }
    for why, resp in cases.items():
        kwargs = {}
        if isinstance(resp, tuple):
            resp, kwargs = resp
        d = policy.decide(resp, **kwargs)["intent"]
        assert d.action == "review" and d.option is None, why
        assert why.split()[0] in d.reason, (why, d.reason)
    assert policy.decide(good, schema_hash=SCHEMA.hash)["intent"].accepted
    # a state over the token limit of the validity conditions
    limited = Policy(
        policy.model.model_copy(
            update={"validity": policy.model.validity.model_copy(update={"max_state_tokens": 100})}
        ).with_hash()
    )
    assert limited.decide(good, state_tokens=100)["intent"].accepted
    d = limited.decide(good, state_tokens=101)["intent"]
    assert d.action == "review" and "over the policy's limit" in d.reason


def test_tampered_corrupt_and_newer_files_fail_closed(exported, tmp_path: Path, sim_store):
    doc = json.loads(exported["a"].read_text())
    tampered = tmp_path / "tampered.json"
    t = json.loads(json.dumps(doc))
    t["questions"]["intent"]["rule"]["tau"] = 0.0  # accept everything — without re-hashing
    tampered.write_text(json.dumps(t))
    with pytest.raises(PolicyError, match="content hash mismatch"):
        Policy.load(tampered)
    corrupt = tmp_path / "corrupt.json"
    corrupt.write_text(exported["a"].read_text()[:200])
    with pytest.raises(PolicyError, match="corrupt"):
        Policy.load(corrupt)
    from workbench.policy.model import content_hash

    newer = tmp_path / "newer.json"
    n = json.loads(json.dumps(doc))
    n["format_version"] = FORMAT_VERSION + 1
    n["content_hash"] = content_hash(n)  # correctly hashed, but a format this code cannot read
    newer.write_text(json.dumps(n))
    with pytest.raises(PolicyError, match="newer"):
        Policy.load(newer)
    # an unknown key, correctly hashed, is refused too (extra="forbid")
    extra = tmp_path / "extra.json"
    e = json.loads(json.dumps(doc))
    e["questions"]["intent"]["rule"]["always_accept"] = True
    e["content_hash"] = content_hash(e)
    extra.write_text(json.dumps(e))
    with pytest.raises(PolicyError, match="invalid policy"):
        Policy.load(extra)
    for f, words in ((tampered, "hash mismatch"), (corrupt, "corrupt"), (newer, "newer")):
        r = run_cli("policy", "validate", str(f))
        assert r.returncode == 2 and words in r.stderr and r.stderr.count("\n") == 1, r.stderr
        r = run_cli("policy", "apply", str(f), "--answers", str(exported["a"]))
        assert r.returncode == 2 and r.stdout == ""


def test_diff_reports_changes_and_movement_on_run(exported, sim_store):
    r = run_cli(
        "policy",
        "diff",
        str(exported["a"]),
        str(exported["b"]),
        "--run",
        "run-sim",
        "--json",
        db=sim_store["db"],
        check=True,
    )
    d = json.loads(r.stdout)
    assert not d["identical"] and d["version"] == {"a": "1.0.0", "b": "1.1.0", "b_is_newer": True}
    paths = {c["path"] for c in d["changes"]}
    assert "questions.intent.objective.alpha" in paths and "policy_version" in paths
    moves = d["on_run"]["questions"]["intent"]
    # a looser alpha never accepts less on the same items
    assert moves["coverage_change"] >= 0
    a, b = Policy.load(exported["a"]).model, Policy.load(exported["b"]).model
    assert moves["a"]["coverage"]["value"] == pytest.approx(a.questions["intent"].expected_test.coverage.value)
    assert moves["b"]["coverage"]["value"] == pytest.approx(b.questions["intent"].expected_test.coverage.value)
    same = json.loads(run_cli("policy", "diff", str(exported["a"]), str(exported["a"]), "--json", check=True).stdout)
    assert same["identical"] and same["changes"] == []


def test_jev_eval_export_is_conservative_and_says_what_it_drops(sim_store, tmp_path: Path):
    out = tmp_path / "p.json"
    r = run_cli(
        "policy",
        "export",
        "run-sim",
        "-q",
        "intent",
        "-q",
        "urgent",
        "--out",
        str(out),
        "--format",
        "jev-eval",
        "--calibrate",
        "none",
        "--json",
        db=sim_store["db"],
        check=True,
    )
    info = json.loads(r.stdout)["jev_eval"]
    jev = json.loads(Path(info["path"]).read_text())
    assert jev["version"] == 1 and jev["model"] == MODEL and set(jev["questions"]) == {"intent", "urgent"}
    for q in ("intent", "urgent"):
        e = jev["questions"][q]
        assert {"type", "threshold", "accuracy", "coverage", "n"} <= set(e) and 0 <= e["threshold"] <= 1
        assert jev["definitions"][q] == SCHEMA.to_wire()[q]
    assert any("margin" in s for s in jev["workbench"]["cannotCarry"]["intent"])
    # accuracy/coverage/n are the gate's own figures on the test split (recomputed here from raw probs)
    test = sim_store["split"] == "test"
    p_t, y_t = sim_store["probs"]["intent"][test], sim_store["labels"]["intent"][test]
    ok = ~sim_store["failed"][test]
    conf = (len(OPTIONS) * p_t.max(axis=1) - 1) / (len(OPTIONS) - 1)
    g = ok & (conf >= jev["questions"]["intent"]["threshold"])
    assert jev["questions"]["intent"]["n"] == int(test.sum())
    assert jev["questions"]["intent"]["coverage"] == pytest.approx(g.sum() / test.sum())
    assert jev["questions"]["intent"]["accuracy"] == pytest.approx((p_t.argmax(axis=1) == y_t)[g].mean())
    # every item the jev gate accepts, the policy accepts too (margin converted conservatively)
    policy = Policy.load(out)
    p = sim_store["probs"]["intent"]
    n = len(OPTIONS)
    jev_conf = (n * p.max(axis=1) - 1) / (n - 1)
    gate = jev_conf >= jev["questions"]["intent"]["threshold"]
    assert gate.sum() > 0
    ours = np.array(
        [d["intent"].accepted for d in policy.decide_many([_response(sim_store, i) for i in np.flatnonzero(gate)])]
    )
    assert ours.all()
    pu = sim_store["probs"]["urgent"][:, 0]
    gate_u = np.abs(pu - 0.5) * 2 >= jev["questions"]["urgent"]["threshold"]
    ours_u = np.array(
        [d["urgent"].accepted for d in policy.decide_many([_response(sim_store, i) for i in np.flatnonzero(gate_u)])]
    )
    assert ours_u.all()


def test_runtime_imports_no_heavy_libraries(exported):
    code = (
        "import sys, json; from workbench.policy import Policy; "
        f"p = Policy.load({str(exported['a'])!r}); "
        "p.decide({'error': 'x'}); "
        "heavy = sorted({m.split('.')[0] for m in sys.modules} & "
        "{'duckdb', 'pandas', 'sklearn', 'scipy', 'plotly', 'pyarrow', 'streamlit', 'yaml', 'torch'}); "
        "print(json.dumps(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == []
