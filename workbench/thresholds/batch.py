"""The finite-batch view of a certified rule: what the next N accepted items may look like.

The Learn-then-Test certificate is a **population** statement: with probability at least ``1 - δ``
over the calibration split, the rule's true error rate ``r`` among accepted items is at most α. An
operator sees **batches**: the errors ``E`` among the next ``N`` accepted items. Given ``r``, and
with those items drawn like the calibration items (exchangeable, no drift), ``E ~ Binomial(N, r)``.
The batch error ``E / N`` exceeds α when ``E > ⌊αN⌋``.

:func:`batch_view` reports, for one rule:

- **guaranteed** (holds whenever the certificate's own assumptions hold, with no further estimate):
  ``P(E/N > α) ≤ δ + P(Binomial(N, α) > ⌊αN⌋)``, because ``r ≤ α`` except with probability δ and the
  binomial tail grows with ``r``. For a rule at exactly α this is about ``δ + 1/2``: a population
  guarantee at α does not keep half of the batches under α. The guaranteed tolerance ``c`` is the
  smallest count with ``P(Binomial(N, α) > c) ≤ ε`` (``ε = 1 - confidence``): with probability at least
  ``1 - δ - ε`` the batch holds at most ``c`` errors.
- **estimated** (a Bayesian prediction, not a guarantee): with a Jeffreys prior, the error rate given
  ``e`` errors among ``n`` accepted certifying calibration items is ``Beta(e + 1/2, n - e + 1/2)``, so
  ``E`` is beta-binomial and ``P(E/N > α)`` follows. The rule was chosen on those same counts, so this
  figure leans optimistic.

**A guarantee for the next batch, as a choice** (``ThresholdOptions(guarantee_for="batch")``,
``--guarantee-for batch``): :func:`batch_certificate_levels` turns (α, δ, N) into the population level
``α'`` and ``δ' = δ/2`` at which the rule is certified instead, with ``P(Binomial(N, α') > ⌊αN⌋) ≤ δ/2``.
Then ``P(E/N > α) ≤ P(r > α') + P(E/N > α | r ≤ α') ≤ δ/2 + δ/2 = δ``: the chosen rule's errors among the
next N accepted items exceed α with probability at most δ (the same exchangeability assumption as the
population guarantee; the split of δ is fixed in advance, so it costs no multiple testing).

The binomial and beta-binomial tails are scipy's (``scipy.stats.binom``, ``scipy.stats.betabinom``);
the tests cross-check them against exact sums and simulation.
"""

from __future__ import annotations

import math

from workbench.errors import OptionError


def batch_certificate_levels(alpha: float, delta: float, n_batch: int) -> tuple[float, float]:
    """Population levels ``(alpha_population, delta_population)`` whose certificate bounds a batch.

    A rule whose true error rate is at most ``alpha_population`` except with probability
    ``delta_population = delta / 2`` has at most ``⌊alpha · n_batch⌋`` errors among the next ``n_batch``
    accepted items except with probability at most ``delta``: ``alpha_population`` is the largest rate
    ``a`` with ``P(Binomial(n_batch, a) > ⌊alpha · n_batch⌋) ≤ delta / 2`` (that tail grows with ``a``).

    Parameters
    ----------
    alpha : float in (0, 1)
        The error limit for the batch's error rate.
    delta : float in (0, 1)
        The allowed probability that the batch's error rate exceeds ``alpha``.
    n_batch : int >= 1
        Accepted items in the batch.

    Returns
    -------
    (alpha_population, delta_population) : tuple of float
        ``0 < alpha_population <= alpha`` and ``delta_population = delta / 2``.
    """
    from scipy.optimize import brentq
    from scipy.stats import binom

    if n_batch < 1:
        raise OptionError(f"batch must be at least 1, got {n_batch}", hint="e.g. 1000", parameter="batch")
    half = delta / 2.0
    limit = math.floor(alpha * n_batch + 1e-9)
    if binom.sf(limit, n_batch, alpha) <= half:  # a tiny batch: certifying at α itself is enough
        return float(alpha), half
    a = brentq(lambda r: float(binom.sf(limit, n_batch, r)) - half, 1e-12, alpha, xtol=1e-14, rtol=1e-12)
    while a > 0 and binom.sf(limit, n_batch, a) > half:  # root-finder rounding guard: stay on the safe side
        a = math.nextafter(a, 0.0)
    return float(a), half


