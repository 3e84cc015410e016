"""A window in a process of its own, for the kill -9 tests (run as a script, not collected).

``python recovery_child.py restore``: open the dessert preset, answer yes to the recovery
offer, print ``restored`` (or ``nothing``) and keep running until killed.

``python recovery_child.py one-edit PRESET I J VALUE``: open PRESET, set ``embeddings[I,J] =
VALUE`` as one undoable edit right after start, and keep running until killed.

``--autosave-ms MS`` before the mode shortens the autosave delay (the window's
``Autosaver`` reads ``autosave.DEFAULT_DELAY_MS`` when it is made); without it the timing is
the product's own. The data and settings folders come from the environment
(``ATTNEXPLORER_DATA_DIR`` ...). Kept in the test tree so the app needs no hook for it.
"""

from __future__ import annotations

import sys


def main(argv):
    from PySide6.QtCore import QTimer

    from attnexplorer.core.inputs.presets import build_preset
    from attnexplorer.ui.app import make_app
    from attnexplorer.ui.document import SessionDocument
    from attnexplorer.ui.window import MainWindow
    from attnexplorer.ui.settings import AppSettings

    if argv[0] == "--autosave-ms":
        from attnexplorer.ui import autosave

        autosave.DEFAULT_DELAY_MS = int(argv[1])
        argv = argv[2:]
    app = make_app()
    built = build_preset(argv[1] if argv[0] == "one-edit" else "dessert")
    document = SessionDocument(built.session)
    window = MainWindow(document, AppSettings())
    window.show()
    if argv[0] == "restore":
        window.ask_restore = lambda recovery: True
        QTimer.singleShot(0, lambda: print("restored" if window.offer_recovery() else "nothing", flush=True))
    elif argv[0] == "one-edit":
        i, j, value = int(argv[2]), int(argv[3]), float(argv[4])

        def edit():
            x = document.session.embeddings.copy()
            x[i, j] = value
            document.edit(document.session.replace(embeddings=x), "Edit X")

        QTimer.singleShot(0, edit)
    else:
        raise SystemExit(f"unknown mode {argv[0]!r}")
    return app.exec()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
