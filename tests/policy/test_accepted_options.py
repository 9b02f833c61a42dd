"""``accepted_options`` (the batch figures' view of a policy: the gate's coverage and error at the
policy) is :meth:`decide_probs` as arrays: the same rows accepted, as the same options, under every
rule kind, unusable rows, shadow mode and a partial rollout."""

from __future__ import annotations

import numpy as np
import pytest

from tests.policy.test_policy_rules import score_and_per_class_policy


def _from_decisions(cq, probs):
    index = {o: j for j, o in enumerate(cq.options)}
    return np.array([index[d.option] if d.accepted else -1 for d in cq.decide_probs(probs)], dtype=np.int64)


@pytest.mark.parametrize("question", ["team", "urgency"])
@pytest.mark.parametrize("mode", ["live", "shadow", "rollout"])
def test_accepted_options_are_the_decisions_as_arrays(question, mode):
    cq = score_and_per_class_policy().questions[question]
    if mode == "shadow":
        cq.shadow = True
    elif mode == "rollout":
        cq.enabled = np.array([False, True, True])  # the first option is not enabled
    rng = np.random.default_rng(7)
    probs = rng.dirichlet(np.full(3, 0.4), size=4_000)
    probs[rng.random(len(probs)) < 0.05] = np.nan  # failed answers
    probs[rng.random(len(probs)) < 0.02, 0] = np.inf  # not a probability row
    got = cq.accepted_options(probs)
    assert got.dtype == np.int64 and got.shape == (len(probs),)
    assert np.array_equal(got, _from_decisions(cq, probs))
    if mode == "shadow":
        assert (got == -1).all()
    else:  # the check is not vacuous: some rows are accepted, some are not
        assert (got >= 0).any() and (got == -1).any()
    if mode == "rollout":
        assert not (got == 0).any()
