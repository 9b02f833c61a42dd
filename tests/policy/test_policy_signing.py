"""Signed policies and gradual rollout from the CLI, checked by the runtime (issue 14 signing; issue 10 §4).

Starts from the workbench-exported policy committed for the runtime's tests (``runtime/tests/data``).
"""

from __future__ import annotations

import base64
import copy
import json
import shutil
import stat
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.policy import runtime_fixture as fx
from workbench.errors import PolicyError
from workbench.policy import Policy
from workbench.policy.model import content_hash

OPTIONS = ["card_arrival", "lost_card", "refund", "top_up", "other"]


def sure(option: str = "card_arrival", p: float = 0.99) -> dict:
    rest = (1.0 - p) / (len(OPTIONS) - 1)
    return {"type": "choice", "choice": option, "probabilities": {o: (p if o == option else rest) for o in OPTIONS}}


def response(option: str = "card_arrival", p_yes: float = 0.99) -> dict:
    return {"model": "sim-model-1.0", "answers": {"intent": sure(option), "urgent": {"type": "noul", "noul": p_yes}}}


@pytest.fixture
def policy_file(tmp_path) -> Path:
    p = tmp_path / "policy.json"
    shutil.copy(fx.DATA / fx.POLICY_NAME, p)
    return p


def keygen(tmp_path: Path, kind: str) -> dict:
    out = run_cli("policy", "keygen", "--type", kind, "--out", str(tmp_path / f"{kind}.key"), "--json", check=True)
    return json.loads(out.stdout)


def secret_material(key: dict) -> list[str]:
    """Strings that would reveal the secret key if they appeared anywhere."""
    text = Path(key["secret_key"]).read_text()
    if text.startswith("workbench-hmac-sha256:"):
        b64 = text.split(":", 1)[1].strip()
        return [b64, base64.b64decode(b64).hex()]
    return [line for line in text.splitlines() if line and not line.startswith("-----")]


