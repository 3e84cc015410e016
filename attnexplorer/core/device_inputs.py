"""The session's arrays on the compute device, and what the engine knows about them up front.

The engine runs on every edit, so what does not change between edits is done once here:

- device copies of session arrays, reused while the array lives (session arrays are immutable
  and ``session.replace`` shares the ones an edit does not touch, so typing into W_q converts
  only W_q again);
- the projection weights stacked so that one matmul makes Q, K and V of all heads;
- a bound on every intermediate's size, from which the engine can tell, without looking at
  the result, that nothing can have overflowed.

torch is imported lazily, as in the engine.
"""

from __future__ import annotations

import math
import weakref
from collections import OrderedDict

import numpy as np

from .session import Session

# Keyed by the arrays' ids (plus device and dtype); weak references prove that the ids still
# name the same arrays, so a recycled id never reaches a stale tensor.
_TENSOR_CACHE: OrderedDict = OrderedDict()
_TENSOR_CACHE_SIZE = 16
_BOUNDS: OrderedDict = OrderedDict()
_BOUNDS_SIZE = 32


def _torch():
    import torch

    return torch


def _cached(cache: OrderedDict, size: int, arrays: tuple, key: tuple, build):
    """``build()`` for ``arrays``, made once while they live and stay read-only.

    ``key`` starts with the arrays' ids. This runs several times per compute, on every edit,
    so it is written for speed: one dict lookup and a plain loop over the weak references.
    """
    hit = cache.get(key)
    if hit is not None:
        refs, value = hit
        for ref, a in zip(refs, arrays):
            if ref() is not a:
                break
        else:
            return value
    value = build()
    for a in arrays:
        if a.flags.writeable:  # only immutable arrays can be trusted not to change
            return value
    cache[key] = (tuple(weakref.ref(a) for a in arrays), value)
    if len(cache) > size:
        cache.popitem(last=False)
    return value


def device_tensor(array: np.ndarray, tdtype, dev):
    """``array`` as a tensor on ``dev`` in ``tdtype`` (a copy: session arrays stay read-only)."""
    return _cached(_TENSOR_CACHE, _TENSOR_CACHE_SIZE, (array,), (id(array), dev, tdtype),
                   lambda: _torch().tensor(array, dtype=tdtype, device=dev))


def stacked_weights(arrays: tuple, tdtype, dev):
    """The (H, d, k) weight arrays stacked along the head axis: (len(arrays)·H, d, k).

    ``x @ stacked`` then makes every projection of every head in one batched matmul, and each
    projection's block of the product is contiguous. At teaching sizes a matmul costs mostly
    its fixed dispatch, so one is cheaper than three. Rebuilt only when one array is replaced.
    """
    return _cached(_TENSOR_CACHE, _TENSOR_CACHE_SIZE, arrays, (*map(id, arrays), dev, tdtype),
                   lambda: _torch().tensor(np.concatenate(arrays, axis=0), dtype=tdtype, device=dev))


def projections(session: Session, x, tdtype, dev):
    """``(joined, q, k, v)``: Q, K and V of every head as contiguous (H, n, ·) tensors.

    ``joined`` is the (P, H, n, d_k) tensor q and k (and v, when d_v = d_k) are views of, so
    that one host copy serves them all; v is its own tensor when its width differs.
    """
    heads, n, d_k = session.heads, session.n, session.d_k
    if session.d_v == d_k:
        w = stacked_weights((session.w_query, session.w_key, session.w_value), tdtype, dev)
        joined = (x @ w).view(3, heads, n, d_k)
        q, k, v = joined.unbind(0)
    else:
        w = stacked_weights((session.w_query, session.w_key), tdtype, dev)
        joined = (x @ w).view(2, heads, n, d_k)
        q, k = joined.unbind(0)
        v = x @ device_tensor(session.w_value, tdtype, dev)
    return joined, q, k, v


def _max_abs(a: np.ndarray) -> float:
    return _cached(_BOUNDS, _BOUNDS_SIZE, (a,), (id(a), "max"), lambda: float(np.abs(a).max(initial=0.0)))


def _max_row_sum(a: np.ndarray) -> float:
    """The largest sum of absolute values along a row: bounds |x·w| by it times max |w|."""
    return _cached(_BOUNDS, _BOUNDS_SIZE, (a,), (id(a), "rows"),
                   lambda: float(np.abs(a).sum(axis=-1).max(initial=0.0)))


def _largest_intermediate(session: Session, factor: float) -> float:
    """An upper bound on |every number| the engine makes from ``session`` (see cannot_overflow)."""
    r = _max_row_sum(session.embeddings)
    q = r * _max_abs(session.w_query)
    k = r * _max_abs(session.w_key)
    v = r * _max_abs(session.w_value)
    score = session.d_k * q * k
    bound = max(q, k, v, score, score * factor)
    if session.w_out is not None:
        bound = max(bound, session.heads * session.d_v * v * _max_abs(session.w_out))
    return bound


def cannot_overflow(session: Session, factor: float, largest: float) -> bool:
    """Whether no intermediate can exceed ``largest`` (the dtype's largest finite number).

    From the inputs alone: |q| ≤ r·max|W_q| where r is the largest row sum of |X| (likewise k
    and v); |score| ≤ d_k·max|q|·max|k|; softmax of finite scores is finite and at most 1
    (torch subtracts each row's maximum), so |head output| ≤ max|v|; and |output| ≤
    H·d_v·max|v|·max|W_o|. Every partial sum inside a matmul is bounded by the same sums of
    absolute values. A factor of 8 covers rounding. Per-array maxima are cached, and so is the
    bound for a whole set of arrays, so this costs one lookup when the inputs have not changed
    and a few multiplications when one has; when it says False the engine looks at the result.
    """
    arrays = (session.embeddings, session.w_query, session.w_key, session.w_value)
    if session.w_out is not None:
        arrays += (session.w_out,)
    bound = _cached(_BOUNDS, _BOUNDS_SIZE, arrays, (*map(id, arrays), factor),
                    lambda: _largest_intermediate(session, factor))
    return math.isfinite(bound) and bound * 8.0 < largest
