"""The per-call fast path of HttpProvider: body text, headers and cookies as a real server sees them."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from workbench.providers.base import DecisionRequest
from workbench.providers.remote import build_http_provider

from .conftest import SECRET, run, three_type_schema

PNG = "data:image/png;base64,iVBORw0KGgo="


def _env(base: str) -> dict[str, str]:
    return {
        "CLOUDFLARE_CLEF_BASE_URL": base + "/client/v4",
        "CLOUDFLARE_API_KEY": SECRET,
        "CLOUDFLARE_ACCOUNT_ID": "0123456789abcdef0123456789abcdef",
        "PERPLEXITY_BASE_URL": base,
        "PERPLEXITY_API_KEY": SECRET,
        "TYPESAFE_BASE_URL": base,
        "TYPESAFE_API_KEY": SECRET,
        "OPENAI_BASE_URL": base,
        "OPENAI_API_KEY": SECRET,
        "WORKBENCH_SYSTEMONE_API_KEY": SECRET,
    }


STATES = ['Où est ma carte ? \u2603 "quoted"', 42, 3.5, True, None, "", {"text": "hi", "n": [1, 2]}, ["a", "b"]]


@pytest.mark.parametrize(
    "spec",
    [
        "cloudflare:clef-flash",
        "typesafe:jev-1.13.0",
        "perplexity:pplx-decider-v1-27b",
        "openai:gpt-6-luna",
        "systemone:http://127.0.0.1:9/v1/systemone",
    ],
)
def test_render_body_is_the_json_of_build_body(spec):
    """The fast renderer (questions JSON cached per schema) writes the same text as json.dumps."""
    provider = build_http_provider(spec, env=_env("http://127.0.0.1:9"))
    schema = three_type_schema()
    sub = schema.subset(["stolen"])
    try:
        for state in STATES:
            for images in ((), (PNG,), (PNG, PNG)):
                for s in (schema, sub, schema):  # a second schema object in between: no stale cache
                    request = DecisionRequest(s, state, images=images)
                    expected = json.dumps(provider.build_body(request), ensure_ascii=False, separators=(",", ":"))
                    assert provider.render_body(request) == expected
    finally:
        run(provider.aclose())


class _Recorder(BaseHTTPRequestHandler):
    """Answers every POST with a System One body and a Set-Cookie; keeps what it received."""

    seen: list[tuple[dict[str, str], bytes]] = []

    def do_POST(self):  # noqa: N802 (http.server API)
        body = self.rfile.read(int(self.headers["content-length"]))
        type(self).seen.append(({k.lower(): v for k, v in self.headers.items()}, body))
        out = json.dumps(
            {"model": "jev-1.13.0", "usage": {"input_tokens": 12}, "answers": {"stolen": {"type": "noul", "noul": 0.8}}}
        ).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(out)))
        self.send_header("set-cookie", "session=abc123; Path=/")
        self.send_header("x-request-id", f"req-{len(type(self).seen)}")
        self.end_headers()
        self.wfile.write(out)

    def log_message(self, *args):
        pass


@pytest.fixture
def recorder():
    _Recorder.seen = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", _Recorder.seen
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("injected", [False, True], ids=["default-client", "injected-httpx-transport"])
def test_wire_request_headers_body_and_no_cookie_persistence(recorder, injected):
    base, seen = recorder
    transport = httpx.AsyncHTTPTransport() if injected else None
    provider = build_http_provider("typesafe:jev-1.13.0", env=_env(base), transport=transport)
    request = DecisionRequest(three_type_schema().subset(["stolen"]), "my card is gone")

    async def twice():
        try:
            return [await provider.decide(request) for _ in range(2)]
        finally:
            await provider.aclose()

    results = run(twice())
    assert [r.request_id for r in results] == ["req-1", "req-2"]
    assert results[0].answers["stolen"].probs.tolist() == pytest.approx([0.8, 0.2])
    assert len(seen) == 2
    for headers, body in seen:
        assert body == provider.render_body(request).encode("utf-8")
        assert headers["authorization"] == f"Bearer {SECRET}"
        assert headers["content-type"] == "application/json"
        assert headers["user-agent"] == "decision-workbench/0.1"
        assert headers["content-length"] == str(len(body))
        assert headers["host"] == base.removeprefix("http://")
        assert "accept-encoding" in headers  # httpx's client defaults are still merged in
        assert "cookie" not in headers  # the Set-Cookie of the first answer is not sent back


def test_no_cookie_sent_back_to_a_named_host(recorder):
    """aiohttp's own cookie jar refuses cookies of an IP address but kept those of a host name and sent
    them back with the next call; the client's session has no cookie jar at all."""
    base, seen = recorder
    base = base.replace("127.0.0.1", "localhost")
    provider = build_http_provider("typesafe:jev-1.13.0", env=_env(base))
    request = DecisionRequest(three_type_schema().subset(["stolen"]), "my card is gone")

    async def twice():
        try:
            return [await provider.decide(request) for _ in range(2)]
        finally:
            await provider.aclose()

    assert [r.request_id for r in run(twice())] == ["req-1", "req-2"]
    assert [h.get("cookie") for h, _ in seen] == [None, None]


