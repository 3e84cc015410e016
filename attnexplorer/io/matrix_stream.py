"""Matrices too large to hold, written a block of rows at a time: NPY, NPZ, JSON and the
labelled tables (CSV, LaTeX, Markdown), byte for byte what the whole-array writers
(``matrix_bundles``, ``matrix_tables``) write for the same numbers.

A ``StreamedArray`` is a stack of 2-D matrices (``parts``, each a function that yields its
row blocks in order); it is ``(len(parts), rows, cols)``, or ``(rows, cols)`` when
``squeeze``. Only one block is ever in memory. NaN (a pooled block whose every cell is
blocked) is written as ``nan`` in tables and ``null`` in JSON.
"""

from __future__ import annotations

import csv
import io
import json
import math
import zipfile
from dataclasses import dataclass
from typing import Callable, Iterator, Sequence

import numpy as np

from .atomic import atomic_write_with
from .json_text import array_json, write_array
from .matrix_tables import csv_label, latex_escape, markdown_escape, rounded_text


@dataclass(frozen=True)
class StreamedArray:
    """``parts``: one function per 2-D matrix of the stack, yielding its row blocks."""

    rows: int
    cols: int
    dtype: np.dtype
    parts: tuple[Callable[[], Iterator[np.ndarray]], ...]
    squeeze: bool = False

    @property
    def shape(self) -> tuple[int, ...]:
        return (self.rows, self.cols) if self.squeeze else (len(self.parts), self.rows, self.cols)

    def blocks(self, part: int) -> Iterator[np.ndarray]:
        for block in self.parts[part]():
            block = np.asarray(block)
            if block.ndim != 2 or block.shape[1] != self.cols:
                raise ValueError(f"a block of shape {block.shape} in a matrix of {self.cols} columns")
            yield block


# -- NPY and NPZ ---------------------------------------------------------------------------

def _write_npy_to(f, array) -> None:
    if isinstance(array, StreamedArray):
        header = {"descr": np.lib.format.dtype_to_descr(np.dtype(array.dtype)), "fortran_order": False,
                  "shape": array.shape}
        np.lib.format.write_array_header_2_0(f, header)
        for part in range(len(array.parts)):
            for block in array.blocks(part):
                f.write(np.ascontiguousarray(block, dtype=array.dtype).tobytes())
    else:
        np.lib.format.write_array(f, np.asarray(array), allow_pickle=False)


def write_npy_streamed(path, array) -> None:
    """One array (whole or ``StreamedArray``) as ``.npy``, atomically; ``np.load`` reads it."""
    atomic_write_with(path, lambda f: _write_npy_to(f, array))


def write_npz_streamed(path, arrays: dict) -> None:
    """Arrays (whole or streamed) in one uncompressed ``.npz``, atomically, block by block."""
    def write(f):
        with zipfile.ZipFile(f, "w", zipfile.ZIP_STORED, allowZip64=True) as zf:
            for name, array in arrays.items():
                with zf.open(f"{name}.npy", "w", force_zip64=True) as member:
                    _write_npy_to(member, array)

    atomic_write_with(path, write)


# -- JSON ----------------------------------------------------------------------------------

def _json_rows(block: np.ndarray) -> str:
    """The rows of ``block`` as JSON lists, comma-separated; NaN (a pooled overview's block
    with every cell blocked) as null."""
    try:
        return array_json(block, allow_nan=True)[1:-1]
    except ValueError:  # an infinity: written as json writes it (Infinity), as it always was
        return ", ".join(json.dumps([None if math.isnan(v) else v for v in row]) for row in block.tolist())


