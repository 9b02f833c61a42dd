"""What a hung shadow collector costs nginx's clients (docs/shadow-nginx.md, the `mirror` recipe).

Real nginx on loopback answers with the champion (an emulator) and mirrors every request to `/_shadow`.
The collector is either down (nothing listens: connection refused) or hung (accepts, reads, never
answers). A keep-alive client sends requests one after the other; nginx reads a connection's next
request only once the previous request's mirror subrequest has finished, so a hung collector delays
every request after the first by the mirror location's timeout. Reports the client's p50/p95 per case
and per `/_shadow` timeout setting.

    python bench/shadow_nginx.py [--requests 40] [--champion-latency-ms 0]
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import numpy as np

from workbench.emulator import run_emulator

NGINX = shutil.which("nginx") or "/usr/sbin/nginx"
BODY = b'{"model":"clef","state":"where is my card","questions":{"urgent":{"type":"noul","instructions":"Urgent?"}}}'


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _conf(prefix: Path, *, port: int, champion: int, collector: int, shadow_timeouts: str) -> str:
    user = "user root;\n" if os.geteuid() == 0 else ""
    temp = prefix / "temp"
    return f"""{user}worker_processes 1;
error_log {prefix}/error.log warn;
pid {prefix}/nginx.pid;
events {{ worker_connections 1024; }}
http {{
    client_body_temp_path {temp}/body; proxy_temp_path {temp}/proxy; fastcgi_temp_path {temp}/fastcgi;
    uwsgi_temp_path {temp}/uwsgi; scgi_temp_path {temp}/scgi;
    access_log off;
    upstream champion {{ server 127.0.0.1:{champion}; keepalive 16; }}
    upstream shadow_collector {{ server 127.0.0.1:{collector}; keepalive 16; }}
    server {{
        listen 127.0.0.1:{port};
        location = /v1/systemone {{
            mirror /_shadow;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_pass http://champion;
        }}
        location = /_shadow {{
            internal;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            {shadow_timeouts}
            proxy_pass http://shadow_collector/v1/shadow/mirror;
        }}
    }}
}}
"""


class Hung:
    """Accepts connections and reads what comes, never answers."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(1024)
        self.port = self.sock.getsockname()[1]
        self.conns: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.conns.append(conn)
            threading.Thread(target=self._drain, args=(conn,), daemon=True).start()

    @staticmethod
    def _drain(conn: socket.socket) -> None:
        try:
            while conn.recv(65536):
                pass
        except OSError:
            pass

    def close(self) -> None:
        self.sock.close()
        for c in self.conns:
            c.close()


def run(case: str, timeouts: str, n: int, champion_latency_ms: float, keepalive: bool = True) -> tuple[float, float]:
    prefix = Path(tempfile.mkdtemp(prefix="bench-nginx-"))
    (prefix / "temp").mkdir()
    hung = Hung() if case == "hung" else None
    collector = hung.port if hung else _free_port()  # "down": nothing listens there
    port = _free_port()
    with run_emulator(port=0, latency_ms=champion_latency_ms) as champion:
        up = None
        if case == "up":  # the real collector (its challenger: the same emulator)
            up = subprocess.Popen(
                [sys.executable, "-c", "from workbench.cli import main; main()", "--db", str(prefix / "wb.duckdb")]
                + ["shadow", "collect", "--challenger", champion.base_url + "/v1/systemone", "--no-ingest"]
                + ["--spool", str(prefix / "spool"), "--port", str(collector), "--journal", str(prefix / "j.jsonl")],
                stderr=subprocess.DEVNULL,
            )
            deadline = time.monotonic() + 60
            while True:
                try:
                    httpx.get(f"http://127.0.0.1:{collector}/v1/shadow/status", timeout=1.0)
                    break
                except httpx.HTTPError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.1)
        conf = prefix / "nginx.conf"
        conf.write_text(_conf(prefix, port=port, champion=champion.port, collector=collector, shadow_timeouts=timeouts))
        nginx = subprocess.Popen([NGINX, "-p", str(prefix), "-c", str(conf), "-g", "daemon off;"])
        try:
            deadline = time.monotonic() + 30
            while True:
                try:
                    httpx.get(f"http://127.0.0.1:{port}/", timeout=1.0)
                    break
                except httpx.HTTPError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.05)
            times = []
            headers = {} if keepalive else {"connection": "close"}
            with httpx.Client(trust_env=False, timeout=60) as client:  # one keep-alive connection
                for _ in range(n):
                    t0 = time.perf_counter()
                    r = client.post(f"http://127.0.0.1:{port}/v1/systemone", content=BODY, headers=headers)
                    times.append((time.perf_counter() - t0) * 1000)
                    assert r.status_code == 200, r.status_code
        finally:
            nginx.send_signal(signal.SIGQUIT)
            nginx.wait(30)
            if up:
                up.send_signal(signal.SIGTERM)
                up.wait(60)
            if hung:
                hung.close()
    return float(np.percentile(times, 50)), float(np.percentile(times, 95))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=40)
    ap.add_argument("--champion-latency-ms", type=float, default=0.0)
    args = ap.parse_args()
    old = "proxy_connect_timeout 200ms; proxy_read_timeout 2s;"
    new = "proxy_connect_timeout 100ms; proxy_send_timeout 100ms; proxy_read_timeout 100ms;"
    for case, timeouts, n, keepalive in (
        ("up", new, args.requests, True),
        ("down", new, args.requests, True),
        ("hung", old, min(args.requests, 10), True),
        ("hung", new, args.requests, True),
        ("hung", old, min(args.requests, 10), False),
    ):
        p50, p95 = run(case, timeouts, n, args.champion_latency_ms, keepalive)
        how = "keep-alive" if keepalive else "one-shot  "
        print(f"collector {case:4s} | {timeouts:80s} | {n:3d} {how} requests: p50 {p50:7.1f} ms, p95 {p95:7.1f} ms")


if __name__ == "__main__":
    main()