class _Body(BaseHTTPRequestHandler):
    """Answers every POST with ``type(self).body`` as it is (bytes)."""

    body = b""

    def do_POST(self):  # noqa: N802 (http.server API)
        self.rfile.read(int(self.headers["content-length"]))
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(type(self).body)))
        self.end_headers()
        self.wfile.write(type(self).body)

    def log_message(self, *args):
        pass


_ANSWER = {
    "model": "jev-1.13.0",
    "usage": {"input_tokens": 12},
    "answers": {"stolen": {"type": "noul", "noul": 0.8, "note": "carte \u00e9 \u2603"}},
}


@pytest.mark.parametrize(
    "spec, body, kept",
    [
        # a System One body: stored as received (spaces and \u escapes kept), json.loads gives raw back
        ("typesafe:jev-1.13.0", json.dumps(_ANSWER, indent=1).encode(), True),
        ("typesafe:jev-1.13.0", json.dumps(_ANSWER, ensure_ascii=False).encode(), True),
        # a UTF-8 BOM (json.loads reads it from bytes only): parsed by httpx, stored re-serialised
        ("typesafe:jev-1.13.0", b"\xef\xbb\xbf" + json.dumps(_ANSWER).encode(), False),
        # Cloudflare's envelope: what is stored is the System One body inside it, as received when the
        # envelope is compact with "result" first (the service's own form), else re-serialised
        ("cloudflare:clef-flash", json.dumps({"result": _ANSWER, "success": True, "errors": []}).encode(), False),
        (
            "cloudflare:clef-flash",
            ('{"result":' + json.dumps(_ANSWER, indent=1) + ',"success":true,"errors":[]}').encode(),
            "result",
        ),
    ],
)
def test_the_cached_response_is_the_body_as_received_when_it_is_system_one(spec, body, kept):
    from workbench.runner.execute import call_row
    from workbench.runner.plan import WorkUnit

    _Body.body = body
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Body)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        provider = build_http_provider(spec, env=_env(f"http://127.0.0.1:{server.server_address[1]}"))
        request = DecisionRequest(three_type_schema().subset(["stolen"]), "my card is gone")

        async def once():
            try:
                return await provider.decide(request)
            finally:
                await provider.aclose()

        result = run(once())
    finally:
        server.shutdown()
        server.server_close()
    assert result.raw == _ANSWER and result.answers["stolen"].probs.tolist() == pytest.approx([0.8, 0.2])
    unit = WorkUnit(item_id="i", split="test", state=None, images=(), slice_index=0, cache_key="k")
    row = call_row(unit, spec, "m", "run", result)
    assert row is not None and json.loads(row["response"]) == _ANSWER
    if kept == "result":
        assert result.raw_text == json.dumps(_ANSWER, indent=1) and row["response"] == result.raw_text
    elif kept:
        assert result.raw_text == body.decode("utf-8") and row["response"] == result.raw_text
    else:
        assert result.raw_text is None
        assert row["response"] == json.dumps(_ANSWER, ensure_ascii=False, separators=(",", ":"))


