"""The tables of a real head's stages, read and written as 2-D matrices, Qt-free.

Tables, by their session-file names (``TABLES`` lists them all, the base ones first). Each is
read as a 2-D matrix, so one table model and one view serve every one of them:

- ``b_q``, ``b_k``, ``b_v``: one row per head (1 × d_k or 1 × d_v), for query head ``head``;
  with grouped-query attention ``b_k``/``b_v`` are the shared K/V head's, like ``W_k``/``W_v``.
  An absent bias reads as zeros (the maths' "absent means zero"); writing a cell adds it.
- ``b_o``: 1 × d_out, only with ``W_o``; absent reads as zeros, as above.
- ``norm.weight``, ``norm.bias``: 1 × d (absent: ones and zeros); only with a norm, and RMSNorm
  has no bias.
- ``positions.table``: rows × d, learned positions only. ``positions.slopes``: 1 × H, ALiBi
  only; the paper's geometric slopes until a cell is written.
- ``source.embeddings``: source tokens × d_s, cross-attention only.
- ``qk_norm.query_weight``, ``qk_norm.key_weight`` (and ``…_bias``, LayerNorm only): one row,
  d_k numbers (shared by the heads) or heads·d_k (one weight per head, or over the whole
  projection); absent: ones (zeros). Only with QK-norm.
- ``sinks``: 1 × H, one logit per query head; only with sinks.

``table_matrix`` reads any table of ``TABLES`` (the weights of ``core/editing/edits.py`` first);
``set_cell``, ``set_block`` and ``set_matrix`` write one, each returning a new, validated
session (a bad edit raises ``SessionError`` naming what and where, and changes nothing).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from . import edits
from ..errors import SessionError
from ..inputs.session import Session
from ..inputs.session_arrays import with_values
from ..inputs.stages import Source

QK_TABLES = ("qk_norm.query_weight", "qk_norm.key_weight", "qk_norm.query_bias", "qk_norm.key_bias")
STAGE_TABLES = ("b_q", "b_k", "b_v", "b_o", "norm.weight", "norm.bias", "positions.table", "positions.slopes",
                "source.embeddings") + QK_TABLES + ("sinks",)
TABLES = edits.TABLES + STAGE_TABLES
BIASES = {"b_q": "b_query", "b_k": "b_key", "b_v": "b_value", "b_o": "b_out"}
# Tables with one matrix per (query) head.
PER_HEAD = ("W_q", "W_k", "W_v", "b_q", "b_k", "b_v")


def _check_table(table: str) -> None:
    if table not in TABLES:
        raise SessionError(f"unknown table {table!r}; tables are {', '.join(TABLES)}")


def _check_head(session: Session, table: str, head: int) -> None:
    if not 0 <= head < session.heads:
        raise SessionError(f"head {head} is outside 0..{session.heads - 1}", table)


def _stored_head(session: Session, table: str, head: int) -> int:
    """Where query head ``head``'s row of a bias is stored (the shared K/V head for b_k, b_v)."""
    if table in ("b_k", "b_v"):
        return int(session.kv_head_of[head])
    return head


def bias_width(session: Session, table: str) -> int:
    return {"b_q": session.d_k, "b_k": session.d_k, "b_v": session.d_v, "b_o": session.d_out}[table]


def qk_norm_width(session: Session, side: str) -> int:
    """How many numbers the QK-norm's ``side`` ("query" or "key") weight holds: its own
    length when set, else d_k over each head or heads·d_k over the whole projection."""
    qk = session.qk_norm
    v = getattr(qk, f"{side}_weight")
    if v is not None:
        return v.shape[0]
    if qk.over == "head":
        return session.d_k
    return (session.heads if side == "query" else session.kv_heads) * session.d_k


def has_table(session: Session, table: str) -> bool:
    """Whether ``table`` exists in this session (it can be read with ``table_matrix``)."""
    _check_table(table)
    try:
        table_matrix(session, table)
    except SessionError:
        return False
    return True


def is_stored(session: Session, table: str) -> bool:
    """Whether a bias (or the ALiBi slopes, or a norm's weight/bias) holds its own numbers
    rather than the implied default (zeros, ones, the geometric slopes)."""
    _check_table(table)
    if table in BIASES:
        return getattr(session, BIASES[table]) is not None
    if table in ("norm.weight", "norm.bias"):
        return session.norm is not None and getattr(session.norm, table.split(".")[1]) is not None
    if table == "positions.slopes":
        return session.positions is not None and session.positions.kind == "alibi" and session.positions.slopes is not None
    if table in QK_TABLES:
        return session.qk_norm is not None and getattr(session.qk_norm, table.split(".")[1]) is not None
    if table == "sinks":
        return session.sinks is not None
    return has_table(session, table)


