"""What a finished ``workbench run`` tells a script: one exit code per outcome.

=====  ===============================================================================
code   meaning
=====  ===============================================================================
0      every item × question was answered
2      bad input or usage (nothing was run)
3      the run finished but some items × questions failed (see ``failed_by_kind``)
4      the run stopped on an authentication or quota failure; items were not asked
       (fix the key or wait for the quota, then ``workbench run --resume RUN_ID``)
5      every item × question failed (nothing was answered)
6      ``--max-cost`` was reached; items were not asked
7      the run ended with items × questions that have neither an answer nor a failure in the
       store (status ``incomplete``, ``missing`` in the summary); ``--resume`` asks them
130    interrupted (Ctrl-C); ``--resume`` continues
=====  ===============================================================================

A stop (4, 6) is reported even when nothing was answered. With several providers the most severe
outcome wins, in the order 7 > 4 > 5 > 6 > 3 > 0.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

EXIT_OK = 0
EXIT_SOME_FAILED = 3
EXIT_STOPPED = 4
EXIT_ALL_FAILED = 5
EXIT_BUDGET = 6
EXIT_INCOMPLETE = 7
#: Severity rank: the exit code of several runs is the highest-ranked one.
_RANK = {EXIT_OK: 0, EXIT_SOME_FAILED: 1, EXIT_BUDGET: 2, EXIT_ALL_FAILED: 3, EXIT_STOPPED: 4, EXIT_INCOMPLETE: 5}


def run_exit_code(summary: Mapping[str, Any]) -> int:
    """The exit code of one run summary (as returned by ``execute_run``)."""
    if summary.get("status") == "incomplete" or int(summary.get("missing") or 0):
        return EXIT_INCOMPLETE
    stop_kind = summary.get("stop_kind")
    if summary.get("status") == "stopped" and stop_kind in ("authentication", "quota"):
        return EXIT_STOPPED
    if summary.get("status") == "stopped" and stop_kind == "budget":
        return EXIT_BUDGET
    answered, failed = int(summary.get("answered") or 0), int(summary.get("failed") or 0)
    if failed and not answered:
        return EXIT_ALL_FAILED
    return EXIT_SOME_FAILED if failed else EXIT_OK


def exit_code(summaries: Iterable[Mapping[str, Any]]) -> int:
    """The most severe :func:`run_exit_code` of several runs (0 for none)."""
    return max((run_exit_code(s) for s in summaries), key=_RANK.__getitem__, default=EXIT_OK)
