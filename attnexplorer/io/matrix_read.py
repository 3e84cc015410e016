"""Matrices in: a file (CSV, NPY, TSV/TXT) read as a float64 matrix, and shape checks
(``io.matrices`` re-exports them).

Every file is checked before it is read (a regular file, at most ``MAX_MATRIX_FILE_BYTES``,
an NPY header's shape within ``MAX_MATRIX_CELLS``, never a pickle) and every number must be
finite; anything else is a ``MatrixError`` naming the file, and the row and column for text.
"""

from __future__ import annotations

import csv
import io
import os
import stat
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

from ..core.errors import AttnExplorerError
from .matrix_tables import MatrixError
from ..core.numbers.display import counted

# A matrix file larger than this is refused before it is read (the largest session matrix,
# 8192 × 1024 float64, is 64 MiB as NPY and about 200 MB as CSV).
MAX_MATRIX_FILE_BYTES = 256 * 1024 * 1024
MAX_MATRIX_CELLS = 8192 * 8192


def _float_cell(cell: str) -> float | None:
    try:
        return float(cell.strip())
    except ValueError:
        return None


def _read_csv(text: str, source: str) -> np.ndarray:
    # Python 3.10's csv reader raises at a NUL character where 3.11+ reads it as any other, so
    # it is refused here first, the same on every Python. Text CSV never holds one: such a file
    # is UTF-16 (each ASCII character followed by a NUL) or binary.
    nul = text.find("\x00")
    if nul >= 0:
        raise MatrixError(f"{source}: line {text.count(chr(10), 0, nul) + 1} holds a NUL character; "
                          "a CSV file must be UTF-8 text (is this one UTF-16 or binary?)")
    # Blank lines are skipped; a row of empty cells is kept (it may be a header of empty labels).
    try:
        rows = [r for r in csv.reader(io.StringIO(text, newline="")) if r and (len(r) > 1 or r[0].strip())]
    except csv.Error as err:  # a cell longer than the csv module's field limit (128 KiB)
        raise MatrixError(f"{source}: is not readable as CSV: {err}") from None
    if not rows:
        raise MatrixError(f"{source}: holds no numbers")
    # Labels. The first row is a header when its first cell is empty (the corner of a labelled
    # table, as matrix_to_csv writes it: then tokens such as "1" or "nan" are still labels),
    # when any later cell is not a number, or when only its first cell is not a number and
    # the first cells below it all are (a one-column header). The first column is labels
    # below an empty corner, or when any of its cells below the header is not a number.
    def number(cell):
        return _float_cell(cell) is not None

    top = rows[0]
    corner = top[0].strip() == ""
    if corner or any(not number(c) for c in top[1:]):
        header = True
    elif number(top[0]):
        header = False
    else:
        header = len(rows) > 1 and all(r and number(r[0]) for r in rows[1:])
    first = 1 if header else 0
    body = rows[first:]
    if not body:
        raise MatrixError(f"{source}: has a header row but no numbers")
    labelled = corner or any(r and not number(r[0]) for r in body)
    skip = 1 if labelled else 0
    width = len(body[0]) - skip
    if width < 1:
        raise MatrixError(f"{source}: row {first + 1} has no numbers")
    values = np.empty((len(body), width), dtype=np.float64)
    for i, row in enumerate(body):
        if len(row) - skip != width:
            raise MatrixError(f"{source}: row {first + i + 1} has {counted(len(row) - skip, 'number')}, expected {width} "
                              f"(like row {first + 1})")
        for j, cell in enumerate(row[skip:]):
            v = _float_cell(cell)
            if v is None:
                raise MatrixError(f"{source}: row {first + i + 1}, column {skip + j + 1}: {cell.strip()!r} is not a number")
            values[i, j] = v
    return values


