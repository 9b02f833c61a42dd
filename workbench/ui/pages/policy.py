"""Policy: load (file next to the store, upload, or exported in this tab), view, diff two, download.

Loading runs the full check of ``workbench policy validate`` (JSON Schema, format version,
content hash, rules rebuild): a corrupt or tampered file is refused, never shown as valid.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pandas as pd
import streamlit as st

from workbench.errors import WorkbenchError
from workbench.ui import policy_bridge, state

st.title("Policy")


def _validate_text(name: str, text: str) -> dict:
    from workbench.policy.io import validate_file

    with tempfile.TemporaryDirectory() as tmp:
        f = Path(tmp) / Path(name).name
        f.write_text(text, encoding="utf-8")
        report = validate_file(f)
    report["path"] = name
    return report


def _model(text: str, name: str):
    from workbench.policy.runtime import verify_document

    return verify_document(json.loads(text), source=name)


# -- sources --------------------------------------------------------------------------------------------
store_dir = Path(state.db_path()).parent
found = {
    str(p): p.read_text(encoding="utf-8")
    for p in [store_dir / "policy.json", *sorted((store_dir / "policies").glob("*.json"))]
    if p.is_file()
}
uploads = st.file_uploader("Load policy files", type=["json"], accept_multiple_files=True, key="pol_upload")
for up in uploads or []:
    policy_bridge.session_policies()[up.name] = up.getvalue().decode("utf-8", errors="replace")
available = {**found, **policy_bridge.session_policies()}
if not available:
    st.info(
        f"No policy yet: export one on the Thresholds page, upload a file, or run `workbench demo` "
        f"(it writes `policy.json` next to the store, here `{store_dir}`)."
    )
    st.stop()
names = list(available)


def _label(n: str) -> str:
    return Path(n).name if n in found else f"{n} (this session)"


if st.session_state.get("pol_view") not in names:
    st.session_state.pop("pol_view", None)
chosen = st.selectbox("Policy", names, key="pol_view", format_func=_label)
text = available[chosen]
try:
    report = _validate_text(chosen, text)
    model = _model(text, chosen)
except (WorkbenchError, json.JSONDecodeError) as exc:
    st.error(f"Refused (fail closed): {getattr(exc, 'message', str(exc))}")
    st.stop()


# -- view -------------------------------------------------------------------------------------------------
def _thr(v) -> str:
    return "never" if v is None else f"{v:.3f}"


def rule_text(rule) -> str:
    """The rule in words (what the runtime applies), e.g. ``accept top when P ≥ 0.620 and margin ≥ 0.100``."""
    d = rule.model_dump()
    if d["kind"] == "noul_two_sided":
        return f"yes when P(yes) ≥ {_thr(d['tau_yes'])}; no when P(yes) ≤ {_thr(d['tau_no'])}; else {d['fallback']}"
    head = (
        "top level"
        if d["kind"] == "score" and d.get("level") == "top"
        else ("expected level" if d["kind"] == "score" else "top option")
    )
    text = f"accept {head} when P ≥ {_thr(d['tau'])} and margin ≥ {_thr(d['margin'])}; else {d['fallback']}"
    if d.get("per_class"):
        text += "; overrides: " + ", ".join(
            f"{o} (P ≥ {_thr(c['tau'])}, margin ≥ {_thr(c['margin'])})" for o, c in d["per_class"].items()
        )
    if d.get("abstain_options"):
        text += "; never accept " + ", ".join(d["abstain_options"])
    return text


st.success(f"Valid policy v{model.policy_version} · format {model.format_version} · hash `{model.content_hash}`")
st.markdown(  # full names (a metric box would cut long provider or model names)
    f"**Source run** `{model.source.run_id}` · **provider** `{model.source.provider}` · **model** "
    f"`{model.source.model or '—'}` · **dataset** `{model.dataset.name}` v{model.dataset.version} · "
    f"**{len(model.questions)} question{'s' if len(model.questions) != 1 else ''}**"
)
rows = []
for q, qp in model.questions.items():
    test = qp.expected_test
    rows.append(
        {
            "question": q,
            "type": qp.type,
            "options": len(qp.options),
            "rule": rule_text(qp.rule),
            "calibrator": qp.calibrator.type,
            "objective": qp.objective.kind,
            "certified": qp.objective.certified,
            "α / δ": " / ".join("—" if v is None else f"{v:g}" for v in (qp.objective.alpha, qp.objective.delta)),
            "coverage (test)": test.coverage.value if test else None,
            "error (test)": test.error.value if test else None,
            "error 95% high": test.error.high if test else None,
        }
    )
st.dataframe(
    pd.DataFrame(rows),
    hide_index=True,
    width="stretch",
    key="pol_questions",
    # every column fits the page (the last one was cut, issue 27 §6): the rule's full text is printed below,
    # so its cell stays small; the short columns are small
    column_config={
        "question": st.column_config.TextColumn("question", width="small"),
        "type": st.column_config.TextColumn("type", width="small"),
        "options": st.column_config.NumberColumn("options", width="small"),
        "rule": st.column_config.TextColumn("rule", width="small"),
        "calibrator": st.column_config.TextColumn("calibrator", width="small"),
        "objective": st.column_config.TextColumn("objective", width="small"),
        "certified": st.column_config.CheckboxColumn("certified", width="small"),
        "α / δ": st.column_config.TextColumn("α / δ", width="small"),
        "coverage (test)": st.column_config.NumberColumn("coverage", format="%.3f", width="small", help="test split"),
        "error (test)": st.column_config.NumberColumn("error", format="%.3f", width="small", help="test split"),
        "error 95% high": st.column_config.NumberColumn(
            "error ≤", format="%.3f", width="small", help="upper end of the 95% interval of the test error"
        ),
    },
)
for r in rows:  # the table cell may be narrower than a long rule: the full text, once per question
    st.markdown(f"**{r['question']}** — {r['rule']}" + ("" if r["certified"] else "  *(not certified)*"))
st.caption(
    f"Valid for schema hashes {', '.join(h[:12] for h in model.validity.schema_hashes)}"
    + (f", models {', '.join(model.validity.models)}" if model.validity.models else "")
    + f"; created {model.created_at} by {model.created_by or '—'} (workbench {model.workbench_version})."
)
with st.expander("Full file", expanded=False):
    st.code(text, language="json")
st.download_button(
    "Download this policy",
    text.encode("utf-8"),
    file_name=Path(chosen).name,
    mime="application/json",
    key="pol_download_view",
)

# -- diff -------------------------------------------------------------------------------------------------
st.subheader("Diff two policies")
if len(names) < 2:
    st.info("Load or export a second policy to compare.")
    st.stop()
d1, d2 = st.columns(2)
a_name = d1.selectbox("A (current)", names, index=0, key="pol_diff_a", format_func=_label)
b_name = d2.selectbox("B (candidate)", names, index=1, key="pol_diff_b", format_func=_label)
try:
    a, b = _model(available[a_name], a_name), _model(available[b_name], b_name)
except (WorkbenchError, json.JSONDecodeError) as exc:
    st.error(f"Refused (fail closed): {getattr(exc, 'message', str(exc))}")
    st.stop()
from workbench.policy.io import diff_policies  # noqa: E402

diff = diff_policies(a, b)
if diff["identical"]:
    st.success("Identical (same content hash).")
else:
    st.write(
        f"Version {diff['version']['a']} → {diff['version']['b']}"
        + (" (B is newer)" if diff["version"]["b_is_newer"] else "")
    )
    if diff["rule_changes"]:
        st.dataframe(
            pd.DataFrame(
                [
                    {"question": q, "A": json.dumps(v["a"]), "B": json.dumps(v["b"])}
                    for q, v in diff["rule_changes"].items()
                ]
            ),
            hide_index=True,
            width="stretch",
            key="pol_rule_changes",
        )
    changes = pd.DataFrame(diff["changes"]).astype(str) if diff["changes"] else pd.DataFrame(columns=["path", "a", "b"])
    st.dataframe(changes, hide_index=True, width="stretch", key="pol_changes")

path, token = state.current()
runs = state.runs_frame(path, token) if Path(path).exists() else pd.DataFrame()
if not runs.empty:
    run_id = st.selectbox(
        "Measure both on a run's test split",
        ["(none)", *runs["run_id"].tolist()],
        key="pol_diff_run",
        format_func=lambda r: r if r == "(none)" else state.run_label(runs, r),
    )
    if run_id != "(none)":
        from workbench.policy.build import diff_on_run

        with state.stop_on_error():
            with state.read_connection(path) as con:
                moves = diff_on_run(con, a, b, run_id)
        rows = []
        for q, mv in moves["questions"].items():
            if "coverage_change" not in mv:
                rows.append({"question": q, "note": "question or options missing in this run"})
                continue
            rows.append(
                {
                    "question": q,
                    "coverage A": mv["a"]["coverage"]["value"],
                    "coverage B": mv["b"]["coverage"]["value"],
                    "coverage change": mv["coverage_change"],
                    "error A": mv["a"]["error"]["value"],
                    "error B": mv["b"]["error"]["value"],
                    "error change": mv["error_change"],
                    "accepted change": mv["accepted_change"],
                }
            )
        st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch", key="pol_diff_on_run")
