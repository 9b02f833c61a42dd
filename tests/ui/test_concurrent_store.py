"""The UI reads while another process writes the store: no lock errors on either side, and the
pages see each committed batch (the UI reads snapshots, never the live file)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from store_builder import APP
from streamlit.testing.v1 import AppTest

WRITER = textwrap.dedent("""
    import sys
    import pandas as pd
    from workbench.store.db import connect
    from workbench.store.runs import create_run, get_run, load_stored_schema, update_run, write_answers
    db, src_run, batches = sys.argv[1], sys.argv[2], int(sys.argv[3])
    con = connect(db)                      # holds the write lock for the whole "run"
    src = get_run(con, src_run)
    schema = load_stored_schema(con, src["schema_hash"])
    rows = con.execute("SELECT * FROM answers WHERE run_id = ? ORDER BY item_id", [src_run]).df()
    run_id = create_run(con, dataset=src["dataset"], dataset_version=int(src["dataset_version"]), schema=schema,
                        provider="synthetic:writer", splits=["calibration", "test"], name="being-written")
    step = -(-len(rows) // batches)
    for b in range(batches):
        part = rows.iloc[b * step:(b + 1) * step][["item_id", "question", "probs", "p_top", "margin"]].copy()
        part["run_id"] = run_id
        write_answers(con, part)           # one committed transaction per batch
        print(f"batch {b} {min(len(rows), (b + 1) * step)}", flush=True)
        sys.stdin.readline()               # the test looked at the UI: next batch (no timing, no load race)
    update_run(con, run_id, status="done")
    con.close()
    print("writer done", flush=True)
""")


def test_pages_read_while_a_run_writes(ui_store):
    path, meta = ui_store
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(path), meta["runs"]["sharp-model"], "6"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert writer.stdin is not None and writer.stdout is not None
    committed, seen = [], []
    try:
        at = AppTest.from_file(str(APP), default_timeout=60).run()
        at.switch_page("workbench/ui/pages/runs.py").run()
        for _ in range(6):  # lockstep: the writer commits a batch and waits until the page has looked
            line = writer.stdout.readline()
            assert line.startswith("batch "), (line, writer.stderr.read() if writer.poll() is not None else "")
            committed.append(int(line.split()[2]))
            at.button(key="refresh_store").click().run()
            assert not at.exception, [e.value for e in at.exception]
            assert not at.error, [e.value for e in at.error]
            table = at.dataframe[0].value
            row = table.loc[table["name"] == "being-written"]
            seen.append(None if row.empty else int(row["n_answers"].iloc[0]))
            writer.stdin.write("next\n")
            writer.stdin.flush()
        out, err = writer.communicate(timeout=120)
    finally:
        if writer.poll() is None:
            writer.kill()
    assert writer.returncode == 0, err  # the UI never blocked the writer
    assert "writer done" in out
    # the UI saw the run grow batch by batch: each refresh shows exactly what was committed before it
    step = -(-meta["n_scored"] // 6)
    assert committed == [min(meta["n_scored"], (b + 1) * step) for b in range(6)], committed
    assert seen == committed, (seen, committed)
    at.button(key="refresh_store").click().run()
    final = at.dataframe[0].value
    done = final.loc[final["name"] == "being-written"].iloc[0]
    assert done["status"] == "done" and int(done["n_answers"]) == meta["n_scored"]
