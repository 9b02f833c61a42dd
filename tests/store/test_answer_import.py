"""`workbench runs import` and the streamed `export`: wide and long layouts, Parquet and JSONL, every bad
input refused in one error with nothing written, and export → import round trips bit for bit.

Real components: a real DuckDB file per test (copied from one module store), files written with pyarrow,
the real CLI in a subprocess where the exit code and output matter. Figures are checked against numpy
and the runtime's own ``normalise_answer`` / ``top_two`` / ``entropy`` (what provider answers go through).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
import yaml

from tests.conftest import ROOT, copy_store, run_cli, table_counts
from workbench.errors import DataImportError
from workbench.schema import DecisionSchema, option_ids
from workbench.schema.answers import SUM_TOLERANCE, entropy, normalise_answer, top_two
from workbench.store.answer_import import OPTION_IDS_KEY, import_answers
from workbench.store.datasets import import_dataset
from workbench.store.db import connect
from workbench.store.export import export_run
from workbench.store.import_spec import ImportSpec
from workbench.store.runs import get_run, load_answers

N = 400
K = 5
TOPICS = [f"t{i}" for i in range(K)]
SCHEMA = {
    "name": "imp",
    "questions": {
        "topic": {"type": "choice", "instructions": "Which topic?", "criteria": {t: f"topic {t}" for t in TOPICS}},
        "spam": {"type": "noul", "instructions": "Is it spam?"},
    },
}
IDS = [f"m{i:04d}" for i in range(N)]


def schema() -> DecisionSchema:
    return DecisionSchema.from_dict(SCHEMA, source="test")


@pytest.fixture(scope="module")
def master(tmp_path_factory) -> dict:
    """A dataset of N items (half calibration, half test) with two questions, and rounded answers."""
    d = tmp_path_factory.mktemp("answer_import")
    rng = np.random.default_rng(7)
    labels = rng.integers(0, K, N)
    pd.DataFrame(
        {
            "id": IDS,
            "text": [f"message {i}" for i in IDS],
            "topic": [TOPICS[j] for j in labels],
            "spam": rng.choice(["yes", "no"], N),
            "split": np.where(np.arange(N) % 2 == 0, "calibration", "test"),
        }
    ).to_csv(d / "ds.csv", index=False)
    (d / "schema.yaml").write_text(yaml.safe_dump(SCHEMA, sort_keys=False))
    db = d / "wb.duckdb"
    con = connect(db)
    spec = ImportSpec(
        name="msgs", text_column="text", id_column="id", split_column="split", labels={"topic": "topic", "spam": "spam"}
    )
    import_dataset(con, [d / "ds.csv"], spec, schema())
    con.close()
    topic = rng.dirichlet(np.ones(K), N).round(4)  # like Clef: 4 decimals, sums off by up to ~2.5e-4
    p_yes = rng.random(N).round(4)
    failed = np.zeros(N, bool)
    failed[::40] = True  # 10 failures of the topic question
    return {"dir": d, "db": db, "topic": topic, "p_yes": p_yes, "failed": failed, "schema": d / "schema.yaml"}


@pytest.fixture
def store(master, tmp_path) -> Path:
    return copy_store(master["db"], tmp_path / "wb.duckdb")


def wide_table(master, *, fixed: bool = False, kinds: bool = True) -> pa.Table:
    topic, failed = master["topic"], master["failed"]
    vec_type = pa.list_(pa.float64(), K) if fixed else pa.list_(pa.float64())
    cols = {
        "item_id": pa.array(IDS),
        "topic": pa.array([None if f else list(v) for f, v in zip(failed, topic)], type=vec_type),
        "spam": pa.array([[y, round(1 - y, 4)] for y in master["p_yes"]], type=pa.list_(pa.float64())),
    }
    if kinds:
        cols["topic__failure_kind"] = pa.array(
            [("timeout" if i % 80 == 0 else None) if f else None for i, f in enumerate(failed)], type=pa.string()
        )
    return pa.table(cols)


def write_wide(master, path: Path, **kw) -> Path:
    pq.write_table(wide_table(master, **kw), path)
    return path


def expected_topic(master) -> np.ndarray:
    """The stored vectors, from the runtime's normalise_answer (the providers' path)."""
    q = schema().questions["topic"]
    out = np.full((N, K), np.nan)
    for i, (f, v) in enumerate(zip(master["failed"], master["topic"])):
        if not f:
            out[i] = normalise_answer(
                q, {"type": "choice", "probabilities": dict(zip(TOPICS, v.tolist()))}, question_id="topic"
            ).probs
    return out


def test_wide_parquet_through_the_cli_stores_normalised_vectors_and_summaries(master, store, tmp_path):
    path = write_wide(master, tmp_path / "answers.parquet")
    proc = run_cli(
        "runs", "import", str(path), "--dataset", "msgs", "--schema", str(master["schema"]), "--name", "offline",
        "--model", "m-1", "--json", db=store,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    run_id = summary["run_id"]
    assert (summary["answered"], summary["failed"]) == (2 * N - 10, 10)
    assert summary["failed_by_kind"] == {"unknown": 5, "timeout": 5}  # NULL without a kind fails as unknown
    assert summary["imported"]["layout"] == "wide" and summary["imported"]["rows"] == N
    con = connect(store, read_only=True)
    run = get_run(con, run_id)
    assert (run["provider"], run["kind"], run["status"], run["model"]) == ("imported", "raw", "done", "m-1")
    assert run["splits"] == ["calibration", "test"]
    ra = load_answers(con, run_id, "topic")
    want = expected_topic(master)
    order = np.argsort(IDS)
    # normalise_answer divides by the sum: the stored vectors are those bits, except exact-sum rows (1e-12)
    np.testing.assert_allclose(ra.probs, want[order], rtol=0, atol=2e-16)
    assert (ra.failed == master["failed"][order]).all()
    rows = con.execute(
        "SELECT probs, p_top, margin, entropy, deviation, top_option FROM answers WHERE run_id = ?"
        " AND question = 'topic' AND probs IS NOT NULL ORDER BY item_id",
        [run_id],
    ).fetch_arrow_table()
    m = np.vstack(rows.column("probs").to_pylist())
    top, p1, p2 = top_two(m)
    np.testing.assert_array_equal(rows.column("top_option").to_numpy(), top)  # the arg-max, ties to the first
    failed_top = con.execute(
        "SELECT list(DISTINCT top_option) FROM answers WHERE run_id = ? AND probs IS NULL", [run_id]
    ).fetchone()[0]
    assert failed_top == [-1]
    np.testing.assert_array_equal(rows.column("p_top").to_numpy(), p1)
    np.testing.assert_array_equal(rows.column("margin").to_numpy(), p1 - p2)
    np.testing.assert_allclose(rows.column("entropy").to_numpy(), entropy(m), atol=1e-14)
    dev = master["topic"][~master["failed"]].sum(axis=1) - 1
    np.testing.assert_allclose(np.sort(rows.column("deviation").to_numpy()), np.sort(dev), atol=1e-15)
    spam = load_answers(con, run_id, "spam")
    np.testing.assert_allclose(spam.probs[:, 0], (master["p_yes"] / (master["p_yes"] + (1 - master["p_yes"]).round(4)))[order], atol=2e-16)  # fmt: skip
    con.close()


def test_fixed_size_lists_jsonl_and_part_directories_give_the_same_run(master, store, tmp_path):
    parts = tmp_path / "parts"
    parts.mkdir()
    table = wide_table(master, fixed=True)
    pq.write_table(table.slice(0, 150), parts / "part-0.parquet")
    pq.write_table(table.slice(150), parts / "part-1.parquet")
    (parts / "_SUCCESS").write_text("")
    jsonl = tmp_path / "answers.jsonl"
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in wide_table(master).to_pylist()))
    con = connect(store)
    runs = {
        "parts": import_answers(con, parts, dataset="msgs", schema=schema(), name="p", provider_label="spark"),
        "glob": import_answers(con, str(parts / "*.parquet"), dataset="msgs", schema=schema(), name="g"),
        "jsonl": import_answers(con, jsonl, dataset="msgs", schema=schema(), name="j"),
    }
    assert get_run(con, runs["parts"])["provider"] == "spark"
    ref = load_answers(con, runs["parts"], "topic")
    np.testing.assert_allclose(ref.probs, expected_topic(master)[np.argsort(IDS)], atol=2e-16)
    for r in runs.values():
        other = load_answers(con, r, "topic")
        np.testing.assert_array_equal(other.probs, ref.probs)
        assert list(other.failure_kind) == list(ref.failure_kind)
    con.close()


@pytest.mark.parametrize("fmt", ["parquet", "jsonl"])
def test_export_then_import_round_trips_bit_for_bit(master, store, tmp_path, fmt):
    con = connect(store)
    run_id = import_answers(con, write_wide(master, tmp_path / "a.parquet"), dataset="msgs", schema=schema(), name="a")
    out = tmp_path / f"export.{fmt}"
    assert export_run(con, run_id, fmt, out) == 2 * N
    con.close()
    proc = run_cli(
        "runs", "import", str(out), "--dataset", "msgs", "--schema", str(master["schema"]), "--name", "again",
        db=store,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    again = proc.stdout.strip()
    assert again.startswith("run-") and again != run_id
    con = connect(store, read_only=True)
    for q in ("topic", "spam"):
        a, b = load_answers(con, run_id, q), load_answers(con, again, q)
        np.testing.assert_array_equal(a.probs, b.probs)  # NaN rows (failures) compare equal too
        assert list(a.failure_kind) == list(b.failure_kind)
    same = con.execute(
        "SELECT count(*), count(*) FILTER (WHERE a.probs = b.probs AND a.p_top = b.p_top AND a.margin = b.margin"
        " AND a.entropy = b.entropy) FROM answers a JOIN answers b USING (item_id, question)"
        " WHERE a.run_id = ? AND b.run_id = ? AND a.probs IS NOT NULL",
        [run_id, again],
    ).fetchone()
    assert same == (2 * N - 10, 2 * N - 10)
    con.close()


def test_export_stores_option_ids_once_and_keeps_item_then_question_order(master, store, tmp_path):
    con = connect(store)
    run_id = import_answers(con, write_wide(master, tmp_path / "a.parquet"), dataset="msgs", schema=schema(), name="a")
    for fmt in ("parquet", "jsonl", "csv"):
        export_run(con, run_id, fmt, tmp_path / f"e.{fmt}")
    con.close()
    want = {"topic": TOPICS, "spam": ["yes", "no"]}
    pf = pq.read_table(tmp_path / "e.parquet")
    assert json.loads(pf.schema.metadata[OPTION_IDS_KEY.encode()]) == want
    assert "option_ids" not in pf.column_names
    for fmt in ("jsonl", "csv"):
        assert json.loads((tmp_path / f"e.{fmt}.options.json").read_text())[OPTION_IDS_KEY] == want
    df = pf.to_pandas()
    assert list(df["item_id"]) == [i for i in sorted(IDS) for _ in range(2)]
    assert list(df["question"]) == ["topic", "spam"] * N  # the schema's question order within an item
    js = pd.read_json(tmp_path / "e.jsonl", lines=True)
    cs = pd.read_csv(tmp_path / "e.csv")
    assert "option_ids" not in js.columns and "option_ids" not in cs.columns
    assert list(js["item_id"]) == list(df["item_id"]) == list(cs["item_id"])
    for q in ("topic", "spam"):
        got = np.vstack([json.loads(v) for v in cs.loc[cs["question"] == q, "probs"].dropna()])
        want = np.vstack(df.loc[df["question"] == q, "probs"].dropna().to_list())
        np.testing.assert_array_equal(got, want)  # CSV keeps every digit (JSON text)


@pytest.mark.parametrize("fmt", ["parquet", "jsonl", "csv"])
def test_export_in_many_buckets_equals_one_sort_of_the_whole_run(master, store, tmp_path, fmt, monkeypatch):
    """The distribution sort (item-id ranges, each sorted) writes exactly what one ORDER BY of the run gives."""
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    con = connect(store)
    run_id = import_answers(con, write_wide(master, tmp_path / "a.parquet"), dataset="msgs", schema=schema(), name="a")
    # 4 KB buckets hold 20 rows (40 buckets); the default holds the whole run in one
    assert export_run(con, run_id, fmt, tmp_path / f"many.{fmt}", bucket_bytes=4096) == 2 * N
    assert export_run(con, run_id, fmt, tmp_path / f"one.{fmt}") == 2 * N
    ref = con.execute(
        "SELECT a.item_id, a.question, a.probs, a.p_top FROM answers a"
        " JOIN (VALUES ('topic', 0), ('spam', 1)) o(question, qpos) USING (question)"
        " WHERE a.run_id = ? ORDER BY a.item_id, o.qpos",
        [run_id],
    ).df()
    con.close()
    assert list(scratch.iterdir()) == []  # the buckets are removed
    many, one = tmp_path / f"many.{fmt}", tmp_path / f"one.{fmt}"
    if fmt == "parquet":
        got = pq.read_table(many)
        assert got.equals(pq.read_table(one)) and got.schema.metadata == pq.read_table(one).schema.metadata
        got_df = got.to_pandas()
    else:
        assert many.read_bytes() == one.read_bytes()
        got_df = (
            pd.DataFrame([json.loads(line) for line in many.read_text().splitlines()])
            if fmt == "jsonl"
            else pd.read_csv(many, float_precision="round_trip")
        )
    assert list(got_df["item_id"]) == list(ref["item_id"]) and list(got_df["question"]) == list(ref["question"])
    np.testing.assert_array_equal(got_df["p_top"].to_numpy(float), ref["p_top"].to_numpy(float))
    if fmt == "parquet":
        for a, b in zip(got_df["probs"], ref["probs"], strict=True):
            assert (a is None and b is pd.NA) or np.array_equal(a, b)


# -- bad input: one error, nothing written -------------------------------------------------------
def _refused(store: Path, path, *, match: str, **kw) -> str:
    con = connect(store)
    before = table_counts(con)
    with pytest.raises(DataImportError, match=match) as err:
        import_answers(con, path, dataset="msgs", schema=kw.pop("schema", schema()), name="bad", **kw)
    assert table_counts(con) == before
    con.close()
    return str(err.value)


def _with(master, tmp_path, name: str, **columns) -> Path:
    t = wide_table(master)
    for col, arr in columns.items():
        t = (
            t.set_column(t.schema.get_field_index(col), col, arr)
            if col in t.column_names
            else t.append_column(col, arr)
        )
    path = tmp_path / name
    pq.write_table(t, path)
    return path


def _topic(master, edit) -> pa.Array:
    rows = [None if f else list(v) for f, v in zip(master["failed"], master["topic"])]
    edit(rows)
    return pa.array(rows, type=pa.list_(pa.float64()))


def test_wrong_length_names_the_first_item_and_counts_the_rows(master, store, tmp_path):
    def edit(rows):
        rows[3] = rows[3][:4]
        rows[7] = rows[7] + [0.0]

    msg = _refused(store, _with(master, tmp_path, "a.parquet", topic=_topic(master, edit)), match="row 4: item 'm0003'")
    assert "question 'topic': 4 probabilities, the schema has 5 options" in msg and "2 bad rows: 2 length" in msg
    assert "one probability per schema option" in msg


@pytest.mark.parametrize(
    ("value", "what"), [(1.5, "1.5 at option 2"), (float("nan"), "nan at option 2"), (-0.01, "-0.01 at option 2")]
)
def test_values_outside_zero_one_or_not_finite_are_refused(master, store, tmp_path, value, what):
    def edit(rows):
        rows[5][1] = value

    msg = _refused(store, _with(master, tmp_path, "a.parquet", topic=_topic(master, edit)), match="item 'm0005'")
    assert f"probability {what}" in msg and "1 bad row: 1 value" in msg


def test_a_sum_beyond_the_providers_tolerance_is_refused_and_within_it_renormalised(master, store, tmp_path):
    def edit(rows):
        rows[1] = [0.5, 0.2, 0.2, 0.05, 0.0]  # 0.95
        rows[2] = [0.5, 0.2, 0.2, 0.09, 0.0]  # 0.99: within 0.02, stored re-normalised

    msg = _refused(store, _with(master, tmp_path, "a.parquet", topic=_topic(master, edit)), match="item 'm0001'")
    assert f"sum to 0.9500, more than {SUM_TOLERANCE} from 1" in msg and "1 bad row" in msg

    def ok(rows):
        rows[2] = [0.5, 0.2, 0.2, 0.09, 0.0]

    con = connect(store)
    run_id = import_answers(con, _with(master, tmp_path, "b.parquet", topic=_topic(master, ok)), dataset="msgs", schema=schema(), name="ok")  # fmt: skip
    row = con.execute("SELECT probs, deviation FROM answers WHERE run_id = ? AND item_id = 'm0002' AND question = 'topic'", [run_id]).fetchone()  # fmt: skip
    con.close()
    np.testing.assert_allclose(row[0], np.array([0.5, 0.2, 0.2, 0.09, 0.0]) / 0.99, atol=1e-16)
    assert row[1] == pytest.approx(-0.01, abs=1e-12)


def test_unknown_and_duplicate_ids_are_refused(master, store, tmp_path):
    ids = list(IDS)
    ids[10], ids[20] = "ghost-1", "ghost-2"
    msg = _refused(store, _with(master, tmp_path, "a.parquet", item_id=pa.array(ids)), match="item 'ghost-1' is not")
    assert "dataset 'msgs' v1 (2 rows name unknown items" in msg
    ids = list(IDS)
    ids[11] = ids[12] = ids[13] = "m0010"
    msg = _refused(
        store, _with(master, tmp_path, "b.parquet", item_id=pa.array(ids)), match="item 'm0010' appears more"
    )
    assert "1 duplicated key over 4 rows" in msg


def test_missing_questions_unknown_columns_and_wrong_types_are_refused(master, store, tmp_path):
    t = wide_table(master).drop_columns(["spam"])
    pq.write_table(t, tmp_path / "a.parquet")
    _refused(store, tmp_path / "a.parquet", match="no column for question 'spam' \\(1 of 2 questions missing\\)")
    _refused(
        store,
        _with(master, tmp_path, "b.parquet", spma=pa.array([None] * N, pa.string())),
        match="column 'spma' is neither",
    )
    _refused(store, _with(master, tmp_path, "c.parquet", spam=pa.array(["0.5"] * N)), match="column 'spam' is string, not a list")  # fmt: skip
    strings = pa.array([["a", "b"]] * N, type=pa.list_(pa.string()))
    _refused(store, _with(master, tmp_path, "d.parquet", spam=strings), match="not a list of probabilities")
    kinds = wide_table(master).column("topic__failure_kind").to_pylist()
    kinds[1] = "server"  # item 1 has a vector
    msg = _refused(
        store, _with(master, tmp_path, "e.parquet", topic__failure_kind=pa.array(kinds)), match="item 'm0001'"
    )
    assert "a probability vector and failure kind 'server'" in msg


def test_long_layout_checks_questions_and_completeness(master, store, tmp_path):
    con = connect(store)
    run_id = import_answers(con, write_wide(master, tmp_path / "a.parquet"), dataset="msgs", schema=schema(), name="a")
    export_run(con, run_id, "parquet", tmp_path / "long.parquet")
    con.close()
    long = pq.read_table(tmp_path / "long.parquet")
    questions = long.column("question").to_pylist()
    questions[6] = "topc"
    bad = long.set_column(long.schema.get_field_index("question"), "question", pa.array(questions))
    pq.write_table(bad, tmp_path / "q.parquet")
    msg = _refused(store, tmp_path / "q.parquet", match="row 7: question 'topc' is not in schema 'imp'")
    assert "1 bad row: 1 question" in msg
    pq.write_table(long.slice(0, 2 * N - 1), tmp_path / "short.parquet")  # the last item lacks 'spam'
    _refused(
        store,
        tmp_path / "short.parquet",
        match=f"item '{sorted(IDS)[-1]}' has no row for question 'spam' \\(1 item lacks",
    )
    pq.write_table(pa.concat_tables([long, long.slice(4, 1)]), tmp_path / "dup.parquet")
    _refused(store, tmp_path / "dup.parquet", match=f"item '{sorted(IDS)[2]}', question 'topic' appears more than once")


def test_an_export_read_with_another_option_order_is_refused(master, store, tmp_path):
    con = connect(store)
    run_id = import_answers(con, write_wide(master, tmp_path / "a.parquet"), dataset="msgs", schema=schema(), name="a")
    export_run(con, run_id, "parquet", tmp_path / "long.parquet")
    con.close()
    swapped = json.loads(json.dumps(SCHEMA))
    crit = swapped["questions"]["topic"]["criteria"]
    swapped["questions"]["topic"]["criteria"] = {t: crit[t] for t in [TOPICS[1], TOPICS[0], *TOPICS[2:]]}
    other = DecisionSchema.from_dict(swapped, source="swapped")
    assert option_ids(other.questions["topic"])[:2] == ["t1", "t0"]
    _refused(store, tmp_path / "long.parquet", schema=other, match="position 1: 't0' vs 't1'")


def test_cli_refusal_exits_2_with_one_line_and_writes_nothing(master, store, tmp_path):
    ids = list(IDS)
    ids[0] = "nobody"
    path = _with(master, tmp_path, "a.parquet", item_id=pa.array(ids))
    con = connect(store, read_only=True)
    before = table_counts(con)
    con.close()
    proc = run_cli(
        "runs", "import", str(path), "--dataset", "msgs", "--schema", str(master["schema"]), "--name", "x", db=store
    )
    assert proc.returncode == 2 and proc.stdout == ""
    assert "item 'nobody' is not an item of dataset 'msgs' v1" in proc.stderr
    con = connect(store, read_only=True)
    assert table_counts(con) == before
    con.close()


def _stray_files(store: Path) -> list[Path]:
    """Files an import left beside the store (it writes none: rows go to DuckDB on one Arrow stream)."""
    return sorted(p for p in store.parent.iterdir() if p.name.startswith(f".{store.name}"))


def test_small_batches_checked_in_parallel_give_the_same_run_and_the_earliest_bad_row(
    master, store, tmp_path, monkeypatch
):
    """Batches of 64 rows checked by the worker threads: the same stored figures as one batch, no file
    left beside the store, and an error names the earliest bad row in file order whichever batch finished first."""
    from workbench.store import answer_import

    path = write_wide(master, tmp_path / "a.parquet")
    con = connect(store)
    one = import_answers(con, path, dataset="msgs", schema=schema(), name="one")
    monkeypatch.setattr(answer_import, "BATCH_ROWS", 64)  # 400 rows: 7 batches, 3 in flight
    many = import_answers(con, path, dataset="msgs", schema=schema(), name="many")
    diff = con.execute(
        "SELECT count(*), count(*) FILTER (WHERE a.probs IS NOT DISTINCT FROM b.probs"
        " AND a.p_top IS NOT DISTINCT FROM b.p_top AND a.margin IS NOT DISTINCT FROM b.margin"
        " AND a.entropy IS NOT DISTINCT FROM b.entropy AND a.failure_kind IS NOT DISTINCT FROM b.failure_kind)"
        " FROM answers a JOIN answers b USING (item_id, question) WHERE a.run_id = ? AND b.run_id = ?",
        [one, many],
    ).fetchone()
    from workbench.store.calls import run_summary

    stored = get_run(con, many)["summary"]
    recomputed = run_summary(con, many)  # the store's own summary, from the committed answers
    con.close()
    assert diff == (2 * N, 2 * N)  # every row of both questions, bit for bit
    assert {k: stored[k] for k in recomputed} == recomputed
    assert recomputed["failed"] == master["failed"].sum() and recomputed["items"] == N
    assert _stray_files(store) == []

    def edit(rows):
        rows[300][0] = 7.0  # batch 5
        rows[201] = rows[201][:2]  # batch 4
        rows[130][1] = -1.0  # batch 3: the earliest

    bad = _with(master, tmp_path, "b.parquet", topic=_topic(master, edit))
    msg = _refused(store, bad, match="row 131: item 'm0130'")
    assert "3 bad rows: 1 length, 2 value" in msg
    assert _stray_files(store) == []


def test_a_bad_row_in_the_last_batch_rolls_back_the_rows_already_inserted(master, store, tmp_path, monkeypatch):
    """Rows stream into DuckDB while later batches are still checked: a bad vector in the last batch (after
    six batches went into the transaction) refuses the whole file with every check's count, nothing kept."""
    from workbench.store import answer_import

    monkeypatch.setattr(answer_import, "BATCH_ROWS", 64)

    def edit(rows):
        rows[395] = rows[395][:3]  # batch 7 of 7
        rows[331][4] = float("inf")  # batch 6

    bad = _with(master, tmp_path, "b.parquet", topic=_topic(master, edit))
    msg = _refused(store, bad, match="row 332: item 'm0331', question 'topic': probability inf at option 5")
    assert "2 bad rows: 1 length, 1 value; nothing was imported" in msg
    con = connect(store, read_only=True)
    assert con.execute("SELECT count(*) FROM answers").fetchone() == (0,)  # the module store holds no run
    con.close()
    assert _stray_files(store) == []


