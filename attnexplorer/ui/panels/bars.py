"""``Bars``: a bar-chart item that is cheap to update and to paint, for the query panel.

pyqtgraph's ``BarGraphItem`` pads its bounding rect by its pen width in pixels, and Qt asks
for that rect many times per frame: at 64 bars × a dozen items this cost more than the
drawing itself. ``Bars`` keeps the same ``setOpts(x=, height=, y0=, width=, brush=,
brushes=, pen=)`` and ``opts`` (so callers and tests read what is drawn), builds its
rectangles once per update, caches its bounding rect (re-padded only when the view's scale
changes) and paints every bar with one ``drawRects`` (one ``drawRect`` per bar with
``brushes``, which only the few highlighted bars use), without antialiasing: bars are
axis-aligned, so they stay crisp. More bars than pixels across are drawn one column per pixel.
The rectangles are made once per update and scale, at the first paint, from numpy arrays.
"""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QRectF, Qt
from PySide6.QtGui import QColor, QPainter, QPen


# Up to this many bars each is drawn as it is; above it bars may share a pixel column.
_FEW_BARS = 64


# Brushes by colour: a redraw passes the same few theme colours every time, and mkBrush makes
# the colour again on each call (a third of ``setOpts``'s time when the query panel set its 19
# items a frame).
_BRUSHES: dict = {}


def _brush(spec):
    """The brush for ``spec``: made once per colour (a QColor or a colour name)."""
    if isinstance(spec, QColor):
        key = spec.rgba()
    elif isinstance(spec, str):
        key = spec
    else:
        return pg.mkBrush(spec)
    hit = _BRUSHES.get(key)
    if hit is None:
        if len(_BRUSHES) > 256:  # colours made up by a caller: keep the cache small
            _BRUSHES.clear()
        hit = _BRUSHES[key] = pg.mkBrush(spec)
    return hit


