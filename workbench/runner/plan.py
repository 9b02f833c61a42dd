"""Plan a run: question slices, one work unit per (item, slice), and each unit's cache key.

Cache-key granularity is the request: ``cache_key`` = sha256 over (key-format version, public
provider spec, model, dialect, the exact request body). For HTTP providers the body is the one
their dialect sends (``provider.render_body``, the text on the wire); for in-process
providers it is the System One request. Keys keep the schema's own order — never a sorted
copy — because option order changes answers.

A schema is sent as one request per item unless the provider's ``limits.max_questions`` is
smaller (then it is split into consecutive slices) or ``questions_per_request`` asks for
smaller slices. With ``questions_per_request=1`` every question is its own request, so
changing one question re-asks only that question; with grouped requests, the slice that holds
the changed question is re-asked (its request changed), the others come from the cache.
"""

from __future__ import annotations

import base64
import hashlib
import json
import mimetypes
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from workbench.errors import WorkbenchError
from workbench.providers.base import DecisionRequest
from workbench.schema import DecisionSchema

#: Version of the cache-key recipe; bump it when :func:`cache_key` or :func:`request_json` change.
KEY_VERSION = 2  # 2: the HTTP endpoint's public URL is part of the key


@dataclass(frozen=True)
class QuestionSlice:
    """Questions asked together in one request.

    ``questions_json`` is the ``questions`` object exactly as sent (schema order).
    """

    index: int
    question_ids: tuple[str, ...]
    schema: DecisionSchema
    questions_json: str


@dataclass
class WorkUnit:
    """One request of the run: an item and a question slice."""

    item_id: str
    split: str
    state: Any
    images: tuple[str, ...]
    slice_index: int
    cache_key: str


def _dumps(value: Any) -> str:
    # insertion order kept (no sort_keys): the bytes hashed are the bytes a provider sees
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def plan_slices(
    schema: DecisionSchema, *, max_questions: int | None = None, questions_per_request: int | None = None
) -> list[QuestionSlice]:
    """Split ``schema`` into consecutive slices of at most ``min(max_questions, questions_per_request)``.

    Parameters
    ----------
    schema : DecisionSchema
        The full question map, in file order.
    max_questions : int, optional
        The provider's per-request limit (``provider.limits.max_questions``); None = no limit.
    questions_per_request : int, optional
        The user's choice (``--questions-per-request``); None = as many as allowed.

    Returns
    -------
    slices : list of QuestionSlice
        In schema order; their question ids partition the schema's.
    """
    caps = [c for c in (max_questions, questions_per_request) if c is not None]
    if any(c < 1 for c in caps):
        raise WorkbenchError("questions per request must be at least 1", hint="e.g. `questions_per_request` 1")
    size = min(caps) if caps else len(schema.questions)
    ids = schema.question_ids
    out = []
    for n, start in enumerate(range(0, len(ids), size)):
        chunk = ids[start : start + size]
        out.append(QuestionSlice(n, tuple(chunk), schema.subset(chunk), _dumps(schema.to_wire(chunk))))
    return out


def image_data_url(ref: str) -> str:
    """A data URL for an image reference (a data URL already, or a file path)."""
    if ref[:5].lower() == "data:":
        return ref
    path = Path(ref)
    if not path.exists():
        raise WorkbenchError(f"image {ref!r} does not exist", hint="image paths are relative to the working directory")
    mime = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
    return f"data:{mime};base64,{base64.b64encode(path.read_bytes()).decode()}"


def request_json(state: Any, questions_json: str, *, model: str | None = None, images: Sequence[str] = ()) -> str:
    """The System One request body as sent, as text: ``{"model"?, "state", "questions", "images"?}``."""
    head = f'{{"model":{_dumps(model)},' if model is not None else "{"
    tail = f',"images":{_dumps(list(images))}}}' if images else "}"
    return f'{head}"state":{_dumps(state)},"questions":{questions_json}{tail}'


def cache_key(spec: str, model: str | None, dialect: str | None, body: str, *, item_id: str | None = None) -> str:
    """sha256 hex digest identifying one call.

    Parameters
    ----------
    spec : str
        Public provider spec (no secrets), e.g. ``cloudflare:clef``, followed by ``@`` and the
        endpoint's public URL for HTTP providers (an emulator's answers are not the service's).
    model, dialect : str or None
        What answers and how it is asked; anything that can change the answer is in the key.
    body : str
        :func:`request_json` output — the exact request.
    item_id : str, optional
        For providers whose answer depends on the item rather than the request (replay).
    """
    head = "\x1f".join([f"wb-call-v{KEY_VERSION}", spec, model or "", dialect or "", item_id or ""])
    return hashlib.sha256((head + "\x1e" + body).encode("utf-8")).hexdigest()


def build_units(
    items,
    slices: Sequence[QuestionSlice],
    *,
    spec: str,
    model: str | None,
    dialect: str | None,
    keyed_by_item: bool = False,
    render: Callable[[DecisionRequest], str] | None = None,
) -> list[WorkUnit]:
    """One :class:`WorkUnit` per (item, slice), item-major (all slices of an item together).

    ``items`` is the frame of :func:`workbench.store.datasets.load_items` (item_id, state,
    images, split). ``render`` turns a request into the exact body text the provider sends
    (HTTP dialects); without it, or when it refuses, the System One form of :func:`request_json`
    is hashed.
    """
    out: list[WorkUnit] = []
    ids = items["item_id"].tolist()
    states = items["state"].tolist()
    splits = items["split"].tolist()
    images_col = items["images"].tolist() if "images" in items else [None] * len(ids)
    for item_id, state, split, imgs in zip(ids, states, splits, images_col):
        images: tuple[str, ...] = ()
        if isinstance(imgs, (list, tuple, np.ndarray)) and len(imgs):
            images = tuple(image_data_url(str(r)) for r in imgs)
        for s in slices:
            body = None
            if render is not None:
                try:
                    body = render(DecisionRequest(schema=s.schema, state=state, images=images, item_id=item_id))
                except Exception:  # refused locally (e.g. a bad image): it will fail the same way when sent
                    body = None
            if body is None:
                body = request_json(state, s.questions_json, model=model, images=images)
            key = cache_key(spec, model, dialect, body, item_id=item_id if keyed_by_item else None)
            out.append(WorkUnit(item_id, split, state, images, s.index, key))
    return out
