"""Matrices out (CSV, LaTeX, Markdown, JSON, NPY, NPZ) and in (CSV, NPY, pasted text).

One labelled matrix: ``matrix_to_csv/latex/markdown/json(array, row_labels, col_labels)``.
Every intermediate of a computation: ``result_arrays(result)`` (the CLI's names),
``labelled_matrices(result)`` (2-D, one per matrix and head, with axis labels), and
the bundle writers the export command and File ▸ Export use. Every file is written atomically
(``atomic.py``); NPY and NPZ are written and read with ``allow_pickle=False``.

Names in a bundle (``labelled_matrices``): ``E``, ``P`` (absolute positions), ``X`` (the
attention input, E + P normalised), ``W_q_head{h}``, ``b_q`` (H × d_k), ``W_k_head{g}``,
``b_k``, ``W_v_head{g}``, ``b_v`` (g counts K/V heads), ``W_o``, ``b_o``,
``Q_unrotated_head{h}``, ``K_unrotated_head{g}`` (RoPE), ``Q_head{h}``, ``K_head{g}``,
``V_head{g}``, ``kv_head_of``, ``source_X``, ``scores_head{h}``, ``position_bias_head{h}``
(ALiBi), ``scaled_scores_head{h}``, ``mask``, ``weights_head{h}``, ``head_outputs_head{h}``,
``concat``, ``output``, ``blocked_rows``; each stage's names only when the session uses it.
Rows are tokens (or ``d0..`` for the rows of a weight matrix, ``h0..`` for per-head biases);
columns are key tokens (the source's in cross-attention) for attention matrices, ``d0..``
for embedding features (``s0..`` for the source's), ``q0..`` for query and ``k0..`` for key
features (as the window labels them), ``v0..`` for value features, ``h0.v0..`` for the
concatenated heads and ``o0..`` for the output projection's features.
"""

from __future__ import annotations

import csv
import io
import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

from ..core.errors import AttnExplorerError
from .atomic import atomic_write_text, atomic_write_with

# A matrix file larger than this is refused before it is read (the largest session matrix,
# 8192 × 1024 float64, is 64 MiB as NPY and about 200 MB as CSV).
MAX_MATRIX_FILE_BYTES = 256 * 1024 * 1024
MAX_MATRIX_CELLS = 8192 * 8192

TABLE_FORMATS = ("csv", "tex", "md", "json")


class MatrixError(AttnExplorerError):
    """A matrix file is malformed, or a matrix does not have the shape it must have."""


# -- one labelled matrix ---------------------------------------------------------------

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


def _exact(v) -> str:
    """A number as text that reads back to the same value (bools as 1/0)."""
    if isinstance(v, (bool, np.bool_)):
        return "1" if v else "0"
    if isinstance(v, (int, np.integer)):
        return str(int(v))
    return repr(float(v))


def _rounded(v, digits: int) -> str:
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
        cells = [_exact(v) for v in row]
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
    body = [[f"${_rounded(v, digits)}$" for v in row] for row in a.tolist()]
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
        cells = ([markdown_escape(rows[i])] if rows is not None else []) + [_rounded(v, digits) for v in row]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def matrix_to_json(array, row_labels: Sequence[str] | None = None, col_labels: Sequence[str] | None = None) -> str:
    """``{"rows": [...] | null, "columns": [...] | null, "values": [[...]]}``, numbers exact."""
    a = _as_2d(array)
    rows = _labels(row_labels, a.shape[0], "row")
    cols = _labels(col_labels, a.shape[1], "column")
    values = a.astype(int).tolist() if a.dtype == bool else a.tolist()
    return json.dumps({"rows": rows, "columns": cols, "values": values}, ensure_ascii=False, allow_nan=False) + "\n"


_TABLE_WRITERS = {"csv": matrix_to_csv, "tex": matrix_to_latex, "md": matrix_to_markdown, "json": matrix_to_json}


