"""HTTP/1.1 plumbing for the emulator: read one request from a stream, encode one response."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any

from workbench.providers.base import EMULATOR_HEADER

# ------------------------------------------------------------------------------------------------
# HTTP plumbing
# ------------------------------------------------------------------------------------------------
_REASONS = {
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    413: "Payload Too Large",
    422: "Unprocessable Entity",
    429: "Too Many Requests",
    500: "Internal Server Error",
    529: "Site Overloaded",
}
_HARD_MAX_BODY = 16 * 1024 * 1024  # beyond the documented 13 MiB body cap: refuse without reading


@dataclass
class HttpRequest:
    method: str
    path: str
    query: str
    headers: dict[str, str]
    body: bytes


@dataclass
class HttpResponse:
    status: int
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    reset: bool = False  # abort the connection with a TCP RST instead of answering

    @classmethod
    def json(cls, status: int, obj: Any, headers: dict[str, str] | None = None) -> HttpResponse:
        return cls(
            status,
            json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode("utf-8"),
            {"content-type": "application/json", **(headers or {})},
        )


async def read_request(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> HttpRequest | HttpResponse | None:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError:
        return None
    except asyncio.LimitOverrunError:
        return HttpResponse.json(400, {"error": "request header too large"})
    lines = head.decode("latin-1").split("\r\n")
    try:
        method, target, _version = lines[0].split(" ", 2)
    except ValueError:
        return HttpResponse.json(400, {"error": "bad request line"})
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if ":" in line:
            k, v = line.split(":", 1)
            headers[k.strip().lower()] = v.strip()
    path, _, query = target.partition("?")
    if headers.get("expect", "").lower() == "100-continue":
        writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
    if "chunked" in headers.get("transfer-encoding", "").lower():
        chunks = []
        size = 0
        while True:
            size_line = await reader.readuntil(b"\r\n")
            n = int(size_line.split(b";")[0].strip() or b"0", 16)
            if n == 0:
                await reader.readuntil(b"\r\n")
                break
            size += n
            if size > _HARD_MAX_BODY:
                return HttpResponse(413, b"", {"connection": "close"})
            chunks.append(await reader.readexactly(n))
            await reader.readexactly(2)
        body = b"".join(chunks)
    else:
        try:
            length = int(headers.get("content-length", "0") or "0")
        except ValueError:
            return HttpResponse.json(400, {"error": "bad content-length"})
        if length > _HARD_MAX_BODY:
            return HttpResponse(413, b"", {"connection": "close"})
        body = await reader.readexactly(length) if length else b""
    return HttpRequest(method.upper(), path, query, headers, body)


def encode_response(resp: HttpResponse, *, keep_alive: bool) -> bytes:
    head = [f"HTTP/1.1 {resp.status} {_REASONS.get(resp.status, 'Status')}"]
    hdrs = {
        "content-length": str(len(resp.body)),
        "server": "workbench-emulator",
        EMULATOR_HEADER: "1",  # clients record runs answered here as emulated (cost not billed)
        "connection": "keep-alive" if keep_alive else "close",
        **resp.headers,
    }
    hdrs["content-length"] = str(len(resp.body))
    head += [f"{k}: {v}" for k, v in hdrs.items()]
    return ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + resp.body
