"""Hostile and clumsy schema files end in one SchemaError line, quickly (issue 14 items 4, 5, 8)."""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path

import pytest

from tests.conftest import run_cli
from workbench.errors import SchemaError
from workbench.schema import load_schema
from workbench.schema.questions import MAX_NESTING, loads_schema


def alias_bomb(levels: int = 8, fan: int = 9) -> str:
    """A YAML schema whose ``instructions`` expand to fan**levels strings (9**8 = 43M) through aliases."""
    lines = ["a0: &a0 [" + ",".join(['"lol"'] * fan) + "]"]
    for i in range(1, levels):
        lines.append(f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * fan) + "]")
    body = "\n".join("      " + line for line in lines)
    return f"name: bomb\nquestions:\n  q:\n    type: noul\n    instructions:\n{body}\n"


def one_error_line(proc) -> str:
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    assert "Traceback" not in proc.stderr
    return lines[0]


# -- item 4: alias bomb ----------------------------------------------------------------------
def test_alias_bomb_is_refused_without_expanding_it():
    text = alias_bomb()
    assert len(text) < 600
    tracemalloc.start()
    try:
        with pytest.raises(SchemaError, match="expands to more than"):
            loads_schema(text, source="bomb.yaml")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # the old loader built a ~600 MiB string graph (pydantic + canonical JSON); measuring it costs kilobytes
    assert peak < 5 * 1024 * 1024, peak


def test_alias_bomb_from_the_cli_is_one_line(tmp_path: Path):
    f = tmp_path / "bomb.yaml"
    f.write_text(alias_bomb(), encoding="utf-8")
    line = one_error_line(run_cli("schema", "validate", str(f), timeout=60))
    assert "bomb.yaml" in line and "aliases" in line


def test_modest_aliases_still_load():
    text = (
        "questions:\n"
        "  a: {type: choice, instructions: 'Which?', criteria: &opts {x: first, y: second}}\n"
        "  b: {type: choice, instructions: 'Which again?', criteria: *opts}\n"
    )
    schema = loads_schema(text)
    assert dict(schema.questions["b"].criteria) == {"x": "first", "y": "second"}


def test_recursive_alias_is_refused():
    with pytest.raises(SchemaError, match="refers to itself"):
        loads_schema("questions:\n  q: &q {type: noul, instructions: [*q]}\n")


# -- item 5: duplicate keys ------------------------------------------------------------------
def test_duplicate_yaml_option_is_refused_with_key_and_line():
    text = "questions:\n  q:\n    type: choice\n    instructions: x\n    criteria: {a: first, a: second}\n"
    with pytest.raises(SchemaError, match=r"duplicate key 'a' at line 5"):
        loads_schema(text, source="s.yaml")


def test_duplicate_yaml_question_id_is_refused_with_line():
    text = (
        "questions:\n"
        "  intent:\n    type: noul\n    instructions: first\n"
        "  intent:\n    type: noul\n    instructions: second\n"
    )
    with pytest.raises(SchemaError, match=r"duplicate key 'intent' at line 5"):
        loads_schema(text)


def test_yaml_merge_key_is_not_a_duplicate():
    text = "base: &base {type: noul, instructions: generic}\nquestions:\n  q: {<<: *base, instructions: specific}\n"
    with pytest.raises(SchemaError, match="base"):  # 'base' is not a schema field, but the merge itself parsed
        loads_schema(text)
    text = "questions:\n  q: {<<: {type: noul, instructions: generic}, instructions: specific}\n"
    assert loads_schema(text).questions["q"].instructions == "specific"


def test_duplicate_json_key_is_refused_with_key_and_line(tmp_path: Path):
    doc = '{"questions": {"q": {"type": "choice", "instructions": "x",\n  "criteria": {"a": 1, "b": 2, "a": 3}}}}'
    f = tmp_path / "s.json"
    f.write_text(doc, encoding="utf-8")
    with pytest.raises(SchemaError, match=r"duplicate key 'a' in the object starting at line 2"):
        load_schema(f)
    line = one_error_line(run_cli("schema", "validate", str(f)))
    assert "duplicate key 'a'" in line


def test_same_key_in_different_json_objects_is_fine():
    doc = {"questions": {"a": {"type": "noul", "instructions": "x"}, "b": {"type": "noul", "instructions": "y"}}}
    assert loads_schema(json.dumps(doc), fmt="json").question_ids == ["a", "b"]


# -- item 8: deep nesting and odd paths -----------------------------------------------------
@pytest.mark.parametrize("suffix", [".yaml", ".json"])
def test_100k_nested_brackets_are_one_line(tmp_path: Path, suffix: str):
    f = tmp_path / f"nest{suffix}"
    f.write_text("[" * 100_000, encoding="utf-8")
    line = one_error_line(run_cli("schema", "validate", str(f), timeout=60))
    assert "nest" in line and "nested" in line


def test_nesting_limit_is_exact():
    ok = (
        "questions:\n  q:\n    type: noul\n    instructions: " + "[" * (MAX_NESTING - 3) + "x" + "]" * (MAX_NESTING - 3)
    )
    assert loads_schema(ok).questions["q"].type == "noul"
    deep = ok.replace("[", "[[", 1).replace("]", "]]", 1)
    with pytest.raises(SchemaError, match="nested deeper"):
        loads_schema(deep)


def test_directory_and_fifo_are_refused(tmp_path: Path):
    import os

    d = tmp_path / "x.yaml"
    d.mkdir()
    with pytest.raises(SchemaError, match="a directory"):
        load_schema(d)
    fifo = tmp_path / "pipe.yaml"
    os.mkfifo(fifo)
    with pytest.raises(SchemaError, match="not a regular file"):
        load_schema(fifo)


@pytest.mark.parametrize(
    "value, match",
    [
        ("{when: 2024-01-01}", "date"),
        ("{x: .nan}", "not a JSON number"),
        ("{1: a, b: c}", "not a string"),
        ("!!binary aGVsbG8=", "bytes"),
    ],
)
def test_values_json_cannot_carry_are_refused(value: str, match: str):
    with pytest.raises(SchemaError, match=match):
        loads_schema(f"questions:\n  q:\n    type: noul\n    instructions: {value}\n")
