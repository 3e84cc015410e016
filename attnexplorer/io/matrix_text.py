"""Matrices as text: what a person pastes, and what Copy puts on the clipboard.

``parse_matrix_text(text)`` reads a 2-D block from any of:

- spreadsheet cells: rows on lines, cells separated by tabs, commas or spaces (one separator
  kind per block: tabs if any line has a tab, else commas if any line has one, else spaces);
  a first row and/or first column of labels (cells that are not numbers) is skipped;
- numpy's printout ``[[1. 2.]\\n [3. 4.]]`` or ``array([[1., 2.], [3., 4.]], dtype=float32)``;
- torch's printout ``tensor([[1., 2.], [3., 4.]])``, also with ``Parameter containing:``,
  ``requires_grad=True`` or ``grad_fn=...`` around it.

A single row (``1 2 3`` or ``[1, 2, 3]``) is a 1×n matrix. Cells may hold simple arithmetic
(``sqrt(2)``, ``-1/3``), see ``core.numbers.expr``. Any problem raises ``AttnExplorerError`` naming
the row and column (counted from 1) and nothing is returned.

``format_tsv(array)`` writes tab-separated rows with full precision, so that pasting the text
back gives exactly the same numbers.
"""

from __future__ import annotations

import re

import numpy as np

from ..core.errors import AttnExplorerError
from ..core.numbers.expr import format_full, parse_number
from ..core.numbers.display import counted

# A pasted block bigger than this is surely a mistake (the largest session is 8192 × 1024).
MAX_CELLS = 8192 * 1024

_INNER_ROW = re.compile(r"\[([^\[\]]*)\]")


def parse_matrix_text(text: str) -> np.ndarray:
    """The float64 (rows, cols) matrix written in ``text``, or ``AttnExplorerError``."""
    if not isinstance(text, str):
        raise AttnExplorerError(f"expected text, got {type(text).__name__}")
    if not text.strip():
        raise AttnExplorerError("the text is empty; there is no matrix to read")
    if len(text) > MAX_CELLS * 32:
        raise AttnExplorerError("the text is too long to be a matrix this app can hold")
    if "[" in text:
        rows = _bracket_rows(text)
    else:
        rows = _plain_rows(text)
    return _to_array(rows)


def _bracket_rows(text: str) -> list[list[str]]:
    start, end = text.find("["), text.rfind("]")
    if end < start:
        raise AttnExplorerError("the brackets do not match: a '[' has no closing ']'")
    body = text[start:end + 1]
    if "..." in body or "…" in body:
        raise AttnExplorerError("the printout is abbreviated with '...'; print the full matrix "
                                "(np.set_printoptions(threshold=sys.maxsize) or torch.set_printoptions(profile='full'))")
    depth = deepest = 0
    for ch in body:
        if ch == "[":
            depth += 1
            deepest = max(deepest, depth)
        elif ch == "]":
            depth -= 1
            if depth < 0:
                break
    if depth != 0:
        raise AttnExplorerError("the brackets do not match: count the '[' and ']'")
    if deepest > 2:
        raise AttnExplorerError(f"the printout is {deepest}-dimensional; paste one 2-D matrix (one head) at a time")
    rows = [_split_cells(m.group(1), ",") for m in _INNER_ROW.finditer(body)]
    leftovers = _INNER_ROW.sub("", body[1:-1] if deepest == 2 else "").strip(" ,\n\t\r")
    if leftovers:
        raise AttnExplorerError(f"unexpected text {leftovers[:20]!r} between the rows of the printout")
    return rows


def _split_cells(line: str, sep: str | None) -> list[str]:
    if sep == ",":
        # numpy separates with ", " or with spaces alone; accept both, and a trailing comma.
        cells = re.split(r"\s*,\s*|\s+", line.strip().strip(","))
    elif sep == "\t":
        cells = [c.strip() for c in line.split("\t")]
    else:
        cells = line.split()
    return [c for c in cells if c != ""] if sep != "\t" else cells


def _plain_rows(text: str) -> list[list[str]]:
    lines = [ln for ln in text.replace("\r\n", "\n").replace("\r", "\n").split("\n") if ln.strip()]
    if any("\t" in ln for ln in lines):
        sep = "\t"
        # A spreadsheet copy may end each line with a tab; drop trailing empty cells only.
        rows = [_split_cells(ln.rstrip("\t "), sep) for ln in lines]
    elif any("," in ln for ln in lines):
        sep = ","
        rows = [[c.strip() for c in ln.strip().rstrip(",").split(",")] for ln in lines]
    else:
        rows = [_split_cells(ln, None) for ln in lines]
    return rows


def _is_number(cell: str) -> bool:
    try:
        parse_number(cell)
        return True
    except AttnExplorerError:
        return False


def _to_array(rows: list[list[str]]) -> np.ndarray:
    rows = [r for r in rows if r]
    if not rows:
        raise AttnExplorerError("no numbers found in the text")
    # A label row: no cell of the first row (except maybe a corner) is a number.
    if len(rows) > 1 and not any(_is_number(c) for c in rows[0][1:] or rows[0]):
        rows = rows[1:]
    # A label column: the first cell of every row is not a number (a token, a name).
    if all(len(r) > 1 for r in rows) and not any(_is_number(r[0]) for r in rows):
        rows = [r[1:] for r in rows]
    width = len(rows[0])
    for i, r in enumerate(rows):
        if len(r) != width:
            raise AttnExplorerError(f"row {i + 1} has {counted(len(r), 'value')} but row 1 has {width}; every row needs the same number of values")
    if len(rows) * width > MAX_CELLS:
        raise AttnExplorerError(f"a {len(rows)}×{width} block is larger than this app can hold")
    out = np.empty((len(rows), width), dtype=np.float64)
    for i, r in enumerate(rows):
        for j, cell in enumerate(r):
            try:
                out[i, j] = _cell(cell)
            except AttnExplorerError as err:
                raise AttnExplorerError(f"row {i + 1}, column {j + 1}: {err}") from None
    return out


def _cell(cell: str) -> float:
    # Fast path for plain numbers (a pasted 4096×64 block must not take seconds).
    try:
        value = float(cell)
    except ValueError:
        return parse_number(cell)
    if not np.isfinite(value):
        return parse_number(cell)  # raises with the "not finite" message
    return value


def format_tsv(array) -> str:
    """Tab-separated rows (newline-separated), every number at full precision."""
    a = np.asarray(array, dtype=np.float64)
    if a.ndim == 1:
        a = a[None, :]
    if a.ndim != 2:
        raise AttnExplorerError(f"only a 1-D or 2-D matrix can be written as rows, got shape {a.shape}")
    return "\n".join("\t".join(format_full(v) for v in row) for row in a)
