"""Baselines that run in-process: a trained text classifier, routing rules, replayed responses.

- ``baseline:tfidf-logreg`` — per question, a TF-IDF (word 1–2-grams) + multinomial logistic
  regression trained on the dataset's ``train`` split only; answers with ``predict_proba`` mapped
  onto the schema's options in order. An option never seen in training keeps a floor of
  :data:`UNSEEN_FLOOR` (then the vector is re-normalised), so it is present but ~0.
- ``rules:PATH`` — keyword/regex routing rules from YAML (the "current routing rules" baseline);
  format in :class:`RulesProvider`.
- ``replay:PATH`` — recorded System One responses keyed by item id (JSONL or Parquet), so
  production logs are evaluated like any run; format in :class:`ReplayProvider`.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from workbench.errors import AnswerError
from workbench.providers.base import DecisionRequest, DecisionResult, ErrorKind, ProviderError
from workbench.providers.local import LocalBatchProvider, group_by_schema, result_from_probs, state_text
from workbench.schema.answers import normalise_answer
from workbench.schema.questions import option_ids

#: Probability floor for options absent from the training labels (before re-normalising).
UNSEEN_FLOOR = 1e-6
#: Hyper-parameters, part of the model identity (changing them invalidates cached answers).
TFIDF_PARAMS = {"ngram_range": (1, 2), "sublinear_tf": True, "min_df": 2}
LOGREG_PARAMS = {"C": 10.0, "solver": "saga", "max_iter": 300, "tol": 1e-3, "random_state": 0}
TFIDF_VERSION = 1


def _file_digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:12]


# -- baseline:tfidf-logreg ------------------------------------------------------------------------
class TfidfLogReg(LocalBatchProvider):
    """TF-IDF + logistic regression per question, trained on the ``train`` split only.

    Parameters
    ----------
    train_texts : sequence of str, length n_train
        States of the training items (JSON states as compact JSON).
    train_labels : dict of str to sequence of (str or None), each of length n_train
        Gold option id per question and training item (None = unlabelled for that question).
    identity : str
        What the training data is (``dataset@fingerprint``); part of the cache key.
    """

    def __init__(
        self,
        train_texts: Sequence[str],
        train_labels: dict[str, Sequence[str | None]],
        *,
        identity: str,
    ):
        self.spec = "baseline:tfidf-logreg"
        self.model = f"tfidf-logreg/v{TFIDF_VERSION}/{identity}"
        self._texts = np.asarray(list(train_texts), dtype=object)
        self._labels = {q: np.asarray(list(v), dtype=object) for q, v in train_labels.items()}
        self._fitted: dict[tuple[str, tuple[str, ...]], tuple[Any, Any, np.ndarray]] = {}
        self._lock = threading.Lock()

    def _fit(self, qid: str, options: list[str]):
        """Fit (once) the pipeline of question ``qid`` on training rows labelled with one of ``options``."""
        key = (qid, tuple(options))
        with self._lock:
            if key in self._fitted:
                return self._fitted[key]
            from sklearn.exceptions import ConvergenceWarning
            from sklearn.feature_extraction.text import TfidfVectorizer
            from sklearn.linear_model import LogisticRegression

            labels = self._labels.get(qid)
            if labels is None:
                raise ProviderError(
                    ErrorKind.INVALID, f"no training labels for question {qid!r} in the train split", sent=False
                )
            keep = np.isin(labels, np.asarray(options, dtype=object))
            classes = np.unique(labels[keep].astype(str))
            if classes.size < 2:
                raise ProviderError(
                    ErrorKind.INVALID,
                    f"question {qid!r}: the train split has {classes.size} "
                    "labelled option(s) among the schema's; need at least 2",
                    sent=False,
                )
            vectoriser = TfidfVectorizer(**TFIDF_PARAMS)
            X = vectoriser.fit_transform(self._texts[keep])
            clf = LogisticRegression(**LOGREG_PARAMS)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ConvergenceWarning)
                clf.fit(X, labels[keep].astype(str))
            # column j of predict_proba -> position of that class among the schema's options
            position = np.array([options.index(c) for c in clf.classes_])
            self._fitted[key] = (vectoriser, clf, position)
            return self._fitted[key]

    def predict_proba(self, qid: str, question, texts: Sequence[str]) -> np.ndarray:
        """Probabilities over the schema's options, shape (len(texts), n_options)."""
        options = option_ids(question)
        vectoriser, clf, position = self._fit(qid, options)
        p = clf.predict_proba(vectoriser.transform(list(texts)))
        out = np.full((len(texts), len(options)), UNSEEN_FLOOR)
        out[:, position] = p
        return out / out.sum(axis=1, keepdims=True)

    def decide_batch(self, requests: Sequence[DecisionRequest]) -> list[DecisionResult | ProviderError]:
        t0 = time.perf_counter()
        out: list[DecisionResult | ProviderError] = [None] * len(requests)  # type: ignore[list-item]
        for idx in group_by_schema(requests).values():
            schema = requests[idx[0]].schema
            texts = [state_text(requests[i].state) for i in idx]
            try:
                probs = {qid: self.predict_proba(qid, q, texts) for qid, q in schema.questions.items()}
            except ProviderError as exc:
                for i in idx:
                    out[i] = exc
                continue
            ms = (time.perf_counter() - t0) * 1000 / max(len(requests), 1)
            for row, i in enumerate(idx):
                out[i] = result_from_probs(
                    schema, {q: p[row] for q, p in probs.items()}, model=self.model, latency_ms=ms
                )
        return out


