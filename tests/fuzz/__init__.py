"""Fuzz suites (hypothesis) of the files users hand in: schema, policy, dataset, answer and decision-log files.

Each test runs ``WORKBENCH_FUZZ_EXAMPLES`` examples (default :data:`CI_EXAMPLES`: the test suite's
budget, well under a minute per test on a loaded 2-core machine). ``python bench/fuzz_files.py`` runs
them with 2,000 examples each and random seeds (``WORKBENCH_FUZZ_RANDOM=1``); without it the examples
are derandomised, so a CI run is reproducible.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

#: Examples per fuzz test in the test suite.
CI_EXAMPLES = 300


def fuzz_examples() -> int:
    """The budget per fuzz test: ``WORKBENCH_FUZZ_EXAMPLES`` or :data:`CI_EXAMPLES`."""
    try:
        return max(1, int(os.environ.get("WORKBENCH_FUZZ_EXAMPLES", CI_EXAMPLES)))
    except ValueError:
        return CI_EXAMPLES


def fuzz_settings(*, scale: float = 1.0) -> settings:
    """Hypothesis settings of a fuzz test: the budget (times ``scale``), no deadline, no example database."""
    return settings(
        max_examples=max(1, round(fuzz_examples() * scale)),
        deadline=None,
        database=None,
        derandomize=os.environ.get("WORKBENCH_FUZZ_RANDOM") != "1",
        suppress_health_check=[
            HealthCheck.too_slow,
            HealthCheck.filter_too_much,
            HealthCheck.data_too_large,
            HealthCheck.function_scoped_fixture,
        ],
    )
