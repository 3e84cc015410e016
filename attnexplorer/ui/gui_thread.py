"""``post`` for ``app/``: run a call on the GUI thread at the next turn of Qt's event loop.

``GuiThread(parent).post(call)`` may be called from any thread; the call runs on the thread
the ``GuiThread`` was made on (the GUI thread), through a queued signal. Calls posted after
the object (or its parent) has been deleted are dropped, so a worker finishing after its
window closed hears nothing and crashes nothing.
"""

from __future__ import annotations

from typing import Callable

import shiboken6
from PySide6.QtCore import QObject, Qt, Signal


class GuiThread(QObject):
    _call = Signal(object)

    def __init__(self, parent=None):
        super().__init__(parent)
        self._call.connect(self._run, Qt.ConnectionType.QueuedConnection)

    def post(self, call: Callable[[], None]) -> None:
        if not shiboken6.isValid(self):
            return
        try:
            self._call.emit(call)
        except RuntimeError:  # deleted between the check and the emit (a window closing)
            pass

    def _run(self, call: Callable[[], None]) -> None:
        call()
