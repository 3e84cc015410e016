"""The optional stages of a session as device tensors for ``attention.attend``.

``stage_tensors(session, tdtype, dev)`` returns the keyword arguments of ``AttentionInputs``
that the session's stages need (biases, norm, positions, grouped K/V heads, a source) and
nothing for a stage that is absent, so a plain session costs a few ``is None`` checks. Every
tensor is cached while the session arrays (or the stage values, which are immutable) it came
from live, as the projection weights are, so an edit elsewhere converts nothing again.

Also the host side of the stages: the arrays a result carries that need no device (P in
float64 for the explanations, the ALiBi slopes) and an overflow bound that accounts for them.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from collections import OrderedDict

from ..kernel.attention import alibi_bias, rope_cos_sin
from .device_inputs import cached, device_tensor, max_abs, max_row_sum
from ..inputs.session import Session
from ..inputs.stages import sinusoidal_table

# Arrays keyed by id with weak references (as device_inputs does); stage values and sizes by
# a key that holds the stage itself, so its id cannot be reused while the entry lives.
_ARRAYS: OrderedDict = OrderedDict()
_STAGES: OrderedDict = OrderedDict()
_SIZE = 16


def _torch():
    import torch

    return torch


def _columns(w: np.ndarray) -> np.ndarray:
    """(H, rows, k) → (rows, H·k): head h's columns are h·k … h·k + k − 1."""
    return np.moveaxis(w, 0, 1).reshape(w.shape[1], -1)


def _kept(stage, key: tuple, build):
    """``build()`` for the immutable ``stage`` value (a Norm, a Positions) and ``key``, cached.

    The entry holds ``stage`` itself, so its id, part of the key, cannot name another value
    while the entry lives.
    """
    full = (id(stage), *key)
    hit = _STAGES.get(full)
    if hit is not None and hit[0] is stage:
        return hit[1]
    value = build()
    _STAGES[full] = (stage, value)
    if len(_STAGES) > _SIZE:
        _STAGES.popitem(last=False)
    return value


@functools.lru_cache(maxsize=8)
def absolute_positions(n: int, d: int, base: float) -> np.ndarray:
    """The sinusoidal table for n positions, read-only float64 (shared by results)."""
    table = sinusoidal_table(n, d, base)
    table.flags.writeable = False
    return table


def positions_array(session: Session) -> np.ndarray | None:
    """P (n, d) in float64, or None without absolute positions."""
    p = session.positions
    if p is None or not p.absolute:
        return None
    if p.kind == "sinusoidal":
        return absolute_positions(session.n, session.d, p.base)
    return p.table[: session.n]  # a view of a read-only table is read-only


def stage_tensors(session: Session, tdtype, dev, dense_bias: bool = True) -> dict:
    """``AttentionInputs`` keyword arguments for the session's stages (empty when none).

    ``dense_bias=False`` (the streamed path for long inputs) gives ALiBi's slopes as
    ``alibi_slopes`` instead of the H × n × n ``position_bias`` (``attention.alibi_bias`` makes
    any block of it).
    """
    torch = _torch()
    out: dict = {}

    def tensor(a):
        return torch.tensor(a, dtype=tdtype, device=dev)

    if session.kv_heads != session.heads:
        out["kv_heads"] = session.kv_heads
    if session.source is not None:
        arrays = (session.w_key, session.w_value)
        out["source_x"] = device_tensor(session.source.embeddings, tdtype, dev)
        out["w_q"] = cached(_ARRAYS, _SIZE, (session.w_query,), (id(session.w_query), dev, tdtype, "q"),
                             lambda: tensor(_columns(session.w_query)))
        out["w_kv"] = cached(_ARRAYS, _SIZE, arrays, (*map(id, arrays), dev, tdtype, "kv"),
                              lambda: tensor(np.concatenate([_columns(w) for w in arrays], axis=1)))
    biases = (session.b_query, session.b_key, session.b_value)
    if any(b is not None for b in biases):
        sizes = (session.heads * session.d_k, session.kv_heads * session.d_k, session.kv_heads * session.d_v)
        present = tuple(b for b in biases if b is not None)
        key = (*(None if b is None else id(b) for b in biases), sizes, dev, tdtype, "b_qkv")
        out["b_qkv"] = cached(_ARRAYS, _SIZE, present, key, lambda: tensor(np.concatenate(
            [np.zeros(size) if b is None else b.reshape(-1) for b, size in zip(biases, sizes)])))
    if session.b_out is not None:
        out["b_out"] = device_tensor(session.b_out, tdtype, dev)
    norm = session.norm
    if norm is not None:
        out["norm"] = _kept(norm, (dev, tdtype), lambda: (
            norm.kind, None if norm.weight is None else tensor(norm.weight),
            None if norm.bias is None else tensor(norm.bias), norm.eps))
    qk = session.qk_norm
    if qk is not None:
        def maybe(a):
            return None if a is None else tensor(a)

        out["qk_norm"] = _kept(qk, (dev, tdtype), lambda: (
            qk.kind, qk.over, qk.eps, maybe(qk.query_weight), maybe(qk.query_bias), maybe(qk.key_weight),
            maybe(qk.key_bias)))
    if session.softcap is not None:
        out["softcap"] = session.softcap
    if session.sinks is not None:
        out["sinks"] = device_tensor(session.sinks, tdtype, dev)
    p = session.positions
    if p is None:
        return out
    if p.absolute:
        out["positions_add"] = _kept(p, (session.n, session.d, dev, tdtype), lambda: tensor(positions_array(session)))
    elif p.kind == "rope":
        dims = p.rope_dims(session.d_k)

        def rope():
            # Angles in float64 on the host (a position times a frequency must not round
            # before its cosine is taken, even at large offsets), unless the session asks for
            # a model's float32 angles.
            cos, sin = rope_cos_sin(session.n, dims, p.theta, tdtype, dev, offset=p.offset,
                                    float32_angles=p.angles == "float32", scaling=p.scaling)
            return cos, sin, dims, p.layout

        out["rope"] = _kept(p, (session.n, dims, dev, tdtype), rope)
    elif not dense_bias:
        out["alibi_slopes"] = p.slopes_for(session.heads)
    else:
        slopes = p.slopes_for(session.heads)
        out["position_bias"] = _kept(p, (session.n, session.heads, dev, tdtype),
                                     lambda: alibi_tensor(slopes, session.n, tdtype, dev))
    return out


