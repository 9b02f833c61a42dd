"""The example budget of the fuzz tests of issue 25: a CI-sized run by default, a bench-sized one on demand.

``WORKBENCH_FUZZ_EXAMPLES`` sets the examples per fuzz test (default :data:`CI_EXAMPLES`); the bench-sized
run is ``WORKBENCH_FUZZ_EXAMPLES=2000 python -m pytest -n 0 tests/fuzz/test_fuzz_requirements.py
tests/fuzz/test_fuzz_outcomes.py``. Derandomised, so a run is reproducible.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

#: Examples per fuzz test in the test suite (the bench-sized run uses 2,000).
CI_EXAMPLES = 300


def examples() -> int:
    raw = os.environ.get("WORKBENCH_FUZZ_EXAMPLES", "")
    return int(raw) if raw.strip().isdigit() and int(raw) > 0 else CI_EXAMPLES


def fuzz_settings(n: int | None = None) -> settings:
    return settings(
        max_examples=n or examples(),
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
    )
