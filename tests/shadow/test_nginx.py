"""The production recipe of docs/shadow-nginx.md with Debian's real nginx: nginx on loopback answers with
the champion (an emulator) and mirrors each request to `workbench shadow collect`, whose challenger is
another emulator. The same requests also go through `workbench shadow serve` (champion and an identical
challenger emulator): both sessions must give the same report figures.

nginx runs as a non-daemon child of the test with its prefix, config, pid, logs and temp files in tmp.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

import workbench as wb
from tests.conftest import ROOT
from tests.shadow.conftest import read_journal
from workbench.emulator import run_emulator

NGINX = shutil.which("nginx") or next((p for p in ("/usr/sbin/nginx",) if os.access(p, os.X_OK)), None)
pytestmark = pytest.mark.skipif(
    NGINX is None, reason="Debian's nginx is not installed (apt-get install -y nginx; .ci/run installs it)"
)

QUESTIONS = {
    "intent": {
        "type": "choice",
        "instructions": "Which intent does the customer message express?",
        "criteria": {
            "card_arrival": "The customer asks when their new card will arrive",
            "refund": "The customer wants money back for a purchase",
            "lost_card": "The customer lost their card or it was stolen",
        },
    },
    "urgent": {"type": "noul", "instructions": "Does the customer need help right now?"},
}
STATES = [
    "my card has not arrived yet",
    "I want a refund for this order",
    "someone stole my card",
    "where is my new card",
    "please give my money back",
    "I lost my wallet with the card inside",
]
N_REQUESTS = 120
DOC = ROOT / "docs" / "shadow-nginx.md"


def doc_shadow_location() -> str:
    """The recipe's ``location = /_shadow { ... }`` block, as docs/shadow-nginx.md shows it (first one)."""
    lines = DOC.read_text(encoding="utf-8").splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.strip() == "location = /_shadow {")
    indent = lines[start][: len(lines[start]) - len(lines[start].lstrip())]
    end = next(i for i in range(start + 1, len(lines)) if lines[i] == indent + "}")
    return "\n".join(lines[start : end + 1])


def _millis(value: str) -> float:
    """An nginx time (``100ms``, ``2s``, ``1m``) in milliseconds."""
    m = re.fullmatch(r"(\d+)(ms|s|m)?", value)
    assert m, value
    return int(m.group(1)) * {"ms": 1, "s": 1000, "m": 60_000, None: 1000}[m.group(2)]


def _body(i: int) -> dict:
    if i % 20 == 7:  # one option only: the champion refuses it with 422 (not stored by nginx)
        return {
            "model": "clef",
            "state": f"ticket {i}",
            "questions": {"intent": {"type": "choice", "instructions": "Which?", "criteria": {"only": None}}},
        }
    return {"model": "clef", "state": f"{STATES[i % len(STATES)]} (ticket {i})", "questions": QUESTIONS}


def _free_port(kind: int = socket.SOCK_STREAM) -> int:
    with socket.socket(socket.AF_INET, kind) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def nginx_conf(
    prefix: Path,
    *,
    port: int,
    champion: int,
    collector: int,
    syslog: int,
    spool: Path,
    mirror_timeout: str | None = None,
) -> str:
    """The configuration of docs/shadow-nginx.md, with loopback ports and every path under ``prefix``; the
    mirror location is the doc's verbatim, its timeouts set to ``mirror_timeout`` when given."""
    user = "user root;\n" if os.geteuid() == 0 else ""  # root master: workers must write the tmp spool
    temp = prefix / "temp"
    shadow = doc_shadow_location().replace("\n    ", "\n        ").replace("    location", "        location", 1)
    if mirror_timeout is not None:
        shadow = re.sub(r"(proxy_\w+_timeout)\s+\S+;", rf"\1 {mirror_timeout};", shadow)
    return f"""{user}worker_processes 1;
error_log {prefix}/error.log info;
pid {prefix}/nginx.pid;
events {{ worker_connections 256; }}
http {{
    client_body_temp_path {temp}/body;
    proxy_temp_path {temp}/proxy;
    fastcgi_temp_path {temp}/fastcgi;
    uwsgi_temp_path {temp}/uwsgi;
    scgi_temp_path {temp}/scgi;
    access_log {prefix}/access.log;

    log_format shadow_json escape=json '{{"request_id":"$request_id","status":"$status",'
        '"upstream_status":"$upstream_status","upstream_response_time":"$upstream_response_time"}}';

    upstream champion {{ server 127.0.0.1:{champion}; keepalive 16; }}
    upstream shadow_collector {{ server 127.0.0.1:{collector}; keepalive 16; }}

    server {{
        listen 127.0.0.1:{port};

        location = /v1/systemone {{
            mirror /_shadow;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header X-Request-Id $request_id;
            proxy_pass http://champion;
            proxy_store {spool}/$request_id;
            proxy_store_access user:rw;
            access_log syslog:server=127.0.0.1:{syslog},tag=workbench,nohostname shadow_json;
        }}

{shadow}
    }}
}}
"""


