"""`--out` never overwrites an existing file without `--force`, and a directory is one line
(issue 14 items 8 and 12), for every command that writes a file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.policy.conftest import build_store


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("out")
    db = tmp / "wb.duckdb"
    build_store(db, tmp, n=400)
    return db


COMMANDS = {
    "export": ["export", "run-sim", "--format", "jsonl"],
    "policy export": ["policy", "export", "run-sim", "-q", "intent", "--max-error", "0.2"],
}


def one_line(proc) -> str:
    assert proc.returncode == 2, proc.stderr
    lines = [x for x in proc.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in proc.stderr, proc.stderr
    return lines[0]


@pytest.mark.parametrize("command", list(COMMANDS))
def test_out_directory_is_one_line(store: Path, tmp_path: Path, command: str):
    d = tmp_path / "somedir"
    d.mkdir()
    assert "is a directory" in one_line(run_cli(*COMMANDS[command], "--out", str(d), db=store))


@pytest.mark.parametrize("command", list(COMMANDS))
def test_existing_out_file_needs_force(store: Path, tmp_path: Path, command: str):
    out = tmp_path / "existing.json"
    out.write_text("precious", encoding="utf-8")
    line = one_line(run_cli(*COMMANDS[command], "--out", str(out), db=store))
    assert "file exists" in line and "--force" in line
    assert out.read_text(encoding="utf-8") == "precious"
    ok = run_cli(*COMMANDS[command], "--out", str(out), "--force", db=store)
    assert ok.returncode == 0, ok.stderr
    assert out.read_text(encoding="utf-8") != "precious"


def test_policy_jev_out_needs_force_too(store: Path, tmp_path: Path):
    out = tmp_path / "policy.json"
    jev = tmp_path / "thresholds.json"
    jev.write_text("{}", encoding="utf-8")
    line = one_line(run_cli(*COMMANDS["policy export"], "--format", "jev-eval", "--out", str(out), db=store))
    assert "--jev-out" in line and "file exists" in line
    assert not out.exists()  # refused before anything was written


def test_shadow_export_needs_force(store: Path, tmp_path: Path):
    out = tmp_path / "traffic.jsonl"
    out.write_text("precious\n", encoding="utf-8")
    line = one_line(run_cli("shadow", "export", "any-session", "--out", str(out), db=store))
    assert "file exists" in line
    assert out.read_text(encoding="utf-8") == "precious\n"


def test_fresh_out_path_is_written(store: Path, tmp_path: Path):
    out = tmp_path / "fresh.jsonl"
    proc = run_cli(*COMMANDS["export"], "--out", str(out), "--json", db=store)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["rows"] == sum(1 for _ in out.open(encoding="utf-8"))


def test_policy_rewrites_to_another_existing_file_need_force(store: Path, tmp_path: Path):
    policy = tmp_path / "policy.json"
    assert run_cli(*COMMANDS["policy export"], "--out", str(policy), db=store).returncode == 0
    key = tmp_path / "k.key"
    assert run_cli("policy", "keygen", "--type", "hmac-sha256", "--out", str(key)).returncode == 0
    other = tmp_path / "other.json"
    other.write_text("precious", encoding="utf-8")
    for args in (("sign", str(policy), "--key", str(key)), ("mode", str(policy), "shadow")):
        line = one_line(run_cli("policy", *args, "--out", str(other)))
        assert "file exists" in line and other.read_text(encoding="utf-8") == "precious"
    ok = run_cli("policy", "sign", str(policy), "--key", str(key), "--out", str(other), "--force")
    assert ok.returncode == 0, ok.stderr
    assert json.loads(other.read_text(encoding="utf-8"))["signature"]
    # the default is still an in-place rewrite of the input
    assert run_cli("policy", "sign", str(policy), "--key", str(key)).returncode == 0
