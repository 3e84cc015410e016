"""Covers over hidden cells: what a lesson step keeps from the class until Reveal.

A cover is an opaque grey rectangle with a "?" over a row or a cell of a token × key
heatmap (scores, scaled scores, weights), drawn above the cell numbers and below the
selection's frames, so a figure exported from the panel (a handout) hides it too.
"""

from __future__ import annotations

import weakref

import pyqtgraph as pg
from PySide6.QtCore import QRectF, Qt
from PySide6.QtGui import QBrush, QColor, QFont, QPen
from PySide6.QtWidgets import QGraphicsRectItem

from ...core.lessons import quotes

COVER_BRUSH = QBrush(QColor("#b8b8b8"))
MARK_PX = 15
COVER_Z = 18  # above the cell numbers (10), below the selection's frames (20)


def hidden_cells(hidden, session, kind: str, head: int) -> list[tuple[int, int | None]]:
    """The (row, col or None for the whole row) cells of heatmap ``kind`` that ``hidden``
    keeps from view, for the head the panel shows."""
    out = []
    for ref in hidden:
        if ref.name != kind or ref.head != head:
            continue
        try:
            cells = quotes.locate(ref, session)
        except quotes.QuoteError:
            continue  # the session lost that token: nothing left to hide
        out.append((cells.row, cells.col))
    return out


HIDDEN_READOUT = "hidden until Reveal"


class Covers:
    """The covers on one ``MatrixView``; ``show(cells, cols)`` places them (reusing items).

    The hover read-out of a covered cell says it is hidden rather than telling its value:
    the view's ``describe_cell`` is shadowed on the instance by one that knows the covers (it
    holds the view by a weak proxy, so the view and its covers make no reference cycle)."""

    def __init__(self, view):
        self.view = view
        self.items: list[tuple[QGraphicsRectItem, pg.TextItem]] = []
        self.cells: list[tuple[int, int | None]] = []
        cells, plain, ref = self.cells, type(view).describe_cell, weakref.proxy(view)

        def describe_cell(row: int, col: int) -> str:
            if any(r == row and (c is None or c == col) for r, c in cells):
                return HIDDEN_READOUT
            return plain(ref, row, col)

        view.describe_cell = describe_cell

    def show(self, cells: list[tuple[int, int | None]], cols: int, zoom: float = 1.0) -> None:
        self.cells[:] = cells
        while len(self.items) < len(cells):
            rect = QGraphicsRectItem()
            rect.setPen(QPen(Qt.PenStyle.NoPen))
            rect.setBrush(COVER_BRUSH)
            rect.setZValue(COVER_Z)
            mark = pg.TextItem("?", color="k", anchor=(0.5, 0.5))
            mark.setZValue(COVER_Z + 1)
            self.view.addItem(rect, ignoreBounds=True)
            self.view.addItem(mark, ignoreBounds=True)
            self.items.append((rect, mark))
        font = QFont()
        font.setPixelSize(round(MARK_PX * zoom))   # drawn in device pixels, like the cell numbers
        font.setBold(True)
        for k, (rect, mark) in enumerate(self.items):
            mark.setFont(font)
            if k < len(cells):
                row, col = cells[k]
                box = QRectF(0, row, cols, 1) if col is None else QRectF(col, row, 1, 1)
                rect.setRect(box)
                mark.setPos(box.center())
            rect.setVisible(k < len(cells))
            mark.setVisible(k < len(cells))

    def count(self) -> int:
        """How many covers are on screen (tests)."""
        return sum(rect.isVisible() for rect, _ in self.items)

    def rects(self) -> list[QRectF]:
        return [rect.rect() for rect, _ in self.items if rect.isVisible()]


def cover_panels(panels, hidden, result, head: int, covers: dict, zoom: float = 1.0) -> None:
    """Cover in every heatmap panel of ``panels`` what ``hidden`` hides (nothing: remove)."""
    if result is None:
        return
    for panel in panels:
        if panel.kind not in quotes.HIDEABLE:
            continue
        view = getattr(panel, "view", None)
        if view is None:
            continue
        c = covers.get(panel.kind)
        if c is None or c.view is not view:
            c = covers[panel.kind] = Covers(view)
        c.show(hidden_cells(hidden, result.session, panel.kind, head), result.session.n_keys, zoom)
