"""Every undoable thing a user can do to a session, in one place.

Tables, inputs, panels and controls call these instead of building sessions themselves: each
action runs a pure function of ``core.edits`` (or ``core.presets``) on the document's current
session and pushes the result as one undo step named for the user, or refuses, leaving
everything as it was and saying why through ``document.refuse``. Each returns True when it
changed the session.

A new action goes here: a pure edit in ``core/edits.py`` (tested without Qt), then a
function below that names the undo step and the refusal.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from ..core import edits
from ..core.errors import AttnExplorerError
from ..core.session import Mask, Scale, Session


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
    """``W_q (head 1)`` with several heads, else the table's name: for undo texts."""
    if table in ("W_q", "W_k", "W_v") and session.heads > 1:
        return f"{table} (head {head})"
    return table


# -- matrices ------------------------------------------------------------------------------------
def set_cell(document, table: str, row: int, col: int, text: str, head: int = 0) -> bool:
    """Set one cell from what the user typed (a number or simple arithmetic, see
    ``core.expr``); typing into the same cell again merges into the same undo step."""
    from ..core.expr import parse_number

    name = edits.cell_name(document.session, table, row, col, head)
    return apply(document, lambda s: edits.set_cell(s, table, row, col, parse_number(text), head),
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
    return apply(document, lambda s: edits.set_block(s, table, top, left, block, head),
                 f"Paste {b.shape[0]}×{b.shape[1]} into {table_label(document.session, table, head)}",
                 refusal="Paste refused")


def import_matrix(document, table: str, matrix, head: int = 0, transpose: bool = False, source: str = "") -> bool:
    """Replace one table (one head) with ``matrix`` (``transpose`` for nn.Linear's (out, in))."""
    m = np.asarray(matrix, dtype=np.float64)
    if transpose:
        m = m.T
    hint = " after transposing from nn.Linear's (out × in)" if transpose else ""
    return apply(document, lambda s: edits.set_matrix(s, table, m, head),
                 f"Import into {table_label(document.session, table, head)}",
                 refusal=f"Import{' of ' + source if source else ''} refused{hint}")


def fill_matrix(document, table: str, matrix, text: str, head: int = 0) -> bool:
    """Replace one table (one head) with ``matrix`` of the same shape, as a step named ``text``."""
    return apply(document, lambda s: edits.set_matrix(s, table, matrix, head), text)


def initialise_weights(document, table: str, kind: str, seed: int, head: int = 0) -> bool:
    """Fill one head's weight table with ``core.weights.init_weight(kind, ...)``."""
    from ..core.weights import init_weight

    def change(s):
        rows, cols = edits.table_matrix(s, table, head).shape
        return edits.set_matrix(s, table, init_weight(kind, rows, cols, heads=1, seed=seed)[0], head)

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
        document.set_selection(query=i)
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
        document.set_selection(query=j)
        return True
    return False


def fill_embeddings(document, embed, source: str) -> bool:
    """Replace every embedding row from ``embed(tokens)`` (None: zeros)."""
    def change(s):
        rows = np.zeros((s.n, s.d)) if embed is None else embed(s.tokens)
        return edits.set_matrix(s, "embeddings", rows)

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


# -- presets and compute options -------------------------------------------------------------------
def set_preset_param(document, name: str, value, label: str, merge_key=None) -> bool:
    """Rebuild the session's preset with one parameter changed (a slider: one drag, one step)."""
    from ..core.presets import build_preset

    ref = document.session.preset
    if ref is None:
        return False
    params = dict(ref.params)
    params[name] = value
    key = None if merge_key is None else (*merge_key, ref.name)
    return apply(document, lambda s: build_preset(ref.name, params).session, f"{label} = {value:g}",
                 merge_key=key, refusal=f"{label} not changed")


def set_compute_options(document, device: str | None = None, dtype: str | None = None) -> None:
    """Compute on another device or in another dtype (not an edit of the session: no undo)."""
    document.set_compute_options(device=device, dtype=dtype)
