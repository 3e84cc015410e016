"""Tables with room: at 1280×800 every preset's tokens and weight rows show without scrolling,
the window opens at the screen's size, and on a wide screen the plots get the width."""

from __future__ import annotations

import pytest
from PySide6.QtGui import QGuiApplication
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QApplication, QSlider

from attnexplorer.core.inputs.presets import build_preset
from attnexplorer.ui.document import SessionDocument
from attnexplorer.ui.window import INPUTS_WIDTH, MainWindow
from attnexplorer.ui.settings import AppSettings
from attnexplorer.ui.inputs.table_view import MatrixTableView


@pytest.fixture
def window_at(qtbot, isolated):
    docs = []

    def make(preset, size):
        built = build_preset(preset)
        doc = SessionDocument(built.session)
        docs.append(doc)
        window = MainWindow(doc, AppSettings())
        window.ask_unsaved = lambda: "discard"
        qtbot.addWidget(window)
        window.resize(*size)  # a 1280×800 screen less the window frame, as _default_size gives
        window.show()
        qtbot.waitExposed(window)
        # Keys and focus go to the active window: on an X server with no window manager (Xvfb in CI)
        # nothing activates a new window, so the test does, as a click on it would
        window.activateWindow()
        qtbot.waitActive(window)
        doc.compute.wait_idle(60)
        qtbot.wait(100)  # the default dock sizes are applied just after the first show
        QApplication.processEvents()
        return window

    yield make
    for doc in docs:
        doc.shutdown()


def rows_shown(view: MatrixTableView) -> tuple[int, int]:
    """(first row in view, how many rows are wholly in view)."""
    n = view.model().rowCount()
    height = view.viewport().height()
    whole = [r for r in range(n) if 0 <= view.rowViewportPosition(r) and
             view.rowViewportPosition(r) + view.rowHeight(r) <= height]
    return (whole[0] if whole else -1), len(whole)


@pytest.mark.parametrize("preset", ["pronoun", "dessert", "random", "sine"])
def test_every_token_and_weight_row_shows_at_1280x800(window_at, preset):
    window = window_at(preset, (1260, 760))
    session = window.document.session
    tokens = window.inputs.tokens
    wanted = min(session.n, MatrixTableView.ROWS_WANTED)  # sine's 60 samples: a dozen, then scroll
    for view in (tokens.token_view, tokens.embedding_view):
        first, count = rows_shown(view)
        assert count >= wanted, (preset, view.model(), count, wanted)
        if session.n <= MatrixTableView.ROWS_WANTED:
            assert first == 0  # nothing scrolled away
    window.inputs.setCurrentWidget(window.inputs.weights)
    QApplication.processEvents()
    for name, table in window.inputs.weights.tables.items():
        first, count = rows_shown(table.view)
        assert (first, count) == (0, session.d), (preset, name, first, count)


