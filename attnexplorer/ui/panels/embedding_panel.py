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


def place_labels(points: np.ndarray, sizes: np.ndarray, radius: float = 5.0, gap: float = 2.0) -> np.ndarray:
    """Where to put each point's label so that it is readable and clearly its point's.

    ``points`` (N, 2) and ``sizes`` (N, 2: width, height) are in screen pixels (y down).
    Returns (N, 2) offsets of each label's top-left corner from its point. Each label tries
    eight places around its point (right, left, above, below, then the corners) and takes the
    first that overlaps no point and no label placed so far; it only takes places that lie
    nearer its own point than any other, the least overlapping of them when none is clear, and
    stays on the right when there is no such place. Points close together (the
    pronoun preset's "The" and "the") so get one label each side. What does not depend on the
    order (points covered, points nearer) is worked out for every label at once, so 64 labels
    take about a millisecond or two.
    """
    points = np.asarray(points, dtype=float).reshape(-1, 2)
    sizes = np.asarray(sizes, dtype=float).reshape(-1, 2)
    n = len(points)
    r = radius + gap
    w, h = sizes[:, 0:1], sizes[:, 1:2]  # (n, 1)
    dx = np.hstack([np.full_like(w, r), -r - w, -w / 2, -w / 2, np.full_like(w, radius), np.full_like(w, radius),
                    -radius - w, -radius - w])  # (n, 8)
    dy = np.hstack([-h / 2, -h / 2, -r - h, np.full_like(h, r), -radius - h, np.full_like(h, radius),
                    -radius - h, np.full_like(h, radius)])
    boxes = np.stack([points[:, 0:1] + dx, points[:, 1:2] + dy, np.broadcast_to(w, dx.shape),
                      np.broadcast_to(h, dx.shape)], axis=-1)  # (n, 8, 4)
    flat = boxes.reshape(-1, 4)
    discs = np.column_stack([points - radius, np.full((n, 2), 2 * radius)])
    other = ~np.eye(n, dtype=bool)[:, None, :]  # (n, 1, n): every point but the label's own
    covered = (_overlap(flat, discs).reshape(n, 8, n) * other).sum(axis=2)
    distance = _distance(flat, points).reshape(n, 8, n)
    own = distance[np.arange(n), :, np.arange(n)]  # (n, 8)
    # A label nearer another point than its own would read as that point's.
    nearer = ((distance < own[:, :, None]) & other).sum(axis=2)
    offsets = np.zeros((n, 2))
    placed = np.zeros((0, 4))
    for i in range(n):
        cost = covered[i] + _overlap(boxes[i], placed).sum(axis=1)
        # Only places nearer the label's own point than any other will do; where no place is,
        # the label stays to the right, where a reader looks first.
        cost = np.where(nearer[i] == 0, cost, np.inf)
        clear = np.flatnonzero(cost == 0)
        choice = int(clear[0]) if len(clear) else int(np.argmin(cost)) if np.isfinite(cost).any() else 0
        offsets[i] = dx[i, choice], dy[i, choice]
        placed = np.vstack([placed, boxes[i, choice]])
    return offsets


def _overlap(boxes: np.ndarray, others: np.ndarray) -> np.ndarray:
    """Overlapping areas, (len(boxes), len(others)); boxes are rows of x, y, w, h."""
    a, b = boxes[:, None, :], others[None, :, :]
    w = np.minimum(a[..., 0] + a[..., 2], b[..., 0] + b[..., 2]) - np.maximum(a[..., 0], b[..., 0])
    h = np.minimum(a[..., 1] + a[..., 3], b[..., 1] + b[..., 3]) - np.maximum(a[..., 1], b[..., 1])
    return np.clip(w, 0, None) * np.clip(h, 0, None)


def _distance(boxes: np.ndarray, points: np.ndarray) -> np.ndarray:
    """From each point to the nearest edge of each box (0 inside it), (len(boxes), len(points))."""
    bx, by, bw, bh = (boxes[:, k:k + 1] for k in range(4))
    px, py = points[None, :, 0], points[None, :, 1]
    dx = np.maximum(np.maximum(bx - px, 0.0), px - bx - bw)
    dy = np.maximum(np.maximum(by - py, 0.0), py - by - bh)
    return np.hypot(dx, dy)


