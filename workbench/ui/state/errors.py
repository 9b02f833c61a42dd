"""How a page shows a :class:`workbench.errors.WorkbenchError`: one readable line, never a traceback.

The message is shown as the library wrote it: options are named as API parameters in backticks
(:mod:`workbench.errors`), which Streamlit's markdown renders as code; only the CLI maps them to flags.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import streamlit as st

from workbench.errors import WorkbenchError


def show_error(exc: Exception) -> None:
    """One readable line for a WorkbenchError (message + hint), never a traceback."""
    message, hint = getattr(exc, "message", str(exc)), getattr(exc, "hint", None)
    st.error(f"{message}" + (f"  \n*{hint}*" if hint else ""))


@contextmanager
def stop_on_error() -> Iterator[None]:
    """The block's WorkbenchError shown as :func:`show_error` does, and the page stopped there."""
    try:
        yield
    except WorkbenchError as exc:
        show_error(exc)
        st.stop()
