"""Edits of a real head's stages (core/stages.py), Qt-free: each returns a new, validated session.

The companion of ``core/edits.py`` for what version 2 sessions add: biases, the norm,
positions, grouped-query K/V heads, the output projection and a cross-attention source. The
window's stage tables and controls call these through ``ui/user_actions``; notebooks and
tests can call them directly. A bad edit raises ``SessionError`` naming what and where, and
changes nothing.

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
"""

from __future__ import annotations

from dataclasses import replace
from typing import Callable, Sequence

import numpy as np

from . import edits, token_sequence
from .errors import SessionError
from .session import MAX_DIM, MAX_TOKENS, Mask, Session
from .session_arrays import with_values
from .stages import Norm, Positions, Source, sinusoidal_table

STAGE_TABLES = ("b_q", "b_k", "b_v", "b_o", "norm.weight", "norm.bias", "positions.table", "positions.slopes",
                "source.embeddings")
TABLES = edits.TABLES + STAGE_TABLES
BIASES = {"b_q": "b_query", "b_k": "b_key", "b_v": "b_value", "b_o": "b_out"}
# Tables with one matrix per (query) head.
PER_HEAD = ("W_q", "W_k", "W_v", "b_q", "b_k", "b_v")
POSITION_KINDS = ("none", "sinusoidal", "learned", "rope", "alibi")
NORM_KINDS = ("none", "layer", "rms")
# Defaults as in the models that use them: nn.LayerNorm's eps, Llama's RMSNorm eps.
DEFAULT_EPS = {"layer": 1e-5, "rms": 1e-6}


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


def _bias_width(session: Session, table: str) -> int:
    return {"b_q": session.d_k, "b_k": session.d_k, "b_v": session.d_v, "b_o": session.d_out}[table]


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
                return _read_only(np.zeros((1, _bias_width(session, table))))
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
            "positions.slopes": " (1 × heads)", "source.embeddings": " (source tokens × d_s)"}[table]


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
            new = np.zeros((heads, _bias_width(session, table)))
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
    return session.replace(source=Source(session.source.tokens, new))


# -- biases ---------------------------------------------------------------------------------

def add_bias(session: Session, table: str) -> Session:
    """The session with bias ``table`` (b_q, b_k, b_v or b_o) present, at zeros (which changes
    no result: an absent bias is zero)."""
    if table not in BIASES:
        raise SessionError(f"{table!r} is not a bias; biases are {', '.join(BIASES)}")
    if getattr(session, BIASES[table]) is not None:
        raise SessionError("is already there", table)
    if table == "b_o":
        if session.w_out is None:
            raise SessionError("an output bias needs W_o; add the output projection first", "b_o")
        return session.replace(b_out=np.zeros(session.d_out))
    heads = session.heads if table == "b_q" else session.kv_heads
    return session.replace(**{BIASES[table]: np.zeros((heads, _bias_width(session, table)))})


def remove_bias(session: Session, table: str) -> Session:
    """The session without bias ``table`` (it becomes zero)."""
    if table not in BIASES:
        raise SessionError(f"{table!r} is not a bias; biases are {', '.join(BIASES)}")
    if getattr(session, BIASES[table]) is None:
        raise SessionError("is not there", table)
    return session.replace(**{BIASES[table]: None})


# -- output projection --------------------------------------------------------------------

def add_output(session: Session) -> Session:
    """The session with an output projection W_o = I (heads·d_v square), which leaves the
    output what it was (the concatenated heads) until it is edited."""
    if session.w_out is not None:
        raise SessionError("is already there", "W_o")
    width = session.heads * session.d_v
    if width > MAX_DIM:
        raise SessionError(f"heads × d_v = {width} is more than {MAX_DIM}, the widest W_o", "W_o")
    return session.replace(w_out=np.eye(width))


def remove_output(session: Session) -> Session:
    """The session without W_o and b_o: the output is the concatenated heads."""
    if session.w_out is None:
        raise SessionError("is not there", "W_o")
    return session.replace(w_out=None, b_out=None)