def _read_npy(path: Path, source: str) -> np.ndarray:
    try:
        with open(path, "rb") as f:
            version = np.lib.format.read_magic(f)
            reader = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
            shape, _, dtype = reader(f)
            if dtype.hasobject or dtype.kind not in "biuf":
                raise MatrixError(f"{source}: holds {counted(dtype, 'value')}, expected numbers")
            if len(shape) not in (1, 2):
                raise MatrixError(f"{source}: holds a {len(shape)}-D array of shape {shape}, expected a matrix")
            if int(np.prod(shape, dtype=np.int64)) > MAX_MATRIX_CELLS:
                raise MatrixError(f"{source}: shape {shape} is larger than this app can hold")
            f.seek(0)
            a = np.load(f, allow_pickle=False)
    except MatrixError:
        raise
    except (OSError, ValueError, EOFError) as err:
        reason = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise MatrixError(f"{source}: is not a readable .npy file: {reason}") from None
    return np.asarray(a, dtype=np.float64)


def read_matrix(path) -> np.ndarray:
    """A float64 2-D matrix from ``.csv`` (labels or not), ``.npy`` (no pickle) or ``.tsv``/``.txt``.

    A 1-D NPY becomes one row. Every number must be finite. Raises ``MatrixError`` naming
    the file (and row and column for text) for anything malformed.
    """
    path = Path(path)
    source = str(path)
    suffix = path.suffix.lower()
    if suffix not in (".csv", ".npy", ".tsv", ".txt"):
        raise MatrixError(f"{source}: cannot read {suffix or 'files without an extension'}; use .csv, .npy, .tsv or .txt")
    try:
        info = os.stat(path)
    except (OSError, ValueError) as err:  # ValueError: a NUL in the name
        raise MatrixError(f"{source}: cannot be read: {getattr(err, 'strerror', None) or err}") from None
    if not stat.S_ISREG(info.st_mode):  # a named pipe would block the read forever
        raise MatrixError(f"{source}: is not a regular file")
    size = info.st_size
    if size > MAX_MATRIX_FILE_BYTES:
        raise MatrixError(f"{source}: is {size:,} bytes, more than the limit of {MAX_MATRIX_FILE_BYTES:,}")
    if suffix == ".npy":
        a = _read_npy(path, source)
    else:
        try:
            text = path.read_bytes().decode("utf-8-sig")
        except OSError as err:
            raise MatrixError(f"{source}: cannot be read: {err.strerror or err}") from None
        except UnicodeDecodeError as err:
            raise MatrixError(f"{source}: is not UTF-8 text (byte 0x{err.object[err.start]:02x} at offset {err.start})") from None
        if suffix == ".csv":
            a = _read_csv(text, source)
        else:
            from .matrix_text import parse_matrix_text

            try:
                a = parse_matrix_text(text)
            except AttnExplorerError as err:
                raise MatrixError(f"{source}: {err}") from None
    if a.ndim == 1:
        a = a[None, :]
    if a.size == 0:
        raise MatrixError(f"{source}: holds no numbers")
    if not np.isfinite(a).all():
        i, j = (int(k) for k in np.argwhere(~np.isfinite(a))[0])
        raise MatrixError(f"{source}: the number at row {i + 1}, column {j + 1} is {float(a[i, j])!r}; every number must be finite")
    return a


def _shape_text(shape: Iterable[int | None]) -> str:
    return "×".join("any" if s is None else str(s) for s in shape)


def check_shape(array, expected: Sequence[int | None], what: str) -> np.ndarray:
    """Return ``array`` if its shape fits ``expected`` (None = any size), else MatrixError.

    The message names ``what``: ``W_q (head 1): expected a 4×2 matrix, got 3×2``.
    """
    a = np.asarray(array)
    expected = tuple(expected)
    if a.ndim != len(expected) or any(e is not None and e != s for e, s in zip(expected, a.shape)):
        kind = "matrix" if len(expected) == 2 else f"{len(expected)}-D array"
        raise MatrixError(f"{what}: expected a {_shape_text(expected)} {kind}, got {_shape_text(a.shape)}")
    return a
