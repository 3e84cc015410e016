"""The two pictures of a real model's attention on one text.

- ``ModelGrid``: every layer × head attention pattern as a thumbnail (queries down, keys
  across, viridis 0…1), layers down the side, heads along the top. Clicking a thumbnail emits
  ``chosen(layer, head)``. One widget paints all of them (30 × 9 thumbnails for SmolLM2 would
  be 270 child widgets otherwise); each thumbnail is a QImage made once per run.
- ``HeadView``: the tokens in two columns (queries left, keys right) joined by lines whose
  opacity is the weight, for one head or all heads in their colours; hovering a token keeps only
  its lines. The line list comes from ``models.views.head_lines`` (tested without Qt).
"""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QPointF, QRectF, QSize, Qt, Signal
from PySide6.QtGui import QColor, QFont, QFontMetrics, QImage, QPainter, QPen
from PySide6.QtWidgets import QSizePolicy, QToolTip, QWidget

from ..models.views import head_colours, head_lines

_LUT = pg.colormap.get("viridis").getLookupTable(0.0, 1.0, 256, alpha=False).astype(np.uint8)


def _thumbnail(weights: np.ndarray) -> QImage:
    """An n × n RGB image of one head's weights (0…1 through viridis), painted scaled later."""
    index = np.clip(np.nan_to_num(weights) * 255.0, 0, 255).astype(np.uint8)
    rgb = np.ascontiguousarray(_LUT[index])
    n_rows, n_cols = index.shape
    image = QImage(rgb.data, n_cols, n_rows, 3 * n_cols, QImage.Format.Format_RGB888)
    return image.copy()   # own the pixels: the numpy buffer goes away


