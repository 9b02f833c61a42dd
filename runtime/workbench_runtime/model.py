"""Policy file format v1/v2: what production loads to route decisions.

Format 2 adds an optional ``cascade`` section (a certified cascade of models: accept at a stage,
escalate to the next, review after the last); a policy without one is still written as format 1, so
older runtimes keep loading it, and refuse a cascade policy as "newer than this runtime reads".

A policy is a JSON document validated by the JSON Schema shipped next to this module
(``policy.schema.json``, generated from :class:`Policy`; ``workbench policy schema`` prints it).
Its ``content_hash`` is ``"sha256:" + sha256(canonical JSON of the document without content_hash
and signature)``, where canonical JSON sorts keys, uses ``(",", ":")`` separators and no NaN; every
other field is covered, including optional fields added later. Loading checks the format, the format
version, the hash, each question's options against the embedded (hashed) decision schema, and — when
the runtime is given a key — the signature (:mod:`workbench_runtime.signing`), and fails closed
(:class:`~workbench_runtime.errors.PolicyError`).

Gradual rollout: ``mode: shadow`` sends every answer to its fallback and records what the rule would
have accepted; a question's ``enabled_options`` (``null`` = all) limits auto-accept to those options.

Thresholds that are ``null`` mean "never accept": a disabled side of a yes/no rule or an option
with no certified thresholds. The fallback action is never ``accept``.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

#: Document type tag and the newest format this code reads.
FORMAT: Literal["workbench.policy"] = "workbench.policy"
FORMAT_VERSION = 2
#: The format version a policy with a ``cascade`` section needs (plain policies stay at 1).
CASCADE_FORMAT_VERSION = 2
SCHEMA_FILE = Path(__file__).with_name("policy.schema.json")
_SEMVER = r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(?:-[0-9A-Za-z.-]+)?(?:\+[0-9A-Za-z.-]+)?$"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


Threshold = Annotated[float | None, Field(ge=-1.0, le=2.0)]
#: Actions for answers that are not auto-accepted; ``accept`` is deliberately not among them.
FALLBACK_ACTIONS = ("review", "escalate", "hold")
Fallback = Literal["review", "escalate", "hold"]


class ClassOverride(_Strict):
    """Thresholds used when this option is on top (``tau: null`` = never accept it)."""

    tau: Threshold
    margin: Threshold = 0.0


class TopMarginRule(_Strict):
    """choice: accept the top option when ``p_top >= tau`` and ``p_top - p_second >= margin``."""

    kind: Literal["top_margin"] = "top_margin"
    tau: Threshold
    margin: Threshold = 0.0
    per_class: dict[str, ClassOverride] = Field(default_factory=dict)
    abstain_options: list[str] = Field(default_factory=list)
    fallback: Fallback = "review"


class NoulTwoSidedRule(_Strict):
    """noul: accept yes when ``p_yes >= tau_yes`` (and ``p_yes >= 0.5``); accept no when ``p_yes <= tau_no``
    (and ``p_yes < 0.5``). ``null`` disables that side."""

    kind: Literal["noul_two_sided"] = "noul_two_sided"
    tau_yes: Threshold
    tau_no: Threshold
    fallback: Fallback = "review"


class ScoreLevelRule(_Strict):
    """score: accept the top (or expected) level when its probability and margin clear the thresholds."""

    kind: Literal["score"] = "score"
    level: Literal["top", "expected"] = "top"
    tau: Threshold
    margin: Threshold = 0.0
    per_class: dict[str, ClassOverride] = Field(default_factory=dict)
    abstain_options: list[str] = Field(default_factory=list)
    fallback: Fallback = "review"


RuleSpec = Annotated[TopMarginRule | NoulTwoSidedRule | ScoreLevelRule, Field(discriminator="kind")]


class CalibratorSpec(_Strict):
    """A fitted calibrator as written by ``workbench.metrics.recalibrate`` (``identity`` = none)."""

    type: str = Field(min_length=1)
    params: dict[str, Any] = Field(default_factory=dict)


class ClassConstraint(_Strict):
    """A critical option: at most ``beta`` of the items truly of it may be auto-accepted as another option.

    Recorded with the calibration figures it was certified on (jointly with the main risk, see
    ``Objective.joint``); applying the policy needs nothing from it — the rule's thresholds already
    carry it.
    """

    option: str
    beta: float = Field(gt=0, lt=1)
    certified: bool = False
    n_true: int | None = None
    misrouted: int | None = None
    rate: float | None = None
    p_value: float | None = None
    risk_upper_bound: float | None = None


class Objective(_Strict):
    """How the rule was chosen. ``certified`` is true only for the Learn-then-Test guarantee.

    ``costs`` (misroute costs ``{true: {accepted: cost}}``, unlisted misroutes 1) makes ``risk`` the
    expected misroute cost among auto-accepted items, ``alpha`` in cost units; ``constraints`` are
    the critical-option bounds certified with it, and ``joint`` says how ``delta`` covers them all.
    """

    kind: Literal["guarantee", "cost", "coverage", "error", "manual"]
    certified: bool
    feasible: bool = True
    risk: str = "error rate among auto-accepted items"
    alpha: float | None = None
    delta: float | None = None
    method: str | None = None
    per_class: bool = False
    class_correction: str | None = None
    n_calibration: int | None = None
    n_calibrator_fit: int = 0
    n_accepted_calibration: int | None = None
    certified_bound: float | None = None
    risk_upper_bound: float | None = None
    expected_coverage: float | None = None
    calibration_error: float | None = None
    costs: dict[str, dict[str, float]] | None = None
    constraints: list[ClassConstraint] | None = None
    joint: str | None = None
    details: dict[str, Any] = Field(default_factory=dict)


class Interval(_Strict):
    value: float | None
    low: float | None
    high: float | None
    k: int
    n: int
    interval: str
    confidence: float


class TestMetrics(_Strict):
    """Figures of the rule on the test split, with intervals."""

    n_items: int
    n_accepted: int
    n_errors: int
    n_review: int
    n_failed: int = 0
    error: Interval
    coverage: Interval
    review_rate: Interval
    confusion: dict[str, Any] | None = None


class QuestionPolicy(_Strict):
    """One question: options in schema order, calibrator, rule, how it was chosen, and its rollout."""

    type: Literal["noul", "choice", "score"]
    options: list[str] = Field(min_length=1)
    calibrator: CalibratorSpec
    rule: RuleSpec
    objective: Objective
    expected_test: TestMetrics | None = None
    #: calibration-time histograms of p_top, margin and the predicted option (drift reference of
    #: ``workbench monitor``; see ``workbench.policy.reference``), absent in older files
    reference: dict[str, Any] | None = None
    #: Gradual rollout: auto-accept only these options (``null`` = every option the rule accepts).
    enabled_options: list[str] | None = None


class Source(_Strict):
    run_id: str | None = None
    provider: str
    model: str | None = None
    dialect: str | None = None


class SchemaSpec(_Strict):
    hash: str = Field(pattern=r"^[0-9a-f]{64}$")
    name: str | None = None
    questions: dict[str, Any]


class DatasetSpec(_Strict):
    name: str
    version: int | None = None
    fingerprint: str | None = None
    split_seed: int | None = None
    calibration_split: str = "calibration"
    test_split: str = "test"


class Validity(_Strict):
    """Conditions under which the policy may auto-accept; otherwise every question gets its fallback."""

    schema_hashes: list[str] = Field(min_length=1)
    models: list[str] = Field(default_factory=list)
    max_state_tokens: int | None = Field(default=None, ge=1)


class Signature(_Strict):
    """A signature over the canonical document without this block (see :mod:`workbench_runtime.signing`)."""

    alg: Literal["ed25519", "hmac-sha256"]
    key_id: str = Field(pattern=r"^[0-9a-f]{16}$")
    value: str = Field(min_length=1)


class CascadeStage(_Strict):
    """One stage of a cascade: the model that answers, its price, and the rule that accepts its answer.

    ``rule.fallback`` is ``escalate`` on every stage but the last (the item goes to the next stage)
    and the final action (``review`` or ``hold``) on the last.
    """

    source: Source
    price_per_call_usd: float | None = Field(default=None, ge=0)
    calibrator: CalibratorSpec
    rule: RuleSpec


class CascadeSpec(_Strict):
    """A certified cascade of one question (format 2): stage 0 answers first; ``decide(..., stage=s)``.

    ``questions[question]`` holds stage 0's rule (a runtime that ignores stages sees a plain policy
    whose fallback is ``escalate``); ``objective`` is the joint Learn-then-Test guarantee over all
    stages; ``expected_test`` the cascade's test figures (coverage, error, escalation, cost, latency).
    """

    question: str
    stages: list[CascadeStage] = Field(min_length=2)
    objective: Objective
    expected_test: dict[str, Any] | None = None


class Policy(_Strict):
    """Threshold policy, format version 1 (2 with a ``cascade`` section)."""

    format: Literal["workbench.policy"] = FORMAT
    format_version: int = 1
    policy_version: str = Field(default="1.0.0", pattern=_SEMVER)
    content_hash: str | None = Field(default=None, pattern=r"^sha256:[0-9a-f]{64}$")
    created_at: str
    created_by: str | None = None
    workbench_version: str
    source: Source
    decision_schema: SchemaSpec
    dataset: DatasetSpec
    questions: dict[str, QuestionPolicy] = Field(min_length=1)
    validity: Validity
    #: ``live`` applies the rules; ``shadow`` sends everything to the fallback and records what would have been accepted.
    mode: Literal["live", "shadow"] = "live"
    notes: list[str] = Field(default_factory=list)
    #: A certified cascade (format 2); ``None`` in plain policies.
    cascade: CascadeSpec | None = None
    signature: Signature | None = None

    @field_validator("format_version")
    @classmethod
    def _known_format(cls, v: int) -> int:
        if v < 1 or v > FORMAT_VERSION:
            raise ValueError(f"format_version {v} is not supported (this workbench reads 1..{FORMAT_VERSION})")
        return v

    @model_validator(mode="after")
    def _cascade_needs_format_2(self) -> Policy:
        if self.cascade is not None and self.format_version < CASCADE_FORMAT_VERSION:
            raise ValueError(f"a cascade section needs format_version {CASCADE_FORMAT_VERSION}")
        return self

    # -- hashing ---------------------------------------------------------------------------------
    def body(self) -> dict:
        """The document as JSON-ready data, without ``content_hash`` and ``signature`` (what the hash covers)."""
        doc = self.model_dump(mode="json", exclude=set(UNHASHED))
        if doc.get("cascade") is None:  # a plain policy reads exactly as format 1 did
            doc.pop("cascade", None)
        return doc

    def document(self) -> dict:
        """The whole document as JSON-ready data (``signature`` left out when there is none)."""
        doc = self.model_dump(mode="json")
        for key in ("cascade", "signature"):
            if doc.get(key) is None:
                doc.pop(key, None)
        return doc

    def compute_hash(self) -> str:
        return content_hash(self.body())

    def with_hash(self) -> Policy:
        return self.model_copy(update={"content_hash": self.compute_hash()})

    def to_json(self) -> str:
        """Pretty JSON (keys in model order) with the content hash filled in."""
        return document_text(self.with_hash().document())


#: Top-level keys the content hash does not cover (the hash itself, and the signature made over the hashed document).
UNHASHED = ("content_hash", "signature")


def canonical_json(doc: Any) -> str:
    """Sorted keys, ``(",", ":")`` separators, no NaN; arrays (e.g. ``options``) keep their order."""
    return json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def document_text(doc: dict) -> str:
    """The file text of a policy document: pretty JSON in the given key order."""
    return json.dumps(doc, indent=2, ensure_ascii=False, allow_nan=False) + "\n"


def content_hash(body: dict) -> str:
    """``sha256:<hex>`` of the canonical JSON of ``body`` without ``content_hash`` and ``signature``."""
    body = {k: v for k, v in body.items() if k not in UNHASHED}
    return "sha256:" + hashlib.sha256(canonical_json(body).encode("utf-8")).hexdigest()


def json_schema() -> dict:
    """The JSON Schema of policy files (the shipped ``policy.schema.json`` is this, written out)."""
    schema = Policy.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = "https://decision-workbench.invalid/policy/v1.schema.json"
    schema["title"] = "Decision Workbench threshold policy, format versions 1-2"
    return schema


def semver_tuple(v: str) -> tuple[int, int, int]:
    m = re.match(_SEMVER, v)
    if not m:
        raise ValueError(f"not a semantic version: {v!r}")
    return int(m.group(1)), int(m.group(2)), int(m.group(3))


if __name__ == "__main__":  # regenerate the shipped schema after changing the model: python -m workbench_runtime.model
    SCHEMA_FILE.write_text(json.dumps(json_schema(), indent=2) + "\n", encoding="utf-8")
    print(f"wrote {SCHEMA_FILE}")
