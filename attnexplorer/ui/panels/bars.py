"""``Bars``: a bar-chart item that is cheap to update and to paint, for the query panel.

pyqtgraph's ``BarGraphItem`` pads its bounding rect by its pen width in pixels, and Qt asks
for that rect many times per frame: at 64 bars × a dozen items this cost more than the
drawing itself. ``Bars`` keeps the same ``setOpts(x=, height=, y0=, width=, brush=,
brushes=, pen=)`` and ``opts`` (so callers and tests read what is drawn), builds its
rectangles once per update, caches its bounding rect (re-padded only when the view's scale
changes) and paints every bar with one ``drawRects`` (one ``drawRect`` per bar with
``brushes``, which only the few highlighted bars use), without antialiasing: bars are
axis-aligned, so they stay crisp. More bars than pixels across are drawn one column per pixel.
The rectangles are one numpy array (left, top, width, height per bar) that ``drawRects``
reads in place (``draw_rect_array``): no ``QRectF`` is made per bar on a paint.

``StackedBars`` draws several such layers stacked at each position (the query panel's
contributions of each key to each output dimension), one item for all of them.
"""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
import shiboken6
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


def draw_rect_array(painter, rects: np.ndarray) -> None:
    """Paint every row of ``rects`` (left, top, width, height; float64, C-contiguous) with one
    ``drawRects``, read where it lies: a ``QRectF`` is those four doubles, so the array is
    handed over as Qt's own array of rectangles. A list of ``QRectF`` made for each paint cost
    more than the drawing (about 1.5 µs a bar: the query panel paints ~700 bars an edit)."""
    count = len(rects)
    if count:
        assert rects.dtype == np.float64 and rects.flags.c_contiguous and rects.shape[1] == 4
        painter.drawRects(shiboken6.wrapInstance(rects.ctypes.data, QRectF), count)


def rect_list(rects: np.ndarray) -> list[QRectF]:
    """The rows of a rectangle array as ``QRectF`` (for reading what is drawn, not for paint)."""
    return [QRectF(*row) for row in rects.tolist()]


def _with_width(corners: np.ndarray, width: float) -> np.ndarray:
    """(left, top, height) rows as (left, top, width, height), the layout of a ``QRectF``. Made
    when painting, not on each update: a 4,096-key chart's array is updated on every edit but
    painted as a few hundred pixel columns."""
    rects = np.empty((len(corners), 4))
    rects[:, :2] = corners[:, :2]
    rects[:, 2] = width
    rects[:, 3] = corners[:, 2]
    return rects


def _bounds_along(rect: QRectF, ax: int):
    """pyqtgraph's ``dataBounds`` of data within ``rect``: (low, high) along x (0) or y (1)."""
    if rect.isNull():
        return None, None
    return (rect.left(), rect.right()) if ax == 0 else (rect.top(), rect.bottom())


class Bars(pg.GraphicsObject):
    def __init__(self, **opts):
        super().__init__()
        self.opts: dict = {"x": np.zeros(0), "height": np.zeros(0), "y0": 0.0, "width": 0.8,
                           "brush": pg.mkBrush("k"), "brushes": None, "pen": None}
        self._corners = np.zeros((0, 3))  # left, top, height per bar
        self._rects: np.ndarray | None = None  # as drawn: made at the first paint after an update
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
        return _bounds_along(self._data_rect, ax)

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
        return rect_list(self._drawn())

    def _drawn(self) -> np.ndarray:
        """The rectangles ``paint`` draws, (left, top, width, height) per row."""
        if self._rects is not None and len(self._corners) > _FEW_BARS and self._pixel_now() != self._pixel:
            self._rects = None  # made at another scale (or before the item had a view)
        if self._rects is None:
            if len(self._corners) <= _FEW_BARS:
                self._rects = _with_width(self._corners, self._width)
            else:
                self._rects = self._per_pixel(self._corners)
        return self._rects

    def _pixel_now(self) -> float:
        """Data units per pixel across, at the view's present scale (0 without a view)."""
        px, _ = self.pixelVectors()
        return 0.0 if px is None else px.length()

    def _per_pixel(self, corners: np.ndarray) -> np.ndarray:
        """The bars as drawn at the view's scale: as they are, or, with more bars than pixels
        across (16,384 keys in a 300-pixel chart), one column per pixel from the lowest to
        the highest end of its bars, which is what the screen shows of them anyway (a path
        of 16,384 rectangles took ~270 ms to paint; a few hundred columns take a few)."""
        left, top, size = corners.T
        self._pixel = self._pixel_now()
        if self._pixel <= 0 or len(left) < 2 * (left.max() - left.min() + self._width) / self._pixel:
            return _with_width(corners, self._width)
        column = np.floor((left - left.min()) / self._pixel).astype(np.int64)
        order = np.argsort(column, kind="stable")
        column, low, high = column[order], top[order], (top + size)[order]
        starts = np.flatnonzero(np.r_[True, column[1:] != column[:-1]])
        low, high = np.minimum.reduceat(low, starts), np.maximum.reduceat(high, starts)
        rects = np.empty((len(starts), 4))
        rects[:, 0] = left.min() + column[starts] * self._pixel
        rects[:, 1] = low
        rects[:, 2] = self._pixel
        rects[:, 3] = high - low
        return rects

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
            draw_rect_array(painter, self._drawn())


