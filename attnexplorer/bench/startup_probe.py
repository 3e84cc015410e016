"""Start-up to a painted window and to every panel drawn, for the start-up row of ``attnexplorer bench``.

The bench runs ``first_paint`` in a fresh interpreter (``python -c``): it opens the window
exactly as ``attnexplorer ARGS`` does (``ui.app.open_window``) and prints

- ``painted <unix time> torch=<0|1>`` once the window has been painted for the first time
  (tables, the sentence, the panels saying "computing…"), with whether torch had been
  imported by then (it should not have been: it loads after that first paint);
- ``drawn <unix time>`` once the first result is in and the window has painted it (every
  panel on screen drawn),

then quits, so that the bench can time launch → each from outside without the interpreter's
own exit. The app itself carries no hook for this: the probe watches Qt's paint events.
"""

from __future__ import annotations

import sys
import time

# What the bench runs in a fresh interpreter, with the app's arguments after it.
COMMAND = "import sys; from attnexplorer.bench.startup_probe import first_paint; sys.exit(first_paint(sys.argv[1:]))"


def first_paint(argv: list[str]) -> int:
    """Open the window for the command line ``argv``, print ``painted …`` after its first paint
    and ``drawn …`` after the first paint that shows a result, and quit; the exit status of
    ``attnexplorer ARGV`` for a bad start (then nothing is printed)."""
    # The app's modules first, in the order its own start imports them (ui before PySide6).
    from ..commands.arguments import build_parser
    from ..ui.app import open_window

    from PySide6.QtCore import QEvent, QObject, QTimer

    opened = open_window(build_parser().parse_args(argv))
    if opened is None:
        return 2
    app, window = opened
    document = window.document
    said: list[str] = []

    def say(word: str, extra: str = "") -> None:
        said.append(word)
        print(f"{word} {time.time():.6f}{extra}", flush=True)
        if word == "drawn":
            app.quit()

    class Paints(QObject):
        """Every paint event of the app (a panel's plot paints its own viewport, not the
        window): the first one, then the first one after a result is in. A backing-store sync
        paints every dirty widget in one go, so a zero timer set at its first paint fires
        after the whole window has painted."""

        def __init__(self):
            super().__init__()
            self.pending = False

        def eventFilter(self, obj, event):
            if event.type() == QEvent.Type.Paint and not self.pending:
                if not said:
                    self.pending = True
                    torch_loaded = "torch" in sys.modules  # at the paint itself, before any later import
                    with_result = document.result is not None  # then this paint draws the panels too
                    QTimer.singleShot(0, lambda: self.done("painted", f" torch={int(torch_loaded)}", with_result))
                elif said == ["painted"] and document.result is not None:
                    self.pending = True
                    QTimer.singleShot(0, lambda: self.done("drawn"))
            return False

        def done(self, word: str, extra: str = "", drawn_too: bool = False) -> None:
            self.pending = False
            say(word, extra)
            if drawn_too:
                say("drawn")

    def failed(error: str) -> None:
        print(f"failed {error}", file=sys.stderr, flush=True)
        app.exit(1)

    document.compute.failed.connect(failed)
    QTimer.singleShot(300_000, lambda: failed("no result drawn within 5 minutes"))
    watcher = Paints()
    app.installEventFilter(watcher)
    try:
        return app.exec()
    finally:
        app.removeEventFilter(watcher)
        document.shutdown()


if __name__ == "__main__":
    sys.exit(first_paint(sys.argv[1:]))