def matrix_to_text(fmt: str, array, row_labels=None, col_labels=None) -> str:
    """Dispatch on ``fmt`` in ``TABLE_FORMATS``: csv, tex, md, json."""
    if fmt not in _TABLE_WRITERS:
        raise MatrixError(f"unknown matrix format {fmt!r}; choose one of {', '.join(TABLE_FORMATS)}")
    return _TABLE_WRITERS[fmt](array, row_labels, col_labels)


# -- every intermediate of a computation -----------------------------------------------

def result_arrays(result) -> dict[str, np.ndarray]:
    """Every input and intermediate under the CLI's names (what attention.npz holds).

    The inputs are those of the session the result was computed from (``result.session``),
    so the arrays of one export always belong together.

    ``tokens`` (n,) str; ``E`` (n, d) the embeddings; ``X`` (n, d) the attention input (E +
    P, normalised; E itself without positions or norm); ``W_q`` (H, d, d_k); ``W_k`` (H_kv,
    d, d_k); ``W_v`` (H_kv, d, d_v); ``W_o`` (H·d_v, d_out); ``Q`` (H, n, d_k), ``K``/``V``
    (H_kv, n_k, ·), after RoPE when used; ``kv_head_of`` (H,) ints; ``scores``,
    ``scaled_scores`` (× scale + position_bias), ``weights`` (H, n, n_k); ``mask`` (n, n_k)
    bool, True = blocked; ``head_outputs`` (H, n, d_v); ``concat`` (n, H·d_v); ``output``
    (n, H·d_v or d_out); ``blocked_rows`` (n,) bool. Only when the stage is used: ``P`` (n, d),
    ``Q_unrotated``/``K_unrotated``, ``position_bias`` (H, n, n), ``b_q`` (H, d_k), ``b_k``
    (H_kv, d_k), ``b_v`` (H_kv, d_v), ``b_o`` (d_out,), ``source_tokens`` (n_k,) str and
    ``source_X`` (n_k, d_s). Intermediates the result lacks (``keep=``) are left out.
    The preset's reference curves, one value per token, follow as ``reference_<name>``
    (the sine preset's ``reference_position`` and ``reference_clean``) when it has them.
    """
    from ..core.presets import reference_curves

    session = result.session
    arrays: dict[str, np.ndarray] = {
        "tokens": np.array(list(session.tokens), dtype=str),
        "E": session.embeddings,
    }
    for name in ("P", "X"):
        value = getattr(result, name, None)
        if value is not None:
            arrays[name] = np.asarray(value)
    arrays.setdefault("X", session.embeddings)
    arrays.update(W_q=session.w_query, W_k=session.w_key, W_v=session.w_value)
    if session.w_out is not None:
        arrays["W_o"] = session.w_out
    for name, value in (("b_q", session.b_query), ("b_k", session.b_key), ("b_v", session.b_value),
                        ("b_o", session.b_out)):
        if value is not None:
            arrays[name] = value
    if session.source is not None:
        arrays["source_tokens"] = np.array(list(session.source.tokens), dtype=str)
        arrays["source_X"] = session.source.embeddings
    arrays["kv_head_of"] = np.asarray(session.kv_head_of)
    for name in ("Q_unrotated", "K_unrotated", "Q", "K", "V", "scores", "position_bias", "scaled_scores", "mask",
                 "weights", "head_outputs", "concat", "output", "blocked_rows"):
        value = getattr(result, name, None)
        if value is not None:
            arrays[name] = np.asarray(value)
    for name, curve in reference_curves(session).items():
        arrays[f"reference_{name}"] = curve
    return arrays


@dataclass(frozen=True)
class LabelledMatrix:
    """One 2-D matrix with its axis labels; ``name`` is the file stem (``weights_head0``)."""

    name: str
    values: np.ndarray
    row_labels: list[str]
    col_labels: list[str]