@pytest.mark.parametrize(
    "text",
    [
        '{"result":{"answers":{"a":{"noul":0.5}},"model":"m"},"success":true,"errors":[],"messages":[]}',
        '{"result":{"x":[1,2.50,"\\u00e9"]}}',
        '{"result":{"x":1} , "success":true}',
        '{"result":{"x":1},\n "success":true}\n',
        '{"result":{"x":1},"result":{"x":2}}',
        '{"result": {"x":1},"success":true}',
        '{"result":[1,2],"success":true}',
        '{"result":null}',
        '{"result":NaN,"b":Infinity}',
        '{"other":1,"result":{"x":1}}',
        '{"result":{"x":1},}',
        '{"result":{"x":1},"success":tru}',
        '{"result":{"x":1}',
        '{"result":{"x":1}}x',
        '{"result":',
        "[1]",
        "",
    ],
)
def test_envelope_parse_is_json_loads(text):
    """_loads_envelope gives what json.loads gives (or fails where it fails), and the member's exact text."""
    from workbench.providers.http import _loads_envelope

    try:
        want = json.loads(text)
    except ValueError:
        with pytest.raises(ValueError):
            _loads_envelope(text)
        return
    got, member = _loads_envelope(text)
    assert repr(got) == repr(want)  # repr: key order, NaN and nested values as json.loads gives them
    if member is not None:
        assert repr(json.loads(member)) == repr(want["result"]) and text[len('{"result":') :].startswith(member)


@pytest.mark.parametrize("injected", [False, True], ids=["default-client", "injected-httpx-transport"])
def test_the_response_a_dialect_reads_is_the_same_on_the_direct_path(recorder, injected, monkeypatch, caplog):
    """The default client's calls skip httpx's send layers (``HttpProvider._direct``): the response the dialect
    translates has the same status, headers, body and request, and httpx's log line is the same."""
    import logging

    base, seen = recorder
    transport = httpx.AsyncHTTPTransport() if injected else None
    provider = build_http_provider("typesafe:jev-1.13.0", env=_env(base), transport=transport)
    request = DecisionRequest(three_type_schema().subset(["stolen"]), "my card is gone")
    got: list[httpx.Response] = []
    translate = provider.wire.to_system_one

    def keep(provider_, data, response, request_):
        got.append(response)
        return translate(provider_, data, response, request_)

    monkeypatch.setattr(provider.wire, "to_system_one", keep)

    async def once():
        try:
            return await provider.decide(request)
        finally:
            await provider.aclose()

    with caplog.at_level(logging.INFO, logger="httpx"):
        result = run(once())
    assert (provider._direct is None) == injected
    assert result.request_id == "req-1"
    (response,) = got
    assert isinstance(response, httpx.Response) and response.status_code == 200
    assert response.headers["x-request-id"] == "req-1" and response.headers["set-cookie"] == "session=abc123; Path=/"
    assert response.json()["answers"] == {"stolen": {"type": "noul", "noul": 0.8}}
    assert response.http_version == "HTTP/1.0" and response.reason_phrase == "OK"  # http.server speaks HTTP/1.0
    sent = response.request  # built on demand on the direct path
    assert (sent.method, str(sent.url)) == ("POST", f"{base}/v1/systemone")
    assert sent.read() == seen[0][1] == provider.render_body(request).encode("utf-8")
    assert sent.headers["content-length"] == str(len(seen[0][1]))
    assert sent.headers["authorization"] == f"Bearer {SECRET}"
    lines = [r.getMessage() for r in caplog.records if r.name == "httpx"]
    assert lines == [f'HTTP Request: POST {base}/v1/systemone "HTTP/1.0 200 OK"']
