"""Every undoable thing a user can do to a session, in one place.

Tables, inputs, panels and controls call these instead of building sessions themselves: each
action runs a pure function of ``core.editing.edits`` (or ``core.inputs.presets``) on the document's current
session and pushes the result as one undo step named for the user, or refuses, leaving
everything as it was and saying why through ``document.refuse``. Each returns True when it
changed the session.

A new action goes here: a pure edit in ``core/editing/edits.py`` or ``core/editing/stage_edits.py`` (tested
without Qt), then a function below that names the undo step and the refusal. The table
actions (cells, paste, import, fill) take any table of ``stage_tables.TABLES``: the weights,
the embeddings, the biases, the norm's weight and bias, the learned positions, the ALiBi
slopes and the source's embeddings.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from ..core.editing import edits, source_edits, stage_edits, stage_tables
from ..core.errors import AttnExplorerError, SessionError
from ..core.inputs.session import Mask, Scale, Session
from ..core.inputs.stages import Norm, Positions, Source
from ..core.numbers.display import counted


def apply(document, change: Callable[[Session], Session], text: str, merge_key=None,
          refusal: str | None = None) -> bool:
    """Run ``change(session) -> new session`` and push it as one undo step named ``text``.

    Consecutive steps with the same non-None ``merge_key`` merge into one (typing into one
    cell, one slider drag). An AttnExplorerError is refused as ``"<refusal>: <reason>"``
    (default ``"<text> refused"``) and changes nothing.
    """
    try:
        new = change(document.session)
    except AttnExplorerError as err:
        document.refuse(f"{refusal or text + ' refused'}: {err}")
        return False
    document.edit(new, text, merge_key=merge_key)
    return True


def table_label(session: Session, table: str, head: int) -> str:
    """``W_q (head 1)`` (``W_k (K/V head 0)`` when shared) with several heads, else the
    table's name: for undo texts."""
    return stage_tables.table_label(session, table, head)


# -- matrices ------------------------------------------------------------------------------------
def set_cell(document, table: str, row: int, col: int, text: str, head: int = 0) -> bool:
    """Set one cell from what the user typed (a number or simple arithmetic, see
    ``core.numbers.expr``); typing into the same cell again merges into the same undo step."""
    from ..core.numbers.expr import parse_number

    name = stage_tables.cell_name(document.session, table, row, col, head)
    return apply(document, lambda s: stage_tables.set_cell(s, table, row, col, parse_number(text), head),
                 f"Edit {name}", merge_key=("cell", table, head, row, col), refusal=f"{name} not changed")


def paste_text(document, table: str, top: int, left: int, text: str, head: int = 0) -> bool:
    """Paste a block of text (spreadsheet, numpy or torch printout) at (top, left)."""
    from ..io.matrix_text import parse_matrix_text

    try:
        block = parse_matrix_text(text)
    except AttnExplorerError as err:
        document.refuse(f"Paste into {table} refused: {err}")
        return False
    return paste_block(document, table, top, left, block, head)


def paste_block(document, table: str, top: int, left: int, block, head: int = 0) -> bool:
    b = np.atleast_2d(np.asarray(block))
    return apply(document, lambda s: stage_tables.set_block(s, table, top, left, block, head),
                 f"Paste {b.shape[0]}×{b.shape[1]} into {table_label(document.session, table, head)}",
                 refusal="Paste refused")


def import_matrix(document, table: str, matrix, head: int = 0, transpose: bool = False, source: str = "") -> bool:
    """Replace one table (one head) with ``matrix`` (``transpose`` for nn.Linear's (out, in))."""
    m = np.asarray(matrix, dtype=np.float64)
    if transpose:
        m = m.T
    hint = " after transposing from nn.Linear's (out × in)" if transpose else ""
    return apply(document, lambda s: stage_tables.set_matrix(s, table, m, head),
                 f"Import into {table_label(document.session, table, head)}",
                 refusal=f"Import{' of ' + source if source else ''} refused{hint}")


def fill_matrix(document, table: str, matrix, text: str, head: int = 0) -> bool:
    """Replace one table (one head) with ``matrix`` of the same shape, as a step named ``text``."""
    return apply(document, lambda s: stage_tables.set_matrix(s, table, matrix, head), text)


