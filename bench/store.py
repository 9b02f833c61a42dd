"""Answer storage: file size and query time for N items × K options stored as DOUBLE[] per answer,
against the one-row-per-option layout (the baseline), side by side.

    python bench/store.py --n 200000 --k 77
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import numpy as np
import pyarrow as pa

from workbench.store.db import connect


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=200_000)
    ap.add_argument("--k", type=int, default=77)
    args = ap.parse_args()
    n, k = args.n, args.k
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(n, k)).astype(np.float64) * 2
    p = np.exp(logits - logits.max(1, keepdims=True))
    p = np.round(p / p.sum(1, keepdims=True), 4)  # providers round to 4 decimals
    ids = np.array([f"item-{i:07d}" for i in range(n)], dtype=object)
    with tempfile.TemporaryDirectory() as d:
        # list layout (ours)
        path = os.path.join(d, "list.duckdb")
        con = connect(path)
        flat = pa.array(p.ravel())
        probs = pa.FixedSizeListArray.from_arrays(flat, k).cast(pa.list_(pa.float64()))
        tbl = pa.table(
            {
                "run_id": pa.array(["r"] * n),
                "item_id": pa.array(ids.tolist()),
                "question": pa.array(["intent"] * n),
                "probs": probs,
            }
        )
        t0 = time.perf_counter()
        con.register("t", tbl)
        con.execute("INSERT INTO answer_rows (run_id, item_id, question, probs) SELECT * FROM t")
        con.execute("CHECKPOINT")
        t_write = time.perf_counter() - t0
        t0 = time.perf_counter()
        mean_top = con.execute("SELECT avg(list_max(probs)) FROM answers WHERE run_id = 'r'").fetchone()[0]
        t_query = time.perf_counter() - t0
        con.close()
        size_list = os.path.getsize(path)
        # one row per option (baseline)
        path2 = os.path.join(d, "long.duckdb")
        import duckdb

        con2 = duckdb.connect(path2)
        long = pa.table(
            {
                "run_id": pa.array(["r"] * (n * k)),
                "item_id": pa.array(np.repeat(ids, k).tolist()),
                "question": pa.array(["intent"] * (n * k)),
                "option_id": pa.array(np.tile([f"opt{j}" for j in range(k)], n).tolist()),
                "p": flat,
            }
        )
        t0 = time.perf_counter()
        con2.register("t", long)
        con2.execute("CREATE TABLE answers_long AS SELECT * FROM t")
        con2.execute("CHECKPOINT")
        t_write2 = time.perf_counter() - t0
        t0 = time.perf_counter()
        mean_top2 = con2.execute("SELECT avg(m) FROM (SELECT max(p) m FROM answers_long GROUP BY item_id)").fetchone()[
            0
        ]
        t_query2 = time.perf_counter() - t0
        con2.close()
        size_long = os.path.getsize(path2)
    assert abs(mean_top - mean_top2) < 1e-9
    print(f"{n:,} items x {k} options")
    print(f"{'layout':<22}{'file MB':>10}{'write s':>10}{'mean p_top query s':>22}")
    print(f"{'DOUBLE[] per answer':<22}{size_list / 1e6:>10.1f}{t_write:>10.2f}{t_query:>22.3f}")
    print(f"{'row per option':<22}{size_long / 1e6:>10.1f}{t_write2:>10.2f}{t_query2:>22.3f}")
    print(
        f"ratio (row per option / ours): size {size_long / size_list:.1f}x, query {t_query2 / t_query:.1f}x; "
        f"extrapolated 1M items: {size_list / 1e6 * 1e6 / n:.0f} MB"
    )


if __name__ == "__main__":
    main()
