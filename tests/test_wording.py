"""Counts, articles and run references in messages (issue 27 §5: "1 questions", "a authentication", "run run-…")."""

from __future__ import annotations

import doctest

import pytest

import workbench.wording
from workbench.wording import article, plural, run_ref


def test_doctests():
    assert doctest.testmod(workbench.wording).failed == 0


@pytest.mark.parametrize(
    "n,noun,expected",
    [(0, "question", "0 questions"), (1, "question", "1 question"), (2, "question", "2 questions"),
     (1.0, "second", "1 second"), (2.5, "second", "2.5 seconds"), (12_345, "item", "12,345 items"),
     (1, "policy", "1 policy"), (3, "policy", "3 policies")],
)  # fmt: skip
def test_plural(n, noun, expected):
    assert plural(n, noun, "policies" if noun == "policy" else None) == expected


@pytest.mark.parametrize(
    "word,expected",
    [("authentication", "an"), ("invalid_request", "an"), ("internal_error", "an"), ("quota", "a"),
     ("rate_limit", "a"), ("timeout", "a"), ("budget", "a"), ("user", "a"), ("unit", "a"), ("unknown", "an"),
     ("hour", "an"), ("one-off", "a"), ("euro", "a"), ("int", "an"), ("float", "a"), ("F1 score", "an"),
     ("8-item", "an"), ("11-item", "an"), ("18-item", "an"), ("80-item", "an"), ("800-item", "an"),
     ("8000-item", "an"), ("11000-item", "an"), ("1-item", "a"), ("110-item", "a"), ("1100-item", "a"),
     ("200-item", "a")],
)  # fmt: skip
def test_article(word, expected):
    assert article(word) == f"{expected} {word}"


def test_run_ref():
    assert run_ref("run-0dbcb2b009") == "run-0dbcb2b009" and run_ref("nightly") == "run nightly"
