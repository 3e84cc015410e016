"""The main window: docks, menus, status bar, layout memory, panel applicability, export."""

from __future__ import annotations

import contextlib
import json

import numpy as np
import pytest
from PySide6.QtCore import QSize
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QApplication, QDockWidget, QMessageBox, QWidget

from attnexplorer.core.inputs.presets import build_preset, list_presets
from attnexplorer.ui.document import SessionDocument
from attnexplorer.ui.window import MainWindow
from attnexplorer.ui.settings import AppSettings


class Asked(Exception):
    pass


def _no_questions(window):
    """Any question the test did not expect fails loudly instead of blocking on a dialog."""
    def fail(*args, **kwargs):
        raise Asked(f"unexpected question {args!r}")

    for name in ("ask_open_path", "ask_save_path", "ask_new_choice", "ask_restore", "show_error"):
        setattr(window, name, fail)
    # pytest-qt closes the windows after each test; leftover edits are discarded, not asked.
    window.ask_unsaved = lambda: "discard"
    window.warnings = []
    window.show_warning = lambda title, text: window.warnings.append(text)


@pytest.fixture
def make_window(qtbot, isolated):
    made = []

    def make(preset="pronoun", settings=None, show=True):
        built = build_preset(preset)
        doc = SessionDocument(built.session)
        window = MainWindow(doc, settings or AppSettings())
        _no_questions(window)
        qtbot.addWidget(window)
        if show:
            window.show()
            qtbot.waitExposed(window)
        made.append(window)
        return window

    yield make
    for window in made:
        window.actions.autosaver.discard()
        window.document.shutdown()


@contextlib.contextmanager
def _watching(record):
    """Every event the application delivers while inside goes to ``record(obj, event)`` first
    (an application-wide filter that lets each event through)."""
    from PySide6.QtCore import QObject

    class Watch(QObject):
        def eventFilter(self, obj, event):
            record(obj, event)
            return False

    watch = Watch()
    QApplication.instance().installEventFilter(watch)
    try:
        yield
    finally:
        QApplication.instance().removeEventFilter(watch)


def _edit_embedding(doc, value=0.5, i=0, j=0):
    x = doc.session.embeddings.copy()
    x[i, j] = value
    doc.edit(doc.session.replace(embeddings=x), "Edit X", merge_key=("cell", "X", i, j))


@pytest.mark.parametrize("name", [p.name for p in list_presets()])
def test_window_builds_with_each_preset(make_window, name):
    window = make_window(name)
    assert "attnexplorer" not in window.windowTitle()  # Qt adds the app name; not twice
    assert name in window.windowTitle()
    assert not window.isWindowModified()
    assert set(window.docks) >= {"inputs", "controls"} | {p.kind for p in window.panels}
    for kind, dock in window.docks.items():
        assert dock.objectName() == f"dock-{kind}"
    session = window.document.session
    for panel in window.panels:
        dock = window.docks[panel.kind]
        assert dock.isHidden() == (not panel.applies_to(session)), panel.kind
    # The default layout fits a 1280×800 screen with room left for the inputs' tables (the
    # offscreen test screen itself is smaller, so the window's own size says nothing here).
    need = window.minimumSizeHint()
    assert need.width() <= 1280 - 300 and need.height() <= 800 - 60, need
    assert window.document.result is not None
    assert "compute" in window.compute_label.text() and "draw" in window.draw_label.text()
    assert window.device_label.text().startswith("cpu")


def test_edit_through_document_redraws_visible_panels(make_window):
    window = make_window("dessert")
    doc = window.document
    calls = {}
    # On screen: shown and not tabbed away behind another dock (a covered panel may wait).
    visible = [p for p in window.panels if getattr(p, "is_on_screen", p.isVisible())]
    assert visible, "some panels must be on screen"
    for panel in window.panels:
        for name in ("redraw", "redraw_selection"):
            original = getattr(panel, name)

            def counting(*args, original=original, kind=panel.kind):
                calls[kind] = calls.get(kind, 0) + 1
                return original(*args)

            setattr(panel, name, counting)
    before = doc.result
    _edit_embedding(doc, 2.0)
    assert doc.compute.wait_idle()
    assert doc.result is not before
    assert not np.array_equal(doc.result.weights, before.weights)
    for panel in visible:
        assert calls.get(panel.kind, 0) >= 1, f"{panel.kind} did not redraw"
        assert not panel.is_stale
    assert window.last_draw_ms > 0
    assert window.draw_label.text() == f"draw {window.last_draw_ms:.1f} ms"