def test_a_bad_row_is_reported_before_unknown_items_and_duplicates(master, store, tmp_path, monkeypatch):
    """The error names what a reader of the file meets first: a bad vector anywhere in the file wins over
    an unknown id (checked before the insert) and over a duplicate id (found by the key mid-insert)."""
    from workbench.store import answer_import

    monkeypatch.setattr(answer_import, "BATCH_ROWS", 64)

    def edit(rows):
        rows[350][0] = 2.0  # batch 6

    topic = _topic(master, edit)
    ghosts = list(IDS)
    ghosts[5] = "ghost"
    msg = _refused(store, _with(master, tmp_path, "a.parquet", topic=topic, item_id=pa.array(ghosts)), match="row 351")
    assert "1 bad row: 1 value" in msg and "ghost" not in msg
    dups = list(IDS)
    dups[70] = dups[3]  # batch 2: the key refuses it while batch 6 is not read yet
    msg = _refused(store, _with(master, tmp_path, "b.parquet", topic=topic, item_id=pa.array(dups)), match="row 351")
    assert "1 bad row: 1 value" in msg and "more than once" not in msg
    msg = _refused(store, _with(master, tmp_path, "c.parquet", item_id=pa.array(dups)), match="'m0003' appears more")
    assert "1 duplicated key over 2 rows" in msg


