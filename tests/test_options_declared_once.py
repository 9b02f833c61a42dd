"""The threshold options are declared once: every ThresholdOptions field is a flag of every command that
chooses thresholds, and a control of the UI, unless one exclusion set says why not."""

from __future__ import annotations

import ast
from dataclasses import fields
from pathlib import Path

import pytest

from tests.conftest import run_cli

ROOT = Path(__file__).resolve().parents[1]


def _field_names() -> set[str]:
    from workbench.thresholds.options import ThresholdOptions

    return {f.name for f in fields(ThresholdOptions)}


def _commands() -> dict[str, object]:
    """Every command of the CLI by its full name ('policy export'), as click sees it."""
    import typer.main

    from workbench.cli import app

    out: dict[str, object] = {}

    def walk(group, prefix: str) -> None:
        for name, cmd in group.commands.items():
            full = f"{prefix} {name}".strip()
            if hasattr(cmd, "commands"):
                walk(cmd, full)
            else:
                out[full] = cmd

    walk(typer.main.get_command(app), "")
    return out


def _flags(cmd) -> set[str]:
    return {o for p in cmd.params for o in getattr(p, "opts", [])}


def test_every_field_has_a_flag_or_a_reason():
    from workbench.cli.threshold_options import FLAGS, NOT_OFFERED, NOT_ON_THE_CLI

    names = _field_names()
    flagged = {f.field for f in FLAGS}
    assert not flagged - names, f"flags of no ThresholdOptions field: {flagged - names}"
    assert not flagged & set(NOT_ON_THE_CLI), "a field both has a flag and is listed as having none"
    missing = names - flagged - set(NOT_ON_THE_CLI)
    assert not missing, (
        f"ThresholdOptions fields with no CLI flag: add a Flag to workbench/cli/threshold_options.py FLAGS: {missing}"
    )
    for command, omitted in NOT_OFFERED.items():
        assert set(omitted) <= flagged, (command, set(omitted) - flagged)
        assert all(reason.strip() for reason in omitted.values()), command
    assert all(reason.strip() for reason in NOT_ON_THE_CLI.values())
    assert len({f.flag for f in FLAGS}) == len(FLAGS), "a flag declared twice"


def test_flag_defaults_are_the_dataclass_defaults():
    from workbench.cli.threshold_options import FLAGS, build_options
    from workbench.thresholds.options import ThresholdOptions

    defaults = ThresholdOptions()
    assert build_options(**{f.name: f.default for f in FLAGS}) == defaults  # every flag left at its default
    for f in FLAGS:
        if f.default is not None:  # the flags that stand for the field itself (None: "not given")
            assert f.default == getattr(defaults, f.field), f.flag


def test_every_threshold_command_offers_every_flag():
    from workbench.cli.threshold_options import COMMANDS, FLAGS, NOT_OFFERED

    commands = _commands()
    assert COMMANDS >= {"thresholds", "policy export", "compare", "shadow report", "plan-labels", "demo"}
    assert set(NOT_OFFERED) <= COMMANDS
    for name in sorted(COMMANDS):
        have = _flags(commands[name])
        omitted = NOT_OFFERED.get(name, {})
        lacking = [f.flag for f in FLAGS if f.field not in omitted and f.flag not in have]
        assert not lacking, f"`workbench {name}` lacks {lacking}"


#: Commands with a --max-error of their own that is not a ThresholdOptions' alpha, with the reason.
OWN_MAX_ERROR = {
    "cascade": "certifies a cascade of runs with its own CascadeOptions (per-stage bands), not ThresholdOptions",
    "aggregate": "--max-error picks the widest grid point of a pooled surface by observed error: nothing is certified",
}


def test_no_command_declares_threshold_flags_by_hand():
    """A command with --max-error either takes the one declaration or says why its --max-error is another thing."""
    from workbench.cli.threshold_options import COMMANDS

    by_hand = {n for n, cmd in _commands().items() if "--max-error" in _flags(cmd)} - COMMANDS
    assert by_hand <= set(OWN_MAX_ERROR), (
        f"declare the threshold flags with @threshold_options: {by_hand - set(OWN_MAX_ERROR)}"
    )
    # and no CLI module builds options itself
    for path in sorted((ROOT / "workbench" / "cli").glob("*.py")):
        if path.name == "threshold_options.py":
            continue
        calls = [
            n
            for n in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
        ]
        assert not [c for c in calls if c.func.id == "build_options"], path.name
        # ThresholdOptions(**result_settings) re-reads a result's settings; named fields would be options by hand
        assert not [c for c in calls if c.func.id == "ThresholdOptions" and any(k.arg for k in c.keywords)], path.name


