"""Aggregations that run where the logs live: DuckDB on one machine (default), Apache Spark beyond it.

One SQL text per aggregation, run by ``duckdb`` or by ``pyspark.sql``; the few functions whose
names differ between the two dialects (list max, 0-based element, second largest, sum of squares,
"how many grid points are <= x") come from a tiny dialect layer (:mod:`workbench.engines.sessions`).
The engines compute only counts and sums (sufficient statistics); the figures are finished in numpy
by the same functions the in-memory path uses (:mod:`workbench.metrics.reliability`,
:mod:`workbench.thresholds.surface`), so the two paths cannot drift apart.

- :func:`workbench.engines.answers.aggregate_answers`: per question n, failures, accuracy, Brier,
  log loss, top-label reliability bins (ECE/MCE), the confusion matrix and the threshold surface,
  from answer files in the long layout that ``workbench export`` writes.
- :func:`workbench.engines.monitoring.window_aggregates`: the per-window counts of ``workbench
  monitor`` over a table of decisions.

See ``docs/scale.md`` for pointing it at a Spark cluster. We do not write an engine of our own.
"""
