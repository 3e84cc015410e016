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


def _qimage_pixels(image: QImage) -> np.ndarray:
    image = image.convertToFormat(QImage.Format.Format_ARGB32_Premultiplied)
    return np.frombuffer(image.constBits(), np.uint32, image.width() * image.height()).copy()


def test_a_heatmaps_picture_is_made_in_one_look_up_with_pyqtgraphs_colours(qtbot, monkeypatch):
    # The heatmap makes its own picture (no indexed image with a colour table, no conversion
    # on every new matrix): exactly the pixels pyqtgraph's ImageItem makes, values beyond the
    # levels, NaN (blocked: transparent) and a zero-width level range included.
    from attnexplorer.ui.panels import theme
    from attnexplorer.ui.panels.matrix_view import argb_table, render_cells

    rng = np.random.default_rng(3)
    data = rng.normal(size=(9, 13)) * 2
    data[2, 3] = data[4, 0] = np.nan
    for matrix, levels, lut in ((data, (-2.5, 2.5), theme.DIVERGING_LUT), (data.astype(np.float32), (0.0, 1.0), theme.SEQUENTIAL_LUT),
                                (data, (0.3, 0.3), theme.SEQUENTIAL_LUT), (np.abs(data[:, :1]), (0.0, 4.0), theme.SEQUENTIAL_LUT)):
        reference = pg.ImageItem(axisOrder="row-major")
        reference.setLookupTable(lut)
        reference.setImage(matrix, autoLevels=False, levels=levels)
        reference.render()
        ours = render_cells(matrix, levels, lut, argb_table(lut))
        assert ours.format() == QImage.Format.Format_ARGB32_Premultiplied
        np.testing.assert_array_equal(_qimage_pixels(ours), _qimage_pixels(reference.qimage))
    # In a view, a new matrix is drawn without pyqtgraph's general render.
    widget, view = make_view(qtbot, ["a", "b", "c", "d"])
    general = []
    monkeypatch.setattr(pg.ImageItem, "render", lambda item, *a, **k: general.append(item))
    before = pixels(widget)
    view.set_matrix(np.linspace(1, 0, 16).reshape(4, 4), row_labels="abcd", col_labels="abcd", levels=(0.0, 1.0))
    after = pixels(widget)
    assert general == [] and not np.array_equal(before, after)
    assert view.image.qimage.format() == QImage.Format.Format_ARGB32_Premultiplied
