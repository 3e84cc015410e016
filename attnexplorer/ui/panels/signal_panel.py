"""A 1-D signal smoothed by attention, as in the noisy-sine walkthrough.

Each token is one sample: the clean signal is dashed, the noisy input is dots and the
attention output is a solid line, against position. The selected query's position is
marked, and its weight row is drawn faintly beneath (scaled to the plot) so one can see
which neighbours it averages. Its attention matrix is the Weights panel beside it.

Where the numbers come from:
- position: the preset's ``position`` reference curve, else the token index;
- noisy input: the first embedding column (what W_V reads in the walkthrough), so editing
  an embedding moves its dot;
- clean: the preset's ``clean`` reference curve (hidden when the tokens are no longer
  samples);
- output: the first column of the attention output.

All of it comes from the result drawn and the session it was computed from
(``core.inputs.presets.reference_curves``), never from a document's other state.
"""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QGraphicsItem

from ...core.inputs.presets import reference_curves
from . import theme
from .common import FigurePanel, clamp_selection


WEIGHT_FILL_NAME = "query's weights (peak = 1)"


class SignalPanel(FigurePanel):
    kind = "signal"
    short_title = "Signal"
    needs = frozenset({"output", "weights"})
    title = "Signal: clean (dashed), noisy input (dots), attention output (solid)"
    minimum_size = (400, 280)

    def build(self) -> None:
        super().build()
        self.plot = self.figure.addPlot(row=1, col=0, enableMenu=False)  # no menu: never built
        self.plot.setLabel("bottom", "position")
        self.plot.setLabel("left", "value")
        self.plot.hideButtons()
        theme.light_grid(self.plot, x=True, y=True)
        self.setToolTip("The shaded bump is the selected query's weight row (scaled to peak 1): "
                        "the samples it averages.")
        # The legend is a row of its own under the plot: inside, it hid the curves.
        self.legend = theme.legend_below(self.figure, 2, 2, horSpacing=12)
        self.weight_fill = pg.PlotDataItem(pen=pg.mkPen(theme.SELECTION_COLOR, width=1),
                                           fillLevel=0.0, brush=pg.mkBrush(255, 140, 0, 50))
        self.clean = pg.PlotDataItem(pen=theme.cosmetic_pen("#555555", 2.0, Qt.PenStyle.DashLine), name="clean")
        self.noisy = pg.PlotDataItem(pen=None, symbol="o", symbolSize=5, symbolPen=None,
                                     symbolBrush=pg.mkBrush(theme.KEY_COLOR), name="noisy input")
        self.output = pg.PlotDataItem(pen=pg.mkPen(theme.QUERY_COLOR, width=2.5), name="attention output")
        self.marker = pg.InfiniteLine(angle=90, pen=theme.cosmetic_pen(theme.SELECTION_COLOR, 1.5, Qt.PenStyle.DotLine))
        for item in (self.weight_fill, self.clean, self.noisy, self.output):
            self.plot.addItem(item)
        for item in (self.clean, self.noisy, self.output):
            self.legend.addItem(item, item.name())
        self.legend.addItem(self.weight_fill, WEIGHT_FILL_NAME)
        self.plot.addItem(self.marker, ignoreBounds=True)
        # The clean signal and the noisy samples change only with the preset's samples, not
        # with τ: kept as pixels between frames, so a drag repaints them from a pixmap instead
        # of stroking a dashed 512-point curve and 512 dots on every frame. (A data change or a
        # zoom makes the pixmap again.)
        for part in (self.clean.curve, self.noisy.scatter):
            part.setCacheMode(QGraphicsItem.CacheMode.DeviceCoordinateCache)
        self.noisy.sigPointsClicked.connect(self._on_points_clicked)
        self.figure.layout.setRowStretchFactor(1, 1)
        self._x = np.zeros(0)

    def applies_to(self, session) -> bool:
        return (session.preset is not None and session.preset.name == "sine") or "clean" in reference_curves(session)

    def selection_marks(self) -> list:
        return [self.marker]

    # -- drawing ----------------------------------------------------------------------------------
    def redraw(self) -> None:
        result = self.document.result
        if result is None or result.output is None:
            return
        n = result.n
        curves = reference_curves(result.session)
        position = curves.get("position")
        x = np.asarray(position, dtype=float) if position is not None and len(position) == n else np.arange(n, dtype=float)
        self._x = x
        clean = curves.get("clean")
        if clean is not None and len(clean) == n:
            self._set(self.clean, x, np.asarray(clean, dtype=float))
        else:
            self._set(self.clean, np.zeros(0), np.zeros(0))
        # The samples this output was computed from (column 0 of X is the noisy signal).
        self._set(self.noisy, x, np.asarray(result.session.embeddings[:, 0], dtype=float))
        self._set(self.output, x, np.asarray(result.output[:, 0], dtype=float))
        self.redraw_selection()

    def _set(self, item: pg.PlotDataItem, x: np.ndarray, y: np.ndarray) -> None:
        """``item.setData(x, y)`` unless it already shows those numbers. A τ drag changes the
        output only: setting the 512 noisy dots again rebuilt the scatter's points (about a
        tenth of each frame's time in the panel); the clean curve is the same too."""
        old_x, old_y = item.getData()
        if old_x is not None and np.array_equal(old_x, x) and np.array_equal(old_y, y):
            return
        item.setData(x, y)

    def redraw_selection(self) -> None:
        result = self.document.result
        if result is None or result.weights is None or len(self._x) != result.n:
            return
        head, query, _ = clamp_selection(self.document, result)
        self.marker.setPos(float(self._x[query]))
        # The weight row, scaled so its peak reaches 1: where this query looks.
        row = np.asarray(result.weights[head, query], dtype=float)
        peak = row.max() if row.size else 0.0
        self.weight_fill.setData(self._x, row / peak if peak > 0 else row)

    def _on_points_clicked(self, item, points, *args) -> None:
        if len(points):
            self.document.selection.set(query=int(points[0].index()))
