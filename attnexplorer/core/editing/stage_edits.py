"""Edits of a real head's stages (core/inputs/stages.py), Qt-free: each returns a new, validated session.

The companion of ``core/editing/edits.py`` for what version 2 sessions add: biases, the norm,
positions, grouped-query K/V heads and the output projection. The
window's stage tables and controls call these through ``ui/user_actions``; notebooks and
tests can call them directly. A bad edit raises ``SessionError`` naming what and where, and
changes nothing.

Tables (``b_q``, ``norm.weight``, ``positions.table``, ``source.embeddings``, …) are read and
written in ``core/editing/stage_tables.py``; the source sequence's edits are in ``core/editing/source_edits.py``.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from . import edits
from ..errors import SessionError
from ..inputs.session import MAX_DIM, MAX_TOKENS, Session
from .stage_tables import BIASES, bias_width, qk_norm_width  # noqa: F401 (qk_norm_width: re-exported)
from ..inputs.stages import Norm, Positions, QKNorm, RopeScaling, sinusoidal_table
from ..numbers.display import counted

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

def _switched_norm(old, kind: str, kinds: tuple, where: str, fresh, switched):
    """A norm (the input norm, QK-norm) switched to ``kind``: None for "none", ``fresh(eps)``
    when there was none, ``old`` itself for its own kind, else ``switched(eps)`` with eps kept
    unless it was the old kind's default (then the new kind's default)."""
    if kind not in kinds:
        raise SessionError(f"unknown kind {kind!r}, expected one of {', '.join(kinds)}", where)
    if kind == "none":
        return None
    if old is None:
        return fresh(DEFAULT_EPS[kind])
    if old.kind == kind:
        return old
    return switched(DEFAULT_EPS[kind] if old.eps == DEFAULT_EPS[old.kind] else old.eps)


def norm_of_kind(session: Session, kind: str) -> Norm | None:
    """The norm a switch to ``kind`` ("none", "layer", "rms") gives: the weight is kept, a
    LayerNorm's bias too, and eps is kept unless it was the other kind's default."""
    old = session.norm
    return _switched_norm(old, kind, NORM_KINDS, "norm.kind", lambda eps: Norm(kind, eps=eps),
                          lambda eps: Norm(kind, weight=old.weight, bias=old.bias if kind == "layer" else None, eps=eps))


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


# -- version 3: QK-norm, soft-capping, sinks, RoPE scaling --------------------------------------

QK_NORM_KINDS = ("none", "rms", "layer")
SCALING_KINDS = ("none", "linear", "llama3", "yarn")


def qk_norm_of_kind(session: Session, kind: str) -> QKNorm | None:
    """The QK-norm a switch to ``kind`` ("none", "rms", "layer") gives: the weights, the
    reach ("head" or "all") and eps kept; a new one normalises each head, weights ones."""
    old = session.qk_norm
    keep_bias = kind == "layer"
    return _switched_norm(old, kind, QK_NORM_KINDS, "qk_norm.kind", lambda eps: QKNorm(kind, eps=eps),
                          lambda eps: QKNorm(kind, old.over, eps, old.query_weight, old.key_weight,
                                             old.query_bias if keep_bias else None, old.key_bias if keep_bias else None))


def qk_norm_over(session: Session, over: str) -> QKNorm:
    """The QK-norm normalising over ``over`` ("head" or "all"): weights that no longer fit
    (a shared d_k weight over the whole projection) go back to ones."""
    old = session.qk_norm
    if old is None:
        raise SessionError("there is no QK-norm; choose RMSNorm or LayerNorm first", "qk_norm.over")
    if over not in ("head", "all"):
        raise SessionError(f"is {over!r}, expected \"head\" or \"all\"", "qk_norm.over")
    fits = {"query": session.heads * session.d_k, "key": session.kv_heads * session.d_k}

    def kept(v, side):
        return v if v is None or over == "head" or v.shape[0] == fits[side] else None

    return replace(old, over=over, query_weight=kept(old.query_weight, "query"), key_weight=kept(old.key_weight, "key"),
                   query_bias=kept(old.query_bias, "query"), key_bias=kept(old.key_bias, "key"))


def per_head_qk_weights(session: Session, on: bool) -> QKNorm:
    """QK-norm over each head with one weight per head (``on``: each head starts from the
    shared weight) or one shared by every head (each takes head 0's)."""
    qk = session.qk_norm
    if qk is None or qk.over != "head":
        raise SessionError("only a QK-norm over each head can share its weight", "qk_norm.query_weight")
    d_k = session.d_k

    def change(v, count, fill):
        if on:
            base = np.full(d_k, fill) if v is None else v[:d_k]
            return np.tile(base, count) if v is None or v.shape[0] == d_k else v
        return None if v is None else v[:d_k]

    return replace(qk, query_weight=change(qk.query_weight, session.heads, 1.0),
                   key_weight=change(qk.key_weight, session.kv_heads, 1.0),
                   query_bias=None if qk.query_bias is None else change(qk.query_bias, session.heads, 0.0),
                   key_bias=None if qk.key_bias is None else change(qk.key_bias, session.kv_heads, 0.0))


def set_qk_norm(session: Session, qk_norm: QKNorm | None) -> Session:
    if qk_norm is not None and not isinstance(qk_norm, QKNorm):
        raise SessionError("must be a QKNorm or None", "qk_norm")
    return session.replace(qk_norm=qk_norm)


def set_softcap(session: Session, cap: float | None) -> Session:
    """Soft-capping of the scaled scores at ``cap`` (None: none)."""
    return session.replace(softcap=cap)


def set_sinks(session: Session, on: bool) -> Session:
    """Attention sinks on (one logit per head, starting at 0) or off."""
    if on:
        return session if session.sinks is not None else session.replace(sinks=np.zeros(session.heads))
    return session.replace(sinks=None)


def scaling_of_kind(positions: Positions | None, kind: str) -> Positions:
    """RoPE ``positions`` with a scaling of ``kind`` ("none", "linear", "llama3", "yarn"),
    starting from the values of Llama 3.1 (factor 8, low 1, high 4, original 8192) or YaRN's
    defaults (factor 4, β 32 and 1); the factor carries over between kinds."""
    if positions is None or positions.kind != "rope":
        raise SessionError("only RoPE has frequencies to scale; choose RoPE first", "positions.scaling")
    if kind not in SCALING_KINDS:
        raise SessionError(f"unknown kind {kind!r}, expected one of {', '.join(SCALING_KINDS)}", "positions.scaling.kind")
    old = positions.scaling
    if kind == "none":
        return replace(positions, scaling=None)
    if old is not None and old.kind == kind:
        return positions
    factor = old.factor if old is not None else {"linear": 2.0, "llama3": 8.0, "yarn": 4.0}[kind]
    original = old.original_max_position_embeddings if old is not None else {"llama3": 8192, "yarn": 4096}.get(kind, 8192)
    return replace(positions, scaling=RopeScaling(kind, factor=factor, original_max_position_embeddings=original))


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
_FIELD_NAMES = {"base": "base", "theta": "θ", "dims": "dims", "layout": "layout", "offset": "offset",
                "scaling": "scaling", "angles": "angles"}


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
        if changed[0] == "scaling":
            return f"{name} scaling: {'none' if value is None else value.describe()}"
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