def test_an_edit_repaints_what_changed_not_the_whole_window(make_window, qtbot):
    """The timings in the status bar change on every edit; they must not make the window lay
    itself out and repaint everything, nor may controls whose values did not change repaint."""
    from PySide6.QtCore import QEvent

    window = make_window("random")
    window.resize(1280, 800)  # the preset's sliders in view
    doc = window.document
    # The new window's first paints and an edit's first-time effects (a scroll bar appearing
    # in Explain) are done before we watch.
    # Becoming the active window repaints every widget (the palette changes), so that is done
    # first too.
    window.activateWindow()
    qtbot.waitUntil(lambda: QApplication.activeWindow() is window)
    _edit_embedding(doc, 1.0)
    assert doc.compute.wait_idle()
    qtbot.wait(200)
    painted, relaid = [], []

    def record(obj, event):
        # The area painted, not its bounding box, of widgets: on a real X server the
        # top-level QWindows get paint (expose) events of their own too.
        if event.type() == QEvent.Type.Paint and isinstance(obj, QWidget):
            painted.append((obj, sum(r.width() * r.height() for r in event.region())))
        elif event.type() == QEvent.Type.LayoutRequest and obj is window and timing_only:
            relaid.append(obj)

    timing_only = False

    def settle():
        for _ in range(3):
            QApplication.processEvents()

    with _watching(record):
        for value in (2.0, 3.0):
            _edit_embedding(doc, value)
            assert doc.compute.wait_idle()
            settle()
        # a timing that needs more digits than the last one, and nothing else
        timing_only = True
        window.last_draw_ms = 12345.6
        window.status.refresh()
        settle()
    assert painted, "the edit repainted nothing"
    area = window.width() * window.height()
    assert not [a for obj, a in painted if obj is window and a > area / 2]
    assert not relaid, "a status-bar timing made the whole window lay itself out again"
    assert window.draw_label.text() == "draw 12345.6 ms"
    sliders = list(window.controls.param_widgets.values())
    assert sliders and window.controls.isVisible()
    repainted = [obj for obj, _a in painted if any(obj is w or w.isAncestorOf(obj) for w in sliders)]
    assert not repainted, "preset controls whose values did not change repainted"


def test_the_timings_repaint_their_labels_alone(make_window, qtbot):
    # A label that does not paint its background makes Qt paint the status bar and the window
    # behind it first: two more paints on every edit.
    from PySide6.QtCore import QEvent
    from PySide6.QtWidgets import QStatusBar

    window = make_window("random")
    doc = window.document
    _edit_embedding(doc, 1.0)
    assert doc.compute.wait_idle()
    qtbot.wait(100)
    bar = window.statusBar()
    painted = []

    def record(obj, event):
        if event.type() == QEvent.Type.Paint and isinstance(obj, QWidget):
            painted.append((obj, event.region().boundingRect()))

    with _watching(record):
        for value in (2.0, 3.0):
            _edit_embedding(doc, value)
            assert doc.compute.wait_idle()
            for _ in range(3):
                QApplication.processEvents()
    labels = {id(window.compute_label), id(window.draw_label)}
    assert [obj for obj, _ in painted if id(obj) in labels], "the timings were not repainted"
    assert not [obj for obj, _ in painted if isinstance(obj, QStatusBar)]
    under_bar = bar.geometry()
    assert not [rect for obj, rect in painted if obj is window and rect.intersects(under_bar)]


def test_an_edit_that_leaves_the_title_as_it_was_does_not_set_it_again(make_window, qtbot):
    # setWindowModified, even to the value it had, made the title again and sent the window a
    # ModifiedChange event (through every application event filter) on every edit.
    from PySide6.QtCore import QEvent

    window = make_window("random")
    doc = window.document
    _edit_embedding(doc, 1.0)
    assert doc.compute.wait_idle()
    title = window.windowTitle()
    assert window.isWindowModified()
    seen = []

    def record(obj, event):
        if obj is window and event.type() in (QEvent.Type.ModifiedChange, QEvent.Type.WindowTitleChange):
            seen.append(event.type())

    with _watching(record):
        for value in (2.0, 3.0):
            _edit_embedding(doc, value, i=1)
            assert doc.compute.wait_idle()
        QApplication.processEvents()
        assert not seen and window.windowTitle() == title and window.isWindowModified()
        doc.undo_stack.setClean()  # saved: the mark goes, with the one event that says so
        QApplication.processEvents()
    assert not window.isWindowModified() and QEvent.Type.ModifiedChange in seen


