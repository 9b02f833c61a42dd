"""A lean HTTP/1.1 keep-alive transport for the runner's many small POSTs.

httpx's default transport (httpcore + anyio) spends about 2–4 ms of CPU per request when 32
requests are in flight — its pool rescans every connection on each request and response — which
caps a 2-core machine well below the 320 calls/s that 32 × 100 ms allows. This transport keeps
what the runner needs and nothing else: one stack of idle connections per origin over asyncio
streams, ``Content-Length`` and chunked bodies, ``Connection: close``, TLS for ``https``, and
httpx's own timeout and exception types (so the providers' error classification is unchanged:
``httpx.TimeoutException`` → ``timeout``, other ``httpx.TransportError`` → ``network``).

It plugs into the seam every provider already has (``transport=``); the client, headers, auth
and URL stay httpx's. No proxies, no HTTP/2, no request streaming.
"""

from __future__ import annotations

import asyncio
import ssl

import httpx

_MAX_HEAD = 64 * 1024


class _Conn:
    __slots__ = ("reader", "writer")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.reader, self.writer = reader, writer

    def usable(self) -> bool:
        return not self.writer.is_closing() and not self.reader.at_eof()

    def close(self) -> None:
        try:
            self.writer.close()
        except Exception:  # already torn down
            pass