def table_matrix(session: Session, table: str, head: int = 0) -> np.ndarray:
    """The 2-D read-only matrix a table shows (see the module's docstring), or SessionError
    saying why this session has no such table."""
    _check_table(table)
    if table in edits.TABLES:
        return edits.table_matrix(session, table, head)
    if table in BIASES:
        if table == "b_o" and session.w_out is None:
            raise SessionError("an output bias needs W_o; add the output projection first", "b_o")
        value = getattr(session, BIASES[table])
        if table in PER_HEAD:
            _check_head(session, table, head)
            if value is None:
                return _read_only(np.zeros((1, bias_width(session, table))))
            return value[_stored_head(session, table, head)][None, :]
        return _read_only(np.zeros((1, session.d_out)) if value is None else value[None, :])
    if table.startswith("norm."):
        norm = session.norm
        if norm is None:
            raise SessionError("there is no norm; choose LayerNorm or RMSNorm first", table)
        if table == "norm.bias":
            if norm.kind == "rms":
                raise SessionError("RMSNorm has no bias", table)
            return _read_only(norm.bias_or_zeros(session.d)[None, :])
        return _read_only(norm.weight_or_ones(session.d)[None, :])
    if table in QK_TABLES:
        qk = session.qk_norm
        if qk is None:
            raise SessionError("there is no QK-norm; choose RMSNorm or LayerNorm first", table)
        name = table.split(".")[1]
        if name.endswith("bias") and qk.kind == "rms":
            raise SessionError("RMSNorm has no bias", table)
        value = getattr(qk, name)
        if value is None:
            side = name.split("_")[0]
            value = (np.ones if name.endswith("weight") else np.zeros)(qk_norm_width(session, side))
        return _read_only(value[None, :])
    if table == "sinks":
        if session.sinks is None:
            raise SessionError("there are no sinks; turn them on first", table)
        return session.sinks[None, :]
    p = session.positions
    if table == "positions.table":
        if p is None or p.kind != "learned":
            raise SessionError("only learned positions have a table", table)
        return p.table
    if table == "positions.slopes":
        if p is None or p.kind != "alibi":
            raise SessionError("only ALiBi positions have slopes", table)
        return _read_only(p.slopes_for(session.heads)[None, :])
    if session.source is None:  # source.embeddings
        raise SessionError("there is no source sequence; turn cross-attention on first", table)
    return session.source.embeddings


def _read_only(a: np.ndarray) -> np.ndarray:
    a = np.asarray(a)
    if a.flags.writeable:
        a = a.copy()
        a.flags.writeable = False
    return a


def cell_name(session: Session, table: str, row: int, col: int, head: int = 0) -> str:
    """``W_q[0,1]``, ``b_q[1] (head 2)``, ``norm.weight[3]``: for messages and undo texts.
    One-row tables are vectors in the session, so their cells have one index."""
    if table in edits.TABLES:
        return edits.cell_name(session, table, row, col, head)
    name = f"{table}[{row},{col}]" if table in ("positions.table", "source.embeddings") else f"{table}[{col}]"
    if table in PER_HEAD and session.heads > 1:
        name += f" (head {head})"
    return name


def table_label(session: Session, table: str, head: int = 0) -> str:
    """``W_q (head 1)``, ``b_k (K/V head 0)`` with several heads, else the table's name."""
    if table in PER_HEAD and session.heads > 1:
        if table in ("W_k", "W_v", "b_k", "b_v") and session.kv_heads != session.heads:
            return f"{table} (K/V head {int(session.kv_head_of[head])})"
        return f"{table} (head {head})"
    return table


def set_cell(session: Session, table: str, row: int, col: int, value: float, head: int = 0) -> Session:
    """The session with one cell of any table set to ``value`` (a finite number)."""
    if table in edits.TABLES:
        return edits.set_cell(session, table, row, col, value, head)
    m = table_matrix(session, table, head)
    where = cell_name(session, table, row, col, head)
    if not (0 <= row < m.shape[0] and 0 <= col < m.shape[1]):
        raise SessionError(f"is outside the {m.shape[0]}×{m.shape[1]} table", where)
    return _put(session, table, head, row, col, np.array([[edits._finite(value, where)]]))


