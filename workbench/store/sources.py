"""A stored run as an :class:`~workbench.answers.AnswerSource`: what every store-backed figure reads.

A calibrated view stored as its calibrators reads its parent's rows through them
(:func:`workbench.store.runs.answer_source`), so a view is a source like any other run.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from workbench.answers import RunAnswers
from workbench.schema import option_ids
from workbench.store.runs import count_answers, get_run, iter_answer_batches, load_answers
from workbench.store.schemas import load_stored_schema


class StoreSource:
    """The answers of one stored run (a run id or name, or a run row of :func:`~workbench.store.runs.get_run`)."""

    def __init__(self, con: Any, run: str | dict) -> None:
        self.con = con
        self.run = get_run(con, run) if isinstance(run, str) else run
        self.run_id = str(self.run["run_id"])
        self._questions: dict | None = None

    def _question(self, question: str):
        if self._questions is None:
            self._questions = load_stored_schema(self.con, self.run["schema_hash"]).questions
        return self._questions.get(question)

    def option_ids(self, question: str) -> list[str] | None:
        q = self._question(question)
        return None if q is None else option_ids(q)

    def question_type(self, question: str) -> str | None:
        q = self._question(question)
        return None if q is None else q.type

    def count(self, question: str, splits: Sequence[str] | None) -> int:
        return count_answers(self.con, self.run_id, question, splits)

    def batches(self, question: str, splits: Sequence[str] | None) -> Iterator[tuple[np.ndarray, RunAnswers]]:
        return iter_answer_batches(self.con, self.run_id, question, splits)

    def load(self, question: str, splits: Sequence[str] | None) -> RunAnswers:
        return load_answers(self.con, self.run_id, question, splits)