def test_undo_redo_through_menu_actions_and_modified_marker(make_window):
    window = make_window("dessert")
    doc = window.document
    original = doc.session
    _edit_embedding(doc, 9.0, 1, 2)
    edited = doc.session
    assert window.isWindowModified() and window.windowTitle().endswith("[*]")
    assert window.undo_action.isEnabled()
    window.undo_action.trigger()
    assert doc.session == original
    assert not window.isWindowModified()
    window.redo_action.trigger()
    assert doc.session == edited
    assert window.isWindowModified()
    assert window.undo_action.shortcut().toString() == "Ctrl+Z"
    assert "Ctrl+Shift+Z" in [k.toString() for k in window.redo_action.shortcuts()]


def test_panels_that_do_not_apply_hide_and_come_back(make_window):
    window = make_window("pronoun")
    doc = window.document
    conditional = [p for p in window.panels if p.applies_to(doc.session) != p.applies_to(build_preset("dessert").session)]
    assert conditional, "the pronoun preset has a panel (the d = 2 scatter) that dessert does not"
    window.actions.new_session("dessert")
    for panel in conditional:
        assert window.docks[panel.kind].isHidden()
        assert not window.docks[panel.kind].toggleViewAction().isEnabled()
    window.actions.new_session("pronoun")
    for panel in conditional:
        assert not window.docks[panel.kind].isHidden()
        assert window.docks[panel.kind].toggleViewAction().isEnabled()


def test_a_panel_hidden_by_hand_stays_hidden(make_window):
    window = make_window("pronoun")
    kind = window.panels[0].kind
    window.docks[kind].toggleViewAction().trigger()
    assert window.docks[kind].isHidden()
    window.actions.new_session("dessert")
    window.actions.new_session("pronoun")
    assert window.docks[kind].isHidden()


def test_reset_layout_restores_the_default(make_window):
    window = make_window("dessert")
    inputs = window.docks["inputs"]
    default_area = window.dockWidgetArea(inputs)
    kinds = [p.kind for p in window.panels if p.applies_to(window.document.session)]
    window.docks[kinds[0]].hide()
    window.docks[kinds[-1]].setFloating(True)
    window.removeDockWidget(inputs)
    from PySide6.QtCore import Qt

    window.addDockWidget(Qt.DockWidgetArea.BottomDockWidgetArea, inputs)
    inputs.show()
    window.reset_layout_action.trigger()
    assert window.dockWidgetArea(inputs) == default_area
    for kind in kinds:
        dock = window.docks[kind]
        assert not dock.isHidden() and not dock.isFloating(), kind


def test_geometry_and_layout_are_remembered(make_window, isolated):
    window = make_window("dessert")
    hidden = window.panels[0].kind
    window.docks[hidden].hide()
    # Fewer panels on screen, so that a small size is allowed on the small offscreen screen.
    for kind in ("scaled_scores", "query", "explain"):
        window.docks[kind].hide()
    QApplication.processEvents()
    window.resize(QSize(700, 500))
    assert window.size() == QSize(700, 500)
    assert window.close()
    window2 = make_window("dessert", settings=AppSettings())
    assert window2.docks[hidden].isHidden()
    assert window2.size() == QSize(700, 500)
    # A state saved under another layout version is ignored: the default layout is used.
    settings = AppSettings()
    settings.q.setValue("window/state_version", -1)
    window3 = make_window("dessert", settings=settings)
    assert not window3.docks[hidden].isHidden()


