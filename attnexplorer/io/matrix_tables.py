"""One labelled matrix as text: CSV, LaTeX, Markdown and JSON (``io.matrices`` re-exports it).

Each writer takes a 2-D array and optional row and column labels. ``csv_label``,
``latex_escape`` and ``markdown_escape`` make a label safe in its format; ``exact_text`` and
``rounded_text`` are the numbers as the writers set them, for writers that go a block of
rows at a time (``io.matrix_stream``).
"""

from __future__ import annotations

import csv
import io
import json
from typing import Sequence

import numpy as np

from ..core.errors import AttnExplorerError
from .json_text import array_json

TABLE_FORMATS = ("csv", "tex", "md", "json")


class MatrixError(AttnExplorerError):
    """A matrix file is malformed, or a matrix does not have the shape it must have."""


def _as_2d(array) -> np.ndarray:
    a = np.asarray(array)
    if a.ndim == 1:
        a = a[:, None]
    if a.ndim != 2:
        raise MatrixError(f"expected a 2-D matrix, got shape {a.shape}")
    return a


def _labels(labels: Sequence[str] | None, count: int, axis: str) -> list[str] | None:
    if labels is None:
        return None
    labels = [str(t) for t in labels]
    if len(labels) != count:
        raise MatrixError(f"{len(labels)} {axis} labels for {count} {axis}s")
    return labels


def exact_text(v) -> str:
    """A number as text that reads back to the same value (bools as 1/0)."""
    if isinstance(v, (bool, np.bool_)):
        return "1" if v else "0"
    if isinstance(v, (int, np.integer)):
        return str(int(v))
    return repr(float(v))


def rounded_text(v, digits: int) -> str:
    if isinstance(v, (bool, np.bool_)):
        return "1" if v else "0"
    if isinstance(v, (int, np.integer)):
        return str(int(v))
    text = f"{float(v):.{digits}f}"
    return "0." + "0" * digits if text == "-0." + "0" * digits else text  # no "-0.0000"


# A cell a spreadsheet would run as a formula starts with one of these (OWASP, "CSV
# injection"); a label starting so is written after a single quote, which spreadsheets show
# as text and hide. Numbers are written as numbers (a minus sign is only ever a number's).
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
# Python 3.10's csv writer cannot write NUL at all and 3.11+ writes it raw; sessions refuse
# control characters in tokens, and any other label shows them as their visible symbols
# (U+2400 ␀ …), so no Python raises and every spreadsheet reads the same file.
_CSV_CONTROL = {c: 0x2400 + c for c in range(0x20) if chr(c) not in "\t\n\r"}


def csv_label(text: str) -> str:
    """A label as its CSV cell: formula-like text behind a ``'``, NUL and other C0 controls
    (but tab and line breaks, which CSV quotes) as their visible symbols."""
    text = text.translate(_CSV_CONTROL)
    return "'" + text if text.startswith(_FORMULA_START) else text


def matrix_to_csv(array, row_labels: Sequence[str] | None = None, col_labels: Sequence[str] | None = None) -> str:
    """CSV text; with labels, they are the header row and first column (corner cell empty).

    Labels are quoted as CSV requires (a token may be "," or '"') and written as text a
    spreadsheet will not run (``csv_label``: ``=SUM(A1)`` is written ``'=SUM(A1)``);
    numbers are exact (``repr``), booleans 1/0. ``read_matrix`` reads it back, labels or not.
    """
    a = _as_2d(array)
    rows = _labels(row_labels, a.shape[0], "row")
    cols = _labels(col_labels, a.shape[1], "column")
    rows = None if rows is None else [csv_label(t) for t in rows]
    cols = None if cols is None else [csv_label(t) for t in cols]
    buf = io.StringIO()
    # "\r\n" as RFC 4180 says: the writer then quotes labels holding either line-break character.
    writer = csv.writer(buf, lineterminator="\r\n")
    if cols is not None:
        writer.writerow(([""] if rows is not None else []) + cols)
    for i, row in enumerate(a.tolist()):
        cells = [exact_text(v) for v in row]
        writer.writerow(([rows[i]] if rows is not None else []) + cells)
    return buf.getvalue()


_LATEX = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
          "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}",
          "<": r"\textless{}", ">": r"\textgreater{}", "|": r"\textbar{}", "\n": " ", "\r": " ", "\t": " "}