def test_long_layout_summary_tallies_equal_run_summary(master, store, tmp_path, monkeypatch):
    """Tokens, costs (paid = not cached), unknown costs, failures by kind and the run's model (the most frequent
    one) are tallied while streaming; they equal what run_summary reads back from the committed answers."""
    from workbench.store import answer_import
    from workbench.store.calls import run_summary

    con = connect(store)
    run_id = import_answers(con, write_wide(master, tmp_path / "a.parquet"), dataset="msgs", schema=schema(), name="a")
    export_run(con, run_id, "parquet", tmp_path / "long.parquet")
    long = pq.read_table(tmp_path / "long.parquet")
    n = long.num_rows
    rng = np.random.default_rng(11)
    cost = rng.integers(1, 50, n) / 1024  # exact binary fractions: any summation order gives the same sum
    cost_col = pa.array(cost, mask=np.arange(n) % 7 == 0)  # some unknown costs
    extra = {
        "cost_usd": cost_col,
        "input_tokens": pa.array(rng.integers(10, 500, n), type=pa.int64()),
        "cached": pa.array(np.arange(n) % 5 == 0),
        "model": pa.array(np.where(np.arange(n) % 3 == 0, "m-small", "m-large")),
    }
    for c, a in extra.items():
        long = long.set_column(long.schema.get_field_index(c), c, a)
    pq.write_table(long, tmp_path / "costs.parquet")
    monkeypatch.setattr(answer_import, "BATCH_ROWS", 96)
    again = import_answers(con, tmp_path / "costs.parquet", dataset="msgs", schema=schema(), name="costs")
    stored, recomputed = get_run(con, again)["summary"], run_summary(con, again)
    model = get_run(con, again)["model"]
    con.close()
    assert {k: stored[k] for k in recomputed} == recomputed
    assert recomputed["input_tokens"] == int(pc.sum(extra["input_tokens"]).as_py())
    paid = ~(np.arange(n) % 5 == 0) & ~(np.arange(n) % 7 == 0)
    assert recomputed["cost_paid_usd"] == pytest.approx(cost[paid].sum(), abs=1e-12)
    assert recomputed["items"] == N and model == "m-large"


