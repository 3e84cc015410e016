"""Start the desktop app: ``attnexplorer [SESSION | --preset NAME [--set K=V ...]]``.

What opens:
- ``attnexplorer SESSION.json``: that file;
- ``attnexplorer --preset sine --set tau=0.05``: that preset;
- ``attnexplorer --lesson pronoun`` or ``attnexplorer my-lesson.json``: that lesson, taught;
- ``attnexplorer``: the last session file, when it still opens, else the ``pronoun`` preset.

A session file or preset given on the command line that is wrong (missing, malformed, an
unknown preset or parameter) opens no window: the reason goes to stderr as one line, is also
shown in a dialog when there is a display to show it on (a double-click from a file manager
has no terminal), and the exit status is 2. A last session that no longer opens is not an
error: the default preset opens and the status bar says why.

After start-up, work left by a window that crashed or was killed is offered for restore.

``open_window(args)`` is everything before Qt's event loop; ``attnexplorer bench`` times it to
the first paint through ``bench/startup_probe.py``, so the product carries no hook for that.
"""

from __future__ import annotations

import sys
from pathlib import Path

from ..core.errors import AttnExplorerError, PresetError, SessionError

DEFAULT_PRESET = "pronoun"

def initial_session(args, settings):
    """``(session, path or None, note or None)`` for the command line ``args``.

    Raises AttnExplorerError for a bad file or preset named on the command line."""
    from ..core.inputs.presets import build_preset, parse_assignments
    from ..io.session_file import load_session

    session_file = getattr(args, "session_file", None)
    preset = getattr(args, "preset", None)
    params = list(getattr(args, "params", None) or [])
    if params and not preset:
        raise PresetError("--set needs --preset NAME (a session file has no preset parameters)")
    if session_file is not None and not session_file:
        raise SessionError("the session file name is empty")
    if session_file and preset:
        raise PresetError("give either a session file or --preset, not both")
    if session_file:
        session = load_session(Path(session_file))
        return session, Path(session_file), None
    if preset:
        return build_preset(preset, parse_assignments(params)).session, None, None
    note = None
    last = settings.last_session()
    if last is not None:
        try:
            session = load_session(last)
            return session, last, None
        except AttnExplorerError as err:
            note = f"The last session could not be opened ({err}); showing the {DEFAULT_PRESET} preset."
    return build_preset(DEFAULT_PRESET).session, None, note


def lesson_for_args(args):
    """The lesson ``--lesson NAME|FILE`` or a lesson file given as SESSION names, or None.
    Raises AttnExplorerError for a bad lesson (with the place in the file)."""
    name = getattr(args, "lesson", None)
    session_file = getattr(args, "session_file", None)
    if name is not None:
        if session_file or getattr(args, "preset", None):
            raise PresetError("give --lesson alone: a lesson brings its own session")
        from ..io.lesson_file import open_lesson

        return open_lesson(name)
    if session_file:
        from ..io.lesson_file import is_lesson_file, load_lesson

        if is_lesson_file(session_file):
            return load_lesson(Path(session_file))
    return None


def _report_startup_error(app, message: str) -> None:
    print(f"attnexplorer: {message}", file=sys.stderr)
    if app.platformName() in ("offscreen", "minimal"):
        return  # nobody could see or dismiss a dialog
    from PySide6.QtWidgets import QMessageBox

    QMessageBox.critical(None, "attnexplorer cannot start", message)


def make_app(argv=None):
    """The QApplication, with the names QSettings and the desktop use, and the icon."""
    from PySide6.QtGui import QIcon
    from PySide6.QtWidgets import QApplication

    from .settings import APP_NAME, ORG_NAME

    app = QApplication.instance() or QApplication(list(argv or sys.argv[:1]))
    app.setApplicationName(APP_NAME)
    app.setOrganizationName(ORG_NAME)
    app.setApplicationDisplayName("attnexplorer")
    try:
        from ..paths import APP_ID, app_icon_path

        app.setDesktopFileName(APP_ID)
        app.setWindowIcon(QIcon(str(app_icon_path())))
    except (ImportError, OSError, ValueError):
        pass  # an icon is nice, not needed
    return app