def _ui_fields() -> set[str]:
    """Field names the UI's controls set: keywords of ``threshold_settings(...)`` and ``options.update(...)``,
    keys of an ``options = {...}`` dict and of ``options["..."] = ...``."""
    found: set[str] = set()
    for path in sorted((ROOT / "workbench" / "ui").rglob("*.py")):
        for n in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(n, ast.Call):
                f = n.func
                name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
                owner = f.value.id if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) else ""
                if name == "threshold_settings" or (name == "update" and owner == "options"):
                    found |= {k.arg for k in n.keywords if k.arg}
            elif isinstance(n, (ast.Assign, ast.AnnAssign)):
                for t in n.targets if isinstance(n, ast.Assign) else [n.target]:
                    if isinstance(t, ast.Name) and t.id == "options" and isinstance(n.value, ast.Dict):
                        found |= {k.value for k in n.value.keys if isinstance(k, ast.Constant)}
                    if isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name) and t.value.id == "options":
                        if isinstance(t.slice, ast.Constant):
                            found.add(t.slice.value)
    return found


def test_the_ui_has_a_control_for_every_field_or_a_reason():
    from workbench.ui.state import THRESHOLD_FIELDS_NOT_IN_UI

    names = _field_names()
    ui = _ui_fields() & names
    assert not set(THRESHOLD_FIELDS_NOT_IN_UI) - names
    assert not ui & set(THRESHOLD_FIELDS_NOT_IN_UI), (
        f"listed as absent but the UI sets {ui & set(THRESHOLD_FIELDS_NOT_IN_UI)}"
    )
    missing = names - ui - set(THRESHOLD_FIELDS_NOT_IN_UI)
    assert not missing, (
        f"no UI control for {missing}: add one, or a reason in ui/state/thresholds.py THRESHOLD_FIELDS_NOT_IN_UI"
    )
    assert not (_ui_fields() - names - {"max_error_increase"}) & {"max_error", "paths", "starts", "api_cost"}, (
        "the UI names settings by ThresholdOptions field, not by CLI flag"
    )


def test_flag_parsing_names_the_flag(tmp_path):
    from workbench.cli.threshold_options import build_options, parse_cost_flags, parse_critical_flags
    from workbench.errors import OptionError

    f = tmp_path / "costs.yaml"
    f.write_text("hate:\n  offensive: 10\n  neither: 10\noffensive: {neither: 2}\n", encoding="utf-8")
    costs = parse_cost_flags(["hate:neither=20", "neither:*=3"], f)
    assert costs == {"hate": {"offensive": 10, "neither": 20.0}, "offensive": {"neither": 2}, "neither": {"*": 3.0}}
    assert parse_critical_flags(["hate:0.05"]) == {"hate": 0.05}
    with pytest.raises(OptionError, match="^--cost 'hate=10' is not TRUE:ACCEPTED=COST"):
        parse_cost_flags(["hate=10"], None)
    with pytest.raises(OptionError, match="^--critical 'hate' is not OPTION:BETA"):
        parse_critical_flags(["hate"])
    with pytest.raises(OptionError, match="^--class-error-cost 'refund' is not OPTION=COST"):
        build_options(class_error_cost=["refund"])
    o = build_options(max_error=0.5, cost=["hate:*=10"], critical=["hate:0.05"], paths=3, abstain_option=["x"])
    assert (o.alpha, o.costs, o.constraints, o.n_paths, o.abstain_options) == (
        0.5,
        {"hate": {"*": 10.0}},
        {"hate": 0.05},
        3,
        ["x"],
    )
    assert build_options(class_error_cost=["refund=50"]).error_cost == {"refund": 50.0}
    with pytest.raises(TypeError, match="alpha"):
        build_options(alpha=0.1)  # the flag is --max-error: parameter max_error


@pytest.mark.parametrize(
    "args,words",
    [
        (["thresholds", "r", "-q", "q", "--critical", "hate"], ["error: --critical 'hate' is not OPTION:BETA"]),
        (["policy", "export", "r", "-q", "q", "--out", "p.json", "--cost", "x"], ["error: --cost 'x' is not TRUE:"]),
        (["compare", "r", "--max-error", "2"], ["error: --max-error must be in (0, 1), got 2.0"]),
        (["shadow", "report", "s", "--delta", "0"], ["error: --delta must be in (0, 1)"]),
        (["plan-labels", "r", "-q", "q", "--grid", "1"], ["error: --grid must be between 2 and 1000"]),
        (["thresholds", "r", "-q", "q", "--per-class", "--critical", "a:0.1"], ["drop per_class", "--critical"]),
    ],
)
def test_a_bad_threshold_flag_is_one_line_naming_the_flag(tmp_path, args, words):
    """The options are checked before the store is opened: the same error on every command."""
    r = run_cli(*args, db=tmp_path / "none.duckdb")
    assert r.returncode == 2 and r.stdout == "", r.stderr
    assert r.stderr.count("\n") == 1, r.stderr
    for w in words:
        assert w in r.stderr, r.stderr
    assert not (tmp_path / "none.duckdb").exists()
