"""Issue 12, acceptance 5 (client half): the runner and the providers speak HTTP only through httpx/aiohttp.

A grep-level check over the source: no raw stream connections, no reading up to a blank line,
no status lines or chunked framing written or parsed by our own code.
"""

from __future__ import annotations

import re
from pathlib import Path

from httpx_aiohttp import AiohttpTransport, HttpxAiohttpClient

from workbench.providers.http import build_client

ROOT = Path(__file__).resolve().parents[2]
CLIENT_PACKAGES = ("workbench/runner", "workbench/providers")
OWN_HTTP = re.compile(
    r"open_connection|start_server|readuntil|readexactly|HTTP/1\.[01]|\\r\\n|transfer-encoding|chunked",
    re.IGNORECASE,
)


def test_no_http_framing_of_our_own_in_the_clients():
    hits = [
        f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
        for package in CLIENT_PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if OWN_HTTP.search(line)
    ]
    assert hits == []
    assert not (ROOT / "workbench/runner/transport.py").exists()
    # the one client constructor builds on the maintained stack: httpx over aiohttp's pool
    client = build_client()
    assert isinstance(client, HttpxAiohttpClient) and isinstance(client._transport, AiohttpTransport)
