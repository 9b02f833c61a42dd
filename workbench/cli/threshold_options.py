"""The threshold options of the command line, declared once.

Every command that chooses thresholds (``workbench thresholds``, ``policy export``, ``compare``,
``shadow report``, ``plan-labels``, ``demo``) takes its threshold flags from :data:`FLAGS` through the
:func:`threshold_options` decorator: the command declares one keyword-only parameter
``options: ThresholdOptions`` and receives the built options; the flags, their help and their defaults
are written here only. Each flag sets one field of
:class:`~workbench.thresholds.options.ThresholdOptions`; a field with no flag is listed, with the reason,
in :data:`NOT_ON_THE_CLI`, and a command that leaves a flag out lists it in :data:`NOT_OFFERED`
(``tests/test_options_declared_once.py`` checks all three against the dataclass).

Adding a field to ``ThresholdOptions``: add its :class:`Flag` here (flag, default, help). The
defaults are literals, so that ``workbench --help`` does not import numpy; the test checks each against
the dataclass's own default.

The flags' parsing (``--cost TRUE:ACCEPTED=COST``, ``--critical OPTION:BETA``, ``--class-error-cost``,
``--cost-matrix``, ``--costs FILE``) lives here too; errors name the flag the user typed.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from workbench.errors import OptionError

if TYPE_CHECKING:
    from workbench.thresholds.options import ThresholdOptions

#: --help lists the threshold flags in a panel of their own.
PANEL = "Threshold options"


@dataclass(frozen=True)
class Flag:
    """One threshold flag: the :class:`ThresholdOptions` field it sets and how the command line spells it.

    ``name`` is the command parameter (``max_error`` for ``--max-error``); several flags may set one
    field (``--error-cost``, ``--class-error-cost`` and ``--cost-matrix`` all make ``error_cost``).
    """

    field: str
    flag: str
    annotation: Any
    default: Any
    help: str

    @property
    def name(self) -> str:
        return self.flag.removeprefix("--").replace("-", "_")

    def option(self) -> Any:
        return typer.Option(self.default, self.flag, help=self.help, rich_help_panel=PANEL)


FLAGS: tuple[Flag, ...] = (
    Flag("objective", "--objective", str, "guarantee", "guarantee | cost | coverage | error."),
    Flag("alpha", "--max-error", float, 0.05, "α: largest error rate among auto-accepted items."),
    Flag("delta", "--delta", float, 0.1, "δ: allowed probability that the true error exceeds --max-error."),
    Flag("method", "--method", str, "fixed-sequence", "FWER control: fixed-sequence | holm."),
    Flag(
        "calibrate",
        "--calibrate",
        str,
        "temperature",
        "none | temperature | isotonic | platt (fitted on part of the calibration split).",
    ),
    Flag("per_class", "--per-class", bool, False, "One (tau, margin) per option, Bonferroni over options."),
    Flag("review_cost", "--review-cost", float, 1.0, "Cost of one human review (cost objective)."),
    Flag("error_cost", "--error-cost", float, 10.0, "Cost of one wrong auto-accept (cost objective)."),
    Flag("error_cost", "--class-error-cost", list[str] | None, None, "OPTION=COST for a wrong accept of OPTION."),
    Flag(
        "error_cost",
        "--cost-matrix",
        Path | None,
        None,
        "JSON K×K list, cost\\[true]\\[accepted] (rows: true option, columns: accepted).",
    ),
    Flag("api_cost_per_item", "--api-cost", float | None, None, "API cost per item (default: the run's mean)."),
    Flag("target_coverage", "--target-coverage", float | None, None, "Coverage target (uncertified point estimate)."),
    Flag("target_error", "--target-error", float | None, None, "Error target (uncertified point estimate)."),
    Flag("grid", "--grid", int, 100, "Grid points per threshold axis."),
    Flag("n_paths", "--paths", int, 10, "Fixed-sequence with --order-fraction 0: margin columns tested."),
    Flag("n_starts", "--starts", int, 10, "Fixed-sequence with --order-fraction 0: starting points per column."),
    Flag(
        "abstain_options", "--abstain-option", list[str] | None, None, "Option that always goes to review (repeatable)."
    ),
    Flag("level", "--level", str, "top", "score questions: top | expected level."),
    Flag("fallback", "--fallback", str, "review", "Action when not accepted: review | escalate | hold."),
    Flag(
        "calibrator_fraction",
        "--calibrator-fraction",
        float,
        0.3,
        "Share of the calibration split used to fit the calibrator.",
    ),
    Flag("seed", "--seed", int, 0, "Seed of the calibrator-fit carve-out."),
    Flag(
        "order_fraction",
        "--order-fraction",
        float,
        0.3,
        "Fixed-sequence: share of calibration items that only learn the strict→lax test order, the same for "
        "every --max-error (0: data-independent column paths).",
    ),
    Flag(
        "batch",
        "--batch",
        int,
        1000,
        "Finite-batch view: chance that the error among the next N accepted items exceeds α.",
    ),
    Flag(
        "guarantee_for",
        "--guarantee-for",
        str,
        "population",
        "population | batch: certify the long-run error rate (default), or that the error among the next "
        "--batch accepted items exceeds --max-error with probability at most --delta (stricter).",
    ),
    Flag(
        "costs",
        "--cost",
        list[str] | None,
        None,
        "TRUE:ACCEPTED=COST misroute cost (repeatable; ACCEPTED may be *; unlisted misroutes cost 1). "
        "With the guarantee objective --max-error is then the largest expected misroute cost per accepted item.",
    ),
    Flag("costs", "--costs", Path | None, None, "YAML/JSON {true: {accepted: cost}} misroute costs (--cost wins)."),
    Flag(
        "constraints",
        "--critical",
        list[str] | None,
        None,
        "OPTION:BETA: at most BETA of the items truly OPTION may be auto-accepted as another option, "
        "certified jointly with --max-error (repeatable; guarantee objective, not with --per-class).",
    ),
    Flag(
        "class_conditional",
        "--class-conditional",
        bool,
        False,
        "With --critical: a strict (tau, margin) for the options the critical ones are confused with, a loose "
        "one for the rest, both risks certified jointly (instead of one rule as strict as the critical option needs).",
    ),
    Flag(
        "confusable",
        "--confusable",
        list[str] | None,
        None,
        "With --class-conditional: an option of the strict group (repeatable; default: the critical options and "
        "their most frequent confusions on the held-apart items).",
    ),
)

#: ThresholdOptions fields no command line flag sets, with the reason.
NOT_ON_THE_CLI: dict[str, str] = {
    "manual_rule": "a hand-set, uncertified rule: the UI's sliders (and the API) set it, a script uses a policy file",
    "confidence": "the level of the test-split intervals, fixed at 95% on every surface so reports compare",
}

_SHARED_SEED = "--seed is this command's own (bootstrap) seed; the calibrator carve-out keeps its default"

#: Flags a threshold-taking command does not offer: command -> {field: reason}. Every other field of
#: ThresholdOptions is a flag of every command in :data:`COMMANDS`.
NOT_OFFERED: dict[str, dict[str, str]] = {
    "compare": {"seed": _SHARED_SEED},
    "shadow report": {"seed": _SHARED_SEED},
    "plan-labels": {
        "target_coverage": "--target-coverage is the plan's coverage target (what the planned labels must certify)",
        "objective": "the plan simulates the guarantee objective: the only one that certifies",
        **{
            f: "the plan simulates the guarantee objective with a global rule; cost, target and per-class "
            "settings do not change how many labels certify"
            for f in (
                "per_class",
                "review_cost",
                "error_cost",
                "api_cost_per_item",
                "target_error",
                "abstain_options",
                "level",
                "fallback",
                "batch",
                "costs",
                "constraints",
                "class_conditional",
                "confusable",
                "n_paths",
                "n_starts",
            )
        },
    },
}

#: Every command that takes threshold options (filled by :func:`threshold_options`).
COMMANDS: set[str] = set()


def _parse_error_cost(error_cost: float, class_error_cost: list[str] | None, cost_matrix: Path | None):
    """``--error-cost`` scalar, ``--class-error-cost OPT=COST`` overrides, or a ``--cost-matrix`` JSON file."""
    if cost_matrix is not None:
        try:
            data = json.loads(Path(cost_matrix).read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise OptionError(f"--cost-matrix {cost_matrix}: cannot read JSON ({exc})") from None
        return data  # list of lists [true][accepted] (checked against the option count later)
    if class_error_cost:
        return _keyed_numbers(class_error_cost, "=", "--class-error-cost", "OPTION=COST", "e.g. refund=50")
    return error_cost


def _keyed_numbers(items: list[str] | None, sep: str, flag: str, form: str, hint: str) -> dict[str, float]:
    """``KEY<sep>NUMBER`` flag values (split at the last ``sep``) as ``{key: number}``; a malformed one
    raises an OptionError naming the flag and the form."""
    out: dict[str, float] = {}
    for item in items or []:
        key, found, text = item.rpartition(sep)
        try:
            value = float(text) if found and key.strip() else None
        except ValueError:
            value = None
        if value is None:
            raise OptionError(f"{flag} {item!r} is not {form}", hint=hint)
        out[key.strip()] = value
    return out


def parse_cost_flags(cost: list[str] | None, costs_file: Path | None) -> dict[str, dict[str, float]] | None:
    """``--cost TRUE:ACCEPTED=COST`` (repeatable; ``ACCEPTED`` may be ``*``) and ``--costs FILE``
    (YAML or JSON ``{true: {accepted: cost}}``; flags override the file) as the ``costs`` option."""
    out: dict[str, dict[str, float]] = {}
    if costs_file is not None:
        import yaml

        try:
            data = yaml.safe_load(Path(costs_file).read_text(encoding="utf-8"))
        except (OSError, yaml.YAMLError) as exc:
            raise OptionError(f"--costs {costs_file}: cannot read it ({str(exc).splitlines()[0]})") from None
        if not isinstance(data, dict) or not all(isinstance(r, dict) for r in data.values()):
            raise OptionError(
                f"--costs {costs_file}: must map a true option to {{accepted option: cost}}",
                hint="e.g. 'hate: {offensive: 10, neither: 10}'",
            )
        out = {str(t): {str(a): v for a, v in row.items()} for t, row in data.items()}
    form, hint = "TRUE:ACCEPTED=COST", "e.g. --cost hate:offensive=10 (ACCEPTED may be * for every other option)"
    for item in cost or []:
        ((pair, value),) = _keyed_numbers([item], "=", "--cost", form, hint).items()
        true, colon, acc = pair.partition(":")
        if not colon or not true.strip() or not acc.strip():
            raise OptionError(f"--cost {item!r} is not {form}", hint=hint)
        out.setdefault(true.strip(), {})[acc.strip()] = value
    return out or None


def parse_critical_flags(critical: list[str] | None) -> dict[str, float] | None:
    """``--critical OPTION:BETA`` (repeatable) as the ``constraints`` option."""
    hint = "e.g. --critical hate:0.05 (at most 5% of true hate items auto-accepted as another option)"
    return _keyed_numbers(critical, ":", "--critical", "OPTION:BETA", hint) or None


def build_options(**flags: Any) -> ThresholdOptions:
    """:class:`ThresholdOptions` from flag values keyed by parameter name (``max_error=0.1``,
    ``critical=["hate:0.05"]``); a flag left out keeps the dataclass default.

    Raises
    ------
    OptionError
        A flag that does not parse (naming the flag), or a value ThresholdOptions refuses (naming the
        field; the CLI shows it as its flag).
    """
    from workbench.thresholds.options import ThresholdOptions

    unknown = set(flags) - {f.name for f in FLAGS}
    if unknown:
        raise TypeError(f"not threshold flags: {', '.join(sorted(unknown))}")
    values = {f.name: flags.get(f.name, f.default) for f in FLAGS}
    fields: dict[str, Any] = {f.field: values[f.name] for f in FLAGS if f.name in flags}
    if {"error_cost", "class_error_cost", "cost_matrix"} & set(flags):
        fields["error_cost"] = _parse_error_cost(
            values["error_cost"], values["class_error_cost"], values["cost_matrix"]
        )
    if {"cost", "costs"} & set(flags):
        fields["costs"] = parse_cost_flags(values["cost"], values["costs"])
    if "critical" in flags:
        fields["constraints"] = parse_critical_flags(values["critical"])
    if "abstain_option" in flags:
        fields["abstain_options"] = list(values["abstain_option"] or [])
    if "confusable" in flags:
        fields["confusable"] = list(values["confusable"]) if values["confusable"] else None
    return ThresholdOptions(**fields)


def threshold_options(command: str, *, optional: bool = False) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Give a command the threshold flags of :data:`FLAGS` (less its :data:`NOT_OFFERED`).

    The decorated function ends with a keyword-only ``options`` parameter and is called with the
    :class:`ThresholdOptions` the flags make; with ``optional``, ``options`` is ``None`` unless a
    threshold flag was given on the command line (the command then takes its own default, e.g. an
    experiment file's objective). Use it below ``@app.command``.
    """
    omitted = NOT_OFFERED.get(command, {})
    offered = [f for f in FLAGS if f.field not in omitted]
    COMMANDS.add(command)

    def decorate(func: Callable[..., Any]) -> Callable[..., Any]:
        sig = inspect.signature(func)
        if list(sig.parameters)[-1] != "options":
            raise TypeError(f"{func.__name__}: the last parameter must be `*, options: ThresholdOptions`")
        own = [
            p.replace(
                annotation=eval(p.annotation, func.__globals__) if isinstance(p.annotation, str) else p.annotation
            )  # noqa: S307 - the function's own annotations
            for p in list(sig.parameters.values())[:-1]
        ]
        added = [
            inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=f.option(), annotation=f.annotation)
            for f in offered
        ]
        ctx = inspect.Parameter("_threshold_ctx", inspect.Parameter.KEYWORD_ONLY, annotation=typer.Context)

        def command_with_options(**kwargs: Any) -> Any:
            context = kwargs.pop("_threshold_ctx")
            flags = {f.name: kwargs.pop(f.name) for f in offered}
            if optional:
                given = {
                    name
                    for name in flags
                    if getattr(context.get_parameter_source(name), "name", "") in ("COMMANDLINE", "ENVIRONMENT")
                }
                options = build_options(**{n: flags[n] for n in given}) if given else None
            else:
                options = build_options(**flags)
            return func(**kwargs, options=options)

        params = [*own, *added, ctx]
        command_with_options.__signature__ = sig.replace(parameters=params)  # type: ignore[attr-defined]
        command_with_options.__annotations__ = {p.name: p.annotation for p in params}
        for attr in ("__name__", "__qualname__", "__doc__", "__module__"):
            setattr(command_with_options, attr, getattr(func, attr))
        return command_with_options

    return decorate
