"""Input-token prices per vendor and model, from providers.md (§1, §3). Output tokens are free.

An unknown price means an unknown cost (``None``), never a cost of zero: a run that cannot be
priced must say so rather than report "$0.00". Self-hosted models (Laya, XOR, generic System One
servers, the emulator behind ``systemone:``) have no list price. Sarvam's Clef is priced in INR
(₹20 per M) and is therefore left out of this USD table.
"""

from __future__ import annotations

import re

#: USD per million input tokens, keyed by (vendor, model id). Sources in providers.md.
PRICES_USD_PER_M: dict[tuple[str, str], float] = {
    ("cloudflare", "clef"): 0.24,  # §3.1, 21,818 neurons/M
    ("cloudflare", "clef-flash"): 0.09,  # §3.1, 8,182 neurons/M
    ("typesafe", "jev-latest"): 0.042,  # §3.3, $42 per billion
    ("typesafe", "jev-1.13.0"): 0.042,
    ("openrouter", "typesafe/jev-1.13"): 0.042,  # §3.5 (OpenRouter also reports usage.cost)
    ("openrouter", "openai/gpt-6-luna-decisions"): 0.10,
    ("perplexity", "pplx-decider-v1-27b"): 0.04,  # §3.6
    ("perplexity", "pplx-decider-v1.2"): 0.02,
    ("perplexity", "pplx-decider-flash-v1.2"): 0.01,
    ("openai", "gpt-6-luna"): 0.10,  # §3.7
}

#: Neurons per million input tokens on Workers AI (§3.1): billing = tokens x rate exactly (the emulator's
#: ``cf-ai-neurons`` header).
NEURONS_PER_M: dict[str, float] = {"clef": 21_818.0, "clef-flash": 8_182.0}

_DATED_SUFFIX = re.compile(r"(-\d{4}-\d{2}-\d{2}|-\d{8})$")


def price_per_million(vendor: str, model: str | None) -> float | None:
    """USD per million input tokens for ``vendor``'s ``model``, or ``None`` when unknown.

    A dated snapshot id (``gpt-6-luna-2026-09-14``, ``typesafe/jev-1.13-20260917``) is priced
    like its undated model.
    """
    if not model:
        return None
    model = model.strip()
    price = PRICES_USD_PER_M.get((vendor, model))
    if price is None:
        price = PRICES_USD_PER_M.get((vendor, _DATED_SUFFIX.sub("", model)))
    return price


def cost_usd(
    vendor: str, model: str | None, input_tokens: int | None, *, requested_model: str | None = None
) -> float | None:
    """Cost of one call in USD, or ``None`` when the tokens or the price are unknown.

    The model that answered is priced first (it may be a versioned id), then the requested one.
    """
    if input_tokens is None or input_tokens < 0:
        return None
    price = price_per_million(vendor, model)
    if price is None and requested_model is not None:
        price = price_per_million(vendor, requested_model)
    if price is None:
        return None
    return input_tokens * price / 1_000_000.0