def _feature_labels(prefix: str, count: int) -> list[str]:
    return [f"{prefix}{j}" for j in range(count)]


def labelled_matrices(result) -> list[LabelledMatrix]:
    """Every matrix of ``result_arrays`` as 2-D labelled matrices, one per head (see module doc)."""
    session = result.session
    tokens = list(session.tokens)
    keys = list(session.key_tokens)  # the source's tokens in cross-attention
    heads, d_k, d_v = session.heads, session.d_k, session.d_v
    d_labels = _feature_labels("d", session.d)
    kv_in_labels = d_labels if session.source is None else _feature_labels("s", session.source.d)
    concat_labels = [f"h{h}.v{j}" for h in range(heads) for j in range(d_v)]
    out: list[LabelledMatrix] = [LabelledMatrix("E", session.embeddings, tokens, d_labels)]
    for name in ("P", "X"):
        value = getattr(result, name, None)
        if value is not None:
            out.append(LabelledMatrix(name, value, tokens, d_labels))
    if getattr(result, "X", None) is None:
        out.append(LabelledMatrix("X", session.embeddings, tokens, d_labels))
    if session.source is not None:
        out.append(LabelledMatrix("source_X", session.source.embeddings, keys, kv_in_labels))
    for name, stacked, rows, cols in (("W_q", session.w_query, d_labels, "q"), ("W_k", session.w_key, kv_in_labels, "k"),
                                      ("W_v", session.w_value, kv_in_labels, "v")):
        for h in range(stacked.shape[0]):
            out.append(LabelledMatrix(f"{name}_head{h}", stacked[h], rows, _feature_labels(cols, stacked.shape[2])))
    for name, bias, cols in (("b_q", session.b_query, "q"), ("b_k", session.b_key, "k"), ("b_v", session.b_value, "v")):
        if bias is not None:
            out.append(LabelledMatrix(name, bias, _feature_labels("h", bias.shape[0]), _feature_labels(cols, bias.shape[1])))
    if session.w_out is not None:
        out.append(LabelledMatrix("W_o", session.w_out, concat_labels, _feature_labels("o", session.w_out.shape[1])))
    if session.b_out is not None:
        out.append(LabelledMatrix("b_o", session.b_out[None, :], ["b_o"], _feature_labels("o", session.b_out.shape[0])))
    out.append(LabelledMatrix("kv_head_of", np.asarray(session.kv_head_of)[:, None], _feature_labels("h", heads),
                              ["kv_head"]))
    per_head = (("Q_unrotated", tokens, _feature_labels("q", d_k)), ("K_unrotated", keys, _feature_labels("k", d_k)),
                ("Q", tokens, _feature_labels("q", d_k)), ("K", keys, _feature_labels("k", d_k)),
                ("V", keys, _feature_labels("v", d_v)), ("scores", tokens, keys), ("position_bias", tokens, keys),
                ("scaled_scores", tokens, keys))
    for name, rows, cols in per_head:
        value = getattr(result, name, None)
        if value is not None:
            out += [LabelledMatrix(f"{name}_head{h}", value[h], rows, cols) for h in range(value.shape[0])]
    out.append(LabelledMatrix("mask", result.mask, tokens, keys))
    for name, cols in (("weights", keys), ("head_outputs", _feature_labels("v", d_v))):
        value = getattr(result, name)
        if value is not None:
            out += [LabelledMatrix(f"{name}_head{h}", value[h], tokens, cols) for h in range(heads)]
    if result.concat is not None:
        out.append(LabelledMatrix("concat", result.concat, tokens, concat_labels))
    if result.output is not None:
        cols = concat_labels if session.w_out is None else _feature_labels("o", session.w_out.shape[1])
        out.append(LabelledMatrix("output", result.output, tokens, cols))
    out.append(LabelledMatrix("blocked_rows", np.asarray(result.blocked_rows)[:, None], tokens, ["blocked"]))
    return out


