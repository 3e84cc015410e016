"""The arrays a session holds: checked once, frozen, and changed by copies that remember where.

``frozen_matrix`` makes the read-only float64 copy a ``Session`` stores (and recognises one it
made, so ``replace`` does not copy the fields it hands back unchanged). ``with_values`` is the
one copy an edit makes; ``derived_from`` tells the engine's device copies which positions an
edit changed, so they patch those instead of uploading the whole array again.
"""

from __future__ import annotations

import collections.abc
import weakref

import numpy as np

from .errors import SessionError

# Arrays this module has checked and frozen, by id. ``session.replace(w_query=...)`` hands the
# other fields back in unchanged; recognising them skips a copy and a finite check per array
# per edit, and keeps their identity, which lets the engine reuse their device copies.
_FROZEN: "weakref.WeakValueDictionary[int, np.ndarray]" = weakref.WeakValueDictionary()


def frozen_matrix(value, where: str, ndim: int) -> np.ndarray:
    """A read-only float64 copy of ``value``, or SessionError naming ``where``.

    An array that is already the result of this function is returned as it is (after the
    shape check): it cannot have changed since.
    """
    if _FROZEN.get(id(value)) is value:
        if value.ndim != ndim:
            raise SessionError(f"must be {ndim}-dimensional, got shape {value.shape}", where)
        return value
    try:
        raw = np.asarray(value)
    except (TypeError, ValueError):  # ragged nesting
        raise SessionError(f"must be a {ndim}-dimensional array of numbers with rows of equal length", where) from None
    # Strings like "1.5" would convert silently and booleans are not weights; refuse both.
    if raw.dtype.kind not in "iuf":
        raise SessionError("must hold numbers only", where)
    a = np.array(raw, dtype=np.float64)  # always a copy: the caller's array stays theirs
    if a.ndim != ndim:
        raise SessionError(f"must be {ndim}-dimensional, got shape {a.shape}", where)
    if not np.isfinite(a).all():
        idx = tuple(int(k) for k in np.argwhere(~np.isfinite(a))[0])
        raise SessionError(f"holds a non-finite number at {list(idx)}", where)
    a.flags.writeable = False
    _FROZEN[id(a)] = a
    return a


# For arrays made by ``with_values``: id → (weak reference to the array it was made from, the
# flat positions that differ, weak reference to the new array). The engine's device copies
# use it to patch only those positions instead of converting and uploading a whole array
# again. Only the newest few are kept: an edit is patched in right after it is made.
_DERIVED: "collections.OrderedDict[int, tuple]" = collections.OrderedDict()
_DERIVED_SIZE = 64


def _flat_positions(shape: tuple[int, ...], index: tuple) -> np.ndarray:
    """The flat positions ``index`` (ints and slices, one per axis) selects, in O(selected)."""
    index = index + (slice(None),) * (len(shape) - len(index))
    axes = [np.arange(*i.indices(n)) if isinstance(i, slice) else np.array([int(i) % n]) for i, n in zip(index, shape)]
    grids = np.meshgrid(*axes, indexing="ij")
    return np.ravel_multi_index(tuple(g.ravel() for g in grids), shape)


def with_values(base: np.ndarray, index: tuple, values) -> np.ndarray:
    """A frozen copy of ``base`` (an array of a session) with ``base[index] = values``, ready
    for ``Session``/``replace`` without another copy or finite check.

    ``index`` is a tuple of ints and slices; ``values`` must be finite (the caller checked
    them). This is the one copy an edit makes; the copy remembers which positions differ from
    ``base`` (``derived_from``).
    """
    return with_flat_values(base, _flat_positions(base.shape, tuple(index)), np.broadcast_to(values, _shape_of(base, index)).ravel())


def _shape_of(base: np.ndarray, index: tuple) -> tuple[int, ...]:
    return base[tuple(index)].shape


def with_flat_values(base: np.ndarray, flat: np.ndarray, values) -> np.ndarray:
    """``with_values`` by flat positions: ``base.ravel()[flat] = values`` in a frozen copy."""
    if _FROZEN.get(id(base)) is not base:
        raise SessionError("with_values needs an array of a session", "array")
    a = np.array(base)
    a.reshape(-1)[flat] = values
    a.flags.writeable = False
    _FROZEN[id(a)] = a
    _DERIVED[id(a)] = (weakref.ref(base), np.asarray(flat), weakref.ref(a))
    if len(_DERIVED) > _DERIVED_SIZE:
        _DERIVED.popitem(last=False)
    return a


def derived_from(a: np.ndarray):
    """``(base, flat positions)`` when ``a`` was made by ``with_values`` from ``base`` and
    both still live, else None: ``a`` equals ``base`` except at those positions."""
    hit = _DERIVED.get(id(a))
    if hit is None or hit[2]() is not a:
        return None
    base = hit[0]()
    return None if base is None else (base, hit[1])