class Bars(pg.GraphicsObject):
    def __init__(self, **opts):
        super().__init__()
        self.opts: dict = {"x": np.zeros(0), "height": np.zeros(0), "y0": 0.0, "width": 0.8,
                           "brush": pg.mkBrush("k"), "brushes": None, "pen": None}
        self._corners = np.zeros((0, 3))  # left, top, height per bar
        self._rects: list[QRectF] | None = None  # made at the first paint after an update
        self._data_rect = QRectF()
        self._bounds: QRectF | None = None
        self._pen = QPen(Qt.PenStyle.NoPen)
        self._pixel = 0.0
        self.setOpts(**opts)

    def setOpts(self, **opts) -> None:
        if self._empty_again(opts):
            self.opts.update(opts)  # no bars before or after (the blocked keys of an unmasked
            return                  # head): nothing to lay out or repaint
        if "brush" in opts and opts["brush"] is not None:
            opts["brush"] = _brush(opts["brush"])
        if "brushes" in opts and opts["brushes"] is not None:
            opts["brushes"] = [_brush(b) for b in opts["brushes"]]
        if "pen" in opts:
            pen = opts["pen"]
            self._pen = QPen(Qt.PenStyle.NoPen) if pen is None else pg.mkPen(pen)
            self._pen.setCosmetic(True)
        self.opts.update(opts)
        x = np.asarray(self.opts["x"], dtype=float).ravel()
        height = np.asarray(self.opts["height"], dtype=float).ravel()
        count = min(len(x), len(height))
        width = float(self.opts["width"])
        self._width = width
        self._rects = None
        if count:
            x, height = x[:count], height[:count]
            y0 = np.asarray(self.opts["y0"], dtype=float)
            y0 = y0.ravel() if y0.ndim else y0  # one base for every bar, or one per bar
            end = y0 + height  # (broadcasting, as np.broadcast_to did, refuses other lengths)
            corners = np.empty((count, 3))
            left = np.subtract(x, width / 2.0, out=corners[:, 0])
            top = np.minimum(y0, end, out=corners[:, 1])
            np.abs(height, out=corners[:, 2])
            low, high = float(top.min()), float(np.maximum(y0, end).max())
            first, last = float(left.min()), float(left.max())
            self._corners = corners
            rect = QRectF(first, low, last - first + width, high - low)
        else:
            self._corners = np.zeros((0, 3))
            rect = QRectF()
        self.prepareGeometryChange()
        self._data_rect = rect
        self._bounds = None
        self.update()

    def pen(self) -> QPen:
        """The outline pen (cosmetic: its width in device pixels)."""
        return self._pen

    def setPen(self, pen) -> None:
        self.setOpts(pen=pen)

    def _empty_again(self, opts: dict) -> bool:
        """Whether ``opts`` leave an item without bars as it is: no bars, no other change."""
        if len(self._corners) or set(opts) - {"x", "height", "y0", "width"}:
            return False
        return any(k in opts and np.size(opts[k]) == 0 for k in ("x", "height"))

    # -- reading ------------------------------------------------------------------------------
    def getData(self):
        return self.opts["x"], self.opts["height"]

    def dataBounds(self, ax, frac=1.0, orthoRange=None):
        if self._data_rect.isNull():
            return None, None
        r = self._data_rect
        return (r.left(), r.right()) if ax == 0 else (r.top(), r.bottom())

    # -- QGraphicsItem --------------------------------------------------------------------------
    def viewTransformChanged(self) -> None:
        # The pixel padding for the pen depends on the zoom: recompute it once, not per call;
        # so does a path of more bars than pixels (one column per pixel).
        self.prepareGeometryChange()
        self._bounds = None
        if len(self._corners) > _FEW_BARS:
            self._rects = None

    def boundingRect(self) -> QRectF:
        if self._bounds is None:
            rect = QRectF(self._data_rect)
            pen_px = self._pen.widthF() if self._pen.style() != Qt.PenStyle.NoPen else 0.0
            if not rect.isNull() and pen_px > 0:
                px, py = self.pixelVectors()
                dx = 0.0 if px is None else px.length() * (pen_px + 1)
                dy = 0.0 if py is None else py.length() * (pen_px + 1)
                rect.adjust(-dx, -dy, dx, dy)
            self._bounds = rect
        return self._bounds

    def drawn_rects(self) -> list[QRectF]:
        """Every bar as the rectangle ``paint`` draws (read-only). More bars than pixels across
        are one rectangle per pixel column (``_per_pixel``)."""
        if self._rects is not None and len(self._corners) > _FEW_BARS and self._pixel_now() != self._pixel:
            self._rects = None  # made at another scale (or before the item had a view)
        if self._rects is None:
            if len(self._corners) <= _FEW_BARS:
                left, top, size = self._corners.T
                width = self._width
            else:
                left, top, size = self._per_pixel(*self._corners.T)
                width = self._width if len(left) == len(self._corners) else self._pixel
            self._rects = [QRectF(x, y, width, h) for x, y, h in zip(left.tolist(), top.tolist(), size.tolist())]
        return self._rects

    def _pixel_now(self) -> float:
        """Data units per pixel across, at the view's present scale (0 without a view)."""
        px, _ = self.pixelVectors()
        return 0.0 if px is None else px.length()

    def _per_pixel(self, left: np.ndarray, top: np.ndarray, size: np.ndarray):
        """The bars as drawn at the view's scale: as they are, or, with more bars than pixels
        across (16,384 keys in a 300-pixel chart), one column per pixel from the lowest to
        the highest end of its bars, which is what the screen shows of them anyway (a path
        of 16,384 rectangles took ~270 ms to paint; a few hundred columns take a few)."""
        self._pixel = self._pixel_now()
        if self._pixel <= 0 or len(left) < 2 * (left.max() - left.min() + self._width) / self._pixel:
            return left, top, size
        column = np.floor((left - left.min()) / self._pixel).astype(np.int64)
        order = np.argsort(column, kind="stable")
        column, low, high = column[order], top[order], (top + size)[order]
        starts = np.flatnonzero(np.r_[True, column[1:] != column[:-1]])
        low, high = np.minimum.reduceat(low, starts), np.maximum.reduceat(high, starts)
        return left.min() + column[starts] * self._pixel, low, high - low

    def paint(self, painter, option, widget=None) -> None:
        if not len(self._corners):
            return
        painter.setRenderHint(QPainter.RenderHint.Antialiasing, False)
        painter.setPen(self._pen)
        brushes = self.opts["brushes"]
        if brushes:
            for (left, top, size), brush in zip(self._corners.tolist(), brushes):
                painter.setBrush(brush)
                painter.drawRect(QRectF(left, top, self._width, size))
        else:
            painter.setBrush(self.opts["brush"] if self.opts["brush"] is not None else Qt.BrushStyle.NoBrush)
            # drawRects, not one path of every bar: Qt's raster engine fills a path of a
            # few hundred rectangles through its general path rasteriser (3-5 ms for the
            # 16,384-key charts' ~180 columns, ~70 ms for 512 bars in a 480-pixel test
            # image), the same rectangles as rectangles in well under a millisecond.
            painter.drawRects(self.drawn_rects())
