"""Start-up to a painted window, for the start-up row of ``attnexplorer bench``.

The bench runs ``first_paint`` in a fresh interpreter (``python -c``): it opens the window
exactly as ``attnexplorer ARGS`` does (``ui.app.open_window``), prints ``painted <unix time>``
once the window has been painted for the first time and quits, so that the bench can time
launch → painted window from outside without the interpreter's own exit. The app itself
carries no hook for this.
"""

from __future__ import annotations

import sys
import time

# What the bench runs in a fresh interpreter, with the app's arguments after it.
COMMAND = "import sys; from attnexplorer.bench.startup_probe import first_paint; sys.exit(first_paint(sys.argv[1:]))"


def first_paint(argv: list[str]) -> int:
    """Open the window for the command line ``argv``, print ``painted <unix time>`` after its
    first paint, and quit; the exit status of ``attnexplorer ARGV`` for a bad start."""
    from PySide6.QtCore import QEvent, QObject, QTimer

    from ..commands.arguments import build_parser
    from ..ui.app import open_window

    opened = open_window(build_parser().parse_args(argv))
    if opened is None:
        return 2
    app, window = opened

    def painted():
        print(f"painted {time.time():.6f}", flush=True)
        app.quit()

    class FirstPaint(QObject):
        def eventFilter(self, obj, event):
            if event.type() == QEvent.Type.Paint:
                obj.removeEventFilter(self)
                QTimer.singleShot(0, painted)  # after this paint has finished
            return False

    watcher = FirstPaint(window)
    window.installEventFilter(watcher)
    try:
        return app.exec()
    finally:
        window.document.shutdown()


if __name__ == "__main__":
    sys.exit(first_paint(sys.argv[1:]))
