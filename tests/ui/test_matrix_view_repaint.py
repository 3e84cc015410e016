"""A heatmap's cached tick labels and titles follow every change on screen."""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6.QtGui import QImage
from PySide6.QtWidgets import QGraphicsItem

from attnexplorer.ui.panels.matrix_view import MatrixView


def make_view(qtbot, labels, title="weights"):
    widget = pg.GraphicsLayoutWidget()
    widget.resize(420, 360)
    view = MatrixView(title, signed=False)
    widget.addItem(view)
    qtbot.addWidget(widget)
    widget.show()
    qtbot.waitExposed(widget)
    view.set_matrix(np.linspace(0, 1, 16).reshape(4, 4), row_labels=labels, col_labels=labels, levels=(0.0, 1.0))
    return widget, view


def pixels(widget) -> np.ndarray:
    image = widget.grab().toImage().convertToFormat(QImage.Format.Format_RGB32)
    return np.frombuffer(image.constBits(), np.uint8).reshape(image.height(), image.bytesPerLine()).copy()


def test_axes_and_title_are_cached_and_repaint_when_they_change(qtbot):
    widget, view = make_view(qtbot, ["a", "b", "c", "d"])
    for item in (view.row_axis, view.col_axis, view.titleLabel.item):
        assert item.cacheMode() == QGraphicsItem.CacheMode.DeviceCoordinateCache
    before = pixels(widget)
    renamed = ["alpha", "beta", "gamma", "delta"]
    view.set_matrix(view.data, row_labels=renamed, col_labels=renamed, levels=(0.0, 1.0))
    view.setTitle("other title", size="10pt")
    after = pixels(widget)
    assert not np.array_equal(before, after)
    # exactly what a view that never showed the old labels draws: no stale pixmap anywhere
    fresh_widget, _fresh = make_view(qtbot, renamed, title="other title")
    np.testing.assert_array_equal(after, pixels(fresh_widget))
