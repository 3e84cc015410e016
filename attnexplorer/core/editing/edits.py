"""Structural edits of a Session, Qt-free: every function returns a new, validated session.

The window's tables and controls call these and hand the result to
``document.edit(...)``; notebooks and tests can call them directly. Nothing here mutates its
input (sessions are frozen), and a bad edit raises ``SessionError`` naming what and where,
so a refused edit changes nothing.

Consistency rules a caller may rely on:

- A token's embedding row travels with it (insert, delete, move, retokenise).
- Masks follow their tokens: padding positions and a custom mask's rows and columns are
  moved or dropped with the tokens; a new token is not blocked. Causal and window masks are
  rules, so they simply apply to the new positions.
- Resizing d, d_k, d_v or the number of heads keeps every value whose index still fits;
  new cells are 0. ``W_o`` (when present) is resized with d_v and the heads.
- Matrix indices in messages and undo texts count from 0, like numpy.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import replace
from typing import Callable, Sequence

import numpy as np

from . import token_sequence
from ..errors import SessionError
from ..inputs.mask import custom_mask_owning
from ..inputs.session import MAX_DIM, MAX_HEADS, Mask, Scale, Session
from ..inputs.session_arrays import prepare_copy_on_write, with_values
from ..inputs.stages import alibi_slopes

# The tables a user can edit cell by cell, by the names messages use.
TABLES = ("embeddings", "W_q", "W_k", "W_v", "W_o")
_FIELD = {"embeddings": "embeddings", "W_q": "w_query", "W_k": "w_key", "W_v": "w_value", "W_o": "w_out"}
_PER_HEAD = ("W_q", "W_k", "W_v")


def _check_table(table: str) -> None:
    if table not in _FIELD:
        raise SessionError(f"unknown table {table!r}; tables are {', '.join(TABLES)}")


def prepare_edit(session: Session, table: str) -> bool:
    """Get ``table``'s array ready for a cell edit about to come (the person opened a cell's
    editor): where its edits copy on write, the memory file that the first one maps is written
    meanwhile, off the caller's thread (``session_arrays.prepare_copy_on_write``). True when
    that is under way or done; nothing changes in the session either way."""
    value = getattr(session, _FIELD[table], None) if table in _FIELD else None
    return value is not None and prepare_copy_on_write(value)


def table_matrix(session: Session, table: str, head: int = 0) -> np.ndarray:
    """The 2-D (read-only) matrix a table shows: embeddings (n, d), W_q[head] (d, d_k), ..."""
    _check_table(table)
    value = getattr(session, _FIELD[table])
    if value is None:
        raise SessionError("this session has no output projection", table)
    if table in _PER_HEAD:
        if not 0 <= head < session.heads:
            raise SessionError(f"head {head} is outside 0..{session.heads - 1}", table)
        return value[_stored_head(session, table, head)]
    return value


def _stored_head(session: Session, table: str, head: int) -> int:
    """Where query head ``head``'s matrix of ``table`` is stored: with grouped-query attention
    W_k and W_v belong to the K/V head it shares (editing them edits every sharing head)."""
    if table in ("W_k", "W_v") and session.kv_heads != session.heads:
        return int(session.kv_head_of[head])
    return head


def cell_name(session: Session, table: str, row: int, col: int, head: int = 0) -> str:
    """``W_q[0,1]`` (``W_q[0,1] (head 2)`` with several heads): for messages and undo texts."""
    name = f"{table}[{row},{col}]"
    if table in _PER_HEAD and session.heads > 1:
        name += f" (head {head})"
    return name


def _with_values(session: Session, table: str, head: int, rows, cols, values) -> Session:
    """The session with ``table``[rows, cols] (of ``head``) set to checked, finite ``values``.

    One copy of the table's array and nothing else (``session_arrays.with_values``): no second copy
    or finite check of the untouched cells, and the new array remembers what changed, so the
    engine patches only that on the device. Other arrays are shared with ``session``.
    """
    name = _FIELD[table]
    index = (_stored_head(session, table, head), rows, cols) if table in _PER_HEAD else (rows, cols)
    return session.replace(**{name: with_values(getattr(session, name), index, values)})


def keeping_unchanged(old: Session, new: Session) -> Session:
    """``new``, with every field that equals ``old``'s taken from ``old`` itself.

    A preset rebuilt with one slider moved (the sine's τ) makes every array afresh although
    only the scale changed; sharing ``old``'s equal arrays tells the tables, the panels that
    draw only inputs, the engine's device copies and its projections that nothing else
    changed, as an edit made by ``replace`` does (a τ drag re-read every table and re-uploaded
    every array on each frame).
    """
    changes = {}
    for f in dataclasses.fields(Session):
        a, b = getattr(old, f.name), getattr(new, f.name)
        if a is b:
            continue
        if isinstance(a, np.ndarray) and isinstance(b, np.ndarray):
            same = a.shape == b.shape and a.dtype == b.dtype and bool(np.array_equal(a, b))
        elif isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
            same = False
        else:
            same = type(a) is type(b) and bool(a == b)
        if not same:
            changes[f.name] = b
    return old.replace(**changes) if changes else old


def _finite(value, where: str) -> float:
    if isinstance(value, bool):
        raise SessionError(f"expected a number, got {value!r}", where)
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise SessionError(f"expected a number, got {value!r}", where) from None
    if not math.isfinite(v):
        raise SessionError(f"{v} is not a finite number", where)
    return v


def set_cell(session: Session, table: str, row: int, col: int, value: float, head: int = 0) -> Session:
    """The session with one cell of ``table`` set to ``value`` (a finite number)."""
    m = table_matrix(session, table, head)
    where = cell_name(session, table, row, col, head)
    if not (0 <= row < m.shape[0] and 0 <= col < m.shape[1]):
        raise SessionError(f"is outside the {m.shape[0]}×{m.shape[1]} table", where)
    v = _finite(value, where)
    return _with_values(session, table, head, row, col, v)


def set_block(session: Session, table: str, top: int, left: int, block, head: int = 0) -> Session:
    """The session with a 2-D ``block`` written into ``table`` from cell (top, left).

    A block that does not fit raises ``SessionError`` giving its shape and the room there.
    """
    m = table_matrix(session, table, head)
    b = np.asarray(block, dtype=np.float64)
    if b.ndim == 1:
        b = b[None, :]
    if b.ndim != 2:
        raise SessionError(f"expected a 2-D block, got shape {b.shape}", table)
    rows, cols = m.shape
    room = (rows - top, cols - left)
    if not (0 <= top < rows and 0 <= left < cols):
        raise SessionError(f"cell [{top},{left}] is outside the {rows}×{cols} table", table)
    if b.shape[0] > room[0] or b.shape[1] > room[1]:
        raise SessionError(f"a {b.shape[0]}×{b.shape[1]} block does not fit at [{top},{left}]: "
                           f"there is room for {room[0]}×{room[1]} (the table is {rows}×{cols})", table)
    if not np.isfinite(b).all():
        i, j = (int(k) for k in np.argwhere(~np.isfinite(b))[0])
        raise SessionError(f"the block holds a non-finite number at [{i},{j}]", table)
    return _with_values(session, table, head, slice(top, top + b.shape[0]), slice(left, left + b.shape[1]), b)


def set_matrix(session: Session, table: str, matrix, head: int = 0) -> Session:
    """The session with the whole of ``table`` (one head) replaced; shapes must match."""
    m = table_matrix(session, table, head)
    b = np.asarray(matrix, dtype=np.float64)
    if b.shape != m.shape:
        shape = "×".join(str(k) for k in b.shape) or "a single number"
        raise SessionError(f"the matrix is {shape} but the table is {m.shape[0]}×{m.shape[1]}"
                           f"{_shape_hint(session, table)}", table)
    return set_block(session, table, 0, 0, b, head)


def _shape_hint(session: Session, table: str) -> str:
    return {
        "embeddings": " (tokens × d)",
        "W_q": " (d × d_k)", "W_k": " (d × d_k)", "W_v": " (d × d_v)",
        "W_o": " (heads·d_v × d_out)",
    }[table]


# -- tokens -----------------------------------------------------------------------------

def _remap_mask(mask: Mask, mapping: Sequence[int | None], n_keys: int | None = None) -> Mask:
    """The mask for a new token order: ``mapping[new] = old index`` or None for a new token.

    ``n_keys`` is the source's length in cross-attention: the keys are then the source's
    tokens, which do not move, so padding stays and only a custom mask's rows follow.
    """
    if n_keys is not None:
        if mask.kind != "custom":
            return mask
        blocked = np.zeros((len(mapping), n_keys), dtype=bool)
        for k, old in enumerate(mapping):
            if old is not None:
                blocked[k] = mask.blocked[old]
        return Mask("custom", blocked=blocked)
    if mask.kind == "padding":
        pad = set(mask.padding)
        return Mask("padding", padding=tuple(k for k, old in enumerate(mapping) if old is not None and old in pad))
    if mask.kind == "custom":
        n = len(mapping)
        old = mask.blocked
        blocked = np.zeros((n, n), dtype=bool)
        keep = [(k, o) for k, o in enumerate(mapping) if o is not None]
        if keep:
            new_idx = np.array([k for k, _ in keep])
            old_idx = np.array([o for _, o in keep])
            blocked[np.ix_(new_idx, new_idx)] = old[np.ix_(old_idx, old_idx)]
        return Mask("custom", blocked=blocked)
    return mask


def _sequence(session: Session) -> token_sequence.TokenSequence:
    """The session's own tokens as a ``TokenSequence``: its mask rows (and, with a source,
    columns stay) follow the tokens, and a learned position table grows with them."""

    def rebuild(tokens, mapping, x) -> Session:
        changes = {}
        p = session.positions
        if p is not None and p.kind == "learned" and p.table.shape[0] < len(tokens):
            # A learned table needs a row per position: new positions get zero rows.
            changes["positions"] = replace(p, table=_fit(p.table, (len(tokens), p.table.shape[1])))
        n_keys = None if session.source is None else session.source.n
        return session.replace(tokens=tokens, embeddings=x, mask=_remap_mask(session.mask, mapping, n_keys),
                               **changes)

    return token_sequence.TokenSequence(
        session.tokens, session.embeddings, "tokens", "embeddings", "d",
        "cannot delete the only token; a session needs at least one", "a session needs at least one token", rebuild)


def _token_index(session: Session, i: int, where: str = "tokens", allow_end: bool = False) -> int:
    top = session.n if allow_end else session.n - 1
    if isinstance(i, bool) or not isinstance(i, (int, np.integer)) or not 0 <= i <= top:
        raise SessionError(f"position {i!r} is outside 0..{top}", where)
    return int(i)


def set_token(session: Session, i: int, text: str) -> Session:
    """The session with token ``i`` renamed (its embedding stays)."""
    return token_sequence.rename(_sequence(session), i, text)


def insert_token(session: Session, i: int, text: str, embedding=None) -> Session:
    """The session with ``text`` inserted before position ``i`` (``i == n`` appends).

    ``embedding`` is its row (length d); zeros when omitted.
    """
    return token_sequence.insert(_sequence(session), i, text, embedding)


def delete_token(session: Session, i: int) -> Session:
    """The session without token ``i`` and its embedding row (the last token cannot go)."""
    return token_sequence.delete(_sequence(session), i)


def move_token(session: Session, i: int, j: int) -> Session:
    """The session with token ``i`` (and its embedding row) moved to position ``j``."""
    return token_sequence.move(_sequence(session), i, j)


align_tokens = token_sequence.align_tokens


def retokenize(session: Session, tokens: Sequence[str],
               embed: Callable[[tuple[str, ...]], np.ndarray] | None = None) -> Session:
    """The session for a new token list; tokens that stay keep their embedding rows (see
    ``token_sequence.retokenize``)."""
    return token_sequence.retokenize(_sequence(session), tokens, embed)


# -- sizes ----------------------------------------------------------------------------

def _fit(a: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """``a`` cut or zero-padded to ``shape`` (values whose index fits are kept)."""
    out = np.zeros(shape)
    common = tuple(slice(0, min(x, y)) for x, y in zip(a.shape, shape))
    out[common] = a[common]
    return out


def _check_size(value, name: str, top: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not 1 <= value <= top:
        raise SessionError(f"must be a whole number in 1..{top}, got {value!r}", name)
    return int(value)


def _fit_w_out(session: Session, heads: int, d_v: int):
    if session.w_out is None:
        return None
    blocks = session.w_out.reshape(session.heads, session.d_v, -1)
    return _fit(blocks, (heads, d_v, blocks.shape[2])).reshape(heads * d_v, -1)


def _fit_or_none(a, shape):
    return None if a is None else _fit(a, shape)


def fitted_head_stages(session: Session, heads: int, kv_heads: int, d_k: int, kv_take=None) -> dict:
    """The QK-norm weights and the sinks for ``heads`` query heads, ``kv_heads`` K/V heads and
    width ``d_k`` (the changes to pass to ``session.replace``): kept where they fit; a new
    head's or dimension's norm weight starts at 1 and bias at 0, a new head's sink at 0.
    ``kv_take``: the old K/V head each new K/V head takes (regrouping), else the first ones."""
    changes = {}
    if session.sinks is not None and heads != session.heads:
        changes["sinks"] = _fit(session.sinks, (heads,))
    qk = session.qk_norm
    if qk is None:
        return changes

    def fit(v, count, old_count, take, fill):
        if v is None:
            return None
        shared = qk.over == "head" and v.shape[0] == session.d_k
        blocks = v[None] if shared else v.reshape(old_count, session.d_k)
        if take is not None and not shared:
            blocks = blocks[take]
        rows = 1 if shared else count
        out = np.full((rows, d_k), fill)
        out[: min(rows, len(blocks)), : min(d_k, session.d_k)] = blocks[:rows, :d_k]
        return out.reshape(-1)

    new = replace(qk, query_weight=fit(qk.query_weight, heads, session.heads, None, 1.0),
                  query_bias=fit(qk.query_bias, heads, session.heads, None, 0.0),
                  key_weight=fit(qk.key_weight, kv_heads, session.kv_heads, kv_take, 1.0),
                  key_bias=fit(qk.key_bias, kv_heads, session.kv_heads, kv_take, 0.0))
    if new != qk:
        changes["qk_norm"] = new
    return changes


def _d_in(session: Session, d: int) -> int:
    """The rows of W_k and W_v: the source's width in cross-attention, else d."""
    return d if session.source is None else session.source.d


