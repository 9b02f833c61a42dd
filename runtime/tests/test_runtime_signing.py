"""Signatures and rollout in the runtime alone (HMAC always; Ed25519 when the [ed25519] extra is installed)."""

from __future__ import annotations

import copy
import importlib.util
import json
from pathlib import Path

import pytest
from workbench_runtime import Policy, PolicyError
from workbench_runtime.model import content_hash
from workbench_runtime.signing import generate_key, parse_key, sign_document

DATA = Path(__file__).with_name("data")
HAS_CRYPTOGRAPHY = importlib.util.find_spec("cryptography") is not None
OPTIONS = ["card_arrival", "lost_card", "refund", "top_up", "other"]


@pytest.fixture(scope="module")
def doc() -> dict:
    return json.loads((DATA / "workbench-policy.json").read_text(encoding="utf-8"))


def response(option: str = "card_arrival") -> dict:
    probs = {o: (0.99 if o == option else 0.0025) for o in OPTIONS}
    return {
        "model": "sim-model-1.0",
        "answers": {"intent": {"type": "choice", "probabilities": probs}, "urgent": {"type": "noul", "noul": 0.99}},
    }


def write_key(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


KINDS = ["hmac-sha256", pytest.param("ed25519", marks=pytest.mark.skipif(not HAS_CRYPTOGRAPHY, reason="no [ed25519]"))]


@pytest.mark.parametrize("alg", KINDS)
def test_signed_file_loads_and_any_change_is_refused(tmp_path, doc, alg):
    secret, public, key_id = generate_key(alg)
    sk = write_key(tmp_path, "k", secret)
    vk = write_key(tmp_path, "k.pub", public) if public else sk
    signed = sign_document(copy.deepcopy(doc), sk)
    assert signed["signature"]["alg"] == alg and signed["signature"]["key_id"] == key_id
    assert signed["content_hash"] == doc["content_hash"]
    p = tmp_path / "signed.json"
    p.write_text(json.dumps(signed))
    assert Policy.load(p, verify_key=vk).decide(response())["intent"].accepted
    assert Policy.load(p).decide(response())["intent"].accepted  # without a key the signature is not required

    for edit in (
        lambda d: d["questions"]["intent"]["options"].reverse(),
        lambda d: d["questions"]["intent"]["rule"].update(tau=0.0, margin=0.0),
        lambda d: d.update(notes=["harmless?"]),
        lambda d: d.update(mode="shadow"),
    ):
        changed = copy.deepcopy(signed)
        edit(changed)
        changed["content_hash"] = content_hash(changed)
        with pytest.raises(PolicyError, match="signature does not match"):
            Policy.from_dict(changed, verify_key=vk)
    with pytest.raises(PolicyError, match="not signed"):
        Policy.from_dict(copy.deepcopy(doc), verify_key=vk)
    other = write_key(tmp_path, "other", generate_key(alg)[0])
    with pytest.raises(PolicyError, match="not by the configured key"):
        Policy.load(p, verify_key=other)


def test_key_objects_never_show_their_secret(tmp_path):
    secret, _, _ = generate_key("hmac-sha256")
    key = parse_key(secret)
    b64 = secret.split(":", 1)[1].strip()
    assert b64 not in repr(key) and b64 not in str(key)


def test_malformed_keys_and_signature_blocks_fail_closed(tmp_path, doc):
    bad = write_key(tmp_path, "bad", "workbench-hmac-sha256:!!!\n")
    with pytest.raises(PolicyError, match="not valid base64"):
        Policy.from_dict(copy.deepcopy(doc), verify_key=bad)
    sk = write_key(tmp_path, "k", generate_key("hmac-sha256")[0])
    signed = sign_document(copy.deepcopy(doc), sk)
    signed["signature"]["value"] = 12
    with pytest.raises(PolicyError, match="malformed signature"):
        Policy.from_dict(signed, verify_key=sk)
    with pytest.raises(PolicyError, match="does not exist"):
        Policy.from_dict(copy.deepcopy(doc), verify_key=tmp_path / "missing.key")


@pytest.mark.skipif(HAS_CRYPTOGRAPHY, reason="only meaningful without the [ed25519] extra")
def test_ed25519_without_the_extra_says_how_to_install_it(tmp_path, doc):
    pem = "-----BEGIN PUBLIC KEY-----\nMCowBQYDK2VwAyEA\n-----END PUBLIC KEY-----\n"
    with pytest.raises(PolicyError, match=r"pip install '\./runtime\[ed25519\]'"):
        Policy.from_dict(copy.deepcopy(doc), verify_key=write_key(tmp_path, "k.pub", pem))


def test_rollout_fields_are_honoured(doc):
    shadow = copy.deepcopy(doc)
    shadow["mode"] = "shadow"
    shadow["content_hash"] = content_hash(shadow)
    d = Policy.from_dict(shadow).decide(response("refund"))
    assert all(not x.accepted for x in d.values())
    assert d["intent"].would_accept == "refund" and d["urgent"].would_accept == "yes"
    partial = copy.deepcopy(doc)
    partial["questions"]["intent"]["enabled_options"] = ["refund"]
    partial["content_hash"] = content_hash(partial)
    p = Policy.from_dict(partial)
    assert p.decide(response("refund"))["intent"].accepted
    held = p.decide(response("top_up"))["intent"]
    assert held.action == "review" and held.would_accept == "top_up" and "not enabled" in held.reason
