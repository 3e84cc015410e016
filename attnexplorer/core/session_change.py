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

from .errors import SessionError
from .session import Session
from .session_arrays import derived_from, with_flat_values
# Positions + old + new values cost 24 bytes per changed cell, a whole array 8 per cell:
# beyond a third of the cells the whole array is the smaller record.
_WHOLE_ABOVE = 1 / 3


class SessionChange:
    """The difference between ``before`` and ``after``, for undo (``undo``) and redo (``redo``)."""

    __slots__ = ("_cells", "_whole", "_others", "nbytes")

    def __init__(self, before: Session, after: Session):
        self._cells: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        self._whole: dict[str, tuple] = {}
        self._others: dict[str, tuple] = {}
        size = 0
        # Every field of the session, so a stage added to it is undone like the rest.
        for name in (f.name for f in dataclasses.fields(Session)):
            a, b = getattr(before, name), getattr(after, name)
            if a is b:
                continue
            if not isinstance(a, np.ndarray) and not isinstance(b, np.ndarray):
                if _differ(a, b):
                    self._others[name] = (a, b)
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
        return session.replace(**changes) if changes else session

    def undo(self, after: Session) -> Session:
        """The session before the edit, from the session after it."""
        return self._apply(after, 0)

    def redo(self, before: Session) -> Session:
        """The session after the edit, from the session before it."""
        return self._apply(before, 1)


def _differ(a, b) -> bool:
    """Whether two non-array field values differ (values holding arrays compare by identity)."""
    try:
        return bool(a != b)
    except (ValueError, TypeError):  # e.g. a mapping holding arrays: no single truth value
        return True
