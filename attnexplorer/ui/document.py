"""The open document: the current session and its undo history.

Every widget talks to one ``SessionDocument``: inputs go through ``user_actions`` to
``edit(new_session, text)`` (one undo step, ``undo_steps.py``). Beside the session and its
history the document holds two parts of its own, each in its module:

- ``selection`` (``selection.py``'s ``CurrentSelection``): the selected head, query and key,
  kept inside the session as it changes; panels read ``selection.current`` and listen to
  ``selection.changed``.
- ``compute`` (``compute_runner.py``'s ``DocumentCompute``): the results of the session,
  computed on a worker thread or inline, stale ones dropped; what is kept, the device, the
  complete result exports ask for, ``wait_idle``. The window never computes attention itself.

For the views, ``result`` and ``result_changed`` are the compute's newest result (as a
``ResultSource`` offers one fixed result to figures). Every result carries the session it was
computed from (``result.session``): views read session facts from it, never from
``document.session``, which may be one edit ahead while a big compute runs.

Signals
- ``session_changed(Session)``: after every edit, undo or redo (and ``set_session``).
- ``result_changed(AttentionResult)``: the newest result; stale ones are dropped.
- ``message(str)``: a short status-bar text (a refused edit says why here).

Bursts of edits (a dragged slider) are coalesced with ``edit_later``: only the newest is
applied, at the next turn of the event loop; ``flush()`` applies it now.
"""

from __future__ import annotations

from typing import Callable

from PySide6.QtCore import QObject, QTimer, Signal
from PySide6.QtGui import QUndoStack

from ..core.engine import AttentionResult
from ..core.session import Session
from .compute_runner import DocumentCompute
from .selection import CurrentSelection
from .undo_steps import EditStep, LiveEdit, forget_oldest, history_bytes

# The undo history's bounds: this many steps, and about this many bytes of recorded changes
# (a cell edit records a few bytes; a resize or an import records a whole array). Beyond
# either, the oldest steps are forgotten.
UNDO_STEPS = 1000
UNDO_BYTES = 256 << 20


class SessionDocument(QObject):
    session_changed = Signal(object)
    result_changed = Signal(object)
    message = Signal(str)

    def __init__(self, session: Session, parent=None, compute: bool = True):
        """``compute=False``: no compute until ``compute.request()`` (the app starts the first
        one once its window has painted, so that torch loads after that)."""
        super().__init__(parent)
        self._session = session
        self.undo_stack = QUndoStack(self)
        self.undo_stack.setUndoLimit(UNDO_STEPS)  # Qt allows this only while the stack is empty
        self._posted: Callable[[], None] | None = None
        self._post_timer = QTimer(self)
        self._post_timer.setSingleShot(True)
        self._post_timer.setInterval(0)
        self._post_timer.timeout.connect(self.flush)
        self.selection = CurrentSelection(session, parent=self)
        self.compute = DocumentCompute(self, start=compute)
        self.compute.result_changed.connect(self.result_changed)

    # -- reading ----------------------------------------------------------------------
    @property
    def session(self) -> Session:
        return self._session

    @property
    def result(self) -> AttentionResult | None:
        """The newest result (it may lag the session by one edit while a big one runs)."""
        return self.compute.result

    def history_bytes(self) -> int:
        """What the undo history's recorded changes hold, in bytes."""
        return history_bytes(self.undo_stack)

    # -- changing -----------------------------------------------------------------------
    def edit(self, session: Session, text: str, merge_key=None) -> None:
        """Make ``session`` current as one undo step named ``text``.

        Consecutive edits with the same non-None ``merge_key`` (e.g. ``("cell", "W_q", 0, 1, 2)``)
        merge into one step, so typing into one cell again and again is one undo.
        """
        if self._posted is not None:
            self.flush()  # a coalesced edit posted earlier goes first
        if session == self._session:
            return
        self.undo_stack.push(EditStep(self, self._session, session, text, merge_key))
        forget_oldest(self.undo_stack, UNDO_BYTES)

    def live_edit(self, text: str) -> LiveEdit:
        """Begin an edit shown as it happens (see ``LiveEdit``): one undo step named ``text``."""
        if self._posted is not None:
            self.flush()
        return LiveEdit(self, text)

    def edit_later(self, apply: Callable[[], None]) -> None:
        """Run ``apply`` (which makes an edit) at the next turn of the event loop, replacing
        one posted before and not yet run: while a slider is dragged faster than frames are
        drawn, only the newest value is computed and drawn. ``flush()`` runs it now."""
        self._posted = apply
        self._post_timer.start()

    def flush(self) -> None:
        """Apply the edit posted with ``edit_later`` now, if any (a slider's release)."""
        self._post_timer.stop()
        apply, self._posted = self._posted, None
        if apply is not None:
            apply()

    def set_session(self, session: Session) -> None:
        """Replace the document (New, Open, a preset): clears undo history."""
        self.undo_stack.clear()
        self._set(session)
        self.selection.show_view(session)
        self.undo_stack.setClean()

    def refuse(self, reason: str) -> None:
        """Report a refused edit; nothing changes."""
        self.message.emit(reason)

    def _set(self, session: Session, background: bool = False) -> None:
        self._session = session
        self.session_changed.emit(session)
        self.selection.follow(session)
        self.compute.request(background)

    def shutdown(self) -> None:
        """Stop the compute thread (idempotent)."""
        self.compute.shutdown()
