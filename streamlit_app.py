"""Decision Workbench UI: ``streamlit run streamlit_app.py -- --db workbench.duckdb``.

The frame (navigation over ``workbench/ui/pages``) lives in :mod:`workbench.ui.app` so that
``workbench ui`` can launch the same app from an installed package.
"""

from workbench.ui.app import run_app

run_app()