def test_a_compute_and_a_status_message_lay_out_nothing(make_window, qtbot):
    """A message shown in the status bar or timing out, and an edit's compute, repaint what
    changed: in a 16,384-token window each layout of the window (every dock, the Query panel's
    16,384 bars) held the GUI thread 20-48 ms."""
    from PySide6.QtCore import QEvent
    from PySide6.QtWidgets import QStatusBar

    window = make_window("random")
    window.resize(1280, 800)
    doc = window.document
    window.activateWindow()
    qtbot.waitUntil(lambda: QApplication.activeWindow() is window)
    _edit_embedding(doc, 1.0)  # an edit's first-time effects are done before we watch
    assert doc.compute.wait_idle()
    qtbot.wait(200)
    bar = window.statusBar()
    laid_out = []

    def record(obj, event):
        if event.type() == QEvent.Type.LayoutRequest and isinstance(obj, (MainWindow, QDockWidget, QStatusBar)):
            laid_out.append(f"{type(obj).__name__} {obj.objectName()}")

    with _watching(record):
        with qtbot.waitSignal(doc.result_changed, timeout=20000):
            _edit_embedding(doc, 2.0)
        assert doc.compute.wait_idle()
        window.status.show_message("x", 1)  # up for 50 ms
        assert bar.currentMessage() == "x"
        qtbot.waitUntil(lambda: window.status.message_label.text() == "x")
        qtbot.waitUntil(lambda: bar.currentMessage() == "" and window.status.message_label.text() == "")
        for _ in range(3):
            QApplication.processEvents()
    assert not laid_out, laid_out
    # a message that needs more lines still makes room for them
    label = window.status.message_label
    one_line = label.height()
    window.status.show_message("a long reason " * 40)
    qtbot.waitUntil(lambda: label.height() > 1.5 * one_line)
    assert label.height() >= label.lines_height(label.width())


def test_refusals_show_in_the_status_bar(make_window):
    window = make_window("dessert")
    window.document.refuse("W_q[0, 1]: 'abc' is not a number")
    assert window.statusBar().currentMessage() == "W_q[0, 1]: 'abc' is not a number"


@pytest.mark.parametrize("width", [1280, 1920])
def test_a_long_refusal_is_shown_whole_in_the_status_bar(make_window, qtbot, width):
    # The bar's one line cut a reason off at its permanent labels ("…the keys are ano").
    window = make_window("dessert")
    window.resize(width, 800)
    reason = ("mask: the custom mask leaves query 'she' with no key to attend to, so its weights would be "
              "undefined; unblock at least one key in its row (the keys are another token, and the mask "
              "is applied before the softmax)")
    window.document.refuse(reason)
    label = window.status.message_label
    qtbot.waitUntil(lambda: label.isVisible() and label.height() >= label.lines_height(label.width()))
    assert label.text() == reason and label.toolTip() == reason
    if width == 1280:  # it did need two lines there
        assert label.lines_height(label.width()) > 1.5 * label.fontMetrics().height()
    # every line of it lies inside the window, left of the timings
    assert label.mapTo(window, label.rect().bottomRight()).y() <= window.height()
    assert label.geometry().right() < window.compute_label.geometry().left()
    assert window.statusBar().currentMessage() == reason


def test_compute_failure_falls_back_to_cpu_and_keeps_the_tables(make_window, qtbot):
    window = make_window("dessert")
    doc = window.document
    session = doc.session
    with qtbot.waitSignal(doc.compute.failed, timeout=10000) as failed:
        doc.compute.set_options(device="cuda:7")  # never available on this machine
    assert doc.compute.wait_idle()
    assert "falling back to the CPU" in failed.args[0]
    assert doc.compute.device == "cpu"
    assert doc.session == session
    assert doc.result is not None and doc.result.device == "cpu"
    assert window.warnings and "cuda:7" in window.warnings[-1]
    assert "cuda:7" in window.statusBar().currentMessage()
    assert window.device_label.text().startswith("cpu")


def test_menus_hold_the_documented_actions(make_window):
    window = make_window("dessert")
    menus = {a.text().replace("&", ""): a.menu() for a in window.menuBar().actions()}
    assert list(menus) == ["File", "Edit", "Presets", "View", "Help"]
    texts = lambda m: [a.text().replace("&", "") for a in m.actions() if not a.isSeparator()]
    assert {"New…", "Open…", "Open Recent", "Save", "Save As…", "Export figure…", "Export matrices…",
            "Copy as PyTorch code", "Quit"} <= set(texts(menus["File"]))
    assert {p.title for p in list_presets()} <= set(texts(menus["Presets"]))
    view = texts(menus["View"])
    assert "Reset layout" in view
    for dock in window.findChildren(QDockWidget):
        assert dock.toggleViewAction().text() in view
    # Dock tabs carry the panels' short titles (whole, not cut); the View menu the full ones.
    for panel in window.panels:
        dock = window.docks[panel.kind]
        assert dock.windowTitle() == getattr(panel, "short_title", panel.title)
        assert dock.toggleViewAction().text() == panel.title
    shortcuts = {a.text().replace("&", ""): a.shortcut().toString() for a in window.findChildren(type(window.quit_action))}
    assert shortcuts["New…"] == "Ctrl+N" and shortcuts["Open…"] == "Ctrl+O"
    assert shortcuts["Save"] == "Ctrl+S" and shortcuts["Save As…"] == "Ctrl+Shift+S"
    assert shortcuts["Quit"] == "Ctrl+Q"


