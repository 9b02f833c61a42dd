"""One place that turns library parameter names into the CLI's flags in error messages.

Library errors name parameters (``OptionError(..., parameter="alpha")``, message starting with
``alpha``); ``main`` shows them with the flag a CLI user types (``--max-error``).
"""

from __future__ import annotations

import re

from workbench.cli.threshold_options import FLAGS as THRESHOLD_FLAGS

#: Library parameter → CLI flag, where the flag is not simply ``--`` + the name with dashes: the
#: threshold options' flags as declared in :mod:`workbench.cli.threshold_options`, and a few others.
FLAGS = {
    **{f.field: f.flag for f in reversed(THRESHOLD_FLAGS)},  # the first flag of a field wins
    "n_draws": "--draws",
    "questions": "--question",
    "splits": "--split",
}


def flag_for(parameter: str) -> str:
    """``alpha`` → ``--max-error``; ``max_error`` → ``--max-error``; ``grid`` → ``--grid``."""
    return FLAGS.get(parameter, "--" + parameter.replace("_", "-"))


def cli_message(exc: Exception) -> str:
    """``str(exc)`` with the parameter it names (``exc.parameter``) written as the CLI flag."""
    text = str(exc)
    parameter = getattr(exc, "parameter", None)
    if not parameter:
        return text
    return re.sub(rf"(?<![\w-]){re.escape(parameter)}(?![\w-])", flag_for(parameter), text, count=1)
