"""Credentials and typos fail before a run exists (issue 27 §3), and a run that ends with failures prints the
first message of each failure kind, whole.

Through the real CLI in a subprocess, on a real DuckDB store, with an environment that holds no provider
credential: a missing key, account id or a misspelled model exits 2 with one line naming the variable or the
known models, and the store has no new run afterwards. The check accepts every variable a provider reads.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT
from workbench.emulator import run_emulator
from workbench.errors import WorkbenchError
from workbench.providers.dialects.cloudflare import KEY_ENV as CLOUDFLARE_KEY_ENV
from workbench.providers.registry import check_ready
from workbench.providers.remote import PRESETS, build_http_provider
from workbench.schema import DecisionSchema
from workbench.store.datasets import import_dataset
from workbench.store.db import connect
from workbench.store.import_spec import ImportSpec

TOKEN = "preflight-token-5f3a9c1d2e7b"
OPTIONS = ["card_arrival", "lost_card", "refund", "other"]
SCHEMA = DecisionSchema.from_dict(
    {"questions": {"intent": {"type": "choice", "instructions": "Which intent?", "criteria": dict.fromkeys(OPTIONS)}}}
)
N_ITEMS = 6
#: every variable a provider reads credentials, accounts, models or URLs from (none may leak in from the machine)
PROVIDER_ENV = {
    *(n for p in PRESETS.values() for n in (*p.key_env, *p.url_env, *p.model_env)),
    "CLOUDFLARE_API_KEY",
    "CLOUDFLARE_API_TOKEN",
    "CLOUDFLARE_AUTH_TOKEN",
    "CLOUDFLARE_ACCOUNT_ID",
    "CLOUDFLARE_CLEF_MODEL",
    "CLOUDFLARE_CLEF_BASE_URL",
    "WORKBENCH_SYSTEMONE_API_KEY",
    "PRIME_TEAM_ID",
}


@pytest.fixture
def store(tmp_path: Path) -> tuple[Path, Path]:
    data = tmp_path / "items.csv"
    with data.open("w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["id", "text", "label"])
        for i in range(N_ITEMS):
            w.writerow([f"i{i:03d}", f"where is my card #{i}", OPTIONS[i % 4]])
    db = tmp_path / "wb.duckdb"
    with connect(db) as con:
        import_dataset(con, [data], ImportSpec(name="ds", text_column="text", id_column="id",
                                                labels={"intent": "label"}, split="test"), SCHEMA)  # fmt: skip
    schema_file = tmp_path / "schema.json"
    schema_file.write_text(json.dumps(SCHEMA.to_file_dict()), encoding="utf-8")
    return db, schema_file


def cli(db: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """The real entry point, in an environment without any provider variable of this machine, plus ``env``."""
    clean = {k: v for k, v in os.environ.items() if k not in PROVIDER_ENV}
    cmd = [sys.executable, "-c", "from workbench.cli import main; main()", "--db", str(db), *args]
    return subprocess.run(cmd, env={**clean, **(env or {})}, cwd=ROOT, capture_output=True, text=True, timeout=300)


def run_rows(db: Path) -> list[tuple]:
    with connect(db, read_only=True) as con:
        return con.execute("SELECT run_id, status FROM runs ORDER BY run_id").fetchall()


def run_args(schema_file: Path, provider: str, *extra: str) -> list[str]:
    return ["run", "--dataset", "ds", "--schema", str(schema_file), "--provider", provider, "--no-progress", *extra]


def test_missing_key_exits_2_before_a_run_exists(store):
    db, schema_file = store
    proc = cli(db, *run_args(schema_file, "cloudflare:clef-flash"), env={"CLOUDFLARE_ACCOUNT_ID": "0" * 32})
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "no API key" in lines[0] and all(name in lines[0] for name in CLOUDFLARE_KEY_ENV)
    assert run_rows(db) == []


@pytest.mark.parametrize("spec", ["cloudflare:clef-flsh", "cloudflare:clef-pro"])
def test_misspelled_model_exits_2_listing_the_known_models(store, spec):
    db, schema_file = store
    env = {"CLOUDFLARE_API_KEY": TOKEN, "CLOUDFLARE_ACCOUNT_ID": "0" * 32}
    proc = cli(db, *run_args(schema_file, spec), env=env)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "unknown model" in lines[0] and "clef, clef-flash" in lines[0], proc.stderr
    assert run_rows(db) == []


def test_missing_account_id_exits_2_and_one_bad_provider_of_several_stops_all(store):
    db, schema_file = store
    proc = cli(
        db,
        *run_args(
            schema_file, f"rules:{ROOT / 'experiments' / 'rules' / 'banking77.yaml'}", "--provider", "cloudflare:clef"
        ),
        env={"CLOUDFLARE_API_TOKEN": TOKEN},  # the second key name counts as a key
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().count("\n") == 0 and "CLOUDFLARE_ACCOUNT_ID" in proc.stderr
    assert run_rows(db) == []  # the local provider before it did not run either


def test_resume_without_the_key_exits_2_and_leaves_the_run_as_it_was(store):
    db, schema_file = store
    with run_emulator(port=0, require_token=TOKEN, quota=1.0) as emu:
        env = {"CLOUDFLARE_API_KEY": TOKEN, "CLOUDFLARE_ACCOUNT_ID": "0" * 32,
               "CLOUDFLARE_CLEF_BASE_URL": emu.cloudflare_base_url}  # fmt: skip
        first = cli(db, *run_args(schema_file, "cloudflare:clef-flash", "--json"), env=env)
    assert first.returncode == 4, first.stderr  # stopped on quota
    (before,) = run_rows(db)
    proc = cli(db, "run", "--resume", before[0], "--no-progress", env={"CLOUDFLARE_ACCOUNT_ID": "0" * 32})
    assert proc.returncode == 2 and "CLOUDFLARE_API_KEY" in proc.stderr, proc.stderr
    assert run_rows(db) == [before]


@pytest.mark.parametrize("key_name", ["CLOUDFLARE_API_KEY", "CLOUDFLARE_API_TOKEN", "CLOUDFLARE_AUTH_TOKEN"])
def test_either_cloudflare_key_name_runs_against_the_emulator(store, key_name):
    db, schema_file = store
    with run_emulator(port=0, require_token=TOKEN) as emu:
        env = {key_name: TOKEN, "CLOUDFLARE_ACCOUNT_ID": "0" * 32, "CLOUDFLARE_CLEF_BASE_URL": emu.cloudflare_base_url}
        proc = cli(db, *run_args(schema_file, "cloudflare:clef-flash", "--json"), env=env)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)["runs"][0]
    assert (summary["answered"], summary["failed"], summary["first_failures"]) == (N_ITEMS, 0, {})
    assert "first failure" not in proc.stderr


@pytest.mark.parametrize("vendor", sorted(PRESETS))
def test_the_check_accepts_every_key_variable_of_every_vendor(vendor):
    p = PRESETS[vendor]
    base = {p.url_env[0]: "http://127.0.0.1:9"}  # self-hosted vendors need a URL; nothing is sent
    provider = build_http_provider(f"{vendor}:", env=base)
    if p.key_required:
        with pytest.raises(WorkbenchError) as exc:
            check_ready(provider)
        assert all(name in str(exc.value) for name in p.key_env) and "\n" not in str(exc.value)
    else:
        check_ready(provider)  # self-hosted: the key is optional
    for name in p.key_env:
        check_ready(build_http_provider(f"{vendor}:", env={**base, name: TOKEN}))
    check_ready(build_http_provider(f"{vendor}:", env=base, api_key=TOKEN))  # the api_key setting counts too


def test_the_check_accepts_every_cloudflare_key_variable_and_needs_the_account_id():
    account = {"CLOUDFLARE_ACCOUNT_ID": "0" * 32}
    for name in CLOUDFLARE_KEY_ENV:
        check_ready(build_http_provider("cloudflare:clef", env={**account, name: TOKEN}))
        with pytest.raises(WorkbenchError, match="CLOUDFLARE_ACCOUNT_ID"):
            check_ready(build_http_provider("cloudflare:clef", env={name: TOKEN}))
    with pytest.raises(WorkbenchError) as exc:
        check_ready(build_http_provider("cloudflare:clef", env=account))
    assert all(name in str(exc.value) for name in CLOUDFLARE_KEY_ENV)


def test_open_model_lists_are_not_refused():
    """Only Cloudflare's closed list is checked: other vendors add models, self-hosted servers take any name."""
    env = {"OPENAI_API_KEY": TOKEN, "TYPESAFE_API_KEY": TOKEN, "LAYA_BASE_URL": "http://127.0.0.1:9"}
    for spec in ("openai:gpt-7-new", "typesafe:jev-9.9.9", "laya:my-model", "systemone:http://127.0.0.1:9?model=zz"):
        check_ready(build_http_provider(spec, env=env))
    cf = {"CLOUDFLARE_API_KEY": TOKEN, "CLOUDFLARE_ACCOUNT_ID": "0" * 32}
    check_ready(build_http_provider("cloudflare:", env={**cf, "CLOUDFLARE_CLEF_MODEL": "clef-flash"}))
    with pytest.raises(WorkbenchError, match="unknown model 'clef-2'"):
        check_ready(build_http_provider("cloudflare:", env={**cf, "CLOUDFLARE_CLEF_MODEL": "clef-2"}))