def test_help_texts_open_without_blocking(make_window):
    window = make_window("dessert")
    for action, needle in ((window.how_to_read_action, "pronoun"), (window.shortcuts_action, "Ctrl+S"),
                           (window.about_action, "attnexplorer")):
        action.trigger()
        boxes = [b for b in window.findChildren(QMessageBox) if b.isVisible()]
        assert len(boxes) == 1  # it opened and returned: the window is not blocked
        box = boxes[0]
        assert needle in box.text()
        box.close()


def test_preset_menu_asks_before_dropping_unsaved_work(make_window):
    window = make_window("dessert")
    _edit_embedding(window.document, 4.0)
    edited = window.document.session
    window.ask_unsaved = lambda: "cancel"
    window.preset_actions["sine"].trigger()
    assert window.document.session == edited
    window.ask_unsaved = lambda: "discard"
    window.preset_actions["sine"].trigger()
    assert window.document.session.preset.name == "sine"
    assert not window.isWindowModified()


def test_copy_as_pytorch_code_puts_a_snippet_on_the_clipboard(make_window):
    window = make_window("dessert")
    window.copy_torch_action.trigger()
    text = QGuiApplication.clipboard().text()
    assert "torch" in text and "softmax" in text


def test_copy_matrix_as_tsv(make_window):
    window = make_window("dessert")
    window.copy_matrix_tsv("weights_head0")
    rows = [list(map(float, line.split("\t"))) for line in QGuiApplication.clipboard().text().splitlines()]
    np.testing.assert_array_equal(np.array(rows), window.document.result.weights[0])


# -- Export matrices -------------------------------------------------------------------------

def _export(window, choice, fmt, path):
    dialog = window.export_matrices()
    dialog.set_choice(choice)
    dialog.set_format(fmt)
    dialog.set_path(path)
    dialog.accept()
    assert dialog.result() == dialog.DialogCode.Accepted, dialog.error_label.text()
    return dialog.written


def test_export_one_matrix_in_every_format(make_window, tmp_path):
    window = make_window("dessert")
    result, tokens = window.document.result, window.document.session.tokens
    weights = result.weights[0]
    (csv_path,) = _export(window, "weights_head0", "csv", tmp_path / "w.csv")
    lines = csv_path.read_text().splitlines()
    assert lines[0].split(",")[1:] == list(tokens)
    assert [line.split(",")[0] for line in lines[1:]] == list(tokens)
    np.testing.assert_allclose([[float(c) for c in line.split(",")[1:]] for line in lines[1:]], weights, rtol=1e-12)
    (npy_path,) = _export(window, "weights_head0", "npy", tmp_path / "w.npy")
    np.testing.assert_array_equal(np.load(npy_path, allow_pickle=False), weights)
    (npz_path,) = _export(window, "Q_head0", "npz", tmp_path / "q.npz")
    with np.load(npz_path, allow_pickle=False) as z:
        np.testing.assert_array_equal(z["Q_head0"], result.Q[0])
    (json_path,) = _export(window, "output", "json", tmp_path / "o.json")
    assert json_path.exists() and json.loads(json_path.read_text())
    (tex_path,) = _export(window, "X", "tex", tmp_path / "x.tex")
    assert "tabular" in tex_path.read_text() and "Life" in tex_path.read_text()
    (md_path,) = _export(window, "X", "md", tmp_path / "x.md")
    assert md_path.read_text().count("|") > 10 and "dessert" in md_path.read_text()


def test_export_all_matrices(make_window, tmp_path):
    window = make_window("dessert")
    result = window.document.result
    (npz_path,) = _export(window, "all", "npz", tmp_path / "attention.npz")
    with np.load(npz_path, allow_pickle=False) as z:
        assert {"tokens", "X", "W_q", "W_k", "W_v", "Q", "K", "V", "scores", "scaled_scores", "mask",
                "weights", "head_outputs", "output"} <= set(z.files)
        np.testing.assert_array_equal(z["weights"], result.weights)
    (json_path,) = _export(window, "all", "json", tmp_path / "attention.json")
    assert np.allclose(json.loads(json_path.read_text())["weights"], result.weights)
    written = _export(window, "all", "csv", tmp_path / "csv")
    assert (tmp_path / "csv" / "weights_head0.csv") in written
    written = _export(window, "all", "npy", tmp_path / "npy")
    np.testing.assert_array_equal(np.load(tmp_path / "npy" / "scores.npy"), result.scores)


