"""Fuzz: a requirements file for `workbench gate` ends in a valid RequirementsFile or one RequirementsError line
(issue 25). Never a traceback, and never a lenient accept.

Three generators: documents built from good and hostile values (YAML or JSON text, written by a dumper or by
hand so that YAML's own typing — ``yes``, ``0x1F``, ``.nan``, dates, ``on:`` keys — comes into play),
good documents with a key written twice (must be refused), and good documents mutated character by
character with the syntax that has broken YAML readers before.

"Not lenient" is checked against an independent reading of the same text with plain PyYAML: an accepted
file has no key twice in any mapping, every bound is a finite number (not text, not a boolean), every metric
is one the gate knows, and the values the gate will use are the values in the file.

Examples per test: ``WORKBENCH_FUZZ_EXAMPLES`` (300 in the suite; 2,000 for the bench-sized run), see budget.py.
"""

from __future__ import annotations

import json
import math
import string

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from tests.conftest import run_cli
from tests.fuzz import fuzz_settings
from workbench.errors import RequirementsError
from workbench.workflows.gate import KNOWN_METRICS, RequirementsFile, loads_requirements

GOOD_ITEM = {"question": "intent", "metric": "accuracy", "min": 0.8}
FIELDS = ["question", "metric", "min", "max", "on", "policy", "name"]
TOP = ["split", "level", "n_boot", "seed", "requirements"]

hostile_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**6), max_value=10**6),
    st.integers(min_value=10**18, max_value=10**30),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(["0.9", "yes", "on", "", " ", "NaN", "inf", "2024-01-01", "accuracy", "Accuracy", "low", "\n"]),
    st.text(max_size=8),
)
good_values = {
    "question": st.sampled_from(["intent", "urgent", "q"]),
    "metric": st.sampled_from(list(KNOWN_METRICS) + ["acuracy", "ece", "AUC"]),
    "min": st.floats(min_value=-1, max_value=2, allow_nan=False),
    "max": st.floats(min_value=-1, max_value=2, allow_nan=False),
    "on": st.sampled_from(["value", "low", "high"]),
    "policy": st.sampled_from(["policy.json", "../p.json"]),
    "name": st.text(max_size=10),
    "split": st.sampled_from(["test", "calibration"]),
    "level": st.floats(min_value=0.01, max_value=0.99),
    "n_boot": st.integers(min_value=50, max_value=5000),
    "seed": st.integers(min_value=0, max_value=2**32),
}


def _value(key: str):
    return st.one_of(good_values[key], good_values[key], hostile_scalars) if key in good_values else hostile_scalars


@st.composite
def documents(draw):
    """A good document (good values of every field it has), then 0-3 edits: a field replaced by a hostile
    value, added, or deleted, at the top level or in a requirement (about a third stay valid)."""
    doc: dict = {k: draw(good_values[k]) for k in draw(st.lists(st.sampled_from(TOP[:4]), max_size=4, unique=True))}
    reqs = []
    for _ in range(draw(st.integers(1, 3))):
        it = {"question": draw(good_values["question"]), "metric": draw(st.sampled_from(list(KNOWN_METRICS)))}
        it[draw(st.sampled_from(["min", "max"]))] = draw(good_values["min"])
        for k in draw(st.lists(st.sampled_from(["on", "name"]), max_size=2, unique=True)):
            it[k] = draw(good_values[k])
        if it["metric"] in ("coverage_at_policy", "error_at_policy"):
            it["policy"] = draw(good_values["policy"])
        reqs.append(it)
    doc["requirements"] = reqs
    for _ in range(draw(st.integers(0, 3))):
        target = draw(st.sampled_from(["top", "item"]))
        obj = doc if target == "top" else reqs[draw(st.integers(0, len(reqs) - 1))]
        keys = [*TOP, "extra"] if target == "top" else [*FIELDS, "extra", "true", "yes"]
        key = draw(st.sampled_from(keys))
        how = draw(st.sampled_from(["hostile", "good", "delete"]))
        if how == "delete":
            obj.pop(key, None)
        elif how == "good" and key in good_values:
            obj[key] = draw(good_values[key])
        elif key == "requirements":
            doc["requirements"] = draw(st.one_of(hostile_scalars, st.lists(hostile_scalars, max_size=2)))
        else:
            obj[key] = draw(hostile_scalars)
    return doc