def _cli(db: Path, *args: str) -> list[str]:
    return [sys.executable, "-c", "from workbench.cli import main; main()", "--db", str(db), *args]


def _wait_http(url: str, proc: subprocess.Popen, what: str) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            httpx.get(url, timeout=1.0)
            return
        except httpx.HTTPError:
            assert proc.poll() is None, f"{what} exited: {proc.stderr.read().decode() if proc.stderr else ''}"
            time.sleep(0.05)
    raise AssertionError(f"{what} did not start")


def _stop(proc: subprocess.Popen) -> str:
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    return err.decode() if err else ""


def _comparable(report: dict) -> dict:
    """A report without what names the session or measures time: latencies (nginx's upstream time vs
    the mirror's own clock) and the arrival times bounding the drift windows. Floats to 12 significant
    digits: the two sessions receive the same requests in a different order, and a mean summed in another
    order can differ in its last bit (``mean_p_top_challenger`` …737 vs …738 in one CI run)."""

    def strip(obj):
        if isinstance(obj, dict):
            drop = {"shadow", "session", "start", "end"}
            return {k: strip(v) for k, v in obj.items() if "latency" not in k and k not in drop}
        if isinstance(obj, list):
            return [strip(v) for v in obj]
        if isinstance(obj, str):
            return re.sub(r"p95 latency[^;,]*", "", obj)
        if isinstance(obj, float):
            return float(f"{obj:.12g}")
        return obj

    return strip(report)


