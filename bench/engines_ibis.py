"""The same answer aggregation through Ibis on DuckDB and through our SQL on DuckDB (docs/scale.md).

    python bench/engines_ibis.py --make answers.parquet --items 2000000   # a 2M x 77 long-layout file
    python bench/engines_ibis.py answers.parquet sql                     # our SQL
    python bench/engines_ibis.py answers.parquet ibis                    # Ibis (pip install 'ibis-framework[duckdb]')

Prints the wall time and the sums (n, failures, labelled, correct, Brier, log loss); run each under
``/usr/bin/time -v`` for the peak RSS. Not a test dependency: Ibis stays out of the project's extras.
"""

from __future__ import annotations

import sys
import time

EPS = 2.220446049250313e-16  # workbench.metrics.scores.LOG_LOSS_FLOOR
EDGES = [i / 15 for i in range(1, 15)]
K = 77


def make(path: str, n_total: int, chunk: int = 200_000) -> None:
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(0)
    opts = np.array([f"intent_{j:02d}" for j in range(K)])
    writer = None
    for start in range(0, n_total, chunk):
        n = min(chunk, n_total - start)
        logits = rng.normal(0, 2.0, (n, K))
        p = np.exp(logits - logits.max(1, keepdims=True))
        p /= p.sum(1, keepdims=True)
        failed = rng.random(n) < 0.02
        offsets = pa.array(np.arange(0, n * K + 1, K, dtype=np.int32))
        probs = pa.ListArray.from_arrays(offsets, pa.array(p.ravel()), mask=pa.array(failed))
        t = pa.table(
            {
                "item_id": pa.array([f"i{start + i}" for i in range(n)]),
                "split": pa.array(["test"] * n),
                "question": pa.array(["intent"] * n),
                "label": pa.array(opts[rng.integers(0, K, n)]),
                "probs": probs,
            }
        )
        writer = writer or pq.ParquetWriter(path, t.schema)
        writer.write_table(t)
    if writer:
        writer.close()


def run_ibis(path: str) -> None:
    import ibis

    con = ibis.duckdb.connect()
    con.raw_sql("SET memory_limit='1GB'")
    t = con.read_parquet(path)
    opts = ibis.memtable(
        {"question": ["intent"] * K, "option_id": [f"intent_{j:02d}" for j in range(K)], "idx": list(range(K))}
    )
    j = t.left_join(opts, [t.question == opts.question, t.label == opts.option_id])
    p1 = j.probs.maxs()
    failed = j.probs.isnull()
    metric = ~failed & j.idx.notnull()
    p_label = j.probs[j.idx]
    sq = j.probs.map(lambda v: v * v).sums()
    x = j.select(
        question=j.question,
        failed=failed,
        metric=metric,
        correct=(j.probs.index(p1) == j.idx) & metric,
        p1=p1,
        brier=ibis.ifelse(metric, sq - 2 * p_label + 1, None),
        ll=ibis.ifelse(metric, -(p_label.clip(lower=EPS, upper=1.0).ln()), None),
        rbin=sum((p1 >= e).cast("int32") for e in EDGES),
    )
    tot = x.group_by("question").aggregate(
        n=x.count(),
        n_failed=x.failed.sum(),
        n_metric=x.metric.sum(),
        correct=x.correct.sum(),
        brier=x.brier.sum(),
        ll=x.ll.sum(),
    )
    xm = x.filter(x.metric)
    bins = xm.group_by(["question", "rbin"]).aggregate(n=xm.count(), s=xm.p1.sum(), c=xm.correct.sum())
    t0 = time.perf_counter()
    a = tot.to_pyarrow()
    bins.to_pyarrow()
    print(f"ibis duckdb {time.perf_counter() - t0:.1f}s", a.to_pylist())


def run_sql(path: str) -> None:
    import duckdb

    con = duckdb.connect()
    con.execute("SET memory_limit='1GB'")
    con.execute(
        "CREATE TEMP TABLE o AS SELECT 'intent' AS question, 'intent_' || lpad(i::VARCHAR, 2, '0') AS option_id, "
        f"i AS idx FROM range({K}) r(i)"
    )
    rb = " + ".join(f"(p1 >= {e!r})::INT" for e in EDGES)
    x = f"""WITH s AS (SELECT a.question, a.probs, o.idx FROM read_parquet('{path}') a
                      LEFT JOIN o ON o.question = a.question AND o.option_id = a.label),
    f AS (SELECT question, probs IS NULL AS failed, probs IS NOT NULL AND idx IS NOT NULL AS metric, list_max(probs) AS p1,
          list_position(probs, list_max(probs)) - 1 AS pos, idx, list_sum(list_transform(probs, v -> v * v)) AS sq,
          probs[idx + 1] AS pl FROM s),
    x AS (SELECT question, failed, metric, metric AND pos = idx AS correct, p1, CASE WHEN metric THEN sq - 2 * pl + 1 END AS brier,
          CASE WHEN metric THEN -ln(greatest(least(pl, 1.0), {EPS!r})) END AS ll, {rb} AS rbin FROM f)"""
    t0 = time.perf_counter()
    a = con.execute(
        x + " SELECT question, count(*), sum(failed::INT), sum(metric::INT), sum(correct::INT), sum(brier), sum(ll) "
        "FROM x GROUP BY 1"
    ).fetchall()
    con.execute(
        x + " SELECT question, rbin, count(*), sum(p1), sum(correct::INT) FROM x WHERE metric GROUP BY 1, 2"
    ).fetchall()
    print(f"sql duckdb {time.perf_counter() - t0:.1f}s", a)


if __name__ == "__main__":
    if sys.argv[1] == "--make":
        make(sys.argv[2], int(sys.argv[sys.argv.index("--items") + 1]) if "--items" in sys.argv else 2_000_000)
    else:
        (run_ibis if sys.argv[2] == "ibis" else run_sql)(sys.argv[1])
