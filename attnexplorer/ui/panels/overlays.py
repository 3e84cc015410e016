"""What a ``MatrixView`` draws under and over its cells, besides the picture and the numbers:
the hatch behind blocked cells, the selection frames, the notes across fully blocked rows
and the shade over the rows a long compute has not reached yet.

Each is made once per view and only moved, shown or hidden on a redraw (no new graphics
items per redraw). Coordinates are the view's: cell (row i, column j) covers
``[j, j+1] × [i, i+1]``.
"""

from __future__ import annotations

import weakref

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QRectF, Qt
from PySide6.QtGui import QPen
from PySide6.QtWidgets import QGraphicsRectItem

from . import theme

# The "all keys blocked" notes on fully masked rows; beyond this the hover still says so.
MAX_ROW_NOTES = 32


def overlay(plot: pg.PlotItem, item, z: float, pen=None):
    """``item`` added to ``plot`` over (or, z < 0, under) the cells, hidden until placed,
    outside the view's bounds."""
    item.setPen(QPen(Qt.PenStyle.NoPen) if pen is None else pen)
    item.setZValue(z)
    item.setVisible(False)
    plot.addItem(item, ignoreBounds=True)
    return item


class Hatch(QGraphicsRectItem):
    """A grey hatched rectangle behind the image: it shows through blocked (NaN) cells."""

    def paint(self, painter, option, widget=None):
        painter.save()
        painter.setPen(Qt.PenStyle.NoPen)
        painter.setBrush(theme.HATCH_BACKGROUND)
        painter.drawRect(self.rect())
        # The pattern is laid out in device pixels, so the hatch looks the same at any zoom.
        brush = theme.HATCH_BRUSH
        device_rect = painter.transform().mapRect(self.rect())
        painter.resetTransform()
        painter.setBrush(brush)
        painter.drawRect(device_rect)
        painter.restore()


class SelectionFrames:
    """The selected row (solid orange frame) and column (dashed black frame) over the cells.

    ``row`` and ``col`` are the two rectangle items (figures and the panels' frame lists
    read them); ``select`` remembers the selection and ``place`` fits it to a matrix shape,
    so a new matrix of another size keeps the selection where it still falls."""

    def __init__(self, plot: pg.PlotItem):
        self.row = overlay(plot, QGraphicsRectItem(), 20, theme.cosmetic_pen(theme.SELECTION_COLOR, 2.0))
        self.col = overlay(plot, QGraphicsRectItem(), 20,
                           theme.cosmetic_pen(theme.SELECTED_KEY_COLOR, 1.5, Qt.PenStyle.DashLine))
        self.selection: tuple[int | None, int | None] = (None, None)

    def select(self, row: int | None, col: int | None, shape: tuple[int, int]) -> None:
        self.selection = (row, col)
        self.place(shape)

    def place(self, shape: tuple[int, int]) -> None:
        rows, cols = shape
        row, col = self.selection
        show_row = row is not None and 0 <= row < rows
        show_col = col is not None and 0 <= col < cols
        if show_row:
            self.row.setRect(QRectF(0, row, cols, 1))
        if show_col:
            self.col.setRect(QRectF(col, 0, 1, rows))
        self.row.setVisible(show_row)
        self.col.setVisible(show_col)

    def hide(self) -> None:
        self.row.setVisible(False)
        self.col.setVisible(False)


class RowNotes:
    """The notes written across fully blocked rows ("all keys blocked"), reused text items
    (at most ``MAX_ROW_NOTES``; beyond them the hover still says so)."""

    def __init__(self, plot: pg.PlotItem):
        self.plot = weakref.proxy(plot)  # no plot ↔ notes cycle (see ImageDetail)
        self.items: list[pg.TextItem] = []

    def place(self, blocked_rows: np.ndarray | None, cols: int, note: str) -> None:
        rows = [] if blocked_rows is None else np.flatnonzero(blocked_rows)[:MAX_ROW_NOTES]
        while len(self.items) < len(rows):
            item = pg.TextItem(anchor=(0.5, 0.5), color="k", fill=pg.mkBrush(255, 255, 255, 220))
            item.setZValue(15)
            self.plot.addItem(item, ignoreBounds=True)
            self.items.append(item)
        for k, item in enumerate(self.items):
            if k < len(rows):
                item.setText(note)
                item.setPos(cols / 2.0, rows[k] + 0.5)
                item.setVisible(True)
            else:
                item.setVisible(False)

    def texts(self) -> list[str]:
        return [t.toPlainText() for t in self.items if t.isVisible()]


def place_pending_rows(item: QGraphicsRectItem, rows_done: int | None, shape: tuple[int, int]) -> None:
    """Shade the rows from ``rows_done`` on (a long compute still running); hide it when the
    matrix is whole (``rows_done`` None or past the last row)."""
    rows, cols = shape
    if rows_done is None or rows_done >= rows:
        item.setVisible(False)
        return
    item.setRect(QRectF(0, rows_done, cols, rows - rows_done))
    item.setVisible(True)