@pytest.mark.parametrize("kind", ["ed25519", "hmac-sha256"])
def test_sign_verify_round_trip_cli_and_runtime(tmp_path, policy_file, kind):
    key = keygen(tmp_path, kind)
    secret = Path(key["secret_key"])
    assert stat.S_IMODE(secret.stat().st_mode) == 0o600
    verify_with = Path(key["public_key"]) if kind == "ed25519" else secret
    hash_before = json.loads(policy_file.read_text())["content_hash"]

    signed = run_cli("policy", "sign", str(policy_file), "--key", str(secret), "--json", check=True)
    sig = json.loads(signed.stdout)["signature"]
    assert sig == {"alg": kind, "key_id": key["key_id"]}
    doc = json.loads(policy_file.read_text())
    assert doc["content_hash"] == hash_before  # signing does not change the content
    ok = run_cli("policy", "verify", str(policy_file), "--key", str(verify_with), "--json")
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["signature"]["verified"] is True
    assert run_cli("policy", "validate", str(policy_file), "--key", str(verify_with)).returncode == 0

    # the runtime, configured with the key, loads it and decides
    d = Policy.load(policy_file, verify_key=verify_with).decide(response())
    assert d["intent"].accepted
    applied = tmp_path / "answers.json"
    applied.write_text(json.dumps(response()))
    out = run_cli(
        "policy", "apply", str(policy_file), "--answers", str(applied), "--verify-key", str(verify_with), "--json"
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["decisions"]["intent"]["action"] == "accept"

    # no key material anywhere it could leak: outputs and the policy file
    everything = signed.stdout + signed.stderr + ok.stdout + ok.stderr + out.stdout + policy_file.read_text()
    for s in secret_material(key):
        assert s not in everything


@pytest.mark.parametrize("kind", ["ed25519", "hmac-sha256"])
def test_configured_runtime_refuses_unsigned_tampered_and_foreign(tmp_path, policy_file, kind):
    key = keygen(tmp_path, kind)
    other = run_cli("policy", "keygen", "--type", kind, "--out", str(tmp_path / "other.key"), "--json", check=True)
    other_secret = json.loads(other.stdout)["secret_key"]
    verify_with = key["public_key"] or key["secret_key"]

    unsigned = run_cli("policy", "verify", str(policy_file), "--key", verify_with)
    assert unsigned.returncode == 2 and "not signed" in unsigned.stderr and "Traceback" not in unsigned.stderr
    with pytest.raises(PolicyError, match="not signed"):
        Policy.load(policy_file, verify_key=verify_with)

    run_cli("policy", "sign", str(policy_file), "--key", key["secret_key"], check=True)
    # issue 14 item 1: reverse the options and recompute the hash -> caught by the option check AND the signature
    doc = json.loads(policy_file.read_text())
    doc["questions"]["intent"]["options"].reverse()
    doc["content_hash"] = content_hash(doc)
    tampered = tmp_path / "tampered.json"
    tampered.write_text(json.dumps(doc))
    with pytest.raises(PolicyError, match="signature does not match"):
        Policy.load(tampered, verify_key=verify_with)
    # a margin of 0 with a recomputed hash: consistent options, so only the signature catches it
    doc = json.loads(policy_file.read_text())
    doc["questions"]["intent"]["rule"].update(tau=0.0, margin=0.0)
    doc["content_hash"] = content_hash(doc)
    loosened = tmp_path / "loosened.json"
    loosened.write_text(json.dumps(doc))
    assert Policy.load(loosened).decide(response())["intent"].accepted  # without a key it would load
    res = run_cli("policy", "apply", str(loosened), "--answers", str(loosened), "--verify-key", verify_with)
    assert res.returncode == 2 and "signature does not match" in res.stderr and "Traceback" not in res.stderr
    # signed by another key of the same kind
    res = run_cli("policy", "verify", str(policy_file), "--key", other_secret)
    assert res.returncode == 2 and "not by the configured key" in res.stderr
    # a stripped signature is an unsigned file
    doc = json.loads(policy_file.read_text())
    doc.pop("signature")
    stripped = tmp_path / "stripped.json"
    stripped.write_text(json.dumps(doc))
    with pytest.raises(PolicyError, match="not signed"):
        Policy.load(stripped, verify_key=verify_with)


def test_keygen_refuses_to_overwrite_and_public_key_cannot_sign(tmp_path, policy_file):
    key = keygen(tmp_path, "ed25519")
    again = run_cli("policy", "keygen", "--type", "ed25519", "--out", key["secret_key"])
    assert again.returncode == 2 and "exists" in again.stderr
    res = run_cli("policy", "sign", str(policy_file), "--key", key["public_key"])
    assert res.returncode == 2 and "public key cannot sign" in res.stderr
    bogus = tmp_path / "bogus.key"
    bogus.write_text("not a key\n")
    res = run_cli("policy", "verify", str(policy_file), "--key", str(bogus))
    assert res.returncode == 2 and "not a policy key file" in res.stderr and "not a key" not in res.stderr


# -- gradual rollout -------------------------------------------------------------------------------
def test_disable_enable_bump_version_keep_hash_and_runtime_honours(tmp_path, policy_file):
    before = Policy.load(policy_file)
    res = run_cli("policy", "disable", str(policy_file), "--option", "card_arrival", "--json", check=True)
    doc = json.loads(res.stdout)
    assert doc["changed"] and doc["question"] == "intent" and doc["policy_version"] == "1.1.0"
    assert doc["enabled_options"]["after"] == ["lost_card", "refund", "top_up", "other"]
    p = Policy.load(policy_file)  # the hash is right
    assert p.content_hash == doc["content_hash"] != before.content_hash
    d = p.decide(response("card_arrival"))["intent"]
    assert d.action == "review" and d.option is None and d.would_accept == "card_arrival"
    assert "not enabled" in d.reason
    assert p.decide(response("refund"))["intent"].accepted  # other routes are unaffected

    # --all then one option: start a rollout with a single route
    run_cli("policy", "disable", str(policy_file), "--all", "-q", "intent", check=True)
    run_cli("policy", "enable", str(policy_file), "--option", "top_up", check=True)
    p = Policy.load(policy_file)
    assert p.version == "1.3.0" and p.model.questions["intent"].enabled_options == ["top_up"]
    assert [p.decide(response(o))["intent"].accepted for o in OPTIONS] == [False, False, False, True, False]
    assert p.decide(response())["urgent"].accepted  # the yes/no question keeps all its options

    # no-op: nothing written, no version bump
    res = run_cli("policy", "enable", str(policy_file), "--option", "top_up", "--json", check=True)
    assert json.loads(res.stdout)["changed"] is False and Policy.load(policy_file).version == "1.3.0"

    diff = run_cli("policy", "diff", str(fx.DATA / fx.POLICY_NAME), str(policy_file), "--json", check=True)
    rollout = json.loads(diff.stdout)["rollout"]
    assert rollout["questions"]["intent"]["b"] == ["top_up"]
    assert rollout["questions"]["intent"]["disabled"] == ["card_arrival", "lost_card", "other", "refund"]
    text = run_cli("policy", "diff", str(fx.DATA / fx.POLICY_NAME), str(policy_file), check=True).stdout
    assert "auto-accept enabled for 1 option " in text and "-card_arrival" in text


def test_shadow_mode_reviews_everything_and_records_the_would_be_decision(tmp_path, policy_file):
    run_cli("policy", "mode", str(policy_file), "shadow", check=True)
    p = Policy.load(policy_file)
    assert p.model.mode == "shadow" and p.version == "1.1.0"
    d = p.decide(response())
    assert all(x.action == "review" and x.option is None for x in d.values())
    assert d["intent"].would_accept == "card_arrival" and "shadow mode" in d["intent"].reason
    assert d["urgent"].would_accept == "yes"
    live = Policy.load(fx.DATA / fx.POLICY_NAME).decide(response())
    assert {q: x.option for q, x in live.items()} == {q: x.would_accept for q, x in d.items()}
    text = run_cli("policy", "diff", str(fx.DATA / fx.POLICY_NAME), str(policy_file), check=True).stdout
    assert "mode: live -> shadow" in text


def test_rollout_on_a_signed_file_resigns_with_key_or_drops_the_signature(tmp_path, policy_file):
    key = keygen(tmp_path, "hmac-sha256")
    run_cli("policy", "sign", str(policy_file), "--key", key["secret_key"], check=True)
    res = run_cli("policy", "disable", str(policy_file), "--option", "other", "--key", key["secret_key"], "--json")
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["signature"]["key_id"] == key["key_id"]
    assert Policy.load(policy_file, verify_key=key["secret_key"]).model.questions["intent"].enabled_options
    res = run_cli("policy", "enable", str(policy_file), "--option", "other")
    assert res.returncode == 0 and "signature no longer matches" in res.stderr
    doc = json.loads(policy_file.read_text())
    assert "signature" not in doc and Policy.load(policy_file).version == "1.2.0"
    with pytest.raises(PolicyError, match="not signed"):
        Policy.load(policy_file, verify_key=key["secret_key"])


def test_rollout_options_are_checked(policy_file):
    res = run_cli("policy", "disable", str(policy_file), "--option", "country_support")
    assert res.returncode == 2 and "country_support" in res.stderr and "Traceback" not in res.stderr
    doc = json.loads(policy_file.read_text())
    bad = copy.deepcopy(doc)
    bad["questions"]["intent"]["enabled_options"] = ["country_support"]
    bad["content_hash"] = content_hash(bad)
    with pytest.raises(PolicyError, match="enabled_options names unknown option"):
        Policy.from_dict(bad)


# -- policy apply: bad input never prints a traceback; --request checks definitions ----------------
def test_apply_huge_integer_and_duplicates_without_traceback(tmp_path, policy_file):
    good = json.dumps(response())
    huge = good.replace('"noul": 0.99', '"noul": ' + "1" * 401)
    dup = good[:-2] + ', "intent": ' + json.dumps(sure("refund")) + "}}"
    answers = tmp_path / "answers.jsonl"
    answers.write_text("\n".join([good, huge, dup, good]) + "\n")
    res = run_cli("policy", "apply", str(policy_file), "--answers", str(answers), "--json")
    assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr
    rows = json.loads(res.stdout)["decisions"]
    assert rows[0]["urgent"]["action"] == "accept" and rows[3]["intent"]["action"] == "accept"
    assert rows[1]["urgent"]["action"] == "review" and "outside [0, 1]" in rows[1]["urgent"]["reason"]
    assert rows[2]["intent"]["action"] == "review" and "more than once" in rows[2]["intent"]["reason"]


def test_apply_request_checks_question_definitions(tmp_path, policy_file):
    schema = json.loads(policy_file.read_text())["decision_schema"]["questions"]
    same = {"model": "sim-model-1.0", "state": "hi", "questions": schema}
    reworded = copy.deepcopy(same)
    reworded["questions"]["intent"]["instructions"] = "Which intent, roughly?"
    reordered = copy.deepcopy(same)
    reordered["questions"]["intent"]["criteria"] = dict(reversed(list(schema["intent"]["criteria"].items())))
    answers = tmp_path / "answers.json"
    answers.write_text(json.dumps([response()] * 3))
    requests = tmp_path / "requests.json"
    requests.write_text(json.dumps([same, reworded, reordered]))
    res = run_cli("policy", "apply", str(policy_file), "--answers", str(answers), "--request", str(requests), "--json")
    assert res.returncode == 0, res.stderr
    rows = json.loads(res.stdout)["decisions"]
    assert rows[0]["intent"]["action"] == "accept"
    for row in rows[1:]:
        assert row["intent"]["action"] == "review" and "differs from the policy" in row["intent"]["reason"]
        assert row["urgent"]["action"] == "accept"  # the unchanged question is judged on its own
    one = tmp_path / "one.json"
    one.write_text(json.dumps(reworded))
    rows = json.loads(
        run_cli(
            "policy", "apply", str(policy_file), "--answers", str(answers), "--request", str(one), "--json", check=True
        ).stdout
    )["decisions"]
    assert all(r["intent"]["action"] == "review" for r in rows)
    two = tmp_path / "two.json"
    two.write_text(json.dumps([same, same]))
    res = run_cli("policy", "apply", str(policy_file), "--answers", str(answers), "--request", str(two))
    assert res.returncode == 2 and "2 requests for 3 responses" in res.stderr


def test_validate_refuses_reversed_options_with_recomputed_hash(tmp_path, policy_file):
    doc = json.loads(policy_file.read_text())
    doc["questions"]["intent"]["options"].reverse()
    doc["content_hash"] = content_hash(doc)
    policy_file.write_text(json.dumps(doc))
    res = run_cli("policy", "validate", str(policy_file))
    assert res.returncode == 2 and "options differ from the embedded decision schema" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1
