"""The Query panel's legend: it never takes the charts' room, and a redraw that changes only
numbers makes no new graphics items (it was rebuilt item by item on every key change, about
half the time of a τ drag, and with nine or more keys its height squeezed the score and weight
charts to a strip with no ticks)."""

from __future__ import annotations

import numpy as np
import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QImage, QPainter
from PySide6.QtWidgets import QApplication

from attnexplorer.core.inputs.presets import build_preset
from attnexplorer.core.inputs.session import Mask
from attnexplorer.ui.document import SessionDocument
from attnexplorer.ui.panels import QueryPanel
from ui_helpers import close_window, legend_entries, open_window, shown

# The Query panel's size in the default window at 1280×800.
PANEL_AT_1280 = (489, 323)


def _doc(name, params=None, **changes):
    session = build_preset(name, params or {}).session
    return SessionDocument(session.replace(**changes) if changes else session)


@pytest.mark.parametrize("make, query", [
    (lambda: _doc("pronoun", mask=Mask("none")), 6),
    (lambda: _doc("sine"), 0),
    (lambda: _doc("sine", {"N": 400, "tau": 0.05}), 200),
])
def test_the_legend_never_takes_the_charts_room(qtbot, make, query):
    doc = make()
    try:
        panel = shown(qtbot, QueryPanel(doc), size=PANEL_AT_1280)
        assert doc.compute.wait_idle(60)
        doc.selection.set(query=query)
        qtbot.waitUntil(lambda: len(legend_entries(panel.legend)) >= 9)
        QApplication.processEvents()
        bars = panel.sum_chart.vb.height()
        for chart in (panel.score_chart, panel.weight_chart):
            # as tall as the stacked bars' chart, and tall enough for ticks
            assert chart.vb.height() >= 0.8 * bars and chart.vb.height() >= 60, (chart.vb.height(), bars)
        # the legend draws inside its own box, beside the stacked bars (not over the charts)
        legend = panel.legend
        box = legend.boundingRect()
        placed = legend.layout_entries()
        assert placed and all(box.contains(rect) for _name, _color, rect in placed)
        assert legend.sceneBoundingRect().top() >= panel.weight_chart.sceneBoundingRect().bottom() - 1
        assert legend.sceneBoundingRect().left() >= panel.sum_chart.vb.sceneBoundingRect().right()
        named = [name for name, _color, _rect in placed]
        if len(placed) < len(legend_entries(panel.legend)):  # what does not fit is counted, not dropped
            assert named[-1] == f"+ {len(legend_entries(panel.legend)) - len(placed) + 1} more"
    finally:
        doc.shutdown()


def test_legend_swatches_sit_level_with_their_names(qtbot):
    doc = _doc("pronoun", mask=Mask("none"))
    try:
        panel = shown(qtbot, QueryPanel(doc), size=PANEL_AT_1280)
        assert doc.compute.wait_idle(60)
        doc.selection.set(query=6)
        legend = panel.legend
        rect = legend.boundingRect()
        image = QImage(int(rect.width()), int(rect.height()), QImage.Format.Format_ARGB32)
        image.fill(Qt.GlobalColor.white)
        painter = QPainter(image)
        painter.translate(-rect.left(), -rect.top())
        legend.paint(painter, None)
        painter.end()
        pixels = np.array([[QColor(image.pixel(x, y)).getRgb()[:3] for x in range(image.width())]
                           for y in range(image.height())])
        for name, color, line in legend.layout_entries()[:3]:
            top, bottom = int(line.top()), int(line.bottom())
            band = pixels[top:bottom]
            swatch = np.where((np.abs(band - np.array(color.getRgb()[:3])).sum(axis=2) < 30).any(axis=1))[0]
            text = np.where((band.sum(axis=2) < 200).any(axis=1))[0]  # dark pixels: the name's letters
            assert swatch.size and text.size, name
            # the swatch's middle within 2 px of the letters' middle
            assert abs((swatch.min() + swatch.max()) / 2 - (text.min() + text.max()) / 2) <= 2.5, name
    finally:
        doc.shutdown()


def _scene_items(window):
    return {panel.kind: set(panel.canvas.scene().items()) for panel in window.panels
            if hasattr(panel, "canvas") and panel.isVisible()}


@pytest.mark.parametrize("preset", ["sine", "pronoun"])
def test_a_redraw_that_changes_only_numbers_creates_no_new_graphics_items(qtbot, preset):
    # Numbers change (τ, one embedding), the shapes do not: every panel on screen redraws
    # with the items it has. (The τ steps reorder sine's largest weights, so the legend's
    # keys change too.)

    session = build_preset(preset).session
    document, window = open_window(session, (1280, 800))
    try:
        assert document.compute.wait_idle(60)
        document.selection.set(query=session.n // 2)
        QApplication.processEvents()
        before = _scene_items(window)
        legends = []
        query = next(p for p in window.panels if p.kind == "query")
        for step in range(4):
            x = document.session.embeddings.copy()
            x[0, 0] += 0.37 * (step + 1)
            x[session.n // 2 - 3 + step] *= 1.5  # a key near the query gains weight
            scale = document.session.scale
            if preset == "sine":
                from attnexplorer.core.inputs.session import Scale
                scale = Scale("temperature", temperature=0.004 * (1.6 ** (step + 1)))
            document.edit(document.session.replace(embeddings=x, scale=scale), "numbers")
            assert document.compute.wait_idle(60)
            QApplication.processEvents()
            legends.append(legend_entries(query.legend))
        after = _scene_items(window)
        for kind, items in before.items():
            new = after[kind] - items
            assert not new, (kind, sorted({type(item).__name__ for item in new}))
        if preset == "sine":
            assert len({tuple(entries) for entries in legends}) > 1  # the keys did change
    finally:
        close_window(document, window)