def build_tfidf_logreg(con, dataset: str, version: int | None = None) -> TfidfLogReg:
    """Read the ``train`` split of ``dataset`` (states and every question's labels) and wrap it."""
    from workbench.store.datasets import dataset_info, load_items, load_labels

    info = dataset_info(con, dataset, version)
    items = load_items(con, dataset, info["version"], splits=["train"])
    if items.empty:
        raise ProviderError(ErrorKind.INVALID, f"dataset {dataset!r} has no train split to learn from", sent=False)
    labels = load_labels(con, dataset, info["version"], splits=["train"])
    wide = labels.pivot(index="item_id", columns="question", values="option_id")
    wide = wide.reindex(items["item_id"])
    train_labels: dict[str, Sequence[str | None]] = {
        q: [None if (v is None or v != v) else str(v) for v in wide[q].tolist()] for q in wide.columns
    }
    texts = [state_text(s) for s in items["state"]]
    # identity = the training data itself, so relabelling a test item does not invalidate the cache
    digest = hashlib.sha256(json.dumps([texts, train_labels], ensure_ascii=False).encode()).hexdigest()[:12]
    return TfidfLogReg(texts, train_labels, identity=f"{dataset}@train-{digest}")


# -- rules:PATH -----------------------------------------------------------------------------------
class RulesProvider(LocalBatchProvider):
    """Keyword/regex routing rules, the way many teams route today.

    YAML format (one block per question id)::

        name: banking77-routing-rules       # optional
        questions:
          intent:
            match_probability: 0.9          # P(option of the first matching rule), default 0.9;
                                            # the rest is shared evenly by the other options
            default: null                   # option when nothing matches (given
                                            # match_probability too); null = uniform over all options
            rules:                          # in priority order: the first rule that matches wins
              - option: card_arrival
                keywords: ["card arrive", "not received my card"]   # case-insensitive, whole words
              - option: lost_or_stolen_card
                patterns: ['\\b(lost|stolen)\\b']                  # Python regexes, case-insensitive

    ``option`` is an option id of the question (``yes``/``no`` for noul, ``"0"``, ``"1"``, … for
    score). A question of the schema without a block is a ``missing_answer`` failure; a rule
    naming an option the schema lacks makes the request ``invalid_request`` (refused locally).
    """

    def __init__(self, path: str | Path, *, spec: str | None = None):
        path = Path(path)
        if not path.exists():
            raise ProviderError(ErrorKind.INVALID, f"{path}: rules file does not exist", sent=False)
        try:
            doc = yaml.safe_load(path.read_text(encoding="utf-8"))
        except yaml.YAMLError as exc:
            raise ProviderError(
                ErrorKind.INVALID, f"{path}: cannot parse YAML: {str(exc).splitlines()[0]}", sent=False
            ) from None
        if not isinstance(doc, dict) or not isinstance(doc.get("questions"), dict):
            raise ProviderError(ErrorKind.INVALID, f"{path}: expected a mapping with 'questions:'", sent=False)
        self.spec = spec or f"rules:{path}"
        self.model = f"rules/{path.stem}@{_file_digest(path)}"
        self._questions: dict[str, dict] = {}
        for qid, block in doc["questions"].items():
            self._questions[str(qid)] = self._compile(path, str(qid), block)

    @staticmethod
    def _compile(path: Path, qid: str, block: Any) -> dict:
        where = f"{path}: questions.{qid}"
        if not isinstance(block, dict):
            raise ProviderError(ErrorKind.INVALID, f"{where}: expected a mapping", sent=False)
        p = float(block.get("match_probability", 0.9))
        if not 0.0 < p <= 1.0:
            raise ProviderError(ErrorKind.INVALID, f"{where}.match_probability: {p} is outside (0, 1]", sent=False)
        compiled = []
        for n, rule in enumerate(block.get("rules") or []):
            if not isinstance(rule, dict) or "option" not in rule:
                raise ProviderError(ErrorKind.INVALID, f"{where}.rules[{n}]: needs an 'option'", sent=False)
            parts = [r"\b" + re.escape(str(k)).replace(r"\ ", r"\s+") + r"\b" for k in rule.get("keywords") or []]
            parts += [str(p_) for p_ in rule.get("patterns") or []]
            if not parts:
                raise ProviderError(ErrorKind.INVALID, f"{where}.rules[{n}]: needs keywords or patterns", sent=False)
            try:
                rx = re.compile("|".join(f"(?:{x})" for x in parts), re.IGNORECASE)
            except re.error as exc:
                raise ProviderError(ErrorKind.INVALID, f"{where}.rules[{n}]: bad regex: {exc}", sent=False) from None
            compiled.append((str(rule["option"]), rx))
        default = block.get("default")
        return {"p": p, "default": None if default is None else str(default), "rules": compiled}

    def predict_proba(self, qid: str, question, texts: Sequence[str]) -> np.ndarray:
        """Probabilities over the question's options, shape (len(texts), n_options)."""
        import pandas as pd

        block = self._questions[qid]
        options = option_ids(question)
        index = {o: i for i, o in enumerate(options)}
        for option, _ in block["rules"]:
            if option not in index:
                raise ProviderError(
                    ErrorKind.INVALID, f"rule option {option!r} is not an option of question {qid!r}", sent=False
                )
        if block["default"] is not None and block["default"] not in index:
            raise ProviderError(
                ErrorKind.INVALID, f"default {block['default']!r} is not an option of {qid!r}", sent=False
            )
        k = len(options)
        series = pd.Series(list(texts), dtype=object)
        chosen = np.full(len(texts), -1)
        with warnings.catch_warnings():  # user patterns may hold groups; we only test for a match
            warnings.simplefilter("ignore", UserWarning)
            for option, rx in block["rules"]:  # one pass over the items per rule
                hit = series.str.contains(rx, na=False).to_numpy() & (chosen < 0)
                chosen[hit] = index[option]
        if block["default"] is not None:
            chosen[chosen < 0] = index[block["default"]]
        p = block["p"]
        rest = (1.0 - p) / (k - 1) if k > 1 else 0.0
        out = np.full((len(texts), k), rest)
        rows = np.flatnonzero(chosen >= 0)
        out[rows, chosen[rows]] = p
        out[chosen < 0] = 1.0 / k
        return out

    def decide_batch(self, requests: Sequence[DecisionRequest]) -> list[DecisionResult | ProviderError]:
        out: list[DecisionResult | ProviderError] = [None] * len(requests)  # type: ignore[list-item]
        for idx in group_by_schema(requests).values():
            schema = requests[idx[0]].schema
            texts = [state_text(requests[i].state) for i in idx]
            asked = [q for q in schema.questions if q in self._questions]
            try:
                probs = {q: self.predict_proba(q, schema.questions[q], texts) for q in asked}
            except ProviderError as exc:
                for i in idx:
                    out[i] = exc
                continue
            missing = {
                q: (ErrorKind.MISSING, f"the rules file has no block for question {q!r}")
                for q in schema.questions
                if q not in self._questions
            }
            sub = schema.subset(asked) if asked else None
            for row, i in enumerate(idx):
                if sub is None:
                    out[i] = DecisionResult(answers={}, failures=dict(missing), model=self.model, cost_usd=0.0)
                    continue
                res = result_from_probs(sub, {q: p[row] for q, p in probs.items()}, model=self.model)
                res.failures.update(missing)
                out[i] = res
        return out