def resize_d_out(session: Session, d_out: int) -> Session:
    """Output width ``d_out``: W_o's columns and b_o follow (kept where they fit, new ones 0)."""
    if session.w_out is None:
        raise SessionError("there is no output projection; add W_o first", "d_out")
    d_out = edits._check_size(d_out, "d_out", MAX_DIM)
    return session.replace(w_out=edits._fit(session.w_out, (session.w_out.shape[0], d_out)),
                           b_out=edits._fit_or_none(session.b_out, (d_out,)))


# -- norm and positions --------------------------------------------------------------------

def norm_of_kind(session: Session, kind: str) -> Norm | None:
    """The norm a switch to ``kind`` ("none", "layer", "rms") gives: the weight is kept, a
    LayerNorm's bias too, and eps is kept unless it was the other kind's default."""
    if kind not in NORM_KINDS:
        raise SessionError(f"unknown kind {kind!r}, expected one of {', '.join(NORM_KINDS)}", "norm.kind")
    old = session.norm
    if kind == "none":
        return None
    if old is None:
        return Norm(kind, eps=DEFAULT_EPS[kind])
    if old.kind == kind:
        return old
    eps = DEFAULT_EPS[kind] if old.eps == DEFAULT_EPS[old.kind] else old.eps
    return Norm(kind, weight=old.weight, bias=old.bias if kind == "layer" else None, eps=eps)


def set_norm(session: Session, norm: Norm | None) -> Session:
    """The session with ``norm`` (None: X = E + P), checked against d."""
    if norm is not None and not isinstance(norm, Norm):
        raise SessionError("must be a Norm or None", "norm")
    return session.replace(norm=norm)


def positions_of_kind(session: Session, kind: str) -> Positions | None:
    """The positions a switch to ``kind`` gives, chosen so that the switch is easy to follow:
    learned positions start from the sinusoidal table when switching from sinusoidal (the
    result stays the same), else from zeros (no position yet); RoPE rotates all of d_k (the
    largest even part of it when d_k is odd); ALiBi starts with the paper's slopes."""
    if kind not in POSITION_KINDS:
        raise SessionError(f"unknown kind {kind!r}, expected one of {', '.join(POSITION_KINDS)}", "positions.kind")
    old = session.positions
    if kind == "none":
        return None
    if old is not None and old.kind == kind:
        return old
    if kind == "sinusoidal":
        return Positions("sinusoidal")
    if kind == "learned":
        if old is not None and old.kind == "sinusoidal":
            return Positions("learned", table=sinusoidal_table(session.n, session.d, old.base))
        return Positions("learned", table=np.zeros((session.n, session.d)))
    if kind == "rope":
        if session.d_k < 2:
            raise SessionError("RoPE rotates pairs of dimensions and d_k = 1; make d_k at least 2 first", "positions")
        return Positions("rope", dims=None if session.d_k % 2 == 0 else session.d_k - 1)
    return Positions("alibi")


def resize_positions_table(session: Session, rows: int) -> Session:
    """A learned position table of ``rows`` rows (at least one per token): rows that stay keep
    their values, new ones are zeros."""
    p = session.positions
    if p is None or p.kind != "learned":
        raise SessionError("only learned positions have a table", "positions.table")
    rows = edits._check_size(rows, "positions.table rows", MAX_TOKENS)
    if rows < session.n:
        raise SessionError(f"{rows} rows are fewer than the {session.n} tokens (one row per position)",
                           "positions.table")
    return session.replace(positions=replace(p, table=edits._fit(p.table, (rows, session.d))))


def set_positions(session: Session, positions: Positions | None) -> Session:
    """The session with ``positions`` (None: no positions), checked against the sizes; RoPE
    and ALiBi are refused with a source, saying why."""
    if positions is not None and not isinstance(positions, Positions):
        raise SessionError("must be a Positions or None", "positions")
    return session.replace(positions=positions)


# -- grouped-query attention ------------------------------------------------------------------