def test_top_two_and_entropy_equal_the_runtimes_bit_for_bit():
    """The import's two-pass top-two and unmasked-log entropy against the runtime's functions, on rows
    with ties, zeros and one-hot vectors; ``p`` is left exactly as it was."""
    from workbench.schema.answers import entropy as runtime_entropy
    from workbench.store.answer_import import _entropy, _top_two

    rng = np.random.default_rng(3)
    p = rng.dirichlet(np.ones(K), 500)
    p[p < 0.05] = 0.0
    p[:50] = [0.3, 0.3, 0.2, 0.2, 0.0]  # ties at the top
    p[50:60] = np.eye(K)[rng.integers(0, K, 10)]  # one-hot: entropy 0, runner-up 0
    p /= p.sum(axis=1, keepdims=True)
    before = p.copy()
    top, p1, p2 = _top_two(p)
    r_top, r1, r2 = top_two(p)
    assert np.array_equal(p, before)
    assert np.array_equal(top, r_top) and np.array_equal(top[:50], np.zeros(50))  # ties to the first
    assert np.array_equal(p1, r1) and np.array_equal(p2, r2)
    assert np.array_equal(p1[:50], p2[:50]) and np.all(p2[50:60] == 0.0)
    np.testing.assert_allclose(_entropy(p), runtime_entropy(p), rtol=0, atol=1e-15)
    logs = np.zeros_like(p)
    np.log(p, out=logs, where=p > 0)  # the previous (masked) formulation
    assert np.array_equal(_entropy(p), -np.einsum("ij,ij->i", p, logs))


