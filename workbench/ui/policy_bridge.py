"""Policy export from the Thresholds page and the session's list of policies.

The export calls :func:`workbench.policy.build.build_policy` — the function behind
``workbench policy export`` — on a read-only snapshot of the store, so the file downloaded here
is the file the CLI would write for the same options.
"""

from __future__ import annotations

import json

import streamlit as st

from workbench.errors import WorkbenchError

#: session_state: {file name: policy JSON text} exported or uploaded in this tab.
KEY_POLICIES = "session_policies"


def session_policies() -> dict[str, str]:
    return st.session_state.setdefault(KEY_POLICIES, {})


def export_policy_json(path: str, run_id: str, question: str, settings: dict, policy_version: str = "1.0.0") -> str:
    """Build and hash a policy for ``question`` of ``run_id``; returns the file's JSON text.

    ``settings`` are :class:`~workbench.thresholds.options.ThresholdOptions` fields, so the options are
    those ``workbench policy export`` builds from the same flags.
    """
    from workbench.policy.build import build_policy
    from workbench.thresholds.options import ThresholdOptions
    from workbench.ui.state import read_connection

    with read_connection(path) as con:
        model, _ = build_policy(
            con,
            run_id,
            [question],
            ThresholdOptions(**settings),
            policy_version=policy_version,
            created_by="workbench ui",
        )
    return model.to_json()


def export_section(
    path: str,
    token: tuple,
    run_id: str,
    question: str,
    settings: tuple,
    *,
    per_class_overrides: bool = False,
    qtype: str = "choice",
    point: tuple[float, float] | None = None,
) -> None:
    """Objective, options and a download button for the policy file.

    ``settings`` are the certified section's :func:`workbench.ui.state.threshold_settings` (α, δ,
    method, calibration), so a guarantee policy carries the rule that section shows. ``point`` is the
    sliders' (τ, m) — or (τ yes, τ no) for ``qtype == "noul"`` — offered as the manual rule.
    """
    objective = st.radio(
        "Objective written into the policy",
        ["guarantee", "cost", "coverage", "error", "manual"],
        horizontal=True,
        key="pol_objective",
        format_func={
            "guarantee": "guarantee (certified, α/δ above)",
            "cost": "cost (costs above)",
            "coverage": "target coverage (uncertified)",
            "error": "target error (uncertified)",
            "manual": "manual τ/m (UNCERTIFIED)",
        }.get,
    )
    options: dict = {
        **dict(settings),
        "objective": objective,
        "per_class": bool(st.session_state.get("thr_per_class")) and objective == "guarantee",
    }
    if objective == "cost":
        options.update(
            review_cost=float(st.session_state.get("thr_review_cost", 1.0)),
            error_cost=float(st.session_state.get("thr_error_cost", 10.0)),
            api_cost_per_item=float(st.session_state.get("thr_api_cost", 0.0)),
        )
    elif objective == "coverage":
        options["target_coverage"] = st.slider("Target coverage", 0.05, 1.0, 0.8, 0.05, key="pol_target_coverage")
    elif objective == "error":
        options["target_error"] = st.slider("Target error", 0.005, 0.5, 0.05, 0.005, key="pol_target_error")
    elif objective == "manual":
        names = ("tau_yes", "tau_no") if qtype == "noul" else ("tau", "margin")
        labels = ("τ yes", "τ no") if qtype == "noul" else ("τ", "m")
        start = point or ((0.8, 0.2) if qtype == "noul" else (0.6, 0.0))
        st.warning(
            "**Not certified.** A hand-set rule carries no guarantee: the policy records "
            "`objective.kind = manual`, `certified = false`, and its calibration and test figures are point "
            "estimates. Use the guarantee objective for a certified rule."
        )
        m1, m2 = st.columns(2)
        options["manual_rule"] = {
            names[0]: float(
                m1.number_input(labels[0], 0.0, 1.0, float(start[0]), 0.01, format="%.3f", key="pol_manual_x")
            ),
            names[1]: float(
                m2.number_input(labels[1], 0.0, 1.0, float(start[1]), 0.01, format="%.3f", key="pol_manual_y")
            ),
        }
    version = st.text_input("Policy version (semver)", "1.0.0", key="pol_version")
    st.caption(
        "The policy layer refits the calibrator and the thresholds on the calibration split with these "
        "options (like `workbench policy export`), and reports the rule on test. "
        + ("Per-class overrides from the sliders are not exported. " if per_class_overrides else "")
    )
    if st.button("Build policy", key="pol_build", type="primary"):
        try:
            text = export_policy_json(path, run_id, question, options, version)
        except WorkbenchError as exc:
            from workbench.ui.state import show_error

            show_error(exc)
            return
        name = f"policy-{run_id}-{question}-{objective}.json"
        session_policies()[name] = text
        st.session_state["pol_last_export"] = name
    last = st.session_state.get("pol_last_export")
    if last and last in session_policies():
        name = str(last)
        doc = json.loads(session_policies()[name])
        q = doc["questions"][question] if question in doc["questions"] else next(iter(doc["questions"].values()))
        test = q.get("expected_test") or {}
        box = st.success if q["objective"]["certified"] else st.warning
        box(
            f"`{name}` — rule {json.dumps(q['rule'])}, certified: {q['objective']['certified']}"
            + ("" if q["objective"]["certified"] else " (NOT certified)")
            + ", "
            f"test coverage {test.get('coverage', {}).get('value')}, "
            f"content hash {doc['content_hash'][:19]}…"
        )
        st.download_button(
            "Download policy.json",
            session_policies()[name].encode(),
            file_name="policy.json",
            mime="application/json",
            key="pol_download",
        )
        st.caption("It is also listed on the Policy page (view, diff, download).")
