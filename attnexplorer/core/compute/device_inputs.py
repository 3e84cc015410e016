"""The session's arrays on the compute device, and what the engine knows about them up front.

The engine runs on every edit, so what does not change between edits is done once here:

- device copies of session arrays, reused while the array lives (session arrays are immutable
  and ``session.replace`` shares the ones an edit does not touch, so typing into W_q converts
  only W_q again);
- the projection weights side by side, so that one matrix product makes Q, K and V of all
  heads;
- a bound on every intermediate's size, from which the engine can tell, without looking at
  the result, that nothing can have overflowed.

torch is imported lazily, as in the engine.
"""

from __future__ import annotations

import math
import threading
import weakref
from collections import OrderedDict

import numpy as np

from ..kernel.attention import join_projections, split_projections  # noqa: F401 (split_projections: re-exported)
from .projection_reuse import note_patched
from ..inputs.session import Session
from ..inputs.session_arrays import derived_from

# Keyed by the arrays' ids (plus device and dtype); weak references prove that the ids still
# name the same arrays, so a recycled id never reaches a stale tensor.
_TENSOR_CACHE: OrderedDict = OrderedDict()
_TENSOR_CACHE_SIZE = 16
_BOUNDS: OrderedDict = OrderedDict()
_BOUNDS_SIZE = 32


def _torch():
    import torch

    return torch


def cached(cache: OrderedDict, size: int, arrays: tuple, key: tuple, build):
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
            # Least recently used goes first: the bounds of W_k and W_v, made once and read
            # on every edit of W_q, must not age out behind the entries each edit adds.
            cache.move_to_end(key)
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
    return cached(_TENSOR_CACHE, _TENSOR_CACHE_SIZE, (array,), (id(array), dev, tdtype),
                   lambda: _torch().tensor(array, dtype=tdtype, device=dev))


def device_flags(array: np.ndarray, dev):
    """The boolean ``array`` (a mask, the blocked rows) as a tensor on ``dev``, cached as
    ``device_tensor`` caches (the engine's masks are kept read-only arrays)."""
    return cached(_TENSOR_CACHE, _TENSOR_CACHE_SIZE, (array,), (id(array), dev, "flags"),
                  lambda: _torch().tensor(array, device=dev))


def projection_weights(session: Session, tdtype, dev, reading: bool = False):
    """W_q, W_k and W_v of every head side by side as one (d, H·d_k + H·d_k + H·d_v) matrix.

    ``x @ joined`` then makes every projection of every head in one plain matrix product: at
    teaching sizes a matmul costs mostly its fixed dispatch, and one 2-D product is also
    cheaper than a batched one. Rebuilt only when one of the three arrays is replaced.

    ``reading=True``: the caller is about to make products from it and calls ``done_reading``
    when they are made; until then no edit writes into it (see ``_READERS``).
    """
    arrays = (session.w_query, session.w_key, session.w_value)

    def build():
        patched = _patched_projection(arrays, tdtype, dev)
        if patched is not None:
            return patched
        # The same layout function fitting uses on trainable weights, so both read one layout.
        torch = _torch()
        return join_projections(*(torch.tensor(w, dtype=tdtype, device=dev) for w in arrays))

    with _JOIN_LOCK:  # the window's worker and an export on the GUI thread may both get here
        joined = cached(_TENSOR_CACHE, _TENSOR_CACHE_SIZE, arrays, (*map(id, arrays), dev, tdtype, "qkv"), build)
        last = _LAST_JOINED.get((dev, tdtype))
        # A compute of an unchanged session finds its own entry there: new weak references
        # would say the same thing again.
        if last is None or last[1] is not joined or not _same(last[0], arrays):
            _LAST_JOINED[(dev, tdtype)] = (tuple(weakref.ref(a) for a in arrays), joined)
        if reading:
            key = id(joined)
            _READERS[key] = _READERS.get(key, 0) + 1
    return joined


def _same(refs: tuple, arrays: tuple) -> bool:
    """Whether the weak references ``refs`` name exactly ``arrays`` (W_q, W_k, W_v)."""
    return refs[0]() is arrays[0] and refs[1]() is arrays[1] and refs[2]() is arrays[2]


def done_reading(joined) -> None:
    """Say that the compute ``projection_weights`` gave ``joined`` to has made its products:
    from now on an edit may write into it in place again."""
    with _JOIN_LOCK:
        count = _READERS.get(id(joined), 0) - 1
        if count > 0:
            _READERS[id(joined)] = count
        else:
            _READERS.pop(id(joined), None)


# The joined tensor made last for each (device, dtype), with weak references to the arrays it
# holds: an edit made with ``session_arrays.with_values`` is written into it in place (a few cells)
# instead of converting and joining every weight again. Two computes may run at once (the
# window's worker and an export on the GUI thread), so a joined tensor is written in place
# only while no compute reads it: ``projection_weights`` counts its readers in ``_READERS``
# (id → count) and ``done_reading`` lets one go, both under ``_JOIN_LOCK``, the lock the
# patch itself holds; a tensor being read is left alone and the edit's weights are joined
# anew instead (what an edit of unrelated arrays costs anyway).
_LAST_JOINED: dict = {}
_READERS: dict = {}
_JOIN_LOCK = threading.Lock()