def test_the_window_opens_at_the_screens_size(window_at, qtbot, tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNEXPLORER_CONFIG_DIR", str(tmp_path / "fresh"))
    built = build_preset("pronoun")
    doc = SessionDocument(built.session)
    window = MainWindow(doc, AppSettings())
    window.ask_unsaved = lambda: "discard"
    qtbot.addWidget(window)
    avail = (window.screen() or QGuiApplication.primaryScreen()).availableGeometry()
    assert (window.width(), window.height()) == (max(avail.width() - 20, 640), max(avail.height() - 40, 480))
    doc.shutdown()


def test_on_a_wide_screen_the_plots_get_the_width(window_at):
    window = window_at("pronoun", (1900, 1040))
    inputs = window.docks["inputs"].width()
    assert INPUTS_WIDTH[0] - 20 <= inputs <= INPUTS_WIDTH[1] + 20, inputs
    weights = window.docks["weights"].width()
    assert weights > inputs * 1.3, (weights, inputs)


@pytest.mark.parametrize("size", [(1280, 770), (1920, 1050)])
def test_the_fit_tab_brought_forward_shows_all_its_controls_and_its_plots(qtbot, window_at, size):
    # At 1280×800 the Fit dock was a third of the left column's height and wider than it: the
    # steps box and Stop were cut off behind a horizontal scroll bar and the loss curve was a
    # few pixels high.
    window = window_at("pronoun", size)
    fit = window.docks["fit"]
    fit.raise_()
    qtbot.waitUntil(lambda: fit.height() >= 400, timeout=5000)
    scroll = fit.widget()
    QApplication.processEvents()
    assert not scroll.horizontalScrollBar().isVisible()
    dock = scroll.widget()
    for widget in (dock.controls.steps_spin, dock.controls.stop_button, dock.controls.loss_plot, dock.editor.canvas):
        assert widget.isVisible()
        right = widget.mapTo(scroll.viewport(), widget.rect().bottomRight())
        assert 0 <= right.x() <= scroll.viewport().width() and 0 <= right.y() <= scroll.viewport().height()
    assert dock.controls.loss_plot.height() >= 130
    # The inputs keep part of the column, and the Controls tab raised again leaves the sizes.
    assert window.docks["inputs"].height() >= 200


@pytest.mark.parametrize("preset, params", [("pronoun", {}), ("random", {"d": 12, "heads": 12})])
def test_one_row_stage_tables_show_their_row_and_take_typing_at_1280x800(window_at, qtbot, preset, params):
    # The ALiBi slopes and the norm's weight and bias showed only their column numbers: their
    # height was fixed when the view was made (17 px left for a 20 px row) and a horizontal
    # scroll bar (12 columns) covered the rest.
    from test_stage_inputs import type_into

    window = window_at(preset, (1260, 760))
    if params:
        window.document.set_session(build_preset(preset, params).session)
    stages = window.inputs.stages
    window.inputs.setCurrentWidget(stages)
    stages.positions_combo.setCurrentIndex(stages.positions_combo.findData("alibi"))
    stages.norm_combo.setCurrentIndex(stages.norm_combo.findData("layer"))
    QApplication.processEvents()
    for table, value in ((stages.slopes_table, 0.125), (stages.norm_weight, 2.0), (stages.norm_bias, 0.5)):
        view = table.view
        view.scrollTo(view.model().index(0, 0))
        QApplication.processEvents()
        assert view.isVisible()
        bar = view.horizontalScrollBar()
        room = view.viewport().height()
        assert view.rowViewportPosition(0) >= 0 and view.rowViewportPosition(0) + view.rowHeight(0) <= room, \
            (table.title.text(), room, view.rowHeight(0), bar.isVisible())
        type_into(qtbot, view, 0, 0, str(value))
    session = window.document.session
    assert session.positions.slopes[0] == 0.125
    assert session.norm.weight[0] == 2.0 and session.norm.bias[0] == 0.5


def _wheel(widget, steps: int = -1) -> None:
    """A wheel turn over the middle of ``widget`` (negative: towards the user, scrolling down)."""
    from PySide6.QtCore import QPoint, QPointF
    from PySide6.QtGui import QWheelEvent

    centre = QPointF(widget.rect().center())
    event = QWheelEvent(centre, QPointF(widget.mapToGlobal(centre.toPoint())), QPoint(0, 0), QPoint(0, 120 * steps),
                        Qt.MouseButton.NoButton, Qt.KeyboardModifier.NoModifier, Qt.ScrollPhase.NoScrollPhase, False)
    QApplication.sendEvent(widget, event)


def test_the_wheel_scrolls_the_inputs_unless_a_control_has_focus_and_the_tabs_stay(window_at, qtbot):
    # A wheel turn meant to scroll the page changed the K/V heads (2 → 1, an undo step), and
    # the dock's tabs scrolled out of view with the page.
    window = window_at("random", (1260, 760))
    import numpy as np

    from attnexplorer.core.inputs.stages import Norm, Positions

    tall = build_preset("random", {"heads": 4}).session.replace(
        w_out=np.ones((12, 4)), norm=Norm(kind="layer"), positions=Positions(kind="alibi"))
    window.document.set_session(tall)
    inputs = window.inputs
    stages = inputs.stages
    inputs.setCurrentWidget(stages)
    assert inputs.currentWidget() is stages
    QApplication.processEvents()
    spin = stages.kv_spin
    area = stages.parentWidget().parentWidget()  # the page's scroll area (viewport, then area)
    bar = area.verticalScrollBar()
    assert bar.maximum() > 0, "the Stages page must be taller than the dock for this test"
    spin.setFocus()
    window.setFocus()  # the spin box has no focus
    QApplication.processEvents()
    area.ensureWidgetVisible(spin)
    QApplication.processEvents()
    tabs_at = inputs.tabBar().mapTo(window, inputs.tabBar().rect().topLeft())
    before, steps, scrolled = spin.value(), window.document.undo_stack.count(), bar.value()
    _wheel(spin, -1 if bar.value() < bar.maximum() else 1)
    assert spin.value() == before and window.document.undo_stack.count() == steps
    assert bar.value() != scrolled  # the page scrolled instead
    assert inputs.tabBar().mapTo(window, inputs.tabBar().rect().topLeft()) == tabs_at
    assert inputs.tabBar().isVisible()
    # The combo boxes and the controls' sliders pass the wheel on too.
    combo = stages.positions_combo
    kind = combo.currentIndex()
    _wheel(combo)
    assert combo.currentIndex() == kind
    slider = window.controls.findChild(QSlider)
    position = slider.value()
    _wheel(slider, 1)
    assert slider.value() == position
    # A control the user clicked into takes the wheel (W_o's width: 4 → 3).
    width = stages.d_out_spin
    width.setFocus()
    qtbot.waitUntil(width.hasFocus)
    _wheel(width, -1)
    assert width.value() == 3 and window.document.session.d_out == 3


@pytest.mark.parametrize("size", [(1260, 760), (1900, 1040)])
def test_with_w_o_the_outputs_three_heatmaps_fit_and_read(window_at, size):
    # At 1280 px the third heatmap (concat · W_o) was cut off at the panel's right edge, the
    # subtitles shrank to half size and the concatenation's 12 labels were unreadable.
    import numpy as np

    window = window_at("random", size)
    window.document.set_session(build_preset("random", {"heads": 4}).session.replace(
        w_out=np.linspace(-1, 1, 48).reshape(12, 4)))
    window.docks["output"].raise_()
    assert window.document.compute.wait_idle(30)
    panel = next(p for p in window.panels if p.kind == "output")
    QApplication.processEvents()
    views = panel.views()
    assert len(views) == 3
    canvas = panel.canvas.scene().sceneRect()
    for view in views:
        box = view.sceneBoundingRect()
        assert box.left() >= canvas.left() - 1 and box.right() <= canvas.right() + 1, (view.titleLabel.text, box, canvas)
        assert box.bottom() <= canvas.bottom() + 1
        assert view.vb.width() >= 60 and view.vb.height() >= 40
        assert view.titleLabel.item.scale() >= 0.9, view.titleLabel.text  # the subtitle at (nearly) full size
    plan = panel.concat_view.col_axis.plan
    assert plan.step == 1 and plan.font_px >= 9, plan  # all twelve "h0v0 … h3v2" written, readable


def test_a_window_maximised_after_its_first_show_gives_the_plots_the_width(window_at, qtbot):
    # A window manager maximising the window after its first show left the Inputs 947 of
    # 1,900 px: Qt shares extra width out to every column alike.
    window = window_at("pronoun", (1260, 760))
    inputs = window.docks["inputs"]
    window.resize(1900, 1040)
    qtbot.waitUntil(lambda: inputs.width() <= INPUTS_WIDTH[1] + 20, timeout=3000)
    assert window.docks["weights"].width() > inputs.width() * 1.3
    window.resize(1260, 760)  # and back: the tables keep their room
    qtbot.waitUntil(lambda: inputs.width() >= INPUTS_WIDTH[0] - 20, timeout=3000)


@pytest.mark.parametrize("size", [(1260, 760), (1280, 800), (1900, 1040)])
def test_the_rope_planes_title_and_the_angle_tables_do_not_overlap(window_at, size):
    # "dims 0, 2: dashed before, solid after" on one line ran into "angle = pos · ω (rad)".
    # The Inputs as wide as a window last closed at 1920 px leaves them (the panel narrower).
    window = window_at("rope", size)
    window.resizeDocks([window.docks["inputs"]], [int(0.38 * size[0])], Qt.Orientation.Horizontal)
    panel = next(p for p in window.panels if p.kind == "rope")
    QApplication.processEvents()
    plane = panel.plane.titleLabel.item.sceneBoundingRect()
    table = panel.angles.titleLabel.item.sceneBoundingRect()
    assert plane.width() > 0 and table.width() > 0
    assert not plane.intersects(table), (plane, table)


@pytest.mark.parametrize("size", [(1260, 760), (1900, 1040)])
def test_outputs_on_one_row_take_the_panels_height(window_at, size):
    # The second row (the concatenation's when three heatmaps do not fit a row) kept its
    # stretch while empty: the head's output and the concatenation drew over the top half only.
    window = window_at("random", size)
    window.docks["output"].raise_()
    panel = next(p for p in window.panels if p.kind == "output")
    QApplication.processEvents()
    bottom = panel.figure.layout.geometry().bottom()
    assert len(panel.views()) == 2
    for view in panel.views():
        assert view.sceneBoundingRect().bottom() >= bottom - 10, (view.sceneBoundingRect(), bottom)


def test_tabbed_docks_write_their_titles_whole_at_1280x800(window_at):
    # With QK-norm, soft-cap and sinks six panels share the middle column's tabs; Qt elided
    # their titles to "Wei…", "Q · K…", "QK-n…", "Raw sc…", "Cap and s…", "Out…".
    import numpy as np
    from PySide6.QtWidgets import QTabBar

    from attnexplorer.core.inputs.stages import QKNorm

    window = window_at("pronoun", (1280, 800))
    session = window.document.session
    window.document.set_session(session.replace(qk_norm=QKNorm("rms"), softcap=2.0,
                                                sinks=np.zeros(session.heads)))
    assert window.document.compute.wait_idle(30)
    QApplication.processEvents()
    bars = [b for b in window.findChildren(QTabBar) if b.parent() is window and b.isVisible()]
    titles = [b.tabText(i) for b in bars for i in range(b.count())]
    assert "Cap and sinks" in titles and "QK-norm" in titles
    for bar in bars:   # each tab as wide as its whole title asks (the bar scrolls instead)
        for i in range(bar.count()):
            assert bar.tabRect(i).width() >= bar.tabSizeHint(i).width(), bar.tabText(i)
