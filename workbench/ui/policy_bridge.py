"""Policy export from the Thresholds page (calls the policy layer; filled in as it lands)."""
from __future__ import annotations

import streamlit as st


def export_section(path: str, token: tuple, run_id: str, question: str, recalibrate: str | None, *,
                   rule_params: dict, per_class: dict, selection, alpha: float, delta: float) -> None:
    st.info("Policy export needs the policy layer (`workbench.policy`), which is not in this build yet.")