def _patched_projection(arrays: tuple, tdtype, dev):
    """The last joined tensor for (dev, tdtype) with the cells that ``arrays`` changed since
    written in place, or None when they are not such an edit of its arrays."""
    last = _LAST_JOINED.pop((dev, tdtype), None)
    if last is None:
        return None
    refs, joined = last
    if _READERS.get(id(joined)):
        return None  # another compute is reading it: writing into it would change its numbers
    # Where each array's columns start in the join: W_k and W_v may have fewer (K/V) heads.
    w_query, w_key, _ = arrays
    offsets = (0, w_query.shape[0] * w_query.shape[2], w_query.shape[0] * w_query.shape[2] + w_key.shape[0] * w_key.shape[2])
    patches = []
    for ref, new, offset in zip(refs, arrays, offsets):
        old = ref()
        if new is old:
            continue
        known = derived_from(new)
        if old is None or known is None or known[0] is not old or new.shape != old.shape:
            return None
        # (head, row, column) of each changed cell → (row, offset + head·k + column) in the join.
        flat = known[1]
        h, r, c = np.unravel_index(flat, new.shape)
        patches.append((r, offset + h * new.shape[2] + c, new.reshape(-1)[flat]))
    torch = _torch()
    # The old arrays' cache entry would now name a tensor that holds the new values.
    for key in [k for k, (_, value) in _TENSOR_CACHE.items() if value is joined]:
        del _TENSOR_CACHE[key]
    with torch.inference_mode():
        for rows, cols, values in patches:
            index = (torch.as_tensor(rows, device=dev), torch.as_tensor(cols, device=dev))
            joined.index_put_(index, torch.as_tensor(values, dtype=tdtype, device=dev))
    if patches:  # the products made from it are now out of date in these columns
        note_patched(joined, np.concatenate([cols for _, cols, _ in patches]))
    return joined


def max_abs(a: np.ndarray) -> float:
    """max |a|, or for an edit of an array whose bound is known, an upper bound on it made from
    that bound and the changed cells alone (cannot_overflow needs only an upper bound)."""
    def build():
        known = derived_from(a)
        if known is not None:
            base, flat = known
            hit = _BOUNDS.get((id(base), "max"))
            if hit is not None and hit[0][0]() is base:
                return max(hit[1], float(np.abs(a.reshape(-1)[flat]).max(initial=0.0)))
        return _largest_magnitude(a)

    return cached(_BOUNDS, _BOUNDS_SIZE, (a,), (id(a), "max"), build)


def _largest_magnitude(a: np.ndarray) -> float:
    """max |a| without a temporary the size of ``a`` (32 MB for 16 heads of 512 × 512)."""
    if a.size == 0:
        return 0.0
    return max(float(a.max()), -float(a.min()), 0.0)


def max_row_sum(a: np.ndarray) -> float:
    """The largest sum of absolute values along a row: bounds |x·w| by it times max |w|."""
    return cached(_BOUNDS, _BOUNDS_SIZE, (a,), (id(a), "rows"),
                   lambda: float(np.abs(a).sum(axis=-1).max(initial=0.0)))


def _largest_intermediate(session: Session, factor: float) -> float:
    """An upper bound on |every number| the engine makes from ``session`` (see cannot_overflow)."""
    r = max_row_sum(session.embeddings)
    q = r * max_abs(session.w_query)
    k = r * max_abs(session.w_key)
    v = r * max_abs(session.w_value)
    score = session.d_k * q * k
    # The factor itself is a number in the dtype: 1/τ for a tiny τ overflows float32 even when
    # every score is 0, and 0 × inf is NaN.
    bound = max(q, k, v, score, score * factor, factor)
    if session.w_out is not None:
        bound = max(bound, session.heads * session.d_v * v * max_abs(session.w_out))
    return bound


def cannot_overflow(session: Session, factor: float, largest: float, eps: float, stage_bound=None) -> bool:
    """Whether no intermediate can exceed ``largest``, the dtype's largest finite number
    (``eps`` is its machine epsilon).

    From the inputs alone: |q| ≤ r·max|W_q| where r is the largest row sum of |X| (likewise k
    and v); |score| ≤ d_k·max|q|·max|k|; softmax of finite scores is finite and at most 1
    (torch subtracts each row's maximum), so |head output| ≤ max|v|; and |output| ≤
    H·d_v·max|v|·max|W_o|. Every partial sum inside a matmul is bounded by the same sums of
    absolute values, times the rounding a sum of m terms can add, at most a factor of
    exp(m·eps) (m the longest sum: d, d_k, n or H·d_v); twice that is the margin kept. For
    float32 that is about 2; for a half type and long sums it is large, and then the engine
    looks at the result instead. Per-array maxima are cached, and so is the bound for a whole
    set of arrays, so this costs one lookup when the inputs have not changed and a few
    multiplications when one has.
    """
    if stage_bound is not None:
        # A session with stages (stage_inputs.stage_bound): the per-array maxima are cached,
        # the few multiplications that combine them are not.
        bound = stage_bound(session, factor)
        longest = max(session.d, session.d_k, session.n, session.n_keys, session.heads * session.d_v)
        return math.isfinite(bound) and bound * 2.0 * math.exp(min(longest * eps, 700.0)) < largest
    arrays = (session.embeddings, session.w_query, session.w_key, session.w_value)
    if session.w_out is not None:
        arrays += (session.w_out,)
    bound, longest = cached(_BOUNDS, _BOUNDS_SIZE, arrays, (*map(id, arrays), factor), lambda: (
        _largest_intermediate(session, factor),
        max(session.d, session.d_k, session.n, session.heads * session.d_v)))
    return math.isfinite(bound) and bound * 2.0 * math.exp(min(longest * eps, 700.0)) < largest
