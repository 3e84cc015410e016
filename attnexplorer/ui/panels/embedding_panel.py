"""Token embeddings in the plane (d = 2), with the selected query and the keys as arrows.

The 2-D view: the embeddings are drawn as labelled points at their (x₀, x₁). The query
vector q of the selected token and the key vectors k of every token, for the selected
head, are drawn as arrows from the origin using their **first two components** (q₀, q₁)
and (k₀, k₁); with d_k = 2 that is the whole vector, with more it is a projection (the
score q·k also has the remaining components: the Explain panel shows them all). Equal
axis scales keep angles true, so a key pointing along the query scores high.
"""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg

from . import theme
from .common import FigurePanel, clamp_selection

# Token labels beside the points only up to this many (beyond, the hover names them).
MAX_POINT_LABELS = 64


def arrow_segments(vectors: np.ndarray, head_size: float) -> tuple[np.ndarray, np.ndarray]:
    """x, y for ``connect="pairs"``: each vector's shaft from the origin and a two-stroke head."""
    xs, ys = [], []
    for vx, vy in vectors:
        length = float(np.hypot(vx, vy))
        xs += [0.0, vx]
        ys += [0.0, vy]
        if length > 0:
            ux, uy = vx / length, vy / length
            h = min(head_size, 0.4 * length)
            for sign in (1.0, -1.0):
                # 25° either side of the shaft, pointing back from the tip.
                c, s = np.cos(np.radians(25)), sign * np.sin(np.radians(25))
                bx, by = -(ux * c - uy * s), -(ux * s + uy * c)
                xs += [vx, vx + h * bx]
                ys += [vy, vy + h * by]
    return np.asarray(xs, dtype=float), np.asarray(ys, dtype=float)