class ModelGrid(QWidget):
    chosen = Signal(int, int)   # layer, head

    MIN_CELL, MAX_CELL = 40, 120
    GAP = 6

    def __init__(self, parent=None):
        super().__init__(parent)
        self._images: list[list[QImage]] = []
        self._selected: tuple[int, int] | None = None
        self.CELL = self.MIN_CELL
        self.setMouseTracking(True)
        self.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Preferred)

    def set_attentions(self, attentions: np.ndarray) -> None:
        """attentions: (layers, heads, n, n)."""
        self._images = [[_thumbnail(attentions[l, h]) for h in range(attentions.shape[1])]
                        for l in range(attentions.shape[0])]
        self._selected = None
        self._fit()
        self.updateGeometry()
        self.update()

    def set_selected(self, layer: int | None, head: int | None) -> None:
        self._selected = None if layer is None else (layer, head)
        self.update()

    def _margins(self) -> tuple[int, int]:
        fm = QFontMetrics(self.font())
        return fm.horizontalAdvance("L00 ") + 8, fm.height() + 8

    def _size_for(self, cell: int) -> QSize:
        left, top = self._margins()
        layers = len(self._images)
        heads = len(self._images[0]) if layers else 0
        step = cell + self.GAP
        return QSize(left + heads * step + self.GAP, top + layers * step + self.GAP)

    def sizeHint(self) -> QSize:
        return self._size_for(self.CELL)

    def minimumSizeHint(self) -> QSize:
        # Below this the scroll area scrolls: thumbnails smaller than 40 px show no pattern.
        return self._size_for(self.MIN_CELL)

    def resizeEvent(self, event) -> None:
        self._fit()
        super().resizeEvent(event)

    def _fit(self) -> None:
        """Thumbnails grow to fill the room (up to 120 px), so 6 × 12 heads are not postage stamps."""
        if self._images:
            left, top = self._margins()
            fit_w = (self.width() - left - self.GAP) / len(self._images[0]) - self.GAP
            fit_h = (self.height() - top - self.GAP) / len(self._images) - self.GAP
            self.CELL = int(max(self.MIN_CELL, min(self.MAX_CELL, fit_w, fit_h)))

    def cell_at(self, x: float, y: float) -> tuple[int, int] | None:
        """(layer, head) under a point, or None between and around the thumbnails."""
        left, top = self._margins()
        step = self.CELL + self.GAP
        col, row = int((x - left) // step), int((y - top) // step)
        if x < left or y < top or not self._images:
            return None
        if row >= len(self._images) or col >= len(self._images[0]):
            return None
        if (x - left) - col * step > self.CELL or (y - top) - row * step > self.CELL:
            return None
        return row, col

    def cell_rect(self, layer: int, head: int) -> QRectF:
        left, top = self._margins()
        step = self.CELL + self.GAP
        return QRectF(left + head * step, top + layer * step, self.CELL, self.CELL)

    def paintEvent(self, _event) -> None:
        p = QPainter(self)
        p.fillRect(self.rect(), self.palette().base())
        p.setPen(self.palette().text().color())
        left, top = self._margins()
        for h in range(len(self._images[0]) if self._images else 0):
            r = self.cell_rect(0, h)
            p.drawText(QRectF(r.left(), 2, r.width(), top - 4), Qt.AlignmentFlag.AlignCenter, f"H{h}")
        for l, row in enumerate(self._images):
            r = self.cell_rect(l, 0)
            p.drawText(QRectF(2, r.top(), left - 8, r.height()),
                       Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter, f"L{l}")
            for h, image in enumerate(row):
                p.drawImage(self.cell_rect(l, h), image)
        if self._selected is not None:
            p.setPen(QPen(QColor(230, 60, 40), 3))
            p.drawRect(self.cell_rect(*self._selected).adjusted(-2, -2, 2, 2))
        p.end()

    def mouseMoveEvent(self, event) -> None:
        cell = self.cell_at(event.position().x(), event.position().y())
        self.setCursor(Qt.CursorShape.PointingHandCursor if cell else Qt.CursorShape.ArrowCursor)
        if cell:
            QToolTip.showText(event.globalPosition().toPoint(),
                              f"layer {cell[0]}, head {cell[1]}: click to load this layer into the tables", self)

    def mousePressEvent(self, event) -> None:
        cell = self.cell_at(event.position().x(), event.position().y())
        if cell and event.button() == Qt.MouseButton.LeftButton:
            self.set_selected(*cell)
            self.chosen.emit(*cell)


class HeadView(QWidget):
    """Two token columns joined by weight-opacity lines; ``set_head(None)`` shows all heads."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self._tokens: tuple[str, ...] = ()
        self._weights = np.zeros((0, 0, 0))
        self._head: int | None = 0
        self._hover: tuple[str, int] | None = None
        self.setMouseTracking(True)
        self.setMinimumSize(360, 240)

    def set_layer(self, tokens, weights: np.ndarray) -> None:
        """weights: (heads, n, n) of one layer."""
        self._tokens = tuple(tokens)
        self._weights = np.asarray(weights)
        if self._head is not None and self._head >= self._weights.shape[0]:
            self._head = 0
        self._hover = None
        self.update()

    def set_head(self, head: int | None) -> None:
        self._head = head
        self.update()

    @property
    def head(self) -> int | None:
        return self._head

    @property
    def hover(self) -> tuple[str, int] | None:
        return self._hover

    def _geometry(self):
        n = max(len(self._tokens), 1)
        fm = QFontMetrics(self.font())
        label = max([fm.horizontalAdvance(t) for t in self._tokens] + [40]) + 12
        top, bottom = 24, 8
        row = (self.height() - top - bottom) / n
        return label, top, row

    def token_at(self, x: float, y: float) -> tuple[str, int] | None:
        label, top, row = self._geometry()
        i = int((y - top) // row) if row > 0 else -1
        if not 0 <= i < len(self._tokens):
            return None
        if x <= label:
            return ("query", i)
        if x >= self.width() - label:
            return ("key", i)
        return None

    def paintEvent(self, _event) -> None:
        p = QPainter(self)
        p.setRenderHint(QPainter.RenderHint.Antialiasing)
        p.fillRect(self.rect(), self.palette().base())
        label, top, row = self._geometry()
        text = self.palette().text().color()
        p.setPen(text)
        bold = QFont(self.font())
        bold.setBold(True)
        p.setFont(bold)
        p.drawText(QRectF(0, 2, label, top - 4), Qt.AlignmentFlag.AlignRight, "queries")
        p.drawText(QRectF(self.width() - label, 2, label, top - 4), Qt.AlignmentFlag.AlignLeft, "keys")
        p.setFont(self.font())
        if self._weights.size and self._head is None:
            self._paint_legend(p, label, top)
        if self._weights.size:
            colours = head_colours(self._weights.shape[0])
            x0, x1 = label + 4, self.width() - label - 4
            for h, q, k, a in head_lines(self._weights, self._head, self._hover):
                r, g, b = colours[int(h)] if self._head is None else (40, 90, 200)
                p.setPen(QPen(QColor(r, g, b, int(round(255 * min(a, 1.0)))), 2))
                p.drawLine(QPointF(x0, top + (q + 0.5) * row), QPointF(x1, top + (k + 0.5) * row))
        for i, token in enumerate(self._tokens):
            y = top + i * row
            for side, rect, align in (("query", QRectF(0, y, label - 4, row), Qt.AlignmentFlag.AlignRight),
                                      ("key", QRectF(self.width() - label + 4, y, label - 4, row),
                                       Qt.AlignmentFlag.AlignLeft)):
                faded = self._hover is not None and self._hover != (side, i)
                colour = QColor(text)
                if faded:
                    colour.setAlpha(110)
                p.setPen(colour)
                p.drawText(rect, align | Qt.AlignmentFlag.AlignVCenter, token)
        p.end()

    def _paint_legend(self, p: QPainter, label: float, top: float) -> None:
        """Which colour is which head, across the top between the two column titles."""
        fm = QFontMetrics(self.font())
        colours = head_colours(self._weights.shape[0])
        x = label + 12
        for h, (r, g, b) in enumerate(colours):
            text = f"H{h}"
            p.fillRect(QRectF(x, top / 2 - 4, 14, 8), QColor(r, g, b))
            p.setPen(self.palette().text().color())
            p.drawText(QPointF(x + 17, top / 2 + fm.ascent() / 2 - 1), text)
            x += 17 + fm.horizontalAdvance(text) + 10

    def mouseMoveEvent(self, event) -> None:
        hover = self.token_at(event.position().x(), event.position().y())
        if hover != self._hover:
            self._hover = hover
            self.update()

    def leaveEvent(self, _event) -> None:
        if self._hover is not None:
            self._hover = None
            self.update()
