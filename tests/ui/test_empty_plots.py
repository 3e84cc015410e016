"""Plots with nothing to show yet write no tick values: pyqtgraph's default range for an empty
plot (−0.5 … 0.5) came out as "−400 … 400" with "(x0.001)" in the axis titles, which read as
data (the Generate tab before its first step, the Heads tab before a score)."""

from __future__ import annotations

import numpy as np
from PySide6.QtWidgets import QApplication

from attnexplorer.ui.model.generation_panel import GenerationPanel
from attnexplorer.ui.model.head_scores_panel import HeadScoresPanel


def _axes(plot):
    return [plot.getAxis(name) for name in ("left", "bottom")]


def _written(plot) -> bool:
    """Whether the plot's axes write tick values (and none carries an SI prefix)."""
    axes = _axes(plot)
    assert not any("x0.001" in axis.labelString() or axis.autoSIPrefix for axis in axes)
    shown = {bool(axis.style["showValues"]) for axis in axes}
    assert len(shown) == 1
    return shown.pop()


def test_the_generate_tabs_heatmaps_write_values_once_they_hold_a_matrix(qtbot):
    panel = GenerationPanel()
    qtbot.addWidget(panel)
    panel.resize(420, 700)
    panel.show()
    QApplication.processEvents()
    heatmaps = [panel.attention, panel.keys]
    assert not any(_written(h) for h in heatmaps)
    for heatmap in heatmaps:
        heatmap.show_matrix(np.arange(12, dtype=float).reshape(3, 4), marked=2)
    assert all(_written(h) for h in heatmaps)
    panel.keys.show_matrix(np.zeros((0, 4)), marked=None)   # back to the prompt: empty again
    assert not _written(panel.keys)


def test_the_heads_tab_heatmap_and_colour_bar_wait_for_a_score(qtbot):
    panel = HeadScoresPanel()
    qtbot.addWidget(panel)
    panel.show()
    QApplication.processEvents()
    assert not _written(panel.plot) and not panel.colour_bar.isVisible() and not panel.hint.toPlainText()
    panel.set_scores({"previous-token": np.linspace(0, 1, 12).reshape(3, 4)})
    _uncoloured_grid(panel, 3, 4)   # "none" chosen: the heads' grid, uncoloured, with a hint
    panel.colour_by("previous-token")
    assert panel.shown == "previous-token"
    assert _written(panel.plot) and panel.colour_bar.isVisible()
    assert not panel.blank.isVisible() and not panel.hint.isVisible()
    panel.colour_by("none")
    _uncoloured_grid(panel, 3, 4)
    panel.shutdown()


def _uncoloured_grid(panel, layers, heads):
    """"Colour by: none" draws the layers × heads grid in grey with a hint, not an empty frame."""
    assert panel.shown is None and not panel.colour_bar.isVisible() and panel.image.image is None
    assert _written(panel.plot)
    assert panel.blank.isVisible() and panel.blank.image is not None
    rect = panel.blank.mapRectToParent(panel.blank.boundingRect())
    assert (rect.width(), rect.height()) == (heads, layers)
    assert panel.hint.isVisible() and "Colour by" in panel.hint.toPlainText()
    ticks = panel.plot.getAxis("bottom")._tickLevels[0]
    assert [label for _, label in ticks] == [str(h) for h in range(heads)]
