"""The open document, for widgets: a thin Qt face on ``app.document.Document``.

The session, its undo history, edit coalescing, the selection and the compute scheduling are
``app/``'s (Qt-free, tested without Qt). This adapter gives widgets what they connect to:

- ``session_changed(Session)``, ``result_changed(AttentionResult)`` and ``message(str)`` as Qt
  signals (a connection dies with the widget that made it);
- ``selection`` (``selection.py``: ``current``, ``set``, a Qt ``changed``);
- ``compute`` (``compute_runner.py``: the result, what is kept, the device, ``wait_idle``);
- ``undo_stack``: the undo history as the Edit menu and the tests see it (``UndoStackView``:
  undo and redo actions, clean state, step names), fed from ``app.history.UndoHistory``.

Work from ``app/`` reaches the GUI thread through ``gui_thread.GuiThread``: edits posted with
``edit_later`` run at the next turn of the event loop, a worker's answers on the GUI thread.
Every result carries the session it was computed from (``result.session``): views read session
facts from it, never from ``document.session``, which may be one edit ahead while a big
compute runs.
"""

from __future__ import annotations

from typing import Callable

from PySide6.QtCore import QObject, Signal
from PySide6.QtGui import QAction

from ..app.document import Document, LiveEdit, ModelLayer
from ..app.history import UNDO_BYTES, UNDO_STEPS, UndoHistory  # noqa: F401 - tests read the bounds here
from ..core.compute.engine import AttentionResult
from ..core.inputs.session import Session
from .compute_runner import DocumentCompute
from .gui_thread import GuiThread
from .selection import CurrentSelection


class UndoStackView(QObject):
    """The undo history with ``QUndoStack``'s names (what the Edit menu, the session actions
    and the tests use), and its signals as Qt signals."""

    cleanChanged = Signal(bool)
    indexChanged = Signal(int)
    canUndoChanged = Signal(bool)
    canRedoChanged = Signal(bool)
    undoTextChanged = Signal(str)
    redoTextChanged = Signal(str)

    def __init__(self, history: UndoHistory, parent=None):
        super().__init__(parent)
        self.history = history
        history.changed.connect(self._on_changed)
        history.clean_changed.connect(self._on_clean_changed)

    def count(self) -> int:
        return self.history.count()

    def index(self) -> int:
        return self.history.index()

    def text(self, i: int) -> str:
        return self.history.text(i)

    def undoText(self) -> str:
        return self.history.undo_text()

    def redoText(self) -> str:
        return self.history.redo_text()

    def canUndo(self) -> bool:
        return self.history.can_undo()

    def canRedo(self) -> bool:
        return self.history.can_redo()

    def isClean(self) -> bool:
        return self.history.is_clean()

    def undoLimit(self) -> int:
        return self.history.limit

    def setClean(self) -> None:
        self.history.set_clean()

    def undo(self) -> None:
        self.history.undo()

    def redo(self) -> None:
        self.history.redo()

    def createUndoAction(self, parent, prefix: str = "") -> QAction:
        """An action that undoes, named "<prefix> <step>" and enabled while there is one."""
        return self._action(parent, prefix or "Undo", self.undo, self.canUndo, self.undoText,
                            self.canUndoChanged, self.undoTextChanged)

    def createRedoAction(self, parent, prefix: str = "") -> QAction:
        return self._action(parent, prefix or "Redo", self.redo, self.canRedo, self.redoText,
                            self.canRedoChanged, self.redoTextChanged)

    @staticmethod
    def _action(parent, prefix: str, run, enabled, text, enabled_changed, text_changed) -> QAction:
        action = QAction(parent)

        def name(step: str) -> None:
            action.setText(f"{prefix} {step}" if step else prefix)

        name(text())
        action.setEnabled(enabled())
        action.triggered.connect(run)
        enabled_changed.connect(action.setEnabled)
        text_changed.connect(name)
        return action

    def _on_changed(self) -> None:
        self.indexChanged.emit(self.history.index())
        self.canUndoChanged.emit(self.history.can_undo())
        self.canRedoChanged.emit(self.history.can_redo())
        self.undoTextChanged.emit(self.history.undo_text())
        self.redoTextChanged.emit(self.history.redo_text())

    def _on_clean_changed(self, clean: bool) -> None:
        self.cleanChanged.emit(clean)


class SessionDocument(QObject):
    session_changed = Signal(object)
    result_changed = Signal(object)
    message = Signal(str)

    def __init__(self, session: Session, parent=None, compute: bool = True):
        """``compute=False``: no compute until ``compute.request()`` (the app starts the first
        one once its window has painted, so that torch loads after that)."""
        super().__init__(parent)
        self.gui_thread = GuiThread(self)
        self.core = Document(session, self.gui_thread.post, compute=compute)
        self.undo_stack = UndoStackView(self.core.history, self)
        self.selection = CurrentSelection(parent=self, state=self.core.selection)
        self.compute = DocumentCompute(self.core.compute, self)
        self.core.session_changed.connect(self._on_session_changed)
        self.core.message.connect(self._on_message)
        self.compute.result_changed.connect(self.result_changed)

    # -- reading ----------------------------------------------------------------------
    @property
    def session(self) -> Session:
        return self.core.session

    @property
    def result(self) -> AttentionResult | None:
        """The newest result (it may lag the session by one edit while a big one runs)."""
        return self.core.result

    @property
    def model(self) -> ModelLayer | None:
        """The real model the session is a layer of (File ▸ Open model…), or None."""
        return self.core.model

    def history_bytes(self) -> int:
        """What the undo history's recorded changes hold, in bytes."""
        return self.core.history.history_bytes()

    # -- changing -----------------------------------------------------------------------
    def edit(self, session: Session, text: str, merge_key=None) -> None:
        self.core.edit(session, text, merge_key)

    def live_edit(self, text: str) -> LiveEdit:
        return self.core.live_edit(text)

    def edit_later(self, apply: Callable[[], None]) -> None:
        self.core.edit_later(apply)

    def flush(self) -> None:
        self.core.flush()

    def set_session(self, session: Session, model: ModelLayer | None = None) -> None:
        self.core.set_session(session, model)

    def refuse(self, reason: str) -> None:
        self.core.refuse(reason)

    def shutdown(self) -> None:
        """Stop the compute thread (idempotent)."""
        self.core.shutdown()

    # -- relays -----------------------------------------------------------------------
    def _on_session_changed(self, session: Session) -> None:
        self.session_changed.emit(session)

    def _on_message(self, text: str) -> None:
        self.message.emit(text)
