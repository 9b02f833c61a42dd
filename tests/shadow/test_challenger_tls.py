"""A URL challenger over TLS trusts what every provider client trusts (``providers.http.tls_context``).

A company CA given by ``SSL_CERT_FILE`` makes the challenger answer; without it the call is recorded
as a failure that names the certificate problem — never an answer and never a lost pair.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import socket
import tempfile
from pathlib import Path
from types import SimpleNamespace

import pytest

from workbench.emulator import run_emulator
from workbench.shadow.challenger import ChallengerClient, challenger_record

BODY = {
    "model": "clef",
    "state": "my card was charged twice",
    "questions": {"refund": {"type": "noul", "instructions": "Does the customer ask for a refund?"}},
}


@pytest.fixture(scope="module")
def test_ca():
    trustme = pytest.importorskip("trustme", reason="trustme (test extra) makes the test CA")
    ca = trustme.CA()
    cert = ca.issue_cert("localhost", "127.0.0.1")
    work = Path(tempfile.mkdtemp(prefix="wb-ca-"))
    ca.cert_pem.write_to_path(str(work / "ca.pem"))
    cert.private_key_pem.write_to_path(str(work / "key.pem"))
    cert.cert_chain_pems[0].write_to_path(str(work / "cert.pem"))
    yield SimpleNamespace(ca=work / "ca.pem", cert=work / "cert.pem", key=work / "key.pem")
    shutil.rmtree(work, ignore_errors=True)


def _call(url: str, trust_env: bool = True):
    async def go():
        client = ChallengerClient(url, timeout=10.0, trust_env=trust_env)
        await client.start()
        try:
            return await client.call(json.dumps(BODY).encode(), [("content-type", "application/json")])
        finally:
            await client.aclose()

    return asyncio.run(go())


def test_https_challenger_trusts_ssl_cert_file_and_records_a_certificate_failure_without(test_ca, monkeypatch):
    for name in ("SSL_CERT_FILE", "SSL_CERT_DIR", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    with run_emulator(port=0, ssl_certfile=str(test_ca.cert), ssl_keyfile=str(test_ca.key)) as emu:
        url = f"https://localhost:{emu.port}/v1/systemone"

        untrusted = _call(url)  # neither the OS store nor certifi knows the test CA
        assert untrusted.status is None and untrusted.error is not None
        assert untrusted.error == "certificate" and "certificate" in (untrusted.reason or "").lower(), untrusted
        record = challenger_record("p1", untrusted)
        assert record["error"] == untrusted.error  # journaled as a failure, with its reason
        assert emu.request_count() == 0  # nothing was sent over an unverified connection

        monkeypatch.setenv("SSL_CERT_FILE", str(test_ca.ca))
        trusted = _call(url)
        assert trusted.error is None and trusted.status == 200, trusted
        answer = json.loads(trusted.body or "{}")
        assert answer["answers"]["refund"]["type"] == "noul"
        assert 0.0 <= answer["answers"]["refund"]["noul"] <= 1.0
        assert emu.request_count() == 1


def test_url_challenger_goes_through_the_proxy_env_and_no_proxy_keeps_it_direct(monkeypatch):
    """The proxy is read once per client (HTTP_PROXY with NO_PROXY), as aiohttp's trust_env would."""
    for name in ("SSL_CERT_FILE", "SSL_CERT_DIR", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    with socket.socket() as s:  # a port nothing listens on: the "proxy" refuses every connection
        s.bind(("127.0.0.1", 0))
        dead_proxy = f"http://127.0.0.1:{s.getsockname()[1]}"
    with run_emulator(port=0) as emu:
        url = f"http://127.0.0.1:{emu.port}/v1/systemone"
        monkeypatch.setenv("HTTP_PROXY", dead_proxy)
        through_proxy = _call(url)
        assert through_proxy.error == "network" and emu.request_count() == 0, through_proxy
        assert _call(url, trust_env=False).status == 200  # trust_env off: the env is not read
        monkeypatch.setenv("NO_PROXY", "127.0.0.1")
        assert _call(url).status == 200
        assert emu.request_count() == 2
