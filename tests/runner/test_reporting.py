"""Progress and log reporting is injected: the library prints nothing by default, the CLI passes its console."""

from __future__ import annotations

import io
import logging

from rich.console import Console

from workbench.reporting import LogReporter, RichReporter, SilentReporter, strip_markup
from workbench.runner import run_experiment
from workbench.store.db import connect

from .conftest import ROOT, banking_schema

RULES = f"rules:{ROOT / 'experiments' / 'rules' / 'banking77.yaml'}"


def test_the_library_default_prints_nothing_and_logs_the_progress(banking_db, capfd, caplog):
    db, name = banking_db
    con = connect(db)
    with caplog.at_level(logging.INFO, logger="workbench"):
        (run_id,) = run_experiment(con, dataset=name, schema=banking_schema(), provider_specs=[RULES])
    con.close()
    out, err = capfd.readouterr()
    assert out == "" and err == ""  # no bar, no console: a notebook or a service sees nothing unasked
    ends = [r.getMessage() for r in caplog.records if r.name == "workbench"]
    assert any(m.startswith(f"{RULES}: 308/308") for m in ends), ends  # the task's end, through logging


def test_an_injected_reporter_gets_the_progress(banking_db):
    db, name = banking_db
    buffer = io.StringIO()
    console = Console(file=buffer, force_terminal=False, width=200)
    con = connect(db)
    run_experiment(con, dataset=name, schema=banking_schema(), provider_specs=[RULES], reporter=RichReporter(console))
    con.close()
    text = buffer.getvalue()
    assert "308/308" in text and RULES in text  # the bar's last state: every unit done


def test_reporters_share_one_protocol(caplog):
    with caplog.at_level(logging.INFO, logger="workbench"):
        LogReporter().log("[bold]run-1[/] done")
        with LogReporter().task("units", 3) as task:
            task.update(3, "fail 0")
    assert [r.getMessage() for r in caplog.records] == ["run-1 done", "units: 3/3 fail 0"]
    with SilentReporter().task("units", 3) as task:
        task.update(1)
    assert strip_markup("[yellow]EMULATED[/] x [/]") == "EMULATED x "