def open_window(args):
    """Open the window for the command line ``args``, as ``run_app`` does, without running Qt's
    event loop: ``(app, window)``, or None once a bad start has been reported (exit status 2).
    The offer to restore a crashed window's work is queued for the event loop's first turn."""
    from ..qt_platform import platform_problem

    problem = platform_problem()
    if problem is not None:  # Qt would abort with a misleading line; say what is missing
        print(f"attnexplorer: {problem}", file=sys.stderr)
        return None
    import gc

    # Everything made from here to the first result (Qt, pyqtgraph, the window: some 200,000
    # objects) lives as long as the app, yet the collector walked it over 400 times on the way
    # (about 0.1 s before the first paint): collection waits until the first result is in,
    # when those objects are frozen out of its reach (collect_after_first_result).
    collecting = gc.isenabled()
    gc.disable()
    opened = None
    try:
        opened = _open_window(args)
    finally:
        if opened is None and collecting:
            gc.enable()  # no window: nothing to wait for
    if opened is not None:
        collect_after_first_result(opened[1].document, collecting)
    return opened


def _open_window(args):
    app = make_app()
    from PySide6.QtCore import QTimer

    from .document import SessionDocument
    from .window import MainWindow
    from .settings import AppSettings

    settings = AppSettings()
    try:
        lesson = lesson_for_args(args)
        session, path, note = (lesson.session, None, None) if lesson else initial_session(args, settings)
    except AttnExplorerError as err:
        _report_startup_error(app, str(err))
        return None
    document = SessionDocument(session, compute=False)
    window = MainWindow(document, settings)
    if path is not None:
        window.actions.adopt(path)
    window.show()
    if lesson is not None:
        window.lesson.start(lesson)
    if note:
        window.statusBar().showMessage(note, 10000)
    QTimer.singleShot(0, window.offer_recovery)
    _compute_after_first_paint(app, document)
    return app, window


def _compute_after_first_paint(app, document) -> None:
    """Start the document's first compute once the window has painted, on the compute's worker
    thread, which imports torch for it.

    torch takes 1-3 s to import, most of it holding Python's lock (loading its libraries), so
    it waits until the window (tables, the sentence, the panels saying "computing…") is on
    screen: started any earlier, it would hold up the window's own building and first paint.
    A window that is never painted (started minimised) computes after a second all the same."""
    from PySide6.QtCore import QEvent, QObject, QTimer

    class FirstPaint(QObject):
        def eventFilter(self, obj, event):
            if event.type() == QEvent.Type.Paint:
                start()  # the compute begins after this paint's turn of the event loop
            return False

    # Parented to the document: Qt keeps them while the document lives.
    watcher = FirstPaint(document)
    fallback = QTimer(document)
    fallback.setSingleShot(True)
    started = False

    def start() -> None:
        # Not ``fallback.isActive()``: a single-shot timer is no longer active in its own
        # timeout, so a first paint later than the fallback (a second after the window was
        # shown: a slow or busy machine) found the compute "started already", and it never was;
        # every panel said "computing…" for good.
        nonlocal started
        if started:
            return
        started = True
        app.removeEventFilter(watcher)
        fallback.stop()
        compute = document.compute
        # Not when an edit made in the meantime has computed (or is computing) already.
        if compute.result is None and not compute.computing and compute.last_error is None:
            QTimer.singleShot(0, lambda: compute.request(background=True))

    fallback.timeout.connect(start)
    fallback.start(1000)
    app.installEventFilter(watcher)


def collect_after_first_result(document, collecting: bool) -> None:
    """Once the first result is in (torch loaded, the window built), move every object made so
    far out of the garbage collector's reach (``gc.freeze``), then let it collect again (when
    it did before ``open_window``).

    Those ~230,000 objects (modules, classes, Qt wrappers) live as long as the app, yet each
    full collection walked them all: 0.1-0.35 s with the interpreter's lock held, a stall of
    the window whenever one fell during a long compute (seen at 16,384 tokens). Frozen objects
    are still freed by reference counting; only cycles among them are never collected, and
    at this point there are next to none. A first compute that fails, or a window closed
    before its result, turns collection back on all the same."""
    import gc

    def finish(result) -> None:
        if result is not None:
            gc.freeze()
        if collecting:
            gc.enable()

    if document.result is not None:
        # Nothing to wait for, so nothing is connected (disconnecting a slot that never was
        # raises a RuntimeWarning in PySide6, an error under warnings-as-errors).
        finish(document.result)
        return

    def resume(result=None) -> None:
        for signal, slot in ((document.result_changed, resume), (document.compute.failed, failed)):
            try:
                signal.disconnect(slot)
            except (RuntimeError, TypeError):
                pass
        finish(result)

    def failed(_error: str) -> None:
        resume()

    document.result_changed.connect(resume)
    document.compute.failed.connect(failed)
    document.destroyed.connect(lambda *_: gc.enable() if collecting else None)


def run_app(args) -> int:
    """Open the window and run until it closes; the exit status (2 for a bad start)."""
    opened = open_window(args)
    if opened is None:
        return 2
    app, window = opened
    try:
        return app.exec()
    finally:
        window.document.shutdown()