# -- issue 25: JSON answers are as strict as the runtime's answer parsing ---------------------------
@pytest.mark.parametrize(
    ("value", "what"),
    [
        ('"0.2"', 'probability "0.2" at option 2 is a string'),
        ("true", "probability true at option 2 is a boolean"),
        ("null", "probability null at option 2 is null"),
        ("NaN", "probability NaN at option 2 is NaN"),
    ],
)
def test_jsonl_probabilities_that_are_not_json_numbers_are_refused(master, store, tmp_path, value, what):
    """DuckDB's typed JSON reader turned "0.2" and true into numbers; the runtime refuses both, so does the import."""
    rows = [json.dumps(r) for r in wide_table(master).to_pylist()]
    vec = wide_table(master).column("spam")[6].as_py()
    rows[6] = rows[6].replace(json.dumps(vec), "[" + json.dumps(vec[0]) + ", " + value + "]")
    assert value in rows[6]
    path = tmp_path / "a.jsonl"
    path.write_text("\n".join(rows) + "\n")
    msg = _refused(store, path, match="row 7: item 'm0006', column 'spam': ")
    assert what in msg and "1 bad row: 1 type" in msg and "\n" not in msg


def test_jsonl_values_of_the_wrong_type_are_refused_in_every_column(master, store, tmp_path):
    base = wide_table(master).to_pylist()

    def refused_with(edit: dict, row: int, match: str) -> str:
        rows = [dict(r) for r in base]
        rows[row].update(edit)
        path = tmp_path / f"e{row}.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        return _refused(store, path, match=match)

    refused_with({"topic": "[0.2, 0.2, 0.2, 0.2, 0.2]"}, 3, r"row 4: item 'm0003', column 'topic' holds a string")
    refused_with({"item_id": True}, 2, r"row 3: column 'item_id' holds a boolean \(true\), not a string")
    refused_with({"topic": None, "topic__failure_kind": 7}, 5, r"row 6: item 'm0005', column 'topic__failure_kind'")
    refused_with({"spam": [True, False]}, 9, r"row 10: item 'm0009', column 'spam': probability true at option 1")