def alibi_tensor(slopes: np.ndarray, n: int, tdtype, dev):
    """position_bias[h, i, j] = −slope_h·|i − j| made on the device (H, n, n): at 4,096 tokens
    a host copy would be larger than everything else the engine sends."""
    return alibi_bias(slopes, slice(0, n), slice(0, n), tdtype, dev)


def _largest_input_row(session: Session) -> float:
    """An upper bound on the absolute row sum of X, and on every number made on the way to it."""
    r = max_row_sum(session.embeddings)
    table = positions_array(session)
    if table is not None:
        r += float(np.abs(table).sum(axis=-1).max(initial=0.0))
    if session.norm is None:
        return r
    d = session.d
    # Each normalised entry is at most √d in size (LayerNorm: a deviation over the biased
    # standard deviation; RMSNorm: an entry over the root mean square), times the weight.
    w = session.norm.weight_or_ones(d)
    b = session.norm.bias_or_zeros(d)
    return max(r * r, d * (math.sqrt(d) * float(np.abs(w).max()) + float(np.abs(b).max())))


def stage_bound(session: Session, factor: float) -> float:
    """An upper bound on |every number| the engine makes from a session with stages."""
    r = _largest_input_row(session)
    r_kv = r if session.source is None else max_row_sum(session.source.embeddings)

    def most(b):
        return 0.0 if b is None else max_abs(b)

    q = r * max_abs(session.w_query) + most(session.b_query)
    k = r_kv * max_abs(session.w_key) + most(session.b_key)
    v = r_kv * max_abs(session.w_value) + most(session.b_value)
    qk = session.qk_norm
    if qk is not None:
        # A normalised entry is at most √(row width) in size, times the weight, plus the bias.
        def normed(weight, bias, heads):
            width = session.d_k if qk.over == "head" else heads * session.d_k
            w = 1.0 if weight is None else max_abs(weight)
            return math.sqrt(width) * w + most(bias)

        q = max(q, normed(qk.query_weight, qk.query_bias, session.heads))
        k = max(k, normed(qk.key_weight, qk.key_bias, session.kv_heads))
    p = session.positions
    if p is not None and p.kind == "rope":
        turn = 2.0 if p.scaling is None else 2.0 * max(1.0, p.scaling.yarn_attention_factor)
        q, k = turn * q, turn * k  # a turned component is (a·cos − b·sin) × YaRN's attention factor
    score = session.d_k * q * k
    bias = 0.0
    if p is not None and p.kind == "alibi":
        bias = float(np.abs(p.slopes_for(session.heads)).max()) * session.n
    bound = max(q, k, v, score, score * factor + bias)
    if session.w_out is not None:
        bound = max(bound, session.heads * session.d_v * v * max_abs(session.w_out) + most(session.b_out))
    return bound