def resize_d(session: Session, d: int) -> Session:
    """Embedding width ``d``: embeddings get/lose columns, every weight reading them gets/loses
    rows (W_k and W_v read the source in cross-attention, whose width stays), and so do the
    norm's weight and bias and a learned position table."""
    d = _check_size(d, "d", MAX_DIM)
    h, g = session.heads, session.kv_heads
    changes = {}
    if session.norm is not None:
        norm = session.norm
        changes["norm"] = replace(norm, weight=None if norm.weight is None else _fit(norm.weight - 1.0, (d,)) + 1.0,
                                  bias=_fit_or_none(norm.bias, (d,)))  # a new weight is 1: the norm's identity
    p = session.positions
    if p is not None and p.kind == "learned":
        changes["positions"] = replace(p, table=_fit(p.table, (p.table.shape[0], d)))
    return session.replace(
        embeddings=_fit(session.embeddings, (session.n, d)),
        w_query=_fit(session.w_query, (h, d, session.d_k)),
        w_key=_fit(session.w_key, (g, _d_in(session, d), session.d_k)),
        w_value=_fit(session.w_value, (g, _d_in(session, d), session.d_v)),
        **changes,
    )


def resize_dk(session: Session, d_k: int) -> Session:
    """Query/key width ``d_k`` (W_q and W_k together, and their biases). RoPE rotating more
    dimensions than the new d_k holds (or all of an odd d_k) rotates the largest even number
    that fits; with d_k = 1 it is refused, naming why."""
    d_k = _check_size(d_k, "d_k", MAX_DIM)
    h, g, d_in = session.heads, session.kv_heads, _d_in(session, session.d)
    changes = {}
    p = session.positions
    if p is not None and p.kind == "rope" and d_k >= 2 and (p.rope_dims(session.d_k) > d_k or (p.dims is None and d_k % 2)):
        # RoPE keeps rotating as many pairs as fit: the largest even number of dimensions.
        changes["positions"] = replace(p, dims=min(p.rope_dims(session.d_k), d_k - d_k % 2))
    changes.update(fitted_head_stages(session, h, g, d_k))
    return session.replace(w_query=_fit(session.w_query, (h, session.d, d_k)), w_key=_fit(session.w_key, (g, d_in, d_k)),
                           b_query=_fit_or_none(session.b_query, (h, d_k)), b_key=_fit_or_none(session.b_key, (g, d_k)),
                           **changes)


