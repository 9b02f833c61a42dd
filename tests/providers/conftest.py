"""A real emulator on a free loopback port, shared by the provider tests (faults reset per test)."""

from __future__ import annotations

import asyncio

import pytest

from workbench.emulator import FaultConfig, run_emulator
from workbench.schema import DecisionSchema

#: A token that must never appear in an error message, repr or log.
SECRET = "sk-TEST-4f9c2e71-do-not-leak"

INTENT_OPTIONS = {
    "card_arrival": "The customer asks when their new card will arrive",
    "lost_or_stolen_card": "The customer's card was lost or stolen",
    "exchange_rate": None,
}


def three_type_schema() -> DecisionSchema:
    """One question of each type."""
    return DecisionSchema.from_dict(
        {
            "questions": {
                "intent": {
                    "type": "choice",
                    "instructions": "Which intent does the message express?",
                    "criteria": dict(INTENT_OPTIONS),
                },
                "stolen": {
                    "type": "noul",
                    "instructions": "Was the card stolen?",
                    "criteria": {"true": "the card was stolen or lost", "false": "nothing was stolen"},
                },
                "severity": {
                    "type": "score",
                    "instructions": "How severe is the problem?",
                    "criteria": ["minor question", "moderate problem", "severe: card stolen, money lost"],
                },
            }
        }
    )


@pytest.fixture(scope="session")
def emulator():
    with run_emulator(port=0) as emu:
        yield emu


@pytest.fixture
def emu(emulator):
    """The shared emulator with default faults, no token and zeroed counters."""
    emulator.faults = FaultConfig()
    emulator.require_token = None
    emulator.reset_stats()
    yield emulator
    emulator.faults = FaultConfig()
    emulator.require_token = None


@pytest.fixture
def cf_env(emu):
    return {
        "CLOUDFLARE_CLEF_BASE_URL": emu.cloudflare_base_url,
        "CLOUDFLARE_API_KEY": SECRET,
        "CLOUDFLARE_ACCOUNT_ID": "0123456789abcdef0123456789abcdef",
    }


def run(coro):
    return asyncio.run(coro)
