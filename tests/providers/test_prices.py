"""Price table: documented USD prices per million input tokens; unknown is None, never 0."""

from __future__ import annotations

import pytest

from workbench.providers.prices import NEURONS_PER_M, cost_usd, price_per_million


def test_documented_prices():
    assert price_per_million("cloudflare", "clef") == 0.24
    assert price_per_million("cloudflare", "clef-flash") == 0.09
    assert price_per_million("typesafe", "jev-1.13.0") == 0.042
    assert price_per_million("openai", "gpt-6-luna-2026-09-14") == 0.10  # dated snapshot
    assert price_per_million("openrouter", "typesafe/jev-1.13-20260917") == 0.042


def test_cost_is_tokens_times_price():
    assert cost_usd("cloudflare", "clef", 346) == pytest.approx(346 * 0.24 / 1_000_000)
    # Workers AI bills neurons: $0.011 per 1,000 neurons at 21,818 neurons/M for clef == $0.24/M
    assert NEURONS_PER_M["clef"] / 1e6 * 0.011 / 1000 * 1e6 == pytest.approx(0.24, rel=1e-3)
    assert cost_usd("typesafe", "jev-9.9", 100, requested_model="jev-latest") == pytest.approx(100 * 0.042 / 1e6)


@pytest.mark.parametrize(
    "vendor, model, tokens",
    [
        ("systemone", "clef-flash", 100),
        ("laya", "typed-decisions", 100),
        ("sarvam", "clef", 100),
        ("vercel", "typesafe-ai/jev", 100),
        ("cloudflare", "clef-max", 100),
        ("cloudflare", "clef", None),
        ("cloudflare", None, 100),
    ],
)
def test_unknown_cost_is_none(vendor, model, tokens):
    assert cost_usd(vendor, model, tokens) is None