def test_export_failure_keeps_the_dialog_open(make_window, tmp_path):
    window = make_window("dessert")
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    dialog = window.export_matrices()
    dialog.set_choice("weights_head0")
    dialog.set_format("csv")
    dialog.set_path(blocker / "w.csv")
    dialog.accept()
    assert dialog.isVisible()
    assert "w.csv" in dialog.error_label.text()
    dialog.reject()


# -- large sessions: compute only what the on-screen panels read -----------------------------
def _on_screen_needs(window):
    needs = set()
    for panel in window.panels:
        if panel.kind in window.on_screen:
            needs |= set(panel.needs)
    return needs


def test_large_session_keeps_only_what_on_screen_panels_need(make_window, monkeypatch):
    import attnexplorer.app.compute as runner_module
    from attnexplorer.core.compute.engine import INTERMEDIATES, STAGE_INTERMEDIATES

    monkeypatch.setattr(runner_module, "LARGE_CELLS", 0)  # every session counts as large
    window = make_window("dessert")
    doc = window.document
    assert doc.compute.wait_idle()
    on_screen = {k for k, d in window.docks.items() if k in {p.kind for p in window.panels}
                 and not d.isHidden() and not d.visibleRegion().isEmpty()}
    assert window.on_screen == on_screen and on_screen
    needs = _on_screen_needs(window)
    # (a stage's intermediate, such as the Query panel's sink share, is kept only when the
    # session has the stage)
    assert doc.compute.needs == needs and needs - set(STAGE_INTERMEDIATES) < set(INTERMEDIATES)
    # The first compute already kept only that: no full result was made before the show.
    for name in INTERMEDIATES:
        assert (getattr(doc.result, name) is not None) == (name in needs), name
    # Edits keep honouring it.
    _edit_embedding(doc, 1.5)
    assert doc.compute.wait_idle()
    for name in INTERMEDIATES:
        assert (getattr(doc.result, name) is not None) == (name in needs), name


def test_hidden_panel_coming_on_screen_recomputes_with_its_needs(make_window, monkeypatch, qtbot):
    import attnexplorer.app.compute as runner_module

    monkeypatch.setattr(runner_module, "LARGE_CELLS", 0)
    window = make_window("dessert")
    doc = window.document
    assert doc.compute.wait_idle()
    output = next(p for p in window.panels if p.kind == "output")
    assert "output" not in window.on_screen and doc.result.output is None
    results = []
    doc.result_changed.connect(results.append)
    window.docks["output"].raise_()  # bring its tab to the front
    qtbot.waitUntil(lambda: "output" in window.on_screen)
    qtbot.waitUntil(lambda: bool(results))
    assert doc.compute.wait_idle()
    assert set(output.needs) <= doc.compute.needs
    for name in output.needs:
        assert getattr(doc.result, name) is not None, name
    qtbot.waitUntil(lambda: not output.is_stale)
    # It drew the result that holds what it reads: its heatmaps hold that result's matrices.
    head = doc.selection.current.head
    assert np.array_equal(output.head_view.data, doc.result.head_outputs[head])


def test_exports_get_every_intermediate_of_a_partial_result(make_window, monkeypatch):
    import attnexplorer.app.compute as runner_module
    from attnexplorer.core.compute.engine import INTERMEDIATES
    from attnexplorer.ui.exports.matrix_export import matrices_by_name

    monkeypatch.setattr(runner_module, "LARGE_CELLS", 0)
    window = make_window("dessert")
    doc = window.document
    assert doc.compute.wait_idle()
    partial = doc.result
    assert any(getattr(partial, name) is None for name in INTERMEDIATES)
    full = doc.compute.full_result()
    assert all(getattr(full, name) is not None for name in INTERMEDIATES)
    np.testing.assert_allclose(full.weights, partial.weights if partial.weights is not None else full.weights)
    assert doc.result is partial  # full_result() computes for the caller, publishes nothing
    names = list(matrices_by_name(doc))
    assert any("output" in n.lower() for n in names) and len(names) >= 6
    # A figure export may draw panels that are not on screen: complete() publishes it all.
    assert doc.compute.complete() is doc.result
    assert all(getattr(doc.result, name) is not None for name in INTERMEDIATES)


