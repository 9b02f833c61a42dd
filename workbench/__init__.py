"""Decision Workbench: evaluate decision models, calibrate them, and ship routing thresholds.

``import workbench as wb`` — the workflow, in order::

    con = wb.connect("workbench.duckdb")                        # 1. open (or create) the store
    wb.import_dataset(con, **wb.bundled_dataset("sms_spam"))    # 2. labelled data, seeded splits
    run_id = wb.run(con, "sms_spam", schema, "baseline:tfidf-logreg")   # 3. run a provider
    answers = wb.load_answers(con, run_id, "spam", ["test"])    # 4. answers as arrays
    wb.import_answers(con, "answers.parquet", dataset="sms_spam", schema=schema, name="offline")   # answers from elsewhere
    wb.export_run(con, run_id, "parquet", "answers.parquet")    #    … and out again (streamed)
    wb.report(con, run_id)                                      # 5. calibration metrics (ECE, Brier …)
    wb.agreement(con, run_id)                                   #    annotators' agreement next to the model's
    wb.calibrate(con, run_id, "temperature")                    # 6. a recalibrated view of the run
    opts = wb.ThresholdOptions(alpha=0.05, delta=0.1)           # 7. how thresholds are chosen
    result = wb.choose_thresholds(con, run_id, "spam", opts)    # 8. certified (τ, m), judged on test
    wb.plan_labels(con, run_id, "spam", opts)                   #    how many labels certify (a pilot plan)
    policy = wb.build_policy(con, run_id, "spam", opts, out="policy.json")   # 9. the policy file
    wb.Policy.load("policy.json").decide(response)              # 10. what production loads
    wb.compare(con, [run_a, run_b])                             # 11. paired comparison of runs
    wb.robustness(con, base_run, [probed_run])                  #     flip rate / position bias of probes
    wb.cascade(con, [cheap_run, strong_run], "intent")          #     a certified cascade of two models
    wb.replay_shadow(con, "a-vs-b", run_a, run_b)               # 12. a shadow session …
    wb.shadow_report(con, "a-vs-b")                             #     … and its verdict
    wb.aggregate_answers("exports/", schema, engine="spark")    # 13. the same metrics where the logs live

Plots: ``wb.ReliabilityDisplay``, ``wb.ConfusionDisplay``, ``wb.RiskCoverageDisplay``,
``wb.ThresholdSurfaceDisplay`` (``from_…(...)`` constructors, the plotly figure in ``.figure_``).
Helpers: ``wb.load_schema``, ``wb.bundled_dataset``, ``wb.bundled_schema_file``, ``wb.get_run``,
``wb.list_runs``, ``wb.run_emulator`` (the offline provider emulator), ``wb.WorkbenchError`` (every
error a user can cause; ``str(err)`` is one line with a hint; ``wb.NotFoundError``, ``wb.OptionError``
whose ``parameter`` names the offending argument), ``wb.__version__``.

Every ``wb.*`` function calls the same library code as the CLI (``workbench …``) and the UI, with the
same defaults (:class:`ThresholdOptions`), so the same run gives the same figures everywhere. See
``help(wb.choose_thresholds)`` etc. for each step's parameters and a runnable example.
"""

__version__ = "0.1.0"

from typing import TYPE_CHECKING  # noqa: E402

from workbench.errors import WorkbenchError  # noqa: E402
from workbench.lazy import lazy_exports  # noqa: E402

if TYPE_CHECKING:
    from workbench.schema import DecisionSchema, load_schema, schema_hash

# Heavy modules (numpy, pydantic, duckdb, pandas, pyarrow, scipy, plotly) load on first use, so that
# ``import workbench`` (and with it every ``workbench`` command's start-up) and the dependency-light
# policy runtime stay light.
_LAZY = {
    "DecisionSchema": "workbench.schema",
    "load_schema": "workbench.schema",
    "schema_hash": "workbench.schema",
    "connect": "workbench.api",
    "import_dataset": "workbench.api",
    "run": "workbench.api",
    "load_answers": "workbench.api",
    "import_answers": "workbench.api",
    "export_run": "workbench.api",
    "report": "workbench.api",
    "agreement": "workbench.api",
    "calibrate": "workbench.api",
    "choose_thresholds": "workbench.api",
    "plan_labels": "workbench.api",
    "ThresholdOptions": "workbench.thresholds.options",
    "build_policy": "workbench.api",
    "Policy": "workbench.policy",
    "compare": "workbench.api",
    "robustness": "workbench.api",
    "cascade": "workbench.api",
    "replay_shadow": "workbench.api",
    "shadow_report": "workbench.api",
    "aggregate_answers": "workbench.api",
    "ReliabilityDisplay": "workbench.metrics.displays",
    "ConfusionDisplay": "workbench.metrics.displays",
    "RiskCoverageDisplay": "workbench.metrics.displays",
    "ThresholdSurfaceDisplay": "workbench.metrics.displays",
    "bundled_dataset": "workbench.bundled",
    "bundled_schema_file": "workbench.bundled",
    "run_emulator": "workbench.emulator",
    "NotFoundError": "workbench.errors",
    "OptionError": "workbench.errors",
    "transaction": "workbench.store.db",
    "RunAnswers": "workbench.answers",
    "get_run": "workbench.store.runs",
    "list_runs": "workbench.store.runs",
}


__getattr__, __dir__ = lazy_exports(__name__, _LAZY)


#: The workflow first (the order of ``help(workbench)``), then the helpers.
__all__ = [
    "connect",
    "import_dataset",
    "run",
    "load_answers",
    "import_answers",
    "export_run",
    "report",
    "agreement",
    "calibrate",
    "ThresholdOptions",
    "choose_thresholds",
    "plan_labels",
    "build_policy",
    "Policy",
    "compare",
    "robustness",
    "cascade",
    "replay_shadow",
    "shadow_report",
    "aggregate_answers",
    "ReliabilityDisplay",
    "ConfusionDisplay",
    "RiskCoverageDisplay",
    "ThresholdSurfaceDisplay",
    "WorkbenchError",
    "__version__",
    "DecisionSchema",
    "load_schema",
    "schema_hash",
    "bundled_dataset",
    "bundled_schema_file",
    "run_emulator",
    "NotFoundError",
    "OptionError",
    "transaction",
    "RunAnswers",
    "get_run",
    "list_runs",
]
