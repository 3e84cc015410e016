"""Every step of attention before the scores: X = norm(E + P), then Q, K and V of every head
(one matrix product for all of them), QK-norm and RoPE (``queries_keys_values``), and the
layout of the joined projections (``join_projections``, ``split_projections``).

``attention.attend`` starts with ``queries_keys_values``, and so does the streamed path for
long inputs (``core.compute.long``): one formula for X, Q, K and V, whichever path shows them.
torch is imported lazily, so that ``import attnexplorer.core`` stays light.
"""

from __future__ import annotations

import weakref

import numpy as np

from .norms import normalise, normalise_heads
from .position_encoding import rotate


def _torch():
    import torch

    return torch


def join_projections(w_query, w_key, w_value):
    """(H, d, d_k), (H, d, d_k), (H, d, d_v) torch stacks → the (d, ·) ``w_qkv`` layout.

    Differentiable, so fitting can join trainable W_q and W_k with a fixed W_v; the engine's
    cached device copy is built by this same function.
    """
    torch = _torch()
    # (H, d, k) → (d, H·k): head h's columns are h·k … h·k + k − 1.
    columns = [w.permute(1, 0, 2).reshape(w.shape[1], -1) for w in (w_query, w_key, w_value)]
    return torch.cat(columns, dim=1)


def split_projections(joined, heads: int, d_k: int, d_v: int, kv_heads: int | None = None):
    """Q, K and V as (H, n, ·) views of the joined (n, H·d_k + H_kv·d_k + H_kv·d_v) product
    (K and V have H_kv = ``kv_heads`` heads, by default H).

    ``joined`` is the torch tensor or its host numpy array (one host copy serves all three).
    """
    n = joined.shape[0]
    host = isinstance(joined, np.ndarray)
    kv_heads = heads if kv_heads is None else kv_heads
    if d_k == d_v and kv_heads == heads:  # the usual case, in as few operations as possible
        if host:
            qkv = joined.reshape(n, 3, heads, d_k).transpose(1, 2, 0, 3)
            return qkv[0], qkv[1], qkv[2]
        if joined.is_inference():
            return _kept_split(joined, heads, d_k)
        return joined.view(n, 3, heads, d_k).permute(1, 2, 0, 3).unbind(0)
    hk = heads * d_k
    return (_per_head(joined[:, :hk], heads),) + split_key_value(joined[:, hk:], kv_heads, d_k)


# The views ``split_projections`` made last of an inference-mode product, by the product's id:
# the engine's product of an unchanged session is the same tensor on every compute
# (``projection_reuse``), and its three views cost as much as the product at teaching sizes.
# Products are never written in place and their views are only read, so the views of one
# product can be handed out again. Views made in inference mode do not hold their base
# tensor, so the weak reference's callback drops an entry when its product dies: the views
# never keep a product's memory alive longer than the product itself.
_SPLITS: dict = {}
_SPLITS_KEPT = 4


def _kept_split(joined, heads: int, d_k: int):
    key = id(joined)
    hit = _SPLITS.get(key)
    if hit is not None and hit[0]() is joined and hit[1] == (heads, d_k):
        return hit[2]
    n = joined.shape[0]
    views = joined.view(n, 3, heads, d_k).permute(1, 2, 0, 3).unbind(0)
    if len(_SPLITS) >= _SPLITS_KEPT:
        _SPLITS.clear()
    _SPLITS[key] = (weakref.ref(joined, _forget_split(key)), (heads, d_k), views)
    return views


def _forget_split(key: int):
    def callback(ref):
        hit = _SPLITS.get(key)
        if hit is not None and hit[0] is ref:
            del _SPLITS[key]

    return callback


def split_key_value(joined, kv_heads: int, d_k: int):
    """K and V as (H_kv, n, ·) views of the joined (n, H_kv·d_k + H_kv·d_v) product."""
    hk = kv_heads * d_k
    return _per_head(joined[:, :hk], kv_heads), _per_head(joined[:, hk:], kv_heads)


def _per_head(columns, heads: int):
    return columns.reshape(columns.shape[0], heads, -1).swapaxes(0, 1)


def linear(x, w, b=None):
    """x·w (+ b): one matrix product, the bias fused into it when there is one."""
    return x @ w if b is None else _torch().addmm(b, x, w)


def _normalise(x, norm):
    kind, weight, bias, eps = norm
    return normalise(x, kind, weight, bias, eps, cannot_overflow=True)


def queries_keys_values(inputs) -> dict:
    """Every step before the scores: X = norm(E + P), then Q, K and V of every head (QK-norm
    and RoPE applied), as a dict of tensors (see ``attend``'s first entries; ``Q_unnormed``/
    ``K_unnormed`` are before QK-norm, ``Q_unrotated``/``K_unrotated`` after it and before RoPE).

    ``attend`` starts with it, and so does the streamed path for long inputs
    (``core.compute.long``), which then makes the scores a block of rows at a time: one formula for
    X, Q, K and V, whichever path shows them.
    """
    x = inputs.x
    if inputs.positions_add is not None:
        x = x + inputs.positions_add
    if inputs.norm is not None:
        x = _normalise(x, inputs.norm)
    heads, d_k = inputs.heads, inputs.d_k
    kv_heads = heads if inputs.kv_heads is None else inputs.kv_heads
    product = linear if inputs.linear is None else inputs.linear
    if inputs.source_x is None:
        # X·[W_q | W_k | W_v] (+ b): every projection of every head in one matrix product.
        joined = product(x, inputs.w_qkv, inputs.b_qkv)
        joined_kv = None
        q, k, v = split_projections(joined, heads, d_k, inputs.d_v, kv_heads)
    else:
        # Cross-attention: queries from X, keys and values from the source's rows.
        hk = heads * d_k
        b = inputs.b_qkv
        joined = product(x, inputs.w_qkv, None if b is None else b[:hk])
        joined_kv = product(inputs.source_x, inputs.w_kv, None if b is None else b[hk:])
        q = _per_head(joined, heads)
        k, v = split_key_value(joined_kv, kv_heads, d_k)
    q_unnormed = k_unnormed = None
    if inputs.qk_norm is not None:
        q_unnormed, k_unnormed = q, k
        kind, over, eps, q_weight, q_bias, k_weight, k_bias = inputs.qk_norm
        q = normalise_heads(q, kind, q_weight, q_bias, eps, over, cannot_overflow=True)
        k = normalise_heads(k, kind, k_weight, k_bias, eps, over, cannot_overflow=True)
    q_unrotated = k_unrotated = None
    if inputs.rope is not None:
        q_unrotated, k_unrotated = q, k
        q, k = rotate(q, inputs.rope), rotate(k, inputs.rope)
    return {"joined": joined, "joined_kv": joined_kv, "X": x, "Q": q, "K": k, "V": v,
            "Q_unrotated": q_unrotated, "K_unrotated": k_unrotated, "Q_unnormed": q_unnormed, "K_unnormed": k_unnormed}