def initialise_weights(document, table: str, kind: str, seed: int, head: int = 0) -> bool:
    """Fill one head's weight table with ``core.inputs.weights.init_weight(kind, ...)``."""
    from ..core.inputs.weights import init_weight

    def change(s):
        rows, cols = stage_tables.table_matrix(s, table, head).shape
        return stage_tables.set_matrix(s, table, init_weight(kind, rows, cols, heads=1, seed=seed)[0], head)

    return apply(document, change, f"Initialise {table_label(document.session, table, head)} ({kind}, seed {seed})")


# -- tokens ---------------------------------------------------------------------------------------
def rename_token(document, i: int, text: str) -> bool:
    try:
        new = edits.set_token(document.session, i, str(text))
    except AttnExplorerError as err:
        document.refuse(f"Token {i} not renamed: {err}")
        return False
    document.edit(new, f"Rename token {i} to {new.tokens[i]!r}", merge_key=("token", i))
    return True


def set_sentence(document, tokens, embed) -> bool:
    """Replace the tokens; tokens that stay keep their rows, new ones get rows from ``embed``."""
    return apply(document, lambda s: edits.retokenize(s, tokens, embed), f"Set sentence ({len(tokens)} tokens)")


def insert_token(document, i: int, text: str, embed=None) -> bool:
    """Insert ``text`` at position ``i`` with a row from ``embed(tokens)`` (None: zeros); the
    new token becomes the selected query."""
    def change(s):
        tokens = s.tokens[:i] + (text,) + s.tokens[i:]
        row = None if embed is None else np.asarray(embed(tokens))[i]
        return edits.insert_token(s, i, text, row)

    if apply(document, change, f"Insert token {text!r}"):
        document.selection.set(query=i)
        return True
    return False


def delete_token(document, i: int) -> bool:
    return apply(document, lambda s: edits.delete_token(s, i), f"Delete token {document.session.tokens[i]!r}")


def move_token(document, i: int, j: int) -> bool:
    """Move token ``i`` to position ``j`` (its row moves with it); the selection follows."""
    if not 0 <= j < document.session.n:
        return False
    if apply(document, lambda s: edits.move_token(s, i, j),
             f"Move token {document.session.tokens[i]!r} {'up' if j < i else 'down'}"):
        document.selection.set(query=j)
        return True
    return False


def fill_embeddings(document, embed, source: str) -> bool:
    """Replace every embedding row from ``embed(tokens)`` (None: zeros)."""
    def change(s):
        rows = np.zeros((s.n, s.d)) if embed is None else embed(s.tokens)
        return stage_tables.set_matrix(s, "embeddings", rows)

    return apply(document, change, f"Fill embeddings ({source})")


# -- sizes ----------------------------------------------------------------------------------------
def resize_d(document, d: int) -> bool:
    return apply(document, lambda s: edits.resize_d(s, d), f"Set d to {d}")


def resize_dk(document, d_k: int) -> bool:
    return apply(document, lambda s: edits.resize_dk(s, d_k), f"Set d_k to {d_k}")


def resize_dv(document, d_v: int) -> bool:
    return apply(document, lambda s: edits.resize_dv(s, d_v), f"Set d_v to {d_v}")


def set_heads(document, heads: int) -> bool:
    return apply(document, lambda s: edits.set_heads(s, heads), f"Set heads to {heads}")


# -- mask and scale ----------------------------------------------------------------------------------
def set_mask(document, mask: Mask, text: str, merge_key=None) -> bool:
    return apply(document, lambda s: edits.set_mask(s, mask), text, merge_key=merge_key)


def toggle_padding(document, j: int) -> bool:
    """Block or free key ``j`` for every query (padding)."""
    keys = getattr(document.session, "key_tokens", document.session.tokens)  # the source's tokens in cross-attention
    name = keys[j] if 0 <= j < len(keys) else j
    return apply(document, lambda s: edits.toggle_padding(s, j), f"Toggle padding of {name!r}")


def set_padding(document, j: int, blocked: bool) -> bool:
    """Block (``blocked``) or free key ``j``, named for the token table's tick box."""
    return apply(document, lambda s: edits.toggle_padding(s, j),
                 f"{'Block' if blocked else 'Unblock'} key {document.session.tokens[j]!r}")


