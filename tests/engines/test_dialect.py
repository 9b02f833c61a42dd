"""The engines' dialect table (``engines.sessions.DIALECT``): every list function has a template for every
engine, and DuckDB's, run on real lists, give what numpy gives."""

from __future__ import annotations

import numpy as np

from workbench.engines.sessions import DIALECT, ENGINES, DuckDBEngine


def test_every_list_function_has_a_template_for_every_engine():
    assert {fn: sorted(t) for fn, t in DIALECT.items()} == {fn: sorted(ENGINES) for fn in DIALECT}


def test_duckdb_list_functions_match_numpy():
    rows = [[0.1, 0.7, 0.2], [0.5, 0.5], [0.9], [0.3, 0.1, 0.6, 0.6]]
    with DuckDBEngine(memory_limit="256MB") as e:
        for p in rows:
            lit = "[" + ", ".join(repr(v) for v in p) + "]::DOUBLE[]"
            pos = e.list_position("p", e.list_max("p"))  # the templates take column names, as the engines use them
            sql = (
                f"SELECT {e.list_max('p')}, {e.list_len('p')}, {e.list_at0('p', '1')}, {pos},"
                f" {e.list_second('p', pos)}, {e.list_sumsq('p')}, {e.int_div('7', '2')} FROM (SELECT {lit} AS p)"
            )
            top, n, second_elem, first_max, runner_up, sumsq, div = e.query(sql)[0]
            a = np.array(p)
            assert top == a.max() and n == len(a) and first_max == int(a.argmax()) + 1 and div == 3
            assert second_elem == (a[1] if len(a) > 1 else None)
            assert runner_up == (np.delete(a, a.argmax()).max() if len(a) > 1 else None)
            assert np.isclose(sumsq, (a * a).sum(), rtol=0, atol=1e-15)
