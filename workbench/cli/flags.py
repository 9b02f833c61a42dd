"""One place that turns library parameter names into the CLI's flags in error messages.

Library errors name parameters (``OptionError(..., parameter="alpha")``, message starting with
``alpha``); ``main`` shows them with the flag a CLI user types (``--max-error``).
"""

from __future__ import annotations

import re

#: Library parameter → CLI flag, where the flag is not simply ``--`` + the name with dashes.
FLAGS = {
    "alpha": "--max-error",
    "n_paths": "--paths",
    "n_starts": "--starts",
    "abstain_options": "--abstain-option",
    "api_cost_per_item": "--api-cost",
    "class_error_cost": "--class-error-cost",
    "n_draws": "--draws",
    "costs": "--cost",
    "costs_file": "--costs",
    "constraints": "--critical",
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