def toggle_blocked(document, i: int, j: int) -> bool:
    """Block or free one cell of a custom mask."""
    return apply(document, lambda s: edits.toggle_blocked(s, i, j), f"Toggle mask cell [{i},{j}]")


def set_scale(document, scale: Scale, text: str, merge_key=None) -> bool:
    return apply(document, lambda s: edits.set_scale(s, scale), text, merge_key=merge_key)


# -- stages: biases, output projection, norm, positions, K/V heads ---------------------------------
def add_bias(document, table: str) -> bool:
    """Add bias ``table`` (b_q, b_k, b_v, b_o) at zeros: nothing changes until it is edited."""
    return apply(document, lambda s: stage_edits.add_bias(s, table), f"Add {table}")


def remove_bias(document, table: str) -> bool:
    """Remove bias ``table``: it becomes zero."""
    return apply(document, lambda s: stage_edits.remove_bias(s, table), f"Remove {table}")


def add_output(document) -> bool:
    """Add the output projection W_o = I (the output stays the concatenated heads)."""
    return apply(document, stage_edits.add_output, "Add W_o")


def remove_output(document) -> bool:
    return apply(document, stage_edits.remove_output, "Remove W_o and b_o")


def resize_d_out(document, d_out: int) -> bool:
    return apply(document, lambda s: stage_edits.resize_d_out(s, d_out), f"Set d_out to {d_out}")


def set_norm(document, norm: Norm | None, text: str | None = None, merge_key=None) -> bool:
    """Set the norm (None: none), named ``text`` or for what changed (``Norm: LayerNorm``)."""
    text = text or stage_edits.describe_norm(document.session.norm, norm)
    return apply(document, lambda s: stage_edits.set_norm(s, norm), text, merge_key=merge_key)


def set_norm_kind(document, kind: str) -> bool:
    """Switch the norm to ``kind`` ("none", "layer", "rms"), keeping its weight."""
    try:
        norm = stage_edits.norm_of_kind(document.session, kind)
    except AttnExplorerError as err:
        document.refuse(f"Norm not changed: {err}")
        return False
    return set_norm(document, norm)


def set_norm_eps(document, eps: float) -> bool:
    """Change the norm's eps (refused, saying why, when there is no norm or eps is not > 0)."""
    from dataclasses import replace

    def change(s):
        if s.norm is None:
            raise SessionError("there is no norm; choose LayerNorm or RMSNorm first", "norm.eps")
        return stage_edits.set_norm(s, replace(s.norm, eps=eps))

    norm = document.session.norm
    name = "Norm" if norm is None else ("LayerNorm" if norm.kind == "layer" else "RMSNorm")
    return apply(document, change, f"{name} eps = {eps:g}", merge_key=("norm", "eps"))


def set_positions(document, positions: Positions | None, text: str | None = None, merge_key=None) -> bool:
    """Set the positions (None: none), as one undo step named ``text`` or for what changed
    (``RoPE offset = 3``); a slider's drag passes one ``merge_key`` for the whole drag. A
    change that does not fit the session (RoPE dims over d_k, RoPE or ALiBi with a source…)
    is refused with the reason."""
    text = text or stage_edits.describe_positions(document.session.positions, positions)
    return apply(document, lambda s: stage_edits.set_positions(s, positions), text, merge_key=merge_key)


def resize_positions_table(document, rows: int) -> bool:
    return apply(document, lambda s: stage_edits.resize_positions_table(s, rows), f"Learned positions: {counted(rows, 'row')}")


def set_positions_kind(document, kind: str) -> bool:
    """Switch the positions to ``kind`` ("none", "sinusoidal", "learned", "rope", "alibi"),
    starting from ``stage_edits.positions_of_kind``."""
    try:
        positions = stage_edits.positions_of_kind(document.session, kind)
    except AttnExplorerError as err:
        document.refuse(f"Positions not changed: {err}")
        return False
    return set_positions(document, positions)