def resize_dv(session: Session, d_v: int) -> Session:
    """Value width ``d_v`` (W_v and its bias, and W_o's rows per head)."""
    d_v = _check_size(d_v, "d_v", MAX_DIM)
    g = session.kv_heads
    return session.replace(w_value=_fit(session.w_value, (g, _d_in(session, session.d), d_v)),
                           b_value=_fit_or_none(session.b_value, (g, d_v)),
                           w_out=_fit_w_out(session, session.heads, d_v))


def set_heads(session: Session, heads: int) -> Session:
    """``heads`` heads: existing heads keep their weights, new heads start at zeros.

    Grouped-query K/V heads stay as they are (``heads`` must remain a multiple of them);
    otherwise every head has its own K and V, as before. Explicit ALiBi slopes follow the
    heads (a new head gets the paper's slope for its place), and so do the sinks and
    per-head QK-norm weights (``fitted_head_stages``)."""
    heads = _check_size(heads, "heads", MAX_HEADS)
    d, dk, dv = session.d, session.d_k, session.d_v
    g = heads if session.kv_heads == session.heads else session.kv_heads
    d_in = _d_in(session, d)
    changes = {}
    p = session.positions
    if p is not None and p.kind == "alibi" and p.slopes is not None:
        slopes = alibi_slopes(heads)
        slopes[: min(heads, len(p.slopes))] = p.slopes[:heads]
        changes["positions"] = replace(p, slopes=slopes)
    changes.update(fitted_head_stages(session, heads, g, dk))
    return session.replace(
        w_query=_fit(session.w_query, (heads, d, dk)),
        w_key=_fit(session.w_key, (g, d_in, dk)),
        w_value=_fit(session.w_value, (g, d_in, dv)),
        b_query=_fit_or_none(session.b_query, (heads, dk)),
        b_key=_fit_or_none(session.b_key, (g, dk)),
        b_value=_fit_or_none(session.b_value, (g, dv)),
        w_out=_fit_w_out(session, heads, dv),
        **changes,
    )


