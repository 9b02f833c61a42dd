"""Perplexity Decisions (providers.md §3.6): System One on ``/v1/decisions`` with images in the state.

Perplexity has no ``images`` field: images travel as ``image_url`` parts appended to an array
``state``. ``model`` is required, the limits are Perplexity's own profile (8 images), and a 429
carries ``Retry-After: 1``. Runs record the dialect as ``systemone`` (the format it varies).
OpenAI Decisions shares the path; the emulator tells them apart by the ``questions`` shape.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from workbench.providers.base import DecisionRequest
from workbench.providers.dialects.base import Error, Reject, Reply, Served
from workbench.providers.dialects.systemone import Limits, SystemOne, check_images, validate_system_one, wire_state
from workbench.providers.http import HttpProvider

PERPLEXITY_LIMITS = Limits.from_profile("perplexity", max_images=8)


class Perplexity(SystemOne):
    name = "perplexity"
    recorded = "systemone"
    paths = frozenset({"/v1/decisions"})

    # -- client half -----------------------------------------------------------------------------
    def build_body(self, provider: HttpProvider, request: DecisionRequest) -> dict:
        if not request.images:
            return super().build_body(provider, request)
        state = wire_state(request.state)
        parts: list[Any] = [] if state == "" else [state]
        parts += [{"type": "image_url", "image_url": {"url": img}} for img in request.images]
        body: dict[str, Any] = {} if provider.model is None else {"model": provider.model}
        body["state"] = parts
        body["questions"] = request.schema.to_wire()
        return body

    def render_body(self, provider: HttpProvider, request: DecisionRequest) -> str:
        if request.images:
            return super(SystemOne, self).render_body(provider, request)  # the generic json.dumps
        return super().render_body(provider, request)

    # -- emulator half ---------------------------------------------------------------------------
    def claims(self, body: Any) -> bool:
        return not (isinstance(body, dict) and isinstance(body.get("questions"), list))  # a list is OpenAI's

    def parse_request(self, body: Any, headers: Mapping[str, str], model: str | None) -> Served:
        if not isinstance(body, dict) or not body.get("model"):
            raise Reject("schema", "model is required", ("model",))
        state, questions, _ = validate_system_one(
            body, PERPLEXITY_LIMITS, allowed_fields=frozenset({"model", "state", "questions"})
        )
        image_urls: list = []
        if isinstance(state, list):
            parts = [p for p in state if isinstance(p, dict) and p.get("type") == "image_url"]
            image_urls = [(p.get("image_url") or {}).get("url") for p in parts]
            check_images(image_urls, PERPLEXITY_LIMITS.max_images)
            rest = [p for p in state if p not in parts]
            state = rest[0] if len(rest) == 1 else rest
        return Served(state, questions, image_urls, {"answered_model": body["model"]})

    def render_error(self, e: Error) -> Reply:
        status, body, headers = super().render_error(e)
        if status == 429:
            headers["retry-after"] = "1"  # Perplexity sends Retry-After: 1 (seconds) on 429 (§3.6)
        return status, body, headers