def set_block(session: Session, table: str, top: int, left: int, block, head: int = 0) -> Session:
    """The session with a 2-D ``block`` written into any table from cell (top, left); a block
    that does not fit raises SessionError giving its shape and the room there."""
    if table in edits.TABLES:
        return edits.set_block(session, table, top, left, block, head)
    m = table_matrix(session, table, head)
    try:
        b = np.asarray(block, dtype=np.float64)
    except (TypeError, ValueError):
        raise SessionError("the block must hold numbers only", table) from None
    if b.ndim == 1:
        b = b[None, :]
    if b.ndim != 2:
        raise SessionError(f"expected a 2-D block, got shape {b.shape}", table)
    rows, cols = m.shape
    if not (0 <= top < rows and 0 <= left < cols):
        raise SessionError(f"cell [{top},{left}] is outside the {rows}×{cols} table", table)
    if b.shape[0] > rows - top or b.shape[1] > cols - left:
        raise SessionError(f"a {b.shape[0]}×{b.shape[1]} block does not fit at [{top},{left}]: "
                           f"there is room for {rows - top}×{cols - left} (the table is {rows}×{cols})", table)
    if not np.isfinite(b).all():
        i, j = (int(k) for k in np.argwhere(~np.isfinite(b))[0])
        raise SessionError(f"the block holds a non-finite number at [{i},{j}]", table)
    return _put(session, table, head, top, left, b)


def set_matrix(session: Session, table: str, matrix, head: int = 0) -> Session:
    """The session with the whole of any table (one head) replaced; shapes must match. A
    vector fills a one-row table."""
    if table in edits.TABLES:
        return edits.set_matrix(session, table, matrix, head)
    m = table_matrix(session, table, head)
    try:
        b = np.asarray(matrix, dtype=np.float64)
    except (TypeError, ValueError):
        raise SessionError("the matrix must hold numbers only", table) from None
    if b.ndim == 1 and m.shape[0] == 1:
        b = b[None, :]
    if b.shape != m.shape:
        shape = "×".join(str(k) for k in b.shape) or "a single number"
        raise SessionError(f"the matrix is {shape} but the table is {m.shape[0]}×{m.shape[1]}{_shape_hint(table)}", table)
    return set_block(session, table, 0, 0, b, head)


def _shape_hint(table: str) -> str:
    return {"b_q": " (1 × d_k)", "b_k": " (1 × d_k)", "b_v": " (1 × d_v)", "b_o": " (1 × d_out)",
            "norm.weight": " (1 × d)", "norm.bias": " (1 × d)", "positions.table": " (positions × d)",
            "positions.slopes": " (1 × heads)", "source.embeddings": " (source tokens × d_s)",
            "sinks": " (1 × heads)"}.get(table, " (one row)")


def _put(session: Session, table: str, head: int, top: int, left: int, block: np.ndarray) -> Session:
    """The session with ``block`` (checked, finite) written at (top, left) of a stage table."""
    rows, cols = slice(top, top + block.shape[0]), slice(left, left + block.shape[1])
    if table in BIASES:
        name = BIASES[table]
        stored = getattr(session, name)
        if table == "b_o":
            if stored is None:
                stored = np.zeros(session.d_out)
                stored[cols] = block[0]
                return session.replace(b_out=stored)
            return session.replace(b_out=with_values(stored, (cols,), block[0]))
        index = (_stored_head(session, table, head), cols)
        if stored is None:
            heads = session.heads if table == "b_q" else session.kv_heads
            new = np.zeros((heads, bias_width(session, table)))
            new[index] = block[0]
            return session.replace(**{name: new})
        # One copy of the bias, which remembers what changed (as the weight tables' edits do).
        return session.replace(**{name: with_values(stored, index, block[0])})
    new = np.array(table_matrix(session, table, head))
    new[rows, cols] = block
    if table.startswith("norm."):
        return session.replace(norm=replace(session.norm, **{table.split(".")[1]: new[0]}))
    if table == "positions.table":
        return session.replace(positions=replace(session.positions, table=new))
    if table == "positions.slopes":
        return session.replace(positions=replace(session.positions, slopes=new[0]))
    if table in QK_TABLES:
        return session.replace(qk_norm=replace(session.qk_norm, **{table.split(".")[1]: new[0]}))
    if table == "sinks":
        return session.replace(sinks=new[0])
    return session.replace(source=Source(session.source.tokens, new))
