"""What one edit changed between two sessions, kept small enough for a long undo history.

An undo step that keeps both whole sessions keeps a whole copy of every array the edit
touched: at 16 heads of 512 × 512 weights a one-cell edit of W_q would keep 32 MB. A
``SessionChange`` keeps only the positions and values that differ (the whole array only when
most of it changed or its shape did) and rebuilds either side from the other:

    change = SessionChange(before, after)
    change.undo(after) == before and change.redo(before) == after

Arrays not touched by the edit are shared, as ``Session.replace`` shares them, and arrays
rebuilt here go through ``session_arrays.with_flat_values`` (one copy, and the engine patches just
the changed positions on its device).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..errors import SessionError
from ..inputs.mask import Mask, custom_mask_owning
from ..inputs.session import Session
from ..inputs.session_arrays import derived_from, with_flat_values
# Positions + old + new values cost 24 bytes per changed cell, a whole array 8 per cell:
# beyond a third of the cells the whole array is the smaller record.
_WHOLE_ABOVE = 1 / 3


class SessionChange:
    """The difference between ``before`` and ``after``, for undo (``undo``) and redo (``redo``)."""

    __slots__ = ("_cells", "_whole", "_others", "_mask_cells", "nbytes")

    def __init__(self, before: Session, after: Session):
        self._cells: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        self._whole: dict[str, tuple] = {}
        self._others: dict[str, tuple] = {}
        self._mask_cells: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        size = 0
        # Every field of the session, so a stage added to it is undone like the rest.
        for name in (f.name for f in dataclasses.fields(Session)):
            a, b = getattr(before, name), getattr(after, name)
            if a is b:
                continue
            if not isinstance(a, np.ndarray) and not isinstance(b, np.ndarray):
                if name == "mask" and _to_custom(a, b, before):
                    # A clicked cell: keep the cells, not the old n × n matrix (268 MB at
                    # 16,384 tokens, once per step), and a causal, window or padding mask as itself.
                    cells = _mask_cells(a, b, before)
                    if cells is not None:
                        if cells[0].size or a.kind != "custom":  # "window" → "custom" alike is a step too
                            self._mask_cells = (*cells, None if a.kind == "custom" else a)
                            size += cells[0].nbytes + 2 * cells[0].size
                        continue
                if _differ(a, b):
                    self._others[name] = (a, b)
                    # A custom mask kept whole is counted like an array, for the history's bound.
                    size += max(_mask_bytes(a), _mask_bytes(b))
                continue
            if isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and a.shape == b.shape:
                # An edit made with ``with_values`` says where it wrote: no need to compare.
                known = derived_from(b)
                if known is not None and known[0] is a:
                    flat = known[1]
                else:
                    flat = np.flatnonzero(a.reshape(-1) != b.reshape(-1))
                if flat.size == 0:
                    continue
                if flat.size <= _WHOLE_ABOVE * a.size:
                    self._cells[name] = (flat, a.reshape(-1)[flat], b.reshape(-1)[flat])
                    size += flat.nbytes * 3
                    continue
            # One side is always the session the document holds; the other is the cost.
            self._whole[name] = (a, b)
            size += max(getattr(a, "nbytes", 0), getattr(b, "nbytes", 0))
        self.nbytes = size

    def _apply(self, session: Session, side: int) -> Session:
        changes = {name: pair[side] for name, pair in self._whole.items()}
        for name, (flat, old, new) in self._cells.items():
            base = getattr(session, name)
            try:
                changes[name] = with_flat_values(base, flat, (old, new)[side])
            except SessionError:  # an array the session module did not freeze: copy it plainly
                array = np.array(base)
                array.reshape(-1)[flat] = (old, new)[side]
                changes[name] = array
        changes.update({name: pair[side] for name, pair in self._others.items()})
        if self._mask_cells is not None:
            flat, old, new, made_from = self._mask_cells
            if side == 0 and made_from is not None:
                changes["mask"] = made_from
            else:
                blocked = session.mask.matrix(session.n, _keys(session))
                blocked.reshape(-1)[flat] = (old, new)[side]
                changes["mask"] = custom_mask_owning(blocked)
        return session.replace(**changes) if changes else session

    def undo(self, after: Session) -> Session:
        """The session before the edit, from the session after it."""
        return self._apply(after, 0)

    def redo(self, before: Session) -> Session:
        """The session after the edit, from the session before it."""
        return self._apply(before, 1)


def _keys(session: Session) -> int | None:
    return None if session.source is None else session.source.n


def _to_custom(a, b, before: Session) -> bool:
    """Whether ``b`` is a custom mask made from ``a`` on the same tokens (a click on a cell)."""
    return (isinstance(a, Mask) and isinstance(b, Mask) and b.kind == "custom"
            and b.blocked.shape == (before.n, before.n if before.source is None else before.source.n))


_ROWS = 1024  # rows compared at a time: never a second n × n matrix, even a boolean one


def _mask_cells(a: Mask, b: Mask, before: Session):
    """(positions, old, new) of the cells ``b`` changed in ``a``'s matrix, or None when more
    than a third of them changed (the whole matrix is then the smaller record)."""
    n, keys = b.blocked.shape
    limit = _WHOLE_ABOVE * b.blocked.size
    found, count = [], 0
    for r0 in range(0, n, _ROWS):
        rows = slice(r0, min(r0 + _ROWS, n))
        try:
            old = a.block(before.n, _keys(before), rows=rows)
        except SessionError:
            return None
        flat = np.flatnonzero(old != b.blocked[rows])
        count += flat.size
        if count > limit:
            return None
        found.append(flat + r0 * keys)
    flat = np.concatenate(found) if found else np.zeros(0, dtype=np.intp)
    new = b.blocked.reshape(-1)[flat]
    return flat, ~new, new


def _mask_bytes(value) -> int:
    return value.blocked.nbytes if isinstance(value, Mask) and value.kind == "custom" else 0


def _differ(a, b) -> bool:
    """Whether two non-array field values differ (values holding arrays compare by identity)."""
    try:
        return bool(a != b)
    except (ValueError, TypeError):  # e.g. a mapping holding arrays: no single truth value
        return True
