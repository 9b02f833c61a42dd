"""Issue 2, acceptance 3: the schema hash is a hash of what is sent.

Unchanged when the file is reformatted (YAML <-> JSON, indentation, flow vs block style, comments,
question order, field order inside a question, the unsent ``name``/``description``); changed when
choice options or score levels are reordered, or when any text that is sent changes.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import ROOT
from workbench.schema import DecisionSchema, load_schema, schema_hash

BASE_YAML = """\
name: refunds
description: three question types
questions:
  refund:
    type: noul
    instructions: Does the customer ask for a refund?
    criteria:
      "true": They want money back.
      "false": Anything else.
  topic:
    type: choice
    instructions: What is the message about?
    criteria:
      card: A card problem.
      transfer: A transfer problem.
      other: null
  urgency:
    type: score
    instructions: How urgent is it?
    criteria: [Not urgent, Soon, Today]
"""

# The same schema written differently: flow style, 4-space indent, comments, reversed question
# order, criteria before type, instructions last, another name and no description.
REFORMATTED_YAML = """\
# a comment
name: other-name
questions:
    urgency: {criteria: ["Not urgent", "Soon", "Today"], instructions: "How urgent is it?", type: score}
    topic:
        criteria:
            card: "A card problem."
            transfer: 'A transfer problem.'
            other: ~
        type: choice
        instructions: What is the message about?
    refund:
        criteria: {"false": Anything else., "true": They want money back.}
        instructions: >-
            Does the customer
            ask for a refund?
        type: noul
"""


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture
def base_hash(tmp_path) -> str:
    return load_schema(_write(tmp_path, "base.yaml", BASE_YAML)).hash


def _base_dict() -> dict:
    return yaml.safe_load(BASE_YAML)


def _hash_of(data: dict) -> str:
    return DecisionSchema.from_dict(data).hash


def test_hash_is_sha256_hex(base_hash):
    assert len(base_hash) == 64 and int(base_hash, 16) >= 0


def test_reformatted_yaml_keeps_the_hash(tmp_path, base_hash):
    assert load_schema(_write(tmp_path, "re.yaml", REFORMATTED_YAML)).hash == base_hash


@pytest.mark.parametrize("indent", [None, 1, 2, 4, "\t"])
def test_json_keeps_the_hash(tmp_path, base_hash, indent):
    text = json.dumps(_base_dict(), indent=indent, ensure_ascii=False)
    assert load_schema(_write(tmp_path, "s.json", text)).hash == base_hash


def test_yaml_json_yaml_round_trip_keeps_the_hash(tmp_path, base_hash):
    as_json = _write(tmp_path, "s.json", json.dumps(load_schema(_write(tmp_path, "a.yaml", BASE_YAML)).to_file_dict()))
    back = _write(tmp_path, "b.yaml", yaml.safe_dump(load_schema(as_json).to_file_dict(), sort_keys=False, indent=6))
    assert load_schema(as_json).hash == load_schema(back).hash == base_hash
    # a dumper that sorts keys also sorts the choice options: that is a different request
    sorted_dump = _write(tmp_path, "c.yaml", yaml.safe_dump(_base_dict(), sort_keys=True))
    assert load_schema(sorted_dump).hash != base_hash


def test_field_order_inside_a_question_keeps_the_hash(base_hash):
    data = _base_dict()
    data["questions"] = {qid: dict(reversed(list(q.items()))) for qid, q in data["questions"].items()}
    assert _hash_of(data) == base_hash


@pytest.mark.parametrize("seed", range(5))
def test_question_order_keeps_the_hash(base_hash, seed):
    data = _base_dict()
    items = list(data["questions"].items())
    random.Random(seed).shuffle(items)
    data["questions"] = dict(items)
    assert _hash_of(data) == base_hash


def test_name_and_description_are_not_sent_so_not_hashed(base_hash):
    data = _base_dict()
    data["name"], data["description"] = "renamed", "another description"
    assert _hash_of(data) == base_hash


@pytest.mark.parametrize(
    "order", [["transfer", "card", "other"], ["other", "card", "transfer"], ["card", "other", "transfer"]]
)
def test_reordering_choice_options_changes_the_hash(base_hash, order):
    data = _base_dict()
    criteria = data["questions"]["topic"]["criteria"]
    data["questions"]["topic"]["criteria"] = {k: criteria[k] for k in order}
    assert _hash_of(data) != base_hash


def test_reordering_score_levels_changes_the_hash(base_hash):
    data = _base_dict()
    data["questions"]["urgency"]["criteria"] = ["Today", "Soon", "Not urgent"]
    assert _hash_of(data) != base_hash


@pytest.mark.parametrize(
    "edit",
    [
        lambda d: d["questions"]["topic"]["criteria"].update(card="A problem with a card."),
        lambda d: d["questions"]["topic"]["criteria"].update(other="Anything else."),  # null -> text
        lambda d: d["questions"]["topic"]["criteria"].update(card=None),  # text -> null
        lambda d: d["questions"]["refund"]["criteria"].update({"true": "They want a refund."}),
        lambda d: d["questions"]["urgency"]["criteria"].__setitem__(1, "This week"),
        lambda d: d["questions"]["refund"].update(instructions="Is this a refund request?"),
        lambda d: d["questions"]["topic"]["criteria"].update(fraud="Fraud."),  # option added
        lambda d: d["questions"].update(extra=d["questions"].pop("topic")),  # question renamed
    ],
    ids=[
        "description",
        "null-to-text",
        "text-to-null",
        "noul-criteria",
        "score-level",
        "instructions",
        "added-option",
        "renamed-question",
    ],
)
def test_changing_what_is_sent_changes_the_hash(base_hash, edit):
    data = _base_dict()
    edit(data)
    assert _hash_of(data) != base_hash


def test_shipped_banking77_schema_reformatted_as_json_keeps_its_hash(tmp_path):
    schema = load_schema(ROOT / "experiments" / "schemas" / "banking77.yaml")
    as_json = _write(tmp_path, "b77.json", json.dumps(schema.to_file_dict(), indent=3, ensure_ascii=True))
    assert load_schema(as_json).hash == schema.hash
    data = schema.to_file_dict()
    data["questions"]["intent"]["criteria"] = dict(reversed(list(data["questions"]["intent"]["criteria"].items())))
    assert _hash_of(data) != schema.hash


def test_hash_of_identical_content_agrees_across_function_and_property(base_hash, tmp_path):
    schema = load_schema(_write(tmp_path, "b.yaml", BASE_YAML))
    assert schema_hash(schema) == schema.hash == base_hash


@settings(max_examples=60, deadline=None)
@given(n_options=st.integers(min_value=2, max_value=12), data=st.data())
def test_any_option_permutation_changes_the_hash_and_any_question_permutation_does_not(n_options, data):
    options = {f"opt{i}": f"Description {i}." for i in range(n_options)}
    questions = {
        "a": {"type": "choice", "instructions": "Pick one.", "criteria": options},
        "b": {"type": "noul", "instructions": "Yes or no?"},
        "c": {"type": "score", "instructions": "Rate.", "criteria": ["low", "mid", "high"]},
    }
    reference = _hash_of({"questions": questions})
    q_order = data.draw(st.permutations(list(questions)))
    assert _hash_of({"questions": {q: questions[q] for q in q_order}}) == reference
    perm = data.draw(st.permutations(list(options)))
    permuted = dict(questions, a=dict(questions["a"], criteria={k: options[k] for k in perm}))
    assert (_hash_of({"questions": permuted}) == reference) == (list(perm) == list(options))
