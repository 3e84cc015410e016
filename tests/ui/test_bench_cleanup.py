"""Each window a bench row opens is gone, with what it held, once the row closes it (the
fit's GUI block grew after the bench's earlier rows: their closed windows lived on hidden, and
the next window's ``gc.freeze`` froze them out of the collector's reach)."""

from __future__ import annotations

import gc

import shiboken6
from PySide6.QtWidgets import QApplication

from attnexplorer.core.inputs.presets import build_preset
from ui_helpers import close_window, open_window


def _main_windows() -> list:
    return [w for w in QApplication.topLevelWidgets() if type(w).__name__ == "MainWindow"]


def test_a_closed_bench_window_is_deleted_at_once(qapp):
    # Another test on the same worker may have left a window that this close deletes too:
    # this test's own window is what it follows.
    before = len(_main_windows())
    document, window = open_window(build_preset("pronoun").session)
    document.compute.wait_idle(60.0)
    assert window in _main_windows()
    close_window(document, window)
    # No event loop has run since: the window must not wait for one to be deleted.
    assert not shiboken6.isValid(window)
    assert len(_main_windows()) <= before


def test_windows_opened_one_after_another_do_not_pile_up(qapp):
    """The third window is opened beside no other, and the objects frozen with it are about
    those of the first, not three windows' worth."""
    # Followed by this test's own windows: another test on the same worker may have left one,
    # which a close here may delete too.
    before = len(_main_windows())
    frozen = []
    for _ in range(3):
        document, window = open_window(build_preset("pronoun").session)
        document.compute.wait_idle(60.0)
        frozen.append(gc.get_freeze_count())
        assert window in _main_windows() and len(_main_windows()) <= before + 1
        close_window(document, window)
        assert not shiboken6.isValid(window)
    assert len(_main_windows()) <= before
    assert frozen[2] - frozen[1] < 2_000, frozen  # one window and its plots: about 30,000


def test_a_closed_window_frees_its_document_and_plots(qapp):
    """Nothing outside the window keeps its parts: a lambda connected to the document's
    signals (the Fit dock's target editor, the compute box) kept the closed window's document,
    editor and plots alive, 14 menus and 2 plot views a window."""
    import weakref

    import pyqtgraph as pg

    gc.collect()
    views_before = len(pg.ViewBox.AllViews)
    document, window = open_window(build_preset("pronoun").session)
    document.compute.wait_idle(60.0)
    held = [weakref.ref(document), weakref.ref(window.fit.editor), weakref.ref(window.controls)]
    close_window(document, window)
    del document, window
    gc.collect()
    assert [ref() for ref in held] == [None, None, None]
    assert len(pg.ViewBox.AllViews) == views_before
