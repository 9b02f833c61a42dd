"""A lean HTTP/1.1 server loop and keep-alive client pool on asyncio streams, for the live mirror.

Why not uvicorn + httpx here: the mirror sits in front of production traffic and its whole job is
to add nothing. Measured on this project's 2-core machine, an ``httpx.AsyncClient.post`` costs
about 0.69 ms of CPU per request and the uvicorn/h11 server side about as much again, against
0.05 ms for a plain asyncio exchange; on a busy machine that CPU becomes several milliseconds of
champion latency. Both sides speak only what System One needs: ``Content-Length`` or chunked
bodies, keep-alive, ``Expect: 100-continue``, and bodies passed through as bytes (a champion's
``Content-Encoding`` is forwarded untouched, chunked framing is re-framed with a length).
"""

from __future__ import annotations

import asyncio
import ssl
from dataclasses import dataclass, field
from http import HTTPStatus
from urllib.parse import urlsplit

MAX_HEAD_BYTES = 65_536
MAX_BODY_BYTES = 64 * 1024 * 1024
#: Headers that describe one hop, not the message (RFC 9110 §7.6.1); never forwarded either way.
HOP_BY_HOP = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-authenticate",
        b"proxy-authorization",
        b"te",
        b"trailer",
        b"transfer-encoding",
        b"upgrade",
        b"host",
        b"content-length",
        b"expect",
    }
)


class HttpError(Exception):
    """A malformed HTTP message (the server answers 400 and closes the connection)."""

    def __init__(self, message: str, status: int = 400):
        self.status = status
        super().__init__(message)


@dataclass
class Message:
    """A request (``method``/``target``) or a response (``status``); header names are lower-case bytes."""

    headers: list[tuple[bytes, bytes]]
    body: bytes = b""
    method: str = ""
    target: str = ""
    status: int = 0
    keep_alive: bool = True
    extra: dict = field(default_factory=dict)

    def header(self, name: bytes) -> bytes | None:
        for k, v in self.headers:
            if k == name:
                return v
        return None


def _parse_headers(lines: list[bytes]) -> list[tuple[bytes, bytes]]:
    headers = []
    for line in lines:
        name, sep, value = line.partition(b":")
        if not sep or not name or name != name.strip():
            raise HttpError(f"malformed header line {line[:40]!r}")
        headers.append((name.lower(), value.strip()))
    return headers


async def _read_head(reader: asyncio.StreamReader) -> list[bytes] | None:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as exc:
        if not exc.partial.strip():
            return None  # clean end of a keep-alive connection
        raise HttpError("connection closed in the middle of a message head") from None
    except asyncio.LimitOverrunError:
        raise HttpError("message head too large", 431) from None
    return head[:-4].split(b"\r\n")


async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
    parts: list[bytes] = []
    total = 0
    while True:
        size_line = await reader.readuntil(b"\r\n")
        try:
            size = int(size_line.split(b";", 1)[0].strip(), 16)
        except ValueError:
            raise HttpError("malformed chunk size") from None
        if size == 0:
            while (await reader.readuntil(b"\r\n")) != b"\r\n":  # trailers: ignored
                pass
            return b"".join(parts)
        total += size
        if total > MAX_BODY_BYTES:
            raise HttpError("body too large", 413)
        parts.append(await reader.readexactly(size))
        await reader.readexactly(2)


async def _read_body(
    reader: asyncio.StreamReader, headers: list[tuple[bytes, bytes]], *, until_eof: bool
) -> tuple[bytes, bool]:
    """Body and whether the message was framed (so the connection can be reused)."""
    te = next((v for k, v in headers if k == b"transfer-encoding"), None)
    if te is not None and b"chunked" in te.lower():
        return await _read_chunked(reader), True
    cl = next((v for k, v in headers if k == b"content-length"), None)
    if cl is not None:
        try:
            n = int(cl)
        except ValueError:
            raise HttpError("malformed content-length") from None
        if n < 0 or n > MAX_BODY_BYTES:
            raise HttpError("body too large", 413)
        return await reader.readexactly(n), True
    if until_eof:
        return await reader.read(MAX_BODY_BYTES), False
    return b"", True


def _wants_keep_alive(version: bytes, headers: list[tuple[bytes, bytes]]) -> bool:
    conn = b",".join(v for k, v in headers if k == b"connection").lower()
    if version == b"HTTP/1.0":
        return b"keep-alive" in conn
    return b"close" not in conn