def latex_escape(text: str) -> str:
    """``text`` as LaTeX that prints it literally (text mode)."""
    return "".join(_LATEX.get(ch, ch) for ch in text)


def matrix_to_latex(array, row_labels: Sequence[str] | None = None, col_labels: Sequence[str] | None = None,
                    digits: int = 4) -> str:
    """LaTeX a paper can paste: a ``tabular`` with labels, a ``bmatrix`` (amsmath) without.

    Numbers are rounded to ``digits`` places and set in math mode (a real minus sign);
    labels are escaped (``_``, ``&``, ``%``, ``$``, ``#``, braces, ``\\``, ``~``, ``^`` ...).
    """
    a = _as_2d(array)
    rows = _labels(row_labels, a.shape[0], "row")
    cols = _labels(col_labels, a.shape[1], "column")
    body = [[f"${rounded_text(v, digits)}$" for v in row] for row in a.tolist()]
    if rows is None and cols is None:
        rows_text = ["  " + " & ".join(c.strip("$") for c in row) for row in body]
        return "\\begin{bmatrix}\n" + " \\\\\n".join(rows_text) + "\n\\end{bmatrix}\n"
    spec = ("l|" if rows is not None else "") + "r" * a.shape[1]
    lines = [rf"\begin{{tabular}}{{{spec}}}"]
    if cols is not None:
        lines.append("  " + " & ".join(([""] if rows is not None else []) + [latex_escape(c) for c in cols]) + r" \\")
        lines.append(r"  \hline")
    for i, row in enumerate(body):
        lines.append("  " + " & ".join(([latex_escape(rows[i])] if rows is not None else []) + row) + r" \\")
    lines.append(r"\end{tabular}")
    return "\n".join(lines) + "\n"


_MARKDOWN_SPECIAL = set("\\`*_[]<>|#")


def markdown_escape(text: str) -> str:
    """``text`` as a Markdown table cell that shows it literally (``|`` cannot end the cell)."""
    text = text.replace("\r", " ").replace("\n", " ")
    return "".join("\\" + ch if ch in _MARKDOWN_SPECIAL else ch for ch in text)


def matrix_to_markdown(array, row_labels: Sequence[str] | None = None, col_labels: Sequence[str] | None = None,
                       digits: int = 4) -> str:
    """A Markdown (GFM) table; numbers right-aligned and rounded to ``digits`` places.

    Without column labels the header is ``0, 1, ...`` (a Markdown table needs a header).
    """
    a = _as_2d(array)
    rows = _labels(row_labels, a.shape[0], "row")
    cols = _labels(col_labels, a.shape[1], "column")
    if cols is None:
        cols = [str(j) for j in range(a.shape[1])]
    header = ([""] if rows is not None else []) + [markdown_escape(c) for c in cols]
    rule = ([":---"] if rows is not None else []) + ["---:"] * a.shape[1]
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join(rule) + " |"]
    for i, row in enumerate(a.tolist()):
        cells = ([markdown_escape(rows[i])] if rows is not None else []) + [rounded_text(v, digits) for v in row]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def matrix_to_json(array, row_labels: Sequence[str] | None = None, col_labels: Sequence[str] | None = None) -> str:
    """``{"rows": [...] | null, "columns": [...] | null, "values": [[...]]}``, numbers exact."""
    a = _as_2d(array)
    rows = _labels(row_labels, a.shape[0], "row")
    cols = _labels(col_labels, a.shape[1], "column")
    values = array_json(a.astype(int) if a.dtype == bool else a)
    return json.dumps({"rows": rows, "columns": cols}, ensure_ascii=False)[:-1] + f', "values": {values}}}\n'


_TABLE_WRITERS = {"csv": matrix_to_csv, "tex": matrix_to_latex, "md": matrix_to_markdown, "json": matrix_to_json}


def matrix_to_text(fmt: str, array, row_labels=None, col_labels=None) -> str:
    """Dispatch on ``fmt`` in ``TABLE_FORMATS``: csv, tex, md, json."""
    if fmt not in _TABLE_WRITERS:
        raise MatrixError(f"unknown matrix format {fmt!r}; choose one of {', '.join(TABLE_FORMATS)}")
    return _TABLE_WRITERS[fmt](array, row_labels, col_labels)


