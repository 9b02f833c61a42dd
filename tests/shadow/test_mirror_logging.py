"""The mirror's diagnostics go through `logging` (logger ``workbench.shadow.mirror``), never print():
a journal write that fails is counted and logged once per failure, and the champion's answer is unchanged."""

from __future__ import annotations

import logging

from workbench.shadow.challenger import failure
from workbench.shadow.mirror import MirrorApp, MirrorConfig


class _FullDisk:
    def append(self, record: dict) -> None:
        raise OSError(28, "No space left on device")


def test_a_failed_journal_write_is_logged_not_printed(tmp_path, caplog, capsys):
    endpoint = "http://127.0.0.1:9/v1/systemone"
    app = MirrorApp(MirrorConfig(champion=endpoint, challenger=endpoint, journal=tmp_path / "journal.jsonl"))
    app.journal = _FullDisk()  # type: ignore[assignment]
    with caplog.at_level(logging.ERROR, logger="workbench.shadow.mirror"):
        app._record_challenger("pair-1", failure("timeout"))
    assert app.stats["journal_errors"] == 1
    records = [r for r in caplog.records if r.name == "workbench.shadow.mirror"]
    assert [(r.levelno, r.getMessage()) for r in records] == [
        (logging.ERROR, "shadow mirror: journal write failed: OSError: [Errno 28] No space left on device")
    ]
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == ""  # through logging's handlers only
