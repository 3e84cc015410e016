"""A fixed result to draw panels from, with no document, no undo and no compute.

Panels read ``result``, ``selection`` (a ``CurrentSelection``: ``selection.current``,
``selection.set``) and ``session`` and listen to ``result_changed`` and
``selection.changed``; a ``SessionDocument`` offers that for the live window, and a
``ResultSource`` offers the same for one result already computed: figures made on the
command line, the self-test. It never computes, so a figure shows exactly the numbers
written next to it.
"""

from __future__ import annotations

from PySide6.QtCore import QObject, Signal

from ...core.compute.engine import AttentionResult
from ...core.inputs.session import Session
from ..selection import CurrentSelection, Selection


class ResultSource(QObject):
    result_changed = Signal(object)

    def __init__(self, result: AttentionResult, selection: Selection | None = None, parent=None):
        super().__init__(parent)
        self._result = result
        self.selection = CurrentSelection(result.session, selection, self)

    @property
    def result(self) -> AttentionResult:
        return self._result

    @property
    def session(self) -> Session:
        """The session the result was computed from."""
        return self._result.session

