"""Usage errors: click's message and exit code 2, never a traceback."""

from __future__ import annotations

import pytest

from tests.conftest import run_cli


@pytest.mark.parametrize(
    "args,expected",
    [
        (["thresholds"], "Missing argument"),
        (["datasets", "import"], "Missing argument"),
        (["no-such-command"], "No such command"),
        (["datasets", "show", "x", "--bogus"], "No such option"),
    ],
)
def test_usage_errors_are_short_and_exit_2(args, expected, db_path):
    proc = run_cli(*args, db=db_path)
    assert proc.returncode == 2
    assert expected in proc.stderr and "Traceback" not in proc.stderr


def test_help_lists_every_area():
    proc = run_cli("--help")
    assert proc.returncode == 0
    for command in (
        "datasets",
        "schema",
        "run",
        "runs",
        "export",
        "emulator",
        "report",
        "calibrate",
        "label-issues",
        "thresholds",
        "policy",
        "compare",
        "robustness",
        "cascade",
        "shadow",
        "demo",
        "ui",
    ):
        assert command in proc.stdout, command