def test_a_run_with_failures_prints_the_first_whole_message_of_each_kind(store):
    """A host name of 250 characters that does not resolve (RFC 6761 ``.invalid``): the network message is over
    300 characters, and its advice at the end (cut off before) is printed; the key never is."""
    db, schema_file = store
    host = ".".join(["h" * 60] * 4) + ".invalid"
    env = {"CLOUDFLARE_API_KEY": TOKEN, "CLOUDFLARE_ACCOUNT_ID": "0" * 32,
           "CLOUDFLARE_CLEF_BASE_URL": f"http://{host}/client/v4"}  # fmt: skip
    proc = cli(db, *run_args(schema_file, "cloudflare:clef-flash", "--limit", "2", "--timeout", "3"), env=env)
    assert proc.returncode == 5, proc.stderr  # every item failed
    lines = proc.stderr.splitlines()
    (line,) = [ln for ln in lines if ln.startswith("  network: ")]
    assert len(line) > 300 and host in line
    assert line.endswith("(the host name does not resolve here; behind a proxy, set HTTPS_PROXY/HTTP_PROXY)")
    assert TOKEN not in proc.stderr and TOKEN not in proc.stdout


def test_a_stopped_run_names_its_kind_with_the_right_article_and_hides_the_key(store):
    db, schema_file = store
    wrong = "wrong-key-0123456789abcdef"
    with run_emulator(port=0, require_token=TOKEN) as emu:
        env = {"CLOUDFLARE_API_KEY": wrong, "CLOUDFLARE_ACCOUNT_ID": "0" * 32,
               "CLOUDFLARE_CLEF_BASE_URL": emu.cloudflare_base_url}  # fmt: skip
        proc = cli(db, *run_args(schema_file, "cloudflare:clef-flash", "--concurrency", "1"), env=env)
    assert proc.returncode == 4, proc.stderr
    text = " ".join(proc.stderr.split())  # the summary lines may wrap at 80 columns
    assert "stopped after an authentication failure" in text and "a authentication" not in text
    (line,) = [ln for ln in proc.stderr.splitlines() if ln.startswith("  authentication: ")]
    assert "HTTP 401" in line
    assert not any(ln.startswith("  not_asked") for ln in proc.stderr.splitlines())  # the stop line says why
    assert wrong not in proc.stderr and wrong not in proc.stdout
