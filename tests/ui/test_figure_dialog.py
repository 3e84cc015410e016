"""The Export figure dialog and the panel context-menu entry, driven without a file chooser."""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QImage
from PySide6.QtWidgets import QMainWindow, QVBoxLayout, QWidget

from attnexplorer.core.inputs.session import Session
from attnexplorer.ui.exports import figure_dialog
from attnexplorer.ui.document import SessionDocument
from attnexplorer.ui.exports.figure_dialog import DASHBOARD, FigureExportDialog, install_export_menu
from attnexplorer.ui.panels.base import Panel

TOKENS = ("a", "b", "c", "d")


class PlotPanel(Panel):
    """Shaped like the real panels: a layout widget with a titled heatmap and a colour bar."""

    def __init__(self, document, kind, title):
        self.kind, self.title = kind, title
        super().__init__(document)
        self.canvas = pg.GraphicsLayoutWidget(self)
        self.canvas.setBackground("w")
        plot = self.canvas.addPlot(title=title)
        plot.setMenuEnabled(False)  # as the real matrix panels do
        image = pg.ImageItem(axisOrder="row-major")
        image.setImage(np.linspace(0, 1, 16).reshape(4, 4), autoLevels=False, levels=(0, 1))
        plot.addItem(image)
        plot.getAxis("left").setTicks([[(i + 0.5, t) for i, t in enumerate(TOKENS)]])
        bar = pg.ColorBarItem(colorMap=pg.colormap.get("viridis"), values=(0, 1), interactive=False)
        bar.setImageItem(image, insert_in=plot)
        QVBoxLayout(self).addWidget(self.canvas)

    def figure_item(self):
        return self.canvas.ci

    def redraw(self):
        pass


class TextPanel(Panel):
    kind, title = "explain", "Explain"

    def redraw(self):
        pass


@pytest.fixture
def setup(qtbot):
    rng = np.random.default_rng(1)
    doc = SessionDocument(Session(tokens=TOKENS, embeddings=rng.normal(size=(4, 3)),
                                  w_query=rng.normal(size=(1, 3, 2)), w_key=rng.normal(size=(1, 3, 2)),
                                  w_value=rng.normal(size=(1, 3, 2))))
    window = QMainWindow()
    qtbot.addWidget(window)
    panels = [PlotPanel(doc, "weights", "Attention weights"), PlotPanel(doc, "scores", "Scores"), TextPanel(doc)]
    for p in panels:
        p.resize(300, 240)
        p.show()
        qtbot.addWidget(p)
    yield window, panels
    doc.shutdown()


def test_dialog_lists_plot_panels_and_the_dashboard(qtbot, setup):
    window, panels = setup
    dialog = FigureExportDialog(panels, window, current=panels[1])
    qtbot.addWidget(dialog)
    names = [dialog.figure_box.itemText(i) for i in range(dialog.figure_box.count())]
    assert names == ["Attention weights", "Scores", "Whole dashboard"]  # Explain is text only
    assert dialog.target() is panels[1]
    assert dialog.path_edit.text().endswith("scores.png")
    dialog.set_format("svg")
    assert dialog.path_edit.text().endswith("scores.svg")
    assert not dialog.size_box.isEnabled()  # SVG and PDF have no pixel size
    dialog.set_target(DASHBOARD)
    assert dialog.path_edit.text().endswith("dashboard.svg")


def test_export_png_at_a_pixel_size(qtbot, setup, tmp_path):
    window, panels = setup
    dialog = FigureExportDialog(panels, window, current=panels[0])
    qtbot.addWidget(dialog)
    dialog.pixels_button.setChecked(True)
    dialog.keep_shape.setChecked(False)
    dialog.width_spin.setValue(700)
    dialog.height_spin.setValue(350)
    dialog.path_edit.setText(str(tmp_path / "fig"))  # no extension: the format's is added
    with qtbot.waitSignal(dialog.exported) as sig:
        path = dialog.export()
    assert path == tmp_path / "fig.png" == sig.args[0]
    assert QImage(str(path)).size().toTuple() == (700, 350)
    assert dialog.result() == dialog.DialogCode.Accepted


def test_keep_shape_follows_the_panel(qtbot, setup, tmp_path):
    window, panels = setup
    dialog = FigureExportDialog(panels, window, current=panels[0])
    qtbot.addWidget(dialog)
    w, h = figure_dialog.figures.panel_size(panels[0])
    dialog.pixels_button.setChecked(True)
    dialog.width_spin.setValue(3 * w)
    assert dialog.height_spin.value() == 3 * h
    dialog.path_edit.setText(str(tmp_path / "kept.png"))
    path = dialog.export()
    assert QImage(str(path)).size().toTuple() == (3 * w, 3 * h)


