"""Runs over real networks: a forward proxy (Debian's squid) and TLS with a private CA (trustme).

Issue 12, acceptance 1 and 2. The proxy is the only resolver of ``emulator.workbench.test`` (its
``hosts_file``), so a run that answers proves every call went through it; with no proxy set the
same run fails with ``network`` failures. The TLS emulator's certificate is signed by a test CA:
``SSL_CERT_FILE`` pointing at the CA makes the run answer, without it every call is a
``certificate`` failure (not retried, nothing reaches the emulator's handler).
"""

from __future__ import annotations

import os
import shutil
import socket
import ssl
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

from workbench.emulator import run_emulator
from workbench.errors import OptionError
from workbench.providers.http import build_client, tls_context
from workbench.runner import run_experiment
from workbench.store.db import connect
from workbench.store.runs import get_run

from .conftest import banking_schema, import_banking

PROXY_ONLY_HOST = "emulator.workbench.test"  # no resolver but the proxy's hosts_file knows this name
ITEMS = 6
NETWORK_ENV = (
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "NO_PROXY",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "REQUESTS_CA_BUNDLE",
)


def _squid() -> str | None:
    return shutil.which("squid") or next((p for p in ("/usr/sbin/squid",) if os.access(p, os.X_OK)), None)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def squid_proxy() -> Iterator[SimpleNamespace]:
    """Debian's squid on a free loopback port, resolving only ``PROXY_ONLY_HOST`` (to 127.0.0.1)."""
    squid = _squid()
    if squid is None:
        pytest.skip("Debian's squid is not installed (apt-get install squid; .ci/run installs it)")
    work = Path(tempfile.mkdtemp(prefix="wb-squid-"))
    work.chmod(0o777)  # squid started as root drops to the `proxy` user, which must read and log here
    (work / "hosts").write_text(f"127.0.0.1 {PROXY_ONLY_HOST}\n")
    port = _free_port()
    access_log = work / "access.log"
    (work / "squid.conf").write_text(
        f"""http_port 127.0.0.1:{port}
acl loopback src 127.0.0.0/8
http_access allow loopback
http_access deny all
hosts_file {work / "hosts"}
dns_nameservers 127.0.0.1
cache deny all
cache_mem 8 MB
pinger_enable off
visible_hostname workbench-test-proxy
pid_filename none
access_log stdio:{access_log}
cache_log {work / "cache.log"}
cache_effective_user proxy
shutdown_lifetime 0 seconds
"""
    )
    for f in work.iterdir():
        f.chmod(0o644)
    proc = subprocess.Popen(
        [squid, "-N", "-f", str(work / "squid.conf")], stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT
    )
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                log = (work / "cache.log").read_text(errors="replace") if (work / "cache.log").exists() else ""
                if proc.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"squid did not start (exit {proc.poll()}):\n{log[-2000:]}")
                time.sleep(0.1)
        yield SimpleNamespace(url=f"http://127.0.0.1:{port}", access_log=access_log)
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        shutil.rmtree(work, ignore_errors=True)


@pytest.fixture
def clean_network_env(monkeypatch):
    """No proxy or CA setting inherited from the machine (upper and lower case)."""
    for name in NETWORK_ENV:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    return monkeypatch


def _run(tmp_path: Path, name: str, base_url: str) -> dict:
    """A fresh store (no cached answers) and a ``cloudflare:clef`` run of ITEMS items at ``base_url``."""
    con = connect(tmp_path / f"{name}.duckdb")
    dataset = import_banking(con, tmp_path / f"{name}-data", test_every=200, train_every=500)
    env = {"CLOUDFLARE_API_KEY": "dummy-key-123456", "CLOUDFLARE_ACCOUNT_ID": "0" * 32}
    env["CLOUDFLARE_CLEF_BASE_URL"] = base_url
    try:
        (run_id,) = run_experiment(
            con,
            dataset=dataset,
            schema=banking_schema(),
            provider_specs=["cloudflare:clef"],
            env=env,
            limit=ITEMS,
            timeout=3.0,
        )
        summary = get_run(con, run_id)["summary"]
        summary["messages"] = sorted(
            {r[0] for r in con.execute("SELECT failure_message FROM answers WHERE run_id = ?", [run_id]).fetchall()}
            - {None}
        )
        return summary
    finally:
        con.close()


def _proxied_lines(access_log: Path, port: int) -> list[str]:
    text = access_log.read_text() if access_log.exists() else ""
    return [line for line in text.splitlines() if f"http://{PROXY_ONLY_HOST}:{port}/" in line]


