"""``workbench shadow rerun SESSION --challenger SPEC``: a new model over the states a session logged.

One step for what took four (export the session, import it as a dataset, run the model, replay):
the session's states become dataset ``shadow-<SESSION>`` (split ``test``, known outcomes as labels,
item ids kept), ``SPEC`` runs over it with the session's schema, and a new session pairs the
session's champion side as logged with the new run as challenger.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any


def rerun_session(
    con,
    session: str,
    challenger: str,
    *,
    name: str | None = None,
    concurrency: int = 8,
    progress: bool = False,
    reporter: Any = None,
    replace: bool = False,
) -> dict:
    """Run ``challenger`` (a provider spec) over session ``session``'s logged states; make a new session.

    Returns
    -------
    dict
        ``shadow`` (the new session, default ``<session>+<provider>``), ``run_id`` (the challenger's
        run), ``dataset``, ``n_requests``, ``n_outcomes``.
    """
    from workbench.runner import run_experiment
    from workbench.store.datasets import import_dataset
    from workbench.store.import_spec import ImportSpec
    from workbench.store.shadow import rechallenge_session, session_schema, session_states

    schema = session_schema(con, session)
    frame, state_column = session_states(con, session)
    dataset = f"shadow-{session}"
    with tempfile.TemporaryDirectory(prefix="wb-rerun-") as tmp:
        path = Path(tmp) / "states.parquet"
        frame.to_parquet(path, index=False)
        spec = ImportSpec(
            name=dataset,
            id_column="item_id",
            split="test",
            labels={q: f"outcome__{q}" for q in schema.question_ids},
            text_column="text" if state_column == "text" else None,
            state_column="state" if state_column == "state" else None,
        )
        info = import_dataset(con, [path], spec, schema)
    (run_id,) = run_experiment(
        con,
        dataset=dataset,
        dataset_version=info.version,
        schema=schema,
        provider_specs=[challenger],
        splits=["test"],
        run_name=f"shadow rerun {session} · {challenger}",
        concurrency=concurrency,
        progress=progress,
        **({"reporter": reporter} if reporter is not None else {}),
    )
    target = name or f"{session}+{challenger.split('?')[0].rsplit(':', 1)[-1].rsplit('/', 1)[-1]}"
    summary = rechallenge_session(con, source=session, target=target, challenger_run=run_id, replace=replace)
    return {**summary, "run_id": run_id, "dataset": dataset, "dataset_version": info.version}