# -- mask and scale -----------------------------------------------------------------------

def set_mask(session: Session, mask: Mask) -> Session:
    """The session with ``mask`` (checked against the tokens)."""
    if not isinstance(mask, Mask):
        raise SessionError("must be a Mask", "mask")
    return session.replace(mask=mask)


def set_scale(session: Session, scale: Scale) -> Session:
    if not isinstance(scale, Scale):
        raise SessionError("must be a Scale", "scale")
    return session.replace(scale=scale)


def toggle_padding(session: Session, j: int) -> Session:
    """Block or unblock key ``j`` for every query (what clicking a token header does).

    With no mask or a padding mask this toggles ``j`` in the padding set. With a causal,
    window or custom mask the current pattern is kept as a custom mask and column ``j`` is
    toggled: fully blocked becomes open, anything else becomes fully blocked.
    """
    j = _key_index(session, j, "mask.padding")
    mask = session.mask
    if mask.kind in ("none", "padding"):
        pad = set(mask.padding) if mask.kind == "padding" else set()
        pad ^= {j}
        return session.replace(mask=Mask("padding", padding=tuple(pad)))
    blocked = _mask_matrix(session)
    blocked[:, j] = not blocked[:, j].all()
    return session.replace(mask=custom_mask_owning(blocked))


def toggle_blocked(session: Session, i: int, j: int) -> Session:
    """Flip cell (query ``i``, key ``j``) of the mask; any mask becomes a custom one."""
    i = _token_index(session, i, "mask.blocked")
    j = _key_index(session, j, "mask.blocked")
    blocked = _mask_matrix(session)
    blocked[i, j] = not blocked[i, j]
    return session.replace(mask=custom_mask_owning(blocked))


def _key_index(session: Session, j: int, where: str) -> int:
    """A key position: a source position in cross-attention, else a token position."""
    if session.source is None:
        return _token_index(session, j, where)
    top = session.source.n - 1
    if isinstance(j, bool) or not isinstance(j, (int, np.integer)) or not 0 <= j <= top:
        raise SessionError(f"source position {j!r} is outside 0..{top}", where)
    return int(j)


def _mask_matrix(session: Session) -> np.ndarray:
    """A new, writable copy of the session's mask as a matrix (``Mask.matrix`` makes a new one)."""
    return session.mask.matrix(session.n, None if session.source is None else session.source.n)
