"""Escaping of user-supplied strings where they are rendered.

Column names, category values, group labels and file names come from the user's data. Every
renderer passes them through one of these functions: :func:`markdown_text` for Markdown (model
card, registry description, ``report.md``, Prefect Markdown artifacts), :func:`html_text` for
HTML (``report.html``), :func:`csv_cell` / :func:`csv_safe_frame` for every CSV written (a
spreadsheet runs a cell that starts with ``=``, ``+``, ``-``, ``@``, a tab or a carriage return
as a formula); every plot is drawn inside :func:`literal_plot_text` (matplotlib reads text
between two ``$`` as mathtext: ``$50k-$100k`` would lose its dollars and ``$x^$ band`` fail).
"""

from __future__ import annotations

import contextlib
import csv
import html
import re
import threading

import pandas as pd

__all__ = [
    "FORMULA_START",
    "csv_cell",
    "csv_safe_frame",
    "html_text",
    "literal_plot_text",
    "markdown_text",
    "write_safe_csv",
]

FORMULA_START = ("=", "+", "-", "@", "\t", "\r")

# Every character with a meaning in CommonMark or GitHub-flavoured Markdown ($ opens GitHub's
# math), and the two that open HTML (< and >, rendered as entities so no tag survives any
# Markdown renderer).
_MARKDOWN_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+\-.!|~$])")
_NEWLINES = re.compile(r"[\r\n]+")


def markdown_text(value: object) -> str:
    """``value`` as literal Markdown text: no emphasis, link, image, code span, table cell or
    HTML tag can start inside it, and it stays on one line (safe in a table cell)."""
    text = _NEWLINES.sub(" ", str(value))
    text = html.escape(text, quote=True)
    return _MARKDOWN_SPECIAL.sub(r"\\\1", text)


def html_text(value: object) -> str:
    """``value`` as HTML text or attribute value (quotes escaped)."""
    return html.escape(str(value), quote=True)


def csv_cell(value: object) -> object:
    """A string cell that a spreadsheet would evaluate as a formula gets a leading ``'``;
    other values are returned unchanged."""
    if isinstance(value, str) and value.startswith(FORMULA_START):
        return "'" + value
    return value


def csv_safe_frame(frame: pd.DataFrame) -> pd.DataFrame:
    """A copy of ``frame`` whose string cells and column names cannot start a formula."""
    safe = frame.copy()
    safe.columns = [csv_cell(str(c)) if isinstance(c, str) else c for c in safe.columns]
    for column in safe.columns:
        if safe[column].dtype == object or isinstance(safe[column].dtype, pd.StringDtype):
            safe[column] = safe[column].map(csv_cell)
    return safe


def write_safe_csv(frame: pd.DataFrame, path, **kwargs) -> None:
    """Write ``frame`` as CSV with :func:`csv_safe_frame`; every string is quoted, so a carriage
    return or newline inside a cell can never start a new row."""
    csv_safe_frame(frame).to_csv(path, quoting=csv.QUOTE_NONNUMERIC, **kwargs)


# rcParams are global: plots drawn one at a time, so no thread sees another's settings.
_PLOTTING = threading.RLock()


@contextlib.contextmanager
def literal_plot_text():
    """Matplotlib draws every text made inside this block as the literal characters: no
    mathtext (``text.parse_math``) and no LaTeX (``text.usetex``), whatever the user's
    matplotlibrc says. Usable as a decorator of a plotting function; such plots are drawn one
    at a time."""
    import matplotlib

    with _PLOTTING, matplotlib.rc_context({"text.parse_math": False, "text.usetex": False}):
        yield