def set_kv_heads(session: Session, kv_heads: int | None) -> Session:
    """``kv_heads`` K/V heads shared by the query heads (None: one per query head).

    K/V head g takes the K/V weights and biases the first query head of its group used, so
    going back to one K/V head per query head gives every query head the K and V it used
    (the result stays the same), and grouping keeps each group's first head as it was.
    """
    h = session.heads
    g = h if kv_heads is None else edits._check_size(kv_heads, "kv_heads", h)
    if h % g:
        raise SessionError(f"{g} does not divide {h} query heads", "kv_heads")
    take = session.kv_head_of[np.arange(g) * (h // g)]  # the old K/V head of each group's first query head

    def pick(a):
        return None if a is None else a[take]

    return session.replace(w_key=session.w_key[take], w_value=session.w_value[take],
                           b_key=pick(session.b_key), b_value=pick(session.b_value))


def sharing_heads(session: Session, head: int) -> tuple[int, ...]:
    """The query heads that use the same K/V head as query head ``head`` (itself included)."""
    kv = session.kv_head_of
    return tuple(int(h) for h in np.flatnonzero(kv == kv[head]))


# -- the source sequence (cross-attention) ---------------------------------------------------

def set_source(session: Session, source: Source | None = None) -> Session:
    """The session with a source sequence (cross-attention). None starts from a copy of the
    session's own tokens and embeddings: W_k and W_v keep fitting, and the keys are what they
    were, now read from the source. A causal or window mask, RoPE and ALiBi are refused
    (they need one sequence), with the reason."""
    if source is None:
        source = Source(session.tokens, session.embeddings)
    if not isinstance(source, Source):
        raise SessionError("must be a Source or None", "source")
    changes = {}
    width = np.shape(source.embeddings)[1] if np.ndim(source.embeddings) == 2 else None  # else the session says why
    if width is not None and width != _d_in(session):
        # W_k and W_v read the source's rows: their rows follow its width (kept where they fit).
        changes = _kv_rows(session, width)
    return session.replace(source=source, **changes)


def clear_source(session: Session) -> Session:
    """Back to self-attention: the keys come from the tokens again. W_k and W_v get the
    tokens' width; a padding mask keeps the positions that are tokens, a custom mask its
    first n columns (new ones open)."""
    if session.source is None:
        raise SessionError("there is no source sequence", "source")
    mask = session.mask
    if mask.kind == "padding":
        mask = Mask("padding", padding=tuple(j for j in mask.padding if j < session.n))
    elif mask.kind == "custom":
        mask = Mask("custom", blocked=edits._fit(mask.blocked, (session.n, session.n)).astype(bool))
    changes = _kv_rows(session, session.d) if session.source.d != session.d else {}
    return session.replace(source=None, mask=mask, **changes)


def _d_in(session: Session) -> int:
    return session.d if session.source is None else session.source.d


def _kv_rows(session: Session, rows: int) -> dict:
    g = session.kv_heads
    return {"w_key": edits._fit(session.w_key, (g, rows, session.d_k)),
            "w_value": edits._fit(session.w_value, (g, rows, session.d_v))}


def need_source(session: Session) -> Source:
    """The source sequence, or SessionError saying there is none."""
    if session.source is None:
        raise SessionError("there is no source sequence; turn cross-attention on first", "source")
    return session.source


def resize_source_d(session: Session, d: int) -> Session:
    """The source's width d_s: its embeddings and the rows of W_k and W_v follow."""
    src = need_source(session)
    d = edits._check_size(d, "d_s", MAX_DIM)
    return session.replace(source=Source(src.tokens, edits._fit(src.embeddings, (src.n, d))), **_kv_rows(session, d))


def _remap_key_mask(mask: Mask, mapping: Sequence[int | None]) -> Mask:
    """The mask after the source's tokens moved: ``mapping[new] = old position`` or None for
    a new token. The keys are the source's tokens, so padding positions and a custom mask's
    columns follow them; a new source token is not blocked."""
    if mask.kind == "padding":
        pad = set(mask.padding)
        return Mask("padding", padding=tuple(k for k, old in enumerate(mapping) if old is not None and old in pad))
    if mask.kind == "custom":
        blocked = np.zeros((mask.blocked.shape[0], len(mapping)), dtype=bool)
        for k, old in enumerate(mapping):
            if old is not None:
                blocked[:, k] = mask.blocked[:, old]
        return Mask("custom", blocked=blocked)
    return mask


def _source_sequence(session: Session) -> token_sequence.TokenSequence:
    """The source's tokens as a ``TokenSequence``: padding positions and a custom mask's
    columns follow them (the keys are the source's tokens)."""
    src = need_source(session)

    def rebuild(tokens, mapping, x) -> Session:
        if len(tokens) > MAX_TOKENS:
            raise SessionError(f"{len(tokens)} tokens is more than the limit of {MAX_TOKENS}", "source.tokens")
        return session.replace(source=Source(tokens, x), mask=_remap_key_mask(session.mask, mapping))

    return token_sequence.TokenSequence(
        src.tokens, src.embeddings, "source.tokens", "source.embeddings", "d_s",
        "cannot delete the only source token; turn cross-attention off instead",
        "a source needs at least one token", rebuild)


def set_source_token(session: Session, i: int, text: str) -> Session:
    """The session with source token ``i`` renamed (its embedding stays)."""
    return token_sequence.rename(_source_sequence(session), i, text)


def insert_source_token(session: Session, i: int, text: str, embedding=None) -> Session:
    """The session with ``text`` inserted into the source before position ``i`` (``i == n_s``
    appends), with ``embedding`` as its row (zeros when omitted)."""
    return token_sequence.insert(_source_sequence(session), i, text, embedding)


def delete_source_token(session: Session, i: int) -> Session:
    """The session without source token ``i`` and its row (the last one cannot go: turn
    cross-attention off instead)."""
    return token_sequence.delete(_source_sequence(session), i)


def move_source_token(session: Session, i: int, j: int) -> Session:
    """The session with source token ``i`` (and its row) moved to position ``j``."""
    return token_sequence.move(_source_sequence(session), i, j)


def retokenize_source(session: Session, tokens: Sequence[str],
                      embed: Callable[[tuple[str, ...]], np.ndarray] | None = None) -> Session:
    """The source for a new token list (its sentence box): tokens that stay keep their rows
    (aligned as ``edits.retokenize`` aligns), new ones get rows from ``embed`` or zeros."""
    return token_sequence.retokenize(_source_sequence(session), tokens, embed)


# -- names for undo steps ------------------------------------------------------------------------

_POSITION_NAMES = {"sinusoidal": "sinusoidal", "learned": "learned", "rope": "RoPE", "alibi": "ALiBi"}
_FIELD_NAMES = {"base": "base", "theta": "θ", "dims": "dims", "layout": "layout", "offset": "offset"}


def describe_positions(old: Positions | None, new: Positions | None) -> str:
    """A short name for the change from ``old`` to ``new`` positions, for an undo step:
    ``RoPE offset = 3`` when one parameter of the same kind changed, ``ALiBi slopes``,
    ``Positions: RoPE`` for a new kind, ``Positions: none``."""
    if new is None:
        return "Positions: none"
    name = _POSITION_NAMES[new.kind]
    if old is None or old.kind != new.kind:
        return f"Positions: {name}"
    changed = [f for f in _FIELD_NAMES if getattr(old, f) != getattr(new, f)]
    if new.kind == "alibi":
        return f"{name} slopes" if new.slopes is not None else f"{name} geometric slopes"
    if new.kind == "learned":
        return f"{name} position table"
    if len(changed) == 1:
        value = getattr(new, changed[0])
        shown = "all of d_k" if value is None else (f"{value:g}" if isinstance(value, float) else str(value))
        return f"{name} {_FIELD_NAMES[changed[0]]} = {shown}"
    return f"Positions: {name}"


def describe_norm(old: Norm | None, new: Norm | None) -> str:
    """``Norm: LayerNorm``, ``Norm: none``, ``RMSNorm eps = 1e-05``: for an undo step."""
    if new is None:
        return "Norm: none"
    name = "LayerNorm" if new.kind == "layer" else "RMSNorm"
    if old is not None and old.kind == new.kind and old.eps != new.eps:
        return f"{name} eps = {new.eps:g}"
    return f"Norm: {name}"