class StackedBars(pg.GraphicsObject):
    """Layers of bars stacked at the same positions, each layer in its own colour: at each
    position the positive parts are stacked up from 0 and the negative parts down, in the
    layers' order (the query panel's contribution of each key to each output dimension).

    One item for every layer: an update is one numpy pass over all of them and a paint one
    ``drawRects`` per colour (a ``Bars`` item per layer cost ten updates and ten paints an
    edit). Meant for a few dozen positions (no pooling of more bars than pixels) and no pen.
    """

    def __init__(self, width: float = 0.7):
        super().__init__()
        self._width = float(width)
        self._brushes: list = []
        self._rects = np.zeros((0, 0, 4))  # layer × position × (left, top, width, height)
        self._data_rect = QRectF()
        self._top = np.zeros(0)
        self._bottom = np.zeros(0)

    def set_stack(self, x, parts, brushes) -> None:
        """Draw ``parts`` (layers × positions) at ``x`` (the positions' centres), layer k in
        ``brushes[k]`` (a colour or brush); no layers clears the item."""
        parts = np.asarray(parts, dtype=np.float64)
        x = np.asarray(x, dtype=np.float64).ravel()
        if parts.size == 0 or len(x) == 0:
            parts = np.zeros((0, len(x)))
        layers, count = parts.shape
        up = np.clip(parts, 0.0, None)
        down = parts - up
        # Where each part starts: the parts of the same sign below it in the stack.
        above_up = np.cumsum(up, axis=0)
        above_down = np.cumsum(down, axis=0)
        rects = np.empty((layers, count, 4))
        rects[:, :, 0] = x - self._width / 2.0
        rects[:, :, 1] = np.where(parts >= 0, above_up - up, above_down)
        rects[:, :, 2] = self._width
        np.abs(parts, out=rects[:, :, 3])
        self._rects = rects
        self._brushes = [_brush(b) for b in brushes][:layers]
        self._top = above_up[-1] if layers else np.zeros(count)
        self._bottom = above_down[-1] if layers else np.zeros(count)
        if layers and count:
            rect = QRectF(float(x.min()) - self._width / 2.0, float(self._bottom.min()),
                          float(x.max() - x.min()) + self._width, float(self._top.max() - self._bottom.min()))
        else:
            rect = QRectF()
        self.prepareGeometryChange()
        self._data_rect = rect
        self.update()

    def clear(self) -> None:
        self.set_stack([], np.zeros((0, 0)), [])

    # -- reading ------------------------------------------------------------------------------
    @property
    def tops(self) -> np.ndarray:
        """At each position, the top of the positive parts (0 where there are none)."""
        return self._top

    @property
    def bottoms(self) -> np.ndarray:
        """At each position, the bottom of the negative parts (0 where there are none)."""
        return self._bottom

    def layers(self) -> list[tuple[QColor, list[QRectF]]]:
        """(colour, the rectangles drawn) of each layer, bottom layer first (read-only)."""
        return [(brush.color(), rect_list(rects)) for brush, rects in zip(self._brushes, self._rects)]

    def dataBounds(self, ax, frac=1.0, orthoRange=None):
        return _bounds_along(self._data_rect, ax)

    # -- QGraphicsItem --------------------------------------------------------------------------
    def boundingRect(self) -> QRectF:
        return self._data_rect

    def paint(self, painter, option, widget=None) -> None:
        if not self._rects.size:
            return
        painter.setRenderHint(QPainter.RenderHint.Antialiasing, False)
        painter.setPen(Qt.PenStyle.NoPen)
        for brush, rects in zip(self._brushes, self._rects):
            painter.setBrush(brush)
            draw_rect_array(painter, rects)  # each layer's rows are contiguous in the array
