"""System One question map: typed questions, limit profiles, canonical form and hash.

A schema file is YAML or JSON in exactly the System One shape, so its ``questions`` can be pasted
into a request::

    name: banking77-intent          # optional, not sent
    description: ...                # optional, not sent
    questions:
      intent:
        type: choice
        instructions: Which intent does the customer message express?
        criteria: {card_arrival: "The customer asks when their card will arrive", ...}

Option order matters: the canonical form keeps the order of choice options and score levels,
because position-sensitive models answer differently when it changes (peers.md). Question order
and formatting do not change :func:`schema_hash`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# The question model, canonical form and hash live in the dependency-light runtime distribution
# (a production service hashes and checks questions exactly as the workbench does); re-exported here.
from workbench_runtime.questions import (  # noqa: F401
    CANONICAL_VERSION,
    Choice,
    DecisionSchema,
    JSONValue,
    Noul,
    Question,
    Score,
    canonical_json,
    option_ids,
    schema_hash,
)

from workbench.errors import SchemaError, WorkbenchError
from workbench.wording import article

#: Deepest nesting of mappings/lists a schema file may use (the System One shape needs 4; JSON
#: instructions a few more). Deeper input is refused before a recursive parser can overflow.
MAX_NESTING = 64
#: Largest schema, counted after YAML aliases are expanded: one unit per node plus one per
#: character of every string. A 483-byte alias bomb expands to ~10^8 units; real schemas to <10^5.
MAX_EXPANDED_UNITS = 4_000_000
#: Largest schema file read at all (bytes).
MAX_SCHEMA_BYTES = 16 * 1024 * 1024


def load_schema(path: str | Path) -> DecisionSchema:
    """Read a YAML or JSON schema file. Raises :class:`SchemaError` naming the file and field.

    Only regular files are read (a directory, FIFO or device is refused before reading it).
    """
    path = Path(path)
    text = read_text_file(
        path,
        what="schema file",
        max_bytes=MAX_SCHEMA_BYTES,
        error=SchemaError,
        kind_hint="give the path of a .yaml or .json schema file",
        size_hint="a decision schema is a few kilobytes; check the path",
    )
    fmt = "json" if path.suffix.lower() == ".json" else "yaml"
    return loads_schema(text, source=str(path), fmt=fmt)


def read_text_file(
    path: str | Path,
    *,
    what: str,
    max_bytes: int,
    error: type[WorkbenchError] = SchemaError,
    kind_hint: str = "give the path of a regular file",
    size_hint: str = "check the path",
) -> str:
    """The UTF-8 text of a regular file of at most ``max_bytes`` bytes; one ``error`` line otherwise.

    The file is opened without blocking and checked on its descriptor: a directory, FIFO, socket or
    device (``/dev/zero``) is refused before anything is read, and at most ``max_bytes + 1`` bytes are
    ever read (a file that grows while being read is refused too).
    """
    import os
    import stat

    path = Path(path)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
    except FileNotFoundError:
        raise error(f"{path}: {what} does not exist", hint="check the path") from None
    except OSError as exc:
        raise error(f"{path}: cannot read: {exc.strerror}", hint="check the path and permissions") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kind = "a directory" if stat.S_ISDIR(st.st_mode) else "not a regular file"
            raise error(f"{path}: {kind}", hint=kind_hint)
        if st.st_size > max_bytes:
            raise error(f"{path}: {st.st_size:,} bytes is too large for a {what} (limit {max_bytes:,})", hint=size_hint)
        chunks, size = [], 0
        while size <= max_bytes:
            chunk = os.read(fd, max_bytes + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > max_bytes:
            raise error(f"{path}: more than {max_bytes:,} bytes is too large for a {what}", hint=size_hint)
    except OSError as exc:
        raise error(f"{path}: cannot read: {exc.strerror}", hint="check the path and permissions") from None
    finally:
        os.close(fd)
    try:
        return b"".join(chunks).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise error(f"{path}: not valid UTF-8 (byte {exc.start})", hint="save the file as UTF-8") from None


def loads_schema(text: str, *, source: str = "<schema>", fmt: str = "yaml") -> DecisionSchema:
    """Parse schema text (``fmt`` ``"yaml"`` or ``"json"``) into a :class:`DecisionSchema`.

    Every failure is one :class:`SchemaError`: syntax, duplicate keys (named with their line),
    nesting deeper than :data:`MAX_NESTING`, alias expansion beyond :data:`MAX_EXPANDED_UNITS`,
    values JSON cannot carry (dates, binary, NaN), and shape errors.
    """
    data = parse_json_text(text, source=source) if fmt == "json" else parse_yaml_text(text, source=source)
    check_json_shape(data, source=source, limit=max(MAX_EXPANDED_UNITS, 2 * len(text)))
    return DecisionSchema.from_dict(data, source=source)


class _DuplicateKey(Exception):
    def __init__(self, key: str, line: int | None = None):
        self.key, self.line = key, line


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict:
    out: dict = {}
    for k, v in pairs:
        if k in out:
            raise _DuplicateKey(k)
        out[k] = v
    return out


def _json_duplicate_line(text: str, key: str) -> int | None:
    """Line of the JSON object holding the duplicate ``key`` (pure-Python scanner; error path only)."""
    import json.decoder
    import json.scanner

    decoder = json.JSONDecoder()

    def parse_object(s_and_end, strict, scan_once, object_hook, object_pairs_hook, memo=None):
        start = s_and_end[1] - 1

        def hook(pairs):
            keys = [k for k, _ in pairs]
            if key in keys and keys.count(key) > 1:
                raise _DuplicateKey(key, text.count("\n", 0, start) + 1)
            return dict(pairs)

        return json.decoder.JSONObject(s_and_end, strict, scan_once, object_hook, hook, memo)

    decoder.parse_object = parse_object  # type: ignore[attr-defined]
    decoder.scan_once = json.scanner.py_make_scanner(decoder)  # type: ignore[attr-defined]
    try:
        decoder.decode(text)
    except _DuplicateKey as dup:
        return dup.line
    except (RecursionError, ValueError):
        return None
    return None


def parse_json_text(text: str, *, source: str = "<json>", error: type[WorkbenchError] = SchemaError) -> Any:
    """``json.loads`` that refuses duplicate keys and deep nesting with one ``error`` (a WorkbenchError)."""
    try:
        return json.loads(text, object_pairs_hook=_unique_pairs)
    except _DuplicateKey as dup:
        line = _json_duplicate_line(text, dup.key)
        where = f" in the object starting at line {line}" if line else ""
        raise error(
            f"{source}: duplicate key {dup.key!r}{where}", hint="each key may appear once; remove or rename one"
        ) from None
    except json.JSONDecodeError as exc:
        raise error(
            f"{source}: cannot parse JSON: {exc.msg} at line {exc.lineno}", hint="fix the JSON syntax"
        ) from None
    except RecursionError:
        raise error(f"{source}: nested too deeply to parse", hint=f"at most {MAX_NESTING} levels") from None
    except ValueError as exc:  # e.g. an integer longer than Python's digit limit
        raise error(f"{source}: cannot parse JSON: {_one_line(exc)}", hint="fix the value") from None


def _one_line(exc: object) -> str:
    return " ".join(str(exc).split())[:200]


class _TooDeep(Exception):
    def __init__(self, line: int):
        self.line = line


_YAML_LOADERS: dict[bool, Any] = {}


def _yaml_loader(bool_keys: bool = True) -> Any:
    """A SafeLoader that counts nesting and refuses duplicate keys (built lazily: the runtime never loads YAML).

    Keys are compared as constructed, so ``on:`` and ``true:`` (both the boolean true in YAML 1.1) or
    ``1:`` and ``0x1:`` are duplicates too. With ``bool_keys=False`` an unquoted key that YAML 1.1 would read
    as a boolean (``on``, ``yes``, ``off`` …) stays the text it is.

    Pure-Python on purpose: libyaml's composer recurses in C and segfaults on 100k nested ``[``.
    """
    if bool_keys in _YAML_LOADERS:
        return _YAML_LOADERS[bool_keys]
    import yaml
    from yaml.nodes import MappingNode, ScalarNode

    class StrictSafeLoader(yaml.SafeLoader):
        depth = 0

        def compose_node(self, parent, index):
            self.depth += 1
            try:
                if self.depth > MAX_NESTING + 1:  # +1: the scalar leaf is a node, not a level
                    raise _TooDeep(self.peek_event().start_mark.line + 1)
                return super().compose_node(parent, index)
            finally:
                self.depth -= 1

        def construct_mapping(self, node, deep=False):
            if isinstance(node, MappingNode):
                seen: set[Any] = set()
                for key_node, _ in node.value:
                    if key_node.tag == "tag:yaml.org,2002:merge" or not isinstance(key_node, ScalarNode):
                        continue
                    if not bool_keys and key_node.tag == "tag:yaml.org,2002:bool" and key_node.style is None:
                        key_node.tag = "tag:yaml.org,2002:str"
                    key = self.construct_object(key_node)
                    try:
                        marker = (type(key) is bool, key)  # True and 1 are equal in Python, not in YAML
                        dup = marker in seen
                    except TypeError:  # an unhashable key: the constructor says so below
                        continue
                    if dup:
                        raise _DuplicateKey(str(key_node.value), key_node.start_mark.line + 1)
                    seen.add(marker)
            return super().construct_mapping(node, deep=deep)

    _YAML_LOADERS[bool_keys] = StrictSafeLoader
    return StrictSafeLoader


def parse_yaml_text(
    text: str, *, source: str = "<yaml>", error: type[WorkbenchError] = SchemaError, bool_keys: bool = True
) -> Any:
    """YAML 1.1 safe load that refuses duplicate keys and nesting deeper than :data:`MAX_NESTING` with one
    ``error`` line (any other YAML or constructor failure too); ``bool_keys`` as :func:`_yaml_loader`."""
    import yaml

    try:
        loader = _yaml_loader(bool_keys)(text)  # the reader checks characters here already
        try:
            return loader.get_single_data()
        finally:
            loader.dispose()
    except _DuplicateKey as dup:
        raise error(
            f"{source}: duplicate key {dup.key!r} at line {dup.line}",
            hint="each key may appear once; remove or rename one",
        ) from None
    except _TooDeep as deep:
        raise error(
            f"{source}: nested deeper than {MAX_NESTING} levels at line {deep.line}", hint="flatten the structure"
        ) from None
    except WorkbenchError:
        raise
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        what = _one_line(exc.problem or exc.context or "")
        raise error(f"{source}: cannot parse YAML: {what}{where}", hint="fix the YAML syntax") from None
    except yaml.YAMLError as exc:
        raise error(f"{source}: cannot parse YAML: {_one_line(exc)}", hint="fix the YAML syntax") from None
    except RecursionError:
        raise error(f"{source}: nested too deeply to parse", hint=f"at most {MAX_NESTING} levels") from None
    except Exception as exc:  # noqa: BLE001 - PyYAML's constructors raise bare errors on odd scalars ('!!int ' -> IndexError)
        raise error(
            f"{source}: cannot parse YAML: {type(exc).__name__}: {_one_line(exc)}", hint="fix or quote the value"
        ) from None


def check_json_shape(
    data: Any,
    *,
    source: str,
    limit: int = MAX_EXPANDED_UNITS,
    error: type[WorkbenchError] = SchemaError,
    scalars: bool = True,
) -> int:
    """Refuse what JSON cannot send, cycles, nesting deeper than :data:`MAX_NESTING`, and documents whose
    expanded size (aliases followed) exceeds ``limit`` units, with one ``error``. Returns the expanded size.
    ``scalars=False`` leaves the scalars (NaN, dates …) to a later validation that names their field.

    Iterative and memoised by object identity, so an alias bomb is measured without being expanded.
    """
    in_progress = -1
    size: dict[int, int] = {}
    depth: dict[int, int] = {}
    stack: list[tuple[Any, bool]] = [(data, False)]

    def children(obj: Any) -> list[Any]:
        if isinstance(obj, dict):
            for k in obj:
                if not isinstance(k, str):
                    raise error(
                        f"{source}: key {k!r} is {article(type(k).__name__)}, not a string",
                        hint="quote the key (JSON keys are strings)",
                    )
            return [*obj.keys(), *obj.values()]
        return list(obj)

    while stack:
        obj, done = stack.pop()
        if not isinstance(obj, (dict, list)):
            if scalars:
                _check_scalar(obj, source, error)
            continue
        key = id(obj)
        if done:
            total, deepest = 1, 0
            for c in children(obj):
                if isinstance(c, (dict, list)):
                    total += size[id(c)]
                    deepest = max(deepest, depth[id(c)])
                else:
                    total += len(c) + 1 if isinstance(c, str) else 1
            size[key], depth[key] = total, deepest + 1
            if total > limit:
                raise error(
                    f"{source}: the document expands to more than {limit:,} nodes and characters "
                    "(YAML aliases repeated too often?)",
                    hint="write the text out once; do not nest aliases",
                )
            if deepest + 1 > MAX_NESTING:
                raise error(f"{source}: nested deeper than {MAX_NESTING} levels", hint="flatten the structure")
            continue
        if key in size:
            if size[key] == in_progress:
                raise error(f"{source}: a YAML alias refers to itself (a cycle)", hint="remove the recursive alias")
            continue
        size[key] = in_progress
        stack.append((obj, True))
        stack.extend((c, False) for c in children(obj))
    return size.get(id(data), 1)


def _check_scalar(value: Any, source: str, error: type[WorkbenchError] = SchemaError) -> None:
    if value is None or isinstance(value, (str, bool, int)):
        return
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise error(f"{source}: {value!r} is not a JSON number", hint="use a finite number or a string")
        return
    raise error(
        f"{source}: {value!r} is {article(type(value).__name__)}, which JSON cannot carry",
        hint="quote it as a string (YAML reads unquoted dates and !!binary as other types)",
    )


# -- limit profiles -----------------------------------------------------------------------------
@dataclass(frozen=True)
class LimitProfile:
    """What one provider family accepts in one request (providers.md §1, §3)."""

    name: str
    max_questions: int | None
    min_options: int
    max_options: int | None
    min_levels: int
    max_levels: int | None
    id_pattern: str | None = r"[A-Za-z0-9_.-]{1,100}"
    max_total_options: int | None = None


PROFILES: dict[str, LimitProfile] = {
    p.name: p
    for p in [
        LimitProfile("cloudflare-clef", 64, 2, 255, 2, 10),
        LimitProfile("typesafe-jev", None, 2, 255, 2, 10),
        LimitProfile("perplexity", 128, 1, 255, 1, 10),
        LimitProfile("laya", 64, 2, 100, 1, 32, max_total_options=512),
        LimitProfile("subq", 128, 2, 255, 2, 10),
        LimitProfile("openai", 200, 2, 255, 2, 10),
        LimitProfile("self-hosted", None, 1, None, 1, None, id_pattern=None),
        # Strictest common profile: a schema valid here is accepted by every family above.
        LimitProfile("default", 64, 2, 100, 2, 10, max_total_options=512),
    ]
}


@dataclass(frozen=True)
class Violation:
    question_id: str | None
    field: str
    message: str
    limit: str

    def __str__(self) -> str:
        where = f"question {self.question_id!r}" if self.question_id else "schema"
        return f"{where}: {self.field}: {self.message} (limit: {self.limit})"


def validate_limits(schema: DecisionSchema, profile: str | LimitProfile = "default") -> list[Violation]:
    """Every way ``schema`` breaks ``profile``; an empty list means it is accepted."""
    if isinstance(profile, str):
        if profile not in PROFILES:
            raise SchemaError(f"unknown limit profile {profile!r}", hint=f"use one of {', '.join(sorted(PROFILES))}")
        profile = PROFILES[profile]
    out: list[Violation] = []
    n_q = len(schema.questions)
    if profile.max_questions is not None and n_q > profile.max_questions:
        out.append(Violation(None, "questions", f"{n_q} questions", f"{profile.name}: at most {profile.max_questions}"))
    total = 0
    counted = {  # question type: its fewest and most criteria, and what they are
        "choice": (profile.min_options, profile.max_options, "options"),
        "score": (profile.min_levels, profile.max_levels, "levels"),
    }
    for qid, q in schema.questions.items():
        if profile.id_pattern and not re.fullmatch(profile.id_pattern, qid):
            out.append(
                Violation(
                    qid,
                    "id",
                    "id must be letters, digits, '_', '.', '-' and at most 100 characters",
                    f"{profile.name}: {profile.id_pattern}",
                )
            )
        if q.type == "choice" or q.type == "score":
            low, high, unit = counted[q.type]
            n = len(q.criteria)
            total += n
            if n < low or (high is not None and n > high):
                out.append(Violation(qid, "criteria", f"{n} {unit}", f"{profile.name}: {low}–{high or '∞'} {unit}"))
            if q.type == "choice" and profile.id_pattern is not None:
                bad = [k for k in q.criteria if not str(k).strip()]
                if bad:
                    out.append(Violation(qid, "criteria", "empty option id", "non-empty option ids"))
        else:
            total += 2
    if profile.max_total_options is not None and total > profile.max_total_options:
        out.append(
            Violation(
                None, "criteria", f"{total} options in total", f"{profile.name}: at most {profile.max_total_options}"
            )
        )
    return out


def check_limits(schema: DecisionSchema, profile: str | LimitProfile = "default", *, source: str = "schema") -> None:
    """Raise :class:`SchemaError` with the first violation (and a count of the others)."""
    violations = validate_limits(schema, profile)
    if violations:
        more = f" (+{len(violations) - 1} more)" if len(violations) > 1 else ""
        raise SchemaError(
            f"{source}: {violations[0]}{more}", hint="change the schema or pick the provider's own `profile`"
        )
