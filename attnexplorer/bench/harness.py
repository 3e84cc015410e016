"""The real main window opened for a bench's measurements, and closed after them.

Every window row of ``attnexplorer bench`` (redraw, drag, edit cost, heatmap, the large
session, the fit and the real models) opens the window as the app does, headless on Qt's
offscreen platform and with no real settings or recovery files, measures, and closes it.
"""

from __future__ import annotations

import atexit
import gc
import os
import shutil
import statistics
import tempfile
from typing import Sequence

_scratch: str | None = None


def settings_dir() -> str:
    """A fresh, empty settings folder for a window the bench opens (the app keeps its recovery
    files under it too), so that no measurement reads or changes the user's settings and each
    starts from the default layout. All of them are removed when the bench's process ends."""
    global _scratch
    if _scratch is None:
        _scratch = tempfile.mkdtemp(prefix="attnexplorer-bench-")
        atexit.register(shutil.rmtree, _scratch, True)
    return tempfile.mkdtemp(dir=_scratch)


def child_env() -> dict[str, str]:
    """The environment of a fresh process the bench measures: headless, with settings of its
    own (``settings_dir``), and glibc's allocator thresholds those of the app.

    The app fixes them at start (``memory.steady_allocator``, from ``cli.run``), but a child
    that runs ``python -c`` code (the large session, the long rows, the real models) never
    passes there: glibc reads the same thresholds from these variables when the process
    starts, so every measured process allocates as the app does."""
    from ..memory import MMAP_THRESHOLD, TRIM_THRESHOLD

    return {**os.environ, "QT_QPA_PLATFORM": "offscreen", "ATTNEXPLORER_CONFIG_DIR": settings_dir(),
            "MALLOC_MMAP_THRESHOLD_": str(MMAP_THRESHOLD), "MALLOC_TRIM_THRESHOLD_": str(TRIM_THRESHOLD)}


def load_average() -> float | None:
    """The machine's one-minute load average (None where it cannot be read): on a shared
    machine it moves every wall-clock figure, so each row records it beside its figures."""
    try:
        return round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):
        return None


def median_of(rows: Sequence[dict], figures: Sequence[str]) -> dict:
    """One row from ``rows``, the same measurement repeated: each of ``figures`` the median of
    its repeats (every repeat counts, the slow ones too), with all of them in ``<figure>_all``
    and ``repeats``; the row's other fields are those of the repeat whose first figure is the
    median (the lower middle one of an even count), so that a note about where a block fell
    belongs to the figure shown. A repeat that failed makes the row say so (``error``)."""
    failed = [row for row in rows if "error" in row]
    if failed or not rows:
        return dict(failed[0] if failed else {"error": "nothing measured"}, repeats=len(rows))
    first = figures[0]
    ordered = sorted(rows, key=lambda row: row[first])
    out = dict(ordered[(len(ordered) - 1) // 2])
    for name in figures:
        values = [row[name] for row in rows if row.get(name) is not None]
        out[name] = statistics.median(values) if values else None
        out[f"{name}_all"] = values
    out["repeats"] = len(rows)
    return out


def start_app():
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    os.environ.setdefault("ATTNEXPLORER_CONFIG_DIR", settings_dir())  # no real settings or recovery files
    from PySide6.QtCore import qInstallMessageHandler

    from ..ui.app import make_app
    from ..ui.exports.figures import quiet_offscreen

    if os.environ["QT_QPA_PLATFORM"] == "offscreen":
        qInstallMessageHandler(quiet_offscreen)
    return make_app()


def open_window(session, size=(1280, 800)):
    from PySide6.QtWidgets import QApplication

    from ..ui.document import SessionDocument
    from ..ui.window import MainWindow

    document = SessionDocument(session)
    window = MainWindow(document)
    window.resize(*size)
    window.show()
    for _ in range(3):
        QApplication.processEvents()
    window.repaint()
    # As the app does once its window is up (ui/app.py, collect_after_first_result): what
    # exists now lives as long as the window, and the collector no longer walks it. Without
    # this the bench paid full collections the app does not: a W_q edit at 16 heads of 512
    # took 6 ms more on average, 17 ms on the edits one fell on.
    gc.collect()
    gc.freeze()
    return document, window


def open_probe_window():
    """A probe's window on the pronoun preset, computed, answering "discard" to the unsaved-work
    question and keeping its error dialogs in a list: ``(app, document, window, errors)``."""
    from ..core.inputs.presets import build_preset

    app = start_app()
    document, window = open_window(build_preset("pronoun").session)
    document.compute.wait_idle(60.0)
    window.ask_unsaved = lambda: "discard"
    errors = []
    window.show_error = lambda title, text: errors.append(text)
    return app, document, window, errors


def close_window(document, window) -> None:
    """Close and delete ``window`` and collect what it held, so that the next measurement
    starts from a process that holds nothing of this one.

    ``deleteLater`` alone deleted nothing here: the bench runs no event loop of its own, and
    ``processEvents`` does not deliver deferred deletions. The closed (hidden) windows lived on
    until some later row ran a loop, and the next ``open_window`` froze them, all their panels
    and plots, out of the collector's reach: after the bench's window rows the fit's window
    was opened beside 5 such windows and some 75,000 more frozen objects."""
    from PySide6.QtCore import QCoreApplication, QEvent
    from PySide6.QtWidgets import QApplication

    gc.unfreeze()  # the closed window's objects are the collector's again
    document.undo_stack.setClean()  # nothing to ask about on close
    window.close()  # drops the recovery file and takes the panels' plots apart (Panel.dispose)
    window.deleteLater()
    document.shutdown()
    QApplication.processEvents()
    QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)
    gc.collect()


def end_probe(*windows) -> None:
    """A probe's last line: close and delete ``windows``, then the application, before the
    interpreter exits. Left to the interpreter, a probe's globals are cleared in no fixed order,
    and a window destroyed after the QApplication crashed the process at exit (exit -11 after
    its figures were printed: about one fresh MiniLM open in three)."""
    import shiboken6
    from PySide6.QtCore import QCoreApplication, QEvent
    from PySide6.QtWidgets import QApplication

    for window in windows:
        if not shiboken6.isValid(window):  # already gone: closing the main window closes the model window
            continue
        window.close()
        window.deleteLater()
    QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)
    app = QApplication.instance()
    if app is not None:
        app.processEvents()
        app.shutdown()  # PySide6: deletes the application and every Qt object Python still holds


def settle() -> None:
    """Deliver queued results and paint every region that an update marked dirty, as Qt's
    event loop does between two frames (what changed is repainted, nothing else)."""
    from PySide6.QtWidgets import QApplication

    QApplication.processEvents()
    QApplication.processEvents()


def table_scroll_ms(window) -> float | None:
    """A scroll through the token table as a person would make it (20 steps from top to
    bottom, each painted): the mean milliseconds a step, None without the table. The table
    stays virtual, so a 16,384-row table should scroll like a 16-row one."""
    import time

    from PySide6.QtWidgets import QApplication

    view = getattr(getattr(window.inputs, "tokens", window.inputs), "embedding_view", None)
    if view is None:
        return None
    start = time.perf_counter()
    bar = view.verticalScrollBar()
    for k in range(20):
        bar.setValue(bar.maximum() * k // 19)
        QApplication.processEvents()
        view.viewport().repaint()
    return (time.perf_counter() - start) * 1000.0 / 20
