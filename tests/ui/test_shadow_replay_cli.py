"""Issue 27 §6: `workbench shadow replay` replays the test split unless told otherwise (the README's example
replayed every split, calibration included, so each policy was judged on its own fitting data)."""

from __future__ import annotations

import json

from tests.conftest import run_cli
from workbench.store.db import connect


def _count(path, split: str) -> int:
    con = connect(path, read_only=True)
    try:
        return con.execute("SELECT count(*) FROM items WHERE dataset = 'intents' AND split = ?", [split]).fetchone()[0]
    finally:
        con.close()


def test_shadow_replay_defaults_to_the_test_split(ui_store):
    path, meta = ui_store
    n_test, n_cal = _count(path, "test"), _count(path, "calibration")
    assert n_test and n_cal
    champ, chall = meta["runs"]["noisy-model"], meta["runs"]["sharp-model"]
    base = ["shadow", "replay", "--champion-run", champ, "--challenger-run", chall, "--json"]
    default = json.loads(run_cli(*base, "--name", "by-default", db=path, check=True).stdout)
    assert default["n_requests"] == n_test
    both = run_cli(*base, "--name", "both", "--split", "calibration", "--split", "test", db=path, check=True)
    assert json.loads(both.stdout)["n_requests"] == n_test + n_cal
    assert "default: test" in run_cli("shadow", "replay", "--help", db=path).stdout