def _plain(v) -> str:
    """A scalar written by hand, unquoted where YAML would type it (the point: YAML 1.1's own readings)."""
    if isinstance(v, float) and not math.isfinite(v):
        return ".nan" if v != v else (".inf" if v > 0 else "-.inf")
    if isinstance(v, str):
        return v if v and all(c in string.ascii_letters + string.digits + "-._" for c in v) else json.dumps(v)
    return json.dumps(v)


def _by_hand(doc: dict) -> str:
    lines = []
    for k, v in doc.items():
        if k == "requirements" and isinstance(v, list):
            lines.append("requirements:")
            for it in v:
                if isinstance(it, dict):
                    lines.append("  - {" + ", ".join(f"{kk}: {_plain(vv)}" for kk, vv in it.items()) + "}")
                else:
                    lines.append(f"  - {_plain(it)}")
        else:
            lines.append(f"{k}: {_plain(v)}")
    return "\n".join(lines) + "\n"


def _text(doc: dict, how: str) -> str:
    if how == "json":
        return json.dumps(doc)  # NaN/Infinity tokens: YAML reads them as text, which must then be refused
    if how == "yaml":
        return yaml.safe_dump(doc, sort_keys=False)
    return _by_hand(doc)


def _mapping_counts_match(node) -> bool:
    """Every mapping of the composed text has as many distinct keys (as plain PyYAML builds them) as key nodes."""
    loader = yaml.SafeLoader("")
    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, yaml.MappingNode):
            keys = [loader.construct_object(k, deep=True) for k, _ in n.value]
            hashable = [k for k in keys if not isinstance(k, (list, dict))]
            if len({(type(k) is bool, k) for k in hashable}) != len(hashable):
                return False
            stack += [v for _, v in n.value]
        elif isinstance(n, yaml.SequenceNode):
            stack += list(n.value)
    return True


def _finite_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def check(text: str, *, must_refuse: bool = False) -> str:
    """The property; returns "accepted" or "refused"."""
    try:
        reqs = loads_requirements(text, source="fuzz.yaml")
    except RequirementsError as exc:
        msg = str(exc)
        assert msg.startswith("fuzz.yaml: ") and "\n" not in msg and "\r" not in msg, repr(msg)
        return "refused"
    assert not must_refuse, text
    assert isinstance(reqs, RequirementsFile)
    # the independent reading
    assert _mapping_counts_match(yaml.compose(text)), f"a key twice was accepted: {text!r}"
    plain = yaml.safe_load(text)
    assert isinstance(plain, dict)
    assert set(plain) <= set(TOP), plain
    for key, default in (("split", "test"), ("level", 0.95), ("n_boot", 1000), ("seed", 0)):
        v = plain.get(key, default)
        assert v == getattr(reqs, key) and type(v) is not bool, (key, v)
    assert isinstance(reqs.split, str) and reqs.split
    assert _finite_number(plain.get("level", 0.95)) and 0 < reqs.level < 1
    assert type(plain.get("n_boot", 1000)) is int and type(plain.get("seed", 0)) is int and reqs.seed >= 0
    assert isinstance(plain["requirements"], list) and len(plain["requirements"]) == len(reqs.requirements) >= 1
    for item, req in zip(plain["requirements"], reqs.requirements):
        assert isinstance(item, dict)
        on = item.pop(True, None)  # plain YAML 1.1 reads the key `on` as true
        if on is not None:
            item["on"] = on
        assert set(item) <= set(FIELDS), item
        assert req.metric in KNOWN_METRICS and item["metric"] == req.metric
        assert isinstance(item["question"], str) and item["question"] == req.question != ""
        bounds = [k for k in ("min", "max") if item.get(k) is not None]
        assert len(bounds) == 1 and _finite_number(item[bounds[0]]) and float(item[bounds[0]]) == req.bound, item
        assert item.get("on") in (None, "value", "low", "high") and item.get("on") == req.on
        assert (item.get("policy") is not None) == (req.metric in ("coverage_at_policy", "error_at_policy"))
    return "accepted"


