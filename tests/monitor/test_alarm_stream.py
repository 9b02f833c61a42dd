"""The alarm streamed in chunks (``AlarmStream``) equals the alarm over the whole array (``error_rate_alarm``)
exactly: same figures at every kept outcome and the same summary, whatever the chunk size."""

from __future__ import annotations

import numpy as np
import pytest

from tests.monitor.alarm_reference import error_rate_alarm
from workbench.monitor.sequential import AlarmStream

#: chunk boundaries: single outcomes, a chunk ending just before/after a kept index, the alarm inside a chunk
IRREGULAR = [1, 2, 9, 1000, 1001, 11_999, 12_000, 15_000, 20_000]


@pytest.mark.parametrize("chunk", [1000, 20_000, None])
def test_stream_equals_whole_array(chunk):
    rng = np.random.default_rng(3)
    # 3 % errors, then 9 %: the alarm at α = 5 % fires after the shift
    x = (rng.random(20_000) < np.r_[np.full(12_000, 0.03), np.full(8_000, 0.09)]).astype(np.int8)
    ref = error_rate_alarm(x, 0.05, 0.1)
    assert ref.first_alarm is not None and ref.first_alarm > 12_000
    keep = [0, 5, 11_999, 15_000, 19_999]
    st = AlarmStream(0.05, 0.1, x.size, keep=keep)
    bounds = IRREGULAR if chunk is None else list(range(chunk, x.size + chunk, chunk))
    for a, b in zip([0, *bounds[:-1]], bounds):
        st.add(x[a:b])
    got = st.finish()
    assert got.to_dict() == ref.to_dict()  # thinned curves, e-values, bounds: the same doubles
    for i in keep:
        assert got.at(i) == (ref.log_e[i], ref.lower[i], ref.estimate[i], ref.recent[i])
    assert got.max_log_e == ref.log_e.max() and got.n_errors == int(x.sum())


def test_stream_of_no_outcomes_and_a_wrong_length():
    empty = AlarmStream(0.05, 0.1, 0).finish()
    assert empty.to_dict() == error_rate_alarm(np.zeros(0), 0.05, 0.1).to_dict()
    st = AlarmStream(0.05, 0.1, 10)
    st.add(np.zeros(4))
    with pytest.raises(ValueError, match="told 10 outcomes and got 4"):
        st.finish()
    with pytest.raises(ValueError, match="must be in"):
        AlarmStream(0.0, 0.1, 3)
