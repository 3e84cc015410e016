"""A chosen part of a result's attention matrices (``export_choice.ExportChoice``), written to
a folder a block of rows at a time: a head or all, a query row range, the selected rows, or
the pooled overview.

It reads a dense result's arrays, or a long result's exact tiles (``StreamedResult.tile``,
from Q, K and the row normalisers), so a long session's n × n matrices are never made whole:
at most ``export_choice.BLOCK_CELLS`` numbers of them are in memory at once.

What it writes (``formats`` as ``attnexplorer export --matrices``), next to what the caller
adds (``session.json``, figures):

- ``export.json``: what was chosen: the heads, the rows (``rows`` [start, stop) or
  ``selected_rows``) or the overview (``pool``, ``rows_per_cell``, ``keys_per_cell``), n, n_k;
- ``attention.npz`` / ``attention.json`` / ``npy/<name>.npy``: every array that is not n × n
  (tokens, E, X, W_q, …, Q, K, V, head_outputs, output, blocked_rows) and, for rows, each
  chosen matrix as ``weights`` (heads × rows × n_k), ``mask`` (rows × n_k), ``heads`` and
  ``query_rows``; for the overview ``weights_max_pooled`` (heads × ⌈n / fy⌉ × ⌈n_k / fx⌉),
  ``heads``, ``overview_rows_per_cell`` (fy), ``overview_keys_per_cell`` (fx);
- ``csv/``, ``tex/``, ``md/``: the tables that are not n × n, and ``weights_head2.csv`` (rows
  labelled with their tokens), ``mask.csv``, or ``weights_head2_max_pooled.csv`` (rows
  ``queries 0-15``, columns ``keys 0-15``).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from ..core.errors import EngineError
from .atomic import atomic_write_text
from .export_choice import BLOCK_CELLS, SQUARE, ExportChoice
from .matrix_bundles import labelled_matrices, result_arrays
from .matrix_stream import StreamedArray, write_json_streamed, write_npy_streamed, write_npz_streamed, \
    write_table_streamed
from .matrix_tables import MatrixError, matrix_to_text


def matrix_rows(result, what: str, head: int, rows) -> np.ndarray:
    """Rows ``rows`` (a slice or a list of indices) of matrix ``what`` of ``head``, exact
    (``AttentionResult.rows``: a long result's tiles or a dense result's array)."""
    try:
        return result.rows(what, head, rows)
    except EngineError as err:
        raise MatrixError(str(err)) from None


def overview_of(result, what: str, pool: str) -> tuple[np.ndarray, int, int]:
    """The pooled overview of matrix ``what`` of every head, ``(data, fy, fx)``: data is
    (H, ⌈n / fy⌉, ⌈n_k / fx⌉), each cell the max (or mean) of fy × fx cells, blocked cells
    left out (NaN where every one is). The grid is a long session's (about 1,024 cells a side)."""
    from ..core.compute.long.result import overview_grid, pooled

    fy, fx = overview_grid(result.session)
    try:
        return pooled(result, what, fy, fx, pool), fy, fx
    except EngineError as err:
        raise MatrixError(str(err)) from None