def change_positions(document, merge_key=None, **fields) -> bool:
    """Change some fields of the current positions (``theta=500``, ``offset=3``,
    ``slopes=None`` for the geometric ALiBi slopes); a bad value is refused, saying why."""
    from dataclasses import replace

    current = document.session.positions
    if current is None:
        document.refuse("Positions not changed: there are no positions; choose a kind first")
        return False
    try:
        positions = replace(current, **fields)
    except AttnExplorerError as err:
        document.refuse(f"Positions not changed: {err}")
        return False
    return set_positions(document, positions, merge_key=merge_key)


def set_kv_heads(document, kv_heads: int | None) -> bool:
    """Share K/V heads among the query heads (None: one per query head)."""
    text = "One K/V head per query head" if kv_heads is None else f"Set K/V heads to {kv_heads}"
    return apply(document, lambda s: stage_edits.set_kv_heads(s, kv_heads), text)


# -- the source sequence (cross-attention) -------------------------------------------------------
def set_source(document, source: Source | None = None) -> bool:
    """Turn cross-attention on (``source`` None: a copy of the tokens and their embeddings)
    or replace the source; a causal or window mask, RoPE and ALiBi are refused, saying why."""
    text = "Cross-attention on" if document.session.source is None else "Set source"
    return apply(document, lambda s: source_edits.set_source(s, source), text)


def clear_source(document) -> bool:
    """Back to self-attention: the keys come from the tokens again."""
    return apply(document, source_edits.clear_source, "Cross-attention off")


def set_source_sentence(document, tokens, embed=None) -> bool:
    """Replace the source's tokens; tokens that stay keep their rows, new ones get rows from
    ``embed`` (None: zeros)."""
    return apply(document, lambda s: source_edits.retokenize_source(s, tokens, embed),
                 f"Set source sentence ({len(tokens)} tokens)")


def rename_source_token(document, i: int, text: str) -> bool:
    def change(s):
        return source_edits.set_source_token(s, i, str(text))

    return apply(document, change, f"Rename source token {i} to {str(text).strip()!r}", merge_key=("source token", i),
                 refusal=f"Source token {i} not renamed")


def insert_source_token(document, i: int, text: str, embed=None) -> bool:
    """Insert ``text`` into the source at ``i`` with a row from ``embed(tokens)`` (None: zeros)."""
    def change(s):
        src = s.source
        tokens = () if src is None else src.tokens[:i] + (text,) + src.tokens[i:]
        row = None if embed is None or src is None else np.asarray(embed(tokens))[i]
        return source_edits.insert_source_token(s, i, text, row)

    return apply(document, change, f"Insert source token {text!r}")


def delete_source_token(document, i: int) -> bool:
    src = document.session.source
    name = src.tokens[i] if src is not None and 0 <= i < src.n else i
    return apply(document, lambda s: source_edits.delete_source_token(s, i), f"Delete source token {name!r}")


def move_source_token(document, i: int, j: int) -> bool:
    src = document.session.source
    if src is None or not 0 <= j < src.n or not 0 <= i < src.n:
        return False
    return apply(document, lambda s: source_edits.move_source_token(s, i, j),
                 f"Move source token {src.tokens[i]!r} {'up' if j < i else 'down'}")


def resize_source_d(document, d: int) -> bool:
    return apply(document, lambda s: source_edits.resize_source_d(s, d), f"Set source width d_s to {d}")


def fill_source_embeddings(document, embed, source: str) -> bool:
    """Replace every source row from ``embed(tokens)`` (None: zeros)."""
    def change(s):
        src = source_edits.need_source(s)
        rows = np.zeros((src.n, src.d)) if embed is None else embed(src.tokens)
        return stage_tables.set_matrix(s, "source.embeddings", rows)

    return apply(document, change, f"Fill source embeddings ({source})")


# -- presets and compute options -------------------------------------------------------------------
def set_preset_param(document, name: str, value, label: str, merge_key=None) -> bool:
    """Rebuild the session's preset with one parameter changed (a slider: one drag, one step)."""
    from ..core.inputs.presets import build_preset

    ref = document.session.preset
    if ref is None:
        return False
    params = dict(ref.params)
    params[name] = value
    key = None if merge_key is None else (*merge_key, ref.name)
    return apply(document, lambda s: edits.keeping_unchanged(s, build_preset(ref.name, params).session), f"{label} = {value:g}",
                 merge_key=key, refusal=f"{label} not changed")


