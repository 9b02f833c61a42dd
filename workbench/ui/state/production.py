"""Production: shadow sessions and their reports (``workbench shadow``)."""

from __future__ import annotations

import duckdb
import pandas as pd
import streamlit as st

from workbench.ui.state.store import read_connection
from workbench.ui.state.thresholds import threshold_defaults


@st.cache_data(show_spinner=False, max_entries=16)
def shadow_sessions(path: str, token: tuple) -> pd.DataFrame:
    from workbench.store.shadow import list_sessions

    with read_connection(path) as con:
        try:
            return list_sessions(con)
        except duckdb.CatalogException:  # a store made before the shadow tables existed
            return pd.DataFrame(
                columns=["shadow", "source", "champion", "challenger", "schema", "created_at", "n_requests"]
            )


@st.cache_data(show_spinner="Building the shadow report…", max_entries=16)
def shadow_report(
    path: str, token: tuple, shadow: str, champion: tuple, challenger: tuple, criteria: tuple, n_boot: int = 1000
) -> dict:
    """:func:`workbench.shadow.report.shadow_report` as a dict (+ ``frame``).

    ``champion``/``challenger`` = ("file", PATH) for a policy file, ("rule", "tau=..,margin=..") or
    ("none", "") for the policy the library certifies on that side's run at ``ThresholdOptions()`` (what
    ``workbench shadow report SESSION`` does without routing flags); ``criteria`` = sorted (name, value)
    pairs of :class:`Criteria`.
    """
    from workbench.shadow.policies import load_side_policy, parse_rule_options
    from workbench.shadow.report import Criteria
    from workbench.shadow.report import shadow_report as _report

    def side(spec: tuple):
        kind, value = spec
        if kind == "file":
            return load_side_policy(value)
        if kind == "rule":
            return parse_rule_options([value]) if value else None
        return None

    with read_connection(path) as con:
        rep = _report(
            con,
            shadow,
            champion_policy=side(champion),
            challenger_policy=side(challenger),
            criteria=Criteria(**dict(criteria)),
            n_boot=n_boot,
            options=threshold_defaults(),
        )
    out = rep.to_dict()
    out["frame"] = rep.to_frame()
    return out
