"""Floor 7: workflows over the store: load a run's answers, call the maths one floor down, store or
return the result.

``evaluation`` (reports, calibration, agreement), ``thresholds`` (thresholds, frontiers, label plans),
``experiments`` (experiment files), ``compare`` (paired comparison of runs), ``robustness`` (probed runs
against their base run), ``gate`` (requirement files) and ``figures`` (the plotly figures of the CLI and
the UI). Import the module you need; this package imports nothing, so ``workbench --help`` stays light.
"""
