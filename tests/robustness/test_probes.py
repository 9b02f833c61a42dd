"""Robustness probes (issue 16 item 1): BANKING77 on the loopback emulator, position-bias knob on and off.

Real components only: the bundled BANKING77 in a DuckDB file, the emulator over loopback HTTP
(lexical answerer), the experiment runner with ``probes: [option_order]``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

import workbench as wb
from tests.conftest import run_cli
from workbench.probes import Probe, map_back, option_permutation, transform_request, transform_schema
from workbench.providers.base import DecisionRequest, DecisionResult
from workbench.schema import DecisionSchema, NormalisedAnswer
from workbench.workflows.experiments import ExperimentError, load_experiment, run_experiment_file
from workbench.workflows.robustness import RobustnessError, compare_probe, robustness

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = ROOT / "experiments" / "schemas" / "banking77.yaml"
N_ITEMS = 300


def _experiment(tmp_path: Path) -> Path:
    exp = tmp_path / "probe.yaml"
    exp.write_text(f"""
name: b77-probe
dataset: banking77
splits: [test]
limit: {N_ITEMS}
providers: ["cloudflare:clef-flash"]
variants:
  descriptive: {SCHEMA}
probes: [option_order]
""")
    return exp


@pytest.fixture(scope="module")
def banking77_store(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("b77") / "wb.duckdb"
    con = wb.connect(path)
    wb.import_dataset(con, **wb.bundled_dataset("banking77"))
    con.close()
    return path


@pytest.fixture(scope="module")
def probed(banking77_store, tmp_path_factory):
    """``probed(position_bias)``: the experiment run once per knob setting in this module."""
    done: dict[float, tuple[dict, dict, int, Path]] = {}

    def get(position_bias: float) -> tuple[dict, dict, int, Path]:
        if position_bias not in done:
            done[position_bias] = _probe_experiment(tmp_path_factory.mktemp("probe"), banking77_store, position_bias)
        return done[position_bias]

    return get


def _probe_experiment(tmp_path: Path, store: Path, position_bias: float) -> tuple[dict, dict, int, Path]:
    import shutil

    db = tmp_path / "wb.duckdb"
    shutil.copy(store, db)
    con = wb.connect(db)
    try:
        with wb.run_emulator(port=0, position_bias=position_bias) as emu:
            env = {
                **os.environ,
                "CLOUDFLARE_CLEF_BASE_URL": emu.cloudflare_base_url,
                "CLOUDFLARE_API_KEY": "test-not-a-real-key",
                "CLOUDFLARE_ACCOUNT_ID": "test-account",
            }
            result = run_experiment_file(con, _experiment(tmp_path), env=env, progress=False, concurrency=16)
            run_experiment_file(con, _experiment(tmp_path), env=env, progress=False, concurrency=16)
            requests = emu.request_count()
        base, probed = (r["run_id"] for r in result["runs"])
        report = robustness(con, base, [probed], n_boot=1000, seed=0)
    finally:
        con.close()
    return result, report, requests, db


@pytest.mark.parametrize("position_bias", [0.3, 0.0])
def test_option_order_probe_finds_the_emulators_position_bias(probed, position_bias):
    """The acceptance of issue 16 item 1. Knob on (0.3): the first-listed option wins far more often
    than the same option does where the base run listed it, interval excludes 0. Knob off: the lexical
    answerer is position-blind, so the winner of every item is the same option (bias exactly 0)."""
    result, report, requests, db = probed(position_bias)
    assert [r["variant"] for r in result["runs"]] == ["descriptive", "descriptive+option_order"]
    # 300 items x (base + probe), each a request of its own; the rerun is answered from the cache
    assert requests == 2 * N_ITEMS
    row = report["probes"][0]
    assert row["probe"] == "option_order" and row["seed"] == 0 and row["n"] == N_ITEMS
    first = row["position_bias"]["first"]
    lo, hi = first["bias_ci"]
    assert lo <= first["bias"] <= hi
    if position_bias > 0:
        assert lo > 0.2  # mass 0.3 moved to the first option: it wins ~36 % vs ~0 % elsewhere
        assert first["share_probe"] > 20 * row["position_bias"]["uniform"]
        assert row["flip_rate_ci"][0] > 0.2 and row["accuracy_change_ci"][1] < 0
    else:
        assert lo <= 0 <= hi
        assert row["flips"] == 0 and first["bias"] == 0 and row["accuracy_change"] == 0
    # figures recomputed from the stored arrays by hand
    assert row["flip_rate"] == pytest.approx(row["flips"] / row["n"])
    assert row["accuracy_change"] == pytest.approx(row["accuracy_probe"] - row["accuracy_base"])


def test_cli_and_compare_page_show_the_librarys_figures(probed):
    """`workbench robustness --json` prints the library's figures; bad input exits 2 with a hint; the
    Compare page's Robustness section shows the same bias."""
    _, report, _, db = probed(0.3)
    base, probe_run = report["base_run"], report["probes"][0]["run_id"]
    cli = run_cli("robustness", base, probe_run, "--json", db=db, check=True)
    assert json.loads(cli.stdout) == json.loads(json.dumps(report))
    bad = run_cli("robustness", base, probe_run, "--question", "nope", db=db)
    assert bad.returncode == 2 and "nope" in bad.stderr
    _compare_page_shows_the_same_bias(db, base, probe_run)