def test_run_through_a_forward_proxy_and_a_clear_network_error_without_it(tmp_path, squid_proxy, clean_network_env):
    with run_emulator(port=0) as emu:
        base = f"http://{PROXY_ONLY_HOST}:{emu.port}/client/v4"

        clean_network_env.setenv("HTTP_PROXY", squid_proxy.url)
        proxied = _run(tmp_path, "proxied", base)
        assert proxied["answered"] == ITEMS and proxied["failed"] == 0, proxied
        assert emu.request_count() == ITEMS
        time.sleep(0.3)  # squid writes its access log line after the response
        lines = _proxied_lines(squid_proxy.access_log, emu.port)
        assert len(lines) == ITEMS and all("/200 " in line and " POST " in line for line in lines), lines

        clean_network_env.delenv("HTTP_PROXY")
        clean_network_env.setenv("ALL_PROXY", squid_proxy.url)  # the catch-all variable works the same
        assert _run(tmp_path, "all-proxy", base)["answered"] == ITEMS
        assert emu.request_count() == 2 * ITEMS
        clean_network_env.delenv("ALL_PROXY")
        clean_network_env.setenv("HTTP_PROXY", squid_proxy.url)

        # NO_PROXY naming the host: the client goes direct, and only the proxy could resolve the name
        clean_network_env.setenv("NO_PROXY", PROXY_ONLY_HOST)
        bypassed = _run(tmp_path, "bypassed", base)
        assert bypassed["failed_by_kind"] == {"network": ITEMS}

        clean_network_env.delenv("HTTP_PROXY")
        clean_network_env.delenv("NO_PROXY")
        direct = _run(tmp_path, "direct", base)
        assert direct["answered"] == 0 and direct["failed_by_kind"] == {"network": ITEMS}, direct
        assert emu.request_count() == 2 * ITEMS  # nothing more reached the emulator
    assert len(_proxied_lines(squid_proxy.access_log, emu.port)) == 2 * ITEMS
    # the message says what failed: the host could not be reached (its name does not resolve)
    assert direct["messages"] and all(
        m.startswith("network: ") and f"{PROXY_ONLY_HOST}:{emu.port}" in m for m in direct["messages"]
    ), direct["messages"]


@pytest.fixture(scope="module")
def test_ca():
    trustme = pytest.importorskip("trustme", reason="trustme (test extra) makes the test CA")
    ca = trustme.CA()
    cert = ca.issue_cert("localhost", PROXY_ONLY_HOST, "127.0.0.1")
    work = Path(tempfile.mkdtemp(prefix="wb-ca-"))
    ca.cert_pem.write_to_path(str(work / "ca.pem"))
    cert.private_key_pem.write_to_path(str(work / "key.pem"))
    cert.cert_chain_pems[0].write_to_path(str(work / "cert.pem"))
    yield SimpleNamespace(ca=work / "ca.pem", cert=work / "cert.pem", key=work / "key.pem")
    shutil.rmtree(work, ignore_errors=True)


def test_tls_emulator_trusted_through_ssl_cert_file_and_a_clear_certificate_error_without(
    tmp_path, test_ca, clean_network_env
):
    with run_emulator(port=0, ssl_certfile=str(test_ca.cert), ssl_keyfile=str(test_ca.key)) as emu:
        base = f"https://localhost:{emu.port}/client/v4"

        untrusted = _run(tmp_path, "untrusted", base)  # the OS trust store (truststore) does not know the test CA
        assert untrusted["answered"] == 0 and untrusted["failed_by_kind"] == {"certificate": ITEMS}, untrusted
        assert untrusted["this_session"]["retries"] == 0  # a certificate failure is not retried
        assert all(
            m.startswith("certificate: the server's TLS certificate is not trusted") and "SSL_CERT_FILE" in m
            for m in untrusted["messages"]
        ), untrusted["messages"]

        clean_network_env.setenv("WORKBENCH_TRUSTSTORE", "0")  # certifi's bundle does not know it either
        assert _run(tmp_path, "certifi", base)["failed_by_kind"] == {"certificate": ITEMS}
        assert emu.request_count() == 0  # no request was sent over an unverified connection

        clean_network_env.setenv("SSL_CERT_FILE", str(test_ca.ca))
        trusted = _run(tmp_path, "trusted", base)
        assert trusted["answered"] == ITEMS and trusted["failed"] == 0, trusted
        assert emu.request_count() == ITEMS