class EmbeddingPanel(FigurePanel):
    kind = "embedding_scatter"
    short_title = "Embeddings"
    needs = frozenset({"Q", "K"})
    title = "Embeddings (2-D) with the query and keys as arrows"
    minimum_size = (360, 300)

    def __init__(self, document, parent=None):
        super().__init__(document, parent)
        self.setToolTip(__doc__.split("\n\n")[1].replace("\n", " "))
        self.plot = self.figure.addPlot(row=1, col=0, enableMenu=False)  # no menu: never built
        self.plot.setAspectLocked(True)
        theme.light_grid(self.plot, x=True, y=True)
        self.plot.hideButtons()
        self.plot.setLabel("bottom", "dimension 0")
        self.plot.setLabel("left", "dimension 1")
        # Room around the arrow tips for their labels ("k: dog"), which would be clipped.
        self.plot.getViewBox().setDefaultPadding(0.12)
        # The legend is a row of its own under the plot: inside, it hid arrows and points.
        self.legend = pg.LegendItem(colCount=2, labelTextSize="8pt", verSpacing=-6, horSpacing=12)
        self.figure.addItem(self.legend, row=2, col=0)
        self.key_arrows = pg.PlotDataItem(connect="pairs", pen=pg.mkPen(theme.KEY_COLOR, width=1.2), name="keys k (first 2 dims)")
        self.key_arrow = pg.PlotDataItem(connect="pairs", pen=pg.mkPen(theme.SELECTED_KEY_COLOR, width=2.5), name="selected key")
        self.query_arrow = pg.PlotDataItem(connect="pairs", pen=pg.mkPen(theme.QUERY_COLOR, width=2.5), name="query q (first 2 dims)")
        self.points = pg.ScatterPlotItem(size=9, pen=pg.mkPen("k", width=0.8), brush=pg.mkBrush("#bbbbbb"),
                                         hoverable=True, tip=None, name="embeddings x")
        for item in (self.key_arrows, self.key_arrow, self.query_arrow, self.points):
            self.plot.addItem(item)
            self.legend.addItem(item, item.name())
        self.points.sigClicked.connect(self._on_points_clicked)
        self.points.sigHovered.connect(self._on_points_hovered)
        self.labels: list[pg.TextItem] = []
        self.tip_labels = [pg.TextItem(color=theme.QUERY_COLOR, anchor=(0, 1)),
                           pg.TextItem(color=theme.SELECTED_KEY_COLOR, anchor=(0, 1))]
        for item in self.tip_labels:
            self.plot.addItem(item, ignoreBounds=True)
        self.figure.layout.setRowStretchFactor(1, 1)
        self._head_size = 0.1

    def applies_to(self, session) -> bool:
        return session.d == 2

    # -- reading (tests) ------------------------------------------------------------------------
    def point_positions(self) -> np.ndarray:
        x, y = self.points.getData()
        return np.column_stack([x, y])

    def query_vector(self) -> np.ndarray:
        x, y = self.query_arrow.getData()
        return np.array([x[1], y[1]]) if x is not None and len(x) > 1 else np.zeros(2)

    # -- drawing ----------------------------------------------------------------------------------
    def redraw(self) -> None:
        result = self.document.result
        session = self.document.session
        if result is None or result.Q is None or result.K is None or session.d != 2 or session.n != result.n:
            return
        x = np.asarray(session.embeddings, dtype=float)
        self.points.setData(pos=x, data=np.arange(len(x)))
        tokens = result.tokens
        shown = min(len(tokens), MAX_POINT_LABELS)
        while len(self.labels) < shown:
            item = pg.TextItem(color="k", anchor=(-0.1, 0.5))
            self.plot.addItem(item, ignoreBounds=True)
            self.labels.append(item)
        for i, item in enumerate(self.labels):
            if i < shown:
                item.setText(tokens[i])
                item.setPos(*x[i])
            item.setVisible(i < shown)
        self.redraw_selection()

    def redraw_selection(self) -> None:
        result = self.document.result
        session = self.document.session
        if result is None or result.Q is None or result.K is None or session.d != 2 or session.n != result.n:
            return
        head, query, key = clamp_selection(self.document, result)
        q2 = self._first_two(result.Q[head, query][None, :])
        k2 = self._first_two(result.K[head])
        extent = max(float(np.abs(np.vstack([q2, k2, session.embeddings])).max()), 1e-9)
        head_size = 0.06 * extent
        self.key_arrows.setData(*arrow_segments(k2, head_size))
        self.query_arrow.setData(*arrow_segments(q2, head_size))
        if key is not None:
            self.key_arrow.setData(*arrow_segments(k2[key:key + 1], head_size))
            self.tip_labels[1].setText(f"k: {result.tokens[key]}")
            self.tip_labels[1].setPos(*k2[key])
        else:
            self.key_arrow.setData([], [])
            self.tip_labels[1].setText("")
        self.tip_labels[0].setText(f"q: {result.tokens[query]}")
        self.tip_labels[0].setPos(*q2[0])
        brushes = [pg.mkBrush("#bbbbbb")] * result.n
        brushes[query] = pg.mkBrush(theme.QUERY_COLOR)
        self.points.setBrush(brushes)
        self.set_heading(self.title if result.Q.shape[0] == 1 else f"{self.title} — head {head}")

    @staticmethod
    def _first_two(vectors: np.ndarray) -> np.ndarray:
        v = np.zeros((vectors.shape[0], 2))
        width = min(2, vectors.shape[1])
        v[:, :width] = vectors[:, :width]
        return v

    def _on_points_clicked(self, item, points, *args) -> None:
        if len(points):
            self.document.set_selection(query=int(points[0].data()))

    def _on_points_hovered(self, item, points, *args) -> None:
        result = self.document.result
        if result is None or not len(points):
            self.show_readout("")
            return
        i = int(points[0].data())
        if i < result.n:
            pos = points[0].pos()
            self.show_readout(f"token {result.tokens[i]!r} (#{i}): x = ({theme.format_value(pos.x())}, "
                              f"{theme.format_value(pos.y())})")