def _compare_page_shows_the_same_bias(db: Path, base: str, probed: str) -> None:
    """The Compare page's Robustness section shows the library's figures (Streamlit AppTest, real store)."""
    from streamlit.testing.v1 import AppTest

    os.environ["WORKBENCH_DB"] = str(db)
    try:
        at = AppTest.from_file(str(ROOT / "streamlit_app.py"), default_timeout=60).run()
        at.switch_page("workbench/ui/pages/compare.py").run()
        at.selectbox(key="cmp_baseline").set_value(base).run()
        at.select_slider(key="cmp_boot").set_value(200).run()
        assert not at.exception, [e.value for e in at.exception]
        shown = next(d.value for d in at.dataframe if "first-listed bias" in d.value.columns)
    finally:
        del os.environ["WORKBENCH_DB"]
    con = wb.connect(db, read_only=True)
    try:
        lib = robustness(con, base, [probed], splits=["test"], n_boot=200)["probes"][0]
    finally:
        con.close()
    row = shown.iloc[0]
    assert row["run_id"] == probed and row["probe"] == "option_order"
    assert row["first-listed bias"] == pytest.approx(lib["position_bias"]["first"]["bias"])
    assert row["bias low"] == pytest.approx(lib["position_bias"]["first"]["bias_ci"][0]) and row["bias low"] > 0


def _choice_schema(k: int = 5) -> DecisionSchema:
    return DecisionSchema.from_dict(
        {
            "questions": {
                "pick": {
                    "type": "choice",
                    "instructions": "Pick one.",
                    "criteria": {f"o{i}": f"option {i}" for i in range(k)},
                },
                "ok": {
                    "type": "noul",
                    "instructions": "Is it fine?",
                    "criteria": {"true": "fine", "false": "not fine"},
                },
            }
        }
    )


def test_map_back_restores_the_original_option_order_and_inverts_yes_no():
    schema = _choice_schema()
    req = DecisionRequest(schema=schema, state="hello", item_id="item-7")
    order = Probe("option_order", seed=3)
    sent = transform_request(req, order)
    perm = option_permutation(order, "pick", 5, "item-7")
    assert list(sent.schema.questions["pick"].criteria) == [f"o{j}" for j in perm]
    # the sent answer puts mass on what was LISTED first; mapped back, it is that original option
    p_sent = np.array([0.6, 0.1, 0.1, 0.1, 0.1])
    res = DecisionResult(
        answers={"pick": NormalisedAnswer(p_sent, 0.0, None), "ok": NormalisedAnswer(np.array([0.8, 0.2]), 0.0, None)}
    )
    back = map_back(res, req, order)
    assert back.answers["pick"].probs.argmax() == perm[0]
    np.testing.assert_allclose(back.answers["pick"].probs[perm], p_sent)
    # inversion: "yes" to the inverted question is the original "no"
    inv = Probe("yes_no_inversion")
    sent = transform_request(req, inv)
    assert sent.schema.questions["ok"].criteria == {"true": "not fine", "false": "fine"}
    assert "NOT" in sent.schema.questions["ok"].instructions
    res = DecisionResult(
        answers={"ok": NormalisedAnswer(np.array([0.8, 0.2]), 0.0, None)},
        raw={"answers": {"ok": {"type": "noul", "noul": 0.8}}},
    )
    back = map_back(res, req, inv)
    np.testing.assert_allclose(back.answers["ok"].probs, [0.2, 0.8])
    assert back.raw["answers"]["ok"]["noul"] == pytest.approx(0.2)


