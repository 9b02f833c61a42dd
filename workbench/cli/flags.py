"""One place that turns the library's option names into the CLI's flags in error messages.

Library messages name an option as the API parameter in backticks (``pass `questions` for the yes/no
questions``; the convention is in :mod:`workbench.errors`), or, for an :class:`~workbench.errors.OptionError`,
as ``parameter`` bare at the start of the message (``alpha must be in (0, 1)``). ``main`` shows them
with the flag a CLI user types: :func:`cli_message` rewrites each such name that is an option of the
command that ran (or, failing that, of any command) into its flag, and leaves any other backticked name
as it is.

The names are read from the Click command tree itself (every option's ``name`` and ``opts``), so a new
option needs no entry here; :data:`FLAGS` lists only library names whose flag is not found that way.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from workbench.cli.threshold_options import FLAGS as THRESHOLD_FLAGS

#: Library parameter → CLI flag, where the flag is not the command's option of that name (nor of its
#: singular, for a repeatable option): the threshold options' flags as declared in
#: :mod:`workbench.cli.threshold_options`, and a few others.
FLAGS = {
    **{f.field: f.flag for f in reversed(THRESHOLD_FLAGS)},  # the first flag of a field wins
    "n_draws": "--draws",
}

#: A backticked option name in a message: a lower-case identifier, nothing else between the backticks.
_BACKTICKED = re.compile(r"`([a-z][a-z0-9_]*)`")


@dataclass(frozen=True)
class CliOptions:
    """The options a message may name: ``own`` are the invoked command's (and its groups'), ``every`` those of
    any command whose name means one flag; both option name → flag, ``name*`` for a repeatable option."""

    own: dict[str, str] = field(default_factory=dict)
    every: dict[str, str] = field(default_factory=dict)


def flag_for(parameter: str, options: CliOptions | None = None) -> str:
    """The flag for a library parameter: ``alpha`` → ``--max-error``; ``grid`` → ``--grid``.

    The invoked command's option of that name comes first, then its repeatable option of the singular
    name (``labels`` → ``--label``), then :data:`FLAGS`, then any command's option; else ``--`` + the
    name with dashes.
    """
    return _known_flag(parameter, options or CliOptions()) or "--" + parameter.replace("_", "-")


def _known_flag(name: str, options: CliOptions) -> str | None:
    return _lookup(name, options.own) or FLAGS.get(name) or _lookup(name, options.every)


def _lookup(name: str, options: dict[str, str]) -> str | None:
    if name in options:
        return options[name]
    if name.endswith("s"):  # `labels` for the repeatable --label
        return options.get(name[:-1] + "*")
    return None


def _options_of(command: Any) -> dict[str, str]:
    """Option name → its flag (the first long one) for one Click command; ``name*`` for a repeatable one."""
    out: dict[str, str] = {}
    for param in getattr(command, "params", ()):
        if getattr(param, "param_type_name", "") != "option" or not param.name:
            continue
        opts = [o for o in param.opts if o.startswith("--")] or list(param.opts)
        out[param.name] = opts[0]
        if getattr(param, "multiple", False):
            out[param.name + "*"] = opts[0]
    return out


def _walk(command: Any) -> Iterable[Any]:
    yield command
    for sub in (getattr(command, "commands", None) or {}).values():
        yield from _walk(sub)


def command_options(root: Any, args: Sequence[str] = ()) -> CliOptions:
    """The options of the command ``args`` invoke under the Click group ``root``, and of every command
    (typer vendors Click: commands and options are found by attribute, not type).

    The invoked command's own options win, so ``alpha`` is ``--alpha`` under ``monitor`` and
    ``--max-error`` (:data:`FLAGS`) under ``thresholds``.
    """
    seen: dict[str, set[str]] = {}
    for command in _walk(root):
        for name, flag in _options_of(command).items():
            seen.setdefault(name, set()).add(flag)
    own: dict[str, str] = {}
    for command in _invoked(root, args):
        own.update(_options_of(command))
    return CliOptions(own, {name: flags.pop() for name, flags in seen.items() if len(flags) == 1})


def _invoked(root: Any, args: Sequence[str]) -> list[Any]:
    """The chain of commands ``args`` name, root first (options of the groups on the way are skipped)."""
    chain, command, rest = [root], root, list(args)
    while rest and getattr(command, "commands", None):
        token = rest.pop(0)
        if token.startswith("-"):
            takes_value = any(
                token in p.opts and not getattr(p, "is_flag", False) for p in getattr(command, "params", ())
            )
            if takes_value and rest:
                rest.pop(0)
            continue
        sub = command.commands.get(token)
        if sub is None:
            break
        chain.append(sub)
        command = sub
    return chain


def cli_message(exc: Exception, options: CliOptions | None = None) -> str:
    """``str(exc)`` with the options it names written as CLI flags.

    The parameter an :class:`~workbench.errors.OptionError` starts with (``exc.parameter``) and every
    backticked name that is a CLI option (see :func:`flag_for`) become the flag; other backticked names
    stay as they are.
    """
    text = str(exc)
    known = options or CliOptions()
    parameter = getattr(exc, "parameter", None)
    if parameter:
        flag = flag_for(parameter, known)
        text = re.sub(rf"(?<![\w`-]){re.escape(parameter)}(?![\w`-])", flag, text, count=1)

    def flag_of(m: re.Match[str]) -> str:
        return _known_flag(m.group(1), known) or m.group(0)

    return _BACKTICKED.sub(flag_of, text)