@pytest.mark.parametrize("as_directory", [False, True])
def test_tls_emulator_trusted_through_requests_ca_bundle(tmp_path, test_ca, clean_network_env, as_directory):
    """``REQUESTS_CA_BUNDLE`` (requests' name; a file, or a directory of hashed certificates) trusts the test CA
    as ``SSL_CERT_FILE`` does; ``SSL_CERT_FILE`` wins when both are set."""
    bundle: Path = test_ca.ca
    if as_directory:
        bundle = tmp_path / "certs"
        bundle.mkdir()
        subject_hash = subprocess.run(
            ["openssl", "x509", "-hash", "-noout", "-in", str(test_ca.ca)], capture_output=True, text=True
        )
        if subject_hash.returncode != 0:
            pytest.skip("openssl is needed to name a hashed certificate directory")
        shutil.copy(test_ca.ca, bundle / f"{subject_hash.stdout.strip()}.0")
    with run_emulator(port=0, ssl_certfile=str(test_ca.cert), ssl_keyfile=str(test_ca.key)) as emu:
        base = f"https://localhost:{emu.port}/client/v4"
        untrusted = _run(tmp_path, "untrusted", base)
        assert untrusted["failed_by_kind"] == {"certificate": ITEMS}, untrusted
        assert all("REQUESTS_CA_BUNDLE" in m for m in untrusted["messages"]), untrusted["messages"]
        clean_network_env.setenv("REQUESTS_CA_BUNDLE", str(bundle))
        trusted = _run(tmp_path, "trusted", base)
        assert trusted["answered"] == ITEMS and trusted["failed"] == 0, trusted
        assert emu.request_count() == ITEMS
        other = tmp_path / "other-ca.pem"  # a valid bundle of another CA: SSL_CERT_FILE is the one used
        pytest.importorskip("trustme").CA().cert_pem.write_to_path(str(other))
        clean_network_env.setenv("SSL_CERT_FILE", str(other))
        assert _run(tmp_path, "file-wins", base)["failed_by_kind"] == {"certificate": ITEMS}


def test_https_through_the_proxy_tunnel(tmp_path, squid_proxy, test_ca, clean_network_env):
    """HTTPS_PROXY: the https call goes through squid's CONNECT tunnel and verifies the test CA end to end."""
    with run_emulator(port=0, ssl_certfile=str(test_ca.cert), ssl_keyfile=str(test_ca.key)) as emu:
        clean_network_env.setenv("HTTPS_PROXY", squid_proxy.url)
        clean_network_env.setenv("SSL_CERT_FILE", str(test_ca.ca))
        summary = _run(tmp_path, "tunnel", f"https://{PROXY_ONLY_HOST}:{emu.port}/client/v4")
        assert summary["answered"] == ITEMS and summary["failed"] == 0, summary
        assert emu.request_count() == ITEMS
    time.sleep(0.3)
    text = squid_proxy.access_log.read_text()
    assert f"CONNECT {PROXY_ONLY_HOST}:{emu.port}" in text  # one tunnel (kept alive), at least


def test_tls_context_defaults_to_the_os_trust_store_with_an_off_switch(test_ca):
    truststore = pytest.importorskip("truststore")
    assert isinstance(tls_context({}), truststore.SSLContext)
    off = tls_context({"WORKBENCH_TRUSTSTORE": "0"})
    assert isinstance(off, ssl.SSLContext) and not isinstance(off, truststore.SSLContext)
    certs = tls_context({"SSL_CERT_FILE": str(test_ca.ca)}).get_ca_certs()  # exactly the named bundle
    assert len(certs) == 1 and dict(certs[0]["subject"][1])["organizationalUnitName"].startswith("Testing CA #")
    with pytest.raises(OptionError, match="SSL_CERT_FILE='/nonexistent/ca.pem': no such file"):
        tls_context({"SSL_CERT_FILE": "/nonexistent/ca.pem"})
    certs = tls_context({"REQUESTS_CA_BUNDLE": str(test_ca.ca)}).get_ca_certs()
    assert len(certs) == 1 and dict(certs[0]["subject"][1])["organizationalUnitName"].startswith("Testing CA #")
    with pytest.raises(OptionError, match="REQUESTS_CA_BUNDLE='/nonexistent/ca.pem': no such file"):
        tls_context({"REQUESTS_CA_BUNDLE": "/nonexistent/ca.pem"})


def test_a_socks_proxy_is_refused_up_front_without_echoing_its_password(clean_network_env):
    clean_network_env.setenv("ALL_PROXY", "socks5://alice:s3cret-pw@127.0.0.1:1080")
    with pytest.raises(OptionError) as exc:
        build_client()
    assert str(exc.value).startswith("ALL_PROXY: a socks5:// proxy is not supported")
    assert "s3cret-pw" not in str(exc.value) and "s3cret-pw" not in (exc.value.hint or "")