def test_probes_are_deterministic_and_seeded():
    schema = _choice_schema(20)

    def order(seed: int, item: str) -> list[str]:
        return list(transform_schema(schema, Probe("option_order", seed), item).questions["pick"].criteria)

    assert order(1, "x") == order(1, "x")  # dict equality ignores order: compare the id lists
    assert order(1, "x") != order(2, "x") and order(1, "x") != order(1, "y")
    assert transform_schema(schema, Probe("option_order", 1), "x").hash != schema.hash
    ids_only = transform_schema(schema, Probe("option_ids_only"))
    assert set(ids_only.questions["pick"].criteria.values()) == {None} and ids_only.questions["ok"].criteria is None
    para = transform_schema(schema, Probe("instruction_paraphrase", 0))
    assert "Pick one." in para.questions["pick"].instructions and para.questions["pick"].instructions != "Pick one."
    ctx = transform_request(DecisionRequest(schema=schema, state="hi", item_id="q"), Probe("irrelevant_context"))
    assert ctx.state.startswith("hi\n\n") and len(ctx.state) > 10


def test_compare_probe_matches_hand_counts_and_mcnemar():
    """Flip rate Wilson interval vs statsmodels; McNemar exact p vs statsmodels' mcnemar."""
    from statsmodels.stats.contingency_tables import mcnemar
    from statsmodels.stats.proportion import proportion_confint

    rng = np.random.default_rng(0)
    n, k = 400, 4
    base = rng.dirichlet(np.ones(k), n)
    probe = np.where(rng.random((n, 1)) < 0.2, rng.dirichlet(np.ones(k), n), base)
    labels = rng.integers(0, k, n)
    out = compare_probe(base, probe, labels, n_boot=500)
    flips = int((base.argmax(1) != probe.argmax(1)).sum())
    assert out["flips"] == flips
    np.testing.assert_allclose(out["flip_rate_ci"], proportion_confint(flips, n, method="wilson"), atol=1e-4)
    cb, cp = base.argmax(1) == labels, probe.argmax(1) == labels
    table = [[int((cb & cp).sum()), int((cb & ~cp).sum())], [int((~cb & cp).sum()), int((~cb & ~cp).sum())]]
    assert out["mcnemar_p"] == pytest.approx(mcnemar(table, exact=True).pvalue)


def test_bad_probe_names_and_mismatched_runs_are_refused(tmp_path):
    exp = tmp_path / "bad.yaml"
    exp.write_text(f"name: x\ndataset: d\nproviders: [a]\nvariants: {{v: {SCHEMA}}}\nprobes: [option_shuffle]\n")
    with pytest.raises(ExperimentError, match="probes.0"):
        load_experiment(exp)
    with pytest.raises(RobustnessError, match="no probe run"):
        robustness(None, "run-x", [])