class EmbeddingPanel(FigurePanel):
    kind = "embedding_scatter"
    short_title = "Embeddings"
    needs = frozenset({"Q", "K"})
    title = "Embeddings (2-D) with the query and keys as arrows"
    minimum_size = (360, 300)

    def build(self) -> None:
        super().build()
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
        self.legend = theme.legend_below(self.figure, 2, 2, horSpacing=12)
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
        # Label places depend on how far apart the points are on screen: zoom and resize move them.
        self._placed_for = None
        self.plot.vb.sigRangeChanged.connect(self._place_labels)
        self.plot.vb.sigResized.connect(self._place_labels)

    def applies_to(self, session) -> bool:
        return session.d == 2

    # -- drawing ----------------------------------------------------------------------------------
    def redraw(self) -> None:
        result = self.document.result
        if result is None or result.Q is None or result.K is None or result.session.d != 2:
            return
        x = np.asarray(result.session.embeddings, dtype=float)
        self.points.setData(pos=x, data=np.arange(len(x)))
        tokens = result.tokens
        shown = min(len(tokens), MAX_POINT_LABELS)
        while len(self.labels) < shown:
            item = pg.TextItem(color="k")
            self.plot.addItem(item, ignoreBounds=True)
            self.labels.append(item)
        for i, item in enumerate(self.labels):
            if i < shown:
                item.setText(tokens[i])
                item.setPos(*x[i])
            item.setVisible(i < shown)
        self._place_labels()
        self.redraw_selection()

    def settle_views(self) -> None:
        """Leave the new range to the paint, as pyqtgraph does. Applied with the redraw (as
        FigurePanel does to save a second paint per drag frame), the pronoun preset's labels
        "The" and "the" were placed over each other in a 420 × 320 panel; this panel is not
        one a drag redraws, so the second paint it would save is rare."""

    def _place_labels(self, *args) -> None:
        """Anchor each point's label where it covers no other label or point (see place_labels)."""
        shown = [item for item in self.labels if item.isVisible()]
        if not shown:
            return
        px, py = self.plot.vb.viewPixelSize()  # data units per screen pixel
        if not (px > 0 and py > 0 and np.isfinite(px) and np.isfinite(py)):
            return  # not laid out yet: the first resize places them
        points = np.array([(item.pos().x() / px, -item.pos().y() / py) for item in shown])
        sizes = np.array([(item.boundingRect().width(), item.boundingRect().height()) for item in shown])
        key = (points.tobytes(), sizes.tobytes())
        if key == self._placed_for:  # a redraw that moved no point on screen
            return
        self._placed_for = key
        # The item's rect has a blank margin around the text: place the text itself.
        margin = shown[0].textItem.document().documentMargin()
        inner = np.clip(sizes - 2 * margin, 1.0, None)
        for item, (dx, dy), (w, h) in zip(shown, place_labels(points, inner), sizes):
            # TextItem puts the point (anchor · its size) of its rect at its position.
            item.setAnchor((-(dx - margin) / w if w else 0.0, -(dy - margin) / h if h else 0.0))

    def redraw_selection(self) -> None:
        result = self.document.result
        if result is None or result.Q is None or result.K is None or result.session.d != 2:
            return
        session = result.session
        head, query, key = clamp_selection(self.document, result)
        q2 = self._first_two(result.Q[head, query][None, :])
        group = head if result.kv_head_of is None else int(result.kv_head_of[head])  # grouped-query
        k2 = self._first_two(result.K[group])
        extent = max(float(np.abs(np.vstack([q2, k2, session.embeddings])).max()), 1e-9)
        head_size = 0.06 * extent
        self.key_arrows.setData(*arrow_segments(k2, head_size))
        self.query_arrow.setData(*arrow_segments(q2, head_size))
        if key is not None:
            self.key_arrow.setData(*arrow_segments(k2[key:key + 1], head_size))
            self.tip_labels[1].setText(f"k: {result.key_tokens[key]}")
            self.tip_labels[1].setPos(*k2[key])
        else:
            self.key_arrow.setData([], [])
            self.tip_labels[1].setText("")
        self.tip_labels[0].setText(f"q: {result.tokens[query]}")
        self.tip_labels[0].setPos(*q2[0])
        brushes = [pg.mkBrush("#bbbbbb")] * result.n
        brushes[query] = pg.mkBrush(theme.QUERY_COLOR)
        self.points.setBrush(brushes)
        heads, kv_heads = result.Q.shape[0], result.K.shape[0]
        shared = f" (keys of K/V head {group})" if kv_heads != heads else ""
        self.set_heading(self.title if heads == 1 else f"{self.title} — head {head}{shared}")

    @staticmethod
    def _first_two(vectors: np.ndarray) -> np.ndarray:
        v = np.zeros((vectors.shape[0], 2))
        width = min(2, vectors.shape[1])
        v[:, :width] = vectors[:, :width]
        return v

    def _on_points_clicked(self, item, points, *args) -> None:
        if len(points):
            self.document.selection.set(query=int(points[0].data()))

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
