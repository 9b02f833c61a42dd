"""The shipped schema files and dataset cards are accurate.

Every schema under ``experiments/schemas/`` loads and fits the Cloudflare Clef and default limit
profiles; its option ids are exactly the label set read from the shipped data files (not from a
list copied into the test); the variants of one dataset ask the same options in the same order.
The cards' checksums match the files, and each card's import command, run through the real CLI
into a fresh DuckDB file, gives the split counts the card states.
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
from pathlib import Path

import pandas as pd
import pytest

from tests.conftest import ROOT, run_cli
from workbench.schema import load_schema, option_ids, validate_limits

SCHEMAS = ROOT / "experiments" / "schemas"
DATA = ROOT / "datasets"
SCHEMA_FILES = sorted(SCHEMAS.glob("*.yaml"))
EXPECTED_FILES = {
    "banking77.yaml",
    "banking77-terse.yaml",
    "banking77-other.yaml",
    "hwu64.yaml",
    "hwu64-terse.yaml",
    "sms_spam.yaml",
}


def _criteria(path: Path, question: str) -> dict:
    return dict(load_schema(path).questions[question].criteria)


@pytest.fixture(scope="module")
def banking77_categories() -> list[str]:
    return json.loads((DATA / "banking77" / "categories.json").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def hwu64_frame() -> pd.DataFrame:
    return pd.read_csv(DATA / "hwu64" / "hwu64_kfold1.csv", dtype=str, keep_default_na=False)


def test_every_expected_schema_is_shipped():
    assert EXPECTED_FILES <= {p.name for p in SCHEMA_FILES}


@pytest.mark.parametrize("path", SCHEMA_FILES, ids=lambda p: p.name)
@pytest.mark.parametrize("profile", ["cloudflare-clef", "default"])
def test_schema_loads_and_fits_profile(path: Path, profile: str):
    schema = load_schema(path)
    assert schema.name == path.stem
    assert schema.description
    assert validate_limits(schema, profile) == []
    for question in schema.questions.values():
        assert isinstance(question.instructions, str) and len(question.instructions.split()) >= 4


# -- BANKING77 ----------------------------------------------------------------------------------
def test_banking77_options_are_the_categories_in_order(banking77_categories):
    for name in ("banking77.yaml", "banking77-terse.yaml"):
        schema = load_schema(SCHEMAS / name)
        assert list(schema.questions) == ["intent"]
        assert option_ids(schema.questions["intent"]) == banking77_categories
    assert len(banking77_categories) == 77


def test_banking77_categories_are_exactly_the_labels_in_the_csv_files(banking77_categories):
    for split in ("train", "test"):
        frame = pd.read_csv(DATA / "banking77" / f"{split}.csv", dtype=str)
        assert set(frame["category"]) == set(banking77_categories)


def test_banking77_descriptive_variant_describes_every_option():
    criteria = _criteria(SCHEMAS / "banking77.yaml", "intent")
    descriptions = list(criteria.values())
    assert all(isinstance(d, str) and d.endswith(".") and 6 <= len(d.split()) <= 40 for d in descriptions)
    assert len(set(descriptions)) == len(descriptions), "two options share a description"


def test_banking77_terse_variant_has_null_descriptions():
    assert set(_criteria(SCHEMAS / "banking77-terse.yaml", "intent").values()) == {None}


def test_banking77_other_variant_is_descriptive_plus_a_final_abstain_option():
    descriptive = _criteria(SCHEMAS / "banking77.yaml", "intent")
    other = _criteria(SCHEMAS / "banking77-other.yaml", "intent")
    assert list(other) == [*descriptive, "other"]
    assert {k: other[k] for k in descriptive} == descriptive
    assert "none of the above" in other["other"].lower()


def test_banking77_variants_differ_in_hash():
    hashes = {load_schema(SCHEMAS / f).hash for f in ("banking77.yaml", "banking77-terse.yaml", "banking77-other.yaml")}
    assert len(hashes) == 3


# -- HWU64 ----------------------------------------------------------------------------------------
def test_hwu64_label_column_is_scenario_underscore_intent(hwu64_frame):
    assert (hwu64_frame["label"] == hwu64_frame["scenario"] + "_" + hwu64_frame["intent"]).all()


@pytest.mark.parametrize("name", ["hwu64.yaml", "hwu64-terse.yaml"])
def test_hwu64_questions_match_the_data(name, hwu64_frame):
    schema = load_schema(SCHEMAS / name)
    assert list(schema.questions) == ["scenario", "intent"]
    scenarios = option_ids(schema.questions["scenario"])
    intents = option_ids(schema.questions["intent"])
    assert scenarios == sorted(hwu64_frame["scenario"].unique())
    assert intents == sorted(hwu64_frame["label"].unique())
    assert (len(scenarios), len(intents)) == (18, 64)
    # every intent option sits under a scenario option, so the hierarchy can be checked
    assert all(any(i.startswith(s + "_") for s in scenarios) for i in intents)


def test_hwu64_variants_share_ids_and_differ_only_in_descriptions():
    for question in ("scenario", "intent"):
        descriptive = _criteria(SCHEMAS / "hwu64.yaml", question)
        terse = _criteria(SCHEMAS / "hwu64-terse.yaml", question)
        assert list(descriptive) == list(terse)
        assert set(terse.values()) == {None}
        assert all(isinstance(d, str) and d.strip() for d in descriptive.values())
        assert len(set(descriptive.values())) == len(descriptive)


# -- SMS spam -----------------------------------------------------------------------------------
def test_sms_spam_is_one_noul_question_with_both_criteria():
    schema = load_schema(SCHEMAS / "sms_spam.yaml")
    assert list(schema.questions) == ["spam"]
    question = schema.questions["spam"]
    assert question.type == "noul"
    assert option_ids(question) == ["yes", "no"]
    assert set(question.criteria) == {"true", "false"}
    assert all(isinstance(v, str) and len(v.split()) >= 5 for v in question.criteria.values())


def test_sms_spam_labels_are_ham_and_spam():
    frame = pd.read_csv(DATA / "sms_spam" / "sms_spam.csv", dtype=str, keep_default_na=False)
    assert set(frame["label"]) == {"ham", "spam"}
    assert frame["id"].is_unique


# -- dataset cards --------------------------------------------------------------------------------
@pytest.mark.parametrize("dataset", ["banking77", "hwu64", "sms_spam"])
def test_card_checksums_match_the_files(dataset):
    card = (DATA / dataset / "README.md").read_text(encoding="utf-8")
    listed = re.findall(r"^([0-9a-f]{64})  (\S+)$", card, flags=re.M)
    assert listed, "the card lists no checksums"
    for digest, name in listed:
        assert hashlib.sha256((DATA / dataset / name).read_bytes()).hexdigest() == digest, name


@pytest.mark.parametrize("dataset", ["banking77", "hwu64", "sms_spam"])
def test_card_has_licence_attribution_and_citation(dataset):
    folder = DATA / dataset
    card = (folder / "README.md").read_text(encoding="utf-8")
    assert (folder / "LICENSE").stat().st_size > 500
    for heading in (
        "## Source",
        "## Licence and attribution",
        "## Files and columns",
        "## Counts",
        "## Import with the workbench",
    ):
        assert heading in card
    assert "@inproceedings" in card
    assert re.search(r"commit `[0-9a-f]{40}`", card)


def _card_import(dataset: str) -> tuple[list[str], dict[str, int]]:
    """The card's `workbench datasets import` arguments and the split counts it states."""
    card = (DATA / dataset / "README.md").read_text(encoding="utf-8")
    block = re.search(r"```bash\n(.*?)```", card, flags=re.S).group(1).replace("\\\n", " ")
    command = next(line for line in block.splitlines() if line.startswith("workbench datasets import"))
    stated = re.search(r"Measured with the\s+command\s+above:\s+(.*?)[;(]", card, flags=re.S).group(1)
    counts = {split: int(n.replace(",", "")) for split, n in re.findall(r"(train|calibration|test) ([\d,]+)", stated)}
    return shlex.split(command)[1:], counts


@pytest.mark.parametrize("dataset", ["banking77", "hwu64", "sms_spam"])
def test_card_import_command_gives_the_stated_counts(dataset, tmp_path):
    args, stated = _card_import(dataset)
    assert set(stated) == {"train", "calibration", "test"}
    db = tmp_path / "wb.duckdb"
    run_cli(*args, db=db, check=True)
    shown = json.loads(run_cli("datasets", "show", dataset, "--json", db=db, check=True).stdout)
    assert shown["splits"] == stated
    schema_file = args[args.index("--schema") + 1]
    assert shown["schema_hash"] == load_schema(ROOT / schema_file).hash
