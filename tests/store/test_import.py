"""Dataset import: splits, fingerprints, versions, and the bad-input corpus (issue 2)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from tests.conftest import dataset_path, run_cli, table_counts
from workbench.store.db import connect

BAD = Path(__file__).resolve().parents[1] / "data" / "bad_inputs"
OK_SCHEMA = BAD / "schema_ok.yaml"


def import_banking(db: Path, *extra: str, train: Path | None = None):
    return run_cli(
        "datasets",
        "import",
        str(train or dataset_path("banking77", "train.csv")),
        str(dataset_path("banking77", "test.csv")),
        "--name",
        "banking77",
        "--text-column",
        "text",
        "--label",
        "intent=category",
        "--calibration-fraction",
        "0.2",
        "--seed",
        "7",
        *extra,
        db=db,
    )


def show(db: Path, name: str) -> dict:
    proc = run_cli("datasets", "show", name, "--json", db=db, check=True)
    return json.loads(proc.stdout)


def test_banking77_counts_and_stable_fingerprint(db_path: Path, tmp_path: Path):
    assert import_banking(db_path).returncode == 0
    info = show(db_path, "banking77")
    assert info["splits"]["train"] + info["splits"]["calibration"] == 10003
    assert info["splits"]["test"] == 3080
    assert 0.15 < info["splits"]["calibration"] / 10003 < 0.25
    assert info["labels"]["intent"]["n_labels"] == 77
    # same files again: same fingerprint, no new version
    assert import_banking(db_path).returncode == 0
    again = show(db_path, "banking77")
    assert again["fingerprint"] == info["fingerprint"] and again["version"] == 1
    # a fresh store gives the same fingerprint (content hash, not name/version/time)
    other = tmp_path / "other.duckdb"
    import_banking(other)
    assert show(other, "banking77")["fingerprint"] == info["fingerprint"]
    # one label changed -> new fingerprint and a new version; the old one is kept
    rows = list(csv.reader(dataset_path("banking77", "train.csv").open(encoding="utf-8")))
    rows[5][1] = "card_linking" if rows[5][1] != "card_linking" else "card_arrival"
    changed = tmp_path / "train.csv"
    with changed.open("w", newline="", encoding="utf-8") as fh:
        csv.writer(fh).writerows(rows)
    assert import_banking(db_path, train=changed).returncode == 0
    new = show(db_path, "banking77")
    assert new["version"] == 2 and new["fingerprint"] != info["fingerprint"]
    assert [v["version"] for v in new["versions"]] == [1, 2]


def test_splits_are_deterministic_and_seeded(db_path: Path):
    args = (
        "datasets",
        "import",
        str(dataset_path("sms_spam", "sms_spam.csv")),
        "--name",
        "sms",
        "--text-column",
        "text",
        "--id-column",
        "id",
        "--label",
        "spam=label",
        "--positive",
        "spam=spam",
        "--test-fraction",
        "0.3",
        "--seed",
        "1",
    )
    run_cli(*args, db=db_path, check=True)
    info = show(db_path, "sms")
    assert info["n_items"] == 5574
    assert 0.27 < info["splits"]["test"] / 5574 < 0.33
    assert set(info["labels"]["spam"]["label_counts"]) == {"yes", "no"}
    assert info["labels"]["spam"]["label_counts"]["yes"] == 747
    con = connect(db_path, read_only=True)
    first = con.execute("SELECT item_id, split FROM items ORDER BY item_id").fetchall()
    con.close()
    run_cli(*args[:-1], "2", "--name", "sms", db=db_path, check=True)  # another seed -> other splits
    con = connect(db_path, read_only=True)
    second = con.execute("SELECT item_id, split FROM items WHERE version = 2 ORDER BY item_id").fetchall()
    con.close()
    assert first != second and len(second) == len(first)


def test_hwu64_two_questions_from_one_file(db_path: Path):
    run_cli(
        "datasets",
        "import",
        str(dataset_path("hwu64", "hwu64_kfold1.csv")),
        "--name",
        "hwu64",
        "--text-column",
        "text",
        "--id-column",
        "id",
        "--split-column",
        "split",
        "--label",
        "scenario=scenario",
        "--label",
        "intent=label",
        "--calibration-fraction",
        "0.2",
        db=db_path,
        check=True,
    )
    info = show(db_path, "hwu64")
    assert sorted(info["questions"]) == ["intent", "scenario"]
    assert info["labels"]["scenario"]["n_labels"] == 18 and info["labels"]["intent"]["n_labels"] == 64
    assert info["splits"]["test"] == 1076


def test_group_column_keeps_groups_in_one_split(db_path: Path, tmp_path: Path):
    f = tmp_path / "grouped.csv"
    with f.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["id", "text", "label", "customer"])
        for i in range(400):
            w.writerow([f"r{i}", f"message {i}", "card_arrival" if i % 2 else "lost_card", f"c{i // 4}"])
    run_cli(
        "datasets",
        "import",
        str(f),
        "--name",
        "g",
        "--text-column",
        "text",
        "--id-column",
        "id",
        "--label",
        "intent=label",
        "--group-column",
        "customer",
        "--test-fraction",
        "0.3",
        "--calibration-fraction",
        "0.2",
        "--schema",
        str(OK_SCHEMA),
        db=db_path,
        check=True,
    )
    con = connect(db_path, read_only=True)
    n_splits_per_group = con.execute(
        "SELECT max(n) FROM (SELECT grp, count(DISTINCT split) n FROM items GROUP BY grp)"
    ).fetchone()[0]
    splits = {r[0] for r in con.execute("SELECT DISTINCT split FROM items").fetchall()}
    con.close()
    assert n_splits_per_group == 1 and splits == {"train", "calibration", "test"}


BAD_CASES = [
    # (name, args, expected words in the one-line error)
    ("missing column", ["missing_column.csv", "--text-column", "text"], ["missing_column.csv", "no column 'text'"]),
    (
        "unknown label",
        ["unknown_label.csv", "--schema", "schema_ok.yaml"],
        ["line 3", "refund_request", "not an option"],
    ),
    ("duplicate id", ["duplicate_id.csv"], ["duplicate item id 'a1'"]),
    ("empty text", ["empty_text.csv"], ["line 3", "empty text"]),
    ("invalid utf-8", ["invalid_utf8.csv"], ["invalid_utf8.csv", "UTF-8", "line 3"]),
    ("ragged row", ["ragged_row.csv"], ["ragged_row.csv", "line 3 has 4 fields"]),
    ("bad split", ["bad_split.csv", "--split-column", "split"], ["line 3", "holdout"]),
    ("malformed jsonl", ["malformed.jsonl"], ["malformed.jsonl", "cannot read"]),
    (
        "bad noul label",
        ["bad_noul.csv", "--label", "spam=spam", "--schema", "schema_spam.yaml"],
        ["line 3", "maybe", "yes/no"],
    ),
    ("schema one option", ["ok.csv", "--schema", "schema_one_option.yaml"], ["schema_one_option.yaml", "1 options"]),
    (
        "schema 65 questions",
        ["ok.csv", "--schema", "schema_65_questions.json", "--profile", "cloudflare-clef"],
        ["65 questions", "at most 64"],
    ),
    ("schema id with space", ["ok.csv", "--schema", "schema_id_space.yaml"], ["'my intent'", "id"]),
    (
        "schema 256 options",
        ["ok.csv", "--schema", "schema_256_options.json", "--profile", "cloudflare-clef"],
        ["256 options", "2–255"],
    ),
    ("schema 11 levels", ["ok.csv", "--schema", "schema_11_levels.yaml"], ["'urgency'", "11 levels"]),
    (
        "schema empty instructions",
        ["ok.csv", "--schema", "schema_empty_instructions.yaml"],
        ["instructions", "non-empty"],
    ),
    ("schema unknown type", ["ok.csv", "--schema", "schema_unknown_type.yaml"], ["unknown question type"]),
    (
        "schema broken yaml",
        ["ok.csv", "--schema", "schema_broken_yaml.yaml"],
        ["schema_broken_yaml.yaml", "cannot parse"],
    ),
    (
        "label for a question the schema lacks",
        ["ok.csv", "--schema", "schema_ok.yaml", "--label", "topic=label"],
        ["schema has no question 'topic'"],
    ),
    ("file does not exist", ["does_not_exist.csv"], ["does_not_exist.csv", "does not exist"]),
    ("unknown file type", ["schema_ok.yaml"], ["unknown file type"]),
    ("bad fraction", ["ok.csv", "--test-fraction", "1.5"], ["--test-fraction", "outside"]),
]


@pytest.mark.parametrize("name,args,expected", BAD_CASES, ids=[c[0] for c in BAD_CASES])
def test_bad_input_one_line_error_and_nothing_written(db_path: Path, name: str, args: list[str], expected: list[str]):
    # a store with content, so "unchanged" is meaningful
    run_cli(
        "datasets",
        "import",
        str(BAD / "ok.csv"),
        "--name",
        "base",
        "--text-column",
        "text",
        "--id-column",
        "id",
        "--label",
        "intent=label",
        "--split",
        "test",
        db=db_path,
        check=True,
    )
    con = connect(db_path)
    before = table_counts(con)
    con.close()
    file, *rest = args
    opts = list(rest)
    if "--text-column" not in opts:
        opts += ["--text-column", "text"]
    if "--label" not in opts:
        opts += ["--label", "intent=label"]
    opts = [str(BAD / o) if o.endswith((".yaml", ".json")) else o for o in opts]
    proc = run_cli(
        "datasets",
        "import",
        str(BAD / file),
        "--name",
        "bad",
        "--id-column",
        "id",
        "--split",
        "train",
        *opts,
        db=db_path,
    )
    assert proc.returncode != 0
    lines = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()]
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("error: ")
    for word in expected:
        assert word in lines[0], (word, lines[0])
    assert " — " in lines[0], "the error must say what to do"
    con = connect(db_path)
    assert table_counts(con) == before
    con.close()


@pytest.mark.parametrize(
    "file,profile,expect_ok",
    [
        ("schema_ok.yaml", "cloudflare-clef", True),
        ("schema_65_questions.json", "cloudflare-clef", False),
        ("schema_65_questions.json", "perplexity", True),
        ("schema_256_options.json", "cloudflare-clef", False),
        ("schema_256_options.json", "self-hosted", True),
        ("schema_11_levels.yaml", "laya", True),
        ("schema_11_levels.yaml", "default", False),
    ],
)
def test_schema_validate_profiles(file: str, profile: str, expect_ok: bool):
    proc = run_cli("schema", "validate", str(BAD / file), "--profile", profile, "--json")
    doc = json.loads(proc.stdout)
    assert doc["valid"] is expect_ok and (proc.returncode == 0) is expect_ok
    if not expect_ok:
        assert doc["violations"] and all(v["limit"] for v in doc["violations"])
