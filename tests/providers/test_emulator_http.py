"""The emulator's HTTP surface on aiohttp's server, over raw sockets: faults that live below the JSON
(TCP reset, hang, truncated body), framing (keep-alive, chunked, ``Expect: 100-continue``, the hard
body cap), the headers every answer carries, stopping with a request in flight, and TLS (a ``trustme``
CA: trusted it answers, untrusted the client gets a certificate error)."""

from __future__ import annotations

import json
import socket
import ssl
import subprocess
import sys
import time

import httpx
import pytest

from tests.conftest import ROOT
from workbench.emulator import run_emulator

CF_PATH = "/client/v4/accounts/acc/ai/run/@cf/cloudflare/clef"
BODY = json.dumps({"model": "clef", "state": "hello", "questions": {"q": {"type": "noul", "instructions": "ok?"}}})


def request_bytes(body: str = BODY, *, extra: str = "Connection: close\r\n", path: str = CF_PATH) -> bytes:
    head = f"POST {path} HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n"
    return (head + extra + "\r\n" + body).encode()


def exchange(port: int, data: bytes, *, timeout: float = 5.0) -> tuple[bytes, str]:
    """Send ``data``, read until the server closes: (bytes read, 'eof' or the socket error's name)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(data)
        out = b""
        try:
            while chunk := s.recv(65536):
                out += chunk
        except OSError as exc:
            return out, type(exc).__name__
        return out, "eof"


def split(raw: bytes) -> tuple[int, dict[str, str], bytes]:
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, v in (line.split(":", 1) for line in lines[1:])}
    return int(lines[0].split()[1]), headers, body


def test_reset_fault_is_a_tcp_reset_not_an_answer():
    with run_emulator(port=0, reset=1.0) as emu:
        out, how = exchange(emu.port, request_bytes())
        assert (out, how) == (b"", "ConnectionResetError")  # RST: no status line, no orderly FIN
        assert emu.stats["by_status"] == {"reset": 1} and emu.stats["by_fault"] == {"reset": 1}


def test_malformed_fault_is_a_truncated_200_with_a_matching_length():
    with run_emulator(port=0) as emu:
        full = split(exchange(emu.port, request_bytes())[0])[2]
        emu.set_faults(malformed=1.0)
        emu.reset_stats()  # the same body again: fresh attempt counter, same answer to truncate
        status, headers, body = split(exchange(emu.port, request_bytes())[0])
    assert status == 200 and int(headers["content-length"]) == len(body) == len(full) // 2
    assert full.startswith(body)
    with pytest.raises(json.JSONDecodeError):
        json.loads(body)


def test_timeout_fault_hangs_and_stop_does_not_wait_for_it():
    with run_emulator(port=0, timeout=1.0, timeout_sleep_s=30.0) as emu:
        out, how = exchange(emu.port, request_bytes(), timeout=0.5)
        assert (out, how) == (b"", "TimeoutError")
        assert emu.stats["total"] == 1 and emu.stats["by_status"] == {}  # arrived, never finished
        with socket.create_connection(("127.0.0.1", emu.port)) as s:  # another one still in flight at stop
            s.sendall(request_bytes())
            time.sleep(0.1)
            t0 = time.perf_counter()
    assert time.perf_counter() - t0 < 5.0  # not the 30 s sleep


def test_every_answer_carries_the_emulator_headers_and_vendor_reasons():
    with run_emulator(port=0, overloaded=1.0) as emu:
        status, headers, _ = split(exchange(emu.port, request_bytes())[0])
        assert status == 529 and headers["x-workbench-emulator"] == "1" and headers["server"] == "workbench-emulator"
        raw = exchange(emu.port, b"GET /_emulator/health HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")[0]
        assert raw.startswith(b"HTTP/1.1 200 OK\r\n") and split(raw)[1]["x-workbench-emulator"] == "1"
        raw = exchange(emu.port, request_bytes())[0]
    assert raw.startswith(b"HTTP/1.1 529 Site Overloaded\r\n")  # Cloudflare's reason, not an empty one


def test_keep_alive_chunked_and_expect_continue():
    with run_emulator(port=0) as emu, socket.create_connection(("127.0.0.1", emu.port), timeout=5) as s:
        reader = s.makefile("rb")

        def response() -> tuple[int, bytes]:
            status = int(reader.readline().split()[1])
            length = 0
            while (line := reader.readline()) != b"\r\n":
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
            return status, reader.read(length)

        s.sendall(request_bytes(extra=""))
        first = response()
        # the same decision, chunked in two pieces, on the same connection
        a, b = BODY[:10].encode(), BODY[10:].encode()
        head = f"POST {CF_PATH} HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n".encode()
        s.sendall(head + b"%x\r\n%s\r\n%x\r\n%s\r\n0\r\n\r\n" % (len(a), a, len(b), b))
        chunked = response()
        # Expect: 100-continue is answered before the body is sent
        s.sendall(
            f"POST {CF_PATH} HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\nContent-Length: {len(BODY)}\r\n\r\n".encode()
        )
        assert reader.readline() == b"HTTP/1.1 100 Continue\r\n" and reader.readline() == b"\r\n"
        s.sendall(BODY.encode())
        continued = response()
        assert emu.stats["total"] == 3 and emu.stats["answered"] == 3
    assert first[0] == chunked[0] == continued[0] == 200
    # three attempts of one body: fresh draws (request ids differ) but the same answer
    answers = [json.loads(r[1])["result"]["answers"] for r in (first, chunked, continued)]
    assert answers[0] == answers[1] == answers[2] == {"q": {"type": "noul", "noul": 0.5}}


def test_bodies_over_the_hard_cap_are_refused_unread():
    with run_emulator(port=0) as emu, socket.create_connection(("127.0.0.1", emu.port), timeout=5) as s:
        # announce 64 MiB and send none of it: the 413 comes back at once
        s.sendall(f"POST {CF_PATH} HTTP/1.1\r\nHost: t\r\nContent-Length: {64 << 20}\r\n\r\n".encode())
        status_line = s.makefile("rb").readline()
        assert status_line == b"HTTP/1.1 413 Payload Too Large\r\n"
        assert emu.stats["total"] == 0  # refused before it reached a dialect


# -- TLS -------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def ca_files(tmp_path_factory):
    trustme = pytest.importorskip("trustme")
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1", "localhost")
    d = tmp_path_factory.mktemp("tls")
    ca.cert_pem.write_to_path(str(d / "ca.pem"))
    cert.private_key_pem.write_to_path(str(d / "key.pem"))
    cert.cert_chain_pems[0].write_to_path(str(d / "cert.pem"))
    for pem in cert.cert_chain_pems[1:]:
        (d / "cert.pem").write_bytes((d / "cert.pem").read_bytes() + pem.bytes())
    return d


def test_tls_serving_trusted_and_untrusted(ca_files):
    with run_emulator(port=0, ssl_certfile=ca_files / "cert.pem", ssl_keyfile=ca_files / "key.pem") as emu:
        assert emu.base_url == f"https://127.0.0.1:{emu.port}"
        trusted = ssl.create_default_context(cafile=str(ca_files / "ca.pem"))
        with httpx.Client(verify=trusted, trust_env=False) as c:
            r = c.post(emu.base_url + CF_PATH, content=BODY, headers={"content-type": "application/json"})
        assert r.status_code == 200 and r.headers["x-workbench-emulator"] == "1"
        assert r.json()["result"]["answers"] == {"q": {"type": "noul", "noul": 0.5}}
        with httpx.Client(trust_env=False) as c, pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
            c.get(emu.base_url + "/_emulator/health")  # the system store does not know the test CA
        # plain HTTP to the TLS port gets no answer
        out, _ = exchange(emu.port, b"GET /_emulator/health HTTP/1.1\r\nHost: t\r\n\r\n")
        assert not out.startswith(b"HTTP/1.1 200")
        assert emu.stats["answered"] == 1


def test_cli_serves_tls(ca_files):
    proc = subprocess.Popen(
        [sys.executable, "-c", "from workbench.cli import main; main()", "emulator", "--port", "0", "--json"]
        + ["--tls-cert", str(ca_files / "cert.pem"), "--tls-key", str(ca_files / "key.pem")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    try:
        lines = []
        while not lines or not lines[-1].startswith("}"):
            line = proc.stdout.readline()
            assert line, proc.stderr.read()
            lines.append(line)
        info = json.loads("".join(lines))
        assert info["base_url"].startswith("https://127.0.0.1:")
        r = httpx.get(info["base_url"] + "/_emulator/health", verify=str(ca_files / "ca.pem"), trust_env=False)
        assert r.json() == {"status": "ok"}
    finally:
        proc.terminate()
        proc.wait(10)
    assert proc.returncode == 0


def test_cli_refuses_a_bad_certificate(tmp_path):
    (tmp_path / "cert.pem").write_text("not a certificate")
    proc = subprocess.run(
        [sys.executable, "-c", "from workbench.cli import main; main()", "emulator", "--port", "0"]
        + ["--tls-cert", str(tmp_path / "cert.pem")],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert proc.returncode == 2
    assert "cert.pem" in proc.stderr and "--tls-cert" in proc.stderr