class StreamTransport(httpx.AsyncBaseTransport):
    """HTTP/1.1 over asyncio streams with per-origin keep-alive (see module docstring).

    Parameters
    ----------
    max_idle : int, default=64
        Idle connections kept per origin; more are closed after use.
    ssl_context : ssl.SSLContext, optional
        For ``https`` origins (default: the system's verified context).
    """

    def __init__(self, *, max_idle: int = 64, ssl_context: ssl.SSLContext | None = None):
        self.max_idle = max_idle
        self._ssl = ssl_context
        self._idle: dict[tuple[str, str, int], list[_Conn]] = {}
        self._closed = False

    # -- connections ---------------------------------------------------------------------------------
    async def _connect(self, scheme: str, host: str, port: int, timeout: float | None) -> _Conn:
        ctx = None
        if scheme == "https":
            if self._ssl is None:  # one verifying context for every connection (~20 ms to load each)
                from workbench.providers.http import _ssl_context

                self._ssl = _ssl_context()
            ctx = self._ssl
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(host, port, ssl=ctx, server_hostname=host if ctx else None, limit=_MAX_HEAD),
                timeout,
            )
        except TimeoutError:
            raise httpx.ConnectTimeout(f"connect to {host}:{port} timed out") from None
        except OSError as exc:
            raise httpx.ConnectError(f"cannot connect to {host}:{port}: {exc.strerror or exc}") from None
        return _Conn(reader, writer)

    def _checkout(self, origin: tuple[str, str, int]) -> _Conn | None:
        stack = self._idle.get(origin)
        while stack:
            conn = stack.pop()
            if conn.usable():
                return conn
            conn.close()
        return None

    def _checkin(self, origin: tuple[str, str, int], conn: _Conn) -> None:
        stack = self._idle.setdefault(origin, [])
        if self._closed or len(stack) >= self.max_idle or not conn.usable():
            conn.close()
        else:
            stack.append(conn)

    # -- one request ---------------------------------------------------------------------------------
    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        url = request.url
        scheme = url.scheme
        if scheme not in ("http", "https"):
            raise httpx.UnsupportedProtocol(f"unsupported scheme {scheme!r}")
        port = url.port or (443 if scheme == "https" else 80)
        origin = (scheme, url.host, port)
        timeouts = request.extensions.get("timeout", {})
        body = await request.aread()
        target = url.raw_path.decode("ascii")
        headers = [(k, v) for k, v in request.headers.raw if k.lower() not in (b"content-length", b"transfer-encoding")]
        if not any(k.lower() == b"host" for k, _ in headers):
            headers.insert(0, (b"host", url.netloc))
        head = [f"{request.method} {target} HTTP/1.1\r\n".encode("ascii")]
        head += [k + b": " + v + b"\r\n" for k, v in headers]
        head.append(b"content-length: %d\r\n\r\n" % len(body))
        payload = b"".join(head) + body

        conn = self._checkout(origin) or await self._connect(scheme, url.host, port, timeouts.get("connect"))
        try:
            conn.writer.write(payload)
            # asyncio.timeout (no extra task per await, unlike wait_for); write+read share the read budget
            async with asyncio.timeout(timeouts.get("read")):
                await conn.writer.drain()
                status, reason, resp_headers, content, keep = await self._read_response(conn.reader, request.method)
        except TimeoutError:
            conn.close()
            raise httpx.ReadTimeout("no response within the read timeout", request=request) from None
        except asyncio.IncompleteReadError:
            conn.close()
            raise httpx.RemoteProtocolError("the server closed the connection mid-response", request=request) from None
        except (ConnectionError, OSError) as exc:
            conn.close()
            raise httpx.ReadError(f"connection error: {type(exc).__name__}", request=request) from None
        except (ValueError, asyncio.LimitOverrunError):
            conn.close()
            raise httpx.RemoteProtocolError("unparsable HTTP response", request=request) from None
        except BaseException:  # cancelled (runner timeout, Ctrl-C): the connection state is unknown
            conn.close()
            raise
        if keep:
            self._checkin(origin, conn)
        else:
            conn.close()
        return httpx.Response(
            status,
            headers=resp_headers,
            content=content,
            request=request,
            extensions={"http_version": b"HTTP/1.1", "reason_phrase": reason},
        )

    @staticmethod
    async def _read_response(reader: asyncio.StreamReader, method: str) -> tuple[int, bytes, list, bytes, bool]:
        while True:
            raw = await reader.readuntil(b"\r\n\r\n")
            lines = raw[:-4].split(b"\r\n")
            parts = lines[0].split(b" ", 2)
            if len(parts) < 2 or not parts[0].startswith(b"HTTP/1."):
                raise ValueError("bad status line")
            status = int(parts[1])
            if status != 100:
                break  # skip interim 100-continue responses
        version = parts[0]
        reason = parts[2] if len(parts) > 2 else b""
        headers: list[tuple[bytes, bytes]] = []
        length: int | None = None
        chunked = False
        close = version == b"HTTP/1.0"
        for line in lines[1:]:
            name, sep, value = line.partition(b":")
            if not sep:
                raise ValueError("bad header line")
            name, value = name.strip(), value.strip()
            low = name.lower()
            if low == b"content-length":
                length = int(value)
            elif low == b"transfer-encoding" and b"chunked" in value.lower():
                chunked = True
            elif low == b"connection":
                close = b"close" in value.lower() if version != b"HTTP/1.0" else b"keep-alive" not in value.lower()
            headers.append((name, value))
        if method == "HEAD" or status in (204, 304) or 100 <= status < 200:
            return status, reason, headers, b"", not close
        if chunked:
            chunks = []
            while True:
                size_line = await reader.readuntil(b"\r\n")
                size = int(size_line.split(b";", 1)[0].strip(), 16)
                if size == 0:
                    while (await reader.readuntil(b"\r\n")) != b"\r\n":  # trailers
                        pass
                    break
                chunks.append(await reader.readexactly(size))
                await reader.readexactly(2)
            # httpx must not decode the chunking again
            headers = [(k, v) for k, v in headers if k.lower() != b"transfer-encoding"]
            return status, reason, headers, b"".join(chunks), not close
        if length is not None:
            return status, reason, headers, await reader.readexactly(length), not close
        return status, reason, headers, await reader.read(), False  # body ends at EOF

    async def aclose(self) -> None:
        self._closed = True
        for stack in self._idle.values():
            for conn in stack:
                conn.close()
        self._idle.clear()