def test_small_session_on_the_cpu_keeps_everything(make_window):
    from attnexplorer.core.compute.engine import INTERMEDIATES

    window = make_window("dessert")
    doc = window.document
    assert doc.compute.wait_idle()
    assert doc.compute.needs is not None and doc.compute.keep_for() is None  # host arrays share memory: free
    assert all(getattr(doc.result, name) is not None for name in INTERMEDIATES)


def test_first_draw_time_is_shown_before_any_edit(make_window):
    window = make_window("pronoun")
    assert window.last_draw_ms > 0
    assert window.draw_label.text() == f"draw {window.last_draw_ms:.1f} ms"


def test_a_preset_opens_on_the_query_it_carries(qtbot):
    from attnexplorer.core.inputs.presets import build_preset
    from attnexplorer.ui.document import SessionDocument

    built = build_preset("pronoun")
    doc = SessionDocument(built.session)
    try:
        assert (doc.selection.current.query, doc.selection.current.key) == (6, 1)
        doc.selection.set(query=0, key=None)
        doc.set_session(build_preset("dessert").session)
        assert (doc.selection.current.query, doc.selection.current.key) == (1, None)
    finally:
        doc.shutdown()


def test_a_document_dropped_without_shutdown_stops_its_thread(qtbot):
    """A forgotten document (or one collected after its window closed) stops its compute
    thread (a thread left running would keep computing for nobody, and hold up the exit)."""
    import gc
    import weakref

    from attnexplorer.core.inputs.presets import build_preset
    from attnexplorer.ui.document import SessionDocument

    doc = SessionDocument(build_preset("random", {"n": 600}).session)
    thread = doc.compute.worker_thread  # n = 600 is computed on the worker
    assert thread is not None and thread.is_alive()
    gone = weakref.ref(doc)
    del doc
    gc.collect()
    assert gone() is None
    assert not thread.is_alive()


def test_matrix_dialog_remembers_and_copies_in_the_chosen_format(make_window, tmp_path):
    window = make_window("dessert")
    dialog = window.export_matrices()
    assert dialog.path_edit.text()  # never an empty field to start from
    dialog.set_choice("weights_head0")
    dialog.set_format("tex")
    assert dialog.copy_button.text() == "Copy as LaTeX"
    dialog.copy_button.click()
    assert "tabular" in QGuiApplication.clipboard().text()
    dialog.set_format("npy")
    assert dialog.copy_button.text() == "Copy as TSV"  # a binary format copies as text
    dialog.set_format("md")
    dialog.set_path(tmp_path / "w.md")
    dialog.accept()
    assert dialog.written == [tmp_path / "w.md"]
    again = window.export_matrices()
    assert (again.choice, again.fmt, again.path_edit.text()) == ("weights_head0", "md", str(tmp_path / "w.md"))
    assert again.copy_button.text() == "Copy as Markdown"
    again.reject()


def test_numbers_in_cells_can_be_fixed_decimals_and_are_remembered(make_window):
    window = make_window("dessert")
    weights = next(p for p in window.panels if p.kind == "weights")
    window.document.compute.wait_idle(60)
    QApplication.processEvents()
    window.set_number_format("fixed4")
    texts = weights.view.cell_texts()
    assert texts, "the weights panel writes its cells at the default size"
    assert texts[(1, 1)] == "0.6870" and texts[(1, 0)] == "0.0386"  # the walkthrough's numbers
    assert all(len(t.split(".")[1]) == 4 for t in texts.values())
    assert AppSettings().number_format() == "fixed4"
    assert window.number_format_actions["fixed4"].isChecked()
    window.set_number_format("auto")
    assert not any(t.startswith((".", "-.")) for t in weights.view.cell_texts().values())


def test_view_menu_colours_the_weights_up_to_the_largest_weight(make_window):
    window = make_window("dessert")
    weights = next(p for p in window.panels if p.kind == "weights")
    window.document.compute.wait_idle(60)
    QApplication.processEvents()
    window.auto_weight_colors_action.trigger()
    assert weights.color_range == "auto" and weights.view.levels[1] < 1.0
    assert "(auto)" in weights.heading.text
    window.auto_weight_colors_action.trigger()
    assert weights.color_range == "unit" and weights.view.levels == (0.0, 1.0)