async def read_request(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> Message | None:
    """Read one request (None when the client closed the connection between requests)."""
    lines = await _read_head(reader)
    if lines is None:
        return None
    parts = lines[0].split(b" ")
    if len(parts) != 3 or not parts[2].startswith(b"HTTP/1."):
        raise HttpError("malformed request line")
    method, target, version = parts
    headers = _parse_headers(lines[1:])
    expect = next((v for k, v in headers if k == b"expect"), None)
    if expect is not None and expect.lower() == b"100-continue":
        writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
    body, _ = await _read_body(reader, headers, until_eof=False)
    return Message(
        headers=headers,
        body=body,
        method=method.decode("latin-1"),
        target=target.decode("latin-1"),
        keep_alive=_wants_keep_alive(version, headers),
    )


def encode_response(status: int, headers: list[tuple[bytes, bytes]], body: bytes, *, keep_alive: bool) -> bytes:
    """Status line, the given end-to-end headers, our framing (``content-length``) and the body."""
    try:
        reason = HTTPStatus(status).phrase.encode()
    except ValueError:
        reason = b"Unknown"
    out = [b"HTTP/1.1 %d %s\r\n" % (status, reason)]
    out += [k + b": " + v + b"\r\n" for k, v in headers if k.lower() not in HOP_BY_HOP]
    out.append(b"content-length: %d\r\n" % len(body))
    if not keep_alive:
        out.append(b"connection: close\r\n")
    out.append(b"\r\n")
    out.append(body)
    return b"".join(out)


class StaleConnection(ConnectionError):
    """A reused keep-alive connection was closed by the server before answering (safe to retry)."""


class _Conn:
    __slots__ = ("reader", "writer")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.reader, self.writer = reader, writer

    def close(self) -> None:
        try:
            self.writer.close()
        except Exception:
            pass


class ClientPool:
    """Keep-alive connections to one origin; one request at a time per connection.

    Parameters
    ----------
    url : str
        ``http://`` or ``https://`` URL; its path (and query) is the request target.
    max_idle : int, default=64
        Idle connections kept for reuse.
    """

    def __init__(self, url: str, *, max_idle: int = 64):
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {url!r}")
        self.host = parts.hostname
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.ssl = ssl.create_default_context() if parts.scheme == "https" else None
        self.target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        default_port = (parts.scheme == "https" and self.port == 443) or (parts.scheme == "http" and self.port == 80)
        self.host_header = (self.host if default_port else f"{self.host}:{self.port}").encode("idna")
        self.max_idle = max_idle
        self._idle: list[_Conn] = []

    async def _open(self) -> _Conn:
        reader, writer = await asyncio.open_connection(self.host, self.port, ssl=self.ssl, limit=MAX_HEAD_BYTES)
        return _Conn(reader, writer)

    async def request(self, method: str, headers: list[tuple[bytes, bytes]], body: bytes) -> Message:
        """Send one request; the response body is returned de-chunked, content-encoding untouched.

        Wrap in ``asyncio.wait_for`` for a deadline: a cancelled exchange closes its connection.
        """
        head = [b"%s %s HTTP/1.1\r\nhost: %s\r\n" % (method.encode(), self.target.encode("latin-1"), self.host_header)]
        head += [k + b": " + v + b"\r\n" for k, v in headers if k not in HOP_BY_HOP]
        head.append(b"content-length: %d\r\n\r\n" % len(body))
        data = b"".join(head) + body
        while self._idle:
            conn = self._idle.pop()
            try:
                return await self._exchange(conn, data, method, reused=True)
            except StaleConnection:
                continue  # the server closed it while idle: nothing was processed, try another
        return await self._exchange(await self._open(), data, method, reused=False)

    async def _exchange(self, conn: _Conn, data: bytes, method: str, *, reused: bool) -> Message:
        done = False
        try:
            try:
                conn.writer.write(data)
                await conn.writer.drain()
                lines = await _read_head(conn.reader)
            except (ConnectionError, HttpError):
                if reused:
                    raise StaleConnection("connection closed before a response") from None
                raise
            if lines is None:
                if reused:
                    raise StaleConnection("connection closed before a response")
                raise ConnectionError("the server closed the connection without a response")
            while True:
                status_parts = lines[0].split(b" ", 2)
                if len(status_parts) < 2 or not status_parts[0].startswith(b"HTTP/1."):
                    raise HttpError("malformed status line")
                status = int(status_parts[1])
                headers = _parse_headers(lines[1:])
                if 100 <= status < 200:  # interim response: the real one follows
                    lines = await _read_head(conn.reader)
                    if lines is None:
                        raise ConnectionError("connection closed after an interim response")
                    continue
                break
            if method == "HEAD" or status in (204, 304):
                body, framed = b"", True
            else:
                body, framed = await _read_body(conn.reader, headers, until_eof=True)
            keep = framed and _wants_keep_alive(status_parts[0], headers)
            done = True
            if keep and len(self._idle) < self.max_idle:
                self._idle.append(conn)
            else:
                conn.close()
            return Message(headers=headers, body=body, status=status, keep_alive=keep)
        finally:
            if not done:
                conn.close()

    async def aclose(self) -> None:
        for conn in self._idle:
            conn.close()
        self._idle.clear()
