"""Counts and articles in messages people read: ``1 question``, ``2 questions``, ``an authentication failure``.

Floor 0 (imports nothing): any message in the package can use it.

>>> plural(1, "question"), plural(2, "question"), plural(1_234, "item"), plural(1, "policy", "policies")
('1 question', '2 questions', '1,234 items', '1 policy')
>>> article("authentication"), article("quota"), article("8-item"), article("11-item"), article("110-item")
('an authentication', 'a quota', 'an 8-item', 'an 11-item', 'a 110-item')
"""

from __future__ import annotations

import re

__all__ = ["article", "format_p", "plural", "run_ref"]

#: Words that start with a vowel letter but a consonant sound ("a user"), or the reverse ("an hour").
_CONSONANT_SOUND = re.compile(r"^(u[bcfhjkst][aeiou]|uni|use|usu|uti|eu|one|once|ur[aeiou])", re.IGNORECASE)
_VOWEL_SOUND = re.compile(r"^(hour|honest|honou?r|heir|[aefhilmnorsx]$|[aefhilmnorsx][^a-z])", re.IGNORECASE)
_NUMBER = re.compile(r"^(\d[\d,_]*)")


def plural(n: int | float, singular: str, plural_form: str | None = None) -> str:
    """``n`` and the noun that agrees with it: ``plural(1, "row")`` → ``"1 row"``; thousands get commas."""
    noun = singular if n == 1 else (plural_form or singular + "s")
    count = f"{int(n):,}" if float(n).is_integer() else f"{n:g}"
    return f"{count} {noun}"


def _number_takes_an(digits: str) -> bool:
    """True for numbers read aloud with a vowel sound: 8, 11, 18, 80–89, 800…, 8,000…, 11,000, 18,000…"""
    digits = digits.replace(",", "").replace("_", "").lstrip("0") or "0"
    lead = digits[: len(digits) % 3 or 3]  # the group read first: "11" of 11,000, "110" of 110,000
    return lead.startswith("8") or lead in ("11", "18")


def article(word: str) -> str:
    """``word`` with ``a`` or ``an`` in front, by its sound: an error, a user, an hour, an 8-item pilot, an F1 score."""
    text = word.strip()
    number = _NUMBER.match(text)
    if number:
        return f"{'an' if _number_takes_an(number.group(1)) else 'a'} {word}"
    if _VOWEL_SOUND.match(text):
        return f"an {word}"
    vowel = text[:1].lower() in ("a", "e", "i", "o", "u") and not _CONSONANT_SOUND.match(text)
    return f"{'an' if vowel else 'a'} {word}"


def run_ref(run: str) -> str:
    """A run as messages name it: an id (``run-3f2a9c0d1e``) already says "run"; a run name gets the word.

    >>> run_ref("run-3f2a9c0d1e"), run_ref("baseline")
    ('run-3f2a9c0d1e', 'run baseline')
    """
    return run if run.startswith("run-") else f"run {run}"


def format_p(p: float | None, n_boot: int | None = None) -> str:
    """A p-value as people read it: ``< 0.001`` (or below the bootstrap's resolution), else 2–3 digits.

    A bootstrap p-value of 0 means "smaller than 1 / n_boot", never zero.
    """
    if p is None or (isinstance(p, float) and p != p):
        return "–"
    floor = 1.0 / (n_boot + 1) if n_boot else 0.0
    if p <= 0.0 or p < floor:
        return f"< {max(floor, 1e-16):.2g}" if floor else "< 1e-16"
    if p < 0.001:
        return "< 0.001" if floor >= 0.001 else f"{p:.1e}"
    return f"{p:.3f}" if p < 0.1 else f"{p:.2f}"