def write_streamed_json_value(array, write) -> None:
    """``array`` as JSON (nested lists), handed to ``write`` a block of rows at a time."""
    if not isinstance(array, StreamedArray):
        a = np.asarray(array)
        if a.dtype.kind == "f" and a.ndim >= 2 and not np.isfinite(a).all():
            # A pooled overview: NaN where a block is all blocked, written as null.
            write("[")
            for i in range(a.shape[0]):
                write(", " if i else "")
                write_streamed_json_value(a[i], write)
            write("]")
            return
        if a.dtype.kind == "f" and a.ndim == 1 and not np.isfinite(a).all():
            write("[" + _json_rows(a[None, :])[1:-1] + "]")
            return
        write_array(a, write)
        return
    if not array.squeeze:
        write("[")
    for part in range(len(array.parts)):
        if part:
            write(", ")
        write("[")
        first = True
        for block in array.blocks(part):
            if len(block):
                write(("" if first else ", ") + _json_rows(block))
                first = False
        write("]")
    if not array.squeeze:
        write("]")


def write_json_streamed(path, arrays: dict) -> None:
    """``{"name": [...], ...}`` like ``write_json_bundle``, streamed arrays a block at a time."""
    def write(f):
        put = lambda text: f.write(text.encode("utf-8"))  # noqa: E731
        put("{\n")
        for i, (name, a) in enumerate(arrays.items()):
            put((",\n" if i else "") + f"  {json.dumps(name)}: ")
            write_streamed_json_value(a, put)
        put("\n}\n")

    atomic_write_with(path, write)


# -- labelled tables -----------------------------------------------------------------------

def _cells(row: list) -> list[str]:
    # As ``matrix_tables.exact_text``: booleans 1/0, numbers exact.
    return [("1" if v else "0") if isinstance(v, bool) else repr(float(v)) for v in row]


def write_table_streamed(path, fmt: str, blocks: Iterator[np.ndarray], row_labels: Sequence[str],
                         col_labels: Sequence[str], digits: int = 4) -> None:
    """One labelled matrix as ``fmt`` (csv, tex, md, json), its rows coming in ``blocks``:
    the same text ``matrix_to_text`` writes for the whole matrix."""
    def write(f):
        text = io.TextIOWrapper(f, encoding="utf-8", newline="")
        try:
            _table(text, fmt, blocks, list(row_labels), list(col_labels), digits)
            text.flush()
        finally:
            text.detach()

    atomic_write_with(path, write)


def _table(out, fmt: str, blocks, rows: list[str], cols: list[str], digits: int) -> None:
    i = 0
    if fmt == "csv":
        writer = csv.writer(out, lineterminator="\r\n")
        writer.writerow([""] + [csv_label(c) for c in cols])
        for block in blocks:
            for row in block.tolist():
                writer.writerow([csv_label(rows[i])] + _cells(row))
                i += 1
    elif fmt == "tex":
        out.write(rf"\begin{{tabular}}{{l|{'r' * len(cols)}}}" + "\n")
        out.write("  " + " & ".join([""] + [latex_escape(c) for c in cols]) + r" \\" + "\n")
        out.write(r"  \hline" + "\n")
        for block in blocks:
            for row in block.tolist():
                out.write("  " + " & ".join([latex_escape(rows[i])] + [f"${rounded_text(v, digits)}$" for v in row])
                          + r" \\" + "\n")
                i += 1
        out.write(r"\end{tabular}" + "\n")
    elif fmt == "md":
        out.write("| " + " | ".join([""] + [markdown_escape(c) for c in cols]) + " |\n")
        out.write("| " + " | ".join([":---"] + ["---:"] * len(cols)) + " |\n")
        for block in blocks:
            for row in block.tolist():
                out.write("| " + " | ".join([markdown_escape(rows[i])] + [rounded_text(v, digits) for v in row]) + " |\n")
                i += 1
    elif fmt == "json":
        out.write(json.dumps({"rows": rows, "columns": cols}, ensure_ascii=False)[:-1] + ', "values": [')
        first = True
        for block in blocks:
            if len(block):
                out.write(("" if first else ", ") + _json_rows(block.astype(int) if block.dtype == bool else block))
                first = False
        out.write("]}\n")
    else:
        raise ValueError(f"unknown table format {fmt!r}")