def test_parquet_text_columns_must_be_text_and_call_figures_valid(master, store, tmp_path):
    kinds = pa.array([None] * N, pa.int64())
    _refused(store, _with(master, tmp_path, "k.parquet", topic__failure_kind=kinds), match="is int64, not text")
    con = connect(store)
    run_id = import_answers(con, write_wide(master, tmp_path / "a.parquet"), dataset="msgs", schema=schema(), name="a")
    export_run(con, run_id, "parquet", tmp_path / "long.parquet")
    con.close()
    long = pq.read_table(tmp_path / "long.parquet")
    for col, value in (("latency_ms", -1.0), ("cost_usd", float("nan")), ("input_tokens", -5)):
        typ = pa.int64() if col == "input_tokens" else pa.float64()
        values = [None] * long.num_rows
        values[8] = value
        t = long.drop_columns([col]) if col in long.column_names else long
        pq.write_table(t.append_column(col, pa.array(values, typ)), tmp_path / f"{col}.parquet")
        msg = _refused(store, tmp_path / f"{col}.parquet", match=f"row 9: item '[^']+': {col} ")
        assert "is not a number >= 0" in msg and "1 bad row: 1 figure" in msg


def test_long_layout_names_the_bad_row_of_a_later_question(master, store, tmp_path):
    """Found by the fuzzer: a long-layout problem was described at its file position inside the arrays of its
    question's rows alone, so it named another item (or failed with an IndexError traceback)."""
    con = connect(store)
    run_id = import_answers(con, write_wide(master, tmp_path / "a.parquet"), dataset="msgs", schema=schema(), name="a")
    export_run(con, run_id, "parquet", tmp_path / "long.parquet")
    con.close()
    long = pq.read_table(tmp_path / "long.parquet")
    questions, items = long.column("question").to_pylist(), long.column("item_id").to_pylist()
    r = next(i for i in range(301, long.num_rows) if questions[i] == "spam")
    probs = long.column("probs").to_pylist()
    probs[r] = [0.5, 0.25, 0.25]
    bad = long.set_column(long.schema.get_field_index("probs"), "probs", pa.array(probs, pa.list_(pa.float64())))
    pq.write_table(bad, tmp_path / "bad.parquet")
    msg = _refused(store, tmp_path / "bad.parquet", match=f"row {r + 1}: item '{items[r]}', question 'spam': 3 prob")
    assert "1 bad row: 1 length" in msg


