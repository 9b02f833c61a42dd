"""Shadow mode: the challenger runs beside the champion on the same traffic without acting.

Three ways in, one report out:

- :func:`workbench.store.shadow.replay_runs` — two stored runs over the same dataset items;
- :func:`workbench.store.shadow.import_traffic` — production logs (JSONL/Parquet/CSV), outcomes later;
- :mod:`workbench.shadow.mirror` — a live System One mirror (aiohttp, with limits) and a durable
  journal (:mod:`workbench.shadow.journal`), ingested by :func:`workbench.store.shadow.ingest_journal`;
  the challenger is called by :mod:`workbench.shadow.challenger`.

:func:`workbench.shadow.report.shadow_report` applies each side's policy
(:mod:`workbench.shadow.policies`) and returns a :class:`~workbench.shadow.report.ShadowReport` with a
PROMOTE / HOLD / REJECT verdict under :class:`~workbench.shadow.report.Criteria`.
"""