def _row_parts(result, choice: ExportChoice):
    """For each chosen row, how to walk them a block at a time: (list of slices or index lists)."""
    session = result.session
    step = max(1, BLOCK_CELLS // max(1, session.n_keys))
    if choice.selected_rows is not None:
        rows = list(choice.selected_rows)
        return [rows[i:i + step] for i in range(0, len(rows), step)]
    start, stop = choice.rows if choice.rows is not None else (0, session.n)
    return [slice(r, min(stop, r + step)) for r in range(start, stop, step)]


def query_rows(result, choice: ExportChoice) -> np.ndarray:
    if choice.selected_rows is not None:
        return np.asarray(choice.selected_rows, dtype=np.int64)
    start, stop = choice.rows if choice.rows is not None else (0, result.session.n)
    return np.arange(start, stop, dtype=np.int64)


def metadata(result, choice: ExportChoice) -> dict:
    """What ``export.json`` says about the export (see the module docstring)."""
    session = result.session
    meta = {"n": session.n, "n_keys": session.n_keys, "heads": choice.head_list(session),
            "matrices": list(choice.matrices), "dtype": str(getattr(result, "dtype", "float32"))}
    if choice.overview is not None:
        from ..core.compute.long.result import overview_grid

        fy, fx = overview_grid(session)
        meta["overview"] = {"pool": choice.overview, "rows_per_cell": fy, "keys_per_cell": fx,
                            "shape": [-(-session.n // fy), -(-session.n_keys // fx)],
                            "note": "each cell pools rows_per_cell × keys_per_cell cells; blocked cells are "
                                    "left out, and a cell whose every cell is blocked is NaN (null in JSON)"}
    elif choice.selected_rows is not None:
        meta["selected_rows"] = list(choice.selected_rows)
    else:
        meta["rows"] = list(choice.rows) if choice.rows is not None else [0, session.n]
    return meta


def chosen_arrays(result, choice: ExportChoice) -> dict:
    """The chosen part as named arrays (streamed where n × n_k), for NPZ, NPY and JSON."""
    session = result.session
    heads = choice.head_list(session)
    out: dict = {"heads": np.asarray(heads, dtype=np.int64)}
    dtype = np.asarray(result.Q).dtype
    if choice.overview is not None:
        for what in choice.matrices:
            data, fy, fx = overview_of(result, what, choice.overview)
            out[f"{what}_{choice.overview}_pooled"] = np.ascontiguousarray(data[heads])
        out["overview_rows_per_cell"] = np.asarray(fy, dtype=np.int64)
        out["overview_keys_per_cell"] = np.asarray(fx, dtype=np.int64)
        return out
    parts = _row_parts(result, choice)
    count = choice.row_count(session)
    for what in choice.matrices:
        def make(head, what=what):
            return lambda: (matrix_rows(result, what, head, rows) for rows in parts)

        out[what] = StreamedArray(count, session.n_keys, dtype, tuple(make(h) for h in heads))
    out["mask"] = StreamedArray(count, session.n_keys, np.dtype(bool),
                                (lambda: (mask_rows(result, rows) for rows in parts),), squeeze=True)
    out["query_rows"] = query_rows(result, choice)
    return out


def _small_arrays(result) -> dict:
    return result_arrays(result, leave_out=SQUARE)


def mask_rows(result, rows) -> np.ndarray:
    """Rows ``rows`` (a slice or a list) of the mask: a long result's is made a block at a time."""
    mask = result.mask
    if isinstance(rows, slice):
        return np.asarray(mask[rows, :], dtype=bool)
    return np.stack([np.asarray(mask[r], dtype=bool) for r in rows]) if len(rows) else \
        np.zeros((0, result.session.n_keys), dtype=bool)


def _range_label(prefix: str, start: int, stop: int) -> str:
    return f"{prefix} {start}" if stop - start == 1 else f"{prefix} {start}-{stop - 1}"


def _tables(folder: Path, result, choice: ExportChoice, fmt: str) -> list[Path]:
    session = result.session
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for m in labelled_matrices(result):
        if m.name.split("_head")[0] in SQUARE:
            continue
        path = folder / f"{m.name}.{fmt}"
        atomic_write_text(path, matrix_to_text(fmt, m.values, m.row_labels, m.col_labels))
        written.append(path)
    heads = choice.head_list(session)
    keys = list(session.key_tokens)
    if choice.overview is not None:
        for what in choice.matrices:
            data, fy, fx = overview_of(result, what, choice.overview)
            rows = [_range_label("queries", r, min(session.n, r + fy)) for r in range(0, session.n, fy)]
            cols = [_range_label("keys", c, min(session.n_keys, c + fx)) for c in range(0, session.n_keys, fx)]
            for h in heads:
                path = folder / f"{what}_head{h}_{choice.overview}_pooled.{fmt}"
                write_table_streamed(path, fmt, iter([data[h]]), rows, cols)
                written.append(path)
        return written
    parts = _row_parts(result, choice)
    tokens = list(session.tokens)
    labels = [tokens[i] for i in query_rows(result, choice).tolist()]
    for what in choice.matrices:
        for h in heads:
            path = folder / f"{what}_head{h}.{fmt}"
            write_table_streamed(path, fmt, (matrix_rows(result, what, h, rows) for rows in parts), labels, keys)
            written.append(path)
    path = folder / f"mask.{fmt}"
    write_table_streamed(path, fmt, (mask_rows(result, rows) for rows in parts), labels, keys)
    written.append(path)
    return written


def write_region_export(stage, result, choice: ExportChoice, formats) -> list[Path]:
    """Write ``choice`` of ``result`` in each of ``formats`` under ``stage`` (see the module
    docstring); returns the paths written. Each file is atomic; the caller stages the folder."""
    stage = Path(stage)
    written: list[Path] = []
    meta_path = stage / "export.json"
    atomic_write_text(meta_path, json.dumps(metadata(result, choice), indent=2) + "\n")
    written.append(meta_path)
    arrays = None
    for fmt in formats:
        if fmt in ("npz", "json", "npy") and arrays is None:
            arrays = {**_small_arrays(result), **chosen_arrays(result, choice)}
        if fmt == "npz":
            write_npz_streamed(stage / "attention.npz", arrays)
            written.append(stage / "attention.npz")
        elif fmt == "json":
            write_json_streamed(stage / "attention.json", arrays)
            written.append(stage / "attention.json")
        elif fmt == "npy":
            (stage / "npy").mkdir(parents=True, exist_ok=True)
            for name, a in arrays.items():
                write_npy_streamed(stage / "npy" / f"{name}.npy", a)
                written.append(stage / "npy" / f"{name}.npy")
        else:
            written += _tables(stage / fmt, result, choice, fmt)
    return written
