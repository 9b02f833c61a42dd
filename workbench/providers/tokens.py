"""An explicit, conservative token estimator used for local refusals before sending.

Providers count tokens with their own tokenizers, which the workbench does not ship. The
estimator below counts characters by class and weighs each class by how many tokens one
character of that class costs, from the per-script ratios measured in providers.md:

* English prose ~4.3 characters per token, TypeScript ~3.8, minified JSON ~3.4 (§3.6);
* log lines ~1.35 and integer arrays ~1.16 characters per token (§3.6), so digits and
  punctuation cost far more than letters;
* CJK ≈0.46 tokens per character, Devanagari 0.44, emoji 2.6 per code point (§3.6);
* hosted Clef cut English prose after ~7,517 characters for 2,048 tokens (3.7 characters per
  token), log lines after ~2,863 (1.4) and digit lists after ~2,040 (1.0) (§7), so letters and
  digits are weighed for the hungrier of the two tokenizers, because an estimate used to
  refuse a request must err on the side of *more* tokens. CJK is weighed 1 token per character
  (twice the 0.46 of §3.6); random CJK code points reached ~1.75 on Clef (§7), real text far less.

The estimate is deliberately on the high side for every kind of text (see the tests in
``tests/providers/test_tokens.py``): refusing a state that would in fact fit wastes a call,
while sending one that does not fit gets it silently truncated (providers.md §7).
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

#: Tokens per character, by character class (see the module docstring for where each comes from).
TOKENS_PER_CHAR: dict[str, float] = {
    "letter": 0.28,  # ASCII letters: prose 4.3 chars/token (§3.6), 3.7 on hosted Clef (§7)
    "digit": 1.20,  # integer arrays 1.16 chars/token (§3.6), digit lists ~1.0 on Clef (§7)
    "mixed": 0.60,  # letters inside runs that also hold digits (hex ids, hashes): log lines
    "space": 0.20,  # single spaces merge into the next word; runs of indentation do not
    "punct": 0.70,  # JSON/code punctuation: minified JSON 3.4 chars/token, log lines 1.35
    "latin_ext": 0.50,  # accented Latin, Greek, Cyrillic: byte-level BPE splits them more
    "indic": 0.60,  # Devanagari and other Brahmic scripts (0.44 measured; margin added)
    "cjk": 1.00,  # CJK ideographs, kana, hangul (0.46 on Perplexity, up to ~1.75 on Clef)
    "emoji": 2.60,  # emoji and other symbols outside the BMP: 2.6 per code point
    "other": 0.80,  # anything else (Arabic, Hebrew, Thai, ...)
}

#: The costliest weight: a text of n characters never exceeds ``n * MAX_TOKENS_PER_CHAR`` tokens.
MAX_TOKENS_PER_CHAR = max(TOKENS_PER_CHAR.values())

#: Fixed tokens a request costs before its state (Clef billed 397 fixed tokens for a short
#: schema, providers.md §7); added by :func:`estimate_request_tokens`, not by :func:`estimate_tokens`.
REQUEST_OVERHEAD_TOKENS = 400

_CLASS_ORDER = list(TOKENS_PER_CHAR)


def _class_of_codepoints(codes: np.ndarray) -> np.ndarray:
    """Class index (into ``_CLASS_ORDER``) for each code point, vectorised over an int array."""
    cls = np.full(codes.shape, _CLASS_ORDER.index("other"), dtype=np.int8)
    is_upper = (codes >= 0x41) & (codes <= 0x5A)
    is_lower = (codes >= 0x61) & (codes <= 0x7A)
    cls[is_upper | is_lower] = _CLASS_ORDER.index("letter")
    cls[(codes >= 0x30) & (codes <= 0x39)] = _CLASS_ORDER.index("digit")
    cls[(codes == 0x20) | (codes == 0x09) | (codes == 0x0A) | (codes == 0x0D)] = _CLASS_ORDER.index("space")
    ascii_punct = (
        (codes < 0x80)
        & ~(is_upper | is_lower)
        & ~((codes >= 0x30) & (codes <= 0x39))
        & ~((codes == 0x20) | (codes == 0x09) | (codes == 0x0A) | (codes == 0x0D))
    )
    cls[ascii_punct] = _CLASS_ORDER.index("punct")
    cls[(codes >= 0x80) & (codes < 0x0530)] = _CLASS_ORDER.index("latin_ext")  # Latin-1..Cyrillic/Armenian
    cls[(codes >= 0x2000) & (codes < 0x2070)] = _CLASS_ORDER.index("punct")  # general punctuation
    cls[(codes >= 0x0900) & (codes < 0x0E00)] = _CLASS_ORDER.index("indic")  # Devanagari .. Sinhala
    cjk = (
        ((codes >= 0x2E80) & (codes < 0xA000))
        | ((codes >= 0xAC00) & (codes < 0xD7B0))
        | ((codes >= 0xF900) & (codes < 0xFB00))
        | ((codes >= 0xFF00) & (codes < 0xFFF0))
        | ((codes >= 0x20000) & (codes < 0x30000))
    )
    cls[cjk] = _CLASS_ORDER.index("cjk")
    emoji = ((codes >= 0x1F000) & (codes < 0x1FB00)) | ((codes >= 0x2600) & (codes < 0x27C0))
    cls[emoji] = _CLASS_ORDER.index("emoji")
    # letters in an alphanumeric run that also holds a digit ("8f3a2b", "req42") tokenise like digits
    letter = cls == _CLASS_ORDER.index("letter")
    digit = cls == _CLASS_ORDER.index("digit")
    alnum = letter | digit
    if alnum.any():
        starts = alnum & ~np.concatenate(([False], alnum[:-1]))
        run_id = np.cumsum(starts) * alnum
        has_digit = np.bincount(run_id, weights=digit, minlength=int(run_id.max()) + 1) > 0
        has_digit[0] = False
        cls[letter & has_digit[run_id]] = _CLASS_ORDER.index("mixed")
    return cls


_WEIGHTS = np.array([TOKENS_PER_CHAR[c] for c in _CLASS_ORDER])


def render_state(state: Any) -> str:
    """The text a model reads for ``state``: strings as is, other JSON values compact with sorted keys.

    This matches the Clef reference code's renderer (providers.md §8).
    """
    if isinstance(state, str):
        return state
    return json.dumps(state, ensure_ascii=False, separators=(",", ":"), sort_keys=True)


def estimate_tokens(value: Any) -> int:
    """Estimated token count of a state (string or JSON value), rounded up.

    Parameters
    ----------
    value : str or JSON value
        Non-strings are rendered with :func:`render_state` first.

    Returns
    -------
    n_tokens : int
        ``ceil(sum over characters of TOKENS_PER_CHAR[class])``; 0 for an empty string.
    """
    text = render_state(value)
    if not text:
        return 0
    codes = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32).astype(np.int64)
    total = float(_WEIGHTS[_class_of_codepoints(codes)].sum())
    return int(np.ceil(total))


def estimate_request_tokens(state: Any, questions_wire: dict) -> int:
    """Estimated input tokens of a whole request: fixed overhead + state + rendered questions."""
    return REQUEST_OVERHEAD_TOKENS + estimate_tokens(state) + estimate_tokens(questions_wire)