def write_table_bundle(out_dir, result, fmt: str = "csv") -> list[Path]:
    """One ``<name>.<fmt>`` per labelled matrix in ``out_dir`` (created); returns the paths."""
    if fmt not in _TABLE_WRITERS:
        raise MatrixError(f"unknown matrix format {fmt!r}; choose one of {', '.join(TABLE_FORMATS)}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for m in labelled_matrices(result):
        path = out / f"{m.name}.{fmt}"
        atomic_write_text(path, matrix_to_text(fmt, m.values, m.row_labels, m.col_labels))
        paths.append(path)
    return paths


def write_csv_bundle(out_dir, result) -> list[Path]:
    """``write_table_bundle`` in CSV: ``weights_head0.csv``, ``output.csv``, ``Q_head1.csv``..."""
    return write_table_bundle(out_dir, result, "csv")


def _check_savable(arrays: dict[str, np.ndarray]) -> None:
    for name, a in arrays.items():
        if np.asarray(a).dtype.hasobject:
            raise MatrixError(f"{name} holds Python objects, which are not written (no pickles)")


def write_npz(path, arrays: dict[str, np.ndarray]) -> None:
    """All ``arrays`` in one uncompressed ``.npz`` (``np.load(path)`` reads it, no pickle),
    written straight to the file (no second copy of every array in memory)."""
    _check_savable(arrays)
    atomic_write_with(path, lambda f: np.savez(f, allow_pickle=False, **{k: np.asarray(v) for k, v in arrays.items()}))


def write_npy(path, array) -> None:
    """One array as ``.npy`` (no pickle)."""
    _check_savable({Path(path).stem: array})
    atomic_write_with(path, lambda f: np.save(f, np.asarray(array), allow_pickle=False))


def write_npy_bundle(out_dir, arrays: dict[str, np.ndarray]) -> list[Path]:
    """``<name>.npy`` for each array in ``out_dir`` (created); returns the paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, a in arrays.items():
        write_npy(out / f"{name}.npy", a)
        paths.append(out / f"{name}.npy")
    return paths


def _json_array(a: np.ndarray, write) -> None:
    """``json.dumps(a.tolist())``, handed to ``write`` one innermost row at a time: the whole
    list of Python floats of a 4,096-token result is about ten times the array's size."""
    if a.ndim <= 1:
        write(json.dumps(a.tolist(), ensure_ascii=False, allow_nan=False))
        return
    write("[")
    for i in range(a.shape[0]):
        if i:
            write(", ")
        _json_array(a[i], write)
    write("]")


def _write_arrays_json(arrays: dict[str, np.ndarray], write) -> None:
    write("{\n")
    for i, (name, a) in enumerate(arrays.items()):
        write((",\n" if i else "") + f"  {json.dumps(name)}: ")
        _json_array(np.asarray(a), write)
    write("\n}\n")


def arrays_to_json(arrays: dict[str, np.ndarray]) -> str:
    """``{"tokens": [...], "X": [[...]], ...}``: one key per array, numbers exact, masks as booleans."""
    parts: list[str] = []
    _write_arrays_json(arrays, parts.append)
    return "".join(parts)


def write_json_bundle(path, arrays: dict[str, np.ndarray]) -> None:
    """``arrays_to_json`` written atomically to ``path`` (attention.json), row by row: memory
    stays near the arrays' own size however large they are."""
    def write(f):
        _write_arrays_json(arrays, lambda text: f.write(text.encode("utf-8")))

    try:
        atomic_write_with(path, write)
    except ValueError as err:  # allow_nan=False: the engine never makes NaN, but say so if it did
        raise MatrixError(f"cannot write {path}: {err}") from None


# -- matrices in ------------------------------------------------------------------------

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
            raise MatrixError(f"{source}: row {first + i + 1} has {len(row) - skip} numbers, expected {width} "
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
                raise MatrixError(f"{source}: holds {dtype} values, expected numbers")
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
