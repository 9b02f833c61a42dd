"""What the emulator does wrong, and how slowly: the fault and latency configuration.

Fault draws and latencies are seeded per request by the server (see :mod:`workbench.emulator.server`),
so a run is reproducible while a retry of the same body gets a fresh draw.
"""

from __future__ import annotations

import math
import random
from dataclasses import asdict, dataclass, fields
from typing import Any

#: Cloudflare's published per-model latency (median, p95) in ms (providers.md §3.1 / §6.1).
PUBLISHED_LATENCY_MS: dict[str, tuple[float, float]] = {
    "clef": (209.3, 238.6),
    "clef-flash": (38.8, 122.4),
    "jev": (524.1, 536.0),
    "laya": (5.8, 222.5),
}
_Z95 = 1.6448536269514722  # standard normal 95th percentile

_FAULT_ORDER = ("rate_limit", "quota", "server_error", "overloaded", "timeout", "reset", "malformed")


@dataclass
class FaultConfig:
    """What the emulator does wrong, and how slowly. Fractions are per request, in [0, 1]."""

    latency_ms: float = 0.0  # median (or fixed) added latency
    latency_p95_ms: float | None = None  # lognormal when set (> latency_ms), fixed otherwise
    latency_profile: str | None = None  # "published": per-model figures, overriding latency_ms
    rate_limit: float = 0.0  # 429 / 3040 capacity temporarily exceeded
    quota: float = 0.0  # 429 / 4006 daily allocation used up
    server_error: float = 0.0  # 500
    overloaded: float = 0.0  # 529 / 5012 inference failed
    timeout: float = 0.0  # sleep timeout_sleep_s before answering
    reset: float = 0.0  # TCP reset, no response
    malformed: float = 0.0  # 200 with a truncated JSON body
    refusal: float = 0.0  # OpenAI dialect: per-question {"type": "refusal"}
    truncate_state_tokens: int | None = None  # silently read only the first N state tokens
    # Position bias (not a fault, a model flaw, switchable like one): each choice answer becomes
    # ``(1 - b) * p + b * [1, 0, ..., 0]``, i.e. the option listed first gets share ``b`` of the mass
    # on top of its own. 0 (default) is position-blind; robustness probes (``option_order``) find it.
    position_bias: float = 0.0
    force_status: int | None = None  # answer every valid request with this HTTP error status
    force_code: int | None = None  # ... and this vendor code (e.g. 403 / None, 408, 402)
    timeout_sleep_s: float = 30.0
    seed: int = 0

    def validate(self) -> FaultConfig:
        for name in (*_FAULT_ORDER, "refusal"):
            v = getattr(self, name)
            if not (0.0 <= float(v) <= 1.0):
                raise ValueError(f"fault fraction {name}={v} is outside [0, 1]")
        if sum(getattr(self, n) for n in _FAULT_ORDER) > 1.0 + 1e-9:
            raise ValueError("fault fractions add up to more than 1")
        if self.latency_ms < 0 or (self.latency_p95_ms is not None and self.latency_p95_ms < self.latency_ms):
            raise ValueError("latency must be >= 0 and p95 >= median")
        if self.latency_profile not in (None, "published"):
            raise ValueError("latency_profile must be 'published' or None")
        if self.force_status is not None and not (400 <= int(self.force_status) <= 599):
            raise ValueError("force_status must be an HTTP error status (400-599)")
        if not (0.0 <= float(self.position_bias) < 1.0):
            raise ValueError(f"position_bias={self.position_bias} is outside [0, 1)")
        if self.truncate_state_tokens is not None and self.truncate_state_tokens < 0:
            raise ValueError("truncate_state_tokens must be >= 0")
        return self

    def merged(self, **changes: Any) -> FaultConfig:
        names = {f.name for f in fields(self)}
        unknown = set(changes) - names
        if unknown:
            raise ValueError(f"unknown fault option(s): {', '.join(sorted(unknown))}")
        return FaultConfig(**{**asdict(self), **changes}).validate()

    def latency_for(self, model: str | None, rng: random.Random) -> float:
        """Sampled latency in seconds for one request to ``model``."""
        median, p95 = self.latency_ms, self.latency_p95_ms
        if self.latency_profile == "published" and model:
            key = next((k for k in sorted(PUBLISHED_LATENCY_MS, key=len, reverse=True) if model.startswith(k)), None)
            if key:
                median, p95 = PUBLISHED_LATENCY_MS[key]
        if median <= 0:
            return 0.0
        if p95 is None or p95 <= median:
            return median / 1000.0
        sigma = math.log(p95 / median) / _Z95
        return median * math.exp(sigma * rng.gauss(0.0, 1.0)) / 1000.0

    def draw_fault(self, rng: random.Random) -> str | None:
        u = rng.random()
        acc = 0.0
        for name in _FAULT_ORDER:
            acc += getattr(self, name)
            if u < acc:
                return name
        return None