def test_every_probe_runs_on_a_yes_no_schema_and_reruns_from_the_cache(tmp_path):
    """SMS spam (yes/no) on the emulator with the other four probes. The inverted question's stored
    P(yes) is 1 - the emulator's P(yes) to the inverted wording (computed here by the same answerer);
    a rerun answers every probe from the cache with identical stored probabilities."""
    from workbench.emulator import LexicalAnswerer
    from workbench.store.datasets import load_items
    from workbench.store.runs import load_answers

    exp = tmp_path / "spam.yaml"
    exp.write_text(f"""
name: spam-probes
dataset: sms_spam
splits: [test]
limit: 60
providers: ["cloudflare:clef-flash"]
variants:
  plain: {ROOT / "experiments" / "schemas" / "sms_spam.yaml"}
probes: [yes_no_inversion, irrelevant_context, instruction_paraphrase, {{name: option_ids_only, seed: 2}}]
""")
    con = wb.connect(tmp_path / "wb.duckdb")
    try:
        wb.import_dataset(con, **wb.bundled_dataset("sms_spam"))
        with wb.run_emulator(port=0) as emu:
            env = {
                **os.environ,
                "CLOUDFLARE_CLEF_BASE_URL": emu.cloudflare_base_url,
                "CLOUDFLARE_API_KEY": "test-not-a-real-key",
                "CLOUDFLARE_ACCOUNT_ID": "test-account",
            }
            first = run_experiment_file(con, exp, env=env, progress=False)
            sent = emu.request_count()
            second = run_experiment_file(con, exp, env=env, progress=False)
            assert emu.request_count() == sent == 5 * 60  # base + 4 probes; the rerun is all cache
            # `run --resume` of a probed run keeps its probe: the 10 answers lost here come back from
            # the cache of the transformed requests (no new call), identical to the first session's
            from workbench.runner.execute import resume_run

            inv_id = first["runs"][1]["run_id"]
            before = load_answers(con, inv_id, "spam").probs
            con.execute(
                "DELETE FROM answer_rows WHERE run_id = ? AND item_id IN "
                "(SELECT item_id FROM answers WHERE run_id = ? ORDER BY item_id LIMIT 10)",
                [inv_id, inv_id],
            )
            resume_run(con, inv_id, env=env, progress=False)
            assert emu.request_count() == sent
            np.testing.assert_array_equal(load_answers(con, inv_id, "spam").probs, before)
        variants = [r["variant"] for r in first["runs"]]
        assert variants == [
            "plain",
            "plain+yes_no_inversion",
            "plain+irrelevant_context",
            "plain+instruction_paraphrase",
            "plain+option_ids_only:2",
        ]
        for a, b in zip(first["runs"], second["runs"]):
            pa, pb = (load_answers(con, r["run_id"], "spam").probs for r in (a, b))
            np.testing.assert_array_equal(pa, pb)
        inv = load_answers(con, first["runs"][1]["run_id"], "spam")
        schema = wb.load_schema(ROOT / "experiments" / "schemas" / "sms_spam.yaml")
        frame = load_items(con, "sms_spam", 1, splits=["test"], limit=60)
        items = list(zip(frame["item_id"].tolist()[:5], frame["state"].tolist()[:5]))
        answerer = LexicalAnswerer()
        for item_id, state in items:
            wire = transform_schema(schema, Probe("yes_no_inversion"), item_id).to_wire()
            p_yes_inverted = answerer(wire, state)["spam"][0]
            row = int(np.flatnonzero(inv.item_ids == item_id)[0])
            assert inv.probs[row, 0] == pytest.approx(1 - p_yes_inverted, abs=1e-4)  # Clef rounds to 4 decimals
        report = robustness(con, first["runs"][0]["run_id"], [r["run_id"] for r in first["runs"][1:]], n_boot=200)
        assert [r["probe"] for r in report["probes"]] == [
            "yes_no_inversion",
            "irrelevant_context",
            "instruction_paraphrase",
            "option_ids_only",
        ]
        assert all(r["position_bias"] is None and r["n"] == 60 for r in report["probes"])
    finally:
        con.close()


def test_position_bias_knob_is_documented_switchable_and_exact():
    """``apply_position_bias`` moves share b of the mass to the first listed choice option and leaves
    yes/no alone; the knob is validated, switchable through the admin API, and on the CLI."""
    import urllib.request

    from workbench.emulator import FaultConfig
    from workbench.emulator.answering import apply_position_bias

    wire = {
        "c": {"type": "choice", "instructions": "x", "criteria": {"a": None, "b": None, "c": None}},
        "n": {"type": "noul", "instructions": "y"},
    }
    probs = {"c": np.array([0.1, 0.6, 0.3]), "n": np.array([0.7, 0.3])}
    out = apply_position_bias(wire, probs, 0.5)
    np.testing.assert_allclose(out["c"], [0.55, 0.3, 0.15])
    np.testing.assert_allclose(out["n"], [0.7, 0.3])
    assert apply_position_bias(wire, probs, 0.0) is probs
    with pytest.raises(ValueError, match="position_bias"):
        FaultConfig().merged(position_bias=1.0)
    with wb.run_emulator(port=0) as emu:
        req = urllib.request.Request(
            f"{emu.base_url}/_emulator/faults", data=json.dumps({"position_bias": 0.25}).encode(), method="POST"
        )
        with urllib.request.urlopen(req) as resp:
            assert json.loads(resp.read())["position_bias"] == 0.25
    helptext = run_cli("emulator", "--help", env={"COLUMNS": "200"}).stdout
    assert "--position-bias" in helptext
