"""Production path over real loopback HTTP: System One responses from the emulator go straight into
Policy.decide; HTTP failures and malformed bodies become {"error": ...} and are routed to review."""

from __future__ import annotations

import json

import httpx
import pytest

from tests.conftest import run_cli
from tests.policy.conftest import SCHEMA
from workbench.emulator import FaultConfig, run_emulator
from workbench.policy import Policy


def call(client: httpx.Client, state: str) -> dict:
    """What a production caller does: POST, and turn any failure into an error object (never a probability)."""
    try:
        r = client.post("/v1/systemone", json={"model": "jev-latest", "state": state, "questions": SCHEMA.to_wire()})
        if r.status_code != 200:
            return {"error": {"kind": f"http_{r.status_code}"}}
        return r.json()
    except (httpx.HTTPError, json.JSONDecodeError) as exc:
        return {"error": {"kind": type(exc).__name__}}


@pytest.fixture(scope="module")
def any_model_policy(sim_store, tmp_path_factory) -> Policy:
    out = tmp_path_factory.mktemp("emu") / "p.json"
    run_cli(
        "policy",
        "export",
        "run-sim",
        "-q",
        "intent",
        "-q",
        "urgent",
        "--out",
        str(out),
        "--any-model",
        "--max-error",
        "0.2",
        db=sim_store["db"],
        check=True,
    )
    return Policy.load(out)


def test_emulator_responses_and_failures(any_model_policy):
    states = [
        "my card has not arrived yet",
        "I lost my card, please block it",
        "how do I top up?",
        "refund my purchase please",
        "urgent!!! someone stole my money",
    ] * 4
    with run_emulator(port=0) as emu, httpx.Client(base_url=emu.base_url, timeout=10) as client:
        ok = [call(client, s) for s in states]
        emu.faults = FaultConfig(server_error=0.5, malformed=0.5, seed=3)
        bad = [call(client, s) for s in states[:6]]
    assert all("answers" in r for r in ok)
    decisions = any_model_policy.decide_many(ok, schema_hash=SCHEMA.hash)
    for r, d in zip(ok, decisions):
        for q in ("intent", "urgent"):
            assert d[q].action in ("accept", "review")
            if d[q].accepted:  # an accepted option is the top option of the (identity-calibrated) answer
                a = r["answers"][q]
                top = (
                    max(a["probabilities"], key=a["probabilities"].get)
                    if q == "intent"
                    else ("yes" if a["noul"] >= 0.5 else "no")
                )
                assert d[q].option == top
    assert any(x.accepted for d in decisions for x in d.values())  # the check above was exercised
    assert all(("error" in r) for r in bad)
    for d in any_model_policy.decide_many(bad, schema_hash=SCHEMA.hash):
        assert all(x.action == "review" and "provider failure" in x.reason for x in d.values())
    # the same responses against a hash the policy does not accept: nothing is auto-accepted
    other = any_model_policy.decide_many(ok, schema_hash="f" * 64)
    assert not any(x.accepted for d in other for x in d.values())