@pytest.mark.slow  # 10-40 s by machine load: nginx, two CLI services, 360 requests (runs in the default suite)
def test_nginx_mirror_to_collector_matches_shadow_serve(tmp_path):
    db = tmp_path / "wb.duckdb"
    prefix, spool = tmp_path / "nginx", tmp_path / "spool"
    (prefix / "temp").mkdir(parents=True)
    spool.mkdir()
    journal_collect, journal_serve = tmp_path / "collect.jsonl", tmp_path / "serve.jsonl"
    port, collector_port, syslog_port, serve_port = (
        _free_port(),
        _free_port(),
        _free_port(socket.SOCK_DGRAM),
        _free_port(),
    )
    # two challengers with the same seeded faults: each sees each body once, so both draw the same 500s
    with (
        run_emulator(port=0) as champion,
        run_emulator(port=0, server_error=0.15, seed=4) as challenger_a,
        run_emulator(port=0, server_error=0.15, seed=4) as challenger_b,
    ):
        collector = subprocess.Popen(
            _cli(db, "shadow", "collect", "--challenger", challenger_a.base_url + "/v1/systemone?model=clef-flash")
            + ["--spool", str(spool), "--port", str(collector_port), "--syslog-port", str(syslog_port)]
            + ["--journal", str(journal_collect), "--name", "via-nginx", "--champion", "champion-emulator"]
            + ["--champion-timeout", "10", "--challenger-timeout", "10"],  # generous: a loaded CI machine
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        serve = subprocess.Popen(
            _cli(db, "shadow", "serve", "--champion", champion.base_url + "/v1/systemone")
            + ["--challenger", challenger_b.base_url + "/v1/systemone?model=clef-flash", "--port", str(serve_port)]
            + ["--journal", str(journal_serve), "--name", "via-serve", "--challenger-timeout", "10"],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        conf = prefix / "nginx.conf"
        conf.write_text(
            nginx_conf(
                prefix,
                port=port,
                champion=champion.port,
                collector=collector_port,
                syslog=syslog_port,
                spool=spool,
                # the pairing is checked here, not the mirror's timeouts: with the recipe's 100 ms, a collector
                # stalled on a loaded machine would lose mirrors (the hung-collector test runs them as written)
                mirror_timeout="60s",
            )
        )
        nginx = subprocess.Popen(
            [NGINX, "-p", str(prefix), "-c", str(conf), "-g", "daemon off;"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        try:
            _wait_http(f"http://127.0.0.1:{collector_port}/v1/shadow/status", collector, "shadow collect")
            _wait_http(f"http://127.0.0.1:{serve_port}/v1/shadow/status", serve, "shadow serve")
            _wait_http(f"http://127.0.0.1:{port}/", nginx, "nginx")
            statuses = []
            with httpx.Client(trust_env=False, timeout=10) as client:
                for i in range(N_REQUESTS):
                    content = json.dumps(_body(i)).encode()
                    headers = {"content-type": "application/json", "x-item-id": f"req-{i:04d}"}
                    via_nginx = client.post(f"http://127.0.0.1:{port}/v1/systemone", content=content, headers=headers)
                    direct = client.post(champion.base_url + "/v1/systemone", content=content, headers=headers)
                    via_serve = client.post(
                        f"http://127.0.0.1:{serve_port}/v1/systemone", content=content, headers=headers
                    )
                    # the champion's answer through nginx is byte for byte the direct one, errors included
                    assert (via_nginx.status_code, via_nginx.content) == (direct.status_code, direct.content), i
                    assert via_nginx.headers["content-type"] == direct.headers["content-type"]
                    assert (via_serve.status_code, via_serve.content) == (direct.status_code, direct.content), i
                    statuses.append(via_nginx.status_code)
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                st = httpx.get(f"http://127.0.0.1:{collector_port}/v1/shadow/status").json()
                if st["requests"] == N_REQUESTS and st["in_progress"] == 0:
                    break
                time.sleep(0.05)
            assert st["requests"] == N_REQUESTS and st["in_progress"] == 0, st
        finally:
            nginx.send_signal(signal.SIGQUIT)  # graceful stop of the master and its worker
            nginx.wait(30)
            err_collect = _stop(collector)
            err_serve = _stop(serve)
        n_invalid = sum(1 for i in range(N_REQUESTS) if i % 20 == 7)
        assert statuses.count(422) == n_invalid and statuses.count(200) == N_REQUESTS - n_invalid
        assert "ingested 120 requests into session via-nginx" in err_collect, err_collect
        assert "ingested 120 requests into session via-serve" in err_serve, err_serve
        assert champion.stats["by_status"] == {"200": 3 * (N_REQUESTS - n_invalid), "422": 3 * n_invalid}
        n_500 = challenger_a.stats["by_status"].get("500", 0)
        assert challenger_a.stats["by_status"] == challenger_b.stats["by_status"] and 5 <= n_500 <= 40

    # the journal: one champion and one challenger half per request, keyed by nginx's $request_id
    records = list(read_journal(journal_collect))
    champ = {r["pair"]: r for r in records if r["kind"] == "champion"}
    chall = {r["pair"]: r for r in records if r["kind"] == "challenger"}
    assert len(champ) == N_REQUESTS and set(chall) == set(champ)
    assert all(re.fullmatch(r"[0-9a-f]{32}", pair) for pair in champ)
    by_item = {r["item_id"]: r for r in champ.values()}
    assert sorted(by_item) == [f"req-{i:04d}" for i in range(N_REQUESTS)]
    for i in range(N_REQUESTS):
        rec = by_item[f"req-{i:04d}"]
        assert json.loads(rec["request"]) == _body(i)
        if i % 20 == 7:  # nginx does not store errors: the status comes from its access log line
            assert (rec["status"], rec["body"], rec["error"]) == (422, None, None)
        else:
            assert rec["status"] == 200 and rec["error"] is None and json.loads(rec["body"])["answers"]
        assert rec["latency_ms"] is not None and 0 <= rec["latency_ms"] < 5000
    assert sum(1 for r in chall.values() if r["status"] == 500) == n_500
    assert list(spool.iterdir()) == []  # every stored answer was claimed

    # the same figures as `shadow serve` on the same traffic, each side routing with the same rule
    con = wb.connect(db, read_only=True)
    try:
        reports = {
            name: wb.shadow_report(
                con, name, champion_policy="tau=0.6,margin=0.1", challenger_policy="tau=0.6,margin=0.1", n_boot=200
            ).to_dict()
            for name in ("via-nginx", "via-serve")
        }
    finally:
        con.close()
    for report in reports.values():
        (intent,) = (q for q in report["questions"] if q["question"] == "intent")
        assert intent["n_requests"] == N_REQUESTS
        assert intent["failures"]["champion"]["by_kind"] == {"http_422": n_invalid}
        assert intent["failures"]["challenger"]["by_kind"] == {"http_422": n_invalid, "http_500": n_500}
        assert intent["latency_ms"]["champion"]["n"] == N_REQUESTS
        assert intent["review_load"] is not None and intent["directional"] is not None
    assert _comparable(reports["via-nginx"]) == _comparable(reports["via-serve"])
    assert reports["via-nginx"]["questions"][0]["agreement"]["n"] > 0


def test_the_recipes_mirror_location_bounds_what_a_hung_collector_costs():
    """A collector that accepts but never answers held each client's next keep-alive request for the mirror
    location's proxy_read_timeout (2 s in the recipe: p50 207 -> 1,983 ms). The documented location (which
    the nginx tests run verbatim) bounds connect, send and read to 100 ms and says so."""
    block = doc_shadow_location()
    settings = dict(re.findall(r"^\s*(proxy_\w+_timeout)\s+(\S+);", block, flags=re.M))
    assert set(settings) == {"proxy_connect_timeout", "proxy_send_timeout", "proxy_read_timeout"}, block
    assert all(_millis(v) <= 100 for v in settings.values()), settings
    assert "internal;" in block and "proxy_pass http://shadow_collector/v1/shadow/mirror;" in block
    text = DOC.read_text(encoding="utf-8")
    assert "costs the client nothing\n" not in text and "What the mirror costs the client" in text
    assert "nginx_conf" in globals() and doc_shadow_location() in "\n".join(
        ln[4:]
        for ln in nginx_conf(Path("/p"), port=1, champion=2, collector=3, syslog=4, spool=Path("/s")).splitlines()
    )


class _Hung:
    """Accepts connections and reads them, never answers (a collector stopped or stuck)."""

    def __init__(self) -> None:
        import threading

        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(256)
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        self._conns: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        import threading

        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            self._conns.append(conn)
            threading.Thread(target=self._read, args=(conn,), daemon=True).start()

    @staticmethod
    def _read(conn: socket.socket) -> None:
        try:
            while conn.recv(65536):
                pass
        except OSError:
            pass

    def close(self) -> None:
        self.sock.close()
        for c in self._conns:
            c.close()


def test_a_hung_collector_is_given_up_by_the_mirror_timeout(tmp_path):
    """Real nginx, the recipe's mirror location, a collector that accepts and never answers: every client
    request gets the champion's answer, and nginx gives up each mirror subrequest on its read timeout
    (error log: upstream timed out), so no request waits for the collector beyond it. Not timed here (the
    figures are in bench/shadow_nginx.py and the doc)."""
    prefix, spool = tmp_path / "nginx", tmp_path / "spool"
    (prefix / "temp").mkdir(parents=True)
    spool.mkdir()
    hung = _Hung()
    port = _free_port()
    n = 8
    try:
        with run_emulator(port=0) as champion:
            conf = prefix / "nginx.conf"
            conf.write_text(
                nginx_conf(
                    prefix,
                    port=port,
                    champion=champion.port,
                    collector=hung.port,
                    syslog=_free_port(socket.SOCK_DGRAM),
                    spool=spool,
                )
            )
            nginx = subprocess.Popen(
                [NGINX, "-p", str(prefix), "-c", str(conf), "-g", "daemon off;"],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
            )
            try:
                _wait_http(f"http://127.0.0.1:{port}/", nginx, "nginx")
                with httpx.Client(trust_env=False, timeout=60) as client:  # one keep-alive connection
                    for i in range(n):
                        content = json.dumps(_body(i)).encode()
                        via_nginx = client.post(f"http://127.0.0.1:{port}/v1/systemone", content=content)
                        direct = client.post(champion.base_url + "/v1/systemone", content=content)
                        assert (via_nginx.status_code, via_nginx.content) == (direct.status_code, direct.content)
            finally:
                nginx.send_signal(signal.SIGQUIT)
                nginx.wait(30)
    finally:
        hung.close()
    log = (prefix / "error.log").read_text()
    timed_out = [ln for ln in log.splitlines() if "upstream timed out" in ln and "/_shadow" in ln]
    assert len(timed_out) == n and hung.accepted >= 1, log[-3000:]
    assert all("while reading response header from upstream" in ln for ln in timed_out), timed_out
