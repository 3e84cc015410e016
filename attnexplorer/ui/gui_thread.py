"""``post`` for ``app/``: run a call on the GUI thread at the next turn of Qt's event loop.

``GuiThread(parent).post(call)`` may be called from any thread; the call runs on the thread
the ``GuiThread`` was made on (the GUI thread), through a queued signal. Calls posted after
the object (or its parent) has been deleted are dropped, so a worker finishing after its
window closed hears nothing and crashes nothing.

``wait_for(signal, done, timeout_s)`` runs the event loop until ``done()`` holds, looking
each time ``signal`` fires: how the bench, a closing window and tests wait for work in the
background, by its event, never by polling.
"""

from __future__ import annotations

from typing import Callable

import shiboken6
from PySide6.QtCore import QEventLoop, QObject, Qt, QTimer, Signal


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


def wait_for(signal, done: Callable[[], bool], timeout_s: float) -> bool:
    """Run Qt's event loop until ``done()``, checked whenever ``signal`` is emitted; False when
    ``timeout_s`` passes first."""
    if done():
        return True
    loop, timer = QEventLoop(), QTimer()
    timer.setSingleShot(True)
    timer.timeout.connect(loop.quit)

    def look(*_args) -> None:
        if done():
            loop.quit()

    signal.connect(look)
    timer.start(max(0, int(timeout_s * 1000)))
    try:
        loop.exec()
    finally:
        timer.stop()
        signal.disconnect(look)
    return done()