@pytest.mark.parametrize("fmt, magic", [("pdf", b"%PDF"), ("svg", b"<?xml")])
def test_export_dashboard_as_vectors(qtbot, setup, tmp_path, fmt, magic):
    window, panels = setup
    dialog = FigureExportDialog(panels, window, title="Demo")
    qtbot.addWidget(dialog)
    dialog.set_target(DASHBOARD)
    dialog.set_format(fmt)
    dialog.path_edit.setText(str(tmp_path / f"all.{fmt}"))
    path = dialog.export()
    data = path.read_bytes()
    assert data.startswith(magic)
    if fmt == "svg":
        assert b"Attention weights" in data and b"Scores" in data and b"Demo" in data


def test_a_failed_export_says_why_and_stays_open(qtbot, setup, tmp_path):
    window, panels = setup
    dialog = FigureExportDialog(panels, window, current=panels[0])
    qtbot.addWidget(dialog)
    dialog.show()
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    dialog.path_edit.setText(str(blocker / "fig.png"))  # a file where a folder should be
    assert dialog.export() is None
    assert dialog.error_label.isVisible()
    assert "cannot write" in dialog.error_label.text()
    assert dialog.isVisible()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file"]
    dialog.path_edit.setText("")
    assert dialog.export() is None
    assert "choose a file" in dialog.error_label.text()


def test_context_menu_entry_opens_the_dialog_on_that_panel(qtbot, setup):
    window, panels = setup
    action = install_export_menu(panels[1], window, panels=lambda: panels)
    assert action.text() == "Export figure…"
    assert action in panels[1].actions()
    assert panels[1].contextMenuPolicy() == Qt.ContextMenuPolicy.ActionsContextMenu
    # pyqtgraph's own "Export..." in the plot menus is replaced by ours
    assert action in panels[1].canvas.scene().contextMenu
    assert not any(a.text().startswith("Export...") for a in panels[1].canvas.scene().contextMenu)
    action.trigger()
    dialog = window.findChild(FigureExportDialog)
    assert dialog is not None and dialog.isVisible()
    assert dialog.target() is panels[1]
    assert dialog.figure_box.count() == 3
    dialog.reject()
    assert install_export_menu(panels[2], window) is None  # text only: nothing to export


def test_panels_with_plot_menus_get_the_entry_there_only(qtbot, setup):
    window, panels = setup
    vb = panels[0].canvas.ci.getItem(0, 0).vb
    vb.setMenuEnabled(True)
    action = install_export_menu(panels[0], window)
    assert action in panels[0].canvas.scene().contextMenu
    # no second, panel-level menu popping up after pyqtgraph's own
    assert panels[0].contextMenuPolicy() == Qt.ContextMenuPolicy.DefaultContextMenu


def test_the_dialog_remembers_the_last_figure_format_and_selection_choice(qtbot, setup, tmp_path):
    window, panels = setup
    first = FigureExportDialog(panels, window)
    qtbot.addWidget(first)
    assert first.format() == "png" and first.selection_check.isChecked()
    first.set_target(panels[1])
    first.set_format("svg")
    first.selection_check.setChecked(False)
    first.path_edit.setText(str(tmp_path / "s.svg"))
    assert first.export() == tmp_path / "s.svg"
    again = FigureExportDialog(panels, window)  # File ▸ Export figure… again
    qtbot.addWidget(again)
    assert again.target() is panels[1] and again.format() == "svg" and not again.selection_check.isChecked()
    assert again.path_edit.text() == str(tmp_path / "scores.svg")  # the last folder
    from_menu = FigureExportDialog(panels, window, current=panels[0])  # a panel's own menu: that panel
    qtbot.addWidget(from_menu)
    assert from_menu.target() is panels[0] and from_menu.format() == "svg"


def test_include_selection_draws_or_leaves_out_the_marks(qtbot, tmp_path):
    from attnexplorer.core.inputs.presets import build_preset
    from attnexplorer.ui.panels import WeightsPanel
    from ui_helpers import shown

    built = build_preset("pronoun")
    doc = SessionDocument(built.session)
    assert doc.compute.wait_idle(60)
    panel = shown(qtbot, WeightsPanel(doc), size=(480, 400))
    doc.selection.set(query=6, key=1)
    window = QWidget()
    qtbot.addWidget(window)
    counts = {}
    for include in (True, False):
        dialog = FigureExportDialog([panel], window, current=panel)
        qtbot.addWidget(dialog)
        dialog.selection_check.setChecked(include)
        dialog.path_edit.setText(str(tmp_path / f"w{include}.png"))
        path = dialog.export()
        image = QImage(str(path)).convertToFormat(QImage.Format.Format_RGB888)
        rgb = as_rgb(image)
        counts[include] = int((np.abs(rgb - [255, 140, 0]).max(axis=2) <= 30).sum())
    assert counts[True] > 100 and counts[False] == 0
    assert panel.view.row_frame.isVisible()  # the window keeps showing the selection
    doc.shutdown()


def as_rgb(image):
    w, h, stride = image.width(), image.height(), image.bytesPerLine()
    return np.frombuffer(bytes(image.constBits()), np.uint8).reshape(h, stride)[:, : 3 * w].reshape(h, w, 3).astype(int)
