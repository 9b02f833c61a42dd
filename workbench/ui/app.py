"""The Streamlit frame: page navigation and the sidebar (which store, refresh).

``streamlit run streamlit_app.py -- --db PATH`` and ``workbench ui --db PATH`` both run
:func:`run_app`. Each screen is one file in ``workbench/ui/pages/``.
"""

from __future__ import annotations

from pathlib import Path

import streamlit as st

PAGES_DIR = Path(__file__).resolve().parent / "pages"

#: (file, title, icon) of every screen, in the order of the navigation menu.
PAGES = [
    ("datasets.py", "Datasets", ":material/dataset:"),
    ("runs.py", "Runs", ":material/play_circle:"),
    ("calibration.py", "Calibration", ":material/tune:"),
    ("thresholds.py", "Thresholds", ":material/call_split:"),
    ("compare.py", "Compare", ":material/compare_arrows:"),
    ("shadow.py", "Shadow", ":material/visibility:"),
    ("policy.py", "Policy", ":material/policy:"),
    ("monitor.py", "Monitor", ":material/monitor_heart:"),
]


def _sidebar() -> None:
    from workbench import __version__
    from workbench.ui import state

    with st.sidebar:
        st.caption(f"Decision Workbench {__version__}")
        path = state.db_path()
        new = st.text_input(
            "Store (DuckDB file)",
            value=path,
            key="db_path_input",
            help="The UI reads a snapshot of this file, so runs can write to it meanwhile.",
        )
        if new and new != path:
            st.session_state[state.KEY_DB] = str(Path(new).expanduser().resolve())
            st.rerun()
        if st.button("Refresh", key="refresh_store", help="Re-read the store (new runs, progress)."):
            state.refresh()


def run_app() -> None:
    """Build the navigation over ``workbench/ui/pages`` and run the selected page."""
    st.set_page_config(page_title="Decision Workbench", page_icon=":material/rule:", layout="wide")
    pages = [st.Page(PAGES_DIR / f, title=t, icon=i, default=(n == 0)) for n, (f, t, i) in enumerate(PAGES)]
    nav = st.navigation(pages)
    _sidebar()
    nav.run()
