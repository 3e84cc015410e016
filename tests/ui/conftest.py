"""Fixtures the window tests share (a test module's own fixture of the same name wins)."""

import pytest

from attnexplorer.core.inputs.presets import build_preset
from attnexplorer.ui.document import SessionDocument


@pytest.fixture
def doc(qtbot):
    """The dessert preset's document, shut down after the test."""
    document = SessionDocument(build_preset("dessert").session)
    yield document
    document.shutdown()


@pytest.fixture
def messages(doc):
    """Every message the document says (the status line's), in order."""
    seen = []
    doc.message.connect(seen.append)
    return seen


@pytest.fixture
def lesson_window(qtbot, tmp_path, monkeypatch):
    """A 1280×800 main window, shown and active, for teaching a lesson in: its error dialogs
    are collected in ``window.errors``, the unsaved-work question answers "discard", and a
    lesson still running at the end is ended."""
    from attnexplorer.ui.settings import AppSettings
    from attnexplorer.ui.window import MainWindow

    monkeypatch.setenv("ATTNEXPLORER_DATA_DIR", str(tmp_path / "data"))
    doc = SessionDocument(build_preset("dessert").session)
    window = MainWindow(doc, AppSettings())
    window.errors = []
    window.show_error = lambda title, text: window.errors.append(text)
    window.ask_unsaved = lambda: "discard"
    qtbot.addWidget(window)
    window.resize(1280, 800)
    window.show()
    qtbot.waitExposed(window)
    # Keys and focus go to the active window: on an X server with no window manager (Xvfb in CI)
    # nothing activates a new window, so the test does, as a click on it would
    window.activateWindow()
    qtbot.waitActive(window)
    yield window
    if window.lesson_started():
        window.lesson.end()
    window.actions.autosaver.discard()
    doc.shutdown()
