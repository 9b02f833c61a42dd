"""Entry script of ``workbench ui`` (kept in its own folder: Streamlit would otherwise also list
the ``pages/`` folder next to the entry script as auto-discovered pages)."""

from workbench.ui.app import run_app

run_app()
