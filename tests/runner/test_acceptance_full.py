"""Issue 3 acceptance 1, 2 and 7 at full size: the BANKING77 test split (3,080 items) through the
emulated Cloudflare models and both local providers, from the command line only."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from .conftest import BANKING_DIR, ROOT

pytestmark = pytest.mark.slow
TOKEN = "acceptance-dummy-token-9f8e7d6c5b4a"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=5) as r:
        return json.loads(r.read())


def test_full_banking77_test_split_every_provider_then_rerun_is_free(tmp_path):
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    emulator = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from workbench.cli import main; main()",
            "emulator",
            "--port",
            str(port),
            "--require-token",
            TOKEN,
        ],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    env = {
        **os.environ,
        "CLOUDFLARE_CLEF_BASE_URL": f"{base}/client/v4",
        "CLOUDFLARE_API_TOKEN": TOKEN,
        "CLOUDFLARE_ACCOUNT_ID": "0123456789abcdef0123456789abcdef",
    }
    db = tmp_path / "wb.duckdb"

    def cli(*args: str) -> subprocess.CompletedProcess:
        res = subprocess.run(
            [sys.executable, "-c", "from workbench.cli import main; main()", "--db", str(db), *args],
            env=env,
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=1800,
        )
        assert res.returncode == 0, res.stderr[-3000:]
        return res

    try:
        deadline = time.time() + 60
        while True:
            try:
                _get(f"{base}/_emulator/health")
                break
            except OSError:
                assert time.time() < deadline, "emulator did not start"
                time.sleep(0.2)
        cli(
            "datasets",
            "import",
            str(BANKING_DIR / "train.csv"),
            str(BANKING_DIR / "test.csv"),
            "--name",
            "banking77",
            "--text-column",
            "text",
            "--label",
            "intent=category",
            "--calibration-fraction",
            "0.2",
            "--seed",
            "0",
        )
        schema = ROOT / "experiments" / "schemas" / "banking77.yaml"
        providers = ["cloudflare:clef", "cloudflare:clef-flash", "local:minilm-zeroshot", "baseline:tfidf-logreg"]
        args = [
            "run",
            "--dataset",
            "banking77",
            "--schema",
            str(schema),
            "--split",
            "test",
            "--concurrency",
            "32",
            "--json",
        ]
        for p in providers:
            args += ["--provider", p]
        first = json.loads(cli(*args).stdout)["runs"]
        for r in first:
            assert r["answered"] == 3080 and r["failed"] == 0 and r["status"] == "done", r
        served = _get(f"{base}/_emulator/stats")["total"]
        assert served == 2 * 3080

        second = json.loads(cli(*args).stdout)["runs"]
        assert _get(f"{base}/_emulator/stats")["total"] == served, "the rerun made emulator requests"
        for r in second:
            assert r["answered"] == 3080 and r["this_session"]["cache_hits"] == 3080
            assert r["this_session"]["requests_sent"] == 0
    finally:
        emulator.terminate()
        emulator.wait(10)
    blobs = b"".join(p.read_bytes() for p in tmp_path.rglob("*") if p.is_file())
    assert TOKEN.encode() not in blobs
