"""A legend of coloured keys that paints itself: no item per entry, and no claim on the height.

pyqtgraph's ``LegendItem`` makes a sample and a label item per entry and lays them out; with
nine or more keys (pronoun with no mask, sine, every long session) its height became the
minimum height of the Query panel's lower row, squeezing the charts above it to a strip with no
ticks, and rebuilding it (``addItem`` → ``LabelItem.setText`` → ``setHtml``) whenever the keys
changed took about half the time of a τ drag. ``KeyLegend`` keeps the entries as data and
draws them in ``paint``: changing them is an ``update()``; its width is fixed (long names are
elided) and it asks for no height, so the charts keep their room. Entries that do not fit one
column go into two, and what still does not fit is summed up in a last line ("+ 3 more").
Each swatch is centred on its text's line (pyqtgraph's samples sat below their labels).
"""

from __future__ import annotations

import math

import pyqtgraph as pg
from PySide6.QtCore import QRectF, QSizeF, Qt
from PySide6.QtGui import QColor, QFont, QFontMetricsF, QPen
from PySide6.QtWidgets import QSizePolicy

# Room for a name this many characters long beside its swatch; longer ones are elided.
NAME_CHARS = 15


class KeyLegend(pg.GraphicsWidget):
    def __init__(self, point_size: float = 8.0):
        super().__init__()
        self.font = QFont()
        self.font.setPointSizeF(point_size)
        metrics = QFontMetricsF(self.font)
        self._line = metrics.height()
        self._swatch = round(metrics.ascent() * 0.8)
        self._gap = 5.0
        self._entries: tuple[tuple[str, QColor], ...] = ()
        width = self._swatch + self._gap + metrics.horizontalAdvance("x" * NAME_CHARS) + 8
        self.setSizePolicy(QSizePolicy.Policy.Fixed, QSizePolicy.Policy.Ignored)
        self.setMinimumSize(QSizeF(width, 0))
        self.setPreferredSize(QSizeF(width, 0))
        self.setMaximumWidth(width)

    @property
    def entries(self) -> tuple[tuple[str, QColor], ...]:
        """(name, colour) of each entry, in order."""
        return self._entries

    def set_entries(self, entries) -> None:
        entries = tuple((str(name), QColor(color)) for name, color in entries)
        if entries != self._entries:
            self._entries = entries
            self.update()

    def layout_entries(self) -> list[tuple[str, QColor, QRectF]]:
        """Where each drawn entry goes: (text, colour, the rectangle of its line); the last
        may read "+ N more" (grey) when the height holds fewer lines than entries."""
        rect = self.boundingRect()
        rows = max(int(rect.height() // self._line), 1)
        entries = list(self._entries)
        columns = 1 if len(entries) <= rows else 2
        slots = rows * columns
        if len(entries) > slots:
            hidden = len(entries) - slots + 1
            entries = entries[:slots - 1] + [(f"+ {hidden} more", QColor(0, 0, 0, 0))]
        used = math.ceil(len(entries) / columns) if entries else 0
        top = rect.top() + max((rect.height() - used * self._line) / 2, 0)  # centred beside the bars
        width = rect.width() / columns
        placed = []
        for i, (name, color) in enumerate(entries):
            column, row = divmod(i, used)
            placed.append((name, color, QRectF(rect.left() + column * width, top + row * self._line, width, self._line)))
        return placed

    def paint(self, painter, *_args) -> None:
        painter.setFont(self.font)
        metrics = painter.fontMetrics()
        s = self._swatch
        for name, color, line in self.layout_entries():
            y = line.center().y()
            if color.alpha():
                painter.setPen(Qt.PenStyle.NoPen)
                painter.setBrush(color)
                painter.drawRect(QRectF(line.left() + 2, y - s / 2, s, s))
            painter.setPen(QPen(QColor("#000000")))
            text_rect = QRectF(line.left() + 2 + s + self._gap, line.top(), line.width() - s - self._gap - 4, line.height())
            text = metrics.elidedText(name, Qt.TextElideMode.ElideRight, int(text_rect.width()))
            painter.drawText(text_rect, Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter, text)
