"""runner layer: plan work units, execute them with retries, cache and resume.

Public entry points: :func:`run_experiment`, :func:`resume_run`, :func:`start_run`,
:func:`execute_run`, :class:`RunOptions`.
"""

from workbench.runner.execute import RunInterrupted, RunOptions, execute_run, resume_run, run_experiment, start_run

__all__ = ["RunInterrupted", "RunOptions", "execute_run", "resume_run", "run_experiment", "start_run"]
