"""`workbench thresholds RUN_ID --question Q ...`: pick (tau, margin) with a guarantee, a cost, or a target."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.markup import escape

from workbench.cli.common import AS_JSON, emit_json, err_console, open_store, out_console, print_table, slice_option
from workbench.cli.threshold_options import threshold_options
from workbench.wording import plural

if TYPE_CHECKING:
    from workbench.thresholds.options import ThresholdOptions


def _fmt(x) -> str:
    return "–" if x is None else f"{x:.4f}" if isinstance(x, float) else str(x)


def certified_word(res: dict) -> str:
    """CERTIFIED only when a rule was certified; otherwise say plainly what happened."""
    if res["certified"]:
        return "CERTIFIED"
    if res["objective"] == "guarantee":
        return "NOTHING CERTIFIED (every item goes to the fallback)"
    return "NOT certified (point estimate)"


def settings_text(settings: dict) -> str:
    """α, δ and recalibration as every threshold figure is printed with (ThresholdOptions.describe())."""
    from workbench.thresholds.options import ThresholdOptions

    return ThresholdOptions(**settings).describe()


def _line(text: str) -> None:
    """One output line, never wrapped (ids and figures stay greppable in logs and pipes)."""
    out_console.print(text, highlight=False, soft_wrap=True)


def _print_result(res: dict) -> None:
    from workbench.thresholds.options import needed_sentence

    rule = res["rule"]
    _line(f"[bold]{res['question']}[/bold] ({res['type']}), objective {res['objective']} — {certified_word(res)}")
    for w in res.get("warnings") or []:  # the test split contradicts the certificate (as --slice words it)
        _line(f"  [bold]WARNING[/bold] {escape(w)}")
    _line(f"  settings: {settings_text(res['settings'])}")
    if res.get("calibration_size_needed"):
        _line(f"  {needed_sentence(res['calibration_size_needed'])}")
    _line(f"  rule: {json.dumps({k: v for k, v in rule.items() if v not in ({}, [])})}")
    g = res.get("guarantee")
    if g:
        risk = "expected misroute cost among accepted" if g.get("risk") else "error among accepted"
        if g.get("for"):  # guarantee_for batch: the batch statement, then the population level behind it
            f = g["for"]
            _line(
                f"  guarantee: P(error among the next {f['batch']} accepted > {f['alpha']:g}) <= {f['delta']:g},"
                f" by certifying P({risk} > {f['alpha_population']:.4g}) <= {f['delta_population']:g}"
            )
        _line(
            f"  guarantee: P({risk} > {g['alpha']:.4g}) <= {g['delta']:g} ({g['method']}),"
            f" n_calibration={g['n_calibration']}, upper bound {_fmt(g.get('risk_upper_bound'))}"
        )
        if g.get("costs"):
            _line(f"  costs: {json.dumps(g['costs'])} (unlisted misroutes 1; largest {g.get('loss_scale')})")
        for c in g.get("constraints") or []:
            cal = (
                f"calibration {c['misrouted']} of {c['n_true']} misrouted, upper bound {_fmt(c['risk_upper_bound'])}"
                if "n_true" in c
                else "not certified"
            )
            _line(f"  constraint: P(share of true {c['option']} accepted as another option > {c['beta']}) — {cal}")
        cc = g.get("class_conditional")
        if cc:
            strict, loose = cc.get("strict_rule"), cc.get("loose_rule")
            _line(
                f"  class-conditional: strict group {', '.join(cc['strict'])} ({cc['group_from']}): "
                + ("never accepted" if strict is None else f"margin >= {_fmt(strict.get('margin'))}")
                + "; every other option: "
                + ("never accepted" if loose is None else f"margin >= {_fmt(loose.get('margin'))}")
            )
        if g.get("constraints"):
            _line(f"  jointly: {g.get('joint')}")
    b = res.get("batch")
    if b:
        bg, e = b["guaranteed"], b["estimated"]
        if bg:
            _line(
                f"  next {b['n']} accepted items: P(error > {b['alpha']:g}) <= {bg['p_exceed_at_most']:.3f} guaranteed"
                + (
                    " (δ + binomial tail at α)"
                    if res["settings"].get("guarantee_for") != "batch"
                    else f" (δ/2 + binomial tail at α' = {bg['certified_rate']:.4g})"
                )
                + f"; at most {plural(bg['tolerance_errors'], 'error')}"
                f" ({100 * bg['tolerance_rate']:.1f}%) with probability >= {bg['tolerance_probability']:.2f}"
            )
        _line(
            f"  next {b['n']} accepted items: estimated P(error > {b['alpha']:g}) = {e['p_exceed']:.3f}"
            f" (beta-binomial from {e['from']['errors']}/{e['from']['accepted']} calibration errors; an estimate,"
            " not guaranteed)"
        )
    c = res["calibration"]
    _line(
        f"  calibration: coverage {_fmt(c['coverage'])}, error {_fmt(c['error_rate'])}"
        f" ({c['n_accepted']} accepted of {c['n_items']})"
    )
    t = res.get("test")
    if t:
        e, cv = t["error"], t["coverage"]
        _line(
            f"  test: error {_fmt(e['value'])} [{_fmt(e['low'])}, {_fmt(e['high'])}], coverage "
            f"{_fmt(cv['value'])} [{_fmt(cv['low'])}, {_fmt(cv['high'])}], review "
            f"{_fmt(t['review_rate']['value'])} (n={t['n_items']})"
        )
    tr = res.get("test_risks") or {}
    if tr.get("cost"):
        _line(f"  test: expected misroute cost among accepted {_fmt(tr['cost']['expected_cost_among_accepted'])}")
    for c in tr.get("constraints") or []:
        _line(
            f"  test: true {c['option']}: {c['misrouted']} of {c['n_true']} auto-accepted as another option"
            f" ({_fmt(c['rate'])} [{_fmt(c['low'])}, {_fmt(c['high'])}], β = {c['beta']}), {c['reviewed']} to review"
        )
    for n in res.get("notes") or []:
        if res.get("calibration_size_needed") and n.startswith(("nothing was certified at", "no grid point")):
            continue  # printed above
        _line(f"  note: {n}")


def _print_slices(question: str, sl: dict) -> None:
    """Test coverage and error of the chosen rule per slice, with their intervals."""
    from rich.table import Table

    conf = f"{int(round(100 * sl['confidence']))}%"
    table = Table(
        show_header=True,
        header_style="bold",
        title=f"{question} by {sl['column']} ({sl['split']} split, α = {sl['alpha']:g})",
        title_justify="left",
    )
    for col in (sl["column"], "items", "accepted", "coverage", f"{conf} CI (Wilson)", "error", f"{conf} CI (C–P)"):
        table.add_column(col, justify="left" if col == sl["column"] else "right", no_wrap=True)
    for row in sl["slices"]:
        cov, err = row["coverage"], row["error"]
        flag = " [red]▲ α[/]" if row["error_above_alpha"] else ""
        table.add_row(
            row["slice"],
            str(row["n_items"]),
            str(row["n_accepted"]),
            _pct(cov["value"]),
            f"[{_pct(cov['low'])}, {_pct(cov['high'])}]",
            _pct(err["value"]) + flag,
            f"[{_pct(err['low'])}, {_pct(err['high'])}]",
        )
    print_table(table)


def _pct(v) -> str:
    return "—" if v is None else f"{100 * v:.1f}%"


def register(app: typer.Typer) -> None:
    @app.command("thresholds")
    @threshold_options("thresholds")
    def thresholds(
        run_id: str = typer.Argument(..., help="Run id (or name)."),
        question: list[str] = typer.Option(..., "--question", "-q", help="Question id (repeatable)."),
        surface_out: Path | None = typer.Option(
            None, "--surface-out", help="Write the per-grid-point table (CSV) here."
        ),
        html: Path | None = typer.Option(None, "--html", help="Write the surface and risk–coverage figures (HTML)."),
        png: Path | None = typer.Option(
            None, "--png", help="Write the figures as one PNG, stacked (needs the kaleido extra)."
        ),
        slices: list[str] = slice_option(
            "give test coverage/error of the chosen rule", "; warns when a slice's error interval lies above α"
        ),
        as_json: bool = AS_JSON,
        *,
        options: ThresholdOptions,
    ) -> None:
        """Choose routing thresholds for questions of a run and judge them on the test split."""
        from workbench.store.runs import get_run
        from workbench.workflows.thresholds import threshold_slices_for_run, thresholds_for_run

        figures: list = []
        with open_store(read_only=True) as con:
            results = []
            resolved = get_run(con, run_id)["run_id"]
            for q in question:
                res = thresholds_for_run(con, resolved, q, options)
                if surface_out is not None:
                    import pandas as pd

                    target = (
                        surface_out
                        if len(question) == 1
                        else surface_out.with_name(f"{surface_out.stem}.{q}{surface_out.suffix}")
                    )
                    pd.DataFrame(res.surface.to_table()).to_csv(target, index=False)
                results.append(res.to_dict())
                # one shape whatever the options: the key is always there (empty without --slice)
                results[-1]["slices"] = {
                    c: threshold_slices_for_run(con, resolved, res, c) for c in dict.fromkeys(slices or [])
                }
                if html is not None or png is not None:
                    from workbench.workflows.figures import threshold_figures

                    figures += threshold_figures(res)
        if figures:
            from workbench.workflows.figures import write_figures

            for path in write_figures(figures, html=html, png=png):
                err_console.print(f"wrote {path}", highlight=False, soft_wrap=True)
        doc = {
            "run_id": resolved,
            "settings": options.settings(),
            "certified": all(r["certified"] for r in results),
            "questions": {r["question"]: r for r in results},
        }
        if as_json:
            emit_json(doc)
        else:
            for r in results:
                _print_result(r)
                for sl in r["slices"].values():
                    _print_slices(r["question"], sl)
        for r in results:
            for sl in r["slices"].values():
                for w in sl["warnings"]:
                    err_console.print(f"[yellow]warning:[/] {w}", highlight=False, soft_wrap=True)
