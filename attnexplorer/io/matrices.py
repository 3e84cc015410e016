"""Matrices out (CSV, LaTeX, Markdown, JSON, NPY, NPZ) and in (CSV, NPY, pasted text).

One labelled matrix: ``matrix_to_csv/latex/markdown/json(array, row_labels, col_labels)``.
Every intermediate of a computation: ``result_arrays(result)`` (the CLI's names),
``labelled_matrices(result)`` (2-D, one per matrix and head, with axis labels), and
the bundle writers the export command and File ▸ Export use. Every file is written atomically
(``atomic.py``); NPY and NPZ are written and read with ``allow_pickle=False``.

Names in a bundle (``labelled_matrices``): ``E``, ``P`` (absolute positions), ``X`` (the
attention input, E + P normalised), ``W_q_head{h}``, ``b_q`` (H × d_k), ``W_k_head{g}``,
``b_k``, ``W_v_head{g}``, ``b_v`` (g counts K/V heads), ``W_o``, ``b_o``,
``Q_unnormed_head{h}``, ``K_unnormed_head{g}`` (QK-norm), ``Q_unrotated_head{h}``,
``K_unrotated_head{g}`` (RoPE), ``Q_head{h}``, ``K_head{g}``, ``sinks`` (1 × H),
``V_head{g}``, ``kv_head_of``, ``source_X``, ``scores_head{h}``, ``position_bias_head{h}``
(ALiBi), ``scaled_scores_head{h}``, ``mask``, ``weights_head{h}``, ``head_outputs_head{h}``,
``concat``, ``output``, ``sink_share`` (H × n, heads down, queries along), ``blocked_rows``;
each stage's names only when the session uses it.
Rows are tokens (or ``d0..`` for the rows of a weight matrix, ``h0..`` for per-head biases);
columns are key tokens (the source's in cross-attention) for attention matrices, ``d0..``
for embedding features (``s0..`` for the source's), ``q0..`` for query and ``k0..`` for key
features (as the window labels them), ``v0..`` for value features, ``h0.v0..`` for the
concatenated heads and ``o0..`` for the output projection's features.

The code lives in three modules by concern: ``matrix_tables`` (one labelled matrix as text),
``matrix_bundles`` (a result's arrays and the bundle writers) and ``matrix_read`` (matrices
in); this module is the one place callers import them from. A long session's n × n matrices
are written a block of rows at a time by ``matrix_stream`` and ``region_export``.
"""

from __future__ import annotations

from .matrix_bundles import (
    LabelledMatrix,
    _check_savable,
    _write_arrays_json,
    arrays_to_json,
    labelled_matrices,
    result_arrays,
    write_csv_bundle,
    write_json_bundle,
    write_npy,
    write_npy_bundle,
    write_npz,
    write_table_bundle,
)
from .matrix_read import MAX_MATRIX_CELLS, MAX_MATRIX_FILE_BYTES, check_shape, read_matrix
from .matrix_tables import (
    TABLE_FORMATS,
    MatrixError,
    csv_label,
    exact_text,
    latex_escape,
    markdown_escape,
    matrix_to_csv,
    matrix_to_json,
    matrix_to_latex,
    matrix_to_markdown,
    matrix_to_text,
    rounded_text,
)

__all__ = [
    "LabelledMatrix",
    "MAX_MATRIX_CELLS",
    "MAX_MATRIX_FILE_BYTES",
    "MatrixError",
    "TABLE_FORMATS",
    "_check_savable",
    "_write_arrays_json",
    "arrays_to_json",
    "check_shape",
    "csv_label",
    "exact_text",
    "labelled_matrices",
    "latex_escape",
    "markdown_escape",
    "matrix_to_csv",
    "matrix_to_json",
    "matrix_to_latex",
    "matrix_to_markdown",
    "matrix_to_text",
    "read_matrix",
    "result_arrays",
    "rounded_text",
    "write_csv_bundle",
    "write_json_bundle",
    "write_npy",
    "write_npy_bundle",
    "write_npz",
    "write_table_bundle",
]