# -- replay:PATH ----------------------------------------------------------------------------------
class ReplayProvider(LocalBatchProvider):
    """Recorded responses, looked up by item id.

    File: JSONL (one object per line) or Parquet, one row per item with

    - ``item_id`` (or ``id``): the dataset's item id;
    - ``response``: the System One response body (object or JSON text) — or its fields
      ``model``, ``answers``, ``usage`` at the top level of the row;
    - optional ``latency_ms``, ``cost_usd``, ``request_id``;
    - optional ``error``: ``{"kind": "<ErrorKind value>", "message": "..."}`` for a recorded failure.

    An item absent from the file is a ``missing_answer`` failure, and so is an asked question
    absent from its recorded answers. The runner's cache key includes the item id here, because
    the answer depends on which item was recorded, not on the request.
    """

    keyed_by_item = True

    def __init__(self, path: str | Path, *, spec: str | None = None):
        import pandas as pd

        path = Path(path)
        if not path.exists():
            raise ProviderError(ErrorKind.INVALID, f"{path}: replay file does not exist", sent=False)
        self.spec = spec or f"replay:{path}"
        self.model = f"replay/{path.stem}@{_file_digest(path)}"
        if path.suffix.lower() in (".parquet", ".pq"):
            df = pd.read_parquet(path)
            rows = df.to_dict(orient="records")
        else:
            rows = []
            for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
                if not line.strip():
                    continue
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError:
                    raise ProviderError(ErrorKind.INVALID, f"{path}: line {n} is not JSON", sent=False) from None
        self._rows: dict[str, dict] = {}
        for n, row in enumerate(rows, start=1):
            item = row.get("item_id", row.get("id"))
            if item is None:
                raise ProviderError(ErrorKind.INVALID, f"{path}: record {n} has no item_id", sent=False)
            self._rows[str(item)] = row

    @staticmethod
    def _response(row: dict) -> dict:
        resp = row.get("response")
        if isinstance(resp, str):
            resp = json.loads(resp)
        if resp is None:
            resp = {k: row[k] for k in ("model", "answers", "usage") if k in row}
        return resp

    def _one(self, request: DecisionRequest) -> DecisionResult | ProviderError:
        row = self._rows.get(str(request.item_id))
        if row is None:
            return ProviderError(ErrorKind.MISSING, f"item {request.item_id!r} is not in the replay file", sent=False)
        err = row.get("error")
        if isinstance(err, str) and err:
            try:
                err = json.loads(err)  # Parquet logs store the object as JSON text
            except json.JSONDecodeError:
                err = {"kind": "malformed", "message": err}
            if not isinstance(err, dict):
                err = {"kind": "malformed", "message": str(err)}
        if isinstance(err, dict) and err:
            try:
                kind = ErrorKind(err.get("kind", "malformed"))
            except ValueError:
                kind = ErrorKind.MALFORMED
            return ProviderError(kind, f"recorded failure: {err.get('message', '')}"[:300], sent=False)
        try:
            resp = self._response(row)
        except json.JSONDecodeError:
            return ProviderError(
                ErrorKind.MALFORMED, f"item {request.item_id!r}: recorded response is not JSON", sent=False
            )
        recorded = resp.get("answers") or {}
        if isinstance(recorded, str):
            recorded = json.loads(recorded)
        answers, failures, raw = {}, {}, {}
        for qid, q in request.schema.questions.items():
            if qid not in recorded:
                failures[qid] = (ErrorKind.MISSING, f"recorded response has no answer for {qid!r}")
                continue
            raw[qid] = recorded[qid]
            try:
                answers[qid] = normalise_answer(q, recorded[qid], question_id=qid)
            except AnswerError as exc:
                kind = ErrorKind.REFUSED if "refused" in str(exc) else ErrorKind.MALFORMED
                failures[qid] = (kind, str(exc))
        usage = resp.get("usage") or {}
        tokens = usage.get("input_tokens")
        cost = row.get("cost_usd", usage.get("cost"))
        latency = row.get("latency_ms")
        return DecisionResult(
            answers=answers,
            failures=failures,
            model=resp.get("model") or self.model,
            request_id=row.get("request_id"),
            input_tokens=int(tokens) if isinstance(tokens, (int, float)) else None,
            cost_usd=float(cost) if isinstance(cost, (int, float)) and cost == cost else None,
            latency_ms=float(latency) if isinstance(latency, (int, float)) and latency == latency else None,
            raw={"model": resp.get("model"), "answers": raw, "usage": usage},
        )

    def decide_batch(self, requests: Sequence[DecisionRequest]) -> list[DecisionResult | ProviderError]:
        return [self._one(r) for r in requests]
