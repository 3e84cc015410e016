"""The undo steps of a document, and the bound on what its history holds.

An ``EditStep`` keeps what the edit changed (``core.session_change.SessionChange``), not the
two whole sessions; a ``LiveEdit`` is one step shown as it happens (a fit). Both change the
document only through ``document._set``, the one place a session becomes current.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from PySide6.QtGui import QUndoCommand, QUndoStack

from ..core.session import Session
from ..core.session_change import SessionChange

if TYPE_CHECKING:
    from .document import SessionDocument


class EditStep(QUndoCommand):
    """One undo step. It keeps what the edit changed (``SessionChange``), not the two whole
    sessions: a one-cell edit of a large W_q costs a few bytes of history, not a copy of it.
    Undo and redo rebuild the neighbouring session from the document's current one (the
    stack guarantees that it is this step's "after" or "before")."""

    def __init__(self, doc: "SessionDocument", before: Session, after: Session, text: str, merge_key):
        super().__init__(text)
        self._doc = doc
        self.change = SessionChange(before, after)
        self._pushed = after  # what the push's first redo sets; dropped right after
        self.merge_key = merge_key

    @property
    def nbytes(self) -> int:
        return self.change.nbytes if self.change is not None else 0

    def id(self) -> int:
        # Qt merges only commands with equal non-negative ids; the key says "same cell".
        return 1 if self.merge_key is not None else -1

    def mergeWith(self, other) -> bool:
        if not isinstance(other, EditStep) or other.merge_key != self.merge_key or self.merge_key is None:
            return False
        if self.change is None:  # forgotten (beyond the memory bound): nothing to merge into
            return False
        after = self._doc.session  # the push has just applied ``other``
        self.change = SessionChange(self.change.undo(other.change.undo(after)), after)
        self.setText(other.text())  # "Temperature τ = 1000" names where the drag ended
        return True

    def forget(self) -> None:
        """Drop this step's record; Qt then drops the step, unapplied, when it is undone."""
        self.change = None
        self.setText(f"{self.text()} (beyond the undo history's memory)")
        self.setObsolete(True)

    def redo(self):
        if self._pushed is not None:
            after, self._pushed = self._pushed, None
        else:
            after = self.change.redo(self._doc.session)
        self._doc._set(after)

    def undo(self):
        self._doc._set(self.change.undo(self._doc.session))


class LiveEdit:
    """An edit shown while it happens (a fit): every ``show`` makes the new session current
    without an undo step of its own, and the whole edit is ONE undo step, from the session
    before ``SessionDocument.live_edit`` to the last one shown.

    The step is pushed when the live edit begins, so undo, redo and other edits stay ordinary
    undo-stack business. ``attached`` turns False as soon as anything else changes the
    session (an edit, an undo, a new file): from then on ``show`` does nothing, and the
    step keeps what was shown last.
    """

    def __init__(self, doc: "SessionDocument", text: str):
        self._doc = doc
        self.before = doc.session
        self._command = EditStep(doc, self.before, self.before, text, None)
        doc.undo_stack.push(self._command)
        self._index = doc.undo_stack.index()
        self._shown = doc.session

    @property
    def attached(self) -> bool:
        doc = self._doc
        return doc.session is self._shown and doc.undo_stack.index() == self._index

    def show(self, session: Session) -> bool:
        """Make ``session`` current as part of this step; False (nothing done) once detached."""
        if not self.attached:
            return False
        # The step records the change from before the live edit to what is shown now.
        self._command.change = SessionChange(self.before, session)
        self._shown = session
        # Computed on the worker: a live edit (a fit) keeps a core busy, and its frames come
        # faster than an inline compute leaves the window time to draw.
        self._doc._set(session, background=True)
        return True


def history_bytes(stack: QUndoStack) -> int:
    """What the recorded changes of ``stack`` hold, in bytes."""
    return sum(getattr(stack.command(i), "nbytes", 0) for i in range(stack.count()))


def forget_oldest(stack: QUndoStack, limit_bytes: int) -> None:
    """Forget the oldest applied steps while the history holds more than ``limit_bytes``."""
    total = history_bytes(stack)
    for i in range(stack.index() - 1):  # never the newest step, never a step to redo
        if total <= limit_bytes:
            return
        command = stack.command(i)
        if isinstance(command, EditStep) and command.change is not None:
            total -= command.nbytes
            command.forget()
