"""The head view: the tokens of one layer in two columns (queries left, keys right) joined by
lines whose opacity is the weight, for one head or all heads in their colours; hovering a
token keeps only its lines. The line list comes from ``models.views.head_lines`` (tested
without Qt)."""

from __future__ import annotations

import numpy as np
from PySide6.QtCore import QPointF, QRectF, Qt
from PySide6.QtGui import QColor, QFont, QFontMetrics, QPainter, QPen
from PySide6.QtWidgets import QWidget

from ...models.views import head_colours, head_lines


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
    def is_empty(self) -> bool:
        """Whether there is nothing to draw (no layer set, or a layer of no tokens)."""
        return not self._tokens or not self._weights.size

    def copy_from(self, view: "HeadView") -> None:
        """Show what ``view`` shows (its layer, head and hovered token): a figure's twin
        follows the view on screen without being hovered or resized itself."""
        self._tokens, self._weights, self._head, self._hover = view._tokens, view._weights, view._head, view._hover
        self.update()

    @property
    def hover(self) -> tuple[str, int] | None:
        return self._hover

    def _geometry(self):
        n = max(len(self._tokens), 1)
        fm = QFontMetrics(self.font())
        bold = QFont(self.font())
        bold.setBold(True)
        title = QFontMetrics(bold).horizontalAdvance("queries")   # the column's bold heading fits too
        label = max([fm.horizontalAdvance(t) for t in self._tokens] + [title + 4, 40]) + 12
        top, bottom = 24, 8
        row = (self.height() - top - bottom) / n
        return label, top, row

    def token_rect(self, side: str, index: int) -> QRectF:
        """Where token ``index``'s label is drawn on the ``side`` ("query": left, "key": right)."""
        label, top, row = self._geometry()
        return QRectF(0 if side == "query" else self.width() - label, top + index * row, label, row)

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
