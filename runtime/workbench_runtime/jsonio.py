"""Strict JSON reading for files and responses from outside: duplicate keys and NaN are not let through.

Python's :func:`json.loads` keeps the last of two equal keys and reads ``NaN``/``Infinity``; in a
policy file or a model response either one means two readers can see two different documents.

- :func:`loads_strict` raises :class:`StrictJSONError` (a ``ValueError``) on a duplicate key,
  ``NaN``/``Infinity``, an integer too long to convert, or nesting deeper than Python can parse.
- :func:`loads_marked` keeps going and returns objects that had duplicate keys as
  :class:`DuplicateKeysDict` (last value wins, ``.duplicates`` names the keys), so a batch of
  responses can refuse only the response that holds one.
"""

from __future__ import annotations

import json
from typing import Any


class StrictJSONError(ValueError):
    """The text is not JSON this workbench accepts; ``str(err)`` is one line."""


class DuplicateKeysDict(dict):
    """A JSON object that named some keys more than once (``duplicates``); the last value is kept."""

    duplicates: tuple[str, ...] = ()


def _reject_constant(name: str) -> Any:
    raise StrictJSONError(f"{name} is not a JSON number")


def _pairs_strict(pairs: list[tuple[str, Any]]) -> dict:
    out = dict(pairs)  # in C; a key named twice leaves fewer entries than pairs
    if len(out) == len(pairs):
        return out
    seen: set[str] = set()
    for k, _ in pairs:
        if k in seen:
            raise StrictJSONError(f"duplicate key {k[:60]!r}")
        seen.add(k)
    return out  # pragma: no cover - unreachable


def _pairs_marked(pairs: list[tuple[str, Any]]) -> dict:
    out: dict = {}
    dups: list[str] = []
    for k, v in pairs:
        if k in out:
            dups.append(k)
        out[k] = v
    if not dups:
        return out
    marked = DuplicateKeysDict(out)
    marked.duplicates = tuple(dups)
    return marked


#: One decoder per hook, built once (``json.loads`` with keyword arguments builds one per call).
_DECODERS = {
    hook: json.JSONDecoder(object_pairs_hook=hook, parse_constant=_reject_constant)
    for hook in (_pairs_strict, _pairs_marked)
}


def _loads(text: str | bytes, hook) -> Any:
    try:
        if not isinstance(text, str):  # what json.loads does with bytes (UTF-8/16/32 by the first bytes)
            if not isinstance(text, (bytes, bytearray)):
                raise TypeError(f"the JSON object must be str, bytes or bytearray, not {type(text).__name__}")
            text = text.decode(json.detect_encoding(text), "surrogatepass")
        return _DECODERS[hook].decode(text)
    except StrictJSONError:
        raise
    except json.JSONDecodeError as exc:
        raise StrictJSONError(f"not JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    except RecursionError:
        raise StrictJSONError("not JSON this reader accepts: nested too deeply") from None
    except (ValueError, TypeError) as exc:  # e.g. an integer over the int-to-str digit limit, undecodable bytes
        raise StrictJSONError(f"not JSON this reader accepts: {str(exc).splitlines()[0][:120]}") from None


def loads_strict(text: str | bytes) -> Any:
    """Parse ``text``; raise :class:`StrictJSONError` on duplicate keys, NaN/Infinity or malformed input."""
    return _loads(text, _pairs_strict)


def loads_marked(text: str | bytes) -> Any:
    """Parse ``text``; objects with duplicate keys come back as :class:`DuplicateKeysDict` (NaN still raises)."""
    return _loads(text, _pairs_marked)


def duplicate_keys(obj: Any) -> tuple[str, ...]:
    """Keys named twice in this one object (not its children), as marked by :func:`loads_marked`."""
    return obj.duplicates if isinstance(obj, DuplicateKeysDict) else ()
