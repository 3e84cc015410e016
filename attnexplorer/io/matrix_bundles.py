"""Every intermediate of a computation, as arrays and as labelled matrices, and the bundle
writers (NPZ, NPY, JSON, one table per matrix) that ``attnexplorer export`` and File ▸
Export matrices use (``io.matrices`` re-exports them; its docstring lists the names).

Every file is written atomically (``atomic.py``); NPY and NPZ are written with
``allow_pickle=False``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .atomic import atomic_write_text, atomic_write_with
from .json_text import write_array
from .matrix_tables import _TABLE_WRITERS, TABLE_FORMATS, MatrixError, matrix_to_text


def result_arrays(result, leave_out=()) -> dict[str, np.ndarray]:
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
    ``Q_unrotated``/``K_unrotated``, ``Q_unnormed``/``K_unnormed`` (before QK-norm),
    ``position_bias`` (H, n, n), ``sink_share`` (H, n), ``sinks`` (H,), ``b_q`` (H, d_k),
    ``b_k`` (H_kv, d_k), ``b_v`` (H_kv, d_v), ``b_o`` (d_out,), ``source_tokens`` (n_k,) str and
    ``source_X`` (n_k, d_s). Intermediates the result lacks (``keep=``) are left out, and
    so are the names in ``leave_out`` (a long result's mask is read in blocks, never whole).
    The preset's reference curves, one value per token, follow as ``reference_<name>``
    (the sine preset's ``reference_position`` and ``reference_clean``) when it has them.
    """
    from ..core.inputs.presets import reference_curves

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
    if session.sinks is not None:
        arrays["sinks"] = session.sinks
    for name in ("Q_unnormed", "K_unnormed", "Q_unrotated", "K_unrotated", "Q", "K", "V", "scores", "position_bias",
                 "scaled_scores", "mask", "weights", "sink_share", "head_outputs", "concat", "output", "blocked_rows"):
        value = None if name in leave_out else getattr(result, name, None)
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
    if session.sinks is not None:
        out.append(LabelledMatrix("sinks", session.sinks[None, :], ["sink"], _feature_labels("h", heads)))
    per_head = (("Q_unnormed", tokens, _feature_labels("q", d_k)), ("K_unnormed", keys, _feature_labels("k", d_k)),
                ("Q_unrotated", tokens, _feature_labels("q", d_k)), ("K_unrotated", keys, _feature_labels("k", d_k)),
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
    if getattr(result, "sink_share", None) is not None:  # one row per head, one column per query
        out.append(LabelledMatrix("sink_share", result.sink_share, _feature_labels("h", heads), tokens))
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


def _write_arrays_json(arrays: dict[str, np.ndarray], write) -> None:
    write("{\n")
    for i, (name, a) in enumerate(arrays.items()):
        write((",\n" if i else "") + f"  {json.dumps(name)}: ")
        write_array(np.asarray(a), write)
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