@fuzz_settings()
@given(documents(), st.sampled_from(["json", "yaml", "hand"]))
def test_built_documents_are_valid_or_one_line(doc, how):
    check(_text(doc, how))


def test_good_documents_are_accepted():
    """The generator's good documents pass (the property is not vacuous)."""
    doc = {"split": "test", "seed": 3, "requirements": [dict(GOOD_ITEM), {**GOOD_ITEM, "on": "value"}]}
    for how in ("json", "yaml", "hand"):
        assert check(_text(doc, how)) == "accepted"


@st.composite
def duplicated(draw):
    """A good file in flow style with one key of one mapping written a second time (any value)."""
    item = dict(GOOD_ITEM)
    if draw(st.booleans()):
        item["on"] = draw(st.sampled_from(["value", "low", "high"]))
    top = {"seed": draw(st.integers(0, 9)), "split": "test"}
    where = draw(st.sampled_from(["item", "top", "requirements"]))
    body = "{" + ", ".join(f"{k}: {_plain(v)}" for k, v in item.items())
    head = "".join(f"{k}: {_plain(v)}\n" for k, v in top.items())
    if where == "item":
        key = draw(st.sampled_from(list(item)))
        body += f", {key}: {_plain(draw(_value(key)))}"
    elif where == "top":
        key = draw(st.sampled_from(list(top)))
        head += f"{key}: {_plain(draw(_value(key)))}\n"
    text = head + "requirements:\n  - " + body + "}\n"
    if where == "requirements":
        text += "requirements:\n  - {question: intent, metric: accuracy, min: 0.0}\n"
    return text


@fuzz_settings()
@given(duplicated())
def test_a_key_written_twice_is_always_refused(text):
    check(text, must_refuse=True)


FRAGMENTS = [
    "requirements:", "\n", "\n  - ", "  ", "{", "}", "[", "]", ", ", ": ", "min: ", "max: ", "on: ", "metric: ",
    "question: ", "seed: ", "level: ", "n_boot: ", "accuracy", "intent", "0.5", "-1", ".nan", ".inf", "1e400",
    "0x1F", "yes", "~", "&a ", "*a", "<<: ", "!!str ", "!!float ", "!!int ", "!!binary ", "!!python/object:os.system ",
    "? ", "|\n", ">\n", "# c", "\t", "---\n", "...\n", "\ufeff", "\x00", "é", "9" * 400, "'x'", '"y"',
]  # fmt: skip
GOOD_TEXT = "split: test\nseed: 1\nrequirements:\n  - {question: intent, metric: accuracy, min: 0.8, on: low}\n"


@st.composite
def mutated(draw):
    text = GOOD_TEXT
    for _ in range(draw(st.integers(1, 4))):
        i = draw(st.integers(0, len(text)))
        j = min(len(text), i + draw(st.integers(0, 6)))
        text = text[:i] + draw(st.sampled_from(["", *FRAGMENTS])) + text[j:]
    return text


@fuzz_settings()
@given(st.one_of(mutated(), st.lists(st.sampled_from(FRAGMENTS), max_size=30).map("".join)))
def test_mutated_text_is_valid_or_one_line(text):
    check(text)


@pytest.mark.slow
@fuzz_settings(scale=1 / 20)
@given(st.one_of(mutated(), duplicated(), st.builds(_text, documents(), st.sampled_from(["json", "hand"]))))
def test_the_cli_exits_2_with_one_line_on_any_of_them(tmp_path_factory, text):
    """Through the real CLI (a sample): a refused file, or an accepted one on a store that does not exist,
    is exit 2 and one line — never a traceback (exit 1)."""
    tmp = tmp_path_factory.mktemp("fz")
    (tmp / "r.yaml").write_text(text, encoding="utf-8")
    r = run_cli("gate", "run-x", "-r", str(tmp / "r.yaml"), db=tmp / "none.duckdb", timeout=120)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, (text, r.stderr[-800:])
    assert "Traceback" not in r.stderr
