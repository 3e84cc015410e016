"""A document's undo history: a command stack of ``EditStep``s, in the spirit of glue's
``CommandStack`` and with the semantics the window had on a ``QUndoStack``.

An ``EditStep`` keeps what the edit changed (``core.editing.session_change.SessionChange``), not the two
whole sessions: a one-cell edit of a large W_q costs a few bytes of history. Undo and redo
rebuild the neighbouring session from the document's current one (the stack guarantees that it
is the step's "after" or "before"). Consecutive edits with the same non-None ``merge_key`` merge
into one step (typing into one cell again and again is one undo), except across the saved
("clean") state.

Bounds: at most ``limit`` steps (the oldest go), and about ``limit_bytes`` of recorded changes:
beyond that the oldest applied steps are *forgotten*: kept in the list under their name, they
are dropped, unapplied, when undo reaches them.

Signals: ``changed()`` after anything that moves the index, the texts or the count;
``clean_changed(bool)`` when the clean state flips.
"""

from __future__ import annotations

from typing import Callable

from psygnal import Signal

from ..core.inputs.session import Session
from ..core.editing.session_change import SessionChange

# The undo history's bounds: this many steps, and about this many bytes of recorded changes
# (a cell edit records a few bytes; a resize or an import records a whole array). Beyond
# either, the oldest steps are forgotten.
UNDO_STEPS = 1000
UNDO_BYTES = 256 << 20


class EditStep:
    """One undo step: its name (``text``), its ``merge_key`` and the change it made."""

    def __init__(self, before: Session, after: Session, text: str, merge_key=None):
        self.change: SessionChange | None = SessionChange(before, after)
        self.text = text
        self.merge_key = merge_key
        self.obsolete = False

    @property
    def nbytes(self) -> int:
        return self.change.nbytes if self.change is not None else 0

    def forget(self) -> None:
        """Drop this step's record; the stack then drops the step, unapplied, when it is undone."""
        self.change = None
        self.text = f"{self.text} (beyond the undo history's memory)"
        self.obsolete = True


class UndoHistory:
    """The stack: ``steps`` (oldest first) and ``index`` (how many are applied).

    ``current()`` gives the document's session and ``apply(session)`` makes one current; the
    history calls them on push, undo and redo and never holds a session of its own.
    """

    changed = Signal()
    clean_changed = Signal(bool)

    def __init__(self, current: Callable[[], Session], apply: Callable[[Session], None],
                 limit: int = UNDO_STEPS, limit_bytes: int = UNDO_BYTES):
        self._current = current
        self._apply = apply
        self.limit = limit
        self.limit_bytes = limit_bytes
        self.steps: list[EditStep] = []
        self._index = 0
        self._clean = 0  # the index of the saved state; -1 when that state is gone

    # -- reading ------------------------------------------------------------------------
    def count(self) -> int:
        return len(self.steps)

    def index(self) -> int:
        return self._index

    def text(self, i: int) -> str:
        return self.steps[i].text if 0 <= i < len(self.steps) else ""

    def undo_text(self) -> str:
        return self.text(self._index - 1)

    def redo_text(self) -> str:
        return self.text(self._index)

    def can_undo(self) -> bool:
        return self._index > 0

    def can_redo(self) -> bool:
        return self._index < len(self.steps)

    def is_clean(self) -> bool:
        return self._index == self._clean

    def history_bytes(self) -> int:
        """What the recorded changes hold, in bytes."""
        return sum(step.nbytes for step in self.steps)

    # -- changing -----------------------------------------------------------------------
    def push(self, before: Session, after: Session, text: str, merge_key=None) -> EditStep:
        """Make ``after`` current (the document holds ``before`` now) as one step named
        ``text``, merged into the newest one when both have this non-None ``merge_key``."""
        was_clean = self.is_clean()
        top = self.steps[self._index - 1] if self._index > 0 else None
        self._apply(after)
        del self.steps[self._index:]  # the steps to redo are gone
        if self._clean > self._index:
            self._clean = -1
        if (top is not None and merge_key is not None and top.merge_key == merge_key and top.change is not None
                and self._index != self._clean):
            top.change = SessionChange(top.change.undo(before), after)
            top.text = text  # "Temperature τ = 1000" names where the drag ended
            self._notify(was_clean)
            return top
        step = EditStep(before, after, text, merge_key)
        self.steps.append(step)
        if self.limit > 0 and len(self.steps) > self.limit:
            dropped = len(self.steps) - self.limit
            del self.steps[:dropped]
            self._index -= dropped
            self._clean = -1 if self._clean < dropped else self._clean - dropped
        self._index += 1
        self._forget_oldest()
        self._notify(was_clean)
        return step

    def undo(self) -> None:
        if self._index == 0:
            return
        was_clean = self.is_clean()
        i = self._index - 1
        step = self.steps[i]
        if not step.obsolete:
            self._apply(step.change.undo(self._current()))
        if step.obsolete:
            del self.steps[i]
            if self._clean > i:
                self._clean = -1
        self._index = i
        self._notify(was_clean)

    def redo(self) -> None:
        if self._index == len(self.steps):
            return
        was_clean = self.is_clean()
        i = self._index
        step = self.steps[i]
        if not step.obsolete:
            self._apply(step.change.redo(self._current()))
        if step.obsolete:
            del self.steps[i]
            if self._clean > i:
                self._clean = -1
        else:
            self._index = i + 1
        self._notify(was_clean)

    def set_clean(self) -> None:
        """The state now is the saved one."""
        was_clean = self.is_clean()
        self._clean = self._index
        self._notify(was_clean)

    def clear(self) -> None:
        """No steps; the state now is the clean one."""
        was_clean = self.is_clean()
        self.steps.clear()
        self._index = self._clean = 0
        self._notify(was_clean)

    def _forget_oldest(self) -> None:
        """Forget the oldest applied steps while the history holds more than ``limit_bytes``."""
        total = self.history_bytes()
        for step in self.steps[:self._index - 1]:  # never the newest step, never a step to redo
            if total <= self.limit_bytes:
                return
            if step.change is not None:
                total -= step.nbytes
                step.forget()

    def _notify(self, was_clean: bool) -> None:
        self.changed.emit()
        if self.is_clean() != was_clean:
            self.clean_changed.emit(self.is_clean())