def test_vectors_are_stored_as_given_and_every_reader_sees_them_normalised(master, store, tmp_path):
    """The import stores the file's 4-decimal values (DuckDB compresses them with ALP; the re-normalised
    doubles it stored before took ~5x the space) and the store normalises them on read, in one place (the
    ``answers`` view): every reader gets the very doubles of a run whose vectors were stored normalised."""
    from workbench.engines import store_aggregates as sa
    from workbench.store.db import ANSWERS_TABLE
    from workbench.store.runs import insert_run, iter_answer_batches, write_answers
    from workbench.store.sources import StoreSource

    con = connect(store)
    run_id = import_answers(con, write_wide(master, tmp_path / "a.parquet"), dataset="msgs", schema=schema(), name="a")
    given = con.execute(
        f"SELECT item_id, probs, normalise_on_read, deviation FROM {ANSWERS_TABLE}"
        " WHERE run_id = ? AND question = 'topic' ORDER BY item_id",
        [run_id],
    ).fetch_arrow_table()
    order = np.argsort(IDS)
    ok = ~master["failed"][order]
    stored = np.vstack([v for v in given.column("probs").to_pylist() if v is not None])
    np.testing.assert_array_equal(stored, master["topic"][order][ok])  # the file's values, bit for bit
    s = stored.sum(axis=1)
    flag = np.array(given.column("normalise_on_read").to_pylist())
    np.testing.assert_array_equal(flag[ok], np.abs(s - 1) > 1e-12)  # set where a division is due
    assert not flag[~ok].any()

    # the same vectors normalised before they are stored (as the runner writes), as a second run
    rows = con.execute(
        "SELECT item_id, question, probs, p_top, margin, top_option, entropy, deviation, failure_kind FROM answers"
        " WHERE run_id = ?",
        [run_id],
    ).fetch_arrow_table()
    run = get_run(con, run_id)
    ref = "run-reference"
    insert_run(
        con, run_id=ref, dataset="msgs", dataset_version=1, schema=schema(), provider="test", splits=run["splits"],
        name="ref", status="done",
    )  # fmt: skip
    write_answers(
        con,
        rows.set_column(0, "item_id", rows.column("item_id")).append_column("run_id", pa.array([ref] * rows.num_rows)),
    )
    assert (
        con.execute(f"SELECT count(*) FROM {ANSWERS_TABLE} WHERE run_id = ? AND normalise_on_read", [ref]).fetchone()[0]
        == 0
    )
    want = np.where((np.abs(s - 1) > 1e-12)[:, None], stored / np.where(np.abs(s - 1) > 1e-12, s, 1.0)[:, None], stored)
    for q in ("topic", "spam"):
        a, b = load_answers(con, run_id, q), load_answers(con, ref, q)
        np.testing.assert_array_equal(a.probs, b.probs)
        if q == "topic":
            np.testing.assert_array_equal(a.probs[ok], want)  # numpy's division by the row sum, bit for bit
        test_rows = load_answers(con, run_id, q, ["test"])
        streamed = np.full_like(test_rows.probs, -1.0)
        for pos, batch in iter_answer_batches(con, run_id, q, ["test"], batch_rows=64):
            streamed[pos] = batch.probs
        np.testing.assert_array_equal(streamed, test_rows.probs)
        for split in ("calibration", "test"):  # the store's SQL aggregates (choice questions only)
            ra, rb = (
                sa.point_report(StoreSource(con, run_id), q, split),
                sa.point_report(StoreSource(con, ref), q, split),
            )
            assert (ra is None) == (rb is None) == (q != "topic")
            _same_to_1e12(ra, rb)  # DuckDB's sums may add in another order: the last bit may differ
            ga, gb = (
                sa.grid_points(StoreSource(con, run_id), q, (split,)),
                sa.grid_points(StoreSource(con, ref), q, (split,)),
            )
            _same_to_1e12(ga, gb)
    for rid, out in ((run_id, tmp_path / "a.parquet.out"), (ref, tmp_path / "b.parquet.out")):
        export_run(con, rid, "parquet", out.with_suffix(".parquet"))
    ea = pq.read_table(tmp_path / "a.parquet.parquet", columns=["item_id", "question", "probs", "p_top", "margin"])
    eb = pq.read_table(tmp_path / "b.parquet.parquet", columns=["item_id", "question", "probs", "p_top", "margin"])
    assert ea.equals(eb)
    con.close()


