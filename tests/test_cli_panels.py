"""`workbench --help` groups every command in a panel, the panels in workflow order (issue 27 §5)."""

from __future__ import annotations

import os
import re
import subprocess
import sys

from typer.main import get_command

from workbench.cli import PANELS, app

#: The documented workflow order of the help's panels (CONTRIBUTING.md, "Adding a command").
WORKFLOW = ["Data", "Runs", "Evaluation", "Thresholds & policy", "Production", "Tools"]


def test_every_command_is_in_exactly_one_panel_in_workflow_order():
    assert [panel for panel, _ in PANELS] == WORKFLOW
    listed = [name for _, names in PANELS for name in names]
    assert len(listed) == len(set(listed)), "a command is listed in two panels"
    group = get_command(app)
    registered = set(group.commands)
    assert registered == set(listed), (sorted(registered - set(listed)), sorted(set(listed) - registered))
    panel_of = {name: panel for panel, names in PANELS for name in names}
    for name, command in group.commands.items():
        assert getattr(command, "rich_help_panel", None) == panel_of[name], name
    assert group.list_commands(None) == listed


def test_help_prints_the_panels_in_order_with_their_commands(tmp_path):
    env = {**os.environ, "COLUMNS": "100"}
    env.pop("WORKBENCH_DB", None)
    proc = subprocess.run(
        [sys.executable, "-m", "workbench", "--help"], capture_output=True, text=True, env=env, cwd=tmp_path, check=True
    )
    titles = re.findall(r"^╭─ (.+?) ─", proc.stdout, flags=re.MULTILINE)
    assert titles == ["Options", *WORKFLOW], titles
    assert "Commands" not in titles  # nothing left in typer's default panel
    shown = re.findall(r"^│ ([a-z][a-z-]*)  ", proc.stdout, flags=re.MULTILINE)
    assert shown == [name for _, names in PANELS for name in names], shown