def set_compute_options(document, device: str | None = None, dtype: str | None = None) -> None:
    """Compute on another device or in another dtype (not an edit of the session: no undo)."""
    document.compute.set_options(device=device, dtype=dtype)


# -- version 3: QK-norm, soft-capping, sinks, RoPE scaling -------------------------------------
def _qk_name(qk) -> str:
    return "QK-norm" if qk is None else f"QK-norm ({'RMSNorm' if qk.kind == 'rms' else 'LayerNorm'})"


def set_qk_norm_kind(document, kind: str) -> bool:
    """QK-norm of ``kind`` ("none", "rms", "layer"), keeping its weights where they fit."""
    return apply(document, lambda s: stage_edits.set_qk_norm(s, stage_edits.qk_norm_of_kind(s, kind)),
                 "QK-norm: none" if kind == "none" else f"QK-norm: {'RMSNorm' if kind == 'rms' else 'LayerNorm'}",
                 refusal="QK-norm not changed")


def set_qk_norm_over(document, over: str) -> bool:
    """QK-norm over each head ("head") or a token's whole projection ("all")."""
    what = "each head" if over == "head" else "the whole projection"
    return apply(document, lambda s: stage_edits.set_qk_norm(s, stage_edits.qk_norm_over(s, over)),
                 f"QK-norm over {what}", refusal="QK-norm not changed")


def set_qk_norm_eps(document, eps: float) -> bool:
    from dataclasses import replace

    def change(s):
        if s.qk_norm is None:
            raise SessionError("there is no QK-norm; choose RMSNorm or LayerNorm first", "qk_norm.eps")
        return stage_edits.set_qk_norm(s, replace(s.qk_norm, eps=eps))

    return apply(document, change, f"{_qk_name(document.session.qk_norm)} eps = {eps:g}", merge_key=("qk_norm", "eps"),
                 refusal="QK-norm not changed")


def set_qk_norm_per_head(document, on: bool) -> bool:
    """One QK-norm weight per head (``on``) or one shared by the heads."""
    return apply(document, lambda s: stage_edits.set_qk_norm(s, stage_edits.per_head_qk_weights(s, on)),
                 "QK-norm: a weight per head" if on else "QK-norm: one weight for every head",
                 refusal="QK-norm not changed")


def set_softcap(document, cap: float | None) -> bool:
    """Soft-capping of the scaled scores at ``cap`` (None: off); typing the cap again merges."""
    text = "Soft-capping off" if cap is None else f"Soft-cap = {cap:g}"
    return apply(document, lambda s: stage_edits.set_softcap(s, cap), text,
                 merge_key=None if cap is None else ("softcap",), refusal="Soft-capping not changed")


def set_sinks(document, on: bool) -> bool:
    """Attention sinks on (a logit per head, at 0) or off."""
    return apply(document, lambda s: stage_edits.set_sinks(s, on), "Add attention sinks" if on else "Remove attention sinks")


def set_scaling_kind(document, kind: str) -> bool:
    """RoPE scaling of ``kind`` ("none", "linear", "llama3", "yarn")."""
    try:
        positions = stage_edits.scaling_of_kind(document.session.positions, kind)
    except AttnExplorerError as err:
        document.refuse(f"RoPE scaling not changed: {err}")
        return False
    return set_positions(document, positions)


def change_scaling(document, merge_key=None, **fields) -> bool:
    """Change some fields of RoPE's scaling (``factor=8``, ``truncate=False``…); a bad value is
    refused, naming the field."""
    from dataclasses import replace

    p = document.session.positions
    if p is None or p.scaling is None:
        document.refuse("RoPE scaling not changed: there is no scaling; choose its kind first")
        return False
    try:
        scaling = replace(p.scaling, **fields)
    except AttnExplorerError as err:
        document.refuse(f"RoPE scaling not changed: {err}")
        return False
    name, value = next(iter(fields.items()))
    shown = f"{value:g}" if isinstance(value, float) else str(value)
    return set_positions(document, replace(p, scaling=scaling), f"RoPE scaling {name} = {shown}", merge_key=merge_key)
