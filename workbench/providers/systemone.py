"""The plain System One dialect (providers.md §2): TypeSafe Jev, OpenRouter, Perplexity, SubQ,
Sarvam, Laya, XOR and any self-hosted ``/v1/systemone`` server (Ollama, llama.cpp, the emulator).

Request ``{model, state, questions[, images]}``; response ``{model, answers, usage}``. Vendors
differ only in URL, auth header, request-id header, limits and how images travel: Perplexity
has no ``images`` field and takes them as ``image_url`` parts appended to an array ``state``
(§3.6); the others use the Clef ``images`` extension.
"""

from __future__ import annotations

import json
from typing import Any

import httpx

from workbench.providers.base import DecisionRequest, ErrorKind, ProviderError
from workbench.providers.http import HttpProvider


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def wire_state(state: Any) -> Any:
    """State as sent: numbers and booleans become text (Clef refuses bare numbers, §3.1/§3.3)."""
    if isinstance(state, bool):
        return "true" if state else "false"
    if isinstance(state, (int, float)):
        return str(state)
    if state is None:
        return ""
    return state


class SystemOneProvider(HttpProvider):
    """One System One endpoint. ``images_in_state=True`` is Perplexity's way of sending images."""

    dialect = "systemone"

    def __init__(self, *args: Any, images_in_state: bool = False, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.images_in_state = images_in_state

    def build_body(self, request: DecisionRequest) -> dict:
        state = wire_state(request.state)
        body: dict[str, Any] = {}
        if self.model is not None:
            body["model"] = self.model
        if request.images and self.images_in_state:
            parts = [] if state == "" else [state]
            parts += [{"type": "image_url", "image_url": {"url": img}} for img in request.images]
            state = parts
        body["state"] = state
        body["questions"] = request.schema.to_wire()
        if request.images and not self.images_in_state:
            body["images"] = list(request.images)
        return body

    def render_body(self, request: DecisionRequest) -> str:
        """:meth:`build_body` as compact JSON, with the ``questions`` text rendered once per schema.

        Same text as ``json.dumps(build_body(request))`` (tests check it); only a subclass that
        overrides :meth:`build_body`, or Perplexity's images-in-state form, takes the generic path.
        """
        if type(self).build_body is not SystemOneProvider.build_body or (request.images and self.images_in_state):
            return super().render_body(request)
        parts = [] if self.model is None else ['"model":' + _dumps(self.model)]
        parts.append('"state":' + _dumps(wire_state(request.state)))
        parts.append('"questions":' + self._schema_facts(request.schema)[0])
        if request.images:
            parts.append('"images":' + _dumps(list(request.images)))
        return "{" + ",".join(parts) + "}"

    def to_system_one(self, data: Any, response: httpx.Response, request: DecisionRequest) -> dict:
        if not isinstance(data, dict) or not isinstance(data.get("answers"), dict):
            raise ProviderError(
                ErrorKind.MALFORMED, f"{self.spec}: response has no 'answers' object", status=response.status_code
            )
        return data
