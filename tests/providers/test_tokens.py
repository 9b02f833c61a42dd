"""The token estimator: per-script weights checked against the ratios measured in providers.md."""

from __future__ import annotations

import json
import random

import pytest

from workbench.providers.tokens import (
    TOKENS_PER_CHAR,
    estimate_request_tokens,
    estimate_tokens,
    render_state,
)

_rng = random.Random(0)
PROSE = (
    "The customer wrote to say that the card they ordered last week has still not arrived, and they would "
    "like to know whether it was lost in the post or whether they should cancel it and order a new one. "
) * 20
TYPESCRIPT = (
    "export function decide(state: State, questions: Record<string, Question>): Promise<Answers> {\n"
    "  const body = JSON.stringify({ model: 'clef', state, questions });\n"
    "  return fetch(url, { method: 'POST', body }).then((r) => r.json());\n}\n"
) * 20
MIN_JSON = json.dumps(
    [{"id": i, "name": f"user{i}", "email": f"user{i}@example.com", "active": i % 2 == 0} for i in range(60)],
    separators=(",", ":"),
)
LOGS = "".join(
    f"2026-10-03T12:{i % 60:02d}:{(i * 7) % 60:02d}.{i % 1000:03d}Z INFO req={_rng.getrandbits(32):08x} "
    f"latency={_rng.randint(5, 900)}ms status=200\n"
    for i in range(60)
)
INTS = json.dumps([_rng.randint(0, 99999) for _ in range(600)], separators=(",", ":"))
CJK = "我们的卡片还没有到达请帮我查询一下物流信息谢谢" * 20
DEVANAGARI = "यहएकपरीक्षणवाक्यहैजोदेवनागरीलिपिमेंलिखागयाहै" * 10
EMOJI = "😀🎉🚀👍🔥" * 40

# Measured characters per token (providers.md §3.6 Perplexity; §7 hosted Clef where hungrier).
MEASURED_CHARS_PER_TOKEN = {
    "prose": min(4.34, 7517 / 2048),
    "typescript": min(3.84, 8768 / 2048),
    "min_json": min(3.36, 9900 / 2048),
    "logs": min(1.35, 2863 / 2048),
    "ints": min(1.16, 2040 / 2048),
}
TEXTS = {"prose": PROSE, "typescript": TYPESCRIPT, "min_json": MIN_JSON, "logs": LOGS, "ints": INTS}


@pytest.mark.parametrize("kind", list(TEXTS))
def test_estimate_is_conservative_but_not_absurd(kind):
    text = TEXTS[kind]
    measured_tokens = len(text) / MEASURED_CHARS_PER_TOKEN[kind]
    est = estimate_tokens(text)
    assert est >= 0.95 * measured_tokens, (kind, est, measured_tokens)  # never much below measured
    assert est <= 2.0 * measured_tokens, (kind, est, measured_tokens)  # and not wildly above


@pytest.mark.parametrize("text, per_char", [(CJK, 0.46), (DEVANAGARI, 0.44), (EMOJI, 2.6)])
def test_per_script_corrections(text, per_char):
    """Scripts that tokenise densely are at least as expensive as §3.6 measured per character."""
    assert estimate_tokens(text) >= per_char * len(text)
    assert estimate_tokens(text) > estimate_tokens("a" * len(text))


def test_class_counts_and_exact_arithmetic():
    """Each character costs its class's rate: two letters, a space, two digits, a comma, é, 我 and 😀."""
    counts = {"letter": 2, "space": 1, "digit": 2, "punct": 1, "latin_ext": 1, "cjk": 1, "emoji": 1}
    expected = sum(TOKENS_PER_CHAR[c] * n for c, n in counts.items())
    assert estimate_tokens("ab 12,é我😀") == int(-(-expected // 1))  # ceil


def test_json_state_is_rendered_compact_and_sorted():
    assert render_state({"b": 1, "a": [1, 2]}) == '{"a":[1,2],"b":1}'
    assert estimate_tokens({"b": 1, "a": "x"}) == estimate_tokens('{"a":"x","b":1}')
    assert estimate_tokens("") == 0


def test_monotone_in_length_and_request_adds_overhead():
    assert estimate_tokens(PROSE) < estimate_tokens(PROSE + PROSE)
    q = {"q": {"type": "noul", "instructions": "Is it urgent?"}}
    assert estimate_request_tokens("hi", q) > estimate_tokens("hi") + estimate_tokens(q)
