"""Planning: question slices, cache keys over the exact bytes sent, splitting over provider limits."""

from __future__ import annotations

import hashlib

import httpx
import pytest
from httpx_aiohttp import AiohttpTransport

from workbench.emulator import run_emulator
from workbench.errors import WorkbenchError
from workbench.runner import run_experiment
from workbench.runner.plan import KEY_VERSION, cache_key, plan_slices, request_json
from workbench.schema import DecisionSchema
from workbench.store.db import connect
from workbench.store.runs import get_run


def noul_schema(n: int) -> DecisionSchema:
    return DecisionSchema.from_dict(
        {"questions": {f"q{i:02d}": {"type": "noul", "instructions": f"Is it about topic {i}?"} for i in range(n)}}
    )


def test_slices_partition_the_schema_in_order():
    s = noul_schema(7)
    for max_q, per in ((None, None), (3, None), (None, 2), (5, 2), (64, 1)):
        slices = plan_slices(s, max_questions=max_q, questions_per_request=per)
        flat = [q for sl in slices for q in sl.question_ids]
        assert flat == s.question_ids
        cap = min(c for c in (max_q, per, 7) if c is not None)
        assert all(len(sl.question_ids) <= cap for sl in slices) and len(slices) == -(-7 // cap)
    with pytest.raises(WorkbenchError):
        plan_slices(s, questions_per_request=0)


def test_cache_key_is_sha256_of_the_exact_request_and_order_sensitive():
    a = DecisionSchema.from_dict(
        {"questions": {"q": {"type": "choice", "instructions": "Which?", "criteria": {"x": "ex", "y": None}}}}
    )
    b = DecisionSchema.from_dict(
        {"questions": {"q": {"type": "choice", "instructions": "Which?", "criteria": {"y": None, "x": "ex"}}}}
    )
    (sa,), (sb,) = plan_slices(a), plan_slices(b)
    body = request_json("hi", sa.questions_json, model="clef")
    assert (
        body == '{"model":"clef","state":"hi","questions":{"q":{"type":"choice","instructions":"Which?",'
        '"criteria":{"x":"ex","y":null}}}}'
    )
    expected = hashlib.sha256(
        ("\x1f".join([f"wb-call-v{KEY_VERSION}", "cloudflare:clef", "clef", "cloudflare", ""]) + "\x1e" + body).encode()
    ).hexdigest()
    assert cache_key("cloudflare:clef", "clef", "cloudflare", body) == expected
    other_order = request_json("hi", sb.questions_json, model="clef")
    keys = {
        cache_key("cloudflare:clef", "clef", "cloudflare", body),
        cache_key("cloudflare:clef", "clef", "cloudflare", other_order),  # option order matters
        cache_key("cloudflare:clef-flash", "clef-flash", "cloudflare", body),
        cache_key("cloudflare:clef", "clef", "systemone", body),
        cache_key("cloudflare:clef", "clef", "cloudflare", body, item_id="i1"),
    }
    assert len(keys) == 5


class RecordingTransport(httpx.AsyncBaseTransport):
    """Keeps the bytes of every request body, then sends it for real."""

    def __init__(self):
        self.inner = AiohttpTransport()
        self.bodies: list[bytes] = []

    async def handle_async_request(self, request):
        self.bodies.append(await request.aread())
        return await self.inner.handle_async_request(request)

    async def aclose(self):
        await self.inner.aclose()


def test_stored_cache_keys_hash_the_bytes_that_went_over_the_wire(banking_db):
    db, name = banking_db
    con = connect(db)
    from .conftest import banking_schema

    rec = RecordingTransport()
    with run_emulator(port=0) as emu:
        env = {
            "CLOUDFLARE_API_KEY": "dummy-key-123456",
            "CLOUDFLARE_ACCOUNT_ID": "0" * 32,
            "CLOUDFLARE_CLEF_BASE_URL": emu.cloudflare_base_url,
        }
        (run_id,) = run_experiment(
            con,
            dataset=name,
            schema=banking_schema(),
            provider_specs=["cloudflare:clef"],
            env=env,
            limit=12,
            transport=rec,
        )
    assert len(rec.bodies) == 12
    # key v2: the spec carries the endpoint's public URL (an emulator's answers are not the service's)
    key_spec = f"cloudflare:clef@{emu.cloudflare_base_url}/accounts/{'0' * 32}/ai/run/@cf/cloudflare/clef"
    sent = {cache_key(key_spec, "clef", "cloudflare", b.decode("utf-8")) for b in rec.bodies}
    stored = {r[0] for r in con.execute("SELECT cache_key FROM calls WHERE run_id = ?", [run_id]).fetchall()}
    assert stored == sent


def test_schema_over_the_provider_limit_is_split_into_several_requests(banking_db):
    db, name = banking_db
    con = connect(db)
    schema = noul_schema(66)  # Workers AI accepts 64 questions per request
    with run_emulator(port=0) as emu:
        env = {
            "CLOUDFLARE_API_KEY": "dummy-key-123456",
            "CLOUDFLARE_ACCOUNT_ID": "0" * 32,
            "CLOUDFLARE_CLEF_BASE_URL": emu.cloudflare_base_url,
        }
        (run_id,) = run_experiment(
            con, dataset=name, schema=schema, provider_specs=["cloudflare:clef-flash"], env=env, limit=5
        )
        assert emu.request_count() == 10 and emu.stats["by_status"] == {"200": 10}
    s = get_run(con, run_id)["summary"]
    assert s["answered"] == 5 * 66 and s["failed"] == 0
    per_item = con.execute(
        "SELECT count(DISTINCT cache_key) FROM answers WHERE run_id = ? GROUP BY item_id", [run_id]
    ).fetchall()
    assert {r[0] for r in per_item} == {2}