def batch_view(
    *,
    alpha: float,
    delta: float | None,
    n_batch: int,
    accepted: int,
    errors: int,
    confidence: float = 0.95,
    population_alpha: float | None = None,
) -> dict:
    """Chance that the error rate among the next ``n_batch`` accepted items exceeds ``alpha``.

    Parameters
    ----------
    alpha : float in (0, 1)
        The error limit (the certificate's α).
    delta : float in (0, 1) or None
        The certificate's δ; ``None`` for an uncertified rule (then only the estimate is given).
    n_batch : int >= 1
        Accepted items in the batch.
    accepted, errors : int
        Accepted and wrong accepted items of the rule on its certifying calibration items.
    confidence : float in (0, 1)
        The guaranteed tolerance holds with probability ``1 - delta - (1 - confidence)``.
    population_alpha : float, optional
        The level the rule was certified at when it is below ``alpha`` (the batch guarantee of
        :func:`batch_certificate_levels`, with ``delta`` its ``delta_population``); default ``alpha``.

    Returns
    -------
    dict
        ``n``, ``alpha``, ``max_errors_at_alpha`` (``⌊αN⌋``), ``guaranteed`` (``None`` without a
        certificate) with ``p_exceed_at_most``, ``tolerance_errors``, ``tolerance_rate``,
        ``tolerance_probability``; ``estimated`` with ``p_exceed``, ``error_rate``, ``expected_errors``,
        ``prior``; ``statement`` (plain words).
    """
    from scipy.stats import betabinom, binom

    if n_batch < 1:
        raise OptionError(f"batch must be at least 1, got {n_batch}", hint="e.g. 1000", parameter="batch")
    if not (0 < alpha < 1):
        raise OptionError(f"alpha must be in (0, 1), got {alpha}", parameter="alpha")
    limit = math.floor(alpha * n_batch + 1e-9)  # E/N > alpha  <=>  E > limit
    eps = 1.0 - confidence
    guaranteed = None
    if delta is not None:
        r = alpha if population_alpha is None else population_alpha  # the certified bound on the rate
        tail = float(binom.sf(limit, n_batch, r))
        tol = int(binom.isf(eps, n_batch, r))  # smallest c with P(Binomial(N, r) > c) <= ε
        while tol > 0 and binom.sf(tol - 1, n_batch, r) <= eps:  # isf rounding guard
            tol -= 1
        while binom.sf(tol, n_batch, r) > eps:
            tol += 1
        guaranteed = {
            "p_exceed_at_most": min(1.0, delta + tail),
            "binomial_tail_at_alpha": tail,
            "certified_rate": r,
            "tolerance_errors": tol,
            "tolerance_rate": tol / n_batch,
            "tolerance_probability": max(0.0, 1.0 - delta - eps),
        }
    a, b = errors + 0.5, max(accepted - errors, 0) + 0.5
    p_est = float(betabinom.sf(limit, n_batch, a, b))
    estimated = {
        "p_exceed": p_est,
        "error_rate": a / (a + b),
        "expected_errors": n_batch * a / (a + b),
        "prior": "Jeffreys Beta(1/2, 1/2) on the error rate",
        "from": {"accepted": int(accepted), "errors": int(errors)},
    }
    words = f"next {n_batch} accepted items: "
    if guaranteed is not None:
        words += (
            f"P(error > {alpha:g}) ≤ {guaranteed['p_exceed_at_most']:.3g} guaranteed "
            + ("(δ + binomial tail at α); " if population_alpha is None else f"(δ/2 + binomial tail at α' = {r:.4g}); ")
            + f"at most {guaranteed['tolerance_errors']} errors ({100 * guaranteed['tolerance_rate']:.1f}%) with "
            f"probability ≥ {guaranteed['tolerance_probability']:.2f}; "
        )
    words += f"estimated P(error > {alpha:g}) = {p_est:.3g} (beta-binomial from {errors}/{accepted}, not guaranteed)"
    return {
        "n": int(n_batch),
        "alpha": alpha,
        "max_errors_at_alpha": limit,
        "guaranteed": guaranteed,
        "estimated": estimated,
        "statement": words,
    }
