"""Edits of a real head's stages (core/stages.py), Qt-free: each returns a new, validated session.

The companion of ``core/edits.py`` for what version 2 sessions add: biases, the norm,
positions, grouped-query K/V heads and the output projection. The
window's stage tables and controls call these through ``ui/user_actions``; notebooks and
tests can call them directly. A bad edit raises ``SessionError`` naming what and where, and
changes nothing.

Tables (``b_q``, ``norm.weight``, ``positions.table``, ``source.embeddings``, …) are read and
written in ``core/stage_tables.py``; the source sequence's edits are in ``core/source_edits.py``.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from . import edits
from .errors import SessionError
from .session import MAX_DIM, MAX_TOKENS, Session
from .stage_tables import BIASES, bias_width
from .stages import Norm, Positions, sinusoidal_table
from .display import counted

POSITION_KINDS = ("none", "sinusoidal", "learned", "rope", "alibi")
NORM_KINDS = ("none", "layer", "rms")
# Defaults as in the models that use them: nn.LayerNorm's eps, Llama's RMSNorm eps.
DEFAULT_EPS = {"layer": 1e-5, "rms": 1e-6}


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
    return session.replace(**{BIASES[table]: np.zeros((heads, bias_width(session, table)))})


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
        raise SessionError(f"{counted(rows, 'row')} are fewer than the {session.n} tokens (one row per position)",
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
                           b_key=pick(session.b_key), b_value=pick(session.b_value),
                           **edits.fitted_head_stages(session, h, g, session.d_k, kv_take=take))


def sharing_heads(session: Session, head: int) -> tuple[int, ...]:
    """The query heads that use the same K/V head as query head ``head`` (itself included)."""
    kv = session.kv_head_of
    return tuple(int(h) for h in np.flatnonzero(kv == kv[head]))


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