def _same_to_1e12(a, b) -> None:
    """Two results whose reprs hold the same text and the same numbers to a relative 1e-12."""
    import re

    number = r"-?\d+\.\d+(?:e[-+]?\d+)?|nan|inf"
    ta, tb = repr(a), repr(b)
    assert re.sub(number, "#", ta) == re.sub(number, "#", tb)
    xa = np.array([float(x) for x in re.findall(number, ta)])
    xb = np.array([float(x) for x in re.findall(number, tb)])
    np.testing.assert_allclose(xa, xb, rtol=1e-12, atol=0)


@pytest.mark.parametrize(
    "value, what",
    [('"0.2"', "is a string"), ("NaN", "is NaN"), ("null", "is null"), ("[0.2]", "is an array")],
)
def test_jsonl_read_by_arrow_hands_a_later_bad_row_to_the_strict_reader(
    master, store, tmp_path, monkeypatch, value, what
):
    """Arrow's JSON reader reads the good batches; at the first value the strict reader refuses (a batch with
    NaN or null in a list, or Arrow's own refusal) the strict reader reads on from that row: the same error,
    the same row number, and a good file imports the same run either way."""
    from workbench.store import answer_import as ai

    monkeypatch.setattr(ai, "ARROW_JSON_BLOCK", 4096)  # many Arrow batches of ~20 rows
    rows = [json.dumps(r) for r in wide_table(master).to_pylist()]
    path = tmp_path / "good.jsonl"
    path.write_text("\n".join(rows) + "\n")
    con = connect(store)
    fast = import_answers(con, path, dataset="msgs", schema=schema(), name="fast")

    def refuses(src, layout):  # Arrow refuses at once: the strict reader reads the whole file
        raise pa.ArrowInvalid("refused")
        yield

    monkeypatch.setattr(ai, "_arrow_jsonl", refuses)
    strict = import_answers(con, path, dataset="msgs", schema=schema(), name="strict")
    same = con.execute(
        "SELECT count(*), count(*) FILTER (WHERE a.probs IS NOT DISTINCT FROM b.probs AND a.failure_kind IS NOT"
        " DISTINCT FROM b.failure_kind AND a.p_top IS NOT DISTINCT FROM b.p_top) FROM answers a JOIN answers b"
        " USING (item_id, question) WHERE a.run_id = ? AND b.run_id = ?",
        [fast, strict],
    ).fetchone()
    assert same == (2 * N, 2 * N)
    con.close()
    monkeypatch.undo()
    monkeypatch.setattr(ai, "ARROW_JSON_BLOCK", 4096)
    vec = wide_table(master).column("spam")[301].as_py()
    rows[301] = rows[301].replace(json.dumps(vec), "[" + json.dumps(vec[0]) + ", " + value + "]")
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join(rows) + "\n")
    msg = _refused(store, path, match="row 302: item 'm0301', column 'spam': ")
    assert what in msg and "1 bad row: 1 type" in msg


@pytest.mark.parametrize("line", ["null", "[1, 2]", "0.5", '"text"', "spaced"])
def test_a_line_that_is_not_an_object_goes_to_the_strict_reader_not_arrow(master, store, tmp_path, line):
    """pyarrow 26's JSON reader kills the process (SIGSEGV) on a top-level null line: such files never reach it.
    In a subprocess, so that a crash fails this test instead of killing the test run."""
    import subprocess
    import sys

    rows = [json.dumps(r) for r in wide_table(master).to_pylist()]
    if line == "spaced":  # a valid object line after a blank
        line = " " + rows.pop(40)
    path = tmp_path / "answers.jsonl"
    path.write_text("\n".join([*rows[:40], line, *rows[40:]]) + "\n")
    probe = (
        "import sys; from workbench.store.answer_import import _object_lines_only; "
        "print(_object_lines_only(sys.argv[1]))"
    )
    out = subprocess.run([sys.executable, "-c", probe, str(path)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "False", out
    if line.startswith(" "):  # an object after a blank: valid JSONL, read by the strict reader
        con = connect(store)
        run = import_answers(con, path, dataset="msgs", schema=schema(), name="spaced")
        assert load_answers(con, run, "topic").probs.shape[0] > 0
        con.close()
        return
    script = (
        "import sys; from workbench.store.db import connect; from workbench.store.answer_import import import_answers;"
        "from workbench.errors import DataImportError; from tests.store.test_answer_import import schema\n"
        "con = connect(sys.argv[2])\n"
        "try:\n    import_answers(con, sys.argv[1], dataset='msgs', schema=schema(), name='bad')\n"
        "except DataImportError as exc:\n    print('refused:', exc)\n"
    )
    res = subprocess.run(
        [sys.executable, "-c", script, str(path), str(store)], capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    assert res.returncode == 0, res.stderr[-2000:]  # no crash
    assert res.stdout.startswith("refused:") and "41" in res.stdout, res.stdout  # the strict reader names line 41
