"""Which (query, key) cells a session's mask blocks, for the dense engine and the streamed path.

``core.inputs.mask`` defines a mask (``Mask``, a frozen value of the session); this module turns one
into the blocked cells the engines read: the whole boolean matrix, the fully blocked rows, or
a ``MaskMatrix`` that makes the cells a block at a time.

The dense engine needs the whole n × n_k mask (it masks every head's matrices at once). The
streamed path for long inputs (``core.compute.long``) never makes it: at 16,384 tokens it would be
268 MB of booleans. It reads the mask a block of rows at a time from its definition
(``Mask.block``: causal and window from the cell's indices, padding from the per-key list, a
custom mask as a view of the session's own matrix), and a long result carries ``MaskMatrix``,
which reads like that n × n_k array but makes only the cells asked for. The fully blocked
rows and "is anything blocked" are worked out from the definition too, without the matrix.
"""

from __future__ import annotations

import functools
from collections import OrderedDict

import numpy as np

from ..inputs.session import Session


@functools.lru_cache(maxsize=4)
def _unmasked(n: int, n_k: int) -> tuple[np.ndarray, np.ndarray]:
    """The read-only all-False mask and blocked-row flags for n queries, shared by results."""
    mask = np.zeros((n, n_k), dtype=bool)
    rows = np.zeros(n, dtype=bool)
    mask.flags.writeable = False
    rows.flags.writeable = False
    return mask, rows


def _source_n(session: Session) -> int | None:
    return None if session.source is None else session.source.n


def mask_and_blocked_rows(session: Session) -> tuple[np.ndarray, np.ndarray, bool]:
    """The dense engine's masks: the whole n × n_k mask (True = blocked), the fully blocked
    query rows, and whether anything is blocked at all. All read-only, and the same arrays
    for the same mask and sizes (so their device copies are made once too)."""
    if session.mask.kind == "none":
        mask, rows = _unmasked(session.n, session.n_keys)
        return mask, rows, False
    n, n_k = session.n, _source_n(session)
    if n * session.n_keys > _KEPT_CELLS:
        return _blocked_cells(session.mask, n, n_k)
    return _kept_blocked_cells(session.mask, n, n_k)


# Masks up to this many cells are kept: a Mask is an immutable value, and an edit of anything
# else hands the same Mask on, so the next compute finds its arrays (and their device copy)
# instead of making n × n_k cells again. A causal mask of 1,024 tokens is 1 MB.
_KEPT_CELLS = 1 << 20
_KEPT: OrderedDict = OrderedDict()
_KEPT_MASKS = 4


def _kept_blocked_cells(mask, n: int, n_k: int | None) -> tuple[np.ndarray, np.ndarray, bool]:
    # The entry holds the Mask itself, so its id, part of the key, names no other while kept.
    key = (id(mask), n, n_k)
    hit = _KEPT.get(key)
    if hit is not None and hit[0] is mask:
        return hit[1]
    value = _blocked_cells(mask, n, n_k)
    _KEPT[key] = (mask, value)
    if len(_KEPT) > _KEPT_MASKS:
        _KEPT.popitem(last=False)
    return value


def _blocked_cells(mask, n: int, n_k: int | None) -> tuple[np.ndarray, np.ndarray, bool]:
    matrix = mask.matrix(n, n_k)
    rows = matrix.all(axis=1)
    anything = bool(rows.any()) or bool(matrix.any())
    matrix.flags.writeable = False
    rows.flags.writeable = False
    return matrix, rows, anything


def blocked_rows(session: Session) -> np.ndarray:
    """The queries whose every key is blocked (n,), read-only, without making the mask.

    Causal and window masks always let a query see itself; a padding mask blocks every row
    or none; a custom mask's rows are read from its own matrix.
    """
    mask, n, n_k = session.mask, session.n, session.n_keys
    if mask.kind == "padding" and len(mask.padding) >= n_k:  # positions are distinct and < n_k
        rows = np.ones(n, dtype=bool)
    elif mask.kind == "custom":
        mask.check(n, _source_n(session))
        rows = mask.blocked.all(axis=1)
    else:
        rows = np.zeros(n, dtype=bool)
    rows.flags.writeable = False
    return rows


def any_blocked(session: Session) -> bool:
    """Whether the mask blocks any cell at all, without making it."""
    mask = session.mask
    if mask.kind in ("causal", "window"):
        return session.n > 1  # key 1 is after query 0 (a window always includes the causal part)
    if mask.kind == "padding":
        return len(mask.padding) > 0
    if mask.kind == "custom":
        return bool(mask.blocked.any())
    return False


def _bounds(index, size: int) -> tuple[slice, bool]:
    """An int or a step-1 slice as a slice within ``size``, and whether it was a single index."""
    if isinstance(index, (bool, np.bool_)):
        raise IndexError("a mask is read by whole slices or single indices")
    if isinstance(index, (int, np.integer)):
        i = int(index) + size if index < 0 else int(index)
        if not 0 <= i < size:
            raise IndexError(f"index {int(index)} is out of bounds for size {size}")
        return slice(i, i + 1), True
    if isinstance(index, slice) and index.step in (None, 1):
        start, stop, _ = index.indices(size)
        return slice(start, max(start, stop)), False
    raise IndexError("a mask is read by whole slices or single indices")


class MaskMatrix:
    """A session's mask read like its (n, n_k) boolean array (True = blocked), each part made
    when it is read: ``m[i]`` (a query's row), ``m[i, j]``, ``m[r0:r1, c0:c1]``, ``any()``,
    ``shape``. A long result carries it instead of the array; turning it into a whole array
    is refused (that is what it exists not to make)."""

    ndim = 2
    dtype = np.dtype(bool)

    def __init__(self, session: Session):
        self.session = session
        self.shape = (session.n, session.n_keys)
        self._any = any_blocked(session)

    @property
    def size(self) -> int:
        return self.shape[0] * self.shape[1]

    def any(self) -> bool:
        return self._any

    def block(self, rows: slice, cols: slice) -> np.ndarray:
        """The rectangle ``[rows, cols]`` as a new boolean array."""
        if not self._any:
            r0, r1, _ = rows.indices(self.shape[0])
            c0, c1, _ = cols.indices(self.shape[1])
            return np.zeros((max(0, r1 - r0), max(0, c1 - c0)), dtype=bool)
        return self.session.mask.block(self.session.n, _source_n(self.session), rows, cols)

    def __getitem__(self, index):
        if not isinstance(index, tuple):
            index = (index,)
        if len(index) == 1:
            index = (index[0], slice(None))
        if len(index) != 2:
            raise IndexError("a mask is read by [rows, cols]")
        (rows, one_row), (cols, one_col) = (_bounds(i, size) for i, size in zip(index, self.shape))
        cells = self.block(rows, cols)
        if one_row and one_col:
            return cells[0, 0]
        if one_row or one_col:
            return cells[0] if one_row else cells[:, 0]
        return cells

    def __len__(self) -> int:
        return self.shape[0]

    def __array__(self, dtype=None, copy=None):
        raise TypeError("a long session's mask is read in blocks, not as a whole array")
