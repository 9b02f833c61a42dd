"""Item 8: a hand-set τ/m policy from the Thresholds page — exported uncertified, with the exact
thresholds typed, and the runtime applies exactly that rule (real store, AppTest, no mocks)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from store_builder import APP
from streamlit.testing.v1 import AppTest


def test_manual_rule_export_is_marked_uncertified_and_decides_as_typed(ui_store):
    path, meta = ui_store
    run = meta["runs"]["sharp-model"]
    at = AppTest.from_file(str(APP), default_timeout=60).run()
    at.switch_page("workbench/ui/pages/thresholds.py").run()
    at.selectbox(key="run_id").set_value(run).run()
    at.radio(key="pol_objective").set_value("manual").run()
    assert any("Not certified" in w.value for w in at.warning)
    at.number_input(key="pol_manual_x").set_value(0.555).run()
    at.number_input(key="pol_manual_y").set_value(0.123).run()
    at.button(key="pol_build").click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert any("NOT certified" in w.value for w in at.warning)
    text = next(t for n, t in at.session_state["session_policies"].items() if n.endswith("-manual.json"))
    doc = json.loads(text)
    q = doc["questions"]["intent"]
    assert q["objective"]["kind"] == "manual" and q["objective"]["certified"] is False
    assert q["rule"]["tau"] == 0.555 and q["rule"]["margin"] == 0.123  # as typed, not snapped to the grid

    # the file validates, and the runtime accepts exactly the items the typed rule accepts
    from workbench.policy.io import validate_file
    from workbench.policy.runtime import Policy, verify_document
    from workbench.store.db import connect
    from workbench.store.runs import load_answers

    f = path.parent / "manual.json"
    f.write_text(text)
    assert validate_file(f)["valid"]
    policy = Policy(verify_document(doc, source=str(f)))
    compiled = policy.questions["intent"]
    con = connect(path, read_only=True)
    test = load_answers(con, run, "intent", ["test"])
    con.close()
    ok = np.isfinite(test.probs).all(axis=1)
    probs = compiled.calibrator.transform(test.probs[ok])
    top2 = np.sort(probs, axis=1)[:, -2:]
    expected = (top2[:, 1] >= 0.555) & (top2[:, 1] - top2[:, 0] >= 0.123)
    decided = compiled.rule.decide(probs).accepted
    np.testing.assert_array_equal(decided, expected)
    assert q["expected_test"]["n_accepted"] == int(expected.sum())
    assert q["expected_test"]["coverage"]["value"] == pytest.approx(expected.sum() / len(test.labels[test.labels >= 0]))
